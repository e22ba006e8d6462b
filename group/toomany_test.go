package group_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/group/memnet"
	"github.com/mcnode/mcnode/internal/errkind"
)

// A lock not in use, asked for while the group has as many in use as a
// state may list (65,536; 16 here), is refused by the server with
// ErrTooMany (which matches mcnode.ErrTooMany), not left waiting for room
// without a word; a lock in use may still be waited for, and once one is
// freed a new one may be taken at once: the server, not the asker's
// possibly older state, decides.
func TestAcquireBeyondTheLockTableIsRefused(t *testing.T) {
	const limit = 16
	group.SetMaxResourcesForTest(t, limit)
	synctest.Test(t, func(t *testing.T) {
		gs := joinAll(t, memnet.New(3), 2)
		ctx := context.Background()
		var first *group.Lease
		for i := 0; i < limit; i++ {
			l, err := gs[0].Acquire(ctx, fmt.Sprintf("lock-%d", i))
			if err != nil {
				t.Fatalf("Acquire %d of %d: %v", i, limit, err)
			}
			if i == 0 {
				first = l
			}
		}
		_, err := gs[1].Acquire(ctx, "one-too-many")
		if !errors.Is(err, group.ErrTooMany) || !errors.Is(err, errkind.TooMany) {
			t.Fatalf("Acquire past the limit: err = %v, want ErrTooMany", err)
		}
		t.Log(err)
		waiting := make(chan error, 1)
		go func() {
			l, err := gs[1].Acquire(ctx, "lock-0") // in use: it waits
			if err == nil {
				err = l.Release()
			}
			waiting <- err
		}()
		queued := func() bool { // gs[1]'s request for lock-0 waits in its queue
			st, err := gs[0].Status()
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range st.Resources {
				if r.Name == "lock-0" && len(r.Queue) == 1 {
					return true
				}
			}
			return false
		}
		for i := 0; i < 100 && !queued(); i++ {
			time.Sleep(10 * time.Millisecond)
		}
		if !queued() {
			t.Fatal("gs[1]'s request for lock-0, which is in use, did not queue")
		}
		if err := first.Release(); err != nil {
			t.Fatal(err)
		}
		if err := <-waiting; err != nil {
			t.Fatalf("Acquire of a lock in use: %v", err)
		}
		l, err := gs[1].Acquire(ctx, "one-too-many")
		if err != nil {
			t.Fatalf("Acquire once a lock was freed: %v", err)
		}
		l.Release()
	})
}

// A TryAcquire of a lock in use that the server refuses because the lock
// table has no room for one more waiter reports ErrLocked, as it would with
// room to spare: it would not have waited. One of a lock not in use, refused
// for the same want of room, reports ErrTooMany. The table is filled to the
// byte (a 16 KiB state transfer), both other members ask in turn, the server
// among them whenever it is one of them, and nothing they were refused
// changes the table.
func TestTryAcquireOfABusyLockWithNoRoomToWaitIsLocked(t *testing.T) {
	group.SetMaxSnapshotForTest(t, 16<<10)
	synctest.Test(t, func(t *testing.T) {
		gs := joinAll(t, memnet.New(5), 3)
		ctx := context.Background()
		// Locks with long names, then shorter ones, until not even a name
		// of one byte fits.
		var held []string
		for size := 128; size >= 1; size /= 2 {
			for {
				name := fmt.Sprintf("%d-", len(held))
				name += strings.Repeat("x", max(size-len(name), 0))
				_, err := gs[0].Acquire(ctx, name)
				if errors.Is(err, group.ErrTooMany) {
					break
				}
				if err != nil {
					t.Fatalf("Acquire %q: %v", name, err)
				}
				held = append(held, name)
			}
		}
		t.Logf("%d locks in use", len(held))
		// Waiters on the locks in use, until one is refused: the table
		// has no room to wait either.
		waitCtx, stopWaiting := context.WithCancel(ctx)
		defer stopWaiting()
		results := make(chan error, 2*len(held))
		full := false
		for i := 0; i < len(held)-1 && !full; i++ {
			for _, g := range gs[1:] {
				go func() {
					_, err := g.Acquire(waitCtx, held[i])
					results <- err
				}()
				time.Sleep(time.Second)
				select {
				case err := <-results:
					if !errors.Is(err, group.ErrTooMany) {
						t.Fatalf("a waiter for %q: %v, want it queued or ErrTooMany", held[i], err)
					}
					full = true
				default: // queued
				}
				if full {
					break
				}
			}
		}
		if !full {
			t.Fatalf("every lock but the last has two waiters, and none was refused: the table had room")
		}
		before := queues(t, gs[0])
		busy := held[len(held)-1] // nobody waits for it
		for i, g := range gs[1:] {
			_, err := g.TryAcquire(ctx, busy)
			if !errors.Is(err, group.ErrLocked) || !errors.Is(err, errkind.Locked) || errors.Is(err, group.ErrTooMany) {
				t.Fatalf("member %d: TryAcquire of a lock in use with no room to wait: err = %v, want ErrLocked", i+1, err)
			}
			t.Log(err)
			_, err = g.TryAcquire(ctx, "not-in-use")
			if !errors.Is(err, group.ErrTooMany) {
				t.Fatalf("member %d: TryAcquire of a lock not in use with no room: err = %v, want ErrTooMany", i+1, err)
			}
		}
		if after := queues(t, gs[0]); after != before {
			t.Fatalf("the refusals changed the table: %d locks and %d waiters before, %v after", before[0], before[1], after)
		}
		stopWaiting()
	})
}

// queues counts the locks in use and the requests waiting, as g's state
// has them.
func queues(t *testing.T, g *group.Group) [2]int {
	t.Helper()
	st, err := g.Status()
	if err != nil {
		t.Fatal(err)
	}
	n := [2]int{len(st.Resources), 0}
	for _, r := range st.Resources {
		n[1] += len(r.Queue)
	}
	return n
}
