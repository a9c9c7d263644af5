package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"amspc/compiler"
	"amspc/cost"
	"amspc/ir"
	"amspc/planner"
)

func runPlan(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("plan", "usage: amspc plan [--objective step|paper] [--json] [--top K] [--shard PLAN] [--cluster FILE] [--train FILE] FILE", stderr)
	var lf loadFlags
	lf.register(fs)
	objective := fs.String("objective", "step", "what to minimise: step (predicted step time, overlap-aware) or paper (AMSP's T_comm)")
	asJSON := fs.Bool("json", false, "print the result as one JSON object")
	top := fs.Int("top", 3, "also show the `K` best candidates")
	lf.registerShard(fs, "cost")
	perGroup := fs.Bool("per-group", true, "also search per-group factors, recompute and micro-batch size (MILP)")
	simulate := fs.Bool("simulate", true, "with --objective step, rank plans by simulating their compiled programs (every candidate a proven bound does not rule out); false: the analytic model only")
	bucket := fs.Int64("bucket", int64(cost.DefaultConfig.BucketBytes), "gradient bucket size in `bytes`")
	file, ok := oneFile(fs, args)
	if !ok {
		return exitUser
	}
	obj, ok := planner.ParseObjective(*objective)
	if !ok {
		fmt.Fprintf(stderr, "amspc plan: --objective must be step or paper, not %q\n", *objective)
		return exitUser
	}
	if *top < 0 || *bucket < 1 {
		fmt.Fprintln(stderr, "amspc plan: --top and --bucket must be positive")
		return exitUser
	}
	job, err := lf.load(file)
	if err != nil {
		return report(stderr, err)
	}
	switch {
	case job.Cluster == nil:
		fmt.Fprintf(stderr, "%s: planning needs a cluster section (or --cluster FILE)\n", file)
		return exitUser
	case job.Train == nil:
		fmt.Fprintf(stderr, "%s: planning needs a train section (or --train FILE)\n", file)
		return exitUser
	}
	cfg := cost.DefaultConfig
	cfg.BucketBytes = float64(*bucket)
	opts := planner.Options{Objective: obj, Top: *top, PerGroup: *perGroup, Config: cfg}
	if *simulate {
		opts.NewEvaluator = compiler.NewEvaluator
	}
	res, err := planner.Plan(job, opts)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", file, err)
		return exitUser
	}
	if *asJSON {
		b, _ := json.MarshalIndent(planJSON(res), "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		printPlan(stdout, file, job, res)
	}
	if res.Chosen == nil {
		fmt.Fprintf(stderr, "%s: %s\n", file, res.Explain()[0])
		return exitUser
	}
	return exitOK
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
	Groups       map[string]factorsJSON `json:"groups,omitempty"`
	Recompute    string                 `json:"recompute"`
	MicroBatch   int64                  `json:"micro_batch"`
	MicroBatches int64                  `json:"micro_batches"`
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
		TokensPerSec: e.TokensPerSPerGPU, MFU: e.MFU, Feasible: e.Feasible, Why: e.Why}
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
		Candidates: r.Candidates, SolveTime: r.SolveTime.Seconds(), Explanation: r.Explain()}
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

// printPlan prints the comparison table and the explanation.
func printPlan(w io.Writer, name string, job *ir.Job, r *planner.Result) {
	c := job.Cluster
	fmt.Fprintf(w, "%s: %s on %d x %d %s, %s tokens per step, objective %s\n",
		name, job.Graph.Name, c.Nodes, c.GPUsPerNode, c.GPU.Name, commas(job.Train.TokensPerStep()), r.Objective)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "plan\ts_p\ts_g\ts_os\tM\tmemory\tP\tG\tOS\tact\tbuf\tintra GB\tinter GB\tcomm\texposed\tcompute\tstep\ttok/s/GPU\tMFU\t")
	row := func(label string, e *cost.Estimate) {
		f := e.Plan.Groups[cost.Blocks]
		gib := shortBytes
		gb := func(b float64) string { return fmt.Sprintf("%.2f", b/1e9) }
		sp := f.P.String()
		if f.Secondary.Size() > 1 {
			sp += "+" + f.Secondary.String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%v\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f\t%.1f%%\t",
			label, sp, f.G, f.OS, e.M, gib(e.Mem.Total), gib(e.Mem.Params), gib(e.Mem.Grads), gib(e.Mem.Optim),
			gib(e.Mem.Activations), gib(e.Mem.Buffers), gb(e.CommIntra), gb(e.CommInter),
			dur(e.CommTime), dur(e.Exposed), dur(e.Compute), stepText(r, e), e.TokensPerSPerGPU, 100*e.MFU)
		if !e.Feasible {
			fmt.Fprintf(tw, "  %s", e.Why)
		}
		fmt.Fprintln(tw)
	}
	for _, e := range r.Baselines {
		row(e.Plan.Name, e)
	}
	for i, e := range r.Top {
		row(fmt.Sprintf("#%d %s", i+1, e.Plan.Name), e)
	}
	if r.MILP != nil && r.MILP.Best != nil && r.MILP.Best != r.Chosen {
		row(r.MILP.Best.Plan.Name, r.MILP.Best)
	}
	if r.Fixed != nil {
		row(r.Fixed.Plan.Name, r.Fixed)
	}
	if r.Chosen != nil {
		row("=> "+r.Chosen.Plan.Name, r.Chosen)
	}
	tw.Flush()
	if r.Objective == planner.Paper {
		fmt.Fprintln(w, "(step column: the paper's T_comm = T_p + T_g + T_os0 + T_os1)")
	} else {
		fmt.Fprintln(w, "(* step from the simulated timeline of the plan's compiled instruction streams; others from the analytic model)")
	}
	if ch := r.Chosen; ch != nil {
		fmt.Fprintf(w, "chosen: %s", ch.Plan.Name)
		if !ch.Plan.IsUniform() {
			var parts []string
			for g := cost.Group(0); g < cost.NumGroups; g++ {
				parts = append(parts, fmt.Sprintf("%s %v", g, ch.Plan.Groups[g]))
			}
			fmt.Fprintf(w, " (%s)", strings.Join(parts, ", "))
		}
		fmt.Fprintf(w, ", recompute %s, micro_batch %d\n", ch.Plan.Recompute, ch.Plan.MicroBatch)
	}
	for _, l := range r.Explain() {
		fmt.Fprintln(w, "  "+l)
	}
	fmt.Fprintf(w, "searched %d candidates in %s", r.Candidates, dur(r.SolveTime.Seconds()))
	if mr := r.MILP; mr != nil {
		fmt.Fprintf(w, " (MILP: %d columns, %d rows, %d nodes, %s)", mr.Columns, mr.Rows, mr.Nodes, mr.Solver)
	}
	fmt.Fprintln(w)
}

// shortBytes prints a byte count in a few characters: "23.3G", "4.1M".
func shortBytes(b float64) string {
	for _, u := range []struct {
		s string
		f float64
	}{{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if b >= 0.9995*u.f {
			return fmt.Sprintf("%.3g%s", b/u.f, u.s)
		}
	}
	return fmt.Sprintf("%.0f", b)
}

func objectiveValue(r *planner.Result, e *cost.Estimate) float64 { return r.Objective.Score(e) }

// stepText is the step column: the objective's value, starred when it
// comes from the simulated timeline.
func stepText(r *planner.Result, e *cost.Estimate) string {
	s := dur(objectiveValue(r, e))
	if e.Simulated && r.Objective == planner.Step {
		s += "*"
	}
	return s
}

// dur formats seconds: "1.23 s", "45.6 ms", "789 µs".
func dur(s float64) string {
	switch {
	case s >= 1:
		return fmt.Sprintf("%.3g s", s)
	case s >= 1e-3:
		return fmt.Sprintf("%.3g ms", s*1e3)
	case s == 0:
		return "0"
	}
	return fmt.Sprintf("%.3g µs", s*1e6)
}
