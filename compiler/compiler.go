// Package compiler is amspc's one entry point from a checked job to a plan
// bundle: the CLI, the planner's simulated objective, the runtime's tests
// and the benchmarks all compile through Compile, so what is costed,
// tested and run is one program.
//
// In: an ir.Job from the frontend and a cost.Plan (the shard section's,
// --shard's or the planner's; Choose picks). Out: a Result holding the
// training graph after the passes, the rank template, the bundle and its
// simulated timeline. The compiler runs one pipeline (passes.Pipeline):
// the graph and distribution passes, the schedule, its simulation on the
// cost model's machine, fitting the prefetch depth to the GPU's memory
// and collective matching; here it only prepares the job, the cost model
// and the plan's Distribution, and labels the bundle.
//
// The job given is never modified: the passes run on a copy, and a plan
// whose micro-batch size differs from the train section's is compiled
// from the sources lowered again at that size (Job.Rebatch), so the
// bundle always computes the full global batch.
package compiler

import (
	"fmt"
	"slices"
	"strings"

	"amspc/codegen"
	"amspc/cost"
	"amspc/ir"
	"amspc/passes"
	"amspc/planner"
	"amspc/simulator"
)

// Options steer a compilation.
type Options struct {
	// Passes are the pipeline's debug options (-d=check, -dump-after).
	Passes passes.Options
	// Config is the cost model's configuration (bucket size, ...); the
	// zero Config means cost.DefaultConfig.
	Config cost.Config
	// Depth fixes how many stages' gathered params may be live at once;
	// 0 takes the deepest (up to 2) whose simulated peak fits the GPU.
	Depth int
}

// Result is a compiled plan.
type Result struct {
	Job      *ir.Job // the job compiled: a copy, at the plan's micro-batch
	Plan     cost.Plan
	Model    *cost.Model
	State    *passes.State
	Program  *ir.Program
	Bundle   *codegen.Bundle
	Timeline *simulator.Timeline // rank 0's simulated step
	Micro    int                 // micro-batches per step
	// Fits says the program's simulated peak, with the allocator's
	// allowance and the GPU's reserve, fits the GPU's memory.
	Fits bool
}

// Compile compiles job under plan. Without a fixed depth it fails when
// the program does not fit the GPU even gathering one stage at a time.
func Compile(job *ir.Job, plan cost.Plan, opts Options) (*Result, error) {
	r, err := compile(job, plan, opts)
	if err != nil {
		return nil, err
	}
	if !r.Fits && opts.Depth <= 0 {
		tl := r.Timeline
		return nil, fmt.Errorf("the schedule needs %s per rank at its peak (%s of tensors, the allocator's allowance and a %s reserve), more than the %s of a GPU, even gathering one stage at a time",
			cost.GiB(r.Model.Needed(tl.PeakBytes, tl.PersistentBytes)), cost.GiB(tl.PeakBytes),
			cost.GiB(r.Model.Reserve()), cost.GiB(r.Model.Limit()))
	}
	t := r.Job.Train
	b := r.State.Bundle
	b.Plan, b.Machine = Label(plan), machineOf(r.Job.Cluster)
	b.Train = codegen.Train{SeqLen: t.SeqLen, MicroBatch: t.MicroBatch, GlobalBatch: t.GlobalBatch, Steps: t.Steps, Seed: t.Seed, Schedule: t.Schedule}
	r.Bundle = b
	return r, nil
}

// compile runs the pipeline for plan. Without a fixed depth the fit
// pass takes the deepest prefetch (up to two stages of gathered params
// live) whose simulated peak fits the GPU, or depth 1 with Fits false.
func compile(job *ir.Job, plan cost.Plan, opts Options) (*Result, error) {
	if job.Cluster == nil || job.Train == nil {
		return nil, fmt.Errorf("compiling needs a cluster and a train section (or --cluster / --train FILE)")
	}
	if opts.Config == (cost.Config{}) {
		opts.Config = cost.DefaultConfig
	}
	// The cost model costs the graph the passes run: fused unless the
	// fuse pass is off.
	opts.Config.Unfused = opts.Config.Unfused || slices.Contains(opts.Passes.Off, "fuse")
	job, err := forPlan(job, plan)
	if err != nil {
		return nil, err
	}
	m, err := cost.NewModel(job, opts.Config)
	if err != nil {
		return nil, err
	}
	po := opts.Passes
	po.Recompute = plan.Recompute
	s, err := passes.Run(job, po)
	if err != nil {
		return nil, err
	}
	return distribute(job, m, s, plan, opts)
}

// distribute is compile's second half: the distribution passes for plan
// on a state the graph passes made for the plan's job (forPlan's) and
// recompute, which it leaves as it was, so that plans of one setting
// share it (the planner's Evaluator).
func distribute(job *ir.Job, m *cost.Model, gs *passes.State, plan cost.Plan, opts Options) (*Result, error) {
	c := job.Cluster
	topo := ir.Topology{GPUsPerNode: c.GPUsPerNode, Nodes: c.Nodes}
	M, err := job.Train.MicroBatches(job.DataParallel())
	if err != nil {
		return nil, err
	}
	depth := opts.Depth
	if depth <= 0 {
		depth = 2
	}
	fits := func(tl *simulator.Timeline) bool { return m.Needed(tl.PeakBytes, tl.PersistentBytes) <= m.Limit() }
	po := opts.Passes
	po.Recompute = plan.Recompute
	po.Machine = m.Machine
	po.Fits = nil
	if opts.Depth <= 0 {
		po.Fits = fits
	}
	d := &passes.Distribution{Groups: plan.Groups, Topo: topo, Micro: int(M), Depth: depth,
		BucketBytes: int64(m.Config.BucketBytes),
		Hierarchical: func(c ir.Coll, bytes float64, mesh ir.Factor) bool {
			return m.Topo.HierarchicalFaster(c, bytes, mesh)
		}}
	s := gs.Fork()
	if err := s.Distribute(d, po); err != nil {
		return nil, err
	}
	return &Result{Job: job, Plan: plan, Model: m, State: s, Program: s.Prog, Timeline: s.Timeline, Micro: int(M), Fits: fits(s.Timeline)}, nil
}

// forPlan returns a copy of job that the passes may extend, lowered again
// at the plan's micro-batch size when it differs from the train
// section's.
func forPlan(job *ir.Job, plan cost.Plan) (*ir.Job, error) {
	j, err := forMicroBatch(job, plan)
	if err != nil {
		return nil, err
	}
	// The plan says whether the step has tensor parallelism, whatever
	// the shard section said (the planner compiles its search's plans
	// under a tensor-parallel section too).
	if sh := j.Shard; max(plan.Tensor, 1) != max(tensorOf(sh), 1) || plan.Sequence != (sh != nil && sh.Sequence) {
		s := ir.ShardSpec{Mode: ir.ShardAuto}
		if sh != nil {
			s = *sh
		}
		s.Tensor, s.Sequence = plan.Tensor, plan.Sequence
		j.Shard = &s
	}
	return j, nil
}

func tensorOf(sh *ir.ShardSpec) int {
	if sh == nil {
		return 0
	}
	return sh.Tensor
}

// forMicroBatch is a copy of job at the plan's micro-batch size.
func forMicroBatch(job *ir.Job, plan cost.Plan) (*ir.Job, error) {
	mb := plan.MicroBatch
	if mb == 0 {
		mb = job.Train.MicroBatch
	}
	if mb != job.Train.MicroBatch {
		if job.Rebatch == nil {
			return nil, fmt.Errorf("plan %s uses micro-batch %d, the train section %d, and the job has no sources to lower again", plan.Name, mb, job.Train.MicroBatch)
		}
		j, err := job.Rebatch(mb)
		if err != nil {
			return nil, fmt.Errorf("lowering again at micro-batch %d: %v", mb, err)
		}
		// The sections a caller may have replaced after loading, which
		// lowering the sources again would not see (validate's
		// calibration names a profile on a copy of the cluster).
		j.Shard, j.Cluster = job.Shard, job.Cluster
		return j, nil
	}
	cp := *job
	cp.Graph = job.Graph.Clone()
	tr := *job.Train
	cp.Train = &tr
	return &cp, nil
}

// Choose returns the shard section's plan, or the planner's choice (with
// its simulated estimate, as `amspc plan` prints it, searched within
// planner.DefaultGap) when the section says auto.
func Choose(job *ir.Job, cfg cost.Config) (cost.Plan, *cost.Estimate, error) {
	if cfg == (cost.Config{}) {
		cfg = cost.DefaultConfig
	}
	sh := job.Shard
	t := job.Train
	if sh != nil && sh.Mode != ir.ShardAuto {
		f := cost.Factors{P: sh.P, G: sh.G, OS: sh.OS, Secondary: sh.Secondary}
		p := cost.Uniform(sh.Label(), f, t.Recompute, t.MicroBatch)
		p.Tensor, p.Sequence = sh.Tensor, sh.Sequence
		m, err := cost.NewModel(job, cfg)
		if err != nil {
			return p, nil, err
		}
		return p, m.Evaluate(p), nil
	}
	res, err := planner.Plan(job, planner.Options{Objective: planner.Step, PerGroup: true, Config: cfg, NewEvaluator: NewEvaluator, Gap: planner.DefaultGap})
	if err != nil {
		return cost.Plan{}, nil, err
	}
	if res.Chosen == nil {
		return cost.Plan{}, nil, fmt.Errorf("%s", res.Explain()[0])
	}
	return res.Chosen.Plan, res.Chosen, nil
}

// Label names a plan's factors: one triple, or one per layer group.
func Label(p cost.Plan) string {
	if p.Tensor > 1 {
		tp := fmt.Sprintf("tp%d", p.Tensor)
		if p.Sequence {
			tp += "+sp"
		}
		q := p
		q.Tensor, q.Sequence = 0, false
		return tp + " " + Label(q)
	}
	if p.IsUniform() {
		return p.Groups[0].String()
	}
	var parts []string
	for g := cost.Group(0); g < cost.NumGroups; g++ {
		parts = append(parts, g.String()+" "+p.Groups[g].String())
	}
	return strings.Join(parts, ", ")
}

// machineOf records the network the cost model sees (achieved bandwidths,
// latencies) and the GPU, so a bundle can be simulated on its own.
func machineOf(c *ir.Cluster) codegen.Machine {
	t := cost.NewTopology(c)
	return codegen.Machine{PeakFLOPS: c.GPU.PeakFLOPS, Efficiency: c.GPU.Efficiency,
		IntraBW: t.IntraBW, InterBW: t.InterBW, IntraLatency: t.IntraLatency, InterLatency: t.InterLat,
		MemoryBytes: c.GPU.MemoryBytes, MemBW: c.GPU.MemBW, MatMulHalf: c.GPU.MatMulHalf, SharedCores: c.GPU.SharedCores}
}

// StageNames lists a program's stages in order (for timelines):
// passes.StageNames, which the simulate pass uses.
func StageNames(p *ir.Program) []string { return passes.StageNames(p) }
