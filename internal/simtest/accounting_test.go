package simtest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mcnode/mcnode/wire"
)

// accounting runs a loss-free group under a workload and returns datagrams
// per critical-section entry by class.
func accounting(t *testing.T, hosts, resources, thinkMax, ticks int) (perEntry map[wire.Class]float64, entries int) {
	t.Helper()
	s := New(Options{Seed: int64(hosts*100 + resources), Hosts: hosts})
	w := NewWorkload(s, resources)
	w.ThinkMin, w.ThinkMax, w.HoldMin, w.HoldMax = 0, thinkMax, 1, 3
	w.Run(100) // everyone joins
	before := map[wire.Class]int{}
	for c, n := range s.Stats.Datagrams {
		before[c] = n
	}
	startEntries := s.Stats.Entries
	w.Run(ticks)
	for _, v := range s.Check.Violations {
		t.Fatal(v)
	}
	entries = s.Stats.Entries - startEntries
	if entries == 0 {
		t.Fatalf("N=%d: no entries", hosts)
	}
	perEntry = map[wire.Class]float64{}
	for _, c := range wire.Classes {
		perEntry[c] = float64(s.Stats.Datagrams[c]-before[c]) / float64(entries)
	}
	return perEntry, entries
}

func coreAndRest(p map[wire.Class]float64) (core, rest float64) {
	for c, v := range p {
		if c.Core() {
			core += v
		} else {
			rest += v
		}
	}
	return core, rest
}

// Pearlin (2003), section 5: a request, the server's one multicast decision, and a
// release per entry, whatever N. At heavy load (every node always waiting)
// the decision that records a release is the grant to the next holder, and
// queued requests ride along with it, so the cost is at most three datagrams
// per entry; pings, SYNCs and heartbeats are counted apart.
func TestMessagesPerEntryHeavyLoad(t *testing.T) {
	var table strings.Builder
	fmt.Fprintf(&table, "%4s %9s %8s %8s %8s %7s | %6s %6s %6s %6s %6s %6s\n",
		"N", "entries", "request", "decision", "release", "core", "sync", "ping", "ack", "repair", "join", "other")
	for _, n := range []int{2, 3, 5, 8, 13} {
		p, entries := accounting(t, n, 1, 0, 2000)
		core, rest := coreAndRest(p)
		fmt.Fprintf(&table, "%4d %9d %8.3f %8.3f %8.3f %7.3f | %6.3f %6.3f %6.3f %6.3f %6.3f %6.3f\n",
			n, entries, p[wire.ClassRequest], p[wire.ClassDecision], p[wire.ClassRelease], core,
			p[wire.ClassSync], p[wire.ClassPing], p[wire.ClassAck], p[wire.ClassRepair], p[wire.ClassJoin], rest-p[wire.ClassSync]-p[wire.ClassPing]-p[wire.ClassAck]-p[wire.ClassRepair]-p[wire.ClassJoin])
		if core > 3 {
			t.Errorf("N=%d: %.3f datagrams per entry at heavy load, want at most 3", n, core)
		}
		if p[wire.ClassRepair] > 0 {
			t.Errorf("N=%d: %.3f repair datagrams per entry without loss: something is retried needlessly", n, p[wire.ClassRepair])
		}
	}
	t.Logf("datagrams per critical-section entry, heavy load, one resource, no loss:\n%s", table.String())
}

// At light load (one request at a time, long gaps) the cost is a request, a
// grant and a release, as in the paper: the decision recording the release
// rides on the next grant or on the server's next ping, which goes out
// anyway (membership).
func TestMessagesPerEntryLightLoad(t *testing.T) {
	for _, n := range []int{2, 5, 13} {
		p, _ := accounting(t, n, 4, 400, 4000)
		core, rest := coreAndRest(p)
		t.Logf("N=%2d light load: %.3f core datagrams per entry (request %.3f, decision %.3f, release %.3f), %.3f membership",
			n, core, p[wire.ClassRequest], p[wire.ClassDecision], p[wire.ClassRelease], rest)
		if core > 3 {
			t.Errorf("N=%d: %.3f datagrams per entry at light load, want at most 3", n, core)
		}
	}
}
