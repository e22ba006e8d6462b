package group_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/group/memnet"
)

// A state transfer is one unpaced burst of chunks from one address: the
// per-source rate limit must let a large one through (it once cut every
// retry at the same chunk, and a newcomer to a group holding 22,000 locks
// never joined).
func bigStateJoin(t *testing.T, locks, rateLimit int) {
	synctest.Test(t, func(t *testing.T) {
		net := memnet.New(7)
		var gs []*group.Group
		for i := 0; i < 2; i++ {
			cfg := memConfig(net)
			cfg.RateLimit = rateLimit
			g, err := group.Join(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			gs = append(gs, g)
		}
		defer func() {
			for _, g := range gs {
				g.Close()
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		holdMany(t, ctx, gs, locks, strings.Repeat("x", 110))
		st, _ := gs[0].Status()
		t.Logf("%d locks held in the group (%d resources in status)", locks, len(st.Resources))
		cfg := memConfig(net)
		cfg.RateLimit = rateLimit
		jctx, jcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer jcancel()
		g, err := group.Join(jctx, cfg)
		if g != nil {
			st, _ := g.Status()
			t.Logf("newcomer: drops %v, snapshots %+v", st.Stats.Drops, st.Stats.Machine.Snapshots)
			g.Close()
		}
		if err != nil {
			t.Errorf("rate limit %d: a newcomer cannot join a group holding %d locks: %v", rateLimit, locks, err)
		}
	})
}

func TestLargeStateTransferPassesTheRateLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("22,000 locks")
	}
	bigStateJoin(t, 22000, 0)
}

// holdMany has the nodes take locks named prefix-NNNNNN among them, many at
// a time, and hold them.
func holdMany(t *testing.T, ctx context.Context, gs []*group.Group, locks int, prefix string) []*group.Lease {
	t.Helper()
	leases := make([]*group.Lease, locks)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	errs := make(chan error, 1)
	for i := range locks {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			l, err := gs[i%len(gs)].Acquire(ctx, fmt.Sprintf("%s-%06d", prefix, i))
			leases[i] = l
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	return leases
}

// lost counts the leases lost: on a host so loaded that a member went
// unheard for a lease, the group freed what it held.
func lost(leases []*group.Lease) int {
	n := 0
	for _, l := range leases {
		if l.Err() != nil {
			n++
		}
	}
	return n
}
