package plots

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/mcnode/mcnode/internal/bench"
)

const (
	figWidth  = 8 * vg.Inch
	figHeight = 5 * vg.Inch
	// 150 dpi gives 1200x750 pixels: sharp enough to tell dashes apart
	// when the PNG is scaled down in a document.
	pngDPI = 150
)

var (
	// Sans-serif reads better than gonum's default serif at small sizes.
	sans = font.Font{Typeface: "Liberation", Variant: "Sans"}

	margin     = vg.Points(9)  // around the whole figure
	legendGap  = vg.Points(12) // between the plot and the legend
	gridColor  = color.Gray{Y: 225}
	keyColor   = color.Gray{Y: 40}
	dotted     = dashes(1.5, 2.5)
	legendFont = []vg.Length{9, 8.5, 8, 7.5, 7, 6.5, 6} // tried in turn until the legend fits
)

// render draws one figure: the plot on the left, its legend outside to the
// right, so that the legend of ~18 setups never covers data.
func render(f figure, st *styler, format string, w io.Writer) (err error) {
	// gonum/plot panics on some degenerate input rather than returning an
	// error; a benchmark run should lose one figure, not the whole report.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("drawing failed: %v", r)
		}
	}()

	var c vg.CanvasWriterTo
	switch format {
	case "png":
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(figWidth, figHeight), vgimg.UseDPI(pngDPI))}
	case "svg":
		c = vgsvg.New(figWidth, figHeight)
	default:
		return fmt.Errorf("unsupported format %q", format)
	}
	dc := draw.New(c)
	// The SVG canvas is transparent, and the plot only fills its own part:
	// paint everything so the legend is on white in a dark viewer too.
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	dc = draw.Crop(dc, margin, -margin, margin, -margin)

	p, leg := build(f, st)

	titleH := p.Title.TextStyle.Rectangle(p.Title.Text).Size().Y + p.Title.Padding
	fitLegend(&leg, dc, dc.Size().Y-titleH)
	legW := leg.Rectangle(dc).Size().X

	p.Draw(draw.Crop(dc, 0, -(legW + legendGap), 0, 0))
	leg.Draw(draw.Crop(dc, dc.Size().X-legW, 0, 0, -titleH))

	_, err = c.WriteTo(w)
	return err
}

// build makes the plot and its legend (kept apart from the plot so that it
// can be drawn outside the data area).
func build(f figure, st *styler) (*plot.Plot, plot.Legend) {
	p := plot.New()
	p.Title.Text = f.title
	p.Title.TextStyle.Font = font.From(sans, 12)
	p.Title.Padding = vg.Points(8)
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font = font.From(sans, 11)
		a.Tick.Label.Font = font.From(sans, 10)
	}
	p.X.Label.Text = f.xLabel
	p.Y.Label.Text = f.yLabel

	grid := plotter.NewGrid()
	grid.Vertical.Color = gridColor
	grid.Horizontal.Color = gridColor
	grid.Vertical.Dashes, grid.Horizontal.Dashes = nil, nil
	p.Add(grid)

	leg := plot.NewLegend()
	leg.Top, leg.Left = true, true
	leg.ThumbnailWidth = vg.Points(36)
	leg.Padding = vg.Points(2)

	layers := map[string]bool{}
	for _, s := range f.series {
		layers[s.layer] = true
	}
	// Only a figure mixing layers needs the sockets points to look
	// different, and a key saying how.
	mixed := f.mixLayers
	if mixed {
		if layers[bench.LayerSim] {
			leg.Add("simulation",
				&plotter.Line{LineStyle: draw.LineStyle{Color: keyColor, Width: vg.Points(1.2)}},
				&plotter.Scatter{GlyphStyle: draw.GlyphStyle{Color: keyColor, Radius: vg.Points(3),
					Shape: marker{shape: shapeCircle, filled: true}}})
		}
		if layers[bench.LayerSockets] {
			leg.Add("sockets",
				&plotter.Line{LineStyle: draw.LineStyle{Color: keyColor, Width: vg.Points(0.9), Dashes: dotted}},
				&plotter.Scatter{GlyphStyle: draw.GlyphStyle{Color: keyColor, Radius: vg.Points(4.5),
					Shape: ringed{marker{shape: shapeCircle, filled: true}}}})
		}
		leg.Add("") // a blank line between the key and the setups
	}

	xmin, xmax := math.Inf(1), math.Inf(-1)
	ymin, ymax := math.Inf(1), math.Inf(-1)
	inLegend := map[string]bool{}
	for _, s := range f.series {
		sty := st.style(s.protocol, s.coterie)
		ls := draw.LineStyle{Color: sty.color, Width: sty.width, Dashes: sty.dashes}
		gs := draw.GlyphStyle{Color: sty.color, Radius: sty.radius, Shape: sty.marker}
		// The legend shows the setup's own look, whatever layer it came
		// from; the key above explains the sockets variant.
		if !inLegend[s.setup] {
			inLegend[s.setup] = true
			leg.Add(s.setup, &plotter.Line{LineStyle: ls}, &plotter.Scatter{GlyphStyle: gs})
		}
		if mixed && s.layer == bench.LayerSockets {
			ls = draw.LineStyle{Color: sty.color, Width: vg.Points(0.9), Dashes: dotted}
			gs = draw.GlyphStyle{Color: sty.color, Radius: vg.Points(4.5), Shape: ringed{sty.marker}}
		}
		line := &plotter.Line{XYs: s.pts, LineStyle: ls}
		sc := &plotter.Scatter{XYs: s.pts, GlyphStyle: gs}
		p.Add(line, sc)
		for _, pt := range s.pts {
			xmin, xmax = math.Min(xmin, pt.X), math.Max(xmax, pt.X)
			ymin, ymax = math.Min(ymin, pt.Y), math.Max(ymax, pt.Y)
		}
	}

	// N spans powers of two (and the projective planes' q²+q+1) over
	// two and a half decades: log scale, labelled at powers of two.
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = powersOfTwo{}
	p.X.Min, p.X.Max = xmin, xmax
	if xmin == xmax {
		p.X.Min, p.X.Max = xmin/2, xmax*2
	}
	if f.logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = logTicks{}
		// Snapped outwards to values that logTicks labels, so that both
		// ends carry a label: powers of ten over two decades or more,
		// 1-2-5 values below.
		p.Y.Min, p.Y.Max = snap125(ymin, false), snap125(ymax, true)
		if ymax/ymin >= 100 {
			p.Y.Min, p.Y.Max = snap10(ymin, false), snap10(ymax, true)
		}
		if p.Y.Min == p.Y.Max {
			p.Y.Min, p.Y.Max = p.Y.Min/2, p.Y.Max*2
		}
	} else {
		// Linear from zero, so that differences read as proportions.
		p.Y.Min, p.Y.Max = 0, ymax*1.05
	}
	return p, leg
}

// fitLegend shrinks the legend's font until it fits the height, so that a
// run with more setups than expected still shows all of them.
func fitLegend(leg *plot.Legend, c draw.Canvas, height vg.Length) {
	for _, size := range legendFont {
		leg.TextStyle.Font = font.From(sans, size)
		if leg.Rectangle(c).Size().Y <= height {
			return
		}
	}
}

// snap125 rounds v > 0 down (or up) to the nearest 1, 2 or 5 times a power
// of ten.
func snap125(v float64, up bool) float64 {
	e := math.Floor(math.Log10(v))
	cands := []float64{1, 2, 5, 10}
	if up {
		for _, m := range cands {
			if c := decimal(m, e); c >= v*(1-1e-9) {
				return c
			}
		}
		return decimal(10, e)
	}
	for i := len(cands) - 1; i >= 0; i-- {
		if c := decimal(cands[i], e); c <= v*(1+1e-9) {
			return c
		}
	}
	return decimal(1, e)
}

// snap10 rounds v > 0 down (or up) to a power of ten.
func snap10(v float64, up bool) float64 {
	e := math.Log10(v)
	if up {
		return decimal(1, math.Ceil(e-1e-9))
	}
	return decimal(1, math.Floor(e+1e-9))
}

// decimal is m·10^e as the double nearest the decimal, so that labels such
// as 0.3 do not come out as 0.30000000000000004.
func decimal(m, e float64) float64 {
	v, err := strconv.ParseFloat(fmt.Sprintf("%ge%d", m, int(e)), 64)
	if err != nil {
		return m * math.Pow10(int(e))
	}
	return v
}

func label(v float64) string {
	if v >= 1e7 || v < 1e-3 {
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// powersOfTwo labels the N axis at 4, 8, 16, ... (gonum's LogTicks only
// labels powers of ten: 10, 100, 1000 say little about group sizes).
type powersOfTwo struct{}

// Ticks implements plot.Ticker.
func (powersOfTwo) Ticks(min, max float64) []plot.Tick {
	var ticks []plot.Tick
	if !(min > 0) || !(max >= min) || math.IsInf(max, 0) {
		return nil
	}
	for e := math.Floor(math.Log2(min)); ; e++ {
		v := math.Exp2(e)
		if v > max*(1+1e-9) {
			break
		}
		if v >= min*(1-1e-9) {
			ticks = append(ticks, plot.Tick{Value: v, Label: label(v)})
		}
	}
	return withEnds(ticks, min, max)
}

// logTicks labels a log axis at powers of ten when it spans several
// decades, and at 1-2-5 or every digit when it spans fewer, so that a
// narrow range (latencies of 200 to 900 µs, say) still has labels;
// unlabelled minor ticks fill each decade.
type logTicks struct{}

// Ticks implements plot.Ticker.
func (logTicks) Ticks(min, max float64) []plot.Tick {
	if !(min > 0) || !(max >= min) || math.IsInf(max, 0) {
		return nil
	}
	lo, hi := math.Floor(math.Log10(min)), math.Ceil(math.Log10(max))
	in := func(v float64) bool { return v >= min*(1-1e-9) && v <= max*(1+1e-9) }
	sets := [][]float64{{1}, {1, 2, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9}}
	labelled := sets[len(sets)-1]
	for _, set := range sets {
		n := 0
		for e := lo; e <= hi; e++ {
			for _, m := range set {
				if in(decimal(m, e)) {
					n++
				}
			}
		}
		if n >= 3 {
			labelled = set
			break
		}
	}
	var ticks []plot.Tick
	for e := lo; e <= hi; e++ {
		for m := 1.0; m <= 9; m++ {
			v := decimal(m, e)
			if !in(v) {
				continue
			}
			t := plot.Tick{Value: v}
			for _, l := range labelled {
				if l == m {
					t.Label = label(v)
				}
			}
			ticks = append(ticks, t)
		}
	}
	return withEnds(ticks, min, max)
}

// withEnds labels both ends of the axis when fewer than two ticks carry a
// label: one label cannot show the scale.
func withEnds(ticks []plot.Tick, min, max float64) []plot.Tick {
	n := 0
	for _, t := range ticks {
		if !t.IsMinor() {
			n++
		}
	}
	if n >= 2 {
		return ticks
	}
	short := func(v float64) string { return strconv.FormatFloat(v, 'g', 3, 64) }
	out := []plot.Tick{{Value: min, Label: short(min)}}
	for _, t := range ticks {
		// Keep the inner ticks unless they would print over an end label.
		if t.Value > min*(1+1e-3) && t.Value < max*(1-1e-3) {
			out = append(out, t)
		}
	}
	if max > min {
		out = append(out, plot.Tick{Value: max, Label: short(max)})
	}
	return out
}
