package arbiter_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/mcnode/mcnode/arbiter"
	"github.com/mcnode/mcnode/internal/simtest"
	"github.com/mcnode/mcnode/wire"
)

// newObserverGroup starts hosts of which the last observers ask to be
// observers, and waits until every host joined. The admission order depends
// on the seed (a newcomer that asks to be an observer is admitted as a voter
// while the group has fewer than MinVoters): it takes the first seed from
// seed on whose group has exactly the voters and observers asked for.
func newObserverGroup(t *testing.T, hosts, observers int, seed int64) *simtest.Sim {
	t.Helper()
	for try := seed; try < seed+50; try++ {
		s := simtest.New(simtest.Options{Seed: try, Hosts: hosts, Observers: observers, Trace: traceTo(t)})
		waitUntil(t, s, 300, "every host joined", func() bool {
			for _, h := range s.Hosts {
				if !h.Node.Joined() {
					return false
				}
			}
			return true
		})
		if v, o := voters(s.Hosts[0]); v == hosts-observers && o == observers {
			return s
		}
	}
	t.Fatalf("no seed from %d on gives %d voters and %d observers", seed, hosts-observers, observers)
	return nil
}

// allJoined reports whether every host of s is a member.
func allJoined(s *simtest.Sim) bool {
	for _, h := range s.Hosts {
		if !h.Node.Joined() {
			return false
		}
	}
	return true
}

// voters counts the voters and the observers in h's view.
func voters(h *simtest.Host) (v, o int) {
	for _, m := range h.Node.Members() {
		if m.Observer {
			o++
		} else {
			v++
		}
	}
	return v, o
}

// voterBesides returns the first host that is a voter in its own view,
// other than not.
func voterBesides(s *simtest.Sim, not *simtest.Host) *simtest.Host {
	for _, h := range s.Hosts {
		if h.Alive && !h.Node.Observer() && h != not {
			return h
		}
	}
	return nil
}

// observerHosts returns the hosts that are observers in their own view.
func observerHosts(s *simtest.Sim) []*simtest.Host {
	var out []*simtest.Host
	for _, h := range s.Hosts {
		if h.Alive && h.Node.Observer() {
			out = append(out, h)
		}
	}
	return out
}

// A script host dies with its lock jobs: every observer crashes at once, the
// holder of the lock and the members queued behind it among them, and with
// them, in the second case, the server. Had they been voters (four of seven),
// the group would have lost its majority and could never remove them; as
// observers they count for none, so the group removes them once their leases
// have run out (a takeover first, where the server died), all but the first
// waiter behind the holder as their silences lapse, that one after (a holder
// and the head of its queue never go together: see
// state.headsRemovedWithHolders), and grants the lock to the voter queued
// behind them: within a lease, its margin and a turn of the crash, where the
// server lives (244 ticks before silences counted from when a member was
// last heard, wire.Sync.Quiet; 222 after).
func TestObserversDyingTogetherLeaveTheMajority(t *testing.T) {
	for _, withServer := range []bool{false, true} {
		name := "observers"
		if withServer {
			name = "observers and the server"
		}
		t.Run(name, func(t *testing.T) {
			s := newObserverGroup(t, 7, 4, 11)
			obs := observerHosts(s)
			for _, h := range obs {
				acquire(t, s, h, "r")
			}
			waitUntil(t, s, 100, "an observer holds r", func() bool {
				return holds(obs[0], "r") || holds(obs[1], "r") || holds(obs[2], "r") || holds(obs[3], "r")
			})
			srv := server(s)
			voter := voterBesides(s, srv)
			acquire(t, s, voter, "r")
			waitUntil(t, s, 100, "the voter queued behind the observers", func() bool {
				for _, r := range voter.Node.Resources() {
					if r.Name == "r" && len(r.Queue) == len(obs) {
						return true
					}
				}
				return false
			})
			for _, h := range obs {
				s.Crash(h.Index)
			}
			if withServer {
				s.Crash(srv.Index)
			}
			died := s.Tick()
			syncs := len(decisions[*wire.Sync](s))
			cfg := arbiter.DefaultConfig()
			p := cfg.Params
			bound := 2*(int(p.TakeoverTicks)+3*cfg.StaggerTicks+cfg.ClaimTicks) + 2*int(p.LeaseTicks+p.LeaseMarginTicks) + 3*(cfg.TurnTicks+cfg.PingTimeoutTicks)
			waitUntil(t, s, bound, "the voter holds r", func() bool { return holds(voter, "r") })
			var removals []int
			for _, sy := range decisions[*wire.Sync](s)[syncs:] {
				if n := len(sy.RemoveObservers) + boolInt(sy.Remove != 0); n > 0 {
					removals = append(removals, n)
				}
			}
			removed := 0
			for _, n := range removals {
				removed += n
			}
			if want := len(obs) + boolInt(withServer); removed != want || len(removals) < 2 {
				t.Errorf("SYNCs removed %v members, want the %d dead, the head of r's queue after its holder", removals, want)
			}
			// As their silences lapse, a tick or two apart, not a turn each.
			if took, most := s.Tick()-died, int64(p.LeaseTicks+p.LeaseMarginTicks)+int64(cfg.TurnTicks); !withServer && took > most {
				t.Errorf("r granted to the voter %d ticks after the crash, more than a lease, its margin and a turn (%d)", took, most)
			}
			if v, o := voters(voter); v != 3-boolInt(withServer) || o != 0 {
				t.Errorf("the voter's view: %d voters and %d observers, want %d and 0", v, o, 3-boolInt(withServer))
			}
			if tk := takeovers(s); withServer != (len(tk) > 0) {
				t.Errorf("takeovers %+v with the server killed %v", tk, withServer)
			}
			t.Logf("r granted to the voter %d ticks after the crash", s.Tick()-died)
			checkClean(t, s)
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Voters that leave are replaced by observers, promoted one per SYNC, so
// that a group that started with three voters still has three when all
// three have left: the last observers left can then lose a voter, the
// server, and take over. The server leaves first: the dangerous case, since
// it must promote the member it hands its turn to.
func TestVotersLeavingPromoteObservers(t *testing.T) {
	s := newObserverGroup(t, 6, 3, 11)
	var first []*simtest.Host
	for _, h := range s.Hosts {
		if !h.Node.Observer() {
			first = append(first, h)
		}
	}
	leaveFirst := server(s)
	order := []*simtest.Host{leaveFirst}
	for _, h := range first {
		if h != leaveFirst {
			order = append(order, h)
		}
	}
	for i, h := range order {
		if err := h.Node.Leave(); err != nil {
			t.Fatalf("h%d Leave: %v", h.Index, err)
		}
		s.Flush(h)
		waitUntil(t, s, 600, "the leaver left and an observer was promoted", func() bool {
			if !h.Node.Stopped() {
				return false
			}
			for _, x := range s.Hosts {
				if x.Alive && !x.Node.Stopped() {
					if v, _ := voters(x); v != 3 || slices.ContainsFunc(x.Node.Members(), func(m arbiter.MemberInfo) bool { return m.ID == h.Node.ID() }) {
						return false
					}
				}
			}
			return true
		})
		t.Logf("voter %d of 3 left at tick %d", i+1, s.Tick())
	}
	promoted := 0
	for _, sync := range decisions[*wire.Sync](s) {
		if sync.Promote != 0 {
			promoted++
		}
	}
	if promoted != 3 {
		t.Errorf("%d promotions, want 3", promoted)
	}
	for _, h := range s.Hosts {
		if h.Alive && !h.Node.Stopped() && (h.Node.Observer() || !hasEvent(h, arbiter.EventPromoted)) {
			t.Errorf("h%d: observer %v, told of its promotion %v", h.Index, h.Node.Observer(), hasEvent(h, arbiter.EventPromoted))
		}
	}
	// The promoted voters carry the group on their own: the server dies.
	srv := server(s)
	s.Crash(srv.Index)
	var other *simtest.Host
	for _, h := range s.Hosts {
		if h.Alive && !h.Node.Stopped() && h != srv {
			other = h
			break
		}
	}
	acquire(t, s, other, "r")
	cfg := arbiter.DefaultConfig()
	p := cfg.Params
	waitUntil(t, s, 2*(int(p.TakeoverTicks)+3*cfg.StaggerTicks+cfg.ClaimTicks)+int(p.LeaseTicks+p.LeaseMarginTicks), "r granted after the takeover", func() bool { return holds(other, "r") })
	checkClean(t, s)
}

// An observer holding a lock keeps it through a takeover, as any connected
// member does: its lease, renewed by its answers to the old server, outlasts
// the takeover, and the new epoch's server renews it. The server dies at
// several moments of the hold; another observer's request is granted by the
// new server meanwhile.
func TestObserverHolderKeepsItsLockThroughATakeover(t *testing.T) {
	for off := 0; off < 60; off += 12 {
		s := newObserverGroup(t, 5, 2, 47)
		obs := observerHosts(s)
		holder, waiter := obs[0], obs[1]
		acquire(t, s, holder, "r")
		waitUntil(t, s, 30, "the observer holds r", func() bool { return holds(holder, "r") })
		s.RunTicks(off)
		srv := server(s)
		s.Crash(srv.Index)
		acquire(t, s, waiter, "q")
		waitUntil(t, s, 600, "the other observer's grant after the takeover", func() bool { return holds(waiter, "q") })
		if len(takeovers(s)) == 0 {
			t.Fatalf("server crashed %d ticks into the hold: no takeover", off)
		}
		for _, h := range obs {
			for _, e := range h.Events {
				if e.Kind == arbiter.EventLost {
					t.Errorf("server crashed %d ticks into the hold: h%d lost %q: %s", off, h.Index, e.Resource, e.Reason)
				}
			}
		}
		if !holds(holder, "r") {
			t.Errorf("server crashed %d ticks into the hold: the observer no longer holds r", off)
		}
		checkClean(t, s)
	}
}

// Two voters of three leave together (a rolling shutdown of two daemons):
// each leave waits for an observer's promotion, so the group never drops to
// a lone voter, whose next promoted observer, dying, would stop it. Before,
// 13 of these 30 seeds went through a lone voter.
func TestTwoVotersLeavingTogetherPromoteFirst(t *testing.T) {
	for seed := int64(1); seed <= 30; seed++ {
		s := newObserverGroup(t, 6, 3, seed*100)
		srv := server(s)
		var leavers []*simtest.Host
		for _, h := range s.Hosts {
			if !h.Node.Observer() && h != srv {
				leavers = append(leavers, h)
			}
		}
		for _, h := range leavers {
			if err := h.Node.Leave(); err != nil {
				t.Fatal(err)
			}
			s.Flush(h)
		}
		waitUntil(t, s, 1000, "both left", func() bool { return leavers[0].Node.Stopped() && leavers[1].Node.Stopped() })
		s.RunTicks(300)
		for _, h := range s.Hosts {
			for _, e := range h.Events {
				if e.Kind == arbiter.EventPromoted && e.Reason != "the group had 3 voters" {
					t.Errorf("seed %d: h%d: node %d promoted when %s", seed*100, h.Index, e.Node, e.Reason)
				}
			}
			if h.Alive && !h.Node.Stopped() {
				if v, o := voters(h); v != 3 || o != 1 {
					t.Errorf("seed %d: h%d: %d voters and %d observers, want 3 and 1", seed*100, h.Index, v, o)
				}
			}
		}
		checkClean(t, s)
	}
}

// A lone voter (the other voters left while the observers were cut off, so
// none could be promoted first) promotes only an observer it has just heard:
// the observer it would pick answered the turn's pings and died since. It
// asks that one directly, finds it gone, and promotes the other; promoting
// the dead one made two voters of which one was dead, and the group never
// decided again.
func TestLoneVoterConfirmsTheObserverItPromotes(t *testing.T) {
	s, lone, obs := loneVoterWithObservers(t)
	// The first observer (the one toPromote picks: lowest ID) dies right
	// after its answer to a ping of the lone voter's turn reaches it.
	answered := false
	s.Opt.Delivered = func(d *simtest.Datagram) {
		if d.From == obs[0].Index && d.To == lone.Index && d.Has(wire.KindPingReply) {
			answered = true
		}
	}
	waitUntil(t, s, 100, "the first observer answered the lone voter", func() bool { return answered })
	s.Opt.Delivered = nil
	for _, sy := range decisions[*wire.Sync](s) {
		if sy.Promote != 0 {
			t.Fatalf("promoted %d before the crash", sy.Promote)
		}
	}
	s.Crash(obs[0].Index)
	waitUntil(t, s, 300, "a promotion", func() bool {
		return slices.ContainsFunc(decisions[*wire.Sync](s), func(sy *wire.Sync) bool { return sy.Promote != 0 })
	})
	for _, sy := range decisions[*wire.Sync](s) {
		if sy.Promote != 0 && sy.Promote != obs[1].Node.ID() {
			t.Errorf("SYNC promotes node %d, want the live observer, node %d", sy.Promote, obs[1].Node.ID())
		}
	}
	acquire(t, s, obs[1], "r")
	if !s.RunUntil(s.Now+3000*simtest.SubTicks, func() bool { return holds(obs[1], "r") }) {
		v, o := voters(lone)
		t.Errorf("the live observer is never granted r: the lone voter's view has %d voters, %d observers, quorum %v", v, o, lone.Node.Quorum())
	}
	checkClean(t, s)
}

// loneVoterWithObservers makes a group of one voter and two observers (all
// connected, none promoted yet): three voters and two observers, the
// observers cut off for one turn while the two other voters leave, then the
// network heals before the observers' silence reaches the lease.
func loneVoterWithObservers(t *testing.T) (s *simtest.Sim, lone *simtest.Host, obs []*simtest.Host) {
	s = newObserverGroup(t, 5, 2, 11)
	obs = observerHosts(s)
	var vs []int
	for _, h := range s.Hosts {
		if !h.Node.Observer() {
			vs = append(vs, h.Index)
		}
	}
	s.Partition(vs, []int{obs[0].Index, obs[1].Index})
	// Let a whole turn pass, so that the observers answered none of the
	// current turn's pings (a stale answer would be promoted at once).
	syncs := len(decisions[*wire.Sync](s))
	waitUntil(t, s, 200, "a turn ended", func() bool { return len(decisions[*wire.Sync](s)) > syncs })
	lone = server(s)
	for _, i := range vs {
		h := s.Hosts[i]
		if h == lone {
			continue
		}
		if err := h.Node.Leave(); err != nil {
			t.Fatal(err)
		}
		s.Flush(h)
		waitUntil(t, s, 100, "the voter left", func() bool { return h.Node.Stopped() })
	}
	if v, o := voters(lone); v != 1 || o != 2 || server(s) != lone {
		t.Fatalf("want a lone voter serving 2 observers: %d voters, %d observers", v, o)
	}
	for _, sy := range decisions[*wire.Sync](s) {
		if sy.Promote != 0 {
			t.Fatalf("promoted %d during setup", sy.Promote)
		}
	}
	s.Heal()
	slices.SortFunc(obs, func(a, b *simtest.Host) int { return int(a.Node.ID()) - int(b.Node.ID()) })
	return s, lone, obs
}

// A voter leaves (a daemon stops): an observer (a lock command) is promoted
// in its place. The daemon comes back and rejoins as a voter: the promoted
// observer, which asked to be one, steps back a lease after its promotion
// (Sync.Demote), so that the group's voters are the daemons again. Then the
// script host dies with every lock command, the one promoted before among
// them, and so does the server's host: two of three voters are left, and the
// group grants again. Without the demotion the group had four voters, two
// of them dead, and never granted again.
func TestPromotedObserverStepsBackWhenAVoterReturns(t *testing.T) {
	s := newObserverGroup(t, 7, 4, 11)
	srv := server(s)
	leaver := voterBesides(s, srv)
	if err := leaver.Node.Leave(); err != nil {
		t.Fatal(err)
	}
	s.Flush(leaver)
	waitUntil(t, s, 600, "the voter left and an observer was promoted", func() bool {
		if !leaver.Node.Stopped() {
			return false
		}
		v, o := voters(srv)
		return v == 3 && o == 3
	})
	// The daemon comes back (a restart): it asks to be a voter.
	s.Crash(leaver.Index)
	s.Start(leaver.Index, false)
	waitUntil(t, s, 600, "the daemon rejoined", func() bool { return leaver.Node.Joined() })
	rejoined := s.Tick()
	waitUntil(t, s, 600, "every view has the daemon, and the promoted observer an observer again", func() bool {
		for _, h := range s.Hosts {
			if h.Alive && !h.Node.Stopped() {
				if v, o := voters(h); v != 3 || o != 4 || !slices.ContainsFunc(h.Node.Members(), func(m arbiter.MemberInfo) bool { return m.ID == leaver.Node.ID() && !m.Observer }) {
					return false
				}
			}
		}
		return true
	})
	t.Logf("the promoted observer stepped back %d ticks after the daemon rejoined", s.Tick()-rejoined)
	// The script host dies (every host that asked to be an observer, the
	// promoted one among them), and so does the server's host.
	srv = server(s)
	var survivor *simtest.Host
	for i, h := range s.Hosts {
		if i >= len(s.Hosts)-4 {
			s.Crash(i)
		} else if h != srv && survivor == nil {
			survivor = h
		}
	}
	if srv.Index < len(s.Hosts)-4 {
		s.Crash(srv.Index)
	}
	acquire(t, s, survivor, "r")
	cfg := arbiter.DefaultConfig()
	p := cfg.Params
	bound := 4*(int(p.TakeoverTicks)+3*cfg.StaggerTicks+cfg.ClaimTicks) + 4*int(p.LeaseTicks+p.LeaseMarginTicks) + 10*(cfg.TurnTicks+cfg.PingTimeoutTicks)
	if !s.RunUntil(s.Now+int64(bound)*simtest.SubTicks, func() bool { return holds(survivor, "r") }) {
		v, o := voters(survivor)
		t.Errorf("no grant within %d ticks: the survivor's view has %d voters, %d observers; quorum %v", bound, v, o, survivor.Node.Quorum())
	}
	if !slices.ContainsFunc(decisions[*wire.Sync](s), func(sy *wire.Sync) bool { return sy.Demote != 0 }) {
		t.Error("no SYNC demoted anybody")
	}
	checkClean(t, s)
}

// A script host's lock commands are killed (kill -9): three observers die
// and stay in the view until their leases run out. A new lock command on the
// same host, and a daemon restarted meanwhile, join at once: a newcomer
// waits for the voters' greetings only, not for the dead observers' (nor
// for their removal, a lease and a turn each), and takes a lock.
func TestNewcomerDoesNotWaitForDeadObservers(t *testing.T) {
	for _, asObserver := range []bool{true, false} {
		s := newObserverGroup(t, 7, 4, 11)
		obs := observerHosts(s)
		dead := obs[:3]
		var deadIDs []wire.NodeID
		for _, h := range dead {
			deadIDs = append(deadIDs, h.Node.ID())
			s.Crash(h.Index)
		}
		s.RunTicks(1)
		comer := dead[0]
		if !asObserver {
			// A daemon's host: it asks to be a voter.
			s.Opt.Observers = 0
		}
		s.Start(comer.Index, false)
		started := s.Tick()
		waitUntil(t, s, 80, "the newcomer joined", func() bool { return comer.Node.Joined() })
		joined := s.Tick() - started
		acquire(t, s, comer, "r")
		waitUntil(t, s, 40, "the newcomer holds r", func() bool { return holds(comer, "r") })
		still := 0
		for _, m := range server(s).Node.Members() {
			still += boolInt(slices.Contains(deadIDs, m.ID))
		}
		if still != len(dead) {
			t.Fatalf("observer %v: %d of the %d dead observers still in the view: the test no longer covers a newcomer joining past them", asObserver, still, len(dead))
		}
		if comer.Node.Observer() != asObserver {
			t.Errorf("the newcomer is an observer: %v, want %v", comer.Node.Observer(), asObserver)
		}
		t.Logf("observer %v: joined %d ticks after starting, with %d dead observers in the view", asObserver, joined, still)
		checkClean(t, s)
	}
}

// A wait chain of six observers, each holding one lock and waiting first for
// the lock of the one before it, dies at once, with a voter waiting for all
// six locks. The group removes them as their silences lapse (the holders
// that wait for nobody's first, then the rest), whichever way the locks'
// names sort, not a turn each: the voter gets every lock within a lease,
// its margin and a turn (238 ticks before silences counted from when a
// member was last heard, wire.Sync.Quiet; 216 after).
func TestChainOfDeadObserversGoesInTwoSyncs(t *testing.T) {
	for _, reverse := range []bool{false, true} {
		s := newObserverGroup(t, 10, 6, 11)
		obs := observerHosts(s)
		slices.SortFunc(obs, func(a, b *simtest.Host) int { return int(a.Node.ID()) - int(b.Node.ID()) })
		w := voterBesides(s, nil)
		res := func(i int) string {
			if reverse {
				i = 9 - i
			}
			return fmt.Sprintf("r%d", i)
		}
		for i, o := range obs {
			acquire(t, s, o, res(i))
			waitUntil(t, s, 100, "the observer holds its lock", func() bool { return holds(o, res(i)) })
		}
		for i := 1; i < len(obs); i++ {
			acquire(t, s, obs[i], res(i-1))
		}
		s.RunTicks(20)
		for i := range obs {
			acquire(t, s, w, res(i))
		}
		s.RunTicks(20)
		for _, o := range obs {
			s.Crash(o.Index)
		}
		died := s.Tick()
		syncs := len(decisions[*wire.Sync](s))
		waitUntil(t, s, 1000, "the voter holds every lock", func() bool {
			for i := range obs {
				if !holds(w, res(i)) {
					return false
				}
			}
			return true
		})
		var removals [][]wire.NodeID
		for _, d := range decisions[*wire.Sync](s)[syncs:] {
			if len(d.Removed()) > 0 {
				removals = append(removals, d.Removed())
			}
		}
		removed := 0
		for _, r := range removals {
			removed += len(r)
		}
		if removed != len(obs) || len(removals) < 2 {
			t.Errorf("names reversed %v: SYNCs removed %v, want the six, the holders that wait for nobody's first", reverse, removals)
		}
		p := arbiter.DefaultConfig().Params
		if took, most := s.Tick()-died, int64(p.LeaseTicks+p.LeaseMarginTicks)+int64(arbiter.DefaultConfig().TurnTicks); took > most {
			t.Errorf("names reversed %v: the voter holds all six locks %d ticks after the crash, more than a lease, its margin and a turn (%d)", reverse, took, most)
		}
		t.Logf("names reversed %v: the voter holds all six locks %d ticks after the crash; SYNCs removed %v", reverse, s.Tick()-died, removals)
		checkClean(t, s)
	}
}
