package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"amspc/compiler"
	"amspc/cost"
	"amspc/ir"
	"amspc/planner"
)

func runPlan(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("plan", "usage: amspc plan [--objective step|paper] [--json] [--wide] [--top K] [--gap PCT] [--shard PLAN] [--export deepspeed|fsdp|megatron|torchtitan] [--sweep nodes=N,...] [--sweep-batch per-gpu|fixed] [--cluster FILE] [--train FILE] FILE", stderr)
	var lf loadFlags
	lf.register(fs)
	objective := fs.String("objective", "step", "what to minimise: step (predicted step time, overlap-aware) or paper (AMSP's T_comm)")
	asJSON := fs.Bool("json", false, "print the result as one JSON object")
	wide := fs.Bool("wide", false, "also show memory's parts, all communication, compute and tokens/s per GPU (wider than 120 columns)")
	top := fs.Int("top", 3, "also show the `K` best candidates")
	gapFlag := fs.String("gap", "1%", "with --objective step, stop simulating candidates once none can beat the best by more than `PCT` (branch and bound's optimality gap: the chosen plan is within it of the best in the space; 0 searches exactly)")
	lf.registerShard(fs, "cost")
	perGroup := fs.Bool("per-group", true, "also search per-group factors, recompute and micro-batch size (MILP)")
	simulate := fs.Bool("simulate", true, "with --objective step, rank plans by simulating their compiled programs (every candidate a proven bound does not rule out); false: the analytic model only")
	sweepSpec := fs.String("sweep", "", "plan again at each cluster size `SIZES` (nodes=1,2,4 or gpus=8,16,32; the rest of the cluster as the file says) and print the chosen plan's and every baseline's MFU and memory per size")
	sweepBatch := fs.String("sweep-batch", sweepPerGPU, "with --sweep, the global batch at each size: per-gpu keeps the train section's sequences per GPU (the global batch grows with the cluster), fixed keeps its global batch (a size it does not split is reported, not planned)")
	bucket := fs.Int64("bucket", int64(cost.DefaultConfig.BucketBytes), "gradient bucket size in `bytes`")
	export := fs.String("export", "", "print the chosen plan (or --shard's) as `FRAMEWORK`'s configuration: deepspeed (its JSON config), fsdp (PyTorch FSDP2 code), megatron (pretrain_gpt.py's arguments) or torchtitan (its TOML); what it cannot express goes to stderr with the nearest plan it can")
	file, ok := oneFile(fs, args)
	if !ok {
		return exitUser
	}
	obj, ok := planner.ParseObjective(*objective)
	if !ok {
		fmt.Fprintf(stderr, "amspc plan: --objective must be step or paper, not %q\n", *objective)
		return exitUser
	}
	if err := checkPlanFlags(fs, *top, *bucket, *sweepBatch); err != nil {
		fmt.Fprintf(stderr, "amspc plan: %v\n", err)
		return exitUser
	}
	gap, err := parseGap(*gapFlag)
	if err != nil {
		fmt.Fprintf(stderr, "amspc plan: %v\n", err)
		return exitUser
	}
	if err := checkPlanOnlyFlags(fs, obj, *export); err != nil {
		fmt.Fprintf(stderr, "amspc plan: %v\n", err)
		return exitUser
	}
	job, cfg, st := loadForPlanning(&lf, file, *bucket, stderr)
	if job == nil {
		return st
	}
	opts := planner.Options{Objective: obj, Top: *top, PerGroup: *perGroup, Config: cfg, Gap: gap}
	if *simulate {
		opts.NewEvaluator = compiler.NewEvaluator
	}
	if *sweepSpec != "" {
		s, err := parseSweep(*sweepSpec, *sweepBatch, job.Cluster)
		if err != nil {
			fmt.Fprintf(stderr, "amspc plan: %v\n", err)
			return exitUser
		}
		return runSweep(stdout, stderr, file, job, s, opts, *asJSON)
	}
	res, err := planner.Plan(job, opts)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", file, err)
		return exitUser
	}
	nameBaselines(res)
	if *export != "" {
		return runExport(stdout, stderr, file, *export, job, res, cfg)
	}
	if *asJSON {
		b, _ := json.MarshalIndent(planJSON(res), "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		printPlan(stdout, file, job, res, *wide)
	}
	if res.Chosen == nil {
		fmt.Fprintf(stderr, "%s: %s\n", file, res.Explain()[0])
		return exitUser
	}
	return exitOK
}

// Bounds of plan's and report's counts: more rows than maxTop compare
// nothing, and a bucket beyond a TiB is a typo.
const (
	maxTop    = 1000
	maxBucket = 1 << 40
)

// setFlags are the flags a command line sets, by name.
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// checkPlanFlags refuses plan's and report's values with no meaning and
// the flags another flag would drop unsaid; the error names the flag and
// its value.
func checkPlanFlags(fs *flag.FlagSet, top int, bucket int64, sweepBatch string) error {
	set := setFlags(fs)
	switch {
	case top < 1 || top > maxTop:
		return fmt.Errorf("--top %d is out of range (1 to %d)", top, maxTop)
	case bucket < 1 || bucket > maxBucket:
		return fmt.Errorf("--bucket %d is out of range (1 byte to 1 TiB)", bucket)
	case sweepBatch != sweepPerGPU && sweepBatch != sweepFixed:
		return fmt.Errorf("--sweep-batch must be %s or %s, not %q", sweepPerGPU, sweepFixed, sweepBatch)
	case set["sweep-batch"] && !set["sweep"]:
		return fmt.Errorf("--sweep-batch %s needs --sweep", sweepBatch)
	}
	return nil
}

// parseGap reads --gap: a percentage (1%) or a fraction (0.01), at
// least 0 and below 100 %.
func parseGap(s string) (float64, error) {
	t, isPct := strings.CutSuffix(strings.TrimSpace(s), "%")
	g, err := strconv.ParseFloat(t, 64)
	if isPct {
		g /= 100
	}
	if err != nil || !(g >= 0 && g < 1) {
		return 0, fmt.Errorf("--gap %q: want a percentage from 0 to below 100 (1%%) or a fraction below 1 (0.01)", s)
	}
	return g, nil
}

// checkPlanOnlyFlags refuses plan's combinations where one flag would
// silently drop another.
func checkPlanOnlyFlags(fs *flag.FlagSet, obj planner.Objective, export string) error {
	set := setFlags(fs)
	if set["export"] {
		if !slices.ContainsFunc(exportTargets, func(t exportTarget) bool { return t.name == export }) {
			return fmt.Errorf("--export must be %s, not %q", exportNames(), export)
		}
		for _, other := range []string{"sweep", "json", "wide"} {
			if set[other] {
				return fmt.Errorf("--export %s prints one plan's configuration, not --%s's output: give one of them", export, other)
			}
		}
	}
	if set["sweep"] {
		for _, other := range []string{"wide", "top", "shard"} {
			if set[other] {
				return fmt.Errorf("--%s has no effect with --sweep, whose tables show the chosen plan and the baselines at each size", other)
			}
		}
	}
	if obj == planner.Paper {
		for _, other := range []string{"per-group", "simulate"} {
			if f := fs.Lookup(other); set[other] && f.Value.String() == "true" {
				return fmt.Errorf("--%s applies to --objective step only; --objective paper ranks uniform plans by the analytic T_comm", other)
			}
		}
	}
	return nil
}

// loadForPlanning loads plan's and report's job and requires the
// sections planning needs; on failure the job is nil and the status
// says how the command exits.
func loadForPlanning(lf *loadFlags, file string, bucket int64, stderr io.Writer) (*ir.Job, cost.Config, int) {
	cfg := cost.DefaultConfig
	job, err := lf.load(file)
	if err != nil {
		return nil, cfg, report(stderr, err)
	}
	switch {
	case job.Cluster == nil:
		fmt.Fprintf(stderr, "%s: planning needs a cluster section (or --cluster FILE)\n", file)
		return nil, cfg, exitUser
	case job.Train == nil:
		fmt.Fprintf(stderr, "%s: planning needs a train section (or --train FILE)\n", file)
		return nil, cfg, exitUser
	}
	cfg.BucketBytes = float64(bucket)
	return job, cfg, exitOK
}

// nameBaselines labels a candidate or per-group plan that gives every
// group a baseline's factors by that baseline's name ("DDP mb=1", not
// "AMSP 1x1/1x1/1x1 mb=1"): what runs is that system, micro-batch and
// recompute aside. MiCS and HSDP share factors; the first listed wins.
func nameBaselines(r *planner.Result) {
	rename := func(e *cost.Estimate) {
		if e == nil || !e.Plan.IsUniform() {
			return
		}
		f := e.Plan.Groups[cost.Blocks]
		rest, ok := strings.CutPrefix(e.Plan.Name, "AMSP "+f.String())
		if !ok || (rest != "" && !strings.HasPrefix(rest, " ")) {
			return
		}
		for _, b := range r.Baselines {
			if b.Plan.Groups[cost.Blocks] == f && b.Plan.Tensor == e.Plan.Tensor {
				e.Plan.Name = b.Plan.Name + rest
				return
			}
		}
	}
	for _, e := range r.Top {
		rename(e)
	}
	if r.MILP != nil {
		rename(r.MILP.Best)
	}
	rename(r.Chosen)
	rename(r.Fastest)
	rename(r.Smallest)
}

type factorsJSON struct {
	SP        [2]int  `json:"s_p"`
	SG        [2]int  `json:"s_g"`
	SOS       [2]int  `json:"s_os"`
	Secondary *[2]int `json:"secondary_p,omitempty"`
}

func toFactorsJSON(f cost.Factors) factorsJSON {
	out := factorsJSON{SP: [2]int{f.P.S0, f.P.S1}, SG: [2]int{f.G.S0, f.G.S1}, SOS: [2]int{f.OS.S0, f.OS.S1}}
	if f.Secondary.Size() > 1 {
		out.Secondary = &[2]int{f.Secondary.S0, f.Secondary.S1}
	}
	return out
}

type estimateJSON struct {
	Name string `json:"name"`
	factorsJSON
	Groups map[string]factorsJSON `json:"groups,omitempty"`
	// Tensor is the tensor-parallel degree (absent: none); Sequence its
	// sequence parallelism.
	Tensor       int    `json:"tensor,omitempty"`
	Sequence     bool   `json:"sequence,omitempty"`
	Recompute    string `json:"recompute"`
	MicroBatch   int64  `json:"micro_batch"`
	MicroBatches int64  `json:"micro_batches"`
	Memory       struct {
		Params      float64 `json:"params"`
		Grads       float64 `json:"grads"`
		Optim       float64 `json:"optim"`
		Activations float64 `json:"activations"`
		Buffers     float64 `json:"buffers"`
		Total       float64 `json:"total"`
	} `json:"memory_bytes"`
	Comm struct {
		Intra float64 `json:"intra"`
		Inter float64 `json:"inter"`
	} `json:"comm_bytes"`
	CommTime     float64 `json:"comm_time_s"`
	Exposed      float64 `json:"exposed_comm_s"`
	Compute      float64 `json:"compute_time_s"`
	Step         float64 `json:"step_time_s"`
	PaperComm    float64 `json:"paper_comm_s"`
	Simulated    bool    `json:"simulated"`
	AnalyticStep float64 `json:"analytic_step_time_s"`
	TokensPerSec float64 `json:"tokens_per_s_per_gpu"`
	MFU          float64 `json:"mfu"`
	Feasible     bool    `json:"feasible"`
	Why          string  `json:"why,omitempty"`
}

func toEstimateJSON(e *cost.Estimate) *estimateJSON {
	if e == nil {
		return nil
	}
	p := e.Plan
	out := &estimateJSON{Name: p.Name, factorsJSON: toFactorsJSON(p.Groups[cost.Blocks]),
		Recompute: p.Recompute.String(), MicroBatch: p.MicroBatch, MicroBatches: e.M,
		CommTime: e.CommTime, Exposed: e.Exposed, Compute: e.Compute, Step: e.Step, PaperComm: e.PaperComm,
		Simulated: e.Simulated, AnalyticStep: e.AnalyticStep,
		TokensPerSec: e.TokensPerSPerGPU, MFU: e.MFU, Feasible: e.Feasible, Why: e.Why, Tensor: p.Tensor, Sequence: p.Sequence}
	if !p.IsUniform() {
		out.Groups = map[string]factorsJSON{}
		for g := cost.Group(0); g < cost.NumGroups; g++ {
			out.Groups[g.String()] = toFactorsJSON(p.Groups[g])
		}
	}
	m := e.Mem
	out.Memory.Params, out.Memory.Grads, out.Memory.Optim = m.Params, m.Grads, m.Optim
	out.Memory.Activations, out.Memory.Buffers, out.Memory.Total = m.Activations, m.Buffers, m.Total
	out.Comm.Intra, out.Comm.Inter = e.CommIntra, e.CommInter
	return out
}

type planResultJSON struct {
	Objective   string          `json:"objective"`
	Chosen      *estimateJSON   `json:"chosen"`
	Fixed       *estimateJSON   `json:"fixed,omitempty"`
	Baselines   []*estimateJSON `json:"baselines"`
	Top         []*estimateJSON `json:"top"`
	Candidates  int             `json:"candidates"`
	Simulated   int             `json:"simulated"`
	Pruned      int             `json:"pruned"`
	Gap         float64         `json:"gap"`
	SolveTime   float64         `json:"solve_time_s"`
	Explanation []string        `json:"explanation"`
	MILP        *struct {
		Solver    string  `json:"solver"`
		Columns   int     `json:"columns"`
		Rows      int     `json:"rows"`
		Nodes     int     `json:"nodes"`
		SolveTime float64 `json:"solve_time_s"`
	} `json:"milp,omitempty"`
}

func planJSON(r *planner.Result) *planResultJSON {
	out := &planResultJSON{Objective: r.Objective.String(), Chosen: toEstimateJSON(r.Chosen), Fixed: toEstimateJSON(r.Fixed),
		Candidates: r.Candidates, Simulated: r.Simulated, Pruned: r.Pruned, Gap: r.Gap, SolveTime: r.SolveTime.Seconds(), Explanation: r.Explain()}
	out.Baselines = []*estimateJSON{}
	for _, e := range r.Baselines {
		out.Baselines = append(out.Baselines, toEstimateJSON(e))
	}
	out.Top = []*estimateJSON{}
	for _, e := range r.Top {
		out.Top = append(out.Top, toEstimateJSON(e))
	}
	if mr := r.MILP; mr != nil {
		out.MILP = &struct {
			Solver    string  `json:"solver"`
			Columns   int     `json:"columns"`
			Rows      int     `json:"rows"`
			Nodes     int     `json:"nodes"`
			SolveTime float64 `json:"solve_time_s"`
		}{mr.Solver, mr.Columns, mr.Rows, mr.Nodes, mr.SolveTime.Seconds()}
	}
	return out
}

// printPlan prints the comparison table, its legend and the explanation.
func printPlan(w io.Writer, name string, job *ir.Job, r *planner.Result, wide bool) {
	c := job.Cluster
	wrap(w, "", fmt.Sprintf("%s: %s on %d x %d %s, %s tokens per step, objective %s",
		name, job.Graph.Name, c.Nodes, c.GPUsPerNode, c.GPU.Name, commas(job.Train.TokensPerStep()), r.Objective))
	rows := planRows(r)
	planTable(r.Objective, rows, wide).write(w)
	for _, l := range planLegend(r.Objective, rows, wide) {
		wrap(w, "", l)
	}
	if ch := r.Chosen; ch != nil {
		s := "chosen: " + ch.Plan.Name
		if !ch.Plan.IsUniform() {
			var parts []string
			for g := cost.Group(0); g < cost.NumGroups; g++ {
				parts = append(parts, fmt.Sprintf("%s %v", g, ch.Plan.Groups[g]))
			}
			s += fmt.Sprintf(" (%s)", strings.Join(parts, ", "))
		}
		s = fmt.Sprintf("%s, recompute %s, micro_batch %d", s, ch.Plan.Recompute, ch.Plan.MicroBatch)
		if r.Objective == planner.Step {
			s += fmt.Sprintf(": step %s, %s per GPU, MFU %s", dur(ch.Step), cost.GiB(ch.Mem.Total), percent(ch.MFU))
		}
		wrap(w, "", s)
	}
	for _, l := range r.Explain() {
		wrap(w, "  ", l)
	}
	s := fmt.Sprintf("searched %d candidates in %s", r.Candidates, dur(r.SolveTime.Seconds()))
	if r.Simulated > 0 {
		s = fmt.Sprintf("searched %d candidates (%d simulated, %d ruled out by their bounds, gap %s) in %s", r.Candidates, r.Simulated, r.Pruned, strconv.FormatFloat(100*r.Gap, 'g', 4, 64)+"%", dur(r.SolveTime.Seconds()))
	}
	if mr := r.MILP; mr != nil {
		s += fmt.Sprintf(" (MILP: %d columns, %d rows, %d nodes, %s)", mr.Columns, mr.Rows, mr.Nodes, mr.Solver)
	}
	wrap(w, "", s)
}

// planRows are the plan table's rows: baselines, the best candidates
// (#1...), the MILP's per-group plan, a fixed plan, the chosen one (=>).
func planRows(r *planner.Result) []planRow {
	var rows []planRow
	for _, e := range r.Baselines {
		rows = append(rows, planRow{"", e})
	}
	for i, e := range r.Top {
		rows = append(rows, planRow{fmt.Sprintf("#%d", i+1), e})
	}
	if r.MILP != nil && r.MILP.Best != nil && r.MILP.Best != r.Chosen {
		rows = append(rows, planRow{"", r.MILP.Best})
	}
	if r.Fixed != nil {
		rows = append(rows, planRow{"", r.Fixed})
	}
	if r.Chosen != nil {
		rows = append(rows, planRow{"=>", r.Chosen})
	}
	return rows
}

// A planRow is one estimate in the table with its mark: "#1" for the
// best candidates, "=>" for the chosen plan.
type planRow struct {
	mark string
	e    *cost.Estimate
}

// A planCol is one column of the plan table: its header and how an
// estimate fills it. New estimate fields become new entries here.
type planCol struct {
	head string
	left bool
	cell func(e *cost.Estimate) string
}

// maxPlanName keeps the plan column narrow enough for the table to fit
// lineWidth; the factors and recompute columns still say what the plan
// is.
const maxPlanName = 16

// planColumns lists the table's columns. The memory and traffic units
// are chosen for the whole table from its largest value.
func planColumns(obj planner.Objective, rows []planRow, wide bool) []planCol {
	var mems, sent []float64
	for _, r := range rows {
		m := r.e.Mem
		mems = append(mems, m.Total, m.Params, m.Grads, m.Optim, m.Activations, m.Buffers)
		sent = append(sent, r.e.CommIntra, r.e.CommInter)
	}
	mu, tu := pickUnit(binaryUnits, mems...), pickUnit(decimalUnits, sent...)
	mem := func(f func(cost.Memory) float64) func(*cost.Estimate) string {
		return func(e *cost.Estimate) string { return mu.in(f(e.Mem), 1) }
	}
	cols := []planCol{
		{"plan", true, func(e *cost.Estimate) string { return truncate(e.Plan.Name, maxPlanName) }},
		{"s_p/s_g/s_os", true, func(e *cost.Estimate) string { return tensorText(e.Plan) + factorsText(e.Plan.Groups[cost.Blocks]) }},
		{"rc", true, func(e *cost.Estimate) string { return recomputeText[e.Plan.Recompute] }},
		{"M", false, func(e *cost.Estimate) string { return fmt.Sprint(e.M) }},
		{"mem " + mu.name, false, mem(func(m cost.Memory) float64 { return m.Total })},
	}
	if wide {
		cols = append(cols,
			planCol{"P", false, mem(func(m cost.Memory) float64 { return m.Params })},
			planCol{"G", false, mem(func(m cost.Memory) float64 { return m.Grads })},
			planCol{"OS", false, mem(func(m cost.Memory) float64 { return m.Optim })},
			planCol{"act", false, mem(func(m cost.Memory) float64 { return m.Activations })},
			planCol{"buf", false, mem(func(m cost.Memory) float64 { return m.Buffers })})
	}
	cols = append(cols,
		planCol{"intra " + tu.name, false, func(e *cost.Estimate) string { return tu.in(e.CommIntra, 2) }},
		planCol{"inter " + tu.name, false, func(e *cost.Estimate) string { return tu.in(e.CommInter, 2) }})
	if wide {
		cols = append(cols, planCol{"comm", false, func(e *cost.Estimate) string { return dur(e.CommTime) }})
	}
	cols = append(cols, planCol{"exposed", false, func(e *cost.Estimate) string { return dur(e.Exposed) }})
	if wide {
		cols = append(cols, planCol{"compute", false, func(e *cost.Estimate) string { return dur(e.Compute) }})
	}
	step := planCol{"step", false, func(e *cost.Estimate) string { return dur(e.Step) }}
	tcomm := planCol{"T_comm", false, func(e *cost.Estimate) string { return dur(e.PaperComm) }}
	switch {
	case obj == planner.Paper && wide:
		cols = append(cols, step, tcomm,
			planCol{"T_p", false, func(e *cost.Estimate) string { return dur(e.Tp) }},
			planCol{"T_g", false, func(e *cost.Estimate) string { return dur(e.Tg) }},
			planCol{"T_os0", false, func(e *cost.Estimate) string { return dur(e.Tos0) }},
			planCol{"T_os1", false, func(e *cost.Estimate) string { return dur(e.Tos1) }})
	case obj == planner.Paper:
		cols = append(cols, tcomm)
	default:
		cols = append(cols, step)
	}
	if wide {
		cols = append(cols, planCol{"tok/s/GPU", false, func(e *cost.Estimate) string { return fmt.Sprintf("%.0f", e.TokensPerSPerGPU) }})
	}
	return append(cols,
		planCol{"MFU", false, func(e *cost.Estimate) string { return percent(e.MFU) }},
		planCol{"sim", true, func(e *cost.Estimate) string { return yesNo(e.Simulated) }})
}

// tensorText is a plan's tensor parallelism as the factors column
// starts it: "tp4 ", "tp4+sp ", or nothing.
func tensorText(p cost.Plan) string {
	if p.Tensor <= 1 {
		return ""
	}
	if p.Sequence {
		return fmt.Sprintf("tp%d+sp ", p.Tensor)
	}
	return fmt.Sprintf("tp%d ", p.Tensor)
}

// recomputeText is the recompute column's word for each choice.
var recomputeText = map[ir.Recompute]string{ir.RecomputeNone: "none", ir.RecomputeSelective: "sel", ir.RecomputeFull: "full"}

// planTable lays the rows out; a plan that does not fit gets a note line
// saying why.
func planTable(obj planner.Objective, rows []planRow, wide bool) *table {
	cols := planColumns(obj, rows, wide)
	t := &table{cols: []tableCol{{"", true}}}
	for _, c := range cols {
		t.cols = append(t.cols, tableCol{c.head, c.left})
	}
	for _, r := range rows {
		cells := []string{r.mark}
		for i, c := range cols {
			s := c.cell(r.e)
			if r.e.M == 0 && i > 1 && c.head != "sim" {
				s = "-" // not costed: the batch does not split
			}
			cells = append(cells, s)
		}
		note := ""
		if !r.e.Feasible {
			note = "does not fit: " + r.e.Why
		}
		t.add(note, cells...)
	}
	return t
}

// planLegend says what the columns mean, one line each.
func planLegend(obj planner.Objective, rows []planRow, wide bool) []string {
	out := []string{"s_p/s_g/s_os: the factors, after tpT (+sp): tensor parallelism over T GPUs (sequence parallel). rc: recompute.",
		"mem: peak memory per GPU. intra, inter: bytes each GPU sends per step inside and across nodes."}
	if wide {
		out = append(out, "P, G, OS, act, buf: parameters, gradients, optimizer states, activations, buffers (part of mem).")
	}
	if obj == planner.Paper {
		return append(out,
			"exposed: communication that compute does not hide. T_comm: the AMSP paper's objective, T_p + T_g + T_os0 + T_os1.",
			"sim: no for every row: --objective paper ranks plans by the analytic T_comm and simulates none.")
	}
	out = append(out, "exposed: communication that compute does not hide. step: compute plus exposed communication.")
	sim := false
	for _, r := range rows {
		sim = sim || r.e.Simulated
	}
	if !sim {
		return append(out, "sim: no for every row: times come from the analytic model (--simulate=false).")
	}
	return append(out, "sim: yes = timed on the simulated timeline of the plan's compiled instruction streams; no = analytic.")
}

// factorsText is a plan's factors in one cell: "8x1/8x128/8x128", with
// ZeRO++'s secondary parameter shard as "8x128+8x1/...".
func factorsText(f cost.Factors) string {
	sp := f.P.String()
	if f.Secondary.Size() > 1 {
		sp += "+" + f.Secondary.String()
	}
	return fmt.Sprintf("%s/%v/%v", sp, f.G, f.OS)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
