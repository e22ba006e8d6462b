package protocols

import (
	"testing"

	q "github.com/mcnode/mcnode/quorumfallback"
)

// sinkReady keeps the benchmarks' results alive.
var sinkReady q.Ready

// benchResources is how many resources, each with its own machines, one
// timed stretch serves before the timer stops to free their arbiters.
const benchResources = 1024

// benchGroup is one resource's machines for every node, driven by hand.
type benchGroup []q.Protocol

// run delivers msgs, and everything they cause, in order until nothing is
// in flight; see, if not nil, is shown every message before delivery.
func (g benchGroup) run(b *testing.B, msgs []q.Message, see func(q.Message)) {
	for len(msgs) > 0 {
		m := msgs[0]
		msgs = msgs[1:]
		if see != nil {
			see(m)
		}
		if err := g[m.To].Step(m); err != nil {
			b.Fatalf("node %d: Step(%v): %v", m.To, m, err)
		}
		msgs = append(msgs, g[m.To].Ready().Messages...)
	}
}

// entry runs one uncontended critical-section entry of node i to the end
// and returns what i sent arbiter j: its Request, and what its release sent
// (nothing, for Ricart and Agrawala).
func (g benchGroup) entry(b *testing.B, i, j q.ID) (req q.Message, rel []q.Message) {
	b.Helper()
	found := false
	if err := g[i].Request(); err != nil {
		b.Fatal(err)
	}
	g.run(b, g[i].Ready().Messages, func(m q.Message) {
		if m.From == i && m.To == j && m.Kind == q.Request {
			req, found = m, true
		}
	})
	if !found {
		b.Fatalf("node %d sent no request to arbiter %d", i, j)
	}
	if st := g[i].State(); st != q.Held {
		b.Fatalf("node %d is %v after its requests were answered", i, st)
	}
	if err := g[i].Release(); err != nil {
		b.Fatal(err)
	}
	g.run(b, g[i].Ready().Messages, func(m q.Message) {
		if m.From == i && m.To == j {
			rel = append(rel, m)
		}
	})
	for k, m := range g {
		if st := m.State(); st != q.Idle {
			b.Fatalf("node %d is %v after the release", k, st)
		}
	}
	return req, rel
}

// BenchmarkArbiterGrant times an arbiter answering a request, for each
// protocol in a group of N=13 (with the fpp coterie where one is used). One
// op is the arbiter's Step of a Request from a node in its quorum (any node,
// for Ricart and Agrawala; the coordinator, for central) while it is free,
// and the Ready that takes the Grant it sends.
//
// Each of 1024 resources has its own machines, on which the requester first
// makes one real entry; the benchmark replays that entry's Request at the
// arbiter, timed, and between timed stretches, untimed, the messages the
// requester's release sent it, which free it again: every op finds the
// arbiter in the same state, the one the real entry left.
func BenchmarkArbiterGrant(b *testing.B) {
	for _, p := range Names() {
		b.Run(p, func(b *testing.B) {
			s := Setup{Protocol: p, Coterie: "fpp", N: 13}
			const requester = 1
			var f *Factory
			groups := make([]benchGroup, benchResources)
			for r := range groups {
				f, groups[r] = machines(b, s)
			}
			var arbiter q.ID // the coordinator for central; any node for ricart-agrawala
			for _, j := range f.Quorum(requester) {
				if j != requester {
					arbiter = j
					break
				}
			}
			reqs := make([]q.Message, benchResources)
			rels := make([][]q.Message, benchResources)
			answers := make([][]q.Message, benchResources)
			for r, g := range groups {
				reqs[r], rels[r] = g.entry(b, requester, arbiter)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; {
				n := min(benchResources, b.N-done)
				for r, g := range groups[:n] {
					if err := g[arbiter].Step(reqs[r]); err != nil {
						b.Fatal(err)
					}
					rd := g[arbiter].Ready()
					answers[r] = rd.Messages
					sinkReady = rd
				}
				b.StopTimer()
				done += n
				for r, g := range groups[:n] {
					if a := answers[r]; len(a) != 1 || a[0].Kind != q.Grant || a[0].To != requester {
						b.Fatalf("arbiter %d answered a request of node %d with %v", arbiter, requester, a)
					}
					for _, m := range rels[r] {
						if err := g[arbiter].Step(m); err != nil {
							b.Fatal(err)
						}
					}
					if rd := g[arbiter].Ready(); len(rd.Messages) != 0 {
						b.Fatalf("arbiter %d answered the release with %v", arbiter, rd.Messages)
					}
				}
				b.StartTimer()
			}
		})
	}
}
