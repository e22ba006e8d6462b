package qnet

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/mcnode/mcnode/quorumfallback"
	"github.com/mcnode/mcnode/seal"
)

// Transport is what a quorum runtime needs from its links: reliable FIFO
// channels to the nodes 0..N-1. Mesh is the TCP one, MemEnd the in-memory
// one for tests.
type Transport interface {
	// Send queues f for node to without waiting for the network.
	Send(to int, f Frame) error
	// Inbound returns the frames received, in order per sender; it is
	// closed after Close.
	Inbound() <-chan Inbound
	// Close stops the transport; frames not yet sent are discarded.
	Close() error
}

var (
	_ Transport = (*Mesh)(nil)
	_ Transport = (*MemEnd)(nil)
)

// Inbound is a frame received from node From.
type Inbound struct {
	// From is the node that sent the frame; the mesh checked that
	// Frame.Msg.From says so too.
	From int
	// Frame is what it sent.
	Frame Frame
	// Inc is the incarnation of From that sent it (its hello's).
	Inc uint64
}

// Limits and defaults of the mesh.
const (
	// MaxHello is the longest Config.Hello, in bytes.
	MaxHello = 2048
	// DefaultDialRetry is the wait between dial attempts when
	// Config.DialRetry is zero.
	DefaultDialRetry = 100 * time.Millisecond
	// InboundBuffer is the capacity of the Inbound channel. When it is full
	// the readers stop reading, and TCP slows the senders down.
	InboundBuffer = 1024
)

const (
	// refusedSlowdown multiplies DialRetry after a peer refused our hello:
	// a setup mismatch needs an operator, not a busy loop.
	refusedSlowdown = 30
	// handshakeTimeout bounds a hello, both ways, so that a connection
	// that never says anything does not hold a goroutine forever.
	handshakeTimeout = 5 * time.Second
	// dialTimeout bounds a dial to a host that does not answer.
	dialTimeout = 5 * time.Second
	// readBuffer is the reader's buffer per accepted connection.
	readBuffer = 16 << 10
	// maxSpare is the largest write buffer a writer keeps for reuse; a
	// bigger one (a backlog for a peer that was down) is left to the GC.
	maxSpare = 1 << 20
)

// helloMagic opens every hello (quorum, version 5: failure(i), heartbeats,
// answers that name their request, Cao and Singhal's query and answer after
// a failure, and the sender's clock in every frame; a node of an earlier
// version would deadlock with one, drop the frames it does not know, or
// starve beside it).
var helloMagic = [4]byte{'m', 'c', 'q', '6'}

// Answers to a hello.
const (
	helloAccept      = 1
	helloWrongSetup  = 2 // another Config.Hello
	helloWrongSender = 3 // a node index out of range, or the acceptor's own
	helloRestarted   = 4 // the node restarted: another incarnation than before
	helloFailed      = 5 // with Heartbeat: this incarnation was declared failed
	helloWrongGroup  = 6 // another Config.HelloGroup: a node of another group
)

// goodbye is the one byte an acceptor sends after the hello's answer: on
// Close, so that the dialler can tell a peer that shut down from a broken
// connection.
const goodbye = 0xff

// Mesh errors.
var (
	// ErrConfig wraps every error of Listen's validation.
	ErrConfig = errors.New("qnet: bad config")
	// ErrNoPeer means Send was given a destination that is not another node.
	ErrNoPeer = errors.New("qnet: no such peer")
	// ErrClosed means the transport was closed.
	ErrClosed = errors.New("qnet: transport closed")
)

// Config configures a Mesh.
type Config struct {
	// Self is this node's index in Peers.
	Self int
	// Peers is every node's "host:port", the same list on every node.
	// Peers[Self] is where this node listens.
	Peers []string
	// Hello identifies the group and its setup, e.g.
	// `mcnode/"<group>"/maekawa/fpp/N=5/peers=<hash>/lease=1.5s/margin=300ms/detect=1s`
	// (node.Config.Hello). A node refuses connections from
	// nodes whose Hello differs in any byte, so it should name everything
	// the nodes must agree on.
	Hello string
	// HelloGroup, if set, is how every Hello of this group begins: a hello
	// that does not is another group's, refused as such, and the node that
	// said it does not count it as misconfigured (Misconfigured): a node
	// of another group that took a dead peer's port serves none of this
	// group's locks.
	HelloGroup string
	// Logger receives the mesh's log; the zero value logs nothing.
	Logger zerolog.Logger
	// DialRetry is the wait between dial attempts; zero means
	// DefaultDialRetry. After a peer refused our hello we wait 30 times
	// longer.
	DialRetry time.Duration
	// Keys, if any, are the group keys: every link is then TLS 1.3,
	// authenticated by the first key (see tls.go), and a peer is accepted
	// only if it authenticates with one of them. Without keys the links
	// are plain TCP.
	Keys []seal.Key
	// Heartbeat, if positive, turns on the links' liveness, for a runtime
	// that handles failures (package node): a heartbeat on every link this
	// often, echoed by the peer, so that Heard and Acked tell when each
	// peer was last heard, and last heard this node. A node that restarts
	// is then refused only until Forget, and an incarnation given to
	// Refuse for good (see liveness.go).
	Heartbeat time.Duration
	// Listener, if set, is used instead of listening on Peers[Self], and
	// the mesh closes it. Tests listen on 127.0.0.1:0 first to learn the
	// ports to put in Peers, which leaves no window for another process to
	// take them.
	Listener net.Listener
}

// validate checks cfg and fills in defaults.
// CanonicalAddr writes a peer's "host:port" one way: the host in lower case
// (an IP address as Go prints it), the port as a number. Two spellings of one
// address (Node1:7000 and node1:07000, two forms of an IPv6 address) give
// the same; names are not resolved. A string that is no host:port is
// returned as it is.
func CanonicalAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if p, err := strconv.ParseUint(port, 10, 16); err == nil {
		port = strconv.FormatUint(p, 10)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		host = ip.Unmap().String()
	}
	return net.JoinHostPort(strings.ToLower(host), port)
}

// CheckPeers checks a peer list as Listen does: every entry host:port with
// a host and a port in [1, 65535], no address twice. Its errors wrap
// ErrConfig.
func CheckPeers(peers []string) error {
	seen := make(map[string]int, len(peers))
	for i, addr := range peers {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("%w: Peers[%d] %q: %v", ErrConfig, i, addr, err)
		}
		p, err := strconv.ParseUint(port, 10, 16)
		if host == "" || err != nil || p == 0 {
			return fmt.Errorf("%w: Peers[%d] %q: want host:port with a host and a port in [1, 65535], which others can dial", ErrConfig, i, addr)
		}
		key := CanonicalAddr(addr)
		if j, dup := seen[key]; dup {
			return fmt.Errorf("%w: Peers[%d] %q and Peers[%d] %q are the same address", ErrConfig, j, peers[j], i, addr)
		}
		seen[key] = i
	}
	return nil
}

func (cfg *Config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
	}
	n := len(cfg.Peers)
	if n == 0 {
		return bad("no peers: Peers must list every node, this one included")
	}
	if n > math.MaxInt32 {
		return bad("%d peers: node ids are int32 on the wire", n)
	}
	if cfg.Self < 0 || cfg.Self >= n {
		return bad("Self %d not in [0, %d)", cfg.Self, n)
	}
	if err := CheckPeers(cfg.Peers); err != nil {
		return err
	}
	if cfg.Hello == "" {
		return bad("empty Hello: it must name the group and its setup")
	}
	if len(cfg.Hello) > MaxHello {
		return bad("Hello of %d bytes exceeds MaxHello %d", len(cfg.Hello), MaxHello)
	}
	if cfg.DialRetry < 0 {
		return bad("negative DialRetry %v", cfg.DialRetry)
	}
	if cfg.DialRetry == 0 {
		cfg.DialRetry = DefaultDialRetry
	}
	return nil
}

// Stats counts what a Mesh did. Bytes include the length prefixes.
type Stats struct {
	// SentFrames and SentBytes count frames written to a connection, per
	// kind.
	SentFrames, SentBytes map[quorumfallback.Kind]uint64
	// RecvFrames and RecvBytes count frames received and handed to
	// Inbound, per kind (the last ones may be lost on Close).
	RecvFrames, RecvBytes map[quorumfallback.Kind]uint64
	// Queued is the number of frames waiting to be written.
	Queued int
	// Lost counts frames in writes that failed when a connection broke.
	// Some of them may have arrived; the mesh cannot tell which.
	Lost uint64
	// Malformed counts frames DecodeFrame rejected, length prefixes over
	// MaxFrame (each closes its connection) and connections that did not
	// open with a qnet hello.
	Malformed uint64
	// BadSender counts frames whose From is not the node that sent them
	// or whose To is not this node.
	BadSender uint64
	// ForeignHello counts hellos this node refused: another Hello, or a
	// node index out of range or its own.
	ForeignHello uint64
	// RefusedByPeer counts this node's hellos that peers refused.
	RefusedByPeer uint64
	// Restarted counts hellos refused because the node had restarted (a
	// new incarnation) while this one kept running.
	Restarted uint64
	// Reconnects counts outgoing connections that broke and were redialled.
	Reconnects uint64
	// Unauthenticated counts connections, both ways, whose TLS handshake
	// failed: the peer has no group key, or another (only with Keys).
	Unauthenticated uint64
	// Crowded counts accepted connections closed in their hello (or TLS
	// handshake) to make room for a newer one: as many were as the mesh
	// allows at once, strangers opening connections and saying nothing.
	Crowded uint64
}

// Mesh links this node to every other node of a fixed list over TCP.
type Mesh struct {
	cfg Config
	// tls secures the links with the group keys (nil: plain TCP);
	// replaced whole by SetKeys.
	tls atomic.Pointer[tlsPair]
	// arrivals bounds the accepted connections in their hello.
	arrivals *arrivals
	n        int
	ln       net.Listener
	log      zerolog.Logger
	inbound  chan Inbound
	peers    []*peer // nil at Self

	closed    chan struct{}
	ctx       context.Context // done when closed: stops dials
	cancel    context.CancelFunc
	closeOnce sync.Once
	closeErr  error
	wg        sync.WaitGroup

	mu   sync.Mutex
	shut bool // Close began: track refuses connections
	// conns has every open connection, for Close, and how its peer
	// authenticated, for SetKeys.
	conns map[net.Conn]linkAuth
	up    []bool // outgoing connection to node i accepted
	nUp   int
	// everAll: every outgoing connection has been accepted at once, in
	// this incarnation (see AdmittedTo).
	everAll  bool
	admitted chan struct{} // closed when everAll first holds; never replaced
	changed  chan struct{} // closed and replaced when up changes
	incoming []*inConn     // the connection node i sends on, if any
	// incarnations has, by node, the incarnation of its first accepted
	// hello: a node that comes back with another lost its protocol state.
	incarnations []uint64
	// refusing: without heartbeats, node i restarted while this node ran
	// and is refused for good (sameIncarnation): its outgoing link may be
	// up, but nothing it sends is taken, so it counts as down.
	refusing    []bool
	incarnation uint64 // this process's

	sentFrames, sentBytes, recvFrames, recvBytes [256]atomic.Uint64
	// refusedRestart: a peer refused this node as a restarted one. Read
	// on every frame the runtime receives (Admission), so not under mu.
	refusedRestart atomic.Bool

	lost, malformed, badSender, foreignHello, refusedByPeer, reconnects, restarted, unauthenticated, crowded atomic.Uint64
	// misconfigured is closed when a peer first refuses this node's hello
	// for another setup or a node index it cannot have (Misconfigured);
	// misconfiguredWhy says which.
	misconfigured    chan struct{}
	misconfiguredOne sync.Once
	misconfiguredWhy atomic.Pointer[string]
	// news keeps the warnings about strangers and bad frames few.
	news news

	live liveness // with Config.Heartbeat
}

// peer is the queue of frames for one node and its writer's wake-up call.
type peer struct {
	id   int
	addr string
	wake chan struct{} // capacity 1: "the queue is not empty"
	// redial asks the writer to end its connection between two writes and
	// dial again (SetKeys: the link was made with a key removed since).
	redial atomic.Bool
	// inc is the incarnation of the node the writer writes to (0: none
	// yet); the writer's alone.
	inc uint64

	mu     sync.Mutex
	buf    []byte // encoded frames, back to back
	queued int
}

// inConn is an accepted connection; done is closed when its reader is.
type inConn struct {
	c    net.Conn
	done chan struct{}
	// carried: a frame was read on it. One that carried none is most
	// often a dialler's that waits before writing to this incarnation
	// (writeTo), which dials again and again; its ends are not worth a
	// line each.
	carried atomic.Bool
}

// Listen validates cfg, listens on Peers[Self] and starts connecting to
// every other node.
func Listen(cfg Config) (*Mesh, error) {
	if err := cfg.validate(); err != nil {
		if cfg.Listener != nil {
			cfg.Listener.Close()
		}
		return nil, err
	}
	ln := cfg.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.Peers[cfg.Self]); err != nil {
			return nil, fmt.Errorf("qnet: listening on %s: %w", cfg.Peers[cfg.Self], err)
		}
	}
	pair, err := tlsConfigs(cfg.Keys)
	if err != nil {
		ln.Close()
		return nil, err
	}
	n := len(cfg.Peers)
	m := &Mesh{
		cfg:      cfg,
		arrivals: newArrivals(cfg.Peers),
		n:        n,
		ln:       ln,
		log:      cfg.Logger.With().Int("self", cfg.Self).Logger(),
		inbound:  make(chan Inbound, InboundBuffer),
		peers:    make([]*peer, n),
		closed:   make(chan struct{}),
		conns:    map[net.Conn]linkAuth{},
		up:       make([]bool, n),
		admitted: make(chan struct{}),
		changed:  make(chan struct{}),
		incoming: make([]*inConn, n),

		misconfigured: make(chan struct{}),

		incarnations: make([]uint64, n),
		refusing:     make([]bool, n),
		incarnation:  rand.Uint64() | 1, // never 0, which means "none yet"
	}
	m.tls.Store(pair)
	m.live.init(n)
	m.ctx, m.cancel = context.WithCancel(context.Background())
	for i, addr := range cfg.Peers {
		if i == cfg.Self {
			continue
		}
		m.peers[i] = &peer{id: i, addr: addr, wake: make(chan struct{}, 1)}
	}
	m.wg.Add(2)
	go func() {
		defer m.wg.Done()
		m.arrivals.learnHosts(m.ctx, cfg.Peers)
	}()
	go m.accept()
	for _, p := range m.peers {
		if p != nil {
			m.wg.Add(1)
			go m.write(p)
		}
	}
	if cfg.Heartbeat > 0 {
		m.wg.Add(1)
		go m.heartbeats()
	}
	return m, nil
}

// Addr returns the listener's address.
func (m *Mesh) Addr() net.Addr { return m.ln.Addr() }

// Inbound returns the frames received, in order per sender. It is closed
// after Close.
func (m *Mesh) Inbound() <-chan Inbound { return m.inbound }

// checkSend is what Send checks on every transport: a destination that is
// another node, and a message from this node to that one (the receiver
// would drop any other).
func checkSend(self, n, to int, f Frame) error {
	if to < 0 || to >= n || to == self {
		return fmt.Errorf("%w: node %d (N=%d, self %d)", ErrNoPeer, to, n, self)
	}
	if f.Msg.From != self || f.Msg.To != to {
		return fmt.Errorf("%w: message %v sent by node %d to node %d", ErrInvalidFrame, f.Msg, self, to)
	}
	return nil
}

// Send queues f for node to and returns at once. Frames for one node are
// written in the order of the calls. f.Msg.From must be this node and
// f.Msg.To must be to. Frames still queued when the mesh closes are lost.
func (m *Mesh) Send(to int, f Frame) error {
	if err := checkSend(m.cfg.Self, m.n, to, f); err != nil {
		return err
	}
	if m.isClosed() {
		return ErrClosed
	}
	p := m.peers[to]
	p.mu.Lock()
	buf, err := AppendFrame(p.buf, f)
	if err == nil {
		p.buf = buf
		p.queued++
	}
	p.mu.Unlock()
	if err != nil {
		return err
	}
	select {
	case p.wake <- struct{}{}:
	default: // the writer has been woken already
	}
	return nil
}

// ErrRestarted means a peer refused this node as a restarted one: it lost
// the state its peers rely on (see helloRestarted), and may take no lock.
var ErrRestarted = errors.New("qnet: a peer refuses this node: it restarted while that one kept running, and the protocols cannot take back a node that lost its state; restart every node of the group")

// WaitConnected waits until the links to every other node are up.
func (m *Mesh) WaitConnected(ctx context.Context) error {
	return m.waitFor(ctx, false, nil)
}

// WaitAdmittedTo waits until AdmittedTo(nodes) holds. It fails with
// ErrRestarted once a peer has refused this node as restarted.
func (m *Mesh) WaitAdmittedTo(ctx context.Context, nodes []int) error {
	return m.waitFor(ctx, true, nodes)
}

// Admission returns a channel closed once every other node has accepted
// this incarnation's links (see AdmittedTo), and whether a peer has
// refused this node as restarted since. Until then, and for good once
// refused, the runtime does not act on what it receives: a restarted node
// has lost the arbiter state its peers rely on, and must not grant.
func (m *Mesh) Admission() (admitted <-chan struct{}, refused bool) {
	return m.admitted, m.refusedRestart.Load()
}

// AdmittedTo reports whether this node may rely on its links to the given
// nodes: they are up, and, since a node's peers refuse a restarted node
// only when it dials them and only if they saw its earlier incarnation,
// every other node has accepted this incarnation's links at once before,
// and none has refused it as restarted. A node whose quorum holds only
// peers that restarted with it, or never saw it, would otherwise act on
// arbiter state it lost (a lock its earlier incarnation had granted).
func (m *Mesh) AdmittedTo(nodes []int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.everAll && !m.refusedRestart.Load() && m.upTo(nodes)
}

// waitFor waits until the links to the given nodes (every other node if
// none) are up and, with admission, this node has been admitted (see
// AdmittedTo); or the mesh closes, or ctx ends, or (with admission) a peer
// refuses this node as restarted.
func (m *Mesh) waitFor(ctx context.Context, admission bool, nodes []int) error {
	for {
		m.mu.Lock()
		up, everAll, refused, changed := m.upTo(nodes), m.everAll, m.refusedRestart.Load(), m.changed
		m.mu.Unlock()
		switch {
		case m.isClosed():
			return ErrClosed
		case admission && refused:
			return ErrRestarted
		case up && (everAll || !admission):
			return nil
		}
		select {
		case <-changed:
		case <-m.closed:
			return ErrClosed
		case <-ctx.Done():
			if up {
				return fmt.Errorf("qnet: not yet connected to every node once (nodes %v missing): %w", m.missing(nil), ctx.Err())
			}
			return fmt.Errorf("qnet: not connected to nodes %v: %w", m.missing(nodes), ctx.Err())
		}
	}
}

// upTo reports whether the links to the given nodes (every other node if
// none) are up; m.mu held.
func (m *Mesh) upTo(nodes []int) bool {
	if nodes == nil {
		return m.nUp == m.n-1 && !slices.Contains(m.refusing, true)
	}
	for _, i := range nodes {
		if i >= 0 && i < m.n && i != m.cfg.Self && (!m.up[i] || m.refusing[i]) {
			return false
		}
	}
	return true
}

// missing lists the nodes among the given ones (every other node if none)
// without an accepted outgoing connection.
func (m *Mesh) missing(nodes []int) []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ids []int
	for i, up := range m.up {
		if (!up || m.refusing[i]) && i != m.cfg.Self && (nodes == nil || slices.Contains(nodes, i)) {
			ids = append(ids, i)
		}
	}
	return ids
}

// Stats returns the mesh's counters.
func (m *Mesh) Stats() Stats {
	perKind := func(c *[256]atomic.Uint64) map[quorumfallback.Kind]uint64 {
		out := map[quorumfallback.Kind]uint64{}
		for k := range c {
			if v := c[k].Load(); v != 0 {
				out[quorumfallback.Kind(k)] = v
			}
		}
		return out
	}
	s := Stats{
		SentFrames: perKind(&m.sentFrames), SentBytes: perKind(&m.sentBytes),
		RecvFrames: perKind(&m.recvFrames), RecvBytes: perKind(&m.recvBytes),
		Lost: m.lost.Load(), Malformed: m.malformed.Load(), BadSender: m.badSender.Load(),
		ForeignHello: m.foreignHello.Load(), RefusedByPeer: m.refusedByPeer.Load(), Reconnects: m.reconnects.Load(),
		Restarted: m.restarted.Load(), Unauthenticated: m.unauthenticated.Load(), Crowded: m.crowded.Load(),
	}
	for _, p := range m.peers {
		if p != nil {
			p.mu.Lock()
			s.Queued += p.queued
			p.mu.Unlock()
		}
	}
	return s
}

// Close closes the listener and every connection, waits for the mesh's
// goroutines to end, then closes the Inbound channel. Frames still queued
// are discarded.
func (m *Mesh) Close() error {
	m.closeOnce.Do(func() {
		m.mu.Lock()
		m.shut = true
		conns := m.conns
		m.conns = nil
		incoming := append([]*inConn(nil), m.incoming...)
		m.mu.Unlock()
		for _, in := range incoming {
			if in != nil {
				// The acceptor writes nothing else after the hello, so the
				// send buffer is empty and this does not block; the
				// deadline is for a peer gone mad.
				_ = in.c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
				_, _ = in.c.Write([]byte{goodbye})
			}
		}
		close(m.closed)
		m.cancel()
		if err := m.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			m.closeErr = fmt.Errorf("qnet: closing the listener on %s: %w", m.ln.Addr(), err)
		}
		for c := range conns {
			c.Close()
		}
		m.wg.Wait()
		close(m.inbound)
	})
	return m.closeErr
}

func (m *Mesh) isClosed() bool {
	select {
	case <-m.closed:
		return true
	default:
		return false
	}
}

// track registers a connection for Close to close. It returns false, and
// closes c, if Close has begun.
func (m *Mesh) track(c net.Conn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.shut {
		c.Close()
		return false
	}
	m.conns[c] = linkAuth{}
	return true
}

// linkAuth is how a connection's peer authenticated.
type linkAuth struct {
	key      ed25519.PublicKey // nil: not yet, or no keys
	incoming bool              // accepted, not dialled
	peer     int               // dialled: the node it goes to
}

// authenticated records the key c's peer authenticated with.
func (m *Mesh) authenticated(c net.Conn, tc *tls.Conn, incoming bool, peer int) {
	certs := tc.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return
	}
	pub, _ := certs[0].PublicKey.(ed25519.PublicKey)
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.conns[c]; ok {
		m.conns[c] = linkAuth{key: pub, incoming: incoming, peer: peer}
	}
}

// drop closes a tracked connection.
func (m *Mesh) drop(c net.Conn) {
	m.mu.Lock()
	delete(m.conns, c) // a no-op on the nil map once Close took it
	m.mu.Unlock()
	c.Close()
}

// setUp records whether the outgoing connection to node id is up.
func (m *Mesh) setUp(id int, up bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.up[id] == up {
		return
	}
	m.up[id] = up
	if up {
		m.nUp++
		if !m.everAll && m.nUp == m.n-1 {
			m.everAll = true
			close(m.admitted)
		}
	} else {
		m.nUp--
	}
	close(m.changed)
	m.changed = make(chan struct{})
}

// sleep waits d, or until Close; it reports whether the mesh is open.
func (m *Mesh) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-m.closed:
		return false
	}
}

// newsEvent returns the log event for news of kind k (see news): a
// warning, with the number of that kind left unlogged since the last, when
// news says it is due, and debug otherwise, so that strangers and a
// misbehaving peer cannot flood the log.
func (m *Mesh) newsEvent(k int) *zerolog.Event {
	if skipped, ok := m.news.allow(k); ok {
		return m.log.Warn().Uint64("unlogged", skipped)
	}
	return m.log.Debug()
}

// waitingError: this node does not write to the incarnation of a peer
// that accepted its hello, yet (writeTo); it dials again at the usual pace.
type waitingError struct {
	peer   int
	addr   string
	reason string
}

func (e *waitingError) Error() string {
	return fmt.Sprintf("qnet: not writing to peer %d at %s yet: %s", e.peer, e.addr, e.reason)
}

// refusedError is a peer's refusal of our hello.
type refusedError struct {
	peer   int
	addr   string
	reason string
	// passing: the refusal ends by itself; retry at the usual pace.
	passing bool
	// otherGroup: a node of another group answered at the peer's address;
	// retried at the usual pace too, for the peer may come back there.
	otherGroup bool
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("qnet: peer %d at %s refused: %s", e.peer, e.addr, e.reason)
}

// write is the writer of node p.id: it dials until connected, then writes
// p's queue until the connection breaks or the mesh closes.
func (m *Mesh) write(p *peer) {
	defer m.wg.Done()
	var spare []byte
	failures := 0 // consecutive failed dials, to log only the first loudly
	lastWait := ""
	for {
		c, err := m.dial(p)
		if err != nil {
			if m.isClosed() {
				return
			}
			failures++
			wait := m.cfg.DialRetry
			var refused *refusedError
			var waiting *waitingError
			switch {
			case errors.As(err, &waiting):
				// Logged again when the reason changes: the last one
				// is what keeps the link down.
				if waiting.reason != lastWait {
					lastWait = waiting.reason
					m.log.Info().Err(err).Dur("retry", wait).Msg("qnet: waiting before writing to a peer's incarnation; dialling again")
				}
			case errors.As(err, &refused) && refused.otherGroup:
				m.refusedByPeer.Add(1)
				if failures == 1 {
					m.log.Warn().Err(err).Dur("retry", wait).Msg("qnet: a node of another group answers at a peer's address; dialling again")
				}
			case errors.As(err, &refused) && refused.passing:
				if failures == 1 {
					m.log.Info().Err(err).Dur("retry", wait).Msg("qnet: a peer does not take this incarnation yet; retrying")
				}
			case errors.As(err, &refused):
				m.refusedByPeer.Add(1)
				wait *= refusedSlowdown
				m.log.Error().Err(err).Str("hello", m.cfg.Hello).Dur("retry", wait).Msg("qnet: a peer refused this node's hello; check that every node has the same peer list and setup")
			case failures == 1:
				m.log.Info().Err(err).Int("peer", p.id).Str("addr", p.addr).Dur("retry", wait).Msg("qnet: peer not reachable yet; retrying")
			default:
				m.log.Debug().Err(err).Int("peer", p.id).Str("addr", p.addr).Msg("qnet: dial failed")
			}
			if !m.sleep(wait) {
				return
			}
			continue
		}
		m.log.Debug().Int("peer", p.id).Str("addr", p.addr).Int("failed_dials", failures).Msg("qnet: connected")
		failures, lastWait = 0, ""
		// The peer never writes on this connection; a reader sees at once
		// when it closes, so that the writer redials before the next frame
		// rather than losing it to a dead connection.
		dead := make(chan struct{})
		var bye atomic.Bool
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			defer close(dead)
			var b [1]byte
			n, _ := c.Read(b[:])
			bye.Store(n == 1 && b[0] == goodbye)
		}()
		m.setUp(p.id, true)
		err = m.pump(p, c, dead, &spare)
		m.setUp(p.id, false)
		m.drop(c)
		<-dead // closing c ends the read, and tells whether a goodbye came
		if m.isClosed() {
			return
		}
		if !errors.Is(err, errForgotten) { // not a break: the writer ended it
			m.reconnects.Add(1)
		}
		if !errors.Is(err, errRedial) && !errors.Is(err, errForgotten) && m.cfg.Heartbeat > 0 {
			// What was written may be lost: the runtime puts that
			// incarnation down rather than wait on what never arrives.
			m.live.broken[p.id].Store(p.inc)
		}
		switch {
		case errors.Is(err, errRedial):
			m.log.Info().Int("peer", p.id).Str("addr", p.addr).Msg("qnet: link made with a removed key; redialling")
		case errors.Is(err, errForgotten):
			m.log.Info().Int("peer", p.id).Str("addr", p.addr).Msg("qnet: the incarnation this link went to was put down; dialling its next")
		case bye.Load():
			m.log.Info().Int("peer", p.id).Str("addr", p.addr).Msg("qnet: peer shut down; redialling")
		default:
			m.log.Warn().Err(err).Int("peer", p.id).Str("addr", p.addr).
				Msg("qnet: connection to peer broke: the protocols' reliable-channel assumption is broken and frames in flight may be lost; redialling")
		}
	}
}

// errForgotten ends a connection to an incarnation the runtime put down
// (Forget): what is queued now is for the next one.
var errForgotten = errors.New("qnet: the peer's incarnation was put down")

// errRedial ends a connection the writer was asked to make anew.
var errRedial = errors.New("qnet: the link's key was removed: making it again")

// errPeerClosed reports that a peer closed the connection we send on.
var errPeerClosed = errors.New("qnet: peer closed the connection")

// pump writes p's queue to c until a write fails, the peer closes c or the
// mesh closes. Everything queued is written at once: under load frames
// batch up while the previous write is in progress, so the system calls
// per frame fall as the load rises, and a lone frame leaves at once.
func (m *Mesh) pump(p *peer, c net.Conn, dead <-chan struct{}, spare *[]byte) error {
	for {
		p.mu.Lock()
		// Checked under p.mu: Forget records the incarnation put down
		// before it empties the queue, so a frame queued after Forget (for
		// the next incarnation) is never taken for this connection to the
		// one put down, where it would be lost.
		if m.cfg.Heartbeat > 0 && m.live.wasForgotten(p.id, p.inc) {
			p.mu.Unlock()
			return errForgotten
		}
		batch, n := p.buf, p.queued
		if n > 0 {
			p.buf, p.queued = (*spare)[:0], 0
		}
		p.mu.Unlock()
		if n == 0 {
			if p.redial.Swap(false) {
				return errRedial
			}
			select {
			case <-p.wake:
				continue
			case <-dead:
				return errPeerClosed
			case <-m.closed:
				return ErrClosed
			}
		}
		if _, err := c.Write(batch); err != nil {
			m.lost.Add(uint64(n))
			return err
		}
		// Count per kind: the kind is the first byte after each prefix.
		for off := 0; off < len(batch); {
			size, k := binary.Uvarint(batch[off:])
			kind := batch[off+k]
			m.sentFrames[kind].Add(1)
			m.sentBytes[kind].Add(uint64(k) + size)
			off += k + int(size)
		}
		*spare = nil
		if cap(batch) <= maxSpare {
			*spare = batch
		}
	}
}

// dial connects to p (with keys: authenticates it) and says hello.
func (m *Mesh) dial(p *peer) (net.Conn, error) {
	d := net.Dialer{Timeout: dialTimeout}
	if m.cfg.Heartbeat == 0 {
		d.KeepAlive = -1 // see the package doc
	}
	c, err := d.DialContext(m.ctx, "tcp", p.addr)
	if err != nil {
		return nil, err
	}
	var tc *tls.Conn
	if pair := m.tls.Load(); pair != nil {
		tc = tls.Client(c, pair.client)
		if c, err = m.secure(tc, m.isClosed); err != nil {
			return nil, fmt.Errorf("qnet: peer %d at %s: %w", p.id, p.addr, err)
		}
	}
	if !m.track(c) {
		return nil, ErrClosed
	}
	if tc != nil {
		m.authenticated(c, tc, false, p.id)
	}
	if err := m.helloOut(c, p); err != nil {
		m.drop(c)
		return nil, err
	}
	return c, nil
}

// helloOut sends our hello on c and reads the answer.
func (m *Mesh) helloOut(c net.Conn, p *peer) error {
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	msg := append([]byte(nil), helloMagic[:]...)
	msg = binary.AppendUvarint(msg, uint64(m.cfg.Self))
	msg = binary.AppendUvarint(msg, m.incarnation)
	msg = binary.AppendUvarint(msg, uint64(len(m.cfg.Hello)))
	msg = append(msg, m.cfg.Hello...)
	if _, err := c.Write(msg); err != nil {
		return fmt.Errorf("qnet: hello to peer %d at %s: %w", p.id, p.addr, err)
	}
	var answer [1]byte
	if _, err := io.ReadFull(c, answer[:]); err != nil {
		return fmt.Errorf("qnet: no answer to hello from peer %d at %s (not a qnet node?): %w", p.id, p.addr, err)
	}
	_ = c.SetDeadline(time.Time{})
	switch answer[0] {
	case helloAccept:
		acc, err := binary.ReadUvarint(byteReader{c})
		if err != nil || acc == 0 {
			return fmt.Errorf("qnet: peer %d at %s: accepted without its incarnation: %v", p.id, p.addr, err)
		}
		return m.writeTo(p, acc)
	case helloWrongSetup:
		m.misconfiguredBy(fmt.Sprintf("node %d at %s refused this node's hello: it runs another setup", p.id, p.addr))
		return &refusedError{peer: p.id, addr: p.addr, reason: "different setup", passing: false}
	case helloWrongGroup:
		return &refusedError{peer: p.id, addr: p.addr, reason: "a node of another group listens there (the peer is gone, and its port taken?)", otherGroup: true}
	case helloWrongSender:
		m.misconfiguredBy(fmt.Sprintf("node %d at %s refused this node's hello: this node's index, %d, is out of its range or its own", p.id, p.addr, m.cfg.Self))
		return &refusedError{peer: p.id, addr: p.addr, reason: fmt.Sprintf("node index %d not valid there (different peer list?)", m.cfg.Self), passing: false}
	case helloFailed:
		if m.refusedToo(p.id) && !m.isolated() {
			// A cut both ways: each side refused the other. The side
			// that refused more than half the group is the one cut off;
			// the peer learns it, not this node.
			return &refusedError{peer: p.id, addr: p.addr, reason: "it refuses this node, which refuses it too and still hears most of the group: it is the one cut off", passing: true}
		}
		m.declaredFailed()
		return &refusedError{peer: p.id, addr: p.addr, reason: "this incarnation was declared failed: the node must come back as a new one", passing: false}
	case helloRestarted:
		if m.cfg.Heartbeat > 0 {
			// It takes this incarnation once it has put the last one down.
			return &refusedError{peer: p.id, addr: p.addr, reason: "waiting for that node to put this node's previous incarnation down", passing: true}
		}
		m.mu.Lock()
		if !m.refusedRestart.Swap(true) {
			close(m.changed) // wake the waiters: they fail with ErrRestarted
			m.changed = make(chan struct{})
		}
		m.mu.Unlock()
		return &refusedError{peer: p.id, addr: p.addr, reason: "this node restarted while that one kept running, and the protocols cannot take back a node that lost its state: restart every node of the group", passing: false}
	}
	return fmt.Errorf("qnet: peer %d at %s answered hello with unknown byte %#02x", p.id, p.addr, answer[0])
}

// accept accepts connections until Close.
func (m *Mesh) accept() {
	defer m.wg.Done()
	for {
		c, err := m.ln.Accept()
		if err != nil {
			if m.isClosed() {
				return
			}
			// Out of file descriptors, say: back off rather than spin.
			m.log.Warn().Err(err).Msg("qnet: accept failed")
			if !m.sleep(m.cfg.DialRetry) {
				return
			}
			continue
		}
		if !m.track(c) {
			return
		}
		if tc, ok := c.(*net.TCPConn); ok && m.cfg.Heartbeat == 0 {
			_ = tc.SetKeepAlive(false) // see the package doc
		}
		m.wg.Add(1)
		go m.serve(c)
	}
}

// serve reads an accepted connection: the hello, then frames.
func (m *Mesh) serve(c net.Conn) {
	defer m.wg.Done()
	defer m.drop(c) // the connection as tracked: closing it ends a TLS one too
	a, evicted := m.arrivals.add(c)
	if evicted != nil {
		if m.crowded.Add(1); !m.isClosed() {
			m.newsEvent(newsCrowded).Str("remote", evicted.c.RemoteAddr().String()).Uint64("crowded", m.crowded.Load()).Int("at_once", m.arrivals.max[evicted.pool]).
				Msg("qnet: closed the oldest connection still in its hello for a new one: as many were as allowed (strangers opening connections?)")
		}
	}
	// quiet: this end is no news (the mesh closes, or a is closed for a
	// newer arrival).
	quiet := func() bool { return m.isClosed() || a.evicted.Load() }
	if pair := m.tls.Load(); pair != nil {
		server := tls.Server(c, pair.server)
		tc, err := m.secure(server, quiet)
		if err != nil {
			m.arrivals.done(a)
			if !quiet() {
				m.newsEvent(newsUnauthenticated).Err(err).Str("remote", c.RemoteAddr().String()).Uint64("refused", m.unauthenticated.Load()).
					Msg("qnet: refused a connection that did not authenticate with the group key")
			}
			return
		}
		m.authenticated(c, server, true, -1)
		c = tc
	}
	br := bufio.NewReaderSize(c, readBuffer)
	from, inc, ok := m.helloIn(c, br, quiet)
	m.arrivals.done(a)
	if !ok {
		return
	}
	in := &inConn{c: c, done: make(chan struct{})}
	defer close(in.done)
	if !m.takeOver(from, inc, in) {
		return
	}
	defer func() {
		m.mu.Lock()
		if m.incoming[from] == in {
			m.incoming[from] = nil
		}
		m.mu.Unlock()
	}()
	m.readFrames(from, inc, in, br)
}

// takeOver makes in the connection node from (incarnation inc) sends on. A
// node redials only when it believes its previous connection broke, or
// ended it (a key removed): the old one is closed once its reader has read
// what was sent on it (at most takeOverDrain), and in is read only after
// that reader ended, so that frames from one node are delivered in order.
// An incarnation refused meanwhile (Refuse raced its hello) is not taken.
func (m *Mesh) takeOver(from int, inc uint64, in *inConn) bool {
	m.mu.Lock()
	if m.cfg.Heartbeat > 0 && m.live.refused(from, inc) {
		m.mu.Unlock()
		return false
	}
	old := m.incoming[from]
	m.incoming[from] = in
	m.mu.Unlock()
	if old == nil {
		return true
	}
	ev := m.log.Info()
	if !old.carried.Load() {
		ev = m.log.Debug()
	}
	ev.Int("peer", from).Str("remote", in.c.RemoteAddr().String()).Msg("qnet: peer reconnected; closing its previous connection")
	t := time.NewTimer(takeOverDrain)
	defer t.Stop()
	select {
	case <-old.done: // ended by itself: everything on it was read
		return true
	case <-t.C:
	case <-m.closed:
		return false
	}
	old.c.Close()
	select {
	case <-old.done:
		return true
	case <-m.closed:
		return false
	}
}

// takeOverDrain bounds how long a reconnecting peer's previous connection
// may take to end by itself: a peer that closed it has sent all it wrote
// before the close, which the reader reads to the end.
const takeOverDrain = time.Second

// helloIn reads and checks a hello, and answers it.
// An end that quiet says is no news is neither counted nor logged.
func (m *Mesh) helloIn(c net.Conn, br *bufio.Reader, quiet func() bool) (from int, inc uint64, ok bool) {
	remote := c.RemoteAddr().String()
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	var magic [4]byte
	if n, err := io.ReadFull(br, magic[:]); err != nil {
		if n > 0 && !quiet() {
			m.malformed.Add(1)
			m.newsEvent(newsCutHello).Err(err).Str("remote", remote).Msg("qnet: connection closed during its hello")
		}
		return 0, 0, false
	}
	if magic != helloMagic {
		m.malformed.Add(1)
		m.newsEvent(newsNoHello).Str("remote", remote).Bytes("magic", magic[:]).Msg("qnet: connection does not open with a qnet hello of this version (a node of another mcnode version, or not mcnode); closing it")
		return 0, 0, false
	}
	idx, err := binary.ReadUvarint(br)
	var size uint64
	if err == nil {
		inc, err = binary.ReadUvarint(br)
		if err == nil && inc == 0 {
			err = errors.New("qnet: hello with incarnation 0")
		}
	}
	if err == nil {
		size, err = binary.ReadUvarint(br)
	}
	if err == nil && size > MaxHello {
		err = fmt.Errorf("qnet: hello of %d bytes exceeds MaxHello %d", size, MaxHello)
	}
	var hello []byte
	if err == nil {
		hello = make([]byte, size)
		_, err = io.ReadFull(br, hello)
	}
	if err != nil {
		if !quiet() {
			m.malformed.Add(1)
			m.newsEvent(newsBadHello).Err(err).Str("remote", remote).Msg("qnet: bad hello; closing the connection")
		}
		return 0, 0, false
	}
	answer := byte(helloAccept)
	switch {
	case m.cfg.HelloGroup != "" && !strings.HasPrefix(string(hello), m.cfg.HelloGroup):
		answer = helloWrongGroup
		m.foreignHello.Add(1)
		m.newsEvent(newsForeignGroup).Str("remote", remote).Uint64("node", idx).Str("theirs", string(hello)).
			Msg("qnet: refused a hello from a node of another group")
	case idx >= uint64(m.n) || int(idx) == m.cfg.Self:
		answer = helloWrongSender
		m.foreignHello.Add(1)
		m.log.Warn().Str("remote", remote).Uint64("node", idx).Int("n", m.n).
			Msg("qnet: refused a hello from a node index out of range or this node's own (different peer list?)")
	case string(hello) != m.cfg.Hello:
		answer = helloWrongSetup
		m.foreignHello.Add(1)
		m.log.Warn().Str("remote", remote).Uint64("node", idx).Str("theirs", string(hello)).Str("ours", m.cfg.Hello).
			Msg("qnet: refused a hello: different setup (protocol, coterie, size, peer list, or lease, lease margin or detection time: every node must be given the same, peers in the same order)")
	case m.cfg.Heartbeat > 0 && m.live.refused(int(idx), inc):
		answer = helloFailed
		m.restarted.Add(1)
		m.log.Info().Str("remote", remote).Uint64("node", idx).Msg("qnet: refused an incarnation declared failed: it must come back as a new one")
	case m.cfg.Heartbeat > 0 && !m.takeIncarnation(int(idx), inc):
		answer = helloRestarted
		m.restarted.Add(1)
		m.log.Info().Str("remote", remote).Uint64("node", idx).
			Msg("qnet: a node came back as a new incarnation: taken once its previous one is put down (its leases run out)")
	case m.cfg.Heartbeat == 0 && !m.sameIncarnation(int(idx), inc):
		answer = helloRestarted
		m.restarted.Add(1)
		m.log.Error().Str("remote", remote).Uint64("node", idx).
			Msg("qnet: refused node that restarted: it lost the locks and queues the protocol needs, so it cannot rejoin a running group; restart every node")
	}
	// An acceptance names this incarnation, so that the dialler never
	// hands what it queued for an earlier one to this one.
	reply := []byte{answer}
	if answer == helloAccept {
		reply = binary.AppendUvarint(reply, m.incarnation)
	}
	if _, err := c.Write(reply); err != nil || answer != helloAccept {
		return 0, 0, false
	}
	if m.cfg.Heartbeat > 0 {
		// A sign of life: a peer whose writer waits for this node's take
		// of it to match (writeTo) dials again and again, and sends
		// nothing else meanwhile; suspected for it, a healthy new
		// incarnation was declared failed. Suspicion is about liveness
		// only: leases run on echoes (Acked).
		m.live.heardAt[idx].Store(m.live.since())
	}
	_ = c.SetDeadline(time.Time{})
	return int(idx), inc, true
}

// readFrames delivers the frames node from (incarnation inc) sends on in
// until it ends, or that incarnation is refused.
func (m *Mesh) readFrames(from int, inc uint64, in *inConn, br *bufio.Reader) {
	body := make([]byte, MaxFrame)
	carried := false
	for {
		size, err := binary.ReadUvarint(br)
		if err == nil && size > MaxFrame {
			m.malformed.Add(1)
			m.log.Warn().Int("peer", from).Uint64("size", size).Int("max", MaxFrame).
				Msg("qnet: frame over MaxFrame; closing the connection, as the next frame cannot be found")
			return
		}
		if err == nil {
			_, err = io.ReadFull(br, body[:size])
		}
		if err != nil {
			m.inputEnded(from, err, in.carried.Load())
			return
		}
		if !carried { // set once: not an atomic write per frame
			carried = true
			in.carried.Store(true)
		}
		f, err := DecodeFrame(body[:size])
		if err != nil {
			m.malformed.Add(1)
			m.newsEvent(newsBadFrame).Err(err).Int("peer", from).Msg("qnet: dropped a malformed frame")
			continue
		}
		if f.Msg.From != from || f.Msg.To != m.cfg.Self {
			m.badSender.Add(1)
			m.newsEvent(newsBadSender).Int("peer", from).Stringer("msg", f.Msg).Msg("qnet: dropped a frame not from the connection's node or not for this node")
			continue
		}
		// Counted first, so that whoever took a frame from Inbound sees
		// it counted.
		k := f.Msg.Kind
		m.recvFrames[k].Add(1)
		m.recvBytes[k].Add(uint64(uvarintLen(size)) + size)
		if m.cfg.Heartbeat > 0 {
			if m.live.refused(from, inc) {
				return // nothing of a refused incarnation counts
			}
			if m.live.heard(from, f.Msg, m) {
				continue // a heartbeat or an echo: the mesh's own
			}
		}
		select {
		case m.inbound <- Inbound{From: from, Inc: inc, Frame: f}:
		case <-m.closed:
			return
		}
	}
}

// inputEnded logs why an accepted connection ended; carried says whether
// it carried a frame.
func (m *Mesh) inputEnded(from int, err error, carried bool) {
	var ne net.Error
	switch {
	case m.isClosed():
	case errors.Is(err, net.ErrClosed):
		// takeOver closed it: the peer redialled.
		m.log.Debug().Int("peer", from).Msg("qnet: previous connection from peer closed")
	case errors.Is(err, io.EOF) && !carried:
		m.log.Debug().Int("peer", from).Msg("qnet: peer closed its connection before any frame (waiting to write to this incarnation?)")
	case errors.Is(err, io.EOF):
		m.log.Info().Int("peer", from).Msg("qnet: peer closed its connection")
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne):
		m.log.Warn().Err(err).Int("peer", from).Msg("qnet: connection from peer broke; frames in flight may be lost")
	default:
		// Only a length prefix over 64 bits gets here.
		m.malformed.Add(1)
		m.log.Warn().Err(err).Int("peer", from).Msg("qnet: bad frame length; closing the connection")
	}
}

// sameIncarnation records node's incarnation on its first hello and
// reports whether inc is that one. The papers' nodes never fail: one that
// restarts comes back without the arbiter state (who it granted, who
// waits) that others rely on, and taking it back could grant one lock
// twice. Refusing it stalls what needs it instead, which is safe. A node
// whose earlier incarnation never got through to this one is taken: that
// one could not have told this one anything.
func (m *Mesh) sameIncarnation(node int, inc uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.incarnations[node] == 0 {
		m.incarnations[node] = inc
	}
	// Down only once the recorded incarnation sends nothing any more (no
	// connection of its own): a stray hello (a second node started with
	// this index, or anyone's without a key) beside the live one made a
	// healthy peer count as down for good (review). Its own hello takes
	// it back.
	same := m.incarnations[node] == inc
	if refusing := !same && m.incoming[node] == nil; refusing != m.refusing[node] && (refusing || same) {
		m.refusing[node] = refusing
		close(m.changed)
		m.changed = make(chan struct{})
	}
	return same
}

// Misconfigured returns a channel closed once a peer, at the address this
// node's list gives it, refused this node's hello for another setup
// (protocol, coterie, size, peer list or timings) or a node index it
// cannot have: nodes given different setups build quorums that need not
// intersect, and each side would grant the same lock (black-box round: two
// holders in 14 of 20 entries with two --quorum-size values). The node
// stops on it (node.ErrMisconfigured). Nodes of one setup share one peer
// list, so where it names an address at which a node of another setup
// runs, every one of them dials it and stops. A hello this node refuses
// counts for nothing here: a restarted node that lost its place in the
// list, or a stranger on a peer's host, would stop a healthy group
// (review). MisconfiguredWhy says what was seen.
func (m *Mesh) Misconfigured() <-chan struct{} { return m.misconfigured }

// MisconfiguredWhy describes the first refused hello that closed
// Misconfigured, or is "".
func (m *Mesh) MisconfiguredWhy() string {
	if why := m.misconfiguredWhy.Load(); why != nil {
		return *why
	}
	return ""
}

func (m *Mesh) misconfiguredBy(why string) {
	m.misconfiguredOne.Do(func() {
		m.misconfiguredWhy.Store(&why)
		close(m.misconfigured)
	})
}

// Refusing reports whether this node refuses node i for good, as one that
// restarted while this one ran (without heartbeats: see sameIncarnation).
func (m *Mesh) Refusing(i int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return i >= 0 && i < m.n && m.refusing[i]
}

// Connected reports whether this node's links to every other node are up
// and their hellos accepted.
func (m *Mesh) Connected() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.upTo(nil)
}

// Backlog reports whether the link to node to is up, and how many frames
// wait to be written to it: an application update is not worth queueing
// for a peer that is down or does not read (the protocol's frames are).
func (m *Mesh) Backlog(to int) (up bool, queued int) {
	if to < 0 || to >= m.n || to == m.cfg.Self {
		return false, 0
	}
	m.mu.Lock()
	up = m.up[to] && !m.refusing[to]
	m.mu.Unlock()
	p := m.peers[to]
	p.mu.Lock()
	defer p.mu.Unlock()
	return up, p.queued
}

// secure runs a TLS handshake, bounded like a hello, and counts a failure
// unless quiet says it is none. On failure the connection is closed.
func (m *Mesh) secure(tc *tls.Conn, quiet func() bool) (net.Conn, error) {
	_ = tc.SetDeadline(time.Now().Add(handshakeTimeout))
	if err := tc.HandshakeContext(m.ctx); err != nil {
		tc.Close()
		if !quiet() {
			m.unauthenticated.Add(1)
		}
		return nil, fmt.Errorf("%w (no group key, or another?): %v", ErrUnauthenticated, err)
	}
	_ = tc.SetDeadline(time.Time{})
	return tc, nil
}

// byteReader reads a connection a byte at a time (a hello's answer is a few
// bytes, and nothing after it may be read ahead).
type byteReader struct{ c net.Conn }

func (b byteReader) ReadByte() (byte, error) {
	var one [1]byte
	_, err := io.ReadFull(b.c, one[:])
	return one[0], err
}
