package qnet

import (
	"net"
	"sync"
	"sync/atomic"
)

// arrivals bounds the accepted connections that have not finished their
// hello (and, with keys, their TLS handshake). Each holds a descriptor, a
// goroutine and a read buffer for up to handshakeTimeout, and any host may
// open them: unbounded, strangers saying nothing could exhaust the
// descriptors. Refusing the newest over the bound locks the peers out
// instead, as long as strangers keep its slots full (a restarted peer was
// not connected after 30 s): so the oldest is closed for the newest. A
// peer's hello takes a few round trips; to close it, strangers would have
// to open the whole bound's worth of connections within them.
type arrivals struct {
	mu    sync.Mutex
	max   int
	queue []*arrival // oldest first
}

// arrival is one accepted connection in its hello.
type arrival struct {
	c net.Conn
	// evicted: closed for a newer arrival; its end is not news.
	evicted atomic.Bool
}

// arrivalsAtOnce is the bound for a mesh of n nodes: room for every peer
// to redial a few times over, and for strangers to hold many before a
// peer's hello could be closed.
func arrivalsAtOnce(n int) int { return max(256, 4*n) }

// add registers c, and closes and returns the oldest arrival if the bound
// was reached (nil otherwise).
func (as *arrivals) add(c net.Conn) (a, evicted *arrival) {
	a = &arrival{c: c}
	as.mu.Lock()
	if len(as.queue) >= as.max {
		evicted = as.queue[0]
		as.queue = as.queue[1:]
	}
	as.queue = append(as.queue, a)
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
	for i, x := range as.queue {
		if x == a {
			as.queue = append(as.queue[:i], as.queue[i+1:]...)
			return
		}
	}
}

// len reports how many connections are in their hello.
func (as *arrivals) len() int {
	as.mu.Lock()
	defer as.mu.Unlock()
	return len(as.queue)
}
