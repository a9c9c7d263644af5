package planner

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"amspc/cost"
	"amspc/internal/par"
	"amspc/ir"
)

// Objective is what the search minimises.
type Objective uint8

const (
	// Step is the predicted step time with communication overlapped by
	// compute stage by stage (cost's analytic timeline).
	Step Objective = iota
	// Paper is the AMSP paper's T_comm = T_p + T_g + T_os0 + T_os1, no
	// overlap, exactly as the paper's planner ranks plans.
	Paper
)

func (o Objective) String() string {
	if o == Paper {
		return "paper"
	}
	return "step"
}

// ParseObjective maps "step" or "paper" to an Objective.
func ParseObjective(s string) (Objective, bool) {
	switch s {
	case "step":
		return Step, true
	case "paper":
		return Paper, true
	}
	return 0, false
}

// Evaluator compiles plans and simulates their programs (the compiler
// implements it; the planner cannot import the compiler, which imports
// it).
type Evaluator interface {
	// Bounds gives each plan a proven lower bound of its simulated step
	// time and of the memory it needs, or the error that refuses it.
	Bounds(plans []cost.Plan) []Bound
	// Predict compiles and simulates plans; a plan that does not compile
	// gets a nil prediction and its error.
	Predict(plans []cost.Plan) ([]*cost.Prediction, []error)
}

// Bound is a lower bound of a plan's simulated step time and of the
// memory it needs (Evaluator.Bounds).
type Bound struct {
	Step, Mem float64
	Err       error
}

// Options steer a search.
type Options struct {
	Objective Objective
	Top       int  // how many best candidates to return (0: none)
	PerGroup  bool // also search per-group factors, recompute and micro-batch with the MILP
	Config    cost.Config
	// BaselineK is the group size of MiCS, HSDP and ZeRO++ (0: a node).
	BaselineK int
	// NewEvaluator, when set, makes the step objective the simulation of
	// each plan's compiled program: every candidate whose bound does not
	// rule it out is simulated (branch and bound), and the baselines, the
	// shard section's plan and the MILP's choice are simulated and
	// compete. Without it the step objective is the analytic model's.
	NewEvaluator func(job *ir.Job, m *cost.Model) Evaluator
	// Gap is branch and bound's relative optimality gap: a candidate is
	// simulated only while its bound times 1+Gap is below the best
	// simulated step, so the chosen plan's step is at most 1+Gap times
	// the best in the space (0: the best). amspc passes DefaultGap.
	Gap float64
}

// DefaultGap is the optimality gap `amspc plan` and `compile` search
// with unless told otherwise (--gap): 1 %, a tenth of the model's error
// against measured steps on CPU ranks. At LLaMA-2-70B on 2048 GPUs a
// hundred tensor-parallel plans lie within 1 % of the best, their bounds
// as close below their simulations; exactness would compile them all
// (issue 31: 151 simulations, 8 s, against 14 and 2.4 s).
const DefaultGap = 0.01

// Result is a search's outcome.
type Result struct {
	Objective  Objective
	Chosen     *cost.Estimate   // the best feasible plan; nil if none fits
	Fixed      *cost.Estimate   // the plan the shard section fixes, when it does
	Baselines  []*cost.Estimate // in Baselines order
	Top        []*cost.Estimate // best feasible candidates, best first
	Fastest    *cost.Estimate   // best candidate ignoring memory
	Smallest   *cost.Estimate   // candidate needing the least memory
	Candidates int              // plans in the space (uniform candidates and the MILP's columns)
	// Simulated counts the plans compiled and simulated; Pruned the
	// candidates the bound ruled out (too slow or too big) unsimulated.
	Simulated, Pruned int
	Gap               float64     // the search's optimality gap (Options.Gap)
	MILP              *MILPResult // when PerGroup
	SolveTime         time.Duration
	Model             *cost.Model
}

// Score is the objective's value of an estimate.
func (o Objective) Score(e *cost.Estimate) float64 {
	if o == Paper {
		return e.PaperComm
	}
	return e.Step
}

// Candidates lists the uniform plans the planner searches on mesh dp:
// the paper's space (Space), each also with ZeRO++'s secondary copy of
// the params inside a node where s_p spans nodes, under every recompute
// choice (the train section's first), at micro-batch mb.
func Candidates(dp ir.Factor, rc ir.Recompute, mb int64) []cost.Plan {
	var fs []cost.Factors
	for _, f := range Space(dp) {
		fs = append(fs, f)
		if node := (ir.Factor{S0: dp.S0, S1: 1}); f.P.S1 > 1 && node.Size() > 1 {
			hp := f
			hp.Secondary = node
			fs = append(fs, hp)
		}
	}
	return uniform("AMSP ", fs, rc, mb)
}

// uniform is a plan of each factors in fs under each recompute choice,
// rc first, named prefix, the factors and the recompute where it is not
// rc.
func uniform(prefix string, fs []cost.Factors, rc ir.Recompute, mb int64) []cost.Plan {
	var out []cost.Plan
	for _, r := range recomputes(rc) {
		for _, f := range fs {
			name := prefix + f.String()
			if r != rc {
				name += " recompute=" + r.String()
			}
			out = append(out, cost.Uniform(name, f, r, mb))
		}
	}
	return out
}

// recomputes lists the recompute choices, rc first.
func recomputes(rc ir.Recompute) []ir.Recompute {
	out := []ir.Recompute{rc}
	for _, r := range ir.Recomputes {
		if r != rc {
			out = append(out, r)
		}
	}
	return out
}

// TensorDegrees lists the tensor-parallel degrees searched on mesh dp:
// 2, 4 and 8, those that divide a node's GPUs (Megatron keeps a
// tensor-parallel group inside a node).
func TensorDegrees(dp ir.Factor) []int {
	var out []int
	for t := 2; t <= 8 && t <= dp.S0; t *= 2 {
		if dp.S0%t == 0 {
			out = append(out, t)
		}
	}
	return out
}

// TensorCandidates lists the tensor-parallel plans the planner searches
// on mesh dp: for each degree T of TensorDegrees, with and without
// sequence parallelism, the paper's space on the data-parallel mesh of
// dp.S0/T GPUs per node x dp.S1 nodes, under every recompute choice.
// ZeRO++'s secondary copy is not combined with tensor parallelism.
func TensorCandidates(dp ir.Factor, rc ir.Recompute, mb int64) []cost.Plan {
	var out []cost.Plan
	for _, t := range TensorDegrees(dp) {
		for _, sp := range []bool{false, true} {
			prefix := fmt.Sprintf("TP%d ", t)
			if sp {
				prefix = fmt.Sprintf("TP%d+SP ", t)
			}
			for _, p := range uniform(prefix, Space(dp.DataMesh(t)), rc, mb) {
				p.Tensor, p.Sequence = t, sp
				out = append(out, p)
			}
		}
	}
	return out
}

// batch is how many candidates are simulated together: a constant, so
// that which candidates are simulated does not depend on the machine.
const batch = 4

// Plan searches the job's space.
func Plan(job *ir.Job, opts Options) (*Result, error) {
	start := time.Now()
	if opts.Config == (cost.Config{}) {
		opts.Config = cost.DefaultConfig
	}
	m, err := cost.NewModel(job, opts.Config)
	if err != nil {
		return nil, err
	}
	if !(opts.Gap >= 0 && opts.Gap < 1) {
		return nil, fmt.Errorf("optimality gap %g: it is at least 0 and below 1", opts.Gap)
	}
	res := &Result{Objective: opts.Objective, Model: m, Gap: opts.Gap}
	rc, mb := job.Train.Recompute, job.Train.MicroBatch
	var ev Evaluator
	if opts.NewEvaluator != nil && opts.Objective == Step {
		ev = opts.NewEvaluator(job, m)
	}
	k := opts.BaselineK
	if k == 0 {
		k = m.DP.S0
	}
	for _, b := range Baselines(m.DP, k) {
		res.Baselines = append(res.Baselines, m.Evaluate(cost.Uniform(b.Name, b.Factors, rc, mb)))
	}
	if ev != nil {
		// Tensor-parallel baselines: priced only by simulation.
		for _, p := range TensorBaselines(m.DP, rc, mb) {
			res.Baselines = append(res.Baselines, m.Evaluate(p))
		}
	}
	if sh := job.Shard; sh != nil && sh.Mode != ir.ShardAuto {
		f := cost.Factors{P: sh.P, G: sh.G, OS: sh.OS, Secondary: sh.Secondary}
		p := cost.Uniform("shard "+sh.Label(), f, rc, mb)
		p.Tensor, p.Sequence = sh.Tensor, sh.Sequence
		res.Fixed = m.Evaluate(p)
	}
	// The rows every user sees are simulated first: their best is the
	// incumbent the bound prunes against. The baselines' and the fixed
	// plan's simulations run alongside the candidates' estimates, their
	// bounds and the MILP: each depends on its plan alone.
	rows := append([]*cost.Estimate{}, res.Baselines...)
	if res.Fixed != nil {
		rows = append(rows, res.Fixed)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	if ev != nil {
		res.Simulated += len(rows)
		wg.Go(func() { simulate(ev, m, rows) })
	}
	plans := Candidates(m.DP, rc, mb)
	if ev != nil {
		// Tensor-parallel plans: ranked only by simulation.
		plans = append(plans, TensorCandidates(m.DP, rc, mb)...)
	}
	if opts.Objective == Paper {
		// The paper's objective searches the paper's space: T_comm does
		// not charge recompute's compute, so the train section's
		// recompute is kept, and ZeRO++'s secondary copy is not AMSP's.
		plans = slices.DeleteFunc(plans, func(p cost.Plan) bool {
			return p.Recompute != rc || p.Groups[0].Secondary.Size() > 1
		})
	}
	all := make([]*cost.Estimate, len(plans))
	par.For(len(plans), func(i int) { all[i] = m.Evaluate(plans[i]) })
	res.Candidates = len(all)
	var bounds []Bound
	if ev != nil {
		wg.Go(func() { bounds = ev.Bounds(splitting(all)) })
	}
	if opts.PerGroup && opts.Objective == Step {
		mr, err := SolveMILP(m, job, Space(m.DP))
		if err != nil {
			return nil, err
		}
		res.MILP = mr
		res.Candidates += mr.Columns
		if mr.Best != nil {
			if ev != nil {
				res.Simulated++
				simulate(ev, m, []*cost.Estimate{mr.Best})
			}
			rows = append(rows[:len(rows):len(rows)], mr.Best)
		}
	}
	if ev != nil {
		wg.Wait()
		res.branchAndBound(ev, all, rows, bounds)
	}
	sort.SliceStable(all, func(i, j int) bool { return res.Less(all[i], all[j]) })
	for _, e := range all {
		if len(res.Top) >= opts.Top || !e.Feasible || (ev != nil && !e.Simulated) {
			break
		}
		res.Top = append(res.Top, e)
	}
	// The choice: the best feasible plan of every plan costed the same
	// way, baselines included.
	pool := append(append([]*cost.Estimate{}, rows...), all...)
	for _, e := range pool {
		if ev != nil && !e.Simulated {
			continue
		}
		if e.Feasible && (res.Chosen == nil || res.Less(e, res.Chosen)) {
			res.Chosen = e
		}
		if res.Fastest == nil || res.Objective.Score(e) < res.Objective.Score(res.Fastest) {
			res.Fastest = e
		}
	}
	for _, e := range pool {
		if e.M > 0 && (res.Smallest == nil || e.Mem.Total < res.Smallest.Mem.Total) {
			res.Smallest = e
		}
	}
	res.SolveTime = time.Since(start)
	return res, nil
}

// Less orders plans as the plan table ranks them: feasible first, then
// simulated, then by the objective; ties go to the earlier.
func (r *Result) Less(a, b *cost.Estimate) bool {
	if a.Feasible != b.Feasible {
		return a.Feasible
	}
	if a.Simulated != b.Simulated {
		return a.Simulated
	}
	return r.Objective.Score(a) < r.Objective.Score(b)
}

// branchAndBound simulates the candidates in the order of their bounds,
// a batch at a time, until the next bound, times 1+Gap, is no better than the best
// simulated feasible step; a candidate whose memory bound exceeds the
// GPU is infeasible without simulation.
func (r *Result) branchAndBound(ev Evaluator, all, rows []*cost.Estimate, bounds []Bound) {
	type cand struct {
		e    *cost.Estimate
		step float64
	}
	var open []cand
	limit := r.Model.Limit()
	for _, e := range all {
		if e.M == 0 { // the batch does not split: Evaluate said why
			r.Pruned++
			continue
		}
		b := bounds[0]
		bounds = bounds[1:]
		if b.Err != nil { // the passes refuse the plan (a tensor-parallel degree that does not divide the heads)
			e.Feasible, e.Why = false, b.Err.Error()
			r.Pruned++
			continue
		}
		if b.Mem > limit {
			e.Feasible = false
			e.Why = fmt.Sprintf("needs at least %s > %s", cost.GiB(b.Mem), cost.GiB(limit))
			r.Pruned++
			continue
		}
		open = append(open, cand{e, b.Step})
	}
	sort.SliceStable(open, func(i, j int) bool { return open[i].step < open[j].step })
	best := math.Inf(1)
	for _, e := range rows {
		if e.Simulated && e.Feasible {
			best = math.Min(best, e.Step)
		}
	}
	for i := 0; i < len(open); {
		var next []*cost.Estimate
		for ; i < len(open) && len(next) < batch && open[i].step*(1+r.Gap) < best; i++ {
			next = append(next, open[i].e)
		}
		if len(next) == 0 {
			r.Pruned += len(open) - i
			break
		}
		r.Simulated += len(next)
		simulate(ev, r.Model, next)
		for _, e := range next {
			if e.Simulated && e.Feasible {
				best = math.Min(best, e.Step)
			}
		}
	}
}

// splitting lists the plans of the candidates whose batch splits (the
// ones branchAndBound bounds), in order.
func splitting(all []*cost.Estimate) []cost.Plan {
	var plans []cost.Plan
	for _, e := range all {
		if e.M != 0 {
			plans = append(plans, e.Plan)
		}
	}
	return plans
}

// simulate replaces estimates with the simulations of their compiled
// programs. A plan the compiler refuses keeps its analytic estimate,
// marked infeasible with the compiler's reason.
func simulate(ev Evaluator, m *cost.Model, es []*cost.Estimate) {
	plans := make([]cost.Plan, len(es))
	for i, e := range es {
		plans[i] = e.Plan
	}
	prs, errs := ev.Predict(plans)
	for i, e := range es {
		if errs[i] != nil || prs[i] == nil {
			e.Feasible = false
			if errs[i] != nil {
				e.Why = errs[i].Error()
			}
			continue
		}
		m.Apply(e, prs[i])
	}
}

// Explain says in a few lines why the chosen plan won: whether memory
// binds, how it compares with the best prior system and with the
// runner-up, and what the shard section's plan costs.
func (r *Result) Explain() []string {
	var out []string
	if r.Chosen == nil {
		s := r.Smallest
		if s == nil {
			return []string{"no plan fits, and none could be costed"}
		}
		return []string{fmt.Sprintf("no plan fits: the one needing the least memory, %s, %s", s.Plan.Name, s.Why)}
	}
	c := r.Chosen
	limit := r.Model.Limit()
	if f := r.Fastest; f != nil && !f.Feasible && r.Objective.Score(f) < r.Objective.Score(c) {
		out = append(out, fmt.Sprintf("memory binds: the fastest plan, %s, %s; the chosen plan needs %s of %s",
			f.Plan.Name, f.Why, cost.GiB(c.Mem.Total), cost.GiB(limit)))
	} else {
		out = append(out, fmt.Sprintf("memory does not bind (%s of %s): communication decides", cost.GiB(c.Mem.Total), cost.GiB(limit)))
	}
	what := "step"
	if r.Objective == Paper {
		what = "T_comm"
	}
	compare := func(role string, e *cost.Estimate) string {
		d := r.Objective.Score(e) - r.Objective.Score(c)
		s := fmt.Sprintf("%s %s: %s %s, %s (%+.1f%%) slower", role, e.Plan.Name, what, seconds(r.Objective.Score(e)), seconds(d), 100*d/r.Objective.Score(c))
		if r.Objective == Step && e.Exposed != c.Exposed {
			s += fmt.Sprintf(", with %s of communication not hidden by compute against %s", seconds(e.Exposed), seconds(c.Exposed))
		}
		return s
	}
	var base *cost.Estimate
	for _, e := range r.Baselines {
		if e.Feasible && e.Simulated == c.Simulated && (base == nil || r.Objective.Score(e) < r.Objective.Score(base)) {
			base = e
		}
	}
	switch {
	case base == nil:
		out = append(out, "no prior system (DDP, ZeRO, FSDP, MiCS, HSDP, ZeRO++) fits")
	case base == c:
		out = append(out, fmt.Sprintf("the best plan is the prior system %s", c.Plan.Name))
	case r.Objective.Score(base) <= r.Objective.Score(c):
		out = append(out, fmt.Sprintf("the best prior system, %s, ties with it", base.Plan.Name))
	default:
		out = append(out, compare("the best prior system", base))
	}
	var ru *cost.Estimate
	for _, e := range r.Top {
		if e != c && e.Plan.Groups != c.Plan.Groups {
			ru = e
			break
		}
	}
	if ru != nil {
		out = append(out, compare("runner-up", ru))
	}
	if f := r.Fixed; f != nil {
		d := r.Objective.Score(f) - r.Objective.Score(c)
		switch {
		case !f.Feasible:
			out = append(out, fmt.Sprintf("the shard section's plan %s does not fit: %s", f.Plan.Name, f.Why))
		case d <= 0:
			out = append(out, fmt.Sprintf("the shard section's plan %s is optimal", f.Plan.Name))
		default:
			out = append(out, fmt.Sprintf("the shard section's plan %s is %s (%.1f%%) slower than the choice",
				f.Plan.Name, seconds(d), 100*d/r.Objective.Score(c)))
		}
	}
	return out
}

// seconds formats a duration in seconds with a unit that fits.
func seconds(s float64) string {
	switch {
	case s >= 1 || s <= -1:
		return sig3(s) + " s"
	case s >= 1e-3 || s <= -1e-3:
		return sig3(s*1e3) + " ms"
	}
	return sig3(s*1e6) + " µs"
}

// sig3 prints x with three significant digits, trailing zeros kept (1.20,
// 24.8, 192), as the plan table does.
func sig3(x float64) string {
	switch a := math.Abs(x); {
	case a == 0:
		return "0"
	case a >= 99.95:
		return fmt.Sprintf("%.0f", x)
	case a >= 9.995:
		return fmt.Sprintf("%.1f", x)
	}
	return fmt.Sprintf("%.2f", x)
}
