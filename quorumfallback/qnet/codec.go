package qnet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/mcnode/mcnode/quorumfallback"
)

// Limits of the wire format.
const (
	// MaxFrame is the largest frame body, in bytes (without the length
	// prefix). A well-formed frame is far smaller (at most 318 bytes,
	// 1,335 with an update's data); the margin leaves room to append fields. A receiver that reads a larger
	// length prefix closes the connection: it cannot find the next frame.
	MaxFrame = 4096
	// MaxResource is the longest resource name (or update topic), in bytes.
	MaxResource = 255
	// MaxData is the largest application state update, in bytes: the
	// multicast mode's default limit (wire.DefaultLimits' MaxUpdate), so
	// that an application behaves alike in both modes.
	MaxData = 1024
)

// flagWithTransfer is bit 0 of the flags byte: Message.WithTransfer.
const flagWithTransfer = 1

// Codec errors. DecodeFrame's errors wrap ErrMalformed, AppendFrame's
// ErrInvalidFrame; the message says which field is wrong and why.
var (
	// ErrMalformed means bytes received are not a valid frame.
	ErrMalformed = errors.New("qnet: malformed frame")
	// ErrInvalidFrame means a frame cannot be encoded (or sent): a field is
	// out of the range the wire format carries.
	ErrInvalidFrame = errors.New("qnet: invalid frame")
)

// Frame is what travels between two nodes: one protocol message about one
// named resource (a node runs a protocol machine per resource), or an
// application state update (Msg.Kind quorumfallback.Update).
type Frame struct {
	// Resource names the lock the message is about (an update's topic), at
	// most MaxResource bytes of UTF-8.
	Resource string
	// Msg is the protocol message; its node ids must fit an int32.
	Msg quorumfallback.Message
	// Data is an update's content, at most MaxData bytes; empty for every
	// other kind. A string, so that frames compare with ==.
	Data string
	// Clock is the sender's Lamport clock for the resource: the highest
	// sequence number its machine has sent, received or seen. A receiver
	// raises its own to it (Lamport's rule: every message carries the
	// sender's clock), so that a node whose requests never reach another's
	// arbiters still learns how far the group's numbers have gone.
	Clock uint64
}

// validKind reports whether k may travel in a frame.
func validKind(k quorumfallback.Kind) bool {
	return k.Valid() || k >= quorumfallback.Update && k <= quorumfallback.Failure
}

// AppendFrame appends f to dst, encoded: the body's length as a uvarint,
// then the body. On error it returns dst unchanged, so that a caller
// appending to a queue never leaves half a frame in it.
func AppendFrame(dst []byte, f Frame) ([]byte, error) {
	if err := checkFrame(f); err != nil {
		return dst, err
	}
	m := f.Msg
	flags := byte(0)
	if m.WithTransfer {
		flags |= flagWithTransfer
	}
	// The body length is computed first so that the body is written in
	// place, after its prefix, with no scratch buffer.
	n := 1 + uvarintLen(uint64(m.From)) + uvarintLen(uint64(m.To)) + uvarintLen(uint64(m.Arbiter)) +
		uvarintLen(m.Seq) + uvarintLen(uint64(m.Site+1)) + uvarintLen(m.SiteSeq) + uvarintLen(m.Token) +
		uvarintLen(f.Clock) + 1 + uvarintLen(uint64(len(f.Resource))) + len(f.Resource)
	if m.Kind == quorumfallback.Update {
		n += uvarintLen(uint64(len(f.Data))) + len(f.Data)
	}
	if n > MaxFrame {
		// Unreachable with the limits above; kept so that a field added
		// later cannot produce a frame every receiver drops.
		return dst, fmt.Errorf("%w: body of %d bytes exceeds MaxFrame %d", ErrInvalidFrame, n, MaxFrame)
	}
	dst = binary.AppendUvarint(dst, uint64(n))
	dst = append(dst, byte(m.Kind))
	dst = binary.AppendUvarint(dst, uint64(m.From))
	dst = binary.AppendUvarint(dst, uint64(m.To))
	dst = binary.AppendUvarint(dst, uint64(m.Arbiter))
	dst = binary.AppendUvarint(dst, m.Seq)
	dst = binary.AppendUvarint(dst, uint64(m.Site+1))
	dst = binary.AppendUvarint(dst, m.SiteSeq)
	dst = binary.AppendUvarint(dst, m.Token)
	dst = binary.AppendUvarint(dst, f.Clock)
	dst = append(dst, flags)
	dst = binary.AppendUvarint(dst, uint64(len(f.Resource)))
	dst = append(dst, f.Resource...)
	if m.Kind == quorumfallback.Update {
		dst = binary.AppendUvarint(dst, uint64(len(f.Data)))
		dst = append(dst, f.Data...)
	}
	return dst, nil
}

// checkFrame rejects what DecodeFrame would reject, so that nothing is
// sent that the receiver drops.
func checkFrame(f Frame) error {
	m := f.Msg
	if !validKind(m.Kind) {
		return fmt.Errorf("%w: unknown kind %d", ErrInvalidFrame, m.Kind)
	}
	if len(f.Data) > MaxData || len(f.Data) > 0 && m.Kind != quorumfallback.Update {
		return fmt.Errorf("%w: %d bytes of data with a %v (want at most %d, and only with an update)", ErrInvalidFrame, len(f.Data), m.Kind, MaxData)
	}
	for _, id := range []struct {
		name string
		v    int
	}{{"From", m.From}, {"To", m.To}, {"Arbiter", m.Arbiter}} {
		if id.v < 0 || id.v > math.MaxInt32 {
			return fmt.Errorf("%w: %s %d not in [0, %d]", ErrInvalidFrame, id.name, id.v, math.MaxInt32)
		}
	}
	if m.Site < quorumfallback.None || m.Site > math.MaxInt32 {
		return fmt.Errorf("%w: Site %d not in [%d, %d]", ErrInvalidFrame, m.Site, quorumfallback.None, math.MaxInt32)
	}
	if len(f.Resource) > MaxResource {
		return fmt.Errorf("%w: resource name of %d bytes exceeds MaxResource %d", ErrInvalidFrame, len(f.Resource), MaxResource)
	}
	if f.Clock > quorumfallback.MaxCounter {
		return fmt.Errorf("%w: Clock %d over %d", ErrInvalidFrame, f.Clock, uint64(quorumfallback.MaxCounter))
	}
	if !utf8.ValidString(f.Resource) {
		return fmt.Errorf("%w: resource name %q is not valid UTF-8", ErrInvalidFrame, f.Resource)
	}
	return nil
}

// uvarintLen is the length of v encoded by binary.AppendUvarint.
func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// DecodeFrame decodes a frame body (without its length prefix). It never
// panics; every error wraps ErrMalformed and names the field and offset.
func DecodeFrame(body []byte) (Frame, error) {
	d := decoder{b: body}
	var f Frame
	m := &f.Msg
	m.Kind = quorumfallback.Kind(d.byte("kind"))
	if d.err == nil && !validKind(m.Kind) {
		d.fail("unknown kind %d", m.Kind)
	}
	m.From = d.node("From")
	m.To = d.node("To")
	m.Arbiter = d.node("Arbiter")
	m.Seq = d.uvarint("Seq")
	// Site is sent plus one so that None (-1) is 0.
	if site := d.uvarint("Site"); d.err == nil {
		if site > math.MaxInt32+1 {
			d.fail("Site %d overflows int32", site-1)
		}
		m.Site = quorumfallback.None
		if site > 0 {
			m.Site = int(site - 1)
		}
	}
	m.SiteSeq = d.uvarint("SiteSeq")
	m.Token = d.uvarint("Token")
	if f.Clock = d.uvarint("Clock"); d.err == nil && f.Clock > quorumfallback.MaxCounter {
		d.fail("Clock %d over %d", f.Clock, uint64(quorumfallback.MaxCounter))
	}
	if flags := d.byte("flags"); d.err == nil {
		if flags&^flagWithTransfer != 0 {
			d.fail("unknown flag bits %#02x", flags&^flagWithTransfer)
		}
		m.WithTransfer = flags&flagWithTransfer != 0
	}
	if n := d.uvarint("resource length"); d.err == nil {
		switch {
		case n > MaxResource:
			d.fail("resource name of %d bytes exceeds MaxResource %d", n, MaxResource)
		case n > uint64(len(d.b)-d.off):
			d.fail("truncated: resource name of %d bytes, %d left", n, len(d.b)-d.off)
		default:
			r := d.b[d.off : d.off+int(n)]
			if !utf8.Valid(r) {
				d.fail("resource name %q is not valid UTF-8", r)
			}
			f.Resource = string(r)
			d.off += int(n)
		}
	}
	if m.Kind == quorumfallback.Update {
		f.Data = d.bytes("data", MaxData)
	}
	if d.err == nil && d.off != len(d.b) {
		d.fail("%d trailing bytes", len(d.b)-d.off)
	}
	if d.err != nil {
		return Frame{}, d.err
	}
	return f, nil
}

// decoder reads a body field by field; after the first error every read
// returns zero, so DecodeFrame checks once per field it validates.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: at byte %d: %s", ErrMalformed, d.off, fmt.Sprintf(format, args...))
	}
}

func (d *decoder) byte(field string) byte {
	if d.err != nil {
		return 0
	}
	if d.off >= len(d.b) {
		d.fail("truncated before %s", field)
		return 0
	}
	c := d.b[d.off]
	d.off++
	return c
}

func (d *decoder) uvarint(field string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	switch {
	case n == 0:
		d.fail("truncated in %s", field)
		return 0
	case n < 0:
		d.fail("%s overflows 64 bits", field)
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) node(field string) int {
	v := d.uvarint(field)
	if d.err == nil && v > math.MaxInt32 {
		d.fail("%s %d overflows int32", field, v)
		return 0
	}
	return int(v)
}

// bytes reads a length-prefixed field of at most limit bytes.
func (d *decoder) bytes(field string, limit uint64) string {
	n := d.uvarint(field + " length")
	switch {
	case d.err != nil:
		return ""
	case n > limit:
		d.fail("%s of %d bytes exceeds %d", field, n, limit)
		return ""
	case n > uint64(len(d.b)-d.off):
		d.fail("truncated: %s of %d bytes, %d left", field, n, len(d.b)-d.off)
		return ""
	}
	v := string(d.b[d.off : d.off+int(n)])
	d.off += int(n)
	return v
}
