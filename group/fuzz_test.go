package group_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/group/memnet"
	"github.com/mcnode/mcnode/seal"
	"github.com/mcnode/mcnode/wire"
)

// fuzzKey is the group key of FuzzReceiveSealed's group. Every input is
// sealed with it, so every datagram authenticates and what the fuzzer
// chooses reaches the decoders and the machine.
var fuzzKey = seal.Key{Secret: [seal.KeySize]byte{'f', 'u', 'z', 'z'}}

// fuzzRogue is the source of the datagrams FuzzReceiveSealed sends from no
// member's address.
const fuzzRogue = "mem-rogue"

// FuzzReceiveSealed runs datagrams the fuzzer makes through the whole
// receive path of a member of a keyed group of three (memnet, in a synctest
// bubble): each is sealed with the group's key, then handed to the member
// as its transport would (Group.ReceiveForTest: open, header checks,
// decode, Step), from a member's address or a rogue's, multicast or direct.
// No input may panic a node or stop it answering; a key holder may
// otherwise do anything, so the group's state is not checked.
//
// An input is a target byte (which member receives), then up to 8 frames:
//
//	ctl      bits 0-1: the sender, a member by index (its address, ID and
//	         incarnation), or 3: the rogue (ID 0); bit 2: sent directly to
//	         the target, not multicast; bits 3-7: ticks to wait before it
//	mangle   if not 0, XORed into header byte mangle%4 (magic, version, flags)
//	7 deltas zigzag varints added to the header's fields (group, instance,
//	         from, inc, T, epoch, log epoch), from the sender's and the
//	         target's own: all 0 is a header the target expects
//	len      2 bytes, big-endian
//	messages len bytes, as the wire frames them (kind, uvarint length, msgpack)
//
//	go test ./group -run '^$' -fuzz FuzzReceiveSealed -fuzztime 60s
func FuzzReceiveSealed(f *testing.F) {
	for _, seed := range receiveSeeds(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		// An input the group cannot get through within a minute (it spins, or
		// waits on something outside the bubble) is a finding too.
		stuck := time.AfterFunc(time.Minute, func() {
			panic(fmt.Sprintf("FuzzReceiveSealed: input %q still running after a minute", data))
		})
		defer stuck.Stop()
		synctest.Test(t, func(t *testing.T) { receiveFuzzed(t, data) })
	})
}

// fuzzHeader is a frame's header deltas; all zero is the header expected.
type fuzzHeader [7]int64

// fuzzFrame encodes one frame of a FuzzReceiveSealed input.
func fuzzFrame(ctl, mangle byte, d fuzzHeader, msgs []byte) []byte {
	out := []byte{ctl, mangle}
	for _, v := range d {
		out = binary.AppendVarint(out, v)
	}
	out = binary.BigEndian.AppendUint16(out, uint16(len(msgs)))
	return append(out, msgs...)
}

func receiveFuzzed(t *testing.T, data []byte) {
	net := memnet.New(31)
	gs := joinAll(t, net, 3, fuzzKey)
	target := gs[int(data[0])%len(gs)]
	data = data[1:]
	sender, err := seal.NewRing(fuzzKey)
	if err != nil {
		t.Fatal(err)
	}
	seq := uint64(1) << 40 // above what any member has sealed: fresh at the target
	for range 8 {
		if len(data) < 2 {
			break
		}
		ctl, mangle := data[0], data[1]
		data = data[2:]
		var d fuzzHeader
		for i := range d {
			v, n := binary.Varint(data)
			if n <= 0 {
				return
			}
			d[i], data = v, data[n:]
		}
		if len(data) < 2 {
			return
		}
		n := min(int(binary.BigEndian.Uint16(data)), len(data)-2, 1400)
		msgs := data[2 : 2+n]
		data = data[2+n:]

		time.Sleep(time.Duration(ctl>>3) * 10 * time.Millisecond)
		st, err := target.Status()
		if err != nil {
			t.Fatalf("the target stopped: %v", err)
		}
		h := wire.Header{Group: wire.GroupID("test"), Instance: st.Instance, T: st.T, Epoch: st.Epoch, LogEpoch: st.Epoch}
		src := fuzzRogue
		if k := int(ctl & 3); k < 3 && k < len(st.Members) {
			m := st.Members[k]
			h.From, h.Inc, src = m.ID, m.Inc, m.Addr
		}
		h.Group += uint64(d[0])
		h.Instance += uint64(d[1])
		h.From += group.NodeID(d[2])
		h.Inc += uint64(d[3])
		h.T += uint64(d[4])
		h.Epoch += uint64(d[5])
		h.LogEpoch += uint64(d[6])
		plain := wire.AppendHeader(nil, h)
		if mangle != 0 {
			plain[mangle%4] ^= mangle
		}
		plain = append(plain, msgs...)
		to, direct := seal.Multicast, ctl&4 != 0
		if direct {
			to = target.Addr()
		}
		seq++
		sealed, err := sender.Seal(nil, plain, to, seq)
		if err != nil {
			t.Fatal(err)
		}
		target.ReceiveForTest(group.Packet{Data: sealed, Source: src, Multicast: !direct, Received: time.Now()})
		after, err := target.Status()
		if err != nil {
			t.Fatalf("the target stopped: %v", err)
		}
		for _, reason := range []string{group.DropUnsealed, group.DropUnknownKey, group.DropBadMAC} {
			if after.Stats.Drops[reason] != st.Stats.Drops[reason] {
				t.Fatalf("a datagram sealed with the group's key was dropped as %s", reason)
			}
		}
	}
	// Every node still runs and answers.
	time.Sleep(500 * time.Millisecond)
	for i, g := range gs {
		if _, err := g.Status(); err != nil {
			t.Fatalf("node %d stopped: %v", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if l, err := target.TryAcquire(ctx, "after"); err == nil {
		_ = l.Release()
	}
}

// receiveSeeds are a few datagrams of each kind a member sends, built by
// hand (the corpus in testdata/fuzz holds a group's real traffic).
func receiveSeeds(tb testing.TB) [][]byte {
	codec, err := wire.NewCodec(wire.DefaultLimits())
	if err != nil {
		tb.Fatal(err)
	}
	frame := func(ctl byte, d fuzzHeader, msgs ...wire.Message) []byte {
		var b []byte
		for _, m := range msgs {
			if b, err = codec.AppendMessage(b, m); err != nil {
				tb.Fatal(err)
			}
		}
		return fuzzFrame(ctl, 0, d, b)
	}
	cat := func(parts ...[]byte) []byte {
		var out []byte
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	none := fuzzHeader{}
	return [][]byte{
		cat([]byte{0}, frame(1, none, &wire.Request{Resource: "r"})),
		cat([]byte{1}, frame(0, none, &wire.Request{Resource: "r"}), frame(0|8, none, &wire.Release{Req: 1, Resource: "r", Token: 1})),
		cat([]byte{2}, frame(1|4, none, &wire.Ping{Turn: 1, Probe: 1}), frame(1, none, &wire.Nak{From: 1, Count: 64})),
		cat([]byte{0}, frame(3|4, none, &wire.StateRequest{}, &wire.Nak{From: 1, Count: 64})),
		cat([]byte{1}, frame(3, fuzzHeader{2: 9}, &wire.JoinRequest{Inc: 0xbad, Addr: fuzzRogue})),
		cat([]byte{0}, frame(2, fuzzHeader{4: 1}, &wire.Sync{T: 1, Next: 65, Epoch: 1, Backup: 1})),
		cat([]byte{2}, frame(1, fuzzHeader{5: 1}, &wire.Claim{Epoch: 2})),
		cat([]byte{0}, fuzzFrame(1, 1, none, []byte{byte(wire.KindRequest), 3, 0x91, 0xa1, 'r'})),
	}
}

// TestWriteReceiveCorpus writes FuzzReceiveSealed's corpus of real traffic
// into the directory MCNODE_WRITE_FUZZ_CORPUS names (skipped without it):
// what a keyed group of three sends while its members take a lock in turn,
// each datagram opened with the key and framed as sent by its sender, to
// every other member.
//
//	MCNODE_WRITE_FUZZ_CORPUS=testdata/fuzz/FuzzReceiveSealed go test ./group -run TestWriteReceiveCorpus
func TestWriteReceiveCorpus(t *testing.T) {
	dir := os.Getenv("MCNODE_WRITE_FUZZ_CORPUS")
	if dir == "" {
		t.Skip("set MCNODE_WRITE_FUZZ_CORPUS to the corpus directory")
	}
	var inputs [][]byte
	synctest.Test(t, func(t *testing.T) {
		net := memnet.New(31)
		gs := joinAll(t, net, 3, fuzzKey)
		tap := net.Endpoint()
		defer tap.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done := make(chan struct{})
		for _, g := range gs[1:] {
			go func() {
				defer func() { done <- struct{}{} }()
				for range 5 {
					l, err := g.Acquire(ctx, "r")
					if err != nil {
						t.Error(err)
						return
					}
					time.Sleep(5 * time.Millisecond)
					_ = l.Release()
				}
			}()
		}
		<-done
		<-done
		time.Sleep(time.Second) // pings, a turn's SYNC
		index := map[string]byte{}
		for i, g := range gs {
			index[g.Addr()] = byte(i)
		}
		seen := map[string]bool{}
		var run []byte // consecutive datagrams from one sender
		for len(tap.Packets()) > 0 {
			p := <-tap.Packets()
			r, _ := seal.NewRing(fuzzKey)
			plain, err := r.Open(p.Data, seal.Multicast)
			if err != nil {
				t.Fatal(err)
			}
			pkt, err := wire.Decode(plain)
			if err != nil {
				t.Fatal(err)
			}
			kinds := ""
			for _, m := range pkt.Messages {
				kinds += m.Kind().String() + " "
			}
			fr := fuzzFrame(index[p.Source], 0, fuzzHeader{}, plain[wire.HeaderLen:])
			if len(run) < 8*64 {
				run = append(run, fr...)
			}
			if seen[kinds] {
				continue
			}
			seen[kinds] = true
			inputs = append(inputs, append([]byte{(index[p.Source] + 1) % 3}, fr...))
		}
		inputs = append(inputs, append([]byte{2}, run...))
	})
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, in := range inputs {
		sum := sha256.Sum256(in)
		name := filepath.Join(dir, fmt.Sprintf("%x", sum[:8]))
		if err := os.WriteFile(name, fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\n", in), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d inputs written to %s", len(inputs), dir)
}
