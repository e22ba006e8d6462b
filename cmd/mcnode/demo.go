package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/mcnode/mcnode"
	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/internal/localgroup"
	"github.com/mcnode/mcnode/internal/netns"
	"github.com/mcnode/mcnode/quorumfallback/node"
	"github.com/mcnode/mcnode/seal"
)

func demoCommand() *cli.Command {
	return &cli.Command{
		Name:  "demo",
		Usage: "run a group of nodes on this host and watch them share locks",
		Description: "Starts --nodes nodes in this process. Each takes a random one of --resources\n" +
			"locks over and over, holds it up to --hold, and checks that nobody else holds it\n" +
			"meanwhile. The nodes talk real UDP multicast over the loopback interface of a\n" +
			"private network namespace the demo creates (needs root or unprivileged user\n" +
			"namespaces), so nothing leaves this host. --host-network runs on this host's\n" +
			"network instead, with TTL 0, on --interface (default lo).\n\n" +
			"--group, --address, --keyfile and the timings and limits (--tick to --rate-limit)\n" +
			"set up the demo's group, over a local group's defaults, and a value mcnode run\n" +
			"refuses is refused here too.\n\n" +
			"With --mode quorum the nodes run --algo (and --coterie) over TCP on 127.0.0.1\n" +
			"instead, on this host's network (no multicast, so no namespace is needed); of\n" +
			"the group's settings only --group and --keyfile apply there.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "nodes", Value: 5, Usage: "nodes in the group"},
			&cli.IntFlag{Name: "resources", Value: 3, Usage: "locks they contend for"},
			&cli.DurationFlag{Name: "duration", Value: 10 * time.Second, Usage: "how long to run (holds under way at the end are cut short)"},
			&cli.DurationFlag{Name: "hold", Value: time.Millisecond, Usage: "longest time a node holds a lock"},
			&cli.BoolFlag{Name: "host-network", Usage: "do not create a private network namespace; use --interface with TTL 0"},
		},

		Action: demoAction,
	}
}

// demoNotTaken are the shared flags (withCommon's) the demo does not offer:
// its nodes make a group of their own on this host, with TTL 0 (--ttl),
// each at an address of its own (--bind), and their own peers; none has a
// daemon's control socket or state kept across runs, and a join timeout
// below the group's floor (twice the takeover timeout) changes nothing.
var demoNotTaken = []string{"bind", "ttl", "state-dir", "socket", "join-timeout", "peers", "node-id", "listen", "quorum-size"}

// demoMulticastOnly are the demo's flags for the multicast group: its quorum
// nodes (localgroup's) run with their protocol's own timings.
var demoMulticastOnly = []string{"address", "tick", "turn-length", "turn-timeout", "max-members", "lease", "lease-margin",
	"retry", "heartbeat", "takeover-timeout", "rate-limit"}

// asDemo fits the shared flags withCommon gave cmd to the demo: drops those
// it does not take (demoNotTaken), so that one given is an unknown flag
// rather than quietly ignored; shows a local group's address as the
// default; and gives --group the demo's own default, which MCNODE_GROUP
// does not change (as the game's).
func asDemo(cmd *cli.Command) *cli.Command {
	withoutFlags(cmd, demoNotTaken...)
	for _, f := range cmd.Flags {
		if sf, ok := f.(*cli.StringFlag); ok && sf.Name == "address" {
			sf.Value = group.DefaultLocalConfig().Address
		}
	}
	return withGroupDefault(cmd, "mcnode-demo")
}

// localQuorumFlags refuses, for quorum nodes on one host (the demo's, or
// the game's without a LAN), a --coterie the protocol has none of and the
// multicast group's flags, which they do not take.
func localQuorumFlags(c *cli.Context, what string) error {
	if err := checkCoterie(c); err != nil {
		return err
	}
	if f := typedOf(c, demoMulticastOnly...); f != "" {
		return usage("--%s applies to the %s's multicast mode only: its quorum nodes run with their protocol's own timings (drop --%s, or run the %s in multicast mode)", f, what, f, what)
	}
	return nil
}

func demoAction(c *cli.Context) error {
	if err := noArguments(c); err != nil {
		return err
	}
	nodes, resources := c.Int("nodes"), c.Int("resources")
	switch {
	case nodes < 1 || nodes > 64:
		return usage("--nodes %d: want 1 to 64", nodes)
	case resources < 1 || resources > 1000:
		return usage("--resources %d: want 1 to 1000", resources)
	case c.Duration("duration") <= 0:
		return usage("--duration must be positive")
	case c.Duration("hold") < 0:
		return usage("--hold must not be negative")
	}
	m, err := mode(c)
	if err != nil {
		return err
	}
	if m == modeQuorum {
		if err := localQuorumFlags(c, "demo"); err != nil {
			return err
		}
	}
	// The flags are checked here, before a namespace is made, as mcnode run
	// checks them (in quorum mode only the group's name matters).
	base, err := localGroupConfig(c)
	if err != nil {
		return err
	}
	if m == modeMulticast && nodes > base.MaxMembers {
		return usage("--nodes %d is more than --max-members %d (given here or by MCNODE_MAX_MEMBERS): the group would refuse the rest", nodes, base.MaxMembers)
	}
	if m == modeQuorum {
		qcfg := node.Config{Protocol: c.String("algo"), Coterie: c.String("coterie"), Peers: make([]string, nodes)}
		if err := qcfg.Setup().Validate(); err != nil {
			return setupError(err)
		}
	}
	if c.Bool("host-network") {
		if name := c.String("interface"); name != "" {
			if _, err := net.InterfaceByName(name); err != nil {
				return usage("--interface %s: %v", strconv.Quote(name), err)
			}
		}
	} else if onCommandLine(c, "interface") {
		return usage("--interface applies with --host-network only: the demo otherwise runs on the loopback interface of a private network namespace (in quorum mode, over TCP on 127.0.0.1)")
	}
	log, err := logger(c)
	if err != nil {
		return err
	}
	if !c.Bool("host-network") && m != modeQuorum {
		if path := c.String("keyfile"); path != "" && !netns.Inside() {
			// Read only in the namespace (below); a file that is not
			// there is said before one is made.
			if _, err := os.Stat(path); err != nil {
				return usage("--keyfile: %v", err)
			}
		}
		if !netns.Inside() {
			return reexecInNamespace()
		}
		if err := netns.Prepare(); err != nil {
			return &exitError{code: 1, err: err}
		}
	}
	// The key is read only where the nodes run (in multicast mode, in the
	// namespace): a --keyfile that is a pipe can be read once.
	keys, err := keyfileKeys(c)
	if err != nil {
		return err
	}
	if log.GetLevel() < zerolog.WarnLevel && c.String("log-level") == "info" {
		log = log.Level(zerolog.WarnLevel) // the live view is the demo's output
	}
	// Once the run is over, the nodes leave one by one, and each leave of
	// a backup makes a takeover: expected, and no news after the summary.
	var over atomic.Bool
	log = quietOnceOver(log, &over)
	iface := ""
	if c.Bool("host-network") {
		if iface = c.String("interface"); iface == "" {
			iface = "lo"
		}
	}
	d := &demo{over: &over, out: os.Stdout, duration: c.Duration("duration"),
		opt: localgroup.Options{Mode: mcnode.Mode(m), N: nodes, Name: base.Name, Interface: iface, Logger: log,
			Protocol: c.String("algo"), Coterie: c.String("coterie"), Keys: keys},
		work: localgroup.Workload{Locks: resources, Prefix: "lock-", Hold: c.Duration("hold"), Duration: c.Duration("duration"), Seed: time.Now().UnixNano()}}
	if m == modeMulticast {
		d.opt.Multicast = base
	}
	return d.run()
}

// reexecInNamespace runs this same command again inside a private network
// namespace and passes its exit status on.
func reexecInNamespace() error {
	err := runInNamespace("demo")
	switch {
	case netns.Unavailable(err):
		return &exitError{code: 1, err: fmt.Errorf("cannot create a private network namespace for the demo (%v): run it as root, "+
			"enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1), or use --host-network", err)}
	}
	return err
}

// runInNamespace runs this same command line again inside a private network
// namespace, with marker in its environment, and passes its exit status on
// as an *exitError. An error netns.Unavailable recognises means no
// namespace could be made, and nothing ran.
func runInNamespace(marker string) error {
	self, err := os.Executable()
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	cmd := netns.Command(marker, self, os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee):
		return &exitError{code: ee.ExitCode()}
	case netns.Unavailable(err):
		return err
	}
	return &exitError{code: 1, err: err}
}

type demo struct {
	over     *atomic.Bool // the run is over: the nodes' logs are quiet
	opt      localgroup.Options
	work     localgroup.Workload
	duration time.Duration
	out      io.Writer
	progress localgroup.Progress
}

func (d *demo) run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lg, err := localgroup.Start(ctx, d.opt)
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	defer func() {
		lctx, lcancel := context.WithTimeout(context.Background(), leaveTimeout)
		defer lcancel()
		lg.Leave(lctx)
	}()
	where := lg.Where
	if d.opt.Mode == modeMulticast && netns.Inside() {
		where += " in a private network namespace"
	}
	verb := "contend"
	if d.opt.N == 1 {
		verb = "contends"
	}
	fmt.Fprintf(d.out, "mcnode demo: %s %s for %s for %v over %s\n", plural(d.opt.N, "node"), verb, plural(d.work.Locks, "lock"), d.duration, where)
	fmt.Fprintf(d.out, "  %s\n", d.settings())
	before := lg.Traffic()
	done := make(chan localgroup.Result)
	go func() { done <- localgroup.Drive(lg.Nodes, d.work, &d.progress) }()
	r := d.watch(lg.Nodes[0], done)
	d.over.Store(true)
	return d.summary(r, lg.Traffic(), before)
}

// settings says in one line what the flags set up: the group, where it
// talks, its chief timings, and its key.
func (d *demo) settings() string {
	s := "group " + strconv.Quote(d.opt.Name)
	if d.opt.Mode == modeMulticast {
		m := d.opt.Multicast
		s += fmt.Sprintf(" at %s; tick %v, lease %v (margin %v), heartbeat %v, takeover %v",
			m.Address, m.Tick, m.LeaseTimeout, m.LeaseMargin, m.HeartbeatInterval, m.TakeoverTimeout)
	}
	switch {
	case len(d.opt.Keys) == 0:
		s += "; no key (--keyfile)"
	case d.opt.Mode == modeMulticast:
		s += "; every datagram sealed with key " + seal.FormatID(d.opt.Keys[0].ID())
	default:
		s += "; links authenticated with key " + seal.FormatID(d.opt.Keys[0].ID())
	}
	return s
}

// watch shows progress until the workload is done, and returns its result.
func (d *demo) watch(first mcnode.Locker, done <-chan localgroup.Result) localgroup.Result {
	tty := false
	if f, ok := d.out.(*os.File); ok {
		tty = isatty.IsTerminal(f.Fd())
	}
	start := time.Now()
	every := time.Second
	if tty {
		every = 250 * time.Millisecond
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case r := <-done:
			if tty {
				fmt.Fprintln(d.out)
			}
			return r
		case <-t.C:
			el := time.Since(start).Round(100 * time.Millisecond)
			entries := d.progress.Entries.Load()
			line := fmt.Sprintf("%6v  entries %7d (%5.0f/s)  overlaps %d", el, entries,
				float64(entries)/time.Since(start).Seconds(), d.progress.Overlaps.Load())
			if st, err := first.Status(); err == nil && st.Mode == mcnode.Multicast {
				line += fmt.Sprintf("  server node %-2d  T %-8d  members %d", st.Server, st.T, len(st.Members))
			}
			if tty {
				fmt.Fprintf(d.out, "\r%s", line)
			} else {
				fmt.Fprintln(d.out, line)
			}
		}
	}
}

func (d *demo) summary(r localgroup.Result, after, before localgroup.Traffic) error {
	// Per second of the run as it went: the entries waiting at the end
	// still enter, after the duration.
	fmt.Fprintf(d.out, "\n  entries              %d (%.0f per second, in %v)\n", r.Entries, float64(r.Entries)/r.Elapsed.Seconds(), r.Elapsed.Round(100*time.Millisecond))
	fmt.Fprintf(d.out, "  per node             %v\n", r.PerNode)
	entries := float64(max(r.Entries, 1))
	per := func(names ...string) float64 {
		var n uint64
		for _, c := range names {
			n += after.Sent[c] - before.Sent[c]
		}
		return float64(n) / entries
	}
	if d.opt.Mode == modeQuorum {
		var parts []string
		for _, k := range localgroup.Kinds {
			if v := per(k); v > 0 {
				parts = append(parts, fmt.Sprintf("%s %.2f", k, v))
			}
		}
		fmt.Fprintf(d.out, "  messages per entry   %.2f: %s (TCP, between nodes)\n", per(localgroup.Kinds...), strings.Join(parts, ", "))
	} else {
		fmt.Fprintf(d.out, "  datagrams per entry  %.2f: request %.2f, grant %.2f, release %.2f; backup acks %.2f\n",
			float64(after.Core-before.Core)/entries, per("request"), per("decision"), per("release"), per("ack"))
		acks := after.Acks - before.Acks // on the line above
		fmt.Fprintf(d.out, "  membership traffic   %.3f per entry (pings, SYNCs, takeovers, repairs, joins)\n",
			float64(after.Membership-before.Membership-acks)/entries)
	}
	fmt.Fprintf(d.out, "  acquire latency      p50 %v  p99 %v\n", localgroup.Percentile(r.Waits, 0.50).Round(time.Microsecond),
		localgroup.Percentile(r.Waits, 0.99).Round(time.Microsecond))
	fmt.Fprintf(d.out, "  overlaps found       %d\n", r.Overlaps)
	switch {
	case r.Overlaps > 0:
		return &exitError{code: 1, err: fmt.Errorf("%s: mutual exclusion violated", plural(r.Overlaps, "overlapping critical section"))}
	case r.Entries == 0:
		return &exitError{code: 1, err: fmt.Errorf("no lock was ever granted (%v)", r.Err)}
	case r.Err != nil:
		return &exitError{code: 1, err: r.Err}
	}
	return nil
}

// quietOnceOver drops the log's messages below error once over is set: a
// local group's nodes leaving one by one at the end (takeovers, broken
// links) is expected, and no news after the summary.
func quietOnceOver(log zerolog.Logger, over *atomic.Bool) zerolog.Logger {
	return log.Hook(zerolog.HookFunc(func(e *zerolog.Event, level zerolog.Level, _ string) {
		if over.Load() && level < zerolog.ErrorLevel {
			e.Discard()
		}
	}))
}
