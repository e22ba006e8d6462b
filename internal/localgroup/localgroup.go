// Package localgroup starts a group of nodes of either mode in this process
// and drives a lock workload on them: the one way the demo, the benchmark,
// the game and the tests run a local group.
//
// Multicast-mode nodes talk real UDP multicast on one interface with TTL 0,
// so nothing leaves the host: lo inside a private network namespace
// (package netns), or the interface Options.Interface names. Quorum-mode
// nodes talk TCP on 127.0.0.1, on ports the system picks.
package localgroup

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/mcnode/mcnode"
	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/group/memnet"
	q "github.com/mcnode/mcnode/quorumfallback"
	"github.com/mcnode/mcnode/quorumfallback/node"
	"github.com/mcnode/mcnode/quorumfallback/qnet"
	"github.com/mcnode/mcnode/seal"
	"github.com/mcnode/mcnode/wire"
)

// Options says what group to start.
type Options struct {
	// Mode is the protocol family; the default is multicast.
	Mode mcnode.Mode
	// N is the number of nodes, at least 1.
	N int
	// Name names the group; empty picks one unique to this process and
	// start.
	Name string
	// Interface carries multicast mode's traffic (default lo).
	Interface string
	// Multicast, if its Name is set, is the base config of every
	// multicast-mode node (Name, Interface and Logger above still apply);
	// otherwise group.DefaultLocalConfig.
	Multicast group.Config
	// Keys, if any, are the group's keys: multicast mode seals every
	// datagram, quorum mode's links are TLS.
	Keys []seal.Key
	// Protocol and Coterie choose quorum mode's algorithm.
	Protocol, Coterie string
	// Logger receives every node's log (default none).
	Logger zerolog.Logger
	// Memory runs the group over in-memory networks (group/memnet, qnet's)
	// instead of sockets: for tests, anywhere, no namespace needed.
	Memory bool
}

// Group is a running local group.
type Group struct {
	// Nodes are the members, in the order they started (multicast mode:
	// join order, so Nodes[0] founded the group; quorum mode: node index).
	Nodes []mcnode.Locker
	// Where says in words how the nodes talk, for a banner.
	Where string

	groups []*group.Group
	meshes []*qnet.Mesh
}

var starts atomic.Int64

// Start starts opt.N nodes and returns once every one is a member
// (multicast mode, joined one after another, the first founding the group)
// or connected to every peer (quorum mode). On error it closes what it
// started.
func Start(ctx context.Context, opt Options) (*Group, error) {
	if opt.N < 1 {
		return nil, fmt.Errorf("localgroup: %d nodes: want at least 1", opt.N)
	}
	if opt.Name == "" {
		opt.Name = fmt.Sprintf("mcnode-local-%d-%d", os.Getpid(), starts.Add(1))
	}
	var g *Group
	var err error
	switch opt.Mode {
	case mcnode.Multicast, "":
		g, err = startMulticast(ctx, opt)
	case mcnode.Quorum:
		g, err = startQuorum(ctx, opt)
	default:
		return nil, fmt.Errorf("localgroup: unknown mode %q", opt.Mode)
	}
	if err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

func startMulticast(ctx context.Context, opt Options) (*Group, error) {
	cfg := opt.Multicast
	if cfg.Name == "" {
		cfg = group.DefaultLocalConfig()
	}
	cfg.Name, cfg.Logger, cfg.Keys = opt.Name, opt.Logger, opt.Keys
	// The first node founds the group, as it must here: no warning.
	cfg.Logger = cfg.Logger.Hook(zerolog.HookFunc(func(e *zerolog.Event, _ zerolog.Level, msg string) {
		if msg == group.FoundedWarning {
			e.Discard()
		}
	}))
	cfg.Interface = opt.Interface
	if cfg.Interface == "" {
		cfg.Interface = "lo"
	}
	g := &Group{Where: fmt.Sprintf("real UDP multicast on %s (TTL %d)", cfg.Interface, cfg.TTL)}
	var mem *memnet.Network
	if opt.Memory {
		mem, g.Where = memnet.New(1), "an in-memory network"
	}
	for i := range opt.N {
		if mem != nil {
			cfg.Transport = mem.Endpoint()
		}
		gr, err := group.Join(ctx, cfg)
		if err != nil {
			return g, fmt.Errorf("node %d of %d could not join: %w", i+1, opt.N, err)
		}
		g.groups = append(g.groups, gr)
		g.Nodes = append(g.Nodes, mcnode.Wrap(gr))
	}
	return g, nil
}

func startQuorum(ctx context.Context, opt Options) (*Group, error) {
	base := node.Config{Group: opt.Name, Protocol: opt.Protocol, Coterie: opt.Coterie, Peers: make([]string, opt.N), Logger: opt.Logger}
	if err := base.Setup().Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", node.ErrConfig, err)
	}
	g := &Group{Where: fmt.Sprintf("TCP on 127.0.0.1 in quorum mode: %v", base.Setup())}
	if opt.Memory {
		return startQuorumInMemory(ctx, g, base)
	}
	listeners := make([]net.Listener, opt.N)
	for i := range listeners {
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			for _, l := range listeners[:i] {
				l.Close()
			}
			return g, err
		}
		listeners[i], base.Peers[i] = l, l.Addr().String()
	}
	for i := range listeners {
		m, err := qnet.Listen(qnet.Config{Self: i, Peers: base.Peers, Hello: base.Hello(), Logger: opt.Logger, Listener: listeners[i], Keys: opt.Keys, Heartbeat: base.Heartbeat()})
		if err != nil {
			for _, l := range listeners[i:] {
				l.Close()
			}
			return g, err
		}
		g.meshes = append(g.meshes, m)
	}
	for i, m := range g.meshes {
		cfg := base
		cfg.Self, cfg.Transport = i, m
		nd, err := node.Start(cfg)
		if err != nil {
			for _, m := range g.meshes[i:] {
				m.Close()
			}
			return g, fmt.Errorf("node %d: %w", i, err)
		}
		g.Nodes = append(g.Nodes, mcnode.Wrap(nd))
	}
	for i, nd := range g.Nodes {
		if err := mcnode.Unwrap(nd).(*node.Node).WaitReady(ctx); err != nil {
			return g, fmt.Errorf("node %d: links: %w", i, err)
		}
	}
	return g, nil
}

// startQuorumInMemory starts quorum nodes over qnet's in-memory network.
func startQuorumInMemory(ctx context.Context, g *Group, base node.Config) (*Group, error) {
	g.Where = fmt.Sprintf("an in-memory network in quorum mode: %v", base.Setup())
	ends := qnet.NewMemNetwork(len(base.Peers))
	for i := range base.Peers {
		base.Peers[i] = fmt.Sprintf("memory-%d", i)
	}
	for i, end := range ends {
		cfg := base
		cfg.Self, cfg.Transport = i, end
		l, err := mcnode.Start(ctx, mcnode.Config{Mode: mcnode.Quorum, Quorum: cfg})
		if err != nil {
			return g, fmt.Errorf("node %d: %w", i, err)
		}
		g.Nodes = append(g.Nodes, l)
	}
	return g, nil
}

// Leave has every node leave the group, one after another, and closes
// them.
func (g *Group) Leave(ctx context.Context) error {
	if g == nil {
		return nil
	}
	var errs []error
	for _, n := range g.Nodes {
		errs = append(errs, n.Leave(ctx))
	}
	return errors.Join(errs...)
}

// Close stops every node at once.
func (g *Group) Close() {
	if g == nil {
		return
	}
	for _, n := range g.Nodes {
		n.Close()
	}
}

// Traffic is what the nodes have sent so far, application updates left
// out: the lock protocol's own datagrams or messages (Core: requests,
// grants, releases and the quorum protocols' other messages), multicast
// mode's membership traffic (pings, SYNCs, takeovers, repairs, joins), the
// backup's acks among them, and the bytes of it all. A multicast counts
// once.
type Traffic struct {
	Core, Membership, Acks, Bytes uint64
	// Received is every datagram (multicast) or frame (quorum, over TCP)
	// the nodes received, each reception counted once.
	Received uint64
	// Sent is every datagram class (multicast) or message kind (quorum)
	// by name, updates included.
	Sent map[string]uint64
}

// SentBy returns the datagrams each multicast-mode node has sent, in node
// order (nothing in quorum mode).
func (g *Group) SentBy() []uint64 {
	out := make([]uint64, len(g.groups))
	for i, gr := range g.groups {
		if st, err := gr.Status(); err == nil {
			for _, k := range st.Stats.Sent {
				out[i] += k
			}
		}
	}
	return out
}

// Traffic adds up what every node sent (over in-memory networks, quorum
// mode counts no bytes).
func (g *Group) Traffic() Traffic {
	t := Traffic{Sent: map[string]uint64{}}
	for _, gr := range g.groups {
		st, err := gr.Status()
		if err != nil {
			continue
		}
		for class, k := range st.Stats.Sent {
			t.Sent[string(class)] += k
			switch {
			case class.Core():
				t.Core += k
			case class != wire.ClassUpdate:
				t.Membership += k
			}
			if class == wire.ClassAck {
				t.Acks += k
			}
		}
		t.Bytes += st.Stats.SentBytes
		t.Received += st.Stats.Received
	}
	if len(g.meshes) == 0 { // quorum mode in memory: the nodes count, without bytes
		for _, l := range g.Nodes {
			if n, ok := mcnode.Unwrap(l).(*node.Node); ok {
				if st, err := n.Status(); err == nil {
					for k := range q.Kinds {
						if k.Valid() {
							t.Sent[k.String()] += st.Stats.Sent[k]
							t.Core += st.Stats.Sent[k]
						}
					}
				}
			}
		}
	}
	for _, m := range g.meshes {
		s := m.Stats()
		for _, n := range s.RecvFrames {
			t.Received += n
		}
		for k, n := range s.SentFrames {
			t.Sent[k.String()] += n
			if k.Valid() {
				t.Core += n
				t.Bytes += s.SentBytes[k]
			}
		}
	}
	return t
}

// Kinds lists the quorum protocols' message kinds, for reports in their
// order.
var Kinds = func() []string {
	var ks []string
	for k := q.Request; k <= q.Transfer; k++ {
		ks = append(ks, k.String())
	}
	return ks
}()
