package main

import (
	"net"
	"path/filepath"
	"testing"

	"github.com/mcnode/mcnode"
	"github.com/mcnode/mcnode/quorumfallback/node"
	"github.com/mcnode/mcnode/seal"
)

// A quorum-mode node started anew after its peers declared it failed takes
// the keys the last node held, not those of a key file that could not be
// rewritten since (it would seal with a key the group may have dropped).
func TestRestartKeepsTheLiveKeys(t *testing.T) {
	first, next := mustKey(t), mustKey(t)
	path := filepath.Join(t.TempDir(), "group.key")
	if err := seal.WriteKeyFile(path, first); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Start(node.Config{Group: "g", Protocol: "maekawa", Coterie: "all", Peers: []string{l.Addr().String()}, Listener: l, Keys: []seal.Key{first}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	d := daemonNode{Locker: mcnode.Wrap(n)} // no --keyfile to rewrite: the file stays behind
	if err := d.installKey(next); err != nil {
		t.Fatal(err)
	}
	if err := d.useKey(next.ID()); err != nil {
		t.Fatal(err)
	}
	n.Close() // as the node declared failed is, before it starts anew
	keys, err := d.liveKeys(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || keys[0].ID() != next.ID() || keys[1].ID() != first.ID() {
		t.Fatalf("keys for the restart: %v, want the live ring (next sealing, then first)", keys)
	}
	// A node with no keys to tell: the file's.
	keys, err = daemonNode{}.liveKeys(path)
	if err != nil || len(keys) != 1 || keys[0].ID() != first.ID() {
		t.Fatalf("keys without a live ring: %v, %v; want the file's", keys, err)
	}
}
