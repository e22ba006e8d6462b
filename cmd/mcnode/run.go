package main

import (
	"context"
	"errors"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"
)

func runCommand() *cli.Command {
	return &cli.Command{
		Name:  "run",
		Usage: "join the group and stay, serving locks to local scripts through a control socket",
		Description: "Joins (or, if no member answers within --join-timeout, founds) the group on\n" +
			"--interface and stays until SIGINT, SIGTERM or SIGHUP, then leaves it cleanly\n" +
			"(stopped while it is still joining, it just exits, with status 0). `mcnode lock`\n" +
			"and `mcnode status` on this host go through it.\n\n" +
			"If the server falls silent for --takeover-timeout, a majority of the members\n" +
			"elects its backup (or another member) to take over; a node that cannot reach a\n" +
			"majority grants nothing and says so in `mcnode status`. --state-dir keeps the\n" +
			"highest group timestamp seen, so a restarted group never reuses fencing tokens,\n" +
			"and records that this host is a member until it leaves: a daemon that stopped\n" +
			"without leaving (killed, crashed, power lost) waits for the group when it starts\n" +
			"again, and founds none, since the group may run on without this host. If the\n" +
			"whole group stopped that way, start one daemon with --found.\n\n" +
			"With --mode quorum it instead runs node --node-id of --peers under the quorum\n" +
			"protocol --algo (with --coterie), over TCP to the other nodes; every node needs\n" +
			"the same --peers, --algo, --coterie and --group, and all of them must be up.\n" +
			"With --quorum-size N instead of --peers, the peers are the first N members of\n" +
			"the multicast group on --interface, which the node joins and stays in; with\n" +
			"--peers it joins none, and refuses the multicast settings on its command line.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "metrics-addr", EnvVars: []string{"MCNODE_METRICS_ADDR"},
				Usage: "serve Prometheus metrics on http://ADDR/metrics (e.g. 127.0.0.1:9464; default: none)"},
			&cli.BoolFlag{Name: "found", EnvVars: []string{"MCNODE_FOUND"},
				Usage: "found the group if no member answers, even if this host was a member when its daemon last stopped without leaving (the whole group stopped: make sure no member still runs)"},
		},
		Action: func(c *cli.Context) error {
			if err := noArguments(c); err != nil {
				return err
			}
			if addr := c.String("metrics-addr"); addr != "" {
				// Said now, with a usage error's status: the listener is
				// opened only once the node has started.
				if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
					return usage("--metrics-addr %q: want host:port, such as 127.0.0.1:9464", addr)
				}
			}
			log, err := logger(c)
			if err != nil {
				return err
			}
			// Checked before prepareNode, which may open --listen.
			path, err := socketPath(c)
			if err != nil {
				return err
			}
			// A daemon already there is told apart at once from one that
			// shares the state directory only (prepareNode waits for that
			// one in case it is leaving).
			if err := notServed(path, c.String("group")); err != nil {
				return &exitError{code: 1, err: err}
			}
			start, why, release, err := prepareNode(c, log)
			if err != nil {
				return err
			}
			defer release()
			// SIGHUP too: a daemon whose terminal closes, or that a
			// supervisor hangs up on, must leave the group as on SIGTERM.
			// Killed by it, it would leave its socket, its membership
			// record and, until the group removes it, its place in the
			// group, and would then refuse to found the group again.
			stopOn := []os.Signal{os.Interrupt, syscall.SIGTERM}
			if !signal.Ignored(syscall.SIGHUP) {
				// Under nohup, SIGHUP is ignored on purpose; catching it
				// would undo that.
				stopOn = append(stopOn, syscall.SIGHUP)
			}
			ctx, stop := signal.NotifyContext(context.Background(), stopOn...)
			defer stop()
			l, err := listen(path, c.String("group"))
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			defer os.Remove(path)
			defer l.Close()
			// Local clients get an answer while the daemon joins, which may
			// take long: "not a member yet", and why.
			j := &joining{why: why, group: c.String("group")}
			if addr := c.String("metrics-addr"); addr != "" {
				ml, err := newMetrics(j).serve(addr, log)
				if err != nil {
					return &exitError{code: 1, err: err}
				}
				defer ml.Close()
			}
			holding := newHolders()
			go serveControl(l, j, holding, log)
			g, err := start(ctx, j)
			if err != nil {
				return stoppedBeforeJoining(ctx, err, log)
			}
			for {
				// A pointer of its own per node: a client that asked the
				// last one tells a restarted node by it (joining.acquire),
				// and reads no variable this loop writes.
				served := g
				j.ready.Store(&served)
				if st, err := g.status(); err == nil {
					log.Info().Uint64("node", st.Self).Str("addr", st.Addr).Str("socket", path).
						Int("members", len(st.Members)).Msg("member of the group; serving local clients")
				}
				select {
				case <-ctx.Done():
				case <-stoppedOf(g):
					j.ready.Store(nil)
					if cause := misconfiguredStop(g); cause != nil {
						// Started anew it would find the same peers:
						// an operator must give them one setup.
						closeNode(g)
						leaveDiscovery(g, log)
						return &exitError{code: 1, err: cause}
					}
					// Quorum mode: the peers declared this node failed (it
					// lost its locks): it comes back as a new incarnation.
					log.Error().Msg("the node stopped: its peers declared it failed; starting it anew, as a new incarnation")
					closeNode(g)
					old := g
					if g, err = start(ctx, j); err != nil {
						leaveDiscovery(old, log)
						return stoppedBeforeJoining(ctx, err, log)
					}
					continue
				}
				break
			}
			// A second SIGINT or SIGTERM ends the daemon at once, not after
			// the wait for the lock clients and the leave (review). SIGHUP
			// stays caught: a terminal's hang-up must not cut the leave
			// short.
			again := make(chan os.Signal, 1)
			signal.Notify(again, os.Interrupt, syscall.SIGTERM)
			go func() {
				<-again
				log.Warn().Msg("stopped again while stopping: exiting at once, without leaving the group")
				os.Exit(1)
			}()
			// No new client from here: a daemon started in its place
			// meanwhile finds the socket unserved, and waits for the
			// state directory until this one has left (claimState).
			l.Close()
			// The commands that hold locks through this daemon stop
			// first: the leave hands their locks on at once.
			if !holding.stop(stopWait) {
				log.Warn().Dur("waited", stopWait).Msg("a lock client did not give its lock back (is it stopped, or did its command leave a process holding the lock's descriptor?): leaving the group all the same")
			}
			log.Info().Msg("leaving the group")
			lctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
			defer cancel()
			if err := g.leave(lctx); err != nil {
				log.Warn().Err(err).Msg("leave not confirmed; the group will notice the silence")
			}
			return nil
		},
	}
}

// stoppedBeforeJoining is the outcome of a start that failed with err: the
// error itself, unless the operator asked the daemon to stop (ctx is done)
// while it was still joining and the start gave up for that reason, which is
// no failure: there is no group to leave yet. A start that failed for a
// reason of its own (a port taken, a key file gone) just as the signal came
// is still a failure.
func stoppedBeforeJoining(ctx context.Context, err error, log zerolog.Logger) error {
	if ctx.Err() == nil || !errors.Is(err, ctx.Err()) {
		return err
	}
	log.Debug().Err(err).Msg("the start gave up")
	log.Info().Msg("stopped before joining")
	return nil
}
