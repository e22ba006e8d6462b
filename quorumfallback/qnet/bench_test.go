package qnet

import (
	"testing"

	qf "github.com/mcnode/mcnode/quorumfallback"
)

// Sinks keep the benchmarks' results alive.
var (
	sinkBytes []byte
	sinkFrame Frame
)

// benchFrame is a frame and the name of its kind.
type benchFrame struct {
	name  string
	frame Frame
}

// benchFrames holds one frame of every message kind, in kind order, about
// the lock "lock-1" in a group of 13, with the fields each kind carries in a
// run: sequence numbers, fencing tokens, Cao and Singhal's third party and
// piggybacked transfer.
func benchFrames() []benchFrame {
	msg := func(m qf.Message) Frame { return Frame{Resource: "lock-1", Msg: m} }
	return []benchFrame{
		{"Request", msg(qf.Message{Kind: qf.Request, From: 4, To: 9, Arbiter: 4, Seq: 1042, Site: qf.None})},
		{"Grant", msg(qf.Message{Kind: qf.Grant, From: 9, To: 4, Arbiter: 9, Seq: 1042, Site: 7, SiteSeq: 1038, WithTransfer: true, Token: 88213})},
		{"Release", msg(qf.Message{Kind: qf.Release, From: 4, To: 9, Arbiter: 4, Seq: 1042, Site: 7, Token: 88214})},
		{"Failed", msg(qf.Message{Kind: qf.Failed, From: 9, To: 4, Arbiter: 9, Seq: 1042, Site: qf.None})},
		{"Inquire", msg(qf.Message{Kind: qf.Inquire, From: 9, To: 7, Arbiter: 9, Seq: 1038, Site: qf.None})},
		{"Yield", msg(qf.Message{Kind: qf.Yield, From: 7, To: 9, Arbiter: 7, Seq: 1038, Site: qf.None})},
		{"Transfer", msg(qf.Message{Kind: qf.Transfer, From: 9, To: 7, Arbiter: 9, Seq: 1038, Site: 4, SiteSeq: 1042})},
	}
}

// benchKinds returns benchFrames after checking that it holds one frame of
// every kind, in kind order, so that a kind added without a benchmark fails.
func benchKinds(b *testing.B) []benchFrame {
	b.Helper()
	frames := benchFrames()
	k := qf.Request
	for _, f := range frames {
		if f.frame.Msg.Kind != k {
			b.Fatalf("benchmark frame %q is a %v, want a %v", f.name, f.frame.Msg.Kind, k)
		}
		k++
	}
	if k.Valid() {
		b.Fatalf("no benchmark frame for kind %v", k)
	}
	return frames
}

// BenchmarkAppendFrame encodes one frame of each kind. One op is one
// AppendFrame (checks, length prefix, body) onto a reused buffer.
func BenchmarkAppendFrame(b *testing.B) {
	for _, f := range benchKinds(b) {
		b.Run(f.name, func(b *testing.B) {
			buf := make([]byte, 0, 64)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				var err error
				if buf, err = AppendFrame(buf[:0], f.frame); err != nil {
					b.Fatal(err)
				}
			}
			sinkBytes = buf
		})
	}
}

// BenchmarkDecodeFrame decodes one frame of each kind. One op is one
// DecodeFrame of the body AppendFrame produced (without its length prefix,
// as the reader hands it over), resource name included.
func BenchmarkDecodeFrame(b *testing.B) {
	for _, f := range benchKinds(b) {
		b.Run(f.name, func(b *testing.B) {
			body := bodyOf(b, f.frame)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				got, err := DecodeFrame(body)
				if err != nil {
					b.Fatal(err)
				}
				sinkFrame = got
			}
			if sinkFrame != f.frame {
				b.Fatalf("decoded %+v, want %+v", sinkFrame, f.frame)
			}
		})
	}
}
