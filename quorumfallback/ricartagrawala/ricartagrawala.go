// Package ricartagrawala is Ricart and Agrawala's mutual-exclusion
// algorithm (CACM 24(1), 1981), a baseline for the quorum protocols: a node
// asks every other node (REQUEST with a Lamport timestamp) and enters once
// all have replied. A node replies at once unless it is in the critical
// section, or wants it with a request that precedes the one asking; then it
// defers the reply until it leaves. 2(N-1) messages per entry; the next node
// enters one message delay after an exit (synchronization delay T).
// Maekawa (1985) and Cao and Singhal (1998) measure their quorum protocols
// against it, the unanimous-consent baseline.
package ricartagrawala

import (
	"fmt"
	"slices"

	q "github.com/mcnode/mcnode/quorumfallback"
)

// Node is one node's machine for one resource.
type Node struct {
	self     q.ID
	n        int
	out      q.Outbox
	seq      uint64
	state    q.State
	mine     q.Stamp
	replies  int
	deferred []bool
	token    uint64
	counter  uint64 // highest fencing token seen
}

// New returns node self's machine in a group of n.
func New(self q.ID, n int) (*Node, error) {
	if err := q.CheckNode("ricartagrawala", self, n); err != nil {
		return nil, err
	}
	return &Node{self: self, n: n, out: q.Outbox{Self: self}, deferred: make([]bool, n)}, nil
}

// State reports what the node is doing with the resource.
func (n *Node) State() q.State { return n.state }

// RaiseTokens makes the tokens this node grants greater than floor: its
// counter of the highest token seen starts there.
func (n *Node) RaiseTokens(floor uint64) { n.counter = max(n.counter, floor) }

// HighestToken is the highest token seen (granted, released) or held.
func (n *Node) HighestToken() uint64 { return max(n.counter, n.token) }

// Quiescent: idle and deferring no one's REPLY (see q.Protocol).
func (n *Node) Quiescent() bool {
	return n.state == q.Idle && !slices.Contains(n.deferred, true)
}

// Clock is the highest sequence number sent or received.
func (n *Node) Clock() uint64 { return n.seq }

// RaiseClock makes the next request's sequence number greater than floor.
func (n *Node) RaiseClock(floor uint64) { n.seq = max(n.seq, floor) }

// Ready takes the messages to send and whether the node entered.
func (n *Node) Ready() q.Ready { return n.out.Ready() }

// Request sends REQUEST to every other node.
func (n *Node) Request() error {
	if n.state != q.Idle {
		return q.ErrBusy
	}
	n.seq++
	n.mine = q.Stamp{Seq: n.seq, Node: n.self}
	n.state, n.replies, n.token = q.Waiting, 0, n.counter
	for j := range n.n {
		if j != n.self {
			n.out.Send(q.Message{Kind: q.Request, To: j, Arbiter: j, Seq: n.seq, Site: q.None})
		}
	}
	n.maybeEnter()
	return nil
}

// Release sends the deferred replies.
func (n *Node) Release() error {
	if n.state != q.Held {
		return q.ErrNotHeld
	}
	n.state = q.Idle
	n.counter = max(n.counter, n.token)
	for j, d := range n.deferred {
		if d {
			n.deferred[j] = false
			n.reply(j)
		}
	}
	return nil
}

func (n *Node) reply(to q.ID) {
	n.out.Send(q.Message{Kind: q.Grant, To: to, Arbiter: n.self, Site: q.None, Token: n.counter})
}

// Step handles a message from another node.
func (n *Node) Step(m q.Message) error {
	if err := q.Check(m, n.self, n.n); err != nil {
		return err
	}
	switch m.Kind {
	case q.Request:
		n.seq = max(n.seq, m.Seq)
		theirs := q.Stamp{Seq: m.Seq, Node: m.From}
		if n.state == q.Held || n.state == q.Waiting && n.mine.Precedes(theirs) {
			n.deferred[m.From] = true
			return nil
		}
		n.reply(m.From)
	case q.Grant:
		if n.state != q.Waiting {
			return nil
		}
		n.replies++
		n.token = max(n.token, m.Token)
		n.maybeEnter()
	default:
		return fmt.Errorf("%w: %v is not a Ricart-Agrawala message", q.ErrBadMessage, m)
	}
	return nil
}

func (n *Node) maybeEnter() {
	if n.replies == n.n-1 {
		n.state = q.Held
		n.token++
		n.out.Enter(n.token)
	}
}
