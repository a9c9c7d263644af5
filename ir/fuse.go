package ir

import (
	"fmt"
	"slices"
)

// A FusionRule is one row of the fusion pattern table, beside the op
// table: ops of kind Root whose operands Match accepts become one op of kind Fused, on the
// operands Match returns. Match and Merge are given the graph's uses
// (each value's readers, as the fusions so far left them), so a row may
// look at an op's readers as well as its operands. A fused op is an op like any other: the op
// table gives its kernels, its cost and its backward rule, so fusing the
// forward graph fuses the backward autodiff makes from it.
type FusionRule struct {
	Name  string
	Root  OpKind
	Fused OpKind
	Why   string
	// Match returns the fused op's operands and the values the fusion
	// absorbs (which must have no other reader), or ok false.
	Match func(root *Op, uses map[*Value][]*Op) (args, absorbed []*Value, ok bool)
	// Merge, for a fusion that keeps another op's result (a residual
	// sum other ops read on, the q beside a rope's k), returns that
	// value: the fused op computes it too, as its first result, before
	// the root's. It must be defined before the root, in the root's
	// layer, and no op between it and the root may read it (it moves
	// down to the root).
	Merge func(root *Op, uses map[*Value][]*Op) *Value
	// Attrs, for a fused op whose attributes are not the root's it
	// declares, gives them from the root and the merged value (nil in a
	// row without Merge).
	Attrs func(root *Op, merged *Value) []Attr
}

// fusions is the pattern table, tried in order on every op: a row sees
// what the rows before it made of the op (cross-entropy's cast goes
// first, then the head's matmul can join it).
var fusions = []FusionRule{
	{Name: "swiglu", Root: Mul, Fused: SwiGLU,
		Why:   "silu(a) * b of one shape: one pass over a and b, and backward computes silu(a) again instead of keeping it",
		Match: matchGated(SiLU)},
	{Name: "geglu_tanh", Root: Mul, Fused: GeGLUTanh,
		Why:   "gelu_tanh(a) * b of one shape (Gemma's MLP), as swiglu",
		Match: matchGated(GELUTanh)},
	{Name: "cross-entropy-cast", Root: CrossEntropy, Fused: CrossEntropy,
		Why:   "cross_entropy(cast(logits to fp32)) reads the bf16 logits as they are (it computes in fp32 and double anyway): no fp32 copy of the logits, the step's largest activation, and none of its gradient",
		Match: matchCrossEntropyCast},
	{Name: "add-rmsnorm", Root: RMSNorm, Fused: AddRMSNorm,
		Why:   "rmsnorm(x + r) of one shape in one layer (a pre-norm block's residual add and its MLP's norm): one pass over the rows writes the sum, which the next residual reads, and its norm; backward adds the sum's gradient to the norm's in the norm's pass. The next block's norm is another layer's and stays apart (layers are where recompute and the gathers cut)",
		Match: matchAddRMSNorm, Merge: func(n *Op, _ map[*Value][]*Op) *Value { return n.Args[0] }},
	{Name: "rope-qk", Root: RoPE, Fused: RoPEQK,
		Why:   "rope(xq) and rope(xk), the q and k an attention reads, of one dtype, theta and layer (q's rope moves down to k's): one launch turns both, each pair as rope turns it, and backward turns both gradients back in one. Not in place: xq and xk (the q and k projections) die at the fused op, before the step's memory peak, so writing q and k over them would not lower the peak",
		Match: matchRoPEQK, Merge: func(k *Op, uses map[*Value][]*Op) *Value { return ropeQ(k, uses) }, Attrs: ropeQKAttrs},
	{Name: "linear-cross-entropy", Root: CrossEntropy, Fused: LinearCrossEntropy,
		Why:   "cross_entropy(h @ w, t) with vocab >= 8 x d: the head's matmul and the loss in chunks of rows (LinearCEChunk), so the logits (rows x vocab, the step's largest activation: 0.5 GB in bf16 at 8,192 tokens and vocab 32,000) and their gradient are never stored whole; backward forms each chunk's logits again (as Cut Cross-Entropy does), one more product of the head's size, 2 % of TinyLlama's step FLOPs: a head whose logits are less than 8x its input (LLaMA-7B's 7.8x) stays unfused, where that product costs more than the memory is worth",
		Match: matchLinearCrossEntropy},
}

// ropeQ is the q = rope(xq) beside k's rope, or nil: the queries of the
// first attention among k's readers that reads k as its keys (operand 1)
// and another rope's result as its queries (operand 0).
func ropeQ(k *Op, uses map[*Value][]*Op) *Value {
	for _, a := range uses[k.Out()] {
		if a.Kind != Attention || a.Args[1] != k.Out() {
			continue
		}
		if q := a.Args[0]; q.Def != nil && q.Def != k && q.Def.Kind == RoPE {
			return q
		}
	}
	return nil
}

// matchRoPEQK accepts rope(xk) of an attention's keys whose queries are
// rope(xq) (ropeQ) of the same dtype and theta, xq and xk of one batch
// and seq (rope_qk's shape rule). Fuse checks the layer and that q can
// move down.
func matchRoPEQK(k *Op, uses map[*Value][]*Op) (args, absorbed []*Value, ok bool) {
	q := ropeQ(k, uses)
	if q == nil {
		return nil, nil, false
	}
	xq, xk := q.Def.Args[0], k.Args[0]
	if q.DType != k.Out().DType || !xq.Shape[:2].Equal(xk.Shape[:2]) {
		return nil, nil, false
	}
	for _, name := range ropeFreqAttrs { // theta and the scaling
		qa, _ := q.Def.Attr(name)
		ka, _ := k.Attr(name)
		if qa != ka {
			return nil, nil, false
		}
	}
	return []*Value{xq, xk}, nil, true
}

// ropeQKAttrs are rope_qk's attributes: q's heads, k's as kv_heads, and
// their frequencies' (theta and the scaling).
func ropeQKAttrs(k *Op, q *Value) []Attr {
	heads, _ := q.Def.Attr("heads")
	kvHeads, _ := k.Attr("heads")
	out := []Attr{{"heads", heads}, {"kv_heads", kvHeads}}
	for _, name := range ropeFreqAttrs {
		if v, ok := k.Attr(name); ok {
			out = append(out, Attr{name, v})
		}
	}
	return out
}

// matchLinearCrossEntropy accepts cross_entropy(matmul(h, w), t), after
// the cast row has let it read bf16 logits, when the vocabulary is at
// least 8 times w's rows (the logits at least 8x h).
func matchLinearCrossEntropy(ce *Op, _ map[*Value][]*Op) (args, absorbed []*Value, ok bool) {
	logits := ce.Args[0]
	if logits.Def == nil || logits.Def.Kind != MatMul {
		return nil, nil, false
	}
	mm := logits.Def
	if w := mm.Args[1].Shape; len(w) != 2 || w[1] < 8*w[0] {
		return nil, nil, false
	}
	return []*Value{mm.Args[0], mm.Args[1], ce.Args[1]}, []*Value{logits}, true
}

// matchAddRMSNorm accepts rmsnorm(add(x, r), w), x and r of one shape
// and dtype, the sum in the norm's layer.
func matchAddRMSNorm(n *Op, _ map[*Value][]*Op) (args, absorbed []*Value, ok bool) {
	y := n.Args[0]
	if y.Def == nil || y.Def.Kind != Add || len(y.Def.Results) != 1 || y.Role != Activation || y.Layer != n.Out().Layer {
		return nil, nil, false
	}
	x, r := y.Def.Args[0], y.Def.Args[1]
	if !x.Shape.Equal(y.Shape) || !r.Shape.Equal(y.Shape) || x.DType != y.DType || r.DType != y.DType {
		return nil, nil, false
	}
	return []*Value{x, r, n.Args[1]}, nil, true
}

// matchCrossEntropyCast accepts cross_entropy(cast(x, dtype=f32), t) of
// bf16 x.
func matchCrossEntropyCast(ce *Op, _ map[*Value][]*Op) (args, absorbed []*Value, ok bool) {
	c := ce.Args[0]
	if c.Def == nil || c.Def.Kind != Cast || c.DType != F32 {
		return nil, nil, false
	}
	x := c.Def.Args[0]
	if x.DType != BF16 {
		return nil, nil, false
	}
	return []*Value{x, ce.Args[1]}, []*Value{c}, true
}

// matchGated accepts mul(act(a), b) and mul(b, act(a)), a and b of one
// shape and dtype (a broadcast operand stays unfused).
func matchGated(act OpKind) func(mul *Op, _ map[*Value][]*Op) (args, absorbed []*Value, ok bool) {
	return func(mul *Op, _ map[*Value][]*Op) (args, absorbed []*Value, ok bool) {
		for i := range 2 {
			s, b := mul.Args[i], mul.Args[1-i]
			if s.Def == nil || s.Def.Kind != act {
				continue
			}
			a := s.Def.Args[0]
			if a.Shape.Equal(b.Shape) && a.DType == b.DType && s.DType == a.DType {
				return []*Value{a, b}, []*Value{s}, true
			}
		}
		return nil, nil, false
	}
}

// Fuse rewrites a forward graph by the pattern table: each op a row
// matches becomes the row's fused op, in place (its result keeps its
// name, position and layer), and the values the fusion absorbed leave
// the graph. A value something else reads (another op, or the loss) is
// never absorbed. The passes' fuse pass runs it, and the cost model
// costs the fused graph, so both count what the compiler runs.
func Fuse(g *Graph) error {
	uses := g.Uses()
	at := make(map[*Value]int, len(g.Values))
	for i, v := range g.Values {
		at[v] = i
	}
	gone := map[*Value]bool{}
	moved := map[*Value]*Value{} // a merged value, by the root result it now precedes
	for _, op := range g.Ops() {
		for _, f := range fusions {
			if op.Kind != f.Root {
				continue
			}
			args, absorbed, ok := f.Match(op, uses)
			if !ok || !onlyReadBy(absorbed, op, uses) {
				continue
			}
			var merged *Value
			if f.Merge != nil {
				if merged = f.Merge(op, uses); merged == nil || !movable(merged, op, uses, at) {
					continue
				}
			}
			attrs := declared(f.Fused, op.Attrs)
			if f.Attrs != nil {
				attrs = f.Attrs(op, merged)
			}
			fused, err := NewOp(f.Fused, args, attrs, op.Pos)
			if err != nil {
				return &InternalError{Pass: "fuse", Err: fmt.Errorf("%s at %s: %v", f.Name, op.Out().Name, err)}
			}
			results := op.Results
			if merged != nil {
				results = append([]*Value{merged}, results...)
			}
			if len(fused.Results) != len(results) {
				return &InternalError{Pass: "fuse", Err: fmt.Errorf("%s at %s: %d results for %d", f.Name, op.Out().Name, len(fused.Results), len(results))}
			}
			for i, t := range fused.Results {
				if v := results[i]; !t.Shape.Equal(v.Shape) || t.DType != v.DType {
					return &InternalError{Pass: "fuse", Err: fmt.Errorf("%s at %s: %s %s for %s %s", f.Name, v.Name, t.DType, t.Shape, v.DType, v.Shape)}
				}
			}
			for _, v := range absorbed {
				gone[v] = true
				for _, a := range v.Def.Args { // the absorbed op reads nothing now
					uses[a] = slices.DeleteFunc(uses[a], func(u *Op) bool { return u == v.Def })
				}
			}
			if merged != nil {
				for _, a := range merged.Def.Args { // nor does the merged one
					uses[a] = slices.DeleteFunc(uses[a], func(u *Op) bool { return u == merged.Def })
				}
				merged.Def, merged.Pos = op, op.Pos
				moved[op.Out()] = merged
			}
			for _, a := range op.Args {
				uses[a] = slices.DeleteFunc(uses[a], func(u *Op) bool { return u == op })
			}
			op.Kind, op.Args, op.Attrs, op.Results = f.Fused, fused.Args, fused.Attrs, results
			for _, a := range op.Args {
				uses[a] = append(uses[a], op)
			}
		}
	}
	if len(gone) == 0 && len(moved) == 0 {
		return nil
	}
	for _, m := range moved {
		gone[m] = true // from where it was
	}
	kept := make([]*Value, 0, len(g.Values))
	for _, v := range g.Values {
		if m := moved[v]; m != nil {
			kept = append(kept, m)
		}
		if !gone[v] {
			kept = append(kept, v)
		}
	}
	g.Values = kept
	return nil
}

// movable says whether merged can move down to op (its first result):
// it is defined before op (an operand always is; another op's result,
// rope-qk's q, may come after), no op between them reads it, and it is
// in op's layer.
func movable(merged *Value, op *Op, uses map[*Value][]*Op, at map[*Value]int) bool {
	if merged.Layer != op.Out().Layer || at[merged] >= at[op.Out()] {
		return false
	}
	for _, u := range uses[merged] {
		if u != op && at[u.Out()] < at[op.Out()] {
			return false
		}
	}
	return true
}

// declared is the attributes of attrs that kind declares (a fused op
// takes its root's eps).
func declared(kind OpKind, attrs []Attr) []Attr {
	var out []Attr
	for _, a := range attrs {
		for _, s := range kind.Info().Attrs {
			if s.Name == a.Name {
				out = append(out, a)
			}
		}
	}
	return out
}

// onlyReadBy says whether op is the only reader of each value: a value
// another op reads, or the loss, must stay.
func onlyReadBy(vals []*Value, op *Op, uses map[*Value][]*Op) bool {
	for _, v := range vals {
		if v.Role != Activation || len(v.Def.Results) != 1 {
			return false
		}
		for _, u := range uses[v] {
			if u != op {
				return false
			}
		}
	}
	return true
}

// LoweredFusions are the fusions of ops the lower pass makes itself, on
// a stage's flat shards rather than the graph's values: it applies them
// when the fuse pass ran (-d=fuse/off turns both off). Match is nil.
func LoweredFusions() []FusionRule {
	return []FusionRule{{Name: "adamw-copy", Root: Cast, Fused: AdamWCopy,
		Why: "cast(adamw(master, m, v, grad)[0] to P's dtype) on a stage's shard: the optimizer step writes the bf16 P it gathers in the pass that updates the fp32 master, m and v, so the master is not read a second time and one launch goes"}}
}

// FusionRules lists the pattern table's rows, in order.
func FusionRules() []FusionRule { return append([]FusionRule(nil), fusions...) }
