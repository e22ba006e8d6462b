package wire

import "slices"

// Class groups datagrams for message accounting.
type Class string

// Datagram classes. Request, decision and release are the protocol's cost
// per critical-section entry; the others are membership and repair traffic,
// reported apart.
const (
	ClassRequest  Class = "request"  // requests and cancels
	ClassDecision Class = "decision" // multicast decisions other than a bare SYNC
	ClassRelease  Class = "release"  // holders' releases
	ClassSync     Class = "sync"     // SYNC hand-overs and their retries
	ClassPing     Class = "ping"     // pings and replies: the server's liveness and authority
	ClassAck      Class = "ack"      // the backup's acks, and requests for them
	ClassTakeover Class = "takeover" // claims, votes and takeover decisions
	ClassRepair   Class = "repair"   // NAKs and retransmitted decisions
	ClassJoin     Class = "join"     // join requests, greetings, state transfer, leaves
	ClassUpdate   Class = "update"   // application state updates
)

// Classes lists every class, core first.
var Classes = []Class{ClassRequest, ClassDecision, ClassRelease, ClassSync, ClassPing, ClassAck, ClassTakeover, ClassRepair, ClassJoin, ClassUpdate}

// NumClasses is len(Classes): the size of an array counted by Class.Index.
const NumClasses = 10

// Index returns c's position in Classes, or -1 if c is no class. Counters
// updated on every datagram index arrays with it: a map keyed by the
// class's string would hash it each time.
func (c Class) Index() int {
	switch c {
	case ClassRequest:
		return 0
	case ClassDecision:
		return 1
	case ClassRelease:
		return 2
	case ClassSync:
		return 3
	case ClassPing:
		return 4
	case ClassAck:
		return 5
	case ClassTakeover:
		return 6
	case ClassRepair:
		return 7
	case ClassJoin:
		return 8
	case ClassUpdate:
		return 9
	}
	return -1
}

// Core reports whether the class is part of the per-entry cost (request,
// grant, release).
func (c Class) Core() bool { return c == ClassRequest || c == ClassDecision || c == ClassRelease }

// Classify says which class a datagram belongs to, from the messages it
// carries and whether it was multicast. A datagram that carries a grant or a
// release decision counts as a decision even if a SYNC rides along: that is
// the datagram the entry cost. A SYNC that carries only queued requests
// (Grant with Queued) is the turn's hand-over: the queue records ride in it
// because it goes first, and would otherwise ride in the next decision.
// Likewise a ping to all that carries nothing but decisions the server held
// back until it (releases, queued requests) counts as the ping: the
// heartbeat goes out anyway, and they cost no datagram. (A release that
// hands a resource over goes out at once, and shares a ping's datagram only
// when it is decided in the same step as the ping: rarely, and that
// datagram does go out anyway.)
func Classify(p *Packet, multicast bool) Class {
	has := func(kinds ...Kind) bool {
		return slices.ContainsFunc(p.Messages, func(m Message) bool { return slices.Contains(kinds, m.Kind()) })
	}
	entry := slices.ContainsFunc(p.Messages, func(m Message) bool {
		g, grant := m.(*Grant)
		return m.Kind() == KindReleased || grant && !g.Queued
	})
	heldBack := !slices.ContainsFunc(p.Messages, func(m Message) bool {
		g, grant := m.(*Grant)
		return !(m.Kind() == KindPing || m.Kind() == KindReleased || grant && g.Queued)
	})
	switch {
	case multicast && has(KindPing) && heldBack:
		return ClassPing
	case multicast && has(KindSync) && !entry:
		return ClassSync
	case multicast && has(KindGrant, KindReleased):
		return ClassDecision
	case has(KindRequest, KindCancel):
		return ClassRequest
	case has(KindRelease):
		return ClassRelease
	case multicast && has(KindOkToJoin, KindGroupFull, KindLeft):
		return ClassJoin
	case has(KindSync) && (multicast || len(p.Messages) == 1):
		return ClassSync
	case has(KindClaim, KindVote) || (multicast && has(KindTakeover)):
		return ClassTakeover
	case has(KindNak, KindNotMember) || (!multicast && has(KindGrant, KindReleased, KindSync, KindOkToJoin, KindGroupFull, KindLeft, KindTakeover)):
		return ClassRepair
	case has(KindPing, KindPingReply):
		return ClassPing
	case has(KindAck, KindAckRequest):
		return ClassAck
	case has(KindUpdate):
		return ClassUpdate
	}
	return ClassJoin
}
