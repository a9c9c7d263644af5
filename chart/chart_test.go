package chart

import (
	"math"
	"strings"
	"testing"
)

// TestEscaped: names from the user's files (plan and model names) are
// text in the page, never markup.
func TestEscaped(t *testing.T) {
	p := &Page{Title: "<script>alert(1)</script>", Table: [][]string{{"plan"}, {"a<b"}},
		Charts: []Chart{&StackedBars{Title: "t&t", Unit: "u", Legend: []string{"<x>"}, Bars: []Bar{{Label: `"q"`, Parts: []float64{1}}}}}}
	var b strings.Builder
	if err := Write(&b, p); err != nil {
		t.Fatal(err)
	}
	s := b.String()
	for _, raw := range []string{"<script>alert", "a<b", "<x>", `>"q"<`, "t&t"} {
		if strings.Contains(s, raw) {
			t.Errorf("page holds %q unescaped", raw)
		}
	}
	if strings.Count(s, "<script>") != 1 {
		t.Errorf("want exactly the page's own script")
	}
}

// TestTicks: round steps that cover the maximum, labelled with the
// decimals their spacing needs.
func TestTicks(t *testing.T) {
	for _, c := range []struct {
		max    float64
		n      int
		top    float64
		labels string
	}{
		{1.32, 6, 1.5, "0.0 0.5 1.0 1.5"},
		{111.9, 6, 120, "0 20 40 60 80 100 120"},
		{0.0038, 6, 0.004, "0.000 0.001 0.002 0.003 0.004"},
		{10.6, 6, 12, "0 2 4 6 8 10 12"},
		{0, 6, 0, "0"},
	} {
		ts := ticks(c.max, c.n)
		var ls []string
		for _, v := range ts {
			ls = append(ls, tick(ts, v))
		}
		if top := ts[len(ts)-1]; math.Abs(top-c.top) > 1e-12 || strings.Join(ls, " ") != c.labels {
			t.Errorf("ticks(%g): top %g labels %q, want %g %q", c.max, top, strings.Join(ls, " "), c.top, c.labels)
		}
	}
}

// TestLineOffScale: a reference line far above every bar is left off the
// axis and the legend says so; one within reach is drawn.
func TestLineOffScale(t *testing.T) {
	draw := func(line float64) string {
		var b strings.Builder
		(&StackedBars{Unit: "GiB", Legend: []string{"p"}, Bars: []Bar{{Label: "a", Parts: []float64{10}}}, Line: line, LineLabel: "GPU"}).svg(&b)
		return b.String()
	}
	// The legend's sample of the line is one red stroke, the line another.
	if s := draw(1000); !strings.Contains(s, "GPU (off the scale)") || strings.Count(s, `stroke="#c00"`) != 1 {
		t.Errorf("line at 100x the bars:\n%s", s)
	}
	if s := draw(30); strings.Contains(s, "off the scale") || !strings.Contains(s, ">GPU<") || strings.Count(s, `stroke="#c00"`) != 2 {
		t.Errorf("line at 3x the bars:\n%s", s)
	}
}
