package arbiter

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/mcnode/mcnode/clock"
	"github.com/mcnode/mcnode/wire"
)

// tenure is one turn of this node as server.
type tenure struct {
	turn      uint64 // T at which the turn began: names it in Ping and SYNC
	start     uint64 // tick at which it began
	decisions int
	// lapsed: at the last tick a member's silence had lapsed and the SYNC
	// would remove it (lapsedRemovable; silences grow only with ticks).
	lapsed bool
	// heard are the members heard from during the turn (any datagram, or
	// admitted in it), with the tick they were last heard: not silent, so
	// not to be removed. replied are those that answered a ping of the
	// turn: the SYNC renews a member's lease from its first answer, which
	// it knows it sent during the turn. The two differ: a request a member
	// sent before a pause may arrive in the turn while the pings wait
	// unread in its socket, and the answers it sends once it resumes may
	// come after the SYNC.
	heard   map[wire.NodeID]uint64
	replied map[wire.NodeID]bool
	// answered are the members that replied to this turn's pings with a log
	// of the server's epoch: they have the state and can back a server up.
	answered map[wire.NodeID]bool
	// Pings (paper figure A, repeated every HeartbeatTicks): the answers of
	// a majority to one of them give the server its authority until the
	// ping's send tick plus AuthorityTicks. Pings are numbered across the
	// node's tenures (Node.probeSeq): an answer that waited out a pause in
	// the socket must never pass for an answer to a newer ping.
	probe     uint64 // number of the last ping sent
	probes    map[uint64]*probe
	pingAt    uint64 // tick of the last multicast ping
	retryAt   uint64 // tick of the last direct ping to members that did not answer
	authUntil uint64 // the server decides only before this tick
	// counted is where silences are counted from: the start of the turn,
	// or the last time the server regained a majority after losing it. A
	// server that was paused, or cut off, blames nobody for its own
	// silence.
	counted uint64
	// confirming is the backup being asked, directly, whether it is still
	// alive before the SYNC goes to it; confirmAt is when that began, and
	// confirmed says it answered a ping sent since.
	confirming wire.NodeID
	confirmAt  uint64
	confirmed  bool
	// promoteFirst: a voter's leave waits for an observer's promotion (see
	// wantsPromotion). promoting is the observer confirmed alive for the
	// SYNC to promote; unpromotable those found dead.
	promoteFirst bool
	promoting    wire.NodeID
	unpromotable map[wire.NodeID]bool
	// lazy are decisions applied, not yet sent, because nobody waits on
	// them: they ride in the next datagram to all. lazyDue is when they go
	// out alone at the latest (0: only at the next ping, for what may wait
	// that long; see parks).
	lazy       []wire.Decision
	lazyDue    uint64
	lastCast   uint64
	leaving    bool      // this node leaves once the turn is handed over
	deferred   []inbound // join requests waiting for the last view change to be known to a majority
	hadAuth    bool      // authority was held at some point of the turn
	lostAt     uint64    // when authority last lapsed
	majorityAt uint64    // send tick of the last ping a majority answered
	lastAll    uint64    // the last ping to all members
	// replay is what the members overheard before this turn, served once
	// the server may decide (replayed says it was).
	replay   []inbound
	replayed bool
	// early are releases from members queued for a resource, not yet its
	// holder: they took it on the holder's release (enterOnRelease) and
	// let it go before this server decided that release. Each is served
	// as soon as a decision makes its sender the holder (serveEarly).
	early []inbound
	// backupLeave is the backup's request to leave, if it asked: the turn
	// ends and goes to it, which hands it on and then leaves as a member
	// (see serveMsg). Should the turn end otherwise (the leaver does not
	// answer, and this node takes over from itself), the request goes back
	// with those overheard, for the next tenure to decide.
	backupLeave *inbound
}

// probe is one ping and the members that answered it.
type probe struct {
	sentAt   uint64
	from     map[wire.NodeID]bool
	majority bool
	all      bool // multicast to every member, not a direct ping of one
}

// maxProbes bounds the pings a tenure remembers: an answer to an older one
// arrives after several newer pings and would give no longer authority.
const maxProbes = 16

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
// then serve what was asked of the previous server and not yet decided, once
// a majority has answered.
func (n *Node) becomeServer() {
	n.srv = &tenure{turn: n.st.t, start: n.now, counted: n.now, heard: map[wire.NodeID]uint64{n.id: n.now}, replied: map[wire.NodeID]bool{n.id: true},
		answered: map[wire.NodeID]bool{n.id: true}, probes: map[uint64]*probe{}, lastCast: n.now, retryAt: n.now}
	n.log.published = n.st.t
	if n.pendingAuth > n.now {
		// A takeover's votes are promises like ping answers.
		n.srv.authUntil, n.srv.hadAuth = n.pendingAuth, true
	}
	n.pendingAuth = 0
	n.stoodDown = false // a silence ends when a server serves
	// A member that asked to leave may get the turn (it was the backup, or
	// the SYNC crossed its request): it hands the turn on first.
	n.srv.leaving = n.leave != nil
	n.srv.replay, n.recent = n.recent, nil
	n.pingAll()
	n.replayRecent()
}

// replayRecent serves, once this server may decide (a majority has answered
// its first ping, or its takeover's votes stand for that), what was asked of
// the previous server and not decided, and this node's own pending
// operations: without it, a request that reached the old server as it
// handed over would wait for its sender's retry.
func (n *Node) replayRecent() {
	s := n.srv
	if s == nil || s.replayed || !n.canDecide() {
		return
	}
	s.replayed = true
	replay := s.replay
	s.replay = nil
	for _, in := range replay {
		// A request to leave is never taken back: served however old (its
		// sender may be dead, and would otherwise hold what it held until
		// it is removed).
		// And only from the member that sent it: an ID given in a branch
		// of the log that a takeover cut off is given again, to another.
		_, leave := in.m.(*wire.LeaveRequest)
		old := n.now-in.at > uint64(n.cfg.RetryTicks)
		from := n.st.member(in.h.From)
		if n.srv == nil || (old && !leave) || (leave && from == nil) ||
			(from != nil && !from.sent(in.h, in.src)) {
			continue
		}
		if _, ok := n.srv.heard[in.h.From]; !ok && !old && n.st.member(in.h.From) != nil {
			n.srv.heard[in.h.From] = in.at // heard before the turn began
		}
		n.serveReplayed(in)
		n.serveEarly()
	}
	if n.srv != nil {
		n.resubmit()
	}
}

// pingAll multicasts a new ping. In a group of one the server is its own
// majority.
func (n *Node) pingAll() {
	s := n.srv
	ping := &wire.Ping{Turn: s.turn, Reachable: uint32(n.reach())} // 0, not known yet, on the tenure's first ping
	if prev := s.probes[s.lastAll]; prev != nil && n.hasAuthority() {
		// Renew the leases of the members that answered the last ping to
		// all: their answers came before this ping, sent while no other
		// server can have taken over (see doc.go, "Leases"). The ping
		// lists the members that did not answer, or, where those do not
		// fit (many died at once), the ones that did; if neither list
		// fits it renews nobody: a member left off would renew wrongly.
		var unanswered, answered []wire.NodeID
		for _, m := range n.st.members {
			if !prev.from[m.id] {
				unanswered = append(unanswered, m.id)
			} else {
				answered = append(answered, m.id)
			}
		}
		switch {
		case len(unanswered) <= n.maxListed():
			ping.Prev, ping.ViewT, ping.Unanswered = s.lastAll, n.st.viewT, unanswered
		case len(answered) <= n.maxListed():
			ping.Prev, ping.ViewT, ping.Answered, ping.ByAnswer = s.lastAll, n.st.viewT, answered, true
		}
	}
	p := n.newProbe()
	p.all = true
	ping.Probe, s.lastAll = s.probe, s.probe
	s.pingAt = n.now
	// The decisions held back ride in the ping's datagram: it goes to all
	// anyway. A group of one pings too: a newcomer learns that a group
	// runs, and a separately founded run of the group is found out.
	n.multicast(ping)
	n.countProbe(p)
}

// maxListed is how many member IDs a ping or a SYNC may list and still fit
// a datagram with everything else it carries.
func (n *Node) maxListed() int { return (n.cfg.Limits.MaxDatagram - wire.HeaderLen - 96) / 30 }

// reach is how many members, this node included, answered the best of the
// pings multicast to all within the takeover timeout that have had a
// heartbeat interval to be answered (as authority rests on any one ping a
// majority answered in that time); 0 before there is one. A direct ping of
// one member, or a ping just sent, says nothing of how many members this
// server reaches, and one multicast lost on the way is no lost quorum.
func (n *Node) reach() int {
	s := n.srv
	k := 0
	for _, p := range s.probes {
		if age := n.now - p.sentAt; p.all && age >= uint64(n.cfg.HeartbeatTicks) && age < n.st.params.TakeoverTicks {
			k = max(k, n.votersIn(p.from))
		}
	}
	return k
}

// onPingReply counts a member's answer to one of this server's pings.
func (n *Node) onPingReply(h wire.Header, from *member, m *wire.PingReply) {
	if from == nil {
		return
	}
	if h.Epoch > n.promised {
		// The member follows a newer epoch: this node's is over.
		n.promise(h.Epoch, 0)
		return
	}
	s := n.srv
	if s == nil || m.Turn != s.turn {
		return
	}
	s.replied[h.From] = true // Step noted it as heard
	if h.LogEpoch == n.st.epoch {
		s.answered[h.From] = true
	}
	p := s.probes[m.Probe]
	if p == nil {
		return
	}
	p.from[h.From] = true
	if h.From == s.confirming && p.sentAt >= s.confirmAt {
		s.confirmed = true
	}
	n.countProbe(p)
}

// countProbe gives the server its authority once a majority of the view has
// answered a ping (this node included): nobody that answered votes for a
// takeover within TakeoverTicks of getting the ping.
func (n *Node) countProbe(p *probe) {
	s := n.srv
	if p.majority {
		return
	}
	k := n.votersIn(p.from)
	if !n.majority(k) {
		return
	}
	p.majority = true
	s.majorityAt = max(s.majorityAt, p.sentAt)
	until := p.sentAt + AuthorityTicks(n.st.params)
	if until <= s.authUntil {
		return
	}
	if s.authUntil <= n.now && s.hadAuth {
		// A lapse: the time without a majority was not the members' fault.
		s.counted = n.now
		n.quorumRegained(fmt.Sprintf("%d of %s answer", k, plural(n.st.voters, "voter")))
	}
	s.authUntil, s.hadAuth = until, true
	// The server's own lease runs from the ping a majority answered: what
	// it holds it may keep no longer than any member would.
	n.renew(p.sentAt)
	n.replayRecent()
}

// hasAuthority reports whether this node is a server that a majority of the
// view answered within the authority.
func (n *Node) hasAuthority() bool { return n.srv != nil && n.now < n.srv.authUntil }

// frozen reports whether this node won a takeover it could not prove safe
// and still waits out the old epoch's leases.
func (n *Node) frozen() bool { return n.now < n.frozenUntil }

// remember keeps a request seen while not server, in case this node is the
// next server and the request was not decided in time. The bound only drops
// requests older than a retry interval at a burst: their senders retry.
func (n *Node) remember(in inbound) {
	if len(n.recent) >= maxRecent {
		n.recent = n.recent[1:]
	}
	n.recent = append(n.recent, in)
}

const maxRecent = 128

// endTenure stops this node serving. Requests and join requests it held
// back for when it could decide go back to those it overheard: if it serves
// again soon (a takeover by this node), they are served then, not left to
// their senders' retry.
func (n *Node) endTenure() {
	s := n.srv
	if s == nil {
		return
	}
	n.srv = nil
	held := append(append(s.deferred, s.replay...), s.early...)
	if s.backupLeave != nil {
		held = append(held, *s.backupLeave)
	}
	if len(held) > 0 {
		n.recent = append(held, n.recent...)
		if len(n.recent) > maxRecent {
			n.recent = n.recent[len(n.recent)-maxRecent:]
		}
	}
}

// turnAge is how long the turn has run, not counting a freeze.
func (n *Node) turnAge() uint64 {
	from := max(n.srv.start, n.frozenUntil)
	if n.now < from {
		return 0
	}
	return n.now - from
}

// mustEndTurn reports whether the turn is over: its last timestamp is next
// (which only a SYNC or a Takeover may take), or it has made its share of
// decisions, or it has lasted TurnTicks, or the server is leaving, or its
// backup is. A server that waits out a takeover's leases keeps its turn
// meanwhile: the next server could not know it must wait.
func (n *Node) mustEndTurn() bool {
	return n.turnEnds() || (n.srv.backupLeave != nil && !n.frozen())
}

// turnEnds is mustEndTurn but for the backup's leave.
func (n *Node) turnEnds() bool {
	s := n.srv
	if n.frozen() {
		return false
	}
	return n.st.sched.IsLastSlot(n.st.t) ||
		s.decisions >= int(n.st.params.TurnLength)-1 ||
		n.turnAge() >= uint64(n.cfg.TurnTicks) ||
		s.leaving
}

// lapsedRemovable reports whether a member not heard this turn has been
// silent for longer than the lease, and the SYNC would remove it now (see
// endTurn): the turn ends as soon as maybeEndTurn allows (from the tick
// that finds it, tickServer) rather than after TurnTicks, since what the
// member holds is reclaimed only by that SYNC (a kill -9 of a holder cost
// a lease and its margin, 180 ticks, plus 80 more
// on average: up to a turn in the count of the silence, up to another
// waiting for the SYNC). The SYNC's rule is unchanged; only its time is. It
// does not stop the server deciding meanwhile (canDecide): with several
// members dead, one voter removed per SYNC, the turns would decide nothing
// until all are gone. The backup and this node are never removed so, and a
// voter only once the view is committed: in those cases the turn goes on,
// lest it end again and again for nothing. Nor does a server that waits
// out a takeover's leases end its turn so (see mustEndTurn).
func (n *Node) lapsedRemovable() bool {
	if n.frozen() {
		return false
	}
	st, s := n.st, n.srv
	lease := st.params.LeaseTicks + st.params.LeaseMarginTicks
	counted := n.now - s.counted
	var committed, knowCommitted bool
	for _, m := range st.members {
		if m.id == n.id || m.id == st.backup || s.heardFrom(m.id) || m.silence+counted < lease {
			continue
		}
		if m.observer {
			return true
		}
		if !knowCommitted {
			committed, knowCommitted = n.viewCommitted(), true
		}
		if committed {
			return true
		}
	}
	return false
}

// canDecide reports whether the server may make a decision now: it holds a
// majority's authority, waits out no takeover, has a backup to make its
// grants take effect (unless alone), and its turn goes on.
func (n *Node) canDecide() bool {
	return n.mayDecide() && !n.mustEndTurn()
}

// decidesLeaveDuringHandover reports whether this server, waiting only to
// hand the turn to its leaving backup, decides another member's leave
// meanwhile: when the server and the backup of a group of three leave at
// once, the turn would otherwise pass through both leavers, and come back
// to the member that stays with a leaver for its backup again.
func (n *Node) decidesLeaveDuringHandover(from wire.NodeID) bool {
	return n.srv.backupLeave != nil && from != n.st.backup && n.mayDecide() && !n.turnEnds()
}

// mayDecide is canDecide but for the end of the turn.
func (n *Node) mayDecide() bool {
	return n.srv != nil && n.hasAuthority() && !n.frozen() && n.claim == nil &&
		(n.st.backup != 0 || n.st.voters == 1)
}

// maybeEndTurn ends the turn once it must end and every member has answered
// the ping, or the ping has had PingTimeoutTicks to be answered.
func (n *Node) maybeEndTurn() bool {
	if !(n.mustEndTurn() || n.srv.lapsed) || !n.hasAuthority() || n.claim != nil {
		return false
	}
	// A turn that ends for a leave decides nothing more, and waits for no
	// member that may be dead (not yet removed): it ends as soon as it may,
	// a leaving server once it can name its successor a backup other than
	// itself.
	if s := n.srv; n.now-s.start < uint64(n.cfg.PingTimeoutTicks) {
		switch {
		case s.backupLeave != nil:
		case s.leaving:
			if n.st.voters > 2 && n.pickBackup(func(id wire.NodeID) bool { return id != n.id && s.answered[id] }, n.st.backup, n.st.backup) == 0 {
				return false
			}
		default:
			for _, m := range n.st.members {
				if !s.answered[m.id] {
					return false
				}
			}
		}
	}
	if n.srv.promoting == 0 && n.wantsPromotion() && n.viewCommitted() {
		// A server promotes only an observer it has just heard, not one
		// that answered earlier in the turn: a lone voter's two voters
		// must both live, and so must three of the four a leave waits
		// with (seed 7918: a voter leaving, the observer promoted for it
		// dead for thirty ticks, and two of four voters left). Then the
		// backup is asked the same (the two share the confirming slot,
		// one after the other).
		if c := n.toPromote(); c != 0 {
			switch n.memberAlive(c) {
			case backupWaiting:
				return false
			case backupAnswers:
				n.srv.promoting = c
			case backupGone:
				if n.srv.unpromotable == nil {
					n.srv.unpromotable = map[wire.NodeID]bool{}
				}
				n.srv.unpromotable[c] = true
			}
		}
	}
	if n.st.voters > 1 {
		switch n.backupAlive() {
		case backupWaiting:
			return false
		case backupGone:
			if in := n.srv.backupLeave; in != nil && n.mayDecide() && !n.turnEnds() && n.viewCommitted() {
				// The leaving backup does not answer: its leave is decided
				// at once, as any other member's (what it held goes to the
				// heads of the queues), and the server, left without a
				// backup, takes over from itself.
				n.srv.backupLeave = nil
				n.decideLeave(in.h.From)
			}
			n.startSelfClaim(fmt.Sprintf("the backup, node %d, does not answer", n.st.backup))
			return false
		}
	}
	n.endTurn()
	return true
}

type backupState uint8

const (
	backupWaiting backupState = iota
	backupAnswers
	backupGone
)

// backupAlive makes sure the backup, to which the turn goes, is alive now,
// not merely when it answered a ping earlier in the turn: a SYNC sent to a
// dead member leaves the group without a server until a takeover. It is
// pinged directly, again every PingRetryTicks, and is gone if it has not
// answered within PingTimeoutTicks.
func (n *Node) backupAlive() backupState { return n.memberAlive(n.st.backup) }

// memberAlive asks member b whether it is alive now, as backupAlive asks
// the backup; the lone voter, which has no backup, asks so of the observer
// it would promote.
func (n *Node) memberAlive(b wire.NodeID) backupState {
	s := n.srv
	switch {
	case b == 0 || n.st.member(b) == nil:
		return backupGone
	case s.confirming != b:
		s.confirming, s.confirmAt, s.confirmed = b, n.now, false
		n.probeMember(b)
		return backupWaiting
	case s.confirmed:
		return backupAnswers
	case n.now-s.confirmAt >= uint64(n.cfg.PingTimeoutTicks):
		s.confirming = 0
		return backupGone
	}
	return backupWaiting
}

// probeMember pings one member directly with a new ping of its own.
func (n *Node) probeMember(id wire.NodeID) {
	n.newProbe()
	n.sendTo(id, &wire.Ping{Turn: n.srv.turn, Probe: n.srv.probe})
}

// newProbe numbers and records a new ping of this tenure.
func (n *Node) newProbe() *probe {
	s := n.srv
	n.probeSeq++
	s.probe = n.probeSeq
	p := &probe{sentAt: n.now, from: map[wire.NodeID]bool{n.id: true}}
	s.probes[s.probe] = p
	delete(s.probes, s.probe-maxProbes)
	return p
}

// endTurn makes the SYNC decision (paper figure B and section 3.3): list the
// members not heard this turn, remove the one silent longest if it has been
// silent for longer than the lease (reclaiming what it holds), and hand over
// to the backup, naming the member that backs it up in turn.
func (n *Node) endTurn() {
	st, s := n.st, n.srv
	counted := n.now - s.counted
	lease := st.params.LeaseTicks + st.params.LeaseMarginTicks
	maxList := n.maxListed()
	sync := &wire.Sync{T: st.t, Epoch: st.epoch, Turn: s.turn}
	var unheard, quiet []wire.Silence
	var unanswered, renew []wire.NodeID
	for _, m := range st.members {
		switch {
		case !s.heardFrom(m.id):
			unheard = append(unheard, wire.Silence{ID: m.id, Ticks: m.silence + counted})
		case !s.replied[m.id]:
			unanswered = append(unanswered, m.id)
		default:
			renew = append(renew, m.id)
		}
		if q := n.quietFor(m.id); q > 0 {
			quiet = append(quiet, wire.Silence{ID: m.id, Ticks: q})
		}
	}
	// A SYNC lists as many as fit a datagram, longest silent first: those not
	// listed start their silence again (safe: it only delays their removal),
	// and the ones listed are removed first, so the rest come up in later
	// turns. Such a SYNC is Partial: a member left off may have been paused
	// all turn, and its answer to this turn's ping, sent as it resumed, is
	// no proof that it was heard in time. It renews the leases of the
	// members it lists in Renew, the ones heard that answered, if they fit
	// in half the room (many members die at once, few live: a script host
	// and its lock commands), or else of nobody.
	budget := maxList
	if len(unheard)+len(unanswered) > maxList {
		sync.Partial = true
		if len(renew) <= maxList/2 {
			sync.Renew = renew
			budget -= len(renew)
		}
	} else {
		sync.Unanswered = unanswered
	}
	slices.SortStableFunc(unheard, longestSilentFirst)
	sync.Unheard = unheard[:min(len(unheard), budget)]
	// Quiet members not listed start their silence at zero: safe, as above.
	slices.SortStableFunc(quiet, longestSilentFirst)
	room := maxList - len(sync.Unheard) - len(sync.Unanswered) - len(sync.Renew)
	sync.Quiet = quiet[:min(len(quiet), max(room, 0))]
	next := st.backup
	if st.voters == 1 {
		next = n.id
	}
	// Remove the members silent for longer than the lease: of the voters,
	// the one silent longest, and only once the last change of the view is
	// known to a majority (see wire.Sync); every observer, since an
	// observer changes no majority. Their own leases ran out
	// LeaseMarginTicks ago at the latest: they have stopped using what they
	// held, so reclaiming cannot overlap.
	committed := n.viewCommitted()
	for _, u := range sync.Unheard {
		if u.Ticks < lease {
			break // sorted longest silent first: nobody after it lapsed either
		}
		switch {
		case u.ID == next || u.ID == n.id:
		case !st.votes(u.ID):
			sync.RemoveObservers = append(sync.RemoveObservers, u.ID)
		case sync.Remove == 0 && committed:
			sync.Remove = u.ID
		}
	}
	// A holder and the head of its queue go in different SYNCs (see
	// state.headsRemovedWithHolders): the head in a later one.
	if removed := sync.Removed(); len(removed) > 1 {
		going := st.removable(removed)
		if !slices.Contains(going, sync.Remove) {
			sync.Remove = 0
		}
		sync.RemoveObservers = slices.DeleteFunc(sync.RemoveObservers, func(id wire.NodeID) bool { return !slices.Contains(going, id) })
	}
	if sync.Remove == 0 && n.wantsPromotion() && committed && !slices.Contains(sync.RemoveObservers, s.promoting) {
		sync.Promote = s.promoting // confirmed alive (maybeEndTurn), or none
	}
	if sync.Remove == 0 && sync.Promote == 0 && n.mayDemote() {
		sync.Demote = n.toDemote(next)
	}
	nextT, err := n.realign(st.votersAfter(sync), next, st.t+1)
	if err != nil {
		n.stats.Divergence++
		return
	}
	sync.Next = nextT
	if st.voters > 1 || sync.Promote != 0 {
		ok := func(id wire.NodeID) bool { return s.answered[id] && id != sync.Remove && id != sync.Demote }
		if s.leaving {
			// Not this node, unless no other answered: the next server
			// would hand the turn straight back to a leaving backup.
			sync.Backup = n.pickBackup(func(id wire.NodeID) bool { return id != n.id && ok(id) }, next, next)
		}
		// Else the member it promotes, rather than this leaving node; and
		// for a lone voter, which has no other.
		if sync.Backup == 0 && s.leaving {
			sync.Backup = sync.Promote
		}
		if sync.Backup == 0 {
			sync.Backup = n.pickBackup(ok, next, next)
		}
		if sync.Backup == 0 {
			sync.Backup = sync.Promote
		}
	}
	if !n.apply(sync, true) {
		return
	}
	s.lazy = append(s.lazy, sync)
	n.flush()
	n.endTenure()
	// Give the next server the takeover timeout to show it took over
	// before this node asks to, and take a late ping of an older server
	// for none of the next server's. This node promised the next server
	// nothing (it answered none of its pings yet), so it still votes: for
	// the backup, should the next server die at once.
	n.waitFrom, n.pinger = n.now, next
	n.pingEpoch, n.pingT = n.st.epoch, sync.Next
	if next != n.id {
		n.hand = &handoff{to: next, nextT: sync.Next, sync: sync, at: n.now}
	}
	if s.leaving && n.leave != nil && next != n.id {
		// Ask the next server now, not a retry interval later: it serves
		// the request once the SYNC made it server, or replays it.
		n.leave.sentAt = n.now
		n.submit(&wire.LeaveRequest{})
	}
}

// wantsPromotion reports whether this server's SYNC should promote an
// observer: while the group has fewer than MinVoters voters, or MinVoters
// with one of them leaving (this server, or a member whose leave waits for
// the promotion), so that the voters never drop below MinVoters by a leave
// while there are observers to promote.
func (n *Node) wantsPromotion() bool {
	st, s := n.st, n.srv
	return st.observers() > 0 && (st.voters < MinVoters || st.voters == MinVoters && (s.leaving || s.promoteFirst))
}

// mayDemote reports whether this server's SYNC may make a transient voter
// an observer again: the group has more voters than MinVoters, every one
// of them answered a ping to all sent within two heartbeats (a
// live voter taken from the count where dead ones are not yet removed
// could turn a bare majority into none: seeds 354 and 22329 of the
// observers' property test, the second with voters that answered earlier
// in the turn and had died), the last change is known to a majority, and
// no voter's leave is under way (a demotion then would only call for
// another promotion).
func (n *Node) mayDemote() bool {
	st, s := n.st, n.srv
	if st.voters <= MinVoters || s.leaving || s.promoteFirst || s.backupLeave != nil || !n.viewCommitted() {
		return false
	}
	fresh := false
	for _, p := range s.probes {
		fresh = fresh || p.all && n.now-p.sentAt <= 2*uint64(n.cfg.HeartbeatTicks) && n.votersIn(p.from) == st.voters
	}
	if !fresh {
		return false
	}
	for _, in := range s.replay {
		if _, ok := in.m.(*wire.LeaveRequest); ok && st.votes(in.h.From) {
			return false
		}
	}
	return true
}

// toDemote picks the transient voter a SYNC makes an observer: the newest
// (highest ID) but this server and the next, and but one promoted within a
// lease; 0 if there is none.
func (n *Node) toDemote(next wire.NodeID) wire.NodeID {
	for id, at := range n.promotedAt {
		if n.now-at >= n.st.params.LeaseTicks || !n.st.votes(id) {
			delete(n.promotedAt, id) // the map keeps recent promotions only
		}
	}
	for i := len(n.st.members) - 1; i >= 0; i-- {
		m := n.st.members[i]
		if _, recent := n.promotedAt[m.id]; !m.observer && m.transient && m.id != n.id && m.id != next && !recent {
			return m.id
		}
	}
	return 0
}

// toPromote picks the observer a SYNC makes a voter: the longest in the
// group (lowest ID) of those that answered this turn's pings in this epoch,
// so that it holds the log and is alive, on a host no voter runs on if
// there is one (a host that goes down takes its voters with it, and a
// script host's daemon, leaving as it shuts down, with the lock commands
// promoted for it); 0 if none answered.
func (n *Node) toPromote() wire.NodeID {
	voterHosts := map[string]bool{}
	for _, m := range n.st.members {
		if !m.observer {
			voterHosts[hostOf(m.addr)] = true
		}
	}
	var any wire.NodeID
	for _, m := range n.st.members {
		if m.observer && n.srv.answered[m.id] && !n.srv.unpromotable[m.id] {
			if !voterHosts[hostOf(m.addr)] {
				return m.id
			}
			if any == 0 {
				any = m.id
			}
		}
	}
	return any
}

// hostOf is the host part of a member's address (host:port), or the whole
// address if it has no port.
func hostOf(addr string) string {
	if i := strings.LastIndexByte(addr, ':'); i >= 0 {
		return addr[:i]
	}
	return addr
}

// realign returns the first timestamp at or after "from" that starts a turn
// of member "to" in the given view: the Next of a decision that changes the
// view or hands the turn over. Because every decision that changes the view
// carries such a Next, the server role never moves implicitly.
func (n *Node) realign(view []wire.NodeID, to wire.NodeID, from uint64) (uint64, error) {
	sched, err := clock.NewSchedule(view, n.st.params.TurnLength)
	if err != nil {
		return 0, err
	}
	next, ok := sched.NextTurn(to, from)
	if !ok {
		return 0, fmt.Errorf("arbiter: no turn of node %d after T=%d: the group timestamp is exhausted", to, from)
	}
	return next, nil
}

// viewCommitted reports whether a majority of the view has applied the last
// change of the view or epoch: only then may the server change it again, so
// that the views a takeover may find differ by one member at most, and their
// majorities intersect (the single-server changes of Ongaro's Raft thesis,
// 2014, section 4.1, with its rule that a new leader first commits an entry
// of its own term: here the Takeover itself).
func (n *Node) viewCommitted() bool {
	k := 0
	for _, m := range n.st.members {
		if !m.observer && (m.id == n.id && n.st.t > n.st.viewT || n.acks[m.id] > n.st.viewT) {
			k++
		}
	}
	return n.majority(k)
}

// decide applies one of the server's own decisions and queues it for
// sending. A decision somebody waits on (urgent) goes out at once with any
// held back before it; others wait to share a datagram: up to LazyTicks, or
// until the next ping for a release that hands the resource to nobody (see
// parks).
func (n *Node) decide(d wire.Decision, urgent bool) {
	if !n.apply(d, true) {
		return
	}
	s := n.srv
	if n.stat == statusDone || s == nil {
		return // the last member left: nobody to tell
	}
	s.decisions++
	if !urgent && !parks(d) && s.lazyDue == 0 {
		s.lazyDue = n.now + uint64(n.cfg.LazyTicks)
	}
	s.lazy = append(s.lazy, d)
	if urgent {
		n.flush()
	}
}

// parks reports whether a decision may wait for the server's next ping to
// all (at most HeartbeatTicks), rather than LazyTicks: a release that hands
// the resource to nobody. Only its releaser waits for it, to stop retrying,
// and a releaser waits a heartbeat longer (see retry). So at light load a
// release costs no datagram of its own: it rides on the next grant, or on
// the ping that is sent anyway.
func parks(d wire.Decision) bool {
	r, ok := d.(*wire.Released)
	return ok && !r.Withdrawn
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
	s.lazy, s.lazyDue = nil, 0
	n.log.published = n.st.t
}

// serve is the server's handling of requests (paper figure C).
//
// A server that may not decide yet (its first ping not yet answered by a
// majority, a takeover's wait, no backup) keeps the request for when it may:
// dropped, it would wait for its sender's retry. A server whose turn is over
// drops it: the next server overheard it too.
func (n *Node) serve(in inbound) {
	if s := n.srv; s != nil && !n.canDecide() && !n.mustEndTurn() {
		n.keepForReplay(in)
		return
	}
	n.serveMsg(in, n.catchUp)
	n.serveEarly()
}

// keepForReplay holds a request back until the server may decide it. A
// leave is held once, however often its sender asks.
func (n *Node) keepForReplay(in inbound) {
	s := n.srv
	if _, ok := in.m.(*wire.LeaveRequest); ok && slices.ContainsFunc(s.replay, func(r inbound) bool {
		_, leave := r.m.(*wire.LeaveRequest)
		return leave && r.h.From == in.h.From && r.h.Inc == in.h.Inc
	}) {
		return
	}
	if len(s.replay) >= maxRecent {
		s.replay = s.replay[1:] // the oldest: decided already, or soon retried
	}
	s.replay = append(s.replay, in)
	s.replayed = false
}

// serveEarly serves the early releases (see server.early) whose senders now
// hold their resource, and forgets those whose senders are neither holder
// nor queued any more (their requests were decided otherwise).
func (n *Node) serveEarly() {
	s := n.srv
	for i := 0; s != nil && i < len(s.early); {
		in := s.early[i]
		m := in.m.(*wire.Release)
		r := n.st.resources[m.Resource]
		switch {
		case r != nil && r.holder == in.h.From && r.holderReq == m.Req:
			if !n.canDecide() {
				return // kept for when it can (or for the next server: endTenure)
			}
			s.early = slices.Delete(s.early, i, i+1)
			n.serveMsg(in, func(inbound) {})
			s = n.srv
			i = 0 // the decision may have made another sender the holder
		case r != nil && slices.ContainsFunc(r.queue, func(w wire.Waiter) bool { return w.Node == in.h.From && w.Req == m.Req }):
			i++
		default:
			s.early = slices.Delete(s.early, i, i+1)
		}
	}
}

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
	ep := st.epoch
	switch m := m.(type) {
	case *wire.Request:
		// A member's floor is below its own request (Node.floor); one at
		// or above it (a forger's) would mark requests decided that the
		// member has yet to make.
		floor := min(m.Floor, max(m.Req, 1)-1)
		switch {
		case from.isDecided(m.Req):
			if m.Retry {
				behind(in)
			}
		case st.noRoomFor(m.Resource, n.cfg.Limits) != room:
			// No room (Limits.MaxResources, Limits.MaxSnapshot): the
			// request is refused, by a withdrawal its requester did not
			// ask for (see ownReleased), so that it does not wait for
			// room without a word. It carries the request's floor: a
			// member refused again and again while a request of its
			// stays undecided on this branch (one refused on a branch a
			// takeover cut off, which it no longer asks) would otherwise
			// add each refusal to its decided list, past any limit.
			if n.canDecide() {
				n.stats.TooMany++
				n.decide(&wire.Released{T: st.t, Next: st.t + 1, Epoch: ep, Node: h.From, Req: m.Req, Resource: m.Resource, Withdrawn: true, Floor: floor}, true) // an answer someone waits on
			}
		case n.canDecide():
			queued := st.wouldQueue(m.Resource)
			n.decide(&wire.Grant{T: st.t, Next: st.t + 1, Epoch: ep, Node: h.From, Req: m.Req, Resource: m.Resource, Floor: floor, Queued: queued}, !queued)
		}
	case *wire.Release:
		r := st.resources[m.Resource]
		switch {
		case r != nil && r.holder == h.From && r.holderReq == m.Req:
			// Matched by request, not token: a holder that took the
			// resource on its predecessor's release has a token below the
			// decision's (see enterOnRelease). Looked at before the queue:
			// a state that also queues the holder's request (none the
			// group makes; a forged one a newcomer took) would otherwise
			// keep the release early for ever, and serveEarly would serve
			// it again and again without end (FuzzInstalledState).
			if n.canDecide() {
				n.decide(&wire.Released{T: st.t, Next: st.t + 1, Epoch: ep, Node: h.From, Req: m.Req, Resource: m.Resource, Token: r.token}, len(r.queue) > 0)
			}
		case r != nil && slices.ContainsFunc(r.queue, func(w wire.Waiter) bool { return w.Node == h.From && w.Req == m.Req }):
			// Taken on the holder's release and already let go: decided
			// once the hand-over is.
			if s := n.srv; len(s.early) < maxRecent && !slices.ContainsFunc(s.early, func(e inbound) bool { return e.h.From == h.From && e.m.(*wire.Release).Req == m.Req }) {
				s.early = append(s.early, in)
			}
		case m.Retry:
			behind(in)
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
			n.decide(&wire.Released{T: st.t, Next: st.t + 1, Epoch: ep, Node: h.From, Req: m.Req, Resource: m.Resource, Token: r.token}, len(r.queue) > 0)
		default: // queued, or not yet seen: withdraw (and remember it is decided)
			n.decide(&wire.Released{T: st.t, Next: st.t + 1, Epoch: ep, Node: h.From, Req: m.Req, Resource: m.Resource, Withdrawn: true}, false)
		}
	case *wire.LeaveRequest:
		switch {
		case h.From == n.id && len(st.members) > 1:
			// A lone voter leaving observers behind promotes one first
			// (endTurn), and hands it the turn.
			n.srv.leaving = true // hand the turn over first, then leave as a member
		case !n.canDecide() && !n.decidesLeaveDuringHandover(h.From):
		case h.From == n.id:
			// The last member leaves: the group ends.
			n.decide(&wire.Left{T: st.t, Next: st.t + 1, Epoch: ep, ID: n.id}, true)
		case st.votes(h.From) && st.voters <= MinVoters && st.observers() > 0 && (n.toPromote() != 0 || n.now-n.srv.start < uint64(n.cfg.PingTimeoutTicks)):
			// A voter leaving a group of MinVoters voters or fewer waits
			// until this turn's SYNC has promoted an observer (one that
			// answers; early in the turn none may have yet), so that the
			// voters do not drop below MinVoters while observers could
			// stand in. Two voters leaving together would otherwise leave
			// a lone voter, whose next promoted observer, dying, would stop
			// the group. The leaver asks again; so does a leaving backup.
			n.srv.promoteFirst = true
			n.keepForReplay(in)
		case h.From == st.backup && st.voters > 2 && !n.turnToLeaver[h.From]:
			// Dropping the backup now would leave this server without
			// one, and it would take over from itself (a new epoch, the
			// tokens raised by TakeoverGap). The turn goes to the leaver
			// instead: as a server that leaves, it hands the turn on
			// (naming a backup of its own) and then leaves as a member,
			// decided by its successor, whose backup it is not. Unless
			// that backup leaves too: then the turn comes back here, and
			// the second time the leave is decided at once.
			if n.turnToLeaver == nil {
				n.turnToLeaver = map[wire.NodeID]bool{}
			}
			n.turnToLeaver[h.From] = true
			n.srv.backupLeave = &in
		case !n.viewCommitted() && st.votes(h.From):
			// Decided once the last change is known (an observer's leave
			// changes no majority, and needs not wait): the leaver asks
			// again, but it may have died since it asked (a new epoch's
			// server replays what it overheard, however old).
			n.keepForReplay(in)
		default:
			n.decideLeave(h.From)
		}
	}
}

// decideLeave records that a member other than the server left; the server
// keeps its turn.
func (n *Node) decideLeave(id wire.NodeID) {
	st := n.st
	view := slices.DeleteFunc(st.sched.View(), func(m wire.NodeID) bool { return m == id })
	if next, err := n.realign(view, n.id, st.t+1); err == nil {
		n.decide(&wire.Left{T: st.t, Next: next, Epoch: st.epoch, ID: id}, true)
	}
}

// serveJoin decides OK_TO_JOIN or GROUP_FULL (paper figure C), and sends the
// newcomer the state. A join waits while the last change of the view is not
// yet known to a majority.
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
		n.decide(&wire.GroupFull{T: st.t, Next: st.t + 1, Epoch: st.epoch, Inc: m.Inc, Max: st.params.MaxMembers}, true)
		return
	}
	// An observer changes no majority: it is admitted at once, and its
	// death costs none (the checks below are about a voter's).
	observer := m.Observer && st.voters >= MinVoters
	if !observer && (!n.viewCommitted() || !n.liveMajorityWith(1, in.at) || n.unvouchedVoter()) {
		n.deferJoin(in, m)
		return
	}
	id := st.nextID
	view := st.sched.View()
	if !observer {
		view = append(view, id)
	}
	next, err := n.realign(view, n.id, st.t+1)
	if err != nil {
		return
	}
	n.decide(&wire.OkToJoin{T: st.t, Next: next, Epoch: st.epoch, Inc: m.Inc, ID: id, Addr: m.Addr, Members: uint32(len(st.members) + 1), Observer: observer, Transient: m.Observer}, true)
	n.sendSnapshot(in.src)
}

// quietFor returns how long a member heard during the tenure has not been
// heard since, for the SYNC (wire.Sync.Quiet): zero for one heard within
// two heartbeats, as a live member answering every ping is, so that the
// list stays empty while all are well; and counted from s.counted at most,
// since a server that was paused or cut off blames nobody for its own
// silence (see tenure.counted). Never for this server itself. A member's
// lease runs from a message a server heard, before the last one this server
// heard from it or in an earlier turn (see doc.go, Leases), so the silence
// carried never outgrows the time since its lease was last renewed.
func (n *Node) quietFor(id wire.NodeID) uint64 {
	s := n.srv
	at, ok := s.heard[id]
	if !ok || id == n.id {
		return 0
	}
	q := n.now - max(at, s.counted)
	if q < 2*uint64(n.cfg.HeartbeatTicks) {
		return 0
	}
	return q
}

// longestSilentFirst orders silences for a SYNC's lists, which keep the
// longest when they are cut short.
func longestSilentFirst(a, b wire.Silence) int {
	return cmp.Compare(b.Ticks, a.Ticks)
}

// heardFrom reports whether the member was heard during the tenure.
func (s *tenure) heardFrom(id wire.NodeID) bool {
	_, ok := s.heard[id]
	return ok
}

// liveMajorityWith reports whether the members heard since tick since (any
// datagram, a ping's answer included), this server included, would be a
// majority of the view grown by k newcomers. A newcomer that dies at once (or a stale join
// request of an incarnation the group removed, delayed in the network)
// would otherwise turn a bare majority into none, and the group, unable to
// remove anyone without a majority, would stop for good. Counting only what
// was heard after the join request arrived counts no member that died
// before it; at heavy load every member is heard at once, and an idle one
// by the next ping. A group of one has no other way to grow.
func (n *Node) liveMajorityWith(k int, since uint64) bool {
	if n.st.voters == 1 {
		return true
	}
	live := 1
	for _, m := range n.st.members {
		if m.id == n.id || m.observer {
			continue
		}
		if at, ok := n.srv.heard[m.id]; ok && at >= since {
			live++
		}
	}
	return 2*live > n.st.voters+k
}

// vouch records that a member was heard taking part in the group. Only
// voters are kept (an observer changes no majority), and the map is pruned
// of former members as it grows.
func (n *Node) vouch(m *member) {
	if m.observer {
		return
	}
	if n.vouched == nil {
		n.vouched = map[wire.NodeID]uint64{}
	}
	n.vouched[m.id] = m.inc
	if len(n.vouched) > 2*len(n.st.members) {
		for id, inc := range n.vouched {
			if now := n.st.member(id); now == nil || now.inc != inc {
				delete(n.vouched, id)
			}
		}
	}
}

// unvouchedVoter reports whether a voter other than this node was never
// heard by it taking part in the group (any message but a join request): a
// newcomer not yet known to be alive. A server admits one such voter at a
// time: the next waits until it is heard, or is removed as silent. The
// majority check (liveMajorityWith) alone does not stop that: a newcomer
// counts as heard when it is admitted, so the join requests already waiting
// saw each one admitted before them as alive. Forged join requests from 300
// ports of one host, which sent nothing else, made a group of 5 admit 5
// voters that way, and with half of it silent the group could remove none
// and stopped for good. Now a flood of them holds at most one such voter in
// the group, for as long as a silent member takes to be removed. (One that
// also sends a datagram as each member it was admitted as is vouched for,
// and can still stop a group without a key: it is a rogue member, which
// only a key keeps out.) A voter heard once that died since is the majority
// check's case, as before (a member restarting must not wait for its old
// incarnation's removal).
func (n *Node) unvouchedVoter() bool {
	for _, m := range n.st.members {
		if !m.observer && m.id != n.id && n.vouched[m.id] != m.inc {
			return true
		}
	}
	return false
}

// deferJoin keeps a join request until the view may change again, so that
// newcomers arriving together are admitted one after another without
// waiting for their retries.
func (n *Node) deferJoin(in inbound, m *wire.JoinRequest) {
	s := n.srv
	for _, d := range s.deferred {
		if d.m.(*wire.JoinRequest).Inc == m.Inc {
			return
		}
	}
	if len(s.deferred) < maxRecent {
		s.deferred = append(s.deferred, in)
	}
}

// tickServer runs the server's timers: held-back decisions, pings and their
// retries, deferred joins, the backup, and giving up without a majority.
func (n *Node) tickServer() {
	s := n.srv
	st := n.st
	// Once a tick, not on every input: maybeEndTurn runs after each.
	s.lapsed = n.lapsedRemovable()
	if st.voters == 1 {
		// Alone, or with observers only, the server is its own majority.
		s.authUntil, s.hadAuth, s.majorityAt = n.now+AuthorityTicks(st.params), true, n.now
		n.renew(n.now)
	}
	if s.lazyDue != 0 && n.now >= s.lazyDue {
		n.flush()
	}
	n.replayRecent() // if a freeze or a wait for the backup held it back
	if n.srv != s {
		// What it replayed ended the turn. Unreachable today (a lone
		// server's own leave is never held for replay), but the rest of
		// this tick is the old turn's.
		return
	}
	if n.now-s.pingAt >= uint64(n.cfg.HeartbeatTicks) {
		n.pingAll()
	} else if n.now-s.retryAt >= uint64(n.cfg.PingRetryTicks) {
		s.retryAt = n.now
		for _, m := range st.members {
			if !s.answered[m.id] && m.id != n.id {
				n.sendTo(m.id, &wire.Ping{Turn: s.turn, Probe: s.probe})
			}
		}
	}
	if n.srv == nil {
		return
	}
	if !n.hasAuthority() {
		if s.hadAuth && s.lostAt < s.authUntil {
			s.lostAt = n.now
			n.quorumLost(fmt.Sprintf("the server lost the answers of a majority of its %s", plural(st.voters, "voter")))
		}
		// Without a majority for the takeover timeout, stop pinging: members
		// that still hear this node (it may be deaf, not mute) could never
		// take over otherwise.
		if lastAuth := max(s.start, s.authUntil); n.now-lastAuth >= st.params.TakeoverTicks {
			n.stepDown("no majority answered for the takeover timeout", 2*st.params.TakeoverTicks)
			return
		}
	}
	if len(s.deferred) > 0 && n.canDecide() && n.viewCommitted() {
		in := s.deferred[0]
		s.deferred = s.deferred[1:]
		n.serveJoin(in, in.m.(*wire.JoinRequest))
	}
	if n.claim == nil && st.voters > 1 && st.backup == 0 && n.hasAuthority() {
		n.startSelfClaim("the group has no backup")
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
