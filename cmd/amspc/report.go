package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"

	"amspc/chart"
	"amspc/compiler"
	"amspc/cost"
	"amspc/internal/outfile"
	"amspc/ir"
	"amspc/planner"
	"amspc/simulator"
)

func runReport(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("report", "usage: amspc report [-o report.html] [--top K] [--shard PLAN] [--sweep nodes=N,...] [--sweep-batch per-gpu|fixed] [--cluster FILE] [--train FILE] FILE", stderr)
	var lf loadFlags
	lf.register(fs)
	lf.registerShard(fs, "also cost")
	out := fs.String("o", "report.html", "write the report to `FILE`")
	top := fs.Int("top", 3, "also show the `K` best candidates")
	sweepSpec := fs.String("sweep", "", "also plan at each cluster size `SIZES` (nodes=1,2,4 or gpus=8,16,32) and chart MFU against cluster size for the chosen plan and every baseline")
	sweepBatch := fs.String("sweep-batch", sweepPerGPU, "with --sweep, the global batch at each size: per-gpu or fixed (as plan --sweep-batch)")
	bucket := fs.Int64("bucket", int64(cost.DefaultConfig.BucketBytes), "gradient bucket size in `bytes`")
	file, ok := oneFile(fs, args)
	if !ok {
		return exitUser
	}
	if err := notAnInput("-o", *out, file, lf.cluster, lf.train, lf.profile); err != nil {
		fmt.Fprintf(stderr, "amspc report: %v\n", err)
		return exitUser
	}
	if err := checkPlanFlags(fs, *top, *bucket, *sweepBatch); err != nil {
		fmt.Fprintf(stderr, "amspc report: %v\n", err)
		return exitUser
	}
	job, cfg, st := loadForPlanning(&lf, file, *bucket, stderr)
	if job == nil {
		return st
	}
	opts := planner.Options{Objective: planner.Step, Top: *top, PerGroup: true, Gap: planner.DefaultGap, Config: cfg, NewEvaluator: compiler.NewEvaluator}
	var sw *sweep
	var err error
	if *sweepSpec != "" {
		if sw, err = parseSweep(*sweepSpec, *sweepBatch, job.Cluster); err != nil {
			fmt.Fprintf(stderr, "amspc report: %v\n", err)
			return exitUser
		}
	}
	res, err := planner.Plan(job, opts)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", file, err)
		return exitUser
	}
	nameBaselines(res)
	var points []sweepPoint
	if sw != nil {
		if points, err = planSweep(job, sw, opts); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", file, err)
			return exitUser
		}
	}
	page, err := reportPage(file, job, res, cfg, points)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", file, err)
		return exitUser
	}
	var b strings.Builder
	if err := chart.Write(&b, page); err != nil {
		fmt.Fprintf(stderr, "amspc report: %v\n", err)
		return exitUser
	}
	if err := outfile.WriteBytes(*out, stdout, []byte(b.String())); err != nil {
		fmt.Fprintf(stderr, "amspc report: -o: %v\n", err)
		return exitUser
	}
	fmt.Fprintf(besideOutput(*out, stdout, stderr), "wrote %s: %d charts, %s bytes\n", *out, len(page.Charts), commas(int64(b.Len())))
	if res.Chosen == nil {
		fmt.Fprintf(stderr, "%s: %s\n", file, res.Explain()[0])
		return exitUser
	}
	return exitOK
}

// reportPage lays out the report: the plan table, step time and memory
// per plan, the chosen plan's timeline, and MFU per cluster size when
// points (a sweep) are given.
func reportPage(file string, job *ir.Job, r *planner.Result, cfg cost.Config, points []sweepPoint) (*chart.Page, error) {
	c := job.Cluster
	p := &chart.Page{
		Title: fmt.Sprintf("amspc report: %s", job.Graph.Name),
		Subtitle: fmt.Sprintf("%s on %d x %d %s (%s per GPU), %s tokens per step, objective %s; every time is predicted (sim: simulated from the compiled program)",
			file, c.Nodes, c.GPUsPerNode, c.GPU.Name, cost.GiB(float64(c.GPU.MemoryBytes)), commas(job.Train.TokensPerStep()), r.Objective),
	}
	rows := planRows(r)
	t := planTable(r.Objective, rows, true)
	var head []string
	for _, col := range t.cols {
		head = append(head, col.head)
		p.Left = append(p.Left, col.left)
	}
	p.Table = append(p.Table, append(head, "note"))
	p.Left = append(p.Left, true)
	for _, row := range t.rows {
		p.Table = append(p.Table, append(slices.Clone(row.cells), row.note))
	}
	p.Notes = append(p.Notes, planLegend(r.Objective, rows, true)...)
	p.Notes = append(p.Notes, r.Explain()...)

	steps, err := stepBars(job, rows, cfg)
	if err != nil {
		return nil, err
	}
	p.Charts = append(p.Charts, steps, memoryBars(job, rows))
	if r.Chosen != nil {
		tl, err := chosenTimeline(job, r.Chosen, cfg)
		if err != nil {
			return nil, err
		}
		p.Charts = append(p.Charts, tl)
	}
	if len(points) > 0 {
		p.Charts = append(p.Charts, mfuLines(points))
	}
	return p, nil
}

// rowLabel names a row in a chart: its mark and plan name.
func rowLabel(r planRow) string {
	name := truncate(r.e.Plan.Name, maxPlanName)
	if r.mark != "" {
		return r.mark + " " + name
	}
	return name
}

// compileRow compiles a row's plan as the planner's evaluator did: the
// deepest prefetch that fits, or one stage at a time when none does.
func compileRow(job *ir.Job, e *cost.Estimate, cfg cost.Config) (*compiler.Result, error) {
	res, err := compiler.Compile(job, e.Plan, compiler.Options{Config: cfg})
	if err != nil && !e.Feasible {
		res, err = compiler.Compile(job, e.Plan, compiler.Options{Config: cfg, Depth: 1})
	}
	return res, err
}

// The step chart's parts after compute: exposed communication by
// collective, then waiting with none in flight, then the analytic
// model's exposed time for rows it costed (not split by kind).
var stepLegend = func() []string {
	out := []string{"compute"}
	for k := ir.Coll(0); k < ir.NumColls; k++ {
		out = append(out, "exposed "+k.String())
	}
	return append(out, "exposed, no collective in flight", "exposed (analytic, not by kind)")
}()

// stepBars is one bar per costed row: compute and exposed communication
// by kind. Simulated rows are split on their compiled program's
// timeline, whose step the planner printed.
func stepBars(job *ir.Job, rows []planRow, cfg cost.Config) (*chart.StackedBars, error) {
	maxStep := 0.0
	for _, r := range rows {
		maxStep = math.Max(maxStep, r.e.Step)
	}
	scale, unit := 1e3, "predicted step time (ms)"
	if maxStep >= 1 {
		scale, unit = 1, "predicted step time (s)"
	}
	sb := &chart.StackedBars{Title: "Step time per plan: compute and the communication it does not hide, by collective",
		Unit: unit, Legend: stepLegend}
	analytic := len(stepLegend) - 1
	for _, r := range rows {
		e := r.e
		if e.M == 0 {
			continue // not costed: the batch does not split
		}
		parts := make([]float64, len(stepLegend))
		parts[0] = e.Compute
		if e.Simulated {
			res, err := compileRow(job, e, cfg)
			if err != nil {
				return nil, fmt.Errorf("plan %s: %v", e.Plan.Name, err)
			}
			copy(parts[1:], exposedByKind(res.Program, res.Timeline))
		} else {
			parts[analytic] = e.Exposed
		}
		for i := range parts {
			parts[i] *= scale
		}
		sb.Bars = append(sb.Bars, chart.Bar{Label: rowLabel(r), Parts: parts, Mark: r.mark == "=>"})
	}
	dropEmpty(sb)
	return sb, nil
}

// dropEmpty removes the legend entries no bar has a part of.
func dropEmpty(sb *chart.StackedBars) {
	var keep []int
	for i := range sb.Legend {
		for _, b := range sb.Bars {
			if b.Parts[i] > 0 {
				keep = append(keep, i)
				break
			}
		}
	}
	legend := make([]string, len(keep))
	for j, i := range keep {
		legend[j] = sb.Legend[i]
	}
	sb.Legend = legend
	for bi := range sb.Bars {
		parts := make([]float64, len(keep))
		for j, i := range keep {
			parts[j] = sb.Bars[bi].Parts[i]
		}
		sb.Bars[bi].Parts = parts
	}
}

// exposedByKind splits the time the compute stream waits within the step
// (the step's exposed time) by what is in flight on the communication
// streams meanwhile: one entry per collective kind, then the wait with
// no collective in flight. Where several kinds are in flight at once the
// wait is split evenly between them.
func exposedByKind(prog *ir.Program, tl *simulator.Timeline) []float64 {
	out := make([]float64, int(ir.NumColls)+1)
	type interval struct {
		lo, hi float64
		kind   int
	}
	var busy, comm []interval
	for _, sp := range tl.Spans {
		if sp.Dur <= 0 {
			continue
		}
		iv := interval{sp.Start, sp.Start + sp.Dur, -1}
		ins := prog.Streams[sp.Stream]
		coll := sp.Index < len(ins) && ins[sp.Index].Op == ir.Collective
		if sp.Stream == ir.Compute && !coll {
			busy = append(busy, iv)
			continue
		}
		// (A collective on the compute stream, tensor parallelism's, is
		// exposed for all its length: nothing computes meanwhile.)
		if coll {
			in := &ins[sp.Index]
			iv.kind = int(in.Coll)
			comm = append(comm, iv)
		}
	}
	sort.Slice(busy, func(i, j int) bool { return busy[i].lo < busy[j].lo })
	// The compute stream's idle intervals within [0, Step].
	var idle []interval
	at := 0.0
	for _, b := range busy {
		if b.lo > at {
			idle = append(idle, interval{at, b.lo, -1})
		}
		at = math.Max(at, b.hi)
	}
	if tl.Step > at {
		idle = append(idle, interval{at, tl.Step, -1})
	}
	for _, w := range idle {
		// Cut the idle interval at every collective's start and end.
		cuts := []float64{w.lo, w.hi}
		for _, c := range comm {
			if c.lo > w.lo && c.lo < w.hi {
				cuts = append(cuts, c.lo)
			}
			if c.hi > w.lo && c.hi < w.hi {
				cuts = append(cuts, c.hi)
			}
		}
		sort.Float64s(cuts)
		for i := 1; i < len(cuts); i++ {
			lo, hi := cuts[i-1], cuts[i]
			if hi <= lo {
				continue
			}
			var kinds [ir.NumColls]bool
			n := 0
			for _, c := range comm {
				if c.lo <= lo && c.hi >= hi && !kinds[c.kind] {
					kinds[c.kind] = true
					n++
				}
			}
			if n == 0 {
				out[ir.NumColls] += hi - lo
				continue
			}
			for k, on := range kinds {
				if on {
					out[k] += (hi - lo) / float64(n)
				}
			}
		}
	}
	return out
}

// memoryBars is one bar per costed row: its peak memory per GPU by
// component against the GPU's memory.
func memoryBars(job *ir.Job, rows []planRow) *chart.StackedBars {
	var totals []float64
	for _, r := range rows {
		if r.e.M != 0 {
			totals = append(totals, r.e.Mem.Total)
		}
	}
	u := pickUnit(binaryUnits, totals...)
	gib := u.bytes
	gpu := job.Cluster.GPU
	sb := &chart.StackedBars{Title: "Peak memory per GPU by component, against the GPU's memory",
		Unit:   "memory per GPU (" + u.name + ")",
		Legend: []string{"parameters", "gradients", "optimizer states", "activations and transients at peak", "buffers and allocator allowance", "runtime reserve"},
		Line:   float64(gpu.MemoryBytes) / gib, LineLabel: fmt.Sprintf("GPU memory (%s): %s", gpu.Name, cost.GiB(float64(gpu.MemoryBytes)))}
	for _, r := range rows {
		if r.e.M == 0 {
			continue
		}
		m := r.e.Mem
		label := rowLabel(r)
		if !r.e.Feasible {
			label += " (OOM)"
		}
		sb.Bars = append(sb.Bars, chart.Bar{Label: label, Mark: r.mark == "=>",
			Parts: []float64{m.Params / gib, m.Grads / gib, m.Optim / gib, m.Activations / gib, m.Buffers / gib, m.Reserve / gib}})
	}
	dropEmpty(sb)
	return sb
}

// chosenTimeline is rank 0's simulated step of the chosen plan, one lane
// per stream.
func chosenTimeline(job *ir.Job, e *cost.Estimate, cfg cost.Config) (*chart.Timeline, error) {
	res, err := compileRow(job, e, cfg)
	if err != nil {
		return nil, fmt.Errorf("plan %s: %v", e.Plan.Name, err)
	}
	tl := res.Timeline
	out := &chart.Timeline{Title: fmt.Sprintf("The chosen plan's step on rank 0 (%s, simulated: %s, %d micro-batches), one lane per stream",
		e.Plan.Name, dur(tl.Step), res.Micro), End: tl.Step}
	for s := 0; s < ir.NumStreams; s++ {
		lane := chart.Lane{Name: ir.StreamName(s)}
		for _, sp := range tl.Spans {
			if sp.Stream == s && sp.Dur > 0 {
				lane.Spans = append(lane.Spans, chart.Span{Start: sp.Start, Dur: sp.Dur, Name: sp.Name})
			}
		}
		sort.SliceStable(lane.Spans, func(i, j int) bool { return lane.Spans[i].Start < lane.Spans[j].Start })
		out.Lanes = append(out.Lanes, lane)
	}
	return out, nil
}

// mfuLines is MFU against the number of GPUs for the chosen plan and
// every baseline; a plan that does not fit or was not planned is a gap.
func mfuLines(points []sweepPoint) *chart.LineChart {
	lc := &chart.LineChart{Title: "MFU against cluster size: the chosen plan at each size and every baseline (gaps: does not fit or not planned)",
		XLabel: "GPUs (log scale)", YLabel: "MFU (%)", LogX: true}
	mfu := func(e *cost.Estimate) float64 {
		if e == nil || e.M == 0 || !e.Feasible {
			return math.NaN()
		}
		return 100 * e.MFU
	}
	series := func(name string, pick func(sweepPoint) *cost.Estimate) chart.Series {
		s := chart.Series{Name: name}
		for _, p := range points {
			s.X = append(s.X, float64(p.job.Cluster.GPUs()))
			s.Y = append(s.Y, mfu(pick(p)))
		}
		return s
	}
	lc.Series = append(lc.Series, series("amspc chosen", sweepPoint.chosen))
	for _, n := range baselineNames(points) {
		lc.Series = append(lc.Series, series(n, func(p sweepPoint) *cost.Estimate { return p.baseline(n) }))
	}
	return lc
}
