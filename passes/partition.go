package passes

import "amspc/ir"

// partition splits the training step into stages (ir.PartitionGraph):
// the scheduler gathers, computes and reduces stage by stage, and the
// cost model costs the same stages of the forward graph.
func partition(s *State) error {
	p, err := ir.PartitionGraph(s.Graph, s.Origin)
	if err != nil {
		return err
	}
	s.Partition = p
	return nil
}
