package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"
)

func runCommand() *cli.Command {
	return &cli.Command{
		Name:  "run",
		Usage: "join the group and stay, serving locks to local scripts through a control socket",
		Description: "Joins (or, if no member answers within --join-timeout, founds) the group on\n" +
			"--interface and stays until interrupted, then leaves it cleanly. `mcnode lock`\n" +
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
			"the multicast group on --interface, which the node joins and stays in.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "metrics-addr", EnvVars: []string{"MCNODE_METRICS_ADDR"},
				Usage: "serve Prometheus metrics on http://ADDR/metrics (e.g. 127.0.0.1:9464; default: none)"},
			&cli.BoolFlag{Name: "found", EnvVars: []string{"MCNODE_FOUND"},
				Usage: "found the group if no member answers, even if this host was a member when its daemon last stopped without leaving (the whole group stopped: make sure no member still runs)"},
		},
		Action: func(c *cli.Context) error {
			log, err := logger(c)
			if err != nil {
				return err
			}
			start, why, err := prepareNode(c, log)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			path := socketPath(c)
			l, err := listen(path)
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			defer os.Remove(path)
			defer l.Close()
			// Local clients get an answer while the daemon joins, which may
			// take long: "not a member yet", and why.
			j := &joining{why: why}
			if addr := c.String("metrics-addr"); addr != "" {
				ml, err := newMetrics(j).serve(addr, log)
				if err != nil {
					return &exitError{code: 1, err: err}
				}
				defer ml.Close()
			}
			go serveControl(l, j, log)
			g, err := start(ctx)
			if err != nil {
				return err
			}
			for {
				j.ready.Store(&g)
				if st, err := g.status(); err == nil {
					log.Info().Uint64("node", st.Self).Str("addr", st.Addr).Str("socket", path).
						Int("members", len(st.Members)).Msg("member of the group; serving local clients")
				}
				select {
				case <-ctx.Done():
				case <-stoppedOf(g):
					// Quorum mode: the peers declared this node failed (it
					// lost its locks): it comes back as a new incarnation.
					log.Error().Msg("the node stopped: its peers declared it failed; starting it anew, as a new incarnation")
					j.ready.Store(nil)
					closeNode(g)
					if g, err = start(ctx); err != nil {
						return err
					}
					continue
				}
				break
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
