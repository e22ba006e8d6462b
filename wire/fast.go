package wire

import (
	"encoding/binary"
	"math"
)

// The messages of every lock (requests, the server's decisions, releases,
// pings and their answers, the backup's acks) are decoded by hand when they
// come as this package's encoder writes them: one msgpack array with a
// value for every field, unsigned integers in any of msgpack's unsigned
// forms, strings as str, booleans as such. That is nearly every datagram a
// busy group reads, and the reflection of the msgpack library cost about a
// sixth of a node's CPU time at heavy load (docs/BENCHMARKS.md, "Decoding
// by hand"). Anything else (another encoder's forms, fields added by a newer
// version, a kind not listed here) goes to the library, which decides. The
// two agree on every body the hand decoder takes (FuzzDecodeFast), so the
// choice changes nothing but the time.

// decodeFast decodes body into m if m is of a kind it knows and body is in
// the encoder's own forms, and reports whether it did. It never panics, and
// on false m is untouched.
func decodeFast(body []byte, m Message) bool {
	r := fastReader{b: body}
	switch m := m.(type) {
	case *Request:
		if r.array(4) {
			v := Request{Req: r.uint(), Resource: r.str(), Floor: r.uint(), Retry: r.bool()}
			return r.done() && set(m, v)
		}
	case *Grant:
		if r.array(8) {
			v := Grant{T: r.uint(), Next: r.uint(), Epoch: r.uint(), Node: NodeID(r.uint()), Req: r.uint(), Resource: r.str(), Floor: r.uint(), Queued: r.bool()}
			return r.done() && set(m, v)
		}
	case *Release:
		if r.array(4) {
			v := Release{Req: r.uint(), Resource: r.str(), Token: r.uint(), Retry: r.bool()}
			return r.done() && set(m, v)
		}
	case *Cancel:
		if r.array(3) {
			v := Cancel{Req: r.uint(), Resource: r.str(), Retry: r.bool()}
			return r.done() && set(m, v)
		}
	case *Released:
		if r.array(9) {
			v := Released{T: r.uint(), Next: r.uint(), Epoch: r.uint(), Node: NodeID(r.uint()), Req: r.uint(), Resource: r.str(), Token: r.uint(), Withdrawn: r.bool(), Floor: r.uint()}
			return r.done() && set(m, v)
		}
	case *Ping:
		if r.array(8) {
			v := Ping{Turn: r.uint(), Probe: r.uint(), Reachable: r.uint32(), Prev: r.uint(), ViewT: r.uint(), Unanswered: r.ids(), ByAnswer: r.bool(), Answered: r.ids()}
			return r.done() && set(m, v)
		}
	case *PingReply:
		if r.array(2) {
			v := PingReply{Turn: r.uint(), Probe: r.uint()}
			return r.done() && set(m, v)
		}
	case *Ack:
		return r.array(0) && r.done() && set(m, Ack{})
	case *AckRequest:
		if r.array(1) {
			v := AckRequest{T: r.uint()}
			return r.done() && set(m, v)
		}
	}
	return false
}

func set[T any](m *T, v T) bool {
	*m = v
	return true
}

// fastReader reads msgpack values in the forms the encoder writes. The
// first value in another form, or past the end, makes it fail for good
// (ok false), and every read after returns a zero value.
type fastReader struct {
	b      []byte
	failed bool
}

func (r *fastReader) fail() { r.failed, r.b = true, nil }

// done reports whether every read succeeded and the body is used up.
func (r *fastReader) done() bool { return !r.failed && len(r.b) == 0 }

// array reads the header of an array of exactly n values.
func (r *fastReader) array(n int) bool {
	if len(r.b) == 0 || r.b[0] != 0x90|byte(n) || n > 15 {
		r.fail()
		return false
	}
	r.b = r.b[1:]
	return true
}

func (r *fastReader) uint() uint64 {
	if len(r.b) == 0 {
		r.fail()
		return 0
	}
	c := r.b[0]
	var size int
	switch {
	case c <= 0x7f:
		r.b = r.b[1:]
		return uint64(c)
	case c == 0xcc:
		size = 1
	case c == 0xcd:
		size = 2
	case c == 0xce:
		size = 4
	case c == 0xcf:
		size = 8
	default:
		r.fail()
		return 0
	}
	if len(r.b) < 1+size {
		r.fail()
		return 0
	}
	var v uint64
	for _, x := range r.b[1 : 1+size] {
		v = v<<8 | uint64(x)
	}
	r.b = r.b[1+size:]
	return v
}

func (r *fastReader) uint32() uint32 {
	v := r.uint()
	if v > math.MaxUint32 {
		r.fail()
		return 0
	}
	return uint32(v)
}

func (r *fastReader) str() string {
	if len(r.b) == 0 {
		r.fail()
		return ""
	}
	c := r.b[0]
	var n, head int
	switch {
	case c >= 0xa0 && c <= 0xbf:
		n, head = int(c&0x1f), 1
	case c == 0xd9 && len(r.b) >= 2:
		n, head = int(r.b[1]), 2
	case c == 0xda && len(r.b) >= 3:
		n, head = int(binary.BigEndian.Uint16(r.b[1:])), 3
	default:
		r.fail()
		return ""
	}
	if len(r.b) < head+n {
		r.fail()
		return ""
	}
	s := string(r.b[head : head+n])
	r.b = r.b[head+n:]
	return s
}

func (r *fastReader) bool() bool {
	if len(r.b) == 0 || (r.b[0] != 0xc2 && r.b[0] != 0xc3) {
		r.fail()
		return false
	}
	v := r.b[0] == 0xc3
	r.b = r.b[1:]
	return v
}

// ids reads a list of member IDs: nil as the encoder writes an empty one,
// or a fixarray of them (longer lists go to the library).
func (r *fastReader) ids() []NodeID {
	if len(r.b) == 0 {
		r.fail()
		return nil
	}
	if r.b[0] == 0xc0 {
		r.b = r.b[1:]
		return nil
	}
	if r.b[0] < 0x90 || r.b[0] > 0x9f {
		r.fail()
		return nil
	}
	n := int(r.b[0] & 0x0f)
	r.b = r.b[1:]
	ids := make([]NodeID, n)
	for i := range ids {
		ids[i] = NodeID(r.uint())
	}
	return ids
}

// appendFast appends the msgpack body of m, of a kind decodeFast knows, in
// the forms the msgpack library writes them (the smallest form of each
// unsigned integer, str for strings), byte for byte the same
// (FuzzAppendFast), and reports whether it could.
func appendFast(b []byte, m Message) ([]byte, bool) {
	if longName(m) {
		return b, false
	}
	switch m := m.(type) {
	case *Request:
		b = append(b, 0x94)
		b = appendStr(appendUint(b, m.Req), m.Resource)
		return appendBool(appendUint(b, m.Floor), m.Retry), true
	case *Grant:
		b = append(b, 0x98)
		b = appendUint(appendUint(appendUint(appendUint(appendUint(b, m.T), m.Next), m.Epoch), uint64(m.Node)), m.Req)
		return appendBool(appendUint(appendStr(b, m.Resource), m.Floor), m.Queued), true
	case *Release:
		b = append(b, 0x94)
		b = appendStr(appendUint(b, m.Req), m.Resource)
		return appendBool(appendUint(b, m.Token), m.Retry), true
	case *Cancel:
		b = append(b, 0x93)
		return appendBool(appendStr(appendUint(b, m.Req), m.Resource), m.Retry), true
	case *Released:
		b = append(b, 0x99)
		b = appendUint(appendUint(appendUint(appendUint(appendUint(b, m.T), m.Next), m.Epoch), uint64(m.Node)), m.Req)
		return appendUint(appendBool(appendUint(appendStr(b, m.Resource), m.Token), m.Withdrawn), m.Floor), true
	case *Ping:
		if len(m.Unanswered) > 15 || len(m.Answered) > 15 {
			return b, false
		}
		b = append(b, 0x98)
		b = appendUint(appendUint(appendUint(appendUint(appendUint(b, m.Turn), m.Probe), uint64(m.Reachable)), m.Prev), m.ViewT)
		b = appendIDs(b, m.Unanswered)
		return appendIDs(appendBool(b, m.ByAnswer), m.Answered), true
	case *PingReply:
		return appendUint(appendUint(append(b, 0x92), m.Turn), m.Probe), true
	case *Ack:
		return append(b, 0x90), true
	case *AckRequest:
		return appendUint(append(b, 0x91), m.T), true
	}
	return b, false
}

// longName reports whether m names a resource too long for appendStr.
func longName(m Message) bool {
	var name string
	switch m := m.(type) {
	case *Request:
		name = m.Resource
	case *Grant:
		name = m.Resource
	case *Release:
		name = m.Resource
	case *Cancel:
		name = m.Resource
	case *Released:
		name = m.Resource
	}
	return len(name) > math.MaxUint16
}

func appendUint(b []byte, v uint64) []byte {
	switch {
	case v <= 0x7f:
		return append(b, byte(v))
	case v <= math.MaxUint8:
		return append(b, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xcf), v)
}

// appendStr appends a string of at most 65,535 bytes (see longName).
func appendStr(b []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n <= math.MaxUint8:
		b = append(b, 0xd9, byte(n))
	default:
		b = binary.BigEndian.AppendUint16(append(b, 0xda), uint16(n))
	}
	return append(b, s...)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 0xc3)
	}
	return append(b, 0xc2)
}

// appendIDs appends a list of at most 15 IDs as the library writes it: nil
// as msgpack nil, else a fixarray.
func appendIDs(b []byte, ids []NodeID) []byte {
	if ids == nil {
		return append(b, 0xc0)
	}
	b = append(b, 0x90|byte(len(ids)))
	for _, id := range ids {
		b = appendUint(b, uint64(id))
	}
	return b
}
