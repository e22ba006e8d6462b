package qnet

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/mcnode/mcnode/internal/syncbuf"
	"github.com/mcnode/mcnode/seal"
)

func testKey(t *testing.T) seal.Key {
	t.Helper()
	k, err := seal.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// startKeyed starts node self of peers with keys.
func startKeyed(t *testing.T, self int, peers []string, l net.Listener, keys ...seal.Key) *Mesh {
	t.Helper()
	m, err := Listen(Config{Self: self, Peers: peers, Hello: testHello, DialRetry: 20 * time.Millisecond, Listener: l, Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// startTap relays TCP from its own address to target and keeps every byte
// that passes, both ways: what an eavesdropper on the LAN would see.
func startTap(t *testing.T, target string) (string, *syncbuf.Buffer) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	tp := &syncbuf.Buffer{}
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			go func() { io.Copy(io.MultiWriter(out, tp), in); out.Close() }()
			go func() { io.Copy(io.MultiWriter(in, tp), out); in.Close() }()
		}
	}()
	return l.Addr().String(), tp
}

// TestKeyedLinks: with the same key the nodes connect and exchange frames,
// and what crosses the wire is encrypted; without it, or with another, or
// plain, a node is refused and counted.
func TestKeyedLinks(t *testing.T) {
	for _, keyed := range []bool{true, false} {
		ls, peers := listeners(t, 2)
		// Node 0 reaches node 1 through the tap.
		viaTap, tp := startTap(t, peers[1])
		var keys []seal.Key
		if keyed {
			keys = []seal.Key{testKey(t)}
		}
		peers0 := []string{peers[0], viaTap}
		m0, err := Listen(Config{Self: 0, Peers: peers0, Hello: testHello, DialRetry: 20 * time.Millisecond, Listener: ls[0], Keys: keys})
		if err != nil {
			t.Fatal(err)
		}
		defer m0.Close()
		m1 := startKeyed(t, 1, peers, ls[1], keys...)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := m0.WaitConnected(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		f := frame(0, 1, 1)
		f.Resource = "a-lock-name-an-eavesdropper-should-not-read"
		if err := m0.Send(1, f); err != nil {
			t.Fatal(err)
		}
		select {
		case in := <-m1.Inbound():
			if in.Frame.Resource != f.Resource {
				t.Fatalf("got %+v", in.Frame)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the frame did not arrive")
		}
		if visible := strings.Contains(tp.String(), f.Resource); visible == keyed {
			t.Errorf("keyed %v: the lock name visible on the wire: %v", keyed, visible)
		}
	}
}

func TestUnkeyedOrOtherKeyRefused(t *testing.T) {
	k1, k2 := testKey(t), testKey(t)
	for _, c := range []struct {
		name     string
		a, b     []seal.Key
		connects bool
	}{
		{"same key", []seal.Key{k1}, []seal.Key{k1}, true},
		{"other key", []seal.Key{k1}, []seal.Key{k2}, false},
		{"no key on one side", []seal.Key{k1}, nil, false},
		// Each accepts the other's first key: two rings that hold both.
		{"rings that overlap", []seal.Key{k1, k2}, []seal.Key{k2, k1}, true},
		// A node presents its first key only: a ring [k2, k1] against [k1].
		{"first key unknown to the peer", []seal.Key{k2, k1}, []seal.Key{k1}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ls, peers := listeners(t, 2)
			m0 := startKeyed(t, 0, peers, ls[0], c.a...)
			m1 := startKeyed(t, 1, peers, ls[1], c.b...)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			err0, err1 := m0.WaitConnected(ctx), m1.WaitConnected(ctx)
			if connected := err0 == nil && err1 == nil; connected != c.connects {
				t.Fatalf("connected %v (%v, %v), want %v", connected, err0, err1, c.connects)
			}
			if !c.connects {
				eventually(t, "the refusal counted", func() bool {
					return m0.Stats().Unauthenticated+m1.Stats().Unauthenticated > 0
				})
			}
		})
	}
}

// A plain qnet hello sent to a keyed node is refused: it is no TLS
// handshake.
func TestPlainHelloToKeyedNode(t *testing.T) {
	ls, peers := listeners(t, 2)
	m := startKeyed(t, 0, peers, ls[0], testKey(t))
	c, err := net.Dial("tcp", peers[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(append(helloMagic[:], 1, 1, byte(len(testHello))))
	c.Write([]byte(testHello))
	c.SetReadDeadline(time.Now().Add(6 * time.Second))
	if b := make([]byte, 1); func() bool { n, _ := c.Read(b); return n == 1 && b[0] == helloAccept }() {
		t.Error("the keyed node accepted a plain hello")
	}
	eventually(t, "the plain hello counted as unauthenticated", func() bool { return m.Stats().Unauthenticated > 0 })
	if st := m.Stats(); st.RecvFrames[1] != 0 || st.Malformed != 0 {
		t.Errorf("the plain connection got past TLS: %+v", st)
	}
}

// Keys are rotated on running meshes (SetKeys), in the three steps: the
// links up stay up and carry frames, and a node that starts with the new
// key alone connects to nodes that started with the old one.
func TestSetKeysRotates(t *testing.T) {
	oldKey, newKey := testKey(t), testKey(t)
	ls, peers := listeners(t, 3)
	m0 := startKeyed(t, 0, peers, ls[0], oldKey)
	m1 := startKeyed(t, 1, peers, ls[1], oldKey)
	send := func(step string) {
		t.Helper()
		f := frame(0, 1, 1)
		f.Resource = step
		if err := m0.Send(1, f); err != nil {
			t.Fatal(err)
		}
		select {
		case in := <-m1.Inbound():
			if in.Frame.Resource != step {
				t.Fatalf("%s: got %+v", step, in.Frame)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the frame did not arrive", step)
		}
	}
	eventually(t, "nodes 0 and 1 connected", func() bool { up, _ := m0.Backlog(1); return up })
	send("before")
	for _, ring := range [][]seal.Key{{oldKey, newKey}, {newKey, oldKey}, {newKey}} {
		for _, m := range []*Mesh{m0, m1} {
			if err := m.SetKeys(ring); err != nil {
				t.Fatal(err)
			}
		}
		send(fmt.Sprintf("with %d keys", len(ring)))
	}
	// The link nodes 0 and 1 made with the old key is closed once it is
	// removed, and made again with the new one.
	eventually(t, "the old key's link made again", func() bool { return m0.Stats().Reconnects > 0 })
	send("after the old key was removed")
	m2 := startKeyed(t, 2, peers, ls[2], newKey)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m2.WaitConnected(ctx); err != nil {
		t.Fatalf("a node with the new key alone: %v", err)
	}
	for _, m := range []*Mesh{m0, m1} {
		if err := m.WaitConnected(ctx); err != nil {
			t.Fatalf("the rotated nodes do not reach the new one: %v", err)
		}
	}
	plain := startKeyed(t, 0, []string{"127.0.0.1:1", "127.0.0.1:2"}, nil)
	if err := plain.SetKeys([]seal.Key{newKey}); err == nil {
		t.Error("a mesh without keys took keys")
	}
}
