package arbiter_test

import (
	"testing"

	"github.com/mcnode/mcnode/arbiter"
	"github.com/mcnode/mcnode/internal/simtest"
	"github.com/mcnode/mcnode/wire"
)

// The next server never gets the SYNC that hands it the turn: a member that
// applied it must not count the backup it names as taken up (a header's T
// says the decisions below it were applied: backupAt was the SYNC's own T, one
// too low, which a next server without the SYNC showed; found by review).
func TestBackupNotTakenUpBeforeTheNextServerHasTheSync(t *testing.T) {
	s := newGroup(t, 5, 1, nil)
	s.RunTicks(100)
	srv := server(s)
	if srv == nil {
		t.Fatal("no server")
	}
	next := hostOf(s, srv.Node.Backup())
	drop := true
	s.Opt.Drop = func(d *simtest.Datagram) bool { return drop && d.To == next.Index && d.Has(wire.KindSync) }
	syncs := len(decisions[*wire.Sync](s))
	waitUntil(t, s, 400, "a SYNC", func() bool { return len(decisions[*wire.Sync](s)) > syncs })
	sy := decisions[*wire.Sync](s)[syncs]
	st, nx := sy.Stamp()
	s.Pause(srv.Index, false)
	s.RunTicks(3)
	t.Logf("SYNC at T=%d (next %d) by node %d names backup %d; next server node %d is at T=%d", st, nx, srv.Node.ID(), sy.Backup, next.Node.ID(), next.Node.T())
	if next.Node.T() > st {
		t.Fatalf("the next server has the SYNC")
	}
	for _, h := range s.Hosts {
		if h == srv || h == next {
			continue
		}
		srvID, _ := h.Node.Server()
		t.Logf("h%d (node %d): T=%d server=%d backup=%d backupTakenUp=%v", h.Index, h.Node.ID(), h.Node.T(), srvID, h.Node.Backup(), arbiter.BackupTakenUpForTest(h.Node))
		if h.Node.T() > st && arbiter.BackupTakenUpForTest(h.Node) {
			t.Errorf("h%d applied the SYNC at T=%d and counts its backup as taken up, while the next server (T=%d) lacks the SYNC", h.Index, st, next.Node.T())
		}
	}
	drop = false
	s.Resume(srv.Index)
	waitUntil(t, s, 400, "every member counts the backup again", func() bool {
		for _, h := range s.Hosts {
			if !arbiter.BackupTakenUpForTest(h.Node) {
				return false
			}
		}
		return true
	})
}
