package qnet

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcnode/mcnode/internal/boottime"
	"github.com/mcnode/mcnode/quorumfallback"
)

// With Config.Heartbeat the mesh tells a runtime that handles failures
// (package node) what it needs for its leases:
//
//   - Heard(i): when a frame of node i last arrived (any frame: the
//     heartbeat only fills silence). A runtime suspects a node it has not
//     heard for a while.
//   - Acked(i): the send time of the last heartbeat node i echoed. Node i
//     heard this node then, or later: a lease that i keeps for this node
//     (i frees what this node holds only a lease after it last heard it)
//     runs at least until Acked(i) plus the lease, measured here.
//
// And it lets a node come back: a peer that restarts (a new incarnation)
// is refused until the runtime has put its previous incarnation down and
// calls Forget; an incarnation given to Refuse is refused for good, with
// an answer that tells it so (Failed), and its connection is closed.

// liveness is the mesh's record of its peers' liveness. Its times are
// CLOCK_BOOTTIME's (Now), which keeps running while the host is suspended:
// a lease must not outlive its real length (as in multicast mode).
type liveness struct {
	start int64 // boottime nanoseconds
	// heardAt and ackedAt are nanoseconds since start, 0 for never.
	heardAt, ackedAt []atomic.Int64
	// refusedAt is node i's incarnation refused for good (0: none);
	// broken the incarnation whose link from this node broke (frames to
	// it may be lost), for the runtime to suspect (0: none).
	refusedAt, broken []atomic.Uint64

	mu        sync.Mutex
	forgotten []uint64 // node i's incarnation put down (0: none)
	failed    chan struct{}
	wasFailed bool
}

func (l *liveness) init(n int) {
	l.start = int64(boottime.Now())
	l.heardAt, l.ackedAt = make([]atomic.Int64, n), make([]atomic.Int64, n)
	l.refusedAt, l.broken = make([]atomic.Uint64, n), make([]atomic.Uint64, n)
	l.forgotten = make([]uint64, n)
	l.failed = make(chan struct{})
}

// Now is the time the mesh's liveness is told in: CLOCK_BOOTTIME.
func Now() time.Time { return time.Unix(0, int64(boottime.Now())) }

// since is now in nanoseconds since start, never 0.
func (l *liveness) since() int64 { return max(int64(boottime.Now())-l.start, 1) }

func (l *liveness) at(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, l.start+ns)
}

// heard records a frame from node from, answers a heartbeat with an echo,
// and reports whether the frame was the mesh's own.
func (l *liveness) heard(from int, msg quorumfallback.Message, m *Mesh) bool {
	l.heardAt[from].Store(l.since())
	switch msg.Kind {
	case quorumfallback.Heartbeat:
		_ = m.Send(from, liveFrame(quorumfallback.Echo, m.cfg.Self, from, msg.Seq))
		return true
	case quorumfallback.Echo:
		for {
			old := l.ackedAt[from].Load()
			if int64(msg.Seq) <= old || int64(msg.Seq) > l.since() || l.ackedAt[from].CompareAndSwap(old, int64(msg.Seq)) {
				break // older, or from the future (not ours), or recorded
			}
		}
		return true
	}
	return false
}

func liveFrame(kind quorumfallback.Kind, from, to int, seq uint64) Frame {
	return Frame{Msg: quorumfallback.Message{Kind: kind, From: from, To: to, Arbiter: from, Seq: seq, Site: quorumfallback.None}}
}

// heartbeats sends a heartbeat on every link that is up, every
// Config.Heartbeat, until Close.
func (m *Mesh) heartbeats() {
	defer m.wg.Done()
	t := time.NewTicker(m.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-m.closed:
			return
		case <-t.C:
		}
		for _, p := range m.peers {
			if p == nil {
				continue
			}
			if up, _ := m.Backlog(p.id); up {
				_ = m.Send(p.id, liveFrame(quorumfallback.Heartbeat, m.cfg.Self, p.id, uint64(m.live.since())))
			}
		}
	}
}

// Heard returns when a frame of node i last arrived (zero: never).
func (m *Mesh) Heard(i int) time.Time { return m.live.at(m.live.heardAt[i].Load()) }

// Acked returns the send time of the last heartbeat node i echoed (zero:
// none): node i heard this node at that time or later.
func (m *Mesh) Acked(i int) time.Time { return m.live.at(m.live.ackedAt[i].Load()) }

// Live reports whether the mesh sends heartbeats (Config.Heartbeat).
func (m *Mesh) Live() bool { return m.cfg.Heartbeat > 0 }

// Started returns when the mesh started.
func (m *Mesh) Started() time.Time { return time.Unix(0, m.live.start) }

// SelfIncarnation returns this node's incarnation.
func (m *Mesh) SelfIncarnation() uint64 { return m.incarnation }

// Broken returns the incarnation of node i whose link from this node broke
// (frames written to it may have been lost: the protocols' channels are
// reliable only while a link lasts), or 0.
func (m *Mesh) Broken(i int) uint64 { return m.live.broken[i].Load() }

// Incarnation returns the incarnation of node i that this node takes (0:
// none yet).
func (m *Mesh) Incarnation(i int) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.incarnations[i]
}

// Refuse refuses node i's incarnation inc for good, if it is the one taken:
// its connection is closed, what it sends from then on is dropped, and its
// hellos are answered so that it knows. It reports whether it did.
func (m *Mesh) Refuse(i int, inc uint64) bool {
	if i < 0 || i >= m.n || i == m.cfg.Self || inc == 0 {
		return false
	}
	m.mu.Lock()
	if m.incarnations[i] != inc {
		m.mu.Unlock()
		return false
	}
	// Under m.mu, which takeOver holds when it checks: a hello of this
	// incarnation that raced the refusal is not taken.
	m.live.refusedAt[i].Store(inc)
	in := m.incoming[i]
	m.mu.Unlock()
	if in != nil {
		in.c.Close()
	}
	return true
}

// Forget lets node i's next incarnation in, in and out: the runtime has put
// incarnation inc down (0 if it knew none). The frames still queued for
// node i are dropped (counted as lost): they were for the incarnation put
// down, and the next one would take them for its own (a request given up
// would hold its lock forever).
func (m *Mesh) Forget(i int, inc uint64) {
	if i < 0 || i >= m.n || i == m.cfg.Self {
		return
	}
	m.live.mu.Lock()
	m.live.forgotten[i] = inc
	m.live.mu.Unlock()
	p := m.peers[i]
	p.mu.Lock()
	m.lost.Add(uint64(p.queued))
	p.buf, p.queued = p.buf[:0], 0
	p.mu.Unlock()
	select { // the writer ends a connection to inc at once (pump)
	case p.wake <- struct{}{}:
	default:
	}
}

// Failed returns a channel closed once a peer has answered that this
// incarnation was declared failed: the node must come back as a new one.
func (m *Mesh) Failed() <-chan struct{} { return m.live.failed }

func (m *Mesh) declaredFailed() {
	m.live.mu.Lock()
	defer m.live.mu.Unlock()
	if !m.live.wasFailed {
		m.live.wasFailed = true
		close(m.live.failed)
	}
}

// wasForgotten reports whether node i's incarnation inc (not 0) was put
// down (Forget).
func (l *liveness) wasForgotten(i int, inc uint64) bool {
	if inc == 0 {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.forgotten[i] == inc
}

// refused reports whether node i's incarnation inc was refused for good.
func (l *liveness) refused(i int, inc uint64) bool { return l.refusedAt[i].Load() == inc }

// refusedToo reports whether this node refused node i's incarnation, the
// last it took.
func (m *Mesh) refusedToo(i int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	inc := m.incarnations[i]
	return inc != 0 && m.live.refused(i, inc)
}

// isolated reports whether this node refused more than half of the
// others: cut off from the group rather than the group from it. A split
// into halves leaves both sides isolated, and both start anew.
func (m *Mesh) isolated() bool {
	n := 0
	for i := range m.n {
		if i != m.cfg.Self && m.refusedToo(i) {
			n++
		}
	}
	return 2*n > m.n-1
}

// takeIncarnation records node i's incarnation on its first hello, or on
// the first after the incarnation taken was put down (Forget), and reports
// whether inc is the one taken.
func (m *Mesh) takeIncarnation(i int, inc uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.live.mu.Lock()
	down := m.live.forgotten[i]
	m.live.mu.Unlock()
	if cur := m.incarnations[i]; cur == 0 || cur != inc && down == cur {
		m.incarnations[i] = inc
	}
	return m.incarnations[i] == inc
}

// writeTo decides whether the writer to p may write to incarnation acc of
// it, the one that accepted its hello: the one it wrote to before, or,
// once the runtime has put that one down (its queue then dropped), the
// next. Otherwise what is queued was for another incarnation, and it waits.
func (m *Mesh) writeTo(p *peer, acc uint64) error {
	if m.cfg.Heartbeat == 0 {
		p.inc = acc
		return nil
	}
	m.live.mu.Lock()
	down := m.live.forgotten[p.id]
	m.live.mu.Unlock()
	if acc == down {
		// Still running (it has not learned it was put down): what is
		// queued is for its next incarnation.
		return &waitingError{p.id, p.addr, "the incarnation that answered was put down here: waiting for its next"}
	}
	// One incarnation per peer, both ways: what the runtime sends is for
	// the incarnation it takes (from its hello, or from this acceptance),
	// never another one it has not put down.
	if !m.takeIncarnation(p.id, acc) {
		return &waitingError{p.id, p.addr, "the incarnation that answered is not the one this node took, which it has not put down yet"}
	}
	if p.inc == 0 || p.inc == acc {
		p.inc = acc
		return nil
	}
	if down != p.inc {
		return &waitingError{p.id, p.addr, "it came back as a new incarnation, which this node has not put the last one down for yet"}
	}
	p.inc = acc
	return nil
}
