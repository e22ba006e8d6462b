package plots

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/mcnode/mcnode/internal/bench"
)

// setup is a protocol and coterie pair for synthetic rows.
type setup struct{ protocol, coterie string }

// allSetups is the benchmark's full set: the multicast arbiter, three
// quorum protocols on five coteries each, and two fixed-quorum protocols.
func allSetups() []setup {
	ss := []setup{{bench.RotatingArbiter, ""}}
	for _, p := range []string{"maekawa", "cao-singhal", "kakugawa"} {
		for _, c := range []string{"fpp", "grid", "tree", "majority", "all"} {
			ss = append(ss, setup{p, c})
		}
	}
	return append(ss, setup{"ricart-agrawala", ""}, setup{"central", ""})
}

// synthetic makes rows shaped like a benchmark run's: every setup at every
// N of each layer, both loads, with values that grow with N in roughly the
// way the protocols do, so that the figures can be looked at.
func synthetic(setups []setup, simN, socketN []int) []bench.Row {
	var rows []bench.Row
	for i, s := range setups {
		mode := bench.ModeQuorum
		transport := "tcp"
		if s.protocol == bench.RotatingArbiter {
			mode, transport = bench.ModeMulticast, "udp-multicast"
		}
		grow := func(n int) float64 {
			x := float64(n)
			switch s.coterie {
			case "fpp", "grid":
				return 3 * math.Sqrt(x)
			case "tree":
				return 3 * math.Log2(x)
			case "majority":
				return 1.5 * x
			case "all":
				return 3 * x
			}
			switch s.protocol {
			case bench.RotatingArbiter:
				return 2 + 0.01*x
			case "central":
				return 3
			}
			return 2 * (x - 1)
		}
		for _, layer := range []string{bench.LayerSim, bench.LayerSockets} {
			ns := simN
			tr := "simulated"
			if layer == bench.LayerSockets {
				ns, tr = socketN, transport
			}
			for _, load := range []string{bench.Light, bench.Heavy} {
				for _, n := range ns {
					m := grow(n) * (1 + 0.03*float64(i))
					r := bench.Row{
						Layer: layer, Mode: mode, Protocol: s.protocol, Coterie: s.coterie,
						Transport: tr, N: n, Load: load, Entries: 100,
						Messages: m, Total: m * 1.05, PerT: 1 / (1 + 0.05*float64(i)),
						LatencyP50T: 2, LatencyP99T: 4,
					}
					if load == bench.Heavy {
						r.SyncDelayT = 1 + float64(i%3)*0.5
					}
					if layer == bench.LayerSockets {
						r.TUS = 40
						r.LatencyP50US = 80 * (2 + math.Log2(float64(n))*float64(1+i%4))
						if load == bench.Heavy {
							r.LatencyP50US *= float64(n) / 2
							r.SyncDelayT *= 1.2
							r.SyncDelayUS = r.SyncDelayT * r.TUS
							r.PerSecond = 20000 / (1 + 0.1*float64(i)) / math.Sqrt(float64(n))
						}
					}
					rows = append(rows, r)
				}
			}
		}
	}
	return rows
}

var wantFiles = []string{
	"messages-heavy", "messages-light", "sync-delay",
	"latency-light", "latency-heavy", "throughput",
}

func TestWriteBothFormats(t *testing.T) {
	rows := synthetic(
		[]setup{{bench.RotatingArbiter, ""}, {"maekawa", "fpp"}, {"cao-singhal", "grid"}, {"ricart-agrawala", ""}},
		[]int{4, 16, 64, 256, 1024}, []int{4, 8, 16, 32})
	for _, format := range []string{"png", "svg"} {
		t.Run(format, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "figures") // Write creates it
			files, err := Write(rows, dir, format)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, name := range wantFiles {
				want = append(want, filepath.Join(dir, name+"."+format))
			}
			if fmt.Sprint(files) != fmt.Sprint(want) {
				t.Fatalf("files = %v, want %v", files, want)
			}
			for _, f := range files {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case len(b) == 0:
					t.Errorf("%s: empty", f)
				case format == "png" && !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")):
					t.Errorf("%s: no PNG signature", f)
				case format == "svg" && !bytes.Contains(b, []byte("<svg")):
					t.Errorf("%s: no <svg element", f)
				}
			}
		})
	}
}

func TestWriteUnknownFormat(t *testing.T) {
	dir := t.TempDir()
	rows := synthetic([]setup{{"maekawa", "fpp"}}, []int{4, 8}, []int{4})
	files, err := Write(rows, dir, "pdf")
	if err == nil || !strings.Contains(err.Error(), `"pdf"`) {
		t.Fatalf("err = %v, want an error naming the format", err)
	}
	if len(files) != 0 {
		t.Errorf("files = %v, want none", files)
	}
	assertEmpty(t, dir)
}

func TestWriteNoData(t *testing.T) {
	failed := synthetic([]setup{{"maekawa", "fpp"}}, []int{4, 8}, []int{4})
	for i := range failed {
		if i%2 == 0 {
			failed[i].Err = "timeout"
		} else {
			failed[i].Entries = 0
		}
	}
	for name, rows := range map[string][]bench.Row{
		"nil":    nil,
		"failed": failed,
		// Measured, but none of the plotted fields is: nothing to draw.
		"unmeasured": {{Layer: bench.LayerSim, Protocol: "central", N: 4, Load: bench.Heavy, Entries: 10}},
	} {
		t.Run(name, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, "figures")
			for _, format := range []string{"png", "svg"} {
				files, err := Write(rows, dir, format)
				if err != nil || len(files) != 0 {
					t.Errorf("%s: files, err = %v, %v; want none, nil", format, files, err)
				}
			}
			assertEmpty(t, parent)
		})
	}
}

// TestFiguresSkipAndSort checks the data behind the figures: failed and
// empty rows are left out, points are sorted by N, repeated rows at one N
// are averaged, and setups come in legend order.
func TestFiguresSkipAndSort(t *testing.T) {
	row := func(proto, cot string, n int, msgs float64) bench.Row {
		return bench.Row{Layer: bench.LayerSim, Protocol: proto, Coterie: cot, N: n,
			Load: bench.Heavy, Entries: 10, Messages: msgs, Total: msgs}
	}
	bad := row("maekawa", "grid", 8, 1000)
	bad.Err = "crashed"
	empty := row("maekawa", "grid", 16, 1000)
	empty.Entries = 0
	rows := []bench.Row{
		row("maekawa", "grid", 64, 30), bad, row("maekawa", "grid", 4, 10), empty,
		row("maekawa", "grid", 16, 20), row("maekawa", "grid", 16, 24),
		row(bench.RotatingArbiter, "", 1024, 3),
	}
	rows[len(rows)-1].Mode, rows[len(rows)-1].Total = bench.ModeMulticast, 40
	figs := figures(rows)
	if len(figs) != 1 || figs[0].name != "messages-heavy" {
		t.Fatalf("figures = %+v, want messages-heavy only", figs)
	}
	ss := figs[0].series
	if len(ss) != 3 || ss[0].setup != bench.RotatingArbiter || ss[1].setup != "rotating-arbiter + membership" || ss[2].setup != "maekawa/grid" {
		t.Fatalf("series = %+v, want rotating-arbiter, its total with membership, then maekawa/grid", ss)
	}
	if got := fmt.Sprint(ss[1].pts); got != "[{1024 40}]" {
		t.Errorf("rotating-arbiter with membership = %s, want its Total", got)
	}
	ss = ss[1:]
	got := fmt.Sprint(ss[1].pts)
	if want := "[{4 10} {16 22} {64 30}]"; got != want {
		t.Errorf("maekawa/grid points = %s, want %s", got, want)
	}
}

// TestStylesDistinct checks that the full set of setups gets a different
// look for each setup.
func TestStylesDistinct(t *testing.T) {
	ss := allSetups()
	st := newStyler(synthetic(ss, []int{4}, nil))
	seen := map[string]string{}
	for _, s := range ss {
		sty := st.style(s.protocol, s.coterie)
		key := fmt.Sprint(sty.color, sty.dashes, sty.marker)
		name := bench.Row{Protocol: s.protocol, Coterie: s.coterie}.Setup()
		if other, dup := seen[key]; dup {
			t.Errorf("%s and %s look the same: %s", name, other, key)
		}
		seen[key] = name
	}
}

// TestWriteAllSetups draws the full set, with an unknown protocol and
// coterie added, and a setup present at a single N only.
func TestWriteAllSetups(t *testing.T) {
	ss := append(allSetups(), setup{"newproto", "wheel"})
	rows := synthetic(ss, []int{4, 7, 13, 31, 57, 133, 256, 1024}, []int{4, 7, 13, 31})
	rows = append(rows, bench.Row{Layer: bench.LayerSockets, Protocol: "lonely", N: 8,
		Load: bench.Heavy, Entries: 1, PerSecond: 100, LatencyP50US: 500, SyncDelayT: 2})
	dir := t.TempDir()
	files, err := Write(rows, dir, "png")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(wantFiles) {
		t.Errorf("files = %v, want %d", files, len(wantFiles))
	}
}

func TestLogTicksLabelNarrowRanges(t *testing.T) {
	for _, r := range [][2]float64{{1, 6000}, {200, 1000}, {300, 900}, {410, 430}, {0.3, 0.7}} {
		var labels []string
		for _, tk := range (logTicks{}).Ticks(r[0], r[1]) {
			if tk.Label != "" {
				labels = append(labels, tk.Label)
			}
		}
		if len(labels) < 2 {
			t.Errorf("range %v: labels %v, want at least two", r, labels)
		}
	}
}

func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	if len(names) != 0 {
		t.Errorf("%s holds %v, want nothing", dir, names)
	}
}
