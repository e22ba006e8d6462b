package wire

import (
	"encoding/binary"
	"fmt"
)

// maxDepth bounds how deeply msgpack containers may nest. The deepest message
// (a snapshot: resources → queue → waiter) needs 4.
const maxDepth = 8

// scanValue walks one msgpack value at b[0:] without allocating and returns its
// length in bytes. It checks every length prefix against the bytes that remain
// (a container of n values needs at least n bytes, a string of n bytes needs
// n bytes) so that the decoder that runs afterwards can never be asked to
// allocate more than the datagram holds. Extension types are not used by this
// protocol and are rejected.
func scanValue(b []byte, depth int) (int, error) {
	if depth > maxDepth {
		return 0, fmt.Errorf("%w: nesting deeper than %d", ErrMalformed, maxDepth)
	}
	if len(b) == 0 {
		return 0, fmt.Errorf("%w: value truncated", ErrMalformed)
	}
	c := b[0]
	switch {
	case c <= 0x7f || c >= 0xe0: // positive or negative fixint
		return 1, nil
	case c >= 0x80 && c <= 0x8f: // fixmap
		return scanContainer(b, 1, int(c&0x0f)*2, depth)
	case c >= 0x90 && c <= 0x9f: // fixarray
		return scanContainer(b, 1, int(c&0x0f), depth)
	case c >= 0xa0 && c <= 0xbf: // fixstr
		return scanBytes(b, 1, int(c&0x1f))
	}
	switch c {
	case 0xc0, 0xc2, 0xc3: // nil, false, true
		return 1, nil
	case 0xcc, 0xd0: // uint8, int8
		return fixed(b, 2)
	case 0xcd, 0xd1: // uint16, int16
		return fixed(b, 3)
	case 0xce, 0xd2, 0xca: // uint32, int32, float32
		return fixed(b, 5)
	case 0xcf, 0xd3, 0xcb: // uint64, int64, float64
		return fixed(b, 9)
	case 0xc4, 0xd9: // bin8, str8
		n, hl, err := length(b, 1)
		if err != nil {
			return 0, err
		}
		return scanBytes(b, hl, n)
	case 0xc5, 0xda: // bin16, str16
		n, hl, err := length(b, 2)
		if err != nil {
			return 0, err
		}
		return scanBytes(b, hl, n)
	case 0xc6, 0xdb: // bin32, str32
		n, hl, err := length(b, 4)
		if err != nil {
			return 0, err
		}
		return scanBytes(b, hl, n)
	case 0xdc: // array16
		n, hl, err := length(b, 2)
		if err != nil {
			return 0, err
		}
		return scanContainer(b, hl, n, depth)
	case 0xdd: // array32
		n, hl, err := length(b, 4)
		if err != nil {
			return 0, err
		}
		return scanContainer(b, hl, n, depth)
	case 0xde: // map16
		n, hl, err := length(b, 2)
		if err != nil {
			return 0, err
		}
		return scanContainer(b, hl, 2*n, depth)
	case 0xdf: // map32
		n, hl, err := length(b, 4)
		if err != nil {
			return 0, err
		}
		return scanContainer(b, hl, 2*n, depth)
	}
	return 0, fmt.Errorf("%w: unsupported msgpack type 0x%02x", ErrMalformed, c)
}

// length reads a big-endian length of size bytes after the type byte and
// returns it with the total header length.
func length(b []byte, size int) (n, headerLen int, err error) {
	if len(b) < 1+size {
		return 0, 0, fmt.Errorf("%w: length truncated", ErrMalformed)
	}
	switch size {
	case 1:
		n = int(b[1])
	case 2:
		n = int(binary.BigEndian.Uint16(b[1:]))
	default:
		u := binary.BigEndian.Uint32(b[1:])
		if uint64(u) > uint64(len(b)) { // cannot fit; also keeps int conversion safe
			return 0, 0, fmt.Errorf("%w: length %d exceeds the %d bytes left", ErrMalformed, u, len(b))
		}
		n = int(u)
	}
	return n, 1 + size, nil
}

func fixed(b []byte, n int) (int, error) {
	if len(b) < n {
		return 0, fmt.Errorf("%w: value truncated", ErrMalformed)
	}
	return n, nil
}

func scanBytes(b []byte, headerLen, n int) (int, error) {
	if n > len(b)-headerLen {
		return 0, fmt.Errorf("%w: %d-byte string or bin exceeds the %d bytes left", ErrMalformed, n, len(b)-headerLen)
	}
	return headerLen + n, nil
}

// scanContainer scans n values after a container header. Every value takes
// at least one byte, so a count larger than the bytes left is rejected before
// any value is read.
func scanContainer(b []byte, headerLen, n, depth int) (int, error) {
	off := headerLen
	if n > len(b)-off {
		return 0, fmt.Errorf("%w: container of %d values exceeds the %d bytes left", ErrMalformed, n, len(b)-off)
	}
	for i := 0; i < n; i++ {
		k, err := scanValue(b[off:], depth+1)
		if err != nil {
			return 0, err
		}
		off += k
	}
	return off, nil
}
