package qnet

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// arrivals bounds the accepted connections that have not finished their
// hello (and, with keys, their TLS handshake). Each holds a descriptor, a
// goroutine and a read buffer for up to handshakeTimeout, and any host may
// open them: unbounded, strangers saying nothing could exhaust the
// descriptors. Refusing the newest over the bound locks the peers out
// instead, as long as strangers keep its slots full (a restarted peer was
// not connected after 30 s): so the oldest is closed for the newest. And
// connections from the peers' hosts have slots of their own, which
// connections from elsewhere cannot take: a stranger opening connections
// as fast as it can closed each within about 20 ms, and kept out a peer
// whose hello took longer (a keyed one, 20 ms away).
type arrivals struct {
	mu    sync.Mutex
	max   [pools]int
	queue [pools][]*arrival // oldest first
	// hosts has the addresses of the peers' hosts (peersHosts), once
	// resolved; until then every connection is a stranger's.
	hosts atomic.Pointer[map[string]bool]
}

// The pools of slots.
const (
	fromElsewhere = iota
	fromPeerHost
	pools
)

// arrival is one accepted connection in its hello.
type arrival struct {
	c    net.Conn
	pool int
	// evicted: closed for a newer arrival; its end is not news.
	evicted atomic.Bool
}

// newArrivals returns the bounds for a mesh of peers, arrivalsAtOnce for
// each pool.
func newArrivals(peers []string) *arrivals {
	n := arrivalsAtOnce(len(peers))
	return &arrivals{max: [pools]int{n, n}}
}

// arrivalsAtOnce is a pool's bound for a mesh of n nodes: room for every
// peer to redial a few times over, and for many strangers before a hello
// of the same pool is closed (a stranger on a peer's host shares its
// pool).
func arrivalsAtOnce(n int) int { return max(256, 4*n) }

// learnHosts resolves the hosts of peers (names too, once) and from then
// on gives connections from them their own slots.
func (as *arrivals) learnHosts(ctx context.Context, peers []string) {
	hosts := map[string]bool{}
	for _, p := range peers {
		h, _, err := net.SplitHostPort(p)
		if err != nil {
			continue
		}
		if ip := net.ParseIP(h); ip != nil {
			hosts[ip.String()] = true
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		addrs, _ := net.DefaultResolver.LookupIPAddr(rctx, h)
		cancel()
		for _, a := range addrs {
			hosts[a.IP.String()] = true
		}
	}
	as.hosts.Store(&hosts)
}

// poolOf says whose slots a connection from addr takes.
func (as *arrivals) poolOf(addr net.Addr) int {
	hosts := as.hosts.Load()
	if ta, ok := addr.(*net.TCPAddr); ok && hosts != nil && (*hosts)[ta.IP.String()] {
		return fromPeerHost
	}
	return fromElsewhere
}

// add registers c, and closes and returns the oldest arrival of its pool if
// the pool's bound was reached (nil otherwise).
func (as *arrivals) add(c net.Conn) (a, evicted *arrival) {
	a = &arrival{c: c, pool: as.poolOf(c.RemoteAddr())}
	as.mu.Lock()
	q := as.queue[a.pool]
	if len(q) >= as.max[a.pool] {
		evicted = q[0]
		q = q[1:]
	}
	as.queue[a.pool] = append(q, a)
	as.mu.Unlock()
	if evicted != nil {
		evicted.evicted.Store(true)
		evicted.c.Close() // its serve drops it
	}
	return a, evicted
}

// done removes a, whose hello ended, one way or the other.
func (as *arrivals) done(a *arrival) {
	as.mu.Lock()
	defer as.mu.Unlock()
	q := as.queue[a.pool]
	for i, x := range q {
		if x == a {
			as.queue[a.pool] = append(q[:i], q[i+1:]...)
			return
		}
	}
}

// len reports how many connections are in their hello.
func (as *arrivals) len() int {
	as.mu.Lock()
	defer as.mu.Unlock()
	return len(as.queue[fromElsewhere]) + len(as.queue[fromPeerHost])
}
