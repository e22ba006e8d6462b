package wire

import (
	"fmt"
)

// Params are the group-wide protocol parameters. The founder fixes them and
// every member adopts them with the state, because two nodes that disagreed
// on them would compute different servers or leases.
type Params struct {
	_struct    struct{} `codec:",toarray"`
	TurnLength uint64   // timestamps per turn; the last one is the SYNC
	MaxMembers uint32   // group size limit: beyond it, GROUP_FULL
	// LeaseTicks is how long a member may hold resources on the strength of
	// its last confirmed contact with the group; LeaseMarginTicks is how much
	// longer the group waits before it reclaims them, to cover one-way delay
	// and clock-rate drift.
	LeaseTicks       uint64
	LeaseMarginTicks uint64
	// TickMicros is the tick length the founder runs with, so that a runtime
	// can refuse to join with a different one (ticks measure the lease).
	TickMicros uint64
	// TakeoverTicks is how long a member must have heard no ping from a
	// server before it votes for (or asks for) a takeover. A server's
	// authority lasts a little less than this after each ping a majority
	// answered, so no server decides once a takeover has its votes. It is
	// group-wide because the server's authority is bounded by the voters'
	// timeout.
	TakeoverTicks uint64
}

// MemberState is one member in the replicated state.
type MemberState struct {
	_struct struct{} `codec:",toarray"`
	ID      NodeID
	Inc     uint64
	Addr    string
	// Silence is how many ticks in a row, summed over the turns of the
	// servers that did not hear from it, the member has been silent.
	Silence uint64
	// Floor and Decided make requests idempotent: every request ID of this
	// member up to Floor, and every ID in Decided, has been decided.
	Floor   uint64
	Decided []uint64
	// Observer: the member neither votes nor serves (see OkToJoin).
	// Transient: it asked to be one (see OkToJoin.Transient).
	Observer  bool
	Transient bool
}

// Waiter is a queued request.
type Waiter struct {
	_struct struct{} `codec:",toarray"`
	Node    NodeID
	Req     uint64
	Since   uint64 // T of the decision that queued it
}

// ResourceState is one resource in the replicated state: its holder, the
// holder's request and fencing token, and its FIFO queue.
type ResourceState struct {
	_struct   struct{} `codec:",toarray"`
	Name      string
	Holder    NodeID
	HolderReq uint64
	Token     uint64
	Queue     []Waiter
}

// EpochMark records where an epoch began: the timestamp of its Takeover
// decision (for the founding epoch, the group's first timestamp).
type EpochMark struct {
	_struct struct{} `codec:",toarray"`
	Epoch   uint64
	T       uint64
}

// MaxEpochMarks bounds the epoch history a state keeps: enough to tell a
// member that fell behind by a few takeovers whether its log is a prefix of
// the group's; one that fell further behind takes a state transfer.
const MaxEpochMarks = 16

// Snapshot is the whole replicated state at timestamp T, as sent in a state
// transfer. Members are in ID order and resources in name order.
type Snapshot struct {
	_struct   struct{} `codec:",toarray"`
	Instance  uint64
	T         uint64
	NextID    NodeID
	Params    Params
	Members   []MemberState
	Resources []ResourceState
	// Epoch is the epoch of the last decision applied; Backup the member
	// that backs the current server up; ViewT the timestamp of the last
	// change of the view or epoch; Epochs where the recent epochs began,
	// oldest first, the last being Epoch's.
	Epoch  uint64
	Backup NodeID
	ViewT  uint64
	Epochs []EpochMark
}

// Validate checks a snapshot against the limits and its own invariants
// (sorted, unique, queues within the group size, decided requests above
// their member's floor).
func (s *Snapshot) Validate(l Limits) error {
	if err := checkLen("Snapshot.Members", len(s.Members), l.MaxMembers); err != nil {
		return err
	}
	if err := checkLen("Snapshot.Resources", len(s.Resources), l.MaxResources); err != nil {
		return err
	}
	if s.Instance == 0 {
		// The founder's incarnation, never 0; a header's 0 means "no
		// state yet", which receivers do not check against theirs.
		return fmt.Errorf("%w: Snapshot.Instance is 0", ErrLimit)
	}
	if s.Params.TurnLength < 2 {
		return fmt.Errorf("%w: Snapshot.Params.TurnLength %d below 2", ErrLimit, s.Params.TurnLength)
	}
	voters := 0
	for i, m := range s.Members {
		if m.ID == 0 || m.ID >= s.NextID || (i > 0 && m.ID <= s.Members[i-1].ID) {
			return fmt.Errorf("%w: Snapshot.Members not strictly increasing below NextID at %d", ErrLimit, i)
		}
		if !m.Observer {
			voters++
		}
		if m.Observer && !m.Transient {
			return fmt.Errorf("%w: Snapshot.Members: node %d is an observer that did not ask to be one", ErrLimit, m.ID)
		}
		if m.Observer && m.ID == s.Backup {
			return fmt.Errorf("%w: Snapshot.Backup, node %d, is an observer", ErrLimit, m.ID)
		}
		if err := checkName("Snapshot.Members.Addr", m.Addr, l.MaxAddr, false); err != nil {
			return err
		}
		if err := checkLen("Snapshot.Members.Decided", len(m.Decided), l.MaxDecided); err != nil {
			return err
		}
		for k, req := range m.Decided {
			// A member looks its requests up in the list by binary search.
			if req <= m.Floor || (k > 0 && req <= m.Decided[k-1]) {
				return fmt.Errorf("%w: Snapshot.Members.Decided of node %d not strictly increasing above its floor at %d", ErrLimit, m.ID, k)
			}
		}
	}
	if len(s.Members) > 0 && voters == 0 {
		return fmt.Errorf("%w: Snapshot.Members are all observers: nobody could serve", ErrLimit)
	}
	if err := checkLen("Snapshot.Epochs", len(s.Epochs), MaxEpochMarks); err != nil {
		return err
	}
	for i, e := range s.Epochs {
		if i > 0 && (e.Epoch <= s.Epochs[i-1].Epoch || e.T <= s.Epochs[i-1].T) {
			return fmt.Errorf("%w: Snapshot.Epochs not increasing at %d", ErrLimit, i)
		}
	}
	if n := len(s.Epochs); n == 0 || s.Epochs[n-1].Epoch != s.Epoch || s.Epochs[n-1].T > s.T {
		return fmt.Errorf("%w: Snapshot.Epochs does not end with epoch %d at or before T", ErrLimit, s.Epoch)
	}
	for i, r := range s.Resources {
		if err := checkName("Snapshot.Resources.Name", r.Name, l.MaxName, true); err != nil {
			return err
		}
		if i > 0 && r.Name <= s.Resources[i-1].Name {
			return fmt.Errorf("%w: Snapshot.Resources not strictly increasing at %d", ErrLimit, i)
		}
		if err := checkLen("Snapshot.Resources.Queue", len(r.Queue), l.MaxMembers); err != nil {
			return err
		}
	}
	return nil
}

// EncodeSnapshot encodes a snapshot for a state transfer.
func (c *Codec) EncodeSnapshot(s *Snapshot) ([]byte, error) {
	if err := s.Validate(c.limits); err != nil {
		return nil, err
	}
	c.body = c.body[:0]
	c.enc.ResetBytes(&c.body)
	if err := c.enc.Encode(s); err != nil {
		return nil, fmt.Errorf("wire: encoding snapshot: %w", err)
	}
	if len(c.body) > c.limits.MaxSnapshot {
		return nil, fmt.Errorf("%w: snapshot of %d bytes, limit %d", ErrTooLarge, len(c.body), c.limits.MaxSnapshot)
	}
	return append([]byte(nil), c.body...), nil
}

// DecodeSnapshot decodes and validates a reassembled state transfer.
func (c *Codec) DecodeSnapshot(b []byte) (*Snapshot, error) {
	if len(b) > c.limits.MaxSnapshot {
		return nil, fmt.Errorf("%w: snapshot of %d bytes, limit %d", ErrTooLarge, len(b), c.limits.MaxSnapshot)
	}
	s := &Snapshot{}
	if err := c.unmarshal(b, s); err != nil {
		return nil, err
	}
	if err := s.Validate(c.limits); err != nil {
		return nil, err
	}
	return s, nil
}
