package protocols

import (
	"strings"
	"testing"

	q "github.com/mcnode/mcnode/quorumfallback"
	"github.com/mcnode/mcnode/quorumfallback/caosinghal"
	"github.com/mcnode/mcnode/quorumfallback/maekawa"
	"github.com/mcnode/mcnode/quorumfallback/sim"
)

// runLiteral runs seed with the protocol's printed text where we deviate
// from it (each package's doc says where and why).
func runLiteral(t *testing.T, protocol string, seed int64) sim.Result {
	t.Helper()
	s := setupFor(protocol, seed)
	f, err := NewFactory(s)
	if err != nil {
		t.Fatal(err)
	}
	nodes := make([]q.Protocol, s.N)
	for i := range nodes {
		var err error
		switch protocol {
		case Maekawa:
			nodes[i], err = maekawa.New(maekawa.Config{Self: i, N: s.N, Quorum: f.Quorum(i), Literal: true})
		case CaoSinghal:
			nodes[i], err = caosinghal.New(caosinghal.Config{Self: i, N: s.N, Quorum: f.Quorum(i), Literal: true})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	opt := optionsFor(seed)
	opt.Nodes = nodes
	return sim.Run(opt)
}

// TestLiteralStep2Deadlocks: Maekawa's step 2 as printed sends no FAILED
// to a request that another, more preceding one overtakes; seed 18 then
// deadlocks. With the fix (the default) the same seed completes.
func TestLiteralStep2Deadlocks(t *testing.T) {
	assertLiteralDeadlocks(t, Maekawa, 18)
}

// TestLiteralCase6Deadlocks: Cao and Singhal's A.2 as printed sends no fail
// when lock(j) < (sn, i) < head(req_queue(j)); seed 6 then deadlocks. With
// the fix (the default) the same seed completes.
func TestLiteralCase6Deadlocks(t *testing.T) {
	assertLiteralDeadlocks(t, CaoSinghal, 6)
}

func assertLiteralDeadlocks(t *testing.T, protocol string, seed int64) {
	t.Helper()
	r := runLiteral(t, protocol, seed)
	if r.Err == nil || !strings.Contains(r.Err.Error(), "deadlock") {
		t.Fatalf("%s as printed, seed %d: %v, want a deadlock", protocol, seed, r.Err)
	}
	t.Logf("as printed: %v", r.Err)
	_, nodes := machines(t, setupFor(protocol, seed))
	opt := optionsFor(seed)
	opt.Nodes = nodes
	if r := sim.Run(opt); r.Err != nil {
		t.Fatalf("%s with the fix, seed %d: %v", protocol, seed, r.Err)
	}
}
