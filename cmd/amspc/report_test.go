package main

import (
	"bytes"
	"context"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"amspc/compiler"
	"amspc/cost"
	"amspc/ir"
	"amspc/planner"
	"amspc/simulator"
)

// TestReportFile: amspc report writes one self-contained page (no
// network reference of any kind), with the plan table, a chart per part
// and axis labels, the same bytes every time.
func TestReportFile(t *testing.T) {
	dir := t.TempDir()
	var pages [2]string
	for i := range pages {
		out := filepath.Join(dir, "r"+string(rune('0'+i))+".html")
		var stdout, stderr bytes.Buffer
		args := []string{"report", "-o", out, "--sweep", "nodes=1,2,4", "../../testdata/models/tiny.amsp"}
		if st := run(args, &stdout, &stderr); st != exitOK {
			t.Fatalf("%v: status %d: %s", args, st, stderr.String())
		}
		if !strings.HasPrefix(stdout.String(), "wrote "+out+": 4 charts, ") {
			t.Errorf("stdout %q", stdout.String())
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		pages[i] = string(b)
	}
	page := pages[0]
	if pages[1] != page {
		t.Error("two runs wrote different reports")
	}
	for _, bad := range []string{"http:", "https:", "//cdn", "src=", "<link", "@import", "url("} {
		if strings.Contains(page, bad) {
			t.Errorf("the report refers outside itself: %q", bad)
		}
	}
	if n := strings.Count(page, `<svg class="chart"`); n != 4 {
		t.Errorf("%d charts, want 4 (step time, memory, timeline, MFU per size)", n)
	}
	if n := strings.Count(page, `class="axis-label"`); n < 5 {
		t.Errorf("%d axis labels, want every chart's (5: the line chart has two)", n)
	}
	for _, want := range []string{"<table>", "=&gt; ", "ZeRO-3/FSDP", "predicted step time (ms)", "memory per GPU (MiB)",
		"time in the step (ms)", "GPUs (log scale)", "MFU (%)", "comm.gather", "exposed all_gather", "GPU memory (cpu): 8.0 GiB (off the scale)"} {
		if !strings.Contains(page, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// A report that fails part way leaves no file behind.
	bad := filepath.Join(dir, "bad.html")
	var stdout, stderr bytes.Buffer
	if st := run([]string{"report", "-o", bad, "--sweep", "nodes=0", "../../testdata/models/tiny.amsp"}, &stdout, &stderr); st != exitUser {
		t.Errorf("--sweep nodes=0: status %d", st)
	}
	if _, err := os.Stat(bad); !os.IsNotExist(err) {
		t.Errorf("a failed report left %s", bad)
	}
}

// TestReportStepBars: every simulated plan's bar adds up to the step the
// table prints: compute plus exposed communication split by kind.
func TestReportStepBars(t *testing.T) {
	job, err := (&loadFlags{}).load("../../testdata/models/tiny.amsp")
	if err != nil {
		t.Fatal(err)
	}
	opts := planner.Options{Objective: planner.Step, Top: 3, PerGroup: true, Config: cost.DefaultConfig, NewEvaluator: compiler.NewEvaluator}
	res, err := planner.Plan(job, opts)
	if err != nil {
		t.Fatal(err)
	}
	rows := planRows(res)
	sb, err := stepBars(job, rows, cost.DefaultConfig)
	if err != nil {
		t.Fatal(err)
	}
	if len(sb.Bars) != len(rows) {
		t.Fatalf("%d bars for %d rows", len(sb.Bars), len(rows))
	}
	kinds := 0
	for _, l := range sb.Legend {
		if strings.HasPrefix(l, "exposed ") && !strings.Contains(l, "analytic") && !strings.Contains(l, "no collective") {
			kinds++
		}
	}
	if kinds < 2 {
		t.Errorf("legend %q: want exposed time of at least two collective kinds on tiny", sb.Legend)
	}
	for i, b := range sb.Bars {
		e := rows[i].e
		if !e.Simulated {
			t.Errorf("%s: not simulated", e.Plan.Name)
		}
		sum := 0.0
		for _, p := range b.Parts {
			sum += p
		}
		if want := e.Step * 1e3; math.Abs(sum-want) > 1e-9*want {
			t.Errorf("%s: bar adds to %.9g ms, step is %.9g ms", e.Plan.Name, sum, want)
		}
		if b.Parts[0] != e.Compute*1e3 {
			t.Errorf("%s: compute part %g ms, estimate %g ms", e.Plan.Name, b.Parts[0], e.Compute*1e3)
		}
	}
}

// TestExposedByKind: the compute stream's waits are given to the kinds in
// flight, split evenly where two are, and to "none" where none is.
func TestExposedByKind(t *testing.T) {
	prog := &ir.Program{}
	prog.Streams[ir.Compute] = []ir.Instr{{Op: ir.Kernel}, {Op: ir.Kernel}, {Op: ir.Record}, {Op: ir.Collective, Coll: ir.AllReduce}}
	prog.Streams[ir.CommGather] = []ir.Instr{{Op: ir.Collective, Coll: ir.AllGather}}
	prog.Streams[ir.CommReduce] = []ir.Instr{{Op: ir.Kernel}, {Op: ir.Collective, Coll: ir.ReduceScatter}}
	tl := &simulator.Timeline{Step: 6, Spans: []simulator.Span{
		{Stream: ir.Compute, Index: 0, Start: 0, Dur: 1},
		{Stream: ir.Compute, Index: 1, Start: 3, Dur: 1},
		{Stream: ir.CommGather, Index: 0, Start: 0.5, Dur: 2},                // all-gather 0.5 to 2.5
		{Stream: ir.CommReduce, Index: 0, Start: 1, Dur: 0.5},                // a kernel: not communication
		{Stream: ir.CommReduce, Index: 1, Start: 2, Dur: 1.5},                // reduce-scatter 2 to 3.5
		{Stream: ir.Compute, Index: 2, Start: 4.5, Dur: 0, Name: "a record"}, // no time
		{Stream: ir.Compute, Index: 3, Start: 5, Dur: 0.75},                  // tensor parallelism's all-reduce on the compute stream
	}}
	got := exposedByKind(prog, tl)
	want := make([]float64, ir.NumColls+1)
	want[ir.AllGather] = 1 + 0.25 // 1 to 2 alone, 2 to 2.5 shared
	want[ir.ReduceScatter] = 0.25 + 0.5
	want[ir.AllReduce] = 0.75    // 5 to 5.75: nothing computes
	want[ir.NumColls] = 1 + 0.25 // 4 to 5 and 5.75 to 6
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-12 {
			t.Errorf("entry %d: %g, want %g (all: %v)", i, got[i], want[i], got)
		}
	}
}

// chromium finds a headless Chromium; without one the browser test skips,
// unless AMSPC_REQUIRE_CHROMIUM is set (CI sets it after installing
// Debian's chromium).
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("AMSPC_REQUIRE_CHROMIUM") != "" {
		t.Fatal("AMSPC_REQUIRE_CHROMIUM is set but no chromium is on PATH (apt-get install chromium)")
	}
	t.Skip("no headless Chromium on PATH (apt-get install chromium); the report is not checked in a browser")
	return ""
}

// headless runs Chromium headless on args with a time limit.
func headless(t *testing.T, bin string, args ...string) []byte {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	home := t.TempDir() // Chromium's profile, crash reports and caches
	all := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage",
		"--hide-scrollbars", "--user-data-dir=" + filepath.Join(home, "profile")}, args...)
	cmd := exec.CommandContext(ctx, bin, all...)
	cmd.Env = append(os.Environ(), "HOME="+home)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %v: %v\n%s", bin, args, err, stderr.String())
	}
	return stdout.Bytes()
}

// TestReportInChromium opens the llama-7b report, with a sweep, in
// headless Chromium: the page's own check must find every chart drawn
// (shapes with a size and axis labels) and no script error. A screenshot
// goes into the test's artifact directory (go test -artifacts keeps it).
func TestReportInChromium(t *testing.T) {
	bin := chromium(t)
	dir := t.ArtifactDir()
	out := filepath.Join(dir, "llama-7b-report.html")
	var stdout, stderr bytes.Buffer
	args := []string{"report", "-o", out, "--sweep", "nodes=1,2,4,16,64,128", "../../testdata/models/llama-7b.amsp"}
	if st := run(args, &stdout, &stderr); st != exitOK {
		t.Fatalf("%v: status %d: %s", args, st, stderr.String())
	}
	url := "file://" + out
	dom := headless(t, bin, "--virtual-time-budget=5000", "--dump-dom", url)
	body := regexp.MustCompile(`<body[^>]*>`).Find(dom)
	if body == nil {
		t.Fatalf("no <body> in Chromium's DOM:\n%.2000s", dom)
	}
	if !bytes.Contains(body, []byte(`data-check="ok 4"`)) {
		t.Errorf("the page's check in Chromium: %s (want data-check=\"ok 4\")", body)
	}
	if bytes.Contains(body, []byte("data-errors")) {
		t.Errorf("script errors in Chromium: %s", body)
	}
	if n := bytes.Count(dom, []byte(`<rect class="d"`)); n < 100 {
		t.Errorf("Chromium's DOM holds %d drawn bars, want the step, memory and timeline charts' (at least 100)", n)
	}

	shot := filepath.Join(dir, "llama-7b-report.png")
	headless(t, bin, "--window-size=1250,2400", "--screenshot="+shot, url)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	// A page that drew its charts is far from blank: count pixels that
	// are neither white nor near it.
	bounds := img.Bounds()
	inked := 0
	colors := map[uint32]bool{}
	for y := bounds.Min.Y; y < bounds.Max.Y; y += 2 {
		for x := bounds.Min.X; x < bounds.Max.X; x += 2 {
			r, g, b, _ := img.At(x, y).RGBA()
			if r < 0xe000 || g < 0xe000 || b < 0xe000 {
				inked++
			}
			colors[r>>12<<8|g>>12<<4|b>>12] = true
		}
	}
	total := (bounds.Dx() / 2) * (bounds.Dy() / 2)
	if bounds.Dx() != 1250 || bounds.Dy() != 2400 {
		t.Errorf("screenshot is %dx%d, want 1250x2400", bounds.Dx(), bounds.Dy())
	}
	if float64(inked) < 0.05*float64(total) || len(colors) < 8 {
		t.Errorf("screenshot looks blank: %d of %d sampled pixels inked, %d colours", inked, total, len(colors))
	}
	st, _ := os.Stat(out)
	t.Logf("report %s (%d bytes), screenshot %s: %d%% of pixels inked, %d colours", out, st.Size(), shot, 100*inked/total, len(colors))
}
