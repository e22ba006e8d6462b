// Package kakugawa is the deadlock-free mutual-exclusion protocol of
// Kakugawa, Fujita, Yamashita and Ae, "A deadlock-free distributed mutual
// exclusion protocol without using time stamp" (in Japanese;
// protocol A of section 4.2), as a deterministic state machine.
//
// Node i asks the members of its request set R_i for permission one at a
// time, in increasing order of their numbers: REQUEST to the first, wait
// for its PERMIT, then the next. With every PERMIT it enters; leaving, it
// sends RELEASE to every member. A member keeps a FIFO queue and a flag
// HaveToken, initially true: a REQUEST joins the queue, and if HaveToken the
// head is dequeued, sent PERMIT and the flag cleared; a RELEASE sends PERMIT
// to the next in the queue, or sets HaveToken if it is empty.
//
// There are no timestamps and no sequence numbers: deadlock freedom comes
// from the global order of acquisition (theorem 2: a cycle of waiting nodes
// would need one of them to have asked a larger member before a smaller
// one), starvation freedom from the FIFO queues (theorem 3). Every entry
// costs exactly 3 messages per member other than the node itself (section
// 6.1 counts 3|q| with the self-exchange included), and takes 2T per member
// in the best case (section 6.2).
package kakugawa

import (
	"fmt"

	q "github.com/mcnode/mcnode/quorumfallback"
)

// Config sets up one node's machine.
type Config struct {
	Self q.ID
	N    int
	// Quorum is the request set R_Self; it is asked in increasing order.
	Quorum []q.ID
}

// Node is one node's machine for one resource.
type Node struct {
	cfg   Config
	out   q.Outbox
	state q.State
	next  int // index in Quorum of the member being asked
	token uint64

	haveToken bool
	fifo      []q.ID // the member's queue Q
	permitted q.ID   // who holds this member's PERMIT
	counter   uint64
}

// New returns the machine for cfg.
func New(cfg Config) (*Node, error) {
	quorum, err := q.CheckQuorum("kakugawa", cfg.Self, cfg.N, cfg.Quorum)
	if err != nil {
		return nil, err
	}
	cfg.Quorum = quorum
	return &Node{cfg: cfg, out: q.Outbox{Self: cfg.Self}, haveToken: true, permitted: q.None}, nil
}

// State reports what the node is doing with the resource.
func (n *Node) State() q.State { return n.state }

// RaiseTokens makes the tokens this node grants greater than floor: its
// counter of the highest token seen starts there.
func (n *Node) RaiseTokens(floor uint64) { n.counter = max(n.counter, floor) }

// HighestToken is the highest token seen (granted, released) or held.
func (n *Node) HighestToken() uint64 { return max(n.counter, n.token) }

// Quiescent: idle, holding its own PERMIT, nobody queued (see q.Protocol).
func (n *Node) Quiescent() bool {
	return n.state == q.Idle && n.haveToken && len(n.fifo) == 0 && n.permitted == q.None
}

// Clock is 0: the protocol has no timestamps.
func (n *Node) Clock() uint64 { return 0 }

// RaiseClock does nothing: the protocol has no timestamps.
func (n *Node) RaiseClock(uint64) {}

// Ready takes the messages to send and whether the node entered.
func (n *Node) Ready() q.Ready { return n.out.Ready() }

// Request is EnterCS: ask the smallest member first.
func (n *Node) Request() error {
	if n.state != q.Idle {
		return q.ErrBusy
	}
	n.state, n.next, n.token = q.Waiting, 0, 0
	n.ask()
	n.out.Deliver(n.step)
	return nil
}

func (n *Node) ask() {
	j := n.cfg.Quorum[n.next]
	n.out.Send(q.Message{Kind: q.Request, To: j, Arbiter: j, Site: q.None})
}

// Release sends RELEASE to every member.
func (n *Node) Release() error {
	if n.state != q.Held {
		return q.ErrNotHeld
	}
	n.state = q.Idle
	for _, j := range n.cfg.Quorum {
		n.out.Send(q.Message{Kind: q.Release, To: j, Arbiter: j, Site: q.None, Token: n.token})
	}
	n.out.Deliver(n.step)
	return nil
}

// Step handles a message from another node.
func (n *Node) Step(m q.Message) error {
	if err := q.Check(m, n.cfg.Self, n.cfg.N); err != nil {
		return err
	}
	if m.Kind != q.Request && m.Kind != q.Grant && m.Kind != q.Release {
		return fmt.Errorf("%w: %v is not one of Kakugawa's messages", q.ErrBadMessage, m)
	}
	n.step(m)
	n.out.Deliver(n.step)
	return nil
}

func (n *Node) step(m q.Message) {
	switch m.Kind {
	case q.Request: // ReceiptREQUEST
		n.fifo = append(n.fifo, m.From)
		if n.haveToken {
			n.permitNext()
		}
	case q.Grant: // ReceiptPERMIT
		if n.state != q.Waiting || m.From != n.cfg.Quorum[n.next] {
			return
		}
		n.token = max(n.token, m.Token)
		n.next++
		if n.next == len(n.cfg.Quorum) {
			n.state = q.Held
			n.out.Enter(n.token)
			return
		}
		n.ask()
	case q.Release: // ReceiptRELEASE
		n.counter = max(n.counter, m.Token)
		if m.From != n.permitted {
			return
		}
		n.permitted = q.None
		if len(n.fifo) == 0 {
			n.haveToken = true
			return
		}
		n.permitNext()
	}
}

func (n *Node) permitNext() {
	to := n.fifo[0]
	n.fifo = n.fifo[1:]
	n.haveToken, n.permitted = false, to
	n.out.Send(q.Message{Kind: q.Grant, To: to, Arbiter: n.cfg.Self, Site: q.None, Token: n.counter + 1})
}
