package passes

import "amspc/ir"

// ShardGlobal runs the graph passes before tensor on job, then the
// tensor pass's sharding without cutting the shapes to a rank's: the
// graph in global shapes and its specs (for tests of ir.VerifySpecs).
func ShardGlobal(job *ir.Job) (*ir.Graph, map[*ir.Value]ir.Spec, error) {
	s := &State{Job: job, Graph: job.Graph, LossScale: 1, Origin: map[*ir.Value]*ir.Value{}, Recompute: job.Train.Recompute}
	for _, p := range Pipeline {
		if p.Name == "tensor" {
			break
		}
		if err := p.Run(s); err != nil {
			return nil, nil, err
		}
	}
	specs, err := shard(s, ir.ShardCtx{Degree: job.Shard.Tensor, Sequence: job.Shard.Sequence})
	return s.Graph, specs, err
}
