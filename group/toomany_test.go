package group_test

import (
	"context"
	"errors"
	"fmt"
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
