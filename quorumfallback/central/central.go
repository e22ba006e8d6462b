// Package central is the central-server mutual-exclusion algorithm, the
// baseline that course notes on distributed mutual exclusion compare
// Maekawa's voting with: one coordinator, node 0, keeps the resource's
// holder and a FIFO queue; a node sends it REQUEST, enters on
// its GRANT and sends RELEASE when done. Three messages per entry (none for
// the coordinator's own), synchronization delay 2T (release to the
// coordinator, grant to the next).
package central

import (
	"fmt"

	q "github.com/mcnode/mcnode/quorumfallback"
)

// Coordinator is the node that serves every request.
const Coordinator q.ID = 0

// Node is one node's machine for one resource.
type Node struct {
	self  q.ID
	n     int
	out   q.Outbox
	state q.State
	token uint64

	// At the coordinator.
	holder q.ID
	fifo   []q.ID
	issued uint64 // last fencing token granted
}

// New returns node self's machine in a group of n.
func New(self q.ID, n int) (*Node, error) {
	if err := q.CheckNode("central", self, n); err != nil {
		return nil, err
	}
	return &Node{self: self, n: n, out: q.Outbox{Self: self}, holder: q.None}, nil
}

// State reports what the node is doing with the resource.
func (n *Node) State() q.State { return n.state }

// RaiseTokens makes the coordinator's next token greater than floor.
func (n *Node) RaiseTokens(floor uint64) { n.issued = max(n.issued, floor) }

// HighestToken is the highest token issued here or held.
func (n *Node) HighestToken() uint64 { return max(n.issued, n.token) }

// Quiescent: idle, and at the coordinator nobody holds or waits (see
// q.Protocol).
func (n *Node) Quiescent() bool {
	return n.state == q.Idle && n.holder == q.None && len(n.fifo) == 0
}

// Clock is 0: the protocol has no timestamps.
func (n *Node) Clock() uint64 { return 0 }

// RaiseClock does nothing: the protocol has no timestamps.
func (n *Node) RaiseClock(uint64) {}

// Ready takes the messages to send and whether the node entered.
func (n *Node) Ready() q.Ready { return n.out.Ready() }

// Request asks the coordinator.
func (n *Node) Request() error {
	if n.state != q.Idle {
		return q.ErrBusy
	}
	n.state = q.Waiting
	n.out.Send(q.Message{Kind: q.Request, To: Coordinator, Arbiter: Coordinator, Site: q.None})
	n.out.Deliver(n.step)
	return nil
}

// Release tells the coordinator.
func (n *Node) Release() error {
	if n.state != q.Held {
		return q.ErrNotHeld
	}
	n.state = q.Idle
	n.out.Send(q.Message{Kind: q.Release, To: Coordinator, Arbiter: Coordinator, Site: q.None, Token: n.token})
	n.out.Deliver(n.step)
	return nil
}

// Step handles a message from another node.
func (n *Node) Step(m q.Message) error {
	if err := q.Check(m, n.self, n.n); err != nil {
		return err
	}
	if m.Kind != q.Request && m.Kind != q.Grant && m.Kind != q.Release ||
		m.Kind != q.Grant && n.self != Coordinator || m.Kind == q.Grant && m.From != Coordinator {
		return fmt.Errorf("%w: %v does not fit the central server's protocol", q.ErrBadMessage, m)
	}
	n.step(m)
	n.out.Deliver(n.step)
	return nil
}

func (n *Node) step(m q.Message) {
	switch m.Kind {
	case q.Request:
		n.fifo = append(n.fifo, m.From)
		if n.holder == q.None {
			n.grantNext()
		}
	case q.Release:
		if m.From == n.holder {
			n.holder = q.None
			if len(n.fifo) > 0 {
				n.grantNext()
			}
		}
	case q.Grant:
		if n.state == q.Waiting {
			n.state, n.token = q.Held, m.Token
			n.out.Enter(m.Token)
		}
	}
}

func (n *Node) grantNext() {
	n.holder = n.fifo[0]
	n.fifo = n.fifo[1:]
	n.issued++
	n.out.Send(q.Message{Kind: q.Grant, To: n.holder, Arbiter: n.self, Site: q.None, Token: n.issued})
}
