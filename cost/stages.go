package cost

import (
	"amspc/ir"
)

// Group is a layer group: the unit the planner may shard differently
// (the partition's, in ir).
type Group = ir.StageGroup

const (
	Embedding = ir.EmbeddingGroup // stage before the blocks (embedding table)
	Blocks    = ir.BlocksGroup    // the repeated blocks
	Head      = ir.HeadGroup      // stage after the blocks (final norm, lm head, loss)
	NumGroups = ir.NumStageGroups
)

// Stage is one step of the forward pass the schedule treats as a unit:
// the ops before the first block, each block, the ops after the last. Its
// params are gathered together, its activations saved together.
type Stage struct {
	Name  string
	Group Group
	Layer int // block index, -1 for the embedding and head stages
	// Params are the element counts of the param tensors the stage owns
	// (each a "module" in the AMSP paper's formulas), in definition order.
	Params []int64
	// FwdFlops is the forward FLOPs of one micro-batch.
	FwdFlops float64
	// Saved is the bytes of activations the stage keeps for backward;
	// Boundary the bytes of its inputs from earlier stages, all that full
	// recompute keeps.
	Saved, Boundary int64
	// MaxValue is the largest activation the stage makes (bytes): its
	// gradient and a temporary are the backward's workspace.
	MaxValue int64
	// LastUser is the index of the last stage that reads the stage's
	// params (the partition's).
	LastUser int
	// RecomputeFlops is the forward FLOPs full recompute runs again
	// before the stage's backward (blocks only): the ops whose values
	// backward reads (the op table's Save facts) and no other stage does,
	// and those they need, as the recompute pass copies them.
	RecomputeFlops float64
	// Selective is the bytes of attention-core outputs selective
	// recompute does not keep (blocks only), SelectiveFlops the FLOPs of
	// the cores it runs again.
	Selective      int64
	SelectiveFlops float64
}

// Recomputed is the stage's forward FLOPs that recompute rc runs again
// before its backward.
func (s *Stage) Recomputed(rc ir.Recompute) float64 {
	switch rc {
	case ir.RecomputeFull:
		return s.RecomputeFlops
	case ir.RecomputeSelective:
		return s.SelectiveFlops
	}
	return 0
}

// ParamCount is the stage's total parameter elements.
func (s *Stage) ParamCount() int64 {
	var n int64
	for _, p := range s.Params {
		n += p
	}
	return n
}

// Stages costs the stages of the forward graph's partition
// (ir.PartitionGraph, the scheduler's rule). Every saved value counts in
// the first stage that saves it, so nothing is counted twice.
func Stages(g *ir.Graph) []*Stage {
	part, _ := ir.PartitionGraph(g, nil) // forward only: cannot fail
	stageOf := map[*ir.Value]*Stage{}
	var stages []*Stage
	for _, ps := range part.Stages {
		st := &Stage{Name: ps.Name, Group: ps.Group, Layer: ps.Layer, LastUser: ps.LastUser}
		for _, p := range ps.Params {
			st.Params = append(st.Params, p.Shape.NumElements())
		}
		for _, v := range ps.Fwd {
			stageOf[v] = st
		}
		stages = append(stages, st)
	}
	// What full recompute copies: block values no other stage reads that
	// backward reads, and what those need.
	dropped := part.Droppable
	needed := map[*ir.Value]bool{}
	// An op of several results (a fused one) counts once, at its first;
	// backward reads its first result where SaveOut says so.
	for _, ps := range part.Stages {
		for _, v := range ps.Fwd {
			if v != v.Def.Out() {
				continue
			}
			info := v.Def.Kind.Info()
			for _, i := range info.Save {
				if a := v.Def.Args[i]; dropped(a) {
					needed[a] = true
				}
			}
			if info.SaveOut && dropped(v) {
				needed[v] = true
			}
		}
	}
	recomputed := map[*ir.Op]bool{}
	for i := len(part.Stages) - 1; i >= 0; i-- {
		fw := part.Stages[i].Fwd
		for j := len(fw) - 1; j >= 0; j-- {
			if v := fw[j]; needed[v] && !recomputed[v.Def] {
				recomputed[v.Def] = true
				stageOf[v].RecomputeFlops += v.Def.Kind.Info().Flops(v.Def)
				for _, a := range v.Def.Args {
					if dropped(a) {
						needed[a] = true
					}
				}
			}
		}
	}
	boundary := map[boundaryKey]bool{}
	saved := map[*ir.Value]bool{}
	for i, ps := range part.Stages {
		st := stages[i]
		for _, v := range ps.Fwd {
			if b := v.Bytes(); b > st.MaxValue {
				st.MaxValue = b
			}
			op := v.Def
			if v != op.Out() { // counted at the op's first result
				continue
			}
			info := op.Kind.Info()
			st.FwdFlops += info.Flops(op)
			keep := func(x *ir.Value) {
				if x.Role == ir.Param || saved[x] {
					return
				}
				saved[x] = true
				st.Saved += x.Bytes()
			}
			for _, i := range info.Save {
				keep(op.Args[i])
			}
			if info.SaveOut {
				keep(op.Out())
			}
			if op.Kind == ir.Attention && dropped(v) {
				st.Selective += v.Bytes()
				st.SelectiveFlops += info.Flops(op)
			}
			for _, a := range op.Args {
				if a.Def != nil && stageOf[a] != st && !boundary[boundaryKey{st, a}] {
					boundary[boundaryKey{st, a}] = true
					st.Boundary += a.Bytes()
				}
			}
		}
	}
	return stages
}

// boundaryKey marks a value already counted as a stage's input (a value
// read twice by one stage counts once).
type boundaryKey struct {
	st *Stage
	v  *ir.Value
}
