package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mcnode/mcnode/internal/errkind"
	"github.com/mcnode/mcnode/quorumfallback/protocols"
)

// A node whose table is full refuses a new resource at once with
// ErrTooMany, which matches mcnode.ErrTooMany; a resource it keeps may
// still be asked for, and a new one once one is freed. The node refused is
// the one that holds every lock: the dangerous case for a table that must
// not lose what it keeps.
func TestAcquireBeyondMaxResourcesIsRefused(t *testing.T) {
	old := maxResources
	maxResources = 2
	t.Cleanup(func() { maxResources = old })
	nodes := startMem(t, protocols.Maekawa, "fpp", 3)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := nodes[0].Acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := nodes[0].Acquire(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	_, err = nodes[0].Acquire(ctx, "c")
	if !errors.Is(err, ErrTooMany) || !errors.Is(err, errkind.TooMany) {
		t.Fatalf("a third resource: err = %v, want ErrTooMany matching errkind.TooMany (mcnode.ErrTooMany)", err)
	}
	t.Log(err)
	if err := a.Release(); err != nil {
		t.Fatal(err)
	}
	again, err := nodes[0].Acquire(ctx, "a") // freed and asked for again: a new machine
	if err != nil {
		t.Fatalf("after a release: %v", err)
	}
	for _, l := range []*Lease{again, b} {
		if err := l.Release(); err != nil {
			t.Fatal(err)
		}
	}
	if st, _ := nodes[0].Status(); len(st.Held) != 0 {
		t.Fatalf("still holds %v", st.Held)
	}
}
