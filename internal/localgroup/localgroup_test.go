package localgroup

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/mcnode/mcnode"
	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/internal/netns"
	"github.com/mcnode/mcnode/internal/syncbuf"
)

// TestBothModes starts a group of each mode and drives a workload on it:
// entries on every node, no overlap, traffic counted.
func TestBothModes(t *testing.T) {
	for _, mode := range []mcnode.Mode{mcnode.Multicast, mcnode.Quorum} {
		for _, memory := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/memory=%v", mode, memory), func(t *testing.T) { drive(t, mode, memory) })
		}
	}
}

func drive(t *testing.T, mode mcnode.Mode, memory bool) {
	{
		{
			if mode == mcnode.Multicast && !memory && !netns.Isolate(t) {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			g, err := Start(ctx, Options{Mode: mode, N: 3, Protocol: "maekawa", Coterie: "grid", Memory: memory})
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			before := g.Traffic()
			var p Progress
			r := Drive(g.Nodes, Workload{Locks: 2, Prefix: "l", Hold: time.Millisecond, Duration: 500 * time.Millisecond, Seed: 1}, &p)
			if r.Err != nil || r.Overlaps != 0 || r.Entries == 0 || int64(r.Entries) != p.Entries.Load() {
				t.Fatalf("result %+v (progress %d)", r, p.Entries.Load())
			}
			for i, n := range r.PerNode {
				if n == 0 {
					t.Errorf("node %d entered no critical section", i)
				}
			}
			if after := g.Traffic(); after.Core <= before.Core || after.Bytes <= before.Bytes && !(memory && mode == mcnode.Quorum) {
				t.Errorf("traffic %+v after %+v: the workload sent nothing", after, before)
			}
			if err := g.Leave(ctx); err != nil {
				t.Error(err)
			}
		}
	}
}

// everyone is a Locker that grants every Acquire at once: Drive must see
// the overlaps it causes.
type everyone struct{ mcnode.Locker }

type freeLease struct{ mcnode.Lease }

func (everyone) Acquire(context.Context, string) (mcnode.Lease, error) { return freeLease{}, nil }
func (freeLease) Release() error                                       { return nil }

func TestDriveSeesOverlaps(t *testing.T) {
	r := Drive([]mcnode.Locker{everyone{}, everyone{}, everyone{}}, Workload{Hold: time.Millisecond, Duration: 200 * time.Millisecond}, nil)
	if r.Overlaps == 0 {
		t.Errorf("three nodes granted at once, and Drive saw no overlap in %d entries", r.Entries)
	}
}

type refusing struct{ mcnode.Locker }

func (refusing) Acquire(context.Context, string) (mcnode.Lease, error) {
	return nil, errors.New("no")
}

func TestDriveReportsErrors(t *testing.T) {
	r := Drive([]mcnode.Locker{refusing{}}, Workload{Duration: 100 * time.Millisecond, Light: true}, nil)
	if r.Err == nil || r.Entries != 0 {
		t.Errorf("result %+v, want the error and no entries", r)
	}
}

func TestPercentile(t *testing.T) {
	xs := []time.Duration{5, 1, 4, 2, 3}
	if got := Percentile(xs, 0.5); got != 3 {
		t.Errorf("p50 = %d, want 3", got)
	}
	if got := Percentile(xs, 0.99); got != 5 {
		t.Errorf("p99 = %d, want 5", got)
	}
	if xs[0] != 5 {
		t.Error("Percentile sorted its argument")
	}
	if got := Percentile([]float64(nil), 0.5); got != 0 {
		t.Errorf("p50 of nothing = %v", got)
	}
}

func TestStartRefuses(t *testing.T) {
	ctx := context.Background()
	for _, opt := range []Options{{N: 0}, {Mode: "ring", N: 2}, {Mode: mcnode.Quorum, N: 3, Protocol: "nope"}} {
		if g, err := Start(ctx, opt); err == nil {
			g.Close()
			t.Errorf("Start(%+v) succeeded", opt)
		}
	}
}

// oneAtATime grants one lock to one node at a time, in process.
type oneAtATime struct {
	mcnode.Locker
	sem chan struct{}
}

type semLease struct {
	mcnode.Lease
	sem chan struct{}
}

func (l oneAtATime) Acquire(ctx context.Context, _ string) (mcnode.Lease, error) {
	select {
	case l.sem <- struct{}{}:
		return semLease{sem: l.sem}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l semLease) Release() error { <-l.sem; return nil }

// The sections under way when the duration is up end there: with holds far
// longer than the duration, the demo ran a hold per waiter past it (15 s
// for --duration 2s --hold 10s) and reported its rate per second asked for.
func TestDriveEndsHoldsAtTheDuration(t *testing.T) {
	sem := make(chan struct{}, 1)
	nodes := []mcnode.Locker{oneAtATime{sem: sem}, oneAtATime{sem: sem}, oneAtATime{sem: sem}}
	done := make(chan Result, 1)
	go func() { done <- Drive(nodes, Workload{Hold: time.Hour, Duration: time.Second, Seed: 1}, nil) }()
	select {
	case r := <-done:
		if r.Err != nil || r.Overlaps != 0 || r.Entries < 3 {
			t.Fatalf("result %+v: want every node's entry, no overlap, no error", r)
		}
		if r.Elapsed > 5*time.Second {
			t.Errorf("ran %v with a duration of 1s", r.Elapsed)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Drive runs on 19 s past its duration of 1 s")
	}
}

// The first node of a local multicast group founds it, as it must: the
// warning a daemon gives for that (multicast may not reach the other
// hosts) is dropped, and the rest of the log is kept.
func TestNoFoundingWarning(t *testing.T) {
	var out syncbuf.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := Start(ctx, Options{Mode: mcnode.Multicast, N: 2, Memory: true, Logger: zerolog.New(&out)})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Leave(ctx); err != nil {
		t.Error(err)
	}
	g.Close()
	log := out.String()
	if strings.Contains(log, group.FoundedWarning) || !strings.Contains(log, "joined the group") {
		t.Errorf("the local group's log holds the founding warning, or lacks the joins:\n%s", log)
	}
}
