package wire

import (
	"fmt"
	"strings"
	"testing"
)

// Sinks keep the benchmarks' results alive, so that the compiler cannot
// drop the work that produced them.
var (
	sinkBytes   []byte
	sinkPacket  Packet
	sinkDgrams  [][]byte
	sinkMessage Message
)

// benchMessages holds one message of every kind, in type-byte order, with the
// values a running group sends: a resource named "lock-1", a handful of
// members where a message carries a list, a state chunk as full as a
// transfer fills it.
func benchMessages() []Message {
	chunk := make([]byte, ChunkSize(DefaultLimits()))
	for i := range chunk {
		chunk[i] = byte(i)
	}
	return []Message{
		&JoinRequest{Inc: 0x5f3a9c0e12d4b871, Addr: "192.168.1.23:7946", Missing: []NodeID{2, 3, 5}},
		&OkToJoin{T: 1727712000123456, Next: 1727712000123520, Inc: 0x5f3a9c0e12d4b871, ID: 6, Addr: "192.168.1.23:7946", Members: 6},
		&GroupFull{T: 1727712000123457, Next: 1727712000123458, Inc: 0x5f3a9c0e12d4b871, Max: 64},
		&Greeting{Newcomer: 6, Addr: "192.168.1.11:7946"},
		&LeaveRequest{},
		&Left{T: 1727712000123458, Next: 1727712000123584, ID: 4},
		&Request{Req: 1042, Resource: "lock-1", Floor: 1041},
		&Grant{T: 1727712000123459, Next: 1727712000123460, Node: 3, Req: 1042, Resource: "lock-1", Floor: 1041},
		&Release{Req: 1042, Resource: "lock-1", Token: 1727712000123459},
		&Cancel{Req: 1043, Resource: "lock-1"},
		&Released{T: 1727712000123461, Next: 1727712000123462, Node: 3, Req: 1042, Resource: "lock-1", Token: 1727712000123459},
		&Ping{Turn: 1727712000123456, Probe: 1},
		&PingReply{Turn: 1727712000123456, Probe: 1},
		&Sync{T: 1727712000123519, Next: 1727712000123520, Turn: 1727712000123456,
			Unheard: []Silence{{ID: 4, Ticks: 50}, {ID: 5, Ticks: 120}}, Remove: 5, Backup: 2, Digest: 0x9e3779b97f4a7c15},
		&Nak{From: 1727712000123460, Count: 16},
		&StateRequest{},
		&StateChunk{T: 1727712000123456, Index: 2, Count: 5, Data: chunk},
		&Update{Seq: 88, Topic: "config", Data: []byte(`{"replicas":3,"leader":"node-2"}`)},
		&Takeover{T: 1727712000123462, Next: 1727712000123520, Epoch: 4, PrevEpoch: 3, Server: 2, Backup: 3},
		&Claim{Epoch: 4},
		&Vote{Epoch: 4, Granted: true, Prior: 3, SeenT: 1727712000123462},
		&Ack{},
		&AckRequest{T: 1727712000123460},
		&NotMember{},
	}
}

// benchName names a message by its Go type: "Request", "OkToJoin".
func benchName(m Message) string {
	return strings.TrimPrefix(fmt.Sprintf("%T", m), "*wire.")
}

// benchKinds returns benchMessages after checking that it has exactly one
// message of every kind, so that a kind added to the package without a
// benchmark fails loudly.
func benchKinds(b *testing.B) []Message {
	b.Helper()
	msgs := benchMessages()
	kinds := Kinds()
	if len(msgs) != len(kinds) {
		b.Fatalf("%d benchmark messages for %d kinds", len(msgs), len(kinds))
	}
	for i, m := range msgs {
		if m.Kind() != kinds[i] {
			b.Fatalf("benchmark message %d is %v, want %v", i, m.Kind(), kinds[i])
		}
	}
	return msgs
}

// BenchmarkEncode encodes one message of each kind. One op is a whole
// one-message datagram: the header and the framed message (validation, type
// byte, length, msgpack body) appended to a reused buffer.
func BenchmarkEncode(b *testing.B) {
	for _, m := range benchKinds(b) {
		b.Run(benchName(m), func(b *testing.B) {
			c := newTestCodec(b)
			buf := make([]byte, 0, c.Limits().MaxDatagram)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				var err error
				buf = AppendHeader(buf[:0], testHeader)
				if buf, err = c.AppendMessage(buf, m); err != nil {
					b.Fatal(err)
				}
			}
			sinkBytes = buf
		})
	}
}

// BenchmarkDecode decodes one message of each kind. One op is Codec.Decode
// of the one-message datagram BenchmarkEncode produces: header check, length
// scan, msgpack decode into a new message, validation.
func BenchmarkDecode(b *testing.B) {
	for _, m := range benchKinds(b) {
		b.Run(benchName(m), func(b *testing.B) {
			c := newTestCodec(b)
			dgram, err := c.AppendMessage(AppendHeader(nil, testHeader), m)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				p, err := c.Decode(dgram)
				if err != nil {
					b.Fatal(err)
				}
				if len(p.Messages) != 1 {
					b.Fatalf("decoded %d messages, want 1", len(p.Messages))
				}
				sinkPacket = p
			}
			sinkMessage = sinkPacket.Messages[0]
		})
	}
}

// heavyBatch is what a server multicasts at once under heavy load: the
// release of a contended lock, which hands it to the head of its queue,
// with the decisions it held back queueing the requests of five more
// members behind the holders of two locks.
func heavyBatch() []Message {
	const t0 = 1727712000123460
	msgs := []Message{
		&Released{T: t0, Next: t0 + 1, Node: 3, Req: 1042, Resource: "lock-1", Token: t0 - 9},
	}
	for i := range 5 {
		t := uint64(t0 + 1 + i)
		msgs = append(msgs, &Grant{T: t, Next: t + 1, Node: NodeID(4 + i), Req: uint64(2000 + i),
			Resource: fmt.Sprintf("lock-%d", 1+i%2), Floor: uint64(1999 + i), Queued: true})
	}
	return msgs
}

// BenchmarkPackHeavyBatch packs a heavy-load batch (heavyBatch: a release
// decision and five queued requests' decisions, one datagram). One op is one
// Codec.Pack of the six messages into a new datagram.
func BenchmarkPackHeavyBatch(b *testing.B) {
	c := newTestCodec(b)
	msgs := heavyBatch()
	if d, err := c.Pack(testHeader, msgs); err != nil || len(d) != 1 {
		b.Fatalf("heavy batch packs into %d datagrams: %v", len(d), err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		d, err := c.Pack(testHeader, msgs)
		if err != nil {
			b.Fatal(err)
		}
		sinkDgrams = d
	}
}
