package maekawa

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	q "github.com/mcnode/mcnode/quorumfallback"
	"github.com/mcnode/mcnode/quorumfallback/sim"
)

// figure1c is Maekawa's Figure 1(c), K=4, N=13, in the paper's numbering
// (node k is our node k-1).
var figure1c = map[int][]int{
	1: {1, 2, 3, 4}, 5: {1, 5, 6, 7}, 8: {1, 8, 9, 10}, 11: {1, 11, 12, 13},
	2: {2, 5, 8, 11}, 6: {2, 6, 9, 12}, 7: {2, 7, 10, 13},
	10: {3, 5, 10, 12}, 3: {3, 6, 8, 13}, 9: {3, 7, 9, 11},
	13: {4, 5, 9, 13}, 4: {4, 6, 10, 11}, 12: {4, 7, 8, 12},
}

// paperNet is a Script over the 13 nodes of section 5, spoken to in the
// paper's numbering.
type paperNet struct {
	t *testing.T
	s *sim.Script
}

func newPaperNet(t *testing.T, literal bool) *paperNet {
	t.Helper()
	nodes := make([]q.Protocol, 13)
	for k, set := range figure1c {
		quorum := make([]q.ID, len(set))
		for i, m := range set {
			quorum[i] = m - 1
		}
		n, err := New(Config{Self: k - 1, N: 13, Quorum: quorum, Literal: literal})
		if err != nil {
			t.Fatal(err)
		}
		nodes[k-1] = n
	}
	return &paperNet{t: t, s: sim.NewScript(nodes)}
}

func (p *paperNet) request(k int) {
	p.t.Helper()
	if err := p.s.Request(k - 1); err != nil {
		p.t.Fatalf("node %d: %v", k, err)
	}
}

func (p *paperNet) release(k int) {
	p.t.Helper()
	if err := p.s.Release(k - 1); err != nil {
		p.t.Fatalf("node %d: %v", k, err)
	}
}

// deliver delivers the oldest message from -> to and checks its kind.
func (p *paperNet) deliver(from, to int, want q.Kind) {
	p.t.Helper()
	m, err := p.s.Deliver(from-1, to-1)
	if err != nil {
		p.t.Fatal(err)
	}
	if m.Kind != want {
		p.t.Fatalf("%d -> %d carried %v, the paper says %v", from, to, m.Kind, want)
	}
}

// pending renders what is on the link from -> to as the paper's letters.
func (p *paperNet) pending(from, to int) string {
	var b strings.Builder
	for _, m := range p.s.Pending(from-1, to-1) {
		b.WriteString(map[q.Kind]string{q.Request: "R", q.Grant: "L", q.Failed: "F", q.Inquire: "I", q.Yield: "Q", q.Release: "Rel"}[m.Kind])
	}
	return b.String()
}

func (p *paperNet) expectPending(from, to int, want string) {
	p.t.Helper()
	if got := p.pending(from, to); got != want {
		p.t.Fatalf("on %d -> %d: %q, the paper's story needs %q", from, to, got, want)
	}
}

func (p *paperNet) entered() []int {
	var ks []int
	for _, i := range p.s.Entered {
		ks = append(ks, i+1)
	}
	return ks
}

// circularLock plays steps (1)-(4) of section 5 (Figure 2a): nodes 11, 7
// and 8 request in that order with sequence number 1 and end up circularly
// locked.
func circularLock(p *paperNet) {
	t := p.t
	t.Helper()
	// (1) Node 11's REQUESTs lock 12 and 13; the one to node 1 is on its way.
	p.request(11)
	p.deliver(11, 12, q.Request)
	p.deliver(11, 13, q.Request)
	// (2) Node 7's REQUESTs lock 2 and 10; the one to 13 is on its way.
	p.request(7)
	p.deliver(7, 2, q.Request)
	p.deliver(7, 10, q.Request)
	// (3) Node 8 locks itself, 1 and 9, and fails to lock 10.
	p.request(8)
	p.deliver(8, 1, q.Request)
	p.deliver(8, 9, q.Request)
	p.deliver(8, 10, q.Request)
	p.expectPending(10, 8, "F")
	// (4) 11's REQUEST reaches node 1, 7's reaches node 13: node 1 answers
	// FAILED, node 13 INQUIRE.
	p.deliver(11, 1, q.Request)
	p.deliver(7, 13, q.Request)
	p.expectPending(1, 11, "F")
	p.expectPending(13, 11, "LI")
	for k, seq := range map[int]uint64{7: 1, 8: 1, 11: 1} {
		if got := p.s.Nodes[k-1].(*Node).mine.Seq; got != seq {
			t.Fatalf("node %d requested with sequence number %d, the paper says %d", k, got, seq)
		}
	}
	// Nodes 8 and 11 hold FAILED; 7 waits for 13. Nobody is in.
	p.deliver(10, 8, q.Failed)
	for _, k := range []int{12, 13} {
		p.deliver(k, 11, q.Grant)
	}
	for _, k := range []int{2, 10} {
		p.deliver(k, 7, q.Grant)
	}
	p.deliver(1, 8, q.Grant)
	p.deliver(9, 8, q.Grant)
	if got := p.entered(); len(got) != 0 {
		t.Fatalf("nodes %v entered in a circular lock", got)
	}
}

// TestSection5CircularLockResolved replays Maekawa section 5 (Figures 2a
// and 2b): node 11, told FAILED by node 1, answers node 13's INQUIRE with
// RELINQUISH; 13 locks for 7, which enters; 7's RELEASE lets 8 in; then 11.
func TestSection5CircularLockResolved(t *testing.T) {
	for _, literal := range []bool{false, true} {
		t.Run(fmt.Sprintf("literal=%v", literal), func(t *testing.T) {
			p := newPaperNet(t, literal)
			circularLock(p)
			p.deliver(1, 11, q.Failed)
			p.deliver(13, 11, q.Inquire)
			p.expectPending(11, 13, "Q")
			p.deliver(11, 13, q.Yield)
			p.expectPending(13, 7, "L")
			p.deliver(13, 7, q.Grant)
			if got := p.entered(); !slices.Equal(got, []int{7}) {
				t.Fatalf("entered %v, the paper says node 7 (Figure 2b)", got)
			}
			// Upon completing its critical section node 7 sends RELEASE; this
			// lets node 8 lock all its members; finally node 11.
			p.release(7)
			if _, err := p.s.Stabilize(); err != nil {
				t.Fatal(err)
			}
			if got := p.entered(); !slices.Equal(got, []int{7, 8}) {
				t.Fatalf("entered %v, want 7 then 8", got)
			}
			p.release(8)
			if _, err := p.s.Stabilize(); err != nil {
				t.Fatal(err)
			}
			if got := p.entered(); !slices.Equal(got, []int{7, 8, 11}) {
				t.Fatalf("entered %v, want 7, 8, 11", got)
			}
			p.release(11)
			if _, err := p.s.Stabilize(); err != nil {
				t.Fatal(err)
			}
			assertStrictlyIncreasing(t, p.s.Tokens)
			t.Log(strings.Join(p.s.Log, "\n"))
		})
	}
}

// TestSection5NewRequestDuringRelinquish is the end of section 5: a REQUEST
// from node 3 reaches node 13 after its INQUIRE went out but before the
// RELINQUISH came back; it locks 13 instead of 7's, and node 3 gets all its
// members when node 8 relinquishes itself to node 3.
func TestSection5NewRequestDuringRelinquish(t *testing.T) {
	p := newPaperNet(t, false)
	circularLock(p)
	p.deliver(1, 11, q.Failed)
	p.deliver(13, 11, q.Inquire)
	// Node 3's REQUEST (sequence number 1, precedes 7's) reaches 13 now.
	p.request(3)
	p.deliver(3, 13, q.Request)
	p.expectPending(13, 3, "")
	p.deliver(11, 13, q.Yield)
	p.expectPending(13, 3, "L")
	p.expectPending(13, 7, "F") // our FAILED to the overtaken request (package doc)
	p.deliver(13, 3, q.Grant)
	p.deliver(3, 6, q.Request)
	p.deliver(6, 3, q.Grant)
	// Node 8 is locked for itself; 3's REQUEST makes it inquire itself, and
	// 8, having failed at 10, relinquishes itself to 3.
	p.deliver(3, 8, q.Request)
	p.expectPending(8, 3, "L")
	p.deliver(8, 3, q.Grant)
	if got := p.entered(); !slices.Equal(got, []int{3}) {
		t.Fatalf("entered %v, the paper says node 3", got)
	}
	for _, k := range []int{3, 7, 8, 11} {
		if p.s.Nodes[k-1].State() == q.Held {
			p.release(k)
		}
		if _, err := p.s.Stabilize(); err != nil {
			t.Fatal(err)
		}
		for _, j := range []int{3, 7, 8, 11} {
			if p.s.Nodes[j-1].State() == q.Held {
				p.release(j)
				if _, err := p.s.Stabilize(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if got := p.entered(); len(got) != 4 {
		t.Fatalf("entered %v, want all of 3, 7, 8 and 11", got)
	}
	assertStrictlyIncreasing(t, p.s.Tokens)
}

func assertStrictlyIncreasing(t *testing.T, tokens []uint64) {
	t.Helper()
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("fencing tokens %v do not increase", tokens)
		}
	}
}
