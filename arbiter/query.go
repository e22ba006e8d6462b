package arbiter

import (
	"fmt"
	"slices"

	"github.com/mcnode/mcnode/wire"
)

// ID returns this node's logical ID, 0 before it is admitted.
func (n *Node) ID() wire.NodeID { return n.id }

// Inc returns this node's incarnation ID.
func (n *Node) Inc() uint64 { return n.cfg.Inc }

// Now returns the number of ticks since New.
func (n *Node) Now() uint64 { return n.now }

// HasState reports whether the node holds the replicated state.
func (n *Node) HasState() bool { return n.st != nil }

// HeardGroup reports whether a joining node has heard an established group
// on its address (it then never founds one), or has joined.
func (n *Node) HeardGroup() bool { return n.join == nil || n.join.sawGroup }

// Joined reports whether the node is a full member.
func (n *Node) Joined() bool { return n.stat == statusMember }

// Stopped reports whether the node left, was removed or was refused.
func (n *Node) Stopped() bool { return n.stat == statusDone }

// Leaving reports whether the node asked to leave and waits for the group to
// record it.
func (n *Node) Leaving() bool { return n.leave != nil }

// T returns the node's group timestamp: the T of the next decision it will
// apply. Zero before it has the state.
func (n *Node) T() uint64 {
	if n.st == nil {
		return 0
	}
	return n.st.t
}

// Instance names the run of the group the node belongs to (the founder's
// incarnation), 0 before it has the state.
func (n *Node) Instance() uint64 {
	if n.st == nil {
		return 0
	}
	return n.st.instance
}

// Params returns the group's parameters, or the node's own before it has the
// group's.
func (n *Node) Params() wire.Params {
	if n.st == nil {
		return n.cfg.Params
	}
	return n.st.params
}

// Digest returns the hash of the node's replicated state, the one SYNC
// carries. Two members with equal T and equal digests hold the same state.
func (n *Node) Digest() uint64 {
	if n.st == nil {
		return 0
	}
	return n.st.digest()
}

// CheckState reports why this node's replicated state could not be sent in
// a state transfer (wire.Snapshot.Validate under its Limits, then the size
// limit once encoded), or nil if it could, or the node has no state yet. A
// state that fails could reach no newcomer and no member that fell behind;
// the simulation checks every node's now and then. It also checks the size
// bound the node keeps as its state changes, on which the server admits
// requests (see state.noRoomFor): it must be the snapshot's
// wire.SnapshotBound, and cover the encoding.
func (n *Node) CheckState() error {
	if n.st == nil {
		return nil
	}
	snap := n.st.snapshot()
	b, err := n.codec.EncodeSnapshot(snap)
	if err != nil {
		return err
	}
	if bound := wire.SnapshotBound(snap); n.st.size != bound || len(b) > bound {
		return fmt.Errorf("arbiter: the state's size bound is %d, its snapshot's %d, its encoding %d bytes", n.st.size, bound, len(b))
	}
	return nil
}

// Server returns the member that is server at the node's T, and whether
// there is one.
func (n *Node) Server() (wire.NodeID, bool) {
	if n.st == nil {
		return 0, false
	}
	return n.st.sched.ServerAt(n.st.t)
}

// IsServer reports whether this node is acting as server now.
func (n *Node) IsServer() bool { return n.srv != nil }

// Observer reports whether this node is a member that does not vote, in
// its own view (see Config.Observer): one the group may lose, with any
// number of others, and keep its majority.
func (n *Node) Observer() bool {
	if n.st == nil {
		return false
	}
	m := n.st.member(n.id)
	return m != nil && n.id != 0 && m.observer
}

// Backup returns the member that backs the server up: a grant takes effect
// once it holds the decision, and the turn goes to it next. Zero in a group
// of one.
func (n *Node) Backup() wire.NodeID {
	if n.st == nil {
		return 0
	}
	return n.st.backup
}

// Epoch returns the epoch of the node's log (the last takeover it applied),
// and Promised the highest epoch it has voted for or entered.
func (n *Node) Epoch() uint64 {
	if n.st == nil {
		return 0
	}
	return n.st.epoch
}

// Promised returns the highest epoch this node has voted for or entered: it
// refuses servers of lower epochs.
func (n *Node) Promised() uint64 { return n.promised }

// HasAuthority reports whether this node is the server and a majority of
// the view answered it within the authority: only then does it decide.
func (n *Node) HasAuthority() bool { return n.hasAuthority() }

// Frozen reports whether this node is a server that won a takeover it could
// not prove safe and waits out the old epoch's leases before it grants.
func (n *Node) Frozen() bool { return n.srv != nil && n.frozen() }

// Claiming reports whether this node is asking for a takeover, and of which
// epoch.
func (n *Node) Claiming() (uint64, bool) {
	if n.claim == nil {
		return 0, false
	}
	return n.claim.epoch, true
}

// SinceHeard returns how many ticks ago a server last pinged this node (for
// the server itself, since it sent the last ping a majority answered), and
// which server.
func (n *Node) SinceHeard() (uint64, wire.NodeID) {
	if n.srv != nil {
		return n.now - max(n.srv.start, n.srv.majorityAt), n.id
	}
	return n.now - n.pingedAt, n.pinger
}

// Quorum reports whether this node reaches a majority of its view.
func (n *Node) Quorum() Quorum {
	if n.st == nil {
		return Quorum{}
	}
	q := Quorum{Members: n.st.voters, Observers: n.st.observers()}
	switch {
	case n.srv != nil:
		q.Held = n.hasAuthority()
		q.Reachable = n.reach()
	case n.claim != nil:
		q.Reachable = n.countVotes(n.claim)
	default:
		q.Held = n.pinger != 0 && n.now-n.pingedAt < n.st.params.TakeoverTicks && n.majority(n.reachable)
		if n.now-n.pingedAt < n.st.params.TakeoverTicks {
			q.Reachable = n.reachable
		}
	}
	return q
}

// QuorumLost reports whether the last of EventQuorumLost and
// EventQuorumRegained this node emitted was EventQuorumLost. It can lag:
// a node that wins a takeover, and so has a majority, may not have said
// so; Quorum says what the node reaches now.
func (n *Node) QuorumLost() bool { return n.lastQuorumEvent == 1 }

// LeaseExpiry returns the tick at which this node's lease runs out unless it
// is renewed: from then on it must not use what it holds. Zero before it has
// the state.
func (n *Node) LeaseExpiry() uint64 {
	if n.st == nil {
		return 0
	}
	return n.anchor + n.st.params.LeaseTicks
}

// HandoffTarget returns the member this node has sent its SYNC to and not yet
// seen take over, if any.
func (n *Node) HandoffTarget() (wire.NodeID, bool) {
	if n.hand == nil {
		return 0, false
	}
	return n.hand.to, true
}

// Stats returns the node's counters.
func (n *Node) Stats() Stats { return n.stats }

// MemberInfo describes one member.
type MemberInfo struct {
	ID      wire.NodeID
	Inc     uint64
	Addr    string
	Silence uint64 // ticks not heard, as of the last SYNC
	// Unheard, on the server only: the ticks since it last heard the
	// member, counted as its SYNC will count them (Silence and this turn's
	// count for one not heard this turn; 0 for one heard within two
	// heartbeats). A dead member shows here a heartbeat or two after it
	// died, where Silence waits for the end of the turn.
	Unheard uint64
	// Observer: the member neither votes nor serves (see Config.Observer).
	// Transient: it asked to be one (a voter only while the group is short).
	Observer, Transient bool
}

// Members returns the view in ID order.
func (n *Node) Members() []MemberInfo {
	if n.st == nil {
		return nil
	}
	out := make([]MemberInfo, len(n.st.members))
	for i, m := range n.st.members {
		out[i] = MemberInfo{ID: m.id, Inc: m.inc, Addr: m.addr, Silence: m.silence, Observer: m.observer, Transient: m.transient}
		if s := n.srv; s != nil && m.id != n.id {
			if s.heardFrom(m.id) {
				out[i].Unheard = n.quietFor(m.id)
			} else if u := m.silence + n.now - s.counted; u >= 2*uint64(n.cfg.HeartbeatTicks) {
				// Below that, a live member not yet heard in a turn
				// just begun.
				out[i].Unheard = u
			}
		}
	}
	return out
}

// ResourceInfo describes one resource in the replicated state.
type ResourceInfo struct {
	Name   string
	Holder wire.NodeID
	Token  uint64
	Queue  []wire.NodeID // waiting members, first in line first
}

// Resources returns every resource that is held or has waiters, by name.
func (n *Node) Resources() []ResourceInfo {
	if n.st == nil {
		return nil
	}
	var out []ResourceInfo
	for _, name := range n.st.resourceNames() {
		r := n.st.resources[name]
		info := ResourceInfo{Name: name, Holder: r.holder, Token: r.token}
		for _, w := range r.queue {
			info.Queue = append(info.Queue, w.Node)
		}
		out = append(out, info)
	}
	return out
}

// Held is a resource this node holds.
type Held struct {
	Resource string
	Req      uint64
	Token    uint64
}

// Held returns what this node believes it holds, by name.
func (n *Node) Held() []Held {
	out := make([]Held, 0, len(n.held))
	for _, name := range sortedKeys(n.held) {
		h := n.held[name]
		out = append(out, Held{Resource: name, Req: h.req, Token: h.token})
	}
	return out
}

// Holds reports whether this node holds resource under request req: the
// grant took effect, and its EventGranted has been emitted, though the
// runtime may not have handled it yet (it comes after any event of the
// same Ready that it is handling). Cancel then fails: the request is no
// longer waiting.
func (n *Node) Holds(resource string, req uint64) bool {
	h := n.held[resource]
	return h != nil && h.req == req
}

// Waiting returns the resources this node has asked for and not yet been
// granted, by name.
func (n *Node) Waiting() []string {
	names := sortedKeys(n.reqs)
	return slices.Clip(names)
}
