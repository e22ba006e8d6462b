// Package mcnode is the one lock API of mcnode's two modes: a Locker is a
// node of a group that hands out named locks under mutual exclusion, and
// carries application state updates between its members, whichever
// protocol runs underneath.
//
//   - Multicast mode (package group) runs the rotating-arbiter algorithm of
//     Pearlin's thesis (2003) over UDP IP multicast: a server role rotates
//     among the members, grants by multicasting its decisions, and the
//     group survives the death of any member, the server's included.
//   - Quorum mode (package quorumfallback/node) runs one of the classic
//     point-to-point quorum protocols (Maekawa 1985, Cao and Singhal 1998,
//     Ricart and Agrawala 1981, and Kakugawa, Fujita, Yamashita and Ae's
//     protocol without timestamps) over a TCP mesh among a fixed list of
//     peers, for comparison.
//
// Start opens a node of the mode Config.Mode names; Wrap adapts one
// already running. Code written against Locker and Lease runs unchanged
// in either mode: the resource-contention game (examples/game) is such an
// application.
//
// Application state updates (Publish, Subscribe) are best effort in both
// modes, delivered at most once to each other member and never to the
// publisher itself. Multicast mode sends each as one datagram to the
// group. Quorum mode has no multicast group, so it sends one copy to each
// peer over the same TCP links as the protocol's messages: in order from
// each sender while a link is up, lost to a peer whose link is down. An
// update never depends on the lock protocol, so an application that needs
// agreement takes a lock for it.
package mcnode

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/internal/errkind"
	"github.com/mcnode/mcnode/quorumfallback/node"
	"github.com/mcnode/mcnode/quorumfallback/qnet"
)

// Mode names a protocol family.
type Mode string

// The modes.
const (
	// Multicast is the rotating arbiter over UDP multicast (package group).
	Multicast Mode = "multicast"
	// Quorum is a point-to-point quorum protocol over TCP (package
	// quorumfallback/node).
	Quorum Mode = "quorum"
)

// Locker is one node of a group, in either mode. It is safe for
// concurrent use.
type Locker interface {
	// Acquire waits until this node holds the named lock, or ctx ends.
	// Callers in one process are served in the order they called. A name
	// is 1 to 128 bytes of UTF-8 (a topic at most 128); another is
	// refused.
	Acquire(ctx context.Context, name string) (Lease, error)
	// TryAcquire takes the named lock if it is free, and returns an error
	// that wraps ErrLocked if it is held or waited for: by another node,
	// or by another caller of this one. It does not wait long for an
	// answer. In multicast mode, when the group's server does not answer,
	// it returns an error that wraps group.ErrNoAnswer (and
	// group.ErrNoQuorum if this node reaches no majority, the usual
	// reason): whether the lock is free is then unknown. That is at once
	// when this node knows it reaches no majority, else within a
	// takeover's time (2.5 s with the default timings; see
	// group.Group.TryAcquire). Quorum mode reports ErrLocked when no grant
	// comes within its TryWait, and node.ErrNotConnected when its links to
	// the nodes it asks are down.
	TryAcquire(ctx context.Context, name string) (Lease, error)
	// Publish sends an application state update to the other members.
	// The data is at most 1024 bytes and the topic at most 128 bytes of
	// UTF-8, in either mode: the wire's limits (wire.DefaultLimits'
	// MaxUpdate and MaxName in multicast mode, qnet.MaxData and
	// node.MaxName in quorum mode). A larger update is refused with an
	// error, and not sent: split bigger state, or send where it is kept.
	Publish(topic string, data []byte) error
	// Subscribe returns the updates the other members publish on topic (""
	// for every topic) and a function that ends the subscription; the
	// channel is closed when the subscription or the node ends. Updates
	// not read in time are dropped.
	Subscribe(topic string) (<-chan Update, func())
	// Status reports the node and the group as it sees it.
	Status() (Status, error)
	// Leave releases what this node holds, so that the group hands it on
	// at once, fails its waiting calls (and any made from then on) with
	// ErrClosed, tells the group this node goes, and closes the node, even
	// if ctx ends first (it then says so). Multicast mode records the
	// leave: the group goes on without the node. Quorum mode first waits,
	// within ctx, for the requests it has out to be granted, and gives
	// them back: the protocols cannot withdraw one. A quorum-mode group is fixed: the
	// node stays one of its peers, and the locks whose quorums need its
	// permission wait for it, unless the protocol has failure handling
	// (Maekawa and Cao-Singhal over TCP, node.Config.Detect), under which
	// the others put it down after the detection time and a lease, and go
	// on with substitute quorums where the coterie has them (the tree and
	// majority coteries do; a grid or finite projective plane has none for
	// quorums that hold the node). Leave of a closed node fails with
	// ErrClosed.
	Leave(ctx context.Context) error
	// Close stops the node at once, telling nobody: what it held is lost,
	// and the group takes it back only after this node's lease (quorum
	// mode: only with failure handling, as for Leave). Close of a closed
	// node does nothing.
	Close() error
}

// Lease is a lock this node holds.
type Lease interface {
	// Name is the lock's name.
	Name() string
	// Token is the fencing token: strictly increasing from one holder of
	// the lock to the next, so that a service the lock guards can refuse
	// a stale holder's writes.
	Token() uint64
	// Lost is closed if the lock ends without Release: this node's lease
	// ran out (multicast mode, and quorum mode with failure handling: the
	// node lost touch with the group, or was declared failed), it was
	// removed from the group (multicast mode), or the node left or closed.
	// Stop using the resource at once.
	Lost() <-chan struct{}
	// Err says why the lease was lost, or nil.
	Err() error
	// TimeLeft returns how long the lease has left unless the group renews
	// it, and true: in multicast mode, and in quorum mode with failure
	// handling (node.Config.Lease); false where locks do not expire. The
	// lease is the node's, renewed for all it holds: it says nothing of a
	// lock already released, and a lost lock (Lost closed) has none left. A holder whose process may be paused (a GC pause,
	// SIGSTOP, a suspended machine) acts on the resource only while enough
	// is left: once the lease runs out the group may hand the lock to
	// another, before this process has run again to see Lost.
	TimeLeft() (time.Duration, bool)
	// Release gives the lock back. Releasing twice is a no-op.
	Release() error
}

// Update is an application state update from another member.
type Update struct {
	// From is the sender's ID, as Status.Self reports it on the sender.
	From  uint64
	Topic string
	Data  []byte
}

// Member is one member of the group.
type Member struct {
	ID   uint64
	Addr string
}

// Status is a snapshot of a node in either mode. Fields a mode does not
// have are zero.
type Status struct {
	Mode  Mode
	Group string
	// Protocol is "rotating-arbiter" in multicast mode, else the quorum
	// protocol; Coterie the quorum construction, if it uses one.
	Protocol, Coterie string
	Self              uint64
	Addr              string
	Members           []Member
	// Multicast mode: the server of the current turn, the group timestamp
	// and the epoch; whether this node is a member now.
	Server, T, Epoch uint64
	Joined           bool
	// Quorum mode: the nodes whose permission this node asks for.
	Quorum []uint64
	// Held lists the locks this node holds.
	Held []string
	// Sent counts the lock protocol's datagrams (multicast mode) or
	// messages (quorum mode) this node sent, application updates left
	// out; Core the part of them that asks for, grants and releases locks
	// (in quorum mode, all of them), the rest being multicast mode's
	// membership traffic (pings, SYNCs, acks, takeovers, repairs, joins).
	// Updates counts the updates it sent (in quorum mode, one per peer);
	// Received counts everything it received, and Dropped what it dropped
	// as malformed, forged or out of place.
	Sent, Core, Updates, Received, Dropped uint64
}

// Errors of either mode, to test for with errors.Is: each runtime's own
// error (group.ErrLocked, node.ErrLocked, ...) matches the one of its kind.
var (
	// ErrLocked: TryAcquire found the lock held or waited for.
	ErrLocked = errkind.Locked
	// ErrLeaseLost: a Lease ended without Release (its Err, and Release's
	// error): in multicast mode the group took the lock back (this node's
	// lease ran out, or it was removed), in either mode the node closed.
	ErrLeaseLost = errkind.LeaseLost
	// ErrClosed: the node was closed, or has left; every call fails with
	// it from then on, but Close, which does nothing.
	ErrClosed = errkind.Closed
	// ErrTooMany: Acquire or TryAcquire found the lock table full: in a
	// group, the server refused the request, with 65,536 locks in use (held
	// or waited for), or a state that one more lock or waiter could make too
	// large for a state transfer (8 MiB); on a quorum-mode node, 65,536
	// locks in use there. In a group, a TryAcquire of a lock in use
	// answers ErrLocked even when there was no room to wait.
	ErrTooMany = errkind.TooMany
)

// ErrConfig is wrapped by Start's errors for a config it cannot use (with
// the runtime's own: group.ErrConfig, node.ErrConfig, qnet.ErrConfig).
var ErrConfig = errors.New("mcnode: bad config")

// Config says which mode to start and how.
type Config struct {
	// Mode chooses the runtime: Multicast (the default) or Quorum.
	Mode Mode
	// Multicast configures a multicast-mode node (start from
	// group.DefaultLANConfig or group.DefaultLocalConfig).
	Multicast group.Config
	// Quorum configures a quorum-mode node; Start waits until its links
	// to every peer are up, and with failure handling until it has waited
	// out the leases a previous incarnation may have given (a lease and
	// its margin, 1.8 s by default).
	Quorum node.Config
}

// Start starts a node of the mode cfg names and returns once it is a
// member (multicast mode) or may take locks (quorum mode: connected to
// every peer, its predecessor's leases waited out).
func Start(ctx context.Context, cfg Config) (Locker, error) {
	switch cfg.Mode {
	case Multicast, "":
		g, err := group.Join(ctx, cfg.Multicast)
		if err != nil {
			return nil, configErr(err)
		}
		return Wrap(g), nil
	case Quorum:
		n, err := node.Start(cfg.Quorum)
		if err != nil {
			return nil, configErr(err)
		}
		if err := n.WaitReady(ctx); err != nil {
			n.Close()
			return nil, fmt.Errorf("mcnode: links to the peers: %w", err)
		}
		return Wrap(n), nil
	}
	return nil, fmt.Errorf("%w: unknown mode %q (want %q or %q)", ErrConfig, cfg.Mode, Multicast, Quorum)
}

// configErr wraps a runtime's config error in ErrConfig.
func configErr(err error) error {
	if errors.Is(err, group.ErrConfig) || errors.Is(err, node.ErrConfig) || errors.Is(err, qnet.ErrConfig) {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return err
}

// Runtime is a node of either runtime: *group.Group or *node.Node.
type Runtime interface {
	*group.Group | *node.Node
}

// Wrap adapts a running node of either mode to Locker. It panics on a nil
// one, which would fail at the first call instead.
func Wrap[R Runtime](r R) Locker {
	switch r := any(r).(type) {
	case *group.Group:
		if r == nil {
			panic("mcnode.Wrap: a nil *group.Group")
		}
		return groupLocker{r}
	case *node.Node:
		if r == nil {
			panic("mcnode.Wrap: a nil *node.Node")
		}
		return quorumLocker{r}
	}
	panic("unreachable")
}

// Unwrap returns the runtime under a Locker from Start or Wrap:
// *group.Group or *node.Node, for what only one mode has (the event
// stream, the group key ring, the full status). Nil for any other Locker.
// A Lease's own extras are on the Lease: a multicast one is a
// *group.Lease (Expires).
func Unwrap(l Locker) any {
	switch l := l.(type) {
	case groupLocker:
		return l.g
	case quorumLocker:
		return l.n
	}
	return nil
}

// leaseOrNil keeps a nil *T from becoming a non-nil Lease.
func leaseOrNil[L interface {
	*group.Lease | *node.Lease
	Lease
}](l L, err error) (Lease, error) {
	if l == nil {
		return nil, err
	}
	return l, err
}
