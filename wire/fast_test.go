package wire

import (
	"reflect"
	"testing"
)

// fastKinds are the kinds decodeFast decodes by hand.
var fastKinds = []Kind{KindRequest, KindGrant, KindRelease, KindCancel, KindReleased, KindPing, KindPingReply, KindAck, KindAckRequest}

// Every body the encoder writes for the hot kinds is decoded by hand, to
// the message it came from; the other kinds, and the same bodies in forms
// the encoder does not write, go to the library.
func TestDecodeFastTakesTheEncodersForms(t *testing.T) {
	c := newTestCodec(t)
	samples := append(samples(), &Ping{Turn: 1, Probe: 300, Reachable: 70000, Prev: 299, ViewT: 1 << 40, Unanswered: []NodeID{3, 1 << 33}},
		&Ping{Turn: 1, Probe: 300, Reachable: 2, Prev: 299, ViewT: 7, ByAnswer: true, Answered: []NodeID{1, 1 << 33}},
		&Grant{T: 1 << 63, Next: 1<<63 + 1, Resource: string(make([]byte, 100)), Queued: true})
	fast := map[Kind]bool{}
	for _, k := range fastKinds {
		fast[k] = true
	}
	for _, m := range samples {
		frame, err := c.AppendMessage(nil, m)
		if err != nil {
			t.Fatal(err)
		}
		body := frame[2:] // type byte, then a one-byte length for every sample
		if frame[1] >= 0x80 {
			body = frame[3:]
		}
		got := newMessage(m.Kind())
		if took := decodeFast(body, got); took != fast[m.Kind()] {
			t.Errorf("%v: decoded by hand %v, want %v", m.Kind(), took, fast[m.Kind()])
		} else if took && !reflect.DeepEqual(got, m) {
			t.Errorf("%v: decoded by hand to %#v, want %#v", m.Kind(), got, m)
		}
	}
	for name, body := range map[string][]byte{
		"a field more":         {0x93, 0x01, 0x02, 0x03},
		"a field fewer":        {0x91, 0x01},
		"a signed integer":     {0x92, 0xd0, 0x01, 0x02},
		"nil for a field":      {0x92, 0xc0, 0x02},
		"cut short":            {0x92, 0xcf, 0x01},
		"a map, not an array":  {0x82, 0x01, 0x02, 0x03, 0x04},
		"trailing bytes":       {0x92, 0x01, 0x02, 0x00},
		"an array16 of fields": {0xdc, 0x00, 0x02, 0x01, 0x02},
	} {
		m := &PingReply{Turn: 7}
		if decodeFast(body, m) || m.Turn != 7 {
			t.Errorf("%s: decoded by hand (%+v)", name, m)
		}
	}
}

// FuzzDecodeFast: on any body of any kind the hand decoder takes, the
// library decodes the same message. Corpus: the encoder's samples.
//
//	go test ./wire -run '^$' -fuzz FuzzDecodeFast -fuzztime 60s
func FuzzDecodeFast(f *testing.F) {
	c := newTestCodec(f)
	for _, m := range samples() {
		frame, err := c.AppendMessage(nil, m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(byte(m.Kind()), frame[2:])
	}
	f.Fuzz(func(t *testing.T, kind byte, body []byte) {
		fast := newMessage(Kind(kind))
		if fast == nil || !decodeFast(body, fast) {
			return
		}
		lib := newMessage(Kind(kind))
		if err := newTestCodec(t).unmarshal(body, lib); err != nil {
			t.Fatalf("%v %x: decoded by hand to %#v, the library says %v", Kind(kind), body, fast, err)
		}
		if !reflect.DeepEqual(fast, lib) {
			t.Fatalf("%v %x: by hand %#v, by the library %#v", Kind(kind), body, fast, lib)
		}
	})
}

// FuzzAppendFast: for any values of the hot kinds' fields, the hand encoder
// writes what the msgpack library writes, byte for byte.
//
//	go test ./wire -run '^$' -fuzz FuzzAppendFast -fuzztime 60s -fuzzminimizetime 1s
//
// (Without the last flag, minimizing an input grown from the 70,000-byte
// seed can take the whole run.)
func FuzzAppendFast(f *testing.F) {
	f.Add(uint64(0), uint64(127), uint64(128), uint64(1<<16), "r", true, uint8(0))
	f.Add(uint64(255), uint64(256), uint64(1<<32), uint64(1<<63), string(make([]byte, 40)), false, uint8(3))
	f.Add(uint64(65535), uint64(65536), uint64(1<<32-1), uint64(0), string(make([]byte, 300)), true, uint8(16))
	f.Add(uint64(1), uint64(2), uint64(3), uint64(4), string(make([]byte, 70000)), true, uint8(1))
	f.Fuzz(func(t *testing.T, a, b, c, d uint64, s string, flag bool, n uint8) {
		var ids []NodeID
		if n > 0 {
			ids = make([]NodeID, n%20-1+1)
			for i := range ids {
				ids[i] = NodeID(a + uint64(i)*d)
			}
		}
		for _, m := range []Message{
			&Request{Req: a, Resource: s, Floor: b, Retry: flag},
			&Grant{T: a, Next: b, Epoch: c, Node: NodeID(d), Req: a ^ d, Resource: s, Floor: c ^ b, Queued: flag},
			&Release{Req: a, Resource: s, Token: b, Retry: flag},
			&Cancel{Req: c, Resource: s, Retry: flag},
			&Released{T: a, Next: b, Epoch: c, Node: NodeID(d), Req: b ^ c, Resource: s, Token: d ^ a, Withdrawn: flag, Floor: c ^ d},
			&Ping{Turn: a, Probe: b, Reachable: uint32(c), Prev: d, ViewT: a ^ b, Unanswered: ids},
			&PingReply{Turn: a, Probe: d},
			&Ack{},
			&AckRequest{T: c},
		} {
			lib := []byte{}
			enc := newTestCodec(t).enc
			enc.ResetBytes(&lib)
			if err := enc.Encode(m); err != nil {
				t.Fatal(err)
			}
			fast, ok := appendFast(nil, m)
			if !ok {
				if p, isPing := m.(*Ping); (isPing && len(p.Unanswered) > 15) || longName(m) {
					continue
				}
				t.Fatalf("%v: not encoded by hand", m.Kind())
			}
			if string(fast) != string(lib) {
				t.Fatalf("%#v:\nby hand     %x\nthe library %x", m, fast, lib)
			}
		}
	})
}
