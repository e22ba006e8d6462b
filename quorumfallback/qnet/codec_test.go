package qnet

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"

	qf "github.com/mcnode/mcnode/quorumfallback"
)

// validFrames covers every field at its extremes.
func validFrames() []Frame {
	return []Frame{
		{Resource: "r", Msg: qf.Message{Kind: qf.Request, From: 1, To: 2, Arbiter: 1, Seq: 7, Site: qf.None}, Clock: 1795763902040253},
		{Resource: "", Msg: qf.Message{Kind: qf.Grant, From: 0, To: 3, Arbiter: 0, Seq: 1, Site: qf.None, Token: 42}},
		{Resource: "db/orders", Msg: qf.Message{Kind: qf.Grant, From: 4, To: 1, Arbiter: 2, Seq: 9, Site: 3, SiteSeq: 5, WithTransfer: true, Token: 8}},
		{Resource: "ünïcödé/锁", Msg: qf.Message{Kind: qf.Release, From: 2, To: 0, Arbiter: 2, Seq: 3, Site: 0, Token: 1}},
		{Resource: strings.Repeat("x", MaxResource), Msg: qf.Message{
			Kind: qf.Transfer, From: math.MaxInt32, To: math.MaxInt32, Arbiter: math.MaxInt32,
			Seq: math.MaxUint64, Site: math.MaxInt32, SiteSeq: math.MaxUint64, Token: math.MaxUint64, WithTransfer: true,
		}, Clock: qf.MaxCounter},
		{Resource: "a", Msg: qf.Message{Kind: qf.Failed, From: 5, To: 6, Arbiter: 5, Site: qf.None}},
		{Resource: "a", Msg: qf.Message{Kind: qf.Inquire, From: 5, To: 6, Arbiter: 5, Site: qf.None}},
		{Resource: "a", Msg: qf.Message{Kind: qf.Yield, From: 5, To: 6, Arbiter: 5, Site: qf.None}},
		{Resource: "a", Msg: qf.Message{Kind: qf.Query, From: 5, To: 6, Arbiter: 5, Seq: 4, Site: 2, SiteSeq: 3}},
		{Resource: "a", Msg: qf.Message{Kind: qf.Answer, From: 6, To: 5, Arbiter: 5, Seq: 4, Site: 6, Token: 11}},
		{Resource: "game", Msg: qf.Message{Kind: qf.Update, From: 1, To: 0, Arbiter: 1, Site: qf.None}, Data: "{\"x\":3}"},
		{Resource: "", Msg: qf.Message{Kind: qf.Update, From: 0, To: 1, Site: qf.None}},
		{Resource: "big", Msg: qf.Message{Kind: qf.Update, From: 0, To: 1, Site: qf.None}, Data: strings.Repeat("\x00", MaxData)},
	}
}

// bodyOf encodes f and strips the length prefix, checking it.
func bodyOf(t testing.TB, f Frame) []byte {
	t.Helper()
	b, err := AppendFrame(nil, f)
	if err != nil {
		t.Fatalf("AppendFrame(%v): %v", f.Msg, err)
	}
	n, k := binary.Uvarint(b)
	if k <= 0 || int(n) != len(b)-k {
		t.Fatalf("length prefix %d (%d bytes) for a body of %d bytes", n, k, len(b)-k)
	}
	return b[k:]
}

// raw builds a body field by field, so that tests can write what
// AppendFrame refuses to.
type raw struct {
	kind                                                 byte
	from, to, arbiter, seq, site1, siteSeq, token, clock uint64
	flags                                                byte
	resLen                                               uint64
	res                                                  string
}

func (r raw) body() []byte {
	b := []byte{r.kind}
	for _, v := range []uint64{r.from, r.to, r.arbiter, r.seq, r.site1, r.siteSeq, r.token, r.clock} {
		b = binary.AppendUvarint(b, v)
	}
	b = append(b, r.flags)
	b = binary.AppendUvarint(b, r.resLen)
	return append(b, r.res...)
}

// okRaw is a valid body to vary.
var okRaw = raw{kind: byte(qf.Request), from: 1, to: 2, arbiter: 1, seq: 3, resLen: 1, res: "r"}

func TestRoundTrip(t *testing.T) {
	for _, f := range validFrames() {
		got, err := DecodeFrame(bodyOf(t, f))
		if err != nil {
			t.Errorf("DecodeFrame(encoded %v): %v", f.Msg, err)
			continue
		}
		if got != f {
			t.Errorf("round trip changed the frame:\n got %+v\nwant %+v", got, f)
		}
	}
	// Frames appended back to back decode one by one.
	var stream []byte
	for _, f := range validFrames() {
		var err error
		if stream, err = AppendFrame(stream, f); err != nil {
			t.Fatal(err)
		}
	}
	for i, f := range validFrames() {
		n, k := binary.Uvarint(stream)
		got, err := DecodeFrame(stream[k : k+int(n)])
		if err != nil || got != f {
			t.Fatalf("frame %d of the stream: %+v, %v; want %+v", i, got, err, f)
		}
		stream = stream[k+int(n):]
	}
	if len(stream) != 0 {
		t.Errorf("%d bytes left over", len(stream))
	}
	// The largest frame the format allows fits MaxFrame with room to spare.
	if n := len(bodyOf(t, validFrames()[4])); n != 318 || n > MaxFrame {
		t.Errorf("largest body is %d bytes, want 318", n)
	}
}

func TestDecodeRejects(t *testing.T) {
	with := func(change func(*raw)) []byte {
		r := okRaw
		change(&r)
		return r.body()
	}
	cases := []struct {
		name string
		body []byte
		want string // in the error
	}{
		{"empty", nil, "truncated before kind"},
		{"kind 0", with(func(r *raw) { r.kind = 0 }), "unknown kind 0"},
		{"kind 14", with(func(r *raw) { r.kind = 14 }), "unknown kind 14"},
		{"update without its data", with(func(r *raw) { r.kind = byte(qf.Update) }), "truncated in data length"},
		{"update data too long", binary.AppendUvarint(with(func(r *raw) { r.kind = byte(qf.Update) }), MaxData+1), "data of 1025 bytes exceeds 1024"},
		{"update data past the end", binary.AppendUvarint(with(func(r *raw) { r.kind = byte(qf.Update) }), 3), "truncated: data of 3 bytes, 0 left"},
		{"From over int32", with(func(r *raw) { r.from = math.MaxInt32 + 1 }), "From 2147483648 overflows int32"},
		{"To over int32", with(func(r *raw) { r.to = math.MaxUint64 }), "To 18446744073709551615 overflows int32"},
		{"Arbiter over int32", with(func(r *raw) { r.arbiter = 1 << 40 }), "Arbiter 1099511627776 overflows int32"},
		{"Site over int32", with(func(r *raw) { r.site1 = math.MaxInt32 + 2 }), "Site 2147483648 overflows int32"},
		{"unknown flag 1", with(func(r *raw) { r.flags = 2 }), "unknown flag bits 0x02"},
		{"unknown flag 7", with(func(r *raw) { r.flags = 0x81 }), "unknown flag bits 0x80"},
		{"resource too long", with(func(r *raw) { r.resLen, r.res = MaxResource+1, strings.Repeat("x", MaxResource+1) }), "exceeds MaxResource"},
		{"resource length past the end", with(func(r *raw) { r.resLen = 5 }), "truncated: resource name of 5 bytes, 1 left"},
		{"resource not UTF-8", with(func(r *raw) { r.resLen, r.res = 2, "a\xff" }), "not valid UTF-8"},
		{"trailing byte", append(okRaw.body(), 0), "1 trailing bytes"},
		{"Clock over MaxCounter", with(func(r *raw) { r.clock = qf.MaxCounter + 1 }), "Clock 4611686018427387904 over"},
		{"uvarint over 64 bits", append([]byte{byte(qf.Request)}, bytes.Repeat([]byte{0xff}, 11)...), "From overflows 64 bits"},
	}
	for _, c := range cases {
		_, err := DecodeFrame(c.body)
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: DecodeFrame(%x) = %v, want ErrMalformed saying %q", c.name, c.body, err, c.want)
		}
	}
	// Every strict prefix of a valid body is truncated.
	for _, f := range validFrames() {
		body := bodyOf(t, f)
		for i := range body {
			if _, err := DecodeFrame(body[:i]); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "truncated") {
				t.Fatalf("%v cut at %d of %d bytes: %v, want a truncation error", f.Msg, i, len(body), err)
			}
		}
	}
	// The edges that are valid.
	f, err := DecodeFrame(with(func(r *raw) { r.site1 = math.MaxInt32 + 1 }))
	if err != nil || f.Msg.Site != math.MaxInt32 {
		t.Errorf("Site MaxInt32: %+v, %v", f, err)
	}
	if f, err = DecodeFrame(with(func(r *raw) { r.site1 = 0 })); err != nil || f.Msg.Site != qf.None {
		t.Errorf("Site None: %+v, %v", f, err)
	}
}

func TestAppendRejects(t *testing.T) {
	ok := validFrames()[0]
	cases := []struct {
		name   string
		change func(*Frame)
		want   string
	}{
		{"kind 0", func(f *Frame) { f.Msg.Kind = 0 }, "unknown kind 0"},
		{"kind 14", func(f *Frame) { f.Msg.Kind = 14 }, "unknown kind 14"},
		{"negative From", func(f *Frame) { f.Msg.From = -1 }, "From -1 not in"},
		{"To over int32", func(f *Frame) { f.Msg.To = math.MaxInt32 + 1 }, "To 2147483648 not in"},
		{"None Arbiter", func(f *Frame) { f.Msg.Arbiter = qf.None }, "Arbiter -1 not in"},
		{"Site below None", func(f *Frame) { f.Msg.Site = -2 }, "Site -2 not in"},
		{"Site over int32", func(f *Frame) { f.Msg.Site = math.MaxInt32 + 1 }, "Site 2147483648 not in"},
		{"resource too long", func(f *Frame) { f.Resource = strings.Repeat("é", 128) }, "256 bytes exceeds MaxResource"},
		{"resource not UTF-8", func(f *Frame) { f.Resource = "\xc3" }, `"\xc3" is not valid UTF-8`},
		{"data with a request", func(f *Frame) { f.Data = "x" }, "1 bytes of data with a request"},
		{"update too large", func(f *Frame) { f.Msg.Kind, f.Data = qf.Update, strings.Repeat("x", MaxData+1) }, "1025 bytes of data"},
	}
	for _, c := range cases {
		f := ok
		c.change(&f)
		dst := []byte("keep")
		got, err := AppendFrame(dst, f)
		if !errors.Is(err, ErrInvalidFrame) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: AppendFrame = %v, want ErrInvalidFrame saying %q", c.name, err, c.want)
		}
		if string(got) != "keep" {
			t.Errorf("%s: AppendFrame changed dst to %q", c.name, got)
		}
	}
}

// FuzzDecodeFrame: DecodeFrame never panics, and a frame it accepts
// re-encodes to a body that decodes to the same frame.
//
//	go test ./quorumfallback/qnet -run '^$' -fuzz FuzzDecodeFrame -fuzztime 30s
func FuzzDecodeFrame(f *testing.F) {
	for _, fr := range validFrames() {
		f.Add(bodyOf(f, fr))
	}
	for _, r := range []raw{
		{kind: 9, resLen: 0},
		{kind: 1, from: math.MaxInt32 + 1},
		{kind: 2, site1: math.MaxInt32 + 2},
		{kind: 3, flags: 0xfe},
		{kind: 4, resLen: 300, res: strings.Repeat("y", 300)},
		{kind: 5, resLen: 1, res: "\xff"},
	} {
		f.Add(r.body())
	}
	f.Add(append(okRaw.body(), 1, 2))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, body []byte) {
		fr, err := DecodeFrame(body)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		again, err := DecodeFrame(bodyOf(t, fr))
		if err != nil {
			t.Fatalf("re-encoded %+v does not decode: %v", fr, err)
		}
		if again != fr {
			t.Fatalf("round trip changed the frame:\n got %+v\nwant %+v", again, fr)
		}
	})
}
