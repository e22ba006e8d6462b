package arbiter_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/mcnode/mcnode/arbiter"
	"github.com/mcnode/mcnode/internal/simtest"
)

// TestLockTableStaysWithinAStateTransfer: the group admits a lock, or a
// waiter, only while its state, with room kept for the members it may still
// admit, fits a state transfer (Limits.MaxSnapshot). Filled with locks of
// the longest names and with waiters, it refuses the next lock and the next
// waiter with ErrTooMany, at a member and at the server itself; and then,
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
	take := func(h *simtest.Host, i int) error {
		t.Helper()
		req, err := h.Node.Acquire(name(i))
		if err != nil {
			return err
		}
		s.Check.Acquired(h, req)
		s.Flush(h)
		return nil
	}
	// A few locks, each waited for by the server and its backup.
	const first = 6
	for i := range first {
		if err := take(a, i); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, s, 100, "a holds "+name(i)[120:], func() bool { return holds(a, name(i)) })
	}
	for i := range first {
		for _, h := range []*simtest.Host{srv, backup} {
			if err := take(h, i); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitUntil(t, s, 200, "the server and the backup wait for every lock", func() bool {
		queued := 0
		for _, r := range late.Node.Resources() {
			queued += len(r.Queue)
		}
		return queued == 2*first
	})
	// Then locks until the table is full.
	held := first
	for ; ; held++ {
		if held == 1000 {
			t.Fatalf("%d locks with 128-byte names taken, and no ErrTooMany under a %d-byte state transfer", held, limit)
		}
		err := take(a, held)
		if errors.Is(err, arbiter.ErrTooMany) {
			t.Logf("lock %d refused: %v", held, err)
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		waitUntil(t, s, 100, "a holds "+name(held)[120:], func() bool { return holds(a, name(held)) })
	}
	waitUntil(t, s, 100, "every member's state shows the locks", func() bool {
		return len(srv.Node.Resources()) == held && len(late.Node.Resources()) == held
	})
	if err := take(srv, held); !errors.Is(err, arbiter.ErrTooMany) {
		t.Fatalf("the server's own Acquire of a new lock with the table full: err = %v, want ErrTooMany", err)
	}
	waiters := 0
	for i := range held {
		err := take(late, i)
		if errors.Is(err, arbiter.ErrTooMany) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		waiters++
		s.RunTicks(3)
	}
	if waiters == held {
		t.Fatalf("late waited for all %d locks without ErrTooMany", held)
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
