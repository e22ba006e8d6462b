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
