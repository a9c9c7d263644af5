package passes

import (
	"fmt"
	"strings"

	"amspc/ir"
)

// autodiff appends the backward pass of one micro-batch to the forward
// graph: reverse-mode differentiation from the loss, one op's rule at a
// time (each op's rule is in the op table), summing the gradient
// contributions of values used more than once. Every param reached gets a
// gradient value of role Grad named grad.<param>.
//
// The loss seed is the micro-batch's weight in the step's loss: the mean
// over every token of the global batch weighs each micro-batch mean by
// 1/(M x s_dp) (NUMERICS.md), so gradients need no rescaling later.
func autodiff(s *State) error {
	g := s.Graph
	loss := g.LossValue()
	if loss == nil || loss.Def == nil {
		return fmt.Errorf("no loss to differentiate")
	}
	if !loss.Def.Kind.Info().IsLoss() {
		return &UserError{Pos: loss.Pos, Msg: fmt.Sprintf("training needs loss = cross_entropy(...) directly, not %s (not supported yet)", loss.Def.Kind)}
	}
	b := &gradBuilder{g: g, origin: s.Origin}
	contrib := map[*ir.Value][]*ir.Value{}
	shared := map[*ir.Value]int{} // how many operands a contribution serves
	add := func(to, grad *ir.Value) {
		contrib[to] = append(contrib[to], grad)
		shared[grad]++
	}
	// The seed: the loss op's gradients (d loss / d logits, or d loss /
	// d h and d w when the head is fused in) of the weighted micro-batch
	// mean.
	ce := loss.Def
	b.at(loss)
	for j, gr := range ce.Kind.Info().LossGrad(b, ce, s.LossScale) {
		if a := ce.Args[j]; gr != nil && (a.Role == ir.Param || a.Def != nil) {
			add(a, gr)
		}
	}

	fwd := g.Values[:len(g.Values)-1] // everything before the seed
	for i := len(fwd) - 1; i >= 0; i-- {
		v := fwd[i]
		if v.Def == nil || v == loss {
			continue
		}
		var grads []*ir.Value
		if op := v.Def; len(op.Results) > 1 {
			// A fused forward op of several results, differentiated at
			// its first (the last met going back), when every result's
			// gradient is complete.
			if op.Results[0] != v {
				continue
			}
			dys := make([]*ir.Value, len(op.Results))
			any := false
			for j, r := range op.Results {
				if len(contrib[r]) > 0 {
					b.at(r)
					dys[j], any = b.sum("d."+r.Name, contrib[r], shared), true
				}
			}
			if !any {
				continue
			}
			rule := op.Kind.Info().BackwardAll
			if rule == nil {
				return fmt.Errorf("op %s of %d results has no backward rule", op.Kind, len(op.Results))
			}
			b.at(op.Results[len(op.Results)-1])
			grads = rule(b, op, dys)
		} else {
			if len(contrib[v]) == 0 {
				continue
			}
			b.at(v)
			dy := b.sum("d."+v.Name, contrib[v], shared)
			rule := v.Def.Kind.Info().Backward
			if rule == nil {
				return fmt.Errorf("op %s has no backward rule", v.Def.Kind)
			}
			grads = rule(b, v.Def, dy)
		}
		for j, a := range v.Def.Args {
			if j < len(grads) && grads[j] != nil && (a.Role == ir.Param || a.Def != nil) {
				add(a, grads[j])
			}
		}
	}
	for _, p := range g.Params() {
		if len(contrib[p]) == 0 {
			return &UserError{Pos: p.Pos, Msg: fmt.Sprintf("param %s does not reach the loss, so it has no gradient (not supported yet)", p.Name)}
		}
		b.at(p)
		gp := b.sum("grad."+p.Name, contrib[p], shared)
		if gp.Name != "grad."+p.Name {
			// The contribution is another value's gradient (x + p passes
			// dy through): copy it, so the param's gradient is its own.
			gp = b.one(ir.Cast, []*ir.Value{gp}, ir.IntAttr("dtype", int64(gp.DType)))
			gp.Name = "grad." + p.Name
		}
		gp.Role = ir.Grad
		s.Grads = append(s.Grads, GradOf{Param: p, Grad: gp})
	}
	return nil
}

// GradOf pairs a param with its gradient value.
type GradOf struct {
	Param, Grad *ir.Value
}

// gradBuilder makes backward ops at the position and layer of the forward
// value being differentiated.
type gradBuilder struct {
	g     *ir.Graph
	cur   *ir.Value
	temps int
	made  map[*ir.Value]bool
	// origin records, for each value made, the forward value (or param)
	// it was made for: the scheduler places it in that value's stage.
	origin map[*ir.Value]*ir.Value
}

func (b *gradBuilder) at(v *ir.Value) { b.cur, b.temps = v, 0 }

// Apply makes an op through ir.NewOp, so its attributes are checked
// against the op's spec: a bad one is a bug in a backward rule or a pass,
// which panics, and runPass reports it as an internal error naming the
// pass. The results are named bwd.<value>.<n> in order.
func (b *gradBuilder) Apply(kind ir.OpKind, args []*ir.Value, attrs ...ir.Attr) []*ir.Value {
	op, err := ir.NewOp(kind, args, attrs, b.cur.Pos)
	if err != nil {
		panic(fmt.Sprintf("making the %s of %s: %v", kind, b.cur.Name, err))
	}
	if b.made == nil {
		b.made = map[*ir.Value]bool{}
	}
	for _, v := range op.Results {
		b.temps++
		v.Name, v.Layer = fmt.Sprintf("bwd.%s.%d", b.cur.Name, b.temps), b.cur.Layer
		b.g.Add(v)
		b.made[v] = true
		if b.origin != nil {
			b.origin[v] = b.cur
		}
	}
	return op.Results
}

// one makes a single-result op and returns its result.
func (b *gradBuilder) one(kind ir.OpKind, args []*ir.Value, attrs ...ir.Attr) *ir.Value {
	return b.Apply(kind, args, attrs...)[0]
}

// sum adds up gradient contributions into one value named name (or gives
// a lone fresh contribution that name).
func (b *gradBuilder) sum(name string, parts []*ir.Value, shared map[*ir.Value]int) *ir.Value {
	if len(parts) == 1 {
		p := parts[0]
		if b.made[p] && shared[p] == 1 && strings.HasPrefix(p.Name, "bwd.") {
			p.Name = name
		}
		return p
	}
	acc := parts[0]
	for _, p := range parts[1:] {
		acc = b.one(ir.Add, []*ir.Value{acc, p})
	}
	acc.Name = name
	return acc
}
