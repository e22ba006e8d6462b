package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/seal"
)

// commonFlags are the group and logging settings every command shares.
func commonFlags() []cli.Flag {
	d := group.DefaultLANConfig()
	return []cli.Flag{
		&cli.StringFlag{Name: "group", Aliases: []string{"g"}, Value: "mcnode", EnvVars: []string{"MCNODE_GROUP"},
			Usage: "group name: groups with different names ignore each other"},
		&cli.StringFlag{Name: "address", Value: d.Address, EnvVars: []string{"MCNODE_ADDRESS"},
			Usage: "multicast group address and port (IPv4, e.g. 239.192.0.1:7946)"},
		&cli.StringFlag{Name: "interface", Aliases: []string{"i"}, EnvVars: []string{"MCNODE_INTERFACE"},
			Usage: "network interface to join the group on (e.g. eth0; lo for one host)"},
		&cli.StringFlag{Name: "bind", EnvVars: []string{"MCNODE_BIND"},
			Usage: "this node's unicast address host:port (default: the interface's address, any port)"},
		&cli.IntFlag{Name: "ttl", Value: d.TTL, EnvVars: []string{"MCNODE_TTL"},
			Usage: "multicast TTL: 1 stays on the LAN segment, 0 on this host"},
		&cli.DurationFlag{Name: "tick", Value: d.Tick, EnvVars: []string{"MCNODE_TICK"},
			Usage: "timer resolution; every member must use the same"},
		&cli.IntFlag{Name: "turn-length", Value: d.TurnLength, EnvVars: []string{"MCNODE_TURN_LENGTH"},
			Usage: "decisions per server turn (group-wide: the founder's value holds)"},
		&cli.DurationFlag{Name: "turn-timeout", Value: d.TurnTimeout, EnvVars: []string{"MCNODE_TURN_TIMEOUT"},
			Usage: "longest server turn: an idle group still rotates and checks its members this often"},
		&cli.IntFlag{Name: "max-members", Value: d.MaxMembers, EnvVars: []string{"MCNODE_MAX_MEMBERS"},
			Usage: "group size limit (group-wide)"},
		&cli.DurationFlag{Name: "lease", Value: d.LeaseTimeout, EnvVars: []string{"MCNODE_LEASE"},
			Usage: "how long a member keeps its locks without contact with the group; a dead member's locks return after this plus the margin (group-wide)"},
		&cli.DurationFlag{Name: "lease-margin", Value: d.LeaseMargin, EnvVars: []string{"MCNODE_LEASE_MARGIN"},
			Usage: "extra wait before reclaiming, for network delay and clock drift (group-wide)"},
		&cli.DurationFlag{Name: "retry", Value: d.RetryInterval, EnvVars: []string{"MCNODE_RETRY"},
			Usage: "how long a request waits for its answer before it is sent again"},
		&cli.DurationFlag{Name: "heartbeat", Value: d.HeartbeatInterval, EnvVars: []string{"MCNODE_HEARTBEAT"},
			Usage: "how often the server pings the group; a majority's answers keep its authority"},
		&cli.DurationFlag{Name: "takeover-timeout", Value: d.TakeoverTimeout, EnvVars: []string{"MCNODE_TAKEOVER_TIMEOUT"},
			Usage: "members take over from a server they have not heard for this long (group-wide)"},
		&cli.StringFlag{Name: "state-dir", EnvVars: []string{"MCNODE_STATE_DIR"},
			Usage: "where to keep the highest group timestamp seen (a group founded here after a full stop gives higher fencing tokens; in quorum mode the highest token seen, for the same reason) and, for mcnode run, whether this host is a member (default: $XDG_STATE_HOME/mcnode, or ~/.local/state/mcnode; \"none\" keeps nothing)"},
		&cli.DurationFlag{Name: "join-timeout", Value: d.JoinTimeout, EnvVars: []string{"MCNODE_JOIN_TIMEOUT"},
			Usage: "how long to wait for an existing group before founding one"},
		&cli.IntFlag{Name: "rate-limit", Value: group.DefaultRateLimit, EnvVars: []string{"MCNODE_RATE_LIMIT"},
			Usage: "datagrams a second one source address may send this node; the rest are dropped unread (negative: no limit)"},
		&cli.StringFlag{Name: "keyfile", EnvVars: []string{"MCNODE_KEYFILE"},
			Usage: "group key file (make one with mcnode keygen; mode 0600): every datagram is then authenticated and encrypted, and whatever does not authenticate is dropped; every member needs the same file"},
		&cli.StringFlag{Name: "socket", EnvVars: []string{"MCNODE_SOCKET"},
			Usage: "control socket of the local daemon (default: $XDG_RUNTIME_DIR/mcnode/GROUP.sock, or /tmp/mcnode-UID/GROUP.sock)"},
		&cli.StringFlag{Name: "log-level", Value: "info", EnvVars: []string{"MCNODE_LOG_LEVEL"},
			Usage: "debug, info, warn or error"},
		&cli.StringFlag{Name: "log-format", Value: "auto", EnvVars: []string{"MCNODE_LOG_FORMAT"},
			Usage: "console, json, or auto (console on a terminal, JSON otherwise)"},
	}
}

// logger builds the logger the flags ask for.
func logger(c *cli.Context) (zerolog.Logger, error) {
	level, err := zerolog.ParseLevel(strings.ToLower(c.String("log-level")))
	if err != nil || level == zerolog.NoLevel {
		return zerolog.Nop(), usage("--log-level %q: want debug, info, warn or error", c.String("log-level"))
	}
	var l zerolog.Logger
	switch f := c.String("log-format"); {
	case f == "json" || (f == "auto" && !isatty.IsTerminal(os.Stderr.Fd())):
		l = zerolog.New(os.Stderr).With().Timestamp().Logger()
	case f == "console" || f == "auto":
		l = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05.000"}).With().Timestamp().Logger()
	default:
		return zerolog.Nop(), usage("--log-format %q: want console, json or auto", f)
	}
	return l.Level(level), nil
}

func usage(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// groupConfig builds the runtime's config from the flags.
func groupConfig(c *cli.Context, log zerolog.Logger) (group.Config, error) {
	cfg := group.DefaultLANConfig()
	cfg.Name = c.String("group")
	cfg.Address = c.String("address")
	cfg.Interface = c.String("interface")
	cfg.Bind = c.String("bind")
	cfg.TTL = c.Int("ttl")
	cfg.JoinTimeout = c.Duration("join-timeout")
	if err := timingFlags(c, &cfg, false); err != nil {
		return cfg, err
	}
	cfg.TimestampFile = timestampFile(c, log)
	cfg.Logger = log
	if path := c.String("keyfile"); path != "" {
		keys, err := seal.LoadKeyFile(path)
		if err != nil {
			return cfg, usage("--keyfile: %v", err)
		}
		cfg.Keys = keys
	}
	if cfg.Interface == "" {
		return cfg, usage("no --interface: name the network interface to join the group on (or set MCNODE_INTERFACE)")
	}
	if err := cfg.Validate(); err != nil {
		return cfg, usage("%v", flagNames(err))
	}
	return cfg, nil
}

// timingFlags sets the group's timings and limits from the flags: all of
// them, or (onlySet) those given, over another default (a local game's).
func timingFlags(c *cli.Context, cfg *group.Config, onlySet bool) error {
	for name, set := range map[string]func(){
		"tick":             func() { cfg.Tick = c.Duration("tick") },
		"turn-length":      func() { cfg.TurnLength = c.Int("turn-length") },
		"turn-timeout":     func() { cfg.TurnTimeout = c.Duration("turn-timeout") },
		"max-members":      func() { cfg.MaxMembers = c.Int("max-members") },
		"lease":            func() { cfg.LeaseTimeout = c.Duration("lease") },
		"lease-margin":     func() { cfg.LeaseMargin = c.Duration("lease-margin") },
		"retry":            func() { cfg.RetryInterval = c.Duration("retry") },
		"heartbeat":        func() { cfg.HeartbeatInterval = c.Duration("heartbeat") },
		"takeover-timeout": func() { cfg.TakeoverTimeout = c.Duration("takeover-timeout") },
		"rate-limit":       func() { cfg.RateLimit = c.Int("rate-limit") },
	} {
		if !onlySet || c.IsSet(name) {
			set()
		}
	}
	if (!onlySet || c.IsSet("rate-limit")) && cfg.RateLimit == 0 {
		return usage("--rate-limit 0: give datagrams a second (default %d), or a negative number for no limit", group.DefaultRateLimit)
	}
	return nil
}

// flagNames rewrites a config error to name the flags rather than the
// fields: the field an error is about, and the two-word field names it
// cites (one-word ones, such as Name, could be ordinary words there).
func flagNames(err error) string {
	s := err.Error()
	for field, flag := range map[string]string{
		"Name ": "--group ", "Address ": "--address ", "Interface ": "--interface ", "Bind ": "--bind ",
		"TTL ": "--ttl ", "Tick ": "--tick ",
	} {
		s = strings.ReplaceAll(s, "bad config: "+field, "bad config: "+flag)
	}
	for field, flag := range map[string]string{
		"TurnLength ": "--turn-length ", "TurnTimeout ": "--turn-timeout ",
		"MaxMembers ": "--max-members ", "LeaseTimeout ": "--lease ", "LeaseMargin ": "--lease-margin ",
		"RetryInterval ": "--retry ", "JoinTimeout ": "--join-timeout ",
		"HeartbeatInterval ": "--heartbeat ", "TakeoverTimeout ": "--takeover-timeout ",
	} {
		s = strings.ReplaceAll(s, field, flag)
	}
	return s
}

// timestampFile is where this host keeps the highest timestamp it saw of the
// group (see group.Config.TimestampFile), or "" with --state-dir none or
// when no home directory can be found (logged).
func timestampFile(c *cli.Context, log zerolog.Logger) string {
	dir := c.String("state-dir")
	switch {
	case dir == "none":
		return ""
	case dir == "":
		if x := os.Getenv("XDG_STATE_HOME"); x != "" {
			dir = filepath.Join(x, "mcnode")
		} else if home, err := os.UserHomeDir(); err == nil {
			dir = filepath.Join(home, ".local", "state", "mcnode")
		} else {
			log.Warn().Err(err).Msg("no --state-dir and no home directory: the highest group timestamp seen is not kept")
			return ""
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		log.Warn().Err(err).Msg("cannot create the state directory: the highest group timestamp seen is not kept")
		return ""
	}
	name := strings.NewReplacer("/", "_", "\x00", "_").Replace(c.String("group")) + ".timestamp"
	return filepath.Join(dir, name)
}

// socketPath is where the local daemon for the group listens.
func socketPath(c *cli.Context) string {
	if p := c.String("socket"); p != "" {
		return p
	}
	name := strings.NewReplacer("/", "_", "\x00", "_").Replace(c.String("group")) + ".sock"
	if dir := os.Getenv("XDG_RUNTIME_DIR"); dir != "" {
		return filepath.Join(dir, "mcnode", name)
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("mcnode-%d", os.Getuid()), name)
}

// leaveTimeout bounds how long a node waits for its leave to be recorded.
const leaveTimeout = 3 * time.Second
