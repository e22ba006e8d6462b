package quorumfallback

import (
	"errors"
	"fmt"
	"slices"
)

// ID names a node: its index in the node list, 0..N-1.
type ID = int

// None stands for "no node": the paper's max in Cao and Singhal's
// release(i, max), an empty lock.
const None ID = -1

// Kind is the type of a message. The names are the papers'; protocols
// that call the same thing differently share a kind (a grant is Maekawa's
// LOCKED, Cao and Singhal's reply, Kakugawa's PERMIT and Ricart and
// Agrawala's reply). The values are part of the wire format (package
// qnet): ONLY APPEND.
type Kind uint8

const (
	// Request asks for permission (all protocols).
	Request Kind = 1
	// Grant gives permission: LOCKED, reply, PERMIT.
	Grant Kind = 2
	// Release returns permission after the critical section.
	Release Kind = 3
	// Failed tells a requester that a request of higher priority holds or
	// waits for this arbiter: FAILED, fail.
	Failed Kind = 4
	// Inquire asks the holder of an arbiter's permission whether it will
	// succeed: INQUIRE, inquire.
	Inquire Kind = 5
	// Yield gives an arbiter's permission back before entering, so that a
	// request of higher priority can have it: RELINQUISH, yield.
	Yield Kind = 6
	// Transfer asks the holder of an arbiter's permission to pass it on to
	// another node when it leaves the critical section (Cao and Singhal).
	Transfer Kind = 7
	// Update is not a protocol message and no machine sees it: it carries
	// an application state update (node.Publish) from one runtime to the
	// others, over the same links.
	Update Kind = 8
	// Heartbeat and Echo are not protocol messages either: the links'
	// liveness (package qnet), a heartbeat's send time (Seq) echoed back.
	Heartbeat Kind = 9
	Echo      Kind = 10
	// Failure is failure(i) of Cao and Singhal's section 6, between
	// runtimes: node Site's incarnation Token has failed.
	Failure Kind = 11
	// Query asks a node whether it holds an arbiter's permission for its
	// request Seq, which node Site (down since) may have passed on to it
	// by proxy (Cao and Singhal, after a failure; not in the paper).
	Query Kind = 12
	// Answer answers a Query: Site is the answering node if it holds the
	// permission, None if it does not (and never will from that proxy).
	Answer Kind = 13

	// Kinds is one more than the highest kind: arrays indexed by kind have
	// this length.
	Kinds = Answer + 1
)

// String names the kind as the papers do.
func (k Kind) String() string {
	switch k {
	case Request:
		return "request"
	case Grant:
		return "grant"
	case Release:
		return "release"
	case Failed:
		return "failed"
	case Inquire:
		return "inquire"
	case Yield:
		return "yield"
	case Transfer:
		return "transfer"
	case Update:
		return "update"
	case Heartbeat:
		return "heartbeat"
	case Echo:
		return "echo"
	case Failure:
		return "failure"
	case Query:
		return "query"
	case Answer:
		return "answer"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Valid reports whether k is a protocol message's kind (Update is not).
func (k Kind) Valid() bool { return k >= Request && k <= Transfer || k == Query || k == Answer }

// Message is one protocol message between two nodes. Fields a kind does not
// use are zero (Site is None).
type Message struct {
	Kind     Kind
	From, To ID
	// Arbiter is the node whose permission the message is about. It is From
	// except in Cao and Singhal's protocol, where a node leaving the
	// critical section sends reply(j) on behalf of arbiter j, and where
	// transfer(i, j) names j.
	Arbiter ID
	// Seq is the sequence number of the request the message is about
	// (Maekawa, Cao and Singhal, Ricart and Agrawala); with Site or From it
	// orders requests by priority.
	Seq uint64
	// Site is the third party: i in transfer(i, j) and in a piggybacked
	// transfer, j in release(i, j) (None for the paper's max).
	Site ID
	// SiteSeq is the sequence number of Site's request (transfers).
	SiteSeq uint64
	// WithTransfer marks a transfer(Site, Arbiter) piggybacked on a grant or
	// an inquire (Cao and Singhal count the pair as one message).
	WithTransfer bool
	// Token carries the fencing-token counter (see the package doc).
	Token uint64
}

// String renders the message for traces and test failures.
func (m Message) String() string {
	s := fmt.Sprintf("%d->%d %v", m.From, m.To, m.Kind)
	if m.Arbiter != m.From {
		s += fmt.Sprintf("(of %d)", m.Arbiter)
	}
	if m.Seq != 0 {
		s += fmt.Sprintf(" seq=%d", m.Seq)
	}
	if m.Kind == Transfer || m.WithTransfer || m.Kind == Query || m.Kind == Answer || m.Kind == Release && m.Site != None {
		s += fmt.Sprintf(" site=%d/%d", m.Site, m.SiteSeq)
	}
	if m.WithTransfer {
		s += "+transfer"
	}
	return s
}

// Ready is what a machine has for its runtime since the last Ready.
type Ready struct {
	// Messages to send, in order. None is addressed to the node itself.
	Messages []Message
	// Entered reports that the node entered the critical section: it holds
	// the resource until it calls Release.
	Entered bool
	// Token is the fencing token of the critical section just entered.
	Token uint64
}

// Protocol is a mutual-exclusion protocol at one node for one resource.
type Protocol interface {
	// Request starts a request for the critical section. It fails with
	// ErrBusy if one is outstanding or held.
	Request() error
	// Release leaves the critical section. It fails with ErrNotHeld unless
	// the node holds it.
	Release() error
	// Step handles one message from another node. A message that cannot be
	// for this machine (a bad kind or node, not addressed to it) is
	// rejected with an error wrapping ErrBadMessage and changes nothing.
	Step(m Message) error
	// Ready takes what accumulated since the last call.
	Ready() Ready
	// State reports what this node is doing with the resource.
	State() State
	// RaiseTokens starts the machine's count of fencing tokens at floor:
	// called before its first Request or Step, every token a holder takes
	// from its grants is greater than floor, so that tokens keep increasing
	// across restarts (see the package doc, "Fencing tokens").
	RaiseTokens(floor uint64)
	// HighestToken is the highest fencing token this machine has seen,
	// granted or held: the runtime keeps it on disk, to start above it.
	HighestToken() uint64
	// Quiescent reports whether the machine is in the state New gives it
	// but for its counters (sequence numbers, tokens): it neither waits,
	// nor holds, nor arbitrates, nor owes anyone an answer. A new machine
	// given the counters (RaiseClock with Clock, RaiseTokens with
	// HighestToken) behaves as this one would, late messages included, so
	// the runtime may free it.
	Quiescent() bool
	// Clock is the highest sequence number the machine has sent, received
	// or observed (0 for a protocol without them).
	Clock() uint64
	// RaiseClock makes the machine's next sequence number greater than
	// floor; called before its first Request or Step, and before a Step
	// with the clock the message's sender had (Lamport's rule).
	RaiseClock(floor uint64)
}

// FaultTolerant is a Protocol that goes on when nodes fail, given a
// coterie with substitute quorums (see the package doc, "Failures").
type FaultTolerant interface {
	Protocol
	// Down says node i has failed: its lease has run out and its
	// messages are refused. The machine stops asking it, drops what it
	// held or asked for, and moves a waiting request to a substitute
	// quorum.
	Down(i ID)
	// Up says node i is back as a new incarnation holding nothing, whose
	// sequence numbers are above the old one's (the runtime starts them at
	// the wall clock).
	Up(i ID)
	// Quorum is the set of nodes whose permission the current request
	// needs (the last request's, when idle): a holder's lease depends on
	// each of them.
	Quorum() []ID
}

// State is what a node is doing with a resource.
type State uint8

const (
	// Idle: not interested.
	Idle State = iota
	// Waiting: requested, not yet in the critical section.
	Waiting
	// Held: in the critical section.
	Held
)

// String names the state.
func (s State) String() string {
	switch s {
	case Idle:
		return "idle"
	case Waiting:
		return "waiting"
	case Held:
		return "held"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Errors the machines return.
var (
	// ErrBusy: Request while a request is outstanding or held.
	ErrBusy = errors.New("quorumfallback: a request is already outstanding")
	// ErrNotHeld: Release without holding the critical section.
	ErrNotHeld = errors.New("quorumfallback: not in the critical section")
	// ErrBadMessage: Step got a message that cannot be for this machine.
	ErrBadMessage = errors.New("quorumfallback: bad message")
)

// MaxCounter bounds every sequence number, clock and token a message may
// carry. Honest ones start at the wall clock in microseconds (about 2^51
// today) and grow by one a request; one near 2^64 from a broken or hostile
// peer would make the next number wrap to 0, after which numbers repeat:
// an answer to a request given up would count for the next one, and two
// nodes would enter at once. 2^62 leaves a margin no group can use up.
//
// MaxCounter alone would leave liveness to chance: a clock of MaxCounter,
// adopted and passed on, leaves numbers after it that every peer refuses.
// The runtime (package node) therefore refuses counters far ahead of the
// wall clock as well. Adopting less than what was heard is no way out:
// Ricart-Agrawala's exclusion rests on every node numbering its next
// request above all it has heard.
const MaxCounter = 1<<62 - 1

// Check returns an error wrapping ErrBadMessage unless m is a known kind
// from another node in 0..n-1 addressed to self, with in-range node fields
// and counters. Machines call it first in Step.
func Check(m Message, self ID, n int) error {
	in := func(id ID) bool { return id >= 0 && id < n }
	switch {
	case m.Seq > MaxCounter || m.SiteSeq > MaxCounter || m.Token > MaxCounter:
		return fmt.Errorf("%w: a counter over %d (seq %d, site seq %d, token %d)", ErrBadMessage, uint64(MaxCounter), m.Seq, m.SiteSeq, m.Token)
	case !m.Kind.Valid():
		return fmt.Errorf("%w: unknown kind %d", ErrBadMessage, m.Kind)
	case m.To != self:
		return fmt.Errorf("%w: addressed to %d, not %d", ErrBadMessage, m.To, self)
	case !in(m.From) || m.From == self:
		return fmt.Errorf("%w: from node %d (N=%d, self %d)", ErrBadMessage, m.From, n, self)
	case !in(m.Arbiter):
		return fmt.Errorf("%w: arbiter %d out of range (N=%d)", ErrBadMessage, m.Arbiter, n)
	case m.Site != None && !in(m.Site):
		return fmt.Errorf("%w: site %d out of range (N=%d)", ErrBadMessage, m.Site, n)
	case (m.Kind == Transfer || m.WithTransfer) && m.Site == None:
		return fmt.Errorf("%w: a transfer names no site", ErrBadMessage)
	}
	return nil
}

// CheckNode checks that self is one of n nodes; pkg prefixes the error.
func CheckNode(pkg string, self ID, n int) error {
	if n < 1 || self < 0 || self >= n {
		return fmt.Errorf("%s: node %d of %d", pkg, self, n)
	}
	return nil
}

// CheckQuorum checks self's place among n nodes and its quorum, a
// non-empty set of them, and returns the quorum sorted, without
// duplicates; pkg prefixes the errors.
func CheckQuorum(pkg string, self ID, n int, quorum []ID) ([]ID, error) {
	if err := CheckNode(pkg, self, n); err != nil {
		return nil, err
	}
	if len(quorum) == 0 {
		return nil, fmt.Errorf("%s: empty quorum", pkg)
	}
	for _, j := range quorum {
		if j < 0 || j >= n {
			return nil, fmt.Errorf("%s: quorum member %d out of range (N=%d)", pkg, j, n)
		}
	}
	return slices.Compact(slices.Sorted(slices.Values(quorum))), nil
}
