// Package sim runs quorum-mode machines (package quorumfallback) over a
// deterministic, seeded network of reliable FIFO links, the papers' model:
// every message arrives, in the order sent on its link, after a delay drawn
// from a range (a fixed one-way delay T when the range is one value). It
// checks the protocols' properties as it goes — no two nodes in the
// critical section at once, fencing tokens strictly increasing, every
// request granted (no deadlock), no request overtaken without bound (no
// starvation) — and measures what the papers count: messages per entry by
// kind, synchronization delay, waiting time.
//
// A run is a pure function of its Options: one math/rand generator seeded
// from Options.Seed, no maps iterated, no wall clock. Script replays a
// paper's example message by message instead.
package sim

import (
	"container/heap"
	"fmt"
	"math/rand"
	"strings"

	q "github.com/mcnode/mcnode/quorumfallback"
)

// Options configures a run. Times are in abstract units; with MinDelay =
// MaxDelay = T they are multiples of the paper's T.
type Options struct {
	Seed int64
	// Nodes are the machines, node i at index i, fresh (all Idle).
	Nodes []q.Protocol
	// MinDelay and MaxDelay bound the one-way delay of a message; a link
	// still delivers in order, so a message waits for the one before it.
	MinDelay, MaxDelay int64
	// MinHold and MaxHold bound how long a node stays in the critical
	// section.
	MinHold, MaxHold int64
	// MinThink and MaxThink bound how long a node waits after leaving
	// before it requests again. Zero is heavy load: every node always
	// waiting.
	MinThink, MaxThink int64
	// Serial is light load: one request at a time in the whole system, the
	// next made by a random node only once everything is quiet.
	Serial bool
	// Entries is how many critical-section entries each node makes (with
	// Serial: in total).
	Entries int
	// BypassLimit, if positive, fails the run when a waiting request sees
	// more entries than this by others (starvation).
	BypassLimit int
	// Size, if set, gives a message's size on the wire, summed in
	// Result.Bytes (the simulation itself sends no bytes).
	Size func(q.Message) int
	// Trace, if set, gets a line per delivery and entry.
	Trace func(string)
	// Renew, if set, makes a new machine for node i. After each step of a
	// node whose machine is quiescent (q.Protocol.Quiescent), the run
	// replaces the machine, with probability RenewRate, by a new one given
	// the old one's counters, as the runtime frees an idle machine and
	// makes one anew when the resource is next used.
	Renew     func(i q.ID) (q.Protocol, error)
	RenewRate float64
	// Faults, if set, crashes nodes and cuts links as the run goes, with
	// the runtime's failure handling (see Faults).
	Faults *Faults
}

// Result is what a run measured. Err is the first property it broke.
type Result struct {
	Entries int
	// EntriesBy counts entries per node.
	EntriesBy []int
	Messages  int
	Bytes     int // with Options.Size: the messages' total size
	ByKind    [q.Kinds]int
	// SyncDelays has, for each entry that a node was already waiting for
	// when the previous holder left, the time from that exit to the entry.
	SyncDelays []int64
	// Waits has each request's time from Request to entry.
	Waits     []int64
	MaxBypass int // most entries by others during one wait
	Renewed   int // machines replaced by new ones (Options.Renew)
	End       int64
	Err       error
	// With Options.Faults: what was injected and what it cost.
	Crashes, Cuts, Restarts int
	// ReleaseCuts counts the cuts among Cuts aimed at a holder handing a
	// permission on (Faults.ReleaseCuts).
	ReleaseCuts  int
	Lost         int   // critical sections ended by a lease running out
	Dropped      int   // messages lost on a cut link or to a dead node
	MaxFaultWait int64 // longest wait for an entry through a failure
	MaxQuietWait int64 // longest wait for an entry with no failure during it
}

// PerEntry is messages per critical-section entry.
func (r Result) PerEntry() float64 {
	if r.Entries == 0 {
		return 0
	}
	return float64(r.Messages) / float64(r.Entries)
}

// MeanSyncDelay is the mean of SyncDelays, 0 if there are none.
func (r Result) MeanSyncDelay() float64 {
	if len(r.SyncDelays) == 0 {
		return 0
	}
	var sum int64
	for _, d := range r.SyncDelays {
		sum += d
	}
	return float64(sum) / float64(len(r.SyncDelays))
}

type evKind uint8

const (
	evDeliver evKind = iota
	evRequest
	evRelease
)

type event struct {
	at   int64
	n    uint64 // insertion order: ties go first come, first served
	kind evKind
	node q.ID
	msg  q.Message
	// With faults: the peer an event is about, the incarnation of node
	// (or peer) it was scheduled for, and the link's generation when a
	// message was sent or a link went down.
	peer q.ID
	inc  uint64
	gen  uint64
	// clock is the sender's clock when it sent msg: the runtime's frames
	// carry it, and the receiver's machine adopts it (Lamport's rule).
	clock uint64
}

type events []event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	if e[i].at != e[j].at {
		return e[i].at < e[j].at
	}
	return e[i].n < e[j].n
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

type run struct {
	opt      Options
	rng      *rand.Rand
	now      int64
	queue    events
	n        uint64
	linkFree map[[2]q.ID]int64 // when each link's last message arrives

	holder    q.ID
	lastToken uint64
	lastExit  int64
	waitingAt []int64 // when each node requested, -1 if not waiting
	bypass    []int
	done      []int // entries per node
	pending   int   // nodes waiting or holding
	res       Result
	f         *faultState // with Options.Faults
}

// Run runs a simulation to the end: every node has made its entries and
// every message is delivered, or a property broke.
func Run(opt Options) Result {
	if opt.MaxDelay < opt.MinDelay {
		opt.MaxDelay = opt.MinDelay
	}
	r := &run{
		opt:       opt,
		rng:       rand.New(rand.NewSource(opt.Seed)),
		linkFree:  map[[2]q.ID]int64{},
		holder:    q.None,
		lastExit:  -1,
		waitingAt: make([]int64, len(opt.Nodes)),
		bypass:    make([]int, len(opt.Nodes)),
		done:      make([]int, len(opt.Nodes)),
	}
	r.res.EntriesBy = r.done
	for i := range r.waitingAt {
		r.waitingAt[i] = -1
	}
	if opt.Faults != nil {
		if err := r.startFaults(); err != nil {
			r.res.Err = err
			return r.res
		}
	}
	if opt.Serial {
		r.scheduleSerial()
	} else {
		for i := range opt.Nodes {
			r.at(r.between(opt.MinThink, opt.MaxThink), event{kind: evRequest, node: i, inc: r.inc(i)})
		}
	}
	for r.queue.Len() > 0 && r.res.Err == nil {
		e := heap.Pop(&r.queue).(event)
		r.now = e.at
		switch e.kind {
		case evDeliver:
			if r.f == nil || r.deliverable(e) {
				r.deliver(e.msg, e.clock)
			}
		case evRequest:
			if r.f != nil && !r.current(e) {
				break
			}
			r.tracef("%d: node %d requests", r.now, e.node)
			r.raiseTokens(e.node)
			if err := opt.Nodes[e.node].Request(); err != nil {
				r.fail("node %d: request: %v", e.node, err)
			}
			r.waitingAt[e.node] = r.now
			r.pending++
			if r.f != nil {
				r.f.faultsAt[e.node] = r.f.faults
			}
			r.collect(e.node)
		case evRelease:
			if r.f != nil && !r.current(e) {
				break
			}
			r.tracef("%d: node %d leaves", r.now, e.node)
			r.leave(e.node)
		default:
			r.faultEvent(e)
		}
		if opt.Serial && r.queue.Len() == 0 && r.res.Entries < opt.Entries && r.res.Err == nil {
			r.scheduleSerial()
		}
	}
	r.res.End = r.now
	if r.res.Err == nil && r.pending > 0 {
		r.fail("deadlock: the network is quiet but %s", r.stuck())
	}
	return r.res
}

func (r *run) between(lo, hi int64) int64 {
	if hi <= lo {
		return lo
	}
	return lo + r.rng.Int63n(hi-lo+1)
}

func (r *run) at(delay int64, e event) {
	e.at = r.now + delay
	e.n = r.n
	r.n++
	heap.Push(&r.queue, e)
}

func (r *run) scheduleSerial() {
	d := r.between(r.opt.MinThink, r.opt.MaxThink)
	i := r.rng.Intn(len(r.opt.Nodes))
	r.at(d, event{kind: evRequest, node: i, inc: r.inc(i)})
}

func (r *run) deliver(m q.Message, clock uint64) {
	r.tracef("%d: deliver %v", r.now, m)
	r.raiseTokens(m.To)
	r.opt.Nodes[m.To].RaiseClock(clock)
	if err := r.opt.Nodes[m.To].Step(m); err != nil {
		r.fail("node %d rejected %v: %v", m.To, m, err)
	}
	r.collect(m.To)
}

// leave ends node i's critical section: it releases.
func (r *run) leave(i q.ID) {
	r.holder, r.lastExit = q.None, r.now
	r.raiseTokens(i)
	if err := r.opt.Nodes[i].Release(); err != nil {
		r.fail("node %d: release: %v", i, err)
	}
	r.pending--
	sent := r.collect(i)
	if r.f != nil {
		r.cutOnRelease(i, sent)
	}
	r.next(i)
}

// next schedules node i's next request after it left.
func (r *run) next(i q.ID) {
	if r.opt.Serial || r.done[i] >= r.opt.Entries {
		return
	}
	r.at(r.between(r.opt.MinThink, r.opt.MaxThink), event{kind: evRequest, node: i, inc: r.inc(i)})
}

// collect sends what node i's machine has ready, and returns the messages.
func (r *run) collect(i q.ID) []q.Message {
	rd := r.opt.Nodes[i].Ready()
	for _, m := range rd.Messages {
		if m.From != i || m.To == i || m.To < 0 || m.To >= len(r.opt.Nodes) {
			r.fail("node %d sent a malformed message %v", i, m)
			return nil
		}
		r.res.Messages++
		if r.opt.Size != nil {
			r.res.Bytes += r.opt.Size(m)
		}
		if m.Kind.Valid() {
			r.res.ByKind[m.Kind]++
		}
		link := [2]q.ID{m.From, m.To}
		var gen uint64
		if r.f != nil {
			if !r.f.up(m.From, m.To) {
				r.res.Dropped++
				continue
			}
			gen = r.f.gen[m.From][m.To]
		}
		at := max(r.now+r.between(r.opt.MinDelay, r.opt.MaxDelay), r.linkFree[link])
		r.linkFree[link] = at
		r.at(at-r.now, event{kind: evDeliver, msg: m, gen: gen, clock: r.opt.Nodes[i].Clock()})
	}
	if rd.Entered {
		r.enter(i, rd.Token)
	}
	if old := r.opt.Nodes[i]; r.opt.Renew != nil && r.f == nil && old.Quiescent() && r.rng.Float64() < r.opt.RenewRate {
		m, err := r.opt.Renew(i)
		if err != nil {
			r.fail("node %d: a new machine: %v", i, err)
			return nil
		}
		m.RaiseClock(old.Clock())
		m.RaiseTokens(old.HighestToken())
		r.opt.Nodes[i] = m
		r.res.Renewed++
		r.tracef("%d: node %d's machine made anew", r.now, i)
	}
	return rd.Messages
}

func (r *run) enter(i q.ID, token uint64) {
	r.tracef("%d: node %d enters, token %d", r.now, i, token)
	if r.f != nil {
		r.tracef("%d: node %d's quorum: %v", r.now, i, r.opt.Nodes[i].(q.FaultTolerant).Quorum())
	}
	switch {
	case r.holder != q.None:
		r.fail("mutual exclusion broken: node %d entered while node %d holds it", i, r.holder)
		return
	case r.waitingAt[i] < 0:
		r.fail("node %d entered without a request", i)
		return
	}
	if r.f != nil && r.leaseGone(i) {
		// Its runtime never tells the application: the lock is lost at once.
		r.tracef("%d: node %d's lease ran out before it entered", r.now, i)
		r.res.Lost++
		r.waitingAt[i] = -1
		r.holder = i // for leave
		r.leave(i)
		r.waitingAt[i] = -1
		return
	}
	if token <= r.lastToken {
		r.fail("fencing token %d of node %d does not exceed the previous %d", token, i, r.lastToken)
		return
	}
	r.holder, r.lastToken = i, token
	r.res.Entries++
	r.done[i]++
	wait := r.now - r.waitingAt[i]
	r.res.Waits = append(r.res.Waits, wait)
	if r.lastExit >= 0 && r.waitingAt[i] <= r.lastExit {
		r.res.SyncDelays = append(r.res.SyncDelays, r.now-r.lastExit)
	}
	r.waitingAt[i] = -1
	r.bypass[i] = 0
	if r.f != nil {
		if r.f.faults > r.f.faultsAt[i] {
			r.res.MaxFaultWait = max(r.res.MaxFaultWait, wait)
		} else {
			r.res.MaxQuietWait = max(r.res.MaxQuietWait, wait)
		}
	}
	for j, w := range r.waitingAt {
		if w >= 0 {
			r.bypass[j]++
			r.res.MaxBypass = max(r.res.MaxBypass, r.bypass[j])
			if r.opt.BypassLimit > 0 && r.bypass[j] > r.opt.BypassLimit {
				r.fail("starvation: node %d has waited through %d entries by others", j, r.bypass[j])
				return
			}
		}
	}
	r.at(r.between(r.opt.MinHold, r.opt.MaxHold), event{kind: evRelease, node: i, inc: r.inc(i), gen: r.entrySerial(i)})
	if r.f != nil {
		r.watchLease(i)
	}
}

func (r *run) stuck() string {
	var b strings.Builder
	for i, p := range r.opt.Nodes {
		if p.State() != q.Idle {
			fmt.Fprintf(&b, " node %d %v since %d", i, p.State(), r.waitingAt[i])
			if r.f != nil {
				fmt.Fprintf(&b, " (incarnation %d, asking %v, holds down %v)", r.f.inc[i], p.(q.FaultTolerant).Quorum(), r.f.downList(i))
			}
			b.WriteString(";")
		}
		if s, ok := p.(fmt.Stringer); ok {
			fmt.Fprintf(&b, " node %d: %v;", i, s)
		}
	}
	return b.String()
}

func (r *run) fail(format string, args ...any) {
	if r.res.Err == nil {
		r.res.Err = fmt.Errorf("at time %d: %s", r.now, fmt.Sprintf(format, args...))
	}
}

func (r *run) tracef(format string, args ...any) {
	if r.opt.Trace != nil {
		r.opt.Trace(fmt.Sprintf(format, args...))
	}
}
