// Package arbiter is the rotating-arbiter mutual-exclusion protocol of
// Pearlin's thesis (seed 001) as a deterministic state machine.
//
// # The protocol
//
// The members of a multicast group share named resources. One member at a
// time is the server: the one the turn schedule (package clock) names for
// the group timestamp T. Only the server advances T, by one for each
// decision it makes, and it multicasts every decision, so the decisions form
// a log numbered by T that every member applies in order:
//
//	Grant     a request decided: the resource is granted, or the requester
//	          queued behind its holder (the paper's RESPONSE)
//	Released  a release recorded; the head of the queue holds the resource
//	OkToJoin  a newcomer admitted, with its logical ID (OK_TO_JOIN)
//	GroupFull a newcomer refused (GROUP_FULL)
//	Left      a member left
//	Sync      the end of a turn (section 3.3): members not heard from this
//	          turn listed, those silent longer than the lease removed and
//	          their resources reclaimed, and T moved to the first timestamp
//	          of the next server's turn
//
// A turn begins with a ping of every member (figure A) and ends with a
// SYNC, which hands the turn to the next member that answered, skipping
// those that did not (figure B). The last timestamp of a turn can only be
// taken by a SYNC, and every decision that changes the view carries the
// timestamp the role moves to, so the role never moves implicitly: the race
// of section 3.3, where the next server sees a response before the current
// server is done, cannot happen. The next server acts only once it has
// applied every decision before the SYNC.
//
// Beyond the paper (see DESIGN.md): requests wait in a FIFO queue that is
// part of the replicated state; requests are idempotent (by requester and
// request ID) and retried until decided; a member that sees a gap in the
// log asks for the missing decisions (Nak) and members keep a window of
// recent ones to answer, or transfer their whole state; SYNC carries a
// digest of the state, which every member checks; the server confirms its
// successor is alive before handing over; and members hold resources under
// a lease, so that the group reclaims a silent member's resources only once
// that member has stopped using them.
//
// # Leases
//
// A member's lease runs from the last time it was certainly heard by a
// server: the first send of a request a server decided, or of a ping reply
// in a turn whose SYNC did not list it as unheard. A member whose lease has
// run out gives up what it holds (EventLost) and releases it. The group
// removes a member only when, summed over the turns of the servers that did
// not hear from it, it has been silent for LeaseTicks+LeaseMarginTicks, so
// the member has stopped before anything it held is granted to another.
//
// # Using the machine
//
// The machine does no I/O, starts no goroutine and reads no clock. The
// runtime drives it, as etcd's raft is driven:
//
//	for {
//		select {
//		case <-ticker.C:
//			node.Tick()
//		case p := <-packets:
//			for _, m := range p.Messages {
//				node.Step(p.Source, p.Header, m)
//			}
//		}
//		if node.HasReady() {
//			rd := node.Ready()
//			send(rd.Header, rd.Messages) // in order; consecutive ones to one address may share a datagram
//			deliver(rd.Events)
//			node.Advance()
//		}
//	}
//
// Acquire, Release, Cancel, Leave and Publish are the application's
// requests; their outcomes arrive as Events.
package arbiter
