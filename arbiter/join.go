package arbiter

import (
	"slices"

	"github.com/mcnode/mcnode/wire"
)

// joining is a newcomer's progress through the join of paper section 3.2:
// admitted by the server (OK_TO_JOIN), given the state, greeted by every
// member.
type joining struct {
	since    uint64 // tick of the first join request
	sentAt   uint64
	waitFrom uint64 // FoundAfterTicks counts from here
	sawGroup bool   // an established group is on the address: never found one
	// sawUnreadable: so is one whose datagrams this node cannot read
	// (HeardUnreadable); it founds none while they keep coming.
	sawUnreadable bool
	// sawLower: a newcomer of a lower incarnation asks to join too, and
	// founds the group if nobody answers; this node then waits longer
	// (lowerWait), to be admitted by it, not to found a second group.
	//
	// Only newcomers that may found should count: one that may not (it
	// was a member, or only looks) would hold a founder off for as long
	// as it asks. So a runtime draws the incarnations of newcomers that
	// may found below those of newcomers that may not (FounderInc), and a
	// newcomer that may not found never answers (onJoinRequest).
	sawLower bool
	// answered, answeredAt: when this node last sent its request again
	// for a newcomer of a higher incarnation (see onJoinRequest).
	answered   bool
	answeredAt uint64
	// lowerSince: when each lower newcomer was first heard. One that
	// still asks long after it would have founded (it heard a group, or
	// was admitted and is stuck) holds this node off no more (heardLower).
	lowerSince map[uint64]uint64
	// caughtUp: the last step was a catch-up (TickBy of more than one
	// tick); held: founding was put off once for it, so that what waited
	// in the socket is read first.
	caughtUp, held bool
	// greeted holds who greeted this node, by member ID: the incarnation
	// and address it greeted from, which must be the member's.
	greeted map[wire.NodeID]greeter
}

type greeter struct {
	inc  uint64
	addr string
}

func (n *Node) startJoin() {
	n.join = &joining{greeted: map[wire.NodeID]greeter{}}
	n.sendJoinRequest()
}

// found starts a new group with this node as its first member. Its
// incarnation names this run of the group (the header's Instance).
func (n *Node) found() {
	n.st = newState(n.cfg.Inc, n.cfg.Params)
	n.st.t = max(1, n.cfg.FirstT) // T 0 is never a decision, so no fencing token is ever 0
	// The founder votes, whatever it asked: a group must have a voter.
	n.st.addMember(1, n.cfg.Inc, n.cfg.Addr, false, false)
	n.st.markEpoch(1, n.st.t)
	n.promised = 1
	n.heardAt = n.now
	n.id = 1
	n.stat = statusMember
	n.join = nil
	n.anchor = n.now
	n.emit(Event{Kind: EventFounded, Node: n.id})
	n.emit(Event{Kind: EventJoined, Node: n.id})
}

func (n *Node) sendJoinRequest() {
	j := n.join
	j.sentAt = n.now
	req := &wire.JoinRequest{Inc: n.cfg.Inc, Addr: n.cfg.Addr, HaveState: n.st != nil, Observer: n.cfg.Observer}
	if n.st != nil {
		req.Missing = n.missingGreetings()
		if len(req.Missing) > n.cfg.Limits.MaxMembers {
			req.Missing = req.Missing[:n.cfg.Limits.MaxMembers]
		}
	}
	n.out = append(n.out, Outbound{Msg: req})
}

func (n *Node) tickJoin() {
	j := n.join
	wait := uint64(n.cfg.FoundAfterTicks)
	if j.sawLower {
		wait += n.lowerWait()
	}
	if j.sawUnreadable {
		// A running group this node cannot read may be silent for a
		// takeover (no server pings meanwhile): wait that out too.
		wait = max(wait, n.groupSilence())
	}
	if n.st == nil && n.cfg.FoundAfterTicks > 0 && !j.sawGroup && n.now-j.waitFrom >= wait {
		if j.caughtUp && !j.held {
			// Resumed after a pause with the wait run out: read what
			// the group may have said meanwhile before founding.
			j.held = true
			return
		}
		n.found()
		return
	}
	if n.now-j.sentAt >= uint64(n.cfg.JoinRetryTicks) {
		n.sendJoinRequest()
	}
}

// HeardUnreadable tells a joining node of a datagram of its group that it
// cannot read (sealed with a key it does not hold, sealed while it holds
// none, or in clear while it holds one), from h's sender as its clear
// header says. From an established run (h.Instance set), the group is
// there: the node does not found one while such datagrams keep coming
// (a running group pings every heartbeat), since a second group would
// grant the same locks. From another newcomer, it counts as that one's
// join request (onJoinRequest): of two newcomers with different keys, one
// founds. Each only delays founding, by one wait: one forged datagram
// cannot keep a node from founding for good.
func (n *Node) HeardUnreadable(h wire.Header) {
	j := n.join
	if j == nil || n.st != nil {
		return
	}
	switch {
	case h.Instance != 0:
		j.waitFrom, j.sawUnreadable = n.now, true
	case h.Inc < n.cfg.Inc:
		n.heardLower(h.Inc)
	}
}

// heardLower notes a join request of a newcomer of a lower incarnation,
// inc: this node waits longer, to be admitted by it, unless that one has
// asked for longer than it could take to found (it never will: it heard a
// group, or was admitted and its group is gone), or too many others were
// heard to keep track of (a flood).
func (n *Node) heardLower(inc uint64) {
	j := n.join
	if j.lowerSince == nil {
		j.lowerSince = map[uint64]uint64{}
	}
	first, ok := j.lowerSince[inc]
	if !ok {
		if len(j.lowerSince) >= maxLowerNewcomers {
			return
		}
		j.lowerSince[inc], first = n.now, n.now
	}
	founder := 2*uint64(n.cfg.FoundAfterTicks) + n.lowerWait() + uint64(n.cfg.JoinRetryTicks)
	if n.now-first > founder {
		return
	}
	j.waitFrom, j.sawLower = n.now, true
}

// maxLowerNewcomers bounds the lower newcomers a joining node keeps track
// of.
const maxLowerNewcomers = 64

// groupSilence is how long a running group may be silent while it changes
// servers: the takeover timeout and a lease, in ticks.
func (n *Node) groupSilence() uint64 {
	return uint64(n.cfg.Params.TakeoverTicks) + uint64(n.cfg.Params.LeaseTicks)
}

// FounderInc makes inc the incarnation of a newcomer that may found a
// group (mayFound) or of one that may not: the top bit clear or set, so
// that every newcomer that may found ranks below every one that may not,
// and none of those holds a founder off (joining.sawLower).
func FounderInc(inc uint64, mayFound bool) uint64 {
	if mayFound {
		return inc &^ (1 << 63)
	}
	return inc | 1<<63
}

// lowerWait is how much longer than FoundAfterTicks a newcomer waits, from
// the last request of a newcomer of a lower incarnation, before it founds
// the group itself. That newcomer founds at most FoundAfterTicks after its
// last request and then admits this node at its next request, within
// JoinRetryTicks: with two retry intervals this node's wait ends
// FoundAfterTicks after that at the soonest. Only the death of the lower
// one before it founds makes this node wait them out.
func (n *Node) lowerWait() uint64 { return 2 * uint64(n.cfg.JoinRetryTicks) }

// greetedByAll reports whether every voter admitted before us has greeted
// us. It is asked at every greeting, so it counts before it lists: in a large
// group joining at once, listing each time would cost O(N) allocations per
// greeting.
func (n *Node) greetedByAll() bool {
	earlier := 0
	for _, m := range n.st.members {
		if m.id >= n.id {
			break // members are sorted by ID
		}
		earlier += btoi(!m.observer)
	}
	if len(n.join.greeted) < earlier {
		return false
	}
	return len(n.missingGreetings()) == 0
}

// missingGreetings lists the voters, admitted before us, that have not
// greeted us yet. Members admitted after us are greeted by us instead.
// Observers greet nobody (applyDecision): they decide nothing, so whether
// one knows of us changes nothing we may do, and a newcomer would otherwise
// wait for each dead one until the group removed it (a script host's lock
// commands killed together).
func (n *Node) missingGreetings() []wire.NodeID {
	var out []wire.NodeID
	for _, m := range n.st.members {
		if g, ok := n.join.greeted[m.id]; m.id < n.id && !m.observer && (!ok || g.inc != m.inc || g.addr != m.addr) {
			out = append(out, m.id)
		}
	}
	return out
}

// joinSawDecision lets a newcomer without state pick its own admission or
// refusal out of the decisions it overhears.
func (n *Node) joinSawDecision(d wire.Decision) {
	switch d := d.(type) {
	case *wire.OkToJoin:
		if d.Inc == n.cfg.Inc {
			n.id = d.ID
		}
	case *wire.GroupFull:
		if d.Inc == n.cfg.Inc {
			n.finish(EventGroupFull, "the group is full")
		}
	}
}

func (n *Node) onJoinRequest(in inbound, m *wire.JoinRequest) {
	if n.st == nil {
		// Two newcomers waiting to found a group: the lower incarnation
		// founds it, the higher waits to be admitted.
		j := n.join
		switch {
		case j == nil:
		case m.Inc < n.cfg.Inc:
			n.heardLower(m.Inc)
		case m.Inc > n.cfg.Inc && n.cfg.FoundAfterTicks > 0 && (!j.answered || n.now-j.answeredAt >= uint64(max(1, n.cfg.JoinRetryTicks/4))):
			// The higher one may have started after this node's last
			// request (the first of several hosts started at once, all
			// free to found): it must hear of this node before its own
			// wait runs out, or each founds a group and both grant the
			// same locks. (At most four times a retry interval, however
			// many newcomers ask.)
			j.answered, j.answeredAt = true, n.now
			n.sendJoinRequest()
		}
		return
	}
	if mem := n.st.memberByInc(m.Inc); mem != nil {
		if mem.addr != in.src {
			n.stats.Forged++ // a member's incarnation from another address
			return
		}
		if slices.Contains(m.Missing, n.id) {
			n.reply(in, &wire.Greeting{Newcomer: mem.id, Addr: n.cfg.Addr})
		}
		// The server sent the state with the OkToJoin; if that was lost and
		// the server is gone, any member sends it: the newcomer's vote may
		// be what a takeover needs.
		if !m.HaveState && (n.srv != nil || n.now-n.heardAt >= n.st.params.TakeoverTicks) {
			n.sendSnapshot(in.src)
		}
		return
	}
	if n.srv != nil {
		n.serve(in)
	} else {
		n.remember(in)
	}
}

// onGreeting records a member's greeting. A newcomer without the state
// cannot tell a member yet: the greeting counts once the state shows that
// its sender is the member it claims to be (see missingGreetings).
func (n *Node) onGreeting(src string, h wire.Header, from *member, g *wire.Greeting) {
	if n.join == nil || h.From == 0 || (n.id != 0 && g.Newcomer != n.id) || (n.st != nil && from == nil) {
		return
	}
	if len(n.join.greeted) >= n.cfg.Limits.MaxMembers && n.st == nil {
		return // a flood of greetings before the state: the members greet again
	}
	n.join.greeted[h.From] = greeter{inc: h.Inc, addr: src}
	n.checkJoined()
}

// checkJoined makes the newcomer a member once it has the state and every
// earlier member has greeted it.
func (n *Node) checkJoined() {
	if n.join == nil || n.st == nil || n.stat != statusSyncing || !n.greetedByAll() {
		return
	}
	n.join = nil
	n.stat = statusMember
	n.emit(Event{Kind: EventJoined, Node: n.id})
}
