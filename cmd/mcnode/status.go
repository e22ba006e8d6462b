package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/mattn/go-isatty"
	"github.com/urfave/cli/v2"

	"github.com/mcnode/mcnode/group"
)

// statusView is the status as printed and as sent over the control socket.
type statusView struct {
	Group string `json:"group"`
	// Mode is "quorum" for a quorum-mode node ("" is multicast).
	Mode     string   `json:"mode,omitempty"`
	Protocol string   `json:"protocol,omitempty"`
	Coterie  string   `json:"coterie,omitempty"`
	Quorum   []uint64 `json:"quorum,omitempty"`
	Margin   int64    `json:"lease_margin_ms,omitempty"`
	Lease    int64    `json:"lease_ms,omitempty"`
	Self     uint64   `json:"self"`
	Addr     string   `json:"addr"`
	T        uint64   `json:"t"`
	Server   uint64   `json:"server"`
	// Failover (multicast mode): the epoch of this node's log, the member
	// that backs the server up, whether this node reaches a majority (and
	// how it says so), how long ago the server last pinged it, the epoch it
	// asks to take over (0: none), whether it waits out leases after a
	// takeover, and how long its own lease has left.
	Epoch      uint64           `json:"epoch,omitempty"`
	Backup     uint64           `json:"backup,omitempty"`
	QuorumHeld bool             `json:"quorum_held"`
	QuorumText string           `json:"quorum_status,omitempty"`
	Authority  bool             `json:"authority,omitempty"`
	SinceHeard float64          `json:"since_heard_ms"`
	HeardFrom  uint64           `json:"heard_from,omitempty"`
	Claiming   uint64           `json:"claiming_epoch,omitempty"`
	Frozen     bool             `json:"waiting_out_leases,omitempty"`
	LeaseLeft  float64          `json:"lease_left_ms,omitempty"`
	Members    []memberView     `json:"members"`
	Resources  []resourceView   `json:"resources"`
	Sent       map[string]int64 `json:"datagrams_sent"`
	// Received and Dropped count datagrams; in quorum mode, which sends
	// none, TCP messages (the JSON names stay, for the scripts that read
	// them).
	Received uint64 `json:"datagrams_received"`
	Dropped  uint64 `json:"datagrams_dropped"`
	// Filtered counts the datagrams addressed to other members that the
	// socket filter dropped unread (group.Stats.Filtered): no loss.
	Filtered uint64 `json:"datagrams_filtered,omitempty"`
	// Drops counts what this node dropped by reason: hostile, garbled,
	// stale or foreign input (see group.Stats.Drops).
	Drops map[string]uint64 `json:"drops,omitempty"`
	// OtherRun counts the datagrams heard from a separately founded run of
	// this group (in quorum mode, of the group the peers were found in):
	// its locks are not exclusive with this one's.
	OtherRun uint64 `json:"other_run_datagrams,omitempty"`
	// Joining, set while the daemon is not a member yet (multicast mode),
	// says what it waits for, and JoiningFor since when; Error is the
	// daemon's answer then ("not a member of the group yet: ..."). Such a
	// status lists no members and no locks.
	Joining    string  `json:"joining,omitempty"`
	JoiningFor float64 `json:"joining_ms,omitempty"`
	Error      string  `json:"error,omitempty"`
}

// MarshalJSON writes the lists and the map that are always there empty,
// [] and {}, when they hold nothing, rather than null: a script can take
// the length of .members or go through .resources without a null check.
// Whoever made the view (a daemon of an earlier release, say), status
// --json and --watch --json print it so.
func (v statusView) MarshalJSON() ([]byte, error) {
	type plain statusView // the fields, without this method
	p := plain(v)
	if p.Members == nil {
		p.Members = []memberView{}
	}
	if p.Resources == nil {
		p.Resources = []resourceView{}
	}
	if p.Sent == nil {
		p.Sent = map[string]int64{}
	}
	return json.Marshal(p)
}

type memberView struct {
	ID   uint64 `json:"id"`
	Addr string `json:"addr"`
	// Observer: a member that neither votes nor serves (a lock command's).
	Observer bool `json:"observer,omitempty"`
	// Link (quorum mode): "up" or "down", this node's TCP link to the
	// member; "" for this node itself, and in multicast mode.
	Link string `json:"link,omitempty"`
	// SilentMs (multicast mode): how long the group has not heard the
	// member, as of the last SYNC (on the server: now); it is removed,
	// and what it holds reclaimed, once that passes the lease and margin.
	SilentMs float64 `json:"silent_ms,omitempty"`
}

type resourceView struct {
	Name   string `json:"name"`
	Holder uint64 `json:"holder"`
	// Held (quorum mode): held by Holder, which is this node; node 0 is a
	// node there, where multicast mode's holder 0 means free.
	Held  bool     `json:"held,omitempty"`
	Token uint64   `json:"token"`
	Queue []uint64 `json:"queue,omitempty"`
}

func viewStatus(st group.Status) *statusView {
	v := &statusView{Group: st.Group, Self: uint64(st.Self), Addr: st.Addr, T: st.T, Server: uint64(st.Server),
		Margin: st.LeaseMargin.Milliseconds(), Lease: st.LeaseTimeout.Milliseconds(),
		Sent: map[string]int64{}, Received: st.Stats.Received, Filtered: st.Stats.Filtered,
		Drops: st.Stats.Drops, OtherRun: st.Stats.OtherInstance,
		Epoch: st.Epoch, Backup: uint64(st.Backup), QuorumHeld: st.Quorum.Held, QuorumText: st.Quorum.String(),
		Authority: st.Authority, SinceHeard: ms(st.SinceHeard), HeardFrom: uint64(st.HeardFrom),
		Claiming: st.Claiming, Frozen: st.Frozen, LeaseLeft: ms(st.LeaseLeft)}
	for _, m := range st.Members {
		silent := time.Duration(m.Silence) * st.Tick
		if st.IsServer {
			// Its own count, live: the last SYNC's may be of a member
			// heard again since (review).
			silent = time.Duration(m.Unheard) * st.Tick
		}
		v.Members = append(v.Members, memberView{ID: uint64(m.ID), Addr: m.Addr, Observer: m.Observer, SilentMs: ms(silent)})
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
	for _, n := range v.Drops {
		v.Dropped += n
	}
	return v
}

// ms renders a duration in milliseconds, to a tenth.
func ms(d time.Duration) float64 { return float64(d.Microseconds()/100) / 10 }

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show the members, the server, T, and every lock's holder and queue",
		Description: "Asks the local `mcnode run` daemon; without one, joins the group briefly to\n" +
			"look (it then appears as a member for a moment). A multicast daemon not a member\n" +
			"yet shows what it waits for (a group it has not heard, or one that has not\n" +
			"admitted it) and what it dropped, say datagrams sealed with a key it lacks;\n" +
			"status then exits 1, as it does when there is no group to ask. A quorum-mode\n" +
			"daemon shows whether it reaches the nodes it asks for a lock, each peer's link,\n" +
			"and the locks held on this node only: that is all such a node knows.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print JSON (with --watch, one line each time)"},
			&cli.BoolFlag{Name: "watch", Usage: "show it again every --interval until interrupted (needs the local daemon)"},
			&cli.DurationFlag{Name: "interval", Value: time.Second, Usage: "with --watch: how often"},
		},
		Action: func(c *cli.Context) error {
			if err := noArguments(c); err != nil {
				return err
			}
			if _, err := logger(c); err != nil {
				return err
			}
			if c.Bool("watch") {
				return watchStatus(c)
			}
			v, err := fetchStatus(c)
			var ee *exitError
			var je *joiningError
			switch {
			case errors.As(err, &ee):
				return err // keeps its status: 2 for a usage error, 1 for no daemon to ask and no --interface
			case errors.As(err, &je) && v != nil:
				// Shown, said on stderr, and exit status 1: a script that
				// waits for its daemon to be a member waits on.
				err = &exitError{code: 1, err: err}
			case err != nil:
				return &exitError{code: 1, err: err}
			}
			if c.Bool("json") {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				if jerr := enc.Encode(v); jerr != nil {
					return jerr
				}
				return err
			}
			printStatus(os.Stdout, v)
			return err
		},
	}
}

// watchStatus shows the daemon's status every --interval until
// interrupted: redrawn in place on a terminal, one after another (or one
// JSON line each) otherwise. A daemon that goes away is waited for.
func watchStatus(c *cli.Context) error {
	every := c.Duration("interval")
	if every < 10*time.Millisecond {
		return usage("--interval %v: want at least 10ms", every)
	}
	path, err := socketPath(c)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tty := isatty.IsTerminal(os.Stdout.Fd()) && !c.Bool("json")
	t := time.NewTicker(every)
	defer t.Stop()
	type answer struct {
		v   *statusView
		err error
	}
	for {
		// Asked aside, so that Ctrl-C ends the watch at once even while a
		// stopped daemon keeps the question waiting.
		ch := make(chan answer, 1)
		go func() {
			v, err := daemonStatus(path, askedGroup(c))
			ch <- answer{v, err}
		}()
		var v *statusView
		var err error
		select {
		case a := <-ch:
			v, err = a.v, a.err
		case <-ctx.Done():
			return nil
		}
		if errors.Is(err, errUnsafeSocketDir) {
			return &exitError{code: 1, err: err}
		}
		switch {
		case c.Bool("json") && v != nil:
			b, _ := json.Marshal(v)
			fmt.Printf("%s\n", b)
		case c.Bool("json"):
			b, _ := json.Marshal(map[string]string{"error": err.Error()})
			fmt.Printf("%s\n", b)
		default:
			if tty {
				fmt.Print("\x1b[H\x1b[2J") // home, clear
			}
			fmt.Printf("mcnode status, every %v (Ctrl-C stops): %s\n\n", every, time.Now().Format("15:04:05"))
			if v != nil {
				printStatus(os.Stdout, v) // a member's, or one that joins
			} else {
				fmt.Printf("no answer from the daemon at %s: %v\n", path, err)
			}
			if !tty {
				fmt.Println()
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// daemonStatus asks the local daemon for its status, and gives up on a
// daemon that does not answer within statusTimeout (it is stopped, say).
func daemonStatus(path, group string) (*statusView, error) {
	d, err := dialDaemon(path)
	if err != nil {
		return nil, err
	}
	d.group = group
	defer d.Close()
	return d.statusWithin(path)
}

// statusWithin asks the daemon at path for its status, and gives up on a
// daemon that does not answer within statusTimeout, saying so.
func (d *daemonClient) statusWithin(path string) (*statusView, error) {
	_ = d.conn.SetDeadline(time.Now().Add(statusTimeout))
	v, err := d.status()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = fmt.Errorf("the daemon at %s did not answer within %v: is it stopped (SIGSTOP, Ctrl-Z) or hung?", path, statusTimeout)
	}
	return v, err
}

// joiningError is the answer of a daemon that is not a member of its
// group yet, which comes with its status (statusView.Joining says what it
// waits for).
type joiningError struct{ why string }

func (e *joiningError) Error() string { return "daemon: " + e.why }

// statusTimeout bounds a status question to the daemon, which answers
// within a millisecond when it runs.
const statusTimeout = 3 * time.Second

// status asks the daemon for its status.
func (d *daemonClient) status() (*statusView, error) {
	if err := d.send(request{Op: "status"}); err != nil {
		return nil, err
	}
	r, err := d.receive()
	if err != nil {
		return nil, err
	}
	switch {
	case !r.OK && r.Status != nil && r.Status.Joining != "":
		r.Status.Error = r.Error
		return r.Status, &joiningError{why: r.Error}
	case !r.OK || r.Status == nil:
		return nil, fmt.Errorf("daemon: %s", r.Error)
	}
	return r.Status, nil
}

func fetchStatus(c *cli.Context) (*statusView, error) {
	path, err := clientSocketPath(c)
	if err != nil {
		return nil, err
	}
	d, err := dialDaemon(path)
	if errors.Is(err, errUnsafeSocketDir) {
		return nil, err
	}
	if err == nil {
		defer d.Close()
		d.group = askedGroup(c)
		return d.statusWithin(path)
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
		return nil, noDaemonNoInterface(c, err, 1)
	}
	cfg.Bootstrap = false // looking must not found a group
	cfg.NoGroupAfter = 3 * cfg.JoinTimeout
	// A group that answered may hold newcomers back for a takeover's
	// wait, about a lease.
	ctx, cancel := context.WithTimeout(context.Background(), cfg.NoGroupAfter+2*cfg.LeaseTimeout)
	defer cancel()
	g, err := group.Join(ctx, cfg)
	switch {
	case errors.Is(err, group.ErrNoGroup):
		return nil, fmt.Errorf("no group %q answered on %s via %s: %w", cfg.Name, cfg.Address, cfg.Interface, err)
	case errors.Is(err, context.DeadlineExceeded):
		return nil, fmt.Errorf("group %q on %s via %s answered but did not admit this node in time (a takeover, or no majority): %w", cfg.Name, cfg.Address, cfg.Interface, err)
	case err != nil:
		return nil, err
	}
	defer g.Leave(context.Background())
	// Just admitted, this node has not been pinged yet, and would report
	// no quorum in a healthy group: the server's next ping comes within a
	// heartbeat.
	deadline := time.Now().Add(3 * cfg.HeartbeatInterval)
	for {
		st, err := g.Status()
		if err != nil {
			return nil, err
		}
		if st.Quorum.Held || time.Now().After(deadline) {
			return viewStatus(st), nil
		}
		time.Sleep(cfg.HeartbeatInterval / 10)
	}
}

// printFailover says whether this node reaches a majority, and what it knows
// of the server.
func printFailover(w io.Writer, v *statusView) {
	fmt.Fprintf(w, "%s", v.QuorumText)
	switch {
	case v.Authority:
		fmt.Fprintf(w, "; this node is the server (a majority answered %.0f ms ago)", v.SinceHeard)
	case v.HeardFrom != 0:
		fmt.Fprintf(w, "; last ping from node %d %.0f ms ago", v.HeardFrom, v.SinceHeard)
	}
	if v.Backup != 0 {
		fmt.Fprintf(w, "; backup: node %d", v.Backup)
	}
	fmt.Fprintln(w)
	if v.Claiming != 0 {
		fmt.Fprintf(w, "taking over: asking the members to make this node the server of epoch %d\n", v.Claiming)
	}
	if v.Frozen {
		fmt.Fprintln(w, "took over without proof of every lock in use: granting nothing until the old leases have run out")
	}
	if v.LeaseLeft > 0 {
		fmt.Fprintf(w, "this node's lease: %.0f ms left (renewed by the server's pings)\n", v.LeaseLeft)
	}
}

func printStatus(w io.Writer, v *statusView) {
	if v.Joining != "" {
		printJoining(w, v)
		return
	}
	if v.Mode == modeQuorum {
		algo := v.Protocol
		if v.Coterie != "" {
			algo += " with the " + v.Coterie + " coterie"
		}
		quorum := "" // Ricart-Agrawala and the central server have none
		if len(v.Quorum) > 0 {
			quorum = fmt.Sprintf(", quorum %v", v.Quorum)
		}
		fmt.Fprintf(w, "group %s  quorum mode: %s  (this node: %d at %s%s)\n", shown(v.Group), algo, v.Self, shown(v.Addr), quorum)
		fmt.Fprintln(w, v.QuorumText)
	} else {
		fmt.Fprintf(w, "group %s  T=%d  epoch %d  server: node %d  (this node: %d at %s)\n", shown(v.Group), v.T, v.Epoch, v.Server, v.Self, shown(v.Addr))
		printFailover(w, v)
	}
	if v.OtherRun > 0 {
		fmt.Fprintln(w, otherRunWarning(v.OtherRun))
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
		if m.Observer {
			notes = append(notes, "observer (does not vote)")
		}
		if m.Link != "" {
			notes = append(notes, "link "+m.Link)
		}
		if m.SilentMs > 0 {
			notes = append(notes, fmt.Sprintf("not heard for %v (removed past %v)", time.Duration(m.SilentMs*float64(time.Millisecond)).Round(10*time.Millisecond), time.Duration(v.Lease+v.Margin)*time.Millisecond))
		}
		fmt.Fprintf(tw, "  node %d\t%s\t%s\n", m.ID, shown(m.Addr), strings.Join(notes, ", "))
	}
	if v.Mode == modeQuorum {
		// All a quorum-mode node knows: no node sees every lock.
		fmt.Fprintf(tw, "\nlocks held by this node (%d):\n", len(v.Resources))
	} else {
		fmt.Fprintf(tw, "\nlocks held or waited for (%d):\n", len(v.Resources))
	}
	for _, r := range v.Resources {
		holder := "free"
		if r.Holder != 0 || r.Held {
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
		fmt.Fprintf(tw, "  %s\t%s\ttoken %d\t%s\n", shown(r.Name), holder, r.Token, queue)
	}
	tw.Flush()
	fmt.Fprintln(w)
	printDatagrams(w, v)
}

// joinDropHints explain the drops that keep a node from hearing its group.
var joinDropHints = map[string]string{
	group.DropUnknownKey: "the group's datagrams come sealed with a key this node does not hold: its key file is not the group's, or predates the group's last key change (the log names the key; or someone forges them)",
	group.DropNeedsKey:   "the group's datagrams come sealed, and this node has no key: start it with the group's --keyfile",
	group.DropUnsealed:   "the group's datagrams come unsealed, and this node has a key: the group runs without one, or a host without the key joins it",
}

// otherRunWarning is status's line for a separately founded run of the
// group heard on the network.
func otherRunWarning(datagrams uint64) string {
	return fmt.Sprintf("WARNING: another run of this group, founded separately, is on the network (%s from it): its locks are NOT exclusive with this one's; stop one run's nodes and start them again so that they join the other",
		plural(int(datagrams), "datagram"))
}

// printJoining prints the status of a daemon that is not a member yet.
func printJoining(w io.Writer, v *statusView) {
	fmt.Fprintf(w, "group %s  not a member yet, for %.1f s: %s\n", shown(v.Group), v.JoiningFor/1000, v.Joining)
	fmt.Fprintf(w, "this node: %s\n\n", shown(v.Addr))
	printDatagrams(w, v)
	for _, reason := range slices.Sorted(maps.Keys(joinDropHints)) {
		if v.Drops[reason] > 0 {
			fmt.Fprintf(w, "%s: %s\n", reason, joinDropHints[reason])
		}
	}
}

// printDatagrams prints what the node received and dropped, by reason.
func printDatagrams(w io.Writer, v *statusView) {
	what := "datagrams"
	if v.Mode == modeQuorum {
		what = "messages (TCP)" // quorum mode sends no datagrams
	}
	fmt.Fprintf(w, "%s: %d received, %d dropped", what, v.Received, v.Dropped)
	if len(v.Drops) > 0 {
		reasons := slices.Sorted(maps.Keys(v.Drops))
		parts := make([]string, len(reasons))
		for i, r := range reasons {
			parts[i] = fmt.Sprintf("%s %d", r, v.Drops[r])
		}
		fmt.Fprintf(w, " (%s)", strings.Join(parts, ", "))
	}
	if v.Filtered > 0 {
		fmt.Fprintf(w, "; %d addressed to other members, left unread", v.Filtered)
	}
	fmt.Fprintln(w)
}

// plural is n and the noun, which takes an s unless n is 1: "1 member",
// "3 members".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// shown is a string that came from the network (a lock name, which any
// member may choose, or a member's address, which it reports itself) as it
// is safe to print on a terminal: as it is if it is printable UTF-8 without
// spaces, and quoted with Go escapes otherwise, so that a newline cannot
// break the table nor an escape sequence reach the terminal. A name that
// starts with a double quote is quoted too, or it could pass for the quoted
// form of another.
func shown(s string) string {
	if !utf8.ValidString(s) || strings.HasPrefix(s, `"`) || strings.IndexFunc(s, func(r rune) bool {
		return !unicode.IsPrint(r) || unicode.IsSpace(r)
	}) >= 0 {
		return strconv.Quote(s)
	}
	return s
}
