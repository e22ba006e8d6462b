// Package plots draws the benchmark's figures from bench rows with
// gonum.org/v1/plot: messages per entry, synchronization delay, acquire
// latency and throughput, each against the group size N.
package plots

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"

	"gonum.org/v1/plot/plotter"

	"github.com/mcnode/mcnode/internal/bench"
)

// Write draws the figures for rows into dir (created if missing) in format
// "png" or "svg" and returns the files written.
//
// The figures, one file each, named by the figure and the format's
// extension:
//
//   - messages-heavy, messages-light: total messages per entry (protocol
//     and membership) against N, simulation layer, log-log.
//   - sync-delay: synchronization delay in T against N, heavy load; the
//     simulation as lines, the sockets layer as dotted lines with ringed
//     marks.
//   - latency-light, latency-heavy: median acquire latency in µs against
//     N, sockets layer, log y.
//   - throughput: entries per second against N, sockets layer, heavy load.
//
// Rows with an error or without entries are left out, as are values that
// were not measured (zero). A figure without data is not written; rows
// with no data at all give no files and no error, and dir is then not
// created. Repeated rows of one setup at one N are averaged. On an error,
// the files already written are returned with it.
func Write(rows []bench.Row, dir, format string) ([]string, error) {
	if format != "png" && format != "svg" {
		return nil, fmt.Errorf("plots: unsupported format %q: want \"png\" or \"svg\"", format)
	}
	figs := figures(rows)
	if len(figs) == 0 {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("plots: %w", err)
	}
	st := newStyler(rows)
	var written []string
	for _, f := range figs {
		// Render into memory first, so that a failed figure leaves no
		// truncated file behind.
		var buf bytes.Buffer
		if err := render(f, st, format, &buf); err != nil {
			return written, fmt.Errorf("plots: %s: %w", f.name, err)
		}
		path := filepath.Join(dir, f.name+"."+format)
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			return written, fmt.Errorf("plots: %w", err)
		}
		written = append(written, path)
	}
	return written, nil
}

// figure is one file's worth of data and labels, independent of drawing.
type figure struct {
	name, title    string
	xLabel, yLabel string
	logY           bool
	// mixLayers marks a figure that overlays the simulation and the
	// sockets layer: its sockets series are drawn differently, with a key.
	mixLayers bool
	series    []series // in drawing and legend order
}

// series is one setup on one layer, its points sorted by N.
type series struct {
	protocol, coterie string
	setup             string
	layer             string
	pts               plotter.XYs
}

// figures selects the data of every figure that has some, in file order.
func figures(rows []bench.Row) []figure {
	var ok []bench.Row
	for _, r := range rows {
		if r.Err == "" && r.Entries > 0 {
			ok = append(ok, r)
		}
	}
	msgs := func(r bench.Row) float64 { return r.Messages }
	syncT := func(r bench.Row) float64 { return r.SyncDelayT }
	p50 := func(r bench.Row) float64 { return r.LatencyP50US }
	perSec := func(r bench.Row) float64 { return r.PerSecond }

	// Axis labels stay short: gonum pads the data area to fit the
	// rotated y label, and a long one squashes the plot.
	const xLabel = "N (nodes)"
	all := []figure{
		{
			name:   "messages-heavy",
			title:  "Messages per entry, heavy load, simulation",
			xLabel: xLabel, yLabel: "messages per entry",
			logY:   true,
			series: append(collect(ok, bench.LayerSim, bench.Heavy, msgs), withMembership(ok, bench.Heavy)...),
		},
		{
			name:   "messages-light",
			title:  "Messages per entry, light load, simulation",
			xLabel: xLabel, yLabel: "messages per entry",
			logY:   true,
			series: append(collect(ok, bench.LayerSim, bench.Light, msgs), withMembership(ok, bench.Light)...),
		},
		{
			name:   "sync-delay",
			title:  "Synchronization delay (median), heavy load: simulation and sockets",
			xLabel: xLabel, yLabel: "sync delay (units of T)",
			mixLayers: true,
			series: append(collect(ok, bench.LayerSim, bench.Heavy, syncT),
				collect(ok, bench.LayerSockets, bench.Heavy, syncT)...),
		},
		{
			name:   "latency-light",
			title:  "Acquire latency (median), light load, sockets",
			xLabel: xLabel, yLabel: "latency p50 (µs)",
			logY:   true,
			series: collect(ok, bench.LayerSockets, bench.Light, p50),
		},
		{
			name:   "latency-heavy",
			title:  "Acquire latency (median), heavy load, sockets",
			xLabel: xLabel, yLabel: "latency p50 (µs)",
			logY:   true,
			series: collect(ok, bench.LayerSockets, bench.Heavy, p50),
		},
		{
			name:   "throughput",
			title:  "Throughput, heavy load, sockets",
			xLabel: xLabel, yLabel: "entries per second",
			series: collect(ok, bench.LayerSockets, bench.Heavy, perSec),
		},
	}
	var out []figure
	for _, f := range all {
		if len(f.series) > 0 {
			sortSeries(f.series)
			out = append(out, f)
		}
	}
	return out
}

// withMembership is the multicast mode's total, its membership traffic
// (pings, SYNCs, backup acks) included, as a series of its own beside the
// protocol's messages: the first stays flat in N, the second does not.
func withMembership(rows []bench.Row, load string) []series {
	var mc []bench.Row
	for _, r := range rows {
		if r.Mode == bench.ModeMulticast {
			mc = append(mc, r)
		}
	}
	ss := collect(mc, bench.LayerSim, load, func(r bench.Row) float64 { return r.Total })
	for i := range ss {
		ss[i].coterie = "membership"
		ss[i].setup = ss[i].protocol + " + membership"
	}
	return ss
}

// collect gathers y(row) against N for the rows of one layer and load, one
// series per setup. Zero means "not measured" in every field plotted here
// (the JSON omits it), and non-finite values cannot be drawn, so both are
// dropped; a setup left without points has no series.
func collect(rows []bench.Row, layer, load string, y func(bench.Row) float64) []series {
	type key struct{ protocol, coterie string }
	type acc struct{ sum, n float64 }
	byKey := map[key]map[int]*acc{}
	for _, r := range rows {
		if r.Layer != layer || r.Load != load {
			continue
		}
		v := y(r)
		if v <= 0 || math.IsInf(v, 0) || math.IsNaN(v) || r.N <= 0 {
			continue
		}
		k := key{r.Protocol, r.Coterie}
		if byKey[k] == nil {
			byKey[k] = map[int]*acc{}
		}
		a := byKey[k][r.N]
		if a == nil {
			a = &acc{}
			byKey[k][r.N] = a
		}
		// Averaged: two rows at one N (repeated runs) would otherwise make
		// the line jump up and down at that N.
		a.sum += v
		a.n++
	}
	var out []series
	for k, byN := range byKey {
		pts := make(plotter.XYs, 0, len(byN))
		for n, a := range byN {
			pts = append(pts, plotter.XY{X: float64(n), Y: a.sum / a.n})
		}
		sort.Slice(pts, func(i, j int) bool { return pts[i].X < pts[j].X })
		r := bench.Row{Protocol: k.protocol, Coterie: k.coterie}
		out = append(out, series{
			protocol: k.protocol, coterie: k.coterie,
			setup: r.Setup(), layer: layer, pts: pts,
		})
	}
	return out
}

// sortSeries puts the simulation before the sockets layer and, within a
// layer, setups in legend order, so that drawing is deterministic and the
// thick multicast line is drawn first, beneath the others.
func sortSeries(ss []series) {
	sort.SliceStable(ss, func(i, j int) bool {
		a, b := ss[i], ss[j]
		if a.layer != b.layer {
			return a.layer == bench.LayerSim
		}
		ap, ac := setupRank(a.protocol, a.coterie)
		bp, bc := setupRank(b.protocol, b.coterie)
		switch {
		case ap != bp:
			return ap < bp
		case a.protocol != b.protocol:
			return a.protocol < b.protocol
		case ac != bc:
			return ac < bc
		default:
			return a.coterie < b.coterie
		}
	})
}
