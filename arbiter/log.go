package arbiter

import (
	"bytes"
	"fmt"
	"maps"
	"slices"

	"github.com/mcnode/mcnode/wire"
)

// logState is this node's view of the decision log: recent decisions kept to
// answer NAKs, decisions that arrived ahead of a gap, and what it knows of
// how far the log reaches.
type logState struct {
	window    map[uint64]wire.Decision // recent applied decisions, by T
	order     []uint64                 // their Ts in apply order, for eviction
	future    map[uint64]buffered      // arrived before their turn
	strangers int                      // how many of them non-members sent
	seenT     uint64                   // highest T a member showed
	seenAddr  string                   // who showed it: a NAK goes there
	gap       bool                     // seenT > t and the next decision is missing
	gapSince  uint64
	nakAt     uint64
	nakTries  int
	nakTo     wire.NodeID // when asking around the members instead
	published uint64      // a server's decisions below this T have been sent
	catchUp   map[wire.NodeID]uint64
}

func (l *logState) init() {
	l.window = map[uint64]wire.Decision{}
	l.future = map[uint64]buffered{}
	l.catchUp = map[wire.NodeID]uint64{}
}

// observe notes a member's T: a larger one than ours means we miss
// decisions, and the member has them, so the NAK goes to its address. Only
// members of this node's view count: what a non-member shows may be forged,
// and the highest T seen is where a takeover numbers its epoch from. A
// sender of an epoch this node has left is no source of decisions.
func (n *Node) observe(src string, h wire.Header) {
	if n.st == nil || h.Epoch < n.promised {
		return
	}
	// Ties go to the latest sender: the first one to show this T may be
	// gone since.
	if h.T >= n.log.seenT && h.T > n.st.t {
		n.log.seenT, n.log.seenAddr = h.T, src
	}
}

// sender is who sent a decision, as its datagram named it: the member ID,
// incarnation and source address, and the log position its header showed.
// A decision is applied only once this node's view, at the decision's T,
// shows that the sender could send it (see decidedBy).
type sender struct {
	id       wire.NodeID
	inc      uint64
	addr     string
	logEpoch uint64
	t        uint64
}

// buffered is a decision that arrived before its turn, with its sender.
type buffered struct {
	d        wire.Decision
	from     sender
	stranger bool // its sender was no member of the view when it came
}

func senderOf(src string, h wire.Header) sender {
	return sender{id: h.From, inc: h.Inc, addr: src, logEpoch: h.LogEpoch, t: h.T}
}

// decidedBy reports whether a decision at this node's T may be applied as
// sent by "by": a member of the view (its ID, incarnation and address), and
// either the server the schedule names for the decision (a Takeover's own
// server) or a member that passes on a decision of its log, which its header
// shows it has applied. Anyone else's copy is forged or garbled.
func (n *Node) decidedBy(d wire.Decision, by sender) bool {
	m := n.st.member(by.id)
	if m == nil || m.inc != by.inc || m.addr != by.addr {
		return false
	}
	t, next := d.Stamp()
	if tk, ok := d.(*wire.Takeover); ok {
		if tk.Server == by.id {
			return true
		}
	} else if srv, _ := n.st.sched.ServerAt(t); srv == by.id && d.Era() == n.st.epoch {
		return true
	}
	return by.logEpoch > d.Era() || (by.logEpoch == d.Era() && by.t >= next)
}

// onDecision takes a decision from a datagram. Decisions are applied in T
// order, each only on the log it belongs to: one of this node's epoch, or the
// Takeover that begins the next epoch from exactly where this node stands;
// and only from a sender that could send it (see decidedBy). One that
// arrives before its turn waits with its sender, to be checked then: the
// view may change on the way, as when the sender is a member admitted by a
// decision this node has yet to apply.
func (n *Node) onDecision(src string, h wire.Header, from *member, d wire.Decision) error {
	t, next := d.Stamp()
	by := senderOf(src, h)
	if n.st == nil {
		n.joinSawDecision(d)
		n.buffer(t, d, by)
		return nil
	}
	if from == nil {
		// Not a member of this node's view: only one admitted by a decision
		// this node lacks could send a decision that is still to come.
		if h.From < n.st.nextID || t <= n.st.t {
			n.stats.NotMember++
			return ErrNotMember
		}
		n.buffer(t, d, by)
		return nil
	}
	if h.Epoch > n.promised {
		n.promise(h.Epoch, 0) // the sender is in a newer epoch: follow it
	}
	if h.Epoch < n.promised {
		n.stats.Stale++
		return ErrStale
	}
	switch {
	case t < n.st.t:
		if tk, ok := d.(*wire.Takeover); ok && tk.Epoch > n.st.epoch && n.decidedBy(d, by) {
			// An epoch began below where this node's log is: the decisions
			// it applied from there are not the group's.
			n.truncated(fmt.Sprintf("epoch %d began at T=%d, below this node's T=%d", tk.Epoch, t, n.st.t))
			return nil
		}
		n.stats.Duplicates++
	case t > n.st.t:
		if next >= n.log.seenT {
			n.log.seenT, n.log.seenAddr = next, src
		}
		n.buffer(t, d, by)
	default:
		if !n.decidedBy(d, by) {
			n.stats.NotServer++
			return ErrNotServer
		}
		n.applyNext(d)
		n.drain()
	}
	return nil
}

// buffer keeps a decision for its turn. A copy from a member of the view
// replaces one from a sender this node does not know: that one may be
// forged, and would otherwise shut the real one out. A member keeps at most
// maxStrangerDecisions from senders it does not know.
func (n *Node) buffer(t uint64, d wire.Decision, by sender) {
	stranger := n.st != nil && n.st.member(by.id) == nil
	if old, ok := n.log.future[t]; ok {
		if n.st == nil || !old.stranger || stranger {
			n.stats.Duplicates++
			return
		}
		n.unbuffer(t)
	} else if len(n.log.future) >= n.cfg.MaxBuffered || (stranger && (n.log.strangers >= maxStrangerDecisions || t > n.strangerReach())) {
		return // the NAK will fetch it again when its turn comes
	}
	if stranger {
		n.log.strangers++
	}
	n.log.future[t] = buffered{d: d, from: by, stranger: stranger}
}

// maxStrangerDecisions bounds the decisions a member keeps from senders it
// does not know: those of a member admitted by decisions it has yet to
// apply are a turn's worth or two, and what a forger sends must not fill
// the buffer.
const maxStrangerDecisions = 64

// strangerReach is the furthest T at which a member keeps a decision from a
// sender it does not know: two turns past the furthest a member of its view
// has shown. Further on, a forger's decisions would hold their places for
// as long as T takes to get there.
func (n *Node) strangerReach() uint64 {
	return max(n.st.t, n.log.seenT) + 2*n.st.params.TurnLength
}

// unbuffer drops the buffered decision at t.
func (n *Node) unbuffer(t uint64) {
	b, ok := n.log.future[t]
	if !ok {
		return
	}
	delete(n.log.future, t)
	if b.stranger {
		n.log.strangers--
	}
}

// drain applies buffered decisions that are now next in line.
func (n *Node) drain() {
	for n.st != nil && n.stat != statusDone && !n.xfer.need {
		b, ok := n.log.future[n.st.t]
		if !ok {
			return
		}
		n.unbuffer(n.st.t)
		if !n.decidedBy(b.d, b.from) {
			n.stats.NotServer++
			return // the NAK fetches the real one
		}
		if !n.applyNext(b.d) {
			return
		}
	}
}

// applyNext applies the decision at this node's T if it belongs to this
// node's log, and reports whether it did.
func (n *Node) applyNext(d wire.Decision) bool {
	st := n.st
	switch tk, isTakeover := d.(*wire.Takeover); {
	case d.Era() == st.epoch && !isTakeover:
		return n.apply(d, false)
	case isTakeover && tk.Epoch > st.epoch && tk.PrevEpoch == st.epoch:
		return n.apply(d, false)
	case d.Era() > st.epoch:
		// A decision of a newer epoch at this T, not the Takeover that
		// began it from here: that epoch began below this T, on another
		// branch of the log.
		n.truncated(fmt.Sprintf("a decision of epoch %d at T=%d, and this node's log is of epoch %d", d.Era(), st.t, st.epoch))
	default:
		n.stats.Stale++ // an old epoch's decision at a T the log has since passed by another way
	}
	return false
}

// apply applies the decision at the current T. The server applies its own
// decisions through here too (own), so that every node runs the same code.
// A decision that cannot be applied to this state (a correct log never holds
// one) changes nothing: the node marks its state suspect and refetches it.
func (n *Node) apply(d wire.Decision, own bool) bool {
	n.applying++
	defer func() { n.applying-- }()
	st := n.st
	t, next := d.Stamp()
	if next <= t {
		n.refused("a decision that does not move T forward")
		return false
	}
	if !own {
		if want, err := n.wantNext(d); err != nil || want != next {
			n.refused(fmt.Sprintf("a %s at T=%d that moves T to %d, where the schedule says %d", d.Kind(), t, next, want))
			return false
		}
	}
	switch d := d.(type) {
	case *wire.OkToJoin:
		before := st.voters
		if d.ID != st.nextID || (d.Observer && before < MinVoters) || !st.addMember(d.ID, d.Inc, d.Addr, d.Observer, d.Transient) {
			n.refused(fmt.Sprintf("OkToJoin of node %d, which the state cannot admit", d.ID))
			return false
		}
		if st.backup == 0 && before == 1 && !d.Observer {
			st.backup = d.ID // a lone voter gains the backup it lacked
			n.backupAt = t + 1
		}
		st.viewT = t
		n.viewAckDue = true
		n.emit(Event{Kind: EventMemberJoined, Node: d.ID, T: t})
		if n.srv != nil {
			n.srv.heard[d.ID] = n.now // its join request reached us this turn
		}
		// Paper section 3.2: every member introduces itself to the newcomer;
		// here every voter (see missingGreetings).
		if st.votes(n.id) {
			n.out = append(n.out, Outbound{To: d.ID, Addr: d.Addr, Msg: &wire.Greeting{Newcomer: d.ID, Addr: n.cfg.Addr}})
		}
	case *wire.GroupFull:
		// Nothing changes but T: the paper increments T for GROUP_FULL too.
	case *wire.Left:
		if st.member(d.ID) == nil {
			n.refused(fmt.Sprintf("a leave of node %d, which is no member", d.ID))
			return false
		}
		st.viewT = t
		n.viewAckDue = true
		n.dropMembers([]wire.NodeID{d.ID}, t, EventMemberLeft, "left the group")
	case *wire.Grant:
		if st.member(d.Node) != nil && st.wouldQueue(d.Resource) != d.Queued {
			n.refused(fmt.Sprintf("a grant of %q to node %d that the state would decide otherwise", d.Resource, d.Node))
			return false
		}
		st.request(d)
		n.handedOff(d.Resource, d.Node, !d.Queued, false)
		if d.Node == n.id {
			n.ownDecided(d, t)
		}
	case *wire.Released:
		if !st.releaseMatches(d) {
			n.refused(fmt.Sprintf("a release of %q by node %d, which does not hold it under token %d", d.Resource, d.Node, d.Token))
			return false
		}
		wasHead := d.Withdrawn && st.headIs(d.Resource, d.Node, d.Req)
		refused, why, busy := n.isRefusal(d), room, false
		if refused {
			// As the server found the state it decided on.
			why, busy = st.noRoomFor(d.Resource, n.cfg.Limits), st.wouldQueue(d.Resource)
		}
		h, passed := st.release(d)
		switch {
		case refused:
			n.ownRefused(d, why, busy)
		case d.Node == n.id:
			n.ownReleased(d)
		}
		if passed {
			n.handedOff(h.resource, h.to, true, true)
			n.handedOver(h)
		} else if wasHead {
			n.ackHead(d.Resource) // the next waiter moved up
		}
	case *wire.Sync:
		if !n.applySync(d, t) {
			return false
		}
	case *wire.Takeover:
		if !n.applyTakeover(d, t, next) {
			return false
		}
	}
	if n.stat == statusDone {
		return true
	}
	switch d := d.(type) {
	case *wire.Grant:
		n.noteHead(d.Resource, t) // only its resource's queue changed
	case *wire.Released:
		n.noteHead(d.Resource, t)
	case *wire.OkToJoin, *wire.GroupFull:
	default:
		n.noteHeads(t) // a removal or a new epoch may move any queue
	}
	st.t = next
	if tk, ok := d.(*wire.Takeover); !ok || !tk.Wait {
		n.settledIn = st.epoch
	}
	n.keep(t, d)
	if s, ok := d.(*wire.Sync); ok {
		digest := st.digest()
		if own {
			s.Digest = digest
		} else if s.Digest != digest {
			n.diverged("the SYNC's digest differs from this node's state")
		}
	}
	if n.hand != nil && st.t > n.hand.nextT {
		n.hand = nil // decisions beyond the hand-over: the next server is at work
	}
	return true
}

// handedOff notes, at the backup, who waits on the decision just applied:
// the grantee of a free resource (granted, not from a queue) may use it once
// the backup holds the decision, and a member that became the head of the
// resource's queue by it may take a later hand-over once the backup holds
// this one (see confirm.go). The backup tells each of them directly. The
// grantee of a hand-over from the queue needs nothing new: it needs the
// decision that made it the head, which it was told of then, or at the
// SYNC that made this node the backup (applySync).
func (n *Node) handedOff(resource string, to wire.NodeID, granted, fromQueue bool) {
	if n.st.backup != n.id {
		return
	}
	if granted && !fromQueue {
		n.ackTo = append(n.ackTo, to)
	}
	if r := n.st.resources[resource]; r != nil && (granted || len(r.queue) == 1) {
		n.ackHead(resource)
	}
}

// ackHead has the backup tell the head of the resource's queue, if there is
// one, that it holds the decision that put it there.
func (n *Node) ackHead(resource string) {
	if r := n.st.resources[resource]; n.st.backup == n.id && r != nil && len(r.queue) > 0 {
		n.ackTo = append(n.ackTo, r.queue[0].Node)
	}
}

func (n *Node) applySync(d *wire.Sync, t uint64) bool {
	st := n.st
	if d.Remove != 0 && d.Remove == n.id && n.srv != nil {
		n.refused("a SYNC removing its own server")
		return false
	}
	if err := d.Validate(n.cfg.Limits); err != nil {
		// The codec refuses such a SYNC; Step, which takes messages
		// unvalidated, must not apply one (changing the voters twice, or
		// removing an observer it promotes, would find a member gone).
		n.refused(fmt.Sprintf("an invalid SYNC: %v", err))
		return false
	}
	if m := st.member(d.Promote); d.Promote != 0 && (m == nil || !m.observer || st.voters > MinVoters) {
		n.refused(fmt.Sprintf("a SYNC promoting node %d, which is no observer, or with %s already", d.Promote, plural(st.voters, "voter")))
		return false
	}
	if m := st.member(d.Demote); d.Demote != 0 && (m == nil || m.observer || !m.transient || st.voters <= MinVoters || d.Demote == st.server() || d.Demote == st.backup) {
		n.refused(fmt.Sprintf("a SYNC demoting node %d, which is no transient voter, or the server or the next, or with %s only", d.Demote, plural(st.voters, "voter")))
		return false
	}
	for _, id := range d.RemoveObservers {
		// Checked before anything changes: a refusal must leave the state
		// as it was.
		if m := st.member(id); m == nil || !m.observer {
			n.refused(fmt.Sprintf("a SYNC removing node %d as an observer, which is none", id))
			return false
		}
	}
	if heads := st.headsRemovedWithHolders(d.Removed()); len(heads) > 0 {
		head := slices.Min(slices.Collect(maps.Keys(heads)))
		n.refused(fmt.Sprintf("a SYNC removing node %d together with node %d, the holder of a resource it waits for first", head, heads[head][0]))
		return false
	}
	for _, m := range st.members {
		m.silence = 0
	}
	for _, q := range d.Quiet {
		if m := st.member(q.ID); m != nil {
			m.silence = q.Ticks
		}
	}
	selfUnheard := slices.Contains(d.Unanswered, n.id)
	for _, u := range d.Unheard {
		if m := st.member(u.ID); m != nil {
			m.silence = u.Ticks
		}
		selfUnheard = selfUnheard || u.ID == n.id
	}
	// A reply of ours to this turn's ping reached the server: the lease runs
	// from when we sent the first one (the earliest it can have been heard).
	// Unless the lists were cut short: not listed proves nothing then.
	if at, ok := n.replies[d.Turn]; ok && !selfUnheard && (!d.Partial || slices.Contains(d.Renew, n.id)) {
		n.renew(at)
	}
	if removed := d.Removed(); len(removed) > 0 {
		st.viewT = t
		n.viewAckDue = true
		n.dropMembers(removed, t, EventMemberRemoved, "removed by the group: not heard for longer than the lease")
		if n.stat == statusDone {
			return true
		}
	}
	if d.Promote != 0 {
		st.member(d.Promote).observer = false
		_ = st.rebuildSchedule() // one more voter, sorted and unique: cannot fail
		if n.promotedAt == nil {
			n.promotedAt = map[wire.NodeID]uint64{}
		}
		n.promotedAt[d.Promote] = n.now
		st.viewT = t
		n.viewAckDue = true
		n.emit(Event{Kind: EventPromoted, Node: d.Promote, T: t, Reason: fmt.Sprintf("the group had %s", plural(st.voters-1, "voter"))})
	}
	if d.Demote != 0 {
		st.member(d.Demote).observer = true
		_ = st.rebuildSchedule() // one voter fewer: cannot fail
		st.viewT = t
		n.viewAckDue = true
		if d.Demote == n.id && n.claim != nil {
			n.abandonClaim("this node is an observer again")
		}
		n.emit(Event{Kind: EventDemoted, Node: d.Demote, T: t, Reason: fmt.Sprintf("the group had %s", plural(st.voters+1, "voter"))})
	}
	if d.Backup == n.id && st.backup != n.id {
		// This node backs the next server up: the grantees and queue heads
		// waiting on decisions it holds must hear that it holds them.
		n.ackAll = true
	}
	st.backup = d.Backup
	if st.backup != 0 && !st.votes(st.backup) {
		st.backup = 0
	}
	n.backupAt = t + 1
	return true
}

// applyTakeover begins the epoch a takeover won (see epoch.go).
func (n *Node) applyTakeover(d *wire.Takeover, t, next uint64) bool {
	st := n.st
	if !st.votes(d.Server) || (d.Backup != 0 && !st.votes(d.Backup)) {
		n.refused(fmt.Sprintf("a takeover by node %d, which is not in this node's view", d.Server))
		return false
	}
	if srv, _ := st.sched.ServerAt(next); srv != d.Server || next%st.params.TurnLength != 0 {
		n.refused(fmt.Sprintf("a takeover by node %d whose turn does not start at T=%d", d.Server, next))
		return false
	}
	st.markEpoch(d.Epoch, t)
	n.backupAt = t + 1
	if n.xfer.need && n.xfer.sound {
		// The decision this node refused at this T is not in the new
		// epoch's log, which continues this node's sound state from here.
		n.xfer.need, n.xfer.why = false, ""
	}
	st.backup = d.Backup
	st.viewT = t
	// Silences start again from zero: the old epoch's servers may have heard
	// a member after the last SYNC (a turn may end in a takeover instead),
	// and renewed its lease then. Counting from the takeover, the new
	// epoch removes a member only after its lease, renewed at the latest
	// under the old authority, has certainly run out.
	for _, m := range st.members {
		m.silence = 0
	}
	n.promise(d.Epoch, 0)
	clear(n.acks) // positions were of the old epoch
	// Grants this node waits to see take effect are in the new epoch's log
	// (it continues this node's): the new backup must hold them now.
	for _, p := range n.reqs {
		if p.granted != 0 {
			p.grantNeeds = d.Backup
		}
	}
	n.endTenure() // a new tenure begins at Next: this node's own, or none
	n.claim = nil
	n.viewAckDue = true
	// Every grant the new epoch carries over is held by its backup from
	// the start: the grantees waiting on one hear it at once.
	n.ackAll = n.st.backup == n.id
	how := "it knows every grant in effect"
	if d.Wait {
		how = "it waits out the leases of the old epoch before it grants"
	}
	n.emit(Event{Kind: EventEpoch, Node: d.Server, T: t, Epoch: d.Epoch,
		Reason: fmt.Sprintf("epoch %d: node %d took over as server (backup %d); %s", d.Epoch, d.Server, d.Backup, how)})
	return true
}

// dropMembers applies a leave or removals, of the members ids in this
// order (see state.removeMembers).
func (n *Node) dropMembers(ids []wire.NodeID, t uint64, kind EventKind, reason string) {
	for _, id := range ids {
		if m := n.st.member(id); m != nil {
			delete(n.updSeen, m.inc)
		}
		delete(n.acks, id)
		delete(n.turnToLeaver, id)
	}
	var heads []string // queues they headed without holding: the next moves up
	if n.st.backup == n.id {
		for _, name := range n.st.resourceNames() {
			if slices.ContainsFunc(ids, func(id wire.NodeID) bool { return n.st.headIs(name, id, 0) }) {
				heads = append(heads, name)
			}
		}
	}
	hand, _ := n.st.removeMembers(ids, t)
	if slices.Contains(ids, n.id) {
		switch {
		case kind == EventMemberRemoved:
			n.finish(EventRemoved, reason)
		case n.leave != nil:
			n.finish(EventLeft, reason)
		default:
			// Recorded as gone while alive, and without asking: the runtime
			// rejoins as a new incarnation, as after a removal.
			n.finish(EventRemoved, "the group recorded that this node left, which it did not ask to")
		}
		return
	}
	for _, id := range ids {
		n.emit(Event{Kind: kind, Node: id, T: t, Reason: reason})
	}
	for _, h := range hand {
		n.handedOff(h.resource, h.to, true, true)
		n.handedOver(h)
	}
	for _, name := range heads {
		n.ackHead(name)
	}
}

// ownDecided handles the server's decision on one of this node's requests.
func (n *Node) ownDecided(g *wire.Grant, t uint64) {
	p := n.reqs[g.Resource]
	if p == nil || p.req != g.Req {
		if !g.Queued && n.leave == nil {
			n.startRelease(g.Resource, g.Req, t) // a grant nobody wants any more
		}
		return
	}
	n.renew(p.since) // the server heard the request: our lease runs from its first send
	if g.Queued {
		p.queued = true
		n.emit(Event{Kind: EventQueued, Node: n.id, Resource: g.Resource, Req: g.Req, T: t})
		return
	}
	n.granted(g.Resource, g.Req, t, t+1, 0)
}

// handedOver handles a resource passing to a new holder. A hand-over to
// the head of the queue needs the backup to hold only the log up to when
// this node became the head (see confirm.go).
func (n *Node) handedOver(h handover) {
	if h.to != n.id || n.enteredOnRelease(h.resource, h.req) {
		return
	}
	need := h.token + 1
	if p := n.reqs[h.resource]; p != nil && p.req == h.req && p.headAt != 0 {
		need = p.headAt + 1
	}
	n.granted(h.resource, h.req, h.token, need, 0)
}

// granted records a grant to this node in the log. It takes effect (and the
// application hears of it) once the backup shows a log position of at
// least need: see confirm.go. after is the token of the holder whose
// release it is, for a grant taken on the release (enterOnRelease).
func (n *Node) granted(resource string, req, token, need, after uint64) {
	if n.leave != nil {
		return // the Left decision frees it; this node holds nothing more
	}
	p := n.reqs[resource]
	if p == nil || p.req != req {
		n.startRelease(resource, req, token) // cancelled meanwhile
		return
	}
	p.granted, p.grantedAt, p.grantNeeds, p.need, p.after = token, n.now, n.st.backup, need, after
	n.grantsWaiting = true
	n.confirmGrants() // under a lease that lapsed, it is given back at once
}

// noteHeads records, for each request of this node that a holder's queue
// now has at its head, the decision at which it got there.
func (n *Node) noteHeads(t uint64) {
	// Each request is looked at alone, so map order does not matter here.
	for name := range n.reqs {
		n.noteHead(name, t)
	}
}

// noteHead is noteHeads for one resource.
func (n *Node) noteHead(name string, t uint64) {
	p := n.reqs[name]
	if p == nil || p.headAt != 0 || p.granted != 0 {
		return
	}
	if r := n.st.resources[name]; r != nil && r.holder != 0 && len(r.queue) > 0 && r.queue[0].Node == n.id && r.queue[0].Req == p.req {
		p.headAt = t
	}
}

// isRefusal reports whether d refuses a request of this node's: a
// withdrawal of a request it has pending, which it did not cancel (Cancel
// takes the request out of reqs). The server decides one when the lock table
// has no room for the request (serveMsg).
func (n *Node) isRefusal(d *wire.Released) bool {
	if !d.Withdrawn || d.Node != n.id {
		return false
	}
	p := n.reqs[d.Resource]
	return p != nil && p.req == d.Req
}

// ownRefused ends a request of this node's that the server refused, for want
// of room why in the state it decided on, in which the resource was busy
// (held or waited for) or not.
func (n *Node) ownRefused(d *wire.Released, why shortage, busy bool) {
	reason := n.st.explain(why, n.cfg.Limits)
	if why == room {
		// The same state, under the same limits, would have granted it:
		// limits that differ between members, or a bug.
		n.stats.Divergence++
		reason = "the server found no room in the group's lock table, though this node's state under its limits has some"
	}
	delete(n.reqs, d.Resource)
	n.emit(Event{Kind: EventRefused, Node: n.id, Resource: d.Resource, Req: d.Req, T: d.T, Reason: reason, Busy: busy})
}

func (n *Node) ownReleased(d *wire.Released) {
	p := n.rels[d.Req]
	if p == nil {
		return
	}
	delete(n.rels, d.Req)
	if !d.Withdrawn && !p.cancel {
		// p.token is the token the application had, which may be below the
		// decision's (see enterOnRelease).
		n.emit(Event{Kind: EventReleased, Node: n.id, Resource: d.Resource, Req: d.Req, Token: p.token})
	}
}

// keep stores an applied decision in the window for retransmission.
func (n *Node) keep(t uint64, d wire.Decision) {
	n.log.window[t] = d
	n.log.order = append(n.log.order, t)
	if len(n.log.order) > n.cfg.LogWindow {
		delete(n.log.window, n.log.order[0])
		n.log.order = n.log.order[1:]
	}
}

// wantNext returns the Next that the decision at this node's T must carry:
// T+1, except for a decision that changes the view or hands the turn over,
// which moves T to the first turn of the next server in the new view (see
// realign), and a Takeover, whose server chose it (applyTakeover checks it
// starts that server's turn). So T moves only by the steps the schedule
// allows, and no datagram can push it towards the end of its range.
func (n *Node) wantNext(d wire.Decision) (uint64, error) {
	st := n.st
	t, next := d.Stamp()
	without := func(id wire.NodeID) []wire.NodeID {
		return slices.DeleteFunc(st.sched.View(), func(m wire.NodeID) bool { return m == id })
	}
	switch d := d.(type) {
	case *wire.Takeover:
		return next, nil
	case *wire.OkToJoin:
		if d.Observer {
			return n.realign(st.sched.View(), st.server(), t+1) // the voters stay as they were
		}
		return n.realign(append(st.sched.View(), d.ID), st.server(), t+1)
	case *wire.Left:
		if len(st.members) == 1 {
			return t + 1, nil // the last member leaves: the group ends
		}
		return n.realign(without(d.ID), st.server(), t+1)
	case *wire.Sync:
		to := st.backup
		if st.voters == 1 {
			to = st.server()
		}
		return n.realign(st.votersAfter(d), to, t+1)
	}
	return t + 1, nil
}

// refused notes that a decision could not be applied to this node's state,
// which it left as it was. The state is suspect, but sound as far as it
// goes: the log up to this T, which is why such a node may still take part
// in a takeover (see mayClaim); a new epoch that begins at this T replaces
// the decision it refused.
func (n *Node) refused(why string) {
	sound := !n.xfer.need || n.xfer.sound
	n.diverged(why)
	n.xfer.sound = sound
}

// diverged notes that this node's state disagreed with the group's (a SYNC's
// digest). The state transfer that follows replaces it; until then the node
// does not serve.
func (n *Node) diverged(why string) {
	n.stats.Divergence++
	n.xfer.need = true
	n.xfer.sound = false
	n.xfer.why = why
}

// truncated notes that this node's log went past the point where a newer
// epoch began: what it applied from there is not the group's. A state
// transfer from the newer epoch replaces it.
func (n *Node) truncated(why string) {
	n.stats.Truncated++
	n.xfer.need = true
	n.xfer.sound = false
	n.xfer.why = why
}

// tickGap asks for missing decisions once a gap has lasted NakTicks. It
// first forgets buffered decisions the log has passed by (applied from
// another copy, or jumped over), and counts the next decision as there only
// if a member of the view sent it: one a forger planted must not stop the
// NAK that fetches the real one.
func (n *Node) tickGap() {
	l := &n.log
	if len(l.future) > 0 {
		for t := range l.future {
			if t < n.st.t {
				n.unbuffer(t)
			}
		}
	}
	b, have := l.future[n.st.t]
	have = have && n.decidedBy(b.d, b.from)
	if l.seenT <= n.st.t || have || n.srv != nil || n.xfer.need {
		l.gap, l.nakTries = false, 0
		return
	}
	if !l.gap {
		l.gap, l.gapSince = true, n.now
		return
	}
	wait := uint64(n.cfg.NakTicks)
	if n.now-l.gapSince < wait || n.now-l.nakAt < wait {
		return
	}
	// Ask whoever last showed us the larger T, and every other time walk
	// the members in ID order instead (the one we asked may be gone).
	nak := &wire.Nak{From: n.st.t, Count: 64}
	l.nakAt = n.now
	l.nakTries++
	n.stats.NaksSent++
	if l.nakTries%2 == 1 && l.seenAddr != "" {
		n.out = append(n.out, Outbound{Addr: l.seenAddr, Msg: nak})
		return
	}
	next, _ := n.st.sched.After(l.nakTo)
	if next == n.id {
		next, _ = n.st.sched.After(next)
	}
	l.nakTo = next
	if next != n.id {
		n.sendTo(next, nak)
	}
}

// onNak answers a member that misses decisions: with the decisions, if its
// log is a prefix of this node's, else with this node's state. A node that
// asks as a member this node's view does not list is told so instead.
func (n *Node) onNak(src string, h wire.Header, from *member, m *wire.Nak) {
	if n.st == nil || n.xfer.need || h.Epoch > n.promised {
		return // nothing sound to send, or the asker is in a newer epoch
	}
	if from == nil {
		n.notMember(src, h)
		return
	}
	n.retransmit(src, h.LogEpoch, m.From, int(min(m.Count, 64)))
}

// toldKey is an address and the ID a NotMember sent there answered.
type toldKey struct {
	addr string
	id   wire.NodeID
}

// notMember answers a request for decisions or state from a node that is
// no member of this node's view: a node that claims an ID this log has
// assigned (and so has removed, or given another incarnation or address) is
// told it is no member, at most once per RetryTicks; anyone else, a
// newcomer or a forger, gets nothing.
func (n *Node) notMember(src string, h wire.Header) {
	n.stats.NotMember++
	if h.From == 0 || h.From >= n.st.nextID || n.st.epoch != n.promised {
		return
	}
	if m := n.st.member(h.From); m != nil && m.addr == src {
		// The view gives that ID to another incarnation at this very
		// address, which can only have replaced the asker (an ID given on
		// a branch the group did not take is given again): the asker is
		// gone, or forged, and the member there must not hear that it is
		// none.
		return
	}
	if n.xfer.told == nil || len(n.xfer.told) > 256 {
		n.xfer.told = map[toldKey]uint64{}
	}
	// Per address and ID: the answer to an old ID's late request must not
	// hold back the answer to the ID now at that address.
	key := toldKey{src, h.From}
	if at, ok := n.xfer.told[key]; ok && n.now-at < uint64(n.cfg.RetryTicks) {
		return
	}
	n.xfer.told[key] = n.now
	// The answer names the ID it answers: the node at src may have rejoined
	// under a new ID since it asked (a request delayed in the network, or
	// one sent just before it learned its removal), and the new member must
	// not take it for its own removal.
	n.out = append(n.out, Outbound{Addr: src, Msg: &wire.NotMember{}, For: wire.RecipientsOf(h.From)})
}

// onNotMember handles a member's word that its log does not list this node.
// It counts only from a member of this node's view whose log is at least as
// far on as this node's, and of this node's log epoch or a newer one: that
// log then continues this node's own, so the group removed this node (or
// recorded it as gone) in a decision this node missed. (What epoch the
// sender has promised does not matter: this node may have promised one
// whose claim failed, and so refuse everything of the epoch the group went
// on in, which is how it missed its removal.) It rejoins as a new
// incarnation. An answer that names another ID (its header's For) was for
// the ID this node had before it last rejoined, and says nothing of this
// one; an older peer names none, and is believed as before. The answer of
// the unknown server a stranded node asked for the state (pingedByStranger)
// counts too, with a group key.
func (n *Node) onNotMember(src string, h wire.Header, from *member) {
	if a := n.askedStranger; from == nil && n.st != nil && n.cfg.Authenticated && n.askingStranger() && a.id == h.From && a.addr == src &&
		h.For.Includes(n.id) && !after(n.st.epoch, n.st.t, h.LogEpoch, h.T) && n.leave == nil && n.srv == nil {
		// The unknown server this node asked for the state (see
		// pingedByStranger), with a group key the group's, says its view
		// does not list this node: the group removed it.
		n.finish(EventRemoved, fmt.Sprintf("node %d, a server this node did not know, at T=%d, no longer lists this node: the group removed it in decisions this node missed", h.From, h.T))
		return
	}
	if n.st == nil || from == nil || h.LogEpoch < n.st.epoch || after(n.st.epoch, n.st.t, h.LogEpoch, h.T) || !h.For.Includes(n.id) {
		return
	}
	if n.leave != nil {
		n.finish(EventLeft, fmt.Sprintf("node %d no longer lists this node", h.From))
		return
	}
	n.finish(EventRemoved, fmt.Sprintf("node %d, at T=%d, no longer lists this node: the group removed it in a decision this node missed", h.From, h.T))
}

// retransmit sends decisions from T=from on, directly to addr, which lacks
// them and whose log ends in epoch logEpoch; if they have left the window, or
// its log is not a prefix of this node's, a state transfer instead.
func (n *Node) retransmit(addr string, logEpoch, from uint64, count int) {
	if logEpoch > n.st.epoch || (from >= n.publishedT() && logEpoch == n.st.epoch) {
		return // the asker is ahead of this node, or lacks nothing
	}
	if _, ok := n.log.window[from]; !ok || !n.st.onLog(logEpoch, from) {
		n.sendSnapshot(addr)
		return
	}
	t := from
	for i := 0; i < count && t < n.publishedT(); i++ {
		d, ok := n.log.window[t]
		if !ok {
			break
		}
		n.out = append(n.out, Outbound{Addr: addr, Msg: d})
		n.stats.Retransmitted++
		_, t = d.Stamp()
	}
}

// catchUp answers a member that retried something already decided: it
// missed the decision, so send it what it lacks (at most once per NakTicks).
func (n *Node) catchUp(in inbound) {
	if in.h.T >= n.publishedT() && in.h.LogEpoch == n.st.epoch {
		return
	}
	if at, ok := n.log.catchUp[in.h.From]; ok && n.now-at < uint64(n.cfg.NakTicks) {
		return
	}
	n.log.catchUp[in.h.From] = n.now
	n.retransmit(in.src, in.h.LogEpoch, in.h.T, 64)
}

// transfer is the state-transfer machinery: reassembly of incoming chunks,
// and rate limits on outgoing snapshots.
type transfer struct {
	need    bool   // this node's state is suspect: fetch a fresh one
	sound   bool   // but only because it refused a decision: see refused
	why     string // what made it suspect
	askedAt uint64
	asked   wire.NodeID
	// assembling holds the states being reassembled, one per sender
	// address (at most maxAssemblies): chunks pile up across retries, so a
	// large state arrives under loss, and what one sender sends (a forger's
	// chunks of a state that never completes) holds up no other's.
	assembling []*assembly
	sent       map[string]uint64  // destination → tick of last snapshot sent
	told       map[toldKey]uint64 // destination → tick of last NotMember sent
}

// assembly is one state being reassembled: its T, the sender's log epoch
// and the state's digest name it.
type assembly struct {
	from    sender
	t       uint64
	epoch   uint64
	digest  uint64
	parts   [][]byte
	got     int
	started uint64
}

// maxAssemblies bounds the states reassembled at once.
const maxAssemblies = 4

// assemblyFor returns the reassembly a chunk from "by" belongs to, starting
// one if needed: a sender's newer state replaces its older one, and with
// every slot taken the reassembly started first gives way. It returns nil
// for a chunk of an older state than the one its sender is sending.
func (x *transfer) assemblyFor(by sender, c *wire.StateChunk, now uint64) *assembly {
	for i, a := range x.assembling {
		if a.from.addr != by.addr {
			continue
		}
		if a.t == c.T && a.epoch == by.logEpoch && a.digest == c.Digest && len(a.parts) == int(c.Count) {
			return a
		}
		if after(a.epoch, a.t, by.logEpoch, c.T) {
			return nil
		}
		x.assembling = slices.Delete(x.assembling, i, i+1)
		break
	}
	if len(x.assembling) >= maxAssemblies {
		x.assembling = x.assembling[1:] // the earliest started
	}
	a := &assembly{from: by, t: c.T, epoch: by.logEpoch, digest: c.Digest, parts: make([][]byte, c.Count), started: now}
	x.assembling = append(x.assembling, a)
	return a
}

// sendSnapshot sends this node's state directly to addr, in chunks that
// each fit a datagram.
func (n *Node) sendSnapshot(addr string) {
	if addr == "" || n.xfer.need {
		return
	}
	if n.xfer.sent == nil {
		n.xfer.sent = map[string]uint64{}
	}
	if at, ok := n.xfer.sent[addr]; ok && n.now-at < uint64(n.cfg.RetryTicks) {
		return
	}
	n.xfer.sent[addr] = n.now
	if len(n.xfer.sent) > 256 {
		n.xfer.sent = map[string]uint64{addr: n.now}
	}
	if n.srv != nil {
		// The state holds the decisions held back too: send them first, so
		// that no state shows a decision the log never carried.
		n.flush()
	}
	data, err := n.codec.EncodeSnapshot(n.st.snapshot())
	if err != nil {
		return // over the limits: nothing sensible to send
	}
	digest := n.st.digest()
	size := wire.ChunkSize(n.cfg.Limits)
	count := (len(data) + size - 1) / size
	for i := 0; i < count; i++ {
		part := data[i*size : min(len(data), (i+1)*size)]
		n.out = append(n.out, Outbound{Addr: addr, Msg: &wire.StateChunk{T: n.st.t, Index: uint32(i), Count: uint32(count), Data: part, Digest: digest}})
	}
	n.stats.SnapshotsSent++
}

// onStateRequest answers a member's request for this node's state, if the
// state is sound and current as far as the asker knows. Only members get
// it: a newcomer gets it with its admission (see serveJoin), a node this
// view no longer lists is told so (see notMember).
func (n *Node) onStateRequest(src string, h wire.Header, from *member) {
	if n.st == nil || n.xfer.need || h.Epoch > n.promised || n.st.epoch != n.promised {
		return
	}
	if from == nil {
		n.notMember(src, h)
		return
	}
	n.sendSnapshot(src)
}

// tickTransfer asks for a state transfer while this node's state is suspect:
// first from the server it last heard, then around the members.
func (n *Node) tickTransfer() {
	if !n.xfer.need || n.now-n.xfer.askedAt < uint64(n.cfg.RetryTicks) {
		return
	}
	to, _ := n.st.sched.After(n.xfer.asked)
	if n.xfer.asked == 0 && n.pinger != 0 && n.pinger != n.id && n.st.member(n.pinger) != nil {
		to = n.pinger
	}
	if to == n.id {
		to, _ = n.st.sched.After(to)
	}
	if to == n.id {
		n.xfer.need = false // alone: our state is the group's
		return
	}
	n.xfer.asked, n.xfer.askedAt = to, n.now
	n.sendTo(to, &wire.StateRequest{})
}

// wantsState reports whether this node asked for a state transfer: it is
// joining, its state is suspect, it is filling a gap (a NAK may be answered
// with the state) or catching up as the winner of a takeover. State sent
// unasked is ignored: a node's state changes only by its own request.
func (n *Node) wantsState() bool {
	return n.st == nil || n.join != nil || n.xfer.need || n.log.gap || (n.claim != nil && n.claim.won) || n.askingStranger()
}

// onStateChunk reassembles a state transfer and installs it. A node with a
// state takes one only from a member of its view; a newcomer, which knows
// no member yet, only one whose sender the state itself lists as a member.
func (n *Node) onStateChunk(src string, h wire.Header, from *member, c *wire.StateChunk) error {
	if c.Count == 0 || c.Index >= c.Count {
		return fmt.Errorf("arbiter: state chunk %d of %d", c.Index, c.Count)
	}
	asked := n.cfg.Authenticated && n.askingStranger() && n.askedStranger.id == h.From && n.askedStranger.addr == src
	if !n.wantsState() || (n.st != nil && from == nil && !asked) || h.From == 0 {
		n.stats.Unasked++
		return nil
	}
	if h.Epoch < n.promised {
		n.stats.Stale++
		return ErrStale // the sender's state is of an epoch this node has left
	}
	if n.srv != nil {
		return nil
	}
	x := &n.xfer
	a := x.assemblyFor(senderOf(src, h), c, n.now)
	if a == nil || a.parts[c.Index] != nil {
		return nil // an older state than its sender's latest, or a chunk had already
	}
	a.parts[c.Index] = slices.Clone(c.Data)
	a.got++
	if a.got < len(a.parts) {
		return nil
	}
	x.assembling = slices.DeleteFunc(x.assembling, func(b *assembly) bool { return b == a })
	snap, err := n.codec.DecodeSnapshot(bytes.Join(a.parts, nil))
	if err != nil || snap.T != a.t || snap.Epoch != a.epoch || stateFromSnapshot(snap).digest() != a.digest || !listsSender(snap, a.from) {
		n.stats.BadSnapshots++
		return nil
	}
	x.assembling = nil // what else was coming is no newer than what was asked for now
	n.install(snap)
	return nil
}

// listsSender reports whether a state lists the member that sent it, at the
// address and incarnation it sent from: a state nobody in it sent is not
// the group's.
func listsSender(snap *wire.Snapshot, by sender) bool {
	return slices.ContainsFunc(snap.Members, func(m wire.MemberState) bool {
		return m.ID == by.id && m.Inc == by.inc && m.Addr == by.addr
	})
}

// install replaces this node's state with a transferred one, sent by a node
// of an epoch this node has not left (onStateChunk checked), and not behind
// its own log unless that log is suspect.
func (n *Node) install(snap *wire.Snapshot) {
	if n.st != nil && !n.xfer.need && !after(snap.Epoch, snap.T, n.st.epoch, n.st.t) {
		return
	}
	var me *wire.MemberState
	for i := range snap.Members {
		if snap.Members[i].Inc == n.cfg.Inc {
			me = &snap.Members[i]
		}
	}
	if me == nil {
		// Only a state made after this node's ID was given can say the
		// group removed it: an older one (sent to the ID this node had
		// before it last rejoined, and delayed) says nothing of it.
		if n.st != nil && n.id != 0 && snap.NextID > n.id {
			n.finish(EventRemoved, "the group's state no longer lists this node")
		}
		return // a newcomer: this state predates our admission
	}
	n.st = stateFromSnapshot(snap)
	n.id = me.ID
	n.askedStranger = strangerAsk{} // it answered: we are still a member
	if n.st.epoch == 1 || n.st.t%n.st.params.TurnLength != 0 {
		// The state shows its epoch past any wait for older leases: the
		// group's first epoch began with no takeover, and a T off a turn
		// start is past the one a Takeover moved to, so a decision followed
		// it. Else a newcomer that had applied nothing since it joined, and
		// won a takeover with the backup's vote, waited out the leases.
		n.settledIn = n.st.epoch
	}
	n.xfer.need, n.xfer.why = false, ""
	n.stats.Snapshots++
	n.promise(snap.Epoch, 0)
	// The window may hold decisions of a branch the group did not take.
	clear(n.log.window)
	n.log.order = n.log.order[:0]
	for t, b := range n.log.future {
		if t < n.st.t || b.stranger || n.st.member(b.from.id) == nil {
			// Passed, or a stranger's to this state: a newcomer took what
			// came before it had a view, and keeps only its members'.
			delete(n.log.future, t)
		}
	}
	n.log.strangers = 0
	clear(n.acks)
	n.backupAt = n.st.t   // when the backup was named is not known here
	clear(n.turnToLeaver) // its leavers may be gone in what this node skipped
	if n.join != nil {
		n.stat = statusSyncing
		n.renew(n.join.since) // the server admitted us, so it heard our first join request
		n.heardAt = n.now
	}
	n.viewAckDue = true
	n.reconcile()
	n.drain()
	n.checkJoined()
}

// reconcile brings this node's own bookkeeping in line with a transferred
// state: what the group says we hold, we hold; what it does not, we lost.
func (n *Node) reconcile() {
	for _, name := range sortedKeys(n.held) {
		h := n.held[name]
		// By request: a grant taken on the holder's release has a token
		// below the decision's (see enterOnRelease).
		if r := n.st.resources[name]; r == nil || r.holder != n.id || r.holderReq != h.req {
			delete(n.held, name)
			n.emit(Event{Kind: EventLost, Node: n.id, Resource: name, Req: h.req, Token: h.token, Reason: "not held in the transferred state"})
		}
	}
	for _, name := range sortedKeys(n.reqs) {
		p := n.reqs[name]
		if r := n.st.resources[name]; p.granted != 0 && (r == nil || r.holder != n.id || r.holderReq != p.req) {
			p.granted, p.after = 0, 0 // the grant is not in the group's log: ask again
			p.sentAt = 0
		}
		p.headAt = 0 // the transferred state's history is not known here
	}
	for _, name := range n.st.resourceNames() {
		r := n.st.resources[name]
		if r.holder == n.id && n.held[name] == nil {
			if p := n.reqs[name]; p == nil || p.granted != r.token {
				n.granted(name, r.holderReq, r.token, r.token+1, 0)
			}
		}
	}
	// A request the state does not queue is undecided as far as the group
	// knows: it is sent again, not waited on; unless the state has decided
	// it, which, neither held nor queued, it refused (serveMsg) while this
	// node was behind. Asked again, the server would find it decided, and
	// this node would wait for ever.
	me := n.st.member(n.id)
	for _, name := range sortedKeys(n.reqs) {
		p := n.reqs[name]
		r := n.st.resources[name]
		queued := r != nil && slices.ContainsFunc(r.queue, func(w wire.Waiter) bool { return w.Node == n.id && w.Req == p.req })
		if held := r != nil && r.holder == n.id && r.holderReq == p.req; !held && !queued && me != nil && me.isDecided(p.req) {
			delete(n.reqs, name)
			// Which state it was refused in is not known here: Busy says
			// whether the lock is in use in the state installed.
			n.emit(Event{Kind: EventRefused, Node: n.id, Resource: name, Req: p.req, Reason: "refused while this node was behind the group: no room in its lock table", Busy: n.st.wouldQueue(name)})
			continue
		}
		if queued && !p.queued {
			n.emit(Event{Kind: EventQueued, Node: n.id, Resource: name, Req: p.req})
		}
		if p.queued && !queued {
			p.sentAt = 0
		}
		p.queued = queued
	}
}

// maxRoleChanges bounds the role changes settle makes for one input:
// becoming server and ending the turn at once, a SYNC to this node itself
// (a group of one) and again. More would mean a turn that ends as it begins,
// which a correct state never has; the rest waits for the next tick, and the
// Stats count it.
const maxRoleChanges = 8

// settle runs the role changes that follow from the state: becoming server,
// ending a turn, reporting a new server. It loops because one can lead to
// another (a SYNC to oneself starts a new turn).
func (n *Node) settle() {
	for len(n.afterApply) > 0 && n.applying == 0 {
		m := n.afterApply[0]
		n.afterApply = n.afterApply[1:]
		n.submit(m)
	}
	n.checkJoined() // a missing greeting may have been excused by a removal or a demotion
	n.confirmGrants()
	for i := 0; ; i++ {
		if n.st == nil || n.stat == statusDone {
			break
		}
		if i == maxRoleChanges {
			n.stats.SettleCapped++
			break
		}
		srv := n.st.server()
		if srv != n.lastSrv {
			n.lastSrv = srv
			n.emit(Event{Kind: EventServerChanged, Node: srv})
		}
		if srv == n.id && n.srv == nil && n.mayServe() {
			n.becomeServer()
			continue
		}
		if srv != n.id && n.srv != nil {
			n.endTenure()
			continue
		}
		if n.srv != nil && n.maybeEndTurn() {
			continue
		}
		break
	}
	n.sendAcks()
}

// mayServe reports whether this node may take up the turn its state gives
// it: its state is sound and of the epoch it follows, it is not claiming, and
// it did not just step down for want of a majority.
func (n *Node) mayServe() bool {
	return !n.xfer.need && n.st.epoch == n.promised && n.claim == nil && n.now >= n.resumeAt && n.st.member(n.id) != nil
}

// onPing answers a server's ping. The answer promises that this node votes
// for no takeover within Params.TakeoverTicks (see AuthorityTicks), so it is
// given only to a server of an epoch this node has not left, and only by a
// member (which counts toward the server's majority).
func (n *Node) onPing(src string, h wire.Header, from *member, p *wire.Ping) error {
	if n.st == nil || n.st.member(n.id) == nil {
		return nil
	}
	if from == nil {
		n.pingedByStranger(src, h)
		return nil
	}
	if h.Epoch < n.promised {
		// A server of an old epoch: answer, so that it sees the newer epoch
		// in the header and steps down, but promise it nothing.
		n.stats.Stale++
		n.out = append(n.out, Outbound{Addr: src, Msg: &wire.PingReply{Turn: p.Turn, Probe: p.Probe}})
		return ErrStale
	}
	if h.From != n.pinger && after(n.pingEpoch, n.pingT, h.LogEpoch, h.T) {
		// A ping older than the last one answered, from another node: a
		// late copy from before a handover. Its sender is no server now,
		// and this node's answers to the current one promised that one
		// alone its vote.
		n.stats.Stale++
		return ErrStale
	}
	n.promise(h.Epoch, 0)
	n.heardAt, n.pinger, n.pingedAt = n.now, h.From, n.now
	n.stoodDown = false
	if !after(n.pingEpoch, n.pingT, h.LogEpoch, h.T) {
		n.pingEpoch, n.pingT = h.LogEpoch, h.T
	}
	if n.claim != nil {
		// The answer below promises no vote for the takeover timeout, this
		// node's own included: a server is alive, in an epoch this node
		// follows.
		n.abandonClaim(fmt.Sprintf("the server, node %d, is heard", h.From))
	}
	if p.Reachable != 0 {
		n.reachable = int(p.Reachable)
	}
	if n.srv == nil && n.claim == nil && p.Reachable != 0 {
		if n.majority(n.reachable) {
			n.quorumRegained(fmt.Sprintf("the server, node %d, reaches %d of %s", h.From, p.Reachable, plural(n.st.voters, "voter")))
		} else {
			n.quorumLost(fmt.Sprintf("the server, node %d, reaches only %d of %s", h.From, p.Reachable, plural(n.st.voters, "voter")))
		}
	}
	if p.Prev != 0 && p.ViewT == n.st.viewT && h.LogEpoch == n.st.epoch && (p.ByAnswer && slices.Contains(p.Answered, n.id) || !p.ByAnswer && !slices.Contains(p.Unanswered, n.id)) {
		// The server, with a majority's authority, heard our answer to its
		// previous ping before it sent this one: the lease runs from that
		// answer, as from a SYNC's (see applySync). Only if this node's
		// view is the server's: one that removed this node lists it
		// nowhere.
		if at, ok := n.answeredAt(h.From, p.Prev); ok {
			n.renew(at)
		}
	}
	n.noteAnswer(h.From, p.Probe)
	if _, ok := n.replies[p.Turn]; !ok {
		n.replies[p.Turn] = n.now
		if len(n.replies) > 16 {
			delete(n.replies, sortedKeys(n.replies)[0])
		}
	}
	n.out = append(n.out, Outbound{Addr: src, Msg: &wire.PingReply{Turn: p.Turn, Probe: p.Probe}})
	return nil
}

// strangerAsk is a stranded node's request for the state to the servers it
// does not know (see pingedByStranger): the last one asked, when it first
// asked any, and when it asked last.
type strangerAsk struct {
	id        wire.NodeID
	addr      string
	first, at uint64
}

// strangerTries is how many retry intervals a stranded node asks the servers
// it does not know for the state, one ask an interval, before it rejoins as a
// new incarnation.
const strangerTries = 3

// askingStranger reports whether this node asked an unknown server for the
// state and may still take its answer: for a retry interval after it would
// rejoin, so that a late state or a stale ask changes nothing later.
func (n *Node) askingStranger() bool {
	a := n.askedStranger
	return a.id != 0 && n.now-a.first < uint64((strangerTries+1)*n.cfg.RetryTicks)
}

// pingedByStranger handles a ping from a server this node does not know: a
// member admitted by decisions it has not applied. Usually it is only a
// little behind, and repairs its log from the members it knows before long.
// But one that missed the group for long enough (cut off one way: the group
// kept hearing it, so never removed it) may know none of the members that
// carry the group on, and could never learn from them: it takes no state
// or decision from a stranger, which a forger could be. So once no server
// it knows has renewed its lease for a lease, while a server it does not
// know pings it from further on in the log, it asks that server for the
// state, which says whether the group still counts it: a voter cut off while
// a member joined that went on to serve is one, and if it rejoined as a new
// incarnation instead, the group, which can remove the old one only with a
// majority, might have none left (a seeded run had two such voters of five
// rejoin, then the server crash, and the group never decided again). Only if
// no state comes does it conclude that the group went on without it and
// rejoin: it holds nothing any more (its lease ran out), and the group
// removes the old one after its lease. It does either only where datagrams
// are authenticated (Config.Authenticated), so that the unknown server is
// the group's; elsewhere it reports that it is stranded (EventStranded).
func (n *Node) pingedByStranger(src string, h wire.Header) {
	st := n.st
	if h.From < st.nextID || h.Epoch < n.promised || !after(h.LogEpoch, h.T, st.epoch, st.t) ||
		!n.leaseExpired() || n.srv != nil || n.leave != nil {
		return
	}
	if !n.cfg.Authenticated {
		// Without a group key the ping may be forged, and a forger could
		// have every member of a group cut off for a lease rejoin, leaving
		// nobody to admit them. Say what the way out is, once.
		if !n.stranded {
			n.stranded = true
			n.emit(Event{Kind: EventStranded, Node: h.From, Reason: fmt.Sprintf("the server, node %d, is none this node knows, and no server it knows renewed its lease: "+
				"the group may have gone on without it (its log ends at T=%d, epoch %d; the server's at T=%d, epoch %d); "+
				"it goes on once a member it knows answers it (catching its log up, or telling it the group removed it); if that does not come, restart it to rejoin (with a group key it rejoins by itself)", h.From, st.t, st.epoch, h.T, h.LogEpoch)})
		}
		return
	}
	// The servers take turns, and under load one may ping only once a turn:
	// the asks count from the first, whichever server each went to, so that
	// a node the group did remove still rejoins in time.
	a := &n.askedStranger
	if !n.askingStranger() {
		*a = strangerAsk{first: n.now}
	}
	if n.now-a.first < uint64(strangerTries*n.cfg.RetryTicks) {
		if a.id != h.From || a.addr != src || n.now-a.at >= uint64(n.cfg.RetryTicks) {
			a.id, a.addr, a.at = h.From, src, n.now
			n.out = append(n.out, Outbound{Addr: src, Msg: &wire.StateRequest{}})
		}
		return
	}
	n.finish(EventRemoved, fmt.Sprintf("the server, node %d, is none this node knows, and no server it knows renewed its lease: "+
		"the group went on without it (its log ends at T=%d, epoch %d; the server's at T=%d, epoch %d)", h.From, st.t, st.epoch, h.T, h.LogEpoch))
}

// replayWindow drops duplicate and very late application updates from one
// sender: it accepts each sequence number once, within a window of 64.
type replayWindow struct {
	max  uint64
	bits uint64 // bit i set: max-i seen
}

func (w *replayWindow) accept(seq uint64) bool {
	switch {
	case seq > w.max:
		shift := seq - w.max
		if shift >= 64 {
			w.bits = 0
		} else {
			w.bits <<= shift
		}
		w.bits |= 1
		w.max = seq
		return true
	case w.max-seq >= 64:
		return false
	default:
		bit := uint64(1) << (w.max - seq)
		if w.bits&bit != 0 {
			return false
		}
		w.bits |= bit
		return true
	}
}

func (n *Node) onUpdate(h wire.Header, u *wire.Update) {
	if n.st == nil || n.st.member(h.From) == nil {
		return
	}
	w := n.updSeen[h.Inc]
	if w == nil {
		w = &replayWindow{}
		n.updSeen[h.Inc] = w
	}
	if !w.accept(u.Seq) {
		return
	}
	n.emit(Event{Kind: EventUpdate, Node: h.From, Topic: u.Topic, Data: u.Data})
}
