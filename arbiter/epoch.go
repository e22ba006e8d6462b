package arbiter

import (
	"fmt"

	"github.com/mcnode/mcnode/wire"
)

// claiming is a takeover in progress: this node asks the members for their
// votes to become the server of a new epoch (see doc.go, "Takeover").
type claiming struct {
	epoch   uint64
	attempt uint64 // numbers this node's claims: votes echo it
	pre     bool   // asking whether they would vote; nobody has promised yet
	started uint64 // tick this phase began
	sentAt  uint64
	// firstSent is when the first Claim of the real phase went out. Every
	// vote was cast after it by a member that then votes for nobody else for
	// Params.TakeoverTicks: the new server's authority runs from here.
	firstSent uint64
	votes     map[wire.NodeID]vote // granted votes of this phase, this node's own included
	won       bool                 // a majority voted: catching up with the most advanced voter
	wonAt     uint64
	nakAt     uint64
	prior     uint64 // this node's promise before the claim
	reason    string
}

// vote is one member's granted vote: its log position and what it knows.
type vote struct {
	logEpoch, t uint64
	addr        string
	prior       uint64      // the highest epoch below the claimed one it promised
	priorFor    wire.NodeID // whom it voted for in that epoch, if anyone
	won         uint64      // the highest epoch it took over as server
	seenT       uint64
}

// after reports whether log position (e, t) is ahead of (oe, ot): a newer
// epoch wins whatever the timestamps, since a takeover may start an epoch at
// a timestamp that an abandoned branch of the old one went past.
func after(e, t, oe, ot uint64) bool { return e > oe || (e == oe && t > ot) }

// promise raises the highest epoch this node will follow to e. Buffered
// decisions came from senders of lower epochs and are dropped; a server of a
// lower epoch steps down; a claim of a lower epoch is abandoned. who is the
// member voted for, or 0 when the node merely learned that e exists.
func (n *Node) promise(e uint64, who wire.NodeID) {
	switch {
	case e < n.promised:
		return
	case e > n.promised:
		n.promisedBefore, n.votedForBefore = n.promised, n.votedFor
		n.promised = e
		n.votedFor = who
		clear(n.log.future)
		n.log.strangers = 0
	case who != 0:
		n.votedFor = who
	}
	if e > n.maxEpoch {
		n.maxEpoch = e
	}
	if n.srv != nil && n.st != nil && n.st.epoch < e {
		n.stepDown(fmt.Sprintf("epoch %d has begun", e), 0)
	}
	c := n.claim
	switch {
	case c == nil:
	case c.epoch < e, who != 0 && who != n.id, c.epoch == e && who != n.id && c.pre:
		// A claim of a lower epoch is void; so is one that this node only
		// asks about (pre-vote) while a member has promised its epoch
		// already. And a vote for another member, of whatever epoch, ends
		// this node's own claim: the vote promises that member no rival
		// for the takeover timeout, this node included, or both could win
		// with majorities that meet only here. A real claimant learning of
		// its own epoch (its voters' headers carry it) goes on.
		n.abandonClaim(fmt.Sprintf("epoch %d is claimed by another member", e))
	case e < c.epoch && e > c.prior:
		// An epoch between the log's and the claim's exists: its server
		// may have granted what this node's log lacks (see provable).
		c.prior = e
	}
}

// stepDown stops serving. A server without a majority stops pinging, so that
// members that still hear it stop hearing it and take over; it takes its turn
// up again after resume ticks if nothing newer happened.
func (n *Node) stepDown(reason string, resume uint64) {
	if n.srv == nil {
		return
	}
	n.endTenure()
	n.stats.StepDowns++
	n.heardAt = n.now
	n.resumeAt = n.now + resume
	n.emit(Event{Kind: EventStepDown, Node: n.id, Reason: reason})
}

// mayClaim reports whether this node may ask to take over now. A newcomer
// that has the state but still waits for greetings may: the members that
// owe it theirs may be dead, and only a server removes them.
func (n *Node) mayClaim() bool {
	return n.st != nil && (n.stat == statusMember || n.stat == statusSyncing) && n.srv == nil && n.claim == nil && (!n.xfer.need || n.xfer.sound) &&
		n.leave == nil && n.st.voters > 1 && n.st.votes(n.id)
}

// rank orders the members' takeovers: the backup first (it holds every
// decision that took effect, so it takes over without waiting), then the
// others in ID order after the server; the server itself, which believes it
// should be serving, last.
func (n *Node) rank() int { return n.rankOf(n.id) }

// rankOf is member id's place in the order of takeovers (see rank), as this
// node's state gives it.
func (n *Node) rankOf(who wire.NodeID) int {
	if who == n.st.backup {
		return 0
	}
	srv := n.st.server()
	ids := n.st.sched.Members()
	start := 0
	for i, id := range ids {
		if id >= srv {
			start = i
			break
		}
	}
	r := 1
	for i := 0; i < len(ids); i++ {
		id := ids[(start+i)%len(ids)]
		if id == srv || id == n.st.backup {
			continue
		}
		if id == who {
			return r
		}
		r++
	}
	return r
}

// jitter spreads takeovers of equal rank, and retries after a failed claim,
// so that two candidates do not split the votes again and again (Raft's
// randomized election timeouts, Ongaro and Ousterhout 2014, section 5.2).
// It is drawn from the incarnation and the number of claims this node has
// failed, so that the machine stays deterministic: under half a StaggerTicks
// at first, so that a rank's claims end half a stagger before the next
// rank's begin (with a whole one, the backup's latest and the next rank's
// earliest claims met and split the votes), up to ClaimTicks after failures.
func (n *Node) jitter() uint64 {
	span := uint64(n.cfg.StaggerTicks) / 2
	if n.failedClaims > 0 {
		span = uint64(n.cfg.ClaimTicks)
	}
	x := n.cfg.Inc + n.failedClaims*0x9e3779b97f4a7c15
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x % max(span, 1)
}

// tickTakeover starts a takeover when no server has pinged for the takeover
// timeout (later for lower ranks), and drives one in progress.
func (n *Node) tickTakeover() {
	if n.claim != nil {
		n.tickClaim()
		return
	}
	if !n.mayClaim() {
		return
	}
	wait := n.st.params.TakeoverTicks + uint64(n.rank()*n.cfg.StaggerTicks) + n.jitter()
	if n.now-max(n.heardAt, n.waitFrom) < wait {
		return
	}
	if n.betterAsking() && !n.stoodDown {
		n.standDown()
		return
	}
	n.startClaim(fmt.Sprintf("no ping from a server for %d ticks", n.now-n.heardAt))
}

// startClaim asks the members whether they would vote for this node (the
// pre-vote); the real claim follows once a majority would.
func (n *Node) startClaim(reason string) {
	if n.attempts == 0 {
		// Start from the incarnation, not from 1: a vote for this node's
		// predecessor at the same address must not count for it.
		n.attempts = n.cfg.Inc
	}
	n.attempts++
	c := &claiming{epoch: max(n.promised, n.maxEpoch) + 1, attempt: n.attempts, pre: true, started: n.now, prior: n.promised, reason: reason}
	c.votes = map[wire.NodeID]vote{n.id: n.ownVote()}
	n.claim = c
	n.sendClaim()
}

// startSelfClaim is a server's takeover of its own group: it has no backup
// that answers, so it cannot hand its turn over nor make a grant take
// effect, and a new epoch with a new backup is the one safe way to name
// another (see doc.go).
func (n *Node) startSelfClaim(reason string) {
	if n.claim != nil || n.srv == nil {
		return
	}
	n.startClaim(reason)
}

func (n *Node) ownVote() vote {
	return vote{logEpoch: n.st.epoch, t: n.st.t, addr: n.cfg.Addr, prior: n.promised, priorFor: n.votedFor, won: n.wonEpoch, seenT: max(n.log.seenT, n.st.t)}
}

func (n *Node) sendClaim() {
	c := n.claim
	c.sentAt = n.now
	n.multicast(&wire.Claim{Epoch: c.epoch, Pre: c.pre, Attempt: c.attempt})
}

// tickClaim resends the claim, gives up on one that takes too long, and
// drives the catching up of one that won.
func (n *Node) tickClaim() {
	c := n.claim
	if n.now >= n.claimDeadline(c) {
		votes := fmt.Sprintf("%d of %s", n.countVotes(c), plural(n.st.voters, "voter"))
		if c.won {
			n.abandonClaim(fmt.Sprintf("won by %s, but this node's log did not catch up with the most advanced voter's within %s of winning", votes, plural(int(n.now-c.wonAt), "tick")))
		} else {
			n.abandonClaim(fmt.Sprintf("%s voted within %s", votes, plural(n.cfg.ClaimTicks, "tick")))
		}
		return
	}
	if n.now-c.sentAt >= uint64(n.cfg.RetryTicks) {
		n.sendClaim() // also after winning: the backup's vote may yet come
	}
	if c.won {
		n.catchUpClaim()
	}
}

// claimDeadline is the tick at which a claim is given up: ClaimTicks after
// its phase began, and for a claim won, at least two retry intervals after
// the win. Catching up takes that (a retry interval's wait for the backup's
// vote, NAKs for the decisions the log lacks), and a claim won late in its
// time, given up, would leave the group without a server for another
// takeover timeout; the seeded simulation gave up about one won claim in a
// thousand that way.
func (n *Node) claimDeadline(c *claiming) uint64 {
	end := c.started + uint64(n.cfg.ClaimTicks)
	if c.won {
		end = max(end, c.wonAt+2*uint64(n.cfg.RetryTicks))
	}
	return end
}

// abandonClaim gives up a takeover. The timer starts again, so that another
// member, ranked later, gets its chance first.
func (n *Node) abandonClaim(reason string) {
	c := n.claim
	if c == nil {
		return
	}
	n.claim = nil
	n.waitFrom = n.now
	n.failedClaims++
	if !c.pre {
		n.emit(Event{Kind: EventTakeoverFailed, Node: n.id, Reason: fmt.Sprintf("claim for epoch %d given up: %s", c.epoch, reason)})
	} else if n.srv == nil {
		n.quorumLost(fmt.Sprintf("no server heard, and %d of %s reachable", n.countVotes(c), plural(n.st.voters, "voter")))
	}
}

// countVotes counts the granted votes of the current view's voters.
func (n *Node) countVotes(c *claiming) int {
	k := 0
	for _, m := range n.st.members {
		if _, ok := c.votes[m.id]; ok && !m.observer {
			k++
		}
	}
	return k
}

// majority reports whether k voters are a majority of the current view's
// voters. Observers count for no majority: their deaths, however many at
// once, never cost the group one.
func (n *Node) majority(k int) bool { return 2*k > n.st.voters }

// votersIn counts the voters of the current view in a set of members.
func (n *Node) votersIn(set map[wire.NodeID]bool) int {
	k := 0
	for id, in := range set {
		if in && n.st.votes(id) {
			k++
		}
	}
	return k
}

// wouldVote decides a claim: the epoch must be above the one this node
// promised, or that one if this node voted in it for nobody or for this
// claimant (a member may learn of an epoch from a header before it is asked
// for its vote; two claimants of one epoch still cannot both win, since each
// majority would need this node's one vote), and this
// node must have heard no server for the takeover timeout (or the claimant
// is the server it hears: a server replacing its backup). A server that
// holds a majority's answers votes for nobody else.
func (n *Node) wouldVote(h wire.Header, m *wire.Claim) (bool, string) {
	switch {
	case m.Epoch < n.promised || (m.Epoch == n.promised && (m.Pre || (n.votedFor != 0 && n.votedFor != h.From))):
		return false, "epoch already promised"
	case n.srv != nil && n.hasAuthority():
		return false, "this node is the server and a majority answers it"
	case n.now-n.heardAt < n.st.params.TakeoverTicks && h.From != n.pinger:
		return false, "the server was heard within the takeover timeout"
	}
	return true, ""
}

// onClaim answers a member's claim with a vote.
func (n *Node) onClaim(src string, h wire.Header, from *member, m *wire.Claim) {
	if n.st == nil || from == nil || from.observer {
		return // only voters of this node's view are candidates
	}
	if !n.st.votes(n.id) {
		// Only voters vote; an observer refuses, so that the header of its
		// refusal shows the candidate its log. It may hold a decision no
		// voter does: the SYNC that demoted it, seen by it alone before
		// its server died, which the candidate must then fetch.
		n.out = append(n.out, Outbound{To: h.From, Addr: src, Msg: &wire.Vote{Epoch: m.Epoch, Pre: m.Pre, Attempt: m.Attempt}})
		return
	}
	// Prior is the highest epoch this node promised below the claimed one:
	// the candidate must know of any epoch between its log's and its own,
	// whose server may have decided what no log here holds (see provable
	// and finishTakeover). A node that already promised the claimed epoch
	// (it voted for this candidate before, or learned of the epoch from a
	// header) gives the promise it had before, not the claimed epoch,
	// which would hide it.
	prior, priorFor := n.promised, n.votedFor
	if prior >= m.Epoch {
		prior, priorFor = n.promisedBefore, n.votedForBefore
	}
	granted, _ := n.wouldVote(h, m)
	if granted && !m.Pre {
		n.promise(m.Epoch, h.From)
		// A vote promises what a ping reply promises: no other vote for the
		// takeover timeout. The new server's authority rests on it.
		n.heardAt, n.pinger = n.now, h.From
		n.pingEpoch, n.pingT = h.LogEpoch, h.T
	}
	seen := max(n.log.seenT, n.st.t)
	n.out = append(n.out, Outbound{To: h.From, Addr: src,
		Msg: &wire.Vote{Epoch: m.Epoch, Pre: m.Pre, Granted: granted, Prior: prior, PriorFor: priorFor, Won: n.wonEpoch, SeenT: seen, Attempt: m.Attempt}})
	if granted && m.Pre && n.rankOf(h.From) < n.rank() {
		n.betterAsked, n.betterAskedAt = true, n.now
		if c := n.claim; c != nil && c.pre && !n.stoodDown {
			n.standDown()
		}
	}
}

// betterAsking reports whether a candidate ranked before this node asked,
// within a retry interval (it asks again every one while it asks), whether
// this node would vote for it.
func (n *Node) betterAsking() bool {
	return n.betterAsked && n.now-n.betterAskedAt < uint64(n.cfg.RetryTicks)
}

// standDown makes way for a candidate ranked before this node that asks
// whether this node would vote for it: this node gives up its own claim if
// it is still only asking the same, or does not start one, and starts its
// takeover timer again, so that the two do not both find a majority that
// would vote and then split the votes (the epoch nobody won would make the
// next winner wait out the leases). Once per silence: a candidate ranked
// first that cannot win must not keep this node from claiming for good. Its
// jitter stays short: it is next, should the other fail.
func (n *Node) standDown() {
	n.claim = nil
	n.waitFrom = n.now
	n.stoodDown = true
	n.stats.StoodDown++
}

// onVote counts a vote for this node's claim.
func (n *Node) onVote(src string, h wire.Header, from *member, m *wire.Vote) {
	c := n.claim
	if from == nil || n.st == nil {
		return
	}
	if h.Epoch > n.promised {
		// The voter follows a newer epoch than this node knew of.
		n.promise(h.Epoch, 0)
		c = n.claim
	}
	if c == nil || m.Epoch != c.epoch || m.Pre != c.pre || m.Attempt != c.attempt || !m.Granted {
		return // not for this claim: a late answer to an earlier one
	}
	c.votes[h.From] = vote{logEpoch: h.LogEpoch, t: h.T, addr: src, prior: m.Prior, priorFor: m.PriorFor, won: m.Won, seenT: m.SeenT}
	if c.won || !n.majority(n.countVotes(c)) {
		return // a late vote still counts: it may be the backup's
	}
	if c.pre {
		// A majority would vote: ask for real, and promise the epoch first.
		c.pre, c.started = false, n.now
		c.votes = map[wire.NodeID]vote{n.id: n.ownVote()}
		n.promise(c.epoch, n.id)
		c.firstSent = n.now
		n.stats.Claims++
		n.emit(Event{Kind: EventTakeoverStarted, Node: n.id, Reason: fmt.Sprintf("claiming epoch %d: %s", c.epoch, c.reason)})
		n.sendClaim()
		return
	}
	c.won, c.wonAt = true, n.now
	n.failedClaims = 0
	n.catchUpClaim()
}

// catchUpClaim brings this node's log up to the most advanced of its voters'
// (so that it holds every decision any of them applied), then takes over.
func (n *Node) catchUpClaim() {
	c := n.claim
	var best vote
	for _, id := range sortedKeys(c.votes) {
		if v := c.votes[id]; after(v.logEpoch, v.t, best.logEpoch, best.t) {
			best = v
		}
	}
	if after(best.logEpoch, best.t, n.st.epoch, n.st.t) {
		if n.now-c.nakAt >= uint64(n.cfg.NakTicks) && best.addr != "" {
			c.nakAt = n.now
			n.stats.NaksSent++
			n.out = append(n.out, Outbound{Addr: best.addr, Msg: &wire.Nak{From: n.st.t, Count: 64}})
		}
		return
	}
	// A majority is enough to take over, but not always to take over at
	// once: give the backup, whose vote proves every grant known, a retry
	// interval to answer before settling for the lease wait.
	if fast, _ := n.provable(c); !fast && n.now-c.wonAt < uint64(n.cfg.RetryTicks) {
		return
	}
	n.finishTakeover()
}

// provable reports whether this node, its log caught up, knows every grant
// the old epoch made that may have taken effect, and so may grant at once.
// A grant takes effect only once the backup holds it, so it knows them if it
// made them (it is the server of its own log) or it is the backup or the
// backup voted (and so holds no more than this node now does) — unless some
// voter had promised an epoch newer than the log's and older than the
// claim's, whose decisions nobody here holds (unless the voters show it had
// no server: noneWon), or the log's epoch itself began with a wait for
// older leases (Takeover.Wait) and decided nothing since: its server may
// have died waiting, and the grants it waited out are in no log here.
func (n *Node) provable(c *claiming) (bool, string) {
	prior := n.priorOf(c)
	st := n.st
	if prior == st.epoch+1 && n.noneWon(c, prior) {
		prior = st.epoch
	}
	switch {
	case prior > st.epoch:
		return false, fmt.Sprintf("a voter had promised epoch %d, newer than the log's %d", prior, st.epoch)
	case n.settledIn != st.epoch && (n.waitedOut != st.epoch || n.frozen()):
		// (Its own wait, finished, settles it: only its server decides in
		// an epoch before handing the turn on.)
		return false, fmt.Sprintf("epoch %d began waiting out older leases and this log shows no decision since", st.epoch)
	case st.server() == n.id:
		return true, "this node made the last decisions"
	case st.backup == n.id:
		return true, "this node was the backup"
	case st.backup != 0:
		if _, ok := c.votes[st.backup]; ok {
			return true, fmt.Sprintf("the backup, node %d, voted", st.backup)
		}
	}
	return false, fmt.Sprintf("the backup, node %d, did not vote", st.backup)
}

// priorOf is the highest epoch below the claim's that this node or one of
// its voters promised (a vote gives the voter's promise below the claimed
// epoch: see onClaim): epochs above the log's up to it may have had a
// server whose decisions no log here holds.
func (n *Node) priorOf(c *claiming) uint64 {
	prior := c.prior
	for _, v := range c.votes {
		prior = max(prior, v.prior)
	}
	return prior
}

// noneWon reports whether the voters show that nobody took over as server
// of epoch e, the only epoch between the log's and the claim's that may
// have had one (e is the log's epoch plus one). A server of e had the votes
// of a majority, and so of one of this claim's voters, which had promised
// e and no higher epoch below the claim's: its vote names the member it
// voted for in e. Each member so named voted for this claim too and says it
// never took over as server of e (it had claimed e and lost, as when two
// candidates split the votes). Then e decided nothing, and its promises
// need no wait. At least one voter must name someone: a vote that names
// nobody (a voter that only learned of e) proves nothing by itself.
func (n *Node) noneWon(c *claiming, e uint64) bool {
	named := false
	for _, v := range c.votes {
		if v.prior != e || v.priorFor == 0 {
			continue
		}
		named = true
		if w, ok := c.votes[v.priorFor]; !ok || w.won >= e {
			return false
		}
	}
	return named
}

// finishTakeover decides the Takeover that begins this node's epoch.
func (n *Node) finishTakeover() {
	c := n.claim
	st := n.st
	if st.member(n.id) == nil || !n.majority(n.countVotes(c)) {
		n.abandonClaim("the voters are no longer a majority of the view")
		return
	}
	fast, why := n.provable(c)
	base := max(st.t, n.log.seenT)
	for _, v := range c.votes {
		base = max(base, v.seenT)
	}
	// One gap for the decisions of the log's epoch that no voter saw, and
	// one more for every epoch since that may have had a server: such an
	// epoch began a gap and up to a round of turns above what its own
	// voters saw, which may be all this node's voters saw too, and decided
	// from there (a voter promised it, but none saw its Takeover).
	gap := uint64(TakeoverGap)
	if prior := n.priorOf(c); prior > st.epoch {
		gap *= 1 + min(prior-st.epoch, maxUnseenEpochs)
	}
	next, ok := st.sched.NextTurn(n.id, base+gap)
	if !ok || base+gap < base {
		n.abandonClaim("the group timestamp is exhausted")
		return
	}
	backup := n.pickBackup(func(id wire.NodeID) bool { _, ok := c.votes[id]; return ok }, n.id, n.id)
	d := &wire.Takeover{T: st.t, Next: next, Epoch: c.epoch, PrevEpoch: st.epoch, Server: n.id, Backup: backup, Wait: !fast}
	n.claim = nil
	if n.srv != nil {
		n.flush() // a server replacing its backup: its held-back decisions come first
	}
	if !n.apply(d, true) {
		return
	}
	n.out = append(n.out, Outbound{Msg: d})
	n.wonEpoch = c.epoch
	n.stats.Takeovers++
	n.pendingAuth = c.firstSent + AuthorityTicks(st.params)
	reason := "grants at once: " + why
	if !fast {
		// Some grant of the old epoch may be in effect at a member that did
		// not vote: wait until its lease, renewed at the latest within the
		// old authority, which ended before this majority formed, has run
		// out on its own clock.
		n.frozenUntil = n.now + st.params.LeaseTicks + st.params.LeaseMarginTicks
		n.waitedOut = c.epoch
		reason = fmt.Sprintf("grants nothing for %d ticks (the lease and its margin): %s", n.frozenUntil-n.now, why)
	}
	n.emit(Event{Kind: EventTakeoverWon, Node: n.id, Reason: fmt.Sprintf("took over as server of epoch %d, %s", c.epoch, reason)})
}

// pickBackup returns the first member after "after" in ID order, other than
// the server it is to back up, that ok accepts; 0 if there is none.
func (n *Node) pickBackup(ok func(wire.NodeID) bool, after, server wire.NodeID) wire.NodeID {
	ids := n.st.sched.Members()
	start := 0
	for i, id := range ids {
		if id > after {
			start = i
			break
		}
	}
	for i := 0; i < len(ids); i++ {
		id := ids[(start+i)%len(ids)]
		if id != server && ok(id) {
			return id
		}
	}
	return 0
}

// quorumLost reports, once until it is regained, that this node cannot reach
// a majority: as server, its authority lapsed; as member, no server pings it
// and its claims find no majority.
func (n *Node) quorumLost(reason string) {
	if n.lastQuorumEvent == 1 {
		return
	}
	n.lastQuorumEvent = 1
	n.emit(Event{Kind: EventQuorumLost, Node: n.id, Reason: reason})
}

func (n *Node) quorumRegained(reason string) {
	if n.lastQuorumEvent != 1 {
		return
	}
	n.lastQuorumEvent = 0
	n.emit(Event{Kind: EventQuorumRegained, Node: n.id, Reason: reason})
}
