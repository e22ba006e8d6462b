package arbiter_test

import (
	"testing"

	"github.com/mcnode/mcnode/arbiter"
	"github.com/mcnode/mcnode/internal/simtest"
	"github.com/mcnode/mcnode/wire"
)

// A takeover that cannot prove it knows every grant in effect waits out the
// old leases (Takeover.Wait). If its server dies during that wait, the next
// takeover must wait too, even by the backup it named: the grants it waited
// out are in no log. Here a grant reached only its grantee and the old
// backup, both cut off with the old server, which dies; the first takeover
// waits, its server dies, and a second one follows. No other member may get
// the resource while the grantee's lease runs. (Found by review: the second
// takeover was fast, and granted the resource beside the grantee.)
func TestWaitOutlivesItsServer(t *testing.T) {
	for seed := int64(1); seed <= 6; seed++ {
		s := newGroup(t, 9, seed, nil)
		srv, backup, others := roles(t, s)
		a := others[0]
		var minority, majority []int
		minority = []int{srv.Index, backup.Index, a.Index}
		for _, h := range others[1:] {
			majority = append(majority, h.Index)
		}
		s.Partition(minority, majority)
		acquire(t, s, a, "r")
		waitUntil(t, s, 30, "a holds r", func() bool { return holds(a, "r") })
		s.Crash(srv.Index)
		cut := s.Tick()
		waitUntil(t, s, 400, "a takeover", func() bool { return len(takeovers(s)) > 0 })
		tk := takeovers(s)[0]
		t.Logf("seed %d: takeover %+v at +%d (a holds r: %v)", seed, *tk, s.Tick()-cut, holds(a, "r"))
		if !tk.Wait {
			t.Logf("seed %d: not a Wait takeover", seed)
			continue
		}
		c1 := hostOf(s, tk.Server)
		b1 := hostOf(s, tk.Backup)
		s.Crash(c1.Index)
		waitUntil(t, s, 300, "a second takeover", func() bool { return len(takeovers(s)) > 1 })
		tk2 := takeovers(s)[1]
		t.Logf("seed %d: second takeover %+v at +%d by b1=%v (a holds r: %v)", seed, *tk2, s.Tick()-cut, b1 != nil && tk2.Server == b1.Node.ID(), holds(a, "r"))
		if !tk2.Wait {
			t.Fatalf("seed %d: the takeover after a waiting server died grants at once", seed)
		}
		var d *simtest.Host
		for _, h := range s.Hosts {
			if h.Alive && h != a && h != backup && h != c1 {
				d = h
				break
			}
		}
		acquire(t, s, d, "r")
		p := arbiter.DefaultConfig().Params
		waitUntil(t, s, int(p.LeaseTicks+p.LeaseMarginTicks)+200, "another member granted r once the leases ran out", func() bool { return granted(d, "r") })
		t.Logf("seed %d: d granted r at +%d; a holds r: %v", seed, s.Tick()-cut, holds(a, "r"))
		checkClean(t, s)
	}
}

// The same chain of takeovers against a member that takes a resource on its
// holder's release (enterOnRelease): Y queued behind X in the old epoch, a
// decision only the old server's backup and Y hold; the server dies, the
// backup is cut off, the first takeover waits and its server dies, a second
// follows. Y, which hears nothing but X's releases, stays in the old epoch
// under a lease that still runs, and may take r on X's release: the new
// epoch must not give r to Z before Y's lease has run out. (Found by
// review, with the second takeover fast.)
func TestEntryOnReleaseAfterChainedTakeovers(t *testing.T) {
	long := func(c *arbiter.Config) { c.Params.LeaseTicks = 300; c.Params.LeaseMarginTicks = 30 }
	for seed := int64(1); seed <= 6; seed++ {
		s := newGroup(t, 9, seed, long)
		srv, backup, others := roles(t, s)
		x, y, z := others[0], others[1], others[2]
		acquire(t, s, x, "r")
		waitUntil(t, s, 30, "x holds r", func() bool { return holds(x, "r") })
		phase := 1
		s.Opt.Drop = func(d *simtest.Datagram) bool {
			switch phase {
			case 1:
				if d.From == y.Index && d.To != srv.Index && d.To != backup.Index {
					return true
				}
				if d.From == srv.Index && d.To != y.Index && d.To != backup.Index && d.Has(wire.KindGrant) {
					return true
				}
			case 2:
				if d.From == y.Index {
					return true
				}
				if d.To == y.Index {
					if d.From != x.Index {
						return true
					}
					for _, m := range d.Packet.Messages {
						if _, ok := m.(*wire.Release); !ok {
							return true
						}
					}
				}
			}
			return false
		}
		acquire(t, s, y, "r")
		waitUntil(t, s, 30, "y queued, backed up", func() bool {
			rs := y.Node.Resources()
			return len(rs) == 1 && len(rs[0].Queue) == 1 && rs[0].Queue[0] == y.Node.ID()
		})
		s.RunTicks(2)
		phase = 2
		s.Crash(srv.Index)
		var rest []int
		for _, h := range s.Hosts {
			if h != srv && h != backup && h != y {
				rest = append(rest, h.Index)
			}
		}
		s.Partition([]int{backup.Index}, rest)
		cut := s.Tick()
		waitUntil(t, s, 400, "a takeover", func() bool { return len(takeovers(s)) > 0 })
		tk := takeovers(s)[0]
		c1 := hostOf(s, tk.Server)
		if !tk.Wait || c1 == x || c1 == z {
			t.Logf("seed %d: takeover %+v not usable", seed, *tk)
			continue
		}
		s.Crash(c1.Index)
		waitUntil(t, s, 300, "a second takeover", func() bool { return len(takeovers(s)) > 1 })
		tk2 := takeovers(s)[1]
		t.Logf("seed %d: takeovers %+v then %+v at +%d", seed, *tk, *tk2, s.Tick()-cut)
		if !tk2.Wait {
			t.Fatalf("seed %d: the takeover after a waiting server died grants at once", seed)
		}
		if hostOf(s, tk2.Server) == z || hostOf(s, tk2.Server) == x {
			continue
		}
		acquire(t, s, z, "r")
		waitUntil(t, s, 400, "z queued, once the new server waited out the leases", func() bool {
			rs := z.Node.Resources()
			return len(rs) == 1 && len(rs[0].Queue) == 1 && rs[0].Queue[0] == z.Node.ID()
		})
		if err := x.Node.Release("r"); err != nil {
			t.Fatal(err)
		}
		s.Check.Released(x, "r")
		s.Flush(x)
		s.RunTicks(20)
		t.Logf("seed %d: at +%d y holds r: %v (entered on release %d), z holds r: %v", seed, s.Tick()-cut, holds(y, "r"), y.Node.Stats().EnteredOnRelease, holds(z, "r"))
		checkClean(t, s)
	}
}

// The server and its backup die, and the member that takes over waits out
// the old leases; its new backup dies during that wait, and the group is
// idle. The server, which has waited the leases out itself, takes over from
// itself: it need not wait a second time (found by review: it did, and r
// was granted at about +520 ticks instead of +336).
func TestSelfTakeoverAfterOwnWaitDoesNotWaitAgain(t *testing.T) {
	exercised := 0
	for seed := int64(1); seed <= 6; seed++ {
		s := newGroup(t, 7, seed, nil)
		srv, backup, _ := roles(t, s)
		s.Crash(srv.Index)
		s.Crash(backup.Index)
		died := s.Tick()
		waitUntil(t, s, 400, "a takeover", func() bool { return len(takeovers(s)) > 0 })
		tk := takeovers(s)[0]
		if !tk.Wait {
			t.Logf("seed %d: first takeover fast", seed)
			continue
		}
		s.Crash(hostOf(s, tk.Backup).Index)
		waitUntil(t, s, 600, "a second takeover", func() bool { return len(takeovers(s)) > 1 })
		tk2 := takeovers(s)[1]
		h := hostOf(s, tk2.Backup)
		if tk2.Server != tk.Server || h == nil {
			t.Logf("seed %d: the second takeover %+v is not the first server's own", seed, *tk2)
			continue
		}
		exercised++
		acquire(t, s, h, "r")
		waitUntil(t, s, 600, "r granted", func() bool { return granted(h, "r") })
		t.Logf("seed %d: %+v then %+v; r granted at +%d ticks", seed, *tk, *tk2, s.Tick()-died)
		if tk2.Wait {
			t.Errorf("seed %d: the server waits the old leases out a second time: r granted at +%d", seed, s.Tick()-died)
		}
		checkClean(t, s)
	}
	if exercised < 3 {
		t.Fatalf("only %d of 6 seeds had the first server take over from itself", exercised)
	}
}
