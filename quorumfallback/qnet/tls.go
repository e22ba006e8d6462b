package qnet

import (
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"

	"github.com/mcnode/mcnode/seal"
)

// With group keys (Config.Keys), every link is TLS 1.3, authenticated both
// ways by the group key rather than by a certificate authority: each key
// derives an Ed25519 key pair (HKDF-SHA256 of the key's secret, labelled
// for this one use), every node presents a certificate of its primary
// key's pair, and accepts a peer only if the peer's certificate carries the
// public key of one of its own keys. TLS proves that the peer holds the
// private key (it signs the handshake), so only a holder of a group key can
// connect, and the links are encrypted, with TLS's own protection against
// replay and tampering. Go's TLS has no external pre-shared keys, and a
// framing of our own over TCP would need a handshake of its own (fresh
// nonces per connection, or a recorded connection replays): deriving a
// certificate keeps to the standard protocol.

// ErrUnauthenticated is the error of a link whose TLS handshake failed: the
// peer holds no group key, or another.
var ErrUnauthenticated = errors.New("qnet: the peer did not authenticate with the group key")

// linkKey derives a key's Ed25519 pair for the mesh's TLS.
func linkKey(k seal.Key) (ed25519.PrivateKey, error) {
	seed, err := hkdf.Key(sha256.New, k.Secret[:], nil, "mcnode quorum-mode link identity v1", ed25519.SeedSize)
	if err != nil {
		return nil, err
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

// tlsPair is the dialling and the accepting side's TLS settings, and the
// public keys they accept.
type tlsPair struct {
	client, server *tls.Config
	accepted       []ed25519.PublicKey
}

// tlsConfigs returns the TLS settings for a key ring, the first key
// presented; nil without keys.
func tlsConfigs(keys []seal.Key) (*tlsPair, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	accepted := make([]ed25519.PublicKey, 0, len(keys))
	var cert tls.Certificate
	for i, k := range keys {
		priv, err := linkKey(k)
		if err != nil {
			return nil, err
		}
		accepted = append(accepted, priv.Public().(ed25519.PublicKey))
		if i > 0 {
			continue
		}
		// A certificate only carries the public key: nothing in it is
		// checked but that key, so its fields are fixed, and every node of
		// a group makes the same one.
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Unix(0, 0), NotAfter: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)}
		der, err := x509.CreateCertificate(nil, tmpl, tmpl, priv.Public(), priv)
		if err != nil {
			return nil, fmt.Errorf("qnet: link certificate: %w", err)
		}
		cert = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv}
	}
	verify := func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) != 1 {
			return fmt.Errorf("%w: %d certificates, want 1", ErrUnauthenticated, len(raw))
		}
		c, err := x509.ParseCertificate(raw[0])
		if err != nil {
			return fmt.Errorf("%w: %v", ErrUnauthenticated, err)
		}
		pub, ok := c.PublicKey.(ed25519.PublicKey)
		if !ok {
			return fmt.Errorf("%w: not an Ed25519 key", ErrUnauthenticated)
		}
		for _, a := range accepted {
			if a.Equal(pub) {
				return nil
			}
		}
		return fmt.Errorf("%w: its key is none of this node's", ErrUnauthenticated)
	}
	base := tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		// The certificate is checked against the group keys by
		// VerifyPeerCertificate, not against a certificate authority.
		InsecureSkipVerify:    true,
		VerifyPeerCertificate: verify,
		ServerName:            "mcnode",
	}
	pair := &tlsPair{client: base.Clone(), server: base.Clone(), accepted: accepted}
	pair.server.ClientAuth = tls.RequireAnyClientCert
	return pair, nil
}

// SetKeys replaces the group keys of a mesh that has keys: links made from
// then on present the first and accept any of them; links already up stay
// up, authenticated when they were made. The keys are rotated as in
// multicast mode: install the new key on every node (each accepts both),
// make it the first on every node, then remove the old one.
func (m *Mesh) SetKeys(keys []seal.Key) error {
	if m.tls.Load() == nil {
		return errors.New("qnet: the mesh has no keys: a node takes or drops keys only by restarting")
	}
	if len(keys) == 0 {
		return errors.New("qnet: no keys")
	}
	pair, err := tlsConfigs(keys)
	if err != nil {
		return err
	}
	m.tls.Store(pair)
	// A link made with a key that is gone is closed (a key removed because
	// it leaked must not keep one open). A link this node dialled is closed
	// at once: its writer dials again with the keys as they are, and what
	// it wrote still arrives (a close with nothing unread sends it all). A
	// link a peer dialled is the peer's to close, as it removes the key
	// too; one still open after staleGrace (its peer has not: a stranger
	// with the old key) is closed here.
	stale := m.staleLinks(pair, false)
	for _, a := range stale {
		p := m.peers[a.peer]
		p.redial.Store(true)
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
	if len(stale) > 0 {
		m.log.Info().Int("links", len(stale)).Msg("qnet: making the links made with a key no longer accepted again")
	}
	time.AfterFunc(staleGrace, func() {
		if m.tls.Load() != pair {
			return // changed again meanwhile: that change sees to it
		}
		for _, a := range m.staleLinks(pair, true) {
			m.log.Warn().Str("remote", a.c.RemoteAddr().String()).Msg("qnet: closed an incoming link made with a key no longer accepted, which its peer kept open")
			a.c.Close()
		}
	})
	return nil
}

// staleGrace is how long a peer has to close its own link made with a key
// removed since (see SetKeys).
const staleGrace = 5 * time.Second

// staleLink is an open link whose peer authenticated with a key no longer
// accepted.
type staleLink struct {
	c net.Conn
	linkAuth
}

// staleLinks lists the open links, dialled by this node or by peers
// (incoming), whose peer authenticated with a key pair no longer accepts.
func (m *Mesh) staleLinks(pair *tlsPair, incoming bool) []staleLink {
	var stale []staleLink
	m.mu.Lock()
	defer m.mu.Unlock()
	for c, a := range m.conns {
		if a.key != nil && a.incoming == incoming && !slices.ContainsFunc(pair.accepted, func(k ed25519.PublicKey) bool { return k.Equal(a.key) }) {
			stale = append(stale, staleLink{c, a})
		}
	}
	return stale
}
