package arbiter_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
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
	release(t, s, h, name)
}

// release has h release name, which it holds.
func release(t *testing.T, s *simtest.Sim, h *simtest.Host, name string) {
	t.Helper()
	if err := h.Node.Release(name); err != nil {
		t.Fatal(err)
	}
	s.Check.Released(h, name)
	s.Flush(h)
}

// count returns how many events of kind h has reported.
func count(h *simtest.Host, kind arbiter.EventKind) int {
	n := 0
	for _, e := range h.Events {
		if e.Kind == kind {
			n++
		}
	}
	return n
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
// more decided requests than Limits.MaxDecided allows.
func TestLongWaitKeepsSnapshotsWithinSmallLimits(t *testing.T) {
	const maxRes = 8
	s := newGroup(t, 5, 5, func(c *arbiter.Config) { c.Limits.MaxDecided = maxRes })
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

// refusedFor returns the reason of h's EventRefused for resource, and
// whether it had one.
func refusedFor(h *simtest.Host, resource string) (string, bool) {
	i := slices.IndexFunc(h.Events, func(e arbiter.Event) bool { return e.Kind == arbiter.EventRefused && e.Resource == resource })
	if i < 0 {
		return "", false
	}
	return h.Events[i].Reason, true
}

// A request for a resource not in use, while the group already has
// Limits.MaxResources in use, is refused by the server (EventRefused), not
// left to wait without a word: the server's own request too. A resource in
// use may still be asked for, and once one is freed a new one may be too.
// Two requests sent while one slot was free, decided after it filled, get
// one grant and one refusal.
func TestAcquireBeyondMaxResourcesIsRefused(t *testing.T) {
	const maxRes = 3
	s := newGroup(t, 3, 7, func(c *arbiter.Config) { c.Limits.MaxResources = maxRes })
	srv, backup, others := roles(t, s)
	a := others[0]
	for _, name := range []string{"x", "y"} {
		acquire(t, s, a, name)
		waitUntil(t, s, 100, "a holds "+name, func() bool { return holds(a, name) })
	}
	// One slot left: the backup and a ask for two new resources at once.
	acquire(t, s, backup, "p")
	acquire(t, s, a, "q")
	waitUntil(t, s, 100, "one of p and q granted, the other refused", func() bool {
		_, pRefused := refusedFor(backup, "p")
		_, qRefused := refusedFor(a, "q")
		return (holds(backup, "p") && qRefused) || (holds(a, "q") && pRefused)
	})
	acquire(t, s, srv, "z")
	waitUntil(t, s, 100, "the server's own request refused", func() bool { _, ok := refusedFor(srv, "z"); return ok })
	if why, _ := refusedFor(srv, "z"); !strings.Contains(why, "Limits.MaxResources") {
		t.Errorf("refused for %q, want Limits.MaxResources named", why)
	}
	if len(srv.Node.Waiting()) != 0 {
		t.Fatalf("the server still waits for %v after its refusal", srv.Node.Waiting())
	}
	acquire(t, s, srv, "x") // in use: it queues
	waitUntil(t, s, 100, "the server queued for x", func() bool { return hasEvent(srv, arbiter.EventQueued) })
	release(t, s, a, "y")
	waitUntil(t, s, 100, "the server's state shows y freed", func() bool { return len(srv.Node.Resources()) < maxRes })
	acquire(t, s, backup, "z") // decided by the server, on its state: room, whatever the backup's shows
	waitUntil(t, s, 100, "the backup holds z once y was freed", func() bool { return holds(backup, "z") })
	checkClean(t, s)
}

// A refusal reaches a requester that missed it: cut off from the group
// while the server refused its request and the group went on deciding,
// past what the members keep to resend (LogWindow), the requester catches
// up by a state transfer, in which its request is decided but neither held
// nor queued, and reports it refused, once; it does not retry for ever a
// request the server finds decided. Then it asks again, and is granted once
// room is freed.
func TestRefusalReachesARequesterBehind(t *testing.T) {
	s := newGroup(t, 3, 23, func(c *arbiter.Config) {
		c.Limits.MaxResources = 1
		c.Params.TurnLength, c.LogWindow = 16, 16 // the smallest window a turn allows
		c.Params.LeaseTicks = 600                 // the requester, cut off, stays a member
	})
	srv, backup, others := roles(t, s)
	b := others[0]
	acquire(t, s, backup, "x")
	waitUntil(t, s, 100, "the backup holds x", func() bool { return holds(backup, "x") })
	for _, h := range s.Hosts {
		if h != b {
			s.Cut(h.Index, b.Index) // one way: b's request reaches the server
		}
	}
	acquire(t, s, b, "y")
	waitUntil(t, s, 50, "the server refused y", func() bool { return srv.Node.Stats().TooMany > 0 })
	snapshots := b.Node.Stats().Snapshots
	for range 16 { // 32 decisions, and SYNCs, the requester misses
		release(t, s, backup, "x")
		s.RunTicks(2)
		acquire(t, s, backup, "x")
		waitUntil(t, s, 300, "the backup holds x again", func() bool { return holds(backup, "x") })
	}
	if _, ok := refusedFor(b, "y"); ok {
		t.Fatal("the requester heard its refusal through the cut")
	}
	s.Heal()
	waitUntil(t, s, 300, "the requester reports y refused", func() bool { _, ok := refusedFor(b, "y"); return ok })
	if b.Node.Stats().Snapshots == snapshots {
		t.Error("the requester caught up without a state transfer: the test missed its case")
	}
	s.RunTicks(100)
	if refusals := count(b, arbiter.EventRefused); refusals != 1 || len(b.Node.Waiting()) != 0 {
		t.Fatalf("%d refusals, still waiting for %v: want one refusal, nothing waiting", refusals, b.Node.Waiting())
	}
	release(t, s, backup, "x")
	s.RunTicks(5)
	acquire(t, s, b, "y")
	waitUntil(t, s, 100, "the requester holds y", func() bool { return holds(b, "y") })
	checkClean(t, s)
}

// A refusal carries its request's floor. A member told its request was
// refused on a branch a takeover then cut off no longer asks it: on the
// surviving branch that request stays undecided, a gap below the member's
// later requests. With the table still full, each later request is
// refused; without the floor, each refusal lengthened the member's decided
// list, in every state, past Limits.MaxDecided (a review found it: 40
// refusals, 40 entries), and then no state could be sent.
func TestRefusalsRaiseTheFloorPastACutRefusal(t *testing.T) {
	s := newGroup(t, 5, 31, func(c *arbiter.Config) { c.Limits.MaxResources = 1; c.Limits.MaxDecided = 32 })
	srv, backup, others := roles(t, s)
	n := others[0]
	acquire(t, s, backup, "x")
	waitUntil(t, s, 100, "the backup holds x", func() bool { return holds(backup, "x") })
	s.RunTicks(12)
	// The server and n on the minority side: n hears its refusal there.
	s.Partition([]int{srv.Index, n.Index}, []int{backup.Index, others[1].Index, others[2].Index})
	acquire(t, s, n, "y")
	waitUntil(t, s, 30, "n hears its refusal", func() bool { _, ok := refusedFor(n, "y"); return ok })
	waitUntil(t, s, 600, "a takeover on the majority side", func() bool {
		return backup.Node.Epoch() > n.Node.Epoch() || others[1].Node.Epoch() > n.Node.Epoch()
	})
	s.RunTicks(50)
	s.Heal()
	s.RunTicks(300)
	for i := range 40 {
		acquire(t, s, n, fmt.Sprintf("z%d", i))
		s.RunTicks(15)
	}
	refusals, longest := count(n, arbiter.EventRefused), 0
	for _, h := range s.Hosts {
		longest = max(longest, arbiter.DecidedForTest(h.Node, n.Node.ID()))
		if err := h.Node.CheckState(); err != nil {
			t.Errorf("h%d: %v", h.Index, err)
		}
	}
	if refusals < 40 {
		t.Fatalf("%d refusals: the table was not full, the test proves nothing", refusals)
	}
	if longest > 4 {
		t.Errorf("n's decided list reached %d entries after %d refusals", longest, refusals)
	}
	checkClean(t, s)
}

// A request whose floor is at the top of the range (a forger's, from a
// member's address, which a keyless group cannot tell from the member's)
// leaves every state sendable: the server passes on no floor at or above
// the request, and a state's floor at the top forgets every decided request
// (it wrapped, and kept them, and then no snapshot validated; a review
// found it). Granted or refused, alike.
func TestTopFloorLeavesStatesSendable(t *testing.T) {
	for _, full := range []bool{false, true} {
		s := newGroup(t, 3, 41, func(c *arbiter.Config) {
			if full {
				c.Limits.MaxResources = 1
			}
		})
		srv, backup, others := roles(t, s)
		n := others[0]
		acquire(t, s, backup, "x")
		waitUntil(t, s, 100, "the backup holds x", func() bool { return holds(backup, "x") })
		h := n.Node.Ready().Header
		for i, m := range []*wire.Request{{Req: 100, Resource: "y"}, {Req: 101, Resource: "z", Floor: math.MaxUint64}} {
			if err := srv.Node.Step(n.Addr, h, m); err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			s.Flush(srv)
		}
		s.RunTicks(70)
		for _, x := range s.Hosts {
			if err := x.Node.CheckState(); err != nil {
				t.Errorf("full %v: h%d: %v", full, x.Index, err)
			}
		}
	}
}

// A refused wait for a lock in use, learned from a state transfer, says the
// lock is busy (Event.Busy), as the refusal heard would: a TryAcquire then
// answers ErrLocked, not ErrTooMany. The lock table is full to the byte
// (locks, then waiters, until refused); the requester is cut off while the
// server refuses its wait and the log goes on past what the members keep to
// resend, so it catches up by a state transfer.
func TestBusyRefusalReachesARequesterBehind(t *testing.T) {
	s := newGroup(t, 3, 29, func(c *arbiter.Config) {
		c.Limits.MaxSnapshot = 16 << 10
		c.Params.MaxMembers = 3
		c.Params.TurnLength, c.LogWindow = 16, 16 // the smallest window a turn allows
		c.Params.LeaseTicks = 600                 // the requester, cut off, stays a member
	})
	srv, backup, others := roles(t, s)
	b := others[0]
	name := func(i int) string { return fmt.Sprintf("%0128d", i) }
	// ask has h ask for resource and waits for the answer; it reports
	// whether the request was refused.
	ask := func(h *simtest.Host, resource string) (refused bool) {
		t.Helper()
		events := len(h.Events)
		acquire(t, s, h, resource)
		waitUntil(t, s, 200, "an answer for "+resource[max(len(resource)-8, 0):], func() bool {
			for _, e := range h.Events[events:] {
				if e.Resource == resource && (e.Kind == arbiter.EventGranted || e.Kind == arbiter.EventQueued || e.Kind == arbiter.EventRefused) {
					refused = e.Kind == arbiter.EventRefused
					return true
				}
			}
			return false
		})
		return refused
	}
	locks := 0
	for !ask(backup, name(locks)) {
		if locks++; locks == 1000 {
			t.Fatal("1,000 locks taken under a 16 KiB state transfer")
		}
	}
	waiters := 0
	for waiters < locks && !ask(srv, name(waiters)) {
		waiters++
	}
	if waiters >= locks-1 {
		t.Fatalf("%d of %d locks waited for without a refusal", waiters, locks)
	}
	busy := name(locks - 1) // held by the backup, waited for by nobody
	tooMany := func() (k uint64) {
		for _, h := range s.Hosts {
			k += h.Node.Stats().TooMany
		}
		return k
	}
	for _, h := range s.Hosts {
		if h != b {
			s.Cut(h.Index, b.Index) // one way: b's request reaches the server
		}
	}
	before := tooMany()
	acquire(t, s, b, busy)
	waitUntil(t, s, 50, "the server refused b's wait", func() bool { return tooMany() > before })
	snapshots := b.Node.Stats().Snapshots
	for i := range 24 { // refusals, and SYNCs, that b misses
		if !ask(srv, fmt.Sprintf("new-%d", i)) {
			t.Fatalf("new lock %d granted with the table full", i)
		}
	}
	if _, ok := refusedFor(b, busy); ok {
		t.Fatal("b heard its refusal through the cut")
	}
	s.Heal()
	waitUntil(t, s, 300, "b reports its wait refused", func() bool { _, ok := refusedFor(b, busy); return ok })
	if b.Node.Stats().Snapshots == snapshots {
		t.Error("b caught up without a state transfer: the test missed its case")
	}
	i := slices.IndexFunc(b.Events, func(e arbiter.Event) bool { return e.Kind == arbiter.EventRefused && e.Resource == busy })
	if e := b.Events[i]; !e.Busy || !strings.Contains(e.Reason, "behind") {
		t.Fatalf("b's refusal %+v: want one learned while behind, marked busy", e)
	}
	checkClean(t, s)
}
