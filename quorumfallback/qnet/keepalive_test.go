package qnet

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"
)

// keepAlive reports whether c has SO_KEEPALIVE on.
func keepAlive(t *testing.T, c net.Conn) bool {
	t.Helper()
	tc, ok := c.(*net.TCPConn)
	if !ok {
		t.Fatalf("%T is no TCP connection", c)
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var on int
	var serr error
	if err := raw.Control(func(fd uintptr) { on, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE) }); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatal(serr)
	}
	return on != 0
}

// Without heartbeats no connection of the mesh, dialled or accepted, keeps
// a TCP keepalive: it broke the links of a network split of 150 s, and
// lost what was in flight on them, which a protocol without failure
// handling waits for for good (central and Ricart-Agrawala stalled after
// the heal; found by review). With heartbeats Go's default stays.
func TestNoKeepAliveWithoutHeartbeat(t *testing.T) {
	for _, hb := range []time.Duration{0, 50 * time.Millisecond} {
		ls, peers := listeners(t, 2)
		var ms []*Mesh
		for i := range 2 {
			m, err := Listen(Config{Self: i, Peers: peers, Hello: "keepalive", Listener: ls[i], Heartbeat: hb})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { m.Close() })
			ms = append(ms, m)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, m := range ms {
			if err := m.WaitConnected(ctx); err != nil {
				t.Fatal(err)
			}
		}
		m := ms[0]
		m.mu.Lock()
		var conns []net.Conn
		for c := range m.conns {
			conns = append(conns, c)
		}
		m.mu.Unlock()
		if len(conns) != 2 {
			t.Fatalf("heartbeat %v: %d connections, want the one dialled and the one accepted", hb, len(conns))
		}
		for _, c := range conns {
			if on := keepAlive(t, c); on != (hb > 0) {
				t.Errorf("heartbeat %v: connection %v -> %v keeps a TCP keepalive: %v", hb, c.LocalAddr(), c.RemoteAddr(), on)
			}
		}
	}
}
