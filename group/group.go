package group

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/mcnode/mcnode/arbiter"
	"github.com/mcnode/mcnode/group/fence"
	"github.com/mcnode/mcnode/group/sockfilter"
	"github.com/mcnode/mcnode/internal/errkind"
	"github.com/mcnode/mcnode/internal/fanout"
	"github.com/mcnode/mcnode/seal"
	"github.com/mcnode/mcnode/wire"
)

// Errors returned by the runtime.
var (
	// ErrGroupFull: the group refused this node (GROUP_FULL).
	ErrGroupFull = errors.New("group: the group is full")
	// ErrNodeClosed: the node has left or been closed. It matches
	// mcnode.ErrClosed, as ErrLocked and ErrLeaseLost match mcnode's.
	ErrNodeClosed = errkind.New("group: node closed", errkind.Closed)
	// ErrNoGroup: no member of the group answered a join within
	// Config.NoGroupAfter, or before the context of Join ended (the error
	// then wraps the context's too).
	ErrNoGroup = errors.New("group: no member of the group answered")
	// ErrCannotRead: within Config.NoGroupAfter, the group's datagrams
	// reached a node that joins, and none it could read: sealed with a key
	// it does not hold, sealed while it holds none, or in clear while it
	// holds one.
	ErrCannotRead = errors.New("group: the group's datagrams arrive, and this node cannot read them (another key, or one side has none)")
	// ErrLeaveUnconfirmed: Leave closed the node without the group's word
	// that it recorded the leave (the group was not heard, or ctx ended);
	// the group removes this node when its lease runs out, and only then
	// gives what it held to others.
	ErrLeaveUnconfirmed = errors.New("group: leave not confirmed")
	// ErrRemoved: the group declared this node dead (it was not heard for
	// longer than the lease) while it held the lease. The node rejoins as a
	// new member by itself; calls that were waiting wait on, and ask again
	// once it is a member.
	ErrRemoved = errors.New("group: this node was removed from the group")
	// ErrLeaseExpired: this node's lease ran out (the group did not confirm
	// it, through a majority, for a lease: a split, a loaded host, a
	// paused process), so it gave up what it held before the group could
	// hand it on. Wrapped, with the details, by a lost Lease's Err.
	ErrLeaseExpired = errors.New("group: this node's lease ran out")
	// ErrLocked: TryAcquire found the resource held or waited for, by
	// another member or another caller of this node.
	ErrLocked = errkind.New("group: resource is held or waited for", errkind.Locked)
	// ErrLeaseLost: the group took the resource back before Release
	// (this node's lease ran out, or it was removed).
	ErrLeaseLost = errkind.New("group: lease lost", errkind.LeaseLost)
	// ErrTooMany: the server refused the request, for want of room in the
	// group's lock table: the lock was not in use and 65,536 were (held or
	// waited for), or one more lock or waiter could have made the group's
	// state too large for a state transfer (8 MiB, less room for members
	// yet to join). The error says which (arbiter.EventRefused).
	ErrTooMany = errkind.New("group: the group's lock table is full", errkind.TooMany)
	// ErrTickMismatch: the group runs with another tick than this node.
	ErrTickMismatch = errors.New("group: tick differs from the group's")
	// ErrLeaseTooShort: the group's lease is too short for this node's turn
	// and ping timings; its leases would run out while it is healthy.
	ErrLeaseTooShort = errors.New("group: the group's lease is too short for this node's timings")
	// ErrNoQuorum explains a wait that ended without the lock: this node
	// could not reach a majority of the group (it is on the minority side
	// of a split network, or too many members are down), and a minority
	// grants nothing.
	ErrNoQuorum = errors.New("no quorum")
	// ErrNoAnswer: TryAcquire had no answer from the group's server, so it
	// cannot say whether the resource is free. Either this node reaches no
	// majority, and no answer can come until it does (the error is then a
	// NoQuorumError, which matches ErrNoQuorum too), or none came within
	// the time a takeover may keep the group without a server (see
	// TryAcquire).
	ErrNoAnswer = errors.New("group: no answer from the group's server")
)

// Re-exported names from the state machine, so that users need only this
// package.
type (
	// Event is something that happened in the group; see arbiter.Event.
	Event = arbiter.Event
	// EventKind says what an Event reports.
	EventKind = arbiter.EventKind
	// Member describes one member of the group.
	Member = arbiter.MemberInfo
	// NodeID is a member's logical ID.
	NodeID = wire.NodeID
	// Quorum says whether this node reaches a majority of the group.
	Quorum = arbiter.Quorum
	// ResourceInfo describes one lock in the replicated state: its holder,
	// token and queue.
	ResourceInfo = arbiter.ResourceInfo
	// Held is a lock this node holds.
	Held = arbiter.Held
	// MachineStats counts what the state machine dropped, repaired and sent
	// again.
	MachineStats = arbiter.Stats
	// Class groups datagrams for accounting (request, decision, release,
	// and the membership and repair classes).
	Class = wire.Class
)

// Event kinds; see arbiter.EventKind.
const (
	EventFounded       = arbiter.EventFounded
	EventJoined        = arbiter.EventJoined
	EventGroupFull     = arbiter.EventGroupFull
	EventLeft          = arbiter.EventLeft
	EventRemoved       = arbiter.EventRemoved
	EventMemberJoined  = arbiter.EventMemberJoined
	EventMemberLeft    = arbiter.EventMemberLeft
	EventMemberRemoved = arbiter.EventMemberRemoved
	EventServerChanged = arbiter.EventServerChanged
	EventQueued        = arbiter.EventQueued
	EventGranted       = arbiter.EventGranted
	EventReleased      = arbiter.EventReleased
	EventLost          = arbiter.EventLost
	EventUpdate        = arbiter.EventUpdate
	// Failover: see arbiter's EventEpoch and those after it.
	EventEpoch           = arbiter.EventEpoch
	EventTakeoverStarted = arbiter.EventTakeoverStarted
	EventTakeoverWon     = arbiter.EventTakeoverWon
	EventTakeoverFailed  = arbiter.EventTakeoverFailed
	EventStepDown        = arbiter.EventStepDown
	EventQuorumLost      = arbiter.EventQuorumLost
	EventQuorumRegained  = arbiter.EventQuorumRegained
	EventStranded        = arbiter.EventStranded
	EventPromoted        = arbiter.EventPromoted
	EventDemoted         = arbiter.EventDemoted
	EventRefused         = arbiter.EventRefused
)

// Group is one node's membership in a group: the runtime that drives the
// rotating-arbiter state machine over a transport. It is safe for concurrent
// use.
//
// The machine is stepped under one lock (mu) by whichever goroutine has the
// work: the caller of Acquire or Release, the transport's reader for what
// arrives, a ticker for time. Nothing is handed to another goroutine on the
// way from a datagram to the decision it causes, nor from a call to the
// datagram it sends: each hand-over is a goroutine wake-up, which on a busy
// host costs more than the protocol's own work. The one hand-over left on
// the way to a grant is the waiting caller's own wake-up.
type Group struct {
	cfg   Config
	log   zerolog.Logger
	tr    Transport
	codec *wire.Codec
	clock Clock
	id    uint64 // wire.GroupID(cfg.Name)

	stop    chan struct{} // closed when the node stops: ends the ticker and the pump
	done    chan struct{} // closed once it has stopped
	closer  sync.Once
	workers sync.WaitGroup // the ticker and the pump
	events  chan Event

	// mu guards everything below, and the machine.
	mu      sync.Mutex
	stopped bool
	node    *arbiter.Node
	joinErr chan error // the first join's outcome
	left    chan struct{}
	locks   map[string]*lockState
	updates fanout.Hub[Update]
	stats   Stats
	broken  error // why the node can take no more requests (refused on rejoin)
	others  map[uint64]bool
	pending []wire.Message
	batch   []Datagram
	start   time.Time // Clock time of the current machine's tick 0
	ticked  int64     // ticks the current machine has been given
	// filterFor is the member ID the transport's address filter keeps
	// datagrams for (AddressFilter): this node's, once it has one.
	filterFor NodeID
	savedT    uint64 // the timestamp last handed to the writer of cfg.TimestampFile
	savedAt   time.Time
	// toSave carries timestamps to the goroutine that writes them to
	// cfg.TimestampFile (nil without one), the newest only: the write
	// syncs the file, and a slow disk must not stall the machine in the
	// middle of a takeover. saved is closed when that goroutine ends.
	toSave chan uint64
	saved  chan struct{}
	// aboveSeen is the timestamp read from cfg.TimestampFile when a group
	// founded here starts above it rather than at the wall clock.
	aboveSeen uint64
	// ring holds the group keys (nil without); sealSeq numbers the
	// datagrams sealed, over every incarnation of this process (the nonce
	// is the incarnation and this number). warnedKey: the log said once that
	// sealed datagrams arrive and this node has no key. unknownKeyWarned:
	// when the log last said that datagrams arrive sealed with a key this
	// node lacks.
	ring      *seal.Ring
	sealSeq   uint64
	warnedKey bool
	// leftUnconfirmed: the node left without the group's word (EventLeft
	// with LeaveUnconfirmed).
	leftUnconfirmed bool
	// unreadable: while this node joined, a datagram of a running group
	// of its name arrived that it could not read (heardUnreadable).
	unreadable       bool
	unknownKeyWarned time.Time
	// limiter drops what a source sends beyond Config.RateLimit (nil: no
	// limit).
	limiter *limiter
	// wasMember: this node has been a member (a later join is a rejoin);
	// rejoinAt, if set, is when to try again after a refused rejoin.
	wasMember bool
	rejoinAt  time.Time
	// leaseEnd is when this node's lease runs out unless renewed, in
	// nanoseconds of the Clock's time; leases read it without taking the
	// machine's lock.
	leaseEnd atomic.Int64
	// sentBy and receivedBy count datagrams by class, in arrays: every
	// datagram sent or received updates them (Status makes Stats' maps).
	sentBy, receivedBy classCounts
}

// Stats counts what the runtime sent, received and dropped.
type Stats struct {
	Sent      map[Class]uint64 // datagrams sent, by class (a multicast counts once)
	SentBytes uint64
	Received  uint64
	// ReceivedBy counts the datagrams received that decoded, by class;
	// ReceivedBytes every datagram received, as it came.
	ReceivedBy    map[Class]uint64
	ReceivedBytes uint64
	Malformed     uint64 // datagrams that failed to decode: dropped
	Foreign       uint64 // datagrams of another group or run: dropped
	Forged        uint64 // datagrams whose sender did not match its member: dropped
	EventsDropped uint64 // events not read from Events in time
	// UpdatesDropped counts updates not delivered to a subscription whose
	// reader fell behind (Subscribe), one for each such subscription.
	UpdatesDropped uint64
	Entries        uint64 // resources granted to this node
	Releases       uint64 // releases of this node the group recorded
	ServerTurns    uint64 // times the server role came to this node
	ViewChanges    uint64 // members joined, left or removed, as this node saw it
	Rejoins        uint64 // times this node was removed and rejoined
	OtherInstance  uint64 // datagrams from a separately founded run of this group: dropped
	// With a group key: datagrams dropped because they were not sealed,
	// sealed with a key this node lacks, did not authenticate, or had been
	// taken before; without one, sealed datagrams (NeedsKey).
	Unsealed, UnknownKey, BadMAC, Replayed, NeedsKey uint64
	// RateLimited counts datagrams dropped because their source sent more
	// than Config.RateLimit.
	RateLimited uint64
	// Filtered counts the multicast datagrams addressed to other members
	// (a member's request or release, which only the server, its backup
	// and the next holder need) that the transport dropped before this
	// node read them (AddressFilter): no loss, work saved.
	Filtered uint64
	Machine  MachineStats
	// Drops counts every datagram or message dropped, by reason (the Drop
	// constants), the transport's included; Status fills it in.
	Drops map[string]uint64
	// SentBytesBy and ReceivedBytesBy count the bytes of the datagrams
	// Sent and ReceivedBy count, by class, as they went out and came in
	// (sealed, with a group key).
	SentBytesBy, ReceivedBytesBy map[Class]uint64
}

// classCounts counts datagrams and their bytes by class, indexed by
// wire.Class.Index.
type classCounts struct{ n, bytes [wire.NumClasses]uint64 }

func (c *classCounts) add(class Class, size int) {
	if i := class.Index(); i >= 0 {
		c.n[i]++
		c.bytes[i] += uint64(size)
	}
}

// maps returns the counts by class, and the bytes, leaving out the classes
// never counted.
func (c *classCounts) maps() (n, bytes map[Class]uint64) {
	n, bytes = map[Class]uint64{}, map[Class]uint64{}
	for i, class := range wire.Classes {
		if c.n[i] != 0 {
			n[class], bytes[class] = c.n[i], c.bytes[i]
		}
	}
	return n, bytes
}

// Reasons for a drop, the keys of Stats.Drops.
const (
	DropOversized     = "oversized"      // larger than MaxDatagram
	DropStray         = "stray"          // multicast for another group address or interface
	DropOverflow      = "overflow"       // the node fell behind its socket
	DropMalformed     = "malformed"      // did not decode
	DropForeignGroup  = "foreign-group"  // another group's
	DropOtherInstance = "other-instance" // a separately founded run of this group
	DropForged        = "forged"         // a member's ID from another address or incarnation, or beyond every bound
	DropStale         = "stale"          // of an epoch this node has left
	DropNotMember     = "not-member"     // a request, decision or state request from a non-member
	DropNotServer     = "not-server"     // a decision from a member that neither made it nor applied it
	DropUnasked       = "unasked-state"  // a state transfer this node did not ask for, or from a non-member
	DropBadState      = "bad-state"      // a state transfer that did not decode or match its digest
	DropDuplicate     = "duplicate"      // a decision already applied
	DropTooMany       = "too-many-locks" // a request this node, as server, refused for want of room (see ErrTooMany), or its retry
	DropUnsealed      = "unsealed"       // not sealed, and this group has a key
	DropUnknownKey    = "unknown-key"    // sealed with a key this node does not hold
	DropBadMAC        = "bad-mac"        // does not authenticate under its key
	DropReplay        = "replay"         // sealed, and taken before
	DropNeedsKey      = "needs-key"      // sealed, of this group, and this node has no key
	DropRateLimited   = "rate-limited"   // its source sent more than Config.RateLimit
)

// DefaultRateLimit is Config.RateLimit's default: datagrams a second from
// one source address. A server deciding at full speed sends fewer than a
// third of that (mcnode bench), a flooding host on a LAN far more.
const DefaultRateLimit = 20000

// drops gathers every drop counter by reason, zero counts left out.
func (g *Group) drops() map[string]uint64 {
	m := g.node.Stats()
	all := map[string]uint64{
		DropMalformed: g.stats.Malformed, DropForeignGroup: g.stats.Foreign, DropOtherInstance: g.stats.OtherInstance,
		DropForged: m.Forged, DropStale: m.Stale, DropNotMember: m.NotMember, DropNotServer: m.NotServer,
		DropUnasked: m.Unasked, DropBadState: m.BadSnapshots, DropDuplicate: m.Duplicates, DropTooMany: m.TooMany,
		DropUnsealed: g.stats.Unsealed, DropUnknownKey: g.stats.UnknownKey, DropBadMAC: g.stats.BadMAC,
		DropReplay: g.stats.Replayed, DropNeedsKey: g.stats.NeedsKey, DropRateLimited: g.stats.RateLimited,
	}
	if dc, ok := g.tr.(DropCounter); ok {
		for k, v := range dc.Drops() {
			all[k] += v
		}
	}
	maps.DeleteFunc(all, func(_ string, v uint64) bool { return v == 0 })
	return all
}

// Join joins the group cfg describes, founding it if nobody answers within
// cfg.JoinTimeout and cfg.Bootstrap is set, and returns once this node is a
// member (admitted, given the state, greeted by every voter).
func Join(ctx context.Context, cfg Config) (*Group, error) {
	if err := cfg.Validate(); err != nil {
		if cfg.Transport != nil {
			cfg.Transport.Close() // Join owns it, whatever becomes of the join
		}
		return nil, err
	}
	tr := cfg.Transport
	if tr == nil {
		var err error
		if tr, err = cfg.transport(); err != nil {
			return nil, err
		}
	}
	codec, err := wire.NewCodec(limits(cfg))
	if err != nil {
		tr.Close()
		return nil, err
	}
	g := &Group{
		cfg:     cfg,
		log:     cfg.Logger.With().Str("group", cfg.Name).Logger(),
		tr:      tr,
		codec:   codec,
		clock:   cfg.Clock,
		id:      wire.GroupID(cfg.Name),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		events:  make(chan Event, 1024),
		joinErr: make(chan error, 1),
		locks:   map[string]*lockState{},
	}
	if g.clock == nil {
		g.clock = BootClock{}
	}
	if u, ok := tr.(*UDP); ok {
		if granted, asked := u.ReceiveBuffer(); granted < asked {
			g.log.Warn().Int("granted", granted).Int("asked", asked).
				Msg("the kernel gave the sockets a smaller receive buffer than asked: a burst this node is too busy to read is dropped, and joining a group that holds many thousands of locks may fail; raise net.core.rmem_max, or run with CAP_NET_ADMIN")
		}
	}
	switch {
	case cfg.RateLimit == 0:
		g.limiter = newLimiter(DefaultRateLimit)
	case cfg.RateLimit > 0:
		g.limiter = newLimiter(cfg.RateLimit)
	}
	if len(cfg.Keys) > 0 {
		if g.ring, err = seal.NewRing(cfg.Keys[0], cfg.Keys[1:]...); err != nil {
			tr.Close()
			return nil, fmt.Errorf("%w: %v", ErrConfig, err)
		}
	}
	if err := g.newNode(cfg.Bootstrap); err != nil {
		tr.Close()
		return nil, err
	}
	if cfg.TimestampFile != "" {
		g.toSave, g.saved = make(chan uint64, 1), make(chan struct{})
		go g.saveTimestamps()
	}
	g.run()
	if cfg.Joining != nil {
		cfg.Joining(g.Status)
	}
	var noGroup <-chan time.Time
	if cfg.NoGroupAfter > 0 && !cfg.Bootstrap {
		t := g.clock.NewTicker(cfg.NoGroupAfter)
		defer t.Stop()
		noGroup = t.C()
	}
	for {
		select {
		case err := <-g.joinErr:
			if err != nil {
				g.Close()
				return nil, err
			}
			return g, nil
		case <-noGroup:
			heard, unreadable := true, false
			var st Stats
			g.locked(func() { heard, unreadable, st = g.node.HeardGroup(), g.unreadable, g.stats })
			switch {
			case !heard && unreadable:
				g.Close()
				return nil, fmt.Errorf("group: joining %q: %w: none it could read within %v (%d sealed with an unknown key, %d sealed while it has no key, %d in clear while it has one)",
					cfg.Name, ErrCannotRead, cfg.NoGroupAfter, st.UnknownKey, st.NeedsKey, st.Unsealed)
			case !heard:
				g.Close()
				return nil, fmt.Errorf("group: joining %q: %w within %v", cfg.Name, ErrNoGroup, cfg.NoGroupAfter)
			}
			noGroup = nil
		case <-ctx.Done():
			heard, unreadable := true, false
			g.locked(func() { heard, unreadable = g.node.HeardGroup(), g.unreadable })
			g.Close()
			if !heard && unreadable {
				return nil, fmt.Errorf("group: joining %q: %w, and %w: none it could read", cfg.Name, ctx.Err(), ErrCannotRead)
			}
			if !heard {
				// Said as such: a caller's deadline shorter than
				// NoGroupAfter is no reason to report a group that
				// answered but was slow to admit (mcnode lock's exit
				// status depends on it).
				return nil, fmt.Errorf("group: joining %q: %w, and %w", cfg.Name, ctx.Err(), ErrNoGroup)
			}
			return nil, fmt.Errorf("group: joining %q: %w", cfg.Name, ctx.Err())
		}
	}
}

// maxResources is how many locks a group may have in use at once, and
// maxSnapshot how large a state transfer may be: the wire's defaults,
// lowered only by tests that fill the table.
var (
	maxResources = wire.DefaultLimits().MaxResources
	maxSnapshot  = wire.DefaultLimits().MaxSnapshot
)

// limits are the codec's: with a key, a datagram's messages leave room
// for what sealing adds.
func limits(cfg Config) wire.Limits {
	l := wire.DefaultLimits()
	l.MaxDatagram = cfg.MaxDatagram
	l.MaxResources, l.MaxSnapshot = maxResources, maxSnapshot
	if len(cfg.Keys) > 0 {
		l.MaxDatagram -= seal.Overhead
	}
	return l
}

// newNode starts a new incarnation of the state machine: at Join, and after
// the group removed this node. Only the first may found a group: a node
// that has been a member and lost it (removed while cut off, say) rejoins
// the group it was in, which may still run elsewhere; founding another
// would give two groups granting the same locks.
func (g *Group) newNode(mayFound bool) error {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Errorf("group: incarnation ID: %w", err)
	}
	cfg := g.cfg
	cfg.Bootstrap = cfg.Bootstrap && mayFound
	inc := arbiter.FounderInc(binary.LittleEndian.Uint64(b[:])|1, cfg.Bootstrap)
	mc, err := cfg.machine(inc, g.tr.LocalAddr(), g.firstT())
	if err != nil {
		return err
	}
	n, err := arbiter.New(mc)
	if err != nil {
		return err
	}
	// A new machine starts at tick 0: its ticks, and the lease deadlines
	// reported from them, count from now.
	g.node, g.start, g.ticked = n, g.clock.Now(), 0
	g.log.Debug().Str("addr", g.tr.LocalAddr()).Uint64("incarnation", inc).Msg("asking to join")
	return nil
}

// firstT is where a group this node founds starts its timestamp: at the wall
// clock in microseconds, so that fencing tokens keep increasing across
// groups founded one after another under this name (a group's T usually
// advances slower), and above the highest timestamp this node saw before,
// if it keeps a TimestampFile.
func (g *Group) firstT() uint64 {
	now := uint64(time.Now().UnixMicro())
	if g.cfg.TimestampFile == "" {
		return now
	}
	seen, err := fence.Highest(g.cfg.TimestampFile)
	if err != nil {
		g.log.Error().Err(err).Msg("cannot read the highest group timestamp seen; founding from the wall clock alone")
		return now
	}
	if seen == 0 {
		return now
	}
	floor := seen + arbiter.TakeoverGap
	if now < floor {
		g.aboveSeen = seen
	}
	return max(now, floor)
}

// persistT records the highest timestamp this node has seen in its
// TimestampFile: at most once a second, unless now.
func (g *Group) persistT(now bool) {
	if g.cfg.TimestampFile == "" || !g.node.HasState() {
		return
	}
	t := g.node.T()
	if t <= g.savedT || (!now && g.clock.Now().Sub(g.savedAt) < time.Second) {
		return
	}
	select {
	case g.toSave <- t:
	default: // the writer is busy: replace what waits with the newer one
		select {
		case <-g.toSave:
		default:
		}
		g.toSave <- t
	}
	g.savedT, g.savedAt = t, g.clock.Now()
}

// saveTimestamps writes the timestamps persistT hands over, until the node
// stops and closes toSave.
func (g *Group) saveTimestamps() {
	defer close(g.saved)
	for t := range g.toSave {
		if err := fence.Check(g.cfg.TimestampFile, t); err != nil && !errors.Is(err, fence.ErrStale) {
			g.log.Warn().Err(err).Msg("cannot record the group timestamp")
		}
	}
}

// run starts the node: the ticker, and the delivery of what arrives.
func (g *Group) run() {
	g.locked(func() {}) // what the new machine has to send at once
	g.workers.Add(2)
	go g.tick()
	go g.pump()
	if d, ok := g.tr.(DirectTransport); ok {
		d.SetHandler(g.deliver)
	}
}

// tick gives the machine its time until the node stops.
func (g *Group) tick() {
	defer g.workers.Done()
	ticker := g.clock.NewTicker(g.cfg.Tick)
	defer ticker.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-ticker.C():
			g.locked(func() {
				g.persistT(false)
				g.maybeRejoin()
			})
		}
	}
}

// pump delivers what arrives through the transport's Packets channel: all
// of a transport without a DirectTransport handler, and what a direct one
// read before it had the handler.
func (g *Group) pump() {
	defer g.workers.Done()
	packets := g.tr.Packets()
	var batch []Packet
	for {
		select {
		case <-g.stop:
			return
		case p, ok := <-packets:
			if !ok {
				select {
				case <-g.stop:
					return // closed by Close
				default:
				}
				g.log.Error().Msg("transport closed under the node")
				g.halt()
				return
			}
			// Take what else has arrived, so that one round of sending
			// answers many datagrams.
			batch = append(batch[:0], p)
		drain:
			for len(batch) < 64 {
				select {
				case p, ok := <-packets:
					if !ok {
						break drain
					}
					batch = append(batch, p)
				default:
					break drain
				}
			}
			g.deliver(batch)
			clear(batch) // let the datagrams go
		}
	}
}

// deliver steps a batch of received datagrams, then sends what they caused
// in one round.
func (g *Group) deliver(batch []Packet) {
	g.locked(func() {
		for _, p := range batch {
			g.receive(p)
		}
	})
}

// locked runs f with the machine: time catches up first, and what f caused
// is sent after. It reports false, and runs nothing, once the node has
// stopped.
func (g *Group) locked(f func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return false
	}
	g.catchUp()
	f()
	g.flush()
	return true
}

// catchUp gives the machine the ticks elapsed since it last had time. The
// machine's time is the number of ticks since start, taken from the
// monotonic clock: a ticker drops ticks when the process is busy or paused,
// and a lease counted in dropped ticks would run slow (the unsafe way). It
// goes in one step: after a stall the machine must see the time it is, not
// relive the ticks it missed (see arbiter.Node.TickBy).
func (g *Group) catchUp() {
	if due := int64(g.clock.Now().Sub(g.start) / g.cfg.Tick); due > g.ticked {
		g.node.TickBy(uint64(due - g.ticked))
		g.ticked = due
	}
}

// halt stops the node for good: nothing steps the machine after it. The
// last timestamp is on disk, every waiting call has failed and every lease
// has ended when it returns.
func (g *Group) halt() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return
	}
	g.stopped = true
	close(g.stop)
	g.persistT(true)
	if g.toSave != nil {
		close(g.toSave)
		<-g.saved
	}
	g.closeStreams()
	g.releaseAllLocal(ErrNodeClosed)
	close(g.done)
}

// receive decodes one datagram and steps its messages.
func (g *Group) receive(p Packet) {
	size := len(p.Data) // as it came: open decrypts p.Data in place
	g.stats.Received++
	g.stats.ReceivedBytes += uint64(size)
	if p.Multicast && p.Source == g.tr.LocalAddr() {
		// This node's own multicast, looped back to it for the other nodes
		// on this host: the machine would ignore it, after a decode (and,
		// keyed, a decryption) that is a good part of a reception's cost.
		// Another host sending from this address is no member either.
		return
	}
	if g.limiter != nil && !g.limiter.allow(p.Source, arrival(p)) {
		g.stats.RateLimited++
		if g.stats.RateLimited&(g.stats.RateLimited-1) == 0 { // 1, 2, 4, ...: a flood is news, each datagram of it is not
			g.log.Warn().Str("from", p.Source).Uint64("dropped", g.stats.RateLimited).Msg("a source sends faster than the rate limit: dropping what exceeds it")
		}
		return
	}
	if g.ring != nil {
		if !g.open(&p) {
			return
		}
	}
	h, err := wire.DecodeHeader(p.Data)
	if errors.Is(err, wire.ErrSealed) {
		if grp, _ := wire.PeekGroup(p.Data); grp != g.id {
			g.stats.Foreign++
			return
		}
		g.stats.NeedsKey++
		g.heardUnreadable(&p)
		if !g.warnedKey {
			g.warnedKey = true
			g.log.Error().Str("from", p.Source).Msg("this group's datagrams arrive sealed with a group key, and this node has none: give it the group's key file (--keyfile)")
		}
		return
	}
	if err == nil && h.Group != g.id {
		g.stats.Foreign++
		return
	}
	if inst := g.node.Instance(); err == nil && inst != 0 && h.Instance != 0 && h.Instance != inst {
		g.otherInstance(h.Instance, p.Source)
		return
	}
	pkt, err := g.codec.Decode(p.Data)
	if err != nil {
		g.stats.Malformed++
		g.log.Debug().Err(err).Str("from", p.Source).Msg("dropped a malformed datagram")
		return
	}
	g.receivedBy.add(wire.Classify(&pkt, p.Multicast), size)
	for _, m := range pkt.Messages {
		switch err := g.node.Step(p.Source, pkt.Header, m); {
		case errors.Is(err, arbiter.ErrForeignGroup):
			g.stats.Foreign++
			return
		case errors.Is(err, arbiter.ErrForged):
			g.stats.Forged++
			return
		}
	}
}

// arrival is when the transport read a datagram (the rate limit's clock:
// read once per batch by the reader, not again per datagram here).
func arrival(p Packet) time.Time {
	if p.Received.IsZero() {
		return time.Now() // a transport that does not say
	}
	return p.Received
}

// open authenticates and decrypts a datagram with the group key, in place,
// and reports whether it may go on; what may not is counted by reason.
func (g *Group) open(p *Packet) bool {
	grp, named := wire.PeekGroup(p.Data) // named: a header of this wire version
	switch {
	case !named:
		g.stats.Malformed++ // no datagram of this version: noise, or an old node's
		return false
	case grp != g.id:
		g.stats.Foreign++ // no decryption spent on another group's datagrams
		return false
	}
	to := seal.Multicast
	if !p.Multicast {
		to = g.tr.LocalAddr()
	}
	plain, err := g.ring.Open(p.Data, to)
	switch {
	case err == nil:
		p.Data = plain
		return true
	case errors.Is(err, seal.ErrUnsealed):
		g.stats.Unsealed++
		g.heardUnreadable(p) // a group without a key, or a newcomer without one
	case errors.Is(err, seal.ErrUnknownKey):
		g.stats.UnknownKey++ // this group's: others returned above
		g.warnUnknownKey(p)
		g.heardUnreadable(p)
	case errors.Is(err, seal.ErrReplay):
		g.stats.Replayed++
	case errors.Is(err, seal.ErrBadMAC):
		g.stats.BadMAC++
	default:
		g.stats.Malformed++
	}
	return false
}

// heardUnreadable tells a joining node of a datagram of its group that it
// cannot read: from a running group (its header names the run), which is
// there, and a node that founded one of its own would grant the same locks;
// or from another newcomer, of which one founds (arbiter.Node.HeardUnreadable).
// A member has nothing to learn from it.
func (g *Group) heardUnreadable(p *Packet) {
	if g.node.HasState() {
		return
	}
	h, ok := wire.PeekHeader(p.Data)
	if !ok {
		return
	}
	if h.Instance != 0 {
		g.unreadable = true
	}
	g.node.HeardUnreadable(h)
}

// unknownKeyWarnEvery spaces the log's warnings of datagrams sealed with
// keys this node lacks: a forger can send them as fast as it likes.
const unknownKeyWarnEvery = time.Minute

// warnUnknownKey says, at most once every unknownKeyWarnEvery, that a
// datagram of this group arrived sealed with a key this node does not hold:
// most often the group rotated its key while this node was away, or its key
// file is not the group's (a daemon restarted from a file a rotation could
// not rewrite); else someone forges them. Without it a node in that state
// only waits for a group it cannot hear.
func (g *Group) warnUnknownKey(p *Packet) {
	if now := time.Now(); g.unknownKeyWarned.IsZero() || now.Sub(g.unknownKeyWarned) >= unknownKeyWarnEvery {
		g.unknownKeyWarned = now
		g.log.Warn().Str("from", p.Source).Str("key", seal.FormatID(seal.KeyIDOf(p.Data))).Uint64("so_far", g.stats.UnknownKey).
			Msg("datagrams of this group arrive sealed with a key this node does not hold: if the group rotated its key, give this node the group's key file as it is now (--keyfile); if not, someone forges them")
	}
}

// flush sends what the machine produced and handles its events, until it
// has nothing more (handling an event can produce more).
func (g *Group) flush() {
	for round := 0; round < 16 && g.node.HasReady(); round++ {
		rd := g.node.Ready()
		g.node.Advance()
		g.send(rd)
		for _, e := range rd.Events {
			g.handle(e)
		}
	}
	g.leaseEnd.Store(g.start.Add(time.Duration(g.node.LeaseExpiry()) * g.cfg.Tick).UnixNano())
	if f, ok := g.tr.(AddressFilter); ok {
		if id := g.node.ID(); id != g.filterFor {
			g.filterFor = id
			switch err := f.FilterFor(id); {
			case errors.Is(err, sockfilter.ErrUnavailable):
				g.log.Info().Err(err).Msg("no address filter (it needs CAP_BPF): this node reads the other members' requests and releases too, which costs it CPU time, nothing else")
			case err != nil:
				g.log.Warn().Err(err).Msg("no address filter: this node reads the other members' requests and releases too")
			}
		}
	}
}

// NoQuorumError is the error of a wait that ended (its context did, or a
// TryAcquire gave up) while this node reached no majority of the group:
// that is why it waited in vain. It matches both ErrNoQuorum and Err.
type NoQuorumError struct {
	Err    error  // the context's error, or TryAcquire's ErrNoAnswer
	Quorum Quorum // what this node reached when the wait ended
}

// Error says both.
func (e *NoQuorumError) Error() string { return e.Err.Error() + ": " + e.Quorum.String() }

// Unwrap returns Err and ErrNoQuorum.
func (e *NoQuorumError) Unwrap() []error { return []error{e.Err, ErrNoQuorum} }

// quorumErr wraps err with the reason a wait failed, if it is that this node
// reaches no majority.
func (g *Group) quorumErr(err error) error {
	st, serr := g.Status()
	if serr != nil || st.Quorum.Held || !st.Joined {
		return err
	}
	return &NoQuorumError{Err: err, Quorum: st.Quorum}
}

// send packs the messages into datagrams (consecutive messages to one
// address share them) and hands them to the transport in one batch.
func (g *Group) send(rd arbiter.Ready) {
	g.batch = g.batch[:0]
	msgs := rd.Messages
	for i := 0; i < len(msgs); {
		j := i + 1
		for j < len(msgs) && msgs[j].Addr == msgs[i].Addr && msgs[j].For == msgs[i].For {
			j++
		}
		g.pending = g.pending[:0]
		for _, o := range msgs[i:j] {
			g.pending = append(g.pending, o.Msg)
		}
		to := msgs[i].Addr
		h := rd.Header
		h.For = msgs[i].For
		err := g.codec.PackEach(h, g.pending, func(data []byte, p *wire.Packet) {
			if g.ring != nil {
				g.sealSeq++
				sealed, err := g.ring.Seal(nil, data, to, g.sealSeq)
				if err != nil {
					g.log.Error().Err(err).Msg("could not seal a datagram; it was not sent")
					return
				}
				data = sealed
			}
			g.batch = append(g.batch, Datagram{To: to, Data: data})
			g.sentBy.add(wire.Classify(p, to == ""), len(data))
			g.stats.SentBytes += uint64(len(data))
		})
		if err != nil {
			g.log.Error().Err(err).Msg("could not encode a message; it was not sent")
		}
		i = j
	}
	if len(g.batch) > 0 {
		if err := g.tr.Send(g.batch); err != nil {
			g.log.Debug().Err(err).Msg("send failed; the protocol will retry")
		}
	}
}

// handle acts on one event of the state machine.
func (g *Group) handle(e Event) {
	g.logEvent(e)
	switch e.Kind {
	case EventJoined:
		g.wasMember = true
		p := g.node.Params()
		if p.TickMicros != uint64(g.cfg.Tick/time.Microsecond) {
			err := fmt.Errorf("%w: the group ticks every %v, this node every %v; use the same --tick everywhere",
				ErrTickMismatch, time.Duration(p.TickMicros)*time.Microsecond, g.cfg.Tick)
			g.finishJoin(err)
			return
		}
		if floor := arbiter.LeaseFloor(g.cfg.ticks(g.cfg.TurnTimeout), g.cfg.ticks(g.cfg.PingTimeout)); p.LeaseTicks <= floor {
			err := fmt.Errorf("%w: the group's lease is %v, and this node's --turn-timeout and ping timeout need more than %v; use the group's timings",
				ErrLeaseTooShort, time.Duration(p.LeaseTicks)*g.cfg.Tick, time.Duration(floor)*g.cfg.Tick)
			g.finishJoin(err)
			return
		}
		if err := arbiter.CheckParams(p, g.cfg.ticks(g.cfg.HeartbeatInterval)); err != nil {
			g.finishJoin(fmt.Errorf("%w: the group's timings do not fit this node's heartbeat: %v", ErrConfig, err))
			return
		}
		g.recordMembership()
		g.finishJoin(nil)
		for _, name := range sortedNames(g.locks) {
			g.next(name)
		}
	case EventGroupFull:
		if !g.wasMember {
			g.finishJoin(ErrGroupFull)
			g.fail(ErrGroupFull)
			break
		}
		// On a rejoin, the group's view may still count members it has yet
		// to remove (this node's old incarnation among them), and without a
		// key the refusal may be forged: try again after a lease, when the
		// dead are gone, rather than give up for good.
		g.rejoinAt = g.clock.Now().Add(g.cfg.LeaseTimeout + g.cfg.LeaseMargin)
	case EventLeft:
		if e.Reason != arbiter.LeaveUnconfirmed {
			g.forgetMembership()
		} else {
			g.leftUnconfirmed = true // read by Leave once left is closed
		}
		if g.left != nil {
			close(g.left)
			g.left = nil
		}
	case EventRemoved:
		g.removed()
	case EventGranted:
		g.stats.Entries++
		g.granted(e)
	case EventReleased:
		g.stats.Releases++
	case EventServerChanged:
		if e.Node == g.node.ID() {
			g.stats.ServerTurns++
		}
	case EventMemberJoined, EventMemberLeft, EventMemberRemoved:
		g.stats.ViewChanges++
	case EventQueued:
		g.queued(e)
	case EventQuorumLost:
		g.quorumLost()
	case EventLost:
		g.lost(e)
	case EventRefused:
		g.refused(e)
	case EventUpdate:
		g.publishLocal(e)
	case EventEpoch:
		g.persistT(true) // a takeover jumps T: record it at once
	}
	select {
	case g.events <- e:
	default:
		g.stats.EventsDropped++
	}
}

// fail stops serving requests: waiting calls fail with err, and so will
// later ones.
func (g *Group) fail(err error) {
	g.broken = err
	g.releaseAllLocal(err)
}

// otherInstance warns, once per instance, about a separately founded run of
// this group on the network: its members' locks are not exclusive with ours.
func (g *Group) otherInstance(inst uint64, from string) {
	g.stats.OtherInstance++
	if g.others == nil {
		g.others = map[uint64]bool{}
	}
	if g.others[inst] || len(g.others) > 64 {
		return
	}
	g.others[inst] = true
	g.log.Error().Str("from", from).Uint64("instance", inst).Uint64("ours", g.node.Instance()).
		Msg("another run of this group is on the network: it was founded separately (multicast did not reach between them when it was), and its locks are NOT exclusive with ours; stop one side's nodes")
}

func (g *Group) finishJoin(err error) {
	select {
	case g.joinErr <- err:
	default:
	}
}

// maybeRejoin starts a new incarnation once the wait after a refused rejoin
// is over.
func (g *Group) maybeRejoin() {
	if g.rejoinAt.IsZero() || g.clock.Now().Before(g.rejoinAt) {
		return
	}
	g.rejoinAt = time.Time{}
	if err := g.newNode(false); err != nil {
		g.log.Error().Err(err).Msg("could not rejoin")
		g.fail(err)
	}
}

// removed handles this node being declared dead: every lease is lost, every
// waiting call fails, and a new incarnation joins in its place.
func (g *Group) removed() {
	if g.left != nil { // leaving anyway: being removed is as good as a leave
		close(g.left)
		g.left = nil
		return
	}
	g.stats.Rejoins++
	// What this node held is gone; what it waited for it asks for again,
	// as the new member, once it has joined (EventJoined).
	for _, name := range sortedNames(g.locks) {
		ls := g.locks[name]
		if ls.lease != nil {
			ls.lease.lose(ErrRemoved)
			ls.lease = nil
		}
		ls.req = 0
		if len(ls.waiters) == 0 {
			delete(g.locks, name)
		}
	}
	if err := g.newNode(false); err != nil {
		g.log.Error().Err(err).Msg("could not rejoin")
		g.fail(err)
	}
}

// FoundedWarning is what a node logs, as a warning, when it founds its
// group: on a LAN, where another host may run the group already, it may
// mean that multicast does not reach between them. A process that starts
// a group of its own nodes expects it, and may drop it.
const FoundedWarning = "no member answered: founded the group; if other hosts already run it, multicast does not reach between them"

func (g *Group) logEvent(e Event) {
	l := g.log
	switch e.Kind {
	case EventFounded:
		l.Warn().Uint64("node", uint64(e.Node)).Str("address", g.cfg.Address).Msg(FoundedWarning)
		if g.aboveSeen != 0 {
			l.Info().Uint64("T", e.T).Uint64("seen", g.aboveSeen).Str("file", g.cfg.TimestampFile).
				Msg("the group starts above the highest timestamp this node saw before, not at the wall clock, so fencing tokens keep increasing (takeovers move the timestamp ahead of the clock; so does a clock set back)")
		}
	case EventJoined:
		l.Info().Uint64("node", uint64(e.Node)).Int("members", len(g.node.Members())).Bool("observer", g.node.Observer()).Uint64("T", e.T).Msg("joined the group")
	case EventGroupFull:
		if g.wasMember {
			l.Error().Dur("retry_in", g.cfg.LeaseTimeout+g.cfg.LeaseMargin).Msg("the group is full: the rejoin was refused; trying again after a lease")
		} else {
			l.Error().Msg("the group is full: refused")
		}
	case EventStranded:
		l.Error().Msg(e.Reason)
	case EventPromoted:
		if e.Node == g.node.ID() {
			l.Info().Str("reason", e.Reason).Msg("this observer is a voter now: the group promoted it")
		} else {
			l.Info().Uint64("node", uint64(e.Node)).Str("reason", e.Reason).Msg("an observer was promoted to voter")
		}
	case EventDemoted:
		if e.Node == g.node.ID() {
			l.Info().Str("reason", e.Reason).Msg("this node is an observer again, as it asked: the group has voters to spare")
		} else {
			l.Info().Uint64("node", uint64(e.Node)).Str("reason", e.Reason).Msg("a voter that asked to be an observer is one again")
		}
	case EventLeft:
		if e.Reason == arbiter.LeaveUnconfirmed {
			l.Warn().Msg("left without the group confirming it (it may still count this node until it removes it)")
		} else {
			l.Info().Msg("left the group")
		}
	case EventRemoved:
		if g.left != nil {
			// Leaving anyway (see removed): no rejoin follows.
			l.Warn().Str("reason", e.Reason).Msg("the group removed this node as it was leaving: left")
			break
		}
		l.Warn().Str("reason", e.Reason).Msg("the group removed this node; rejoining as a new member")
	case EventMemberJoined:
		l.Info().Uint64("member", uint64(e.Node)).Uint64("T", e.T).Msg("member joined")
	case EventMemberLeft:
		l.Info().Uint64("member", uint64(e.Node)).Uint64("T", e.T).Msg("member left")
	case EventMemberRemoved:
		l.Warn().Uint64("member", uint64(e.Node)).Uint64("T", e.T).Msg("member removed: silent for longer than the lease; what it held is reclaimed")
	case EventServerChanged:
		l.Debug().Uint64("server", uint64(e.Node)).Uint64("T", e.T).Msg("server changed")
	case EventGranted:
		l.Debug().Str("resource", e.Resource).Uint64("token", e.Token).Msg("granted")
	case EventReleased:
		l.Debug().Str("resource", e.Resource).Uint64("token", e.Token).Msg("released")
	case EventLost:
		l.Warn().Str("resource", e.Resource).Uint64("token", e.Token).Str("reason", e.Reason).Msg("lost a resource")
	case EventRefused:
		l.Warn().Str("resource", e.Resource).Str("reason", e.Reason).Msg("request refused: the group's lock table is full")
	case EventEpoch:
		l.Info().Uint64("epoch", e.Epoch).Uint64("server", uint64(e.Node)).Uint64("T", e.T).Msg(e.Reason)
	case EventTakeoverStarted:
		l.Warn().Str("reason", e.Reason).Msg("takeover started: asking the members to make this node the server")
	case EventTakeoverWon:
		l.Warn().Uint64("epoch", e.Epoch).Msg(e.Reason)
	case EventTakeoverFailed:
		l.Warn().Str("reason", e.Reason).Msg("takeover given up")
	case EventStepDown:
		l.Warn().Str("reason", e.Reason).Msg("stopped serving")
	case EventQuorumLost:
		l.Error().Str("reason", e.Reason).Msg("no quorum: this side of the network grants no lock until a majority of the group is reachable")
	case EventQuorumRegained:
		l.Info().Str("reason", e.Reason).Msg("quorum regained")
	}
}

// do runs f with the machine (see locked).
func (g *Group) do(ctx context.Context, f func()) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !g.locked(f) {
		return ErrNodeClosed
	}
	return nil
}

// call runs f with the machine and returns its error.
func (g *Group) call(ctx context.Context, f func() error) error {
	var err error
	if derr := g.do(ctx, func() { err = f() }); derr != nil {
		return derr
	}
	return err
}

// ask runs f with the machine and returns its result.
func ask[T any](g *Group, f func() T) (T, error) {
	var v T
	err := g.do(context.Background(), func() { v = f() })
	return v, err
}

// ID returns this node's logical ID (it changes if the node is removed and
// rejoins).
func (g *Group) ID() NodeID {
	id, _ := ask(g, func() NodeID { return g.node.ID() })
	return id
}

// Addr returns this node's direct address.
func (g *Group) Addr() string { return g.tr.LocalAddr() }

// Members returns the current view, in logical-ID order.
func (g *Group) Members() []Member {
	m, _ := ask(g, func() []Member { return g.node.Members() }) // g.node read under the lock: a rejoin replaces it
	return m
}

// Done returns a channel that is closed when the node has stopped (Leave,
// Close, or a failure).
func (g *Group) Done() <-chan struct{} { return g.done }

// Events returns the stream of events. It is buffered; events not read in
// time are dropped (and counted in Stats), never block the node. It is
// closed when the node stops.
func (g *Group) Events() <-chan Event { return g.events }

// Status is a snapshot of the node and of the group as it sees it.
type Status struct {
	Group    string
	Self     NodeID
	Addr     string
	Joined   bool
	T        uint64
	Server   NodeID
	IsServer bool
	Instance uint64
	Members  []Member
	// HeardGroup reports whether a node that is still joining has heard
	// a member of the group (always true once it has joined); CannotRead
	// whether it received datagrams of a running group of its name that
	// it could not read (sealed with a key it lacks, or the other way).
	HeardGroup bool
	CannotRead bool
	// LeaseTimeout and LeaseMargin are the group's: after a member's lease
	// runs out, the group may hand what it held to another after the margin.
	LeaseTimeout time.Duration
	LeaseMargin  time.Duration
	// Tick is the node's clock tick, the unit of Members' Silence and
	// Unheard.
	Tick time.Duration
	// LeaseLeft is how long this node's own lease has left unless it is
	// renewed (at every turn, from its answers to the server's pings).
	LeaseLeft time.Duration
	// Failover. Epoch is the epoch of this node's log (each takeover begins
	// one); Backup the member that backs the server up and takes over
	// first if it dies; Authority whether this node is the server and a
	// majority answers it; SinceHeard how long ago the server (HeardFrom)
	// last pinged this node; Claiming the epoch this node asks to take over
	// (0: none); Frozen whether, having taken over without proof of every
	// grant in effect, it waits out the old epoch's leases.
	Epoch      uint64
	Backup     NodeID
	Authority  bool
	Quorum     Quorum
	SinceHeard time.Duration
	HeardFrom  NodeID
	Claiming   uint64
	Frozen     bool
	Resources  []ResourceInfo
	Held       []Held
	// Digest is a hash of this node's copy of the replicated state: equal
	// at equal T on every member that agrees with the group.
	Digest uint64
	Stats  Stats
}

// Status reports the node and the group.
func (g *Group) Status() (Status, error) {
	return ask(g, func() Status {
		srv, _ := g.node.Server()
		p := g.node.Params()
		st := g.stats
		st.Sent, st.SentBytesBy = g.sentBy.maps()
		st.ReceivedBy, st.ReceivedBytesBy = g.receivedBy.maps()
		st.Machine = g.node.Stats()
		st.Drops = g.drops()
		if f, ok := g.tr.(AddressFilter); ok {
			st.Filtered = f.Filtered()
		}
		since, from := g.node.SinceHeard()
		claim, _ := g.node.Claiming()
		var left time.Duration
		if exp, now := g.node.LeaseExpiry(), g.node.Now(); exp > now {
			left = time.Duration(exp-now) * g.cfg.Tick
		}
		return Status{
			Group: g.cfg.Name, Self: g.node.ID(), Addr: g.tr.LocalAddr(), Joined: g.node.Joined(), HeardGroup: g.node.HeardGroup(), CannotRead: g.unreadable,
			T: g.node.T(), Server: srv, IsServer: g.node.IsServer(), Instance: g.node.Instance(),
			Members: g.node.Members(), Resources: g.node.Resources(), Held: g.node.Held(), Stats: st,
			LeaseTimeout: time.Duration(p.LeaseTicks) * g.cfg.Tick, LeaseMargin: time.Duration(p.LeaseMarginTicks) * g.cfg.Tick,
			Tick: g.cfg.Tick, LeaseLeft: left, Epoch: g.node.Epoch(), Backup: g.node.Backup(), Authority: g.node.HasAuthority(),
			Quorum: g.node.Quorum(), SinceHeard: time.Duration(since) * g.cfg.Tick, HeardFrom: from,
			Claiming: claim, Frozen: g.node.Frozen(), Digest: g.node.Digest(),
		}
	})
}

// Leave tells the group this node is leaving (what it holds is released:
// its leases end, their Lost channels closed, with ErrNodeClosed) and
// closes it. It returns when the group has recorded the leave, or with an
// error wrapping ErrLeaveUnconfirmed when the group was not heard to or ctx
// ended; the node is closed either way.
func (g *Group) Leave(ctx context.Context) error {
	left := make(chan struct{})
	err := g.call(ctx, func() error {
		g.left = left
		g.releaseAllLocal(ErrNodeClosed)
		return g.node.Leave()
	})
	unconfirmed := func(why string) error {
		return fmt.Errorf("%w: %s; the group removes this node when its lease runs out", ErrLeaveUnconfirmed, why)
	}
	switch {
	case err != nil && ctx.Err() != nil:
		err = fmt.Errorf("%w: %w", ErrLeaveUnconfirmed, err) // not even asked
	case err == nil:
		select {
		case <-left:
		case <-ctx.Done():
			err = fmt.Errorf("%w: %w", ErrLeaveUnconfirmed, ctx.Err())
		case <-g.done:
			select {
			case <-left:
			default:
				err = unconfirmed("the node stopped first")
			}
		}
		if err == nil && g.leftUnconfirmed {
			err = unconfirmed("the group was not heard")
		}
	}
	return errors.Join(err, g.Close())
}

// Close stops the node at once, without telling the group: the others
// notice its silence and reclaim what it held after the lease. Leave is the
// polite way out.
func (g *Group) Close() error {
	var err error
	g.closer.Do(func() {
		g.halt()
		err = g.tr.Close()
		g.workers.Wait()
	})
	return err
}

// closeStreams closes the event and subscription channels when the node
// stops, so that readers ranging over them finish.
func (g *Group) closeStreams() {
	close(g.events)
	g.updates.CloseAll()
}

// releaseAllLocal fails every waiting call and ends every lease locally.
func (g *Group) releaseAllLocal(err error) {
	for _, name := range sortedNames(g.locks) {
		ls := g.locks[name]
		if ls.lease != nil {
			ls.lease.lose(err)
		}
		for _, w := range ls.waiters {
			select {
			case w.ch <- acquireResult{err: err}:
			default:
			}
		}
		delete(g.locks, name)
	}
}

func sortedNames[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// ErrNoKey is returned by the key operations of a group started without
// keys: a group is keyed or not from its first datagram on.
var ErrNoKey = errors.New("group: this node has no group key (start it with Config.Keys)")

// InstallKey adds a group key that this node accepts from now on; it still
// seals with its primary key. To rotate keys without losing a datagram:
// install the new key on every member, then UseKey on every member, then
// RemoveKey the old one on every member.
func (g *Group) InstallKey(k seal.Key) error {
	return g.changeRing(k.ID(), "group key installed", func(r *seal.Ring) error { return r.Install(k) })
}

// UseKey makes the installed key with this ID the one this node seals with.
func (g *Group) UseKey(id uint32) error {
	return g.changeRing(id, "sealing with another group key", func(r *seal.Ring) error { return r.Use(id) })
}

// RemoveKey drops an installed key that is not the primary: datagrams
// sealed with it are refused from now on.
func (g *Group) RemoveKey(id uint32) error {
	return g.changeRing(id, "group key removed", func(r *seal.Ring) error { return r.Remove(id) })
}

// changeRing makes one change to the key ring, under the machine's lock
// (the ring seals and opens under it), and logs it.
func (g *Group) changeRing(id uint32, done string, change func(*seal.Ring) error) error {
	return g.call(context.Background(), func() error {
		if g.ring == nil {
			return ErrNoKey
		}
		if err := change(g.ring); err != nil {
			return err
		}
		g.log.Info().Str("key", seal.FormatID(id)).Msg(done)
		return nil
	})
}

// Keys returns the IDs of the installed group keys, the primary first.
func (g *Group) Keys() ([]uint32, error) {
	keys, err := g.KeyRing()
	ids := make([]uint32, len(keys))
	for i, k := range keys {
		ids[i] = k.ID()
	}
	return ids, err
}

// KeyRing returns the installed group keys themselves, the primary first,
// for writing them to a key file; none without a key.
func (g *Group) KeyRing() ([]seal.Key, error) {
	return ask(g, func() []seal.Key {
		if g.ring == nil {
			return nil
		}
		return g.ring.Keys()
	})
}
