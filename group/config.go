package group

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/rs/zerolog"

	"github.com/mcnode/mcnode/arbiter"
	"github.com/mcnode/mcnode/seal"
	"github.com/mcnode/mcnode/wire"
)

// Config configures a node. Start from DefaultLANConfig or DefaultLocalConfig
// and change what you need; Validate (which Join calls) names any field that
// is wrong.
type Config struct {
	// Name names the group. Nodes with different names ignore each other
	// even on one multicast address. Required.
	Name string

	// Address is the multicast group and port, e.g. 239.192.0.1:7946.
	// Every member of a group uses the same one.
	Address string
	// Interface names the network interface to join the group on and send
	// multicast through (e.g. eth0). Required for UDP.
	Interface string
	// Bind is this node's unicast address (host:port). Empty picks the
	// interface's first IPv4 address and a free port.
	Bind string
	// TTL is the multicast time-to-live: 1 stays on the LAN segment, 0 on
	// this host (the kernel never sends it out).
	TTL int
	// Loopback delivers this host's multicast to its other nodes; needed to
	// run several nodes on one host.
	Loopback bool

	// Tick is the runtime's clock resolution: timers below are rounded up
	// to whole ticks. Every member must use the same tick.
	Tick time.Duration
	// TurnLength is how many decisions a server makes before handing over,
	// if its turn does not end first by TurnTimeout. Group-wide: the
	// founder's value holds.
	TurnLength int
	// MaxMembers is the group's size limit; a newcomer beyond it is refused
	// (GROUP_FULL). Group-wide.
	MaxMembers int
	// LeaseTimeout is how long a member keeps what it holds without
	// confirmed contact with the group; the group reclaims a silent
	// member's resources LeaseMargin after that. Group-wide.
	LeaseTimeout time.Duration
	// LeaseMargin covers one-way delay and clock-rate drift. Group-wide.
	LeaseMargin time.Duration
	// TurnTimeout is the longest turn: an idle group still rotates the
	// server, pings members and reclaims from dead ones this often.
	TurnTimeout time.Duration
	// RetryInterval is how long a request, release or leave waits for its
	// decision before it is sent again.
	RetryInterval time.Duration
	// HeartbeatInterval is how often the server pings the group. The answers
	// of a majority keep its authority to decide (see TakeoverTimeout);
	// more pings cost one datagram per member each, fewer let a lost ping or
	// two cost the server its authority.
	HeartbeatInterval time.Duration
	// TakeoverTimeout is how long members wait without a ping from the
	// server before they take over from it: the server role passes to the
	// member that backs it up (or, failing that, to the next that can
	// gather the votes of a majority) in a new epoch. It bounds how long
	// the group is without a server when the server dies, and must allow
	// for a few lost pings and a busy host's scheduling. The server decides
	// only within a little less than this of the last ping a majority
	// answered, so a cut-off server stops before a takeover can win.
	// Group-wide: the founder's value holds.
	TakeoverTimeout time.Duration
	// PingTimeout is how long a server waits for members to answer its
	// ping before it may end its turn without them.
	PingTimeout time.Duration
	// JoinTimeout is how long Join waits for an existing group to answer
	// before it founds a new one (if Bootstrap), but at least twice
	// TakeoverTimeout (a group changing servers is silent that long); the
	// join request goes out three times in it.
	JoinTimeout time.Duration
	// Bootstrap lets Join found a new group when none answers within
	// JoinTimeout. Without it, Join waits for a group (until ctx ends).
	Bootstrap bool
	// Observer joins as an observer: a member that takes locks but
	// neither votes, nor serves, nor backs the server up, so that its
	// death, with any number of others, never costs the group its
	// majority (arbiter.Config.Observer). The group admits it as one while
	// it has at least arbiter.MinVoters voters, as a voter before that, and
	// promotes observers when voters go. For short-lived members: mcnode
	// lock without a daemon sets it.
	Observer bool
	// NoGroupAfter, if set and Bootstrap is not, makes Join give up with
	// ErrNoGroup when no member of the group has answered within it. A
	// group that has answered is waited for until ctx ends: a takeover
	// may keep a newcomer waiting for a while, and that is no reason to
	// tell the user there is no group.
	NoGroupAfter time.Duration
	// Joining, if set, is called by Join once the node runs, before it is
	// a member, with a function that reports the node's status from then
	// on (Status.Joined false, Status.HeardGroup whether the group was
	// heard, the drop counts): a caller that may wait long for its group
	// can show why, a stale key or a network that loses the group's
	// datagrams. The function fails once Join has failed. Join calls
	// Joining itself, before it waits: it must return at once.
	Joining func(status func() (Status, error))

	// MaxDatagram is the largest datagram sent or accepted, in bytes.
	MaxDatagram int
	// RateLimit is how many datagrams a second one source address may send
	// this node on average (a second's worth may come at once); the rest are
	// dropped, counted as rate-limited, before they are opened or decoded.
	// It must leave room for the busiest member: a server deciding at full
	// speed. 0 is DefaultRateLimit; negative turns the limit off.
	RateLimit int
	// Keys, if any, are the group keys: every datagram is sealed with the
	// first (authenticated and encrypted, see package seal), and only
	// datagrams sealed with one of them are accepted. Every member of a
	// group must hold the key its members seal with. Without keys, nothing
	// is sealed, and sealed datagrams are dropped.
	Keys []seal.Key

	// TimestampFile, if set, keeps the highest group timestamp this node
	// has seen, so that a group this node founds after the whole group
	// stopped starts above it: fencing tokens (the timestamps of grants)
	// then keep increasing even if the wall clock went back, or the group's
	// timestamp ran ahead of it (each takeover jumps it by at least
	// arbiter.TakeoverGap). It is written at most once a second and at each
	// takeover, as a fence file (group/fence). Keep it on storage that
	// survives a restart.
	TimestampFile string
	// MemberFile, if set, records that this host is a member of the group:
	// written when it joins, removed when the group records its leave. A
	// host that stopped without leaving (killed, crashed, lost power) is
	// still counted by the group until it is removed, and the group may
	// still run elsewhere: a daemon that starts again while cut off from it
	// must not found a second group, which would grant the same locks.
	// WasMember reads the record; Join itself does not, so the caller
	// decides (mcnode run sets Bootstrap to false, unless --found).
	MemberFile string

	// Transport, if set, replaces UDP (Address, Interface, Bind, TTL and
	// Loopback are then unused); group/memnet provides one for tests.
	// Join takes it over: it is closed with the node, or when Join fails.
	Transport Transport
	// Clock drives the runtime's ticks; nil is BootClock (CLOCK_BOOTTIME).
	Clock Clock
	// Logger receives the runtime's log; the zero value logs nothing.
	Logger zerolog.Logger
}

// DefaultLANConfig returns settings for a group on one LAN segment: group
// address 239.192.77.1:7946, TTL 1, loopback delivery on (for members on
// the same host), a 10 ms tick, turns of at most 64 decisions or 500 ms, a
// 1.5 s lease, a ping every 100 ms, a takeover after 500 ms without one,
// and Bootstrap: the group is founded if nobody answers within the 1 s
// join timeout (nodes started together found one between them; nodes that
// cannot hear each other found one each). Name and Interface have no
// default.
func DefaultLANConfig() Config {
	return Config{
		Address:           "239.192.77.1:7946",
		TTL:               1,
		Loopback:          true,
		Tick:              10 * time.Millisecond,
		TurnLength:        64,
		MaxMembers:        64,
		LeaseTimeout:      1500 * time.Millisecond,
		LeaseMargin:       300 * time.Millisecond,
		TurnTimeout:       500 * time.Millisecond,
		RetryInterval:     100 * time.Millisecond,
		HeartbeatInterval: 100 * time.Millisecond,
		TakeoverTimeout:   500 * time.Millisecond,
		PingTimeout:       200 * time.Millisecond,
		JoinTimeout:       1 * time.Second,
		Bootstrap:         true,
		MaxDatagram:       1400,
		Logger:            zerolog.Nop(),
	}
}

// DefaultLocalConfig returns settings for a group whose members all run on
// this host: the loopback interface, TTL 0, loopback delivery on, and a
// shorter join wait.
func DefaultLocalConfig() Config {
	c := DefaultLANConfig()
	c.Address = "239.192.77.2:7946"
	c.Interface = "lo"
	c.TTL = 0
	c.Loopback = true
	c.JoinTimeout = 300 * time.Millisecond
	return c
}

// ErrConfig wraps every configuration error; the message names the field.
var ErrConfig = errors.New("group: bad config")

// Validate checks every field and says which is wrong.
func (c *Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
	}
	if c.Name == "" {
		return bad("Name is empty: give the group a name")
	}
	if len(c.Name) > 255 {
		return bad("Name is %d bytes, at most 255", len(c.Name))
	}
	if c.Transport == nil {
		ap, err := netip.ParseAddrPort(c.Address)
		if err != nil || !ap.Addr().Is4() || !ap.Addr().IsMulticast() || ap.Port() == 0 {
			return bad("Address %q is not an IPv4 multicast address with a port (e.g. 239.192.0.1:7946)", c.Address)
		}
		if c.Interface == "" {
			return bad("Interface is empty: name the interface to join the group on (e.g. eth0, or lo for one host)")
		}
		if c.Bind != "" {
			if _, err := netip.ParseAddrPort(c.Bind); err != nil {
				return bad("Bind %q is not host:port: %v", c.Bind, err)
			}
		}
		if c.TTL < 0 || c.TTL > 255 {
			return bad("TTL %d not in [0, 255]", c.TTL)
		}
	}
	positive := []struct {
		name string
		d    time.Duration
	}{
		{"Tick", c.Tick}, {"LeaseTimeout", c.LeaseTimeout}, {"TurnTimeout", c.TurnTimeout},
		{"RetryInterval", c.RetryInterval}, {"HeartbeatInterval", c.HeartbeatInterval},
		{"TakeoverTimeout", c.TakeoverTimeout}, {"PingTimeout", c.PingTimeout}, {"JoinTimeout", c.JoinTimeout},
	}
	for _, p := range positive {
		if p.d <= 0 {
			return bad("%s %v must be positive", p.name, p.d)
		}
	}
	if c.LeaseMargin < 0 {
		return bad("LeaseMargin %v is negative", c.LeaseMargin)
	}
	if c.TurnLength < 2 {
		return bad("TurnLength %d: a turn needs at least one decision and its SYNC", c.TurnLength)
	}
	if c.MaxMembers < 1 || c.MaxMembers > wire.DefaultLimits().MaxMembers {
		return bad("MaxMembers %d not in [1, %d]", c.MaxMembers, wire.DefaultLimits().MaxMembers)
	}
	if c.MaxDatagram < 512 || c.MaxDatagram > wire.MaxUDPPayload {
		return bad("MaxDatagram %d not in [512, %d]", c.MaxDatagram, wire.MaxUDPPayload)
	}
	for i, k := range c.Keys {
		for _, o := range c.Keys[:i] {
			if o.ID() == k.ID() {
				return bad("Keys holds two keys with ID %s (the same key twice, or two that share an ID: make another)", seal.FormatID(k.ID()))
			}
		}
	}
	if c.RetryInterval < 2*c.Tick {
		return bad("RetryInterval %v must be at least two ticks (%v)", c.RetryInterval, 2*c.Tick)
	}
	if c.PingTimeout > c.TurnTimeout {
		return bad("PingTimeout %v must not exceed TurnTimeout %v", c.PingTimeout, c.TurnTimeout)
	}
	if floor := 2 * (c.TurnTimeout + c.PingTimeout); c.LeaseTimeout <= floor {
		return bad("LeaseTimeout %v must exceed 2*(TurnTimeout+PingTimeout) = %v: the SYNC that ends a turn renews a lease from a reply sent the turn before, and must keep it alone when pings are lost",
			c.LeaseTimeout, floor)
	}
	lease := uint64(c.ticks(c.LeaseTimeout))
	if min := time.Duration(arbiter.MinLeaseMargin(lease)) * c.Tick; c.LeaseMargin < min {
		return bad("LeaseMargin %v must be at least %v: it covers clocks drifting apart by up to %d%% over the lease, and two ticks",
			c.LeaseMargin, min, arbiter.MaxDriftPPM/10_000)
	}
	if c.TakeoverTimeout < 4*c.HeartbeatInterval {
		return bad("TakeoverTimeout %v must be at least four heartbeats (HeartbeatInterval %v): a server keeps its authority only while a majority answers its pings",
			c.TakeoverTimeout, c.HeartbeatInterval)
	}
	if 2*c.TakeoverTimeout > c.LeaseTimeout {
		return bad("TakeoverTimeout %v must be at most half LeaseTimeout %v: a holder in touch with the group keeps its lock through a takeover only if its lease outlasts the timeout, the claims and the new server's first pings",
			c.TakeoverTimeout, c.LeaseTimeout)
	}
	_, err := c.machine(1, "x", 1)
	return err
}

// ticks converts a duration to whole ticks, rounding up.
func (c *Config) ticks(d time.Duration) int {
	return int((d + c.Tick - 1) / c.Tick)
}

// machine derives the state machine's configuration. firstT is where a
// group this node founds starts its timestamp.
func (c *Config) machine(inc uint64, addr string, firstT uint64) (arbiter.Config, error) {
	m := arbiter.DefaultConfig()
	m.FirstT = firstT
	m.Group = wire.GroupID(c.Name)
	m.Inc = inc
	m.Addr = addr
	m.Limits = limits(*c)
	m.Authenticated = len(c.Keys) > 0
	m.Observer = c.Observer
	m.Params = wire.Params{
		TurnLength:       uint64(c.TurnLength),
		MaxMembers:       uint32(c.MaxMembers),
		LeaseTicks:       uint64(c.ticks(c.LeaseTimeout)),
		LeaseMarginTicks: uint64(c.ticks(c.LeaseMargin)),
		TickMicros:       uint64(c.Tick / time.Microsecond),
		TakeoverTicks:    uint64(c.ticks(c.TakeoverTimeout)),
	}
	m.RetryTicks = c.ticks(c.RetryInterval)
	m.LazyTicks = max(1, m.RetryTicks/2)
	// Three join requests in a join timeout: a newcomer that may found is
	// heard by the others before it does, though one or two are lost
	// (IGMP snooping drops the first datagrams of a host that just joined).
	m.JoinRetryTicks = max(1, c.ticks(c.JoinTimeout)/3)
	m.HeartbeatTicks = c.ticks(c.HeartbeatInterval)
	m.TurnTicks = c.ticks(c.TurnTimeout)
	m.PingTimeoutTicks = c.ticks(c.PingTimeout)
	m.PingRetryTicks = max(1, m.PingTimeoutTicks/4)
	m.NakTicks = max(1, m.RetryTicks/5)
	m.StaggerTicks = max(1, int(m.Params.TakeoverTicks)/5)
	m.ClaimTicks = max(4*m.RetryTicks, int(m.Params.TakeoverTicks))
	if c.Bootstrap {
		// Not before a group in a takeover could have spoken again: its
		// members are silent until the first candidate claims, a takeover
		// timeout and the stagger after the last ping (twice covers it).
		// A shorter join timeout let a newcomer found beside a group that
		// was changing servers.
		m.FoundAfterTicks = max(c.ticks(c.JoinTimeout), 2*int(m.Params.TakeoverTicks))
	}
	if _, err := arbiter.New(m); err != nil {
		return m, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return m, nil
}

// transport opens the UDP transport the config describes.
func (c *Config) transport() (Transport, error) {
	ifi, err := net.InterfaceByName(c.Interface)
	if err != nil {
		// No such interface: the config names one this host lacks.
		return nil, fmt.Errorf("%w: interface %q: %w", ErrConfig, c.Interface, err)
	}
	if ifi.Flags&net.FlagUp == 0 {
		return nil, fmt.Errorf("group: interface %q is down", c.Interface)
	}
	group, _ := netip.ParseAddrPort(c.Address)
	var bind netip.AddrPort
	if c.Bind != "" {
		bind, _ = netip.ParseAddrPort(c.Bind)
	}
	return ListenUDP(UDPConfig{Group: group, Interface: ifi, Bind: bind, TTL: c.TTL, Loopback: c.Loopback, MaxDatagram: c.MaxDatagram})
}
