package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/mcnode/mcnode/internal/netns"
)

func allSetups(t *testing.T) []Setup {
	t.Helper()
	s, err := Setups(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Every protocol in the simulation, at sizes where the coteries differ,
// against its paper: light load exactly, heavy load within the bound, and
// the multicast mode's targets.
func TestSimulationAgainstPapers(t *testing.T) {
	opt := SimOptions{Seed: 3, Entries: 200, LightEntries: 40}
	var rows []Row
	for _, j := range SimJobs(allSetups(t), []int{4, 13}, []string{Light, Heavy}, opt) {
		r := j.Run()
		if r.Err != "" || r.Entries == 0 {
			t.Fatalf("%v: %d entries, error %q", j, r.Entries, r.Err)
		}
		if r.Paper == nil {
			t.Fatalf("%v: no paper figures", j)
		}
		rows = append(rows, r)
	}
	targets := Targets(rows)
	if len(targets) != 5 {
		t.Fatalf("want 5 targets judged from the simulation (datagrams at heavy and light load, with membership, delay, papers), got %+v", targets)
	}
	for _, tg := range targets {
		if strings.Contains(tg.Name, "membership included") {
			// Not met: the leases need every member's answer every
			// lease, whatever the load (docs/BENCHMARKS.md).
			continue
		}
		if !tg.Met {
			t.Errorf("%s: want %s, got %s", tg.Name, tg.Want, tg.Got)
		}
	}
	for _, r := range rows {
		// The next holder enters on the holder's release (T), not on the
		// server's decision after it (2T).
		if r.Mode == ModeMulticast && r.Load == Heavy && (r.SyncDelayT < 1 || r.SyncDelayT > 1.25) {
			t.Errorf("multicast N=%d: synchronization delay %.2fT, want T", r.N, r.SyncDelayT)
		}
		// The backup acks each grant once, unless it multicasts something
		// else that carries the ack anyway.
		if r.Mode == ModeMulticast && r.Load == Heavy && (r.Acks <= 0 || r.Acks > 1) {
			t.Errorf("multicast N=%d: %.3f backup acks per entry, want more than 0 and at most 1", r.N, r.Acks)
		}
		if r.Mode == ModeMulticast && r.Membership <= 0 {
			t.Errorf("multicast N=%d %s: no membership traffic counted; pings and SYNCs must show", r.N, r.Load)
		}
	}
}

// Weighting by entries makes the light-load figure exact for coteries whose
// quorums differ in size (fpp folded for N=4 has quorums of 2 and 3).
func TestPaperWeightedByEntries(t *testing.T) {
	s := Setup{Protocol: "maekawa", Coterie: "fpp"}
	even, err := paperFigures(s, 4, Light, nil)
	if err != nil {
		t.Fatal(err)
	}
	skewed, err := paperFigures(s, 4, Light, []int{10, 0, 0, 0})
	if err != nil {
		t.Fatal(err)
	}
	if even.MessagesValue == skewed.MessagesValue {
		t.Fatalf("entries by node 0 only should weigh node 0's quorum: %.2f both", even.MessagesValue)
	}
}

func TestTargetsJudge(t *testing.T) {
	good := []Row{
		{Layer: LayerSockets, Mode: ModeMulticast, Protocol: RotatingArbiter, N: 8, Load: Heavy, Entries: 100, Messages: 2.9, SyncDelayT: 2, PerSecond: 12000},
		{Layer: LayerSockets, Mode: ModeMulticast, Protocol: RotatingArbiter, N: 8, Load: Light, Entries: 100, Messages: 3, CycleP50US: 50, RTTUS: 20},
		{Layer: LayerSim, Mode: ModeQuorum, Protocol: "ricart-agrawala", N: 4, Load: Light, Entries: 10, Messages: 6,
			Paper: &Paper{MessagesValue: 6}},
		{Layer: LayerSim, Mode: ModeMulticast, Protocol: RotatingArbiter, N: 64, Load: Light, Entries: 100, Messages: 3},
		{Layer: LayerSim, Mode: ModeMulticast, Protocol: RotatingArbiter, N: 64, Load: Heavy, Entries: 100, Messages: 2.97, Membership: 0.3, SyncDelayT: 2},
		{Layer: LayerSockets, Mode: ModeMulticast, Protocol: RotatingArbiter, N: 64, Load: Memory, Entries: 1000, Locks: 1000, MemPerNodeM: 1},
		{Layer: LayerSockets, Mode: ModeMulticast, Protocol: RotatingArbiter, N: 4, Load: Idle, IdlePerMember: 12},
		{Layer: LayerSockets, Mode: ModeMulticast, Protocol: RotatingArbiter, N: 32, Load: Idle, IdlePerMember: 13},
	}
	for _, tg := range Targets(good) {
		if !tg.Met {
			t.Errorf("good rows: %s judged missed: %s", tg.Name, tg.Got)
		}
	}
	bad := []Row{
		{Layer: LayerSockets, Mode: ModeMulticast, Protocol: RotatingArbiter, N: 8, Load: Heavy, Entries: 100, Messages: 3.2, SyncDelayT: 2.5, PerSecond: 9000},
		{Layer: LayerSockets, Mode: ModeMulticast, Protocol: RotatingArbiter, N: 8, Load: Light, Entries: 100, Messages: 3, CycleP50US: 70, RTTUS: 20},
		{Layer: LayerSim, Mode: ModeQuorum, Protocol: "ricart-agrawala", N: 4, Load: Light, Entries: 10, Messages: 7,
			Paper: &Paper{MessagesValue: 6}},
		{Layer: LayerSim, Mode: ModeMulticast, Protocol: RotatingArbiter, N: 64, Load: Light, Entries: 100, Messages: 4},
		{Layer: LayerSim, Mode: ModeMulticast, Protocol: RotatingArbiter, N: 64, Load: Heavy, Entries: 100, Messages: 3.1, Membership: 9, SyncDelayT: 2.5},
		{Layer: LayerSockets, Mode: ModeMulticast, Protocol: RotatingArbiter, N: 64, Load: Memory, Entries: 1000, Locks: 1000, MemPerNodeM: 12},
		{Layer: LayerSockets, Mode: ModeMulticast, Protocol: RotatingArbiter, N: 4, Load: Idle, IdlePerMember: 12},
		{Layer: LayerSockets, Mode: ModeMulticast, Protocol: RotatingArbiter, N: 32, Load: Idle, IdlePerMember: 30},
	}
	tgs := Targets(bad)
	if len(tgs) != 11 {
		t.Fatalf("want 11 targets judged, got %d: %+v", len(tgs), tgs)
	}
	for _, tg := range tgs {
		if tg.Met {
			t.Errorf("bad rows: %s judged met: %s", tg.Name, tg.Got)
		}
	}
	// Rows with errors judge nothing.
	bad[0].Err = "boom"
	for _, tg := range Targets(bad[:1]) {
		t.Errorf("an errored row was judged: %+v", tg)
	}
}

func TestWriteTable(t *testing.T) {
	rows := []Row{
		{Layer: LayerSim, Mode: ModeQuorum, Protocol: "maekawa", Coterie: "grid", N: 16, Load: Heavy, Entries: 600, Messages: 23.98, Total: 23.98,
			Paper: &Paper{Messages: "5(K-1)", MessagesValue: 30, SyncDelay: "2T", SyncDelayT: 2}, SyncDelayT: 2},
		{Layer: LayerSockets, Mode: ModeMulticast, Protocol: RotatingArbiter, N: 8, Load: Heavy, Err: "not run: no namespace"},
	}
	var b strings.Builder
	if err := WriteTable(&b, Report{Rows: rows, Targets: []Target{{Name: "x", Want: "y", Got: "z"}}, Calibration: &Calibration{UDP: 20 * time.Microsecond}}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"maekawa/grid", "23.98", "30.00", "2.00T", "error: not run: no namespace", "MISSED  x", "UDP 20.0 µs (T = 10.0 µs)"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestSetupsErrors(t *testing.T) {
	if _, err := Setups([]string{"nope"}, nil); err == nil || !strings.Contains(err.Error(), "unknown protocol") {
		t.Errorf("unknown protocol: %v", err)
	}
	if _, err := Setups(nil, []string{"hex"}); err == nil || !strings.Contains(err.Error(), "unknown coterie") {
		t.Errorf("unknown coterie: %v", err)
	}
	s, err := Setups([]string{"maekawa", "central"}, []string{"grid", "tree"})
	if err != nil || len(s) != 3 {
		t.Errorf("maekawa × 2 coteries + central: %v %v", s, err)
	}
}

func shortSockets() SocketOptions {
	o := DefaultSocketOptions()
	o.Duration = 300 * time.Millisecond
	return o
}

// Quorum nodes over real TCP on loopback: no namespace needed.
func TestSocketsQuorum(t *testing.T) {
	cal, err := Calibrate()
	if err != nil {
		t.Fatal(err)
	}
	if cal.UDP <= 0 || cal.TCP <= 0 {
		t.Fatalf("calibration %+v", cal)
	}
	setups := []Setup{{Protocol: "maekawa", Coterie: "grid"}, {Protocol: "central"}}
	for _, j := range SocketJobs(setups, []int{4}, []string{Light, Heavy}, shortSockets(), &cal) {
		r := j.Run()
		if r.Err != "" || r.Entries == 0 {
			t.Fatalf("%v: %d entries, error %q", j, r.Entries, r.Err)
		}
		if r.Messages <= 0 || r.Bytes <= 0 || r.LatencyP50US <= 0 || r.PerSecond <= 0 || r.TUS <= 0 {
			t.Errorf("%v: missing figures: %+v", j, r)
		}
		if r.Load == Heavy && r.SyncDelayUS <= 0 {
			t.Errorf("%v: no synchronization delay measured at heavy load", j)
		}
		if r.Load == Light && (r.CycleP50US < r.LatencyP50US || r.RTTUS <= 0) {
			t.Errorf("%v: acquire+release %.0f µs shorter than acquire %.0f µs, or no RTT", j, r.CycleP50US, r.LatencyP50US)
		}
	}
}

// The multicast mode on real sockets, in a private network namespace.
func TestSocketsMulticast(t *testing.T) {
	if !netns.Isolate(t) {
		return
	}
	cal, err := Calibrate()
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range SocketJobs([]Setup{{Protocol: RotatingArbiter}}, []int{3}, []string{Light, Heavy}, shortSockets(), &cal) {
		r := j.Run()
		if r.Err != "" || r.Entries == 0 {
			t.Fatalf("%v: %d entries, error %q", j, r.Entries, r.Err)
		}
		if r.Messages <= 0 || r.Messages > 4 {
			t.Errorf("%v: %.2f datagrams per entry, want a few", j, r.Messages)
		}
		if r.Transport != "udp-multicast" {
			t.Errorf("%v: transport %q", j, r.Transport)
		}
		if r.Load == Heavy && (r.RecvPerNode <= 0 || r.CPUPerNodeUS <= 0) {
			t.Errorf("%v: %.2f receptions and %.1f µs of CPU per entry per node: the host's cost went uncounted", j, r.RecvPerNode, r.CPUPerNodeUS)
		}
	}
}

// The memory row: a group that holds more locks keeps more per node, and
// the row says how many it held.
func TestSocketsMemoryRow(t *testing.T) {
	if !netns.Isolate(t) {
		return
	}
	cal := Calibration{UDP: time.Microsecond, TCP: time.Microsecond}
	mem := func(locks int) Row {
		opt := shortSockets()
		opt.MemoryNodes, opt.MemoryLocks = 4, locks
		jobs := SocketJobs([]Setup{{Protocol: RotatingArbiter}, {Protocol: "maekawa", Coterie: "grid"}}, []int{3}, []string{Memory}, opt, &cal)
		if len(jobs) != 1 {
			t.Fatalf("want one memory job (the multicast mode), got %v", jobs)
		}
		r := jobs[0].Run()
		if r.Err != "" || r.Entries != locks || r.Locks != locks || r.N != 4 {
			t.Fatalf("memory row %+v", r)
		}
		return r
	}
	few, many := mem(10), mem(20000)
	t.Logf("per node: %.2f MiB with 10 locks, %.2f MiB with 20,000", few.MemPerNodeM, many.MemPerNodeM)
	if many.MemPerNodeM <= few.MemPerNodeM {
		t.Errorf("20,000 locks held take %.2f MiB per node, 10 take %.2f: the row measures nothing", many.MemPerNodeM, few.MemPerNodeM)
	}
}

// Outside a namespace the multicast socket runs say why they did not run.
func TestSocketsMulticastOutsideNamespace(t *testing.T) {
	if netns.Inside() {
		t.Skip("inside a namespace")
	}
	cal := Calibration{UDP: time.Microsecond, TCP: time.Microsecond}
	r := SocketJobs([]Setup{{Protocol: RotatingArbiter}}, []int{3}, []string{Heavy}, shortSockets(), &cal)[0].Run()
	if !strings.Contains(r.Err, "private network namespace") {
		t.Errorf("want a not-run error naming the namespace, got %q", r.Err)
	}
}

// The key's cost is judged from keyed and unkeyed rows of the same N and
// load, and fails when sealing slows acquiring too much.
func TestKeyCostTarget(t *testing.T) {
	rows := func(keyedP50 float64) []Row {
		return []Row{
			{Layer: LayerSockets, Mode: ModeMulticast, Protocol: RotatingArbiter, N: 4, Load: Light, Entries: 100, LatencyP50US: 100, Bytes: 300},
			{Layer: LayerSockets, Mode: ModeMulticast, Protocol: RotatingArbiterKeyed, N: 4, Load: Light, Entries: 100, LatencyP50US: keyedP50, Bytes: 390},
			{Layer: LayerSockets, Mode: ModeMulticast, Protocol: RotatingArbiterKeyed, N: 8, Load: Light, Entries: 100, LatencyP50US: 999}, // no unkeyed row to compare
		}
	}
	find := func(ts []Target) *Target {
		for i := range ts {
			if strings.HasPrefix(ts[i].Name, "cost of the group key") {
				return &ts[i]
			}
		}
		return nil
	}
	if tg := find(Targets(rows(110))); tg == nil || !tg.Met || !strings.Contains(tg.Got, "1.10x") || !strings.Contains(tg.Got, "390 against 300") {
		t.Errorf("keyed 1.1x slower: %+v", tg)
	}
	if tg := find(Targets(rows(200))); tg == nil || tg.Met {
		t.Errorf("keyed 2x slower: %+v", tg)
	}
	for _, tg := range Targets(rows(200)) {
		if strings.Contains(tg.Got, "999") {
			t.Errorf("a keyed row counted in another target: %+v", tg)
		}
	}
}

// A failover row that stalls says why: no failure handling, or no quorum
// without the dead node.
func TestWhyStalls(t *testing.T) {
	for _, c := range []struct {
		st   Setup
		want string
	}{
		{Setup{Protocol: "maekawa", Coterie: "all"}, "the all coterie has no substitute"},
		{Setup{Protocol: "cao-singhal", Coterie: "grid"}, "the grid coterie has no substitute"},
		{Setup{Protocol: "cao-singhal", Coterie: "tree"}, "unexpected"},
		{Setup{Protocol: "kakugawa", Coterie: "tree"}, "no failure handling"},
		{Setup{Protocol: "ricart-agrawala"}, "no failure handling"},
	} {
		if got := whyStalls(c.st, 4); !strings.Contains(got, c.want) {
			t.Errorf("%v: %q, want it to say %q", c.st, got, c.want)
		}
	}
}
