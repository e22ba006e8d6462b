package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

// Version is the wire format version carried in every datagram. A node drops
// datagrams of another version.
const Version = 10

// magic opens every mcnode datagram ("mc").
var magic = [2]byte{'m', 'c'}

// Decode errors. Every error Decode returns wraps one of these, inside a
// *DecodeError that says where it happened.
var (
	// ErrShort means the datagram is shorter than its header.
	ErrShort = errors.New("wire: datagram shorter than its header")
	// ErrMagic means the datagram does not start with the mcnode magic number.
	ErrMagic = errors.New("wire: not an mcnode datagram (bad magic number)")
	// ErrVersion means the datagram is of an unsupported format version.
	ErrVersion = errors.New("wire: unsupported format version")
	// ErrTooLarge means the datagram, or a message, exceeds MaxDatagram.
	ErrTooLarge = errors.New("wire: datagram larger than the limit")
	// ErrSealed means the datagram is sealed with a group key: open it
	// with the key first (package seal).
	ErrSealed = errors.New("wire: datagram sealed with a group key")
	// ErrMalformed means a message's framing or encoding is broken.
	ErrMalformed = errors.New("wire: malformed message")
	// ErrLimit means a decoded value is over one of the Limits.
	ErrLimit = errors.New("wire: value over limit")
	// ErrEmpty means the datagram carries no message.
	ErrEmpty = errors.New("wire: datagram carries no message")
)

// DecodeError reports what was wrong with a datagram and where.
type DecodeError struct {
	Offset int   // byte offset in the datagram
	Kind   Kind  // the message being decoded, or 0 in the header
	Err    error // wraps one of the Err* sentinels
}

func (e *DecodeError) Error() string {
	if e.Kind == 0 {
		return fmt.Sprintf("%v (at byte %d)", e.Err, e.Offset)
	}
	return fmt.Sprintf("%v (%s message at byte %d)", e.Err, e.Kind, e.Offset)
}

// Unwrap returns the underlying error, for errors.Is.
func (e *DecodeError) Unwrap() error { return e.Err }

// Header opens every datagram. Every message in the datagram is from the same
// sender at the same group timestamp T (the sender's; a receiver that sees a
// larger T than its own knows it has decisions to catch up on).
//
// (LogEpoch, T) is the sender's position in the log: it has applied every
// decision below T, the last of them made in epoch LogEpoch. Epoch is the
// highest epoch the sender has promised (voted for or entered): a server of a
// lower epoch is stale to it.
type Header struct {
	Group    uint64 // GroupID of the group name: two groups on one address ignore each other
	Instance uint64 // the incarnation of the member that founded this run of the group
	From     NodeID // the sender's logical ID, 0 before it is admitted
	Inc      uint64 // the sender's incarnation ID
	T        uint64 // the sender's group timestamp
	Epoch    uint64 // the highest epoch the sender has promised
	LogEpoch uint64 // the epoch of the last decision the sender applied
	// For names the members a multicast datagram is for; the zero value
	// is every member. The others have no use for it and may drop it
	// unread (see Recipients). A NotMember, sent directly, names in it the
	// ID it answers.
	For Recipients
}

// Packet is a decoded datagram.
type Packet struct {
	Header
	Messages []Message
	// Unknown counts messages of kinds this version does not know, which
	// Decode skips (a newer peer may send them).
	Unknown int
}

// GroupID hashes a group name to the identifier carried in every header
// (64-bit FNV-1a).
func GroupID(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64()
}

// handle is the msgpack configuration shared by every encoder and decoder: new
// string and binary formats, structs as arrays (their fields are tagged
// toarray), and no preallocation beyond what the scan already proved fits.
var handle = func() *codec.MsgpackHandle {
	h := &codec.MsgpackHandle{WriteExt: true}
	h.MaxInitLen = 64
	return h
}()

// Codec encodes and decodes datagrams. It keeps its buffers between calls, so
// it is not safe for concurrent use: give each goroutine its own.
type Codec struct {
	limits Limits
	enc    *codec.Encoder
	dec    *codec.Decoder
	body   []byte
}

// NewCodec returns a codec for the given limits.
func NewCodec(l Limits) (*Codec, error) {
	if err := l.Check(); err != nil {
		return nil, err
	}
	c := &Codec{limits: l}
	c.enc = codec.NewEncoderBytes(&c.body, handle)
	c.dec = codec.NewDecoderBytes(nil, handle)
	return c, nil
}

// Limits returns the codec's limits.
func (c *Codec) Limits() Limits { return c.limits }

// AppendHeader appends the datagram header (HeaderLen bytes).
func AppendHeader(dst []byte, h Header) []byte {
	dst = append(dst, magic[0], magic[1], Version, 0)
	dst = binary.BigEndian.AppendUint64(dst, h.Group)
	dst = binary.BigEndian.AppendUint64(dst, h.Instance)
	dst = binary.BigEndian.AppendUint64(dst, uint64(h.From))
	dst = binary.BigEndian.AppendUint64(dst, h.Inc)
	dst = binary.BigEndian.AppendUint64(dst, h.T)
	dst = binary.BigEndian.AppendUint64(dst, h.Epoch)
	dst = binary.BigEndian.AppendUint64(dst, h.LogEpoch)
	for _, id := range h.For {
		dst = binary.BigEndian.AppendUint32(dst, id)
	}
	return dst
}

// AppendMessage validates m and appends it framed: type byte, body length
// (uvarint), msgpack body (by hand for the kinds appendFast knows).
func (c *Codec) AppendMessage(dst []byte, m Message) ([]byte, error) {
	if err := m.Validate(c.limits); err != nil {
		return dst, fmt.Errorf("wire: not sending invalid %s: %w", m.Kind(), err)
	}
	c.body = c.body[:0]
	var ok bool
	if c.body, ok = appendFast(c.body, m); !ok {
		c.enc.ResetBytes(&c.body)
		if err := c.enc.Encode(m); err != nil {
			return dst, fmt.Errorf("wire: encoding %s: %w", m.Kind(), err)
		}
	}
	dst = append(dst, byte(m.Kind()))
	dst = binary.AppendUvarint(dst, uint64(len(c.body)))
	return append(dst, c.body...), nil
}

// Pack encodes msgs into as few datagrams as it can, in order, each at most
// MaxDatagram bytes and each starting with h. A single message that does not
// fit in an empty datagram is an error (ErrTooLarge); nothing is returned
// then.
func (c *Codec) Pack(h Header, msgs []Message) ([][]byte, error) {
	var out [][]byte
	err := c.PackEach(h, msgs, func(data []byte, _ *Packet) { out = append(out, data) })
	return out, err
}

// PackEach packs like Pack and calls emit with each datagram and the packet
// it carries (for accounting). It encodes every message before it emits
// anything, so on error nothing has been emitted.
func (c *Codec) PackEach(h Header, msgs []Message, emit func(data []byte, p *Packet)) error {
	frames := make([][]byte, len(msgs))
	for i, m := range msgs {
		frame, err := c.AppendMessage(nil, m)
		if err != nil {
			return err
		}
		if HeaderLen+len(frame) > c.limits.MaxDatagram {
			return fmt.Errorf("%w: %s message of %d bytes", ErrTooLarge, m.Kind(), len(frame))
		}
		frames[i] = frame
	}
	for start := 0; start < len(frames); {
		size, end := HeaderLen, start
		for end < len(frames) && size+len(frames[end]) <= c.limits.MaxDatagram {
			size += len(frames[end])
			end++
		}
		data := AppendHeader(make([]byte, 0, size), h)
		for _, f := range frames[start:end] {
			data = append(data, f...)
		}
		emit(data, &Packet{Header: h, Messages: msgs[start:end]})
		start = end
	}
	return nil
}

// flagSealed, in the header's flags byte, marks a datagram sealed with a
// group key (package seal): only a node with the key can read its messages.
const flagSealed = 0x01

// IsSealed reports whether a datagram (at least HeaderLen bytes) is sealed.
func IsSealed(datagram []byte) bool { return datagram[3]&flagSealed != 0 }

// SetSealed sets or clears the sealed flag of a header in place.
func SetSealed(header []byte, sealed bool) {
	if sealed {
		header[3] |= flagSealed
	} else {
		header[3] &^= flagSealed
	}
}

// PeekGroup returns the group ID of a datagram, sealed or not, if it is
// long enough and of this wire version.
func PeekGroup(b []byte) (uint64, bool) {
	if len(b) < HeaderLen || b[0] != magic[0] || b[1] != magic[1] || b[2] != Version {
		return 0, false
	}
	return binary.BigEndian.Uint64(b[4:]), true
}

// PeekHeader returns a datagram's header, sealed or not (a sealed
// datagram's header travels in clear), if it is long enough and of this
// wire version. Unauthenticated when sealed: only for what a forger could
// cause anyway.
func PeekHeader(b []byte) (Header, bool) {
	if _, ok := PeekGroup(b); !ok {
		return Header{}, false
	}
	return headerAt(b), true
}

// DecodeHeader decodes and checks the datagram header alone, so that a
// receiver can drop foreign-group datagrams before decoding any message.
func DecodeHeader(b []byte) (Header, error) {
	if len(b) < HeaderLen {
		return Header{}, &DecodeError{Offset: len(b), Err: ErrShort}
	}
	if b[0] != magic[0] || b[1] != magic[1] {
		return Header{}, &DecodeError{Offset: 0, Err: ErrMagic}
	}
	if b[2] != Version {
		return Header{}, &DecodeError{Offset: 2, Err: fmt.Errorf("%w %d (this node speaks %d)", ErrVersion, b[2], Version)}
	}
	if IsSealed(b) {
		return Header{}, &DecodeError{Offset: 3, Err: ErrSealed}
	}
	return headerAt(b), nil
}

// headerAt decodes the header of b, which is at least HeaderLen long.
func headerAt(b []byte) Header {
	return Header{
		Group:    binary.BigEndian.Uint64(b[4:]),
		Instance: binary.BigEndian.Uint64(b[12:]),
		From:     NodeID(binary.BigEndian.Uint64(b[20:])),
		Inc:      binary.BigEndian.Uint64(b[28:]),
		T:        binary.BigEndian.Uint64(b[36:]),
		Epoch:    binary.BigEndian.Uint64(b[44:]),
		LogEpoch: binary.BigEndian.Uint64(b[52:]),
		For:      recipientsAt(b),
	}
}

// Decode decodes a datagram. It never panics: whatever the input, it returns
// either a packet whose every message passed Validate, or a *DecodeError.
// Messages of unknown kinds are skipped and counted.
func (c *Codec) Decode(b []byte) (Packet, error) {
	if len(b) > c.limits.MaxDatagram {
		return Packet{}, &DecodeError{Offset: c.limits.MaxDatagram, Err: fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(b), c.limits.MaxDatagram)}
	}
	h, err := DecodeHeader(b)
	if err != nil {
		return Packet{}, err
	}
	p := Packet{Header: h}
	off := HeaderLen
	for off < len(b) {
		start := off
		k := Kind(b[off])
		off++
		n, w := binary.Uvarint(b[off:])
		if w <= 0 || n > uint64(len(b)-off-w) {
			return Packet{}, &DecodeError{Offset: start, Kind: k, Err: fmt.Errorf("%w: body length runs past the datagram", ErrMalformed)}
		}
		off += w
		body := b[off : off+int(n)]
		off += int(n)
		m := newMessage(k)
		if m == nil {
			p.Unknown++
			continue
		}
		if err := c.decodeBody(body, m); err != nil {
			return Packet{}, &DecodeError{Offset: start, Kind: k, Err: err}
		}
		p.Messages = append(p.Messages, m)
	}
	if len(p.Messages) == 0 && p.Unknown == 0 {
		return Packet{}, &DecodeError{Offset: off, Err: ErrEmpty}
	}
	return p, nil
}

// decodeBody decodes and validates one msgpack body into m: by hand if it
// can (decodeFast), else through the library after a scan.
func (c *Codec) decodeBody(body []byte, m Message) error {
	if !decodeFast(body, m) {
		if err := c.unmarshal(body, m); err != nil {
			return err
		}
	}
	return m.Validate(c.limits)
}

// unmarshal scans body for sound lengths, then decodes it into v. The body
// must be exactly one msgpack array (structs travel as arrays).
func (c *Codec) unmarshal(body []byte, v any) error {
	if len(body) == 0 || !isArray(body[0]) {
		return fmt.Errorf("%w: body is not a msgpack array", ErrMalformed)
	}
	n, err := scanValue(body, 0)
	if err != nil {
		return err
	}
	if n != len(body) {
		return fmt.Errorf("%w: %d stray bytes after the body", ErrMalformed, len(body)-n)
	}
	c.dec.ResetBytes(body)
	if err := c.dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return nil
}

func isArray(c byte) bool { return (c >= 0x90 && c <= 0x9f) || c == 0xdc || c == 0xdd }

// Decode decodes one datagram under the default limits, with a throwaway
// codec. Hot paths keep a Codec instead.
func Decode(b []byte) (Packet, error) {
	c, _ := NewCodec(DefaultLimits())
	return c.Decode(b)
}
