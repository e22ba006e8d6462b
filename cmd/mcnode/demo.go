package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/internal/netns"
	q "github.com/mcnode/mcnode/quorumfallback"
	"github.com/mcnode/mcnode/quorumfallback/node"
	"github.com/mcnode/mcnode/wire"
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
			"With --mode quorum the nodes run --algo (and --coterie) over TCP on 127.0.0.1\n" +
			"instead, on this host's network (no multicast, so no namespace is needed).",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "nodes", Value: 5, Usage: "nodes in the group"},
			&cli.IntFlag{Name: "resources", Value: 3, Usage: "locks they contend for"},
			&cli.DurationFlag{Name: "duration", Value: 10 * time.Second, Usage: "how long to run"},
			&cli.DurationFlag{Name: "hold", Value: time.Millisecond, Usage: "longest time a node holds a lock"},
			&cli.BoolFlag{Name: "host-network", Usage: "do not create a private network namespace; use --interface with TTL 0"},
		},

		Action: demoAction,
	}
}

func demoAction(c *cli.Context) error {
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
	if c.IsSet("peers") || c.IsSet("node-id") || c.IsSet("quorum-size") {
		return usage("the demo makes its own peers: drop --peers, --node-id and --quorum-size")
	}
	if !c.Bool("host-network") && m != modeQuorum {
		if !netns.Inside() {
			return reexecInNamespace()
		}
		if err := netns.Prepare(); err != nil {
			return &exitError{code: 1, err: err}
		}
	}
	log, err := logger(c)
	if err != nil {
		return err
	}
	if log.GetLevel() < zerolog.WarnLevel && c.String("log-level") == "info" {
		log = log.Level(zerolog.WarnLevel) // the live view is the demo's output
	}
	// Once the run is over, the nodes leave one by one, and each leave of
	// a backup makes a takeover: expected, and no news after the summary.
	var over atomic.Bool
	log = log.Hook(zerolog.HookFunc(func(e *zerolog.Event, level zerolog.Level, _ string) {
		if over.Load() && level < zerolog.ErrorLevel {
			e.Discard()
		}
	}))
	cfg := group.DefaultLocalConfig()
	cfg.Name = "mcnode-demo"
	if c.Bool("host-network") {
		cfg.Interface = c.String("interface")
		if cfg.Interface == "" {
			cfg.Interface = "lo"
		}
	}
	cfg.Logger = log
	d := &demo{over: &over, nodes: nodes, resources: resources, duration: c.Duration("duration"), hold: c.Duration("hold"), cfg: cfg, out: os.Stdout}
	d.mode = m
	d.qcfg = node.Config{Group: cfg.Name, Protocol: c.String("algo"), Coterie: c.String("coterie"), Peers: make([]string, nodes), Logger: log}
	if err := d.qcfg.Setup().Validate(); d.mode == modeQuorum && err != nil {
		return setupError(err)
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
	over             *atomic.Bool // the run is over: the nodes' logs are quiet
	nodes, resources int
	duration, hold   time.Duration
	cfg              group.Config
	mode             string
	qcfg             node.Config // quorum mode: the protocol, coterie and group
	out              io.Writer

	entries   atomic.Int64
	overlaps  atomic.Int64
	inside    []atomic.Int32
	mu        sync.Mutex
	latencies []time.Duration
	perNode   []int64
}

func (d *demo) run() error {
	ctx, cancel := context.WithTimeout(context.Background(), d.duration+30*time.Second)
	defer cancel()
	where := "real UDP multicast on lo in a private network namespace (TTL 0)"
	if !netns.Inside() {
		where = fmt.Sprintf("real UDP multicast on %s of this host (TTL 0)", d.cfg.Interface)
	}
	if d.mode == modeQuorum {
		where = fmt.Sprintf("TCP on 127.0.0.1 in quorum mode: %v", d.qcfg.Setup())
	}
	fmt.Fprintf(d.out, "mcnode demo: %d nodes contend for %d locks for %v over %s\n", d.nodes, d.resources, d.duration, where)
	var gs []locker
	defer func() {
		lctx, lcancel := context.WithTimeout(context.Background(), leaveTimeout)
		defer lcancel()
		for _, g := range gs {
			g.leave(lctx)
		}
	}()
	var err error
	if d.mode == modeQuorum {
		gs, err = d.startQuorum(ctx)
	} else {
		gs, err = d.joinMulticast(ctx)
	}
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	d.inside = make([]atomic.Int32, d.resources)
	d.perNode = make([]int64, d.nodes)
	stop := time.Now().Add(d.duration)
	var wg sync.WaitGroup
	for i, g := range gs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.work(ctx, i, g, stop)
		}()
	}
	d.watch(gs, stop, &wg)
	d.over.Store(true)
	return d.summary(gs)
}

// work is one node's application: lock, check, hold, release, again.
func (d *demo) work(ctx context.Context, i int, g locker, stop time.Time) {
	rng := rand.New(rand.NewSource(int64(i) + time.Now().UnixNano()))
	for time.Now().Before(stop) {
		r := rng.Intn(d.resources)
		t0 := time.Now()
		l, err := g.acquire(ctx, fmt.Sprintf("lock-%d", r), false)
		if err != nil {
			return
		}
		waited := time.Since(t0)
		if d.inside[r].Add(1) != 1 {
			d.overlaps.Add(1)
		}
		if d.hold > 0 {
			time.Sleep(time.Duration(rng.Int63n(int64(d.hold) + 1)))
		}
		d.inside[r].Add(-1)
		_ = l.Release()
		d.entries.Add(1)
		d.mu.Lock()
		d.latencies = append(d.latencies, waited)
		d.perNode[i]++
		d.mu.Unlock()
	}
}

// watch shows progress until the workers are done.
func (d *demo) watch(gs []locker, stop time.Time, wg *sync.WaitGroup) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
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
		case <-done:
			if tty {
				fmt.Fprintln(d.out)
			}
			return
		case <-t.C:
			el := time.Since(start).Round(100 * time.Millisecond)
			line := fmt.Sprintf("%6v  entries %7d (%5.0f/s)  overlaps %d", el, d.entries.Load(),
				float64(d.entries.Load())/time.Since(start).Seconds(), d.overlaps.Load())
			if st, err := gs[0].status(); err == nil && d.mode != modeQuorum {
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

func (d *demo) summary(gs []locker) error {
	entries := d.entries.Load()
	fmt.Fprintf(d.out, "\n  entries              %d (%.0f per second)\n", entries, float64(entries)/d.duration.Seconds())
	fmt.Fprintf(d.out, "  per node             %v\n", d.perNode)
	if d.mode == modeQuorum {
		d.quorumTraffic(gs)
	} else {
		d.multicastTraffic(gs)
	}
	slices.Sort(d.latencies)
	pct := func(p float64) time.Duration {
		if len(d.latencies) == 0 {
			return 0
		}
		return d.latencies[min(len(d.latencies)-1, int(p*float64(len(d.latencies))))]
	}
	fmt.Fprintf(d.out, "  acquire latency      p50 %v  p99 %v\n", pct(0.50).Round(time.Microsecond), pct(0.99).Round(time.Microsecond))
	fmt.Fprintf(d.out, "  overlaps found       %d\n", d.overlaps.Load())
	if d.overlaps.Load() > 0 {
		return &exitError{code: 1, err: fmt.Errorf("%d overlapping critical sections: mutual exclusion violated", d.overlaps.Load())}
	}
	if entries == 0 {
		return &exitError{code: 1, err: errors.New("no lock was ever granted")}
	}
	return nil
}

// joinMulticast starts the multicast-mode nodes.
func (d *demo) joinMulticast(ctx context.Context) ([]locker, error) {
	var gs []locker
	for i := 0; i < d.nodes; i++ {
		g, err := group.Join(ctx, d.cfg)
		if err != nil {
			return gs, fmt.Errorf("node %d: %w", i+1, err)
		}
		gs = append(gs, groupLocker{g: g})
	}
	return gs, nil
}

// startQuorum starts the quorum-mode nodes on loopback ports the system
// picks, and waits until they are all connected.
func (d *demo) startQuorum(ctx context.Context) ([]locker, error) {
	listeners := make([]net.Listener, d.nodes)
	for i := range listeners {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			for _, l := range listeners[:i] {
				l.Close()
			}
			return nil, err
		}
		listeners[i], d.qcfg.Peers[i] = l, l.Addr().String()
	}
	var gs []locker
	for i := range listeners {
		cfg := d.qcfg
		cfg.Self, cfg.Listener = i, listeners[i]
		n, err := node.Start(cfg)
		if err != nil {
			for _, l := range listeners[i:] {
				l.Close()
			}
			return gs, fmt.Errorf("node %d: %w", i, err)
		}
		gs = append(gs, quorumLocker{n: n, group: cfg.Group})
	}
	for i, g := range gs {
		if err := g.(quorumLocker).n.WaitConnected(ctx); err != nil {
			return gs, fmt.Errorf("node %d: links: %w", i, err)
		}
	}
	return gs, nil
}

func (d *demo) multicastTraffic(gs []locker) {
	sent := map[wire.Class]uint64{}
	for _, g := range gs {
		st, err := g.(groupLocker).g.Status()
		if err != nil {
			continue
		}
		for c, n := range st.Stats.Sent {
			sent[c] += n
		}
	}
	per := func(classes ...wire.Class) float64 {
		var n uint64
		for _, c := range classes {
			n += sent[c]
		}
		return float64(n) / float64(max(d.entries.Load(), 1))
	}
	core := per(wire.ClassRequest, wire.ClassDecision, wire.ClassRelease)
	member := per(wire.ClassSync, wire.ClassPing, wire.ClassTakeover, wire.ClassRepair, wire.ClassJoin)
	fmt.Fprintf(d.out, "  datagrams per entry  %.2f: request %.2f, grant %.2f, release %.2f; backup acks %.2f\n", core,
		per(wire.ClassRequest), per(wire.ClassDecision), per(wire.ClassRelease), per(wire.ClassAck))
	fmt.Fprintf(d.out, "  membership traffic   %.3f per entry (pings, SYNCs, takeovers, repairs, joins)\n", member)
}

func (d *demo) quorumTraffic(gs []locker) {
	var sent [q.Transfer + 1]uint64
	for _, g := range gs {
		st, err := g.(quorumLocker).n.Status()
		if err != nil {
			continue
		}
		for k, n := range st.Stats.Sent {
			sent[k] += n
		}
	}
	entries := float64(max(d.entries.Load(), 1))
	var parts []string
	total := 0.0
	for k, n := range sent {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%v %.2f", q.Kind(k), float64(n)/entries))
			total += float64(n) / entries
		}
	}
	fmt.Fprintf(d.out, "  messages per entry   %.2f: %s (TCP, between nodes)\n", total, strings.Join(parts, ", "))
}
