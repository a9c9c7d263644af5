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
		prog, err := Build(s, p, topo, int(M), Options{})
		if err != nil {
			errs[i] = err
			continue
		}
		out[i], errs[i] = Simulate(prog, m.Topo, m.FlopRate(), nil)
	}
	return out, errs, nil
}
