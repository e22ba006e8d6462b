// Package memnet is an in-memory network for testing the runtime without
// sockets: endpoints that multicast to every other endpoint and send to one
// by address, with optional seeded loss and delay. It implements
// group.Transport. Time is whatever package time says, so tests can run it
// inside a testing/synctest bubble with a fake clock.
package memnet

import (
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/wire"
)

// Network connects endpoints.
type Network struct {
	mu        sync.Mutex
	endpoints map[string]*Endpoint
	order     []string
	next      int
	rng       *rand.Rand
	loss      float64
	delay     time.Duration
	cut       map[string]bool // endpoints that neither send nor receive
	muted     map[string]bool // endpoints that receive but whose sends are lost
}

// New returns an empty network whose loss is drawn from seed.
func New(seed int64) *Network {
	return &Network{endpoints: map[string]*Endpoint{}, rng: rand.New(rand.NewSource(seed)), cut: map[string]bool{}, muted: map[string]bool{}}
}

// SetLoss makes every delivery fail with probability p.
func (n *Network) SetLoss(p float64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.loss = p
}

// SetDelay delays every delivery by d.
func (n *Network) SetDelay(d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.delay = d
}

// Isolate cuts an endpoint off (true) or reconnects it (false): what it
// sends and what is sent to it is lost, as when a host's cable is pulled.
func (n *Network) Isolate(addr string, cut bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut[addr] = cut
}

// Mute makes what an endpoint sends lost (true), while it still receives,
// as on a link that fails one way; false undoes it.
func (n *Network) Mute(addr string, mute bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.muted[addr] = mute
}

// Endpoint returns a new endpoint with a fresh address.
func (n *Network) Endpoint() *Endpoint {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.next++
	e := &Endpoint{net: n, addr: fmt.Sprintf("mem-%d", n.next), packets: make(chan group.Packet, 4096)}
	n.endpoints[e.addr] = e
	n.order = append(n.order, e.addr)
	return e
}

// Endpoint is one node's attachment to the network.
type Endpoint struct {
	net     *Network
	addr    string
	mu      sync.Mutex
	closed  bool
	packets chan group.Packet
	// filterFor drops the multicasts addressed to other members, as the
	// UDP transport's socket filter does (group.AddressFilter).
	filterFor atomic.Uint64
	filtered  atomic.Uint64
}

// FilterFor drops from now on the multicast datagrams addressed to members
// other than id (wire.Recipients), as a socket filter would; 0 stops it.
func (e *Endpoint) FilterFor(id wire.NodeID) error {
	e.filterFor.Store(uint64(id))
	return nil
}

// Filtered counts the multicast datagrams FilterFor dropped.
func (e *Endpoint) Filtered() uint64 { return e.filtered.Load() }

// LocalAddr returns the endpoint's address.
func (e *Endpoint) LocalAddr() string { return e.addr }

// Packets returns what the endpoint receives.
func (e *Endpoint) Packets() <-chan group.Packet { return e.packets }

// Send delivers each datagram to the group (every other endpoint) or to
// one address.
func (e *Endpoint) Send(batch []group.Datagram) error {
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return group.ErrClosed
	}
	n := e.net
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, d := range batch {
		if n.cut[e.addr] || n.muted[e.addr] {
			continue
		}
		var to []*Endpoint
		if d.To == "" {
			for _, a := range n.order {
				if a != e.addr {
					to = append(to, n.endpoints[a])
				}
			}
		} else if dst, ok := n.endpoints[d.To]; ok {
			to = append(to, dst)
		}
		for _, dst := range to {
			if dst == nil || n.cut[dst.addr] || n.rng.Float64() < n.loss {
				continue
			}
			if d.To == "" && wire.AddressedElsewhere(d.Data, wire.NodeID(dst.filterFor.Load())) {
				dst.filtered.Add(1)
				continue
			}
			p := group.Packet{Data: append([]byte(nil), d.Data...), Source: e.addr, Multicast: d.To == "", Received: time.Now()}
			if n.delay > 0 {
				time.AfterFunc(n.delay, func() { dst.deliver(p) })
			} else {
				dst.deliver(p)
			}
		}
	}
	return nil
}

func (e *Endpoint) deliver(p group.Packet) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	select {
	case e.packets <- p:
	default: // a full receive buffer drops, like a socket's
	}
}

// Close detaches the endpoint.
func (e *Endpoint) Close() error {
	// Network lock first, then the endpoint's: the order Send takes them in.
	e.net.mu.Lock()
	delete(e.net.endpoints, e.addr)
	e.net.mu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.closed {
		e.closed = true
		close(e.packets)
	}
	return nil
}
