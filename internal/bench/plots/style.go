package plots

import (
	"image/color"
	"math"
	"sort"

	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/mcnode/mcnode/internal/bench"
)

// About 18 setups share one figure, so no single channel (colour, dash or
// marker) can tell them all apart. The encoding is split instead: the hue
// names the protocol, and the dash pattern plus the marker shape name the
// coterie, the same way for every protocol, so "all dashed-square lines are
// grid coteries" can be read off any figure. The shade also shifts a little
// with the coterie, so that two lines of one protocol differ in more than
// their dashes where they overlap. The multicast protocol, the subject of
// the benchmark, gets a thick line of its own colour.

// style is how one setup's series is drawn.
type style struct {
	color  color.Color
	width  vg.Length
	dashes []vg.Length
	marker marker
	radius vg.Length
}

// Protocols in the order their setups are drawn and listed in legends;
// unknown protocols follow, sorted by name.
var protocolOrder = []string{
	bench.RotatingArbiter,
	"maekawa",
	"cao-singhal",
	"kakugawa",
	"ricart-agrawala",
	"central",
}

// Coteries in legend order; unknown coteries follow, sorted by name.
var coterieOrder = []string{"fpp", "grid", "tree", "majority", "all"}

// Okabe-Ito based hues: distinguishable with the common colour-vision
// deficiencies, and dark enough on white after shading.
var protocolColor = map[string]color.RGBA{
	bench.RotatingArbiter: {R: 215, G: 25, B: 28, A: 255},
	"maekawa":             {R: 0, G: 114, B: 178, A: 255},
	"cao-singhal":         {R: 0, G: 158, B: 115, A: 255},
	"kakugawa":            {R: 230, G: 159, B: 0, A: 255},
	"ricart-agrawala":     {R: 204, G: 121, B: 167, A: 255},
	"central":             {R: 100, G: 100, B: 100, A: 255},
}

// Extra hues for protocols this package does not know yet, so that a new
// protocol still gets a colour of its own instead of a crash or a clash.
var spareColors = []color.RGBA{
	{R: 86, G: 180, B: 233, A: 255},
	{R: 128, G: 60, B: 170, A: 255},
	{R: 140, G: 86, B: 75, A: 255},
	{R: 23, G: 190, B: 207, A: 255},
	{R: 188, G: 189, B: 34, A: 255},
}

// coterieLook is the coterie's share of a style: dash pattern, marker and
// shade (negative darkens towards black, positive lightens towards white).
type coterieLook struct {
	dashes []vg.Length
	marker marker
	shade  float64
}

var coterieLooks = map[string]coterieLook{
	"fpp":      {nil, marker{shape: shapeCircle, filled: true}, 0},
	"grid":     {dashes(6, 3), marker{shape: shapeSquare, filled: true}, -0.3},
	"tree":     {dashes(2, 2), marker{shape: shapeTriangleUp, filled: true}, 0.25},
	"majority": {dashes(8, 3, 2, 3), marker{shape: shapeDiamond}, -0.5},
	"all":      {dashes(12, 4), marker{shape: shapeTriangleDown}, 0.4},
}

// Looks for setups without a coterie: the multicast arbiter and the
// protocols whose quorum is fixed (everyone, or one coordinator).
var protocolLooks = map[string]coterieLook{
	bench.RotatingArbiter: {nil, marker{shape: shapeCircle, filled: true}, 0},
	"ricart-agrawala":     {nil, marker{shape: shapePlus}, 0},
	"central":             {dashes(8, 3, 2, 3), marker{shape: shapeCross}, 0},
}

// Looks handed out, in turn, to coteries this package does not know.
var spareLooks = []coterieLook{
	{dashes(4, 4), marker{shape: shapeSquare}, 0},
	{dashes(10, 3, 2, 3, 2, 3), marker{shape: shapeCircle}, -0.3},
	{dashes(1, 3), marker{shape: shapeTriangleUp}, 0.2},
	{dashes(14, 3, 4, 3), marker{shape: shapeDiamond, filled: true}, -0.45},
}

func dashes(ls ...float64) []vg.Length {
	out := make([]vg.Length, len(ls))
	for i, l := range ls {
		out[i] = vg.Points(l)
	}
	return out
}

// styler assigns styles for one call of Write. Styles come from the names
// alone where the names are known, and from their rank among the unknown
// names in all the rows otherwise, so a setup looks the same in every
// figure of one call.
type styler struct {
	spareProtocol map[string]int
	spareCoterie  map[string]int
}

func newStyler(rows []bench.Row) *styler {
	s := &styler{spareProtocol: map[string]int{}, spareCoterie: map[string]int{}}
	var protos, cots []string
	for _, r := range rows {
		if _, ok := protocolColor[r.Protocol]; !ok {
			if _, seen := s.spareProtocol[r.Protocol]; !seen {
				s.spareProtocol[r.Protocol] = 0
				protos = append(protos, r.Protocol)
			}
		}
		if _, ok := coterieLooks[r.Coterie]; !ok && r.Coterie != "" {
			if _, seen := s.spareCoterie[r.Coterie]; !seen {
				s.spareCoterie[r.Coterie] = 0
				cots = append(cots, r.Coterie)
			}
		}
	}
	sort.Strings(protos)
	sort.Strings(cots)
	for i, p := range protos {
		s.spareProtocol[p] = i
	}
	for i, c := range cots {
		s.spareCoterie[c] = i
	}
	return s
}

func (s *styler) style(protocol, coterie string) style {
	base, ok := protocolColor[protocol]
	if !ok {
		base = spareColors[s.spareProtocol[protocol]%len(spareColors)]
	}
	look, ok := coterieLooks[coterie]
	switch {
	case ok:
	case coterie == "":
		look, ok = protocolLooks[protocol]
		if !ok {
			look = coterieLook{marker: marker{shape: shapeCircle, filled: true}}
		}
	default:
		look = spareLooks[s.spareCoterie[coterie]%len(spareLooks)]
	}
	st := style{
		color:  shade(base, look.shade),
		width:  vg.Points(1.2),
		dashes: look.dashes,
		marker: look.marker,
		radius: vg.Points(3),
	}
	if protocol == bench.RotatingArbiter {
		// Thick and drawn first: it stays visible under any quorum line
		// that happens to coincide with it.
		st.width = vg.Points(3)
		st.radius = vg.Points(4)
	}
	return st
}

// shade moves c towards black (t < 0) or white (t > 0) by |t|.
func shade(c color.RGBA, t float64) color.RGBA {
	target := 0.0
	if t > 0 {
		target = 255
	}
	t = math.Abs(t)
	mix := func(v uint8) uint8 { return uint8(math.Round(float64(v)*(1-t) + target*t)) }
	return color.RGBA{R: mix(c.R), G: mix(c.G), B: mix(c.B), A: 255}
}

// setupRank orders setups for drawing and legends: by the known protocol
// and coterie orders, then by name.
func setupRank(protocol, coterie string) (int, int) {
	rank := func(order []string, name string) int {
		for i, o := range order {
			if o == name {
				return i
			}
		}
		return len(order)
	}
	c := rank(coterieOrder, coterie)
	if coterie == "" {
		// A protocol without a coterie lists before its coterie variants.
		c = -1
	}
	return rank(protocolOrder, protocol), c
}

type shape int

const (
	shapeCircle shape = iota
	shapeSquare
	shapeTriangleUp
	shapeTriangleDown
	shapeDiamond
	shapePlus
	shapeCross
)

// marker is a glyph with a visible outline: gonum's own outline glyphs are
// stroked at 0.5pt, which nearly vanishes in a PNG at 150 dpi.
type marker struct {
	shape  shape
	filled bool
}

// markerStroke is the width of outline markers and of plus and cross.
var markerStroke = vg.Points(1.1)

// DrawGlyph implements draw.GlyphDrawer.
func (m marker) DrawGlyph(c *draw.Canvas, sty draw.GlyphStyle, pt vg.Point) {
	r := sty.Radius
	var p vg.Path
	switch m.shape {
	case shapeCircle:
		p.Move(vg.Point{X: pt.X + r, Y: pt.Y})
		p.Arc(pt, r, 0, 2*math.Pi)
		p.Close()
	case shapeSquare:
		// The square's area matches the circle's, so neither looks bigger.
		h := r * 0.886
		p.Move(vg.Point{X: pt.X - h, Y: pt.Y - h})
		p.Line(vg.Point{X: pt.X + h, Y: pt.Y - h})
		p.Line(vg.Point{X: pt.X + h, Y: pt.Y + h})
		p.Line(vg.Point{X: pt.X - h, Y: pt.Y + h})
		p.Close()
	case shapeTriangleUp, shapeTriangleDown:
		h := r * 1.2
		s := vg.Length(1)
		if m.shape == shapeTriangleDown {
			s = -1
		}
		p.Move(vg.Point{X: pt.X, Y: pt.Y + s*h})
		p.Line(vg.Point{X: pt.X - h*0.866, Y: pt.Y - s*h*0.5})
		p.Line(vg.Point{X: pt.X + h*0.866, Y: pt.Y - s*h*0.5})
		p.Close()
	case shapeDiamond:
		h := r * 1.2
		p.Move(vg.Point{X: pt.X, Y: pt.Y + h})
		p.Line(vg.Point{X: pt.X + h, Y: pt.Y})
		p.Line(vg.Point{X: pt.X, Y: pt.Y - h})
		p.Line(vg.Point{X: pt.X - h, Y: pt.Y})
		p.Close()
	case shapePlus:
		h := r * 1.2
		p.Move(vg.Point{X: pt.X, Y: pt.Y + h})
		p.Line(vg.Point{X: pt.X, Y: pt.Y - h})
		p.Move(vg.Point{X: pt.X - h, Y: pt.Y})
		p.Line(vg.Point{X: pt.X + h, Y: pt.Y})
	case shapeCross:
		h := r
		p.Move(vg.Point{X: pt.X - h, Y: pt.Y - h})
		p.Line(vg.Point{X: pt.X + h, Y: pt.Y + h})
		p.Move(vg.Point{X: pt.X - h, Y: pt.Y + h})
		p.Line(vg.Point{X: pt.X + h, Y: pt.Y - h})
	}
	if m.filled && m.shape != shapePlus && m.shape != shapeCross {
		c.Fill(p)
		return
	}
	// SetLineStyle also clears the dashes left by the series' line, which
	// would otherwise break up the outline.
	c.SetLineStyle(draw.LineStyle{Color: sty.Color, Width: markerStroke})
	c.Stroke(p)
}

// ringed marks a sockets-layer point in a figure that also has simulation
// points: the setup's own marker, smaller, inside a ring. The setup stays
// recognisable and the layer is visible at a glance.
type ringed struct{ inner marker }

// DrawGlyph implements draw.GlyphDrawer.
func (g ringed) DrawGlyph(c *draw.Canvas, sty draw.GlyphStyle, pt vg.Point) {
	in := sty
	in.Radius = sty.Radius * 0.5
	g.inner.DrawGlyph(c, in, pt)
	var p vg.Path
	p.Move(vg.Point{X: pt.X + sty.Radius, Y: pt.Y})
	p.Arc(pt, sty.Radius, 0, 2*math.Pi)
	p.Close()
	c.SetLineStyle(draw.LineStyle{Color: sty.Color, Width: markerStroke})
	c.Stroke(p)
}
