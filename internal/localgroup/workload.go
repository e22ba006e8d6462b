package localgroup

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcnode/mcnode"
)

// Workload is a lock workload. Heavy (the default): every node takes a
// random one of the locks over and over, holding it a random time up to
// Hold. Light: one entry at a time, by a random node, Gap apart, so that
// each finds the group idle.
type Workload struct {
	// Locks is the number of locks, named Prefix0, Prefix1, ... (a single
	// lock is named Prefix alone). Default 1.
	Locks  int
	Prefix string
	// Hold is the longest time an entry holds its lock.
	Hold     time.Duration
	Duration time.Duration
	Light    bool
	Gap      time.Duration
	// Seed seeds the choices of lock, hold and (light load) node.
	Seed int64
}

// Progress is read while a workload runs.
type Progress struct {
	Entries, Overlaps atomic.Int64
}

// Result is what a workload run saw. Every entry checks that nobody else is
// inside its lock, against one clock: the nodes share this process.
type Result struct {
	Entries  int
	PerNode  []int
	Overlaps int
	// Waits are the times from asking to entering; Cycles from asking to
	// having released; Syncs, for an entry asked for before the lock's
	// last release, the time from that release to this entry (the
	// synchronization delay).
	Waits, Cycles, Syncs []time.Duration
	Elapsed              time.Duration
	// Err is the first error an Acquire or Release returned; that node
	// stopped there.
	Err error
}

// Drive runs w on nodes until w.Duration has passed and every entry under
// way has finished. A hold is cut short at the end of the duration, and
// the entries of the waiters left then hold for nothing; p, if not nil, follows the counts as they go. An
// Acquire still waiting 30 s after the end fails the run.
func Drive(nodes []mcnode.Locker, w Workload, p *Progress) Result {
	if p == nil {
		p = &Progress{}
	}
	locks := max(w.Locks, 1)
	name := func(i int) string {
		if locks == 1 {
			return w.Prefix
		}
		return fmt.Sprintf("%s%d", w.Prefix, i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.Duration+30*time.Second)
	defer cancel()
	var (
		inside   = make([]atomic.Int32, locks)
		released = make([]atomic.Int64, locks) // ns since start of the lock's last release
		mu       sync.Mutex
		r        = Result{PerNode: make([]int, len(nodes))}
	)
	start := time.Now()
	stop := start.Add(w.Duration)
	since := func() int64 { return int64(time.Since(start)) }
	// one is one entry by node i on lock k.
	one := func(i, k int, hold time.Duration) error {
		asked := since()
		l, err := nodes[i].Acquire(ctx, name(k))
		if err != nil {
			return err
		}
		entered := since()
		if inside[k].Add(1) != 1 {
			p.Overlaps.Add(1)
		}
		var syncDelay time.Duration
		if last := released[k].Load(); last > 0 && asked <= last {
			syncDelay = time.Duration(entered - last)
		}
		// A section under way when the time is up ends there: with long
		// holds, the sections of the queue that formed would otherwise
		// run the workload a hold per waiter past its duration.
		if hold = min(hold, time.Until(stop)); hold > 0 {
			time.Sleep(hold)
		}
		inside[k].Add(-1)
		released[k].Store(since())
		err = l.Release()
		p.Entries.Add(1)
		mu.Lock()
		defer mu.Unlock()
		r.Entries++
		r.PerNode[i]++
		r.Waits = append(r.Waits, time.Duration(entered-asked))
		r.Cycles = append(r.Cycles, time.Duration(since()-asked))
		if syncDelay > 0 {
			r.Syncs = append(r.Syncs, syncDelay)
		}
		return err
	}
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if r.Err == nil {
			r.Err = err
		}
	}
	// pick draws only what varies, so that a workload of one lock and no
	// hold draws nothing but its nodes (as the benchmark always has).
	pick := func(rng *rand.Rand) (k int, hold time.Duration) {
		if locks > 1 {
			k = rng.Intn(locks)
		}
		if w.Hold > 0 {
			hold = time.Duration(rng.Int63n(int64(w.Hold) + 1))
		}
		return k, hold
	}
	if w.Light {
		rng := rand.New(rand.NewSource(w.Seed))
		for time.Now().Before(stop) {
			i := rng.Intn(len(nodes))
			k, hold := pick(rng)
			if err := one(i, k, hold); err != nil {
				fail(err)
				break
			}
			time.Sleep(w.Gap)
		}
	} else {
		var wg sync.WaitGroup
		for i := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewSource(w.Seed + int64(i)))
				for time.Now().Before(stop) {
					k, hold := pick(rng)
					if err := one(i, k, hold); err != nil {
						fail(fmt.Errorf("node %d: %w", i, err))
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	r.Elapsed = time.Since(start)
	r.Overlaps = int(p.Overlaps.Load())
	if errors.Is(r.Err, context.DeadlineExceeded) {
		r.Err = fmt.Errorf("a lock was not granted within %v of the run's end", 30*time.Second)
	}
	return r
}

// Percentile returns the p-quantile of xs (nearest rank), 0 for none.
func Percentile[T ~int64 | ~float64](xs []T, p float64) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(int(p*float64(len(s))), len(s)-1)]
}
