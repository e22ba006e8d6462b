package qnet

// A frame for a peer's new incarnation must not be written on the
// still-open connection to the incarnation put down: a partition leaves it
// half-open, and what is written on it is lost, with no failure declared.

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/mcnode/mcnode/internal/syncbuf"
	q "github.com/mcnode/mcnode/quorumfallback"
)

// blackProxy forwards to a settable target; blacken makes the open
// connections drop everything, both ways, without passing closes on.
type blackProxy struct {
	l      net.Listener
	mu     sync.Mutex
	target string
	conns  []*blackConn
}

type blackConn struct {
	c, d  net.Conn
	black atomic.Bool
}

func newBlackProxy(t *testing.T) *blackProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &blackProxy{l: l}
	t.Cleanup(func() { l.Close(); p.closeBlack(true) })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			target := p.target
			p.mu.Unlock()
			d, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			x := &blackConn{c: c, d: d}
			p.mu.Lock()
			p.conns = append(p.conns, x)
			p.mu.Unlock()
			go blackPipe(d, c, &x.black)
			go blackPipe(c, d, &x.black)
		}
	}()
	return p
}

func blackPipe(dst, src net.Conn, black *atomic.Bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !black.Load() {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			if !black.Load() {
				dst.Close()
			}
			return
		}
	}
}

func (p *blackProxy) setTarget(t string) { p.mu.Lock(); p.target = t; p.mu.Unlock() }

func (p *blackProxy) blacken() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, x := range p.conns {
		x.black.Store(true)
	}
}

// closeBlack ends the black connections (all, if all): a RST at last.
func (p *blackProxy) closeBlack(all bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, x := range p.conns {
		if all || x.black.Load() {
			x.c.Close()
			x.d.Close()
		}
	}
}

// TestFrameForNewIncarnationNotLostOnStaleLink: node 1's connection to
// node 0 goes silent and stays open (a partition); node 1 refuses and puts
// node 0 down, node 0 starts anew and node 1 takes the new incarnation;
// a request then sent to node 0 must reach it. It was written on the
// silent connection and lost, and once that connection broke, the break
// was charged to the old incarnation: nothing ever suspected the new one,
// and a quorum lock stalled for good (found on real daemons).
func TestFrameForNewIncarnationNotLostOnStaleLink(t *testing.T) {
	const hello = "stale-test"
	hb := 50 * time.Millisecond
	proxy := newBlackProxy(t)
	la, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l0, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	proxy.setTarget(l0.Addr().String())
	// Node 1 (a) reaches node 0 through the proxy; node 0 reaches a directly.
	a, err := Listen(Config{Self: 1, Peers: []string{proxy.l.Addr().String(), la.Addr().String()}, Hello: hello, Listener: la, Heartbeat: hb})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	old, err := Listen(Config{Self: 0, Peers: []string{l0.Addr().String(), la.Addr().String()}, Hello: hello, Listener: l0, Heartbeat: hb})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	if err := old.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			if ctx.Err() != nil {
				t.Fatalf("never: %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	oldInc := old.SelfIncarnation()
	waitFor("a takes node 0's first incarnation", func() bool { return a.Incarnation(0) == oldInc })

	// The partition: a's connection to node 0 goes silent, and stays open.
	proxy.blacken()
	// What the runtime does: suspect (Refuse), then a lease later put down
	// (Down on the machines, Forget).
	a.Refuse(0, oldInc)
	a.Forget(0, oldInc)
	// Node 0 learns it was declared failed and comes back anew.
	old.Close()
	l1, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	proxy.setTarget(l1.Addr().String())
	next, err := Listen(Config{Self: 0, Peers: []string{l1.Addr().String(), la.Addr().String()}, Hello: hello, Listener: l1, Heartbeat: hb})
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	newInc := next.SelfIncarnation()
	waitFor("a takes node 0's new incarnation", func() bool { return a.Incarnation(0) == newInc })
	// The runtime puts it up (Up on the machines) and asks it.
	req := Frame{Resource: "shared", Msg: q.Message{Kind: q.Request, From: 1, To: 0, Arbiter: 0, Seq: 42, Site: q.None}}
	if err := a.Send(0, req); err != nil {
		t.Fatal(err)
	}
	got := func(d time.Duration) bool {
		select {
		case in := <-next.Inbound():
			t.Logf("the new incarnation got %v (from incarnation %d)", in.Frame.Msg, in.Inc)
			return true
		case <-time.After(d):
			return false
		}
	}
	arrived := got(500 * time.Millisecond)
	t.Logf("half a second after the new incarnation was taken: request arrived %v; a's stats: sent %v, lost %d", arrived, a.Stats().SentFrames[q.Request], a.Stats().Lost)
	// At last the half-open connection ends (a retransmission answered by
	// a RST): a redials, and reaches the new incarnation.
	proxy.closeBlack(false)
	if !arrived {
		arrived = got(time.Second)
	}
	t.Logf("after the stale connection ended: request arrived %v; a: Broken(0)=%d, Incarnation(0)=%d (old %d, new %d); up %v",
		arrived, a.Broken(0), a.Incarnation(0), oldInc, newInc, func() bool { up, _ := a.Backlog(0); return up }())
	if !arrived {
		t.Fatalf("a request a sent to node 0's new incarnation, after taking it, never arrived: it was written on the connection to the incarnation put down; and Broken(0) names the old incarnation (%d), so the runtime never suspects the new one", a.Broken(0))
	}
}

// TestDiallerWaitingIsHeard: node 0 takes node 1's first incarnation from
// its hello; node 1 comes back anew and accepts node 0's hellos, but node
// 0's writer waits, sending nothing, until it has put the first one down.
// The new incarnation must hear node 0 all the same (each accepted hello
// is a sign of life): it suspected node 0 for its silence, and a healthy
// node was declared failed and restarted for nothing (found by review,
// 2-3 of 6 healed partitions of real daemons).
func TestDiallerWaitingIsHeard(t *testing.T) {
	const hello = "dialler-waiting"
	hb := 50 * time.Millisecond
	ls, peers := listeners(t, 2)
	a, err := Listen(Config{Self: 0, Peers: peers, Hello: hello, Listener: ls[0], Heartbeat: hb})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	old, err := Listen(Config{Self: 1, Peers: peers, Hello: hello, Listener: ls[1], Heartbeat: hb})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := old.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	for a.Incarnation(1) != old.SelfIncarnation() {
		if ctx.Err() != nil {
			t.Fatal("node 0 never took node 1's first incarnation")
		}
		time.Sleep(5 * time.Millisecond)
	}
	old.Close()
	var l net.Listener
	for {
		if l, err = net.Listen("tcp", peers[1]); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	var log syncbuf.Buffer
	next, err := Listen(Config{Self: 1, Peers: peers, Hello: hello, Listener: l, Heartbeat: hb,
		Logger: zerolog.New(&log).Level(zerolog.InfoLevel)})
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	time.Sleep(time.Second)
	if next.Incarnation(0) != a.SelfIncarnation() {
		t.Fatalf("the new incarnation takes node 0 as %d, want %d", next.Incarnation(0), a.SelfIncarnation())
	}
	// Heard is on the boot clock: node 0 must be heard, and heard again.
	first := next.Heard(0)
	time.Sleep(10 * hb)
	if again := next.Heard(0); first.IsZero() || !again.After(first) {
		t.Errorf("the new incarnation took node 0 and heard it at %v, then at %v (zero: never): its runtime would declare the live node 0 failed", first, again)
	}
	// Each of node 0's dials ends with no frame: not a line each at info
	// (up to ten a second per waiting peer, for seconds).
	for _, line := range []string{"peer closed its connection", "peer reconnected"} {
		if n := strings.Count(log.String(), line); n > 0 {
			t.Errorf("%q logged %d times at info for a waiting dialler's connections:\n%s", line, n, log.String())
		}
	}
}
