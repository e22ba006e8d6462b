package arbiter

import (
	"slices"

	"github.com/mcnode/mcnode/clock"
	"github.com/mcnode/mcnode/wire"
)

// tenure is one turn of this node as server.
type tenure struct {
	turn      uint64 // T at which the turn began: names it in Ping and SYNC
	start     uint64 // tick at which it began
	decisions int
	heard     map[wire.NodeID]bool // members heard from during the turn: not silent
	// answered are the members that replied to this turn's ping: they have
	// the state and can be handed the turn.
	answered map[wire.NodeID]bool
	pingedAt uint64
	// confirming is the successor being asked, directly, whether it is still
	// alive before the SYNC goes to it; confirmAt is when that began, and
	// confirmed says it answered.
	confirming wire.NodeID
	confirmAt  uint64
	confirmed  bool
	probe      uint64          // number of the last confirmation ping
	lazy       []wire.Decision // applied, not yet sent: nobody waits on them
	lazyAt     uint64
	lastCast   uint64
	leaving    bool // this node leaves once the turn is handed over
}

// handoff is a SYNC sent to the next server and not yet seen acted on. It is
// sent again, directly, until the next server shows it has it: a lost SYNC
// would otherwise leave the group without a server until some other packet
// happens to carry the new T to it (paper section 4.2).
type handoff struct {
	to    wire.NodeID
	nextT uint64
	sync  *wire.Sync
	at    uint64
	tries int
}

// becomeServer starts this node's turn: ping every member (paper figure A),
// then serve what was asked of the previous server and not yet decided.
func (n *Node) becomeServer() {
	n.srv = &tenure{turn: n.st.t, start: n.now, heard: map[wire.NodeID]bool{n.id: true}, answered: map[wire.NodeID]bool{n.id: true}, pingedAt: n.now, lastCast: n.now}
	n.log.published = n.st.t
	n.renew(n.now)
	if len(n.st.members) > 1 {
		n.multicast(&wire.Ping{Turn: n.srv.turn})
	}
	recent := n.recent
	n.recent = nil
	for _, in := range recent {
		if n.now-in.at > uint64(n.cfg.RetryTicks) || n.srv == nil {
			continue
		}
		if n.st.member(in.h.From) != nil {
			n.srv.heard[in.h.From] = true
		}
		n.serveReplayed(in)
	}
	n.resubmit()
}

// remember keeps a request seen while not server, in case this node is the
// next server and the request was not decided in time.
func (n *Node) remember(in inbound) {
	if len(n.recent) >= 128 {
		n.recent = n.recent[1:]
	}
	n.recent = append(n.recent, in)
}

// mustEndTurn reports whether the turn is over: its last timestamp is next
// (which only a SYNC may take), or it has made its share of decisions, or it
// has lasted TurnTicks, or the server is leaving.
func (n *Node) mustEndTurn() bool {
	s := n.srv
	return n.st.sched.IsLastSlot(n.st.t) ||
		s.decisions >= int(n.st.params.TurnLength)-1 ||
		n.now-s.start >= uint64(n.cfg.TurnTicks) ||
		s.leaving
}

// canDecide reports whether the server may make a decision now.
func (n *Node) canDecide() bool { return n.srv != nil && !n.mustEndTurn() }

// maybeEndTurn ends the turn once it must end and every member has answered
// the ping, or the ping has had PingTimeoutTicks to be answered.
func (n *Node) maybeEndTurn() bool {
	if !n.mustEndTurn() {
		return false
	}
	if n.now-n.srv.start < uint64(n.cfg.PingTimeoutTicks) {
		for _, m := range n.st.members {
			if !n.srv.answered[m.id] {
				return false
			}
		}
	}
	if !n.successorConfirmed() {
		return false
	}
	n.endTurn()
	return true
}

// successorConfirmed makes sure the member the turn will go to is alive now,
// not merely when it answered the ping at the start of the turn: a SYNC sent
// to a dead member leaves the group without a server. The successor is pinged
// directly and must answer; one that does not answer within PingRetryTicks is
// skipped for the next.
func (n *Node) successorConfirmed() bool {
	s := n.srv
	for {
		next := n.chooseNext(nil)
		switch {
		case next == n.id:
			return true
		case s.confirming != next:
			s.probe++
			s.confirming, s.confirmAt, s.confirmed = next, n.now, false
			n.sendTo(next, &wire.Ping{Turn: s.turn, Probe: s.probe})
			return false
		case s.confirmed:
			return true
		case n.now-s.confirmAt < uint64(n.cfg.PingRetryTicks):
			return false
		}
		delete(s.answered, next) // silent since it answered: skip it
		s.confirming = 0
	}
}

// endTurn makes the SYNC decision (paper figure B and section 3.3): list the
// members not heard this turn, remove those silent for longer than the lease
// (reclaiming what they hold), choose the next server among those that
// answered, and hand over.
func (n *Node) endTurn() {
	st, s := n.st, n.srv
	tenureTicks := n.now - s.start
	lease := st.params.LeaseTicks + st.params.LeaseMarginTicks
	maxList := (n.cfg.Limits.MaxDatagram - wire.HeaderLen - 64) / 20
	sync := &wire.Sync{T: st.t, Turn: s.turn}
	var unheard []wire.Silence
	for _, m := range st.members {
		if !s.heard[m.id] {
			unheard = append(unheard, wire.Silence{ID: m.id, Ticks: m.silence + tenureTicks})
		}
	}
	// A SYNC lists as many as fit a datagram, longest silent first: those not
	// listed count as heard (safe: it only delays their removal), and the
	// ones listed are removed first, so the rest come up in later turns.
	slices.SortStableFunc(unheard, func(a, b wire.Silence) int {
		switch {
		case a.Ticks > b.Ticks:
			return -1
		case a.Ticks < b.Ticks:
			return 1
		}
		return 0
	})
	sync.Unheard = unheard[:min(len(unheard), maxList)]
	removed := map[wire.NodeID]bool{}
	for _, u := range sync.Unheard {
		if u.Ticks >= lease {
			// Its own lease ran out LeaseMarginTicks ago at the latest: it
			// has stopped using what it held, so reclaiming cannot overlap.
			sync.Remove = append(sync.Remove, u.ID)
			removed[u.ID] = true
		}
	}
	slices.SortFunc(sync.Remove, cmpID)
	next := n.chooseNext(removed)
	view := slices.DeleteFunc(st.sched.View(), func(id wire.NodeID) bool { return removed[id] })
	sync.Next = n.realign(view, next)
	n.apply(sync, true)
	s.lazy = append(s.lazy, sync)
	n.flush()
	n.srv = nil
	n.renew(n.now)
	n.news = n.now // as if the next server had spoken: give it time to take over
	if next != n.id {
		n.hand = &handoff{to: next, nextT: sync.Next, sync: sync, at: n.now}
	}
}

// chooseNext picks the next server: the first member after this one in ID
// order that answered this turn; failing that (a leaving server must hand
// over) any member not being removed; failing that, this node again.
func (n *Node) chooseNext(removed map[wire.NodeID]bool) wire.NodeID {
	ids := n.st.sched.Members()
	start, _ := slices.BinarySearch(ids, n.id)
	var fallback wire.NodeID
	for i := 1; i < len(ids); i++ {
		id := ids[(start+i)%len(ids)]
		if removed[id] {
			continue
		}
		if n.srv.answered[id] {
			return id
		}
		if fallback == 0 {
			fallback = id
		}
	}
	if n.srv.leaving && fallback != 0 {
		return fallback
	}
	return n.id
}

// realign returns the first timestamp after the current one that starts a
// turn of member "to" in the given view: the Next of a decision that changes
// the view or hands the turn over. Because every decision that changes the
// view carries such a Next, the server role never moves implicitly.
func (n *Node) realign(view []wire.NodeID, to wire.NodeID) uint64 {
	sched, err := clock.NewSchedule(view, n.st.params.TurnLength)
	if err != nil {
		panic("arbiter: invariant broken: " + err.Error())
	}
	next, ok := sched.NextTurn(to, n.st.t+1)
	if !ok {
		panic("arbiter: group timestamp exhausted")
	}
	return next
}

// decide applies one of the server's own decisions and queues it for
// sending. A decision somebody waits on (urgent) goes out at once with any
// held back before it; others wait up to LazyTicks to share a datagram.
func (n *Node) decide(d wire.Decision, urgent bool) {
	n.apply(d, true)
	s := n.srv
	if n.stat == statusDone || s == nil {
		return // the last member left: nobody to tell
	}
	s.decisions++
	if len(s.lazy) == 0 {
		s.lazyAt = n.now
	}
	s.lazy = append(s.lazy, d)
	if urgent {
		n.flush()
	}
}

// flush sends every decision held back, in T order.
func (n *Node) flush() {
	s := n.srv
	for _, d := range s.lazy {
		n.out = append(n.out, Outbound{Msg: d})
	}
	if len(s.lazy) > 0 {
		s.lastCast = n.now
	}
	s.lazy = nil
	n.log.published = n.st.t
}

// serve is the server's handling of requests (paper figure C).
func (n *Node) serve(in inbound) { n.serveMsg(in, n.catchUp) }

// serveReplayed serves a request overheard before this turn. If it has been
// decided meanwhile, its sender is not behind: nothing needs resending.
func (n *Node) serveReplayed(in inbound) { n.serveMsg(in, func(inbound) {}) }

// serveMsg serves one request; behind is called when the request turns out
// to be a retry of something already decided.
func (n *Node) serveMsg(in inbound, behind func(inbound)) {
	st, h, m := n.st, in.h, in.m
	if j, ok := m.(*wire.JoinRequest); ok {
		n.serveJoin(in, j)
		return
	}
	from := st.member(h.From)
	if from == nil {
		n.stats.NotMember++
		return
	}
	switch m := m.(type) {
	case *wire.Request:
		switch {
		case from.isDecided(m.Req):
			if m.Retry {
				behind(in)
			}
		case st.resources[m.Resource] == nil && len(st.resources) >= n.cfg.Limits.MaxResources:
			n.stats.TooMany++ // no room for another resource; the requester retries
		case n.canDecide():
			queued := st.wouldQueue(m.Resource)
			n.decide(&wire.Grant{T: st.t, Next: st.t + 1, Node: h.From, Req: m.Req, Resource: m.Resource, Floor: m.Floor, Queued: queued}, !queued)
		}
	case *wire.Release:
		r := st.resources[m.Resource]
		switch {
		case r == nil || r.holder != h.From || r.token != m.Token:
			if m.Retry {
				behind(in)
			}
		case n.canDecide():
			n.decide(&wire.Released{T: st.t, Next: st.t + 1, Node: h.From, Req: m.Req, Resource: m.Resource, Token: m.Token}, len(r.queue) > 0)
		}
	case *wire.Cancel:
		r := st.resources[m.Resource]
		holds := r != nil && r.holder == h.From && r.holderReq == m.Req
		waits := r != nil && slices.ContainsFunc(r.queue, func(w wire.Waiter) bool { return w.Node == h.From && w.Req == m.Req })
		switch {
		case !holds && !waits && from.isDecided(m.Req):
			if m.Retry {
				behind(in)
			}
		case !n.canDecide():
		case holds: // the grant crossed the cancel: release it
			n.decide(&wire.Released{T: st.t, Next: st.t + 1, Node: h.From, Req: m.Req, Resource: m.Resource, Token: r.token}, len(r.queue) > 0)
		default: // queued, or not yet seen: withdraw (and remember it is decided)
			n.decide(&wire.Released{T: st.t, Next: st.t + 1, Node: h.From, Req: m.Req, Resource: m.Resource, Withdrawn: true}, false)
		}
	case *wire.LeaveRequest:
		switch {
		case h.From == n.id && len(st.members) > 1:
			n.srv.leaving = true // hand the turn over first, then leave as a member
		case !n.canDecide():
		case h.From == n.id:
			// The last member leaves: the group ends.
			n.decide(&wire.Left{T: st.t, Next: st.t + 1, ID: n.id}, true)
		default:
			view := slices.DeleteFunc(st.sched.View(), func(id wire.NodeID) bool { return id == h.From })
			n.decide(&wire.Left{T: st.t, Next: n.realign(view, n.id), ID: h.From}, true)
		}
	}
}

// serveJoin decides OK_TO_JOIN or GROUP_FULL (paper figure C), and sends the
// newcomer the state.
func (n *Node) serveJoin(in inbound, m *wire.JoinRequest) {
	st := n.st
	if st.memberByInc(m.Inc) != nil {
		return // admitted already; onJoinRequest sends what it lacks
	}
	for _, t := range n.log.order {
		if f, ok := n.log.window[t].(*wire.GroupFull); ok && f.Inc == m.Inc && t < n.publishedT() {
			n.reply(in, f) // refused already: say so again
			return
		}
	}
	if !n.canDecide() {
		return
	}
	if len(st.members) >= int(st.params.MaxMembers) {
		n.decide(&wire.GroupFull{T: st.t, Next: st.t + 1, Inc: m.Inc, Max: st.params.MaxMembers}, true)
		return
	}
	id := st.nextID
	view := append(st.sched.View(), id)
	n.decide(&wire.OkToJoin{T: st.t, Next: n.realign(view, n.id), Inc: m.Inc, ID: id, Addr: m.Addr, Members: uint32(len(view))}, true)
	n.sendSnapshot(in.src)
}

// tickServer runs the server's timers: held-back decisions, ping retries,
// heartbeats.
func (n *Node) tickServer() {
	s := n.srv
	n.renew(n.now) // nobody can remove the server during its own turn
	if len(s.lazy) > 0 && n.now-s.lazyAt >= uint64(n.cfg.LazyTicks) {
		n.flush()
	}
	if n.now-s.pingedAt >= uint64(n.cfg.PingRetryTicks) {
		s.pingedAt = n.now
		for _, m := range n.st.members {
			if !s.answered[m.id] {
				n.sendTo(m.id, &wire.Ping{Turn: s.turn})
			}
		}
	}
	if n.now-s.lastCast >= uint64(n.cfg.HeartbeatTicks) {
		n.multicast(&wire.Heartbeat{Turn: s.turn})
	}
}

// tickHandoff sends the last SYNC again to the next server until it shows it
// has taken over.
func (n *Node) tickHandoff() {
	h := n.hand
	if h == nil {
		return
	}
	if n.st.member(h.to) == nil || h.tries > 2*n.cfg.TurnTicks/n.cfg.RetryTicks+4 {
		n.hand = nil
		return
	}
	if n.now-h.at >= uint64(n.cfg.RetryTicks) {
		h.at = n.now
		h.tries++
		n.sendTo(h.to, h.sync)
	}
}
