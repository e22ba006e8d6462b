// Package seal authenticates and encrypts mcnode datagrams with a group key:
// a node that holds the key drops every datagram it cannot authenticate
// (fail closed), and every datagram it has already taken (a per-sender
// replay window).
//
// The cipher is XChaCha20-Poly1305 (golang.org/x/crypto). Its 192-bit nonce
// is built from the sender's incarnation (a random 64-bit number drawn at
// every start, which the datagram header carries) and a sequence number
// that the sender counts up from 1 for each incarnation: unique without any
// state kept across restarts, which AES-GCM's 96-bit nonce could not give
// safely from random incarnations. It is also fast in software on machines
// without AES instructions.
//
// A sealed datagram is the plain wire header, with its sealed flag set,
// then the key's ID (4 bytes), the sequence number (8 bytes) and the
// encrypted messages with their 16-byte tag. The header, the key ID and the
// sequence number are the associated data: readable, for dropping another
// group's datagrams without a key, and authenticated. So is, without being
// sent, where the datagram was sent to (the group, or one member's
// address): a datagram sent to one member opens nowhere else.
//
// Replay protection is per receiver, from when it starts: a node takes each
// sender's datagrams once, and none older than the first it took from that
// sender on each path (multicast, direct); the first datagrams of a path
// that arrive out of order are dropped, and sent again. A node that has just
// started may take datagrams captured before it started (each once, in the
// order they were sent), and a window forgotten to make room (the least
// recently used of maxWindows) lets its path's old datagrams in again, once
// each: the protocol drops such datagrams as stale, since everything a node
// acts on as a newcomer names its own incarnation, which is new, and a
// member's log and epoch have moved past them.
package seal

import (
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/mcnode/mcnode/wire"
)

// KeySize is the size of a group key in bytes.
const KeySize = chacha20poly1305.KeySize

// Overhead is how many bytes sealing adds to a datagram.
const Overhead = 4 + 8 + chacha20poly1305.Overhead

// Errors returned by Open; each is a reason a datagram was dropped.
var (
	// ErrUnsealed: the datagram is not sealed, and this node has a key.
	ErrUnsealed = errors.New("seal: datagram not sealed, and this group has a key")
	// ErrUnknownKey: sealed with a key this node does not hold.
	ErrUnknownKey = errors.New("seal: sealed with a key not in the ring")
	// ErrBadMAC: the datagram does not authenticate under the key it names.
	ErrBadMAC = errors.New("seal: datagram does not authenticate")
	// ErrReplay: the datagram was taken before, or is too old to tell.
	ErrReplay = errors.New("seal: datagram replayed")
	// ErrShort: too short to be a sealed datagram.
	ErrShort = errors.New("seal: datagram too short")
)

// Key is a group key: 32 secret bytes, named by an ID derived from them.
// It prints as its ID alone; Encode gives the secret, for a key file.
type Key struct {
	Secret [KeySize]byte
}

// ID names the key on the wire and in key listings: the first 4 bytes of
// the SHA-256 of the secret, so that nobody has to number keys by hand.
func (k Key) ID() uint32 {
	sum := sha256.Sum256(k.Secret[:])
	return binary.BigEndian.Uint32(sum[:4])
}

// Encode renders the key as it is written in a key file: base64.
func (k Key) Encode() string { return base64.StdEncoding.EncodeToString(k.Secret[:]) }

// String names the key without giving the secret away, so that a key that
// ends up in a log or an error message leaks nothing.
func (k Key) String() string { return "key " + FormatID(k.ID()) }

// GenerateKey returns a new random key.
func GenerateKey() (Key, error) {
	var k Key
	if _, err := rand.Read(k.Secret[:]); err != nil {
		return Key{}, fmt.Errorf("seal: generating a key: %w", err)
	}
	return k, nil
}

// ParseKey reads a key written as base64 (standard encoding, as
// `mcnode keygen` prints it).
func ParseKey(s string) (Key, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return Key{}, fmt.Errorf("seal: key is not base64: %w", err)
	}
	if len(b) != KeySize {
		return Key{}, fmt.Errorf("seal: key is %d bytes, want %d", len(b), KeySize)
	}
	var k Key
	copy(k.Secret[:], b)
	return k, nil
}

// FormatID renders a key ID as key listings show it.
func FormatID(id uint32) string { return fmt.Sprintf("%08x", id) }

// Ring holds the keys a node accepts and the one it seals with (the
// primary). Keys are rotated without losing a datagram: install the new key
// everywhere (it is accepted from then on), make it primary everywhere,
// then remove the old one. A Ring is not safe for concurrent use.
type Ring struct {
	keys    []entry // the primary first
	windows map[path]*window
	used    uint64 // counts Opens, to tell which window was used last
	// self is the incarnation this ring last sealed for: this node's own.
	// A node never takes its own datagrams, so one that comes back (sent
	// back by someone who captured it) is a replay, though no window holds
	// it.
	self uint64
}

// path is one sender incarnation's datagrams to this node by one way:
// multicast, or direct. Each way keeps its own order (one socket each), so
// each has its own window.
type path struct {
	inc       uint64
	multicast bool
}

// Multicast is the destination of a datagram sent to the whole group, for
// Seal and Open; a datagram sent to one member names its address instead.
const Multicast = ""

type entry struct {
	key  Key
	id   uint32
	aead cipher.AEAD
}

func newEntry(k Key) entry {
	aead, err := chacha20poly1305.NewX(k.Secret[:])
	if err != nil {
		panic(err) // only a key of the wrong size fails, and a Key has the right one
	}
	return entry{key: k, id: k.ID(), aead: aead}
}

// NewRing returns a ring that seals with primary and accepts it and others.
// Two different keys with one ID are refused.
func NewRing(primary Key, others ...Key) (*Ring, error) {
	r := &Ring{windows: map[path]*window{}}
	r.keys = append(r.keys, newEntry(primary))
	for _, k := range others {
		if err := r.Install(k); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Install adds a key that is accepted from now on; the primary is unchanged.
// Installing a key again changes nothing; a different key with the ID of
// one installed is refused (IDs are 32 bits: make another key).
func (r *Ring) Install(k Key) error {
	i := r.find(k.ID())
	switch {
	case i < 0:
		r.keys = append(r.keys, newEntry(k))
	case !Equal(r.keys[i].key, k):
		return fmt.Errorf("seal: another key already has ID %s: make a new key", FormatID(k.ID()))
	}
	return nil
}

// Use makes the installed key with this ID the primary.
func (r *Ring) Use(id uint32) error {
	i := r.find(id)
	if i < 0 {
		return noSuchKey(id)
	}
	r.keys[0], r.keys[i] = r.keys[i], r.keys[0]
	return nil
}

// Remove drops the key with this ID. The primary cannot be removed: make
// another primary first.
func (r *Ring) Remove(id uint32) error {
	switch i := r.find(id); {
	case i < 0:
		return noSuchKey(id)
	case i == 0:
		return fmt.Errorf("seal: key %s is the primary; make another primary first", FormatID(id))
	default:
		r.keys = slices.Delete(r.keys, i, i+1)
	}
	return nil
}

// Keys returns the keys, the primary first.
func (r *Ring) Keys() []Key {
	out := make([]Key, len(r.keys))
	for i, e := range r.keys {
		out[i] = e.key
	}
	return out
}

// ErrNoSuchKey is matched (errors.Is) by the error of Use or Remove that
// names a key the ring does not hold.
var ErrNoSuchKey = errors.New("seal: no such key in the ring")

// noSuchKey is that error for one key ID.
type noSuchKey uint32

func (e noSuchKey) Error() string {
	return fmt.Sprintf("seal: no key %s in the ring", FormatID(uint32(e)))
}

func (e noSuchKey) Is(target error) bool { return target == ErrNoSuchKey }

func (r *Ring) find(id uint32) int {
	return slices.IndexFunc(r.keys, func(e entry) bool { return e.id == id })
}

// Seal appends to dst the sealed form of a datagram (header and messages,
// as wire.Codec packs them) sent to "to" (Multicast, or a member's
// address), under sequence number seq of the sender's incarnation (the
// header's Inc). The caller numbers its datagrams from 1 and never reuses a
// number within an incarnation.
func (r *Ring) Seal(dst, datagram []byte, to string, seq uint64) ([]byte, error) {
	if len(datagram) < wire.HeaderLen {
		return nil, ErrShort
	}
	k := r.keys[0]
	start := len(dst)
	dst = append(dst, datagram[:wire.HeaderLen]...)
	wire.SetSealed(dst[start:], true)
	dst = binary.BigEndian.AppendUint32(dst, k.id)
	dst = binary.BigEndian.AppendUint64(dst, seq)
	ad := associated(dst[start:], to)
	r.self = inc(ad)
	nonce := nonceFor(r.self, seq)
	return k.aead.Seal(dst, nonce[:], datagram[wire.HeaderLen:], ad), nil
}

// associated is the data a datagram's tag covers: what it carries in the
// clear, and where it was sent, which it does not carry.
func associated(clear []byte, to string) []byte {
	ad := make([]byte, 0, len(clear)+1+len(to))
	ad = append(ad, clear...)
	return append(append(ad, byte(len(to))), to...)
}

// KeyIDOf is the ID of the key a sealed datagram names, as it says (0 if
// it is too short to name one). Nothing vouches for it before Open.
func KeyIDOf(datagram []byte) uint32 {
	if len(datagram) < wire.HeaderLen+4 {
		return 0
	}
	return binary.BigEndian.Uint32(datagram[wire.HeaderLen:])
}

// Open authenticates and decrypts a sealed datagram that reached this node
// at "to" (Multicast, or this node's own address), and returns it as
// wire.Codec decodes it (the header's sealed flag cleared). A datagram is
// taken once: its sender's sequence numbers are tracked in a window, which
// moves only for datagrams that authenticate. The error says why a
// datagram was dropped.
func (r *Ring) Open(datagram []byte, to string) ([]byte, error) {
	if len(datagram) < wire.HeaderLen {
		return nil, ErrShort
	}
	if !wire.IsSealed(datagram) {
		return nil, ErrUnsealed
	}
	if len(datagram) < wire.HeaderLen+Overhead {
		return nil, ErrShort
	}
	clear := datagram[:wire.HeaderLen+12]
	id := KeyIDOf(datagram)
	seq := binary.BigEndian.Uint64(clear[wire.HeaderLen+4:])
	i := r.find(id)
	if i < 0 {
		return nil, ErrUnknownKey
	}
	from := path{inc: inc(datagram), multicast: to == Multicast}
	w := r.windows[from]
	if w != nil && !w.fresh(seq) || from.inc == r.self && r.self != 0 {
		return nil, ErrReplay
	}
	nonce := nonceFor(from.inc, seq)
	plain := append(make([]byte, 0, len(datagram)), datagram[:wire.HeaderLen]...)
	wire.SetSealed(plain, false)
	plain, err := r.keys[i].aead.Open(plain, nonce[:], datagram[wire.HeaderLen+12:], associated(clear, to))
	if err != nil {
		return nil, ErrBadMAC
	}
	if w == nil {
		w = r.window(from, seq)
	}
	w.take(seq)
	r.used++
	w.used = r.used
	return plain, nil
}

// Equal reports whether two keys are the same, in constant time.
func Equal(a, b Key) bool { return subtle.ConstantTimeCompare(a.Secret[:], b.Secret[:]) == 1 }

func inc(datagram []byte) uint64 { return binary.BigEndian.Uint64(datagram[28:36]) }

func nonceFor(inc, seq uint64) [chacha20poly1305.NonceSizeX]byte {
	var n [chacha20poly1305.NonceSizeX]byte
	binary.BigEndian.PutUint64(n[0:], inc)
	binary.BigEndian.PutUint64(n[8:], seq)
	return n
}

// maxWindows bounds the sender paths tracked: two for each member of the
// largest group (1,024), twice over. The one used longest ago is forgotten
// first, which is a long-gone incarnation's (every member sends to every
// other at least at every ping): a datagram of it, replayed, then reaches
// the protocol, which drops it as no member's. Only datagrams that
// authenticate make windows, so a sender without the key churns them only
// by replaying datagrams of thousands of past incarnations.
const maxWindows = 4096

// window makes the window of a path, whose first datagram to authenticate
// is number first: none below it is taken (a path's datagrams arrive in
// order, and what came before this node started may be a replay).
func (r *Ring) window(from path, first uint64) *window {
	if len(r.windows) >= maxWindows {
		var oldest path
		least := uint64(math.MaxUint64)
		for p, w := range r.windows {
			if w.used < least {
				oldest, least = p, w.used
			}
		}
		delete(r.windows, oldest)
	}
	w := &window{max: first}
	for i := range w.seen {
		w.seen[i] = math.MaxUint64
	}
	r.windows[from] = w
	return w
}

// windowSize is how far behind the newest a sequence number may arrive and
// still be taken: datagrams reordered on the way (rare on a LAN).
const windowSize = 1024

// window is one sender's replay window: the highest sequence number taken,
// and which of the windowSize below it were.
type window struct {
	max  uint64
	seen [windowSize / 64]uint64
	used uint64 // Ring.used when it last took a datagram
}

func (w *window) fresh(seq uint64) bool {
	if seq > w.max {
		return true
	}
	if w.max-seq >= windowSize || seq == 0 {
		return false
	}
	bit := seq % windowSize
	return w.seen[bit/64]&(1<<(bit%64)) == 0
}

func (w *window) take(seq uint64) {
	if seq > w.max {
		for s := w.max + 1; s <= seq && s-w.max <= windowSize; s++ {
			bit := s % windowSize
			w.seen[bit/64] &^= 1 << (bit % 64)
		}
		if seq-w.max > windowSize {
			w.seen = [windowSize / 64]uint64{}
		}
		w.max = seq
	}
	bit := seq % windowSize
	w.seen[bit/64] |= 1 << (bit % 64)
}
