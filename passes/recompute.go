package passes

import (
	"fmt"

	"amspc/ir"
)

// recompute computes values again, at the start of each block's
// backward, and makes backward read the copies. Under full recompute
// they are the values the block computes in forward that no other
// stage's forward reads and that backward needs (read by backward, or by
// another such value): the originals then die in forward (only the
// blocks' inputs and outputs stay for backward). Under selective
// recompute they are only the attention cores' outputs backward reads;
// the cores' inputs stay. The copies live from the block's backward
// start to their last backward use and run on the params gathered for
// the block's backward; each is named after its original with ".rc" and
// made for it (Origin), so the partition places it in the original's
// stage.
func recompute(s *State) error {
	if s.Recompute != ir.RecomputeFull && s.Recompute != ir.RecomputeSelective {
		return nil
	}
	g := s.Graph
	fwd, err := ir.PartitionGraph(g, nil)
	if err != nil {
		return err
	}
	stageOf := func(v *ir.Value) int {
		i, ok := fwd.Of(v)
		if !ok {
			return -1
		}
		return i
	}
	// Only what backward reads is computed again, and what that needs.
	loss := g.LossValue()
	end := 0
	for i, v := range g.Values {
		if v == loss {
			end = i + 1
		}
	}
	dropped := fwd.Droppable
	if s.Recompute == ir.RecomputeSelective {
		dropped = func(v *ir.Value) bool { return fwd.Droppable(v) && v.Def.Kind == ir.Attention }
	}
	needed := map[*ir.Value]bool{}
	for _, v := range g.Values[end:] {
		if v.Def != nil {
			for _, a := range v.Def.Args {
				if dropped(a) {
					needed[a] = true
				}
			}
		}
	}
	for i := end - 1; i >= 0; i-- {
		if v := g.Values[i]; needed[v] {
			for _, a := range v.Def.Args {
				if dropped(a) {
					needed[a] = true
				}
			}
		}
	}
	// The copies of each block, in forward order.
	clone := map[*ir.Value]*ir.Value{}
	copies := map[int][]*ir.Value{}
	for i, st := range fwd.Stages {
		if st.Group != ir.BlocksGroup {
			continue
		}
		for _, v := range st.Fwd {
			// An op of several results (a fused one) is copied whole,
			// once, when backward needs any of them.
			if !needed[v] || clone[v] != nil {
				continue
			}
			op := v.Def
			args := make([]*ir.Value, len(op.Args))
			for k, a := range op.Args {
				args[k] = a
				if c := clone[a]; c != nil {
					args[k] = c
				}
			}
			cop, err := ir.NewOp(op.Kind, args, op.Attrs, op.Pos)
			if err != nil {
				return fmt.Errorf("copying %s: %v", v.Name, err)
			}
			for j, c := range cop.Results {
				r := op.Results[j]
				c.Name, c.Layer, c.Pos = r.Name+".rc", r.Layer, r.Pos
				clone[r] = c
				s.Origin[c] = r
				copies[i] = append(copies[i], c)
			}
		}
	}
	// Insert each block's copies before its first backward value, and
	// make backward read them.
	out := append([]*ir.Value{}, g.Values[:end]...)
	for _, v := range g.Values[end:] {
		o := v
		for s.Origin[o] != nil {
			o = s.Origin[o]
		}
		if i := stageOf(o); i >= 0 && copies[i] != nil {
			out = append(out, copies[i]...)
			delete(copies, i)
		}
		if v.Def != nil {
			for k, a := range v.Def.Args {
				if c := clone[a]; c != nil {
					v.Def.Args[k] = c
				}
			}
		}
		out = append(out, v)
	}
	if len(copies) != 0 {
		return fmt.Errorf("%d blocks have copies but no backward", len(copies))
	}
	g.Values = out
	return nil
}
