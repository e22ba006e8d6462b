package qnet

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/mcnode/mcnode/seal"
)

// Strangers that open connections and say nothing, without end, hold at
// most the bound's worth of them, and a peer still connects through them:
// with a bound that refused the newest, they locked it out.
func TestArrivalsBoundedPeersStillConnect(t *testing.T) {
	for _, keyed := range []bool{false, true} {
		name := "keyless"
		if keyed {
			name = "keyed"
		}
		t.Run(name, func(t *testing.T) {
			var keys []seal.Key
			if keyed {
				keys = []seal.Key{testKey(t)}
			}
			ls, peers := listeners(t, 2)
			m0 := startKeyed(t, 0, peers, ls[0], keys...)
			bound := m0.arrivals.max
			// The strangers hold twice the bound's worth of
			// connections and open another as soon as the mesh closes
			// one, so that the slots it frees are taken again at once.
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for range 2 * bound {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						c, err := net.Dial("tcp", peers[0])
						if err != nil {
							time.Sleep(time.Millisecond)
							continue
						}
						holdUntilClosed(c, stop)
					}
				}()
			}
			defer func() { close(stop); wg.Wait() }()
			eventually(t, "strangers beyond the bound closed", func() bool {
				return m0.Stats().Crowded >= uint64(bound)
			})
			m1 := startKeyed(t, 1, peers, ls[1], keys...)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := m1.WaitConnected(ctx); err != nil {
				t.Fatalf("the peer's link to the crowded node: %v", err)
			}
			if err := m0.WaitConnected(ctx); err != nil {
				t.Fatalf("the crowded node's link to the peer: %v", err)
			}
			if n := m0.arrivals.len(); n > bound {
				t.Errorf("%d connections in their hello, bound %d", n, bound)
			}
			if st := m0.Stats(); st.Malformed != 0 || st.Unauthenticated != 0 {
				t.Errorf("connections closed for newer ones counted as bad: %+v", st)
			}
		})
	}
}

// The bound closes the oldest arrival, and only it.
func TestArrivalsEvictOldest(t *testing.T) {
	as := arrivals{max: 2}
	conns := make([]net.Conn, 4)
	ends := make([]net.Conn, 4)
	for i := range conns {
		conns[i], ends[i] = net.Pipe()
		defer ends[i].Close()
	}
	a0, ev := as.add(conns[0])
	if ev != nil {
		t.Fatal("evicted below the bound")
	}
	a1, _ := as.add(conns[1])
	as.done(a0) // a0's hello ended: a1 is now the oldest
	if _, ev = as.add(conns[2]); ev != nil {
		t.Fatal("evicted below the bound after a hello ended")
	}
	_, ev = as.add(conns[3])
	if ev != a1 || !a1.evicted.Load() {
		t.Fatalf("evicted %v, want the oldest still in its hello", ev)
	}
	if _, err := ends[1].Write([]byte{1}); err == nil {
		t.Error("the evicted connection is still open")
	}
	if as.len() != 2 {
		t.Errorf("%d in their hello, want 2", as.len())
	}
}

// holdUntilClosed reads c until its peer closes it or stop is closed, and
// closes it.
func holdUntilClosed(c net.Conn, stop <-chan struct{}) {
	defer c.Close()
	var b [1]byte
	for {
		_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		_, err := c.Read(b[:])
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			return
		}
		select {
		case <-stop:
			return
		default:
		}
	}
}
