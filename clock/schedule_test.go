package clock

import (
	"errors"
	"math"
	"testing"
	"testing/quick"
)

// The paper's example (section 3.3): four members, five turns each; node zero
// is server while the timestamp is between 0 and 4.
func TestScheduleMatchesPaperExample(t *testing.T) {
	s, err := NewSchedule([]uint64{3, 1, 0, 2}, 5)
	if err != nil {
		t.Fatal(err)
	}
	for ts := uint64(0); ts < 40; ts++ {
		got, ok := s.ServerAt(ts)
		want := (ts / 5) % 4
		if !ok || got != want {
			t.Fatalf("ServerAt(%d) = %d, %v; want %d", ts, got, ok, want)
		}
	}
	start, stop := s.TurnBounds(3)
	if start != 0 || stop != 4 {
		t.Fatalf("TurnBounds(3) = %d..%d, want 0..4", start, stop)
	}
	if !s.IsLastSlot(4) || s.IsLastSlot(3) || !s.IsLastSlot(9) {
		t.Fatal("IsLastSlot wrong around the turn boundary at 4/5")
	}
}

func TestNewScheduleRejectsBadInput(t *testing.T) {
	if _, err := NewSchedule([]uint64{1}, 0); !errors.Is(err, ErrTurnLength) {
		t.Fatalf("turn 0: err = %v", err)
	}
	if _, err := NewSchedule([]uint64{1, 2, 1}, 3); !errors.Is(err, ErrDuplicateMember) {
		t.Fatalf("duplicate: err = %v", err)
	}
	empty, err := NewSchedule[uint64](nil, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := empty.ServerAt(7); ok {
		t.Fatal("empty view has a server")
	}
	if _, ok := empty.NextTurn(1, 0); ok {
		t.Fatal("empty view has a next turn")
	}
}

func TestNextTurnIsFirstAlignedTurnOfMember(t *testing.T) {
	s, _ := NewSchedule([]uint64{10, 20, 30}, 4)
	cases := []struct {
		id   uint64
		from uint64
		want uint64
	}{
		{10, 0, 0},
		{20, 0, 4},
		{30, 0, 8},
		{10, 1, 12}, // turn 0 already started
		{20, 4, 4},
		{20, 5, 16},
		{30, 13, 20},
	}
	for _, c := range cases {
		got, ok := s.NextTurn(c.id, c.from)
		if !ok || got != c.want {
			t.Errorf("NextTurn(%d, %d) = %d, %v; want %d", c.id, c.from, got, ok, c.want)
		}
	}
	if _, ok := s.NextTurn(99, 0); ok {
		t.Error("NextTurn of a non-member succeeded")
	}
	if _, ok := s.NextTurn(30, math.MaxUint64-2); ok {
		t.Error("NextTurn past 2^64 succeeded")
	}
}

// NextTurn checked against a brute-force scan over random views.
func TestNextTurnAgainstBruteForce(t *testing.T) {
	f := func(n uint8, turn uint8, pick uint8, from uint16) bool {
		size := int(n%9) + 1
		l := uint64(turn%7) + 1
		ids := make([]uint64, size)
		for i := range ids {
			ids[i] = uint64(i*3 + 1)
		}
		s, err := NewSchedule(ids, l)
		if err != nil {
			return false
		}
		id := ids[int(pick)%size]
		got, ok := s.NextTurn(id, uint64(from))
		var want uint64
		for ts := uint64(from); ; ts++ {
			if srv, _ := s.ServerAt(ts); ts%l == 0 && srv == id {
				want = ts
				break
			}
		}
		return ok && got == want
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 2000}); err != nil {
		t.Fatal(err)
	}
}

func TestTurnOfCurrentOrNext(t *testing.T) {
	s, _ := NewSchedule([]uint64{1, 2}, 3)
	if start, stop, ok := s.TurnOf(1, 2); !ok || start != 0 || stop != 2 {
		t.Fatalf("current turn: %d..%d %v", start, stop, ok)
	}
	if start, stop, ok := s.TurnOf(1, 3); !ok || start != 6 || stop != 8 {
		t.Fatalf("next turn: %d..%d %v", start, stop, ok)
	}
}

func TestAfterWrapsInIDOrder(t *testing.T) {
	s, _ := NewSchedule([]uint64{5, 2, 9}, 1)
	for _, c := range [][2]uint64{{2, 5}, {5, 9}, {9, 2}, {3, 5}, {10, 2}} {
		if got, ok := s.After(c[0]); !ok || got != c[1] {
			t.Errorf("After(%d) = %d, want %d", c[0], got, c[1])
		}
	}
}

// Every node that holds the same view computes the same server whatever order
// it learned the members in.
func TestScheduleIndependentOfInputOrder(t *testing.T) {
	a, _ := NewSchedule([]uint64{4, 8, 15, 16, 23, 42}, 7)
	b, _ := NewSchedule([]uint64{42, 23, 16, 15, 8, 4}, 7)
	for ts := uint64(0); ts < 500; ts++ {
		x, _ := a.ServerAt(ts)
		y, _ := b.ServerAt(ts)
		if x != y {
			t.Fatalf("T=%d: %d vs %d", ts, x, y)
		}
	}
}
