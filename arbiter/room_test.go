package arbiter_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mcnode/mcnode/arbiter"
	"github.com/mcnode/mcnode/internal/simtest"
)

// TestLockTableStaysWithinAStateTransfer: the group admits a lock, or a
// waiter, only while its state, with room kept for the members it may still
// admit, fits a state transfer (Limits.MaxSnapshot). Filled with locks of
// the longest names and with waiters, it refuses the next lock and the next
// waiter (EventRefused), at a member and at the server itself; and then,
// the dangerous case, newcomers that need the whole state join, up to the
// group's size. Before, the group took locks up to Limits.MaxResources and
// its state outgrew what a state transfer carries: no newcomer could join,
// no member that fell behind could catch up.
func TestLockTableStaysWithinAStateTransfer(t *testing.T) {
	const (
		hosts = 8
		limit = 16 << 10
	)
	s := newGroup(t, hosts, 17, func(c *arbiter.Config) {
		c.Limits.MaxSnapshot = limit
		c.Params.MaxMembers = hosts
	})
	srv, backup, others := roles(t, s)
	a, late, gone := others[0], others[1], others[2:5] // 3 of 8: the others keep a majority
	for _, h := range gone {
		s.Crash(h.Index)
	}
	waitUntil(t, s, 3000, "the crashed members removed", func() bool { return len(srv.Node.Members()) == hosts-len(gone) })

	name := func(i int) string { return fmt.Sprintf("%0128d", i) }
	// ask has h ask for lock i and waits for the answer: held, queued or
	// refused; it returns the refusal's reason, if refused, and whether it
	// says the lock was in use (Event.Busy).
	busy := false
	ask := func(h *simtest.Host, i int) (refused string) {
		t.Helper()
		events := len(h.Events)
		req, err := h.Node.Acquire(name(i))
		if err != nil {
			t.Fatal(err)
		}
		s.Check.Acquired(h, req)
		s.Flush(h)
		waitUntil(t, s, 100, "an answer to "+name(i)[120:], func() bool {
			for _, e := range h.Events[events:] {
				if e.Req == req && (e.Kind == arbiter.EventGranted || e.Kind == arbiter.EventQueued || e.Kind == arbiter.EventRefused) {
					refused, busy = e.Reason, e.Busy
					return true
				}
			}
			return false
		})
		return refused
	}
	// A few locks first, each waited for by the server and its backup.
	const first = 6
	for i := range first {
		if why := ask(a, i); why != "" {
			t.Fatalf("lock %d refused: %s", i, why)
		}
	}
	for i := range first {
		for _, h := range []*simtest.Host{srv, backup} {
			if why := ask(h, i); why != "" {
				t.Fatalf("a wait for lock %d refused: %s", i, why)
			}
		}
	}
	// Then locks until the table is full.
	held := first
	for ; ; held++ {
		if held == 1000 {
			t.Fatalf("%d locks with 128-byte names taken, and none refused under a %d-byte state transfer", held, limit)
		}
		if why := ask(a, held); why != "" {
			if !strings.Contains(why, "Limits.MaxSnapshot") {
				t.Fatalf("lock %d refused for %q, want Limits.MaxSnapshot named", held, why)
			}
			if busy {
				t.Fatalf("lock %d, not in use, refused as busy", held)
			}
			t.Logf("lock %d refused: %s", held, why)
			break
		}
	}
	if why := ask(srv, held); why == "" || busy {
		t.Fatalf("the server's own request for a new lock with the table full: refused %q, busy %v; want refused, not busy", why, busy)
	}
	waiters := 0
	for i := range held {
		if why := ask(late, i); why != "" {
			break
		}
		waiters++
	}
	if waiters >= held-1 {
		t.Fatalf("late waited for %d of %d locks without a refusal", waiters, held)
	}
	if !busy {
		t.Fatalf("late's refused wait for lock %d, in use, not marked busy", waiters)
	}
	// The acting server's own wait for a lock in use, refused: busy too.
	var acting *simtest.Host
	waitUntil(t, s, 500, "a server other than the holder", func() bool {
		for _, h := range s.Hosts {
			if h.Alive && h.Node.IsServer() && h != a {
				acting = h
				return true
			}
		}
		return false
	})
	if why := ask(acting, held-1); why == "" || !busy {
		t.Fatalf("the acting server's own wait for lock %d, in use, with no room: refused %q, busy %v; want refused and busy", held-1, why, busy)
	}
	s.RunTicks(50)
	for _, h := range s.Hosts {
		if h.Alive {
			if err := h.Node.CheckState(); err != nil {
				t.Fatalf("h%d: the full table's state: %v", h.Index, err)
			}
		}
	}
	t.Logf("%d locks and %d waiters admitted under a %d-byte state transfer", held, 2*first+waiters, limit)

	// Newcomers take the full table's state: the crashed hosts, up to the
	// group's size, and a member restarted.
	for _, h := range gone {
		s.Start(h.Index, false)
	}
	waitUntil(t, s, 3000, "the newcomers joined", func() bool {
		for _, h := range gone {
			if !h.Node.Joined() {
				return false
			}
		}
		return true
	})
	s.Crash(late.Index)
	waitUntil(t, s, 3000, "the restarted member's old self removed", func() bool { return len(srv.Node.Members()) < hosts })
	s.Start(late.Index, false)
	waitUntil(t, s, 3000, "the restarted member joined", func() bool { return late.Node.Joined() })
	checkClean(t, s)
}
