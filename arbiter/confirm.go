package arbiter

import (
	"fmt"
	"slices"

	"github.com/mcnode/mcnode/wire"
)

// A grant takes effect only once the backup holds its decision (see doc.go,
// "Takeover"): if the server dies, the backup takes over knowing every grant
// that any member may be using. The backup says what it holds in the header
// of everything it sends (LogEpoch, T), and, when it has nothing else to
// multicast, sends an Ack straight to whoever waits on a decision it applied:
// the grantee of a free resource, and the member a decision made the head of
// a queue (see handedOff). On becoming the backup, and in a new epoch, it
// multicasts one.
//
// A hand-over to the head of a queue (a holder released, left or was
// removed) needs less: that the backup holds the log up to the decision that
// put this node at the head. From there, whatever the backup decides about
// the resource if it takes over without the hand-over, the resource goes to
// this node next: the holder it still records releases again (it finds
// itself a holder in the new epoch) or is removed, and either way the head
// of the queue gets it. Nobody else holds it meanwhile: a holder the cut-off
// branch removed had gone silent for a lease, so its lease lapsed, and a
// grant that had not taken effect by then never does (dropPendingGrants),
// however soon the new epoch renews the lease. At heavy load the
// backup showed that position a whole critical section earlier, so the
// hand-over takes effect as it arrives, and the synchronization delay stays
// two one-way delays (release, then the server's decision).

// noteAck records a member's log position from a datagram header, if it is a
// position in this node's epoch. A sender that has promised a newer epoch
// than its log's shows no position: it voted at the position it then had,
// and a candidate may have taken over on the strength of that vote, so what
// its log gained since (a NAK answered by a member of the old epoch) may be
// a branch the new epoch cuts off.
func (n *Node) noteAck(h wire.Header) {
	if n.st == nil || h.LogEpoch != n.st.epoch || h.Epoch != h.LogEpoch {
		return
	}
	if h.T > n.acks[h.From] {
		n.acks[h.From] = h.T
	}
}

// backedUp reports whether the grant decided for request p is backed up:
// the backup of the time of the grant or the current one (which took the log
// over from it) has shown a log position of at least p.need in this epoch. In a group of one there is no backup, and
// the backup itself needs nobody; but a backup counts only once the server
// it backs up holds the decision that named it (backupTakenUp).
func (n *Node) backedUp(p *pending) bool {
	st := n.st
	if st.backup == 0 && st.voters == 1 {
		return true
	}
	if !n.backupTakenUp() {
		// Only the log of this turn's server counts: it was the backup
		// before the SYNC that named the present one, and may take over
		// as that, knowing nothing of what the present one alone holds.
		return n.acks[st.server()] >= p.need
	}
	switch {
	case st.backup == n.id || p.grantNeeds == n.id:
		return true
	case st.backup != 0 && n.acks[st.backup] >= p.need:
		return true
	}
	return p.grantNeeds != 0 && n.acks[p.grantNeeds] >= p.need
}

// backupTakenUp reports whether the server of this node's turn shows it
// holds the decision that named the backup (a log position of at least
// backupAt), or is this node.
// Until then the backup is the log's word only: a server whose SYNC, naming
// the next server's backup, reached nobody else, and which was then paused,
// took itself for that backup, which needs nobody's ack, and took a lock on
// its holder's release (enterOnRelease); the next server, which never had
// the SYNC, took over as the backup it still was, knowing every grant but
// that one, and granted the lock again (seed 703,899 of the observers'
// property test).
func (n *Node) backupTakenUp() bool {
	srv := n.st.server()
	return srv == n.id || n.acks[srv] >= n.backupAt
}

// confirmGrants puts into effect the grants the backup now holds. Nothing
// takes effect while this node has promised a newer epoch than its log's:
// for the same reason as in noteAck, this node may be the backup (which needs
// nobody's ack) applying the old epoch's decisions after its vote.
func (n *Node) confirmGrants() {
	if n.st == nil || n.stat == statusDone || n.promised != n.st.epoch || !n.grantsWaiting {
		return
	}
	// This runs at every step: find what is ready in map order, and sort
	// only that (usually nothing), for the events' order.
	var ready []string
	waiting := 0
	for name, p := range n.reqs {
		if p.granted != 0 {
			waiting++
			if n.backedUp(p) {
				ready = append(ready, name)
			}
		}
	}
	n.grantsWaiting = waiting > len(ready)
	if waiting > 0 && n.leaseExpired() {
		// The group might already count this node as dead: holding now
		// could overlap with whoever it reclaims the resource for.
		n.dropPendingGrants()
		n.grantsWaiting = false
		return
	}
	slices.Sort(ready)
	for _, name := range ready {
		p := n.reqs[name]
		delete(n.reqs, name)
		n.held[name] = &holding{req: p.req, token: p.granted}
		n.emit(Event{Kind: EventGranted, Node: n.id, Resource: name, Req: p.req, Token: p.granted, T: p.granted, After: p.after})
	}
}

// tickConfirm asks the backup again for an Ack that has not come: the one it
// multicast may have been lost.
func (n *Node) tickConfirm() {
	retry := uint64(n.cfg.RetryTicks)
	for _, name := range sortedKeys(n.reqs) {
		p := n.reqs[name]
		if p.granted == 0 || n.now-p.grantedAt < retry || n.now-n.ackRequestAt < retry {
			continue
		}
		n.ackRequestAt = n.now
		to := n.st.backup
		if to == 0 || to == n.id {
			to = p.grantNeeds
		}
		n.sendTo(to, &wire.AckRequest{T: p.need - 1})
		return
	}
}

// onAckRequest answers a grantee that waits for this node, the backup, to
// show it holds a grant.
func (n *Node) onAckRequest(src string, from *member, m *wire.AckRequest) {
	// m.T is one below the position the grantee needs.
	if n.st == nil || from == nil || n.xfer.need || n.st.t <= m.T || n.st.epoch != n.promised {
		return // not yet: the Ack goes out when this node applies it
	}
	n.out = append(n.out, Outbound{Addr: src, Msg: &wire.Ack{}})
}

// sendAcks sends the Acks this node owes: directly to the members that wait
// on them (a multicast would cost every member a datagram to read, for the
// sake of one or two), to all after a takeover, and to the server when the
// view changed (see viewCommitted). Any multicast to every member in the
// same Ready carries the header to everyone, so then no Ack is needed.
func (n *Node) sendAcks() {
	to, all, view := n.ackTo, n.ackAll, n.viewAckDue
	n.ackTo, n.ackAll, n.viewAckDue = nil, false, false
	if (len(to) == 0 && !all && !view) || n.st == nil || n.xfer.need {
		return
	}
	for _, o := range n.out {
		if o.Addr == "" && o.For.All() {
			return
		}
	}
	if all {
		n.out = append(n.out, Outbound{Msg: &wire.Ack{}})
		return
	}
	if view && n.srv == nil {
		to = append(to, n.st.server())
	}
	slices.Sort(to)
	for _, id := range slices.Compact(to) {
		if id != n.id && n.st.member(id) != nil {
			n.sendTo(id, &wire.Ack{})
		}
	}
}

// Quorum describes whether this node can reach a majority of its view.
type Quorum struct {
	// Held: as server, a majority answered within the authority; as member,
	// a server pinged within the takeover timeout.
	Held bool
	// Reachable is how many voters (this node included) answered the last
	// ping or claim, when that is known; Members the number of voters in
	// the view, and Observers the members besides, which count for no
	// majority.
	Reachable, Members, Observers int
}

// String renders the quorum as a status line says it.
func (q Quorum) String() string {
	members, observers := plural(q.Members, "member"), ""
	if q.Observers > 0 {
		members, observers = plural(q.Members, "voting member"), fmt.Sprintf(", and %s", plural(q.Observers, "observer"))
	}
	switch {
	case q.Held:
		return fmt.Sprintf("quorum held (%s%s)", members, observers)
	case q.Reachable > 0:
		return fmt.Sprintf("no quorum: %d of %s reachable%s", q.Reachable, members, observers)
	}
	return fmt.Sprintf("no quorum: no server heard (%s%s)", members, observers)
}

// plural is n and the noun, which takes an s unless n is 1: "1 member",
// "3 members". For what people read: status lines, events' reasons.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// enterOnRelease hands a resource to this node when it hears the holder's
// release, one one-way delay before the server's decision could: the
// synchronization delay becomes T, as in Cao and Singhal (1998), where the
// exiting site sends its reply straight to the next one.
//
// It is the hand-over of confirm.go arriving early. This node's log shows
// `from` holding the resource under the request it releases, and this node
// first in the queue behind it (headAt). From that position the resource
// goes to this node next in every branch of the log: the holder's release
// (or its removal, if the release never reaches a server) passes it to the
// head of the queue, and this node is that head for as long as it neither
// cancels nor is removed, which it would know (a removal follows a silence
// longer than the lease, and its lease must hold). So the same conditions
// apply as to a hand-over decided by the server: the backup must hold the
// log up to headAt, and this node's lease must not have lapsed, and the
// release is a fact, whoever hears it: the holder stopped using the
// resource. One more: this node's log must show its epoch past any wait for
// older leases (settledIn). A server that took over without knowing every
// grant in effect (Takeover.Wait) decides nothing until those leases have
// run out, and its log may lack a hand-over that an older epoch made and a
// member still uses: the release of the holder before it, retried into the
// new epoch, must not hand the resource on meanwhile.
//
// The fencing token is this node's T, the timestamp of the next decision its
// log will apply. The decision that records the hand-over comes at that T or
// later, in this node's branch of the log, and in a later epoch's, which
// starts above every timestamp of this one (TakeoverGap). And it is above
// every token before: the holder's, a T this log applied (or, if the holder
// too entered this way, at most that T), and every earlier holder's, which
// was at most the T that handed the resource on from it. So every holder's
// token is at most the T of the decision that records its grant, and tokens
// still increase from holder to holder. (The holder's token plus one would
// not do: a holder in a log that a takeover cut off may have taken it on the
// same release, and the later epoch's head after that holder too.) A holder
// that entered this way releases by request, not by token (the server
// matches the two), and the decision, when it comes, changes nothing here
// (enteredOnRelease).
func (n *Node) enterOnRelease(from wire.NodeID, m *wire.Release) {
	st := n.st
	if st == nil || n.stat != statusMember || n.leave != nil || n.xfer.need || n.promised != st.epoch || n.settledIn != st.epoch || n.leaseExpired() {
		return
	}
	p := n.reqs[m.Resource]
	r := st.resources[m.Resource]
	if p == nil || p.granted != 0 || p.headAt == 0 || r == nil || r.holder != from || r.holderReq != m.Req ||
		len(r.queue) == 0 || r.queue[0].Node != n.id || r.queue[0].Req != p.req {
		return
	}
	n.stats.EnteredOnRelease++
	n.granted(m.Resource, p.req, st.t, p.headAt+1, r.token)
}

// enteredOnRelease reports whether this node already has the resource for
// request req from the holder's release (held, waiting for the backup, or
// released since), when the server's decision arrives.
func (n *Node) enteredOnRelease(resource string, req uint64) bool {
	if h := n.held[resource]; h != nil && h.req == req {
		return true
	}
	if p := n.reqs[resource]; p != nil && p.req == req && p.granted != 0 {
		return true
	}
	r := n.rels[req]
	return r != nil && !r.cancel // a cancel's grant is released when it comes
}
