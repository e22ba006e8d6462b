package main

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/mcnode/mcnode"
	"github.com/mcnode/mcnode/quorumfallback/node"
)

// restartingNode is a game player's node on a LAN in quorum mode, started
// anew when its peers declare it failed (node.ErrFailed), as `mcnode run`
// starts its node anew: a player whose process was stopped for longer than
// the detection time was out of the game for good, with no word of it, and
// the others played on without it (black-box round). It is the same player
// after: its node keeps its index (Status.Self), by which the others know
// it, and its subscriptions carry on from the new node.
type restartingNode struct {
	start  func(ctx context.Context) (mcnode.Locker, error)
	log    zerolog.Logger
	done   chan struct{} // closed by Leave or Close
	ctx    context.Context
	cancel context.CancelFunc // ends a start under way: Leave or Close
	watch  sync.WaitGroup

	mu      sync.Mutex
	cur     mcnode.Locker
	swapped chan struct{} // closed and replaced when cur changes
	closed  bool
	// earlier sums the traffic counters of the nodes cur replaced, and
	// last is cur's as Status last read them: a stopped node reports none,
	// so what it counted after that read is not in earlier (the game reads
	// its status every round).
	earlier, last traffic
}

// traffic is the part of mcnode.Status that counts: the player's figures
// carry on across restarts rather than start again at zero.
type traffic struct{ sent, core, updates, received, dropped uint64 }

func trafficOf(st mcnode.Status) traffic {
	return traffic{st.Sent, st.Core, st.Updates, st.Received, st.Dropped}
}

func (a traffic) atLeast(b traffic) traffic {
	return traffic{max(a.sent, b.sent), max(a.core, b.core), max(a.updates, b.updates), max(a.received, b.received), max(a.dropped, b.dropped)}
}

func (a traffic) plus(b traffic) traffic {
	return traffic{a.sent + b.sent, a.core + b.core, a.updates + b.updates, a.received + b.received, a.dropped + b.dropped}
}

// newRestartingNode watches first, and starts a new node with start each
// time the last one is declared failed.
func newRestartingNode(first mcnode.Locker, start func(ctx context.Context) (mcnode.Locker, error), log zerolog.Logger) *restartingNode {
	r := &restartingNode{start: start, log: log, done: make(chan struct{}), cur: first, swapped: make(chan struct{})}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.watch.Add(1)
	go func() {
		defer r.watch.Done()
		r.restarts()
	}()
	return r
}

// node is the node in use now.
func (r *restartingNode) node() mcnode.Locker {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur
}

// restarts starts the node anew each time it stops by itself, until Leave
// or Close.
func (r *restartingNode) restarts() {
	for {
		cur := r.node()
		n, ok := mcnode.Unwrap(cur).(*node.Node)
		if !ok {
			return // a multicast node does not stop by itself
		}
		select {
		case <-r.done:
			return
		case <-n.Done():
		}
		select {
		case <-r.done:
			return // closed by Leave or Close, not declared failed
		default:
		}
		if cause := n.StopCause(); errors.Is(cause, node.ErrMisconfigured) {
			// Started anew it would meet the same peers.
			r.log.Error().Err(cause).Msg("this player's node stopped: a peer runs another setup; give every player the same flags")
			return
		}
		r.log.Warn().Msg("this player's node stopped: its peers declared it failed (they did not hear it: stopped, or cut off); starting it anew")
		_ = cur.Close() // waits for the first Close: its port is then free
		for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
			next, err := r.start(r.ctx)
			if err == nil {
				if !r.use(next) {
					_ = next.Close()
					return
				}
				r.log.Info().Msg("this player's node started anew, as a new incarnation")
				break
			}
			if errors.Is(err, node.ErrMisconfigured) {
				r.log.Error().Err(err).Msg("this player's node, started anew, met a peer with another setup; give every player the same flags")
				return
			}
			r.log.Warn().Err(err).Dur("retry_in", delay).Msg("starting this player's node anew failed")
			select {
			case <-r.done:
				return
			case <-time.After(delay):
			}
		}
	}
}

// use makes next the node in use, unless Leave or Close came first (false).
func (r *restartingNode) use(next mcnode.Locker) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.cur = next
	r.earlier, r.last = r.earlier.plus(r.last), traffic{}
	close(r.swapped)
	r.swapped = make(chan struct{})
	return true
}

// Acquire implements mcnode.Locker on the node in use now.
func (r *restartingNode) Acquire(ctx context.Context, name string) (mcnode.Lease, error) {
	return r.node().Acquire(ctx, name)
}

// TryAcquire implements mcnode.Locker on the node in use now.
func (r *restartingNode) TryAcquire(ctx context.Context, name string) (mcnode.Lease, error) {
	return r.node().TryAcquire(ctx, name)
}

// Publish implements mcnode.Locker on the node in use now.
func (r *restartingNode) Publish(topic string, data []byte) error {
	return r.node().Publish(topic, data)
}

// Status implements mcnode.Locker on the node in use now, its traffic
// counters added to those of the nodes it replaced.
func (r *restartingNode) Status() (mcnode.Status, error) {
	cur := r.node()
	st, err := cur.Status() // outside r.mu: it waits for the node's loop
	if err != nil {
		return st, err
	}
	r.mu.Lock()
	all := r.earlier // cur replaced meanwhile: its counts are in it
	if r.cur == cur {
		// The highest read of each: two Status calls may end in either
		// order, and counters only grow (review).
		r.last = r.last.atLeast(trafficOf(st))
		all = all.plus(r.last)
	}
	r.mu.Unlock()
	st.Sent, st.Core, st.Updates, st.Received, st.Dropped = all.sent, all.core, all.updates, all.received, all.dropped
	return st, nil
}

// Subscribe implements mcnode.Locker: the updates of each node in turn, in
// one channel, closed when the subscription ends or the player leaves.
func (r *restartingNode) Subscribe(topic string) (<-chan mcnode.Update, func()) {
	out := make(chan mcnode.Update, 64)
	stop := make(chan struct{})
	var once sync.Once
	go func() {
		defer close(out)
		for {
			r.mu.Lock()
			cur, swapped, closed := r.cur, r.swapped, r.closed
			r.mu.Unlock()
			if closed {
				return
			}
			updates, cancel := cur.Subscribe(topic)
			if !forward(out, updates, stop) {
				cancel()
				return
			}
			cancel()
			select { // the node ended: the next one, if any
			case <-swapped:
			case <-stop:
				return
			case <-r.done:
				return
			}
		}
	}()
	return out, func() { once.Do(func() { close(stop) }) }
}

// forward passes updates on to out, dropping what out has no room for (as
// a node drops what is not read in time), until updates is closed (true)
// or stop (false).
func forward(out chan<- mcnode.Update, updates <-chan mcnode.Update, stop <-chan struct{}) bool {
	for {
		select {
		case u, ok := <-updates:
			if !ok {
				return true
			}
			select {
			case out <- u:
			default:
			}
		case <-stop:
			return false
		}
	}
}

// Leave implements mcnode.Locker: no restart after it.
func (r *restartingNode) Leave(ctx context.Context) error { return r.end().Leave(ctx) }

// Close implements mcnode.Locker: no restart after it.
func (r *restartingNode) Close() error { return r.end().Close() }

// end stops the restarts, a start under way included, and returns the
// node in use once none is under way.
func (r *restartingNode) end() mcnode.Locker {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.done)
		r.cancel()
	}
	r.mu.Unlock()
	r.watch.Wait()
	return r.node()
}
