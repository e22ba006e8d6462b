package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcnode/mcnode/internal/bench"
)

// cheapBench is a bench command line that runs in well under a second (one
// tiny simulation), so that a check the bench skips shows as a wrong
// result rather than as a run of minutes.
var cheapBench = []string{"bench", "--layers", "sim", "--protocols", "central", "--sim-n", "2", "--loads", "light", "--sim-entries", "1"}

// A --plots path bench cannot write into is refused before anything runs
// (it once ran the whole benchmark, then printed no table and failed), and
// a missing directory is created.
func TestBenchPlotsDirCheckedFirst(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ plots, want string }{
		{file, "--plots " + file + " is not a directory"},
		{filepath.Join(file, "sub"), "--plots " + filepath.Join(file, "sub") + ": cannot create the directory"},
	}
	if os.Geteuid() != 0 { // root writes whatever the mode bits say
		ro := filepath.Join(dir, "ro")
		if err := os.Mkdir(ro, 0o555); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct{ plots, want string }{ro, "--plots " + ro + ": cannot write there"})
	}
	for _, tc := range cases {
		args := append(append([]string(nil), cheapBench...), "--plots", tc.plots)
		out, code := mcnodeLocal(args...)
		if code != exitUsage || strings.Count(strings.TrimSpace(out), "\n") != 0 || !strings.Contains(out, tc.want) {
			t.Errorf("mcnode %s: status %d, output %q; want status 2 and one line with %q, before any run", strings.Join(args, " "), code, out, tc.want)
		}
	}

	fresh := filepath.Join(dir, "new", "plots")
	args := append(append([]string(nil), cheapBench...), "--plots", fresh)
	out, code := mcnodeLocal(args...)
	if code != 0 {
		t.Fatalf("mcnode %s: status %d:\n%s", strings.Join(args, " "), code, out)
	}
	if entries, err := os.ReadDir(fresh); err != nil || len(entries) == 0 {
		t.Errorf("mcnode %s: %s has %v (%v); want the plots", strings.Join(args, " "), fresh, entries, err)
	}
}

// Plots that cannot be written once the run is over (their directory gone
// since it was checked) cost the plots only: the report is printed, then
// the plot error returned, once prefixed "plots:" (it was "plots: plots:").
func TestBenchReportDespitePlotError(t *testing.T) {
	gone := filepath.Join(t.TempDir(), "plots")
	if err := os.WriteFile(gone, nil, 0o644); err != nil { // a file where the directory was
		t.Fatal(err)
	}
	rep := bench.Report{Rows: []bench.Row{{Layer: bench.LayerSim, Mode: bench.ModeQuorum, Protocol: "central",
		Transport: "simulated", N: 2, Load: bench.Light, Entries: 10, Messages: 3}}}
	for _, asJSON := range []bool{false, true} {
		p := &benchPlan{plots: gone, format: "png", json: asJSON}
		var out bytes.Buffer
		err := p.report(&out, rep)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 1 || !strings.HasPrefix(err.Error(), "plots: ") || strings.Contains(err.Error(), "plots: plots:") {
			t.Errorf("json %v: plots into a file: %v; want status 1 and the plot error prefixed once with \"plots: \"", asJSON, err)
		}
		if want := `"central"`; asJSON && !strings.Contains(out.String(), want) {
			t.Errorf("json %v: printed %q; want the report, with %s", asJSON, out.String(), want)
		}
		if want := "central"; !asJSON && !strings.Contains(out.String(), want) {
			t.Errorf("json %v: printed %q; want the table, with %s", asJSON, out.String(), want)
		}
	}
}
