package wire

import "fmt"

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
	KindHeartbeat    Kind = 0x13 // server → group when idle: carries T
)

var kindNames = map[Kind]string{
	KindJoinRequest: "join-request", KindOkToJoin: "ok-to-join", KindGroupFull: "group-full",
	KindGreeting: "greeting", KindLeaveRequest: "leave-request", KindLeft: "left",
	KindRequest: "request", KindGrant: "grant", KindRelease: "release", KindCancel: "cancel",
	KindReleased: "released", KindPing: "ping", KindPingReply: "ping-reply", KindSync: "sync",
	KindNak: "nak", KindStateRequest: "state-request", KindStateChunk: "state-chunk",
	KindUpdate: "update", KindHeartbeat: "heartbeat",
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
	for k := KindJoinRequest; k <= KindHeartbeat; k++ {
		out = append(out, k)
	}
	return out
}

// Message is one protocol message. The sender's ID, incarnation and group
// timestamp travel once per datagram, in the Header.
type Message interface {
	// Kind returns the message's type byte.
	Kind() Kind
	// Validate checks every length and value against the limits; Decode
	// calls it on every message it returns and the encoder before it sends.
	Validate(l Limits) error
}

// Decision is a message that the server sequences into the group's log. It
// was decided at timestamp T; applying it moves the group timestamp to Next,
// which is T+1 except where the decision hands the turn over (SYNC) or
// changes the view, in which case Next is the first timestamp of the next
// server's turn in the new view.
type Decision interface {
	Message
	// Stamp returns the decision's timestamp and the timestamp after it.
	Stamp() (t, next uint64)
}

// JoinRequest asks the group for admission (paper section 3.2). A newcomer
// multicasts it until it is a member; Missing lists the members whose
// greeting it still lacks, HaveState whether it has the replicated state.
type JoinRequest struct {
	_struct   struct{} `codec:",toarray"`
	Inc       uint64   // the newcomer's random incarnation ID
	Addr      string   // where members can reach the newcomer directly
	HaveState bool
	Missing   []NodeID
}

// OkToJoin is the server's decision to admit a newcomer (OK_TO_JOIN). It
// carries the new logical ID and the number of members, as in the paper.
type OkToJoin struct {
	_struct struct{} `codec:",toarray"`
	T, Next uint64
	Inc     uint64 // the newcomer's incarnation, from its JoinRequest
	ID      NodeID // the logical ID it is given
	Addr    string
	Members uint32 // members after the join, the newcomer included
}

// GroupFull is the server's decision to refuse a newcomer (GROUP_FULL).
type GroupFull struct {
	_struct struct{} `codec:",toarray"`
	T, Next uint64
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
// Token) or, with Withdrawn, that it withdrew request Req. The head of the
// resource's queue, if any, holds it from this decision on.
type Released struct {
	_struct   struct{} `codec:",toarray"`
	T, Next   uint64
	Node      NodeID
	Req       uint64
	Resource  string
	Token     uint64
	Withdrawn bool
}

// Ping is multicast by the server at the start of its turn (paper figure A)
// and sent again, directly, to members that have not answered.
type Ping struct {
	_struct struct{} `codec:",toarray"`
	Turn    uint64   // the T at which the server's turn began: names the turn
	// Probe numbers the pings of one turn, so that the reply to the ping
	// that confirms a successor is alive is told from an older one.
	Probe uint64
}

// PingReply answers a Ping, directly to the server, echoing Turn and Probe.
type PingReply struct {
	_struct struct{} `codec:",toarray"`
	Turn    uint64
	Probe   uint64
}

// Silence records that a member was not heard during a turn, and for how many
// ticks in all it has not been heard.
type Silence struct {
	_struct struct{} `codec:",toarray"`
	ID      NodeID
	Ticks   uint64
}

// Sync ends a server's turn (paper section 3.3): members not heard during the
// turn are listed, those silent for longer than the lease are removed and
// their resources reclaimed, and Next names the first timestamp of the next
// server's turn. Digest is a hash of the replicated state after the Sync is
// applied, which every node (the next server first) checks against its own.
type Sync struct {
	_struct struct{} `codec:",toarray"`
	T, Next uint64
	Turn    uint64
	Unheard []Silence
	Remove  []NodeID
	Digest  uint64
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
type StateChunk struct {
	_struct struct{} `codec:",toarray"`
	T       uint64
	Index   uint32
	Count   uint32
	Data    []byte
}

// Update is an application state update (the paper's "system state update"),
// multicast by any member; Seq orders one sender's updates.
type Update struct {
	_struct struct{} `codec:",toarray"`
	Seq     uint64
	Topic   string
	Data    []byte
}

// Heartbeat is multicast by a server that has sent nothing for a while, so
// that members learn the current T and repair lost decisions at the tail of
// the log.
type Heartbeat struct {
	_struct struct{} `codec:",toarray"`
	Turn    uint64
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
func (*Heartbeat) Kind() Kind    { return KindHeartbeat }

// Stamp implementations: the decisions.

func (m *OkToJoin) Stamp() (uint64, uint64)  { return m.T, m.Next }
func (m *GroupFull) Stamp() (uint64, uint64) { return m.T, m.Next }
func (m *Left) Stamp() (uint64, uint64)      { return m.T, m.Next }
func (m *Grant) Stamp() (uint64, uint64)     { return m.T, m.Next }
func (m *Released) Stamp() (uint64, uint64)  { return m.T, m.Next }
func (m *Sync) Stamp() (uint64, uint64)      { return m.T, m.Next }

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
	case KindHeartbeat:
		return &Heartbeat{}
	}
	return nil
}

// IsDecision reports whether messages of kind k are sequenced decisions.
func (k Kind) IsDecision() bool {
	switch k {
	case KindOkToJoin, KindGroupFull, KindLeft, KindGrant, KindReleased, KindSync:
		return true
	}
	return false
}
