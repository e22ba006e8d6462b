package protocols

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/mcnode/mcnode/quorumfallback/sim"
)

// T is the fixed one-way message delay of the counting runs.
const T = 100

// countRun runs s with every message taking exactly T and a critical
// section of one time unit: at light load one request at a time in the
// whole system, at heavy load every node always waiting.
func countRun(t *testing.T, s Setup, heavy bool) (sim.Result, *Factory) {
	t.Helper()
	f, nodes := machines(t, s)
	opt := sim.Options{Seed: 1, Nodes: nodes, MinDelay: T, MaxDelay: T, MinHold: 1, MaxHold: 1}
	if heavy {
		opt.Entries = 20
	} else {
		opt.Serial, opt.Entries, opt.MinThink, opt.MaxThink = true, 200, 1, 1
	}
	r := sim.Run(opt)
	if r.Err != nil {
		t.Fatalf("%v: %v", s, r.Err)
	}
	return r, f
}

// expected sums a per-requester message count over the entries each node
// made: the papers count messages per entry of one node, whose quorum size
// is its own.
func expected(r sim.Result, per func(i int) int) int {
	total := 0
	for i, e := range r.EntriesBy {
		total += e * per(i)
	}
	return total
}

func median(xs []int64) int64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// TestMessageCountsAgainstThePapers checks the papers' message counts and
// synchronization delays in the simulation with a fixed delay T:
//
//   - light load: Maekawa 3(K-1) (section 1), Cao-Singhal 3(K-1) (5.1),
//     Kakugawa 3 per member other than self (6.1), Ricart-Agrawala 2(N-1),
//     central server 3, all exactly;
//   - heavy load: Maekawa within 5(K-1), Cao-Singhal within 6(K-1) (5.2),
//     Kakugawa and Ricart-Agrawala unchanged;
//   - synchronization delay at heavy load: Maekawa 2T, Cao-Singhal T
//     (Table 1), Ricart-Agrawala T, central server 2T.
func TestMessageCountsAgainstThePapers(t *testing.T) {
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-26s %-12s %8s %8s %8s %8s %9s\n", "setup", "K", "light", "formula", "heavy", "bound", "sync(T)")
	for _, p := range Names() {
		coteries := []string{"fpp", "grid", "tree", "majority"}
		if !UsesCoterie(p) {
			coteries = []string{""}
		}
		for _, c := range coteries {
			for _, n := range []int{7, 13, 16, 31} {
				s := Setup{Protocol: p, Coterie: c, N: n}
				light, f := countRun(t, s, false)
				heavy, _ := countRun(t, s, true)
				k := func(i int) int { return len(f.Quorum(i)) - 1 } // members other than self
				var lightPer, heavyBound func(int) int
				switch p {
				case Maekawa:
					lightPer, heavyBound = func(i int) int { return 3 * k(i) }, func(i int) int { return 5 * k(i) }
				case CaoSinghal:
					lightPer, heavyBound = func(i int) int { return 3 * k(i) }, func(i int) int { return 6 * k(i) }
				case Kakugawa:
					lightPer = func(i int) int { return 3 * k(i) }
					heavyBound = lightPer
				case RicartAgrawala:
					lightPer = func(int) int { return 2 * (n - 1) }
					heavyBound = lightPer
				case Central:
					lightPer = func(i int) int { return map[bool]int{true: 0, false: 3}[i == 0] }
					heavyBound = lightPer
				}
				if want := expected(light, lightPer); light.Messages != want {
					t.Errorf("%v light load: %d messages for %d entries, the paper's formula gives %d", s, light.Messages, light.Entries, want)
				}
				bound := expected(heavy, heavyBound)
				if heavy.Messages > bound {
					t.Errorf("%v heavy load: %d messages for %d entries, above the paper's %d", s, heavy.Messages, heavy.Entries, bound)
				}
				if (p == Kakugawa || p == RicartAgrawala || p == Central) && heavy.Messages != bound {
					t.Errorf("%v heavy load: %d messages, want exactly %d", s, heavy.Messages, bound)
				}
				sync := float64(median(heavy.SyncDelays)) / T
				switch want := map[string]float64{Maekawa: 2, CaoSinghal: 1, RicartAgrawala: 1, Central: 2}[p]; {
				case p == Kakugawa:
					// 2T per member in the best case (section 6.2); no bound claimed for the delay.
				case len(heavy.SyncDelays) == 0:
					t.Errorf("%v: no synchronization delay measured", s)
				case sync != want:
					t.Errorf("%v: median synchronization delay %.2fT, the paper says %.0fT", s, sync, want)
				}
				kmin, kmax, _ := f.Coterie.Sizes()
				fmt.Fprintf(&table, "%-26s %-12s %8.2f %8.2f %8.2f %8.2f %9.2f\n", s, fmt.Sprintf("%d-%d", kmin, kmax),
					light.PerEntry(), float64(expected(light, lightPer))/float64(light.Entries),
					heavy.PerEntry(), float64(bound)/float64(heavy.Entries), sync)
			}
		}
	}
	t.Log("messages per entry and median synchronization delay, fixed delay T" + table.String())
}

// TestCaoSinghalHalvesMaekawasDelay: the point of Cao and Singhal's
// algorithm, measured side by side on the same coteries.
func TestCaoSinghalHalvesMaekawasDelay(t *testing.T) {
	for _, c := range []string{"fpp", "grid", "tree", "majority"} {
		m, _ := countRun(t, Setup{Protocol: Maekawa, Coterie: c, N: 13}, true)
		cs, _ := countRun(t, Setup{Protocol: CaoSinghal, Coterie: c, N: 13}, true)
		if !(cs.MeanSyncDelay() < m.MeanSyncDelay()) || cs.End >= m.End {
			t.Errorf("%s: Cao-Singhal mean delay %.2fT, run %d; Maekawa %.2fT, run %d", c,
				cs.MeanSyncDelay()/T, cs.End, m.MeanSyncDelay()/T, m.End)
		}
		t.Logf("%s N=13: mean synchronization delay Maekawa %.2fT, Cao-Singhal %.2fT; same work done in %.0f%% of the time",
			c, m.MeanSyncDelay()/T, cs.MeanSyncDelay()/T, 100*float64(cs.End)/float64(m.End))
	}
}
