package arbiter

import (
	"errors"
	"fmt"
	"slices"

	"github.com/mcnode/mcnode/wire"
)

// Errors returned by the machine.
var (
	// ErrStopped: the node left, was removed or was refused; it takes no
	// more input.
	ErrStopped = errors.New("arbiter: node stopped")
	// ErrForeignGroup: the datagram belongs to another group or another run
	// of this group. It was dropped and counted.
	ErrForeignGroup = errors.New("arbiter: datagram from another group")
	// ErrForged: the datagram claims a member's ID with the wrong
	// incarnation. It was dropped and counted.
	ErrForged = errors.New("arbiter: sender does not match the member it claims to be")
	// ErrStale: the datagram comes from a server or a log of an epoch this
	// node has left behind. It was dropped and counted.
	ErrStale = errors.New("arbiter: message of an epoch this node has left")
	// ErrNotServer: the decision comes from a member that did not make it
	// and does not show that it applied it. It was dropped and counted.
	ErrNotServer = errors.New("arbiter: decision from a member that neither made nor applied it")
	// ErrNotMember: the node is not (yet) a member of the group, or the
	// sender of a message is none of this node's view.
	ErrNotMember = errors.New("arbiter: not a member of the group")
	// ErrBusy: this node already holds or waits for the resource.
	ErrBusy = errors.New("arbiter: resource already held or requested by this node")
	// ErrNotHolder: this node does not hold the resource.
	ErrNotHolder = errors.New("arbiter: resource not held by this node")
	// ErrNotWaiting: this node has no pending request for the resource.
	ErrNotWaiting = errors.New("arbiter: no pending request for the resource")
	// ErrBadName: the resource name is empty, too long or not UTF-8.
	ErrBadName = errors.New("arbiter: bad resource name")
	// ErrBadUpdate: Publish's topic is too long or not UTF-8, or its data
	// too large (wire.Limits).
	ErrBadUpdate = errors.New("arbiter: bad update")
)

type status uint8

const (
	statusJoining status = iota // no state yet: asking to be admitted
	statusSyncing               // has the state, waits for greetings
	statusMember                // a full member
	statusDone                  // left, removed or refused
)

// Node is one member's rotating-arbiter state machine. It does no I/O, starts
// no goroutine and reads no clock: the runtime feeds it datagrams with Step
// and time with Tick, and collects what to send and what to tell the
// application with Ready and Advance. It is not safe for concurrent use.
type Node struct {
	cfg   Config
	codec *wire.Codec
	now   uint64 // ticks since New
	st    *state // nil until founded or transferred
	id    wire.NodeID
	stat  status

	log logState

	srv     *tenure  // non-nil while this node is the server
	hand    *handoff // a SYNC not yet confirmed by the next server
	lastSrv wire.NodeID
	recent  []inbound // requests seen while not server, for the next turn
	// probeSeq numbers this node's pings over all its tenures.
	probeSeq uint64
	// applying counts the decisions being applied (see submit); afterApply
	// holds the operations submitted meanwhile.
	applying   int
	afterApply []wire.Message

	// Epochs (see epoch.go). promised is the highest epoch this node has
	// voted for or entered; votedFor is whom it voted for in that epoch.
	promised uint64
	votedFor wire.NodeID
	// promisedBefore and votedForBefore are what promised and votedFor
	// were before promised last rose: a vote tells the candidate the
	// highest epoch below the claimed one that this node promised, and whom
	// it voted for in it (see onClaim). wonEpoch is the highest epoch this
	// node took over as server: a vote tells it too (see provable).
	promisedBefore uint64
	votedForBefore wire.NodeID
	wonEpoch       uint64
	// heardAt is the tick of the last ping this node got from a server of
	// an epoch it has not left, and pinger that server: the node votes for
	// no takeover (but the pinger's own) within Params.TakeoverTicks of it.
	heardAt uint64
	pinger  wire.NodeID
	// waitFrom is where this node's own takeover timer runs from, when
	// that is later than heardAt: a former server gives its successor the
	// takeover timeout from its SYNC, and a member whose claim failed lets
	// the others go first. Neither is a promise to anyone, so neither
	// moves heardAt: a node that refused every claim for a takeover
	// timeout after its own failed, or after it handed the turn to a
	// successor that then died, split the votes with the backup and made
	// the group wait out the leases for an epoch nobody won.
	waitFrom uint64
	// pingEpoch and pingT are the log position (epoch, T) the pinger
	// showed: a ping from another node that shows an older one is a late
	// copy from before a handover, and must not take the promise back.
	pingEpoch, pingT uint64
	// pingedAt is the tick of the last ping itself, for reports: heardAt
	// also moves when this node votes or gives up a claim. reachable is how
	// many members the pinging server said answered it.
	pingedAt  uint64
	reachable int
	claim     *claiming
	// maxEpoch is the highest epoch seen promised by any member: a new
	// claim goes above it.
	maxEpoch     uint64
	failedClaims uint64 // claims given up in a row: see jitter
	stoodDown    bool   // made way for a better-ranked candidate since a server was last heard (see standDown)
	// betterAsked says a candidate ranked before this node asked, at
	// betterAskedAt, whether it would vote for it (see betterAsking).
	betterAsked   bool
	betterAskedAt uint64
	stranded      bool // EventStranded was reported (see pingedByStranger)
	// askedStranger is the unknown server this node asked for the state,
	// and when and how often (see pingedByStranger).
	askedStranger strangerAsk
	attempts      uint64 // claims this node has started: see wire.Claim.Attempt
	// grantsWaiting is false when no request has a grant waiting to take
	// effect, which spares confirmGrants its scan at every step.
	grantsWaiting bool
	// resumeAt is when a server that stepped down for want of a majority
	// may take up its turn again.
	resumeAt uint64
	// pendingAuth is the authority a takeover won (its voters' promises),
	// for the tenure that follows; frozenUntil is the tick before which a
	// server that could not prove it knows every grant in effect grants
	// nothing (see finishTakeover).
	pendingAuth uint64
	frozenUntil uint64
	// settledIn is the latest epoch this node's log shows past any wait for
	// older leases: one begun by a Takeover without Wait, or in which a
	// decision followed the Takeover (its server decides nothing while it
	// waits). See provable and enterOnRelease.
	settledIn uint64
	// waitedOut is the epoch this node took over with a wait for older
	// leases (frozenUntil): once that wait is over, the epoch is settled
	// for its own next takeover.
	waitedOut       uint64
	lastQuorumEvent uint64

	nextReq uint64
	reqs    map[string]*pending // requested, not yet granted
	held    map[string]*holding
	rels    map[uint64]*pending // releases and cancels not yet decided, by request ID
	leave   *pending
	// leaveQuiet counts the leave's retries with no datagram from a member
	// in between: retries, not ticks, so that a pause spent leaving does not
	// count as the group's silence.
	leaveQuiet int
	// turnToLeaver holds the leaving backups this node handed its turn to
	// (see serveMsg): each is given it once, so that leavers cannot pass
	// the turn round among themselves for good.
	turnToLeaver map[wire.NodeID]bool
	// promotedAt is when this node applied each recent promotion: a server
	// demotes no member within a lease of its promotion, so that a leave
	// it stood in for, asked again later, finds it still a voter.
	promotedAt map[wire.NodeID]uint64
	// vouched holds, by ID, the incarnation of each voter this node heard
	// taking part in the group: it is known to have run as a member. A
	// server admits no voter while a voter is not vouched for (see
	// unvouchedVoter).
	vouched map[wire.NodeID]uint64
	anchor  uint64            // tick from which the lease runs
	replies map[uint64]uint64 // ping turn → tick of this node's first reply
	// answered holds this node's first reply to each of the last pings,
	// by server and probe: a later ping that confirms the answer renews
	// the lease from it.
	answered [answeredPings]answer

	// acks (see confirm.go): the highest log position each member has shown
	// in this epoch, and whether this node owes an Ack.
	acks map[wire.NodeID]uint64
	// backupAt is the first log position (a header's T: every decision
	// below it applied) at which the decision that named the backup in this
	// node's log is held (a SYNC, a takeover, a lone voter's first
	// admission: its T plus one), or the installed state's T: see
	// backupTakenUp.
	backupAt     uint64
	ackTo        []wire.NodeID // the backup applied hand-overs: Ack these grantees and new heads
	ackAll       bool          // the backup of a new epoch: Ack everyone
	viewAckDue   bool          // a change of the view or epoch was applied: tell the server
	ackRequestAt uint64

	join *joining

	updSeq  uint64
	updSeen map[uint64]*replayWindow // by sender incarnation

	xfer transfer

	out    []Outbound
	events []Event
	stats  Stats
}

// pending is an operation of this node's that waits for a decision.
type pending struct {
	resource string
	req      uint64
	token    uint64 // for a release
	cancel   bool   // a Cancel rather than a Release
	queued   bool   // a request the server has queued
	since    uint64 // tick of the first send
	sentAt   uint64 // tick of the last send
	// granted is the token of a grant decided for this request and not yet
	// in effect: the backup has not shown it holds the decision.
	granted    uint64
	grantedAt  uint64
	grantNeeds wire.NodeID // the backup at the time of the grant
	need       uint64      // the log position the backup must show
	// headAt is the decision after which the request stood first in its
	// resource's queue, behind a holder: from then on the resource could
	// pass to nobody else first (see confirm.go).
	headAt uint64
	// after: the grant is the release of the holder with this token,
	// heard before the server's decision (enterOnRelease).
	after uint64
}

type holding struct {
	req, token uint64
}

// inbound is a received message with its source address, where direct
// answers go. A non-server keeps the requests it sees as inbounds, to replay
// them if it becomes server.
type inbound struct {
	src string
	h   wire.Header
	m   wire.Message
	at  uint64
}

// Stats counts what the node dropped, repaired and sent again.
type Stats struct {
	Foreign       uint64 // datagrams of another group or run
	Forged        uint64 // sender did not match its claimed member
	Stale         uint64 // messages of an epoch this node has left
	NotMember     uint64 // requests, decisions and state requests from non-members, ignored
	NotServer     uint64 // decisions from a member that neither made them nor shows it applied them
	Unasked       uint64 // state transfers this node did not ask for, or from a non-member, ignored
	TooMany       uint64 // requests, and their retries, the server found no room for (see EventRefused)
	Duplicates    uint64 // decisions already applied
	Divergence    uint64 // decisions or digests that disagreed with this node's state
	Truncated     uint64 // times this node's log went past where a new epoch began: state refetched
	NaksSent      uint64
	Retransmitted uint64 // decisions sent again in answer to a NAK or a retry
	SnapshotsSent uint64
	Snapshots     uint64 // state transfers installed
	BadSnapshots  uint64
	Fenced        uint64 // resources given up because the lease ran out
	Claims        uint64 // takeovers this node started
	StoodDown     uint64 // times this node made way for a candidate ranked before it (see standDown)
	Takeovers     uint64 // takeovers this node won
	StepDowns     uint64 // times this node stopped serving: a majority did not answer, or a newer epoch
	SettleCapped  uint64 // role changes left to the next input (see settle)
	// EnteredOnRelease counts hand-overs this node took on the holder's
	// release, before the server's decision (enterOnRelease).
	EnteredOnRelease uint64
}

// New returns a node for cfg. With cfg.Bootstrap it founds a group at once;
// otherwise its first Ready carries a join request.
func New(cfg Config) (*Node, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c, err := wire.NewCodec(cfg.Limits)
	if err != nil {
		return nil, err
	}
	n := &Node{
		cfg:     cfg,
		codec:   c,
		reqs:    map[string]*pending{},
		held:    map[string]*holding{},
		rels:    map[uint64]*pending{},
		replies: map[uint64]uint64{},
		updSeen: map[uint64]*replayWindow{},
		acks:    map[wire.NodeID]uint64{},
	}
	n.log.init()
	if cfg.Bootstrap {
		n.found()
	} else {
		n.startJoin()
	}
	n.settle()
	return n, nil
}

// Step feeds the machine one message of a received datagram, with the
// datagram's header and its source address (where direct answers go: a node
// may need to answer a sender it does not yet know as a member). The error
// says why a message was dropped; the machine is unchanged then.
func (n *Node) Step(src string, h wire.Header, m wire.Message) error {
	if n.stat == statusDone {
		return ErrStopped
	}
	if h.Group != n.cfg.Group {
		n.stats.Foreign++
		return ErrForeignGroup
	}
	if h.Inc == n.cfg.Inc {
		if src != n.cfg.Addr {
			n.stats.Forged++ // this node's own sender fields, from elsewhere
			return ErrForged
		}
		return nil // our own multicast, looped back
	}
	if m == nil {
		return fmt.Errorf("arbiter: nil message")
	}
	if n.st != nil && h.Instance != 0 && h.Instance != n.st.instance {
		n.stats.Foreign++
		return ErrForeignGroup
	}
	var from *member
	if n.st != nil && h.From != 0 {
		from = n.st.member(h.From)
		if from != nil && !from.sent(h, src) {
			// A member's ID under another incarnation or from another
			// address: a forgery (the sender fields of every member are
			// readable on the wire), or a node that holds an ID from a
			// branch of the log the group did not take, or one the group
			// removed. It is no member: it may ask to join or for
			// decisions, as a newcomer may (and is told it is no member),
			// and nothing it says counts as the member's.
			n.stats.Forged++
			switch m.(type) {
			case *wire.JoinRequest, *wire.Nak, *wire.StateRequest:
				from = nil
			default:
				return ErrForged
			}
		}
	}
	if j, ok := m.(*wire.JoinRequest); ok && j.Addr != src {
		// A newcomer is admitted at the address it sends from: one that
		// names another would have the group take that address's
		// datagrams for its own.
		n.stats.Forged++
		return ErrForged
	}
	if n.implausible(h, m) {
		n.stats.Forged++
		return ErrForged
	}
	if from == nil && n.st != nil && !n.strangerMay(h, m) {
		// A node that still acts as a member under an ID this log has
		// given (and since removed, or given another incarnation) learns
		// that it is none: it may have missed its removal, and may not
		// even look for it (see notMember).
		n.notMember(src, h)
		return ErrNotMember
	}
	if n.join != nil && h.Instance != 0 {
		n.join.sawGroup = true
	}
	if from != nil {
		n.observe(src, h)
		n.noteAck(h)
		n.maxEpoch = max(n.maxEpoch, h.Epoch)
		n.leaveQuiet = 0 // the group is there to record a leave
		if n.srv != nil {
			n.srv.heard[h.From] = n.now
		}
		if _, join := m.(*wire.JoinRequest); !join {
			n.vouch(from)
		}
	}
	if n.hand != nil && from != nil && h.From == n.hand.to && h.T >= n.hand.nextT {
		n.hand = nil // the next server has the SYNC
	}
	if rel, ok := m.(*wire.Release); ok && from != nil {
		n.enterOnRelease(h.From, rel)
	}
	in := inbound{src: src, h: h, m: m, at: n.now}
	var err error
	switch m := m.(type) {
	case wire.Decision:
		err = n.onDecision(src, h, from, m)
	case *wire.JoinRequest:
		n.onJoinRequest(in, m)
	case *wire.Greeting:
		n.onGreeting(src, h, from, m)
	case *wire.Request, *wire.Release, *wire.Cancel, *wire.LeaveRequest:
		if n.srv != nil {
			n.serve(in)
		} else if n.st != nil {
			n.remember(in)
		}
	case *wire.Ping:
		err = n.onPing(src, h, from, m)
	case *wire.PingReply:
		n.onPingReply(h, from, m)
	case *wire.Nak:
		n.onNak(src, h, from, m)
	case *wire.StateRequest:
		n.onStateRequest(src, h, from)
	case *wire.StateChunk:
		err = n.onStateChunk(src, h, from, m)
	case *wire.NotMember:
		n.onNotMember(src, h, from)
	case *wire.Update:
		n.onUpdate(h, m)
	case *wire.Claim:
		n.onClaim(src, h, from, m)
	case *wire.Vote:
		n.onVote(src, h, from, m)
	case *wire.Ack:
		// Its header was noted above: that is its whole content.
	case *wire.AckRequest:
		n.onAckRequest(src, from, m)
	default:
		return fmt.Errorf("arbiter: unexpected message %T", m)
	}
	n.settle()
	return err
}

// Tick advances the machine's time by one tick and runs its timers.
func (n *Node) Tick() { n.TickBy(1) }

// TickBy advances the machine's time by k ticks at once and runs its timers,
// as a runtime that missed k ticks must (the process was paused, or the
// machine suspended): every timer then sees the time it really is. Ticking
// k times instead would replay the gap as if it were the past: a grant
// applied before the pause would take effect in the first of those ticks,
// under a lease that, in truth, ran out long ago.
func (n *Node) TickBy(k uint64) {
	if n.stat == statusDone || k == 0 {
		return
	}
	n.now += k
	if n.join != nil && n.st == nil {
		// A newcomer that was paused has not listened meanwhile: what
		// the group said to it waits unread (an admission, its pings).
		// The missed ticks do not count toward founding, and founding is
		// put off once more (tickJoin), or it would found a second group
		// before it reads them.
		j := n.join
		j.caughtUp = k > 1
		if k > 1 {
			j.waitFrom += k - 1
		} else {
			j.held = false
		}
	}
	if n.st == nil {
		n.tickJoin()
		n.settle()
		return
	}
	if n.join != nil {
		n.tickJoin()
	}
	n.tickRetries()
	n.tickGap()
	n.tickLease()
	n.tickConfirm()
	n.tickTransfer()
	if n.srv != nil {
		n.tickServer()
	}
	n.tickTakeover()
	n.tickHandoff()
	n.settle()
}

// HasReady reports whether there is anything to send or report.
func (n *Node) HasReady() bool { return len(n.out) > 0 || len(n.events) > 0 }

// Ready returns what the machine has produced since the last Advance.
func (n *Node) Ready() Ready {
	h := wire.Header{Group: n.cfg.Group, From: n.id, Inc: n.cfg.Inc, T: n.publishedT(), Epoch: n.promised}
	if n.st != nil {
		h.Instance = n.st.instance
		h.LogEpoch = n.st.epoch
	}
	return Ready{Header: h, Messages: n.out, Events: n.events}
}

// Advance tells the machine that the last Ready has been handled.
func (n *Node) Advance() {
	n.out = nil
	n.events = nil
}

// Acquire asks for the named resource and returns the request's ID. The
// answer comes as an EventQueued and then an EventGranted (or EventLost), or
// as an EventRefused if the group's lock table has no room for it. The
// server decides that, not this node, whose state may lag the server's.
func (n *Node) Acquire(resource string) (uint64, error) {
	if n.stat != statusMember {
		return 0, ErrNotMember
	}
	if err := (&wire.Request{Resource: resource}).Validate(n.cfg.Limits); err != nil {
		return 0, fmt.Errorf("%w: %v", ErrBadName, err)
	}
	if n.held[resource] != nil || n.reqs[resource] != nil {
		return 0, ErrBusy
	}
	n.nextReq++
	p := &pending{resource: resource, req: n.nextReq, since: n.now, sentAt: n.now}
	n.reqs[resource] = p
	n.submit(n.requestMsg(p))
	n.settle()
	return p.req, nil
}

// Release gives up a resource this node holds.
func (n *Node) Release(resource string) error {
	h := n.held[resource]
	if h == nil || n.stat == statusDone {
		return ErrNotHolder
	}
	delete(n.held, resource)
	n.startRelease(resource, h.req, h.token)
	n.settle()
	return nil
}

// Cancel withdraws this node's pending request for a resource. If the grant
// crosses the cancel, the resource is released as soon as it arrives.
func (n *Node) Cancel(resource string) error {
	p := n.reqs[resource]
	if p == nil || n.stat == statusDone {
		return ErrNotWaiting
	}
	delete(n.reqs, resource)
	c := &pending{resource: resource, req: p.req, cancel: true, since: n.now, sentAt: n.now}
	n.rels[p.req] = c
	n.submit(&wire.Cancel{Req: p.req, Resource: resource})
	n.settle()
	return nil
}

// strangerMay reports whether a message from a sender that is no member of
// this node's view may go on to its handler: a join request (a newcomer's),
// a request for decisions or the state (answered by notMember), a decision
// or a ping (from a member admitted by decisions this node lacks: see
// onDecision, pingedByStranger), a state transfer (counted as unasked
// there), and the NotMember of the unknown server a stranded node asked for
// the state (onNotMember). Nothing else a non-member says means anything to a member: the
// operations of a member admitted by decisions this node lacks are sent
// again until decided, by when this node knows it.
func (n *Node) strangerMay(h wire.Header, m wire.Message) bool {
	switch m.(type) {
	case *wire.JoinRequest, *wire.Nak, *wire.StateRequest, wire.Decision, *wire.Ping, *wire.StateChunk:
		return true
	case *wire.NotMember:
		return n.askingStranger() // the answer of the unknown server asked for the state
	}
	return false
}

// Bounds on how far ahead of this node's state a datagram may place the
// group. Epochs grow by one a claim and timestamps by TakeoverGap a
// takeover at most, each a takeover timeout apart, and a member that falls
// behind for longer than a lease is removed: legitimate traffic stays far
// inside them. A datagram beyond them (the sender fields of a member are
// readable on the wire) would have every member promise an epoch or chase a
// timestamp near the top of its range, after which no takeover could be
// numbered: it is dropped as forged.
const (
	maxEpochLead = 1 << 16
	maxTLead     = 1 << 40
)

// implausible reports whether a datagram places the group beyond those
// bounds. A node without state has nothing to measure by.
func (n *Node) implausible(h wire.Header, m wire.Message) bool {
	if n.st == nil {
		return false
	}
	epoch, t := max(n.promised, n.st.epoch), n.st.t
	far := func(e, ts uint64) bool { return e > epoch+maxEpochLead || ts > t+maxTLead }
	switch m := m.(type) {
	case wire.Decision:
		dt, next := m.Stamp()
		if far(m.Era(), max(dt, next)) {
			return true
		}
	case *wire.Claim:
		if far(m.Epoch, 0) {
			return true
		}
	case *wire.Vote:
		if far(max(m.Epoch, m.Prior, m.Won), m.SeenT) {
			return true
		}
	}
	return far(max(h.Epoch, h.LogEpoch), h.T)
}

// LeaveUnconfirmed is the Reason of an EventLeft that no decision of the
// group confirmed: the node gave up asking, and the group may still count it
// as a member until it removes it.
const LeaveUnconfirmed = "leave not confirmed; assuming the group has dropped this node"

// Leave asks the group to record this node's departure; EventLeft follows.
// The resources it holds are released by the same decision.
func (n *Node) Leave() error {
	if n.stat != statusMember && n.stat != statusSyncing {
		return ErrNotMember
	}
	if n.leave != nil {
		return nil
	}
	// The Left decision frees what this node holds and drops what it waits
	// for, and other members may be granted those resources before this node
	// hears of it: so it gives them all up now, and takes no grant from here
	// on.
	for _, name := range sortedKeys(n.held) {
		h := n.held[name]
		n.emit(Event{Kind: EventLost, Node: n.id, Resource: name, Req: h.req, Token: h.token, Reason: "leaving the group"})
	}
	n.held = map[string]*holding{}
	n.reqs = map[string]*pending{}
	n.rels = map[uint64]*pending{}
	n.leave = &pending{since: n.now, sentAt: n.now}
	n.leaveQuiet = 0
	if n.srv != nil && len(n.st.members) > 1 {
		// Finish the turn first, then leave as a member; a lone voter
		// promotes an observer first (endTurn).
		n.srv.leaving = true
		n.settle()
	}
	n.submit(&wire.LeaveRequest{})
	n.settle()
	return nil
}

// Publish multicasts an application state update.
func (n *Node) Publish(topic string, data []byte) error {
	if n.stat != statusMember {
		return ErrNotMember
	}
	n.updSeq++
	u := &wire.Update{Seq: n.updSeq, Topic: topic, Data: slices.Clone(data)}
	if err := u.Validate(n.cfg.Limits); err != nil {
		n.updSeq--
		return fmt.Errorf("%w: %v", ErrBadUpdate, err)
	}
	n.multicast(u)
	return nil
}

// submit sends one of this node's own operations: straight into the server
// logic if this node is the server and may decide now (self-delivery costs
// no datagram), else by multicast. An operation that applying a decision
// gives rise to (releasing a grant nobody wants any more) waits until the
// decision is applied: a decision made in the middle of applying another
// would take the same timestamp.
func (n *Node) submit(m wire.Message) {
	if n.applying > 0 {
		n.afterApply = append(n.afterApply, m)
		return
	}
	if n.srv != nil && n.canDecide() {
		n.serve(inbound{src: n.cfg.Addr, h: n.selfHeader(), m: m, at: n.now})
		return
	}
	n.multicast(m)
	n.out[len(n.out)-1].For = n.recipients(m)
}

// recipients names the members one of this node's operations is for (see
// wire.Recipients): a request or a cancel is for the server, which decides
// it, and the backup, the next server, which serves what it overheard if
// the turn passes before the server decided; a release is for them and the
// head of the resource's queue, which takes the resource on hearing it
// (enterOnRelease). Everything else, and a retry (the log may have moved on
// since the first send), is for every member. So is whatever the backup
// sends: its header shows every member the log position it holds (noteAck),
// and it sends no Ack when a multicast to all carries it.
func (n *Node) recipients(m wire.Message) wire.Recipients {
	st := n.st
	if st == nil || n.srv != nil || st.backup == 0 || st.backup == n.id {
		return wire.Recipients{}
	}
	srv := st.server()
	switch m := m.(type) {
	case *wire.Request:
		if !m.Retry {
			return wire.RecipientsOf(srv, st.backup)
		}
	case *wire.Cancel:
		if !m.Retry {
			return wire.RecipientsOf(srv, st.backup)
		}
	case *wire.Release:
		if !m.Retry {
			return wire.RecipientsOf(srv, st.backup, n.nextHolder(m.Resource))
		}
	}
	return wire.Recipients{}
}

// nextHolder is the member that takes the resource when this node releases
// it, as far as its log shows: the first in the queue that is not this node
// (which may itself still be queued there, having taken the resource on its
// holder's release); the server when the queue is empty.
func (n *Node) nextHolder(resource string) wire.NodeID {
	if r := n.st.resources[resource]; r != nil {
		for _, q := range r.queue {
			if q.Node != n.id {
				return q.Node
			}
		}
	}
	return n.st.server()
}

func (n *Node) selfHeader() wire.Header {
	return wire.Header{Group: n.cfg.Group, Instance: n.st.instance, From: n.id, Inc: n.cfg.Inc, T: n.st.t,
		Epoch: n.promised, LogEpoch: n.st.epoch}
}

func (n *Node) requestMsg(p *pending) *wire.Request {
	return &wire.Request{Req: p.req, Resource: p.resource, Floor: n.floor()}
}

// floor is the highest request ID at and below which this node will never
// send a request again: the server may forget which of them it decided. A
// request still pending counts, even one queued or granted by a decision
// this node applied: a takeover may cut that decision off with the branch of
// the log it was on, and the node then asks again under the same ID
// (reconcile). Seed 195 of TestPropertySeededCuts: a node sent requests with
// a floor above one queued by a decision that a takeover then cut off, and
// the next epoch's server took that request, asked again, for decided. The
// list of decided requests this leaves the state to keep stays short: see
// member.markDecided.
func (n *Node) floor() uint64 {
	f := n.nextReq
	for _, p := range n.reqs {
		if p.req <= f {
			f = p.req - 1
		}
	}
	for _, p := range n.rels {
		if p.cancel && p.req <= f {
			f = p.req - 1
		}
	}
	return f
}

func (n *Node) startRelease(resource string, req, token uint64) {
	n.rels[req] = &pending{resource: resource, req: req, token: token, since: n.now, sentAt: n.now}
	n.submit(&wire.Release{Req: req, Resource: resource, Token: token})
}

// tickRetries sends again every operation whose decision has not arrived.
func (n *Node) tickRetries() {
	retry := uint64(n.cfg.RetryTicks)
	n.retry(retry)
	if n.leave != nil && n.now-n.leave.sentAt >= retry {
		n.leave.sentAt = n.now
		n.leaveQuiet++
		if uint64(n.leaveQuiet)*retry > uint64(n.st.params.LeaseTicks+n.st.params.LeaseMarginTicks) {
			// No member was heard for a whole lease of retries: the group
			// has removed this node or is gone. Either way it is out. As
			// long as members are heard it keeps asking: a member that
			// gave up while the group still counts it (as a server that
			// waited out a takeover, or a process paused while leaving,
			// would) is a member lost to a group that may have no majority
			// left without it.
			n.finish(EventLeft, LeaveUnconfirmed)
			return
		}
		n.submit(&wire.LeaveRequest{})
	}
}

// retry sends again this node's requests, releases and cancels that have
// waited at least "after" ticks for their decision. A server's own are
// decided as they are sent, and a decision may settle others of the list
// (a grant taking effect, a release's): those are skipped. Seed 3488 of
// TestPropertySeededCuts: a server replaying a burst of its own requests
// crashed on one that the grant of another had taken out.
func (n *Node) retry(after uint64) {
	for _, name := range sortedKeys(n.reqs) {
		p := n.reqs[name]
		if p == nil {
			continue
		}
		if !p.queued && p.granted == 0 && n.now-p.sentAt >= after {
			p.sentAt = n.now
			m := n.requestMsg(p)
			m.Retry = true
			n.submit(m)
		}
	}
	for _, req := range sortedKeys(n.rels) {
		p := n.rels[req]
		if p == nil {
			continue
		}
		wait := after
		if r := n.st.resources[p.resource]; !p.cancel && after > 0 && (r == nil || len(r.queue) == 0) {
			// With nobody queued, the server may hold the release's
			// decision until its next ping (see parks). With somebody
			// queued it hands the resource over at once, and a lost
			// release must not keep the next holder waiting longer.
			wait += uint64(n.cfg.HeartbeatTicks)
		}
		if n.now-p.sentAt < wait {
			continue
		}
		p.sentAt = n.now
		if p.cancel {
			n.submit(&wire.Cancel{Req: p.req, Resource: p.resource, Retry: true})
		} else {
			n.submit(&wire.Release{Req: p.req, Resource: p.resource, Token: p.token, Retry: true})
		}
	}
}

// resubmit serves a new server's own undecided operations at once: they may
// have reached the previous server too late for its turn.
func (n *Node) resubmit() { n.retry(0) }

// answeredPings is how many pings' replies a member remembers: the one
// before the current ping to all, and direct pings in between.
const answeredPings = 16

type answer struct {
	server wire.NodeID
	probe  uint64
	at     uint64
}

// noteAnswer records this node's first reply to a ping.
func (n *Node) noteAnswer(server wire.NodeID, probe uint64) {
	oldest := 0
	for i, a := range n.answered {
		if a.server == server && a.probe == probe {
			return
		}
		if a.at < n.answered[oldest].at {
			oldest = i
		}
	}
	n.answered[oldest] = answer{server: server, probe: probe, at: n.now}
}

// answeredAt returns the tick of this node's first reply to a ping.
func (n *Node) answeredAt(server wire.NodeID, probe uint64) (uint64, bool) {
	for _, a := range n.answered {
		if a.server == server && a.probe == probe && a.at != 0 {
			return a.at, true
		}
	}
	return 0, false
}

// renew extends the lease from a tick at which this node is known to have
// been heard by a server.
func (n *Node) renew(at uint64) {
	if at > n.anchor {
		n.anchor = at
	}
	n.askedStranger = strangerAsk{} // a server this node knows heard it: it is stranded no more
}

func (n *Node) leaseExpired() bool {
	return n.st != nil && n.now >= n.anchor+n.st.params.LeaseTicks
}

// tickLease fences this node: once its lease has run out it must assume the
// group may reclaim what it holds, so it stops using it and releases it; and
// it gives up the grants it waits to see take effect (see dropPendingGrants).
func (n *Node) tickLease() {
	if !n.leaseExpired() {
		return
	}
	for _, name := range sortedKeys(n.held) {
		h := n.held[name]
		if h == nil {
			continue // released meanwhile, by a decision of this node's own serving
		}
		delete(n.held, name)
		n.stats.Fenced++
		n.emit(Event{Kind: EventLost, Node: n.id, Resource: name, Req: h.req, Token: h.token, Expired: true,
			Reason: fmt.Sprintf("lease expired: no confirmed contact with the group for %d ticks", n.now-n.anchor)})
		n.startRelease(name, h.req, h.token)
	}
	n.dropPendingGrants()
}

// dropPendingGrants gives back every grant decided for this node that has
// not taken effect, once its lease has run out: the application asks again.
// A grant must take effect under a lease that never lapsed since the grant
// reached this node. Otherwise the group may have removed this node
// meanwhile, on a branch of the log that a takeover then cut off, and handed
// the resource on (early, to the head of its queue; see confirm.go) with a
// higher token: a lease renewed in the new epoch would let the old grant take
// effect beside that holder, and its token would go back.
func (n *Node) dropPendingGrants() {
	for _, name := range sortedKeys(n.reqs) {
		p := n.reqs[name]
		if p == nil || p.granted == 0 {
			continue // p nil: settled meanwhile, by a decision of this node's own serving
		}
		delete(n.reqs, name)
		n.stats.Fenced++
		n.emit(Event{Kind: EventLost, Node: n.id, Resource: name, Req: p.req, Token: p.granted, Expired: true,
			Reason: "lease expired before the grant took effect"})
		n.startRelease(name, p.req, p.granted)
	}
}

// finish stops the node for good.
func (n *Node) finish(kind EventKind, reason string) {
	for _, name := range sortedKeys(n.held) {
		h := n.held[name]
		n.emit(Event{Kind: EventLost, Node: n.id, Resource: name, Req: h.req, Token: h.token, Reason: reason})
	}
	n.held = map[string]*holding{}
	n.reqs = map[string]*pending{}
	n.rels = map[uint64]*pending{}
	n.leave, n.srv, n.hand, n.join, n.claim = nil, nil, nil, nil, nil
	n.stat = statusDone
	n.emit(Event{Kind: kind, Node: n.id, Reason: reason})
}

func (n *Node) emit(e Event) {
	if n.st != nil && e.T == 0 {
		e.T = n.st.t
	}
	if n.st != nil && e.Epoch == 0 {
		e.Epoch = n.st.epoch
	}
	n.events = append(n.events, e)
}

// multicast queues a message for the whole group. A server first flushes the
// decisions it holds back, which then share the datagram.
func (n *Node) multicast(m wire.Message) {
	if n.srv != nil {
		n.flush()
		n.srv.lastCast = n.now
	}
	n.out = append(n.out, Outbound{Msg: m})
}

// sendTo queues a message directly to a member, if its address is known.
func (n *Node) sendTo(id wire.NodeID, m wire.Message) {
	if n.st == nil {
		return
	}
	if mem := n.st.member(id); mem != nil && mem.addr != "" {
		n.out = append(n.out, Outbound{To: id, Addr: mem.addr, Msg: m})
	}
}

// reply queues a message directly to the source of a received datagram.
func (n *Node) reply(in inbound, m wire.Message) {
	n.out = append(n.out, Outbound{To: in.h.From, Addr: in.src, Msg: m})
}

func (n *Node) publishedT() uint64 {
	switch {
	case n.st == nil:
		return 0
	case n.srv != nil:
		return n.log.published
	}
	return n.st.t
}

// sortedKeys returns a map's keys in order: timers and reports walk maps only
// this way, so that the machine stays deterministic.
func sortedKeys[K interface{ ~string | ~uint64 }, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
