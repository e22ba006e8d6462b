package group_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/group/memnet"
)

// heldEndpoint is a memnet endpoint whose node can be made deaf for a while:
// what arrives meanwhile is kept, and handed to the node in one batch.
type heldEndpoint struct {
	*memnet.Endpoint
	out chan group.Packet

	mu   sync.Mutex
	hold bool
	kept []group.Packet
}

func newHeldEndpoint(net *memnet.Network) *heldEndpoint {
	e := &heldEndpoint{Endpoint: net.Endpoint(), out: make(chan group.Packet, 4096)}
	go func() {
		defer close(e.out)
		for p := range e.Endpoint.Packets() {
			e.mu.Lock()
			if e.hold {
				e.kept = append(e.kept, p)
				e.mu.Unlock()
				continue
			}
			e.mu.Unlock()
			e.out <- p
		}
	}()
	return e
}

// Packets is what the node reads: nothing while held.
func (e *heldEndpoint) Packets() <-chan group.Packet { return e.out }

// deafen keeps what arrives from now on.
func (e *heldEndpoint) deafen() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.hold = true
}

// hear hands g what was kept, in one batch, and stops keeping.
func (e *heldEndpoint) hear(g *group.Group) int {
	e.mu.Lock()
	kept := e.kept
	e.kept, e.hold = nil, false
	e.mu.Unlock()
	g.ReceiveBatchForTest(kept)
	return len(kept)
}

// A TryAcquire answered "queued" whose grant this node applied before it
// handled that answer (both came in one batch) has the lock after all: the
// try gets the lease, and the Acquire of the same name waiting behind it on
// the same node waits on for it, rather than failing with the arbiter's
// ErrBusy (the withdrawal of the granted request failed, and the node asked
// again for a lock it held).
func TestTryAcquireGrantedBeforeItsQueuedAnswerIsHandled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := memnet.New(11)
		var gs []*group.Group
		var eps []*heldEndpoint
		for i := 0; i < 3; i++ {
			c := memConfig(net)
			ep := newHeldEndpoint(net)
			c.Transport = ep
			g, err := group.Join(context.Background(), c)
			if err != nil {
				t.Fatalf("node %d: Join: %v", i, err)
			}
			t.Cleanup(func() { g.Close() })
			gs, eps = append(gs, g), append(eps, ep)
		}
		synctest.Wait()
		st, err := gs[0].Status()
		if err != nil {
			t.Fatal(err)
		}
		// The one that tries is not the server, so that it hears the
		// server's answer to its request rather than decide it itself.
		try, holder := -1, -1
		for i, g := range gs {
			switch {
			case g.ID() == st.Server:
			case try < 0:
				try = i
			default:
				holder = i
			}
		}
		if holder < 0 {
			holder = (try + 1) % len(gs)
		}
		held, err := gs[holder].Acquire(context.Background(), "k")
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()

		eps[try].deafen()
		type result struct {
			l   *group.Lease
			err error
		}
		tried, acquired := make(chan result, 1), make(chan result, 1)
		go func() {
			l, err := gs[try].TryAcquire(context.Background(), "k")
			tried <- result{l, err}
		}()
		synctest.Wait() // the request is with the server, which queues it
		go func() {
			l, err := gs[try].Acquire(context.Background(), "k")
			acquired <- result{l, err}
		}()
		synctest.Wait() // the Acquire waits behind the try
		if err := held.Release(); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the release and the hand-over to the try are kept too
		if n := eps[try].hear(gs[try]); n == 0 {
			t.Fatal("nothing arrived while the node was deaf")
		}

		var r result
		select {
		case r = <-tried:
		case <-time.After(5 * time.Second):
			t.Fatal("TryAcquire did not return")
		}
		if r.err != nil {
			t.Errorf("TryAcquire granted before its queued answer was handled: %v, want the lease", r.err)
		} else {
			r.l.Release()
		}
		select {
		case r = <-acquired:
		case <-time.After(5 * time.Second):
			t.Fatal("Acquire behind the try never got the lock")
		}
		if r.err != nil {
			t.Fatalf("Acquire behind the try: %v, want the lease", r.err)
		}
		r.l.Release()
	})
}
