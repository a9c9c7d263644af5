package scheduler

import (
	"fmt"

	"amspc/codegen"
	"amspc/cost"
	"amspc/ir"
	"amspc/passes"
)

// Predict schedules each plan for the job and replays it on the cost
// model: the simulated timeline the planner's step objective uses. The
// job's graph is left untouched (the passes run on a copy); plans that
// cannot be scheduled get a nil timeline and their error.
func Predict(job *ir.Job, m *cost.Model, plans []cost.Plan) ([]*Timeline, []error, error) {
	g, err := ir.Parse(job.Graph.Pos.File, ir.Print(job.Graph))
	if err != nil {
		return nil, nil, fmt.Errorf("copying the graph: %v", err)
	}
	copyJob := *job
	copyJob.Graph = g
	s, err := passes.Run(&copyJob, passes.Options{})
	if err != nil {
		return nil, nil, err
	}
	topo := codegen.Topology{GPUsPerNode: job.Cluster.GPUsPerNode, Nodes: job.Cluster.Nodes}
	out := make([]*Timeline, len(plans))
	errs := make([]error, len(plans))
	for i, p := range plans {
		if p.MicroBatch != job.Train.MicroBatch || p.Recompute != job.Train.Recompute {
			errs[i] = fmt.Errorf("the scheduler predicts plans at the train section's micro-batch and recompute only")
			continue
		}
		M, err := job.Train.MicroBatchesOf(p.MicroBatch, topo.Ranks())
		if err != nil {
			errs[i] = err
			continue
		}
		prog, err := Build(s, p, topo, int(M), Options{Topo: m.Topo, BucketBytes: int64(m.Config.BucketBytes)})
		if err != nil {
			errs[i] = err
			continue
		}
		out[i], errs[i] = Simulate(prog, m.Topo, m.FlopRate(), nil)
	}
	return out, errs, nil
}

// BuildWithin schedules a plan with the deepest prefetch (up to two
// stages of gathered parameters live) whose simulated peak memory fits in
// memoryBytes, and returns the program with its timeline. A plan that does
// not fit even one stage at a time is an error naming the numbers.
func BuildWithin(s *passes.State, plan cost.Plan, topo codegen.Topology, M int, m *cost.Model, memoryBytes int64, stages func(*codegen.Program) []string) (*codegen.Program, *Timeline, error) {
	var lastPeak float64
	for depth := 2; depth >= 1; depth-- {
		prog, err := Build(s, plan, topo, M, Options{Depth: depth, Topo: m.Topo, BucketBytes: int64(m.Config.BucketBytes)})
		if err != nil {
			return nil, nil, err
		}
		tl, err := Simulate(prog, m.Topo, m.FlopRate(), stages(prog))
		if err != nil {
			return nil, nil, err
		}
		if tl.PeakBytes <= float64(memoryBytes) {
			return prog, tl, nil
		}
		lastPeak = tl.PeakBytes
	}
	return nil, nil, fmt.Errorf("the schedule needs %s per rank at its peak, more than the %s of a GPU, even gathering one stage at a time",
		cost.GiB(lastPeak), cost.GiB(float64(memoryBytes)))
}
