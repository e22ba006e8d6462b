// Package node is the runtime of mcnode's quorum mode: it runs one node of
// a point-to-point mutual-exclusion protocol (package protocols) over
// reliable FIFO links (package qnet), a machine per named resource, and
// offers the same lock API as the multicast runtime (package group):
// Acquire, TryAcquire, a Lease with a fencing token, and application state
// updates (Publish, Subscribe), sent over the same links. Package mcnode
// wraps both runtimes in one interface.
//
// One goroutine alone touches the machines: it takes the API's calls and
// the frames the transport delivers, steps the resource's machine and sends
// what it produces.
//
// The protocols cannot withdraw a request (none of the papers has a cancel
// message), so a caller that gives up while its request is out leaves it
// standing: when the grant comes the runtime releases it at once. TryAcquire
// is Acquire that gives up after Config.TryWait: a lock that is free comes
// within a round trip, one that is held does not.
//
// With Maekawa's and Cao and Singhal's protocols the node survives failed
// peers (failover.go): a peer not heard for Config.Detect is suspected
// and, a lease after it was last heard, put down on every machine
// (q.FaultTolerant.Down), which asks substitute quorums; a holder loses
// its lock first if its quorum has not heard it; a restarted peer rejoins
// as a new incarnation. The other
// protocols assume, as their papers do, nodes that never fail: a node that
// dies stalls every request whose quorum contains it, and the runtime says
// so in its log (the links report the broken connection). A node that
// restarts has lost the state its peers rely on, so they refuse it
// (package qnet): restart such a group whole. A node takes locks while its links to the nodes its requests ask
// are up (protocols.Factory.Asks: its quorum), whatever the others' state,
// once every node has accepted this incarnation's links (qnet.Mesh.
// AdmittedTo: peers that restarted with it, or never saw it, would not
// refuse it): a node that is down stalls the requests that need it, not the
// others. Until then a node acts on no frame it receives (they wait), and
// once a peer refuses it as restarted it acts on none: as an arbiter it
// would grant from the state it lost.
// Fencing tokens start at the wall clock in microseconds each time a node
// makes a resource's machine, and above the highest token the node saw
// before (Config.TokenFile), so they keep increasing across such restarts.
// The runtime makes a machine for a resource when it is first used, and
// frees it as soon as it is quiescent (q.Protocol.Quiescent: nobody here
// waits, holds, or is owed an answer), keeping its counters: the next
// machine for any resource starts its sequence numbers and tokens above
// every freed one's. So a long-running daemon keeps machines only for the
// resources in use, at most MaxResources at once.
package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/mcnode/mcnode/group/fence"
	"github.com/mcnode/mcnode/internal/errkind"
	"github.com/mcnode/mcnode/internal/fanout"
	q "github.com/mcnode/mcnode/quorumfallback"
	"github.com/mcnode/mcnode/quorumfallback/protocols"
	"github.com/mcnode/mcnode/quorumfallback/qnet"
	"github.com/mcnode/mcnode/seal"
)

// Errors.
var (
	// ErrConfig wraps every config error.
	ErrConfig = errors.New("node: bad config")
	// ErrLocked: TryAcquire did not get the resource within TryWait: it is
	// held or waited for, here or elsewhere.
	ErrLocked = errkind.New("node: resource is held or waited for", errkind.Locked)
	// ErrNotConnected: TryAcquire found the links to some peer its requests
	// ask down, or this node not yet connected to every peer once (a peer
	// has not started yet, or this node restarted and the group refuses
	// it).
	ErrNotConnected = errors.New("node: not connected to the peers it needs")
	// ErrClosed: the node was closed. It matches mcnode.ErrClosed, as
	// ErrLocked and ErrLeaseLost match mcnode's.
	ErrClosed = errkind.New("node: closed", errkind.Closed)
	// ErrLeaseLost: the lease ended without Release (the node closed).
	ErrLeaseLost = errkind.New("node: lease lost", errkind.LeaseLost)
	// ErrTooMany: the resource is new and the node already keeps
	// MaxResources.
	ErrTooMany = errkind.New("node: too many resources in use", errkind.TooMany)
)

// Config configures a node.
type Config struct {
	// Group names the group; nodes of different groups refuse each other.
	Group string
	// Protocol and Coterie choose the algorithm (protocols.Names,
	// coterie.Kinds).
	Protocol, Coterie string
	// Self is this node's index in Peers.
	Self int
	// Peers lists every node's TCP address, the same list on every node.
	Peers []string
	// TryWait is how long TryAcquire waits for a grant. Default 200ms.
	TryWait time.Duration
	// Logger receives the node's log; default none.
	Logger zerolog.Logger
	// Keys, if any, are the group keys: the TCP mesh's links are then TLS,
	// authenticated by them (see package qnet).
	Keys []seal.Key
	// Transport, if set, replaces the TCP mesh (tests use qnet's in-memory
	// network); it must connect len(Peers) nodes.
	Transport qnet.Transport
	// Listener, if set, is the TCP mesh's listening socket instead of one on
	// Peers[Self] (for nodes of one process on ports chosen by the system).
	Listener net.Listener
	// TokenFile, if set, is where the node keeps the highest fencing token
	// it has seen, granted or held (package group/fence's format), written
	// at most once a second and when it closes. Every machine's tokens
	// start above it, and above the wall clock in microseconds: tokens then
	// keep increasing across restarts even when a host's clock runs behind
	// the others' (the last holder's token reached every arbiter of its
	// quorum, and every quorum shares one of them) or is set back.
	TokenFile string
	// Lease, LeaseMargin and Detect time the failure handling of the
	// protocols that have it (Maekawa, Cao-Singhal; see failover.go): a peer not heard
	// for Detect is suspected and put down Lease+LeaseMargin after it was
	// last heard; a holder loses its lock when a member of its quorum has
	// not heard it for Lease-LeaseMargin. Every node of a group must use
	// the same. Defaults 1.5s, 300ms, 1s; a negative Detect turns failure
	// handling off (a failed node then stalls what needs it).
	Lease, LeaseMargin, Detect time.Duration
}

// Setup is the protocol setup the config names.
func (c Config) Setup() protocols.Setup {
	return protocols.Setup{Protocol: c.Protocol, Coterie: c.Coterie, N: len(c.Peers)}
}

// Hello is what the nodes of one group must agree on, sent when links open:
// the group, the protocol and coterie, and the peer list, by a hash of it
// (the quorums are computed from node indexes, so two nodes that number
// the peers differently would not share the arbiters they think they do).
func (c Config) Hello() string {
	s := c.Setup()
	if !protocols.UsesCoterie(s.Protocol) {
		s.Coterie = "-"
	}
	h := fnv.New64a()
	for _, p := range c.Peers {
		h.Write([]byte(qnet.CanonicalAddr(p)))
		h.Write([]byte{0})
	}
	hello := fmt.Sprintf("%s%s/%s/N=%d/peers=%016x", c.helloGroup(), s.Protocol, s.Coterie, s.N, h.Sum64())
	if c.Heartbeat() > 0 {
		// The failure handling's timings too: a node with a longer lease
		// than its arbiters' kept its lock after they had given it to
		// another (review).
		lease, margin, detect := c.Lease, c.LeaseMargin, c.Detect
		lease, margin, detect = cmp.Or(lease, DefaultLease), cmp.Or(margin, DefaultLeaseMargin), cmp.Or(detect, DefaultDetect)
		hello += fmt.Sprintf("/lease=%v/margin=%v/detect=%v", lease, margin, detect)
	}
	return hello
}

// helloGroup is how Hello begins: the group, quoted, so that a hello of
// another group is told from one of another setup (qnet.Config.HelloGroup).
func (c Config) helloGroup() string { return "mcnode/" + strconv.Quote(c.Group) + "/" }

func (c *Config) validate() error {
	if c.Group == "" {
		return fmt.Errorf("%w: Group is empty", ErrConfig)
	}
	if len(c.Group) > MaxGroup {
		return fmt.Errorf("%w: Group name of %d bytes, at most %d", ErrConfig, len(c.Group), MaxGroup)
	}
	if len(c.Peers) == 0 {
		return fmt.Errorf("%w: Peers is empty: list every node's address", ErrConfig)
	}
	if c.Self < 0 || c.Self >= len(c.Peers) {
		return fmt.Errorf("%w: Self %d is not an index into the %d peers", ErrConfig, c.Self, len(c.Peers))
	}
	if err := c.Setup().Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if c.TryWait == 0 {
		c.TryWait = 200 * time.Millisecond
	}
	if c.TryWait < 0 {
		return fmt.Errorf("%w: TryWait %v is negative", ErrConfig, c.TryWait)
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.LeaseMargin == 0 {
		c.LeaseMargin = DefaultLeaseMargin
	}
	if c.Detect == 0 {
		c.Detect = DefaultDetect
	}
	if c.Lease <= c.LeaseMargin || c.LeaseMargin < 0 {
		return fmt.Errorf("%w: Lease %v must exceed LeaseMargin %v (>= 0)", ErrConfig, c.Lease, c.LeaseMargin)
	}
	return nil
}

// Node is one running node of a quorum-mode group.
type Node struct {
	cfg     Config
	log     zerolog.Logger
	factory *protocols.Factory
	tr      qnet.Transport
	keys    keyRing
	fo      *failover // failure handling, nil when off
	// failedErr is why the node stopped by itself: ErrFailed once peers
	// declared it failed, or an error wrapping ErrMisconfigured.
	failedErr error

	calls  chan func()
	done   chan struct{}
	closed sync.Once
	exited chan struct{}

	// Owned by the loop goroutine.
	res map[string]*resource
	// leaving: Leave began; every call for a lock fails with ErrClosed.
	leaving bool
	stats   Stats
	updates fanout.Hub[Update]
	// seen is the highest token read from cfg.TokenFile at start; highest
	// the highest any machine has shown since, handed to the writer of the
	// file (toSave, the newest only) at most once a second (savedAt).
	seen, highest, saved uint64
	savedAt              time.Time
	// clock is the highest sequence number of the machines freed: new
	// machines start above it, as their requests would have.
	clock      uint64
	toSave     chan uint64
	writerDone chan struct{}
}

// MaxResources bounds the machines a node keeps at once (one per resource
// in use; idle ones are freed), so that a peer cannot exhaust its memory
// with names.
const MaxResources = 1 << 16

// maxResources is MaxResources, lowered only by tests that fill the table.
var maxResources = MaxResources

// Stats counts what the node did.
type Stats struct {
	Sent, Received [q.Kinds]uint64 // messages by kind
	Rejected       uint64          // frames the machine refused
	Entries        uint64          // critical sections entered
	Releases       uint64          // critical sections left
	Freed          uint64          // quiescent machines freed
	Abandoned      uint64          // grants released at once: their caller had gone
	LeasesLost     uint64          // locks lost to a lease running out (failure handling)
	// Application state updates: copies sent (one per peer), not sent
	// (the peer's link down or far behind), received, and received but
	// dropped because a subscriber did not keep up.
	UpdatesSent, UpdatesUnsent, UpdatesReceived, UpdatesDropped uint64
}

// resource is one named resource's machine and this process's callers of
// it, served first come, first served: one request with the protocol at a
// time, for waiters[0].
type resource struct {
	name    string
	m       q.Protocol
	waiters []*waiter
	lease   *Lease
	// pending is an entry held back until its lease is valid (see
	// failover.go, holdEntry).
	pending *pendingEntry
	// releaseAt: the lease ran out (lost), and the lock is released then,
	// a margin later (failover.go, checkFailures).
	releaseAt time.Time
}

type waiter struct {
	ch chan result
}

type result struct {
	lease *Lease
	err   error
}

// Start validates cfg, opens the links (unless cfg.Transport is set) and
// starts the node. The links connect in the background; WaitConnected
// waits for them.
func Start(cfg Config) (*Node, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	f, err := protocols.NewFactory(cfg.Setup())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if hb := cfg.Heartbeat(); hb > 0 {
		// The holder notices its lease run out at its next check: the
		// margin must cover that; and a lease must outlast two heartbeats,
		// or no lock would be kept.
		if tick := checkEvery(cfg.Detect); cfg.LeaseMargin < tick {
			return nil, fmt.Errorf("%w: LeaseMargin %v is below the failure handling's check interval %v", ErrConfig, cfg.LeaseMargin, tick)
		}
		if cfg.Lease-cfg.LeaseMargin < 2*hb {
			return nil, fmt.Errorf("%w: Lease %v minus LeaseMargin %v is under two heartbeats (%v each, a fifth of Detect %v)", ErrConfig, cfg.Lease, cfg.LeaseMargin, hb, cfg.Detect)
		}
	}
	tr := cfg.Transport
	if tr == nil {
		mesh, err := qnet.Listen(qnet.Config{Self: cfg.Self, Peers: cfg.Peers, Hello: cfg.Hello(), HelloGroup: cfg.helloGroup(), Logger: cfg.Logger, Listener: cfg.Listener, Keys: cfg.Keys, Heartbeat: cfg.Heartbeat()})
		if err != nil {
			return nil, err
		}
		tr = mesh
	}
	n := &Node{
		cfg: cfg, log: cfg.Logger.With().Int("node", cfg.Self).Logger(), factory: f, tr: tr,
		calls: make(chan func()), done: make(chan struct{}), exited: make(chan struct{}),
		res: map[string]*resource{},
	}
	if len(cfg.Keys) > 0 {
		if n.keys.ring, err = seal.NewRing(cfg.Keys[0], cfg.Keys[1:]...); err != nil {
			tr.Close()
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	if cfg.TokenFile != "" {
		seen, err := fence.Highest(cfg.TokenFile)
		if err != nil {
			n.log.Error().Err(err).Str("file", cfg.TokenFile).Msg("cannot read the highest fencing token seen; tokens start at the wall clock alone")
		}
		if err := plausible("its highest token", seen); err != nil {
			// Tokens above it would be refused by every peer (or wrap): the
			// file is damaged, and only its owner can say what to do.
			tr.Close()
			return nil, fmt.Errorf("%w: token file %s: %w: the file is damaged; removing it lets this node's tokens start at the wall clock, below any a fence may hold from it", ErrConfig, cfg.TokenFile, err)
		}
		n.seen, n.saved = seen, seen
		n.toSave, n.writerDone = make(chan uint64, 1), make(chan struct{})
		go n.writeTokens()
	}
	n.log.Info().Str("setup", cfg.Setup().String()).Int("self", cfg.Self).Ints("quorum", f.Quorum(cfg.Self)).
		Msg("quorum-mode node started")
	n.startFailover()
	go n.loop()
	return n, nil
}

// WaitConnected waits until the links to every other node are up, if the
// transport can tell.
func (n *Node) WaitConnected(ctx context.Context) error {
	if w, ok := n.tr.(interface{ WaitConnected(context.Context) error }); ok {
		err := w.WaitConnected(ctx)
		if err != nil {
			select {
			case <-n.done:
				// The node stopped, and closed its links: say why it did
				// (ErrMisconfigured), not "transport closed" (review).
				return n.closedErr()
			default:
			}
		}
		return err
	}
	return nil
}

// WaitReady waits until the node may take locks: its links are up and,
// with failure handling, it has waited out the leases a previous
// incarnation may have given (failover.go).
func (n *Node) WaitReady(ctx context.Context) error {
	if err := n.WaitConnected(ctx); err != nil {
		return err
	}
	if n.fo != nil {
		return n.waitAwake(ctx)
	}
	return nil
}

// misconfiguration is a transport that tells of peers with another setup
// (qnet.Mesh).
type misconfiguration interface {
	Misconfigured() <-chan struct{}
	MisconfiguredWhy() string
}

// Done returns a channel that is closed when the node has stopped.
func (n *Node) Done() <-chan struct{} { return n.exited }

// StopCause says why the node stopped by itself, once Done is closed:
// ErrFailed (its peers declared it failed: start it anew), or an error
// wrapping ErrMisconfigured (do not, until every node has the same
// setup). Nil while the node runs, or if Close or Leave stopped it.
func (n *Node) StopCause() error {
	select {
	case <-n.exited:
		return n.failedErr // written by the loop before it closed exited
	default:
		return nil
	}
}

// Leave is the polite way out: it releases every lock this node holds, so
// that its quorums hand them on at once (their leases end, Lost closed,
// with ErrClosed), fails its waiters with ErrClosed and any call made from
// then on, waits until the requests it has out are granted and gives them
// back (the protocols cannot withdraw a request: granted to a node that is
// gone, a lock would wait for it), waits until all that is written to the
// links, and closes the node. It waits for the grants within ctx (as long
// as the locks are held elsewhere), and for the writes at most leaveLimit
// (a peer may not read); if ctx ends first, it closes the node all the
// same and says so: what it had out may then wait for it. A quorum-mode group is fixed: nothing
// removes the node. Its peers go on without it only with failure handling
// (see failover.go), once they have put it down; without, whatever needs
// its permission waits for it. Leave of a closed node fails with
// ErrClosed.
func (n *Node) Leave(ctx context.Context) error {
	err := n.call(ctx, func() {
		n.leaving = true
		for _, name := range slices.Sorted(maps.Keys(n.res)) {
			r := n.res[name]
			for _, w := range r.waiters {
				w.ch <- result{err: ErrClosed}
			}
			r.waiters = nil // nothing asked again on the release
			// A lease lost to the failure handling is released a margin
			// after (checkFailures), which settle waits for.
			if l := r.lease; l != nil && r.releaseAt.IsZero() {
				l.lose(ErrClosed)
				n.release(r)
			}
		}
	})
	if errors.Is(err, ErrClosed) {
		return err
	}
	if err == nil {
		err = n.settle(ctx)
	}
	if err != nil {
		err = fmt.Errorf("node: leave: %w: closed without waiting for the grants of the requests it had out, or for its releases to be written; what needs them waits for this node", err)
	}
	return errors.Join(err, n.Close())
}

// leaveLimit bounds Leave's wait for the frames queued for its peers to
// be written: a peer may not read.
const leaveLimit = 5 * time.Second

// settle waits until no resource of the node has a request out (a grant
// that comes for no waiter is given back at once, handOut), or ctx ends;
// then until the frames queued for every peer whose link is up are
// written, or ctx or leaveLimit ends.
func (n *Node) settle(ctx context.Context) error {
	for idle := false; !idle; {
		idle = true
		if err := n.call(ctx, func() {
			for _, r := range n.res {
				if r.m.State() != q.Idle {
					idle = false
				}
			}
		}); err != nil {
			return err
		}
		if !idle {
			if err := pause(ctx); err != nil {
				return err
			}
		}
	}
	b, ok := n.tr.(interface{ Backlog(int) (bool, int) })
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, leaveLimit)
	defer cancel()
	for {
		written := true
		for i := range n.cfg.Peers {
			if up, queued := b.Backlog(i); up && queued > 0 {
				written = false
			}
		}
		if written {
			return nil
		}
		if err := pause(ctx); err != nil {
			return err
		}
	}
}

// pause waits a millisecond, or until ctx ends.
func pause(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Millisecond):
		return nil
	}
}

// Close stops the node: leases are lost, waiters fail with ErrClosed, the
// links close. Close of a closed node does nothing.
func (n *Node) Close() error {
	var err error
	n.closed.Do(func() {
		close(n.done)
		<-n.exited
		err = n.tr.Close()
	})
	return err
}

func (n *Node) loop() {
	defer close(n.exited)
	defer func() {
		if n.toSave != nil {
			n.saveTokens(true)
			close(n.toSave)
			<-n.writerDone // the highest token is on disk when Close returns
		}
	}()
	in := n.tr.Inbound()
	// Until every node has accepted this incarnation's links, what arrives
	// waits (admitted not nil), and once a peer refuses this node as
	// restarted nothing is acted on: a restarted node lost the arbiter
	// state its peers rely on, and must not grant (see qnet.Mesh.Admission).
	var admitted <-chan struct{}
	var held []qnet.Inbound
	var tick <-chan time.Time
	var failed <-chan struct{}
	if n.fo != nil {
		// With failure handling a node waits out its predecessor's leases
		// instead (see failover.go).
		admitted, tick, failed = n.fo.awakeCh(), n.fo.ticker.C, n.fo.mesh.Failed()
		defer n.fo.ticker.Stop()
	} else if a, ok := n.tr.(admission); ok {
		admitted, _ = a.Admission()
	}
	var misconfigured <-chan struct{}
	mc, _ := n.tr.(misconfiguration)
	if mc != nil {
		misconfigured = mc.Misconfigured()
	}
	for {
		select {
		case f := <-n.calls:
			f()
		case <-misconfigured:
			misconfigured = nil
			why := mc.MisconfiguredWhy()
			n.log.Error().Str("seen", why).Msg("a peer runs another setup (protocol, coterie, size, peer list, or lease, lease margin or detection time): this node loses its locks and stops rather than risk two holders; give every node the same setup")
			// ErrClosed too: the node closes, and callers test for that.
			n.stopWith(fmt.Errorf("%w: %w: %s", ErrClosed, ErrMisconfigured, why))
		case <-tick:
			n.checkFailures()
		case <-failed:
			failed = nil
			n.log.Error().Msg("a peer answered that this node was declared failed")
			n.declaredFailed()
		case <-admitted:
			admitted = nil
			for _, msg := range held {
				n.receiveAdmitted(msg)
			}
			held = nil
		case msg, ok := <-in:
			if !ok {
				in = nil
				n.log.Warn().Msg("the links closed")
				continue
			}
			if admitted != nil {
				if len(held) >= maxHeldFrames {
					n.stats.Rejected++
					n.log.Error().Int("from", msg.From).Msg("a frame dropped: too many wait for this node to be connected to every peer once")
					continue
				}
				held = append(held, msg)
				continue
			}
			n.receiveAdmitted(msg)
		case <-n.done:
			n.updates.CloseAll()
			for _, r := range n.res {
				if r.lease != nil {
					r.lease.lose(ErrClosed)
				}
				for _, w := range r.waiters {
					w.ch <- result{err: ErrClosed}
				}
			}
			return
		}
	}
}

// call runs f on the loop goroutine.
func (n *Node) call(ctx context.Context, f func()) error {
	if err := ctx.Err(); err != nil {
		return err // select would pick at random
	}
	done := make(chan struct{})
	select {
	case n.calls <- func() { f(); close(done) }:
	case <-n.done:
		return n.closedErr()
	case <-ctx.Done():
		return ctx.Err()
	}
	<-done
	return nil
}

// closedErr is what a call to a stopped node gets: ErrClosed, wrapping why
// the node stopped by itself if it did (ErrFailed, ErrMisconfigured), so
// that a caller learns it. It waits for the loop's end, which wrote that.
func (n *Node) closedErr() error {
	<-n.exited
	switch {
	case errors.Is(n.failedErr, ErrClosed):
		return n.failedErr
	case n.failedErr != nil:
		return fmt.Errorf("%w: %w", ErrClosed, n.failedErr)
	}
	return ErrClosed
}

// MaxGroup bounds Config.Group, as in multicast mode (the hello carries it).
const MaxGroup = 255

// maxAhead is how far a counter (a clock, sequence number or fencing token)
// may be ahead of this host's wall clock in microseconds: 2^60, some 36,000
// years, more than any clock is wrong by (a host whose clock runs decades
// ahead starts its counters there, and its peers must take them: refused,
// its grants would leave their arbiters locked for good). Honest counters
// start at some node's wall clock and grow by one a request or grant, far
// slower than the clock. Without a bound one frame carrying a clock near
// MaxCounter, adopted by Lamport's rule and passed on, left every node
// numbers its peers refuse: the resource stopped for good, group-wide.
// Bounded by the clock, what a peer can push the counters to grows no
// faster than time and stays a quarter of MaxCounter and more below it.
const maxAhead = 1 << 60

// wallMicros is the host's clock in microseconds (0 before 1970); a
// variable for tests.
var wallMicros = func() uint64 { return uint64(max(time.Now().UnixMicro(), 0)) }

// errImplausible says a counter is beyond the bound (see plausible).
var errImplausible = errors.New("more than 2^60 microseconds (36,000 years) ahead of this host's clock")

// plausible returns an error wrapping errImplausible, naming what, if
// counter v is more than maxAhead ahead of the wall clock.
func plausible(what string, v uint64) error {
	if v <= maxAhead {
		return nil // whatever the clock says: every honest counter, without reading it
	}
	if now := wallMicros(); v > now+maxAhead {
		return fmt.Errorf("%s %d is %w (%d)", what, v, errImplausible, now)
	}
	return nil
}

// tokenFloor is where a new machine's fencing tokens start; a variable for
// tests.
var tokenFloor = func(self int) uint64 { return wallMicros() }

func (n *Node) resource(name string) (*resource, error) {
	if r := n.res[name]; r != nil {
		return r, nil
	}
	if len(n.res) >= maxResources {
		return nil, fmt.Errorf("%w: already %d (MaxResources)", ErrTooMany, len(n.res))
	}
	m, err := n.factory.New(n.cfg.Self)
	if err != nil {
		return nil, err
	}
	// A machine starts counting tokens at the wall clock in microseconds:
	// above every token this resource had before this node, or the whole
	// group, restarted (far fewer than a million grants a second), as the
	// multicast mode's group timestamp starts a new group.
	m.RaiseTokens(max(tokenFloor(n.cfg.Self), n.seen, n.highest))
	m.RaiseClock(n.clock)
	n.newMachine(m)
	r := &resource{name: name, m: m}
	n.res[name] = r
	return r, nil
}

// admission is what the TCP mesh tells of this node's admission.
type admission interface {
	Admission() (admitted <-chan struct{}, refused bool)
}

// maxHeldFrames bounds the frames that wait for this node's admission.
const maxHeldFrames = 1 << 16

// receiveAdmitted acts on a frame, unless a peer has refused this node as
// restarted.
func (n *Node) receiveAdmitted(in qnet.Inbound) {
	if n.failedErr != nil {
		n.stats.Rejected++
		return
	}
	if a, ok := n.tr.(admission); ok && n.fo == nil {
		if _, refused := a.Admission(); refused {
			n.stats.Rejected++
			return
		}
	}
	n.receive(in)
}

func (n *Node) receive(in qnet.Inbound) {
	switch in.Frame.Msg.Kind {
	case q.Update:
		n.deliver(in)
		return
	case q.Failure:
		if n.fo != nil && in.Frame.Msg.From == in.From {
			n.onFailure(in.From, in.Frame.Msg)
		}
		return
	}
	if n.fo != nil {
		switch p := &n.fo.peers[in.From]; {
		case in.Inc == p.refused:
			n.stats.Rejected++ // a refused incarnation's, read before it was
			return
		case p.down:
			// A frame from a node put down comes from its next
			// incarnation, which the mesh took after Down: up first, or
			// the machines would drop what it asks.
			n.peerUp(in.From, in.Inc)
		}
	}
	// Check before making a machine for a name never seen.
	err := q.Check(in.Frame.Msg, n.cfg.Self, len(n.cfg.Peers))
	if m := in.Frame.Msg; err == nil {
		if err = plausible("a counter (clock, sequence number or token)", max(in.Frame.Clock, m.Seq, m.SiteSeq, m.Token)); err != nil {
			err = fmt.Errorf("%w: %w", q.ErrBadMessage, err)
		}
	}
	var r *resource
	if err == nil {
		r, err = n.resource(in.Frame.Resource)
	}
	if err == nil {
		n.raiseTokens(r.m)
		// Lamport's rule: the clock moves past every clock it hears of.
		// Replies carry the request's number, not the arbiter's clock, so
		// without this a node that no restarted node's requests reach
		// would go on asking with numbers far below that node's (its
		// numbers start at the wall clock), and an arbiter the two share
		// would prefer it for as many requests as the gap: the restarted
		// node starved (TestRestartedNodeNotStarved).
		r.m.RaiseClock(in.Frame.Clock)
		err = r.m.Step(in.Frame.Msg)
	}
	if err != nil {
		n.stats.Rejected++
		n.log.Warn().Err(err).Int("from", in.From).Str("resource", in.Frame.Resource).Msg("message rejected")
		return
	}
	if k := in.Frame.Msg.Kind; k.Valid() {
		n.stats.Received[k]++
	}
	n.flush(r)
}

// flush sends what r's machine produced and hands out the lock if it
// entered.
func (n *Node) flush(r *resource) {
	if h := r.m.HighestToken(); h > n.highest {
		n.highest = h
		n.saveTokens(false)
	}
	rd := r.m.Ready()
	for _, m := range rd.Messages {
		if err := n.tr.Send(m.To, qnet.Frame{Resource: r.name, Msg: m, Clock: r.m.Clock()}); err != nil {
			n.log.Error().Err(err).Str("resource", r.name).Stringer("msg", m).Msg("cannot send")
			continue
		}
		n.stats.Sent[m.Kind]++
	}
	if !rd.Entered {
		n.freeIfQuiescent(r)
		return
	}
	n.stats.Entries++
	if n.fo != nil && !n.leaseValid(r, qnet.Now()) {
		n.holdEntry(r, rd.Token)
		return
	}
	n.handOut(r, rd.Token)
}

// handOut gives the critical section just entered to the first waiter, or
// gives it back if the caller gave up.
func (n *Node) handOut(r *resource, token uint64) {
	if len(r.waiters) == 0 {
		// The caller gave up while the request was out: give it back.
		n.stats.Abandoned++
		n.log.Debug().Str("resource", r.name).Msg("granted after its caller gave up: releasing")
		n.release(r)
		return
	}
	w := r.waiters[0]
	r.waiters = r.waiters[1:]
	r.lease = &Lease{name: r.name, token: token, n: n, lost: make(chan struct{})}
	if ft, ok := r.m.(q.FaultTolerant); ok && n.fo != nil {
		r.lease.quorum = ft.Quorum()
	}
	w.ch <- result{lease: r.lease}
}

// freeIfQuiescent frees r's machine if nothing here or elsewhere depends on
// it any more (see the package doc), keeping its counters.
func (n *Node) freeIfQuiescent(r *resource) {
	if len(r.waiters) > 0 || r.lease != nil || !r.m.Quiescent() || n.res[r.name] != r {
		return
	}
	n.clock = max(n.clock, r.m.Clock())
	n.highest = max(n.highest, r.m.HighestToken())
	delete(n.res, r.name)
	n.stats.Freed++
}

// saveTokens hands the highest token to the file's writer: at most once a
// second, unless now.
func (n *Node) saveTokens(now bool) {
	if n.toSave == nil || n.highest <= n.saved || (!now && time.Since(n.savedAt) < time.Second) {
		return
	}
	select {
	case n.toSave <- n.highest:
	default: // the writer is busy: replace what waits with the newer one
		select {
		case <-n.toSave:
		default:
		}
		n.toSave <- n.highest
	}
	n.saved, n.savedAt = n.highest, time.Now()
}

// writeTokens writes what saveTokens hands over, until the loop ends: the
// write syncs the file, which must not stall the loop.
func (n *Node) writeTokens() {
	defer close(n.writerDone)
	for t := range n.toSave {
		if err := fence.Check(n.cfg.TokenFile, t); err != nil && !errors.Is(err, fence.ErrStale) {
			n.log.Warn().Err(err).Msg("cannot record the highest fencing token")
		}
	}
}

// release leaves the critical section and asks again for the next waiter.
func (n *Node) release(r *resource) {
	r.lease = nil
	n.stats.Releases++
	n.raiseTokens(r.m)
	if err := r.m.Release(); err != nil {
		n.log.Error().Err(err).Str("resource", r.name).Msg("release")
	}
	n.flush(r)
	n.requestIfWaiting(r)
}

func (n *Node) requestIfWaiting(r *resource) {
	if len(r.waiters) == 0 || r.m.State() != q.Idle {
		return
	}
	n.raiseTokens(r.m)
	if err := r.m.Request(); err != nil {
		n.log.Error().Err(err).Str("resource", r.name).Msg("request")
		return
	}
	n.flush(r)
}

// waitAsked waits until this node may rely on its links to the nodes its
// requests ask (protocols.Factory.Asks; qnet.Mesh.AdmittedTo), if the
// transport can tell: a node whose quorum leaves out a node that is down
// takes locks all the same, once every node has accepted this incarnation.
func (n *Node) waitAsked(ctx context.Context) error {
	if n.fo != nil {
		return n.waitAwake(ctx)
	}
	if w, ok := n.tr.(interface {
		WaitAdmittedTo(context.Context, []int) error
	}); ok {
		return w.WaitAdmittedTo(ctx, n.factory.Asks(n.cfg.Self))
	}
	return n.WaitConnected(ctx)
}

// Acquire waits until this node holds the named resource and returns its
// lease. Callers in one process are served in the order they called.
func (n *Node) Acquire(ctx context.Context, name string) (*Lease, error) {
	if err := n.waitAsked(ctx); errors.Is(err, qnet.ErrClosed) {
		return nil, ErrClosed
	} else if err != nil {
		return nil, err
	}
	return n.acquire(ctx, name, false)
}

// TryAcquire is Acquire that gives up with ErrLocked if the resource is
// not granted within Config.TryWait.
func (n *Node) TryAcquire(ctx context.Context, name string) (*Lease, error) {
	if n.fo != nil {
		if left := n.fo.awake.Sub(qnet.Now()); left > 0 {
			return nil, fmt.Errorf("%w: waiting out the leases a previous incarnation may have given, %v more", ErrNotConnected, left.Round(time.Millisecond))
		}
	} else if a, ok := n.tr.(admission); ok {
		if _, refused := a.Admission(); refused {
			return nil, qnet.ErrRestarted
		}
	}
	if c, ok := n.tr.(interface{ AdmittedTo([]int) bool }); ok && n.fo == nil && !c.AdmittedTo(n.factory.Asks(n.cfg.Self)) {
		return nil, ErrNotConnected
	}
	try, cancel := context.WithTimeout(ctx, n.cfg.TryWait)
	defer cancel()
	l, err := n.acquire(try, name, true)
	if errors.Is(err, context.DeadlineExceeded) && try.Err() != nil && ctx.Err() == nil {
		return nil, fmt.Errorf("%w: not granted within %v", ErrLocked, n.cfg.TryWait)
	}
	return l, err
}

// MaxName is the longest resource name or update topic, in bytes: the
// multicast mode's default (wire.DefaultLimits), so that an application
// behaves alike in both modes; the links could carry qnet.MaxResource.
const MaxName = 128

// acquire waits for the lock until ctx ends; a try (TryAcquire) fails at
// once if another caller of this node holds or waits for it: no need to
// ask the quorum, and wait TryWait, to know.
func (n *Node) acquire(ctx context.Context, name string, try bool) (*Lease, error) {
	if name == "" || len(name) > MaxName || !utf8.ValidString(name) {
		return nil, fmt.Errorf("node: resource name %.20q...: want 1 to %d bytes of UTF-8", name, MaxName)
	}
	w := &waiter{ch: make(chan result, 1)}
	var err error
	if cerr := n.call(ctx, func() {
		if n.leaving {
			err = ErrClosed
			return
		}
		if n.failedErr != nil {
			err = n.failedErr // stopping: a request now would go out
			return
		}
		if r := n.res[name]; try && r != nil && (r.lease != nil || len(r.waiters) > 0) {
			err = fmt.Errorf("%w: held or waited for by another caller of this node", ErrLocked)
			return
		}
		var r *resource
		if r, err = n.resource(name); err != nil {
			return
		}
		r.waiters = append(r.waiters, w)
		n.requestIfWaiting(r)
	}); cerr != nil {
		return nil, cerr
	}
	if err != nil {
		return nil, err
	}
	select {
	case res := <-w.ch:
		return res.lease, res.err
	case <-ctx.Done():
	}
	// Withdraw; if the lease came meanwhile, give it back.
	_ = n.call(context.Background(), func() {
		r := n.res[name]
		if r == nil {
			return // served, released and freed meanwhile
		}
		for i, x := range r.waiters {
			if x == w {
				r.waiters = append(r.waiters[:i], r.waiters[i+1:]...)
				n.freeIfQuiescent(r)
				return
			}
		}
	})
	select {
	case res := <-w.ch:
		if res.lease != nil {
			_ = res.lease.Release()
		}
	default:
	}
	return nil, ctx.Err()
}

// Status is a snapshot of the node.
type Status struct {
	Group  string
	Setup  protocols.Setup
	Self   int
	Peers  []string
	Quorum []int
	Held   []string // resources this node holds, by name
	Tokens []uint64 // the fencing token of each of Held
	// Machines is how many resources' machines the node keeps: those in
	// use here or at peers that ask it (idle ones are freed).
	Machines int
	Stats    Stats
	// Reachable reports whether this node may take locks now: its links to
	// every node its requests ask (protocols.Factory.Asks) are up, and its
	// peers have admitted this incarnation (qnet.Mesh.AdmittedTo). False,
	// an Acquire waits and a TryAcquire fails. A transport that cannot
	// tell (qnet's in-memory network) counts as reachable.
	Reachable bool
	// Links is this node's link to each node, by index (Self's is the zero
	// Link), and Net the TCP mesh's counters: nil over a transport that
	// reports neither.
	Links []Link
	Net   *qnet.Stats
	// LeaseMargin is the failure handling's margin, zero without it: a
	// lock client stops its work this long before a lease runs out.
	LeaseMargin time.Duration
}

// Link is this node's link to one peer, as the transport reports it.
type Link struct {
	Up     bool // connected, and its hello accepted
	Queued int  // frames waiting to be written to it
	// Restarted: without failure handling, the peer restarted while this
	// node ran, and is refused for good (qnet.Mesh.Refusing): down.
	Restarted bool
}

// Status reports the node's state.
func (n *Node) Status() (Status, error) {
	st := Status{Group: n.cfg.Group, Setup: n.cfg.Setup(), Self: n.cfg.Self, Peers: n.cfg.Peers, Quorum: n.factory.Quorum(n.cfg.Self)}
	if n.fo != nil {
		st.LeaseMargin = n.fo.margin
	}
	// The transport is read outside the loop: it has locks of its own.
	st.Reachable = true
	if n.fo != nil {
		st.Reachable = false // below, on the loop: it reads the peers' state
	} else if c, ok := n.tr.(interface{ AdmittedTo([]int) bool }); ok {
		st.Reachable = c.AdmittedTo(n.factory.Asks(n.cfg.Self))
	}
	if b, ok := n.tr.(interface{ Backlog(int) (bool, int) }); ok {
		st.Links = make([]Link, len(n.cfg.Peers))
		r, _ := n.tr.(interface{ Refusing(int) bool })
		for i := range st.Links {
			st.Links[i].Up, st.Links[i].Queued = b.Backlog(i)
			st.Links[i].Restarted = r != nil && r.Refusing(i)
		}
	}
	if s, ok := n.tr.(interface{ Stats() qnet.Stats }); ok {
		net := s.Stats()
		st.Net = &net
	}
	err := n.call(context.Background(), func() {
		if n.fo != nil {
			st.Reachable = n.quorumReachable()
		}
		st.Stats = n.stats
		st.Machines = len(n.res)
		for _, name := range slices.Sorted(maps.Keys(n.res)) {
			if l := n.res[name].lease; l != nil {
				st.Held = append(st.Held, name)
				st.Tokens = append(st.Tokens, l.token)
			}
		}
	})
	return st, err
}

// Lease is a resource this node holds.
type Lease struct {
	name   string
	token  uint64
	n      *Node
	lost   chan struct{}
	quorum []int // with failure handling: whose hearing keeps it

	mu       sync.Mutex
	err      error
	lostAt   time.Time
	released bool
}

// Name is the resource's name.
func (l *Lease) Name() string { return l.name }

// Token is the fencing token: strictly increasing from one holder of the
// resource to the next (see package quorumfallback).
func (l *Lease) Token() uint64 { return l.token }

// Lost is closed if the lease ends without Release (the node closed).
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Expires is when the lock runs out unless the members of its quorum keep
// hearing this node, on CLOCK_BOOTTIME (qnet.Now), with failure handling;
// zero without: the lock lasts until released. A lost lease expired when it
// was lost.
func (l *Lease) Expires() time.Time {
	if l.quorum == nil {
		return time.Time{}
	}
	end := l.n.leaseDeadline(l.quorum)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil && l.lostAt.Before(end) {
		return l.lostAt
	}
	return end
}

// TimeLeft returns how long the lock has left unless renewed (its quorum
// keeps hearing this node), with failure handling; false without: the
// lock lasts until released (mcnode.Lease). A lost lease has none left.
func (l *Lease) TimeLeft() (time.Duration, bool) {
	e := l.Expires()
	if e.IsZero() {
		return 0, false
	}
	return max(e.Sub(qnet.Now()), 0), true
}

// Err says why the lease was lost, or nil.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Release gives the resource back. Releasing twice is a no-op; releasing
// a lost lease (the node closed, before or during the call) returns its
// Err, which wraps ErrLeaseLost.
func (l *Lease) Release() error {
	l.mu.Lock()
	if l.released || l.err != nil {
		err := l.err
		l.mu.Unlock()
		return err
	}
	l.released = true
	l.mu.Unlock()
	err := l.n.call(context.Background(), func() {
		if r := l.n.res[l.name]; r != nil && r.lease == l {
			l.n.release(r)
		}
	})
	if err != nil {
		// The node closed before the release reached its loop: the lock
		// was lost, not released (Close skipped it as released).
		l.mu.Lock()
		l.released = false
		l.mu.Unlock()
		l.lose(err)
		return l.Err()
	}
	return nil
}

func (l *Lease) lose(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released || l.err != nil {
		return
	}
	l.err = fmt.Errorf("%w: %w", ErrLeaseLost, err)
	l.lostAt = qnet.Now()
	close(l.lost)
}
