package mcnode

import (
	"context"
	"sync"

	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/quorumfallback/node"
	"github.com/mcnode/mcnode/quorumfallback/protocols"
	"github.com/mcnode/mcnode/wire"
)

// groupLocker is a multicast-mode node.
type groupLocker struct{ g *group.Group }

func (l groupLocker) Acquire(ctx context.Context, name string) (Lease, error) {
	return leaseOrNil(l.g.Acquire(ctx, name))
}

func (l groupLocker) TryAcquire(ctx context.Context, name string) (Lease, error) {
	return leaseOrNil(l.g.TryAcquire(ctx, name))
}

func (l groupLocker) Publish(topic string, data []byte) error { return l.g.Publish(topic, data) }

func (l groupLocker) Subscribe(topic string) (<-chan Update, func()) {
	in, cancel := l.g.Subscribe(topic)
	return relay(in, cancel, l.g.Done(), func(u group.Update) Update { return Update{From: uint64(u.From), Topic: u.Topic, Data: u.Data} })
}

func (l groupLocker) Status() (Status, error) {
	st, err := l.g.Status()
	if err != nil {
		return Status{}, err
	}
	s := Status{Mode: Multicast, Group: st.Group, Protocol: "rotating-arbiter", Self: uint64(st.Self), Addr: st.Addr,
		Server: uint64(st.Server), T: st.T, Epoch: st.Epoch, Joined: st.Joined, Received: st.Stats.Received}
	for _, m := range st.Members {
		s.Members = append(s.Members, Member{ID: uint64(m.ID), Addr: m.Addr})
	}
	for _, h := range st.Held {
		s.Held = append(s.Held, h.Resource)
	}
	for c, n := range st.Stats.Sent {
		switch {
		case c == wire.ClassUpdate:
			s.Updates += n
		case c.Core():
			s.Core += n
			s.Sent += n
		default:
			s.Sent += n
		}
	}
	for _, n := range st.Stats.Drops {
		s.Dropped += n
	}
	return s, nil
}

func (l groupLocker) Leave(ctx context.Context) error { return l.g.Leave(ctx) }
func (l groupLocker) Close() error                    { return l.g.Close() }

// quorumLocker is a quorum-mode node.
type quorumLocker struct{ n *node.Node }

func (l quorumLocker) Acquire(ctx context.Context, name string) (Lease, error) {
	return leaseOrNil(l.n.Acquire(ctx, name))
}

func (l quorumLocker) TryAcquire(ctx context.Context, name string) (Lease, error) {
	return leaseOrNil(l.n.TryAcquire(ctx, name))
}

func (l quorumLocker) Publish(topic string, data []byte) error { return l.n.Publish(topic, data) }

func (l quorumLocker) Subscribe(topic string) (<-chan Update, func()) {
	in, cancel := l.n.Subscribe(topic)
	return relay(in, cancel, l.n.Done(), func(u node.Update) Update { return Update{From: uint64(u.From), Topic: u.Topic, Data: u.Data} })
}

func (l quorumLocker) Status() (Status, error) {
	st, err := l.n.Status()
	if err != nil {
		return Status{}, err
	}
	s := Status{Mode: Quorum, Group: st.Group, Protocol: st.Setup.Protocol, Self: uint64(st.Self), Addr: st.Peers[st.Self],
		Joined: true, Held: st.Held, Updates: st.Stats.UpdatesSent, Dropped: st.Stats.Rejected}
	if protocols.UsesCoterie(st.Setup.Protocol) {
		s.Coterie = st.Setup.Coterie
	}
	for i, p := range st.Peers {
		s.Members = append(s.Members, Member{ID: uint64(i), Addr: p})
	}
	for _, m := range st.Quorum {
		s.Quorum = append(s.Quorum, uint64(m))
	}
	for _, n := range st.Stats.Sent {
		s.Sent += n
	}
	s.Core = s.Sent
	for _, n := range st.Stats.Received {
		s.Received += n
	}
	s.Received += st.Stats.UpdatesReceived
	return s, nil
}

// Leave closes the node: a quorum-mode group is a fixed list of peers,
// with no leave to record.
func (l quorumLocker) Leave(ctx context.Context) error { return l.n.Leave(ctx) }
func (l quorumLocker) Close() error                    { return l.n.Close() }

// relay converts a runtime's update channel into this package's. It adds no
// buffer and drops nothing: a subscriber that does not keep up fills the
// runtime's buffer, which drops and counts what overflows. The result is
// closed when the source is (the subscription or the node ended); the relay
// also ends when the node stops (done) or the returned cancel is called,
// even if nobody reads any more.
func relay[U any](in <-chan U, cancel func(), done <-chan struct{}, conv func(U) Update) (<-chan Update, func()) {
	out := make(chan Update)
	stop := make(chan struct{})
	var once sync.Once
	go func() {
		defer close(out)
		for u := range in {
			select {
			case out <- conv(u):
			case <-stop: // cancelled: the source closes soon; discard
			case <-done:
				return // the node stopped: nothing more will come
			}
		}
	}()
	return out, func() {
		once.Do(func() {
			close(stop)
			cancel()
		})
	}
}
