package wire

import (
	"fmt"
	"slices"
)

// NodeID is a member's logical ID: assigned by the server in the OK_TO_JOIN
// decision, increasing in join order, never reused. Zero means "no ID yet".
type NodeID uint64

// Kind is the type byte that precedes every message on the wire.
type Kind uint8

// Message kinds. ONLY APPEND TO THIS LIST: the values are on the wire, and a
// node skips kinds it does not know, so a new kind must never reuse a number.
const (
	KindJoinRequest  Kind = 0x01 // newcomer → group: please admit me
	KindOkToJoin     Kind = 0x02 // decision: newcomer admitted (paper: OK_TO_JOIN)
	KindGroupFull    Kind = 0x03 // decision: newcomer refused (paper: GROUP_FULL)
	KindGreeting     Kind = 0x04 // member → newcomer, direct: here I am
	KindLeaveRequest Kind = 0x05 // member → group: I am leaving
	KindLeft         Kind = 0x06 // decision: member left
	KindRequest      Kind = 0x07 // member → group: I want resource R
	KindGrant        Kind = 0x08 // decision: request granted or queued (paper: RESPONSE)
	KindRelease      Kind = 0x09 // holder → group: I am done with R
	KindCancel       Kind = 0x0a // member → group: withdraw my request for R
	KindReleased     Kind = 0x0b // decision: R released (or a request withdrawn)
	KindPing         Kind = 0x0c // server → group, start of turn (paper figure A)
	KindPingReply    Kind = 0x0d // member → server
	KindSync         Kind = 0x0e // decision: end of turn, hand-over (paper section 3.3)
	KindNak          Kind = 0x0f // negative acknowledgement: I miss decisions from T
	KindStateRequest Kind = 0x10 // please send me your replicated state
	KindStateChunk   Kind = 0x11 // one piece of a state transfer
	KindUpdate       Kind = 0x12 // application state update (paper: "system state update")
	// 0x13 was version 1's idle-server heartbeat; the server's periodic Ping
	// took its place. Never reuse it.
	KindTakeover   Kind = 0x14 // decision: a new epoch begins with this server (takeover)
	KindClaim      Kind = 0x15 // candidate → group: vote for me as server of a new epoch
	KindVote       Kind = 0x16 // member → candidate: the answer to a Claim
	KindAck        Kind = 0x17 // backup → group (or a member → server): I have applied the log below header T
	KindAckRequest Kind = 0x18 // grantee → backup: have you applied my grant yet?
	KindNotMember  Kind = 0x19 // member → a node that asked as a member: the group's log does not list you
)

var kindNames = map[Kind]string{
	KindJoinRequest: "join-request", KindOkToJoin: "ok-to-join", KindGroupFull: "group-full",
	KindGreeting: "greeting", KindLeaveRequest: "leave-request", KindLeft: "left",
	KindRequest: "request", KindGrant: "grant", KindRelease: "release", KindCancel: "cancel",
	KindReleased: "released", KindPing: "ping", KindPingReply: "ping-reply", KindSync: "sync",
	KindNak: "nak", KindStateRequest: "state-request", KindStateChunk: "state-chunk",
	KindUpdate: "update", KindTakeover: "takeover", KindClaim: "claim", KindVote: "vote",
	KindAck: "ack", KindAckRequest: "ack-request", KindNotMember: "not-member",
}

// String returns the kind's name, or its number for an unknown kind.
func (k Kind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("kind(0x%02x)", uint8(k))
}

// Kinds returns every known kind in type-byte order.
func Kinds() []Kind {
	out := make([]Kind, 0, len(kindNames))
	for k := range kindNames {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Message is one protocol message. The sender's ID, incarnation, group
// timestamp and epochs travel once per datagram, in the Header.
type Message interface {
	// Kind returns the message's type byte.
	Kind() Kind
	// Validate checks every length and value against the limits; Decode
	// calls it on every message it returns and the encoder before it sends.
	Validate(l Limits) error
}

// Decision is a message that the server sequences into the group's log. It
// was decided at timestamp T in epoch Epoch; applying it moves the group
// timestamp to Next, which is T+1 except where the decision hands the turn
// over (SYNC), changes the view or begins an epoch (Takeover), in which case
// Next is the first timestamp of the next server's turn in the new view.
//
// A decision is named by (Epoch, T): within an epoch there is one log, so two
// decisions with the same epoch and T are the same decision wherever they are
// found; decisions of different epochs at one T are not.
type Decision interface {
	Message
	// Stamp returns the decision's timestamp and the timestamp after it.
	Stamp() (t, next uint64)
	// Era returns the epoch the decision was made in.
	Era() uint64
}

// JoinRequest asks the group for admission (paper section 3.2). A newcomer
// multicasts it until it is a member; Missing lists the members whose
// greeting it still lacks, HaveState whether it has the replicated state.
// Observer asks to join as a member that does not vote (see OkToJoin).
type JoinRequest struct {
	_struct   struct{} `codec:",toarray"`
	Inc       uint64   // the newcomer's random incarnation ID
	Addr      string   // where members can reach the newcomer directly
	HaveState bool
	Missing   []NodeID
	Observer  bool
}

// OkToJoin is the server's decision to admit a newcomer (OK_TO_JOIN). It
// carries the new logical ID and the number of members, as in the paper.
//
// Observer admits the newcomer as an observer: a member that takes locks
// but neither votes, nor serves, nor backs the server up, and that no
// majority counts. A newcomer that asked to be one is admitted as one
// while the group has enough voters (see arbiter.MinVoters); its joining,
// leaving and death then leave the majorities as they were.
type OkToJoin struct {
	_struct  struct{} `codec:",toarray"`
	T, Next  uint64
	Epoch    uint64
	Inc      uint64 // the newcomer's incarnation, from its JoinRequest
	ID       NodeID // the logical ID it is given
	Addr     string
	Members  uint32 // members after the join, the newcomer included
	Observer bool
	// Transient: the newcomer asked to be an observer. Admitted as a voter
	// (the group was short of voters), it is one only while needed: a
	// SYNC makes it an observer again (Sync.Demote) once the group has
	// more voters than it needs.
	Transient bool
}

// GroupFull is the server's decision to refuse a newcomer (GROUP_FULL).
type GroupFull struct {
	_struct struct{} `codec:",toarray"`
	T, Next uint64
	Epoch   uint64
	Inc     uint64
	Max     uint32 // the group's size limit
}

// Greeting is sent by every member directly to a newcomer once it has
// applied the OkToJoin: the member's own information. The newcomer is a member
// once it has been greeted by every member (paper section 3.2).
type Greeting struct {
	_struct  struct{} `codec:",toarray"`
	Newcomer NodeID   // the member being greeted
	Addr     string   // the sender's direct address
}

// LeaveRequest asks the server to record that the sender leaves the group.
type LeaveRequest struct {
	_struct struct{} `codec:",toarray"`
}

// Left is the server's decision that a member left: its resources are
// released and its queued requests dropped.
type Left struct {
	_struct struct{} `codec:",toarray"`
	T, Next uint64
	Epoch   uint64
	ID      NodeID
}

// Request asks for a resource. Req is unique per sender and increasing;
// Floor tells the server that every request of the sender numbered Floor or
// less has been decided, so that it can forget them (idempotence with
// bounded state).
type Request struct {
	_struct  struct{} `codec:",toarray"`
	Req      uint64
	Resource string
	Floor    uint64
	// Retry marks a retransmission: the sender has waited for the decision
	// in vain, so it may have missed it, and the server sends what it lacks.
	// A first transmission that crossed its decision in flight does not.
	Retry bool
}

// Grant is the server's decision on a request (the paper's RESPONSE): the
// resource is given to Node if it was free, else Node joins its FIFO queue
// (Queued). The fencing token of a grant is the T of the decision that gives
// the resource.
type Grant struct {
	_struct  struct{} `codec:",toarray"`
	T, Next  uint64
	Epoch    uint64
	Node     NodeID
	Req      uint64
	Resource string
	Floor    uint64
	Queued   bool
}

// Release is the holder's release of a resource it holds under Token.
type Release struct {
	_struct  struct{} `codec:",toarray"`
	Req      uint64
	Resource string
	Token    uint64
	Retry    bool // as in Request
}

// Cancel withdraws a request that has not been granted.
type Cancel struct {
	_struct  struct{} `codec:",toarray"`
	Req      uint64
	Resource string
	Retry    bool // as in Request
}

// Released is the server's decision that Node released Resource (held under
// Token) or, with Withdrawn, that request Req is withdrawn: Node cancelled
// it, or, if Node did not, the server refused it for want of room in the
// lock table. The head of the resource's queue, if any, holds it from this
// decision on. A refusal carries its request's Floor, as a Grant does, so
// that the state's floor for Node rises with refusals as with grants.
type Released struct {
	_struct   struct{} `codec:",toarray"`
	T, Next   uint64
	Epoch     uint64
	Node      NodeID
	Req       uint64
	Resource  string
	Token     uint64
	Withdrawn bool
	Floor     uint64
}

// Ping is multicast by the server at the start of its turn (paper figure A)
// and sent again, directly, to members that have not answered.
type Ping struct {
	_struct struct{} `codec:",toarray"`
	Turn    uint64   // the T at which the server's turn began: names the turn
	// Probe numbers the server's pings, so that a reply is counted for the
	// ping it answers and no newer one.
	Probe uint64
	// Reachable is how many members (the server included) answered the
	// server's last ping: fewer than a majority, and the server decides
	// nothing, which its members report.
	Reachable uint32
	// Prev, if not 0, is the server's previous ping to all, and Unanswered
	// every member of its view whose answer to it the server had not heard
	// when it sent this one, with a majority's authority: every other member
	// of that view (ViewT, the T of its last change) that answered Prev
	// renews its lease from its answer. 0 when the server had no authority,
	// or the list would not fit.
	Prev       uint64
	ViewT      uint64
	Unanswered []NodeID
	// ByAnswer: Unanswered would not fit (many members died at once), and
	// Answered lists instead the members that answered Prev: they alone
	// renew their leases from it.
	ByAnswer bool
	Answered []NodeID
}

// PingReply answers a Ping, directly to the server, echoing Turn and Probe.
type PingReply struct {
	_struct struct{} `codec:",toarray"`
	Turn    uint64
	Probe   uint64
}

// Silence records that a member was not heard during a turn (or, in
// Sync.Quiet, not lately), and for how many ticks in all it has not been
// heard.
type Silence struct {
	_struct struct{} `codec:",toarray"`
	ID      NodeID
	Ticks   uint64
}

// Sync ends a server's turn (paper section 3.3): members not heard during the
// turn are listed (Unheard, with how long they have been silent), at most one
// voter silent for longer than the lease is removed (its resources
// reclaimed), and so is every such observer (RemoveObservers); Next names
// the first timestamp of the next server's turn. Unanswered lists the
// members heard during the turn that answered none of its pings: they are
// not silent, but the SYNC renews no lease of theirs, since a member renews
// from its own answer, which the server never got. The next server is
// always the one that was the backup (it holds every decision); Backup
// names the member that will back the next server up in turn. Digest is a
// hash of the replicated state after the Sync is applied, which every node
// (the next server first) checks against its own.
//
// One removal of a voter at a time, and only once the previous change of
// the view is known to a majority: any two majorities of views that differ
// by one member intersect, which is what keeps a takeover from finding a
// majority that knows nothing of the last view.
//
// Partial says that Unheard and Unanswered did not fit the datagram:
// Unheard was cut short, and the members it leaves out are no more heard
// than those it lists, as far as anyone can tell. A Partial SYNC renews the
// leases of the members in Renew only (the members heard that answered,
// when they fit; else nobody's).
//
// Promote makes an observer a voter (0: nobody), when the group has fewer
// voters than it should; Demote makes a voter that asked to be an
// observer (a transient one: promoted, or admitted as a voter while the
// group was short) an observer again, when the group has more. Each
// changes the voters as a join or a removal does, so it too waits for the
// last change to be known to a majority, and a SYNC makes one change of
// the voters at most: a removal, a promotion or a demotion.
//
// RemoveObservers removes observers silent for longer than the lease, all of
// them at once, in this order, after Remove: an observer counts in no
// majority, so removing one changes none, and a script host whose lock
// commands all died is cleared in a turn or two, not one turn per command.
// No member goes together with the holder of a resource whose queue it
// heads (the arbiter's state.headsRemovedWithHolders says why).
//
// Quiet lists members heard during the turn, but not lately: for how many
// ticks they had not been heard when the SYNC was made. Their silence goes
// on from there, where that of a member not listed starts at zero: a member
// that dies just after it was heard is reclaimed a lease and its margin
// after, not up to a turn later. A member's lease runs from a message the
// server heard (see the arbiter's doc), so none is renewed past when it
// was last heard.
type Sync struct {
	_struct    struct{} `codec:",toarray"`
	T, Next    uint64
	Epoch      uint64
	Turn       uint64
	Unheard    []Silence
	Unanswered []NodeID
	Remove     NodeID // 0: nobody
	Backup     NodeID
	Digest     uint64
	Partial    bool
	Renew      []NodeID
	Promote    NodeID // 0: nobody
	Demote     NodeID // 0: nobody
	// RemoveObservers: see above (version 7).
	RemoveObservers []NodeID
	// Quiet: see above (version 10).
	Quiet []Silence
}

// Removed lists the members the Sync removes: Remove, if any, then
// RemoveObservers.
func (m *Sync) Removed() []NodeID {
	if m.Remove == 0 {
		return m.RemoveObservers
	}
	return append([]NodeID{m.Remove}, m.RemoveObservers...)
}

// Takeover begins a new epoch (a decision). A member that has not heard the
// server for the takeover timeout asks the others for their votes (Claim);
// with the votes of a majority of its view it brings its log up to the most
// advanced of theirs and decides Takeover at the timestamp that follows it.
// Members that voted for the epoch refuse everything from lower epochs, so
// the old server, if it is only cut off, can decide nothing any more.
//
// PrevEpoch is the epoch of the decision before this one: a member whose
// own last decision is of another epoch holds a log that went another way,
// and takes a state transfer instead. Server is the new server (the
// schedule's server at Next), Backup the member that backs it up. Wait says
// the new server could not prove that it knows every grant the old epoch
// made, so it grants nothing for a lease (and its margin) after it won.
type Takeover struct {
	_struct   struct{} `codec:",toarray"`
	T, Next   uint64
	Epoch     uint64
	PrevEpoch uint64
	Server    NodeID
	Backup    NodeID
	Wait      bool
}

// Claim asks for votes to become the server of Epoch. A pre-claim (Pre)
// changes nothing at the voters: it asks whether they would vote, so that a
// member cut off from the group cannot raise the epoch and disrupt it when
// it comes back (the pre-vote of Ongaro's Raft thesis, 2014, section 9.6).
// The candidate's log position is in the datagram header (LogEpoch, T).
// Attempt numbers the candidate's claims: a pre-claim promises nothing, so a
// failed one leaves the epoch free and the next asks for the same one, and
// votes echo the attempt so that a late vote answers only its own.
type Claim struct {
	_struct struct{} `codec:",toarray"`
	Epoch   uint64
	Pre     bool
	Attempt uint64
}

// Vote answers a Claim. Granted votes carry what the candidate needs to take
// over safely: Prior, the highest epoch below the claimed one the voter had
// promised, and PriorFor, the member it voted for in it (0: none); Won, the
// highest epoch the voter itself took over as server (0: none); and SeenT,
// the highest timestamp the voter has seen on the wire. The voter's log
// position is in the datagram header (LogEpoch, T).
type Vote struct {
	_struct  struct{} `codec:",toarray"`
	Epoch    uint64
	Pre      bool
	Granted  bool
	Prior    uint64
	SeenT    uint64
	Attempt  uint64 // the Claim's
	PriorFor NodeID
	Won      uint64
}

// Ack says that the sender has applied every decision below the T in its
// header, in the epoch in its header's LogEpoch. The backup sends it to the
// member that waits on a decision it applied (a grantee may enter only once
// the backup holds its grant), and multicasts it on becoming the backup;
// members send it to the server after a change of the view or the epoch.
type Ack struct {
	_struct struct{} `codec:",toarray"`
}

// AckRequest asks the backup for an Ack once it has applied the decisions
// below T: a grantee whose Ack was lost sends it.
type AckRequest struct {
	_struct struct{} `codec:",toarray"`
	T       uint64
}

// Nak asks for the decisions from timestamp From on (at most Count of them):
// the receiver missed them.
type Nak struct {
	_struct struct{} `codec:",toarray"`
	From    uint64
	Count   uint32
}

// StateRequest asks the receiver for a copy of its replicated state.
type StateRequest struct {
	_struct struct{} `codec:",toarray"`
}

// StateChunk is piece Index of Count of an encoded Snapshot at timestamp T.
// Digest is the digest of the state the whole snapshot holds (the one a SYNC
// carries): the receiver checks the state it reassembled against it, so that
// chunks of two different states are never installed as one.
type StateChunk struct {
	_struct struct{} `codec:",toarray"`
	T       uint64
	Index   uint32
	Count   uint32
	Data    []byte
	Digest  uint64
}

// NotMember answers a node that asked for decisions or for the state as a
// member (its header names a member's ID) when the sender's log, at the
// position in the sender's header, lists no such member at that address
// and incarnation. A node whose own log is not ahead of the sender's then
// knows the group removed it, or recorded it as gone, and rejoins as a new
// incarnation. It is sent instead of the state, which only members and
// admitted newcomers are given. Its header's For names the ID it answers:
// a node that has rejoined under a new ID since it asked ignores it (older
// peers name none, and are believed).
type NotMember struct {
	_struct struct{} `codec:",toarray"`
}

// Update is an application state update (the paper's "system state update"),
// multicast by any member; Seq orders one sender's updates.
type Update struct {
	_struct struct{} `codec:",toarray"`
	Seq     uint64
	Topic   string
	Data    []byte
}

// Kind implementations.

func (*JoinRequest) Kind() Kind  { return KindJoinRequest }
func (*OkToJoin) Kind() Kind     { return KindOkToJoin }
func (*GroupFull) Kind() Kind    { return KindGroupFull }
func (*Greeting) Kind() Kind     { return KindGreeting }
func (*LeaveRequest) Kind() Kind { return KindLeaveRequest }
func (*Left) Kind() Kind         { return KindLeft }
func (*Request) Kind() Kind      { return KindRequest }
func (*Grant) Kind() Kind        { return KindGrant }
func (*Release) Kind() Kind      { return KindRelease }
func (*Cancel) Kind() Kind       { return KindCancel }
func (*Released) Kind() Kind     { return KindReleased }
func (*Ping) Kind() Kind         { return KindPing }
func (*PingReply) Kind() Kind    { return KindPingReply }
func (*Sync) Kind() Kind         { return KindSync }
func (*Nak) Kind() Kind          { return KindNak }
func (*StateRequest) Kind() Kind { return KindStateRequest }
func (*StateChunk) Kind() Kind   { return KindStateChunk }
func (*Update) Kind() Kind       { return KindUpdate }
func (*Takeover) Kind() Kind     { return KindTakeover }
func (*Claim) Kind() Kind        { return KindClaim }
func (*Vote) Kind() Kind         { return KindVote }
func (*Ack) Kind() Kind          { return KindAck }
func (*AckRequest) Kind() Kind   { return KindAckRequest }
func (*NotMember) Kind() Kind    { return KindNotMember }

// Stamp implementations: the decisions.

func (m *OkToJoin) Stamp() (uint64, uint64)  { return m.T, m.Next }
func (m *GroupFull) Stamp() (uint64, uint64) { return m.T, m.Next }
func (m *Left) Stamp() (uint64, uint64)      { return m.T, m.Next }
func (m *Grant) Stamp() (uint64, uint64)     { return m.T, m.Next }
func (m *Released) Stamp() (uint64, uint64)  { return m.T, m.Next }
func (m *Sync) Stamp() (uint64, uint64)      { return m.T, m.Next }
func (m *Takeover) Stamp() (uint64, uint64)  { return m.T, m.Next }

func (m *OkToJoin) Era() uint64  { return m.Epoch }
func (m *GroupFull) Era() uint64 { return m.Epoch }
func (m *Left) Era() uint64      { return m.Epoch }
func (m *Grant) Era() uint64     { return m.Epoch }
func (m *Released) Era() uint64  { return m.Epoch }
func (m *Sync) Era() uint64      { return m.Epoch }
func (m *Takeover) Era() uint64  { return m.Epoch }

// newMessage returns an empty message of kind k, or nil for an unknown kind.
func newMessage(k Kind) Message {
	switch k {
	case KindJoinRequest:
		return &JoinRequest{}
	case KindOkToJoin:
		return &OkToJoin{}
	case KindGroupFull:
		return &GroupFull{}
	case KindGreeting:
		return &Greeting{}
	case KindLeaveRequest:
		return &LeaveRequest{}
	case KindLeft:
		return &Left{}
	case KindRequest:
		return &Request{}
	case KindGrant:
		return &Grant{}
	case KindRelease:
		return &Release{}
	case KindCancel:
		return &Cancel{}
	case KindReleased:
		return &Released{}
	case KindPing:
		return &Ping{}
	case KindPingReply:
		return &PingReply{}
	case KindSync:
		return &Sync{}
	case KindNak:
		return &Nak{}
	case KindStateRequest:
		return &StateRequest{}
	case KindStateChunk:
		return &StateChunk{}
	case KindUpdate:
		return &Update{}
	case KindTakeover:
		return &Takeover{}
	case KindClaim:
		return &Claim{}
	case KindVote:
		return &Vote{}
	case KindAck:
		return &Ack{}
	case KindAckRequest:
		return &AckRequest{}
	case KindNotMember:
		return &NotMember{}
	}
	return nil
}

// IsDecision reports whether messages of kind k are sequenced decisions.
func (k Kind) IsDecision() bool {
	switch k {
	case KindOkToJoin, KindGroupFull, KindLeft, KindGrant, KindReleased, KindSync, KindTakeover:
		return true
	}
	return false
}
