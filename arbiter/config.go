package arbiter

import (
	"errors"
	"fmt"

	"github.com/mcnode/mcnode/wire"
)

// Config configures one node's state machine. Durations are in ticks: the
// machine has no clock of its own, and the runtime calls Tick at a fixed
// interval (DefaultConfig assumes 10 ms). Zero values are filled from
// DefaultConfig by New.
type Config struct {
	// Group is wire.GroupID of the group's name. Datagrams of other groups
	// are dropped and counted.
	Group uint64
	// Inc is this process's incarnation ID: random, non-zero, new at every
	// start. A restarted process is a new member. Give it FounderInc's top
	// bit: a newcomer that may found must rank below every one that may
	// not, or one of those holds it off (joining.sawLower).
	Inc uint64
	// Addr is where members can reach this node directly (its unicast
	// address). The machine only stores and forwards it.
	Addr string

	// Authenticated says that every datagram Step is given was
	// authenticated with the group's key (the runtime drops the rest), so
	// that a sender this node does not know is still one of the group. Only
	// then does a node that missed the group for so long that it knows none
	// of the members carrying it on take a server it does not know at its
	// word and rejoin (see pingedByStranger); without a key, any sender on
	// the network could make it.
	Authenticated bool

	// Observer asks to join as an observer: a member that takes locks but
	// neither votes, nor serves, nor backs the server up, so that its
	// death, however many observers die with it, never costs the group its
	// majority. The server admits it as one only while the group has at
	// least MinVoters voters, and promotes observers while it has fewer
	// (see wire.OkToJoin and wire.Sync). A node that founds the group is
	// its voter all the same. For short-lived members: a script's lock.
	Observer bool

	// Bootstrap founds a new group at once, with this node as its only
	// member (logical ID 1) and Params as the group's parameters.
	Bootstrap bool
	// FoundAfterTicks, if positive, founds a new group when no member has
	// answered the join request for this long. Of several nodes starting at
	// once, only the one with the lowest incarnation founds; the others wait
	// for it (two join retries longer). Datagrams of a running group this
	// node cannot read put founding off while they come, by a takeover and
	// a lease; and a catch-up (TickBy of several ticks) never founds before
	// the node has read what waited meanwhile.
	FoundAfterTicks int
	// Params are the group's parameters if this node founds it; a joining
	// node adopts the group's.
	Params wire.Params
	// FirstT is the group timestamp a founded group starts at (at least 1,
	// the default). Fencing tokens are Ts, so a runtime that starts each new
	// group at the wall clock in microseconds keeps tokens increasing across
	// groups founded one after another under the same name.
	FirstT uint64

	// Limits bound what is sent and accepted.
	Limits wire.Limits

	// RetryTicks is how long a member waits for the decision on a request,
	// release, cancel or leave before sending it again. It must exceed
	// LazyTicks, so that a decision the server holds back to share a
	// datagram never makes the requester retry.
	RetryTicks int
	// JoinRetryTicks is how often a newcomer repeats its join request.
	JoinRetryTicks int
	// NakTicks is how long a gap in the log must persist before the node
	// asks for the missing decisions, and how often it asks again.
	NakTicks int
	// LazyTicks is how long the server may hold back a decision that nobody
	// is waiting on (a request queued behind a holder, a release with an
	// empty queue) so that it rides in the next datagram.
	LazyTicks int
	// HeartbeatTicks is how often the server multicasts a ping. Members
	// answer every ping; the answers of a majority renew the server's
	// authority (see AuthorityTicks), and a member that hears no ping for
	// Params.TakeoverTicks starts a takeover. It must leave room for a few
	// lost pings within the authority.
	HeartbeatTicks int
	// StaggerTicks spaces the takeovers of members: the backup (the member
	// that holds every decision) asks first, the others in ID order after
	// it, one StaggerTicks apart, so that they rarely split the votes.
	StaggerTicks int
	// ClaimTicks is how long a takeover may take (votes, then catching up
	// with the most advanced voter) before the candidate gives up and lets
	// the timer run again; a claim won late in that time has two
	// RetryTicks from its win to catch up.
	ClaimTicks int
	// TurnTicks is the longest a turn lasts: an idle group still rotates,
	// pings its members and reclaims what dead members hold.
	TurnTicks int
	// PingRetryTicks is how often the server pings, directly, members that
	// have not answered this turn's ping.
	PingRetryTicks int
	// PingTimeoutTicks is how long after the start of its turn the server
	// waits for ping replies before it may end the turn without them.
	PingTimeoutTicks int
	// LogWindow is how many recent decisions a member keeps to answer
	// negative acknowledgements; older gaps are repaired by state transfer.
	LogWindow int
	// MaxBuffered bounds the decisions held that arrived ahead of a gap.
	MaxBuffered int
}

// DefaultParams returns the group parameters a founder uses by default, for
// a 10 ms tick: turns of 64 decisions, at most 64 members, a lease of 1.5 s
// with a margin of 0.3 s, and a takeover after 0.5 s without a ping.
func DefaultParams() wire.Params {
	return wire.Params{TurnLength: 64, MaxMembers: 64, LeaseTicks: 150, LeaseMarginTicks: 30, TickMicros: 10000, TakeoverTicks: 50}
}

// DefaultConfig returns the defaults for a LAN and a 10 ms tick. Group, Inc
// and Addr have no default.
func DefaultConfig() Config {
	return Config{
		Params:           DefaultParams(),
		Limits:           wire.DefaultLimits(),
		RetryTicks:       10,
		JoinRetryTicks:   20,
		NakTicks:         2,
		LazyTicks:        5,
		HeartbeatTicks:   10,
		StaggerTicks:     10,
		ClaimTicks:       40,
		TurnTicks:        50,
		PingRetryTicks:   5,
		PingTimeoutTicks: 20,
		LogWindow:        1024,
		MaxBuffered:      4096,
	}
}

// MaxDriftPPM is the timing assumption the protocol's safety rests on: the
// clocks of any two members run at rates that differ from real time by at
// most this many parts per million (1%). Quartz clocks stay within 100 ppm
// and NTP slews at most 500 ppm, so 1% is a wide margin; it costs little (a
// lease margin of 2% of the lease, an authority 4% shorter than the takeover
// timeout). Clocks need not agree on the time, only on its rate, and they
// must count through suspend (the runtime uses CLOCK_BOOTTIME).
const MaxDriftPPM = 10_000

// AuthorityTicks is how long a server may decide after sending a ping that a
// majority of the view answered. A member that answers a ping votes for no
// takeover until it has heard no ping for p.TakeoverTicks, counted on its own
// clock from when it got this one: so the authority, counted on the server's
// clock from before the send, must end before that, whatever the two clocks'
// rates within MaxDriftPPM and whatever their tick phases (one tick each).
// Then no server decides once a takeover has a majority's votes: any two
// majorities share a member.
func AuthorityTicks(p wire.Params) uint64 {
	a := (p.TakeoverTicks - 1) * (1_000_000 - MaxDriftPPM) / (1_000_000 + MaxDriftPPM)
	if p.TakeoverTicks < 2 || a < 1 {
		return 0
	}
	return a - 1
}

// MinLeaseMargin is the smallest LeaseMarginTicks the protocol accepts for a
// lease: the drift of two clocks over the lease, and two ticks of phase.
func MinLeaseMargin(leaseTicks uint64) uint64 {
	return (2*leaseTicks*MaxDriftPPM+999_999)/1_000_000 + 2
}

// TakeoverGap is how far the group timestamp jumps when an epoch begins. A
// takeover cannot always see the old epoch's last decisions, but every one
// that took effect was made within an authority of a ping that one of its
// voters answered, and that ping carried the old server's timestamp: the
// candidate starts above the highest timestamp its voters saw by more than
// a server could decide in an authority (at most a few hundred thousand
// decisions, each needing a datagram, in under a second). So fencing tokens
// still increase across the takeover. 2^24 timestamps are 17 s of the wall
// clock in microseconds at which a group starts.
const TakeoverGap = 1 << 24

// MinVoters is how many voters the server keeps in a group that has
// observers: it admits a newcomer that asks to be an observer as one only
// while the group has at least this many voters, and promotes an observer
// in each SYNC while it has fewer. Three voters survive the death of one,
// whatever number of observers die with it.
const MinVoters = 3

// maxUnseenEpochs bounds the gaps a takeover adds for epochs between its
// log's and its own that a voter promised (see finishTakeover), so that the
// jump stays far inside what members accept (maxTLead): 2^10 gaps are 2^34
// timestamps. Each such epoch that had a server took a majority's votes
// after a takeover timeout of silence; a thousand in a row, none of whose
// datagrams any voter of the new epoch saw, is beyond any LAN's bad day.
const maxUnseenEpochs = 1 << 10

// LeaseFloor is the shortest lease that members with these timings keep
// while they answer every ping: a lease is renewed from the reply a member
// sent early in one turn, by the SYNC at the end of that turn, and then not
// again until the end of the next turn, so it must outlast two turns and the
// ping waits that can stretch them.
func LeaseFloor(turnTicks, pingTimeoutTicks int) uint64 {
	return 2 * uint64(turnTicks+pingTimeoutTicks)
}

// Configuration errors.
var (
	// ErrConfig wraps every configuration error; the message names the field.
	ErrConfig = errors.New("arbiter: bad config")
)

// validate fills zero values from DefaultConfig and checks every field.
func (c *Config) validate() error {
	d := DefaultConfig()
	fill := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	fill(&c.RetryTicks, d.RetryTicks)
	fill(&c.JoinRetryTicks, d.JoinRetryTicks)
	fill(&c.NakTicks, d.NakTicks)
	fill(&c.LazyTicks, d.LazyTicks)
	fill(&c.HeartbeatTicks, d.HeartbeatTicks)
	fill(&c.StaggerTicks, d.StaggerTicks)
	fill(&c.ClaimTicks, d.ClaimTicks)
	fill(&c.TurnTicks, d.TurnTicks)
	fill(&c.PingRetryTicks, d.PingRetryTicks)
	fill(&c.PingTimeoutTicks, d.PingTimeoutTicks)
	fill(&c.LogWindow, d.LogWindow)
	fill(&c.MaxBuffered, d.MaxBuffered)
	if c.Limits == (wire.Limits{}) {
		c.Limits = d.Limits
	}
	if c.Params == (wire.Params{}) {
		c.Params = d.Params
	}
	if c.Params.TakeoverTicks == 0 {
		c.Params.TakeoverTicks = d.Params.TakeoverTicks
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"RetryTicks", c.RetryTicks}, {"JoinRetryTicks", c.JoinRetryTicks}, {"NakTicks", c.NakTicks},
		{"LazyTicks", c.LazyTicks}, {"HeartbeatTicks", c.HeartbeatTicks}, {"TurnTicks", c.TurnTicks},
		{"PingRetryTicks", c.PingRetryTicks}, {"PingTimeoutTicks", c.PingTimeoutTicks},
		{"LogWindow", c.LogWindow}, {"MaxBuffered", c.MaxBuffered},
		{"StaggerTicks", c.StaggerTicks}, {"ClaimTicks", c.ClaimTicks},
	} {
		if f.v < 0 {
			return bad("%s %d is negative", f.name, f.v)
		}
	}
	switch {
	case c.Inc == 0:
		return bad("Inc must be a non-zero random incarnation ID")
	case len(c.Addr) > c.Limits.MaxAddr:
		return bad("Addr is %d bytes, limit %d", len(c.Addr), c.Limits.MaxAddr)
	case c.FoundAfterTicks < 0:
		return bad("FoundAfterTicks %d is negative", c.FoundAfterTicks)
	case c.Params.TurnLength < 2:
		return bad("Params.TurnLength %d: a turn needs at least one decision and its SYNC", c.Params.TurnLength)
	case c.Params.MaxMembers < 1 || int(c.Params.MaxMembers) > c.Limits.MaxMembers:
		return bad("Params.MaxMembers %d out of range [1, %d]", c.Params.MaxMembers, c.Limits.MaxMembers)
	case c.Params.LeaseTicks == 0:
		return bad("Params.LeaseTicks must be positive")
	case c.Params.LeaseTicks <= LeaseFloor(c.TurnTicks, c.PingTimeoutTicks):
		return bad("Params.LeaseTicks %d must exceed 2*(TurnTicks+PingTimeoutTicks) = %d: a member's lease is renewed by the SYNC that ends the turn after the one it answered in",
			c.Params.LeaseTicks, LeaseFloor(c.TurnTicks, c.PingTimeoutTicks))
	case c.RetryTicks <= c.LazyTicks:
		return bad("RetryTicks %d must exceed LazyTicks %d", c.RetryTicks, c.LazyTicks)
	case c.PingTimeoutTicks > c.TurnTicks:
		return bad("PingTimeoutTicks %d must not exceed TurnTicks %d", c.PingTimeoutTicks, c.TurnTicks)
	case c.LogWindow < int(c.Params.TurnLength):
		return bad("LogWindow %d must hold at least one turn (%d)", c.LogWindow, c.Params.TurnLength)
	}
	if err := CheckParams(c.Params, c.HeartbeatTicks); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return c.Limits.Check()
}

// CheckParams checks the group-wide parameters against each other and
// against a node's heartbeat (ping) interval: a joining node runs it on the
// group's parameters, which the founder chose.
func CheckParams(p wire.Params, heartbeatTicks int) error {
	auth := AuthorityTicks(p)
	switch {
	case p.LeaseMarginTicks < MinLeaseMargin(p.LeaseTicks):
		return fmt.Errorf("Params.LeaseMarginTicks %d must be at least %d: it covers a %d ppm clock drift over the lease and two ticks",
			p.LeaseMarginTicks, MinLeaseMargin(p.LeaseTicks), MaxDriftPPM)
	case auth < 3*uint64(heartbeatTicks):
		return fmt.Errorf("Params.TakeoverTicks %d leaves an authority of %d ticks, less than three heartbeats (%d ticks each): a server would lose its authority to two lost pings",
			p.TakeoverTicks, auth, heartbeatTicks)
	case p.LeaseTicks < 2*p.TakeoverTicks:
		return fmt.Errorf("Params.LeaseTicks %d must be at least twice TakeoverTicks %d: a member in touch with the group keeps what it holds through a takeover only if its lease outlasts the timeout, the claims and the new server's first pings",
			p.LeaseTicks, p.TakeoverTicks)
	}
	return nil
}
