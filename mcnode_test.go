package mcnode_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mcnode/mcnode"
	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/quorumfallback/node"
)

// TestBothModes runs one check of the Locker contract on each mode: the
// same code, only the mode differs.
func TestBothModes(t *testing.T) {
	for _, mode := range []mcnode.Mode{mcnode.Multicast, mcnode.Quorum} {
		t.Run(string(mode), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			nodes := startGroup(ctx, mode, 3)
			defer func() {
				for _, n := range nodes {
					n.Close()
				}
			}()
			switch rt := mcnode.Unwrap(nodes[0]).(type) {
			case *group.Group:
				if mode != mcnode.Multicast {
					t.Errorf("Unwrap gave a *group.Group in %s mode", mode)
				}
			case *node.Node:
				if mode != mcnode.Quorum {
					t.Errorf("Unwrap gave a *node.Node in %s mode", mode)
				}
			default:
				t.Fatalf("Unwrap gave %T", rt)
			}
			l, err := nodes[1].Acquire(ctx, "a")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := nodes[2].TryAcquire(ctx, "a"); !errors.Is(err, mcnode.ErrLocked) {
				t.Errorf("TryAcquire of a held lock: %v, want ErrLocked", err)
			}
			st, err := nodes[1].Status()
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode != mode || len(st.Members) != 3 || len(st.Held) != 1 || st.Held[0] != "a" || st.Sent == 0 {
				t.Errorf("status %+v: want mode %s, 3 members, holding a, messages sent", st, mode)
			}
			all, stop := nodes[0].Subscribe("")
			defer stop()
			if err := nodes[1].Publish("t", []byte("x")); err != nil {
				t.Fatal(err)
			}
			select {
			case u := <-all:
				if u.From != st.Self || u.Topic != "t" || string(u.Data) != "x" {
					t.Errorf("update %+v, want t=x from %d", u, st.Self)
				}
			case <-ctx.Done():
				t.Fatal("the update never came")
			}
			if err := nodes[1].Close(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-l.Lost():
			case <-time.After(5 * time.Second):
				t.Fatal("a lease of a closed node is not lost")
			}
			if l.Err() == nil {
				t.Error("a lost lease has no error")
			}
		})
	}
}

func TestStartRefusesAnUnknownMode(t *testing.T) {
	if _, err := mcnode.Start(context.Background(), mcnode.Config{Mode: "token-ring"}); !errors.Is(err, mcnode.ErrConfig) {
		t.Errorf("Start with mode token-ring: %v, want ErrConfig", err)
	}
}
