package group

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/mcnode/mcnode/wire"
)

// Lease is a resource this node holds. Token is its fencing token: the
// group timestamp of the grant (for a lock taken on the previous holder's
// release, ahead of the server's decision, the timestamp this node's log
// had reached, at most the decision's), strictly increasing per resource,
// so that a service guarded by the lock can refuse a stale holder's writes.
type Lease struct {
	name  string
	token uint64
	g     *Group
	lost  chan struct{}

	mu       sync.Mutex
	err      error // why it ended: nil while held
	lostAt   time.Time
	released bool
}

// Name is the resource's name.
func (l *Lease) Name() string { return l.name }

// Token is the fencing token.
func (l *Lease) Token() uint64 { return l.token }

// Expires returns when this node's lease runs out unless the group renews it
// (it does at every ping of the server this node answers), on the
// group's Clock: for BootClock, CLOCK_BOOTTIME, not the time of day. A
// holder that can no longer be sure to hear Lost in time (its runtime may be
// stopped) must stop using the resource by then. A lost lease expired when
// it was lost, though the node's own may run on (a Leave or Close hands the
// lock on at once).
func (l *Lease) Expires() time.Time {
	end := time.Unix(0, l.g.leaseEnd.Load())
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil && !l.released && l.lostAt.Before(end) {
		return l.lostAt
	}
	return end
}

// Remaining returns how long this node's lease has left unless renewed:
// none, or less, once lost.
func (l *Lease) Remaining() time.Duration { return l.Expires().Sub(l.g.clock.Now()) }

// TimeLeft is Remaining, never below zero, and true: a multicast-mode lease
// always expires unless renewed (mcnode.Lease).
func (l *Lease) TimeLeft() (time.Duration, bool) {
	return max(l.Remaining(), 0), true
}

// Lost returns a channel that is closed if the group takes the resource
// back before Release: this node's lease ran out (it lost contact with the
// group), it was removed, or it was closed. Stop using the resource at once.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Err says why the lease was lost, or nil: an error wrapping ErrLeaseLost
// and the cause, ErrLeaseExpired, ErrRemoved or ErrNodeClosed (or, after
// Leave, that the node was leaving).
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return nil
	}
	return l.err
}

// Release gives the resource back. Releasing twice is a no-op; releasing a
// lost lease returns ErrLeaseLost.
func (l *Lease) Release() error {
	l.mu.Lock()
	released := l.released
	l.mu.Unlock()
	if released {
		return nil // even once the node is closed
	}
	err := l.g.call(context.Background(), func() error { return l.g.release(l) })
	if errors.Is(err, ErrNodeClosed) {
		return ErrLeaseLost
	}
	return err
}

// lose ends the lease because the group took it back.
func (l *Lease) lose(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil || l.released {
		return
	}
	l.err = fmt.Errorf("%w: %w", ErrLeaseLost, err)
	l.lostAt = l.g.clock.Now()
	close(l.lost)
}

// lockState is one resource as this process sees it. At most one request
// for it is with the group at a time; callers of this process queue here in
// FIFO order behind the one in flight, as flock(1) users expect.
type lockState struct {
	req     uint64 // the request in flight, 0 if none
	lease   *Lease
	waiters []*waiter // waiters[0] is the one the request in flight is for
}

type waiter struct {
	ch  chan acquireResult
	try bool // TryAcquire: give up rather than queue
}

type acquireResult struct {
	lease *Lease
	err   error
}

// Acquire waits until this node holds the named resource, in the group's
// FIFO order, or ctx ends. Release the lease when done.
func (g *Group) Acquire(ctx context.Context, name string) (*Lease, error) {
	return g.acquire(ctx, name, false)
}

// TryAcquire takes the named resource if no other member holds or waits for
// it, and returns ErrLocked otherwise. It still takes one round trip to the
// server, and only the server can say: when no answer comes, TryAcquire
// gives up with an error that wraps ErrNoAnswer, and the resource may be
// free or not. If this node reaches no majority (the error is then a
// NoQuorumError, which matches ErrNoQuorum too), it gives up at once, or as
// soon as it finds that out; otherwise after the longest a working group
// may keep a request waiting, a takeover's: the group's takeover timeout,
// lease and lease margin, and two retry intervals (2.5 s with
// DefaultLANConfig's timings).
func (g *Group) TryAcquire(ctx context.Context, name string) (*Lease, error) {
	return g.acquire(ctx, name, true)
}

func (g *Group) acquire(ctx context.Context, name string, try bool) (*Lease, error) {
	if err := (&wire.Request{Resource: name}).Validate(g.codec.Limits()); err != nil {
		return nil, fmt.Errorf("group: resource name: %w", err)
	}
	w := &waiter{ch: make(chan acquireResult, 1), try: try}
	var wait time.Duration
	if err := g.do(ctx, func() {
		if try {
			wait = g.tryWait()
		}
		g.enqueue(name, w)
	}); err != nil {
		return nil, err
	}
	wctx := ctx
	if try {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	select {
	case r := <-w.ch:
		return r.lease, r.err
	case <-wctx.Done():
		_ = g.do(context.Background(), func() { g.withdraw(name, w) })
		answered := false
		var r acquireResult
		select {
		case r = <-w.ch:
			answered = true
		default:
		}
		if ctx.Err() == nil {
			// A try's own wait ended. An answer that crossed the
			// withdrawal is the answer; otherwise there was none.
			if answered {
				return r.lease, r.err
			}
			return nil, g.quorumErr(fmt.Errorf("%w within %v", ErrNoAnswer, wait))
		}
		// The grant may have won the race with the cancel.
		if r.lease != nil {
			_ = r.lease.Release()
		}
		return nil, g.quorumErr(ctx.Err())
	case <-g.done:
		return nil, ErrNodeClosed
	}
}

// tryWait is how long a TryAcquire waits for the server's answer: as long
// as a working group can keep it waiting. A takeover leaves the group
// without a server for the takeover timeout, and one that must wait out
// the old epoch's leases (its server and backup died together) decides
// nothing for a lease and its margin more; a lost datagram, or the claim's
// round trips, cost a retry interval or two. The group's values count, not
// this node's config.
func (g *Group) tryWait() time.Duration {
	p := g.node.Params()
	return time.Duration(p.TakeoverTicks+p.LeaseTicks+p.LeaseMarginTicks)*g.cfg.Tick + 2*g.cfg.RetryInterval
}

// noQuorum is the error of a TryAcquire that this node, reaching no
// majority, cannot get an answer for.
func (g *Group) noQuorum() error {
	return &NoQuorumError{Err: ErrNoAnswer, Quorum: g.node.Quorum()}
}

func (g *Group) lock(name string) *lockState {
	ls := g.locks[name]
	if ls == nil {
		ls = &lockState{}
		g.locks[name] = ls
	}
	return ls
}

func (g *Group) enqueue(name string, w *waiter) {
	if g.broken != nil {
		w.ch <- acquireResult{err: g.broken}
		return
	}
	ls := g.lock(name)
	if w.try && (ls.lease != nil || len(ls.waiters) > 0) {
		w.ch <- acquireResult{err: ErrLocked}
		return
	}
	if w.try && g.node.QuorumLost() && !g.node.Quorum().Held {
		// No answer can come: do not wait for one. (Neither alone would
		// do: QuorumLost lags a takeover this node won, and Quorum is
		// false on a server until a majority answers its turn's first
		// ping, on a member throughout a takeover.)
		w.ch <- acquireResult{err: g.noQuorum()}
		g.next(name) // drops the lock's entry
		return
	}
	ls.waiters = append(ls.waiters, w)
	g.next(name)
}

// next asks the group for the resource on behalf of the first local waiter,
// if nothing of this process holds it or waits for it already.
func (g *Group) next(name string) {
	ls := g.locks[name]
	if ls == nil {
		return
	}
	for ls.lease == nil && ls.req == 0 && len(ls.waiters) > 0 {
		if !g.node.Joined() {
			return // rejoining: ask once a member again
		}
		req, err := g.node.Acquire(name)
		if err == nil {
			ls.req = req
			return
		}
		w := ls.waiters[0]
		ls.waiters = ls.waiters[1:]
		w.ch <- acquireResult{err: err}
	}
	if ls.lease == nil && ls.req == 0 && len(ls.waiters) == 0 {
		delete(g.locks, name)
	}
}

// withdraw takes a waiter out that stopped waiting (its context ended).
func (g *Group) withdraw(name string, w *waiter) {
	ls := g.locks[name]
	if ls == nil {
		return
	}
	i := -1
	for k, x := range ls.waiters {
		if x == w {
			i = k
		}
	}
	if i < 0 {
		return // already answered
	}
	ls.waiters = append(ls.waiters[:i], ls.waiters[i+1:]...)
	if i == 0 && ls.req != 0 {
		// If the grant took effect already, the request stays in
		// flight, and its lease goes to the next waiter, or back.
		g.cancelReq(name, ls)
	}
	g.next(name)
}

// cancelReq withdraws the request in flight for ls, and reports whether it
// did. It did not if the node already holds the resource under it: the
// grant took effect before the runtime handled an earlier answer to the
// request (a TryAcquire's EventQueued, handled while the EventGranted waits
// behind it in the same Ready). The request then stays in flight, and
// granted gives its lease to whoever is first in line by then, or back to
// the group. Forgetting it instead would make next ask again for a lock the
// node holds, and hand the arbiter's ErrBusy to the next waiter.
func (g *Group) cancelReq(name string, ls *lockState) bool {
	if err := g.node.Cancel(name); err != nil && g.node.Holds(name, ls.req) {
		return false
	}
	ls.req = 0
	return true
}

func (g *Group) granted(e Event) {
	ls := g.locks[e.Resource]
	if ls == nil || ls.req != e.Req || len(ls.waiters) == 0 {
		_ = g.node.Release(e.Resource) // nobody here wants it any more
		if ls != nil && ls.req == e.Req {
			// Its waiter withdrew too late to cancel it (cancelReq).
			ls.req = 0
			g.next(e.Resource)
		}
		return
	}
	w := ls.waiters[0]
	ls.waiters = ls.waiters[1:]
	ls.req = 0
	l := &Lease{name: e.Resource, token: e.Token, g: g, lost: make(chan struct{})}
	ls.lease = l
	w.ch <- acquireResult{lease: l}
}

// queued: a TryAcquire's request had to wait, so withdraw it; unless it
// waited no longer, and the node holds the resource already (cancelReq):
// then the try succeeded after all, and granted gives it the lease.
func (g *Group) queued(e Event) {
	ls := g.locks[e.Resource]
	if ls == nil || ls.req != e.Req || len(ls.waiters) == 0 || !ls.waiters[0].try {
		return
	}
	if !g.cancelReq(e.Resource, ls) {
		return
	}
	w := ls.waiters[0]
	ls.waiters = ls.waiters[1:]
	w.ch <- acquireResult{err: ErrLocked}
	g.next(e.Resource)
}

// quorumLost fails the TryAcquires that wait for an answer: none comes
// while this node reaches no majority, and a try does not wait.
func (g *Group) quorumLost() {
	for _, name := range sortedNames(g.locks) {
		ls := g.locks[name]
		if ls.req == 0 || len(ls.waiters) == 0 || !ls.waiters[0].try || !g.cancelReq(name, ls) {
			continue // cancelReq false: granted already (a grant can cross the loss)
		}
		w := ls.waiters[0]
		ls.waiters = ls.waiters[1:]
		w.ch <- acquireResult{err: g.noQuorum()}
		g.next(name)
	}
}

// refused: the group had no room for the first waiter's request; the
// waiters behind it ask again, and may find room freed meanwhile. A
// TryAcquire refused for want of room to wait would not have waited: the
// resource is locked, whatever the table's room.
func (g *Group) refused(e Event) {
	ls := g.locks[e.Resource]
	if ls == nil || ls.req != e.Req {
		return
	}
	ls.req = 0
	if len(ls.waiters) > 0 {
		w := ls.waiters[0]
		ls.waiters = ls.waiters[1:]
		err := fmt.Errorf("%w: lock %q: %s", ErrTooMany, e.Resource, e.Reason)
		if w.try && e.Busy {
			err = fmt.Errorf("%w: lock %q (and the group's lock table had no room to wait: %s)", ErrLocked, e.Resource, e.Reason)
		}
		w.ch <- acquireResult{err: err}
	}
	g.next(e.Resource)
}

func (g *Group) lost(e Event) {
	ls := g.locks[e.Resource]
	if ls == nil {
		return
	}
	switch {
	case ls.lease != nil && ls.lease.token == e.Token:
		cause := errors.New(e.Reason)
		if e.Expired {
			cause = fmt.Errorf("%w (%s)", ErrLeaseExpired, e.Reason)
		}
		ls.lease.lose(cause)
		ls.lease = nil
	case ls.req == e.Req:
		ls.req = 0 // lost before it reached us: ask again for the same waiter
	default:
		return
	}
	g.next(e.Resource)
}

func (g *Group) release(l *Lease) error {
	l.mu.Lock()
	lost, released := l.err != nil, l.released
	l.released = !lost
	l.mu.Unlock()
	switch {
	case released:
		return nil
	case lost:
		return l.err
	}
	ls := g.locks[l.name]
	if ls != nil && ls.lease == l {
		ls.lease = nil
		_ = g.node.Release(l.name)
		g.next(l.name)
	}
	return nil
}
