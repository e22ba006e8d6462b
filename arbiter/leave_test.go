package arbiter_test

import (
	"fmt"
	"testing"

	"github.com/mcnode/mcnode/arbiter"
	"github.com/mcnode/mcnode/internal/simtest"
	"github.com/mcnode/mcnode/wire"
)

// The backup asks to leave. Dropping it at once would leave the server
// without a backup, and the server would take over from itself: a new
// epoch, fencing tokens raised by TakeoverGap, warnings in every log. So the
// server hands the turn to the leaver first, which serves no decision,
// hands the turn on at once and leaves as a member. Whatever the leaver
// held goes to the next waiter, and a waiter keeps its place.
func TestBackupLeavesWithoutATakeover(t *testing.T) {
	tried := 0
	for _, n := range []int{3, 5} {
		for seed := int64(1); seed <= 8; seed++ {
			s := newGroup(t, n, seed, nil)
			s.RunTicks(5)
			srv := server(s)
			if srv == nil {
				t.Fatalf("n=%d seed %d: no server", n, seed)
			}
			leaver := hostOf(s, srv.Node.Backup())
			waiter := otherThan(s, srv, leaver)
			acquire(t, s, leaver, "r")
			waitUntil(t, s, 30, "the backup holds r", func() bool { return holds(leaver, "r") })
			acquire(t, s, waiter, "r")
			acquire(t, s, leaver, "q") // queued behind nobody: granted, then given up
			s.RunTicks(3)
			// The leave is asked while the leaver is still the backup.
			if b := server(s); b == nil || b.Node.Backup() != leaver.Node.ID() {
				continue
			}
			tried++
			epoch, takeovers := srv.Node.Epoch(), len(decisions[*wire.Takeover](s))
			if err := leaver.Node.Leave(); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, s, 200, "the backup left", func() bool { return hasEvent(leaver, arbiter.EventLeft) && leaver.Node.Stopped() })
			waitUntil(t, s, 60, "the waiter holds r", func() bool { return holds(waiter, "r") })
			if got := decisions[*wire.Takeover](s); len(got) > takeovers {
				t.Fatalf("n=%d seed %d: the backup's leave took %d takeovers: %+v", n, seed, len(got)-takeovers, got[takeovers:])
			}
			for _, h := range s.Hosts {
				if h == leaver {
					continue
				}
				if e := h.Node.Epoch(); e != epoch {
					t.Fatalf("n=%d seed %d: h%d is in epoch %d after the backup's leave, was %d", n, seed, h.Index, e, epoch)
				}
				if len(h.Node.Members()) != n-1 {
					t.Fatalf("n=%d seed %d: h%d lists %d members, want %d", n, seed, h.Index, len(h.Node.Members()), n-1)
				}
			}
			if lefts := decisions[*wire.Left](s); len(lefts) != 1 || lefts[0].ID != leaver.Node.ID() {
				t.Fatalf("n=%d seed %d: Left decisions %+v", n, seed, lefts)
			}
			waitUntil(t, s, 60, "a server with a backup", func() bool {
				b := server(s)
				return b != nil && b.Node.Backup() != 0 && b.Node.Backup() != leaver.Node.ID()
			})
			checkClean(t, s)
		}
	}
	if tried < 12 {
		t.Fatalf("the leaver was still the backup when it asked in %d runs of 16", tried)
	}
}

// In a group of two the backup's leave leaves the server alone, which needs
// no backup: it is decided at once.
func TestBackupOfTwoLeaves(t *testing.T) {
	s := newGroup(t, 2, 3, nil)
	s.RunTicks(5)
	srv := server(s)
	leaver := otherThan(s, srv)
	epoch := srv.Node.Epoch()
	if err := leaver.Node.Leave(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, s, 100, "the backup left", func() bool { return leaver.Node.Stopped() })
	if srv.Node.Epoch() != epoch || len(srv.Node.Members()) != 1 {
		t.Fatalf("epoch %d (was %d), %d members", srv.Node.Epoch(), epoch, len(srv.Node.Members()))
	}
	acquire(t, s, srv, "r")
	waitUntil(t, s, 20, "the last member holds r", func() bool { return holds(srv, "r") })
	checkClean(t, s)
}

// All but one member leave at once, the server and its backup among them:
// each leave is decided in the end, and the one left serves alone. (A
// leaving backup is handed the turn; with every other member leaving too, the
// turn could go round the leavers for good.)
func TestAllButOneLeaveAtOnce(t *testing.T) {
	for _, n := range []int{3, 4, 5} {
		for seed := int64(1); seed <= 6; seed++ {
			s := newGroup(t, n, seed, nil)
			s.RunTicks(int(seed))
			srv := server(s)
			stay := srv
			if seed%2 == 0 {
				stay = otherThan(s, srv, hostOf(s, srv.Node.Backup()))
			}
			var leavers []*simtest.Host
			for _, h := range s.Hosts {
				if h != stay {
					if err := h.Node.Leave(); err != nil {
						t.Fatal(err)
					}
					leavers = append(leavers, h)
				}
			}
			waitUntil(t, s, 600, "every leaver left", func() bool {
				for _, h := range leavers {
					if !h.Node.Stopped() || !hasEvent(h, arbiter.EventLeft) {
						return false
					}
				}
				return len(stay.Node.Members()) == 1
			})
			acquire(t, s, stay, "r")
			waitUntil(t, s, 60, "the one left holds r", func() bool { return holds(stay, "r") })
			checkClean(t, s)
		}
	}
}

// backupHolds sets up a group of n whose server's backup holds r, with
// another member queued for it. ok is false if the turn moved meanwhile.
func backupHolds(t *testing.T, n int, seed int64) (s *simtest.Sim, srv, leaver, waiter *simtest.Host, ok bool) {
	t.Helper()
	s = newGroup(t, n, seed, nil)
	s.RunTicks(5)
	if srv = server(s); srv == nil {
		t.Fatal("no server")
	}
	if leaver = hostOf(s, srv.Node.Backup()); leaver == nil {
		return s, srv, nil, nil, false
	}
	waiter = otherThan(s, srv, leaver)
	acquire(t, s, leaver, "r")
	waitUntil(t, s, 30, "the backup holds r", func() bool { return holds(leaver, "r") })
	acquire(t, s, waiter, "r")
	s.RunTicks(3)
	srv = server(s)
	return s, srv, leaver, waiter, srv != nil && srv.Node.Backup() == leaver.Node.ID()
}

// A backup that asks to leave and dies at once: its leave is still decided
// (it is not left to be removed for its silence, a lease later), and what
// it held goes to the waiter well within a lease.
func TestLeavingBackupThatDiesAtOnceIsLeft(t *testing.T) {
	tried := 0
	for _, n := range []int{3, 4, 5} {
		for seed := int64(1); seed <= 5; seed++ {
			s, _, leaver, waiter, ok := backupHolds(t, n, seed)
			if !ok {
				continue
			}
			tried++
			if err := leaver.Node.Leave(); err != nil {
				t.Fatal(err)
			}
			s.Flush(leaver)
			at := s.Tick()
			s.Crash(leaver.Index)
			waitUntil(t, s, 300, "the waiter holds r", func() bool { return holds(waiter, "r") })
			if d := s.Tick() - at; d > 100 {
				t.Errorf("n=%d seed %d: the waiter waited %d ticks for r", n, seed, d)
			}
			if lefts := decisions[*wire.Left](s); len(lefts) != 1 || lefts[0].ID != leaver.Node.ID() {
				t.Errorf("n=%d seed %d: Left decisions %+v, want the leaver's", n, seed, lefts)
			}
			checkClean(t, s)
		}
	}
	if tried < 10 {
		t.Fatalf("only %d runs had the leaver as the backup", tried)
	}
}

// The leaving backup, handed the turn, names a backup for its successor.
// Not itself: when the members between them did not answer it in time, it
// did, and the successor, backed up by a leaver it had handed the turn to
// once already, took over from itself.
func TestLeavingServerNamesAnotherBackup(t *testing.T) {
	for seed := int64(1); seed <= 10; seed++ {
		s := newGroup(t, 3, seed, nil)
		one, two, three := hostOf(s, 1), hostOf(s, 2), hostOf(s, 3)
		s.Opt.Drop = func(d *simtest.Datagram) bool {
			return d.From == three.Index && d.To == one.Index && d.Has(wire.KindPingReply)
		}
		waitUntil(t, s, 100, "node 1 hands the turn on", func() bool { return !one.Node.IsServer() })
		waitUntil(t, s, 300, "node 1 serves again, backed up by node 2", func() bool {
			return one.Node.IsServer() && one.Node.HasAuthority() && one.Node.Backup() == 2
		})
		before := len(takeovers(s))
		if err := two.Node.Leave(); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, s, 400, "node 2 left", two.Node.Stopped)
		s.Opt.Drop = nil
		s.RunTicks(100)
		if got := takeovers(s)[before:]; len(got) > 0 {
			t.Fatalf("seed %d: the leave of the backup took a takeover: %+v", seed, *got[0])
		}
		checkClean(t, s)
	}
}

// The server and its backup, in a group of three, leave at once: both
// leaves are decided without a takeover (the turn went round both leavers
// and back to a member backed up by one of them).
func TestServerAndBackupOfThreeLeave(t *testing.T) {
	tried := 0
	for seed := int64(1); seed <= 10; seed++ {
		s, srv, leaver, stay, ok := backupHolds(t, 3, seed)
		if !ok {
			continue
		}
		tried++
		before := len(takeovers(s))
		_ = leaver.Node.Leave()
		_ = srv.Node.Leave()
		waitUntil(t, s, 400, "both left", func() bool { return leaver.Node.Stopped() && srv.Node.Stopped() })
		waitUntil(t, s, 100, "one member left", func() bool { return len(stay.Node.Members()) == 1 })
		if got := takeovers(s)[before:]; len(got) > 0 {
			t.Errorf("seed %d: %d takeovers for the two leaves", seed, len(got))
		}
		checkClean(t, s)
	}
	if tried < 6 {
		t.Fatalf("only %d runs had the leaver as the backup", tried)
	}
}

// A member is dead and not yet removed when the backup leaves: the turns
// the leave passes through do not each wait for the dead member's answer,
// so a request made meanwhile is granted soon.
func TestBackupLeavesBesideADeadMember(t *testing.T) {
	worst, tried := int64(0), 0
	for _, n := range []int{4, 5} {
		for seed := int64(1); seed <= 10; seed++ {
			s, srv, leaver, waiter, ok := backupHolds(t, n, seed)
			if !ok {
				continue
			}
			dead := otherThan(s, srv, leaver, waiter)
			asker := otherThan(s, srv, leaver, waiter, dead)
			if asker == nil {
				asker = waiter
			}
			s.Crash(dead.Index)
			s.RunTicks(2)
			if b := server(s); b == nil || b.Node.Backup() != leaver.Node.ID() {
				continue
			}
			tried++
			if err := leaver.Node.Leave(); err != nil {
				t.Fatal(err)
			}
			at := s.Tick()
			s.RunTicks(1)
			acquire(t, s, asker, "q")
			waitUntil(t, s, 300, "q granted", func() bool { return holds(asker, "q") })
			worst = max(worst, s.Tick()-at)
			waitUntil(t, s, 300, "the backup left", leaver.Node.Stopped)
			checkClean(t, s)
		}
	}
	if tried < 10 {
		t.Fatalf("only %d runs had the leaver as the backup", tried)
	}
	if worst > 45 { // two ping timeouts and a bit: each turn waited for the dead member before
		t.Fatalf("a request made as the backup left waited %d ticks", worst)
	}
}

// A member applies the admission of newcomer N (node 8, say), which leaves
// at once (as mcnode lock without a daemon does); the server dies, and the
// others take over in a branch without the admission, where the next
// newcomer, M, is given the same ID. The member that heard N's leave must
// not, serving later, replay it as M's: a leave is served however old, but
// only as its own sender's (incarnation and address). It removed M, which
// held a lock, and handed the lock on while M, missing the Left, still held
// it.
func TestOldLeaveOfAReusedIDRemovesNobody(t *testing.T) {
	for seed := int64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { reusedIDScenario(t, seed) })
	}
}

func reusedIDScenario(t *testing.T, seed int64) {
	s := simtest.New(simtest.Options{Seed: seed, Hosts: 7, Trace: traceTo(t)})
	waitUntil(t, s, 300, "every host joined", func() bool {
		for _, h := range s.Hosts {
			if !h.Node.Joined() {
				return false
			}
		}
		return true
	})
	// Free two slots: h5 and h6 crash and are removed.
	s.Crash(5)
	s.Crash(6)
	waitUntil(t, s, 2000, "h5 and h6 removed", func() bool {
		for _, h := range s.Hosts[:5] {
			if len(h.Node.Members()) != 5 {
				return false
			}
		}
		return true
	})
	s.RunTicks(20)
	srv := server(s)
	if srv == nil || !srv.Node.HasAuthority() {
		t.Skip("no server")
	}
	backup := hostOf(s, srv.Node.Backup())
	c := otherThan(s, srv, backup, s.Hosts[5], s.Hosts[6])
	C, N := c.Index, 5
	// The OkToJoin (and anything after it from S) reaches only C and N;
	// N's datagrams reach only C; C reaches nobody but N.
	s.Opt.Drop = func(d *simtest.Datagram) bool {
		if d.To != C && d.To != N && (d.Has(wire.KindOkToJoin) || d.Has(wire.KindLeft)) {
			return true
		}
		if d.From == N && d.To != C && !d.Has(wire.KindJoinRequest) {
			return true
		}
		if d.From == C && d.To != N {
			return true
		}
		return false
	}
	s.Start(N, false)
	waitUntil(t, s, 200, "C applied N's admission", func() bool {
		for _, m := range c.Node.Members() {
			if m.ID >= 8 {
				return true
			}
		}
		return false
	})
	// N leaves as soon as it may (mcnode lock --no-daemon, done at once).
	waitUntil(t, s, 200, "N may leave", func() bool { return s.Hosts[N].Node.Leave() == nil })
	s.Flush(s.Hosts[N])
	s.RunTicks(2)
	oldID := s.Hosts[N].Node.ID()
	s.Crash(server(s).Index)
	s.Crash(N)
	// C is cut off from the rest while B, D, E take over.
	s.Opt.Drop = nil
	for _, h := range s.Hosts {
		if h.Index != C {
			s.Cut(C, h.Index)
			s.Cut(h.Index, C)
		}
	}
	waitUntil(t, s, 2000, "a new epoch without N", func() bool {
		sv := server(s)
		return sv != nil && sv.Index != C && sv.Node.HasAuthority() && sv.Node.Epoch() > c.Node.Epoch()
	})
	s.RunTicks(50)
	s.Heal()
	waitUntil(t, s, 2000, "C follows the new epoch", func() bool {
		sv := server(s)
		return sv != nil && sv.Index != C && c.Node.Epoch() == sv.Node.Epoch() && len(c.Node.Members()) == len(sv.Node.Members())
	})
	// A newcomer M gets the same ID in the new branch.
	M := 6
	s.Start(M, false)
	waitUntil(t, s, 300, "M joined", s.Hosts[M].Node.Joined)
	if s.Hosts[M].Node.ID() != oldID {
		t.Skipf("M got node %d, not %d", s.Hosts[M].Node.ID(), oldID)
	}
	acquire(t, s, s.Hosts[M], "r")
	if !s.RunUntil(s.Now+100*simtest.SubTicks, func() bool { return holds(s.Hosts[M], "r") }) {
		for _, e := range s.Hosts[M].Events {
			t.Logf("M event: %+v", e)
		}
		for _, d := range decisions[*wire.Left](s) {
			t.Logf("Left decision: %+v", d)
		}
		t.Fatalf("M never held r; stopped=%v", s.Hosts[M].Node.Stopped())
	}
	var w *simtest.Host
	for _, h := range s.Hosts[:5] {
		if h.Alive && h != c && !h.Node.Stopped() {
			w = h
			break
		}
	}
	acquire(t, s, w, "r") // queued behind M
	s.RunTicks(5)
	// M misses the Left for a while (loss): it holds r on its lease.
	s.Opt.Drop = func(d *simtest.Datagram) bool { return d.To == M && d.Has(wire.KindLeft) }
	s.RunTicks(600)
	m := s.Hosts[M]
	if hasEvent(m, arbiter.EventRemoved) || m.Node.Stopped() {
		for _, e := range m.Events {
			t.Logf("M event: %+v", e)
		}
		t.Errorf("M, which never asked to leave, was recorded as gone")
	}
	checkClean(t, s)
}

// The dangerous moments of the hand-over to a leaving backup: the server
// dies just after it handed the turn over, or the leaver, which held a
// lock, is stopped (SIGSTOP, with what it was sending held back) just as it
// becomes server, for longer than the takeover timeout. The lock goes to
// the waiter, never beside a holder, and the leaver ends up out of the
// group. With the server dead, the leave is still recorded as Left, by the
// leaver's successor, without a takeover.
func TestLeaveHandoverWithServerDeadOrLeaverStopped(t *testing.T) {
	for _, stopLeaver := range []bool{false, true} {
		tried := 0
		for _, n := range []int{4, 5} {
			for seed := int64(1); seed <= 6; seed++ {
				s, srv, leaver, waiter, ok := backupHolds(t, n, seed)
				if !ok {
					continue
				}
				tried++
				before := len(takeovers(s))
				if err := leaver.Node.Leave(); err != nil {
					t.Fatal(err)
				}
				waitUntil(t, s, 60, "the leaver has the turn", leaver.Node.IsServer)
				if stopLeaver {
					s.Pause(leaver.Index, true)
					s.RunTicks(3 * int(leaver.Node.Params().TakeoverTicks))
					s.Resume(leaver.Index)
				} else {
					s.Crash(srv.Index)
				}
				waitUntil(t, s, 600, "the waiter holds r", func() bool { return holds(waiter, "r") })
				waitUntil(t, s, 600, "the leaver is out", leaver.Node.Stopped)
				if !stopLeaver {
					if lefts := decisions[*wire.Left](s); len(lefts) != 1 || lefts[0].ID != leaver.Node.ID() {
						t.Errorf("n=%d seed %d: Left decisions %+v, want the leaver's", n, seed, lefts)
					}
					if got := takeovers(s)[before:]; len(got) > 0 {
						t.Errorf("n=%d seed %d: %d takeovers with the server dead after its hand-over", n, seed, len(got))
					}
				}
				checkClean(t, s)
			}
		}
		if tried < 6 {
			t.Fatalf("stopLeaver=%v: only %d runs had the leaver as the backup", stopLeaver, tried)
		}
	}
}
