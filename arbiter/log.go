package arbiter

import (
	"bytes"
	"slices"

	"github.com/mcnode/mcnode/wire"
)

// logState is this node's view of the decision log: recent decisions kept to
// answer NAKs, decisions that arrived ahead of a gap, and what it knows of
// how far the log reaches.
type logState struct {
	window    map[uint64]wire.Decision // recent applied decisions, by T
	order     []uint64                 // their Ts in apply order, for eviction
	future    map[uint64]wire.Decision // arrived before their turn
	seenT     uint64                   // highest T seen anywhere
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
	l.future = map[uint64]wire.Decision{}
	l.catchUp = map[wire.NodeID]uint64{}
}

// observe notes the sender's T: a larger one than ours means we miss
// decisions, and the sender has them. It may be a member we do not know yet
// (admitted by a decision we miss), which is why the NAK goes to its address.
func (n *Node) observe(src string, h wire.Header) {
	if n.st == nil || h.From == 0 {
		return
	}
	// Ties go to the latest sender: the first one to show this T may be
	// gone since.
	if h.T >= n.log.seenT && h.T > n.st.t {
		n.log.seenT, n.log.seenAddr = h.T, src
	}
}

func (n *Node) onDecision(src string, h wire.Header, d wire.Decision) {
	t, next := d.Stamp()
	if n.st == nil {
		n.joinSawDecision(d)
		n.buffer(t, d)
		return
	}
	if next >= n.log.seenT && next > n.st.t {
		n.log.seenT, n.log.seenAddr = next, src
	}
	switch {
	case t < n.st.t:
		n.stats.Duplicates++
	case t > n.st.t:
		n.buffer(t, d)
	default:
		n.apply(d, false)
		n.drain()
	}
}

func (n *Node) buffer(t uint64, d wire.Decision) {
	if _, ok := n.log.future[t]; ok {
		n.stats.Duplicates++
		return
	}
	if len(n.log.future) >= n.cfg.MaxBuffered {
		return // the NAK will fetch it again when its turn comes
	}
	n.log.future[t] = d
}

// drain applies buffered decisions that are now next in line.
func (n *Node) drain() {
	for n.st != nil && n.stat != statusDone {
		d, ok := n.log.future[n.st.t]
		if !ok {
			return
		}
		delete(n.log.future, n.st.t)
		n.apply(d, false)
	}
}

// apply applies the decision at the current T. The server applies its own
// decisions through here too (own), so that every node runs the same code.
func (n *Node) apply(d wire.Decision, own bool) {
	st := n.st
	t, next := d.Stamp()
	switch d := d.(type) {
	case *wire.OkToJoin:
		if d.ID != st.nextID || st.memberByInc(d.Inc) != nil {
			n.diverged()
		}
		st.addMember(d.ID, d.Inc, d.Addr)
		n.emit(Event{Kind: EventMemberJoined, Node: d.ID, T: t})
		if n.srv != nil {
			n.srv.heard[d.ID] = true // its join request reached us this turn
		}
		// Paper section 3.2: every member introduces itself to the newcomer.
		n.out = append(n.out, Outbound{To: d.ID, Addr: d.Addr, Msg: &wire.Greeting{Newcomer: d.ID, Addr: n.cfg.Addr}})
	case *wire.GroupFull:
		// Nothing changes but T: the paper increments T for GROUP_FULL too.
	case *wire.Left:
		n.dropMember(d.ID, t, EventMemberLeft, "left the group")
	case *wire.Grant:
		if queued := st.request(d); queued != d.Queued {
			n.diverged()
		}
		if d.Node == n.id {
			n.ownDecided(d, t)
		}
	case *wire.Released:
		matched, h, passed := st.release(d)
		if !matched {
			n.diverged()
		}
		if d.Node == n.id {
			n.ownReleased(d)
		}
		if passed {
			n.handedOver(h)
		}
	case *wire.Sync:
		n.applySync(d, t)
	}
	if n.stat == statusDone {
		return
	}
	st.t = next
	n.keep(t, d)
	if s, ok := d.(*wire.Sync); ok {
		digest := st.digest()
		if own {
			s.Digest = digest
		} else if s.Digest != digest {
			n.diverged()
		}
	}
	if n.hand != nil && st.t > n.hand.nextT {
		n.hand = nil // decisions beyond the hand-over: the next server is at work
	}
}

func (n *Node) applySync(d *wire.Sync, t uint64) {
	st := n.st
	for _, m := range st.members {
		m.silence = 0
	}
	selfUnheard := false
	for _, u := range d.Unheard {
		if m := st.member(u.ID); m != nil {
			m.silence = u.Ticks
		}
		selfUnheard = selfUnheard || u.ID == n.id
	}
	// A reply of ours to this turn's ping reached the server: the lease runs
	// from when we sent the first one (the earliest it can have been heard).
	if at, ok := n.replies[d.Turn]; ok && !selfUnheard {
		n.renew(at)
	}
	for _, id := range d.Remove {
		n.dropMember(id, t, EventMemberRemoved, "removed by the group: not heard for longer than the lease")
		if n.stat == statusDone {
			return
		}
	}
}

// dropMember applies a leave or a removal.
func (n *Node) dropMember(id wire.NodeID, t uint64, kind EventKind, reason string) {
	if m := n.st.member(id); m != nil {
		delete(n.updSeen, m.inc)
	}
	hand, _ := n.st.removeMember(id, t)
	if id == n.id {
		if kind == EventMemberLeft {
			n.finish(EventLeft, reason)
		} else {
			n.finish(EventRemoved, reason)
		}
		return
	}
	n.emit(Event{Kind: kind, Node: id, T: t, Reason: reason})
	for _, h := range hand {
		n.handedOver(h)
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
	n.granted(g.Resource, g.Req, t)
}

// handedOver handles a resource passing to a new holder.
func (n *Node) handedOver(h handover) {
	if h.to == n.id {
		n.granted(h.resource, h.req, h.token)
	}
}

func (n *Node) granted(resource string, req, token uint64) {
	if n.leave != nil {
		return // the Left decision frees it; this node holds nothing more
	}
	p := n.reqs[resource]
	if p == nil || p.req != req {
		n.startRelease(resource, req, token) // cancelled meanwhile
		return
	}
	delete(n.reqs, resource)
	if n.leaseExpired() {
		// The group might already count this node as dead: holding now could
		// overlap with whoever it reclaims the resource for.
		n.stats.Fenced++
		n.emit(Event{Kind: EventLost, Node: n.id, Resource: resource, Req: req, Token: token,
			Reason: "lease expired before the grant arrived"})
		n.startRelease(resource, req, token)
		return
	}
	n.held[resource] = &holding{req: req, token: token}
	n.emit(Event{Kind: EventGranted, Node: n.id, Resource: resource, Req: req, Token: token, T: token})
}

func (n *Node) ownReleased(d *wire.Released) {
	p := n.rels[d.Req]
	if p == nil {
		return
	}
	delete(n.rels, d.Req)
	if !d.Withdrawn && !p.cancel {
		n.emit(Event{Kind: EventReleased, Node: n.id, Resource: d.Resource, Req: d.Req, Token: d.Token})
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

// diverged notes that a decision disagreed with this node's state. The state
// transfer that follows replaces it; until then the node does not serve.
func (n *Node) diverged() {
	n.stats.Divergence++
	n.xfer.need = true
}

// tickGap asks for missing decisions once a gap has lasted NakTicks.
func (n *Node) tickGap() {
	l := &n.log
	_, have := l.future[n.st.t]
	if l.seenT <= n.st.t || have || n.srv != nil {
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

func (n *Node) onNak(src string, m *wire.Nak) {
	if n.st == nil {
		return
	}
	n.retransmit(src, m.From, int(min(m.Count, 64)))
}

// retransmit sends decisions from T=from on, directly to addr, which lacks
// them; if they have left the window, a state transfer instead.
func (n *Node) retransmit(addr string, from uint64, count int) {
	if from >= n.publishedT() {
		return
	}
	if _, ok := n.log.window[from]; !ok {
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
	if in.h.T >= n.publishedT() {
		return
	}
	if at, ok := n.log.catchUp[in.h.From]; ok && n.now-at < uint64(n.cfg.NakTicks) {
		return
	}
	n.log.catchUp[in.h.From] = n.now
	n.retransmit(in.src, in.h.T, 64)
}

// transfer is the state-transfer machinery: reassembly of incoming chunks,
// and rate limits on outgoing snapshots.
type transfer struct {
	need    bool // this node's state is suspect: fetch a fresh one
	askedAt uint64
	asked   wire.NodeID
	t       uint64 // the snapshot being reassembled
	parts   [][]byte
	got     int
	sent    map[string]uint64 // destination → tick of last snapshot sent
}

// sendSnapshot sends this node's state directly to addr, in chunks that
// each fit a datagram.
func (n *Node) sendSnapshot(addr string) {
	if addr == "" {
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
	data, err := n.codec.EncodeSnapshot(n.st.snapshot())
	if err != nil {
		return // over the limits: nothing sensible to send
	}
	size := wire.ChunkSize(n.cfg.Limits)
	count := (len(data) + size - 1) / size
	for i := 0; i < count; i++ {
		part := data[i*size : min(len(data), (i+1)*size)]
		n.out = append(n.out, Outbound{Addr: addr, Msg: &wire.StateChunk{T: n.st.t, Index: uint32(i), Count: uint32(count), Data: part}})
	}
	n.stats.SnapshotsSent++
}

func (n *Node) onStateRequest(src string) {
	if n.st == nil || n.xfer.need {
		return
	}
	n.sendSnapshot(src)
}

// tickTransfer asks for a state transfer while this node's state is suspect.
func (n *Node) tickTransfer() {
	if !n.xfer.need || n.now-n.xfer.askedAt < uint64(n.cfg.RetryTicks) {
		return
	}
	to, _ := n.st.sched.After(n.xfer.asked)
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

func (n *Node) onStateChunk(c *wire.StateChunk) {
	if n.st != nil && !n.xfer.need && c.T <= n.st.t {
		return // nothing newer than what we hold
	}
	if n.srv != nil {
		return
	}
	x := &n.xfer
	// Chunks of equal T from different senders are interchangeable: equal
	// states encode to equal bytes.
	if x.parts == nil || c.T != x.t || int(c.Count) != len(x.parts) {
		if x.parts != nil && c.T < x.t {
			return
		}
		x.t, x.parts, x.got = c.T, make([][]byte, c.Count), 0
	}
	if x.parts[c.Index] != nil {
		return
	}
	x.parts[c.Index] = slices.Clone(c.Data)
	x.got++
	if x.got < len(x.parts) {
		return
	}
	data := bytes.Join(x.parts, nil)
	x.parts, x.got = nil, 0
	snap, err := n.codec.DecodeSnapshot(data)
	if err != nil {
		n.stats.BadSnapshots++
		return
	}
	n.install(snap)
}

// install replaces this node's state with a transferred one.
func (n *Node) install(snap *wire.Snapshot) {
	if n.st != nil && snap.T < n.st.t {
		return
	}
	var me *wire.MemberState
	for i := range snap.Members {
		if snap.Members[i].Inc == n.cfg.Inc {
			me = &snap.Members[i]
		}
	}
	if me == nil {
		if n.st != nil && n.id != 0 {
			n.finish(EventRemoved, "the group's state no longer lists this node")
		}
		return // a newcomer: this state predates our admission
	}
	n.st = stateFromSnapshot(snap)
	n.id = me.ID
	n.xfer.need = false
	n.stats.Snapshots++
	for t := range n.log.future {
		if t < n.st.t {
			delete(n.log.future, t)
		}
	}
	if n.join != nil {
		n.stat = statusSyncing
		n.renew(n.join.since) // the server admitted us, so it heard our first join request
	}
	n.reconcile()
	n.drain()
	n.checkJoined()
}

// reconcile brings this node's own bookkeeping in line with a transferred
// state: what the group says we hold, we hold; what it does not, we lost.
func (n *Node) reconcile() {
	for _, name := range sortedKeys(n.held) {
		h := n.held[name]
		if r := n.st.resources[name]; r == nil || r.holder != n.id || r.token != h.token {
			delete(n.held, name)
			n.emit(Event{Kind: EventLost, Node: n.id, Resource: name, Req: h.req, Token: h.token, Reason: "not held in the transferred state"})
		}
	}
	for _, name := range n.st.resourceNames() {
		r := n.st.resources[name]
		if r.holder == n.id && n.held[name] == nil {
			n.granted(name, r.holderReq, r.token)
		}
		if p := n.reqs[name]; p != nil {
			queued := slices.ContainsFunc(r.queue, func(w wire.Waiter) bool { return w.Node == n.id && w.Req == p.req })
			if queued && !p.queued {
				n.emit(Event{Kind: EventQueued, Node: n.id, Resource: name, Req: p.req})
			}
			p.queued = queued
		}
	}
}

// settle runs the role changes that follow from the state: becoming server,
// ending a turn, reporting a new server. It loops because one can lead to
// another (a SYNC to oneself starts a new turn).
func (n *Node) settle() {
	n.checkJoined() // a missing greeting may have been excused by a removal
	for i := 0; i < 8; i++ {
		if n.st == nil || n.stat == statusDone {
			return
		}
		srv := n.st.server()
		if srv != n.lastSrv {
			n.lastSrv = srv
			n.emit(Event{Kind: EventServerChanged, Node: srv})
		}
		switch {
		case srv == n.id && n.srv == nil && !n.xfer.need:
			n.becomeServer()
		case srv != n.id && n.srv != nil:
			n.srv = nil
		case n.srv != nil && n.maybeEndTurn():
		default:
			return
		}
	}
}

func (n *Node) onPing(src string, p *wire.Ping) {
	if n.st == nil || n.st.member(n.id) == nil || n.xfer.need {
		return
	}
	if _, ok := n.replies[p.Turn]; !ok {
		n.replies[p.Turn] = n.now
		if len(n.replies) > 16 {
			delete(n.replies, sortedKeys(n.replies)[0])
		}
	}
	n.out = append(n.out, Outbound{Addr: src, Msg: &wire.PingReply{Turn: p.Turn, Probe: p.Probe}})
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
