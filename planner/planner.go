package planner

import (
	"fmt"
	"sort"
	"time"

	"amspc/cost"
	"amspc/ir"
	"amspc/scheduler"
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

// Options steer a search.
type Options struct {
	Objective Objective
	Top       int  // how many best candidates to return (0: none)
	PerGroup  bool // also search per-group factors, recompute and micro-batch with the MILP
	Config    cost.Config
	// BaselineK is the group size of MiCS, HSDP and ZeRO++ (0: a node).
	BaselineK int
	// Simulate re-costs, with the step objective, the best candidates
	// (SimulateTop of them, by the analytic model), the baselines and the
	// shard section's plan on the scheduler's simulated timeline of their
	// real instruction streams, and ranks by that.
	Simulate    bool
	SimulateTop int
	// Predict compiles plans and simulates their programs
	// (compiler.Predict; the planner cannot import the compiler, which
	// imports it). Simulate needs it.
	Predict func(job *ir.Job, m *cost.Model, plans []cost.Plan) ([]*scheduler.Timeline, []error)
}

// Result is a search's outcome.
type Result struct {
	Objective  Objective
	Chosen     *cost.Estimate   // the best feasible plan; nil if none fits
	Fixed      *cost.Estimate   // the plan the shard section fixes, when it does
	Baselines  []*cost.Estimate // in Baselines order
	Top        []*cost.Estimate // best feasible candidates, best first
	Fastest    *cost.Estimate   // best candidate ignoring memory
	Smallest   *cost.Estimate   // candidate needing the least memory
	Candidates int              // plans costed
	MILP       *MILPResult      // when PerGroup
	SolveTime  time.Duration
	Model      *cost.Model
}

// Score is the objective's value of an estimate.
func (o Objective) Score(e *cost.Estimate) float64 {
	if o == Paper {
		return e.PaperComm
	}
	return e.Step
}

// better orders estimates: feasible first, then by score, then by the
// order they were generated (stable sort keeps it), so ties are decided
// deterministically.
func (o Objective) better(a, b *cost.Estimate) bool {
	if a.Feasible != b.Feasible {
		return a.Feasible
	}
	return o.Score(a) < o.Score(b)
}

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
	res := &Result{Objective: opts.Objective, Model: m}
	rc, mb := job.Train.Recompute, job.Train.MicroBatch
	space := Space(m.DP)
	var all []*cost.Estimate
	for i, f := range space {
		e := m.Evaluate(cost.Uniform(fmt.Sprintf("c%d", i), f, rc, mb))
		e.Plan.Name = "AMSP " + f.String()
		all = append(all, e)
	}
	res.Candidates = len(all)
	sort.SliceStable(all, func(i, j int) bool { return opts.Objective.better(all[i], all[j]) })
	fastest := all[0]
	for _, e := range all {
		if opts.Objective.Score(e) < opts.Objective.Score(fastest) && e.M > 0 {
			fastest = e
		}
	}
	res.Fastest = fastest
	res.Smallest = all[0]
	for _, e := range all {
		if e.M > 0 && (res.Smallest.M == 0 || e.Mem.Total < res.Smallest.Mem.Total) {
			res.Smallest = e
		}
	}
	if all[0].Feasible {
		res.Chosen = all[0]
	}
	for _, e := range all {
		if len(res.Top) >= opts.Top || !e.Feasible {
			break
		}
		res.Top = append(res.Top, e)
	}
	k := opts.BaselineK
	if k == 0 {
		k = m.DP.S0
	}
	for _, b := range Baselines(m.DP, k) {
		e := m.Evaluate(cost.Uniform(b.Name, b.Factors, rc, mb))
		res.Baselines = append(res.Baselines, e)
	}
	if opts.Simulate && opts.Objective == Step {
		top := opts.SimulateTop
		if top <= 0 {
			top = 8
		}
		var pool []*cost.Estimate
		for _, e := range all {
			if len(pool) >= top || !e.Feasible {
				break
			}
			pool = append(pool, e)
		}
		if err := simulate(job, m, opts.Predict, append(append([]*cost.Estimate{}, pool...), res.Baselines...)); err != nil {
			return nil, err
		}
		// Rank the simulated pool by its simulated steps; candidates
		// outside it keep their analytic estimates and are not compared.
		sort.SliceStable(pool, func(i, j int) bool { return opts.Objective.better(pool[i], pool[j]) })
		res.Top = nil
		for _, e := range pool {
			if len(res.Top) >= opts.Top || !e.Feasible {
				break
			}
			res.Top = append(res.Top, e)
		}
		if len(pool) > 0 && pool[0].Feasible {
			res.Chosen = pool[0]
		}
	}
	if opts.PerGroup && opts.Objective == Step {
		mr, err := SolveMILP(m, job, space)
		if err != nil {
			return nil, err
		}
		res.MILP = mr
		res.Candidates += mr.Columns
		if mr.Best != nil && opts.Simulate {
			if err := simulate(job, m, opts.Predict, []*cost.Estimate{mr.Best}); err != nil {
				return nil, err
			}
		}
		// Compare like with like: simulated with simulated, else the
		// analytic steps of both.
		better := func(a, b *cost.Estimate) bool {
			if a.Simulated == b.Simulated {
				return a.Step < b.Step*(1-1e-9)
			}
			return a.AnalyticStep < b.AnalyticStep*(1-1e-9)
		}
		if mr.Best != nil && mr.Best.Feasible && (res.Chosen == nil || better(mr.Best, res.Chosen)) {
			res.Chosen = mr.Best
		}
	}
	if sh := job.Shard; sh != nil && sh.Mode != ir.ShardAuto {
		f := cost.Factors{P: sh.P, G: sh.G, OS: sh.OS, Secondary: sh.Secondary}
		e := m.Evaluate(cost.Uniform("shard "+sh.Label(), f, rc, mb))
		res.Fixed = e
		if opts.Simulate && opts.Objective == Step {
			if err := simulate(job, m, opts.Predict, []*cost.Estimate{e}); err != nil {
				return nil, err
			}
		}
	}
	res.SolveTime = time.Since(start)
	return res, nil
}

// simulate replaces the estimates' step times with the scheduler's
// simulated timeline (compute, exposed communication, step).
func simulate(job *ir.Job, m *cost.Model, predict func(*ir.Job, *cost.Model, []cost.Plan) ([]*scheduler.Timeline, []error), es []*cost.Estimate) error {
	if predict == nil {
		return fmt.Errorf("planner: simulating plans needs Options.Predict")
	}
	plans := make([]cost.Plan, len(es))
	for i, e := range es {
		plans[i] = e.Plan
	}
	tls, errs := predict(job, m, plans)
	for i, e := range es {
		if errs[i] != nil || tls[i] == nil {
			continue // keeps the analytic estimate
		}
		m.SetTimes(e, tls[i].Step, tls[i].Compute, tls[i].Exposed)
		e.Simulated = true
	}
	return nil
}

// Explain says in a few lines why the chosen plan won: what binds, and
// what the runner-up loses.
func (r *Result) Explain() []string {
	var out []string
	if r.Chosen == nil {
		s := r.Smallest
		return []string{fmt.Sprintf("no plan fits: the one needing the least memory, %s, %s", s.Plan.Name, s.Why)}
	}
	c := r.Chosen
	limit := float64(r.Model.Job.Cluster.GPU.MemoryBytes)
	if r.Fastest != nil && !r.Fastest.Feasible {
		out = append(out, fmt.Sprintf("memory binds: the fastest plan, %s, %s; the chosen plan uses %s of %s",
			r.Fastest.Plan.Name, r.Fastest.Why, cost.GiB(c.Mem.Total), cost.GiB(limit)))
	} else {
		out = append(out, fmt.Sprintf("memory does not bind (%s of %s): communication decides", cost.GiB(c.Mem.Total), cost.GiB(limit)))
	}
	var ru *cost.Estimate
	for _, e := range r.Top {
		if e != c {
			ru = e
			break
		}
	}
	// Compare like with like: simulated steps, or both analytic.
	score := func(e *cost.Estimate) float64 { return r.Objective.Score(e) }
	if ru != nil && ru.Simulated != c.Simulated && r.Objective == Step {
		score = func(e *cost.Estimate) float64 { return e.AnalyticStep }
	}
	if ru != nil {
		d := score(ru) - score(c)
		out = append(out, fmt.Sprintf("runner-up %s is %s slower (%+.1f%%): %s exposed communication vs %s",
			ru.Plan.Name, seconds(d), 100*d/score(c), seconds(ru.Exposed), seconds(c.Exposed)))
	}
	if r.Fixed != nil {
		d := r.Objective.Score(r.Fixed) - r.Objective.Score(c)
		switch {
		case !r.Fixed.Feasible:
			out = append(out, fmt.Sprintf("the shard section's plan %s does not fit: %s", r.Fixed.Plan.Name, r.Fixed.Why))
		case d <= 0:
			out = append(out, fmt.Sprintf("the shard section's plan %s is optimal", r.Fixed.Plan.Name))
		default:
			out = append(out, fmt.Sprintf("the shard section's plan %s is %s (%.1f%%) slower than the optimum",
				r.Fixed.Plan.Name, seconds(d), 100*d/r.Objective.Score(c)))
		}
	}
	return out
}

// seconds formats a duration in seconds with a unit that fits.
func seconds(s float64) string {
	switch {
	case s >= 1 || s <= -1:
		return fmt.Sprintf("%.3g s", s)
	case s >= 1e-3 || s <= -1e-3:
		return fmt.Sprintf("%.3g ms", s*1e3)
	}
	return fmt.Sprintf("%.3g µs", s*1e6)
}
