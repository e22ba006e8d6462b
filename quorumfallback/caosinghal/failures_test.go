package caosinghal_test

import (
	"slices"
	"testing"

	q "github.com/mcnode/mcnode/quorumfallback"
	"github.com/mcnode/mcnode/quorumfallback/caosinghal"
	"github.com/mcnode/mcnode/quorumfallback/sim"
)

// Four nodes around one arbiter: node 2 is in every quorum (0: {0, 2},
// 1: {1, 2}, 3: {2, 3}, 2: {2}), so it alone decides between the others.
// Node 0 holds. Node proxied asks, and node 2 sends node 0 a transfer
// about it; node other asks, and node 2 sends node 0 a transfer about it
// too (node 1's request precedes node 3's), which node 0 gets only once it
// has left. So node 0, leaving, replies to node proxied on node 2's behalf
// and sends node 2 release(0, proxied).
type proxyNet struct {
	t *testing.T
	s *sim.Script
}

func newProxyNet(t *testing.T, proxied, other q.ID) *proxyNet {
	t.Helper()
	var nodes []q.Protocol
	for i, quorum := range [][]q.ID{{0, 2}, {1, 2}, {2}, {2, 3}} {
		m, err := caosinghal.New(caosinghal.Config{Self: i, N: 4, Quorum: quorum})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, m)
	}
	p := &proxyNet{t: t, s: sim.NewScript(nodes)}
	p.must(p.s.Request(0))
	p.deliver(0, 2) // request
	p.deliver(2, 0) // reply: node 0 enters
	p.must(p.s.Request(proxied))
	p.deliver(proxied, 2) // request: a transfer to node 0, a fail
	p.deliver(2, 0)       // transfer(proxied)
	p.deliver(2, proxied) // fail
	p.must(p.s.Request(other))
	p.deliver(other, 2) // request: a transfer to node 0 (not delivered yet), a fail
	p.deliver(2, other)
	if !slices.Equal(p.s.Entered, []q.ID{0}) {
		p.t.Fatalf("entered %v, want node 0 alone\n%v", p.s.Entered, p.s.Log)
	}
	p.must(p.s.Release(0)) // reply(2) to node proxied, release(0, proxied) to node 2
	if g := p.s.Pending(0, proxied); len(g) != 1 || g[0].Kind != q.Grant || g[0].Arbiter != 2 {
		p.t.Fatalf("node 0 leaving sent node %d %v, want a reply on node 2's behalf", proxied, g)
	}
	return p
}

func (p *proxyNet) must(err error) {
	p.t.Helper()
	if err != nil {
		p.t.Fatal(err)
	}
}

func (p *proxyNet) deliver(from, to q.ID) q.Message {
	p.t.Helper()
	m, err := p.s.Deliver(from, to)
	p.must(err)
	p.exclusive()
	return m
}

// exclusive fails if two nodes are in the critical section.
func (p *proxyNet) exclusive() {
	p.t.Helper()
	var held []q.ID
	for i, m := range p.s.Nodes {
		if m.State() == q.Held {
			held = append(held, i)
		}
	}
	if len(held) > 1 {
		p.t.Fatalf("nodes %v in the critical section at once\n%v", held, p.s.Log)
	}
}

// finish releases whoever holds until every request is served, and checks
// that nodes 1 and 3 each entered once more, after node 0.
func (p *proxyNet) finish() {
	p.t.Helper()
	for range 10 {
		for i, m := range p.s.Nodes {
			if m.State() == q.Held {
				p.must(p.s.Release(i))
			}
		}
		for from := range p.s.Nodes {
			for to := range p.s.Nodes {
				for len(p.s.Pending(from, to)) > 0 {
					p.deliver(from, to)
				}
			}
		}
	}
	got := slices.Clone(p.s.Entered)
	slices.Sort(got[1:])
	if !slices.Equal(got, []q.ID{0, 1, 3}) {
		p.t.Fatalf("entered %v, want 0 then 1 and 3 once each\n%v", p.s.Entered, p.s.Log)
	}
	for i, m := range p.s.Nodes {
		if m.State() != q.Idle {
			p.t.Fatalf("node %d left %v", i, m.State())
		}
	}
}

// The proxy's release(0, 3) is lost with its link and node 0 is put down,
// while node 3 holds node 2's permission by proxy: node 2 must not give it
// to node 1, the head of its queue. It asks nodes 3 and 1 (Query); node 3
// says it holds it.
func TestDownWhileTheProxiedReplyHolds(t *testing.T) {
	p := newProxyNet(t, 3, 1)
	p.deliver(0, 3) // the reply by proxy: node 3 enters
	if p.s.Nodes[3].State() != q.Held {
		t.Fatalf("node 3 %v, want it in the critical section\n%v", p.s.Nodes[3].State(), p.s.Log)
	}
	if _, err := p.s.Drop(0, 2); err != nil {
		t.Fatal(err)
	}
	p.s.Down(2, 0)
	p.s.Down(1, 0)
	p.s.Down(3, 0)
	for from := range p.s.Nodes {
		for to := range p.s.Nodes {
			for len(p.s.Pending(from, to)) > 0 {
				p.deliver(from, to) // no second holder on the way
			}
		}
	}
	p.finish()
}

// The reply by proxy is delayed and release(0, 1) arrives: node 2 takes
// node 1 for the holder. Node 0 is put down; node 2 asks node 1, which
// says no and asks again; node 2 gives the permission to node 3. The
// reply by proxy, arriving then, must not count: node 3 holds the
// permission.
func TestDownAfterTheProxiedReplyWasDelayed(t *testing.T) {
	p := newProxyNet(t, 1, 3)
	p.deliver(0, 2) // release(0, 1)
	p.s.Down(2, 0)
	p.deliver(2, 1) // transfer(3): node 1 holds nothing of node 2's yet
	query := p.deliver(2, 1)
	if query.Kind != q.Query || query.Site != 0 || query.SiteSeq == 0 {
		t.Fatalf("node 2 sent node 1 %v, want a query naming node 0's request", query)
	}
	if a := p.deliver(1, 2); a.Kind != q.Answer || a.Site != q.None {
		t.Fatalf("node 1 answered %v, want an answer saying it does not hold it", a)
	}
	if r := p.deliver(1, 2); r.Kind != q.Request {
		t.Fatalf("node 1 sent %v after its answer, want its request again", r)
	}
	p.deliver(2, 3) // reply: node 3 enters
	if p.s.Nodes[3].State() != q.Held {
		t.Fatalf("node 3 %v, want it in the critical section\n%v", p.s.Nodes[3].State(), p.s.Log)
	}
	p.deliver(0, 1) // the reply by proxy, late: refused
	if p.s.Nodes[1].State() != q.Waiting {
		t.Fatalf("node 1 %v after the late reply by proxy, want waiting\n%v", p.s.Nodes[1].State(), p.s.Log)
	}
	p.finish()
}
