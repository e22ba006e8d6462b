package arbiter_test

import (
	"testing"

	"github.com/mcnode/mcnode/arbiter"
	"github.com/mcnode/mcnode/internal/simtest"
	"github.com/mcnode/mcnode/wire"
)

// A member's request is for the server and its backup, its release for them
// and the member that takes the resource on it, and the other members drop
// both unread (the simulation drops them as the runtime's socket filter
// does); a retry, and whatever the backup itself sends, is for every
// member. The waiter still takes the resource on the holder's release.
func TestOperationsAddressed(t *testing.T) {
	// One turn all through: the roles stay where they are.
	s := newGroup(t, 5, 7, func(c *arbiter.Config) { c.TurnTicks, c.Params.LeaseTicks = 400, 1000 })
	srv, backup, others := roles(t, s)
	holder, waiter, idle := others[0], others[1], others[2]
	type copyOf struct {
		from, to int
		kind     wire.Kind
		retry    bool
	}
	delivered := map[copyOf]int{}
	s.Opt.Delivered = func(d *simtest.Datagram) {
		for _, m := range d.Packet.Messages {
			retry := false
			switch m := m.(type) {
			case *wire.Request:
				retry = m.Retry
			case *wire.Release:
				retry = m.Retry
			}
			delivered[copyOf{d.From, d.To, m.Kind(), retry}]++
		}
	}
	var sent []wire.Header
	dropFirstOf := -1 // a host whose first request is lost on the way to everyone
	s.Opt.Drop = func(d *simtest.Datagram) bool {
		for _, m := range d.Packet.Messages {
			if r, ok := m.(*wire.Request); ok && d.From == dropFirstOf && !r.Retry {
				return true
			}
		}
		if d.To == (d.From+1)%len(s.Hosts) && (d.Has(wire.KindRequest) || d.Has(wire.KindRelease)) {
			sent = append(sent, d.Packet.Header) // one copy of each
		}
		return false
	}
	want := func(h wire.Header, ids ...wire.NodeID) {
		t.Helper()
		if r := wire.RecipientsOf(ids...); h.For != r {
			t.Fatalf("a datagram of node %d is for %v, want %v", h.From, h.For, r)
		}
	}

	acquire(t, s, holder, "r")
	waitUntil(t, s, 50, "the holder has r", func() bool { return granted(holder, "r") })
	want(sent[len(sent)-1], srv.Node.ID(), backup.Node.ID())
	acquire(t, s, waiter, "r")
	waitUntil(t, s, 50, "the waiter is queued", func() bool {
		rs := waiter.Node.Resources()
		return len(rs) == 1 && len(rs[0].Queue) == 1
	})
	entered := waiter.Node.Stats().EnteredOnRelease
	if err := holder.Node.Release("r"); err != nil {
		t.Fatal(err)
	}
	s.Check.Released(holder, "r")
	s.Flush(holder)
	want(sent[len(sent)-1], srv.Node.ID(), backup.Node.ID(), waiter.Node.ID())
	waitUntil(t, s, 50, "the waiter has r", func() bool { return granted(waiter, "r") })
	if waiter.Node.Stats().EnteredOnRelease != entered+1 {
		t.Errorf("the waiter did not take r on the holder's release")
	}
	for _, who := range []*simtest.Host{idle} {
		for _, from := range []*simtest.Host{holder, waiter} {
			if n := delivered[copyOf{from.Index, who.Index, wire.KindRequest, false}] + delivered[copyOf{from.Index, who.Index, wire.KindRelease, false}]; n != 0 {
				t.Errorf("h%d, named by none, read %d of h%d's requests and releases", who.Index, n, from.Index)
			}
		}
	}
	if delivered[copyOf{holder.Index, srv.Index, wire.KindRequest, false}] == 0 || delivered[copyOf{holder.Index, backup.Index, wire.KindRequest, false}] == 0 {
		t.Errorf("the server or the backup did not read the holder's request")
	}

	// The backup's own request goes to all: its header shows its log.
	acquire(t, s, backup, "b")
	waitUntil(t, s, 50, "the backup has b", func() bool { return granted(backup, "b") })
	want(sent[len(sent)-1])

	// A request lost on its first send is sent again to every member.
	dropFirstOf = idle.Index
	acquire(t, s, idle, "c")
	waitUntil(t, s, 100, "the idle member has c", func() bool { return granted(idle, "c") })
	if delivered[copyOf{idle.Index, holder.Index, wire.KindRequest, true}] == 0 {
		t.Errorf("the retry of a lost request did not reach a member it does not name")
	}
	if s.Stats.Filtered == 0 {
		t.Errorf("nothing was filtered")
	}
	if now, _, _ := roles(t, s); now != srv {
		t.Fatalf("the turn moved on from h%d to h%d during the test", srv.Index, now.Index)
	}
	checkClean(t, s)
}
