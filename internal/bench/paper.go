package bench

import (
	"fmt"

	"github.com/mcnode/mcnode/quorumfallback/protocols"
)

// others returns the mean number of quorum members other than the node
// itself, |q_i \ {i}|: the papers' K-1 (messages to self are free in the
// papers and here). The mean is over the entries made, weighted by
// entriesBy, or over all nodes if it is empty.
// The largest |q_i \ {i}| comes too: a bound on one hand-over depends on
// the quorum of the node that takes over, not on the mean.
func others(s Setup, n int, entriesBy []int) (mean float64, largest int, err error) {
	f, err := protocols.NewFactory(s.quorum(n))
	if err != nil {
		return 0, 0, err
	}
	total, weight := 0, 0
	for i := 0; i < n; i++ {
		w := 1
		if len(entriesBy) == n {
			w = entriesBy[i]
		}
		k := 0
		for _, j := range f.Quorum(i) {
			if j != i {
				k++
			}
		}
		total += w * k
		weight += w
		largest = max(largest, k)
	}
	if weight == 0 {
		return 0, largest, nil
	}
	return float64(total) / float64(weight), largest, nil
}

// paperFigures returns what the setup's paper claims at this N and load
// (the papers' own figures, as docs/BENCHMARKS.md tabulates them). Central is no paper's: it is the baseline of a
// request, a grant and a release, with delay 2T.
func paperFigures(s Setup, n int, load string, entriesBy []int) (*Paper, error) {
	heavy := load == Heavy
	p := &Paper{}
	k1, kmax := 0.0, 0
	if s.Coterie != "" {
		var err error
		if k1, kmax, err = others(s, n, entriesBy); err != nil {
			return nil, err
		}
	}
	kk := fmt.Sprintf("K-1=%.2f", k1)
	switch s.Protocol {
	case RotatingArbiter:
		p.Messages, p.MessagesValue = "2 to enter + 1 release", 3
		p.SyncDelay, p.SyncDelayT = "2T (release, then the server's grant)", 2
	case "maekawa":
		p.Messages, p.MessagesValue = "3(K-1), "+kk, 3*k1
		if heavy {
			p.Messages, p.MessagesValue = "5(K-1), "+kk, 5*k1
		}
		p.SyncDelay, p.SyncDelayT = "2T", 2
	case "cao-singhal":
		p.Messages, p.MessagesValue = "3(K-1), "+kk, 3*k1
		if heavy {
			p.Messages, p.MessagesValue, p.MessagesMax = "5(K-1) to 6(K-1), "+kk, 5*k1, 6*k1
		}
		p.SyncDelay, p.SyncDelayT = "T", 1
	case "kakugawa":
		p.Messages, p.MessagesValue = "3|q|, |q| without self: "+kk, 3*k1
		// Section 6.2: the next holder may wait for the whole chain of
		// quorum members to pass the token on, one at a time.
		p.SyncDelay, p.SyncDelayT = fmt.Sprintf("(K-1)T to 2(K-1)T, largest K-1=%d", kmax), 2*float64(kmax)
	case "ricart-agrawala":
		p.Messages, p.MessagesValue = "2(N-1)", 2*float64(n-1)
		p.SyncDelay, p.SyncDelayT = "T", 1
	case "central":
		// Node 0 coordinates, and its own entries cost nothing.
		share := float64(n-1) / float64(n)
		if total := sum(entriesBy); len(entriesBy) == n && total > 0 {
			share = 1 - float64(entriesBy[0])/float64(total)
		}
		p.Messages, p.MessagesValue = "3 per entry by a node other than node 0 (baseline, no paper)", 3*share
		p.SyncDelay, p.SyncDelayT = "2T", 2
	default:
		return nil, fmt.Errorf("no paper figures for %q", s.Protocol)
	}
	if !heavy {
		p.SyncDelay, p.SyncDelayT = "", 0
	}
	return p, nil
}

func sum(xs []int) int {
	t := 0
	for _, x := range xs {
		t += x
	}
	return t
}
