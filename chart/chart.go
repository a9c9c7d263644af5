// Package chart writes one self-contained HTML page of charts: stacked
// bars, a timeline with one lane per stream, line charts, and a table,
// all as inline SVG and CSS with no network reference, generated in Go.
// A small inline script checks on load that every chart drew something
// and records the result on <body data-check=...> (and script errors on
// data-errors), so a headless browser can tell that the page rendered.
//
// In: a Page. Out: HTML. It knows nothing of plans; cmd/amspc fills it.
package chart

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// Page is the report: a title, a table, then charts in order.
type Page struct {
	Title, Subtitle string
	Table           [][]string // the first row is the header
	Left            []bool     // which table columns are text, aligned left (the first always is)
	Notes           []string   // paragraphs under the table
	Charts          []Chart
}

// A Chart is drawn as one <figure> with an SVG.
type Chart interface {
	svg(b *strings.Builder)
	title() string
}

// StackedBars is one horizontal bar per row, its parts stacked left to
// right in Legend's order, against an axis in Unit; Line, when positive,
// is a vertical reference line (a GPU's memory) labelled LineLabel.
type StackedBars struct {
	Title, Unit string
	Legend      []string
	Bars        []Bar
	Line        float64
	LineLabel   string
}

// Bar is one row: its label and its parts (in Legend order, in Unit).
type Bar struct {
	Label string
	Parts []float64
	Mark  bool // drawn in bold (the chosen plan)
}

// Timeline is one lane per stream of spans on a time axis in ms.
type Timeline struct {
	Title string
	Lanes []Lane
	End   float64 // seconds
}

// Lane is one stream.
type Lane struct {
	Name  string
	Spans []Span
}

// Span is one instruction: start and duration in seconds.
type Span struct {
	Start, Dur float64
	Name       string
}

// LineChart plots series against X; a NaN Y is a gap.
type LineChart struct {
	Title, XLabel, YLabel string
	LogX                  bool
	Series                []Series
}

// Series is one line.
type Series struct {
	Name string
	X, Y []float64
}

var palette = []string{"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"}

const (
	chartW   = 960
	marginL  = 210
	marginR  = 30
	barH     = 18
	barGap   = 8
	axisH    = 44
	laneH    = 34
	lineH    = 360
	plotLeft = 70
)

// Write writes the page.
func Write(w io.Writer, p *Page) error {
	var b strings.Builder
	b.WriteString("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n")
	fmt.Fprintf(&b, "<title>%s</title>\n", esc(p.Title))
	b.WriteString(`<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; max-width: 1200px; }
.scroll { overflow-x: auto; }
h1 { font-size: 22px; margin: 0 0 4px; } .sub { color: #555; margin-bottom: 16px; }
table { border-collapse: collapse; font: 11px/1.3 ui-monospace, monospace; margin: 8px 0 16px; }
th, td { border-bottom: 1px solid #ddd; padding: 3px 8px; text-align: right; white-space: nowrap; }
th.l, td.l { text-align: left; } tr.mark td { font-weight: bold; }
figure { margin: 24px 0; } figcaption { font-weight: 600; margin-bottom: 6px; }
svg text { font: 12px system-ui, sans-serif; fill: #222; } svg .axis { stroke: #888; } svg .grid { stroke: #eee; }
</style>
</head>
<body>
`)
	fmt.Fprintf(&b, "<h1>%s</h1>\n<div class=\"sub\">%s</div>\n", esc(p.Title), esc(p.Subtitle))
	if len(p.Table) > 0 {
		b.WriteString("<div class=\"scroll\"><table>\n<tr>")
		cell := func(tag string, i int, text string) {
			if i == 0 || i < len(p.Left) && p.Left[i] {
				fmt.Fprintf(&b, "<%s class=\"l\">%s</%s>", tag, esc(text), tag)
				return
			}
			fmt.Fprintf(&b, "<%s>%s</%s>", tag, esc(text), tag)
		}
		for i, h := range p.Table[0] {
			cell("th", i, h)
		}
		b.WriteString("</tr>\n")
		for _, r := range p.Table[1:] {
			cls := ""
			if len(r) > 0 && strings.HasPrefix(r[0], "=>") {
				cls = ` class="mark"`
			}
			fmt.Fprintf(&b, "<tr%s>", cls)
			for i, c := range r {
				cell("td", i, c)
			}
			b.WriteString("</tr>\n")
		}
		b.WriteString("</table></div>\n")
	}
	for _, n := range p.Notes {
		fmt.Fprintf(&b, "<p>%s</p>\n", esc(n))
	}
	for i, c := range p.Charts {
		fmt.Fprintf(&b, "<figure id=\"chart%d\"><figcaption>%s</figcaption>\n", i+1, esc(c.title()))
		c.svg(&b)
		b.WriteString("</figure>\n")
	}
	b.WriteString(checkScript)
	b.WriteString("</body>\n</html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// checkScript marks the body with how many charts drew shapes with a
// size, or which did not, and with any script error.
const checkScript = `<script>
window.addEventListener("error", function (e) { document.body.dataset.errors = (document.body.dataset.errors || "") + e.message + ";"; });
window.addEventListener("load", function () {
  var charts = document.querySelectorAll("svg.chart"), bad = [];
  charts.forEach(function (s, i) {
    var drawn = 0;
    s.querySelectorAll("rect.d, path.d, circle.d").forEach(function (e) { var r = e.getBBox(); if (r.width > 0 || r.height > 0) drawn++; });
    if (drawn === 0 || s.querySelectorAll("text.axis-label").length === 0) bad.push(i + 1);
  });
  document.body.dataset.check = bad.length ? "fail " + bad.join(",") : "ok " + charts.length;
});
</script>
`

func esc(s string) string { return html.EscapeString(s) }

func (c *StackedBars) title() string { return c.Title }
func (c *Timeline) title() string    { return c.Title }
func (c *LineChart) title() string   { return c.Title }

// tick labels a tick with as many decimals as the ticks' spacing needs.
func tick(ts []float64, v float64) string {
	step := 1.0
	if len(ts) > 1 {
		step = ts[1] - ts[0]
	}
	d := 0
	if step < 1 {
		d = int(math.Ceil(-math.Log10(step) - 1e-9))
	}
	return fmt.Sprintf("%.*f", d, v)
}

// ticks are about n round values covering [0, max].
func ticks(max float64, n int) []float64 {
	if !(max > 0) {
		return []float64{0}
	}
	raw := max / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	step := p
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			step = m * p
			break
		}
	}
	var t []float64
	for v := 0.0; v <= max*1.0001+step; v += step {
		t = append(t, v)
		if v >= max {
			break
		}
	}
	return t
}

func num(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "0"
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

// xnum is an x tick: whole numbers (cluster sizes) without decimals.
func xnum(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return fmt.Sprintf("%.0f", v)
	}
	return num(v)
}

func (c *StackedBars) svg(b *strings.Builder) {
	maxBars := 0.0
	for _, bar := range c.Bars {
		s := 0.0
		for _, p := range bar.Parts {
			s += p
		}
		maxBars = math.Max(maxBars, s)
	}
	maxV := maxBars
	// A GPU's memory far above every bar would squash them to slivers:
	// then the axis fits the bars and the legend says the line is off it.
	lineOn := c.Line > 0 && c.Line <= 4*maxBars
	if lineOn {
		maxV = math.Max(maxV, c.Line)
	}
	ts := ticks(maxV, 6)
	top := ts[len(ts)-1]
	plotW := float64(chartW - marginL - marginR)
	x := func(v float64) float64 { return marginL + v/top*plotW }
	// The legend, wrapped to the chart's width.
	type item struct {
		x, y  float64
		name  string
		color string // "" for the reference line
	}
	var items []item
	lx, ly := float64(marginL), 6.0
	place := func(name, color string) {
		w := 24 + 7*float64(len(name))
		if lx+w > chartW && lx > marginL {
			lx, ly = marginL, ly+20
		}
		items = append(items, item{lx, ly, name, color})
		lx += w
	}
	for i, name := range c.Legend {
		place(name, palette[i%len(palette)])
	}
	if c.Line > 0 {
		label := c.LineLabel
		if !lineOn {
			label += " (off the scale)"
		}
		place(label, "")
	}
	legendTop := ly + 22
	h := int(legendTop) + len(c.Bars)*(barH+barGap) + axisH
	fmt.Fprintf(b, `<svg class="chart" width="%d" height="%d" viewBox="0 0 %d %d" role="img">`+"\n", chartW, h, chartW, h)
	for _, it := range items {
		if it.color == "" {
			fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#c00" stroke-width="2" stroke-dasharray="6 4"/><text x="%.1f" y="%.1f">%s</text>`+"\n",
				it.x, it.y+6, it.x+18, it.y+6, it.x+22, it.y+10, esc(it.name))
			continue
		}
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="12" height="12" fill="%s"/><text x="%.1f" y="%.1f">%s</text>`+"\n", it.x, it.y, it.color, it.x+16, it.y+10, esc(it.name))
	}
	y0 := legendTop
	plotH := float64(len(c.Bars) * (barH + barGap))
	for _, t := range ts {
		fmt.Fprintf(b, `<line class="grid" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`+"\n", x(t), y0, x(t), y0+plotH)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x(t), y0+plotH+16, tick(ts, t))
	}
	for i, bar := range c.Bars {
		y := y0 + float64(i*(barH+barGap))
		weight := ""
		if bar.Mark {
			weight = ` font-weight="bold"`
		}
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end"%s>%s</text>`+"\n", marginL-8, y+barH-5, weight, esc(bar.Label))
		acc := 0.0
		for j, p := range bar.Parts {
			if p <= 0 {
				continue
			}
			fmt.Fprintf(b, `<rect class="d" x="%.2f" y="%.1f" width="%.2f" height="%d" fill="%s"><title>%s: %s: %s %s</title></rect>`+"\n",
				x(acc), y, x(acc+p)-x(acc), barH, palette[j%len(palette)], esc(bar.Label), esc(c.Legend[j]), num(p), esc(c.Unit))
			acc += p
		}
	}
	fmt.Fprintf(b, `<line class="axis" x1="%d" y1="%.1f" x2="%d" y2="%.1f"/>`+"\n", marginL, y0+plotH, chartW-marginR, y0+plotH)
	if lineOn {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#c00" stroke-width="2" stroke-dasharray="6 4"/>`+"\n", x(c.Line), y0-4, x(c.Line), y0+plotH)
	}
	fmt.Fprintf(b, `<text class="axis-label" x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", marginL+plotW/2, h-4, esc(c.Unit))
	b.WriteString("</svg>\n")
}

func (c *Timeline) svg(b *strings.Builder) {
	end := c.End * 1e3
	ts := ticks(end, 8)
	top := ts[len(ts)-1]
	plotW := float64(chartW - 120 - marginR)
	x := func(sec float64) float64 { return 120 + sec*1e3/top*plotW }
	h := len(c.Lanes)*laneH + axisH
	fmt.Fprintf(b, `<svg class="chart" width="%d" height="%d" viewBox="0 0 %d %d" role="img">`+"\n", chartW, h, chartW, h)
	plotH := float64(len(c.Lanes) * laneH)
	for _, t := range ts {
		fmt.Fprintf(b, `<line class="grid" x1="%.1f" y1="0" x2="%.1f" y2="%.1f"/>`+"\n", x(t/1e3), x(t/1e3), plotH)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x(t/1e3), plotH+16, tick(ts, t))
	}
	for i, l := range c.Lanes {
		y := float64(i * laneH)
		fmt.Fprintf(b, `<text x="112" y="%.1f" text-anchor="end">%s</text>`+"\n", y+laneH/2+4, esc(l.Name))
		color := palette[i%len(palette)]
		// Spans narrower than half a pixel are merged with their
		// neighbours, so a step of thousands of kernels stays a small file.
		var cur *Span
		var n int
		flush := func() {
			if cur == nil {
				return
			}
			label := cur.Name
			if n > 1 {
				label = fmt.Sprintf("%d instructions from %s", n, cur.Name)
			}
			fmt.Fprintf(b, `<rect class="d" x="%.2f" y="%.1f" width="%.2f" height="%d" fill="%s"><title>%s: %s ms at %s ms</title></rect>`+"\n",
				x(cur.Start), y+6, math.Max(x(cur.Start+cur.Dur)-x(cur.Start), 0.5), laneH-12, color, esc(label), num(cur.Dur*1e3), num(cur.Start*1e3))
			cur, n = nil, 0
		}
		for _, s := range l.Spans {
			if cur != nil && x(s.Start)-x(cur.Start+cur.Dur) < 0.5 && x(cur.Start+cur.Dur)-x(cur.Start) < 2 {
				cur.Dur = s.Start + s.Dur - cur.Start
				n++
				continue
			}
			flush()
			s := s
			cur, n = &s, 1
		}
		flush()
	}
	fmt.Fprintf(b, `<line class="axis" x1="120" y1="%.1f" x2="%d" y2="%.1f"/>`+"\n", plotH, chartW-marginR, plotH)
	fmt.Fprintf(b, `<text class="axis-label" x="%.1f" y="%d" text-anchor="middle">time in the step (ms)</text>`+"\n", 120+plotW/2, h-4)
	b.WriteString("</svg>\n")
}

func (c *LineChart) svg(b *strings.Builder) {
	minX, maxX, maxY := math.Inf(1), math.Inf(-1), 0.0
	for _, s := range c.Series {
		for i, xv := range s.X {
			minX, maxX = math.Min(minX, xv), math.Max(maxX, xv)
			if !math.IsNaN(s.Y[i]) {
				maxY = math.Max(maxY, s.Y[i])
			}
		}
	}
	if math.IsInf(minX, 0) {
		minX, maxX = 0, 1
	}
	tx := func(v float64) float64 {
		if c.LogX {
			return math.Log2(v)
		}
		return v
	}
	lo, hi := tx(minX), tx(maxX)
	if hi == lo {
		hi = lo + 1
	}
	ys := ticks(maxY, 5)
	topY := ys[len(ys)-1]
	plotW := float64(chartW - plotLeft - 200)
	plotH := float64(lineH - axisH - 10)
	x := func(v float64) float64 { return plotLeft + (tx(v)-lo)/(hi-lo)*plotW }
	y := func(v float64) float64 { return 10 + plotH - v/topY*plotH }
	fmt.Fprintf(b, `<svg class="chart" width="%d" height="%d" viewBox="0 0 %d %d" role="img">`+"\n", chartW, lineH, chartW, lineH)
	for _, t := range ys {
		fmt.Fprintf(b, `<line class="grid" x1="%d" y1="%.1f" x2="%.1f" y2="%.1f"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n",
			plotLeft, y(t), plotLeft+plotW, y(t), plotLeft-6, y(t)+4, tick(ys, t))
	}
	var xs []float64
	if len(c.Series) > 0 {
		xs = c.Series[0].X
	}
	for _, v := range xs {
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x(v), 10+plotH+16, xnum(v))
	}
	for i, s := range c.Series {
		color := palette[i%len(palette)]
		var d strings.Builder
		pen := "M"
		for j, xv := range s.X {
			if math.IsNaN(s.Y[j]) {
				pen = "M"
				continue
			}
			fmt.Fprintf(&d, "%s%.1f %.1f ", pen, x(xv), y(s.Y[j]))
			pen = "L"
			fmt.Fprintf(b, `<circle class="d" cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s at %s: %s</title></circle>`+"\n", x(xv), y(s.Y[j]), color, esc(s.Name), num(xv), num(s.Y[j]))
		}
		if d.Len() > 0 {
			fmt.Fprintf(b, `<path class="d" d="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.TrimSpace(d.String()), color)
		}
		ly := 20 + float64(i)*18
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="12" height="12" fill="%s"/><text x="%.1f" y="%.1f">%s</text>`+"\n", plotLeft+plotW+16, ly, color, plotLeft+plotW+32, ly+10, esc(s.Name))
	}
	fmt.Fprintf(b, `<line class="axis" x1="%d" y1="%.1f" x2="%.1f" y2="%.1f"/><line class="axis" x1="%d" y1="10" x2="%d" y2="%.1f"/>`+"\n", plotLeft, 10+plotH, plotLeft+plotW, 10+plotH, plotLeft, plotLeft, 10+plotH)
	fmt.Fprintf(b, `<text class="axis-label" x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", plotLeft+plotW/2, lineH-6, esc(c.XLabel))
	fmt.Fprintf(b, `<text class="axis-label" x="16" y="%.1f" text-anchor="middle" transform="rotate(-90 16 %.1f)">%s</text>`+"\n", 10+plotH/2, 10+plotH/2, esc(c.YLabel))
	b.WriteString("</svg>\n")
}
