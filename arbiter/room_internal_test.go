package arbiter

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/mcnode/mcnode/wire"
)

// TestFullStateStillFitsAfterEveryJoin fills a state the way the server
// admits requests (noRoomFor), with every integer at its widest encoding and
// every name and address at its longest, then adds what the reserve is for:
// every member the group may still admit, and decided lists longer by a
// sixteenth of the limit. The state must still fit a state transfer; and
// it must have been filled close to the limit, or the check wastes room.
func TestFullStateStillFitsAfterEveryJoin(t *testing.T) {
	l := wire.DefaultLimits()
	l.MaxSnapshot = 64 << 10
	p := DefaultParams()
	p.MaxMembers = 24
	codec, err := wire.NewCodec(l)
	if err != nil {
		t.Fatal(err)
	}
	const top = math.MaxUint64
	s := newState(top, p)
	s.t = top
	for e := range uint64(wire.MaxEpochMarks) {
		s.markEpoch(top-16+e, top-16+e)
	}
	addr := strings.Repeat("a", l.MaxAddr)
	join := func(k int) {
		if !s.addMember(wire.NodeID(top-1000+uint64(k)), top-uint64(k), addr, false, false) {
			t.Fatalf("member %d not added", k)
		}
	}
	for k := range 4 {
		join(k)
	}
	s.backup = s.members[1].id
	locks, waiters := 0, 0
	for i := 0; ; i++ {
		// Every lock held by one member and waited for by another; every
		// request left in its member's decided list (floor 0).
		name := fmt.Sprintf("%0*d", l.MaxName, i/2)
		if s.noRoomFor(name, l) != room {
			break
		}
		if s.request(&wire.Grant{T: top - 1e6 + uint64(i), Node: s.members[i%4].id, Req: top - 1e6 + uint64(i), Resource: name}) {
			waiters++
		} else {
			locks++
		}
	}
	filled := s.size
	for k := len(s.members); k < int(p.MaxMembers); k++ {
		join(k)
	}
	for req := uint64(top - 3e6); s.size < filled+(int(p.MaxMembers)-4)*wire.MemberBound(l.MaxAddr, 0)+l.MaxSnapshot/16; req += 2 {
		s.markDecided(s.members[0], req, 0)
	}
	b, err := codec.EncodeSnapshot(s.snapshot())
	if err != nil {
		t.Fatalf("%d locks and %d waiters, then %d members and longer decided lists: %v", locks, waiters, len(s.members), err)
	}
	if bound := wire.SnapshotBound(s.snapshot()); s.size != bound || len(b) > bound {
		t.Fatalf("size %d, bound %d, encoding %d bytes", s.size, bound, len(b))
	}
	if len(b) < l.MaxSnapshot*15/16-wire.ResourceBound(l.MaxName)-100 {
		t.Errorf("the full state encodes to %d bytes: room wasted under a %d-byte limit", len(b), l.MaxSnapshot)
	}
	t.Logf("%d locks and %d waiters; with %d members and longer decided lists %d bytes (bound %d) of %d", locks, waiters, len(s.members), len(b), s.size, l.MaxSnapshot)
}

// A floor at the top of the range forgets every decided request below it
// (floor+1 wrapped to 0 and forgot none, and then no snapshot validated: a
// review's finding); and the server never passes on a floor at or above
// the request it comes with.
func TestFloorAtTheTopOfTheRange(t *testing.T) {
	s := newState(1, DefaultParams())
	s.addMember(1, 1, "a", false, false)
	m := s.members[0]
	s.markDecided(m, 5, 2)
	s.markDecided(m, 7, math.MaxUint64)
	if len(m.decided) != 0 || m.floor != math.MaxUint64 {
		t.Fatalf("floor %d, decided %v: want the top of the range and nothing listed", m.floor, m.decided)
	}
	s.epochs = []wire.EpochMark{{Epoch: 0, T: 0}}
	if err := s.snapshot().Validate(wire.DefaultLimits()); err != nil {
		t.Fatal(err)
	}
	if bound := wire.SnapshotBound(s.snapshot()); s.size != bound {
		t.Fatalf("size %d, bound %d", s.size, bound)
	}
}
