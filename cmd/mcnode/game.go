package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"regexp"
	"sync/atomic"
	"syscall"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/mcnode/mcnode"
	"github.com/mcnode/mcnode/examples/game"
	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/internal/localgroup"
	"github.com/mcnode/mcnode/internal/netns"
	"github.com/mcnode/mcnode/quorumfallback/node"
	"github.com/mcnode/mcnode/seal"
)

// localBotName is the names the bots of a local game take.
var localBotName = regexp.MustCompile(`^bot[0-9]+$`)

func gameCommand() *cli.Command {
	return &cli.Command{
		Name:  "game",
		Usage: "play the resource-contention game: power-ups are locks, and only one player gets each",
		Description: "On one host (the default): you and --bots bots, each a node of a group in this\n" +
			"process, over real UDP multicast on lo in a private network namespace (as mcnode\n" +
			"demo), or over TCP on 127.0.0.1 with --mode quorum.\n\n" +
			"On a LAN: run mcnode game --interface eth0 on each machine (in quorum mode:\n" +
			"--mode quorum --peers ... --node-id N, or --quorum-size N on each of N machines\n" +
			"to take the peers from the multicast group); each is one player's node, and the\n" +
			"game is the group's. --bot plays a bot there instead of you, --watch only watches.\n\n" +
			"Move with the arrow keys or WASD. Stepping onto a power-up asks for its lock:\n" +
			"+ health, $ points, * prize. First to --target points wins the round.\n\n" +
			"--headless plays bots only, prints one line per event (JSON lines with --json),\n" +
			"and ends after --duration with the final scoreboard and \"winner: NAME SCORE\".",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "bots", Value: 3, Usage: "on one host: bots playing beside you (headless: the players)"},
			&cli.BoolFlag{Name: "bot", Usage: "on a LAN: this node plays a bot"},
			&cli.BoolFlag{Name: "watch", Usage: "watch the game without playing"},
			&cli.BoolFlag{Name: "headless", Usage: "no screen: bots only, one line per event, then the scoreboard"},
			&cli.BoolFlag{Name: "json", Usage: "headless: JSON lines"},
			&cli.DurationFlag{Name: "duration", Usage: "how long to play (headless default 60s; on screen, until q)"},
			&cli.Int64Flag{Name: "seed", Value: 1, Usage: "seed of the bots' moves and the spawns"},
			&cli.IntFlag{Name: "target", Value: 100, Usage: "points that win a round"},
			&cli.StringFlag{Name: "name", Usage: "your player's name (default: you on one host, P and the node ID on a LAN)"},
		},
		Action: gameAction,
	}
}

// gamePlan is what the flags ask for.
type gamePlan struct {
	mode             string
	lan              bool // one node, joining the group the flags name
	human, watch     bool
	bots             int
	headless, asJSON bool
	duration         time.Duration
	seed             int64
	target           int
	name             string
	over             atomic.Bool // the game is over: the nodes' logs are quiet
}

func gameAction(c *cli.Context) error {
	m, err := mode(c)
	if err != nil {
		return err
	}
	p := gamePlan{mode: m, bots: c.Int("bots"), watch: c.Bool("watch"), headless: c.Bool("headless"), asJSON: c.Bool("json"),
		duration: c.Duration("duration"), seed: c.Int64("seed"), target: c.Int("target"), name: c.String("name")}
	p.lan = c.String("interface") != "" || c.String("peers") != "" || c.IsSet("quorum-size")
	p.human = !p.watch && !p.headless && !c.Bool("bot")
	// Flags after an argument are not parsed: "mcnode game x --headless"
	// would otherwise complain of no terminal.
	if err := noArguments(c); err != nil {
		return err
	}
	switch {
	case p.bots < 0 || p.bots > 32:
		return usage("--bots %d: want 0 to 32", p.bots)
	case p.lan && c.IsSet("bots"):
		return usage("--bots applies on one host; on a LAN each node is one player (--bot for a bot)")
	case !p.lan && c.Bool("bot"):
		return usage("--bot applies on a LAN (with --interface, or --peers in quorum mode); on one host use --bots")
	case p.watch && c.Bool("bot"):
		return usage("--watch and --bot: a spectator does not play")
	case p.asJSON && !p.headless:
		return usage("--json applies to --headless only")
	case p.duration < 0:
		return usage("--duration must not be negative")
	case p.target < 1:
		return usage("--target %d: want at least 1", p.target)
	case !p.lan && !p.human && p.bots == 0:
		return usage("no players: add --bots")
	case p.name != "" && !game.ValidName(p.name):
		return usage("--name %q: %v", p.name, game.ErrName)
	case !p.lan && p.name != "" && localBotName.MatchString(p.name):
		return usage("--name %q: on one host the bots are bot1, bot2, ...: choose another name", p.name)
	case !p.lan && typedOf(c, "address", "ttl", "bind", "join-timeout") != "":
		return usage("--address, --ttl, --bind and --join-timeout apply on a LAN (with --interface); on one host the game uses lo in a private namespace")
	case p.watch && p.headless:
		return usage("--watch and --headless: a spectator needs the screen")
	case !p.headless && !isatty.IsTerminal(os.Stdin.Fd()):
		return usage("the game's screen needs a terminal: use --headless for scripts")
	case !p.headless && !isatty.IsTerminal(os.Stdout.Fd()):
		// Drawn into a file, the screen was blank and the game played on
		// unseen (black-box round).
		return usage("the game's screen needs a terminal, and its output goes elsewhere: use --headless for scripts")
	}
	if !p.lan && m == modeQuorum {
		if err := localQuorumFlags(c, "game"); err != nil {
			return err
		}
	}
	if p.headless && p.duration == 0 {
		p.duration = time.Minute
	}
	if !p.lan && m == modeMulticast {
		if !netns.Inside() {
			err := runInNamespace("game")
			if netns.Unavailable(err) {
				return &exitError{code: 1, err: fmt.Errorf("cannot create a private network namespace for the game (%v): run it as root, "+
					"enable unprivileged user namespaces, or play on a LAN with --interface", err)}
			}
			return err
		}
		if err := netns.Prepare(); err != nil {
			return &exitError{code: 1, err: err}
		}
	}
	log, err := logger(c)
	if err != nil {
		return err
	}
	if !p.headless {
		log = zerolog.Nop() // the screen is the game's output
	} else if c.String("log-level") == "info" {
		log = log.Level(zerolog.WarnLevel)
	}
	log = quietOnceOver(log, &p.over)
	nodes, closeNodes, err := p.start(c, log)
	if err != nil {
		return err
	}
	defer closeNodes()
	return p.play(nodes)
}

// start starts the game's nodes: one on a LAN, the local group otherwise.
func (p *gamePlan) start(c *cli.Context, log zerolog.Logger) ([]mcnode.Locker, func(), error) {
	leave := func(nodes []mcnode.Locker) func() {
		return func() {
			lctx, lcancel := context.WithTimeout(context.Background(), leaveTimeout)
			defer lcancel()
			for _, n := range nodes {
				_ = n.Leave(lctx)
			}
		}
	}
	if p.lan {
		cfg := mcnode.Config{Mode: mcnode.Mode(p.mode)}
		var discover *group.Config // quorum mode with --quorum-size: where the peers are found
		var err error
		if p.mode == modeQuorum {
			cfg.Quorum, err = quorumConfig(c, log)
			if err == nil && c.String("peers") == "" {
				var g group.Config
				g, err = groupConfigKeyed(c, log, func() ([]seal.Key, error) { return cfg.Quorum.Keys, nil })
				discover = &g
			}
		} else {
			// No TimestampFile: the game has no --state-dir, and needs no
			// fencing across restarts.
			cfg.Multicast, err = groupConfig(c, log)
		}
		if err != nil {
			return nil, nil, err
		}
		var via *group.Group
		if discover != nil {
			// As long as it takes the others to start (Ctrl-C ends it), as
			// mcnode run does.
			fmt.Fprintf(os.Stderr, "mcnode game: waiting for the group %s to have %s (--quorum-size)\n", discover.Name, plural(len(cfg.Quorum.Peers), "member"))
			if via, err = peersFromGroup(context.Background(), *discover, &cfg.Quorum, nil, log); err != nil {
				return nil, nil, &exitError{code: 1, err: err}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		n, err := mcnode.Start(ctx, cfg)
		if err != nil {
			if via != nil {
				_ = via.Leave(ctx)
			}
			return nil, nil, &exitError{code: 1, err: err}
		}
		if p.mode == modeQuorum {
			// Declared failed (stopped, or cut off, for longer than the
			// detection time), the node starts anew, as a daemon's does.
			n = newRestartingNode(n, func(ctx context.Context) (mcnode.Locker, error) {
				ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				again := cfg
				// The last node closed its listener (review: a --listen
				// game never came back).
				again.Quorum.Listener = nil
				if addr := c.String("listen"); addr != "" {
					l, err := net.Listen("tcp", addr)
					if err != nil {
						return nil, fmt.Errorf("--listen %s: %w", addr, err)
					}
					again.Quorum.Listener = l
				}
				return mcnode.Start(ctx, again)
			}, log)
		}
		closeNodes := leave([]mcnode.Locker{n})
		if via != nil {
			// The group the peers came from is left after the node.
			closeNodes = leave([]mcnode.Locker{n, mcnode.Wrap(via)})
		}
		return []mcnode.Locker{n}, closeNodes, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opt := localgroup.Options{Mode: mcnode.Mode(p.mode), N: p.bots, Name: c.String("group"), Protocol: c.String("algo"),
		Coterie: c.String("coterie"), Logger: log}
	if p.human || p.watch {
		opt.N++
	}
	var err error
	if opt.Keys, err = keyfileKeys(c); err != nil {
		return nil, nil, err
	}
	if p.mode == modeMulticast {
		// Timings from the flags, over the local defaults; where the group
		// talks is the namespace's lo, with TTL 0.
		if opt.Multicast, err = localGroupConfig(c); err != nil {
			return nil, nil, err
		}
	} else if err := (node.Config{Protocol: opt.Protocol, Coterie: opt.Coterie, Peers: make([]string, opt.N)}).Setup().Validate(); err != nil {
		return nil, nil, setupError(err)
	}
	lg, err := localgroup.Start(ctx, opt)
	if err != nil {
		return nil, nil, &exitError{code: 1, err: err}
	}
	return lg.Nodes, leave(lg.Nodes), nil
}

// play runs the game on the nodes: the first is yours (or the spectator's)
// unless the game is headless.
func (p *gamePlan) play(nodes []mcnode.Locker) error {
	if p.headless {
		log := game.NewLog(os.Stdout, p.asJSON)
		var players []*game.Player
		for i, n := range nodes {
			pl, err := game.New(n, game.Config{Name: p.playerName(n, i), Bot: true, Seed: p.seed + int64(i), Target: p.target, OnEvent: log.Event})
			if err != nil {
				return usage("--name: %v", err)
			}
			players = append(players, pl)
		}
		results := game.Play(players, p.duration, 10*time.Second)
		p.over.Store(true)
		log.End(p.target, results)
		return nil
	}
	events := make(chan game.Event, 64)
	show := func(e game.Event) {
		select {
		case events <- e:
		default: // the screen shows the latest news; it may skip some
		}
	}
	you, err := game.New(nodes[0], game.Config{Name: p.playerName(nodes[0], 0), Bot: !p.human && !p.watch, Watch: p.watch,
		Seed: p.seed, Target: p.target, OnEvent: show})
	if err != nil {
		return usage("--name: %v", err)
	}
	players := []*game.Player{you}
	for i, n := range nodes[1:] {
		bot, err := game.New(n, game.Config{Name: p.playerName(n, i+1), Bot: true, Seed: p.seed + int64(i) + 1, Target: p.target})
		if err != nil {
			return &exitError{code: 1, err: err}
		}
		players = append(players, bot)
	}
	for _, pl := range players {
		pl.Start()
	}
	prog := tea.NewProgram(game.NewUI(you, events))
	if p.duration > 0 {
		time.AfterFunc(p.duration, prog.Quit)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	go func() {
		<-sig
		prog.Quit()
	}()
	_, err = prog.Run()
	game.StopAll(players, 2*time.Second)
	p.over.Store(true)
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	return nil
}

// playerName is the name of the player on node n, the i-th of this
// process.
func (p *gamePlan) playerName(n mcnode.Locker, i int) string {
	switch {
	case i == 0 && p.name != "":
		return p.name
	case p.lan:
	case p.headless:
		return fmt.Sprintf("bot%d", i+1)
	case i == 0 && p.watch:
		return "watcher"
	case i == 0:
		return "you"
	default:
		return fmt.Sprintf("bot%d", i)
	}
	st, err := n.Status()
	if err != nil {
		return fmt.Sprintf("P%d", os.Getpid())
	}
	return fmt.Sprintf("P%d", st.Self)
}
