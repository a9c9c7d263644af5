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
}

// optimizer adds AdamW (NUMERICS.md) for every param: fp32 states m and
// v, an fp32 master copy under mixed precision, and the update of each
// state and of P (the master rounded to P's dtype). 1-D params (norm
// weights) are not decayed. The states are values of role OptState that
// the sharding pass will shard over the os-group.
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
		m := update(b.one(ir.AdamM, []*ir.Value{ps.M, grad}, ir.FloatAttr("beta1", opt.Beta1)), ps.M)
		v := update(b.one(ir.AdamV, []*ir.Value{ps.V, grad}, ir.FloatAttr("beta2", opt.Beta2)), ps.V)
		wd := opt.WeightDecay
		if len(p.Shape) < 2 {
			wd = 0
		}
		w := b.one(ir.AdamUpdate, []*ir.Value{weights, m, v},
			ir.FloatAttr("lr", opt.LR), ir.FloatAttr("beta1", opt.Beta1), ir.FloatAttr("beta2", opt.Beta2),
			ir.FloatAttr("eps", opt.Eps), ir.FloatAttr("weight_decay", wd))
		if ps.Master != nil {
			update(w, ps.Master)
			ps.NewParam = update(b.one(ir.Cast, []*ir.Value{w}, ir.IntAttr("dtype", int64(p.DType))), p)
		} else {
			ps.NewParam = update(w, p)
		}
		s.States = append(s.States, ps)
	}
	return nil
}
