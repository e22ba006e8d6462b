package arbiter_test

import (
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
