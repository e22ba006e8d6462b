package protocols

import (
	"math/rand"
	"testing"

	"github.com/mcnode/mcnode/quorumfallback/sim"
)

// faultOptions draws a run with failures from its seed: crashes of any
// node and cuts of links between live nodes, holders and arbiters alike.
func faultOptions(seed int64, n int) sim.Options {
	o := optionsFor(seed)
	r := rand.New(rand.NewSource(seed ^ 0xfa17))
	lease := 200 + int64(r.Intn(200))
	o.Entries += 4
	if r.Intn(2) == 0 {
		// Critical sections as long as a lease, so that failures strike
		// holders in the middle, and leases run out under them.
		o.MaxHold = 2 * lease
	}
	o.Faults = &sim.Faults{
		Lease: lease, Margin: lease / 5, Detect: lease / 2,
		Restart: int64(r.Intn(int(3 * lease))),
		Crashes: r.Intn(1 + n/2), Cuts: r.Intn(1 + n/2),
		Horizon: 4 * lease,
	}
	o.Faults.ReleaseCuts = r.Intn(3)
	return o
}

// faultWaitBound bounds a wait through failures: each failure during it
// costs at most a detection, the wait for a lease to run out on both
// sides, a restart and a new incarnation's wait; on top of that, the
// contention any request sees, at most two rounds of every node's critical
// section with the messages around it.
func faultWaitBound(o sim.Options, n, faults int) int64 {
	f := o.Faults
	quiet := 2 * int64(n) * (o.MaxHold + 6*o.MaxDelay + o.MaxThink)
	return quiet + int64(faults)*(2*f.Detect+3*(f.Lease+f.Margin)+f.Restart+4*o.MaxDelay)
}

// faultRegressionSeeds run in every TestFaultsSeeded, beyond the default
// count: seeds that found a fault in a rule, kept so that it stays found.
// 1886 (tree) and 6708 (grid) overlap when a new incarnation acts at once
// instead of waiting out its predecessor's leases.
// Cao and Singhal's seeds within the default range: 492 (tree) overlaps
// when an arbiter frees a failed holder's permission without asking whom
// it passed it to; 3, 8, 20, 28 and 37 deadlocked on the failure paths
// (a yield given back early, a request overtaken in doubt without a fail).
// They are listed so that -short, which runs 100 seeds, keeps them.
var faultRegressionSeeds = []int64{3, 8, 20, 28, 37, 492, 1886, 6708}

// TestFaultsSeeded runs the fault-tolerant protocols with fail-stop
// crashes and cut links (a falsely suspected node is alive) over seeded
// random networks: no two nodes ever in the critical section at once
// (a critical section ends when its node crashes or its lease runs out),
// fencing tokens strictly increasing across failures and restarts, and
// every request granted within a bound (faultWaitBound).
func TestFaultsSeeded(t *testing.T) {
	n := *seeds
	if testing.Short() {
		n = 100
	}
	for _, setup := range []struct{ protocol, coterie string }{
		{Maekawa, "tree"}, {Maekawa, "majority"}, {Maekawa, "grid"},
		{CaoSinghal, "tree"}, {CaoSinghal, "majority"}, {CaoSinghal, "grid"},
	} {
		t.Run(setup.protocol+"/"+setup.coterie, func(t *testing.T) {
			t.Parallel()
			var entries, crashes, cuts, releaseCuts, lost, restarts int
			var quiet, through int64
			seedList := make([]int64, 0, n+len(faultRegressionSeeds))
			for i := range n {
				seedList = append(seedList, int64(i))
			}
			for _, s := range faultRegressionSeeds {
				if s >= int64(n) { // beyond the count (or -short's 100)
					seedList = append(seedList, s)
				}
			}
			if *oneSeed >= 0 {
				seedList = []int64{*oneSeed}
			}
			for _, seed := range seedList {
				s := Setup{Protocol: setup.protocol, Coterie: setup.coterie, N: 2 + rand.New(rand.NewSource(seed)).Intn(14)}
				f, nodes := machines(t, s)
				opt := faultOptions(seed, s.N)
				opt.Nodes = nodes
				opt.Faults.New = f.New
				if *oneSeed >= 0 && testing.Verbose() {
					opt.Trace = func(line string) { t.Log(line) }
				}
				res := sim.Run(opt)
				if res.Err != nil {
					t.Fatalf("seed %d (%v, delays %d-%d, hold %d-%d, think %d-%d, faults %+v): %v\nreplay: go test ./quorumfallback/protocols -run 'TestFaultsSeeded/%s/%s' -sim.seed %d -v",
						seed, s, opt.MinDelay, opt.MaxDelay, opt.MinHold, opt.MaxHold, opt.MinThink, opt.MaxThink, *opt.Faults, res.Err, setup.protocol, setup.coterie, seed)
				}
				if want := s.N * opt.Entries; res.Entries < want {
					t.Fatalf("seed %d (%v): %d entries, want %d", seed, s, res.Entries, want)
				}
				faults := res.Crashes + res.Cuts + res.Restarts
				if bound := faultWaitBound(opt, s.N, faults); res.MaxFaultWait > bound {
					t.Fatalf("seed %d (%v): a request waited %d through failures, bound %d", seed, s, res.MaxFaultWait, bound)
				}
				if bound := faultWaitBound(opt, s.N, 0); res.MaxQuietWait > bound {
					t.Fatalf("seed %d (%v): a request waited %d with no failure, bound %d", seed, s, res.MaxQuietWait, bound)
				}
				entries += res.Entries
				crashes += res.Crashes
				releaseCuts += res.ReleaseCuts
				cuts += res.Cuts
				lost += res.Lost
				restarts += res.Restarts
				quiet = max(quiet, res.MaxQuietWait)
				through = max(through, res.MaxFaultWait)
			}
			t.Logf("%d seeds: %d entries, %d crashes, %d cuts (%d as a permission was handed on), %d restarts, %d critical sections lost to a lease; no overlap, no token going back; longest wait %d without a failure, %d through failures",
				n, entries, crashes, cuts, releaseCuts, restarts, lost, quiet, through)
			if n >= 100 && *oneSeed < 0 && (crashes == 0 || cuts == 0 || lost == 0 || setup.protocol == CaoSinghal && releaseCuts == 0) {
				t.Errorf("the faults never hit: %d crashes, %d cuts (%d as a permission was handed on), %d leases lost", crashes, cuts, releaseCuts, lost)
			}
		})
	}
}
