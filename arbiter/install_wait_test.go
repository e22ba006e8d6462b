package arbiter_test

import (
	"testing"

	"github.com/mcnode/mcnode/arbiter"
	"github.com/mcnode/mcnode/internal/simtest"
	"github.com/mcnode/mcnode/wire"
)

// A member gets, by state transfer, a state of an epoch that began with a
// Takeover that waits out older leases, at its Next (a turn start: no
// decision since), and the waiting server dies. The member then wins the
// next epoch with that epoch's backup's vote: it must wait too, for the
// grant the waiting server never knew of (S holds r, cut off) may still be
// in use. (From a hostile review: no other test failed when an installed
// state always counted as past any wait.)
//
// Seven members. S serves epoch 1, B is its backup. S takes r; the grant
// reaches S, B and N only. N is paused; S and B are cut off. X takes over
// epoch 2 (B did not vote: it waits). N resumes, finds its log past where
// epoch 2 began, and installs the state. X dies while it waits. N claims
// epoch 3 (the others' claims are lost) and P asks for r.
func TestInstalledWaitingEpochStillWaits(t *testing.T) {
	ran := 0
	for seed := int64(950201); seed <= 950210; seed++ {
		if installScenario(t, seed) {
			ran++
		}
	}
	if ran < 6 {
		t.Errorf("the schedule came about with %d of 10 seeds", ran)
	}
}

func installScenario(t *testing.T, seed int64) bool {
	tweak := func(c *arbiter.Config) { c.Params.LeaseTicks, c.Params.LeaseMarginTicks = 400, 40 }
	s := newGroup(t, 7, seed, tweak)
	srv, b, rest := roles(t, s)
	n := rest[len(rest)-1]
	S, B, N := srv.Index, b.Index, n.Index
	phase := 0
	var x *simtest.Host
	s.Opt.Drop = func(d *simtest.Datagram) bool {
		from, to := d.From, d.To
		if phase == 0 && from == S && to != B && to != N {
			for _, m := range d.Packet.Messages {
				if g, ok := m.(*wire.Grant); ok && g.Resource == "r" {
					return true
				}
			}
		}
		if phase >= 1 {
			a := map[int]bool{S: true, B: true}
			if a[from] != a[to] {
				return true
			}
		}
		if phase >= 2 && d.Has(wire.KindClaim) && from != N {
			return true
		}
		return false
	}
	acquire(t, s, srv, "r")
	if !s.RunUntil(s.Now+50*simtest.SubTicks, func() bool { return granted(srv, "r") }) {
		t.Logf("seed %d: S not granted", seed)
		return false
	}
	phase = 1
	s.Pause(N, false)
	if !s.RunUntil(s.Now+300*simtest.SubTicks, func() bool {
		x = server(s)
		return x != nil && x != srv && x.Node.Epoch() == 2
	}) {
		t.Logf("seed %d: nobody serves epoch 2", seed)
		return false
	}
	tk := takeovers(s)
	if len(tk) == 0 || !tk[len(tk)-1].Wait {
		t.Logf("seed %d: epoch 2 does not wait", seed)
		return false
	}
	s.Resume(N)
	if !s.RunUntil(s.Now+40*simtest.SubTicks, func() bool { return n.Node.Epoch() == 2 && n.Node.Stats().Snapshots > 0 }) {
		t.Logf("seed %d: N did not install epoch 2's state (epoch %d, snapshots %d)", seed, n.Node.Epoch(), n.Node.Stats().Snapshots)
		return false
	}
	if n.Node.T() != tk[len(tk)-1].Next {
		t.Logf("seed %d: N's state is at T=%d, not at epoch 2's Next %d", seed, n.Node.T(), tk[len(tk)-1].Next)
		return false
	}
	phase = 2
	s.Crash(x.Index)
	var p *simtest.Host
	for _, h := range rest {
		if h != n && h != x {
			p = h
			break
		}
	}
	acquire(t, s, p, "r")
	ok := s.RunUntil(s.Now+400*simtest.SubTicks, func() bool { return granted(p, "r") })
	for _, d := range takeovers(s) {
		t.Logf("takeover %+v", *d)
	}
	t.Logf("seed %d: S=h%d B=h%d N=h%d X=h%d P=h%d; P granted r: %v, S holds r: %v", seed, S, B, N, x.Index, p.Index, ok, holds(srv, "r"))
	if last := takeovers(s); len(last) < 2 || last[len(last)-1].Server != n.Node.ID() {
		t.Logf("seed %d: N did not take over epoch 3", seed)
		return false
	}
	checkClean(t, s)
	return true
}
