package group_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/group/memnet"
)

// TestFloodIsRateLimited: one address floods the group with junk while its
// members take a lock in turn. What exceeds the rate limit is dropped and
// counted before it is decoded; the members, under their own load, are
// never limited, and the locks keep flowing.
func TestFloodIsRateLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := memnet.New(3)
		var gs []*group.Group
		for range 3 {
			cfg := memConfig(net)
			cfg.RateLimit = 2000 // a second's worth, 2,000, may come at once
			g, err := group.Join(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			gs = append(gs, g)
		}
		rogue := net.Endpoint()
		defer rogue.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		junk := []group.Datagram{{Data: []byte("not a datagram of any group")}}
		entries := 0
		for round := range 50 {
			for range 400 { // 20,000 in all, far beyond the burst
				if err := rogue.Send(junk); err != nil {
					t.Fatal(err)
				}
			}
			g := gs[round%len(gs)]
			l, err := g.Acquire(ctx, "r")
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			if err := l.Release(); err != nil {
				t.Fatal(err)
			}
			entries++
		}
		time.Sleep(time.Second) // the last of the flood arrives
		for i, g := range gs {
			st, err := g.Status()
			if err != nil {
				t.Fatal(err)
			}
			limited := st.Stats.Drops[group.DropRateLimited]
			malformed := st.Stats.Drops[group.DropMalformed]
			if limited == 0 || limited+malformed < 20000 {
				t.Errorf("node %d: %d rate-limited and %d malformed of the 20,000 flooded (drops %v)", i, limited, malformed, st.Stats.Drops)
			}
			if malformed > 5000 {
				t.Errorf("node %d decoded %d of the flood: the limit let too much through", i, malformed)
			}
		}
		if entries != 50 {
			t.Errorf("%d entries, want 50", entries)
		}
	})
}
