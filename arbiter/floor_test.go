package arbiter_test

import (
	"errors"
	"testing"

	"github.com/mcnode/mcnode/arbiter"
	"github.com/mcnode/mcnode/internal/simtest"
	"github.com/mcnode/mcnode/wire"
)

// queueBehindAHolder has one member other than the server hold name and
// another queue for it, and returns them and the queued request.
func queueBehindAHolder(t *testing.T, s *simtest.Sim, name string) (holder, waiter *simtest.Host, req uint64) {
	t.Helper()
	for _, h := range s.Hosts {
		switch {
		case h.Node.IsServer():
		case holder == nil:
			holder = h
		default:
			waiter = h
		}
	}
	acquire(t, s, holder, name)
	waitUntil(t, s, 100, "the holder holds "+name, func() bool { return holds(holder, name) })
	req, err := waiter.Node.Acquire(name)
	if err != nil {
		t.Fatal(err)
	}
	s.Check.Acquired(waiter, req)
	s.Flush(waiter)
	waitUntil(t, s, 100, "the waiter is queued", func() bool { return hasEvent(waiter, arbiter.EventQueued) })
	return holder, waiter, req
}

// takeAndRelease has h take name, once it is granted, and release it.
func takeAndRelease(t *testing.T, s *simtest.Sim, h *simtest.Host, name string) {
	t.Helper()
	acquire(t, s, h, name)
	waitUntil(t, s, 100, "h holds "+name, func() bool { return holds(h, name) })
	if err := h.Node.Release(name); err != nil {
		t.Fatal(err)
	}
	s.Check.Released(h, name)
	s.Flush(h)
}

// handOver has the holder release name and waits until the waiter holds it.
func handOver(t *testing.T, s *simtest.Sim, holder, waiter *simtest.Host, name string) {
	t.Helper()
	if err := holder.Node.Release(name); err != nil {
		t.Fatal(err)
	}
	s.Check.Released(holder, name)
	s.Flush(holder)
	waitUntil(t, s, 100, "the waiter holds "+name, func() bool { return holds(waiter, name) })
}

// A request this node has queued is still pending: the floor it sends with
// its next request must stay below it. A takeover may cut the decision that
// queued it off with its branch of the log, and the node then asks again
// under the same ID; a server that had taken the floor for a promise would
// take that request for decided and never serve it (seed 195 of
// TestPropertySeededCuts).
func TestFloorStaysBelowAQueuedRequest(t *testing.T) {
	s := newGroup(t, 3, 5, nil)
	holder, waiter, queuedReq := queueBehindAHolder(t, s, "r")
	var floors []uint64
	s.Opt.Delivered = func(d *simtest.Datagram) {
		if d.From != waiter.Index {
			return
		}
		for _, m := range d.Packet.Messages {
			if r, ok := m.(*wire.Request); ok && r.Resource == "s" {
				floors = append(floors, r.Floor)
			}
		}
	}
	acquire(t, s, waiter, "s")
	waitUntil(t, s, 100, "the waiter holds s", func() bool { return holds(waiter, "s") })
	if len(floors) == 0 {
		t.Fatal("no request for s was delivered (the test proves nothing)")
	}
	for _, f := range floors {
		if f >= queuedReq {
			t.Errorf("the request for s said floor %d, at or above the queued request %d", f, queuedReq)
		}
	}
	handOver(t, s, holder, waiter, "r")
	checkClean(t, s)
}

// A member's floor stays below its queued request, so the requests it makes
// while that one waits come to the state above the floor it sends: the
// state's floor rises over them as they are decided (the queued one was
// decided first), as every member's state does alike, or one long wait would
// grow the list and every snapshot without bound.
func TestDecidedListStaysShortWhileARequestWaits(t *testing.T) {
	s := newGroup(t, 3, 9, nil)
	holder, waiter, _ := queueBehindAHolder(t, s, "long")
	longest := 0
	const cycles = 300
	for i := 0; i < cycles; i++ {
		takeAndRelease(t, s, waiter, "short")
		waitUntil(t, s, 100, "short released", func() bool {
			for _, x := range waiter.Node.Resources() {
				if x.Name == "short" {
					return false
				}
			}
			return true
		})
		for _, h := range s.Hosts {
			longest = max(longest, arbiter.DecidedForTest(h.Node, waiter.Node.ID()))
		}
	}
	if longest > 8 {
		t.Errorf("the waiter's decided list reached %d entries in %d cycles: it grows with the cycles", longest, cycles)
	}
	handOver(t, s, holder, waiter, "long")
	checkClean(t, s)
	t.Logf("longest decided list: %d entries over %d cycles", longest, cycles)
}

// The same with the smallest snapshot limits: a member restarted after the
// waiter's many requests joins, which it could not if the snapshot listed
// more decided requests than Limits.MaxResources allows.
func TestLongWaitKeepsSnapshotsWithinSmallLimits(t *testing.T) {
	const maxRes = 8
	s := newGroup(t, 5, 5, func(c *arbiter.Config) { c.Limits.MaxResources = maxRes })
	_, _, others := roles(t, s)
	holder, waiter, late := others[0], others[1], others[2]
	acquire(t, s, holder, "r")
	waitUntil(t, s, 100, "the holder holds r", func() bool { return holds(holder, "r") })
	acquire(t, s, waiter, "r")
	waitUntil(t, s, 100, "the waiter is queued", func() bool { return hasEvent(waiter, arbiter.EventQueued) })
	for i := 0; i < 3*maxRes; i++ {
		takeAndRelease(t, s, waiter, "s")
		s.RunTicks(3)
	}
	s.Crash(late.Index)
	s.RunTicks(5)
	s.Start(late.Index, false)
	waitUntil(t, s, 2000, "the restarted member joined", func() bool { return late.Node.Joined() })
	checkClean(t, s)
}

// A request for a resource not in use, while the group already has
// Limits.MaxResources in use, is refused at once with ErrTooMany: the server
// would not decide it, and it would wait without a word. A resource in use
// may still be asked for, and once one is freed a new one may be too.
func TestAcquireBeyondMaxResourcesIsRefused(t *testing.T) {
	const maxRes = 2
	s := newGroup(t, 3, 7, func(c *arbiter.Config) { c.Limits.MaxResources = maxRes })
	srv, _, others := roles(t, s)
	a, b := others[0], srv
	for _, name := range []string{"x", "y"} {
		acquire(t, s, a, name)
		waitUntil(t, s, 100, "a holds "+name, func() bool { return holds(a, name) })
	}
	waitUntil(t, s, 100, "b's state shows both in use", func() bool { return len(b.Node.Resources()) == maxRes })
	if _, err := b.Node.Acquire("z"); !errors.Is(err, arbiter.ErrTooMany) {
		t.Fatalf("Acquire of a third resource: err = %v, want ErrTooMany", err)
	}
	acquire(t, s, b, "x") // in use: it queues
	waitUntil(t, s, 100, "b queued for x", func() bool { return hasEvent(b, arbiter.EventQueued) })
	if err := a.Node.Release("y"); err != nil {
		t.Fatal(err)
	}
	s.Check.Released(a, "y")
	s.Flush(a)
	waitUntil(t, s, 100, "b's state shows y freed", func() bool { return len(b.Node.Resources()) < maxRes })
	if _, err := b.Node.Acquire("y"); err != nil {
		t.Fatalf("Acquire once a resource was freed: %v", err)
	}
	s.Flush(b)
	waitUntil(t, s, 100, "b holds y", func() bool { return holds(b, "y") })
	checkClean(t, s)
}
