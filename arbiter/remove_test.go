package arbiter

import (
	"fmt"
	"testing"

	"github.com/mcnode/mcnode/wire"
)

// queuedState is a state of six members, 3 to 6 observers, where node 3
// holds r and nodes 4, 1 and 5 wait for it, in that order.
func queuedState() *state {
	st := newState(1, DefaultConfig().Params)
	for id := wire.NodeID(1); id <= 6; id++ {
		st.addMember(id, uint64(id)*10, "h", id >= 3, false)
	}
	for i, id := range []wire.NodeID{3, 4, 1, 5} {
		st.request(&wire.Grant{T: uint64(10 + i), Node: id, Req: 1, Resource: "r"})
	}
	return st
}

// removeMembers drops every member before it passes anything on, so that a
// resource passes once, to the first waiter that stays, under the decision's
// T: passing it to a removed waiter first, and on from it at the same T,
// would make two holders of one token. (No SYNC removes a holder and the head
// of its queue together any more, see TestHeadsRemovedWithHolders; the state
// does not rely on it.)
func TestRemovingHolderAndNextPassesOnce(t *testing.T) {
	st := queuedState()
	hand, lost := st.removeMembers([]wire.NodeID{3, 4}, 99)
	r := st.resources["r"]
	if r.holder != 1 || r.token != 99 || len(r.queue) != 1 || r.queue[0].Node != 5 {
		t.Errorf("r held by %d with token %d, queue %v; want node 1, token 99, queue [5]", r.holder, r.token, r.queue)
	}
	if len(hand) != 1 || hand[0].to != 1 || len(lost) != 1 || lost[0].token != 10 {
		t.Errorf("hand-overs %+v, lost %+v: want one hand-over, to node 1, and node 3's token 10 lost", hand, lost)
	}
	if len(st.members) != 4 || st.member(3) != nil || st.member(4) != nil || st.memberByInc(30) != nil {
		t.Errorf("members after the removal: %d", len(st.members))
	}
}

// headsRemovedWithHolders finds the members a decision must not remove
// with the holder of the resource whose queue they head; members further
// back, a head whose holder stays, and a holder that heads its own queue,
// are free to go.
func TestHeadsRemovedWithHolders(t *testing.T) {
	st := queuedState()
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
		heads := st.headsRemovedWithHolders(c.ids)
		if _, ok := heads[c.want]; len(heads) != boolInt(c.want != 0) || (c.want != 0 && !ok) {
			t.Errorf("removing %v: %v must wait, want %d", c.ids, heads, c.want)
		}
	}
}

// A wait chain of dead members (member i holds r_i and waits first for
// r_i-1), and one closed into a cycle: removable lets a holder go before the
// member waiting behind it, so the chain goes in two decisions whichever way
// the resources' names sort (found by review: dropping the first head found
// in name order took one decision per member when names ran against the
// chain), the cycle in three; and no decision removes a holder with the head
// of its queue.
func TestRemovableChainsGoInTwoDecisions(t *testing.T) {
	for _, k := range []int{2, 4, 33} {
		for _, reverse := range []bool{false, true} {
			for _, cycle := range []bool{false, true} {
				st := newState(1, DefaultConfig().Params)
				for id := wire.NodeID(1); id <= wire.NodeID(k); id++ {
					st.addMember(id, uint64(id)*10, "h", false, false)
				}
				name := func(i int) string {
					if reverse {
						i = 999 - i
					}
					return fmt.Sprintf("r%03d", i)
				}
				tt := uint64(10)
				grant := func(id wire.NodeID, req uint64, resource string) {
					st.request(&wire.Grant{T: tt, Node: id, Req: req, Resource: resource})
					tt++
				}
				for i := 1; i <= k; i++ {
					grant(wire.NodeID(i), 1, name(i))
				}
				for i := 2; i <= k; i++ {
					grant(wire.NodeID(i), 2, name(i-1))
				}
				if cycle {
					grant(1, 2, name(k))
				}
				decisions := 0
				for len(st.members) > 0 {
					var ids []wire.NodeID
					for _, m := range st.members {
						ids = append(ids, m.id)
					}
					going := st.removable(ids)
					if len(going) == 0 || len(st.headsRemovedWithHolders(going)) > 0 {
						t.Fatalf("chain of %d (reverse %v, cycle %v): decision %d removes %v", k, reverse, cycle, decisions+1, going)
					}
					st.removeMembers(going, tt)
					tt++
					decisions++
				}
				if want := 2 + boolInt(cycle); decisions > want {
					t.Errorf("chain of %d (reverse %v, cycle %v): %d decisions to remove all, want %d at most", k, reverse, cycle, decisions, want)
				}
			}
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
