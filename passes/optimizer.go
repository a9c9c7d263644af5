package passes

import (
	"fmt"

	"amspc/ir"
)

// ParamStates are a param's optimizer states (OS) and their updates.
type ParamStates struct {
	Param  *ir.Value
	Master *ir.Value // fp32 master weights; nil when P is already fp32
	M, V   *ir.Value
	// NewParam is the param after the step (role Param, updating Param).
	NewParam *ir.Value
	// Step is the param's adamw op: the optimizer's hyper-parameters as
	// the scheduler emits them on flat shards.
	Step *ir.Op
}

// optimizer adds AdamW (NUMERICS.md) for every param: fp32 states m and
// v, an fp32 master copy under mixed precision, one adamw op updating the
// weights (the master, or P itself in fp32) and both moments, and under
// mixed precision P as the master's rounding. 1-D params (norm weights)
// are not decayed. This is the compiler's only definition of the step:
// the scheduler runs these ops' attributes on flat shards. The states are
// values of role OptState that the sharding pass will shard over the
// os-group.
func optimizer(s *State) error {
	if len(s.Grads) == 0 {
		return fmt.Errorf("no gradients: autodiff must run first")
	}
	g := s.Graph
	opt := s.Job.Train.Optimizer
	for _, gp := range s.Grads {
		p, grad := gp.Param, gp.Grad
		b := &gradBuilder{g: g, origin: s.Origin}
		b.at(p)
		state := func(name string, init ir.Init) *ir.Value {
			v := &ir.Value{Name: name + "." + p.Name, Shape: append(ir.Shape{}, p.Shape...), DType: ir.F32,
				Role: ir.OptState, Init: init, Layer: p.Layer, Pos: p.Pos}
			g.Add(v)
			return v
		}
		ps := ParamStates{Param: p}
		weights := p
		if p.DType != ir.F32 {
			ps.Master = state("os.master", ir.Init{Kind: ir.InitCopy, Of: p.Name})
			weights = ps.Master
		}
		ps.M = state("os.m", ir.Init{Kind: ir.InitZeros})
		ps.V = state("os.v", ir.Init{Kind: ir.InitZeros})
		update := func(v *ir.Value, target *ir.Value) *ir.Value {
			v.Name, v.Role, v.Updates = target.Name+".new", target.Role, target
			return v
		}
		wd := opt.WeightDecay
		if len(p.Shape) < 2 {
			wd = 0
		}
		r := b.Apply(ir.AdamWStep, []*ir.Value{weights, ps.M, ps.V, grad},
			ir.FloatAttr("lr", opt.LR), ir.FloatAttr("beta1", opt.Beta1), ir.FloatAttr("beta2", opt.Beta2),
			ir.FloatAttr("eps", opt.Eps), ir.FloatAttr("weight_decay", wd))
		ps.Step = r[0].Def
		update(r[1], ps.M)
		update(r[2], ps.V)
		if ps.Master != nil {
			update(r[0], ps.Master)
			ps.NewParam = update(b.one(ir.Cast, []*ir.Value{r[0]}, ir.IntAttr("dtype", int64(p.DType))), p)
		} else {
			ps.NewParam = update(r[0], p)
		}
		s.States = append(s.States, ps)
	}
	return nil
}
