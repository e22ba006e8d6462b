package clock

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// Timestamp is the group timestamp T of the rotating-arbiter protocol. Only
// the server advances it, once for each decision it makes; the turn schedule
// maps every value to exactly one member. It is 64 bits wide so that it never
// wraps in the lifetime of a group.
type Timestamp = uint64

// Errors returned by NewSchedule.
var (
	// ErrTurnLength means the turn length is zero.
	ErrTurnLength = errors.New("clock: turn length must be at least 1")
	// ErrDuplicateMember means a member ID appears twice in the view.
	ErrDuplicateMember = errors.New("clock: duplicate member in view")
)

// Schedule is the turn schedule for one view of the group: the members in
// logical-ID order and the turn length (the number of timestamps in each
// member's turn). The server for timestamp t is member
// (t / turn) mod len(view) in that order, so every node that holds the same
// view computes the same server for the same t.
//
// A Schedule is immutable; a view change makes a new one ("recalculate the
// starting and ending time for its turn", paper section 3.1).
type Schedule[ID cmp.Ordered] struct {
	members []ID
	turn    uint64
}

// NewSchedule returns the schedule for the given members (in any order) and
// turn length. The member slice is copied. An empty view is allowed: it has
// no server.
func NewSchedule[ID cmp.Ordered](members []ID, turn uint64) (Schedule[ID], error) {
	if turn == 0 {
		return Schedule[ID]{}, ErrTurnLength
	}
	sorted := slices.Clone(members)
	slices.Sort(sorted)
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			return Schedule[ID]{}, fmt.Errorf("%w: %v", ErrDuplicateMember, sorted[i])
		}
	}
	return Schedule[ID]{members: sorted, turn: turn}, nil
}

// Len is the number of members in the view.
func (s Schedule[ID]) Len() int { return len(s.members) }

// TurnLength is the number of timestamps in one turn.
func (s Schedule[ID]) TurnLength() uint64 { return s.turn }

// Members returns the view in logical-ID order. The caller must not modify it.
func (s Schedule[ID]) Members() []ID { return s.members }

// View returns a copy of the view in logical-ID order, for building the next
// one.
func (s Schedule[ID]) View() []ID { return slices.Clone(s.members) }

// Contains reports whether id is in the view.
func (s Schedule[ID]) Contains(id ID) bool {
	_, ok := slices.BinarySearch(s.members, id)
	return ok
}

// ServerAt returns the member that is server for timestamp t, and false if
// the view is empty.
func (s Schedule[ID]) ServerAt(t Timestamp) (ID, bool) {
	if len(s.members) == 0 {
		var zero ID
		return zero, false
	}
	return s.members[(t/s.turn)%uint64(len(s.members))], true
}

// TurnBounds returns the first and last timestamp of the turn that contains
// t (the paper's start_time and stop_time, both inclusive).
func (s Schedule[ID]) TurnBounds(t Timestamp) (start, stop Timestamp) {
	start = t - t%s.turn
	return start, start + s.turn - 1
}

// IsLastSlot reports whether t is the last timestamp of its turn. The
// decision made at that timestamp must hand the turn over (SYNC, paper
// section 3.3), so that no other decision can move the server role
// implicitly.
func (s Schedule[ID]) IsLastSlot(t Timestamp) bool { return t%s.turn == s.turn-1 }

// NextTurn returns the first timestamp at or after "from" that starts a turn
// of member id, and false if id is not in the view or the result would not
// fit in 64 bits.
func (s Schedule[ID]) NextTurn(id ID, from Timestamp) (Timestamp, bool) {
	idx, ok := slices.BinarySearch(s.members, id)
	if !ok {
		return 0, false
	}
	n := uint64(len(s.members))
	k := from / s.turn // index of the turn that contains "from"
	if from%s.turn != 0 {
		k++ // that turn has already started; the next one is the first candidate
	}
	delta := (uint64(idx) + n - k%n) % n
	k += delta
	if k < delta || k > (^uint64(0))/s.turn {
		return 0, false
	}
	return k * s.turn, true
}

// TurnOf returns the turn of member id that is current at t, or else the next
// one after t: what the paper's calculateMyTurnAsServer computes.
func (s Schedule[ID]) TurnOf(id ID, t Timestamp) (start, stop Timestamp, ok bool) {
	if srv, has := s.ServerAt(t); has && srv == id {
		start, stop = s.TurnBounds(t)
		return start, stop, true
	}
	start, ok = s.NextTurn(id, t)
	return start, start + s.turn - 1, ok
}

// After returns the member that follows id in logical-ID order, wrapping
// around; id itself need not be in the view. It returns false for an empty
// view.
func (s Schedule[ID]) After(id ID) (ID, bool) {
	if len(s.members) == 0 {
		var zero ID
		return zero, false
	}
	i, found := slices.BinarySearch(s.members, id)
	if found {
		i++
	}
	return s.members[i%len(s.members)], true
}
