package protocols

import (
	"flag"
	"math/rand"
	"os"
	"strconv"
	"testing"

	q "github.com/mcnode/mcnode/quorumfallback"

	"github.com/mcnode/mcnode/quorumfallback/sim"
)

var (
	seeds   = flag.Int("sim.seeds", defaultSeeds(), "seeds per protocol in TestPropertySeeded (env MCNODE_QSIM_SEEDS)")
	oneSeed = flag.Int64("sim.seed", -1, "run only this seed")
	first   = flag.Int64("sim.first", 0, "the first seed of TestPropertySeeded's run, for sweeps of fresh seeds")
)

func defaultSeeds() int {
	if v, err := strconv.Atoi(os.Getenv("MCNODE_QSIM_SEEDS")); err == nil && v > 0 {
		return v
	}
	return 1000
}

// setupFor draws the shape of one seeded run: a protocol's coterie and N.
func setupFor(protocol string, seed int64) Setup {
	r := rand.New(rand.NewSource(seed))
	kinds := []string{"fpp", "grid", "tree", "majority"}
	return Setup{Protocol: protocol, Coterie: kinds[r.Intn(len(kinds))], N: 2 + r.Intn(15)}
}

// optionsFor draws a run's timing from its seed: random delays on reliable
// FIFO links, a load from light to every node always waiting.
func optionsFor(seed int64) sim.Options {
	r := rand.New(rand.NewSource(seed ^ 0x5eed))
	o := sim.Options{
		Seed:     seed,
		MinDelay: 1, MaxDelay: 1 + int64(r.Intn(40)),
		MinHold: 0, MaxHold: int64(r.Intn(20)),
		Entries:     3 + r.Intn(5),
		BypassLimit: 0,
	}
	if r.Intn(3) > 0 { // mostly contended
		o.MaxThink = int64(r.Intn(30))
	} else {
		o.MinThink, o.MaxThink = 10, 200
	}
	return o
}

// TestPropertySeeded runs every protocol over many seeded random networks
// and checks what the papers prove: mutual exclusion (theorem 1 in each),
// no deadlock (every request granted once the network is quiet), no
// starvation (a bounded number of entries by others during any wait), and
// our fencing tokens strictly increasing. In every odd seed the nodes'
// machines are freed whenever they are quiescent and made anew, as the
// runtime does with idle resources: the properties must not change.
func TestPropertySeeded(t *testing.T) {
	n := *seeds
	if testing.Short() {
		n = 100
	}
	for _, protocol := range Names() {
		t.Run(protocol, func(t *testing.T) {
			t.Parallel()
			entries, maxBypass, renewed := 0, 0, 0
			for i := range n {
				seed := *first + int64(i)
				if *oneSeed >= 0 {
					if i > 0 {
						break
					}
					seed = *oneSeed
				}
				s := setupFor(protocol, seed)
				_, nodes := machines(t, s)
				opt := optionsFor(seed)
				opt.Nodes = nodes
				opt.BypassLimit = bypassLimit(s.N)
				f, _ := machines(t, s)
				if seed%2 == 1 {
					opt.Renew, opt.RenewRate = f.New, 0.5
				}
				res := sim.Run(opt)
				renewed += res.Renewed
				if res.Err != nil {
					t.Fatalf("seed %d (%v, delays %d-%d, hold %d-%d, think %d-%d): %v\nreplay: go test ./quorumfallback/protocols -run 'TestPropertySeeded/%s' -sim.seed %d -v",
						seed, s, opt.MinDelay, opt.MaxDelay, opt.MinHold, opt.MaxHold, opt.MinThink, opt.MaxThink, res.Err, protocol, seed)
				}
				if want := s.N * opt.Entries; res.Entries != want {
					t.Fatalf("seed %d (%v): %d entries, want %d", seed, s, res.Entries, want)
				}
				entries += res.Entries
				maxBypass = max(maxBypass, res.MaxBypass)
			}
			t.Logf("%s: %d seeds, %d entries, no overlap, deadlock or starvation; most entries by others during one wait: %d; machines made anew: %d", protocol, n, entries, maxBypass, renewed)
			if n >= 10 && *oneSeed < 0 && renewed == 0 {
				t.Errorf("%s: no machine was ever quiescent and made anew", protocol)
			}
		})
	}
}

// bypassLimit bounds how many entries by others one request may wait
// through before the run calls it starvation. Every protocol here serves
// waiting requests in an order that a newer request cannot overtake forever
// (timestamps, FIFO queues); a handful of rounds of all N nodes is generous.
func bypassLimit(n int) int { return 4 * n * n }

func TestSetupValidate(t *testing.T) {
	for _, s := range []Setup{{Protocol: "raft", N: 3}, {Protocol: Maekawa, Coterie: "ring", N: 3}, {Protocol: Central, N: 0}} {
		if err := s.Validate(); err == nil {
			t.Errorf("%+v: no error", s)
		}
	}
	if err := (Setup{Protocol: RicartAgrawala, N: 3}).Validate(); err != nil {
		t.Errorf("ricart-agrawala needs no coterie: %v", err)
	}
}

// machines builds every node's machine for s.
func machines(t testing.TB, s Setup) (*Factory, []q.Protocol) {
	t.Helper()
	f, err := NewFactory(s)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := f.NewAll()
	if err != nil {
		t.Fatal(err)
	}
	return f, nodes
}
