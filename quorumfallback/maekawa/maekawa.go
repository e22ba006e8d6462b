// Package maekawa is Maekawa's sqrt(N) mutual-exclusion algorithm (ACM TOCS
// 3(2), 1985) as a deterministic state machine.
//
// Node i asks every member of its request set S_i for permission (REQUEST)
// and enters once all of them have answered LOCKED. A member is locked by one
// REQUEST at a time and queues the others by priority (sequence number, then
// node). A member that sees a REQUEST preceding the one it is locked for asks
// the locking node whether it will succeed (INQUIRE); a node that knows it
// will not (it got a FAILED) gives the lock back (RELINQUISH), which breaks
// circular locking. The steps of section 4, numbered as in the paper, are
// marked in the code.
//
// # One deviation, on by default
//
// Step 2 sends FAILED to a new REQUEST only if something at the member
// precedes it. A REQUEST that was the most preceding when it arrived (so got
// no FAILED, but caused an INQUIRE) and is then overtaken by a still more
// preceding one never learns that it will not succeed: it keeps deferring
// the INQUIREs it receives, and with the REQUEST that overtook it waiting
// for a member it holds, the two deadlock. The literal algorithm deadlocks
// this way in the seeded simulation (protocols.TestLiteralStep2Deadlocks
// replays it). The fix sends FAILED to a queued REQUEST that had none when a
// more preceding one arrives, so that it relinquishes when inquired.
// Config.Literal turns it off.
//
// Also beyond the literal text: a node that relinquishes a member counts as
// having failed at it until that member locks for it again (the member is
// now locked for a preceding REQUEST, so the node "knows that it will not
// succeed"); and an INQUIRE from a member whose LOCKED the node does not
// hold (it crossed a RELEASE or a RELINQUISH) is ignored, as step 3 says of
// one that arrives after the RELEASE.
//
// # Failures
//
// The paper's nodes never fail. Down and Up let the machine go on when
// they do (the quorumfallback package doc, "Failures"): with a Substitute
// (a tree or majority coterie) a waiting node whose quorum loses a member
// releases what it got and asks a substitute quorum, with a new sequence
// number; an arbiter drops a failed node's REQUEST and lock. A RELEASE from
// a node whose REQUEST is still queued withdraws it. Every answer (LOCKED,
// FAILED, INQUIRE) names the request it is about, so that one about a
// request given up does not count for the next.
package maekawa

import (
	"fmt"
	"slices"

	q "github.com/mcnode/mcnode/quorumfallback"
)

// Config sets up one node's machine.
type Config struct {
	Self q.ID
	N    int
	// Quorum is S_Self: the members whose permission the node needs. It
	// should contain Self (property (b)); it need not.
	Quorum []q.ID
	// Literal runs step 2 exactly as printed, without the FAILED to an
	// overtaken REQUEST (see the package doc). It can deadlock.
	Literal bool
	// Substitute, if set, builds a quorum of nodes for which alive is true
	// (a fault-tolerant coterie's substitute, e.g. coterie.TreeQuorum),
	// reporting false if none exists. Without it the node asks Quorum, and
	// only while none of its members is down.
	Substitute func(alive func(q.ID) bool) ([]q.ID, bool)
}

// Node is one node's machine for one resource.
type Node struct {
	cfg Config
	out q.Outbox
	seq uint64 // highest sequence number sent, received or observed

	// Failures (see Down).
	down   []bool
	quorum []q.ID // the members asked for the current request: S_i or its substitute
	parked bool   // waiting, but no quorum of live members exists: nothing asked

	// As a requester.
	state    q.State
	mine     q.Stamp
	locked   []bool // LOCKED held from each member
	failed   []bool // FAILED from (or RELINQUISHed to) each member, not since relocked
	deferred []bool // INQUIREs from members awaiting an answer (step 3)
	nLocked  int
	nFailed  int
	token    uint64

	// As a member (arbiter).
	lock        q.Stamp // the locking REQUEST, or NoStamp
	waiting     q.Queue // the WAITING QUEUE, most preceding first
	toldFailed  []bool  // queued REQUESTs that were sent FAILED, by node
	inquireSent bool    // an INQUIRE to the locking node awaits its answer
	counter     uint64  // highest fencing token seen
}

// New returns the machine for cfg.
func New(cfg Config) (*Node, error) {
	quorum, err := q.CheckQuorum("maekawa", cfg.Self, cfg.N, cfg.Quorum)
	if err != nil {
		return nil, err
	}
	cfg.Quorum = quorum
	return &Node{
		cfg:        cfg,
		out:        q.Outbox{Self: cfg.Self},
		locked:     make([]bool, cfg.N),
		failed:     make([]bool, cfg.N),
		deferred:   make([]bool, cfg.N),
		toldFailed: make([]bool, cfg.N),
		down:       make([]bool, cfg.N),
		quorum:     cfg.Quorum,
		lock:       q.NoStamp,
	}, nil
}

// State reports what the node is doing with the resource.
func (n *Node) State() q.State { return n.state }

// RaiseTokens makes the tokens this node grants greater than floor: its
// counter of the highest token seen starts there.
func (n *Node) RaiseTokens(floor uint64) { n.counter = max(n.counter, floor) }

// HighestToken is the highest token seen (granted, released) or held.
func (n *Node) HighestToken() uint64 { return max(n.counter, n.token) }

// Quiescent: idle, not locked, nobody queued, no INQUIRE out, and no
// queued request told FAILED (see q.Protocol). The requester's arrays are
// reset by the next Request.
func (n *Node) Quiescent() bool {
	return n.state == q.Idle && n.lock == q.NoStamp && len(n.waiting) == 0 && !n.inquireSent && !slices.Contains(n.toldFailed, true)
}

// Clock is the highest sequence number sent, received or observed.
func (n *Node) Clock() uint64 { return n.seq }

// RaiseClock makes the next REQUEST's sequence number greater than floor.
func (n *Node) RaiseClock(floor uint64) { n.seq = max(n.seq, floor) }

// Ready takes the messages to send and whether the node entered.
func (n *Node) Ready() q.Ready { return n.out.Ready() }

// Request is step 1: REQUEST to every member of S_i (or of its substitute,
// if a member is down) with a sequence number greater than any sent,
// received or observed.
func (n *Node) Request() error {
	if n.state != q.Idle {
		return q.ErrBusy
	}
	n.state = q.Waiting
	n.ask()
	n.out.Deliver(n.step)
	return nil
}

// ask sends a new REQUEST to a quorum of live members, or parks the
// request if there is none.
func (n *Node) ask() {
	// A new sequence number even when parked, so that no answer to the
	// request given up counts for this one.
	n.seq++
	n.mine = q.Stamp{Seq: n.seq, Node: n.cfg.Self}
	n.nLocked, n.nFailed, n.token = 0, 0, 0
	clear(n.locked)
	clear(n.failed)
	clear(n.deferred)
	quorum, ok := q.LiveQuorum(n.cfg.Quorum, n.down, n.cfg.Substitute)
	n.parked = !ok
	if !ok {
		return
	}
	n.quorum = quorum
	for _, j := range n.quorum {
		n.out.Send(q.Message{Kind: q.Request, To: j, Arbiter: j, Seq: n.seq, Site: q.None})
	}
}

// Quorum is the set of members whose permission the current request needs
// (the last one's, when idle).
func (n *Node) Quorum() []q.ID { return slices.Clone(n.quorum) }

// Down tells the machine that node i has failed (Cao and Singhal section
// 6): it is asked for nothing more, and whatever it held or asked for here
// is over. The runtime calls it only once i can no longer act on what it
// held: i's lease has run out and i's messages are refused from then on
// (see the quorumfallback package doc, "Failures").
//
// As an arbiter the node drops i's queued REQUEST and, if locked for i,
// locks for the next one. As a requester waiting for a quorum that holds i,
// it gives back what it has (RELEASE to every member asked, which also
// withdraws a REQUEST still queued there) and asks a substitute quorum
// anew, or waits for one to exist. A node in its critical section keeps
// it: its runtime ends it if a lease it depends on runs out.
func (n *Node) Down(i q.ID) {
	if i < 0 || i >= n.cfg.N || i == n.cfg.Self || n.down[i] {
		return
	}
	n.down[i] = true
	n.failed[i], n.deferred[i] = false, false
	if _, ok := n.waiting.Remove(i); ok {
		n.toldFailed[i] = false
	}
	if n.lock.Node == i {
		n.toldFailed[i] = false
		n.relockNext()
	}
	if n.state == q.Waiting && !n.parked && slices.Contains(n.quorum, i) {
		n.giveBack()
		n.ask()
	}
	n.out.Deliver(n.step)
}

// Up tells the machine that node i is back, a new incarnation that holds
// nothing of the old one's. A parked request asks again.
func (n *Node) Up(i q.ID) {
	if i < 0 || i >= n.cfg.N || !n.down[i] {
		return
	}
	n.down[i] = false
	if n.state == q.Waiting && n.parked {
		n.ask()
	}
	n.out.Deliver(n.step)
}

// giveBack ends the current request at every live member asked: a RELEASE
// gives back a LOCKED and withdraws a REQUEST still queued (see onRelease).
func (n *Node) giveBack() { n.out.GiveBack(n.quorum, n.down, n.mine.Seq, n.token) }

// Release is step 6: RELEASE to every member of S_i.
func (n *Node) Release() error {
	if n.state != q.Held {
		return q.ErrNotHeld
	}
	n.state = q.Idle
	n.giveBack()
	n.out.Deliver(n.step)
	return nil
}

// Step handles a message from another node.
func (n *Node) Step(m q.Message) error {
	if err := q.Check(m, n.cfg.Self, n.cfg.N); err != nil {
		return err
	}
	if m.Kind == q.Transfer || m.Kind == q.Query || m.Kind == q.Answer || m.Kind == q.Grant && m.Arbiter != m.From || m.WithTransfer {
		return fmt.Errorf("%w: %v is not a Maekawa message", q.ErrBadMessage, m)
	}
	if n.down[m.From] {
		return nil // from a failed incarnation: what it held is gone
	}
	n.step(m)
	n.out.Deliver(n.step)
	return nil
}

func (n *Node) step(m q.Message) {
	switch m.Kind {
	case q.Request:
		n.onRequest(q.Stamp{Seq: m.Seq, Node: m.From})
	case q.Grant:
		if m.Seq == n.mine.Seq {
			n.onLocked(m.From, m.Token)
		}
	case q.Failed:
		if m.Seq == n.mine.Seq {
			n.onFailed(m.From)
		}
	case q.Inquire:
		if m.Seq == n.mine.Seq {
			n.onInquire(m.From)
		}
	case q.Yield:
		n.onRelinquish(m.From)
	case q.Release:
		n.onRelease(q.Stamp{Seq: m.Seq, Node: m.From}, m.Token)
	}
}

// onRequest is step 2, at a member.
func (n *Node) onRequest(r q.Stamp) {
	n.seq = max(n.seq, r.Seq)
	if n.lock == q.NoStamp {
		n.lockFor(r)
		return
	}
	if _, dup := n.waiting.Find(r.Node); dup || n.lock.Node == r.Node {
		return // a node has one request at a time; FIFO links never repeat one
	}
	n.waiting.Push(r)
	if n.lock.Precedes(r) || n.waiting.Head() != r {
		n.sendFailed(r)
		return
	}
	// r precedes everything here.
	if !n.cfg.Literal {
		for _, w := range n.waiting[1:] {
			if !n.toldFailed[w.Node] {
				n.sendFailed(w) // overtaken: it will not succeed here now
			}
		}
	}
	if !n.inquireSent {
		n.inquireSent = true
		n.out.Send(q.Message{Kind: q.Inquire, To: n.lock.Node, Arbiter: n.cfg.Self, Seq: n.lock.Seq, Site: q.None})
	}
}

// sendFailed tells r's node that r will not succeed here now. Like every
// answer it names the request, so that one about a request the node has
// since given up (see Down) is not taken for its next one.
func (n *Node) sendFailed(r q.Stamp) {
	n.toldFailed[r.Node] = true
	n.out.Send(q.Message{Kind: q.Failed, To: r.Node, Arbiter: n.cfg.Self, Seq: r.Seq, Site: q.None})
}

// lockFor locks the member for r and answers LOCKED.
func (n *Node) lockFor(r q.Stamp) {
	n.lock = r
	n.toldFailed[r.Node] = false
	n.out.Send(q.Message{Kind: q.Grant, To: r.Node, Arbiter: n.cfg.Self, Seq: r.Seq, Site: q.None, Token: n.counter + 1})
}

// relockNext locks for the most preceding waiting REQUEST, or unlocks.
func (n *Node) relockNext() {
	n.inquireSent = false
	if len(n.waiting) == 0 {
		n.lock = q.NoStamp
		return
	}
	n.lockFor(n.waiting.Pop())
}

// onLocked is step 5: enter once every member has locked for us.
func (n *Node) onLocked(from q.ID, token uint64) {
	if n.state != q.Waiting || n.locked[from] {
		return
	}
	n.locked[from] = true
	n.nLocked++
	if n.failed[from] {
		n.failed[from] = false
		n.nFailed--
	}
	n.token = max(n.token, token)
	if n.nLocked == len(n.quorum) {
		n.state = q.Held
		clear(n.deferred) // answered by the RELEASE (step 3)
		n.out.Enter(n.token)
	}
}

// onFailed: the node now knows it will not succeed; answer the deferred
// INQUIREs (step 3).
func (n *Node) onFailed(from q.ID) {
	if n.state != q.Waiting || n.locked[from] {
		return
	}
	if !n.failed[from] {
		n.failed[from] = true
		n.nFailed++
	}
	for j, d := range n.deferred {
		if d {
			n.relinquish(j)
		}
	}
}

// onInquire is step 3.
func (n *Node) onInquire(from q.ID) {
	if n.state != q.Waiting || !n.locked[from] {
		return // crossed our RELEASE or RELINQUISH, or we are in the CS
	}
	if n.nFailed > 0 {
		n.relinquish(from)
		return
	}
	n.deferred[from] = true
}

func (n *Node) relinquish(j q.ID) {
	n.deferred[j] = false
	n.locked[j] = false
	n.nLocked--
	n.failed[j] = true // j will lock for a preceding request
	n.nFailed++
	n.out.Send(q.Message{Kind: q.Yield, To: j, Arbiter: j, Seq: n.mine.Seq, Site: q.None})
}

// onRelinquish is step 4: lock for the most preceding REQUEST, which may be
// the one that relinquished.
func (n *Node) onRelinquish(from q.ID) {
	if n.lock.Node != from {
		return
	}
	n.waiting.Push(n.lock)
	n.toldFailed[from] = true // it knows it failed here: it just said so
	n.relockNext()
}

// onRelease is step 7. A RELEASE from a node whose REQUEST is still queued
// withdraws it: the node gave its request up (it asks another quorum, see
// Down).
func (n *Node) onRelease(r q.Stamp, token uint64) {
	n.counter = max(n.counter, token)
	if n.lock.Node != r.Node {
		if s, ok := n.waiting.Find(r.Node); ok && s == r {
			n.waiting.Remove(r.Node)
			n.toldFailed[r.Node] = false
		}
		return
	}
	n.relockNext()
}
