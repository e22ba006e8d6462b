package node

import (
	"slices"
	"testing"
	"time"

	q "github.com/mcnode/mcnode/quorumfallback"
	"github.com/mcnode/mcnode/quorumfallback/protocols"
)

// Status tells the links: up or down by peer, the mesh's counters, and
// whether the nodes this node's requests ask are reachable. Node 4 goes
// down; node 2's quorum holds it, node 0's does not (majority coterie, as
// in TestNodeDownStallsOnlyTheQuorumsThatHoldIt; a protocol without
// failure handling, which would find node 2 a substitute quorum).
func TestStatusShowsLinks(t *testing.T) {
	nodes, _, _ := tcpGroup(t, 5, Config{Group: "t", Protocol: protocols.Kakugawa, Coterie: "majority"})
	contend(t, nodes[:3], 1, 5)
	st, err := nodes[0].Status()
	if err != nil {
		t.Fatal(err)
	}
	if !st.Reachable || len(st.Links) != 5 || st.Net == nil {
		t.Fatalf("before: reachable %v, links %v, net %v", st.Reachable, st.Links, st.Net)
	}
	for i, l := range st.Links {
		if l.Up != (i != 0) {
			t.Errorf("before: link to node %d up %v", i, l.Up)
		}
	}
	if st.Net.SentFrames[q.Request] == 0 || st.Net.SentBytes[q.Request] <= st.Net.SentFrames[q.Request] || st.Net.RecvFrames[q.Grant] == 0 {
		t.Errorf("the mesh's counters: %+v", *st.Net)
	}
	nodes[4].Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st0, err0 := nodes[0].Status()
		st2, err2 := nodes[2].Status()
		if err0 != nil || err2 != nil {
			t.Fatal(err0, err2)
		}
		if !st0.Links[4].Up && !st2.Links[4].Up {
			if !st0.Reachable || st2.Reachable || !slices.Contains(st2.Quorum, 4) || slices.Contains(st0.Quorum, 4) {
				t.Errorf("node 4 down: reachable %v from node 0 (quorum %v), %v from node 2 (quorum %v)", st0.Reachable, st0.Quorum, st2.Reachable, st2.Quorum)
			}
			if !st2.Links[3].Up {
				t.Errorf("node 2's link to node 3 is down")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node 4's links still up: %v, %v", st0.Links, st2.Links)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Over a transport that reports no links, a node counts as reachable and
// has neither links nor mesh counters.
func TestStatusWithoutLinks(t *testing.T) {
	st, err := startMem(t, protocols.RicartAgrawala, "", 2)[0].Status()
	if err != nil {
		t.Fatal(err)
	}
	if !st.Reachable || st.Links != nil || st.Net != nil {
		t.Errorf("reachable %v, links %v, net %v", st.Reachable, st.Links, st.Net)
	}
}
