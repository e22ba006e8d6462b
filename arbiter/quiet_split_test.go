package arbiter_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/mcnode/mcnode/arbiter"
	"github.com/mcnode/mcnode/internal/simtest"
)

// A lock's holder is heard early in a turn and then cut off, in each of the
// shapes a LAN can take, with another member waiting for the lock: the
// server keeps a majority and carries the holder's silence on in its SYNC
// (wire.Sync.Quiet); the server is on the small side with the holder, or
// with neither holder nor waiter; the holder still hears the server but is
// heard by nobody, so that it answers every ping in vain. Where the holder
// is cut off the lock goes to the waiter only once the holder's lease, as
// the holder last saw it, and the margin have run out; where it is not, the
// holder keeps its lock through the takeover. The network heals, the holder
// (removed, it rejoins as the runtime has it do) comes back, and nothing diverges.
func TestQuietSilenceAcrossSplits(t *testing.T) {
	p := arbiter.DefaultConfig().Params
	margin := int64(p.LeaseMarginTicks)
	shapes := []struct {
		name    string
		cutOff  bool // the holder loses its lock
		isolate func(s *simtest.Sim, srv, backup, holder, waiter, other *simtest.Host)
	}{
		{"server keeps the majority, holder on the small side", true, func(s *simtest.Sim, srv, backup, holder, waiter, other *simtest.Host) {
			s.Partition([]int{srv.Index, backup.Index, waiter.Index}, []int{holder.Index, other.Index})
		}},
		{"server on the small side with the holder", true, func(s *simtest.Sim, srv, backup, holder, waiter, other *simtest.Host) {
			s.Partition([]int{srv.Index, holder.Index}, []int{backup.Index, waiter.Index, other.Index})
		}},
		{"server on the small side, holder on the big", false, func(s *simtest.Sim, srv, backup, holder, waiter, other *simtest.Host) {
			s.Partition([]int{srv.Index, other.Index}, []int{backup.Index, holder.Index, waiter.Index})
		}},
		{"holder hears everyone, heard by nobody", true, func(s *simtest.Sim, srv, backup, holder, waiter, other *simtest.Host) {
			for _, h := range s.Hosts {
				if h != holder {
					s.Cut(holder.Index, h.Index)
				}
			}
		}},
	}
	for _, shape := range shapes {
		var waits []int64
		for seed := int64(1); seed <= 60; seed++ {
			s := newGroup(t, 5, seed*13+5, nil)
			srv, backup, others := roles(t, s)
			holder, waiter, other := others[0], others[1], others[2]
			acquire(t, s, holder, "r")
			waitUntil(t, s, 60, "the holder holds r", func() bool { return holds(holder, "r") })
			acquire(t, s, waiter, "r")
			// The cut at any point of a turn, the holder heard just before.
			s.RunTicks(int(seed % 50))
			shape.isolate(s, srv, backup, holder, waiter, other)
			cut := s.Tick()
			// The lease the holder had, extended by whatever reached it
			// after the cut (the one-way shape keeps answering pings).
			expiry := int64(holder.Node.LeaseExpiry())
			lost := false
			done := s.RunUntil(s.Now+int64(1200)*simtest.SubTicks, func() bool {
				if holds(holder, "r") {
					expiry = max(expiry, int64(holder.Node.LeaseExpiry()))
				} else {
					lost = true
				}
				return granted(waiter, "r")
			})
			what := fmt.Sprintf("%s, seed %d", shape.name, seed)
			if shape.cutOff {
				if !done {
					t.Fatalf("%s: r not granted to the waiter within 1200 ticks of the cut", what)
				}
				if at := s.Tick(); at < expiry+margin {
					t.Fatalf("%s: r granted at tick %d, within the cut-off holder's lease (to %d) and its margin (%d)", what, at, expiry, margin)
				}
				waits = append(waits, s.Tick()-cut)
			} else {
				if done || lost {
					t.Fatalf("%s: the holder, on the majority's side, lost r (waiter granted: %v)", what, done)
				}
				release(t, s, holder, "r")
				waitUntil(t, s, 400, "r granted to the waiter after the release", func() bool { return granted(waiter, "r") })
			}
			s.Heal()
			// A member the group removed learns it once it hears the group,
			// and rejoins as a new one, as the runtime has it do.
			waitUntil(t, s, 1000, what+": every host back in the group after the heal", func() bool {
				all := true
				for _, h := range s.Hosts {
					if hasEvent(h, arbiter.EventRemoved) {
						s.Start(h.Index, false)
					}
					all = all && h.Node.Joined()
				}
				return all
			})
			s.RunTicks(200)
			checkClean(t, s)
		}
		if len(waits) > 0 {
			slices.Sort(waits)
			t.Logf("%s: r granted %d ticks after the cut at the median (%d to %d)", shape.name, waits[len(waits)/2], waits[0], waits[len(waits)-1])
		}
	}
}
