package arbiter_test

import (
	"fmt"
	"testing"

	"github.com/mcnode/mcnode/arbiter"
	"github.com/mcnode/mcnode/internal/simtest"
	"github.com/mcnode/mcnode/wire"
)

// A newcomer in a group without a key cannot tell a forged state transfer
// from the group's: it installs any state that passes the codec's limits and
// Snapshot.Validate and lists its sender. Whatever such a state says (holders
// and waiters that are no members, a backup that is none, observers, odd
// parameters, decided lists in any order), the node must not panic on it,
// nor afterwards as it serves or follows that state, nor may the real group
// it then meets. A forged state of the real group's instance makes the
// victim a member of that group with a made-up log, as good as a rogue that
// joined, which a group without a key does not resist (README, "Hostile
// datagrams"); a state of another instance must not stop the real group.

// forgedStateVictim is the host the forged state goes to: the last of the
// fuzz group, kept from the others until the state is in.
const forgedStateVictim = 3

// forgerInc is the incarnation the forged state gives its sender, at rogue.
const forgerInc = 0xf0f0f0f1

// fuzzReader hands out a fuzzer's bytes as small numbers; past the end it
// gives zeros.
type fuzzReader []byte

func (r *fuzzReader) byte() byte {
	if len(*r) == 0 {
		return 0
	}
	b := (*r)[0]
	*r = (*r)[1:]
	return b
}

func (r *fuzzReader) bit() bool { return r.byte()&1 == 1 }

// small is 0..255, or with the top bit of a second byte a large number.
func (r *fuzzReader) small() uint64 {
	v := uint64(r.byte())
	if r.byte()&0x80 != 0 {
		v |= uint64(r.byte()) << 56
	}
	return v
}

// forgedSnapshot builds a state from the fuzzer's bytes, for the victim's
// incarnation, sent by the forger. It returns the forger's ID too.
func forgedSnapshot(data []byte, instance, victimInc uint64) (*wire.Snapshot, wire.NodeID) {
	r := fuzzReader(data)
	params := arbiter.DefaultConfig().Params
	if r.bit() {
		params.TurnLength = 2 + uint64(r.byte()%24)
		params.MaxMembers = uint32(r.byte() % 8)
		params.LeaseTicks = r.small()
		params.LeaseMarginTicks = r.small()
		params.TakeoverTicks = r.small()
	}
	if r.bit() {
		instance = r.small()
	}
	snap := &wire.Snapshot{Instance: instance, T: r.small() + uint64(r.byte()), Params: params, Epoch: 1 + uint64(r.byte()%4)}
	if r.bit() && snap.Epoch > 1 && snap.T > 0 {
		snap.Epochs = append(snap.Epochs, wire.EpochMark{Epoch: snap.Epoch - 1, T: 0})
	}
	snap.Epochs = append(snap.Epochs, wire.EpochMark{Epoch: snap.Epoch, T: snap.T - min(snap.T, uint64(r.byte()))})
	n := 2 + int(r.byte()%5)
	victim, forger := int(r.byte())%n, int(r.byte())%n
	if forger == victim {
		forger = (victim + 1) % n
	}
	addrs := []string{"h0", "h1", "h2", "h3", rogue, "elsewhere"}
	id := wire.NodeID(0)
	for i := 0; i < n; i++ {
		id += 1 + wire.NodeID(r.byte()%3)
		m := wire.MemberState{ID: id, Inc: r.small() | 1, Addr: addrs[int(r.byte())%len(addrs)], Silence: r.small(), Floor: r.small()}
		switch i {
		case victim:
			m.Inc = victimInc
		case forger:
			m.Inc, m.Addr = forgerInc, rogue
		}
		m.Transient = r.bit()
		m.Observer = m.Transient && r.bit()
		for k := r.byte() % 4; k > 0; k-- {
			m.Decided = append(m.Decided, m.Floor+uint64(r.byte()))
		}
		snap.Members = append(snap.Members, m)
	}
	snap.NextID = id + 1 + wire.NodeID(r.byte()%2)
	snap.Backup = wire.NodeID(r.byte()) % (snap.NextID + 1)
	snap.ViewT = r.small()
	anyNode := func() wire.NodeID { return wire.NodeID(r.byte()) % (snap.NextID + 1) }
	for i := r.byte() % 4; i > 0; i-- {
		res := wire.ResourceState{Name: fmt.Sprintf("r%d", len(snap.Resources)), Holder: anyNode(), HolderReq: r.small(), Token: r.small()}
		for k := r.byte() % 4; k > 0; k-- {
			res.Queue = append(res.Queue, wire.Waiter{Node: anyNode(), Req: r.small(), Since: r.small()})
		}
		snap.Resources = append(snap.Resources, res)
	}
	return snap, snap.Members[forger].ID
}

// forgedStateGroup is a group of three with a fourth host, the victim, that
// hears nobody but the forger until isolated is cleared.
func forgedStateGroup(tb testing.TB) (s *simtest.Sim, isolated *bool) {
	tb.Helper()
	isolated = new(bool)
	*isolated = true
	s = simtest.New(simtest.Options{Seed: 17, Hosts: 4,
		Tweak: func(c *arbiter.Config) { c.Authenticated = false },
		Drop: func(d *simtest.Datagram) bool {
			return *isolated && (d.From == forgedStateVictim || d.To == forgedStateVictim)
		}})
	if !s.RunUntil(s.Now+200*simtest.SubTicks, func() bool {
		for _, h := range s.Hosts[:forgedStateVictim] {
			if !h.Node.Joined() {
				return false
			}
		}
		return true
	}) {
		tb.Fatal("the group did not form")
	}
	return s, isolated
}

// sendForgedState sends the victim a forged state, in chunks, from rogue. It
// reports whether the state passed the limits (else nothing is sent), and
// whether it was of the real group's instance.
func sendForgedState(tb testing.TB, s *simtest.Sim, data []byte) (sent, sameInstance bool) {
	tb.Helper()
	x := s.Hosts[forgedStateVictim]
	snap, forger := forgedSnapshot(data, s.Hosts[0].Node.Instance(), x.Node.Inc())
	codec, err := wire.NewCodec(wire.DefaultLimits())
	if err != nil {
		tb.Fatal(err)
	}
	encoded, err := codec.EncodeSnapshot(snap)
	if err != nil {
		return false, false
	}
	h := wire.Header{Group: wire.GroupID("sim"), Instance: snap.Instance, From: forger, Inc: forgerInc, T: snap.T,
		Epoch: snap.Epoch, LogEpoch: snap.Epoch}
	size := wire.ChunkSize(wire.DefaultLimits())
	count := (len(encoded) + size - 1) / size
	digest := arbiter.SnapshotDigestForTest(snap)
	for i := 0; i < count; i++ {
		part := encoded[i*size : min(len(encoded), (i+1)*size)]
		_ = x.Node.Step(rogue, h, &wire.StateChunk{T: snap.T, Index: uint32(i), Count: uint32(count), Data: part, Digest: digest})
		s.Flush(x)
	}
	return true, snap.Instance == s.Hosts[0].Node.Instance()
}

// runAfterForgedState lets the victim live on the forged state alone, then
// meet the real group. Unless the state was of the real group's instance,
// that group must still grant.
func runAfterForgedState(t *testing.T, s *simtest.Sim, isolated *bool, sameInstance bool) {
	x := s.Hosts[forgedStateVictim]
	for _, name := range []string{"r0", "r1", "new"} {
		if _, err := x.Node.Acquire(name); err == nil {
			s.Flush(x)
		}
	}
	s.RunTicks(150)
	for _, h := range x.Node.Held() {
		_ = x.Node.Release(h.Resource)
	}
	s.Flush(x)
	*isolated = false
	s.RunTicks(150)
	_ = x.Node.Members()
	_ = x.Node.Resources()
	_ = x.Node.Quorum()
	if sameInstance {
		return
	}
	h := s.Hosts[1]
	if _, err := h.Node.Acquire("after"); err != nil {
		t.Fatalf("h1 Acquire: %v", err)
	}
	s.Flush(h)
	waitUntil(t, s, 1500, "the real group grants after a forged state met it", func() bool { return holds(h, "after") })
}

// The harness reaches the node: some forged states from the corpus are
// installed (else the fuzz target below could not fail for a reason in
// install).
func TestForgedStatesAreInstalled(t *testing.T) {
	installed, foreign := 0, 0
	for i, data := range forgedStateCorpus() {
		s, isolated := forgedStateGroup(t)
		sent, same := sendForgedState(t, s, data)
		if !sent {
			continue
		}
		if s.Hosts[forgedStateVictim].Node.Stats().Snapshots > 0 {
			installed++
			if !same {
				foreign++
			}
		}
		t.Run(fmt.Sprint(i), func(t *testing.T) { runAfterForgedState(t, s, isolated, same) })
	}
	if installed < 3 || foreign < 1 {
		t.Fatalf("%d of the corpus's forged states installed, %d of another instance; want at least 3 and 1", installed, foreign)
	}
}

// forgedStateCorpus starts the fuzzer off: states with a holder that is no
// member, a queue of strangers, a backup that is an observer's ID, odd
// parameters, another instance (5), and instance 0, which no group has
// (the instance is its founder's incarnation, never 0): a newcomer that
// installed it took every datagram of the real group for another run's,
// while the group took the newcomer's, and the group stopped granting
// (a review's fuzzing); Snapshot.Validate now refuses it.
func forgedStateCorpus() [][]byte {
	return [][]byte{
		{0, 1, 5, 0, 10, 0, 0, 1, 4, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 3, 5, 0, 0, 0, 0, 0, 0, 0, 1, 2, 9, 0, 0, 0, 0, 3, 7, 1, 2, 0, 0, 0},
		[]byte("1100000\x0001\x00020110000"),
		{0, 0, 10, 0, 0, 1, 4, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 3, 5, 0, 0, 0, 0, 0, 0, 0, 1, 2, 9, 0, 0, 0, 0, 3, 7, 1, 2, 0, 0, 0},
		{0, 0, 40, 0, 2, 1, 1, 2, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 2, 3, 3, 9, 9, 0, 9, 0, 0},
		{1, 2, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 3, 1, 0, 1, 0, 4, 0, 0, 0, 0, 1, 1, 1, 0, 0, 1, 2, 0, 0, 0, 1, 1, 3, 1},
		{0, 0, 200, 0, 3, 0, 0, 0, 2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 7, 1, 0, 0, 0, 3, 3, 3, 2},
	}
}

// FuzzInstalledState sends a newcomer a forged state built from the
// fuzzer's bytes, lets it live on it, then meet the real group.
//
//	go test ./arbiter -run '^$' -fuzz FuzzInstalledState -fuzztime 60s
func FuzzInstalledState(f *testing.F) {
	for _, data := range forgedStateCorpus() {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, isolated := forgedStateGroup(t)
		if sent, same := sendForgedState(t, s, data); sent {
			runAfterForgedState(t, s, isolated, same)
		}
	})
}
