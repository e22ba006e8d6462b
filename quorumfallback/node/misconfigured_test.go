package node

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mcnode/mcnode/quorumfallback/protocols"
)

// Nodes given different setups stop rather than take part. Five Maekawa
// nodes with failure handling, the same peers, two given the tree coterie
// and three the majority one: node 0's tree quorum {0, 2} and the majority
// side's quorums need not meet, and each side granted the same lock (two
// holders in 9 of 20 entries, black-box round). Every node meets another
// setup on its links and stops with ErrMisconfigured: its waiters fail with
// it, and it grants nothing.
func TestDifferentSetupsStop(t *testing.T) {
	listeners, peers := loopbackListeners(t, 5)
	coterie := []string{"tree", "majority", "tree", "majority", "majority"}
	nodes := make([]*Node, 5)
	for i := range nodes {
		nd, err := Start(Config{Group: "t", Protocol: protocols.Maekawa, Coterie: coterie[i], Self: i, Peers: peers, Listener: listeners[i],
			Lease: DefaultLease, LeaseMargin: DefaultLeaseMargin, Detect: DefaultDetect})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		nodes[i] = nd
	}
	for i, nd := range nodes {
		select {
		case <-nd.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("node %d (%s) still runs among nodes of another coterie", i, coterie[i])
		}
		cause := nd.StopCause()
		if !errors.Is(cause, ErrMisconfigured) || !strings.Contains(cause.Error(), "setup") {
			t.Errorf("node %d stopped for %v, want ErrMisconfigured saying what it saw", i, cause)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := nd.Acquire(ctx, "x")
		cancel()
		if err == nil {
			t.Errorf("node %d granted a lock after it stopped", i)
		}
	}
}
