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
			bound := m0.arrivals.max[fromPeerHost] // loopback: the peers' host
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
			if n := m0.arrivals.len(); n > 2*bound {
				t.Errorf("%d connections in their hello, bound %d a pool", n, bound)
			}
			if st := m0.Stats(); st.Malformed != 0 || st.Unauthenticated != 0 {
				t.Errorf("connections closed for newer ones counted as bad: %+v", st)
			}
		})
	}
}

// The bound closes the oldest arrival, and only it.
func TestArrivalsEvictOldest(t *testing.T) {
	as := arrivals{max: [pools]int{2, 2}}
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

// delayProxy forwards TCP to target, each chunk delayed by d, in order: a
// peer d away.
func delayProxy(t *testing.T, target string, d time.Duration) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	pipe := func(dst, src net.Conn) {
		type chunk struct {
			b   []byte
			due time.Time
		}
		ch := make(chan chunk, 1024)
		go func() {
			defer dst.Close()
			for c := range ch {
				time.Sleep(time.Until(c.due))
				if _, err := dst.Write(c.b); err != nil {
					return
				}
			}
		}()
		defer close(ch)
		buf := make([]byte, 64<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				ch <- chunk{append([]byte(nil), buf[:n]...), time.Now().Add(d)}
			}
			if err != nil {
				return
			}
		}
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				u, err := net.Dial("tcp", target)
				if err != nil {
					c.Close()
					return
				}
				go pipe(u, c)
				pipe(c, u)
			}()
		}
	}()
	return l.Addr().String()
}

// A stranger on another host (127.0.0.2 here) opening connections as fast
// as it can closes each of its own within milliseconds, and none of a
// peer's: connections from the peers' hosts have slots of their own. With
// one pool, a keyed peer 10 ms away (its TLS handshake and hello take a
// few round trips) was kept out for good (found by review).
func TestStrangerElsewhereCannotEvictAPeer(t *testing.T) {
	key := testKey(t)
	ls, peers := listeners(t, 2)
	m0 := startKeyed(t, 0, peers, ls[0], key)
	eventually(t, "the peers' hosts known", func() bool { return m0.arrivals.hosts.Load() != nil })
	probe, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).Dial("tcp", peers[0])
	if err != nil {
		t.Skipf("cannot dial from 127.0.0.2: %v", err)
	}
	probe.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
			var held []net.Conn
			defer func() {
				for _, c := range held {
					c.Close()
				}
			}()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := d.Dial("tcp", peers[0])
				if err != nil {
					continue
				}
				held = append(held, c)
				if len(held) > 400 {
					held[0].Close()
					held = held[1:]
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	eventually(t, "the stranger's connections closed for its newer ones", func() bool {
		return m0.Stats().Crowded >= uint64(m0.arrivals.max[fromElsewhere])
	})
	far := append([]string(nil), peers...)
	far[0] = delayProxy(t, peers[0], 10*time.Millisecond)
	m1 := startKeyed(t, 1, far, ls[1], key)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m1.WaitConnected(ctx); err != nil {
		t.Fatalf("the peer 10 ms away, its link to the crowded node: %v", err)
	}
	if err := m0.WaitConnected(ctx); err != nil {
		t.Fatalf("the crowded node's link to the peer: %v", err)
	}
}
