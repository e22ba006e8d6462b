package wire

import (
	"fmt"
	"slices"
	"unicode/utf8"
)

// Limits bounds every length that comes off the wire. Decode checks them
// before it allocates anything that depends on them; the encoder checks them
// before it sends, so that a node never sends what its peers would drop.
type Limits struct {
	// MaxDatagram is the largest datagram, header included. The default,
	// 1400 bytes, fits an Ethernet MTU with room for IP and UDP headers and a
	// tunnel. The hard ceiling is MaxUDPPayload.
	MaxDatagram int
	// MaxMembers bounds every list of members (group size, Missing, Unheard,
	// Remove, a resource's queue).
	MaxMembers int
	// MaxName bounds a resource name and an update topic, in bytes.
	MaxName int
	// MaxAddr bounds a member's direct address, in bytes.
	MaxAddr int
	// MaxUpdate bounds the data of an application state update, in bytes.
	MaxUpdate int
	// MaxResources bounds the resources in a snapshot.
	MaxResources int
	// MaxDecided bounds a member's list of decided requests in a snapshot:
	// those decided above one of its requests not yet decided (one in
	// flight), which its floor passes once that one is decided.
	MaxDecided int
	// MaxSnapshot bounds an encoded snapshot, in bytes.
	MaxSnapshot int
}

// MaxUDPPayload is the largest payload of a UDP datagram over IPv4.
const MaxUDPPayload = 65507

// HeaderLen is the size of the datagram header in bytes.
const HeaderLen = 72

// DefaultLimits returns the limits every node uses unless configured
// otherwise.
func DefaultLimits() Limits {
	return Limits{
		MaxDatagram:  1400,
		MaxMembers:   1024,
		MaxName:      128,
		MaxAddr:      128,
		MaxUpdate:    1024,
		MaxResources: 65536,
		MaxDecided:   65536,
		MaxSnapshot:  8 << 20,
	}
}

// Check reports a limit that is out of range, naming the field.
func (l Limits) Check() error {
	switch {
	case l.MaxDatagram < 512 || l.MaxDatagram > MaxUDPPayload:
		return fmt.Errorf("wire: Limits.MaxDatagram %d out of range [512, %d]", l.MaxDatagram, MaxUDPPayload)
	case l.MaxMembers < 1:
		return fmt.Errorf("wire: Limits.MaxMembers %d must be at least 1", l.MaxMembers)
	case l.MaxName < 1 || l.MaxName > 1024:
		return fmt.Errorf("wire: Limits.MaxName %d out of range [1, 1024]", l.MaxName)
	case l.MaxAddr < 1 || l.MaxAddr > 1024:
		return fmt.Errorf("wire: Limits.MaxAddr %d out of range [1, 1024]", l.MaxAddr)
	case l.MaxUpdate < 0 || l.MaxUpdate > l.MaxDatagram:
		return fmt.Errorf("wire: Limits.MaxUpdate %d out of range [0, MaxDatagram]", l.MaxUpdate)
	case l.MaxResources < 1:
		return fmt.Errorf("wire: Limits.MaxResources %d must be at least 1", l.MaxResources)
	case l.MaxDecided < 1:
		return fmt.Errorf("wire: Limits.MaxDecided %d must be at least 1", l.MaxDecided)
	case l.MaxSnapshot < l.MaxDatagram:
		return fmt.Errorf("wire: Limits.MaxSnapshot %d smaller than MaxDatagram", l.MaxSnapshot)
	}
	return nil
}

func limitErr(field string, got, max int) error {
	return fmt.Errorf("%w: %s has %d, limit %d", ErrLimit, field, got, max)
}

// checkName validates a resource name or topic: valid UTF-8, within MaxName,
// and (when required) not empty.
func checkName(field, s string, max int, required bool) error {
	switch {
	case required && s == "":
		return fmt.Errorf("%w: %s is empty", ErrLimit, field)
	case len(s) > max:
		return limitErr(field, len(s), max)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrLimit, field)
	}
	return nil
}

func checkLen(field string, n, max int) error {
	if n > max {
		return limitErr(field, n, max)
	}
	return nil
}

// Validate implementations.

func (m *JoinRequest) Validate(l Limits) error {
	if err := checkName("JoinRequest.Addr", m.Addr, l.MaxAddr, false); err != nil {
		return err
	}
	return checkLen("JoinRequest.Missing", len(m.Missing), l.MaxMembers)
}

func (m *OkToJoin) Validate(l Limits) error {
	if m.ID == 0 {
		return fmt.Errorf("%w: OkToJoin.ID is zero", ErrLimit)
	}
	if err := checkDecisionStamp(m.T, m.Next); err != nil {
		return err
	}
	return checkName("OkToJoin.Addr", m.Addr, l.MaxAddr, false)
}

func (m *GroupFull) Validate(Limits) error { return checkDecisionStamp(m.T, m.Next) }

func (m *Greeting) Validate(l Limits) error {
	return checkName("Greeting.Addr", m.Addr, l.MaxAddr, false)
}

func (m *LeaveRequest) Validate(Limits) error { return nil }

func (m *Left) Validate(Limits) error { return checkDecisionStamp(m.T, m.Next) }

func (m *Request) Validate(l Limits) error {
	return checkName("Request.Resource", m.Resource, l.MaxName, true)
}

func (m *Grant) Validate(l Limits) error {
	if err := checkDecisionStamp(m.T, m.Next); err != nil {
		return err
	}
	return checkName("Grant.Resource", m.Resource, l.MaxName, true)
}

func (m *Release) Validate(l Limits) error {
	return checkName("Release.Resource", m.Resource, l.MaxName, true)
}

func (m *Cancel) Validate(l Limits) error {
	return checkName("Cancel.Resource", m.Resource, l.MaxName, true)
}

func (m *Released) Validate(l Limits) error {
	if err := checkDecisionStamp(m.T, m.Next); err != nil {
		return err
	}
	return checkName("Released.Resource", m.Resource, l.MaxName, true)
}

func (m *Ping) Validate(l Limits) error {
	if m.Prev >= m.Probe && m.Prev != 0 {
		return fmt.Errorf("%w: Ping.Prev %d not before Probe %d", ErrLimit, m.Prev, m.Probe)
	}
	if err := checkLen("Ping.Answered", len(m.Answered), l.MaxMembers); err != nil {
		return err
	}
	return checkLen("Ping.Unanswered", len(m.Unanswered), l.MaxMembers)
}
func (m *PingReply) Validate(Limits) error { return nil }

func (m *Sync) Validate(l Limits) error {
	if err := checkDecisionStamp(m.T, m.Next); err != nil {
		return err
	}
	if err := checkLen("Sync.Unanswered", len(m.Unanswered), l.MaxMembers); err != nil {
		return err
	}
	if err := checkLen("Sync.Renew", len(m.Renew), l.MaxMembers); err != nil {
		return err
	}
	if changes := btoi(m.Remove != 0) + btoi(m.Promote != 0) + btoi(m.Demote != 0); changes > 1 {
		return fmt.Errorf("%w: Sync removes node %d, promotes node %d and demotes node %d: one change of the voters per decision", ErrLimit, m.Remove, m.Promote, m.Demote)
	}
	if m.Demote != 0 && m.Demote == m.Backup {
		return fmt.Errorf("%w: Sync demotes node %d and names it the backup", ErrLimit, m.Demote)
	}
	if err := checkLen("Sync.RemoveObservers", len(m.RemoveObservers), l.MaxMembers); err != nil {
		return err
	}
	named := []NodeID{m.Remove, m.Promote, m.Demote, m.Backup}
	seen := make(map[NodeID]bool, len(m.RemoveObservers)) // a forged list may be long: no O(n²)
	for _, id := range m.RemoveObservers {
		if id == 0 || slices.Contains(named, id) || seen[id] {
			return fmt.Errorf("%w: Sync removes observer %d twice, or also removes, promotes, demotes or names it the backup", ErrLimit, id)
		}
		seen[id] = true
	}
	if err := checkLen("Sync.Quiet", len(m.Quiet), l.MaxMembers); err != nil {
		return err
	}
	return checkLen("Sync.Unheard", len(m.Unheard), l.MaxMembers)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (m *Takeover) Validate(Limits) error {
	if err := checkDecisionStamp(m.T, m.Next); err != nil {
		return err
	}
	switch {
	case m.Server == 0:
		return fmt.Errorf("%w: Takeover.Server is zero", ErrLimit)
	case m.Epoch <= m.PrevEpoch:
		return fmt.Errorf("%w: Takeover.Epoch %d not above PrevEpoch %d", ErrLimit, m.Epoch, m.PrevEpoch)
	case m.Backup == m.Server:
		return fmt.Errorf("%w: Takeover.Backup is the server itself", ErrLimit)
	}
	return nil
}

func (m *Claim) Validate(Limits) error {
	if m.Epoch == 0 {
		return fmt.Errorf("%w: Claim.Epoch is zero", ErrLimit)
	}
	return nil
}

func (m *Vote) Validate(Limits) error {
	if m.Epoch == 0 {
		return fmt.Errorf("%w: Vote.Epoch is zero", ErrLimit)
	}
	return nil
}

func (m *Ack) Validate(Limits) error        { return nil }
func (m *AckRequest) Validate(Limits) error { return nil }

func (m *Nak) Validate(Limits) error          { return nil }
func (m *StateRequest) Validate(Limits) error { return nil }
func (m *NotMember) Validate(Limits) error    { return nil }

func (m *StateChunk) Validate(l Limits) error {
	maxChunks := l.MaxSnapshot/ChunkSize(l) + 1
	switch {
	case m.Count == 0 || int64(m.Count) > int64(maxChunks):
		return fmt.Errorf("%w: StateChunk.Count %d not in [1, %d]", ErrLimit, m.Count, maxChunks)
	case m.Index >= m.Count:
		return fmt.Errorf("%w: StateChunk.Index %d not below Count %d", ErrLimit, m.Index, m.Count)
	}
	return checkLen("StateChunk.Data", len(m.Data), ChunkSize(l))
}

func (m *Update) Validate(l Limits) error {
	if err := checkName("Update.Topic", m.Topic, l.MaxName, false); err != nil {
		return err
	}
	return checkLen("Update.Data", len(m.Data), l.MaxUpdate)
}

// checkDecisionStamp enforces that a decision moves time forward.
func checkDecisionStamp(t, next uint64) error {
	if next <= t {
		return fmt.Errorf("%w: decision Next %d not after T %d", ErrLimit, next, t)
	}
	return nil
}

// ChunkSize is the largest StateChunk.Data that fits one datagram under l,
// leaving room for the header and the chunk's own fields.
func ChunkSize(l Limits) int { return l.MaxDatagram - HeaderLen - 64 }
