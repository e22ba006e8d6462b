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
// holders in 9 of 20 entries, black-box round). A node refused by a peer
// of the other coterie stops with ErrMisconfigured, and its callers get it;
// one that dials only stopped nodes of the other may run on, and then the
// nodes left are of one coterie.
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
	time.Sleep(3 * time.Second) // dials retry every 100 ms
	running := map[string]int{}
	for i, nd := range nodes {
		select {
		case <-nd.Done():
		default:
			running[coterie[i]]++
			continue
		}
		cause := nd.StopCause()
		if !errors.Is(cause, ErrMisconfigured) || !strings.Contains(cause.Error(), "another setup") {
			t.Errorf("node %d stopped for %v, want ErrMisconfigured saying what it saw", i, cause)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := nd.Acquire(ctx, "x")
		cancel()
		if !errors.Is(err, ErrMisconfigured) || !errors.Is(err, ErrClosed) {
			t.Errorf("node %d: Acquire after the stop: %v, want ErrClosed wrapping ErrMisconfigured", i, err)
		}
	}
	if len(running) > 1 {
		t.Fatalf("nodes of both coteries run on: %v", running)
	}
	if running["tree"]+running["majority"] == len(nodes) {
		t.Fatal("no node stopped")
	}
}

// The failure handling's timings are part of the setup: a node with a
// longer lease than its arbiters' kept its lock after they had given it to
// another (review). Without failure handling they are not.
func TestHelloNamesTheTimings(t *testing.T) {
	peers := []string{"10.0.0.1:7950", "10.0.0.2:7950", "10.0.0.3:7950"}
	base := Config{Group: "g", Protocol: protocols.Maekawa, Coterie: "majority", Peers: peers}
	longer := base
	longer.Lease = 6 * time.Second
	if base.Hello() == longer.Hello() {
		t.Errorf("two leases, one hello: %s", base.Hello())
	}
	defaults := base
	defaults.Lease, defaults.LeaseMargin, defaults.Detect = DefaultLease, DefaultLeaseMargin, DefaultDetect
	if base.Hello() != defaults.Hello() {
		t.Errorf("the defaults spelt out change the hello: %s, %s", base.Hello(), defaults.Hello())
	}
	ra := Config{Group: "g", Protocol: protocols.RicartAgrawala, Peers: peers}
	raLonger := ra
	raLonger.Lease = 6 * time.Second
	if ra.Hello() != raLonger.Hello() || strings.Contains(ra.Hello(), "lease") {
		t.Errorf("a protocol without failure handling names a lease: %s, %s", ra.Hello(), raLonger.Hello())
	}
	if other := (Config{Group: "g/x", Protocol: protocols.Maekawa, Coterie: "majority", Peers: peers}); strings.HasPrefix(other.Hello(), base.helloGroup()) {
		t.Errorf("group g/x's hello %s begins as group g's, %s", other.Hello(), base.helloGroup())
	}
}

// A node that stops for another setup while it waits for its links says so
// from WaitReady (mcnode.Start waits there), not "transport closed"; here
// the setups differ only in the lease (review).
func TestWaitReadySaysWhyItStopped(t *testing.T) {
	listeners, peers := loopbackListeners(t, 2)
	nodes := make([]*Node, 2)
	for i := range nodes {
		lease := DefaultLease
		if i == 1 {
			lease = 3 * time.Second
		}
		nd, err := Start(Config{Group: "t", Protocol: protocols.Maekawa, Coterie: "majority", Self: i, Peers: peers, Listener: listeners[i], Lease: lease})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		nodes[i] = nd
	}
	// Each stops once the other answers its hello; one that the other's
	// stop left with nothing to dial waits on.
	stopped := 0
	for i, nd := range nodes {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := nd.WaitReady(ctx)
		cancel()
		switch {
		case errors.Is(err, ErrMisconfigured) && errors.Is(err, ErrClosed):
			stopped++
		case errors.Is(err, context.DeadlineExceeded):
		default:
			t.Errorf("node %d: WaitReady = %v, want ErrClosed wrapping ErrMisconfigured", i, err)
		}
	}
	if stopped == 0 {
		t.Error("neither node stopped")
	}
}
