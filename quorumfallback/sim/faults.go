package sim

import (
	"fmt"

	q "github.com/mcnode/mcnode/quorumfallback"
)

// Faults makes a run's nodes fail and come back, under the rules the
// runtime keeps (the quorumfallback package doc, "Failures"):
//
//   - A link goes down when a node crashes (all its links) or when it is cut
//     (one link, both nodes alive). What was on its way over it is lost. A
//     cut mends at once, but only new incarnations may use it (below).
//   - A node that has not heard a peer for Detect suspects it: it refuses
//     that incarnation from then on and tells every node it reaches
//     (failure(i), Cao and Singhal section 6), which refuse it too and pass
//     the word on. A node that learns it is refused stops and comes back as
//     a new incarnation.
//   - A node calls Down(i) on its machines Lease+Margin after it last heard
//     from i, and only then accepts i's next incarnation, calling Up(i).
//   - A holder's critical section ends (its lease is lost) Lease-Margin after
//     it last heard from any member of its quorum.
//   - A new incarnation acts on nothing for Lease+Margin: any permission its
//     predecessor gave has run out by then. It learns who is down from the
//     nodes that accept it; a node it cannot reach by then is down for it.
//   - Fencing tokens are raised to the time before every step (a hybrid
//     clock), so that a grant made after a dead holder's lease ran out
//     exceeds the token it held, which no live node may know.
//
// Crashed nodes come back after Restart; refused ones as soon as they
// learn it. Faults are drawn from the run's seed: Crashes crashes and Cuts
// cuts of random links between random nodes, holders and arbiters alike, at
// random times before Horizon; and up to ReleaseCuts cuts aimed at a
// protocol's most fragile moment: a holder leaving the critical section
// that passes an arbiter's permission on by proxy (Cao and Singhal) has
// its link to that arbiter cut right after it sent its release(i, j),
// which is lost, while its reply on the arbiter's behalf is not.
type Faults struct {
	Lease, Margin, Detect int64
	Restart               int64
	Crashes, Cuts         int
	ReleaseCuts           int
	Horizon               int64
	// New makes node i's machine for a new incarnation; it must implement
	// q.FaultTolerant, as must Options.Nodes.
	New func(i q.ID) (q.Protocol, error)
}

const (
	evCrash evKind = iota + evRelease + 1
	evCut
	evSuspect  // node suspects peer (gen: the link's generation when it went down)
	evNotice   // node hears failure(peer) of incarnation inc
	evDown     // node calls Down(peer) for peer's incarnation inc
	evLeaseEnd // node's critical section number gen loses its lease
	evRestart  // node comes back as a new incarnation
	evAwake    // node's new incarnation ends its wait (inc)
	evRefused  // node learns a peer refuses its incarnation inc
)

type faultState struct {
	Faults
	n           int
	alive       []bool
	inc         []uint64   // incarnation of each node
	link        [][]bool   // link up, symmetric
	gen         [][]uint64 // bumped when the link goes down or up
	cutAt       [][]int64  // when the link last went down
	refused     [][]uint64 // node refuses peer's incarnation (0: none)
	downed      [][]uint64 // node called Down(peer) for this incarnation
	seen        [][]uint64 // the incarnation of peer node last linked with (0: none)
	isDown      [][]bool   // node's machines hold peer down
	awake       []int64    // a new incarnation acts from then on
	held        [][]event  // messages that reached a node before it woke, in order
	faults      int        // failures so far, and their consequences: crashes, cuts, Downs, restarts, wake-ups
	releaseCuts int        // ReleaseCuts made so far
	// faultsAt is faults when each node's current request began.
	faultsAt []int
}

func (r *run) startFaults() error {
	f := r.opt.Faults
	n := len(r.opt.Nodes)
	if f.New == nil || f.Lease <= f.Margin || f.Detect <= 0 {
		return fmt.Errorf("sim: faults need New, Detect > 0 and Lease > Margin")
	}
	for i, p := range r.opt.Nodes {
		if _, ok := p.(q.FaultTolerant); !ok {
			return fmt.Errorf("sim: node %d's machine does not tolerate failures", i)
		}
	}
	s := &faultState{Faults: *f, n: n, alive: make([]bool, n), inc: make([]uint64, n), awake: make([]int64, n), held: make([][]event, n), faultsAt: make([]int, n)}
	grid := func() [][]uint64 {
		g := make([][]uint64, n)
		for i := range g {
			g[i] = make([]uint64, n)
		}
		return g
	}
	s.gen, s.refused, s.downed, s.seen = grid(), grid(), grid(), grid()
	s.link, s.isDown, s.cutAt = make([][]bool, n), make([][]bool, n), make([][]int64, n)
	for i := range n {
		s.alive[i], s.inc[i] = true, 1
		s.link[i], s.isDown[i], s.cutAt[i] = make([]bool, n), make([]bool, n), make([]int64, n)
		for j := range n {
			s.link[i][j] = i != j
			s.seen[i][j] = 1
		}
	}
	r.f = s
	for range f.Crashes {
		r.at(r.between(0, f.Horizon), event{kind: evCrash, node: r.rng.Intn(n)})
	}
	for range f.Cuts {
		a, b := r.rng.Intn(n), r.rng.Intn(n)
		if a != b {
			r.at(r.between(0, f.Horizon), event{kind: evCut, node: a, peer: b})
		}
	}
	return nil
}

func (s *faultState) up(a, b q.ID) bool { return a != b && s.link[a][b] }

func (r *run) inc(i q.ID) uint64 {
	if r.f == nil {
		return 0
	}
	return r.f.inc[i]
}

func (r *run) entrySerial(i q.ID) uint64 { return uint64(r.done[i]) }

// raiseTokens is the hybrid clock: no grant is below the time.
func (r *run) raiseTokens(i q.ID) {
	if r.f != nil {
		r.opt.Nodes[i].RaiseTokens(uint64(r.now))
	}
}

// current reports whether a request or release event still concerns the
// node's incarnation (and, for a release, the critical section it ends).
func (r *run) current(e event) bool {
	if !r.f.alive[e.node] || e.inc != r.f.inc[e.node] {
		return false
	}
	if e.kind == evRelease {
		return r.holder == e.node && e.gen == r.entrySerial(e.node)
	}
	if r.now < r.f.awake[e.node] {
		r.at(r.f.awake[e.node]-r.now, e) // asks nothing before its wait ends
		return false
	}
	return true
}

// restartClockJump bounds how far ahead of its previous incarnation's a
// restarted node's sequence numbers start: seconds of the wall clock in
// microseconds.
const restartClockJump = 10_000_000

// deliverable reports whether a message arrives: its link has stayed up
// since it was sent, and its receiver is awake (else it waits).
func (r *run) deliverable(e event) bool {
	m := e.msg
	if !r.f.alive[m.To] || r.f.gen[m.From][m.To] != e.gen || !r.f.link[m.From][m.To] {
		r.res.Dropped++
		return false
	}
	if r.now < r.f.awake[m.To] {
		r.f.held[m.To] = append(r.f.held[m.To], e) // handed over in order on waking
		return false
	}
	return true
}

// linkDown takes the link a-b down now.
func (r *run) linkDown(a, b q.ID) {
	s := r.f
	if !s.link[a][b] {
		return
	}
	s.link[a][b], s.link[b][a] = false, false
	s.gen[a][b]++
	s.gen[b][a]++
	s.cutAt[a][b], s.cutAt[b][a] = r.now, r.now
	for _, x := range [2]q.ID{a, b} {
		if r.holder == x {
			r.watchLease(x)
		}
	}
}

// leaseEnd is when node i's lease runs out: Lease-Margin after it last
// heard from a member of its quorum, or never (-1).
func (r *run) leaseEnd(i q.ID) int64 {
	end := int64(-1)
	for _, j := range r.opt.Nodes[i].(q.FaultTolerant).Quorum() {
		if j != i && !r.f.link[i][j] {
			if t := r.f.cutAt[i][j] + r.f.Lease - r.f.Margin; end < 0 || t < end {
				end = t
			}
		}
	}
	return end
}

func (r *run) leaseGone(i q.ID) bool {
	end := r.leaseEnd(i)
	return end >= 0 && end <= r.now
}

// watchLease schedules the end of holder i's critical section when its
// lease runs out first.
func (r *run) watchLease(i q.ID) {
	if end := r.leaseEnd(i); end >= 0 {
		r.at(max(end-r.now, 0), event{kind: evLeaseEnd, node: i, inc: r.f.inc[i], gen: r.entrySerial(i)})
	}
}

func (r *run) faultEvent(e event) {
	s := r.f
	i, j := e.node, e.peer
	switch e.kind {
	case evCrash:
		if !s.alive[i] {
			return
		}
		r.tracef("%d: node %d crashes", r.now, i)
		r.res.Crashes++
		s.faults++
		r.endIncarnation(i)
		r.at(s.Restart, event{kind: evRestart, node: i, inc: s.inc[i]})
	case evRefused:
		if !s.alive[i] || s.inc[i] != e.inc {
			return
		}
		r.tracef("%d: node %d learns it is refused: it comes back as a new incarnation", r.now, i)
		s.faults++
		r.endIncarnation(i)
		r.at(r.between(r.opt.MinDelay, r.opt.MaxDelay), event{kind: evRestart, node: i, inc: s.inc[i]})
	case evCut:
		if !s.alive[i] || !s.alive[j] || !s.link[i][j] {
			return
		}
		r.tracef("%d: link %d-%d cut", r.now, i, j)
		r.res.Cuts++
		s.faults++
		r.linkDown(i, j)
		r.at(s.Detect, event{kind: evSuspect, node: i, peer: j, inc: s.inc[j], gen: s.gen[i][j]})
		r.at(s.Detect, event{kind: evSuspect, node: j, peer: i, inc: s.inc[i], gen: s.gen[j][i]})
	case evSuspect:
		// The link has stayed down since.
		if s.alive[i] && s.gen[i][j] == e.gen && !s.link[i][j] {
			r.tracef("%d: node %d suspects node %d", r.now, i, j)
			r.refuse(i, j, e.inc)
		}
	case evNotice:
		if s.alive[i] {
			r.refuse(i, j, e.inc)
		}
	case evDown:
		if !s.alive[i] || e.inc != s.inc[i] || s.downed[i][j] >= e.gen {
			return
		}
		r.tracef("%d: node %d: Down(%d)", r.now, i, j)
		s.faults++ // a wait through this is a wait through a failure
		s.downed[i][j] = e.gen
		r.machineDown(i, j)
		r.connect(i, j)
	case evLeaseEnd:
		if r.holder == i && s.inc[i] == e.inc && r.entrySerial(i) == e.gen && r.leaseGone(i) {
			r.tracef("%d: node %d's lease runs out in its critical section", r.now, i)
			r.res.Lost++
			r.leave(i)
		}
	case evRestart:
		if s.alive[i] || s.inc[i] != e.inc {
			return
		}
		s.inc[i]++
		s.alive[i] = true
		s.faults++
		r.res.Restarts++
		p, err := s.New(i)
		if err != nil {
			r.fail("node %d: a new machine: %v", i, err)
			return
		}
		old := r.opt.Nodes[i]
		// A crashed node's counters are gone, but the runtime starts a
		// node's sequence numbers at the wall clock, above any its
		// previous incarnation used: Cao and Singhal's machine relies on
		// it (a restart at 0 deadlocks it within ten seeds, as stamps of
		// the two incarnations collide). The wall clock has moved on
		// meanwhile, a million a second: the new incarnation's numbers
		// start far above every other node's, which only Lamport's rule
		// (every message carries its sender's clock) lets them catch up
		// with (without it, a node whose requests never reach the
		// restarted one's arbiters is preferred to it for good).
		p.RaiseClock(old.Clock() + uint64(r.rng.Int63n(restartClockJump)))
		r.opt.Nodes[i] = p
		s.held[i] = nil
		clear(s.isDown[i])
		clear(s.seen[i]) // the new incarnation knows nobody yet
		s.awake[i] = r.now + s.Lease + s.Margin
		r.tracef("%d: node %d restarts as incarnation %d", r.now, i, s.inc[i])
		for z := range s.n {
			r.connect(z, i)
		}
		r.at(s.Lease+s.Margin, event{kind: evAwake, node: i, inc: s.inc[i]})
		if r.done[i] < r.opt.Entries && !r.opt.Serial {
			r.at(s.Lease+s.Margin+r.between(r.opt.MinThink, r.opt.MaxThink), event{kind: evRequest, node: i, inc: s.inc[i]})
		}
	case evAwake:
		if !s.alive[i] || s.inc[i] != e.inc {
			return
		}
		s.faults++
		held := s.held[i]
		s.held[i] = nil
		for _, h := range held {
			if r.deliverable(h) {
				r.deliver(h.msg, h.clock)
			}
		}
		// Who it cannot reach by now is down for it, and suspected.
		for z := range s.n {
			if z != i && !s.link[i][z] {
				r.machineDown(i, z)
				r.at(s.Detect, event{kind: evSuspect, node: i, peer: z, inc: s.inc[z], gen: s.gen[i][z]})
			}
		}
	}
}

// cutOnRelease may cut, one time in four while ReleaseCuts last, the link
// from node i, which just left its critical section, to an arbiter whose
// permission it passed on by proxy: sent holds what i sent on leaving.
func (r *run) cutOnRelease(i q.ID, sent []q.Message) {
	s := r.f
	if s.releaseCuts >= s.ReleaseCuts {
		return
	}
	for _, m := range sent {
		if m.Kind == q.Release && m.Site != q.None {
			if r.rng.Intn(4) == 0 {
				s.releaseCuts++
				r.res.ReleaseCuts++
				r.tracef("%d: cut as node %d passes node %d's permission on", r.now, i, m.To)
				r.faultEvent(event{kind: evCut, node: i, peer: m.To})
			}
			return
		}
	}
}

// refuse makes node i refuse incarnation inc of node j, if it is the one i
// last knew and not refused yet: the link goes down for good, i tells every
// node it reaches, and Down follows a lease after i last heard from j. A
// refused node that learns it stops.
func (r *run) refuse(i, j q.ID, inc uint64) {
	s := r.f
	if s.refused[i][j] >= inc || s.seen[i][j] != inc {
		return
	}
	s.refused[i][j] = inc
	heard, told := r.now, r.between(r.opt.MinDelay, r.opt.MaxDelay)
	if !s.link[i][j] {
		// j hears the refusal when it dials i again, the cut mended.
		heard, told = s.cutAt[i][j], told+s.Detect
	} else {
		r.linkDown(i, j) // j hears the refusal as the link closes
	}
	r.at(told, event{kind: evRefused, node: j, inc: inc})
	r.at(max(heard+s.Lease+s.Margin-r.now, 0), event{kind: evDown, node: i, peer: j, inc: s.inc[i], gen: inc})
	for z := range s.n {
		if s.link[i][z] {
			r.at(r.between(r.opt.MinDelay, r.opt.MaxDelay), event{kind: evNotice, node: z, peer: j, inc: inc})
		}
	}
}

// machineDown calls Down(j) on node i's machine.
func (r *run) machineDown(i, j q.ID) {
	if r.f.isDown[i][j] {
		return
	}
	r.f.isDown[i][j] = true
	r.raiseTokens(i)
	r.opt.Nodes[i].(q.FaultTolerant).Down(j)
	r.collect(i)
}

// connect brings the link z-i up if both are alive, z has put i's earlier
// incarnations down (or never knew them), and neither refuses the other.
func (r *run) connect(z, i q.ID) {
	s := r.f
	if z == i || !s.alive[z] || !s.alive[i] || s.link[z][i] || s.refused[z][i] == s.inc[i] || s.refused[i][z] == s.inc[z] {
		return
	}
	for _, p := range [2][2]q.ID{{z, i}, {i, z}} {
		a, b := p[0], p[1]
		if k := s.seen[a][b]; k != 0 && k < s.inc[b] && s.downed[a][b] < k {
			return // a has not yet put the incarnation of b it knew down
		}
	}
	s.link[z][i], s.link[i][z] = true, true
	s.seen[z][i], s.seen[i][z] = s.inc[i], s.inc[z]
	s.gen[z][i]++
	s.gen[i][z]++
	r.tracef("%d: link %d-%d up", r.now, z, i)
	for _, p := range [2][2]q.ID{{z, i}, {i, z}} {
		a, b := p[0], p[1]
		if s.isDown[a][b] {
			s.isDown[a][b] = false
			r.raiseTokens(a)
			r.opt.Nodes[a].(q.FaultTolerant).Up(b)
			r.collect(a)
		}
	}
	// The new incarnation learns who is down from the node that accepts it.
	for x := range s.n {
		if s.isDown[z][x] && !s.link[i][x] && x != i {
			r.machineDown(i, x)
		}
	}
}

// endIncarnation stops node i: its critical section and its request end,
// its links go down.
func (r *run) endIncarnation(i q.ID) {
	s := r.f
	if r.waitingAt[i] >= 0 || r.holder == i {
		r.pending--
	}
	if r.holder == i {
		r.holder, r.lastExit = q.None, r.now
	}
	s.alive[i] = false
	r.waitingAt[i] = -1
	for z := range s.n {
		if s.link[i][z] {
			r.linkDown(i, z)
			if s.alive[z] {
				r.at(s.Detect, event{kind: evSuspect, node: z, peer: i, inc: s.inc[i], gen: s.gen[z][i]})
			}
		}
	}
}

// downList lists the nodes node i's machines hold down.
func (s *faultState) downList(i q.ID) []q.ID {
	var out []q.ID
	for j, d := range s.isDown[i] {
		if d {
			out = append(out, j)
		}
	}
	return out
}
