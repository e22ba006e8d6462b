package arbiter

import (
	"testing"

	"github.com/mcnode/mcnode/wire"
)

// The observer a SYNC promotes runs on a host no voter runs on, where one
// answered: a host that goes down takes all its members with it. Among
// those, and else among all that answered, the lowest ID.
func TestPromoteOnAnotherHost(t *testing.T) {
	st := newState(1, DefaultParams())
	for _, m := range []struct {
		id       wire.NodeID
		addr     string
		observer bool
	}{
		{1, "10.0.0.1:7000", false}, {2, "10.0.0.2:7000", false},
		{3, "10.0.0.1:7001", true}, {4, "10.0.0.2:7002", true}, {5, "10.0.0.3:7000", true}, {6, "10.0.0.4:7000", true},
	} {
		if !st.addMember(m.id, uint64(m.id), m.addr, m.observer, m.observer) {
			t.Fatalf("addMember %d", m.id)
		}
	}
	n := &Node{st: st, srv: &tenure{answered: map[wire.NodeID]bool{}}}
	for _, c := range []struct {
		answered []wire.NodeID
		want     wire.NodeID
	}{
		{[]wire.NodeID{3, 4, 5, 6}, 5}, // 3 and 4 share a voter's host
		{[]wire.NodeID{3, 6}, 6},
		{[]wire.NodeID{4, 3}, 3}, // every one shares a host: the lowest
		{nil, 0},
	} {
		clear(n.srv.answered)
		for _, id := range c.answered {
			n.srv.answered[id] = true
		}
		if got := n.toPromote(); got != c.want {
			t.Errorf("answered %v: promotes %d, want %d", c.answered, got, c.want)
		}
	}
	if got := hostOf("h3"); got != "h3" {
		t.Errorf("hostOf(h3) = %q", got)
	}
}
