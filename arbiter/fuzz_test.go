package arbiter_test

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/mcnode/mcnode/arbiter"
	"github.com/mcnode/mcnode/internal/simtest"
	"github.com/mcnode/mcnode/wire"
)

// No input crashes a node: whatever arrives that decodes, Step returns (an
// error says why it dropped it), and a decision that cannot be applied to
// the node's state changes nothing but marks the state suspect, which the
// node refetches.

// serverHeader is the header the server sends with now.
func serverHeader(srv *simtest.Host) wire.Header {
	rd := srv.Node.Ready()
	return rd.Header
}

// An OkToJoin that gives a newcomer an ID a member already has, with the
// server's sender fields (all readable on the wire), used to panic every
// member ("duplicate member in view"). Each member now refuses to apply it,
// marks its state suspect, fetches the state again and agrees with the
// group; the group goes on granting.
func TestForgedOkToJoinWithATakenID(t *testing.T) {
	for _, sender := range []string{"server", "nobody"} {
		t.Run(sender, func(t *testing.T) {
			s := newGroup(t, 3, 71, nil)
			srv, _, others := roles(t, s)
			h := serverHeader(srv)
			if sender == "nobody" {
				h.From, h.Inc = 0, 0x5eedf00d
			}
			for _, target := range s.Hosts {
				st := target.Node.T()
				forged := &wire.OkToJoin{T: st, Next: st + 1, Epoch: target.Node.Epoch(), Inc: 0xbad, ID: others[0].Node.ID(), Addr: "evil", Members: 3}
				_ = target.Node.Step("attacker", h, forged)
				s.Flush(target)
			}
			acquire(t, s, others[0], "r")
			waitUntil(t, s, 100, "a lock granted after the forgery", func() bool { return holds(others[0], "r") })
			waitUntil(t, s, 200, "every member agrees", func() bool {
				for _, x := range s.Hosts {
					if x.Node.Digest() != srv.Node.Digest() || len(x.Node.Members()) != 3 {
						return false
					}
				}
				return true
			})
			for _, v := range s.Check.Violations {
				t.Error(v)
			}
		})
	}
}

// A datagram with a member's sender fields and an epoch or a timestamp near
// the top of its range used to stop the group for good: every member
// promised the epoch (no later claim could be numbered above it), or chased
// the timestamp (every takeover found it exhausted, and every member NAKed
// forever). Each member now drops it as forged, and the group grants, takes
// over from its dead server and grants again.
func TestForgedFarAheadDatagramChangesNothing(t *testing.T) {
	for _, forge := range []string{"epoch", "log-epoch", "timestamp", "claim"} {
		t.Run(forge, func(t *testing.T) {
			s := newGroup(t, 3, 71, nil)
			srv, _, others := roles(t, s)
			h := serverHeader(srv)
			var m wire.Message = &wire.Ping{Turn: 1, Probe: 1}
			switch forge {
			case "epoch":
				h.Epoch = math.MaxUint64
			case "log-epoch":
				h.LogEpoch = math.MaxUint64
			case "timestamp":
				h.From, h.Inc = 9999, 0x5eedf00d // not even a member
				h.T = math.MaxUint64 - 1000
				m = &wire.Ack{}
			case "claim":
				m = &wire.Claim{Epoch: math.MaxUint64}
			}
			for _, target := range s.Hosts {
				if target == srv {
					continue
				}
				forged := target.Node.Stats().Forged
				if err := target.Node.Step("attacker", h, m); !errors.Is(err, arbiter.ErrForged) {
					t.Errorf("h%d: Step returned %v, want ErrForged", target.Index, err)
				}
				if target.Node.Stats().Forged != forged+1 {
					t.Errorf("h%d: the forgery was not counted", target.Index)
				}
				s.Flush(target)
			}
			acquire(t, s, others[0], "r")
			waitUntil(t, s, 200, "a lock granted after the forgery", func() bool { return holds(others[0], "r") })
			s.Crash(srv.Index)
			acquire(t, s, others[0], "r2")
			waitUntil(t, s, 1000, "a takeover grants after the server died", func() bool { return holds(others[0], "r2") })
			checkClean(t, s)
		})
	}
}

// A StateChunk whose Index is not below its Count used to panic Step when it
// came straight in (the decoder refuses it, the machine did not check).
func TestStateChunkOutOfRange(t *testing.T) {
	s := newGroup(t, 2, 73, nil)
	for i, x := range s.Hosts {
		h := serverHeader(s.Hosts[1-i]) // from the other member
		for _, c := range []*wire.StateChunk{{T: 1, Index: 5, Count: 3}, {T: 1, Index: 0, Count: 0}} {
			if err := x.Node.Step("attacker", h, c); err == nil {
				t.Errorf("h%d took state chunk %d of %d", x.Index, c.Index, c.Count)
			}
		}
	}
}

// A nil message, and a message of a kind the machine does not handle, are
// refused with an error.
func TestStepRefusesNothingAndUnknown(t *testing.T) {
	s := newGroup(t, 2, 79, nil)
	h := serverHeader(s.Hosts[0])
	if err := s.Hosts[1].Node.Step("x", h, nil); err == nil {
		t.Error("a nil message was accepted")
	}
	if err := s.Hosts[1].Node.Step("x", h, &wire.Nak{}); errors.Is(err, arbiter.ErrStopped) {
		t.Error(err)
	}
}

// FuzzStep feeds a running group's member a sequence of datagrams built
// from the fuzzer's bytes, each decoded by the wire codec as a receiver
// would (so every message passed its limits), under headers that claim to be
// any member, the server included, with any T and epochs, from a rogue
// address or from a member's own (a spoofed source): the node must neither
// panic nor stop answering its own API, and a group it belongs to must
// still be able to tell it apart from the others' state (it either agrees
// or knows its state is suspect). The corpus holds the group's own traffic
// and the hostile datagrams of TestHostileDatagramsHaveNoEffect.
//
//	go test ./arbiter -run '^$' -fuzz FuzzStep -fuzztime 60s
func FuzzStep(f *testing.F) {
	seedGroup := newFuzzGroup(f)
	codec, _ := wire.NewCodec(wire.DefaultLimits())
	// The corpus: real traffic of the group, as sent, from its sender.
	var corpus [][]byte
	seedGroup.Opt.Delivered = func(d *simtest.Datagram) {
		if len(corpus) < 64 {
			corpus = append(corpus, fuzzInput(uint8(d.From), d.Data))
		}
	}
	w := simtest.NewWorkload(seedGroup, 2)
	w.Run(100)
	for _, d := range corpus {
		f.Add(d, uint8(0))
	}
	for _, d := range hostileCorpus(f, codec) {
		f.Add(d, uint8(1))
	}
	f.Fuzz(func(t *testing.T, data []byte, target uint8) {
		s := newFuzzGroup(t)
		h := s.Hosts[int(target)%len(s.Hosts)]
		// Up to 8 datagrams, each prefixed by its source (a host's
		// address, or a rogue's) and a 2-byte length.
		for i := 0; i < 8 && len(data) >= 3; i++ {
			src := "fuzz"
			if k := int(data[0]); k < len(s.Hosts) {
				src = s.Hosts[k].Addr
			}
			n := int(binary.BigEndian.Uint16(data[1:]))
			data = data[3:]
			n = min(n, len(data))
			p, err := codec.Decode(data[:n])
			data = data[n:]
			if err != nil {
				continue
			}
			p.Group = wire.GroupID("sim")
			for _, m := range p.Messages {
				_ = h.Node.Step(src, p.Header, m)
			}
			s.Flush(h)
		}
		// The node still runs, and its API answers.
		s.RunTicks(20)
		_ = h.Node.Members()
		_ = h.Node.Resources()
		_ = h.Node.Quorum()
		_, _ = h.Node.Acquire("after")
		s.Flush(h)
		s.RunTicks(5)
	})
}

// fuzzInput frames one datagram for FuzzStep: its source, then its length.
func fuzzInput(src uint8, datagram []byte) []byte {
	out := []byte{src, 0, 0}
	binary.BigEndian.PutUint16(out[1:], uint16(len(datagram)))
	return append(out, datagram...)
}

// hostileCorpus is the hostile datagrams, each under the fuzz group's
// server's header, from the rogue's address and (the spoofed case) from
// the server's own.
func hostileCorpus(tb testing.TB, codec *wire.Codec) [][]byte {
	s := newFuzzGroup(tb)
	var srv *simtest.Host
	for _, h := range s.Hosts {
		if h.Node.IsServer() {
			srv = h
		}
	}
	if srv == nil {
		tb.Fatal("the fuzz group has no server")
	}
	h := memberHeader(srv)
	at, e := srv.Node.T(), srv.Node.Epoch()
	msgs := []wire.Message{
		&wire.OkToJoin{T: at, Next: at + 1, Epoch: e, Inc: 0xbad, ID: 2, Addr: rogue, Members: 3},
		&wire.Sync{T: at, Next: math.MaxUint64 - 64, Epoch: e, Backup: 2},
		&wire.Sync{T: at, Next: at + 1e9, Epoch: e, Backup: 2},
		&wire.Release{Req: 1, Resource: "r", Token: at - 1},
		&wire.Left{T: at, Next: at + 1, Epoch: e, ID: 2},
		&wire.LeaveRequest{},
		&wire.Grant{T: at, Next: at + 1, Epoch: e, Node: 2, Req: 1, Resource: "r"},
		&wire.StateRequest{},
		&wire.Nak{From: 1, Count: 64},
		&wire.NotMember{},
		&wire.StateChunk{T: at + 100, Index: 0, Count: 1, Data: []byte{0x90}},
	}
	var out [][]byte
	for _, m := range msgs {
		data, err := codec.Pack(h, []wire.Message{m})
		if err != nil {
			tb.Fatal(err)
		}
		for _, src := range []uint8{255, uint8(srv.Index)} {
			out = append(out, fuzzInput(src, data[0]))
		}
	}
	return out
}

func newFuzzGroup(tb testing.TB) *simtest.Sim {
	tb.Helper()
	s := simtest.New(simtest.Options{Seed: 5, Hosts: 3})
	if !s.RunUntil(s.Now+200*simtest.SubTicks, func() bool {
		for _, h := range s.Hosts {
			if !h.Node.Joined() {
				return false
			}
		}
		return true
	}) {
		tb.Fatal("the fuzz group did not form")
	}
	return s
}
