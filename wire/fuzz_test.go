package wire

import (
	"reflect"
	"testing"
)

// FuzzDecode: decoding never panics, and whatever decodes re-encodes to
// something that decodes to the same packet. The corpus is every sample
// message alone, all of them together, and a snapshot chunk.
//
//	go test ./wire -run '^$' -fuzz FuzzDecode -fuzztime 60s
func FuzzDecode(f *testing.F) {
	c := newTestCodec(f)
	for _, m := range samples() {
		d, err := c.Pack(testHeader, []Message{m})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(d[0])
	}
	all, err := c.Pack(testHeader, samples())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(all[0])
	f.Fuzz(func(t *testing.T, data []byte) {
		c := newTestCodec(t)
		p, err := c.Decode(data)
		if err != nil {
			return
		}
		if len(p.Messages) == 0 {
			return // only unknown kinds: nothing to re-encode
		}
		again, err := c.Pack(p.Header, p.Messages)
		if err != nil {
			t.Fatalf("decoded packet does not re-encode: %v", err)
		}
		var msgs []Message
		for _, d := range again {
			q, err := c.Decode(d)
			if err != nil {
				t.Fatalf("re-encoded packet does not decode: %v", err)
			}
			if q.Header != p.Header {
				t.Fatalf("header changed: %+v vs %+v", q.Header, p.Header)
			}
			msgs = append(msgs, q.Messages...)
		}
		if !reflect.DeepEqual(msgs, p.Messages) {
			t.Fatalf("round trip changed the messages:\n%#v\n%#v", p.Messages, msgs)
		}
	})
}

// FuzzSnapshot: a state transfer is decoded from reassembled chunks that
// anyone could have sent; decoding it never panics and round-trips, and
// SnapshotBound covers the encoding.
func FuzzSnapshot(f *testing.F) {
	c := newTestCodec(f)
	b, err := c.EncodeSnapshot(&Snapshot{
		Instance: 1, T: 9, NextID: 3, Params: Params{TurnLength: 4, MaxMembers: 4},
		Members:   []MemberState{{ID: 1, Addr: "x"}, {ID: 2, Decided: []uint64{3}}},
		Resources: []ResourceState{{Name: "r", Holder: 1, Queue: []Waiter{{Node: 2, Req: 1}}}},
		Epoch:     1, Epochs: []EpochMark{{Epoch: 1, T: 1}},
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		c := newTestCodec(t)
		s, err := c.DecodeSnapshot(data)
		if err != nil {
			return
		}
		b, err := c.EncodeSnapshot(s)
		if err != nil {
			t.Fatalf("decoded snapshot does not re-encode: %v", err)
		}
		if len(b) > SnapshotBound(s) {
			t.Fatalf("snapshot encodes to %d bytes, over its bound %d", len(b), SnapshotBound(s))
		}
		s2, err := c.DecodeSnapshot(b)
		if err != nil || !reflect.DeepEqual(s, s2) {
			t.Fatalf("snapshot round trip changed it: %v", err)
		}
	})
}
