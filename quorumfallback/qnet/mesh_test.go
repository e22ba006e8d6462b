package qnet

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/mcnode/mcnode/internal/syncbuf"
	qf "github.com/mcnode/mcnode/quorumfallback"
)

const testHello = "mcnode/test/maekawa/fpp/N=4"

// listeners listens on n ports of 127.0.0.1 and returns their addresses,
// so that the peer list is known before any mesh starts.
func listeners(t *testing.T, n int) ([]net.Listener, []string) {
	t.Helper()
	ls := make([]net.Listener, n)
	addrs := make([]string, n)
	for i := range ls {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls[i], addrs[i] = l, l.Addr().String()
	}
	return ls, addrs
}

// freeAddr returns an address nothing listens on, for a node that starts
// later (or never): another process could take the port meanwhile, which
// a test on one machine accepts.
func freeAddr(t *testing.T) string {
	t.Helper()
	ls, addrs := listeners(t, 1)
	ls[0].Close()
	return addrs[0]
}

func testLogger(t *testing.T) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
}

// start starts node self of peers, closed when the test ends.
func start(t *testing.T, self int, peers []string, l net.Listener, log zerolog.Logger) *Mesh {
	t.Helper()
	m, err := Listen(Config{Self: self, Peers: peers, Hello: testHello, Logger: log, DialRetry: 20 * time.Millisecond, Listener: l})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("node %d: Close: %v", self, err)
		}
	})
	return m
}

func frame(from, to int, seq uint64) Frame {
	return Frame{Resource: "r", Msg: qf.Message{Kind: qf.Request, From: from, To: to, Arbiter: from, Seq: seq, Site: qf.None}}
}

// receive takes want frames from t, checking that each sender's Seq
// counts up from 1.
func receive(t *testing.T, tr Transport, self, want int) {
	t.Helper()
	next := map[int]uint64{}
	timeout := time.After(8 * time.Second)
	for got := 0; got < want; got++ {
		select {
		case in, ok := <-tr.Inbound():
			if !ok {
				t.Errorf("node %d: Inbound closed after %d of %d frames", self, got, want)
				return
			}
			m := in.Frame.Msg
			if in.From != m.From || m.To != self {
				t.Errorf("node %d: frame %v delivered as from %d", self, m, in.From)
			}
			if next[in.From]++; m.Seq != next[in.From] {
				t.Errorf("node %d: from %d got seq %d, want %d (lost, duplicated or reordered)", self, in.From, m.Seq, next[in.From])
				return
			}
		case <-timeout:
			t.Errorf("node %d: %d of %d frames after 8s (per sender: %v)", self, got, want, next)
			return
		}
	}
}

// eventually polls cond for up to 5 seconds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 5s: not %s", what)
		}
	}
}

func sum(m map[qf.Kind]uint64) (s uint64) {
	for _, v := range m {
		s += v
	}
	return s
}

func TestMeshFIFO(t *testing.T) {
	const n, per = 4, 1000
	ls, addrs := listeners(t, n)
	ms := make([]*Mesh, n)
	for i := range ms {
		ms[i] = start(t, i, addrs, ls[i], testLogger(t))
	}
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Go(func() {
			for seq := uint64(1); seq <= per; seq++ {
				for j := range n {
					if j != i {
						if err := m.Send(j, frame(i, j, seq)); err != nil {
							t.Errorf("node %d: Send to %d: %v", i, j, err)
							return
						}
					}
				}
			}
		})
		wg.Go(func() { receive(t, m, i, (n-1)*per) })
	}
	wg.Wait()
	for i, m := range ms {
		eventually(t, fmt.Sprintf("node %d sent everything", i), func() bool { return m.Stats().SentFrames[qf.Request] == (n-1)*per })
		s := m.Stats()
		if s.RecvFrames[qf.Request] != (n-1)*per || s.Queued != 0 || s.Lost+s.Malformed+s.BadSender+s.ForeignHello+s.RefusedByPeer+s.Reconnects != 0 {
			t.Errorf("node %d: %+v", i, s)
		}
		if sum(s.SentBytes) == 0 || sum(s.RecvBytes) == 0 {
			t.Errorf("node %d: no bytes counted: %+v", i, s)
		}
		if err := m.WaitConnected(context.Background()); err != nil {
			t.Errorf("node %d: %v", i, err)
		}
	}
}

func TestStartInAnyOrder(t *testing.T) {
	const n, per = 4, 100
	ls, addrs := listeners(t, n-1)
	addrs = append(addrs, freeAddr(t))
	ms := make([]*Mesh, n)
	send := func(i int) {
		for seq := uint64(1); seq <= per; seq++ {
			for j := range n {
				if j != i {
					if err := ms[i].Send(j, frame(i, j, seq)); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	for i := range n - 1 {
		ms[i] = start(t, i, addrs, ls[i], testLogger(t))
		send(i) // queued for node 3, which is not there yet
	}
	time.Sleep(300 * time.Millisecond)
	if s := ms[0].Stats(); s.Queued != per {
		t.Errorf("node 0 has %d frames queued for the missing node, want %d", s.Queued, per)
	}
	ms[3] = start(t, 3, addrs, nil, testLogger(t))
	send(3)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i, m := range ms {
		if err := m.WaitConnected(ctx); err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		wg.Go(func() { receive(t, m, i, (n-1)*per) })
	}
	wg.Wait()
}

func TestHelloMismatch(t *testing.T) {
	ls, addrs := listeners(t, 2)
	var logs [2]syncbuf.Buffer
	ms := make([]*Mesh, 2)
	for i := range ms {
		var err error
		ms[i], err = Listen(Config{Self: i, Peers: addrs, Hello: fmt.Sprintf("mcnode/g/maekawa/N=%d", 2+i), Listener: ls[i],
			Logger: zerolog.New(&logs[i]), DialRetry: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer ms[i].Close()
	}
	for i, m := range ms {
		if err := m.Send(1-i, frame(i, 1-i, 1)); err != nil {
			t.Fatal(err)
		}
	}
	for i, m := range ms {
		eventually(t, fmt.Sprintf("node %d refused and was refused", i), func() bool {
			s := m.Stats()
			return s.ForeignHello > 0 && s.RefusedByPeer > 0
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := ms[0].WaitConnected(ctx); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "[1]") {
		t.Errorf("WaitConnected = %v, want a timeout naming node 1", err)
	}
	for i, m := range ms {
		select {
		case in := <-m.Inbound():
			t.Errorf("node %d received %v across setups", i, in.Frame.Msg)
		default:
		}
		s := m.Stats()
		if s.Queued != 1 || sum(s.SentFrames) != 0 || sum(s.RecvFrames) != 0 {
			t.Errorf("node %d: %+v", i, s)
		}
		select {
		case <-m.Misconfigured():
		default:
			t.Errorf("node %d, refused for another setup, is not marked misconfigured", i)
		}
		log := logs[i].String()
		refused := fmt.Sprintf("peer %d at %s refused: different setup", 1-i, addrs[1-i])
		if !strings.Contains(log, refused) || !strings.Contains(log, "refused a hello: different setup") {
			t.Errorf("node %d's log lacks %q or the refusal it made:\n%s", i, refused, log)
		}
	}
}

// rawHello dials addr and says hello as node idx; it returns the
// connection and the answer.
func rawHello(t *testing.T, addr string, idx uint64, hello string) (net.Conn, byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	msg := append(helloMagic[:0:0], helloMagic[:]...)
	msg = append(msg, binary.AppendUvarint(nil, idx)...)
	msg = binary.AppendUvarint(msg, 7) // the raw client's incarnation
	msg = binary.AppendUvarint(msg, uint64(len(hello)))
	msg = append(msg, hello...)
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	var a [1]byte
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, a[:]); err != nil {
		t.Fatalf("no answer to hello as node %d: %v", idx, err)
	}
	c.SetReadDeadline(time.Time{})
	return c, a[0]
}

// A hello this node refuses, from anywhere, marks nothing: a restarted
// node that lost its place in the list, or a stranger, must not stop a
// healthy node (review). Only the dialler learns it was refused, and a
// hello of another group is answered as such, which marks nothing either:
// a node of another group that took a dead peer's port serves none of
// this group's locks.
func TestMisconfiguredOnlyByTheAnswerToOwnHello(t *testing.T) {
	ls, addrs := listeners(t, 3)
	group := "mcnode/\"g\"/"
	open := func(i int, group, hello string) *Mesh {
		m, err := Listen(Config{Self: i, Peers: addrs, Hello: hello, HelloGroup: group, Listener: ls[i], Logger: testLogger(t), DialRetry: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	m0 := open(0, group, group+"maekawa/N=3")
	for _, idx := range []uint64{0, 5} {
		if _, a := rawHello(t, addrs[0], idx, group+"maekawa/N=3"); a != helloWrongSender {
			t.Fatalf("hello as node %d answered %d", idx, a)
		}
	}
	if _, a := rawHello(t, addrs[0], 1, group+"maekawa/N=4"); a != helloWrongSetup {
		t.Fatalf("hello with another setup answered %d", a)
	}
	if _, a := rawHello(t, addrs[0], 1, `mcnode/"other"/maekawa/N=3`); a != helloWrongGroup {
		t.Fatalf("hello of another group answered %d", a)
	}
	// A node of another group at node 1's address: node 0 dials it.
	open(1, `mcnode/"other"/`, `mcnode/"other"/maekawa/N=3`)
	if err := m0.Send(1, frame(0, 1, 1)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "node 0 refused by the other group's node", func() bool { return m0.Stats().RefusedByPeer > 0 })
	select {
	case <-m0.Misconfigured():
		t.Fatalf("refusals marked the mesh misconfigured: %s", m0.MisconfiguredWhy())
	default:
	}
	// A node of this group with another setup at node 2's address.
	open(2, group, group+"maekawa/N=4")
	if err := m0.Send(2, frame(0, 2, 1)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m0.Misconfigured():
	case <-time.After(5 * time.Second):
		t.Fatal("node 0, refused by a node of its group with another setup, is not marked misconfigured")
	}
	if why := m0.MisconfiguredWhy(); !strings.Contains(why, "node 2") || !strings.Contains(why, "another setup") {
		t.Errorf("MisconfiguredWhy = %q, want node 2 and another setup", why)
	}
}

func TestBadInput(t *testing.T) {
	// Nodes 0 and 1 run; node 2's slot is played by a raw client.
	ls, addrs := listeners(t, 2)
	addrs = append(addrs, freeAddr(t))
	ms := []*Mesh{start(t, 0, addrs, ls[0], testLogger(t)), start(t, 1, addrs, ls[1], testLogger(t))}
	m := ms[0]
	stats := func() Stats { return m.Stats() }
	writeFrame := func(c net.Conn, body []byte) {
		t.Helper()
		if _, err := c.Write(append(binary.AppendUvarint(nil, uint64(len(body))), body...)); err != nil {
			t.Fatal(err)
		}
	}

	// Not a hello at all.
	junk, err := net.Dial("tcp", addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer junk.Close()
	junk.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
	eventually(t, "garbage counted as malformed", func() bool { return stats().Malformed == 1 })
	if !isClosed(junk) {
		t.Error("the garbage connection is still open")
	}

	// Hellos from impossible nodes are refused.
	for _, idx := range []uint64{0, 3, 1 << 40} {
		if _, a := rawHello(t, addrs[0], idx, testHello); a != helloWrongSender {
			t.Errorf("hello as node %d answered %d, want %d", idx, a, helloWrongSender)
		}
	}
	if _, a := rawHello(t, addrs[0], 2, testHello+" "); a != helloWrongSetup {
		t.Errorf("hello with another setup answered %d, want %d", a, helloWrongSetup)
	}
	if s := stats(); s.ForeignHello != 4 {
		t.Errorf("ForeignHello = %d, want 4", s.ForeignHello)
	}

	c, a := rawHello(t, addrs[0], 2, testHello)
	if a != helloAccept {
		t.Fatalf("hello as node 2 answered %d", a)
	}
	forged := frame(1, 0, 1)
	writeFrame(c, bodyOf(t, forged))
	notForMe := frame(2, 1, 1)
	writeFrame(c, bodyOf(t, notForMe))
	eventually(t, "forged frames counted", func() bool { return stats().BadSender == 2 })
	writeFrame(c, okRaw.body()[:3]) // truncated
	writeFrame(c, []byte{9})        // unknown kind
	eventually(t, "malformed frames counted", func() bool { return stats().Malformed == 3 })
	writeFrame(c, bodyOf(t, frame(2, 0, 1)))
	expect(t, m, 2, 1)

	// A second connection as node 2 replaces the first.
	c2, a := rawHello(t, addrs[0], 2, testHello)
	if a != helloAccept {
		t.Fatalf("second hello as node 2 answered %d", a)
	}
	if !isClosed(c) {
		t.Error("the first connection of node 2 is still open")
	}
	writeFrame(c2, bodyOf(t, frame(2, 0, 2)))
	expect(t, m, 2, 2)

	// A length the stream cannot recover from closes the connection.
	c2.Write(binary.AppendUvarint(nil, MaxFrame+1))
	eventually(t, "oversized frame counted", func() bool { return stats().Malformed == 4 })
	if !isClosed(c2) {
		t.Error("the connection that sent an oversized frame is still open")
	}

	// Node 0 still works.
	if err := ms[1].Send(0, frame(1, 0, 1)); err != nil {
		t.Fatal(err)
	}
	expect(t, m, 1, 1)
	if err := m.Send(1, frame(0, 1, 1)); err != nil {
		t.Fatal(err)
	}
	expect(t, ms[1], 0, 1)
	if s := stats(); s.Malformed != 4 || s.BadSender != 2 || s.RecvFrames[qf.Request] != 3 {
		t.Errorf("stats: %+v", s)
	}
}

// expect receives one frame and checks its sender and Seq.
func expect(t *testing.T, tr Transport, from int, seq uint64) {
	t.Helper()
	select {
	case in := <-tr.Inbound():
		if in.From != from || in.Frame.Msg.Seq != seq {
			t.Fatalf("got %v from %d, want seq %d from %d", in.Frame.Msg, in.From, seq, from)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no frame from %d after 5s", from)
	}
}

// isClosed reports whether the mesh closed c: a read ends with EOF or a
// reset rather than the deadline.
func isClosed(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := io.ReadAll(c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// A node that restarts comes back without its protocol state: the nodes
// that kept running refuse it (it may still accept their connections, but
// cannot send them anything), and say why.
func TestRestartedNodeRefused(t *testing.T) {
	ls, addrs := listeners(t, 2)
	m0 := start(t, 0, addrs, ls[0], testLogger(t))
	m1, err := Listen(Config{Self: 1, Peers: addrs, Hello: testHello, Listener: ls[1], Logger: testLogger(t), DialRetry: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Both ways up: node 0 has seen node 1's first incarnation.
	for _, m := range []*Mesh{m0, m1} {
		if err := m.WaitConnected(ctx); err != nil {
			t.Fatal(err)
		}
	}
	m0.Send(1, frame(0, 1, 1))
	expect(t, m1, 0, 1)
	m1.Close()
	eventually(t, "the broken connection counted", func() bool { return m0.Stats().Reconnects == 1 })
	// Node 1 restarts on the same address.
	m1 = start(t, 1, addrs, nil, testLogger(t))
	eventually(t, "the restarted node refused", func() bool {
		return m0.Stats().Restarted >= 1 && m1.Stats().RefusedByPeer >= 1
	})
	if m1.Connected() {
		t.Fatal("the restarted node counts itself connected")
	}
	// Node 0 counts it down: it may still accept node 0's connection, but
	// nothing it sends is taken.
	if !m0.Refusing(1) || m0.Connected() {
		t.Errorf("node 0: Refusing(1) %v, Connected %v: the refused node counts as up", m0.Refusing(1), m0.Connected())
	}
	if up, _ := m0.Backlog(1); up {
		t.Error("node 0's link to the refused node is up")
	}
	m1.Send(0, frame(1, 0, 1))
	select {
	case in := <-m0.Inbound():
		t.Fatalf("node 0 took %+v from the restarted node", in)
	case <-time.After(100 * time.Millisecond):
	}
}

// A hello for a live peer's index with another incarnation (a second node
// started with that index, or anyone's without a key) is refused, and the
// live peer stays up: it counted as down for good (review).
func TestStrayHelloLeavesTheLivePeerUp(t *testing.T) {
	ls, addrs := listeners(t, 2)
	m0 := start(t, 0, addrs, ls[0], testLogger(t))
	m1 := start(t, 1, addrs, ls[1], testLogger(t))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, m := range []*Mesh{m0, m1} {
		if err := m.WaitConnected(ctx); err != nil {
			t.Fatal(err)
		}
	}
	m1.Send(0, frame(1, 0, 1))
	expect(t, m0, 1, 1)
	if _, a := rawHello(t, addrs[0], 1, testHello); a != helloRestarted {
		t.Fatalf("a stray hello as node 1 answered %d, want %d", a, helloRestarted)
	}
	if m0.Refusing(1) || !m0.Connected() || !m0.AdmittedTo([]int{1}) {
		t.Fatalf("after a stray hello: Refusing(1) %v, Connected %v, AdmittedTo %v", m0.Refusing(1), m0.Connected(), m0.AdmittedTo([]int{1}))
	}
	m1.Send(0, frame(1, 0, 2))
	expect(t, m0, 1, 2)
}

func TestCloseStopsEverything(t *testing.T) {
	before := runtime.NumGoroutine()
	ls, addrs := listeners(t, 3)
	addrs = append(addrs, freeAddr(t)) // node 3 never starts: its writers keep dialling
	ms := make([]*Mesh, 3)
	for i := range ms {
		var err error
		if ms[i], err = Listen(Config{Self: i, Peers: addrs, Hello: testHello, Listener: ls[i], DialRetry: 10 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	for i, m := range ms {
		for j := range 4 {
			if j != i {
				m.Send(j, frame(i, j, 1))
			}
		}
	}
	receive(t, ms[0], 0, 2) // from nodes 1 and 2
	// A connection stuck in its hello, and one that said hello and idles.
	idle, err := net.Dial("tcp", addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	idle.Write([]byte("mcq"))
	rawHello(t, addrs[1], 3, testHello)
	// Node 2 does not read its Inbound: its reader for node 0 blocks once
	// the channel is full, and Close must still stop it.
	for seq := uint64(2); seq < InboundBuffer+100; seq++ {
		ms[0].Send(2, frame(0, 2, seq))
	}
	eventually(t, "node 2's Inbound full", func() bool { return len(ms[2].Inbound()) == InboundBuffer })

	for i, m := range ms {
		if err := m.Close(); err != nil {
			t.Errorf("node %d: Close: %v", i, err)
		}
		for range m.Inbound() { // drains what is buffered, then ends
		}
		if err := m.Send((i+1)%3, frame(i, (i+1)%3, 9)); !errors.Is(err, ErrClosed) {
			t.Errorf("node %d: Send after Close = %v, want ErrClosed", i, err)
		}
		if err := m.WaitConnected(context.Background()); !errors.Is(err, ErrClosed) {
			t.Errorf("node %d: WaitConnected after Close = %v, want ErrClosed", i, err)
		}
		if err := m.Close(); err != nil {
			t.Errorf("node %d: second Close: %v", i, err)
		}
	}
	eventually(t, "goroutines back to the count before", func() bool { return runtime.NumGoroutine() <= before })
}

func TestConfigErrors(t *testing.T) {
	ok := Config{Self: 0, Peers: []string{"127.0.0.1:7001", "127.0.0.1:7002"}, Hello: testHello}
	cases := []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"no peers", func(c *Config) { c.Peers = nil }, "no peers"},
		{"negative Self", func(c *Config) { c.Self = -1 }, "Self -1 not in [0, 2)"},
		{"Self past the end", func(c *Config) { c.Self = 2 }, "Self 2 not in [0, 2)"},
		{"no port", func(c *Config) { c.Peers[1] = "127.0.0.1" }, `Peers[1] "127.0.0.1"`},
		{"no host", func(c *Config) { c.Peers[1] = ":7002" }, `Peers[1] ":7002"`},
		{"port 0", func(c *Config) { c.Peers[1] = "h:0" }, `Peers[1] "h:0"`},
		{"port too big", func(c *Config) { c.Peers[1] = "h:65536" }, `Peers[1] "h:65536"`},
		{"duplicate", func(c *Config) { c.Peers[1] = "127.0.0.1:07001" }, `Peers[0] "127.0.0.1:7001" and Peers[1] "127.0.0.1:07001"`},
		{"no hello", func(c *Config) { c.Hello = "" }, "empty Hello"},
		{"long hello", func(c *Config) { c.Hello = strings.Repeat("h", MaxHello+1) }, fmt.Sprintf("Hello of %d bytes", MaxHello+1)},
		{"negative retry", func(c *Config) { c.DialRetry = -time.Second }, "negative DialRetry -1s"},
	}
	for _, c := range cases {
		cfg := ok
		cfg.Peers = append([]string(nil), ok.Peers...)
		c.change(&cfg)
		if m, err := Listen(cfg); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
			if m != nil {
				m.Close()
			}
			t.Errorf("%s: Listen = %v, want ErrConfig saying %q", c.name, err, c.want)
		}
	}
}

func TestSendErrors(t *testing.T) {
	ls, addrs := listeners(t, 3)
	ls[1].Close()
	ls[2].Close()
	m := start(t, 0, addrs, ls[0], zerolog.Nop())
	// A single node needs no connection.
	solo := start(t, 0, []string{freeAddr(t)}, nil, zerolog.Nop())
	if err := solo.WaitConnected(context.Background()); err != nil {
		t.Errorf("single node: WaitConnected = %v", err)
	}
	ends := NewMemNetwork(3)
	defer func() {
		for _, e := range ends[1:] {
			e.Close()
		}
	}()
	for _, tr := range []Transport{m, ends[0]} {
		for _, to := range []int{-1, 0, 3} {
			if err := tr.Send(to, frame(0, to, 1)); !errors.Is(err, ErrNoPeer) || !strings.Contains(err.Error(), fmt.Sprintf("node %d (N=3, self 0)", to)) {
				t.Errorf("%T: Send to %d = %v, want ErrNoPeer", tr, to, err)
			}
		}
		if err := tr.Send(1, frame(2, 1, 1)); !errors.Is(err, ErrInvalidFrame) {
			t.Errorf("%T: Send of another node's message = %v, want ErrInvalidFrame", tr, err)
		}
		if err := tr.Send(1, frame(0, 2, 1)); !errors.Is(err, ErrInvalidFrame) {
			t.Errorf("%T: Send of a message for another node = %v, want ErrInvalidFrame", tr, err)
		}
		bad := frame(0, 1, 1)
		bad.Resource = strings.Repeat("r", MaxResource+1)
		if err := tr.Send(1, bad); !errors.Is(err, ErrInvalidFrame) {
			t.Errorf("%T: Send of a long resource name = %v, want ErrInvalidFrame", tr, err)
		}
		tr.Close()
	}
	if s := m.Stats(); s.Queued != 0 {
		t.Errorf("rejected frames were queued: %+v", s)
	}
}

func TestMem(t *testing.T) {
	const n, per = 3, 2000 // more than InboundBuffer: Send must not wait
	ends := NewMemNetwork(n)
	for i, e := range ends {
		for seq := uint64(1); seq <= per; seq++ {
			for j := range n {
				if j != i {
					if err := e.Send(j, frame(i, j, seq)); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	var wg sync.WaitGroup
	for i, e := range ends {
		wg.Go(func() { receive(t, e, i, (n-1)*per) })
	}
	wg.Wait()
	ends[1].Close()
	if err := ends[0].Send(1, frame(0, 1, 1)); err != nil {
		t.Errorf("Send to a closed end = %v, want nil (discarded)", err)
	}
	if err := ends[1].Send(0, frame(1, 0, 1)); !errors.Is(err, ErrClosed) {
		t.Errorf("Send from a closed end = %v, want ErrClosed", err)
	}
	if _, ok := <-ends[1].Inbound(); ok {
		t.Error("Inbound of a closed end is open")
	}
	ends[0].Close()
	ends[2].Close()
}

// A stream of connections that do not open with a hello is counted whole
// and warned of once (then at most once a minute): without a key any host may
// open them, and each wrote a warning (3,000 grew a log by 737 KB). A
// stranger of another kind is still logged at once.
func TestStrangersLoggedSparingly(t *testing.T) {
	var log syncbuf.Buffer
	ls, peers := listeners(t, 1)
	// At info, as a daemon logs: the rest go to debug.
	m := start(t, 0, peers, ls[0], zerolog.New(&log).Level(zerolog.InfoLevel))
	send := func(b []byte) {
		t.Helper()
		c, err := net.Dial("tcp", peers[0])
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write(b)
		c.Close()
	}
	const strangers = 50
	for i := range strangers {
		send([]byte("GET / HTTP/1.0\r\n\r\n"))
		eventually(t, "the stranger counted as malformed", func() bool { return m.Stats().Malformed == uint64(i+1) })
	}
	if n := strings.Count(log.String(), "does not open with a qnet hello"); n != 1 {
		t.Errorf("%d strangers logged %d times, want once:\n%s", strangers, n, log.String())
	}
	// A hello cut short: news of another kind.
	send(helloMagic[:2])
	eventually(t, "the cut hello counted", func() bool { return m.Stats().Malformed == strangers+1 })
	if !strings.Contains(log.String(), "closed during its hello") {
		t.Errorf("a hello cut short after %d strangers of another kind was not logged:\n%s", strangers, log.String())
	}
}

// Stranger news of a kind is logged at once, then at most once every
// newsEvery, with the number left unlogged meanwhile.
func TestNewsEvery(t *testing.T) {
	now := time.Unix(1000, 0)
	n := news{now: func() time.Time { return now }}
	if _, ok := n.allow(newsNoHello); !ok {
		t.Fatal("the first news of a kind was not logged")
	}
	for range 3 {
		if _, ok := n.allow(newsNoHello); ok {
			t.Fatal("news within newsEvery of the last logged was logged")
		}
	}
	if _, ok := n.allow(newsBadHello); !ok {
		t.Fatal("the first news of another kind was not logged")
	}
	now = now.Add(newsEvery)
	if skipped, ok := n.allow(newsNoHello); !ok || skipped != 3 {
		t.Fatalf("after newsEvery: logged %v with %d unlogged, want logged with 3", ok, skipped)
	}
}
