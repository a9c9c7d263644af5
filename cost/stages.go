package cost

import (
	"amspc/ir"
)

// Group is a layer group: the unit the planner may shard differently.
type Group uint8

const (
	Embedding Group = iota // stage before the blocks (embedding table)
	Blocks                 // the repeated blocks
	Head                   // stage after the blocks (final norm, lm head, loss)
	NumGroups
)

var planGroupNames = [...]string{"embedding", "blocks", "head"}

func (g Group) String() string { return planGroupNames[g] }

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
}

// ParamCount is the stage's total parameter elements.
func (s *Stage) ParamCount() int64 {
	var n int64
	for _, p := range s.Params {
		n += p
	}
	return n
}

// Stages splits a graph into stages in forward order. Every param belongs
// to the stage of its first use; every saved value to the first stage that
// saves it, so nothing is counted twice.
func Stages(g *ir.Graph) []*Stage {
	var stages []*Stage
	pre := &Stage{Name: "embedding", Group: Embedding, Layer: -1}
	post := &Stage{Name: "head", Group: Head, Layer: -1}
	blocks := make([]*Stage, g.Layers)
	for i := range blocks {
		blocks[i] = &Stage{Name: "layers." + itoa(i), Group: Blocks, Layer: i}
	}
	seenLayer := false
	stageOf := func(v *ir.Value) *Stage {
		switch {
		case v.Layer >= 0 && v.Layer < len(blocks):
			return blocks[v.Layer]
		case seenLayer:
			return post
		}
		return pre
	}
	owner := map[*ir.Value]*Stage{}
	boundary := map[boundaryKey]bool{}
	saved := map[*ir.Value]bool{}
	for _, v := range g.Values {
		if v.Layer >= 0 {
			seenLayer = true
		}
		op := v.Def
		if op == nil {
			continue
		}
		st := stageOf(v)
		st.FwdFlops += op.Kind.Info().Flops(op)
		if b := v.Bytes(); b > st.MaxValue {
			st.MaxValue = b
		}
		info := op.Kind.Info()
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
			keep(v)
		}
		for _, a := range op.Args {
			switch {
			case a.Role == ir.Param:
				if owner[a] == nil {
					owner[a] = st
					st.Params = append(st.Params, a.Shape.NumElements())
				}
			case a.Def != nil && stageOf(a) != st && !boundary[boundaryKey{st, a}]:
				boundary[boundaryKey{st, a}] = true
				st.Boundary += a.Bytes()
			}
		}
	}
	stages = append(stages, pre)
	stages = append(stages, blocks...)
	stages = append(stages, post)
	return stages
}

// boundaryKey marks a value already counted as a stage's input (a value
// read twice by one stage counts once).
type boundaryKey struct {
	st *Stage
	v  *ir.Value
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}
