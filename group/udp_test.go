package group_test

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/internal/netns"
)

// Five nodes in one process over real UDP multicast (on the loopback
// interface of a private network namespace) contend for three resources for
// a few seconds: no two holders of a resource overlap, every Acquire is
// served, and the datagrams per entry are what the simulation predicts.
func TestUDPMulticastFiveNodes(t *testing.T) {
	if !netns.Isolate(t) {
		return
	}
	const nodes, resources = 5, 3
	run := 3 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var gs []*group.Group
	for i := 0; i < nodes; i++ {
		cfg := group.DefaultLocalConfig()
		cfg.Name = "udp-test"
		g, err := group.Join(ctx, cfg)
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		defer g.Close()
		gs = append(gs, g)
	}
	type interval struct{ from, to time.Time }
	var mu sync.Mutex
	held := make([][]interval, resources)
	var entries, failures int
	var wg sync.WaitGroup
	stop := time.Now().Add(run)
	for i, g := range gs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(i)))
			for time.Now().Before(stop) {
				r := rng.Intn(resources)
				l, err := g.Acquire(ctx, fmt.Sprintf("r%d", r))
				if err != nil {
					mu.Lock()
					failures++
					mu.Unlock()
					t.Errorf("node %d: Acquire: %v", i, err)
					return
				}
				from := time.Now()
				time.Sleep(time.Duration(rng.Intn(300)) * time.Microsecond)
				to := time.Now()
				if err := l.Release(); err != nil {
					t.Errorf("node %d: Release: %v", i, err)
				}
				mu.Lock()
				held[r] = append(held[r], interval{from, to})
				entries++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	overlaps := 0
	for r := range held {
		for a := range held[r] {
			for b := a + 1; b < len(held[r]); b++ {
				x, y := held[r][a], held[r][b]
				if x.from.Before(y.to) && y.from.Before(x.to) {
					overlaps++
				}
			}
		}
	}
	var core, other uint64
	for _, g := range gs {
		st, err := g.Status()
		if err != nil {
			t.Fatal(err)
		}
		for c, n := range st.Stats.Sent {
			if c.Core() {
				core += n
			} else {
				other += n
			}
		}
		if st.Stats.Malformed+st.Stats.Foreign+st.Stats.Forged > 0 {
			t.Errorf("node %d dropped datagrams: %+v", st.Self, st.Stats)
		}
	}
	perEntry := float64(core) / float64(entries)
	t.Logf("%d entries in %v over real multicast (%.0f/s), %d overlaps, %.3f datagrams per entry (request+grant+release), %.3f membership",
		entries, run, float64(entries)/run.Seconds(), overlaps, perEntry, float64(other)/float64(entries))
	if overlaps > 0 || failures > 0 || entries == 0 {
		t.Fatalf("%d overlaps, %d failed Acquires, %d entries", overlaps, failures, entries)
	}
	if perEntry > 3 {
		t.Errorf("%.3f datagrams per entry; the simulation at heavy load gives at most 3", perEntry)
	}
}
