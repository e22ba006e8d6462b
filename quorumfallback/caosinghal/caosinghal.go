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
// # Failures
//
// Section 6 makes the protocol fault tolerant with a fault-tolerant
// coterie: a site that learns S_i failed multicasts failure(i); a site
// whose request set holds S_i releases what it got and builds another
// quorum (step 1). Step 2, the arbiter's part, is garbled in our copy of
// the paper (nine cases that repeat two sentences). What it must do
// follows from the algorithm, and from one hazard the text does not face:
// a node leaving the critical section hands an arbiter's permission on by
// itself (reply(j) to the next node, release(i, next) to j). If it fails
// between the two, or one of them is lost with its link, the arbiter and
// the next node disagree about who holds the permission. Leases do not
// help: the next node is alive and in touch with j. We decided:
//
//   - Down(i) (the runtime's failure(i), called once i's lease has run out,
//     see the quorumfallback package doc) makes the arbiter drop i's
//     request. If the arbiter is locked for i, every node it sent i a
//     transfer about may hold its permission by proxy; if it is locked for
//     a node that got the permission by proxy from i (release(i, next)
//     came), that reply may have been lost. Either way the arbiter asks
//     those nodes (Query, naming i's request) whether they hold it, and
//     meanwhile grants nothing, inquires nobody and answers new requests
//     with a fail. A node that holds it says so (Answer) and the arbiter
//     is locked for it. A node that does not says so, and from then on
//     refuses a reply by proxy from that request of i (it may still be on
//     its way), and asks the arbiter again. Once every node asked has said
//     no or is down, the arbiter locks for the head of its queue. Messages
//     go only on failure; with none, the protocol is the paper's. A
//     proxied reply names the proxy's request (SiteSeq), so that a later
//     request of the same node is not refused; Up(i) clears what was
//     refused of i. Queries are numbered and answers name theirs, so that
//     an answer from an earlier doubt is not taken for a later one. Like
//     every stamp here, this needs a new incarnation's sequence numbers
//     above the old one's: the runtime starts them at the wall clock.
//   - A requester waiting for a quorum that holds i gives back what it got
//     (a release to every live arbiter asked, which also withdraws a
//     request still queued) and asks a substitute quorum with a new
//     sequence number; with none (a grid, or too many failures) it waits
//     for Up. Step 2's cases 1 and 2 ("continues to wait for the site to
//     return") are this wait.
//   - A node leaving the critical section passes nothing on to a node that
//     is down (release(i, max) instead, and the arbiter grants), and a
//     node takes no reply on behalf of an arbiter that is down.
//
// Failures also bring out two orders the paper's proofs do not meet, both
// now handled (and both possible, if rarer, without failures): a yield
// that comes back from a node holding the permission by proxy before the
// proxy's release(i, j) reaches the arbiter (the arbiter remembers it and,
// when release(i, j) comes, does what A.4 would have: the next in line is
// locked for); and a yield that arrives when the request that caused the
// inquire has been withdrawn (the arbiter locks for the yielding node
// again). The seeded simulation (sim.Faults, with cuts aimed at the moment
// a holder passes a permission on) finds each of these if it is left out;
// so do TestDownWhileTheProxiedReplyHolds and
// TestDownAfterTheProxiedReplyWasDelayed, message by message.
package caosinghal

import (
	"fmt"
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
	// Substitute, if set, builds a quorum of nodes for which alive is true
	// (a fault-tolerant coterie's substitute, e.g. coterie.TreeQuorum),
	// reporting false if none exists. Without it the node asks Quorum, and
	// only while none of its members is down.
	Substitute func(alive func(q.ID) bool) ([]q.ID, bool)
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

	// Failures (see Down).
	down   []bool
	quorum []q.ID // req_set(Self) or its substitute: the arbiters asked
	parked bool   // waiting, but no quorum of live arbiters exists: nothing asked

	// Requesting.
	state     q.State
	mine      q.Stamp
	failed    bool
	replied   []bool
	nReplied  int
	inqQueue  []bool // inq_queue, by arbiter
	tranStack []transfer
	token     uint64
	// noProxy lists, by arbiter, the proxies' requests (node and sequence
	// number) whose replies on the arbiter's behalf this request refuses:
	// the arbiter asked (Query) and was told this request does not hold
	// it (see Down). A proxy's next incarnation is not refused: its Up
	// clears its entries, and its sequence numbers start above the old
	// one's (the runtime raises them to the wall clock).
	noProxy [][]q.Stamp

	// Arbitrating.
	lock     q.Stamp
	reqQueue q.Queue
	counter  uint64
	// passable lists the requests this arbiter sent the node it is locked
	// for a transfer about, and that have not given its permission back
	// since: each of them may get the permission by proxy.
	passable []q.Stamp
	// via is the request whose release(i, j) locked the arbiter for lock:
	// lock got the permission by proxy from that node, unless the reply was
	// lost (NoStamp: the arbiter replied itself, or lock answered).
	via q.Stamp
	// doubt: a failure left the arbiter not knowing who holds its
	// permission; it asked the nodes in asking (Query), and grants nothing
	// until each has answered or is down (see Down).
	doubt  bool
	asking []query
	// queries numbers the queries sent, so that an answer to an earlier
	// one (about the same request, in an earlier doubt) is not taken for
	// the answer to a later one.
	queries uint64
	// yielded holds, by node, the request (Seq) of a node that got this
	// arbiter's reply by proxy from the node locked for and yielded it
	// before that proxy's release(i, j) came (see onYield); 0: none. It
	// concerns the current lock only.
	yielded []uint64
}

// query is a Query sent and not answered yet: about request r, number id.
type query struct {
	r  q.Stamp
	id uint64
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
		down:     make([]bool, cfg.N),
		quorum:   cfg.Quorum,
		replied:  make([]bool, cfg.N),
		inqQueue: make([]bool, cfg.N),
		noProxy:  make([][]q.Stamp, cfg.N),
		yielded:  make([]uint64, cfg.N),
		lock:     q.NoStamp,
		via:      q.NoStamp,
	}, nil
}

// State reports what the node is doing with the resource.
func (n *Node) State() q.State { return n.state }

// RaiseTokens makes the tokens this node grants greater than floor: its
// counter of the highest token seen starts there.
func (n *Node) RaiseTokens(floor uint64) { n.counter = max(n.counter, floor) }

// HighestToken is the highest token seen (granted, released) or held.
func (n *Node) HighestToken() uint64 { return max(n.counter, n.token) }

// String describes the machine's state, for traces and test failures.
func (n *Node) String() string {
	return fmt.Sprintf("%v seq %d, replied %d of %v (failed %v), tran_stack %v; lock %v via %v, req_queue %v, passable %v, in doubt %v asking %v",
		n.state, n.mine.Seq, n.nReplied, n.quorum, n.failed, n.tranStack, n.lock, n.via, n.reqQueue, n.passable, n.doubt, n.asking)
}

// Quiescent: idle, not locked, nobody queued and no transfer kept (see
// q.Protocol). Messages about an old request carry its sequence number,
// which an idle node ignores.
func (n *Node) Quiescent() bool {
	return n.state == q.Idle && n.lock == q.NoStamp && len(n.reqQueue) == 0 && len(n.tranStack) == 0 &&
		!slices.ContainsFunc(n.yielded, func(s uint64) bool { return s != 0 })
}

// Clock is the highest sequence number sent, received or observed.
func (n *Node) Clock() uint64 { return n.seq }

// RaiseClock makes the next request's sequence number greater than floor.
func (n *Node) RaiseClock(floor uint64) { n.seq = max(n.seq, floor) }

// Ready takes the messages to send and whether the node entered.
func (n *Node) Ready() q.Ready { return n.out.Ready() }

// Quorum is the set of arbiters whose permission the current request needs
// (the last one's, when idle).
func (n *Node) Quorum() []q.ID { return slices.Clone(n.quorum) }

// Request is A.1.
func (n *Node) Request() error {
	if n.state != q.Idle {
		return q.ErrBusy
	}
	n.state = q.Waiting
	n.ask()
	n.out.Deliver(n.step)
	return nil
}

// ask sends a new request, with a new sequence number, to a quorum of live
// arbiters, or parks it if there is none.
func (n *Node) ask() {
	n.seq++
	n.mine = q.Stamp{Seq: n.seq, Node: n.cfg.Self}
	n.tranStack = n.tranStack[:0]
	clear(n.inqQueue)
	n.failed = false
	clear(n.replied)
	for j := range n.noProxy {
		n.noProxy[j] = n.noProxy[j][:0]
	}
	n.nReplied, n.token = 0, 0
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

// Release is C: reply on behalf of each arbiter to the top transfer it
// asked for, then release(i, j) to every arbiter. A transfer to a node
// that is down is not made: its arbiter, told release(i, max), grants the
// next in line itself.
func (n *Node) Release() error {
	if n.state != q.Held {
		return q.ErrNotHeld
	}
	n.state = q.Idle
	tranSet := make(map[q.ID]transfer) // arbiter -> the site it was passed to
	for len(n.tranStack) > 0 {
		t := n.tranStack[len(n.tranStack)-1]
		n.tranStack = n.tranStack[:len(n.tranStack)-1]
		if !n.down[t.site] {
			// SiteSeq names the request the proxy held it for (see Down).
			n.out.Send(q.Message{Kind: q.Grant, To: t.site, Arbiter: t.arbiter, Seq: t.siteSeq, Site: q.None, SiteSeq: n.mine.Seq, Token: n.token + 1})
			tranSet[t.arbiter] = t
		}
		n.dropTransfers(t.arbiter)
	}
	for _, k := range n.quorum {
		if n.down[k] {
			continue
		}
		m := q.Message{Kind: q.Release, To: k, Arbiter: k, Seq: n.mine.Seq, Site: q.None, Token: n.token}
		if t, ok := tranSet[k]; ok {
			m.Site, m.SiteSeq = t.site, t.siteSeq
		}
		n.out.Send(m)
	}
	n.out.Deliver(n.step)
	return nil
}

// Down tells the machine that node i has failed (section 6, failure(i);
// see the package doc, "Failures"). The runtime calls it once i can no
// longer act on what it held: i's lease has run out and its messages are
// refused from then on.
//
// As an arbiter the node drops i's queued request. If it is locked for i,
// i may have passed the permission on by proxy to a node it was sent a
// transfer about, its release(i, j) lost; if it is locked for a node that
// got the permission by proxy from i, that reply may be lost. Either way
// the arbiter asks those nodes whether they hold it (Query) and grants
// again once one says yes, or each says no or is down. As a requester
// still waiting for a quorum that holds i, the node gives back what it got
// and asks a substitute quorum anew, or waits for one to exist. A node in
// its critical section keeps it: its runtime ends it if a lease it depends
// on runs out.
func (n *Node) Down(i q.ID) {
	if i < 0 || i >= n.cfg.N || i == n.cfg.Self || n.down[i] {
		return
	}
	n.down[i] = true
	n.reqQueue.Remove(i)
	n.yielded[i] = 0
	n.dropPassable(func(s q.Stamp) bool { return s.Node == i })
	n.dropTransfers(i)
	n.inqQueue[i] = false
	switch {
	case n.lock.Node == i:
		n.doubt, n.via = true, q.NoStamp
		n.query(n.passable, n.lock)
	case n.via.Node == i:
		proxy := n.via
		n.doubt, n.via = true, q.NoStamp
		n.query([]q.Stamp{n.lock}, proxy)
	}
	n.asking = slices.DeleteFunc(n.asking, func(a query) bool { return a.r.Node == i })
	n.settle()
	if n.state == q.Waiting && !n.parked && slices.Contains(n.quorum, i) {
		n.giveBack()
		n.ask()
	}
	n.out.Deliver(n.step)
}

// query asks the nodes of these requests, not asked yet, whether they
// hold this arbiter's permission, which the node of request proxy may have
// passed on to them (see Down).
func (n *Node) query(reqs []q.Stamp, proxy q.Stamp) {
	for _, r := range reqs {
		if !slices.ContainsFunc(n.asking, func(a query) bool { return a.r == r }) {
			n.queries++
			n.asking = append(n.asking, query{r: r, id: n.queries})
			m := n.send(q.Query, r.Node, r.Seq)
			m.Site, m.SiteSeq, m.Token = proxy.Node, proxy.Seq, n.queries
			n.out.Send(m)
		}
	}
}

// onQuery answers an arbiter's Query about request seq: whether this node
// holds its permission. If it does not and still waits for it, it will
// refuse the permission from the proxy named (which is down at the
// arbiter), and asks the arbiter again: the arbiter will reply itself.
func (n *Node) onQuery(m q.Message) {
	j := m.Arbiter
	holds := m.Seq == n.mine.Seq && n.state != q.Idle && n.replied[j]
	// SiteSeq names the query answered.
	a := q.Message{Kind: q.Answer, To: j, Arbiter: j, Seq: m.Seq, Site: q.None, SiteSeq: m.Token, Token: n.token}
	if holds {
		a.Site = n.cfg.Self
	}
	n.out.Send(a)
	if !holds && m.Seq == n.mine.Seq && n.state == q.Waiting {
		if p := (q.Stamp{Seq: m.SiteSeq, Node: m.Site}); !slices.Contains(n.noProxy[j], p) {
			n.noProxy[j] = append(n.noProxy[j], p)
		}
		n.out.Send(q.Message{Kind: q.Request, To: j, Arbiter: j, Seq: n.mine.Seq, Site: q.None})
	}
}

// onAnswer takes a node's answer to the Query it names.
func (n *Node) onAnswer(m q.Message) {
	r := q.Stamp{Seq: m.Seq, Node: m.From}
	asked := query{r: r, id: m.SiteSeq}
	if !n.doubt || !slices.Contains(n.asking, asked) {
		return
	}
	n.asking = slices.DeleteFunc(n.asking, func(a query) bool { return a == asked })
	if m.Site == q.None {
		n.settle()
		return
	}
	// r holds the permission: the arbiter is locked for it.
	n.counter = max(n.counter, m.Token)
	if r == n.lock {
		n.doubt, n.asking = false, n.asking[:0]
	} else {
		if s, ok := n.reqQueue.Find(r.Node); ok && s == r {
			n.reqQueue.Remove(r.Node)
		}
		n.setLock(r)
	}
	if len(n.reqQueue) > 0 {
		n.transferTo(n.reqQueue.Head(), n.reqQueue.Head().Precedes(r))
	}
}

// Up tells the machine that node i is back, a new incarnation that holds
// nothing of the old one's. A parked request asks again.
func (n *Node) Up(i q.ID) {
	if i < 0 || i >= n.cfg.N || !n.down[i] {
		return
	}
	n.down[i] = false
	for j := range n.noProxy {
		// What the incarnation put down sent is gone; the new one's
		// replies by proxy count.
		n.noProxy[j] = slices.DeleteFunc(n.noProxy[j], func(p q.Stamp) bool { return p.Node == i })
	}
	if n.state == q.Waiting && n.parked {
		n.ask()
	}
	n.out.Deliver(n.step)
}

// giveBack ends the current request at every live arbiter asked: a
// release gives back a reply and withdraws a request still queued (see
// onRelease).
func (n *Node) giveBack() { n.out.GiveBack(n.quorum, n.down, n.mine.Seq, n.token) }

// addPassable records that r may get the permission by proxy.
func (n *Node) addPassable(r q.Stamp) {
	if !slices.Contains(n.passable, r) {
		n.passable = append(n.passable, r)
	}
}

// dropPassable deletes the passable entries gone matches.
func (n *Node) dropPassable(gone func(q.Stamp) bool) {
	n.passable = slices.DeleteFunc(n.passable, gone)
}

// settle grants again once a failure's doubt is over: every node asked
// said it does not hold the permission, or is down.
func (n *Node) settle() {
	if n.doubt && len(n.asking) == 0 {
		n.relockNext()
	}
}

// setLock locks the arbiter for s (NoStamp: unlocks), replying itself;
// nobody was sent a transfer about the new lock yet.
func (n *Node) setLock(s q.Stamp) {
	clear(n.yielded) // about the proxy's release that just came, or that a failure lost
	n.lock, n.passable, n.via = s, n.passable[:0], q.NoStamp
	n.doubt, n.asking = false, n.asking[:0]
}

// relockNext locks for the head of req_queue and replies to it, or
// unlocks.
func (n *Node) relockNext() {
	if len(n.reqQueue) == 0 {
		n.setLock(q.NoStamp)
		return
	}
	n.setLock(n.reqQueue.Pop())
	n.grant()
}

// dropTransfers deletes every tran_stack entry sent by arbiter j.
func (n *Node) dropTransfers(j q.ID) {
	n.tranStack = slices.DeleteFunc(n.tranStack, func(t transfer) bool { return t.arbiter == j })
}

// Step handles a message from another node. One from a node that is down
// is ignored: it comes from a failed incarnation, whose part is over.
func (n *Node) Step(m q.Message) error {
	if err := q.Check(m, n.cfg.Self, n.cfg.N); err != nil {
		return err
	}
	if n.down[m.From] {
		return nil
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
	case q.Query:
		n.onQuery(m)
	case q.Answer:
		n.onAnswer(m)
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
	n.addPassable(site)
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
		n.addPassable(h)
	}
	n.out.Send(m)
}

// onRequest is A.2.
func (n *Node) onRequest(r q.Stamp) {
	n.seq = max(n.seq, r.Seq)
	if n.doubt {
		// Not knowing who holds the permission, the arbiter sends no
		// transfer or inquire: r waits like a request behind a holder.
		// As in A.2, every request but the head of req_queue has been
		// sent a fail: the head it overtakes is sent one now.
		if _, dup := n.reqQueue.Find(r.Node); !dup && n.lock != r {
			if len(n.reqQueue) > 0 && r.Precedes(n.reqQueue.Head()) {
				h := n.reqQueue.Head()
				n.out.Send(n.send(q.Failed, h.Node, h.Seq))
			}
			n.reqQueue.Push(r)
			n.out.Send(n.send(q.Failed, r.Node, r.Seq))
		}
		return
	}
	if n.lock == q.NoStamp {
		n.setLock(r)
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

// onYield is A.4. The request that caused the inquire may have been
// withdrawn since (see Down): with nobody else queued, the arbiter locks
// for the yielding node again and replies anew.
//
// A yield can also come from a queued node that got the reply by proxy
// and was inquired (an inquire it kept, A.3, from before) before the
// proxy's release(i, j) arrived, on another link: the arbiter remembers
// it, and when release(i, j) names that request, does what A.4 would have
// done then (see onRelease).
func (n *Node) onYield(from q.Stamp) {
	if n.lock != from {
		if s, ok := n.reqQueue.Find(from.Node); ok && s == from {
			n.yielded[from.Node] = from.Seq
		}
		return
	}
	n.reqQueue.Push(n.lock)
	n.relockNext()
}

// onTransfer is A.5 for a transfer alone or piggybacked.
func (n *Node) onTransfer(m q.Message) {
	if m.Kind != q.Transfer && !m.WithTransfer {
		return
	}
	if n.replied[m.Arbiter] && !n.down[m.Site] {
		n.tranStack = append(n.tranStack, transfer{site: m.Site, siteSeq: m.SiteSeq, arbiter: m.Arbiter})
	}
}

// onReply is A.6 (and B: enter once every arbiter has replied). A reply
// on behalf of an arbiter that is down does not count: the request asks
// another quorum.
func (n *Node) onReply(m q.Message) {
	j := m.Arbiter
	if n.replied[j] || n.down[j] || !slices.Contains(n.quorum, j) || m.From != j && slices.Contains(n.noProxy[j], q.Stamp{Seq: m.SiteSeq, Node: m.From}) {
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
	if n.nReplied == len(n.quorum) {
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

// onRelease is C.1. A release from a node that is not the one locked for
// gives back a permission it got by proxy before the proxy's release(i, j)
// came, or withdraws a request given up (see Down); either way its request
// leaves req_queue, and a release(i, j) naming that request later hands
// the lock to nobody: the arbiter grants the next in line.
func (n *Node) onRelease(m q.Message) {
	n.counter = max(n.counter, m.Token)
	r := q.Stamp{Seq: m.Seq, Node: m.From}
	if n.lock != r {
		if s, ok := n.reqQueue.Find(m.From); ok && s == r && m.Site == q.None {
			n.reqQueue.Remove(m.From)
			n.yielded[m.From] = 0
		}
		// Either way r holds nothing here now.
		n.dropPassable(func(s q.Stamp) bool { return s == r })
		n.asking = slices.DeleteFunc(n.asking, func(a query) bool { return a.r == r })
		n.settle()
		return
	}
	if m.Site != q.None && n.yielded[m.Site] != 0 && n.yielded[m.Site] == m.SiteSeq {
		// Passed on and yielded already: A.4, the next in line gets it.
		n.yielded[m.Site] = 0
		m.Site = q.None
	}
	if m.Site != q.None {
		if next, ok := n.reqQueue.Find(m.Site); ok && next.Seq == m.SiteSeq {
			// The releaser replied to next on our behalf: it holds us now.
			n.reqQueue.Remove(m.Site)
			n.setLock(next)
			n.via = r
			n.counter = max(n.counter, m.Token+1)
			if len(n.reqQueue) > 0 {
				n.transferTo(n.reqQueue.Head(), n.reqQueue.Head().Precedes(next))
			}
			return
		}
	}
	n.relockNext()
}
