// Package caosinghal is Cao and Singhal's delay-optimal quorum-based
// mutual-exclusion algorithm (1998) as a deterministic state
// machine: Maekawa-style locking of a quorum, except that a node leaving
// the critical section sends the arbiters' permission straight to the next
// node (a reply on their behalf), so the next node enters one message delay
// after the exit instead of two.
//
// Messages: request, reply (Grant; on behalf of another arbiter when
// forwarded), release(i, j), inquire, fail (Failed), yield, transfer. A
// transfer piggybacked on an inquire or a reply travels in the same message
// (Message.WithTransfer) and counts as one, as in the paper's section 5. The
// data structures are the paper's: lock, failed, replied, req_queue,
// inq_queue, tran_stack, tran_set. The code marks steps A.1-A.7 and C.1 of
// section 3.2.
//
// # Where the text needs more than it says
//
// The paper's messages name no request. Section 3 itself notes that FIFO
// links no longer order an inquire after its reply once replies can come
// from a proxy, and the same holds for messages that outlive the request
// they were about: an inquire or transfer sent while a node was in its
// critical section can arrive after it has left and asked again. So every
// message here carries the sequence number of the request it concerns, and
// a node ignores an inquire, fail, reply or transfer about a request that is
// not its current one; an arbiter ignores a yield or release from a node
// whose request is not the one it is locked for.
//
// One fix, on by default. A.2's sixth case, lock(j) < (sn, i) <
// head(req_queue(j)), sends S_k the transfer but sends S_i no fail,
// although a request of higher priority holds j. The proof of theorem 2
// (case 2) assumes that a site waiting for a reply of higher priority got a
// fail; this one did not, so it defers the inquires it receives, and a cycle
// of such sites deadlocks: the simulation finds it within ten seeds
// (protocols.TestLiteralCase6Deadlocks replays one). We send fail(j) to S_i there, as
// in the second case. It adds a message in the paper's heavy-load case 5.
//
// Four more readings, each needed for the proofs of section 4 to hold:
//
//   - A.1 ends with lock(i) := (max, max). Taken literally it would free
//     the node's own arbiter, locked or not, whenever it requests; we read
//     it as initialisation and leave the lock alone.
//   - A.3 yields whenever replied[j] and failed hold. A node that is in its
//     critical section must not give a permission back: it answers with its
//     release (section 3.2's prose, Maekawa step 3), so A.3 applies only
//     while the node waits.
//   - C.1 reads the sequence number of the new lock from req_queue; a
//     release naming a node that is not queued (which would be a protocol
//     error) is treated as release(i, max).
//   - C.1 assumes release(i, j) reaches arbiter k before j's own release.
//     They travel on different links, so j, which got k's reply from i,
//     can enter, leave and release first; k, still locked for i, would
//     then take j's release for a stray one and later lock for j's finished
//     request forever (the simulation found this on its first seed). The
//     arbiter takes j's request out of req_queue when its release comes
//     early and skips j when release(i, j) follows.
//
// # Failures: not yet
//
// This machine is not q.FaultTolerant. Section 6's recovery cannot be taken
// as printed: a node leaving the critical section hands an arbiter's
// permission on by itself (reply(j) to the next node, release(i, next) to
// j), so if it dies between the two, or the release is lost with its link,
// the next node holds j's permission while j, by case 3 of step 2, gives it
// to another. Leases do not help: the next node is in touch with j. Before
// j may free a failed node's lock it must learn whether that node passed
// it on: either every node that gets a permission by proxy tells its
// arbiter (one message more per proxied permission, even without
// failures), or j asks the nodes it sent a transfer about while locked for
// the failed node, and a node that says no refuses the proxied reply if it
// comes later (messages only on failure). The second is the plan.
package caosinghal

import (
	"slices"

	q "github.com/mcnode/mcnode/quorumfallback"
)

// Config sets up one node's machine.
type Config struct {
	Self q.ID
	N    int
	// Quorum is req_set(Self).
	Quorum []q.ID
	// Literal runs A.2's sixth case as printed, without the fail (see the
	// package doc). It can deadlock.
	Literal bool
}

// transfer is a tran_stack entry: reply to Site (its request Seq) on behalf
// of Arbiter.
type transfer struct {
	site    q.ID
	siteSeq uint64
	arbiter q.ID
}

// Node is one node's machine for one resource.
type Node struct {
	cfg Config
	out q.Outbox
	seq uint64

	// Requesting.
	state     q.State
	mine      q.Stamp
	failed    bool
	replied   []bool
	nReplied  int
	inqQueue  []bool // inq_queue, by arbiter
	tranStack []transfer
	token     uint64

	// Arbitrating.
	lock     q.Stamp
	reqQueue q.Queue
	counter  uint64
	// early holds, by node, the request (Seq) of a node that got this
	// arbiter's reply by proxy and released before the proxy's release(i, j)
	// arrived (see the package doc).
	early []uint64
}

// New returns the machine for cfg.
func New(cfg Config) (*Node, error) {
	quorum, err := q.CheckQuorum("caosinghal", cfg.Self, cfg.N, cfg.Quorum)
	if err != nil {
		return nil, err
	}
	cfg.Quorum = quorum
	return &Node{
		cfg:      cfg,
		out:      q.Outbox{Self: cfg.Self},
		replied:  make([]bool, cfg.N),
		inqQueue: make([]bool, cfg.N),
		early:    make([]uint64, cfg.N),
		lock:     q.NoStamp,
	}, nil
}

// State reports what the node is doing with the resource.
func (n *Node) State() q.State { return n.state }

// RaiseTokens makes the tokens this node grants greater than floor: its
// counter of the highest token seen starts there.
func (n *Node) RaiseTokens(floor uint64) { n.counter = max(n.counter, floor) }

// HighestToken is the highest token seen (granted, released) or held.
func (n *Node) HighestToken() uint64 { return max(n.counter, n.token) }

// Quiescent: idle, not locked, nobody queued, no transfer kept, and no
// early release remembered (see q.Protocol). Messages about an old request
// carry its sequence number, which an idle node ignores.
func (n *Node) Quiescent() bool {
	return n.state == q.Idle && n.lock == q.NoStamp && len(n.reqQueue) == 0 && len(n.tranStack) == 0 &&
		!slices.ContainsFunc(n.early, func(s uint64) bool { return s != 0 })
}

// Clock is the highest sequence number sent, received or observed.
func (n *Node) Clock() uint64 { return n.seq }

// RaiseClock makes the next request's sequence number greater than floor.
func (n *Node) RaiseClock(floor uint64) { n.seq = max(n.seq, floor) }

// Ready takes the messages to send and whether the node entered.
func (n *Node) Ready() q.Ready { return n.out.Ready() }

// Request is A.1.
func (n *Node) Request() error {
	if n.state != q.Idle {
		return q.ErrBusy
	}
	n.seq++
	n.mine = q.Stamp{Seq: n.seq, Node: n.cfg.Self}
	n.state = q.Waiting
	n.tranStack = n.tranStack[:0]
	clear(n.inqQueue)
	n.failed = false
	clear(n.replied)
	n.nReplied, n.token = 0, 0
	for _, j := range n.cfg.Quorum {
		n.out.Send(q.Message{Kind: q.Request, To: j, Arbiter: j, Seq: n.seq, Site: q.None})
	}
	n.out.Deliver(n.step)
	return nil
}

// Release is C: reply on behalf of each arbiter to the top transfer it
// asked for, then release(i, j) to every arbiter.
func (n *Node) Release() error {
	if n.state != q.Held {
		return q.ErrNotHeld
	}
	n.state = q.Idle
	tranSet := make(map[q.ID]transfer) // arbiter -> the site it was passed to
	for len(n.tranStack) > 0 {
		t := n.tranStack[len(n.tranStack)-1]
		n.tranStack = n.tranStack[:len(n.tranStack)-1]
		n.out.Send(q.Message{Kind: q.Grant, To: t.site, Arbiter: t.arbiter, Seq: t.siteSeq, Site: q.None, Token: n.token + 1})
		tranSet[t.arbiter] = t
		n.dropTransfers(t.arbiter)
	}
	for _, k := range n.cfg.Quorum {
		m := q.Message{Kind: q.Release, To: k, Arbiter: k, Seq: n.mine.Seq, Site: q.None, Token: n.token}
		if t, ok := tranSet[k]; ok {
			m.Site, m.SiteSeq = t.site, t.siteSeq
		}
		n.out.Send(m)
	}
	n.out.Deliver(n.step)
	return nil
}

// dropTransfers deletes every tran_stack entry sent by arbiter j.
func (n *Node) dropTransfers(j q.ID) {
	n.tranStack = slices.DeleteFunc(n.tranStack, func(t transfer) bool { return t.arbiter == j })
}

// Step handles a message from another node.
func (n *Node) Step(m q.Message) error {
	if err := q.Check(m, n.cfg.Self, n.cfg.N); err != nil {
		return err
	}
	n.step(m)
	n.out.Deliver(n.step)
	return nil
}

func (n *Node) step(m q.Message) {
	switch m.Kind {
	case q.Request:
		n.onRequest(q.Stamp{Seq: m.Seq, Node: m.From})
	case q.Inquire:
		if m.Seq == n.mine.Seq && n.state != q.Idle {
			if n.state == q.Waiting {
				n.onInquire(m.Arbiter)
			} // in the critical section, the release answers it
			n.onTransfer(m)
		}
	case q.Yield:
		n.onYield(q.Stamp{Seq: m.Seq, Node: m.From})
	case q.Transfer:
		if m.Seq == n.mine.Seq && n.state != q.Idle {
			n.onTransfer(m)
		}
	case q.Grant:
		if m.Seq == n.mine.Seq && n.state == q.Waiting {
			n.onReply(m)
		}
	case q.Failed:
		if m.Seq == n.mine.Seq && n.state == q.Waiting {
			n.onFail()
		}
	case q.Release:
		n.onRelease(m)
	}
}

// send is a message from this node as arbiter, about request about.
func (n *Node) send(kind q.Kind, to q.ID, about uint64) q.Message {
	return q.Message{Kind: kind, To: to, Arbiter: n.cfg.Self, Seq: about, Site: q.None}
}

// transferTo is transfer(site, self) to the node the arbiter is locked for,
// alone or riding on an inquire.
func (n *Node) transferTo(site q.Stamp, inquire bool) {
	m := n.send(q.Transfer, n.lock.Node, n.lock.Seq)
	if inquire {
		m.Kind, m.WithTransfer = q.Inquire, true
	}
	m.Site, m.SiteSeq = site.Node, site.Seq
	n.out.Send(m)
}

// grant sends reply(self) to the new lock, with a transfer for the next in
// line if there is one.
func (n *Node) grant() {
	m := n.send(q.Grant, n.lock.Node, n.lock.Seq)
	m.Token = n.counter + 1
	if len(n.reqQueue) > 0 {
		h := n.reqQueue.Head()
		m.WithTransfer, m.Site, m.SiteSeq = true, h.Node, h.Seq
	}
	n.out.Send(m)
}

// onRequest is A.2.
func (n *Node) onRequest(r q.Stamp) {
	n.seq = max(n.seq, r.Seq)
	if n.lock == q.NoStamp {
		n.lock = r
		n.out.Send(q.Message{Kind: q.Grant, To: r.Node, Arbiter: n.cfg.Self, Seq: r.Seq, Site: q.None, Token: n.counter + 1})
		return
	}
	if _, dup := n.reqQueue.Find(r.Node); dup || n.lock.Node == r.Node {
		return // one request per node at a time
	}
	head := n.reqQueue.Head()
	switch empty := len(n.reqQueue) == 0; {
	case empty && r.Precedes(n.lock):
		n.transferTo(r, true)
	case empty:
		n.transferTo(r, false)
		n.out.Send(n.send(q.Failed, r.Node, r.Seq))
	case head.Precedes(r):
		n.out.Send(n.send(q.Failed, r.Node, r.Seq))
	case head.Precedes(n.lock): // r < head < lock
		n.out.Send(n.send(q.Failed, head.Node, head.Seq))
		n.transferTo(r, false)
	case r.Precedes(n.lock): // r < lock < head
		n.transferTo(r, true)
	default: // lock < r < head
		n.transferTo(r, false)
		if !n.cfg.Literal {
			n.out.Send(n.send(q.Failed, r.Node, r.Seq)) // see the package doc
		}
	}
	n.reqQueue.Push(r)
}

// onInquire is A.3, while waiting.
func (n *Node) onInquire(j q.ID) {
	if n.replied[j] && n.failed {
		n.replied[j] = false
		n.nReplied--
		n.failed = true
		n.inqQueue[j] = false
		n.out.Send(q.Message{Kind: q.Yield, To: j, Arbiter: j, Seq: n.mine.Seq, Site: q.None})
		n.dropTransfers(j)
		return
	}
	n.inqQueue[j] = true
}

// onYield is A.4.
func (n *Node) onYield(from q.Stamp) {
	if n.lock != from || len(n.reqQueue) == 0 {
		return
	}
	n.reqQueue.Push(n.lock)
	n.lock = n.reqQueue.Pop()
	n.grant()
}

// onTransfer is A.5 for a transfer alone or piggybacked.
func (n *Node) onTransfer(m q.Message) {
	if m.Kind != q.Transfer && !m.WithTransfer {
		return
	}
	if n.replied[m.Arbiter] {
		n.tranStack = append(n.tranStack, transfer{site: m.Site, siteSeq: m.SiteSeq, arbiter: m.Arbiter})
	}
}

// onReply is A.6 (and B: enter once every arbiter has replied).
func (n *Node) onReply(m q.Message) {
	j := m.Arbiter
	if n.replied[j] {
		return
	}
	n.replied[j] = true
	n.nReplied++
	n.token = max(n.token, m.Token)
	if n.inqQueue[j] {
		n.inqQueue[j] = false
		n.onInquire(j)
	}
	n.onTransfer(m)
	if n.nReplied == len(n.cfg.Quorum) {
		n.state = q.Held
		n.out.Enter(n.token)
	}
}

// onFail is A.7.
func (n *Node) onFail() {
	n.failed = true
	for j, queued := range n.inqQueue {
		if queued {
			n.inqQueue[j] = false
			n.onInquire(j)
		}
	}
}

// onRelease is C.1.
func (n *Node) onRelease(m q.Message) {
	n.counter = max(n.counter, m.Token)
	if n.lock != (q.Stamp{Seq: m.Seq, Node: m.From}) {
		// A node that holds our reply by proxy, done before the proxy's
		// release(i, j) names it: remember, and skip it when that comes.
		if s, ok := n.reqQueue.Find(m.From); ok && s.Seq == m.Seq && m.Site == q.None {
			n.reqQueue.Remove(m.From)
			n.early[m.From] = m.Seq
		}
		return
	}
	if m.Site != q.None && n.early[m.Site] != 0 && n.early[m.Site] == m.SiteSeq {
		n.early[m.Site] = 0
		m.Site = q.None // passed on and already given back
	}
	if m.Site != q.None {
		if next, ok := n.reqQueue.Remove(m.Site); ok {
			// The releaser replied to next on our behalf: it holds us now.
			n.lock = next
			n.counter = max(n.counter, m.Token+1)
			if len(n.reqQueue) > 0 {
				n.transferTo(n.reqQueue.Head(), n.reqQueue.Head().Precedes(next))
			}
			return
		}
	}
	if len(n.reqQueue) == 0 {
		n.lock = q.NoStamp
		return
	}
	n.lock = n.reqQueue.Pop()
	n.grant()
}
