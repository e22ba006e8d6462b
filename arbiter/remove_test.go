package arbiter

import (
	"testing"

	"github.com/mcnode/mcnode/wire"
)

// A SYNC that removes the holder of a resource and the member queued next
// (a script host's lock commands, all dead) passes the resource once, to the
// first waiter that stays, under the SYNC's T: handing it to the removed
// waiter first, and on from it at the same T, made two holders of one
// fencing token, and a member that took it on the holder's release saw a
// hand-over the log did not make.
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
