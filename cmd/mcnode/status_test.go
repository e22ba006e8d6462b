package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcnode/mcnode"
	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/internal/localgroup"
	"github.com/mcnode/mcnode/quorumfallback/node"
)

// `mcnode status` shows every drop by reason, and their sum.
func TestStatusShowsDropsByReason(t *testing.T) {
	st := group.Status{Group: "g", Stats: group.Stats{Received: 40,
		Drops: map[string]uint64{group.DropForged: 3, group.DropMalformed: 2, group.DropOversized: 1}}}
	v := viewStatus(st)
	if v.Dropped != 6 {
		t.Errorf("dropped %d, want 6", v.Dropped)
	}
	var out bytes.Buffer
	printStatus(&out, v)
	want := "datagrams: 40 received, 6 dropped (forged 3, malformed 2, oversized 1)"
	if !strings.Contains(out.String(), want) {
		t.Errorf("status output lacks %q:\n%s", want, out.String())
	}
	// Quorum mode sends no datagrams: its counts are of TCP messages.
	v.Mode = modeQuorum
	out.Reset()
	printStatus(&out, v)
	if want := "messages (TCP): 40 received, 6 dropped"; !strings.Contains(out.String(), want) || strings.Contains(out.String(), "datagrams") {
		t.Errorf("quorum-mode status output lacks %q, or names datagrams:\n%s", want, out.String())
	}
}

// TestE2EStatusWatch: `mcnode status --watch --json` prints the daemon's
// status again and again, says when the daemon is gone, and stops cleanly
// on SIGINT.
func TestE2EStatusWatch(t *testing.T) {
	c := newCluster(t, 1, 1)
	c.waitMembers(0, 1)
	cmd := c.mcnode(0, "status", "--watch", "--interval", "100ms", "--json")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	c.kill(0)
	time.Sleep(500 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("status --watch ended with %v: %s", err, out.String())
	}
	var views, errs int
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var v struct {
			Members []memberView `json:"members"`
			Error   string       `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("not a JSON line: %q", line)
		}
		switch {
		case len(v.Members) == 1 && errs == 0:
			views++
		case v.Error != "":
			errs++
		default:
			t.Errorf("line %q: neither a status (before the kill) nor an error", line)
		}
	}
	if views < 5 || errs < 2 {
		t.Errorf("%d statuses then %d errors, want several of each:\n%s", views, errs, out.String())
	}
}

// TestE2EStatusWatchStoppedDaemon: Ctrl-C ends `mcnode status --watch` at
// once even while the daemon, stopped, leaves its question unanswered.
func TestE2EStatusWatchStoppedDaemon(t *testing.T) {
	c := newCluster(t, 1, 1)
	c.waitMembers(0, 1)
	daemon := c.daemons[0].Process
	if err := daemon.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer daemon.Signal(syscall.SIGCONT)
	cmd := c.mcnode(0, "status", "--watch", "--interval", "100ms", "--json")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("status --watch ended with %v: %s", err, out.String())
		}
	case <-time.After(time.Second):
		cmd.Process.Kill()
		t.Fatalf("status --watch ignored Ctrl-C for a second while the daemon was stopped: %s", out.String())
	}
}

// A quorum-mode daemon's status is mcnode.Status's, and the messages sent
// by kind: the held lock, the quorum, the peers, and everything received,
// the updates included.
func TestQuorumStatusView(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lg, err := localgroup.Start(ctx, localgroup.Options{Mode: mcnode.Quorum, N: 3, Protocol: "maekawa", Coterie: "grid", Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	updates, stop := lg.Nodes[0].Subscribe("news")
	defer stop()
	if err := lg.Nodes[1].Publish("news", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	<-updates
	l, err := lg.Nodes[0].Acquire(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	v, err := daemonNode{Locker: lg.Nodes[0]}.status()
	if err != nil {
		t.Fatal(err)
	}
	st, err := mcnode.Unwrap(lg.Nodes[0]).(*node.Node).Status()
	if err != nil {
		t.Fatal(err)
	}
	var quorum []uint64
	for _, m := range st.Quorum {
		quorum = append(quorum, uint64(m))
	}
	var messages uint64
	for _, n := range st.Stats.Received {
		messages += n
	}
	if v.Mode != modeQuorum || v.Protocol != "maekawa" || v.Coterie != "grid" || v.Self != 0 || v.Addr != st.Peers[0] ||
		len(v.Members) != 3 || v.Members[2].Addr != st.Peers[2] || !slices.Equal(v.Quorum, quorum) {
		t.Errorf("view %+v of %+v", v, st)
	}
	if !v.QuorumHeld || v.QuorumText != "reaches the nodes it asks for a lock" {
		t.Errorf("quorum held %v (%q), want held: the node took a lock", v.QuorumHeld, v.QuorumText)
	}
	v.Members[1].Link = "down" // as over TCP, with node 1 gone
	var out bytes.Buffer
	printStatus(&out, v)
	if !strings.Contains(out.String(), "\nreaches the nodes it asks for a lock\n") || !strings.Contains(out.String(), "link down") ||
		!strings.Contains(out.String(), "locks held by this node (1)") {
		t.Errorf("quorum-mode status output lacks its quorum line or a link's state:\n%s", out.String())
	}
	if len(v.Resources) != 1 || v.Resources[0].Name != "x" || v.Resources[0].Holder != 0 || !v.Resources[0].Held || v.Resources[0].Token != l.Token() {
		t.Errorf("resources %+v, want x held by node 0 with token %d", v.Resources, l.Token())
	}
	// Node 0 is a node in quorum mode: its lock is held, not free (found
	// by review: "x  free  token 0").
	if want := fmt.Sprintf("held by node 0  token %d", l.Token()); !strings.Contains(out.String(), want) {
		t.Errorf("quorum-mode status output lacks %q:\n%s", want, out.String())
	}
	v.Protocol, v.Coterie, v.Quorum = "central", "", nil
	out.Reset()
	printStatus(&out, v)
	if strings.Contains(out.String(), "quorum [") || !strings.Contains(out.String(), "quorum mode: central  (this node: 0 at ") {
		t.Errorf("a protocol without a quorum shows one:\n%s", out.String())
	}
	if strings.Contains(v.QuorumText, "broke") {
		t.Errorf("quorum line %q tells of broken links where none broke", v.QuorumText)
	}
	if note := brokenLinksNote(3); !strings.Contains(note, "broke 3 times") || !strings.Contains(note, "restart every node") {
		t.Errorf("the broken links' note %q", note)
	}
	if v.Sent["request"] == 0 || v.Received != messages+1 {
		t.Errorf("sent %v, received %d: want requests, and %d messages and 1 update", v.Sent, v.Received, messages)
	}
}

// Lock names, which any member may choose, and members' addresses, which
// each reports itself, are printed quoted if they hold anything a terminal
// would act on (a newline breaks the table, an escape sequence recolours
// or rewrites the screen); ordinary ones print as they are.
func TestStatusQuotesNames(t *testing.T) {
	v := &statusView{Group: "g", Self: 1, Server: 1, Addr: "10.0.0.1:7",
		Members: []memberView{{ID: 1, Addr: "10.0.0.1:7"}, {ID: 2, Addr: "10.0.0.2:7\x1b[2J"}},
		Resources: []resourceView{
			{Name: "deploy", Holder: 1, Token: 5},
			{Name: "db/migrate-ü", Token: 6},
			{Name: "evil\n\x1b[31mred", Holder: 2, Token: 7},
			{Name: "two words", Token: 8},
			{Name: `"deploy"`, Token: 9},
			{Name: "bad\xffutf8", Token: 10},
		}}
	var out bytes.Buffer
	printStatus(&out, v)
	s := out.String()
	if strings.ContainsAny(s, "\x1b\xff") {
		t.Errorf("status output carries raw control bytes:\n%q", s)
	}
	for _, want := range []string{
		"  deploy  ", "  db/migrate-ü  ", `  "evil\n\x1b[31mred"  `, `  "two words"  `,
		`  "\"deploy\""  `, `  "bad\xffutf8"  `, `"10.0.0.2:7\x1b[2J"`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("status output lacks %q:\n%s", want, s)
		}
	}
	// Every lock is one line of the table.
	if n := strings.Count(s, "token "); n != len(v.Resources) || strings.Count(s, "\n  ") != len(v.Members)+len(v.Resources) {
		t.Errorf("the table is broken (%d token lines):\n%s", n, s)
	}
}

// A daemon that takes the question and never answers (stopped with
// SIGSTOP after accepting, say) is given up on within statusTimeout, and
// the error says what to suspect, not "i/o timeout".
func TestStatusOfAStoppedDaemon(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "s.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	start := time.Now()
	_, err = daemonStatus(path, "")
	if err == nil || !strings.Contains(err.Error(), "did not answer within 3s: is it stopped") {
		t.Fatalf("status of a daemon that never answers: %v", err)
	}
	if d := time.Since(start); d > statusTimeout+time.Second {
		t.Errorf("gave up after %v, want about %v", d, statusTimeout)
	}
}

// Counts agree with their nouns in what people read: a group of one is
// "quorum held (1 member)", not "(1 members)".
func TestStatusPlurals(t *testing.T) {
	for n, want := range map[int]string{0: "0 members", 1: "1 member", 2: "2 members"} {
		if got := plural(n, "member"); got != want {
			t.Errorf("plural(%d, member) = %q, want %q", n, got, want)
		}
	}
	st := group.Status{Group: "g", Self: 1, Server: 1, Members: []group.Member{{ID: 1, Addr: "10.0.0.1:1"}},
		Quorum: group.Quorum{Held: true, Members: 1}}
	var out bytes.Buffer
	printStatus(&out, viewStatus(st))
	if !strings.Contains(out.String(), "quorum held (1 member)") || strings.Contains(out.String(), "1 members") {
		t.Errorf("a group of one, want \"quorum held (1 member)\":\n%s", out.String())
	}
}

// Observers are marked in the member list and counted apart in the quorum
// line, and --json says which members they are.
func TestStatusShowsObservers(t *testing.T) {
	st := group.Status{Group: "g", Self: 1, Server: 1,
		Members: []group.Member{{ID: 1, Addr: "10.0.0.1:1"}, {ID: 2, Addr: "10.0.0.2:1"}, {ID: 3, Addr: "10.0.0.3:1"}, {ID: 4, Addr: "10.0.0.4:1", Observer: true}},
		Quorum:  group.Quorum{Held: true, Members: 3, Observers: 1}}
	var out bytes.Buffer
	printStatus(&out, viewStatus(st))
	for _, want := range []string{"quorum held (3 voting members, and 1 observer)", "node 4  10.0.0.4:1  observer (does not vote)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("want %q in:\n%s", want, out.String())
		}
	}
	if strings.Count(out.String(), "observer (does not vote)") != 1 {
		t.Errorf("want one member marked an observer:\n%s", out.String())
	}
	b, err := json.Marshal(viewStatus(st))
	if err != nil || !strings.Contains(string(b), `{"id":4,"addr":"10.0.0.4:1","observer":true}`) || strings.Count(string(b), `"observer"`) != 1 {
		t.Errorf("--json: %v %s", err, b)
	}
}

// A separately founded run of the group heard on the network is a warning
// of its own in status (it was only in the log), in either mode.
func TestStatusWarnsOfAnotherRun(t *testing.T) {
	st := group.Status{Group: "g", Self: 1, Server: 1, Members: []group.Member{{ID: 1, Addr: "10.0.0.1:1"}}}
	st.Stats.OtherInstance = 3
	for _, v := range []*statusView{viewStatus(st), {Group: "g", Mode: modeQuorum, Protocol: "maekawa", OtherRun: 3}} {
		var out bytes.Buffer
		printStatus(&out, v)
		if !strings.Contains(out.String(), "WARNING: another run of this group, founded separately, is on the network (3 datagrams from it): its locks are NOT exclusive") {
			t.Errorf("no warning of another run:\n%s", out.String())
		}
	}
	b, err := json.Marshal(viewStatus(st))
	if err != nil || !strings.Contains(string(b), `"other_run_datagrams":3`) {
		t.Errorf("--json: %v %s", err, b)
	}
	st.Stats.OtherInstance = 0
	var out bytes.Buffer
	printStatus(&out, viewStatus(st))
	if strings.Contains(out.String(), "another run") {
		t.Errorf("a warning of another run where none was heard:\n%s", out.String())
	}
}

// A member the group has not heard for a while is marked with how long, and
// when it will be removed; the others are not. A member shows the last
// SYNC's silences, the server its own live count (Unheard), which drops a
// member heard again since.
func TestStatusShowsSilentMembers(t *testing.T) {
	st := group.Status{Group: "g", Self: 1, Server: 2, Tick: 10 * time.Millisecond,
		LeaseTimeout: 1500 * time.Millisecond, LeaseMargin: 300 * time.Millisecond,
		Members: []group.Member{{ID: 1, Addr: "10.0.0.1:1"}, {ID: 2, Addr: "10.0.0.2:1"}, {ID: 3, Addr: "10.0.0.3:1", Silence: 90}, {ID: 4, Addr: "10.0.0.4:1", Unheard: 64}}}
	for _, c := range []struct {
		server     bool
		shown, not string
	}{
		{false, "node 3  10.0.0.3:1  not heard for 900ms (removed past 1.8s)", "node 4  10.0.0.4:1  not heard"},
		{true, "node 4  10.0.0.4:1  not heard for 640ms (removed past 1.8s)", "node 3  10.0.0.3:1  not heard"},
	} {
		st.IsServer = c.server
		var out bytes.Buffer
		printStatus(&out, viewStatus(st))
		if !strings.Contains(out.String(), c.shown) || strings.Contains(out.String(), c.not) || strings.Count(out.String(), "not heard") != 1 {
			t.Errorf("server %v: want %q and not %q in:\n%s", c.server, c.shown, c.not, out.String())
		}
	}
	st.IsServer = false
	b, err := json.Marshal(viewStatus(st))
	if err != nil || !strings.Contains(string(b), `{"id":3,"addr":"10.0.0.3:1","silent_ms":900}`) || strings.Count(string(b), `"silent_ms"`) != 1 {
		t.Errorf("--json: %v %s", err, b)
	}
}

// status --json prints the lists that are always there as [] when they are
// empty, never null (and datagrams_sent as {}): for a new daemon's view,
// a joining daemon's (which lists nothing) and one decoded from a daemon
// that sent nulls. A lock's queue is left out when empty, as before.
func TestStatusJSONEmptyLists(t *testing.T) {
	var decoded statusView
	if err := json.Unmarshal([]byte(`{"group":"g","members":null,"resources":null,"datagrams_sent":null}`), &decoded); err != nil {
		t.Fatal(err)
	}
	withFreeLock := viewStatus(group.Status{Group: "g", Resources: []group.ResourceInfo{{Name: "x"}}})
	for name, v := range map[string]*statusView{
		"new":           viewStatus(group.Status{Group: "g"}),
		"joining":       {Group: "g", Joining: "no group heard yet"},
		"decoded":       &decoded,
		"with a lock":   withFreeLock,
		"quorum, empty": {Group: "g", Mode: modeQuorum},
	} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(b, &fields); err != nil {
			t.Fatal(err)
		}
		for field, want := range map[string]string{"members": "[]", "resources": "[]", "datagrams_sent": "{}"} {
			if name == "with a lock" && field == "resources" {
				continue
			}
			if got := string(fields[field]); got != want {
				t.Errorf("%s status: %q is %s, want %s: %s", name, field, got, want, b)
			}
		}
		if strings.Contains(string(b), "null") {
			t.Errorf("%s status has a null: %s", name, b)
		}
	}
	// The indented form status --json prints, through the same method.
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetIndent("", "  ")
	if err := enc.Encode(viewStatus(group.Status{Group: "g"})); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "\n  \"members\": [],\n") {
		t.Errorf("status --json:\n%s", out.String())
	}
}
