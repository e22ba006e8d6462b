package arbiter_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/mcnode/mcnode/arbiter"
	"github.com/mcnode/mcnode/internal/simtest"
	"github.com/mcnode/mcnode/wire"
)

// A SYNC lists at most maxListed unheard members (41 in a 1,400-byte
// datagram), longest silent first. A member it leaves out used to renew its
// lease from its first answer to the turn's pings, which, for a member
// paused through the turn, is an answer sent as it resumed, after the SYNC
// was sent, while the group counted its silence only from the next turn: a
// paused holder kept its lock past the group's reclaiming it. With three
// voters a script host's 42 lock commands (observers) dropping off the
// network for one turn is no lost majority, so this is reachable. A SYNC
// whose lists were cut short (Partial) now renews no lease. The holder has
// the highest ID (listed last among equal silences), pauses for most of its
// lease, and resumes cut off; the voters are busy, or turns short.
func TestPartialSyncRenewsNoLease(t *testing.T) {
	t.Run("TurnTicks=10", func(t *testing.T) {
		overflowScenario(t, func(c *arbiter.Config) { c.TurnTicks, c.PingTimeoutTicks = 10, 10 }, 125, false)
	})
	for _, after := range []int64{110, 120, 130} {
		t.Run(fmt.Sprintf("defaults, busy voters, resume after %d", after), func(t *testing.T) { overflowScenario(t, nil, after, true) })
	}
}

// overflowScenario runs the case: three voters, 45 hosts that ask to be
// observers, the holder the observer with the highest ID.
func overflowScenario(t *testing.T, tweak func(*arbiter.Config), resumeAfter int64, load bool) {
	const nv, observers = 3, 45
	var s *simtest.Sim
	for seed := int64(1); seed < 20 && s == nil; seed++ {
		c := simtest.New(simtest.Options{Seed: seed, Hosts: nv + observers, Observers: observers, Trace: traceTo(t),
			Tweak: tweak})
		if !c.RunUntil(c.Now+3000*simtest.SubTicks, func() bool { return allJoined(c) }) {
			continue
		}
		v, o := voters(c.Hosts[0])
		if v >= nv && o >= 43 {
			s = c
		}
	}
	if s == nil {
		t.Fatal("no group of 3 voters and 43 observers")
	}
	obs := observerHosts(s)
	slices.SortFunc(obs, func(a, b *simtest.Host) int { return int(a.Node.ID()) - int(b.Node.ID()) })
	target, rest := obs[len(obs)-1], obs[:len(obs)-1] // the highest ID: listed last among equal silences
	acquire(t, s, target, "r")
	waitUntil(t, s, 200, "the target holds r", func() bool { return holds(target, "r") })
	w := voterBesides(s, server(s))
	acquire(t, s, w, "r")
	var loaders []*simtest.Host
	for _, h := range s.Hosts {
		if !h.Node.Observer() && h != w {
			loaders = append(loaders, h)
		}
	}
	run := func(ticks int, what string, cond func() bool) {
		t.Helper()
		for i := 0; i < ticks; i++ {
			if cond != nil && cond() {
				return
			}
			if load {
				churn(s, loaders, 4)
			}
			s.RunTicks(1)
		}
		if cond != nil && !cond() {
			t.Fatalf("tick %d: not within %d ticks: %s", s.Tick(), ticks, what)
		}
	}
	run(30, "", nil)
	// At the start of a turn, the target pauses and the script host's 42
	// observers drop off the network.
	syncs := len(decisions[*wire.Sync](s))
	run(200, "a SYNC", func() bool { return len(decisions[*wire.Sync](s)) > syncs })
	x := s.Tick()
	s.Pause(target.Index, false)
	var restIdx, others []int
	for _, h := range rest {
		restIdx = append(restIdx, h.Index)
	}
	for _, h := range s.Hosts {
		if !slices.Contains(restIdx, h.Index) {
			others = append(others, h.Index)
		}
	}
	s.Partition(restIdx, others)
	syncs = len(decisions[*wire.Sync](s))
	run(200, "the next SYNC", func() bool { return len(decisions[*wire.Sync](s)) > syncs })
	sy := decisions[*wire.Sync](s)[syncs]
	listed := slices.ContainsFunc(sy.Unheard, func(u wire.Silence) bool { return u.ID == target.Node.ID() })
	t.Logf("tick %d: SYNC lists %d unheard, the target among them: %v", s.Tick(), len(sy.Unheard), listed)
	s.Heal()
	// Resume the target just before its own lease (renewed before the
	// pause) runs out, and cut it off both ways: it hears nothing more.
	run(300, "near the end of the target's lease", func() bool { return s.Tick() >= x+resumeAfter })
	var all []int
	for _, h := range s.Hosts {
		if h != target {
			all = append(all, h.Index)
		}
	}
	s.Partition([]int{target.Index}, all)
	s.Resume(target.Index)
	t.Logf("tick %d: the target resumed, holds r %v, lease expires in %d ticks", s.Tick(), holds(target, "r"), int64(target.Node.LeaseExpiry())-int64(target.Node.Now()))
	run(400, "w holds r", func() bool { return holds(w, "r") })
	t.Logf("tick %d: w holds r; the target still holds it: %v (lease expires in %d ticks)", s.Tick(), holds(target, "r"), int64(target.Node.LeaseExpiry())-int64(target.Node.Now()))
	run(200, "", nil)
	checkClean(t, s)
}

// churn has each running member of hosts release the resources busy0 to
// busy(k-1) it holds and ask for those it neither holds nor waits for: one
// step of a steady load.
func churn(s *simtest.Sim, hosts []*simtest.Host, k int) {
	for _, h := range hosts {
		if !h.Alive || h.Paused || !h.Node.Joined() {
			continue
		}
		for i := 0; i < k; i++ {
			r := fmt.Sprintf("busy%d", i)
			if holds(h, r) {
				s.Check.Released(h, r)
				_ = h.Node.Release(r)
			} else if !slices.Contains(h.Node.Waiting(), r) {
				if req, err := h.Node.Acquire(r); err == nil {
					s.Check.Acquired(h, req)
				}
			}
		}
		s.Flush(h)
	}
}
