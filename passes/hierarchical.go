package passes

import "amspc/ir"

// hierarchical lowers a collective over a group spanning nodes into
// phases inside and across nodes where the cost model says that is
// faster (Distribution.Hierarchical). In group order a rank's inter-node
// group (Group.Inter) holds a contiguous block of the group, the
// intra-node group's (Group.Intra) Index-th, so no data moves between
// phases:
//
//   - all-gather: across nodes into this rank's block of the output, then
//     inside the node (MiCS, ZeRO++);
//   - reduce-scatter: inside the node onto this rank's block of the
//     input, then across nodes;
//   - all-reduce: reduce-scatter inside the node onto a 1/k share,
//     all-reduce of the share across nodes, all-gather inside the node.
func hierarchical(s *State) error {
	p, ds := s.Prog, s.dist
	if ds.d.Hierarchical == nil {
		return nil
	}
	out := ds.newSeq(len(p.Seq) + 2*collectiveCount(p.Seq))
	for _, op := range p.Seq {
		if op.Op != ir.Collective {
			out = append(out, op)
			continue
		}
		g := op.Group
		ib, ob := p.Buffers[op.In], p.Buffers[op.Out]
		full := ib
		if op.Coll == ir.AllGather {
			full = ob
		}
		mesh := g.Outer.Div(g.Inner)
		k := int64(mesh.S0) // the group's ranks in a node
		parts := int64(mesh.Size())
		if op.Coll == ir.AllReduce {
			parts = k
		}
		if mesh.S1 <= 1 || k <= 1 || full.Elems%parts != 0 || op.Coll == ir.Broadcast ||
			!ds.d.Hierarchical(op.Coll, float64(full.Bytes()), mesh) {
			out = append(out, op)
			continue
		}
		why := op.Comment
		if why != "" {
			why += ": "
		}
		phase := func(c ir.Coll, g ir.Group, in, to int32, bytes int64, where string) {
			x := op
			x.Coll, x.Group, x.In, x.Out, x.Bytes, x.Comment = c, g, in, to, bytes, why+where
			out = append(out, x)
		}
		intra, inter := g.Intra(), g.Inter()
		switch op.Coll {
		case ir.AllGather:
			block := ds.view(p, ob.Name+"[node block]", op.Out, ob.Elems/k, 0, intra)
			phase(ir.AllGather, inter, op.In, block, p.Buffers[block].Bytes(), "across nodes")
			phase(ir.AllGather, intra, block, op.Out, ob.Bytes(), "inside the node")
		case ir.ReduceScatter:
			block := ds.view(p, ib.Name+"[node block]", op.In, ib.Elems/k, 0, intra)
			phase(ir.ReduceScatter, intra, op.In, block, ib.Bytes(), "inside the node")
			phase(ir.ReduceScatter, inter, block, op.Out, p.Buffers[block].Bytes(), "across nodes")
		case ir.AllReduce:
			share := ds.view(p, ib.Name+"[node share]", op.In, ib.Elems/k, 0, intra)
			sb := p.Buffers[share].Bytes()
			phase(ir.ReduceScatter, intra, op.In, share, ib.Bytes(), "inside the node")
			phase(ir.AllReduce, inter, share, share, sb, "across nodes")
			phase(ir.AllGather, intra, share, op.Out, ib.Bytes(), "inside the node")
		}
	}
	ds.setSeq(p, out)
	return nil
}

// collectiveCount is the number of collectives in seq (how many a
// rewrite of each into several may add).
func collectiveCount(seq []ir.SeqOp) int {
	n := 0
	for i := range seq {
		if seq[i].Op == ir.Collective {
			n++
		}
	}
	return n
}
