package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/urfave/cli/v2"

	"github.com/mcnode/mcnode/internal/bench"
	"github.com/mcnode/mcnode/internal/bench/plots"
	"github.com/mcnode/mcnode/internal/netns"
	"github.com/mcnode/mcnode/quorumfallback/coterie"
)

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "measure the multicast arbiter against every quorum protocol, side by side",
		Description: "Runs the rotating arbiter and each quorum protocol (each with its coteries) on\n" +
			"one workload, in two layers, and prints a table per layer and load, then the\n" +
			"project's targets, met or missed:\n\n" +
			"  sim      the deterministic simulations with a fixed one-way delay T: exact\n" +
			"           message counts and synchronization delays, beside each paper's figure\n" +
			"  sockets  real nodes in this process: UDP multicast on the loopback interface of\n" +
			"           a private network namespace the bench creates (needs root, or\n" +
			"           unprivileged user namespaces; without, the multicast rows say they did\n" +
			"           not run), and TCP on 127.0.0.1 between quorum nodes\n\n" +
			"Light load is one request at a time; heavy load is every node always waiting,\n" +
			"all on one resource. Messages per entry count every datagram (a multicast once)\n" +
			"or stream message; the multicast mode's membership traffic (pings, SYNCs, the\n" +
			"backup's acks, takeovers, NAKs, joins) is shown apart and in the total. The\n" +
			"default run takes about 20 minutes on 2 cores; a progress line shows where it is.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "layers", Value: "sim,sockets", Usage: "layers to run: sim, sockets or both"},
			&cli.StringFlag{Name: "protocols", Value: "all", Usage: "comma-separated: " + strings.Join(bench.ProtocolNames(), ", ")},
			&cli.StringFlag{Name: "coteries", Value: strings.Join(coterie.Kinds(), ","), Usage: "comma-separated coteries for maekawa, cao-singhal and kakugawa (\"all\" is the coterie of every node)"},
			&cli.StringFlag{Name: "loads", Value: "light,heavy,idle,memory,failover", Usage: "comma-separated: light, heavy, idle, memory, failover (the last three on sockets: the multicast mode's traffic when it takes no lock and what each node keeps holding many locks; and, in both modes at the smallest --n, the time from a kill -9 of the lock's holder to the next grant)"},
			&cli.IntFlag{Name: "memory-n", Value: bench.DefaultSocketOptions().MemoryNodes, Usage: "nodes of the memory row (2 to 128)"},
			&cli.IntFlag{Name: "memory-locks", Value: bench.DefaultSocketOptions().MemoryLocks, Usage: "locks the memory row's group holds (1 to 100000)"},
			&cli.StringFlag{Name: "n", Value: "4,8,16,32", Usage: "group sizes on real sockets (2 to 32)"},
			&cli.StringFlag{Name: "sim-n", Value: "4,16,64,256,1024", Usage: "group sizes in the simulation (2 to 1024)"},
			&cli.DurationFlag{Name: "duration", Value: time.Second, Usage: "how long each real-socket run drives its workload"},
			&cli.IntFlag{Name: "sim-entries", Value: bench.DefaultSimOptions().Entries, Usage: "critical-section entries each heavy-load simulation measures"},
			&cli.Int64Flag{Name: "seed", Value: 1, Usage: "the simulations' seed"},
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON instead of tables"},
			&cli.StringFlag{Name: "plots", Usage: "write plots into this directory (created if missing; checked before the run)"},
			&cli.StringFlag{Name: "plot-format", Value: "png", Usage: "png or svg"},
		},
		OnUsageError: onUsageError,
		Action:       benchAction,
	}
}

// benchPlan is a checked bench command line.
type benchPlan struct {
	layers, loads  []string
	setups         []bench.Setup
	ns, simNs      []int
	sim            bench.SimOptions
	sockets        bench.SocketOptions
	json           bool
	plots, format  string
	multicastLocal bool // some socket run needs the private namespace
}

func parseBench(c *cli.Context) (*benchPlan, error) {
	if err := noArguments(c); err != nil {
		return nil, err
	}
	p := &benchPlan{json: c.Bool("json"), plots: c.String("plots"), format: c.String("plot-format")}
	var err error
	if p.layers, err = choices("--layers", c.String("layers"), []string{bench.LayerSim, bench.LayerSockets}); err != nil {
		return nil, err
	}
	if p.loads, err = choices("--loads", c.String("loads"), []string{bench.Light, bench.Heavy, bench.Idle, bench.Memory, bench.Failover}); err != nil {
		return nil, err
	}
	protos := strings.Split(c.String("protocols"), ",")
	if c.String("protocols") == "all" {
		protos = nil
	}
	if p.setups, err = bench.Setups(protos, strings.Split(c.String("coteries"), ",")); err != nil {
		return nil, usage("%v", err)
	}
	if p.ns, err = sizes("-n", c.String("n"), 32); err != nil {
		return nil, err
	}
	if p.simNs, err = sizes("--sim-n", c.String("sim-n"), 1024); err != nil {
		return nil, err
	}
	p.sim = bench.DefaultSimOptions()
	p.sim.Seed, p.sim.Entries = c.Int64("seed"), c.Int("sim-entries")
	if p.sim.Entries < 1 || p.sim.Entries > 1_000_000 {
		return nil, usage("--sim-entries %d: want 1 to 1000000", p.sim.Entries)
	}
	p.sockets = bench.DefaultSocketOptions()
	p.sockets.Duration = c.Duration("duration")
	p.sockets.MemoryNodes, p.sockets.MemoryLocks = c.Int("memory-n"), c.Int("memory-locks")
	if p.sockets.MemoryNodes < 2 || p.sockets.MemoryNodes > 128 {
		return nil, usage("--memory-n %d: want 2 to 128", p.sockets.MemoryNodes)
	}
	if p.sockets.MemoryLocks < 1 || p.sockets.MemoryLocks > 100000 {
		return nil, usage("--memory-locks %d: want 1 to 100000", p.sockets.MemoryLocks)
	}
	if p.sockets.Duration < 10*time.Millisecond || p.sockets.Duration > time.Hour {
		return nil, usage("--duration %v: want 10ms to 1h", p.sockets.Duration)
	}
	if p.format != "png" && p.format != "svg" {
		return nil, usage("--plot-format %q: want png or svg", p.format)
	}
	if c.IsSet("plot-format") && p.plots == "" {
		return nil, usage("--plot-format needs --plots DIR")
	}
	p.multicastLocal = slices.Contains(p.layers, bench.LayerSockets) &&
		slices.ContainsFunc(p.setups, func(s bench.Setup) bool { return s.Multicast() })
	return p, nil
}

// choices parses a comma-separated subset of allowed, in allowed's order.
func choices(flag, s string, allowed []string) ([]string, error) {
	var out []string
	for _, v := range strings.Split(s, ",") {
		v = strings.TrimSpace(v)
		if !slices.Contains(allowed, v) {
			return nil, usage("%s: %q is not one of %s", flag, v, strings.Join(allowed, ", "))
		}
		out = append(out, v)
	}
	return slices.DeleteFunc(slices.Clone(allowed), func(a string) bool { return !slices.Contains(out, a) }), nil
}

// sizes parses a comma-separated list of group sizes from 2 to most.
func sizes(flag, s string, most int) ([]int, error) {
	var out []int
	for _, v := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 2 || n > most {
			return nil, usage("%s: %q is not a group size from 2 to %d", flag, v, most)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

func benchAction(c *cli.Context) error {
	p, err := parseBench(c)
	if err != nil {
		return err
	}
	if p.plots != "" {
		// Now, not after a run of minutes whose tables a bad path would
		// otherwise cost.
		if err := usablePlotsDir(p.plots); err != nil {
			return err
		}
	}
	var notes []string
	if p.multicastLocal && !netns.Inside() {
		err := runInNamespace("bench")
		if !netns.Unavailable(err) {
			return err
		}
		notes = append(notes, fmt.Sprintf("no private network namespace could be made here (%v), so real multicast did not run: "+
			"run mcnode bench as root, or enable unprivileged user namespaces", err))
	}
	if p.multicastLocal && netns.Inside() {
		if err := netns.Prepare(); err != nil {
			return &exitError{code: 1, err: err}
		}
	}
	rep := bench.Report{Command: "mcnode " + strings.Join(os.Args[1:], " "), Notes: notes}
	var jobs []bench.Job
	if slices.Contains(p.layers, bench.LayerSim) {
		jobs = append(jobs, bench.SimJobs(p.setups, p.simNs, p.loads, p.sim)...)
	}
	if slices.Contains(p.layers, bench.LayerSockets) {
		cal, err := bench.Calibrate()
		if err != nil {
			return &exitError{code: 1, err: fmt.Errorf("measuring the raw round trip: %w", err)}
		}
		rep.Calibration = &cal
		jobs = append(jobs, bench.SocketJobs(p.setups, p.ns, p.loads, p.sockets, rep.Calibration)...)
	}
	prog := newProgress(os.Stderr, len(jobs))
	for _, j := range jobs {
		prog.start(j.String())
		rep.Rows = append(rep.Rows, j.Run())
	}
	prog.done()
	rep.Targets = bench.Targets(rep.Rows)
	return p.report(os.Stdout, rep)
}

// report writes the plots, if asked for, and prints rep. A plot that
// cannot be written (the directory checked before the run may have gone
// since) costs the plots only: the report is printed all the same, and
// the plot error returned after it.
func (p *benchPlan) report(w io.Writer, rep bench.Report) error {
	var plotErr error
	if p.plots != "" {
		files, err := plots.Write(rep.Rows, p.plots, p.format)
		if len(files) > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("plots: %s", strings.Join(files, ", ")))
		}
		if err != nil {
			// plots.Write's errors begin with "plots: " already.
			plotErr = &exitError{code: 1, err: err}
		}
	}
	var err error
	if p.json {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = bench.WriteTable(w, rep)
	}
	if err != nil {
		return err
	}
	return plotErr
}

// usablePlotsDir makes sure dir is a directory bench can write its plots
// into, creating it if it is missing, and says why not as a usage error.
// Writability is tried with a file, not judged from the mode bits: those
// do not tell about root, ACLs or a read-only mount.
func usablePlotsDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		if info, serr := os.Stat(dir); serr == nil && !info.IsDir() {
			return usage("--plots %s is not a directory: name a directory for the plots (it is created if missing)", dir)
		}
		return usage("--plots %s: cannot create the directory: %v", dir, err)
	}
	f, err := os.CreateTemp(dir, ".mcnode-bench-*")
	if err != nil {
		return usage("--plots %s: cannot write there: %v", dir, err)
	}
	f.Close()
	os.Remove(f.Name())
	return nil
}

// progress shows which run the bench is on: one line rewritten in place on
// a terminal, a line per run otherwise (a log, or CI).
type progress struct {
	w     io.Writer
	tty   bool
	total int
	n     int
	begun time.Time
}

func newProgress(w io.Writer, total int) *progress {
	p := &progress{w: w, total: total, begun: time.Now()}
	if f, ok := w.(*os.File); ok {
		p.tty = isatty.IsTerminal(f.Fd())
	}
	return p
}

func (p *progress) start(what string) {
	p.n++
	line := fmt.Sprintf("bench [%3d/%d %6s] %s", p.n, p.total, time.Since(p.begun).Round(time.Second), what)
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
	} else {
		fmt.Fprintln(p.w, line)
	}
}

func (p *progress) done() {
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K")
	}
	fmt.Fprintf(p.w, "bench: %s in %v\n", plural(p.total, "run"), time.Since(p.begun).Round(time.Second))
}
