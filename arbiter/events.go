package arbiter

import (
	"fmt"

	"github.com/mcnode/mcnode/wire"
)

// EventKind says what an Event reports.
type EventKind uint8

// Event kinds.
const (
	// EventFounded: this node founded a new group and is its first member.
	EventFounded EventKind = iota + 1
	// EventJoined: this node is a member: it has the state and has been
	// greeted by every voter (paper section 3.2: every member).
	EventJoined
	// EventGroupFull: the server refused this node (GROUP_FULL). The node
	// stops.
	EventGroupFull
	// EventLeft: the group recorded this node's leave. The node stops.
	EventLeft
	// EventRemoved: the group declared this node dead and removed it. The
	// node stops; the runtime may rejoin as a new incarnation.
	EventRemoved
	// EventMemberJoined, EventMemberLeft, EventMemberRemoved: another
	// member's membership changed (Node).
	EventMemberJoined
	EventMemberLeft
	EventMemberRemoved
	// EventServerChanged: the server role moved to Node at timestamp T.
	EventServerChanged
	// EventQueued: this node's request Req for Resource waits in the queue.
	EventQueued
	// EventGranted: this node holds Resource, under fencing token Token.
	EventGranted
	// EventReleased: the group recorded this node's release of Resource.
	EventReleased
	// EventLost: this node no longer holds Resource although it did not
	// release it (Reason says why: its lease ran out, or it was removed).
	EventLost
	// EventUpdate: an application state update from Node.
	EventUpdate
	// EventEpoch: the group entered epoch Epoch, with Node as its server
	// (a takeover); Reason says whether the new server grants at once.
	EventEpoch
	// EventTakeoverStarted: this node asks the members to make it the
	// server of a new epoch (Reason says why).
	EventTakeoverStarted
	// EventTakeoverWon: this node won its takeover and serves the new epoch.
	EventTakeoverWon
	// EventTakeoverFailed: this node gave its takeover up (Reason says why).
	EventTakeoverFailed
	// EventStepDown: this node stopped serving (Reason: a majority no longer
	// answers it, or a newer epoch began).
	EventStepDown
	// EventQuorumLost: this node cannot reach a majority of the view: as
	// server, a majority stopped answering its pings; as member, no server
	// is heard and its takeovers find no majority. A minority grants
	// nothing.
	EventQuorumLost
	// EventQuorumRegained: the majority is back.
	EventQuorumRegained
	// EventStranded: a server this node does not know pings it while no
	// server it knows has renewed its lease: the group may have gone on
	// without it, and without a group key it cannot tell (see
	// Config.Authenticated). Reported once; restarting the node rejoins.
	EventStranded
	// EventPromoted: the observer Node became a voter at T, since the
	// group had fewer than MinVoters (see Config.Observer).
	EventPromoted
	// EventDemoted: Node, a voter that asked to be an observer, became one
	// again at T, since the group had voters to spare.
	EventDemoted
	// EventRefused: the server refused this node's request Req for
	// Resource, for want of room in the group's lock table: the resource
	// was not in use and Limits.MaxResources were, or one more resource or
	// waiter could have made the state too large for a state transfer
	// (Reason says which). The request is over; one made once room is
	// freed may be granted.
	EventRefused
)

var eventNames = [...]string{
	EventFounded: "founded", EventJoined: "joined", EventGroupFull: "group-full", EventLeft: "left",
	EventRemoved: "removed", EventMemberJoined: "member-joined", EventMemberLeft: "member-left",
	EventMemberRemoved: "member-removed", EventServerChanged: "server-changed", EventQueued: "queued",
	EventGranted: "granted", EventReleased: "released", EventLost: "lost", EventUpdate: "update",
	EventEpoch: "epoch", EventTakeoverStarted: "takeover-started", EventTakeoverWon: "takeover-won",
	EventTakeoverFailed: "takeover-failed", EventStepDown: "step-down", EventQuorumLost: "quorum-lost",
	EventQuorumRegained: "quorum-regained", EventStranded: "stranded", EventPromoted: "promoted", EventDemoted: "demoted",
	EventRefused: "refused",
}

// String returns the kind's name.
func (k EventKind) String() string {
	if int(k) < len(eventNames) && eventNames[k] != "" {
		return eventNames[k]
	}
	return fmt.Sprintf("event(%d)", k)
}

// Event is something the application may act on. Which fields are set
// depends on Kind.
type Event struct {
	Kind     EventKind
	Node     wire.NodeID // the member concerned, or this node's own ID
	Resource string
	Req      uint64 // the request the event answers
	Token    uint64 // fencing token of a grant
	// After, if not 0, marks a grant that took effect when the holder
	// before released, ahead of the server's decision (see enterOnRelease):
	// After is that holder's token. Token is then this node's T at the
	// time, at most the decision's.
	After  uint64
	T      uint64 // group timestamp of the decision behind the event
	Epoch  uint64 // the epoch of this node's log when the event happened
	Topic  string
	Data   []byte
	Reason string
	// Expired marks an EventLost for this node's lease having run out (it
	// was not confirmed by the group for a lease), as against a leave, a
	// removal or a stop.
	Expired bool
	// Busy marks an EventRefused of a request that would have waited: the
	// resource was held or waited for when the server refused it, and the
	// state had no room for one more waiter (for a refusal this node learned
	// of from a state transfer, which does not say when it was decided: the
	// resource is held or waited for in that state). A TryAcquire, which
	// would not have waited, reports the resource locked rather than the
	// table full.
	Busy bool
}

// Outbound is a message to send. An empty Addr means multicast to the group
// (to the members For names, if any: see wire.Recipients); otherwise the
// message goes directly to Addr (member To, or a newcomer that has no ID
// yet). Messages share a datagram only with messages of the same Addr and
// For.
type Outbound struct {
	To   wire.NodeID
	Addr string
	Msg  wire.Message
	For  wire.Recipients // the members it is for (the header's For); sent directly, a NotMember names the ID it answers
}

// Ready is what the machine has produced since the last Advance: messages to
// send, each batch under one datagram Header, and events for the
// application. Messages must be sent in order; consecutive messages to the
// same destination may share a datagram.
type Ready struct {
	Header   wire.Header
	Messages []Outbound
	Events   []Event
}
