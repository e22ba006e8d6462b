package node

import (
	"context"
	"errors"
	"slices"
	"time"

	q "github.com/mcnode/mcnode/quorumfallback"
	"github.com/mcnode/mcnode/quorumfallback/protocols"
	"github.com/mcnode/mcnode/quorumfallback/qnet"
)

// Failure handling, for protocols whose machines can go on without a
// failed node (q.FaultTolerant: Maekawa, Cao-Singhal), over the TCP mesh. It keeps the
// rules the seeded simulation checks (the quorumfallback package doc,
// "Failures"; quorumfallback/sim Faults):
//
//   - The mesh's heartbeats tell when each peer was last heard (Heard), and
//     last heard this node (Acked).
//   - A peer not heard for Config.Detect is suspected: its incarnation is
//     refused for good (its connection closed, its hellos answered so that
//     it knows) and every peer is told (failure(i), which they act on as
//     their own suspicion).
//   - A lease plus the margin after the peer was last heard, every machine
//     puts it down (Down), and the mesh takes its next incarnation; once
//     that one connects, the machines put it up again (Up).
//   - A holder whose quorum holds a member that has not acked a heartbeat
//     for the lease minus the margin loses its lock (Lost): that member may
//     free it after the lease plus the margin. The holder releases it a
//     margin after it lost it, no sooner: its user stops at the loss.
//   - A node acts on nothing for the lease plus the margin after it starts:
//     every permission a previous incarnation gave has run out by then.
//   - Grants' fencing tokens are at least the wall clock in microseconds
//     (RaiseTokens before every step).
//   - Requests' sequence numbers start at the wall clock in microseconds
//     when the node starts, so that a new incarnation's are above the old
//     one's.
//
// A node that learns it was declared failed loses its locks, fails its
// waiters with ErrFailed and closes: it comes back by starting anew (the
// daemon does so), as a new incarnation.

// ErrFailed: this node's peers declared it failed (they did not hear it for
// Config.Detect): it lost its locks and closed; start it anew to rejoin.
var ErrFailed = errors.New("node: declared failed by its peers (they did not hear it): its locks are lost; it comes back as a new incarnation")

// ErrMisconfigured: a peer runs another setup than this node's (group,
// protocol, coterie, size or peer list), or a node index out of this
// node's range or its own: a hello was refused, by one or the other
// (qnet.Mesh.Misconfigured). Nodes given different setups build quorums
// that need not intersect, and would each grant the same lock, so the node
// loses its locks and stops rather than take part; it is not started
// again until every node is given the same setup.
var ErrMisconfigured = errors.New("node: a peer runs another setup (every node must be given the same protocol, coterie, size, peer list in the same order, lease, lease margin and detection time, and an index of its own): this node stopped rather than risk two holders of a lock")

// errQuorumSilent is why a lease is lost to the failure handling.
var errQuorumSilent = errors.New("a member of the lock's quorum has not heard this node for the lease, and may give its part of the lock to another")

// Defaults of the failure handling.
const (
	DefaultLease       = 1500 * time.Millisecond
	DefaultLeaseMargin = 300 * time.Millisecond
	DefaultDetect      = 1 * time.Second
)

// Heartbeat is how often the mesh of a node with this config must send
// heartbeats (qnet.Config.Heartbeat): a fifth of the detection time for a
// protocol with failure handling, else none.
func (c Config) Heartbeat() time.Duration {
	f, err := protocols.NewFactory(c.Setup())
	if err != nil || c.Detect < 0 {
		return 0
	}
	m, err := f.New(max(c.Self, 0))
	if err != nil {
		return 0
	}
	if _, ft := m.(q.FaultTolerant); !ft {
		return 0
	}
	if c.Detect == 0 {
		return DefaultDetect / 5
	}
	return c.Detect / 5
}

// liveMesh is what the failure handling needs of the mesh.
type liveMesh interface {
	Live() bool
	Heard(i int) time.Time
	Acked(i int) time.Time
	Started() time.Time
	Incarnation(i int) uint64
	SelfIncarnation() uint64
	Broken(i int) uint64
	Refuse(i int, inc uint64) bool
	Forget(i int, inc uint64)
	Failed() <-chan struct{}
}

// failover is the node's failure handling; nil when off.
type failover struct {
	mesh                 liveMesh
	lease, margin        time.Duration
	detect               time.Duration
	awake                time.Time // start + lease + margin
	peers                []peerLife
	ticker               *time.Ticker
	downs, ups, suspects uint64
	// checked is when checkFailures last ran. A node that did not run for
	// half the detection time (SIGSTOP, a starved host) suspects nobody
	// until quietTill, a detection time after: every peer looks silent to
	// it then, and its links broken, through its own fault. Suspecting
	// them, it refused healthy peers, which then took the refusal for
	// their own failure and started anew (black-box round: a 3 s SIGSTOP
	// of one of four Maekawa nodes, one dead, restarted two healthy ones
	// and revoked their locks). Meanwhile it learns whether the group
	// declared it failed.
	checked, quietTill time.Time
}

// peerLife is what the node knows of one peer's incarnations.
type peerLife struct {
	refused uint64    // the incarnation refused (0: none)
	downAt  time.Time // when Down is due (zero: none pending)
	down    bool      // the machines hold it down
	upAt    time.Time // when its current incarnation was put up
}

// startFailover turns failure handling on if the machines tolerate
// failures and the transport is a mesh with heartbeats.
func (n *Node) startFailover() {
	m, err := n.factory.New(n.cfg.Self)
	if err != nil {
		return
	}
	lm, ok := n.tr.(liveMesh)
	if _, ft := m.(q.FaultTolerant); !ft || !ok || !lm.Live() || n.cfg.Detect <= 0 {
		return
	}
	f := &failover{mesh: lm, lease: n.cfg.Lease, margin: n.cfg.LeaseMargin, detect: n.cfg.Detect, peers: make([]peerLife, len(n.cfg.Peers))}
	f.awake = lm.Started().Add(f.lease + f.margin)
	// Sequence numbers start at the wall clock in microseconds, as tokens
	// do: a request of this incarnation is never taken for one of a
	// previous incarnation's (the group makes far fewer than a million
	// requests a second), as Cao and Singhal's refusal of a failed proxy's
	// replies needs.
	n.clock = max(n.clock, uint64(time.Now().UnixMicro()))
	f.ticker = time.NewTicker(checkEvery(n.cfg.Detect))
	n.fo = f
	n.log.Info().Dur("lease", f.lease).Dur("margin", f.margin).Dur("detect", f.detect).
		// awake is on CLOCK_BOOTTIME, not the wall clock: log how far off.
		Dur("acts_in", max(f.awake.Sub(qnet.Now()), 0)).
		Msg("failure handling on: a node not heard for the detection time is put down a lease after; this node acts once every lease a previous incarnation gave has run out")
}

// checkEvery is how often the failure handling looks at its peers and
// leases.
func checkEvery(detect time.Duration) time.Duration { return min(detect/10, 50*time.Millisecond) }

// Times here are CLOCK_BOOTTIME's (qnet.Now), which runs on while the host
// is suspended, as the leases of the peers do.

// awakeCh returns a channel closed when the node may act (see failover).
func (f *failover) awakeCh() <-chan struct{} {
	ch := make(chan struct{})
	time.AfterFunc(f.awake.Sub(qnet.Now()), func() { close(ch) })
	return ch
}

// raiseTokens is the hybrid clock: no grant below the wall clock.
func (n *Node) raiseTokens(m q.Protocol) {
	if n.fo != nil {
		m.RaiseTokens(uint64(time.Now().UnixMicro()))
	}
}

// checkFailures runs on every tick of the failure handling.
func (n *Node) checkFailures() {
	f, now := n.fo, qnet.Now()
	if gap := now.Sub(f.checked); !f.checked.IsZero() && gap > f.detect/2 {
		f.quietTill = now.Add(f.detect)
		n.log.Warn().Dur("stopped_for", gap).Msg("this node did not run for a while (stopped, or starved of CPU): it suspects no peer for the detection time, as its own silence makes every peer look silent")
	}
	f.checked = now
	quiet := now.Before(f.quietTill)
	for i := range f.peers {
		if i == n.cfg.Self {
			continue
		}
		p := &f.peers[i]
		inc := f.mesh.Incarnation(i)
		switch {
		case p.down && inc != 0 && inc != p.refused:
			n.peerUp(i, inc)
		case !p.down && p.downAt.IsZero() && inc != 0 && f.mesh.Broken(i) == inc && !quiet:
			// The channel to it lost what was on it: the protocols cannot
			// go on with it, as the simulation's cut links cannot.
			n.suspect(i, inc, "its link broke: what was sent on it may be lost")
		case !p.down && !p.downAt.IsZero() && p.refused == 0 && inc != 0:
			// Suspected before any incarnation of it was heard, and here
			// it is: this node knew none before, so none holds anything
			// here to put down (and this one may already).
			p.downAt = time.Time{}
			n.log.Info().Int("peer", i).Msg("peer not heard at first is there: not suspected any more")
		case !p.down && p.downAt.IsZero() && now.Sub(n.heard(i)) > f.detect && !quiet:
			n.suspect(i, inc, "not heard for the detection time")
		case !p.downAt.IsZero() && !now.Before(p.downAt):
			n.peerDown(i)
		}
	}
	for _, r := range n.res {
		if r.pending != nil {
			n.checkPending(r, now)
		}
		if r.lease != nil && r.releaseAt.IsZero() && !n.leaseValid(r, now) {
			n.log.Warn().Str("resource", r.name).Msg("lock lost: a member of its quorum has not heard this node for the lease; it may give the lock to another")
			n.stats.LeasesLost++
			r.lease.lose(errQuorumSilent)
			// The release waits out the margin, as the silent member does
			// before it frees its part: the holder's command, stopped at
			// the deadline (mcnode lock watches it, Lease.Expires), has
			// that long to be gone. Released at once, the lock went to the
			// next holder about 20 ms after the SIGKILL meant to come
			// before it (black-box round).
			r.releaseAt = now.Add(f.margin)
		}
		if !r.releaseAt.IsZero() && !now.Before(r.releaseAt) {
			r.releaseAt = time.Time{}
			if r.lease != nil {
				n.release(r)
			}
		}
	}
}

// pendingEntry is a critical section entered while its lease is not
// valid, held back from the caller (see holdEntry).
type pendingEntry struct {
	token uint64
	until time.Time
}

// holdEntry holds back an entry whose lease is not valid: a member of its
// quorum has not echoed this node's heartbeats for the lease minus the
// margin, or never has, as when it is a new incarnation and the
// permission came by proxy (Cao and Singhal) before its first echo. The
// member may free its part, so the caller cannot have the lock now; if
// an echo makes the lease valid within two heartbeats, it gets it then,
// else the node gives the lock back.
func (n *Node) holdEntry(r *resource, token uint64) {
	r.pending = &pendingEntry{token: token, until: qnet.Now().Add(2 * n.fo.detect / 5)}
	n.log.Debug().Str("resource", r.name).Msg("granted, but a member of the quorum has not heard this node for the lease: held back until it does")
}

// checkPending hands out a held-back entry once its lease is valid, or
// gives it back when the wait is over.
func (n *Node) checkPending(r *resource, now time.Time) {
	p := r.pending
	switch {
	case n.leaseValid(r, now):
		r.pending = nil
		n.handOut(r, p.token)
	case !now.Before(p.until):
		r.pending = nil
		n.stats.LeasesLost++
		n.log.Warn().Str("resource", r.name).Msg("granted, but a member of the quorum has not heard this node for the lease: given back")
		n.release(r)
	}
}

// heard is when peer i was last heard, counted from when this node may act
// and from when the peer's incarnation was put up: a peer may not speak to
// a restarted node until it has put that node's predecessor down, up to a
// lease after the start (awake), and a new incarnation of a peer is not
// suspected for its predecessor's silence before its first frame.
func (n *Node) heard(i int) time.Time {
	h := n.fo.mesh.Heard(i)
	for _, t := range []time.Time{n.fo.awake, n.fo.peers[i].upAt} {
		if t.After(h) {
			h = t
		}
	}
	return h
}

// suspect refuses peer i's incarnation inc (0: none known yet), tells the
// others, and puts i down a lease after it was last heard.
func (n *Node) suspect(i int, inc uint64, why string) {
	f := n.fo
	p := &f.peers[i]
	if p.down || !p.downAt.IsZero() {
		return
	}
	f.suspects++
	if inc != 0 {
		f.mesh.Refuse(i, inc)
		p.refused = inc
		for j := range n.cfg.Peers {
			if j != n.cfg.Self && j != i {
				_ = n.tr.Send(j, qnet.Frame{Msg: q.Message{Kind: q.Failure, From: n.cfg.Self, To: j, Arbiter: n.cfg.Self, Site: i, Token: inc}})
			}
		}
	}
	p.downAt = n.heard(i).Add(f.lease + f.margin)
	n.log.Warn().Int("peer", i).Uint64("incarnation", inc).Str("why", why).
		// downAt is on CLOCK_BOOTTIME (qnet.Now), not the time of day:
		// logged as time.Time it read as a 1970 date.
		Dur("down_in", max(p.downAt.Sub(qnet.Now()), 0)).
		Msg("peer suspected: refused from now on; put down once its lease has run out")
}

// peerDown puts peer i down on every machine, and lets its next
// incarnation in.
func (n *Node) peerDown(i int) {
	f := n.fo
	p := &f.peers[i]
	p.downAt, p.down = time.Time{}, true
	f.downs++
	for _, r := range n.res {
		n.raiseTokens(r.m)
		r.m.(q.FaultTolerant).Down(i)
		n.flush(r)
	}
	f.mesh.Forget(i, p.refused)
	n.log.Warn().Int("peer", i).Msg("peer put down: requests that needed it ask substitute quorums, what it held here is freed")
}

// peerUp puts peer i, back as incarnation inc, up on every machine.
func (n *Node) peerUp(i int, inc uint64) {
	f := n.fo
	f.peers[i].down, f.peers[i].upAt = false, qnet.Now()
	f.ups++
	for _, r := range n.res {
		r.m.(q.FaultTolerant).Up(i)
		n.flush(r)
	}
	n.log.Info().Int("peer", i).Uint64("incarnation", inc).Msg("peer back as a new incarnation")
}

// onFailure acts on failure(i) from a peer: as its own suspicion, unless it
// names this node, which then learns it was declared failed.
func (n *Node) onFailure(from int, m q.Message) {
	i, inc := m.Site, m.Token
	if i < 0 || i >= len(n.cfg.Peers) {
		return
	}
	if i == n.cfg.Self {
		if inc == n.fo.mesh.SelfIncarnation() {
			n.log.Error().Int("from", from).Msg("this node was declared failed by a peer")
			n.declaredFailed()
		}
		return
	}
	if inc != 0 && n.fo.mesh.Incarnation(i) == inc {
		n.suspect(i, inc, "failure notice from a peer")
	}
}

// declaredFailed loses every lock, fails every waiter and closes the node.
func (n *Node) declaredFailed() { n.stopWith(ErrFailed) }

// stopWith loses every lock and fails every waiter with err, and closes
// the node, which acts on nothing more meanwhile (receiveAdmitted).
func (n *Node) stopWith(err error) {
	if n.failedErr != nil {
		return
	}
	n.failedErr = err
	for _, r := range n.res {
		r.pending = nil // never handed out now
		if r.lease != nil {
			r.lease.lose(err)
		}
		for _, w := range r.waiters {
			w.ch <- result{err: err}
		}
		r.waiters = nil
	}
	go n.Close()
}

// leaseValid reports whether every member of r's quorum heard this node
// within the lease minus the margin.
func (n *Node) leaseValid(r *resource, now time.Time) bool {
	return now.Before(n.leaseDeadline(r.m.(q.FaultTolerant).Quorum()))
}

// leaseDeadline is when a lock held with this quorum runs out unless its
// members keep hearing this node: the lease minus the margin after the
// send time of the last heartbeat each echoed. Safe to call from any
// goroutine (the mesh's times are atomics).
func (n *Node) leaseDeadline(quorum []int) time.Time {
	f := n.fo
	var end time.Time
	for _, k := range quorum {
		if k == n.cfg.Self {
			continue
		}
		a := f.mesh.Acked(k)
		if a.IsZero() {
			return time.Unix(0, 1) // never heard it: run out
		}
		if d := a.Add(f.lease - f.margin); end.IsZero() || d.Before(end) {
			end = d
		}
	}
	if end.IsZero() {
		end = time.Unix(1<<62, 0) // a quorum of itself alone: no one to hear it
	}
	return end
}

// newMachine tells a new machine which peers are down.
func (n *Node) newMachine(m q.Protocol) {
	if n.fo == nil {
		return
	}
	for i, p := range n.fo.peers {
		if p.down {
			m.(q.FaultTolerant).Down(i)
		}
	}
}

// waitAwake waits until the node may act.
func (n *Node) waitAwake(ctx context.Context) error {
	t := time.NewTimer(n.fo.awake.Sub(qnet.Now()))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-n.done:
		return n.closedErr()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// quorumReachable reports whether the node may take a lock now: it has
// waited out its start, and a quorum exists among itself and the peers
// whose links are up and that are not put down (its own set, or a
// substitute).
func (n *Node) quorumReachable() bool {
	if qnet.Now().Before(n.fo.awake) {
		return false
	}
	b, ok := n.tr.(interface{ Backlog(int) (bool, int) })
	alive := func(i int) bool {
		if i == n.cfg.Self {
			return true
		}
		up := true
		if ok {
			up, _ = b.Backlog(i)
		}
		return up && !n.fo.peers[i].down
	}
	if !slices.ContainsFunc(n.factory.Quorum(n.cfg.Self), func(i int) bool { return !alive(i) }) {
		return true
	}
	if sub := n.factory.Coterie.Substitute(n.cfg.Self); sub != nil {
		_, found := sub(alive)
		return found
	}
	return false
}
