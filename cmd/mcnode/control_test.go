package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/mcnode/mcnode"
	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/quorumfallback/node"
)

// TestPrivateDir: the control socket's directory is trusted only where no
// other user can have put a socket.
func TestPrivateDir(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("skipped: the cases need directories owned by other users; run as root")
	}
	base := t.TempDir() // owned by root, 0700
	mk := func(name string, mode os.FileMode, uid int) string {
		t.Helper()
		p := filepath.Join(base, name)
		if err := os.Mkdir(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
		return p
	}
	own := mk("own", 0o700, 0)
	service := mk("service", 0o750, 4242) // like /run/mcnode: another user's, under a root-only directory
	open := mk("open", 0o777, 0)
	shared := mk("shared", 0o1777, 0) // like /tmp
	planted := filepath.Join(shared, "planted")
	if err := os.Mkdir(planted, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(planted, 4242, 4242); err != nil { // another user's, in /tmp
		t.Fatal(err)
	}
	groupWritable := mk("gw", 0o770, 4242)
	for dir, ok := range map[string]bool{own: true, service: true, open: false, planted: false, groupWritable: false, filepath.Join(base, "missing"): false} {
		err := privateDir(dir)
		if (err == nil) != ok {
			t.Errorf("privateDir(%s) = %v, want ok=%v", filepath.Base(dir), err, ok)
		}
		if err != nil && !ok && filepath.Base(dir) != "missing" && !errors.Is(err, errUnsafeSocketDir) {
			t.Errorf("privateDir(%s) = %v, want errUnsafeSocketDir", filepath.Base(dir), err)
		}
	}
}

// fakeLocker is a daemon's node for the control socket's tests: it grants
// every lock at once, or, with noQuorum, reaches no majority (its requests
// wait for ever, as a real node's Acquire does; with noAnswer too, a try
// fails at once, as a multicast node's TryAcquire does once it knows), or,
// with failed, was declared failed by its quorum-mode peers (its requests
// fail, as a real node's do: with node.ErrFailed, or node.ErrClosed once
// it has closed).
type fakeLocker struct {
	noQuorum bool
	noAnswer bool
	failed   bool
	closed   bool
	released chan string
}

// stopped is closed for a failed node, as a quorum-mode node's Done.
func (f *fakeLocker) stopped() <-chan struct{} {
	c := make(chan struct{})
	if f.failed {
		close(c)
	}
	return c
}

type fakeLease struct {
	name     string
	lost     chan struct{}
	released chan string
	once     sync.Once
}

func (l *fakeLease) Name() string                    { return l.name }
func (l *fakeLease) Token() uint64                   { return 7 }
func (l *fakeLease) Lost() <-chan struct{}           { return l.lost }
func (l *fakeLease) Err() error                      { return nil }
func (l *fakeLease) TimeLeft() (time.Duration, bool) { return 0, false }
func (l *fakeLease) Release() error {
	l.once.Do(func() { l.released <- l.name })
	return nil
}

func (f *fakeLocker) acquire(ctx context.Context, name string, try bool) (mcnode.Lease, error) {
	if f.failed && f.closed {
		return nil, node.ErrClosed
	}
	if f.failed {
		return nil, node.ErrFailed
	}
	if f.noQuorum && f.noAnswer && try {
		return nil, &group.NoQuorumError{Err: group.ErrNoAnswer, Quorum: group.Quorum{Reachable: 1, Members: 2}}
	}
	if f.noQuorum {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &fakeLease{name: name, lost: make(chan struct{}), released: f.released}, nil
}

func (f *fakeLocker) status() (*statusView, error) {
	if f.noQuorum {
		return &statusView{QuorumText: "no quorum: 1 of 2 members reachable"}, nil
	}
	return &statusView{QuorumHeld: true}, nil
}

func (f *fakeLocker) leave(context.Context) error { return nil }

// serveFake serves g on a control socket in a temporary directory and
// returns its path.
func serveFake(t *testing.T, g locker) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "c.sock")
	l, err := listen(path, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go serveControl(l, g, nil, zerolog.Nop())
	return path
}

func dialFake(t *testing.T, path string) *daemonClient {
	t.Helper()
	d, err := dialDaemon(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	_ = d.conn.SetDeadline(time.Now().Add(10 * time.Second))
	return d
}

// TestLockConnectionReleasesOnlyOnRelease: what the command under a lock
// writes to the connection it inherited does not release the lock (a
// reviewer's script wrote "log" to descriptor 3 and the next holder entered
// while it ran); a release, or the connection's end, does.
func TestLockConnectionReleasesOnlyOnRelease(t *testing.T) {
	f := &fakeLocker{released: make(chan string, 4)}
	path := serveFake(t, f)
	for _, end := range []string{"release", "close"} {
		d := dialFake(t, path)
		if err := d.send(request{Op: "lock", Name: end}); err != nil {
			t.Fatal(err)
		}
		if r, err := d.receive(); err != nil || !r.OK {
			t.Fatalf("lock: %+v, %v", r, err)
		}
		junk := []string{"log\n", `{"op":"lock","name":"x"}` + "\n", strings.Repeat("y", 3*maxRequestLine) + "\n", "{not json\n"}
		for _, j := range junk {
			if _, err := d.conn.Write([]byte(j)); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case name := <-f.released:
			t.Fatalf("lock %q released by lines that are no release", name)
		case <-time.After(200 * time.Millisecond):
		}
		if end == "release" {
			if err := d.send(request{Op: "release"}); err != nil {
				t.Fatal(err)
			}
		} else {
			d.Close()
		}
		select {
		case name := <-f.released:
			if name != end {
				t.Fatalf("released %q, want %q", name, end)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("lock %q not released on its %s", end, end)
		}
	}
}

// failingListener fails its first failures accepts, as a listener does
// when the process is out of file descriptors, then accepts for real.
type failingListener struct {
	net.Listener
	failures atomic.Int32
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.failures.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "unix", Err: syscall.EMFILE}
	}
	return l.Listener.Accept()
}

// TestControlSocketSurvivesAcceptFailures: a daemon out of file
// descriptors goes on serving once some are free again (it used to stop
// accepting for good, and every client then hung).
func TestControlSocketSurvivesAcceptFailures(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.sock")
	l, err := listen(path, "")
	if err != nil {
		t.Fatal(err)
	}
	fl := &failingListener{Listener: l}
	fl.failures.Store(5)
	t.Cleanup(func() { l.Close() })
	var logged strings.Builder
	var mu sync.Mutex
	log := zerolog.New(zerolog.SyncWriter(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logged.Write(p)
	})))
	go serveControl(fl, &fakeLocker{released: make(chan string, 1)}, nil, log)
	d := dialFake(t, path)
	if err := d.send(request{Op: "status"}); err != nil {
		t.Fatal(err)
	}
	if r, err := d.receive(); err != nil || !r.OK {
		t.Fatalf("status after failed accepts: %+v, %v", r, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if fl.failures.Load() >= 0 {
		t.Fatalf("the listener failed only %d of its 5 accepts", 5-fl.failures.Load()-1)
	}
	if !strings.Contains(logged.String(), "accepting a client failed") || !strings.Contains(logged.String(), "accepting clients again") {
		t.Errorf("the daemon's log does not tell of the failed accepts and the recovery:\n%s", logged.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestControlRequestBounds: a request line over maxRequestLine is refused
// without being kept, and a client that sends nothing is disconnected.
func TestControlRequestBounds(t *testing.T) {
	path := serveFake(t, &fakeLocker{released: make(chan string, 1)})
	d := dialFake(t, path)
	go func() { _, _ = d.conn.Write([]byte(strings.Repeat("z", 2*maxRequestLine) + "\n")) }()
	if r, err := d.receive(); err != nil || !strings.Contains(r.Error, "over") {
		t.Fatalf("an oversized request: %+v, %v; want an error saying it is too long", r, err)
	}
	if testing.Short() {
		return
	}
	idle := dialFake(t, path)
	start := time.Now()
	if _, err := idle.receive(); err == nil {
		t.Fatal("an idle client got an answer")
	}
	if waited := time.Since(start); waited < requestTimeout-time.Second {
		t.Fatalf("an idle client was dropped after %v, before requestTimeout", waited)
	}
}

// TestNonblockWithoutQuorumIsBounded: --nonblock through a daemon that
// reaches no majority fails within tryTimeout, saying why (it waited for
// ever).
func TestNonblockWithoutQuorumIsBounded(t *testing.T) {
	defer func(d time.Duration) { tryTimeout = d }(tryTimeout)
	tryTimeout = 200 * time.Millisecond
	path := serveFake(t, &fakeLocker{noQuorum: true})
	d := dialFake(t, path)
	_ = d.conn.SetDeadline(time.Now().Add(2 * time.Second))
	if err := d.send(request{Op: "lock", Name: "x", Try: true}); err != nil {
		t.Fatal(err)
	}
	r, err := d.receive()
	if err != nil || r.OK || !strings.Contains(r.Error, "no answer from the group's server") || !strings.Contains(r.Error, "no quorum") {
		t.Fatalf("--nonblock without a majority: %+v, %v; want an error within tryTimeout naming the missing quorum", r, err)
	}
}

// A lock that waits for a reason other than its holders (here no majority)
// says why once, stillWaitingAfter into the wait, without --timeout as with
// it: it waited silently for as long as that lasted (black-box round).
func TestLockSaysWhyItStillWaits(t *testing.T) {
	path := serveFake(t, &fakeLocker{noQuorum: true})
	out, code := mcnodeLocalIn("", nil, "lock", "--socket", path, "--timeout", (stillWaitingAfter + 2*time.Second).String(), "x", "--", "true")
	note := fmt.Sprintf("mcnode lock: still waiting for lock \"x\" after %v: no quorum: 1 of 2 members reachable", stillWaitingAfter)
	if code != exitNotAcquired || strings.Count(out, note) != 1 || !strings.Contains(out, "timed out after") {
		t.Fatalf("status %d, output:\n%s\nwant status %d, the note %q once, and the timeout", code, out, exitNotAcquired, note)
	}
}

// TestNonblockWithoutQuorumNodeGivesUp: --nonblock through a daemon whose
// node gives up on its own (a multicast TryAcquire that knows it reaches no
// majority) fails at once, saying why, rather than as a locked lock or a
// bare node error.
func TestNonblockWithoutQuorumNodeGivesUp(t *testing.T) {
	defer func(d time.Duration) { tryTimeout = d }(tryTimeout)
	tryTimeout = time.Minute
	path := serveFake(t, &fakeLocker{noQuorum: true, noAnswer: true})
	d := dialFake(t, path)
	_ = d.conn.SetDeadline(time.Now().Add(5 * time.Second))
	if err := d.send(request{Op: "lock", Name: "x", Try: true}); err != nil {
		t.Fatal(err)
	}
	r, err := d.receive()
	if err != nil || r.OK || r.Locked || !strings.HasPrefix(r.Error, "no answer from the group's server") || !strings.Contains(r.Error, "no quorum: 1 of 2 members reachable") {
		t.Fatalf("--nonblock when the node gives up: %+v, %v; want at once an error naming the missing quorum", r, err)
	}
}

// TestLockWaitsForTheDaemonToJoin: a lock asked for while the daemon is
// still joining waits until it is a member (it failed at once with exit 1,
// though the default is to wait); --nonblock and status are answered at
// once with why not.
func TestLockWaitsForTheDaemonToJoin(t *testing.T) {
	j := &joining{why: "joining (no member has answered yet)"}
	path := serveFake(t, j)
	st := dialFake(t, path)
	if err := st.send(request{Op: "status"}); err != nil {
		t.Fatal(err)
	}
	if r, err := st.receive(); err != nil || !strings.Contains(r.Error, "not a member") {
		t.Fatalf("status while joining: %+v, %v", r, err)
	}
	try := dialFake(t, path)
	if err := try.send(request{Op: "lock", Name: "x", Try: true}); err != nil {
		t.Fatal(err)
	}
	if r, err := try.receive(); err != nil || !strings.Contains(r.Error, "not a member") {
		t.Fatalf("--nonblock while joining: %+v, %v", r, err)
	}
	d := dialFake(t, path)
	if err := d.send(request{Op: "lock", Name: "x"}); err != nil {
		t.Fatal(err)
	}
	got := make(chan response, 1)
	go func() { r, _ := d.receive(); got <- r }()
	grantedOnceServing(t, j, got, "the daemon joined")
}

// grantedOnceServing checks that the lock answer got brings comes only once
// j serves a node that grants it (stored here), and then: when names that
// moment.
func grantedOnceServing(t *testing.T, j *joining, got <-chan response, when string) {
	t.Helper()
	select {
	case r := <-got:
		t.Fatalf("a lock was answered before %s: %+v", when, r)
	case <-time.After(300 * time.Millisecond):
	}
	var g locker = &fakeLocker{released: make(chan string, 1)}
	j.ready.Store(&g)
	select {
	case r := <-got:
		if !r.OK || r.Token != 7 {
			t.Fatalf("the lock once %s: %+v", when, r)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the lock was not granted once %s", when)
	}
}

// TestStatusWhileJoining: a daemon that is not a member yet answers a
// status request with an error, as before (scripts wait on it), and with
// the status of its node: what it waits for, since when, and what it
// dropped, explained; its metrics carry the drop counts, with mcnode_up 0.
func TestStatusWhileJoining(t *testing.T) {
	j := &joining{why: "waiting for the group: this host was a member"}
	j.watch(func() (group.Status, error) {
		return group.Status{Group: "g", Addr: "10.0.0.9:5000", CannotRead: true, Stats: group.Stats{Received: 12,
			Drops: map[string]uint64{group.DropUnknownKey: 11, group.DropMalformed: 1}},
			// What a node admitted, and not yet greeted, knows: no
			// member's view, and not shown as one.
			Members: []group.Member{{ID: 3}}, Resources: []group.ResourceInfo{{Name: "db", Holder: 3}}}, nil
	})
	d := dialFake(t, serveFake(t, j))
	v, err := d.status()
	var je *joiningError
	if !errors.As(err, &je) || v == nil || !strings.Contains(err.Error(), "not a member of the group yet: the group's datagrams arrive, and this node cannot read them; waiting for the group: this host was a member") {
		t.Fatalf("status while joining: %+v, %v; want the status and why it is not a member", v, err)
	}
	if v.Drops[group.DropUnknownKey] != 11 || v.Received != 12 || v.Dropped != 12 {
		t.Errorf("the joining status lost its counts: %+v", v)
	}
	if len(v.Members) != 0 || len(v.Resources) != 0 || v.Error != err.Error()[len("daemon: "):] {
		t.Errorf("the joining status shows members %v or locks %v as a member's, or lacks the error (%q): %+v", v.Members, v.Resources, v.Error, v)
	}
	var out strings.Builder
	printStatus(&out, v)
	for _, want := range []string{"group g  not a member yet, for ", "the group's datagrams arrive, and this node cannot read them; waiting for the group: this host was a member",
		"this node: 10.0.0.9:5000", "12 received, 12 dropped (malformed 1, unknown-key 11)",
		"unknown-key: the group's datagrams come sealed with a key this node does not hold"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("printed status lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "members (") || strings.Contains(out.String(), "needs-key:") {
		t.Errorf("printed status of a joining daemon shows members or a drop it did not have:\n%s", out.String())
	}
	if _, err := j.acquire(context.Background(), "x", true); err == nil || !strings.Contains(err.Error(), "this node cannot read them") {
		t.Errorf("--nonblock while joining: %v", err)
	}

	ml, err := newMetrics(j).serve("127.0.0.1:0", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer ml.Close()
	m := scrape(t, "http://"+ml.Addr().String()+"/metrics")
	if m["mcnode_up"] != 0 || m[`mcnode_dropped_total{reason="unknown-key"}`] != 11 {
		t.Errorf("metrics while joining: up %v, unknown-key drops %v", m["mcnode_up"], m[`mcnode_dropped_total{reason="unknown-key"}`])
	}

	// Joined, and not yet serving: still not a member to its clients
	// (a lock would be refused), and says so.
	j.watch(func() (group.Status, error) { return group.Status{Joined: true, HeardGroup: true}, nil })
	if v, err := dialFake(t, serveFake(t, j)).status(); v == nil || !errors.As(err, &je) || !strings.Contains(err.Error(), "joined the group; about to serve local clients") {
		t.Errorf("status of a node joined and not yet served: %+v, %v", v, err)
	}

	// Once its node fails (Join gave up), the daemon says why it is not
	// a member, without a status.
	j.watch(func() (group.Status, error) { return group.Status{}, errors.New("closed") })
	if v, err := dialFake(t, serveFake(t, j)).status(); v != nil || err == nil || !strings.Contains(err.Error(), "not a member of the group yet: waiting for the group: this host was a member") {
		t.Errorf("status of a node that gave up joining: %+v, %v", v, err)
	}
}

// TestJoinPhase: what a node that is not a member yet waits for.
func TestJoinPhase(t *testing.T) {
	for _, c := range []struct {
		st   group.Status
		want string
	}{
		{group.Status{}, "no member of the group heard yet"},
		{group.Status{CannotRead: true}, "the group's datagrams arrive, and this node cannot read them"},
		// Another newcomer's request it cannot read is no running group.
		{group.Status{Stats: group.Stats{Drops: map[string]uint64{group.DropUnknownKey: 1}}}, "no member of the group heard yet"},
		{group.Status{HeardGroup: true}, "the group answered; waiting to be admitted and given its state"},
		{group.Status{HeardGroup: true, Members: []group.Member{{ID: 1}, {ID: 2}}}, "admitted, with the group's state; waiting for every member's greeting"},
		{group.Status{HeardGroup: true, Joined: true, Members: []group.Member{{ID: 1}, {ID: 2}}}, "joined the group; about to serve local clients"},
	} {
		if got := joinPhase(c.st); got != c.want {
			t.Errorf("joinPhase(%+v) = %q, want %q", c.st, got, c.want)
		}
	}
}

// TestControlLockNames: the daemon refuses the lock names mcnode lock
// refuses, with its words, to a client that is not mcnode lock. A name that
// was not UTF-8 in the request (bytes, or an escape of half a surrogate
// pair) was granted as the U+FFFD encoding/json put in its place, so that
// different names were one lock; an empty one got the wire format's error.
// Names that only look like those are granted as sent.
func TestControlLockNames(t *testing.T) {
	f := &fakeLocker{released: make(chan string, 8)}
	path := serveFake(t, f)
	ask := func(line string) response {
		t.Helper()
		d := dialFake(t, path)
		if _, err := d.conn.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
		r, err := d.receive()
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		d.Close() // which releases a lock granted
		return r
	}
	for _, tc := range []struct{ line, name string }{
		{`{"op":"lock","name":"\ufffd"}`, "\ufffd"},
		{`{"op":"lock","name":"` + "\ufffd\ufffd" + `"}`, "\ufffd\ufffd"},
		{`{"op":"lock","name":"\ud83d\ude00\ufffd"}`, "\U0001F600\ufffd"},
		{`{"op":"lock","name":"\\ud800\ufffd"}`, `\ud800` + "\ufffd"}, // a backslash, not an escape
		{`{"op":"lock","name":"` + strings.Repeat("n", maxLockName) + `"}`, strings.Repeat("n", maxLockName)},
	} {
		if r := ask(tc.line); !r.OK {
			t.Errorf("%q: %+v; want it granted", tc.line, r)
			continue
		}
		select {
		case name := <-f.released:
			if name != tc.name {
				t.Errorf("%q: granted %q, want %q", tc.line, name, tc.name)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%q: not released when its client went", tc.line)
		}
	}
	for _, tc := range []struct{ line, want string }{
		{`{"op":"lock","name":"` + "\xff\xfe" + `"}`, `lock name "\xff\xfe" is not valid UTF-8: every member must be able to read it`},
		{`{"op":"lock","name":"\ud800"}`, `lock name "\xed\xa0\x80" is not valid UTF-8`},
		{`{"op":"lock","name":"\udc00\ud800"}`, "is not valid UTF-8"},
		{`{"op":"lock","name":"a\ud800\u0041"}`, "is not valid UTF-8"},
		{`{"op":"lock","name":"` + "\xef\xbf" + `"}`, "is not valid UTF-8"}, // U+FFFD cut short
		{`{"op":"lock","name":""}`, "the lock name is empty"},
		{`{"op":"lock"}`, "the lock name is empty"},
		{`{"op":"lock","name":"` + "\xff" + `","name":null}`, "given once, as a JSON string"},
		{`{"op":"lock","name":"\ud800","Name":null}`, "given once, as a JSON string"},
		{`{"op":"lock","name":"` + strings.Repeat("n", maxLockName+1) + `"}`, "longer than the limit"},
	} {
		if r := ask(tc.line); r.OK || !strings.Contains(r.Error, tc.want) {
			t.Errorf("%q: %+v; want it refused with %q", tc.line, r, tc.want)
		}
	}
}

// FuzzSentName: sentName never panics on a request line, and a line made
// from any name (its bytes as they are, but for the escapes JSON needs)
// gives back that name exactly: bytes that are not UTF-8 included, which
// encoding/json replaces.
func FuzzSentName(f *testing.F) {
	for _, s := range []string{
		`{"op":"lock","name":"\ufffd"}`, `{"op":"lock","name":"\ud800"}`, `{"op":"lock","name":"\ud83d\ude00\ud800"}`,
		"{\"op\":\"lock\",\"name\":\"\xff\xfe\"}", `{"name":"a\\u0000\ud800\\"}`, `{"name":1}`, `{"NAME":"\udc00x","name":null}`,
	} {
		f.Add([]byte(s), []byte("\xff\"\\\x00\ufffd\n"))
	}
	f.Fuzz(func(t *testing.T, line, name []byte) {
		var req request
		if json.Unmarshal(line, &req) == nil {
			_, _ = sentName(line, req.Name)
		}
		var built []byte
		for _, b := range name {
			switch {
			case b == '"' || b == '\\':
				built = append(built, '\\', b)
			case b < 0x20:
				built = fmt.Appendf(built, "\\u%04x", b)
			default:
				built = append(built, b)
			}
		}
		line = append(append([]byte(`{"op":"lock","name":"`), built...), `"}`...)
		if err := json.Unmarshal(line, &req); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if got, err := sentName(line, req.Name); err != nil || got != string(name) {
			t.Fatalf("line %q: sentName %q, %v; want %q", line, got, err, name)
		}
	})
}

// A lock client waiting when its quorum-mode node is declared failed (cut
// off, say) waits on for the node mcnode run starts anew, and gets the
// lock from it: it used to fail at once, "its locks are lost", with its
// --timeout far from over. --nonblock still says so at once.
func TestLockWaitsForTheRestartedNode(t *testing.T) {
	// Asked while it fails its waiters, or once it has closed.
	for _, closed := range []bool{false, true} {
		t.Run(fmt.Sprintf("closed=%v", closed), func(t *testing.T) { lockWaitsForTheRestartedNode(t, closed) })
	}
}

func lockWaitsForTheRestartedNode(t *testing.T, closed bool) {
	j := &joining{group: "g"}
	var failed locker = &fakeLocker{failed: true, closed: closed}
	j.ready.Store(&failed)
	path := serveFake(t, j)
	d := dialFake(t, path)
	defer d.Close()
	if err := d.send(request{Op: "lock", Name: "x", Try: true}); err != nil {
		t.Fatal(err)
	}
	if r, err := d.receive(); err != nil || r.OK || !strings.Contains(r.Error, "declared failed") && !strings.Contains(r.Error, "closed") {
		t.Fatalf("--nonblock on a failed node: %+v, %v; want the failure at once", r, err)
	}
	got := make(chan response, 1)
	go func() {
		d := dialFake(t, path)
		defer d.Close()
		if err := d.send(request{Op: "lock", Name: "x"}); err != nil {
			t.Error(err)
		}
		r, err := d.receive()
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	grantedOnceServing(t, j, got, "the node was started anew")
}

// A --nonblock lock asked as the daemon becomes a member gets a lease or
// an error, never neither: the daemon would dereference the missing lease
// and crash (found by review, with ready flipped as here).
func TestTryAsTheDaemonJoins(t *testing.T) {
	j := &joining{group: "g"}
	var member locker = &fakeLocker{}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			j.ready.Store(&member)
			j.ready.Store(nil)
		}
	}()
	for i := range 200000 {
		l, err := j.acquire(context.Background(), "x", true)
		if l == nil && err == nil {
			t.Fatalf("call %d: neither a lease nor an error", i)
		}
	}
}

// A daemon started on a socket another daemon serves is refused, and told
// which group serves there: it was told "a daemon for this group" even when
// that one served another group (black-box round). A daemon that does not
// say (stopped, say) is named by no group.
func TestNotServedNamesTheGroup(t *testing.T) {
	member := &joining{group: "a"}
	var l locker = &fakeLocker{released: make(chan string, 1)}
	member.ready.Store(&l)
	for _, tc := range []struct {
		what  string
		g     locker
		group string
		want  string
	}{
		{"a member of the group", member, "a", "a daemon for this group already serves "},
		{"a member of another group", member, "b", `a daemon of group "a" already serves `},
		// A quorum-mode daemon still joining has no status to show.
		{"a daemon of another group still joining", &joining{group: "q"}, "b", `a daemon of group "q" already serves `},
		{"a daemon that does not say its group", &fakeLocker{released: make(chan string, 1)}, "b", "a daemon already serves "},
	} {
		path := serveFake(t, tc.g)
		err := notServed(path, tc.group)
		if err == nil || !strings.Contains(err.Error(), tc.want+path) {
			t.Errorf("%s at %s, a daemon of group %q starting: %v; want %q", tc.what, path, tc.group, err, tc.want+path)
		}
	}
	// One that accepts and never answers (stopped) is refused too, in
	// about servedTimeout.
	dir := t.TempDir()
	path := filepath.Join(dir, "c.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	start := time.Now()
	if err := notServed(path, "b"); err == nil || !strings.Contains(err.Error(), "a daemon already serves "+path) {
		t.Errorf("a daemon that does not answer: %v", err)
	}
	if took := time.Since(start); took > servedTimeout+time.Second {
		t.Errorf("a daemon that does not answer held the start %v", took)
	}
	ln.Close()
	// A socket nobody listens on any more is no daemon.
	if err := notServed(path, "b"); err != nil {
		t.Errorf("a stale socket: %v", err)
	}
	if err := notServed(filepath.Join(dir, "none.sock"), "b"); err != nil {
		t.Errorf("no socket: %v", err)
	}
}
