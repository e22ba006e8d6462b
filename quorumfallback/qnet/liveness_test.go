package qnet

import (
	"context"
	"net"
	"testing"
	"time"
)

func startLive(t *testing.T, self int, peers []string, l net.Listener) *Mesh {
	t.Helper()
	m, err := Listen(Config{Self: self, Peers: peers, Hello: testHello, Logger: testLogger(t), DialRetry: 20 * time.Millisecond, Listener: l, Heartbeat: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// With heartbeats each node knows when it last heard the other, and when
// the other last heard it; a restarted node is refused until Forget, then
// taken; an incarnation refused for good learns it (Failed), and its
// frames stop.
func TestLiveness(t *testing.T) {
	ls, addrs := listeners(t, 2)
	m0 := startLive(t, 0, addrs, ls[0])
	m1, err := Listen(Config{Self: 1, Peers: addrs, Hello: testHello, Logger: testLogger(t), DialRetry: 20 * time.Millisecond, Listener: ls[1], Heartbeat: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, m := range []*Mesh{m0, m1} {
		if err := m.WaitConnected(ctx); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "heard and acked both ways", func() bool {
		now := Now()
		return now.Sub(m0.Heard(1)) < 50*time.Millisecond && now.Sub(m0.Acked(1)) < 50*time.Millisecond &&
			now.Sub(m1.Heard(0)) < 50*time.Millisecond && now.Sub(m1.Acked(0)) < 50*time.Millisecond
	})
	// Heartbeats and echoes are the mesh's own: nothing reaches the runtime.
	select {
	case in := <-m0.Inbound():
		t.Fatalf("the runtime got %+v", in)
	default:
	}
	first := m0.Incarnation(1)
	m1.Close()
	time.Sleep(50 * time.Millisecond)
	if Now().Sub(m0.Heard(1)) < 40*time.Millisecond {
		t.Fatal("node 1 still heard after it closed")
	}
	m1 = startLive(t, 1, addrs, nil)
	eventually(t, "the new incarnation refused", func() bool { return m0.Stats().Restarted >= 1 })
	if m0.Incarnation(1) != first {
		t.Fatal("the new incarnation taken before Forget")
	}
	m0.Forget(1, first)
	eventually(t, "the new incarnation taken after Forget", func() bool {
		return m0.Incarnation(1) != first && m0.Incarnation(1) != 0 && m1.Connected()
	})
	m1.Send(0, frame(1, 0, 7))
	expect(t, m0, 1, 7)
	if !m0.Refuse(1, m0.Incarnation(1)) {
		t.Fatal("Refuse of the incarnation taken failed")
	}
	select {
	case <-m1.Failed():
	case <-time.After(5 * time.Second):
		t.Fatal("the refused incarnation never learned it")
	}
	m1.Send(0, frame(1, 0, 8))
	select {
	case in := <-m0.Inbound():
		t.Fatalf("node 0 took %+v from a refused incarnation", in)
	case <-time.After(100 * time.Millisecond):
	}
	if m0.Refuse(1, 12345) {
		t.Error("refused an incarnation never taken")
	}
}
