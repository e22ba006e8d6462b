package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/mcnode/mcnode/group"
)

// statusView is the status as printed and as sent over the control socket.
type statusView struct {
	Group string `json:"group"`
	// Mode is "quorum" for a quorum-mode node ("" is multicast).
	Mode      string           `json:"mode,omitempty"`
	Protocol  string           `json:"protocol,omitempty"`
	Coterie   string           `json:"coterie,omitempty"`
	Quorum    []uint64         `json:"quorum,omitempty"`
	Margin    int64            `json:"lease_margin_ms,omitempty"`
	Self      uint64           `json:"self"`
	Addr      string           `json:"addr"`
	T         uint64           `json:"t"`
	Server    uint64           `json:"server"`
	Members   []memberView     `json:"members"`
	Resources []resourceView   `json:"resources"`
	Sent      map[string]int64 `json:"datagrams_sent"`
	Received  uint64           `json:"datagrams_received"`
	Dropped   uint64           `json:"datagrams_dropped"`
}

type memberView struct {
	ID   uint64 `json:"id"`
	Addr string `json:"addr"`
}

type resourceView struct {
	Name   string   `json:"name"`
	Holder uint64   `json:"holder"`
	Token  uint64   `json:"token"`
	Queue  []uint64 `json:"queue,omitempty"`
}

func viewStatus(st group.Status) *statusView {
	v := &statusView{Group: st.Group, Self: uint64(st.Self), Addr: st.Addr, T: st.T, Server: uint64(st.Server),
		Margin: st.LeaseMargin.Milliseconds(),
		Sent:   map[string]int64{}, Received: st.Stats.Received,
		Dropped: st.Stats.Malformed + st.Stats.Foreign + st.Stats.Forged}
	for _, m := range st.Members {
		v.Members = append(v.Members, memberView{ID: uint64(m.ID), Addr: m.Addr})
	}
	for _, r := range st.Resources {
		rv := resourceView{Name: r.Name, Holder: uint64(r.Holder), Token: r.Token}
		for _, q := range r.Queue {
			rv.Queue = append(rv.Queue, uint64(q))
		}
		v.Resources = append(v.Resources, rv)
	}
	for c, n := range st.Stats.Sent {
		v.Sent[string(c)] = int64(n)
	}
	return v
}

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show the members, the server, T, and every lock's holder and queue",
		Description: "Asks the local `mcnode run` daemon; without one, joins the group briefly to\n" +
			"look (it then appears as a member for a moment).",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON"}},
		Action: func(c *cli.Context) error {
			if _, err := logger(c); err != nil {
				return err
			}
			v, err := fetchStatus(c)
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			if c.Bool("json") {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(v)
			}
			printStatus(os.Stdout, v)
			return nil
		},
	}
}

func fetchStatus(c *cli.Context) (*statusView, error) {
	d, err := dialDaemon(socketPath(c))
	if errors.Is(err, errUnsafeSocketDir) {
		return nil, err
	}
	if err == nil {
		defer d.Close()
		if err := d.send(request{Op: "status"}); err != nil {
			return nil, err
		}
		r, err := d.receive()
		if err != nil {
			return nil, err
		}
		if !r.OK || r.Status == nil {
			return nil, fmt.Errorf("daemon: %s", r.Error)
		}
		return r.Status, nil
	}
	log, err := logger(c)
	if err != nil {
		return nil, err
	}
	if m, err := mode(c); err != nil {
		return nil, err
	} else if m == modeQuorum {
		return nil, needDaemon(c, "status")
	}
	cfg, err := groupConfig(c, log)
	if err != nil {
		return nil, err
	}
	cfg.Bootstrap = false // looking must not found a group
	ctx, cancel := context.WithTimeout(context.Background(), 3*cfg.JoinTimeout)
	defer cancel()
	g, err := group.Join(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("no group %q answered on %s via %s: %w", cfg.Name, cfg.Address, cfg.Interface, err)
	}
	defer g.Leave(context.Background())
	st, err := g.Status()
	if err != nil {
		return nil, err
	}
	return viewStatus(st), nil
}

func printStatus(w io.Writer, v *statusView) {
	if v.Mode == modeQuorum {
		algo := v.Protocol
		if v.Coterie != "" {
			algo += " with the " + v.Coterie + " coterie"
		}
		fmt.Fprintf(w, "group %s  quorum mode: %s  (this node: %d at %s, quorum %v)\n", v.Group, algo, v.Self, v.Addr, v.Quorum)
	} else {
		fmt.Fprintf(w, "group %s  T=%d  server: node %d  (this node: %d at %s)\n", v.Group, v.T, v.Server, v.Self, v.Addr)
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "\nmembers (%d):\n", len(v.Members))
	for _, m := range v.Members {
		var notes []string
		if m.ID == v.Server && v.Mode != modeQuorum {
			notes = append(notes, "server")
		}
		if m.ID == v.Self {
			notes = append(notes, "this node")
		}
		fmt.Fprintf(tw, "  node %d\t%s\t%s\n", m.ID, m.Addr, strings.Join(notes, ", "))
	}
	fmt.Fprintf(tw, "\nlocks held or waited for (%d):\n", len(v.Resources))
	for _, r := range v.Resources {
		holder := "free"
		if r.Holder != 0 {
			holder = fmt.Sprintf("held by node %d", r.Holder)
		}
		queue := ""
		if len(r.Queue) > 0 {
			ids := make([]string, len(r.Queue))
			for i, q := range r.Queue {
				ids[i] = fmt.Sprintf("node %d", q)
			}
			queue = "waiting: " + strings.Join(ids, ", ")
		}
		fmt.Fprintf(tw, "  %s\t%s\ttoken %d\t%s\n", r.Name, holder, r.Token, queue)
	}
	tw.Flush()
}
