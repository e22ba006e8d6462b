package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/internal/atomicfile"
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
			Usage: "where to keep the highest group timestamp seen (a group founded here after a full stop gives higher fencing tokens; in quorum mode the highest token seen, for the same reason) and, for mcnode run, whether this host is a member (one daemon of a group per directory; default: $XDG_STATE_HOME/mcnode, or ~/.local/state/mcnode; \"none\" keeps nothing)"},
		&cli.DurationFlag{Name: "join-timeout", Value: d.JoinTimeout, EnvVars: []string{"MCNODE_JOIN_TIMEOUT"},
			Usage: "how long to wait for an existing group before founding one (at least twice --takeover-timeout: a shorter one is raised to that, with a warning)"},
		&cli.IntFlag{Name: "rate-limit", Value: group.DefaultRateLimit, EnvVars: []string{"MCNODE_RATE_LIMIT"},
			Usage: "datagrams a second one source address may send this node; the rest are dropped unread (negative: no limit)"},
		&cli.StringFlag{Name: "keyfile", EnvVars: []string{"MCNODE_KEYFILE"},
			Usage: "group key file (make one with mcnode keygen; mode 0600): every datagram is then authenticated and encrypted, and whatever does not authenticate is dropped; every member needs the same file"},
		&cli.StringFlag{Name: "socket", EnvVars: []string{"MCNODE_SOCKET"},
			Usage: "control socket of the local daemon (default: $XDG_RUNTIME_DIR/mcnode/GROUP.sock, or $TMPDIR/mcnode-UID/GROUP.sock, $TMPDIR being /tmp unless set)"},
		&cli.StringFlag{Name: "log-level", Value: "info", EnvVars: []string{"MCNODE_LOG_LEVEL"},
			Usage: "debug, info, warn or error"},
		&cli.StringFlag{Name: "log-format", Value: "auto", EnvVars: []string{"MCNODE_LOG_FORMAT"},
			Usage: "console, json, or auto (console on a terminal, JSON otherwise)"},
	}
}

func init() {
	// Milliseconds in every line's time (whole seconds by default, which
	// the console showed as .000), and durations with their unit ("150ms",
	// where "kill_after=150" left the reader to guess).
	zerolog.TimeFieldFormat = "2006-01-02T15:04:05.000Z07:00"
	zerolog.DurationFieldFormat = zerolog.DurationFormatString
}

// logger builds the logger the flags ask for.
func logger(c *cli.Context) (zerolog.Logger, error) {
	level, err := zerolog.ParseLevel(strings.ToLower(c.String("log-level")))
	if err != nil || level == zerolog.NoLevel {
		return zerolog.Nop(), usage("--log-level %q: want debug, info, warn or error", c.String("log-level"))
	}
	l, ok := stderrLogger(c.String("log-format"))
	if !ok {
		return zerolog.Nop(), usage("--log-format %q: want console, json or auto", c.String("log-format"))
	}
	return l.Level(level), nil
}

// stderrLogger is a logger to stderr in format (console, json or auto:
// console on a terminal, JSON otherwise); false if format is none of these.
func stderrLogger(format string) (zerolog.Logger, bool) {
	switch {
	case format == "json" || (format == "auto" && !isatty.IsTerminal(os.Stderr.Fd())):
		return zerolog.New(os.Stderr).With().Timestamp().Logger(), true
	case format == "console" || format == "auto":
		return zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05.000"}).With().Timestamp().Logger(), true
	}
	return zerolog.Nop(), false
}

// noDaemonNoInterface is err, groupConfig's, unless it is errNoInterface
// for a client that found no daemon to ask: it then says where it looked,
// since a wrong group name, another user's daemon or a daemon with its own
// --socket is the likelier mistake than a missing --interface. Its exit
// status is noDaemon (lock's exitNoGroup, status's 1) where a daemon could
// have answered and none did: nothing on the command line is wrong, and the
// daemon may just be restarting. It is a usage error's where none could:
// with --no-daemon, or for a group whose control socket's path no daemon
// can listen at.
func noDaemonNoInterface(c *cli.Context, err error, noDaemon int) error {
	if !errors.Is(err, errNoInterface) {
		return err
	}
	where, code := "no local daemon", noDaemon
	if c.Bool("no-daemon") {
		where, code = "--no-daemon", exitUsage
	} else if path, err := clientSocketPath(c); err == nil && path == "" {
		where, code = fmt.Sprintf("no daemon can serve group %s (its control socket's path would be too long: mcnode run refuses it)", strconv.Quote(c.String("group"))), exitUsage
	} else if err == nil {
		where = fmt.Sprintf("no daemon of group %s at %s", strconv.Quote(c.String("group")), path)
		if c.String("socket") != "" {
			where = "no daemon at " + path // the group's name played no part
		}
	}
	return &exitError{code: code, err: fmt.Errorf("%s, and no --interface to join the group on without one (or set MCNODE_INTERFACE)", where)}
}

// errNoInterface: the group is to be joined, and no interface is named.
var errNoInterface = errors.New("no --interface: name the network interface to join the group on (or set MCNODE_INTERFACE)")

func usage(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// groupConfig builds the runtime's config from the flags.
func groupConfig(c *cli.Context, log zerolog.Logger) (group.Config, error) {
	return groupConfigKeyed(c, log, func() ([]seal.Key, error) { return keyfileKeys(c) })
}

// groupConfigKeyed is groupConfig with the group's keys from keys: quorum
// mode's discovery group takes those its node read, since a --keyfile that
// is a pipe (<(...)) can be read once.
func groupConfigKeyed(c *cli.Context, log zerolog.Logger, keys func() ([]seal.Key, error)) (group.Config, error) {
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
	cfg.Logger = log
	var err error
	if cfg.Keys, err = keys(); err != nil {
		return cfg, err
	}
	if cfg.Interface == "" {
		return cfg, &exitError{code: exitUsage, err: errNoInterface}
	}
	if _, err := net.InterfaceByName(cfg.Interface); err != nil {
		// A typo is a usage error, said before anything is opened.
		return cfg, usage("--interface %s: %v", strconv.Quote(cfg.Interface), err)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, usage("%v", flagNames(err))
	}
	warnJoinTimeoutRaised(c, cfg, log)
	// Last: a command line refused above leaves no state directory made.
	// A command without --state-dir (the game) keeps no state.
	if c.Command == nil || slices.ContainsFunc(c.Command.Flags, func(f cli.Flag) bool { return f.Names()[0] == "state-dir" }) {
		cfg.TimestampFile, err = timestampFile(c, log)
	}
	return cfg, err
}

// warnJoinTimeoutRaised warns where a --join-timeout given (on the command
// line, by MCNODE_JOIN_TIMEOUT or in the --config file) is shorter than the
// wait before founding a group, which the group holds to at least twice
// --takeover-timeout (group.Config.JoinTimeout): the value was raised, not
// taken. Not refused: the default --join-timeout is that floor for the
// default --takeover-timeout, and a longer --takeover-timeout would make
// it an error. Only where the command may found a group: status never does,
// lock only with --found; the other uses of the value (how often join
// requests go out, how long lock and status wait for a first answer) take
// it as given.
func warnJoinTimeoutRaised(c *cli.Context, cfg group.Config, log zerolog.Logger) {
	if !c.IsSet("join-timeout") || cfg.Tick <= 0 {
		return
	}
	if c.Command != nil && (c.Command.Name == "status" || c.Command.Name == "lock" && !c.Bool("found")) {
		return
	}
	// In whole ticks, as the group counts them.
	ticks := func(d time.Duration) time.Duration { return (d + cfg.Tick - 1) / cfg.Tick }
	floor := 2 * ticks(cfg.TakeoverTimeout) * cfg.Tick
	if ticks(cfg.JoinTimeout)*cfg.Tick >= floor {
		return
	}
	log.Warn().Dur("join_timeout", cfg.JoinTimeout).Dur("raised_to", floor).Dur("takeover_timeout", cfg.TakeoverTimeout).
		Msgf("--join-timeout %v raised to %v, twice --takeover-timeout %v: a group changing servers may be silent that long, and a node that founded sooner could found a second group beside it", cfg.JoinTimeout, floor, cfg.TakeoverTimeout)
}

// onCommandLine reports whether flag name was given on the command line:
// set, and not by one of its environment variables (with both, the
// variable's is taken for it) nor by the --config file. A variable exported
// for the daemons of this host, or a config file written for them, must not
// make a command refuse what its user never typed.
func onCommandLine(c *cli.Context, name string) bool {
	if !c.IsSet(name) {
		return false
	}
	if c.Context != nil {
		if typed, ok := c.Context.Value(beforeConfigKey{}).(map[string]bool); ok && !typed[name] {
			return false // from the config file
		}
	}
	if c.Command == nil {
		return true
	}
	for _, f := range c.Command.Flags {
		env, ok := f.(interface{ GetEnvVars() []string })
		if !ok || !slices.Contains(f.Names(), name) {
			continue
		}
		for _, v := range env.GetEnvVars() {
			if _, set := os.LookupEnv(v); set {
				return false
			}
		}
	}
	return true
}

// typedOf is the first of the flags names that was given on the command
// line (onCommandLine), or "".
func typedOf(c *cli.Context, names ...string) string {
	for _, name := range names {
		if onCommandLine(c, name) {
			return name
		}
	}
	return ""
}

// keyfileKeys are the keys of the --keyfile, none without one. A file that
// will not do is a usage error, said before anything is opened.
func keyfileKeys(c *cli.Context) ([]seal.Key, error) {
	path := c.String("keyfile")
	if path == "" {
		return nil, nil
	}
	keys, err := seal.LoadKeyFile(path)
	if err != nil {
		return nil, usage("--keyfile: %v", err)
	}
	return keys, nil
}

// localGroupConfig is the config of a multicast group whose nodes all run
// in this process (the demo's, a local game's): group.DefaultLocalConfig,
// named by --group, with the address (the game refuses one on one host),
// the timings and the limits the flags set over it, checked as mcnode run
// checks its own.
func localGroupConfig(c *cli.Context) (group.Config, error) {
	cfg := group.DefaultLocalConfig()
	cfg.Name = c.String("group")
	if c.IsSet("address") {
		cfg.Address = c.String("address")
	}
	if err := timingFlags(c, &cfg, true); err != nil {
		return cfg, err
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
	if (!onlySet || c.IsSet("tick")) && cfg.Tick < minTick {
		return usage("--tick %v must be at least %v: every timer of the node wakes each tick, so a shorter one spends the CPU on waking up (default %v)", cfg.Tick, minTick, group.DefaultLANConfig().Tick)
	}
	if (!onlySet || c.IsSet("rate-limit")) && cfg.RateLimit == 0 {
		return usage("--rate-limit 0: give datagrams a second (default %d), or a negative number for no limit", group.DefaultRateLimit)
	}
	return nil
}

// minTick is the shortest --tick accepted. The runtime wakes every tick
// whether or not anything is due, so a tick of microseconds keeps a core
// busy, and the timings built on it (leases, takeovers) cannot be kept to
// better than the scheduler's wake-up latency anyway, about a millisecond.
const minTick = time.Millisecond

// flagNames rewrites a config error to name the flags rather than the
// fields: the field an error is about, and the two-word field names it
// cites (one-word ones, such as Name, could be ordinary words there).
func flagNames(err error) string {
	// A formula citing fields, and a fixed one no flag sets: its value.
	s := strings.ReplaceAll(err.Error(), "2*(TurnTimeout+PingTimeout)",
		fmt.Sprintf("2*(--turn-timeout + the fixed ping timeout %v)", group.DefaultLANConfig().PingTimeout))
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
		// Not flags: fixed, but a flag's value may clash with them.
		"PingTimeout ": "the fixed ping timeout ", "LogWindow ": "the fixed log window ",
	} {
		s = strings.ReplaceAll(s, field, flag)
	}
	return s
}

// timestampFile is where this host keeps the highest timestamp it saw of the
// group (see group.Config.TimestampFile), or "" with --state-dir none or
// when the default directory cannot be found or made (logged). A
// --state-dir typed that cannot be made is a usage error: its user asked
// for the protection it gives, and would not look for a warning (one set
// by MCNODE_STATE_DIR or the config file, as the default, only warns: it
// may be meant for the host's daemons, not for this command's user).
func timestampFile(c *cli.Context, log zerolog.Logger) (string, error) {
	dir, err := stateDir(c)
	switch {
	case err != nil:
		log.Warn().Err(err).Msg("no --state-dir and no home directory: neither the highest group timestamp seen nor whether this host is a member is kept (a daemon restarted while cut off could found a second group)")
		return "", nil
	case dir == "":
		return "", nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		if onCommandLine(c, "state-dir") {
			return "", usage("--state-dir: %v (give a directory this user can create and write, or none to keep nothing)", err)
		}
		log.Warn().Err(err).Msg("cannot create the state directory: neither the highest group timestamp seen nor whether this host is a member is kept (a daemon restarted while cut off could found a second group)")
		return "", nil
	}
	name := groupFileName(c.String("group"))
	if len(name)+stateNameSlack > maxFileName {
		log.Warn().Int("bytes", len(name)).Msg("the group name is too long for a state file name: neither the highest group timestamp seen nor whether this host is a member is kept (give the group a shorter name)")
		return "", nil
	}
	adoptLegacyState(dir, c.String("group"), log)
	return filepath.Join(dir, name+".timestamp"), nil
}

// stateDir is the state directory the flags name, or the default: "" for
// none (--state-dir none); an error if there is no home directory to put
// the default in. It creates nothing.
func stateDir(c *cli.Context) (string, error) {
	dir := c.String("state-dir")
	switch {
	case dir == "none":
		return "", nil
	case dir != "":
		return dir, nil
	case os.Getenv("XDG_STATE_HOME") != "":
		return filepath.Join(os.Getenv("XDG_STATE_HOME"), "mcnode"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".local", "state", "mcnode"), nil
}

// State file names: GROUP (see groupFileName) and one of these suffixes;
// the timestamp comes last, for adoptLegacyState.
var stateSuffixes = []string{".member", ".quorum-tokens", ".timestamp"}

const (
	// stateNameSlack is what a state file's name adds to the group's: its
	// longest suffix, and the temporary file's ("." and up to 10 digits,
	// atomicfile.Write's) through which it is replaced.
	stateNameSlack = len(".quorum-tokens.") + 10
	maxFileName    = 255 // NAME_MAX on Linux
)

// legacyGroupFileName is how releases before groupFileName wrote a group's
// name in its file names: '/' and NUL as '_', which two groups could share.
func legacyGroupFileName(group string) string {
	return strings.NewReplacer("/", "_", "\x00", "_").Replace(group)
}

// adoptLegacyState copies the state files an earlier release kept for this
// group under its old file name (which differs only for a name with '/',
// '%' or NUL) to the new name, once: a daemon killed before the upgrade must
// still find that this host was a member, and the timestamps and tokens
// must not go back. Once is while the new name has no timestamp file: the
// timestamp is copied last and never removed, whereas a clean leave removes
// the membership record, which must not come back from the old name then.
// Each copy is whole or absent (a temporary file, synced, renamed), so an
// early reader never takes an empty record for "not a member". The old
// files stay (another group, "a_b" for "a/b", may own them: copying one of
// its records errs only on the safe side, a higher timestamp or a wait for
// the group).
func adoptLegacyState(dir, group string, log zerolog.Logger) {
	name, legacy := groupFileName(group), legacyGroupFileName(group)
	if name == legacy {
		return
	}
	if _, err := os.Lstat(filepath.Join(dir, name+".timestamp")); !errors.Is(err, os.ErrNotExist) {
		return // adopted already, or used under the new name
	}
	if _, err := os.Stat(filepath.Join(dir, legacy+".timestamp")); err != nil {
		return // no state under the old name
	}
	for _, suffix := range stateSuffixes {
		from, to := filepath.Join(dir, legacy+suffix), filepath.Join(dir, name+suffix)
		if _, err := os.Lstat(to); !errors.Is(err, os.ErrNotExist) {
			continue
		}
		b, err := os.ReadFile(from)
		if err != nil {
			continue // none, or unreadable: the new name starts afresh
		}
		if err := atomicfile.Write(to, b); err != nil {
			log.Warn().Err(err).Str("from", from).Str("to", to).Msg("cannot copy the group's state file to its new name")
			return // the timestamp, last, must not mark this done
		}
		log.Info().Str("from", from).Str("to", to).Msg("copied the group's state file from the name an earlier release gave it")
	}
}

// groupFileName is the group's name as it appears in the names of its
// control socket and state files (GROUP.sock, GROUP.timestamp, GROUP.member,
// GROUP.quorum-tokens). Every path derived from the group name goes through
// it, so that two groups never share a daemon or a record. It escapes '%' as
// "%25", '/' as "%2F" and NUL as "%00": a '%' in the result always starts an
// escape, so the mapping is one to one. Every other character is kept, so a
// name without those three maps to the file name it always had, and a
// running daemon keeps its socket and state files across an upgrade.
func groupFileName(group string) string {
	return groupFileEscaper.Replace(group)
}

var groupFileEscaper = strings.NewReplacer("%", "%25", "/", "%2F", "\x00", "%00")

// maxSocketPath is the longest path a Unix socket can be bound to or dialled
// at: the kernel's sun_path holds the path and its terminating NUL.
const maxSocketPath = len(syscall.RawSockaddrUnix{}.Path) - 1

// socketPath is where the local daemon for the group listens. A path too
// long for a Unix socket is an error here, where it can say which setting
// made it so; bind and connect would only say "invalid argument".
func socketPath(c *cli.Context) (string, error) {
	if p := c.String("socket"); p != "" {
		if len(p) > maxSocketPath {
			return "", usage("--socket %s is %d bytes, longer than the %d bytes a Unix socket path can have: choose a shorter path", p, len(p), maxSocketPath)
		}
		return p, nil
	}
	name := groupFileName(c.String("group")) + ".sock"
	var p string
	if dir := os.Getenv("XDG_RUNTIME_DIR"); dir != "" {
		p = filepath.Join(dir, "mcnode", name)
	} else {
		p = filepath.Join(os.TempDir(), fmt.Sprintf("mcnode-%d", os.Getuid()), name)
	}
	if len(p) > maxSocketPath {
		return "", usage("group %q: its control socket %s would be %d bytes, longer than the %d bytes a Unix socket path can have: give the group a shorter name, or the socket a shorter path with --socket (the same on every command for this group)", c.String("group"), p, len(p), maxSocketPath)
	}
	return p, nil
}

// clientSocketPath is socketPath for a command that can do without a
// daemon (lock, status): a derived path too long for a Unix socket is one no
// daemon can listen at (mcnode run refuses it), so it returns "" (no daemon)
// rather than an error. A --socket too long is still an error.
func clientSocketPath(c *cli.Context) (string, error) {
	p, err := socketPath(c)
	if err != nil && c.String("socket") == "" {
		return "", nil
	}
	return p, err
}

// leaveTimeout bounds how long a node waits for its leave to be recorded.
const leaveTimeout = 3 * time.Second

// stopWait bounds how long a stopping daemon waits for the commands under
// its lock clients to exit before it leaves the group: a client gives its
// command a grace of at most 1 s before SIGKILL (runLocked), then exits.
const stopWait = 2 * time.Second
