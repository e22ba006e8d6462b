package wire

import (
	"math"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"math/rand/v2"
	"strings"
	"testing"
)

// boundLimits allow the longest names and addresses the bounds cover.
func boundLimits() Limits {
	l := DefaultLimits()
	l.MaxName, l.MaxAddr, l.MaxSnapshot = 1024, 1024, 64<<20
	return l
}

// widestSnapshot has every integer at its widest encoding, names and
// addresses at their longest, full epoch marks, long decided lists and queues:
// the snapshot the bounds must still cover, and nearly meet.
func widestSnapshot(members, resources, waiters, decided int) *Snapshot {
	const top = math.MaxUint64
	s := &Snapshot{
		Instance: top, T: top, NextID: NodeID(top),
		Params: Params{TurnLength: top, MaxMembers: math.MaxUint32, LeaseTicks: top, LeaseMarginTicks: top, TickMicros: top, TakeoverTicks: top},
		Epoch:  top, Backup: NodeID(top - 1), ViewT: top,
	}
	for i := range MaxEpochMarks {
		s.Epochs = append(s.Epochs, EpochMark{Epoch: top - MaxEpochMarks + 1 + uint64(i), T: top - MaxEpochMarks + 1 + uint64(i)})
	}
	for i := range members {
		m := MemberState{ID: NodeID(top - uint64(members+1-i)), Inc: top, Addr: strings.Repeat("a", 1024), Silence: top, Floor: top - uint64(decided) - 1, Observer: i%2 == 1, Transient: true}
		for k := range decided {
			m.Decided = append(m.Decided, m.Floor+1+uint64(k))
		}
		s.Members = append(s.Members, m)
	}
	for i := range resources {
		r := ResourceState{Name: strings.Repeat("n", 1020) + string(rune('a'+i/26%26)) + string(rune('a'+i%26)), Holder: NodeID(top), HolderReq: top, Token: top}
		for range waiters {
			r.Queue = append(r.Queue, Waiter{Node: NodeID(top), Req: top, Since: top})
		}
		s.Resources = append(s.Resources, r)
	}
	return s
}

// randomSnapshot has lengths on both sides of msgpack's size classes
// (strings of 31/32 and 255/256 bytes, lists of 15/16 entries) and integers
// of every width.
func randomSnapshot(rng *rand.Rand) *Snapshot {
	num := func() uint64 { return rng.Uint64() >> rng.IntN(64) }
	text := func() string { return strings.Repeat("x", []int{0, 1, 31, 32, 255, 256, 1023}[rng.IntN(7)]) }
	s := &Snapshot{Instance: 1 + num(), T: num(), Params: Params{TurnLength: 2 + num()>>1, MaxMembers: uint32(num()), LeaseTicks: num()}, Epoch: 1, Backup: NodeID(num()), ViewT: num()}
	s.Epochs = []EpochMark{{Epoch: 1, T: 0}}
	nm := rng.IntN(20)
	for i := range nm {
		m := MemberState{ID: NodeID(i + 1), Inc: num(), Addr: text(), Silence: num(), Floor: num() >> 1}
		for d, k := m.Floor, rng.IntN(20); k > 0; k-- {
			d += 1 + num()>>8
			m.Decided = append(m.Decided, d)
		}
		s.Members = append(s.Members, m)
	}
	s.NextID = NodeID(nm + 1)
	for i := range rng.IntN(20) {
		r := ResourceState{Name: string(rune('a'+i)) + text(), Holder: NodeID(num()), HolderReq: num(), Token: num()}
		for range rng.IntN(20) {
			r.Queue = append(r.Queue, Waiter{Node: NodeID(num()), Req: num(), Since: num()})
		}
		s.Resources = append(s.Resources, r)
	}
	return s
}

// TestSnapshotBoundCoversTheEncoding: a server admits requests against
// SnapshotBound, so an encoding longer than the bound is a state that may not
// fit a state transfer. The widest snapshot also shows the bound is not so
// loose that it wastes the room.
func TestSnapshotBoundCoversTheEncoding(t *testing.T) {
	c, err := NewCodec(boundLimits())
	if err != nil {
		t.Fatal(err)
	}
	check := func(name string, s *Snapshot) (encoded, bound int) {
		t.Helper()
		b, err := c.EncodeSnapshot(s)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if bound = SnapshotBound(s); len(b) > bound {
			t.Fatalf("%s: encodes to %d bytes, over its bound %d", name, len(b), bound)
		}
		return len(b), bound
	}
	for _, shape := range [][4]int{{0, 0, 0, 0}, {1, 0, 0, 0}, {3, 2, 1, 1}, {16, 16, 16, 16}, {40, 300, 20, 1000}} {
		encoded, bound := check("widest", widestSnapshot(shape[0], shape[1], shape[2], shape[3]))
		if bound-encoded > 16+bound/50 {
			t.Errorf("widest %v: bound %d is more than 2%% over the encoding, %d bytes", shape, bound, encoded)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		s := randomSnapshot(rng)
		if err := s.Validate(boundLimits()); err != nil {
			t.Fatalf("random snapshot %d does not validate: %v", i, err)
		}
		check("random", s)
	}
}

// TestPartBoundsCoverTheirParts checks each bound on its own, at the widest
// encoding of its part: in the sum, one bound's slack could hide another's
// shortfall.
func TestPartBoundsCoverTheirParts(t *testing.T) {
	encodedLen := func(v any) int {
		var b []byte
		if err := codec.NewEncoderBytes(&b, handle).Encode(v); err != nil {
			t.Fatal(err)
		}
		return len(b)
	}
	s := widestSnapshot(1, 1, 1, 70000)
	r := s.Resources[0]
	r.Name = strings.Repeat("n", 1024)
	w := r.Queue[0]
	r.Queue = make([]Waiter, 0, 70000)
	for range 70000 {
		r.Queue = append(r.Queue, w)
	}
	m := s.Members[0]
	for _, c := range []struct {
		part                  string
		encoded, bound, slack int
	}{
		{"Waiter", encodedLen(w), WaiterBound, 0},
		{"ResourceState", encodedLen(r), ResourceBound(len(r.Name)) + len(r.Queue)*WaiterBound, 0},
		{"MemberState", encodedLen(m), MemberBound(len(m.Addr), len(m.Decided)), 0},
		{"Snapshot", encodedLen(&Snapshot{Instance: s.Instance, T: s.T, NextID: s.NextID, Params: s.Params, Members: make([]MemberState, 0), Resources: make([]ResourceState, 0), Epoch: s.Epoch, Backup: s.Backup, ViewT: s.ViewT, Epochs: s.Epochs}), SnapshotOverhead, 10}, // three lists' headers at their narrowest
	} {
		if c.encoded > c.bound {
			t.Errorf("%s: widest encodes to %d bytes, over its bound %d", c.part, c.encoded, c.bound)
		}
		if c.bound-c.encoded > c.slack {
			t.Errorf("%s: bound %d is %d bytes over the widest encoding", c.part, c.bound, c.bound-c.encoded)
		}
	}
}
