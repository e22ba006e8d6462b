package arbiter

import (
	"testing"

	"github.com/mcnode/mcnode/wire"
)

// removeMembers drops every member before it passes anything on, so that a
// resource passes once, to the first waiter that stays, under the decision's
// T: passing it to a removed waiter first, and on from it at the same T,
// would make two holders of one token. (No SYNC removes a holder and the head
// of its queue together any more, see TestHeadRemovedWithHolder; the state
// does not rely on it.)
func TestRemovingHolderAndNextPassesOnce(t *testing.T) {
	st := newState(1, DefaultConfig().Params)
	for id := wire.NodeID(1); id <= 5; id++ {
		st.addMember(id, uint64(id)*10, "h", id >= 3, false)
	}
	for i, id := range []wire.NodeID{3, 4, 1, 5} {
		st.request(&wire.Grant{T: uint64(10 + i), Node: id, Req: 1, Resource: "r"})
	}
	hand, lost := st.removeMembers([]wire.NodeID{3, 4}, 99)
	r := st.resources["r"]
	if r.holder != 1 || r.token != 99 || len(r.queue) != 1 || r.queue[0].Node != 5 {
		t.Errorf("r held by %d with token %d, queue %v; want node 1, token 99, queue [5]", r.holder, r.token, r.queue)
	}
	if len(hand) != 1 || hand[0].to != 1 || len(lost) != 1 || lost[0].token != 10 {
		t.Errorf("hand-overs %+v, lost %+v: want one hand-over, to node 1, and node 3's token 10 lost", hand, lost)
	}
	if len(st.members) != 3 || st.member(3) != nil || st.member(4) != nil || st.memberByInc(30) != nil {
		t.Errorf("members after the removal: %d", len(st.members))
	}
}

// headRemovedWithHolder finds the member a decision must not remove with
// the holder of the resource whose queue it heads; members further back, a
// head whose holder stays, and a holder that heads its own queue, are free
// to go.
func TestHeadRemovedWithHolder(t *testing.T) {
	st := newState(1, DefaultConfig().Params)
	for id := wire.NodeID(1); id <= 6; id++ {
		st.addMember(id, uint64(id)*10, "h", id >= 3, false)
	}
	for i, id := range []wire.NodeID{3, 4, 1, 5} {
		st.request(&wire.Grant{T: uint64(10 + i), Node: id, Req: 1, Resource: "r"})
	}
	st.request(&wire.Grant{T: 20, Node: 6, Req: 1, Resource: "q"})
	st.request(&wire.Grant{T: 21, Node: 6, Req: 2, Resource: "q"}) // the holder asks again: it heads its own queue
	for _, c := range []struct {
		ids  []wire.NodeID
		want wire.NodeID
	}{
		{[]wire.NodeID{3, 4}, 4},
		{[]wire.NodeID{4, 3, 5}, 4},
		{[]wire.NodeID{3, 5, 6}, 0},
		{[]wire.NodeID{4, 5}, 0},
		{[]wire.NodeID{3}, 0},
		{[]wire.NodeID{6, 4}, 0},
		{[]wire.NodeID{6, 5}, 0},
	} {
		if got := st.headRemovedWithHolder(c.ids); got != c.want {
			t.Errorf("removing %v: %d must wait, want %d", c.ids, got, c.want)
		}
	}
}
