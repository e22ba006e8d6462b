package node

import (
	"errors"
	"sync"

	"github.com/mcnode/mcnode/seal"
)

// ErrNoKey: the node has no group key to change (it started without one,
// or over a transport without keys).
var ErrNoKey = errors.New("node: no group key: start the node with keys to change them")

// keyRing is the node's group keys, changed while it runs and handed to
// the mesh's TLS whole after each change (qnet.Mesh.SetKeys).
type keyRing struct {
	mu   sync.Mutex
	ring *seal.Ring // nil without keys
}

// keySetter is what takes the keys: the TCP mesh.
type keySetter interface{ SetKeys([]seal.Key) error }

// InstallKey adds a group key that links accept from now on; the one they
// present is unchanged. Keys are rotated as in multicast mode: install the
// new key on every node, make it the one presented on every node (UseKey),
// then remove the old one (RemoveKey); links that are up stay up.
func (n *Node) InstallKey(k seal.Key) error {
	return n.changeKeys(func(r *seal.Ring) error { return r.Install(k) })
}

// UseKey makes the installed key with this ID the one links present.
func (n *Node) UseKey(id uint32) error {
	return n.changeKeys(func(r *seal.Ring) error { return r.Use(id) })
}

// RemoveKey stops accepting a key (not the one presented).
func (n *Node) RemoveKey(id uint32) error {
	return n.changeKeys(func(r *seal.Ring) error { return r.Remove(id) })
}

// KeyRing returns the group keys, the one presented first; none without.
// The error is always nil (as multicast mode's Group.KeyRing may fail).
func (n *Node) KeyRing() ([]seal.Key, error) {
	n.keys.mu.Lock()
	defer n.keys.mu.Unlock()
	if n.keys.ring == nil {
		return nil, nil
	}
	return n.keys.ring.Keys(), nil
}

func (n *Node) changeKeys(change func(*seal.Ring) error) error {
	n.keys.mu.Lock()
	defer n.keys.mu.Unlock()
	ks, ok := n.tr.(keySetter)
	if n.keys.ring == nil || !ok {
		return ErrNoKey
	}
	before := n.keys.ring.Keys()
	if err := change(n.keys.ring); err != nil {
		return err
	}
	if err := ks.SetKeys(n.keys.ring.Keys()); err != nil {
		n.keys.ring, _ = seal.NewRing(before[0], before[1:]...) // as it was
		return err
	}
	n.log.Info().Str("presents", seal.FormatID(n.keys.ring.Keys()[0].ID())).Int("keys", len(n.keys.ring.Keys())).Msg("group keys changed")
	return nil
}
