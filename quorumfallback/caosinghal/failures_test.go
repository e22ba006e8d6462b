package caosinghal_test

import (
	"slices"
	"testing"

	q "github.com/mcnode/mcnode/quorumfallback"
	"github.com/mcnode/mcnode/quorumfallback/caosinghal"
	"github.com/mcnode/mcnode/quorumfallback/sim"
)

// script drives machines message by message (sim.Script) and fails the
// test the moment two live nodes are in the critical section.
type script struct {
	t    *testing.T
	s    *sim.Script
	dead map[q.ID]bool // crashed: its critical section is over
}

func (p *script) must(err error) {
	p.t.Helper()
	if err != nil {
		p.t.Fatal(err)
	}
}

func (p *script) req(i q.ID) {
	p.t.Helper()
	p.must(p.s.Request(i))
}

func (p *script) rel(i q.ID) {
	p.t.Helper()
	p.must(p.s.Release(i))
}

// deliver hands over the oldest message on the link from -> to.
func (p *script) deliver(from, to q.ID) q.Message {
	p.t.Helper()
	m, err := p.s.Deliver(from, to)
	p.must(err)
	p.exclusive()
	return m
}

// all delivers everything on the link from -> to.
func (p *script) all(from, to q.ID) {
	p.t.Helper()
	for len(p.s.Pending(from, to)) > 0 {
		p.deliver(from, to)
	}
}

// everything delivers until no message is in flight.
func (p *script) everything() {
	p.t.Helper()
	for !p.s.Quiet() {
		for from := range p.s.Nodes {
			for to := range p.s.Nodes {
				p.all(from, to)
			}
		}
	}
}

// drop loses the oldest message on the link from -> to.
func (p *script) drop(from, to q.ID) {
	p.t.Helper()
	_, err := p.s.Drop(from, to)
	p.must(err)
}

// exclusive fails if two nodes are in the critical section.
func (p *script) exclusive() {
	p.t.Helper()
	var held []q.ID
	for i, m := range p.s.Nodes {
		if m.State() == q.Held && !p.dead[i] {
			held = append(held, i)
		}
	}
	if len(held) > 1 {
		p.t.Fatalf("nodes %v in the critical section at once\n%v", held, p.s.Log)
	}
}

// Four nodes around one arbiter: node 2 is in every quorum (0: {0, 2},
// 1: {1, 2}, 3: {2, 3}, 2: {2}), so it alone decides between the others.
// Node 0 holds. Node proxied asks, and node 2 sends node 0 a transfer
// about it; node other asks, and node 2 sends node 0 a transfer about it
// too (node 1's request precedes node 3's), which node 0 gets only once it
// has left. So node 0, leaving, replies to node proxied on node 2's behalf
// and sends node 2 release(0, proxied).
type proxyNet struct{ script }

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
	p := &proxyNet{script{t: t, s: sim.NewScript(nodes)}}
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
		p.everything()
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
	p.drop(0, 2)
	p.s.Down(2, 0)
	p.s.Down(1, 0)
	p.s.Down(3, 0)
	p.everything() // no second holder on the way
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

// oneArbiter is n nodes around one arbiter, node 0, in every quorum,
// driven message by message. These cases came from a review: each broke
// mutual exclusion or stalled before its fix.
type oneArbiter struct{ script }

func newOneArbiter(t *testing.T, n int) *oneArbiter {
	var nodes []q.Protocol
	for i := range n {
		m, err := caosinghal.New(caosinghal.Config{Self: i, N: n, Quorum: []q.ID{0}})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, m)
	}
	return &oneArbiter{script{t: t, s: sim.NewScript(nodes)}}
}

// An early yield remembered (yielded[j]) outlives the lock it was about
// (its proxy failed): a later proxy's release(x, j) must not be taken for
// "already yielded" while j holds x's reply by proxy. Two holders before
// the arbiter forgot early yields on every new lock. K is the arbiter,
// A=1, h=2, x=3, y=4, j=5.
func TestStaleEarlyYield(t *testing.T) {
	const K, A, h, x, y, j = 0, 1, 2, 3, 4, 5
	r := newOneArbiter(t, 6)
	r.req(A)
	r.all(A, K)
	r.all(K, A) // A enters
	r.req(j)
	r.all(j, K) // transfer(j) to A, fail to j
	r.all(K, A)
	r.rel(A)     // proxied grant A->j, release(A,j)
	r.drop(A, j) // A crashes: its reply by proxy is lost
	r.req(h)     // transfer(h) to A, fail(h)
	r.all(h, K)
	r.all(A, K)    // release(A, j): lock j via A, inquire+transfer(h) to j
	r.all(K, j)    // fail, inquire: j keeps it (no reply yet)
	r.s.Down(K, A) // doubt: query j
	r.all(K, j)    // query: j says no, asks again
	r.all(j, K)    // answer: relock h; request j: transfer(j) to h
	r.all(K, h)    // h enters (grant, fail, transfer(j))
	r.all(K, j)    // fail
	r.rel(h)       // proxied grant h->j, release(h, j)
	r.req(x)
	r.all(x, K)    // transfer(x) to h (too late), fail x
	r.all(h, j)    // proxied grant: j takes it, the kept inquire makes it yield (failed)
	r.all(j, K)    // yield: early, yielded[j] set
	r.drop(h, K)   // release(h, j) lost: h cut off
	r.s.Down(K, h) // doubt: query j and x
	r.all(K, j)
	r.all(K, x)
	r.all(j, K)
	r.all(x, K) // both no: relock x (grant+transfer j); yielded[j] still set
	r.all(K, x) // x enters
	r.rel(x)    // proxied grant x->j, release(x, j)
	r.req(y)
	r.all(y, K) // transfer(y) to x, fail(y); queue [y, j]
	r.all(x, K) // release(x, j): taken for "already yielded": grants y
	r.all(K, y) // y enters?
	r.all(x, j) // j enters?
	r.exclusive()
}

// An answer to an earlier doubt's query, still on its way, must not be
// taken for the answer to a later query about the same request (queries
// are numbered, answers name theirs). K=0, i=1, m=2, x=3, j=4.
func TestStaleAnswer(t *testing.T) {
	const K, i, m, x, j = 0, 1, 2, 3, 4
	r := newOneArbiter(t, 5)
	r.req(i)
	r.all(i, K)
	r.all(K, i) // i enters
	r.req(j)
	r.all(j, K) // transfer(j) to i
	r.req(m)
	r.all(m, K) // transfer(m) to i (m precedes j)
	r.all(K, i)
	r.rel(i)       // proxied grant to m, release(i, m)
	r.drop(i, K)   // release lost
	r.s.Down(K, i) // doubt: query j and m
	r.all(K, j)    // j: no (answer A1 stays on the link j->K), asks again
	r.all(i, m)    // m enters by proxy
	r.all(K, m)    // query: m says yes
	r.all(m, K)    // locked for m, transfer(j) to m
	r.all(K, m)
	r.rel(m)       // proxied grant to j, release(m, j)
	r.drop(m, K)   // release lost
	r.all(m, j)    // j enters by proxy
	r.s.Down(K, m) // doubt again: query j (same request)
	r.req(x)
	r.all(x, K)     // in doubt: queued, fail
	r.deliver(j, K) // A1, the answer to the first query: taken as "no"
	r.all(K, x)     // x enters?
	r.exclusive()
}

// A new incarnation of a proxy that node j was told to refuse replies
// from: its reply by proxy counts, even with the sequence numbers of the
// incarnation put down (Up clears what j refused of it). K=0, x=1, p=2,
// j=3.
func TestNewIncarnationProxyCounts(t *testing.T) {
	const K, x, p, j = 0, 1, 2, 3
	r := newOneArbiter(t, 4)
	r.req(p)
	r.all(p, K)
	r.all(K, p) // p enters (1,2)
	r.req(j)
	r.all(j, K) // transfer(j) to p
	r.req(x)
	r.all(x, K) // inquire+transfer(x) to p
	r.all(K, p)
	// p crashes in its critical section.
	r.dead = map[q.ID]bool{p: true}
	for len(r.s.Pending(p, K)) > 0 {
		r.drop(p, K)
	}
	r.s.Down(K, p)
	r.s.Down(j, p)
	r.s.Down(x, p)
	r.all(K, j)
	r.all(K, x)
	r.all(j, K)
	r.all(x, K) // relock x, transfer(j) with the grant
	r.all(K, x) // x enters
	// p restarts: a new machine, its clock from 0.
	np, err := caosinghal.New(caosinghal.Config{Self: p, N: 4, Quorum: []q.ID{0}})
	if err != nil {
		t.Fatal(err)
	}
	r.s.Nodes[p] = np
	delete(r.dead, p)
	for _, i := range []q.ID{K, x, j} {
		r.s.Nodes[i].(q.FaultTolerant).Up(p)
	}
	r.req(p)    // (1,2) again
	r.all(p, K) // transfer(p) to x
	r.all(K, p)
	r.all(K, x)
	r.rel(x) // proxied grant to p, release(x, p)
	r.all(x, p)
	r.all(x, K)
	r.all(K, p) // p enters, transfer(j)
	r.rel(p)    // proxied grant to j, release(p, j)
	r.everything()
	if r.s.Nodes[j].State() != q.Held {
		t.Fatalf("quiet, and node %d still %v: stalled\narbiter: %v", j, r.s.Nodes[j].State(), r.s.Nodes[K])
	}
}
