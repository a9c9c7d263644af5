package planner

import (
	"fmt"
	"math"
	"time"

	"amspc/cost"
	"amspc/ir"
	"amspc/solver"
)

// Beyond the paper: factors per layer group (embedding, blocks, head),
// recompute and micro-batch size chosen together, as a MILP.
//
// Decisions: u_k = 1 picks setting k = (micro-batch b, recompute r); for
// each group g and candidate c of the paper's space, w_gck = 1 picks c for
// g under k. B is the largest group's communication buffers.
//
//	minimise   sum_k compute_k u_k + sum_gck exposed_g(c, k) w_gck
//	subject to sum_k u_k = 1
//	           sum_c w_gck = u_k                       for every g, k
//	           sum_ck buffers_g(c) w_gck <= B          for every g
//	           sum_gck state_g(c) w_gck + (1+f) (sum_k act_k u_k + B) <= memory
//
// The step objective is a sum over groups (cost/timeline.go), so this is
// exactly the cost model's optimum over per-group plans, not a relaxation.

// MILPResult is the outcome of the per-group search.
type MILPResult struct {
	Best      *cost.Estimate // nil when infeasible
	Objective float64        // the MILP's objective value (= Best.Step)
	Columns   int
	Rows      int
	Nodes     int
	Solver    string
	SolveTime time.Duration
}

// setting is one (micro-batch, recompute) choice.
type setting struct {
	mb, M int64
	rc    ir.Recompute
}

// settings lists the micro-batch sizes (powers of two up to 16, and the
// train section's) that split the global batch evenly, with and without
// full recompute.
func settings(m *cost.Model, job *ir.Job) []setting {
	t := job.Train
	sizes := []int64{1, 2, 4, 8, 16}
	if t.MicroBatch > 16 || t.MicroBatch&(t.MicroBatch-1) != 0 {
		sizes = append(sizes, t.MicroBatch)
	}
	var out []setting
	for _, mb := range sizes {
		M, err := t.MicroBatchesOf(mb, m.DP.Size())
		if err != nil {
			continue
		}
		for _, rc := range ir.Recomputes {
			out = append(out, setting{mb, M, rc})
		}
	}
	return out
}

// milpProblem builds the problem; col maps a column back to (g, c, k).
type milpColumn struct {
	g    cost.Group
	c, k int // k: setting; c: candidate, -1 for u_k and B
}

func buildMILP(m *cost.Model, space []cost.Factors, sets []setting) (*solver.Problem, []milpColumn) {
	p := &solver.Problem{}
	var cols []milpColumn
	add := func(obj, lo, hi float64, integer bool, c milpColumn) int {
		p.Obj = append(p.Obj, obj)
		p.Lower = append(p.Lower, lo)
		p.Upper = append(p.Upper, hi)
		p.Integer = append(p.Integer, integer)
		cols = append(cols, c)
		return len(p.Obj) - 1
	}
	frag := 1 + m.Config.Fragmentation
	limit := float64(m.Job.Cluster.GPU.MemoryBytes)
	// Memory is measured in units of the limit, so the row reads
	// "<= 1" whatever the scale of the model; the right-hand side is
	// shrunk by more than the solver's feasibility tolerance, so a plan
	// the MILP accepts is one the cost model accepts.
	const timeScale = 1.0
	memScale := 1 / limit
	one := solver.Row{Sense: solver.EQ, RHS: 1}
	memory := solver.Row{Sense: solver.LE, RHS: 1 - 1e-6 - m.Reserve()*memScale}
	uCol := make([]int, len(sets))
	for k, s := range sets {
		uCol[k] = add(m.ComputeTime(s.rc, s.mb, s.M)*timeScale, 0, 1, true, milpColumn{c: -1, k: k})
		one.Idx = append(one.Idx, uCol[k])
		one.Coef = append(one.Coef, 1)
		memory.Idx = append(memory.Idx, uCol[k])
		memory.Coef = append(memory.Coef, frag*m.Activations(s.rc, m.Scale(s.mb))*memScale)
	}
	bCol := add(0, 0, math.Inf(1), false, milpColumn{c: -1, k: -1})
	memory.Idx = append(memory.Idx, bCol)
	memory.Coef = append(memory.Coef, frag) // B is in units of the limit too
	p.Rows = append(p.Rows, one)
	for g := cost.Group(0); g < cost.NumGroups; g++ {
		if m.GroupParams[g] == 0 {
			continue
		}
		buf := solver.Row{Sense: solver.LE, Idx: []int{bCol}, Coef: []float64{-1}}
		for k, s := range sets {
			link := solver.Row{Sense: solver.EQ, Idx: []int{uCol[k]}, Coef: []float64{-1}}
			for c, f := range space {
				col := add(m.GroupExposed(g, f, s.rc, s.mb, s.M)*timeScale, 0, 1, true, milpColumn{g: g, c: c, k: k})
				link.Idx = append(link.Idx, col)
				link.Coef = append(link.Coef, 1)
				pb, gb, ob := m.GroupState(g, f)
				memory.Idx = append(memory.Idx, col)
				memory.Coef = append(memory.Coef, (pb+gb+ob)*memScale)
				if b := m.GroupBuffers(g, f); b > 0 {
					buf.Idx = append(buf.Idx, col)
					buf.Coef = append(buf.Coef, b*memScale)
				}
			}
			p.Rows = append(p.Rows, link)
		}
		p.Rows = append(p.Rows, buf)
	}
	p.Rows = append(p.Rows, memory)
	return p, cols
}

// SolveMILP searches per-group factors, recompute and micro-batch size.
func SolveMILP(m *cost.Model, job *ir.Job, space []cost.Factors) (*MILPResult, error) {
	return solveMILPWith(solver.Default(), m, job, space)
}

func solveMILPWith(sv solver.Solver, m *cost.Model, job *ir.Job, space []cost.Factors) (*MILPResult, error) {
	start := time.Now()
	sets := settings(m, job)
	res := &MILPResult{Solver: sv.Name()}
	if len(sets) == 0 {
		res.SolveTime = time.Since(start)
		return res, nil
	}
	p, cols := buildMILP(m, space, sets)
	res.Columns, res.Rows = len(p.Obj), len(p.Rows)
	sol, err := sv.Solve(p)
	if err != nil {
		return nil, fmt.Errorf("internal: MILP: %v", err)
	}
	res.Nodes = sol.Nodes
	res.SolveTime = time.Since(start)
	switch sol.Status {
	case solver.Infeasible:
		return res, nil
	case solver.Optimal, solver.Limit:
		if sol.X == nil {
			return res, nil
		}
	default:
		return nil, fmt.Errorf("internal: MILP is %v", sol.Status)
	}
	plan := cost.Plan{Name: "AMSP per-group"}
	k := -1
	for i, c := range cols {
		if c.c == -1 && c.k >= 0 && sol.X[i] > 0.5 {
			k = c.k
		}
	}
	if k < 0 {
		return nil, fmt.Errorf("internal: MILP chose no setting")
	}
	s := sets[k]
	plan.MicroBatch, plan.Recompute = s.mb, s.rc
	chosen := [cost.NumGroups]bool{}
	for i, c := range cols {
		if c.c >= 0 && c.k == k && sol.X[i] > 0.5 {
			plan.Groups[c.g] = space[c.c]
			chosen[c.g] = true
		}
	}
	// Groups without params take the blocks' factors (they cost nothing).
	for g := cost.Group(0); g < cost.NumGroups; g++ {
		if !chosen[g] {
			plan.Groups[g] = plan.Groups[cost.Blocks]
			if !chosen[cost.Blocks] {
				plan.Groups[g] = space[0]
			}
		}
	}
	if plan.IsUniform() {
		plan.Name = "AMSP " + plan.Groups[0].String()
	}
	if s.mb != job.Train.MicroBatch {
		plan.Name += fmt.Sprintf(" mb=%d", s.mb)
	}
	if s.rc != job.Train.Recompute {
		plan.Name += " recompute=" + s.rc.String()
	}
	res.Best = m.Evaluate(plan)
	res.Objective = sol.Obj
	if !res.Best.Feasible {
		return nil, fmt.Errorf("internal: the MILP chose %v, which the cost model rejects: %s", plan.Groups, res.Best.Why)
	}
	return res, nil
}

// Enumerate solves the same problem by brute force: every setting and
// every combination of per-group candidates. It is exponential in the
// number of groups and exists to cross-check the MILP on small spaces.
func Enumerate(m *cost.Model, job *ir.Job, space []cost.Factors) *cost.Estimate {
	var best *cost.Estimate
	for _, s := range settings(m, job) {
		var idx [cost.NumGroups]int
		for {
			plan := cost.Plan{Name: "AMSP per-group", MicroBatch: s.mb, Recompute: s.rc}
			for g := range idx {
				plan.Groups[g] = space[idx[g]]
			}
			e := m.Evaluate(plan)
			if e.Feasible && (best == nil || e.Step < best.Step) {
				best = e
			}
			g := 0
			for ; g < len(idx); g++ {
				idx[g]++
				if idx[g] < len(space) {
					break
				}
				idx[g] = 0
			}
			if g == len(idx) {
				break
			}
		}
	}
	return best
}
