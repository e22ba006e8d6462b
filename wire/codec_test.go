package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// samples holds one filled-in message of every kind; the tests and the fuzz
// corpus are built from it.
func samples() []Message {
	return []Message{
		&JoinRequest{Inc: 0xdeadbeef, Addr: "10.0.0.7:7946", HaveState: true, Missing: []NodeID{2, 5}, Observer: true},
		&OkToJoin{T: 41, Next: 64, Inc: 0xdeadbeef, ID: 9, Addr: "10.0.0.7:7946", Members: 4, Observer: true, Transient: true},
		&GroupFull{T: 42, Next: 43, Inc: 77, Max: 8},
		&Greeting{Newcomer: 9, Addr: "10.0.0.2:7946"},
		&LeaveRequest{},
		&Left{T: 50, Next: 96, ID: 3},
		&Request{Req: 17, Resource: "printer", Floor: 15, Retry: true},
		&Grant{T: 51, Next: 52, Node: 4, Req: 17, Resource: "printer", Floor: 15, Queued: true},
		&Release{Req: 17, Resource: "printer", Token: 51},
		&Cancel{Req: 18, Resource: "scanner"},
		&Released{T: 53, Next: 54, Node: 4, Req: 17, Resource: "printer", Token: 51},
		&Released{T: 55, Next: 56, Node: 4, Req: 19, Resource: "scanner", Withdrawn: true, Floor: 18},
		&Ping{Turn: 64, Probe: 2, Reachable: 3},
		&Ping{Turn: 64, Probe: 9, Reachable: 4, Prev: 8, ViewT: 12, Unanswered: []NodeID{3, 7}},
		&Ping{Turn: 64, Probe: 9, Reachable: 4, Prev: 8, ViewT: 12, ByAnswer: true, Answered: []NodeID{1, 2}},
		&PingReply{Turn: 64, Probe: 2},
		&Sync{T: 95, Next: 128, Turn: 64, Unheard: []Silence{{ID: 3, Ticks: 400}}, Unanswered: []NodeID{5}, Remove: 3, Backup: 4, Digest: 0x1234567890abcdef},
		&Sync{T: 96, Next: 128, Turn: 64, Backup: 6, Promote: 6, Partial: true, Renew: []NodeID{1, 6}},
		&Sync{T: 97, Next: 128, Turn: 64, Backup: 6, Demote: 7},
		&Sync{T: 98, Next: 128, Turn: 64, Unheard: []Silence{{ID: 8, Ticks: 300}, {ID: 9, Ticks: 200}, {ID: 3, Ticks: 190}}, Remove: 3, RemoveObservers: []NodeID{8, 9}, Backup: 4},
		&Nak{From: 60, Count: 16},
		&StateRequest{},
		&StateChunk{T: 70, Index: 1, Count: 3, Data: []byte{1, 2, 3, 4}, Digest: 0xfedcba9876543210},
		&Update{Seq: 3, Topic: "score", Data: []byte("player 2: 40")},
		&Takeover{T: 96, Next: 128, Epoch: 3, PrevEpoch: 2, Server: 4, Backup: 5, Wait: true},
		&Claim{Epoch: 3, Pre: true},
		&Vote{Epoch: 3, Pre: true, Granted: true, Prior: 2, SeenT: 99},
		&Ack{},
		&AckRequest{T: 52},
		&NotMember{},
	}
}

var testHeader = Header{Group: GroupID("demo"), Instance: 0xabc, From: 4, Inc: 99, T: 1234, Epoch: 3, LogEpoch: 2, For: RecipientsOf(2, 7)}

func newTestCodec(t testing.TB) *Codec {
	t.Helper()
	c, err := NewCodec(DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestEveryKindHasASample(t *testing.T) {
	seen := map[Kind]bool{}
	for _, m := range samples() {
		seen[m.Kind()] = true
		if newMessage(m.Kind()) == nil {
			t.Errorf("newMessage(%v) is nil", m.Kind())
		}
		if _, isDecision := m.(Decision); isDecision != m.Kind().IsDecision() {
			t.Errorf("%v: implements Decision = %v, IsDecision = %v", m.Kind(), isDecision, m.Kind().IsDecision())
		}
	}
	for _, k := range Kinds() {
		if !seen[k] {
			t.Errorf("no sample for %v", k)
		}
		if strings.HasPrefix(k.String(), "kind(") {
			t.Errorf("%d has no name", k)
		}
	}
}

// decode(encode(m)) == m for every kind, alone and all in one datagram.
func TestRoundTripEveryKind(t *testing.T) {
	c := newTestCodec(t)
	for _, m := range samples() {
		dgrams, err := c.Pack(testHeader, []Message{m})
		if err != nil {
			t.Fatalf("%v: %v", m.Kind(), err)
		}
		if len(dgrams) != 1 {
			t.Fatalf("%v: %d datagrams", m.Kind(), len(dgrams))
		}
		p, err := c.Decode(dgrams[0])
		if err != nil {
			t.Fatalf("%v: decode: %v", m.Kind(), err)
		}
		if p.Header != testHeader {
			t.Fatalf("header %+v, want %+v", p.Header, testHeader)
		}
		if len(p.Messages) != 1 || !reflect.DeepEqual(p.Messages[0], m) {
			t.Fatalf("%v: got %#v, want %#v", m.Kind(), p.Messages, m)
		}
	}
	all := samples()
	dgrams, err := c.Pack(testHeader, all)
	if err != nil || len(dgrams) != 1 {
		t.Fatalf("all kinds: %d datagrams, %v", len(dgrams), err)
	}
	p, err := c.Decode(dgrams[0])
	if err != nil || !reflect.DeepEqual(p.Messages, all) {
		t.Fatalf("all kinds in one datagram did not round-trip: %v", err)
	}
}

func TestPackSplitsAtTheLimitInOrder(t *testing.T) {
	c := newTestCodec(t)
	var msgs []Message
	for i := 0; i < 200; i++ {
		msgs = append(msgs, &Grant{T: uint64(i), Next: uint64(i + 1), Node: 3, Req: uint64(i), Resource: "resource-with-a-longish-name"})
	}
	dgrams, err := c.Pack(testHeader, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if len(dgrams) < 2 {
		t.Fatalf("200 grants packed into %d datagram(s)", len(dgrams))
	}
	var got []Message
	for _, d := range dgrams {
		if len(d) > c.Limits().MaxDatagram {
			t.Fatalf("datagram of %d bytes over the limit", len(d))
		}
		p, err := c.Decode(d)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p.Messages...)
	}
	if !reflect.DeepEqual(got, msgs) {
		t.Fatal("messages lost or reordered across datagrams")
	}
}

func TestPackRejectsOversizedMessage(t *testing.T) {
	l := DefaultLimits()
	l.MaxUpdate = l.MaxDatagram // allowed by the limits, but cannot fit with the header
	c, err := NewCodec(l)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Pack(testHeader, []Message{&Update{Seq: 1, Data: make([]byte, l.MaxDatagram)}})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
}

func TestEncoderRefusesInvalidMessages(t *testing.T) {
	c := newTestCodec(t)
	bad := []Message{
		&Request{Req: 1, Resource: ""},
		&Request{Req: 1, Resource: strings.Repeat("x", 129)},
		&Request{Req: 1, Resource: "\xff\xfe"},
		&Grant{T: 5, Next: 5, Resource: "r"},
		&OkToJoin{T: 1, Next: 2, ID: 0},
		&Sync{T: 1, Next: 2, Remove: 3, Promote: 4},
		&Sync{T: 1, Next: 2, Promote: 3, Demote: 4},
		&Sync{T: 1, Next: 2, Backup: 4, Demote: 4},
		&Sync{T: 1, Next: 2, RemoveObservers: []NodeID{5, 6, 5}},
		&Sync{T: 1, Next: 2, RemoveObservers: []NodeID{0}},
		&Sync{T: 1, Next: 2, Remove: 5, RemoveObservers: []NodeID{5}},
		&Sync{T: 1, Next: 2, Promote: 5, RemoveObservers: []NodeID{5}},
		&Sync{T: 1, Next: 2, Backup: 5, RemoveObservers: []NodeID{6, 5}},
		&Sync{T: 1, Next: 2, RemoveObservers: make([]NodeID, DefaultLimits().MaxMembers+1)},
		&StateChunk{T: 1, Index: 2, Count: 2},
		&Update{Data: make([]byte, 1025)},
	}
	for _, m := range bad {
		if _, err := c.Pack(testHeader, []Message{m}); !errors.Is(err, ErrLimit) {
			t.Errorf("%#v: err = %v, want ErrLimit", m, err)
		}
	}
}

func TestDecodeErrorsAreTyped(t *testing.T) {
	c := newTestCodec(t)
	good, err := c.Pack(testHeader, []Message{&Request{Req: 1, Resource: "r"}})
	if err != nil {
		t.Fatal(err)
	}
	d := good[0]
	body := d[HeaderLen:]
	mutate := func(f func([]byte) []byte) []byte { return f(bytes.Clone(d)) }
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrShort},
		{"short", d[:HeaderLen-1], ErrShort},
		{"magic", mutate(func(b []byte) []byte { b[0] = 'x'; return b }), ErrMagic},
		{"version", mutate(func(b []byte) []byte { b[2] = Version + 1; return b }), ErrVersion},
		{"no messages", d[:HeaderLen], ErrEmpty},
		{"too large", append(bytes.Clone(d), make([]byte, 1400)...), ErrTooLarge},
		{"body length past end", mutate(func(b []byte) []byte { b[HeaderLen+1] = 0x7f; return b }), ErrMalformed},
		{"truncated body", append(append(bytes.Clone(d[:HeaderLen]), body[0], body[1]-1), body[2:len(body)-1]...), ErrMalformed},
		{"not an array", append(bytes.Clone(d[:HeaderLen]), byte(KindRequest), 1, 0x01), ErrMalformed},
		{"stray bytes", append(bytes.Clone(d[:HeaderLen]), byte(KindPing), 3, 0x91, 0x01, 0x01), ErrMalformed},
		// An array header claiming 2^32-1 elements in a few bytes: rejected by
		// the scan before the decoder could try to allocate for it.
		{"huge array count", append(bytes.Clone(d[:HeaderLen]), byte(KindJoinRequest), 9, 0x94, 0x01, 0xa0, 0xc2, 0xdd, 0xff, 0xff, 0xff, 0xff), ErrMalformed},
		{"huge string length", append(bytes.Clone(d[:HeaderLen]), byte(KindRequest), 8, 0x93, 0x01, 0xdb, 0x7f, 0xff, 0xff, 0xff, 0x01), ErrMalformed},
		{"deep nesting", append(bytes.Clone(d[:HeaderLen]), append([]byte{byte(KindPing), 12}, bytes.Repeat([]byte{0x91}, 12)...)...), ErrMalformed},
		{"over limit", mustFrame(t, byte(KindRequest), []any{1, strings.Repeat("n", 200), 0}), ErrLimit},
	}
	for _, tc := range cases {
		_, err := c.Decode(tc.in)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
			continue
		}
		var de *DecodeError
		if !errors.As(err, &de) {
			t.Errorf("%s: %T is not a *DecodeError", tc.name, err)
		}
	}
}

// mustFrame builds a datagram with one message whose body is the msgpack
// encoding of v, bypassing the encoder's validation.
func mustFrame(t *testing.T, kind byte, v any) []byte {
	t.Helper()
	c := newTestCodec(t)
	c.body = c.body[:0]
	c.enc.ResetBytes(&c.body)
	if err := c.enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	d := AppendHeader(nil, testHeader)
	d = append(d, kind)
	d = binary.AppendUvarint(d, uint64(len(c.body)))
	return append(d, c.body...)
}

// A newer peer may append fields to a message and send kinds this version
// does not know: both are skipped, the rest decodes.
func TestDecodeToleratesTrailingFieldsAndUnknownKinds(t *testing.T) {
	c := newTestCodec(t)
	d := mustFrame(t, byte(KindRequest), []any{7, "printer", 3, false, "a field from the future", 42})
	d = append(d, 0xee, 2, 0x91, 0x01) // an unknown kind with a two-byte body
	p, err := c.Decode(d)
	if err != nil {
		t.Fatal(err)
	}
	want := &Request{Req: 7, Resource: "printer", Floor: 3}
	if len(p.Messages) != 1 || !reflect.DeepEqual(p.Messages[0], want) || p.Unknown != 1 {
		t.Fatalf("got %#v (unknown %d)", p.Messages, p.Unknown)
	}
}

func TestSnapshotRoundTripAndValidation(t *testing.T) {
	c := newTestCodec(t)
	s := &Snapshot{
		Instance: 5, T: 99, NextID: 4,
		Params:  Params{TurnLength: 16, MaxMembers: 8, LeaseTicks: 100, LeaseMarginTicks: 10, TickMicros: 5000},
		Members: []MemberState{{ID: 1, Inc: 11, Addr: "a"}, {ID: 2, Inc: 22, Addr: "b", Observer: true, Transient: true}, {ID: 3, Inc: 33, Addr: "c", Silence: 7, Floor: 2, Decided: []uint64{4}}},
		Resources: []ResourceState{
			{Name: "a", Holder: 1, HolderReq: 2, Token: 90, Queue: []Waiter{{Node: 3, Req: 4, Since: 95}}},
			{Name: "b", Holder: 3, HolderReq: 1, Token: 12},
		},
		Epoch: 2, Backup: 3, ViewT: 80, Epochs: []EpochMark{{Epoch: 1, T: 1}, {Epoch: 2, T: 80}},
	}
	b, err := c.EncodeSnapshot(s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.DecodeSnapshot(b)
	if err != nil || !reflect.DeepEqual(got, s) {
		t.Fatalf("snapshot round trip: %v\n got %#v\nwant %#v", err, got, s)
	}
	bad := *s
	bad.Resources = []ResourceState{s.Resources[1], s.Resources[0]}
	if _, err := c.EncodeSnapshot(&bad); !errors.Is(err, ErrLimit) {
		t.Fatalf("unsorted resources: err = %v", err)
	}
	bad = *s
	bad.Members = []MemberState{{ID: 4}}
	if _, err := c.EncodeSnapshot(&bad); !errors.Is(err, ErrLimit) {
		t.Fatalf("member ID not below NextID: err = %v", err)
	}
	bad = *s
	bad.Members = []MemberState{{ID: 1, Observer: true, Transient: true}, {ID: 3, Observer: true, Transient: true}}
	if _, err := c.EncodeSnapshot(&bad); !errors.Is(err, ErrLimit) {
		t.Fatalf("observers only: err = %v", err)
	}
	bad = *s
	bad.Members = []MemberState{{ID: 1}, {ID: 3, Observer: true, Transient: true}}
	if _, err := c.EncodeSnapshot(&bad); !errors.Is(err, ErrLimit) {
		t.Fatalf("an observer for the backup: err = %v", err)
	}
	bad = *s
	bad.Members = []MemberState{{ID: 1}, {ID: 2, Observer: true}, {ID: 3}}
	if _, err := c.EncodeSnapshot(&bad); !errors.Is(err, ErrLimit) {
		t.Fatalf("an observer that did not ask to be one: err = %v", err)
	}
	bad = *s
	bad.Epochs = []EpochMark{{Epoch: 2, T: 80}, {Epoch: 1, T: 90}}
	if _, err := c.EncodeSnapshot(&bad); !errors.Is(err, ErrLimit) {
		t.Fatalf("epoch history going back: err = %v", err)
	}
	bad = *s
	bad.Epoch = 3
	if _, err := c.EncodeSnapshot(&bad); !errors.Is(err, ErrLimit) {
		t.Fatalf("epoch history not ending with the snapshot's epoch: err = %v", err)
	}
	bad = *s
	bad.Instance = 0 // no founder's incarnation is 0
	if _, err := c.EncodeSnapshot(&bad); !errors.Is(err, ErrLimit) {
		t.Fatalf("instance 0: err = %v", err)
	}
	for _, decided := range [][]uint64{{2}, {1}, {5, 4}, {4, 4}} {
		bad = *s
		bad.Members = slices.Clone(s.Members)
		bad.Members[2].Decided = decided // floor 2
		if _, err := c.EncodeSnapshot(&bad); !errors.Is(err, ErrLimit) {
			t.Fatalf("decided %v above floor 2: err = %v", decided, err)
		}
	}
	if _, err := c.DecodeSnapshot(b[:len(b)-3]); !errors.Is(err, ErrMalformed) {
		t.Fatalf("truncated snapshot: err = %v", err)
	}
}

func TestLimitsCheckNamesTheField(t *testing.T) {
	l := DefaultLimits()
	l.MaxDatagram = 100
	if err := l.Check(); err == nil || !strings.Contains(err.Error(), "MaxDatagram") {
		t.Fatalf("err = %v", err)
	}
	if _, err := NewCodec(l); err == nil {
		t.Fatal("NewCodec accepted bad limits")
	}
}

func TestGroupIDSeparatesNames(t *testing.T) {
	if GroupID("a") == GroupID("b") || GroupID("demo") != GroupID("demo") {
		t.Fatal("GroupID is not a function of the name")
	}
}
