package ir

import (
	"fmt"
	"strings"
)

// Sharding specs (issue 30). A value of the graph has a global shape;
// its Spec says how the ranks of a tensor-parallel group hold it: whole
// (replicated), split along one dimension (each rank the Size-th part
// at its index), or as a partial sum (each rank a summand, the value
// their sum). An op's ShardRule says, for the specs its operands come
// in, which specs it needs them in and what specs its results have; the
// tensor pass (passes/tensor.go) walks the graph, asks each op's rule,
// and inserts the collective that turns a spec into the one needed:
//
//	partial  -> whole   tp_all_reduce
//	partial  -> split   tp_reduce_scatter (along the split dimension)
//	split    -> whole   tp_all_gather
//	whole    -> split   tp_slice (each rank keeps its part: no
//	                    communication)
//
// as GSPMD and tinygrad's multi-device tensors do. Megatron's layouts
// follow from the rules and one choice per weight (the first matmul to
// read it splits it by columns when its input is whole, by rows when its
// input is split along the contracted dimension): column- then
// row-parallel linears, heads split in attention, a vocabulary-parallel
// embedding, head and cross-entropy; and with sequence parallelism the
// tensor pass resolves partial sums to values split along the sequence
// instead of whole ones, which the row-wise ops (norms, residual adds)
// take as they are.

// A Spec is how a tensor-parallel group holds a value.
type Spec struct {
	// Split is the dimension the value is split along, -1 for none.
	Split int
	// Partial says each rank holds a summand of the value.
	Partial bool
}

// Whole is the spec of a value every rank holds whole.
var Whole = Spec{Split: -1}

// SplitAt is the spec of a value split along dimension d.
func SplitAt(d int) Spec { return Spec{Split: d} }

// PartialSum is the spec of a value held as summands.
var PartialSum = Spec{Split: -1, Partial: true}

// IsWhole says every rank holds the whole value.
func (s Spec) IsWhole() bool { return s.Split < 0 && !s.Partial }

func (s Spec) String() string {
	switch {
	case s.Partial:
		return "partial"
	case s.Split < 0:
		return "whole"
	}
	return fmt.Sprintf("split(%d)", s.Split)
}

// ShardCtx is what a rule knows of the parallelism: the tensor-parallel
// degree and whether partial sums resolve along the sequence (sequence
// parallelism).
type ShardCtx struct {
	Degree   int
	Sequence bool
}

// SeqDim is the dimension of v that sequence parallelism splits: the
// sequence of an activation [batch, seq, ...]; -1 for a value that has
// none.
func SeqDim(v *Value) int {
	if len(v.Shape) >= 3 {
		return 1
	}
	return -1
}

// Resolve is the spec a partial sum of v resolves to when an op cannot
// take it partial: split along the sequence under sequence parallelism
// (a reduce-scatter), else whole (an all-reduce). Other specs stay.
func (c ShardCtx) Resolve(s Spec, v *Value) Spec {
	if !s.Partial {
		return s
	}
	if d := SeqDim(v); c.Sequence && d >= 0 && v.Shape[d]%int64(c.Degree) == 0 {
		return SplitAt(d)
	}
	return Whole
}

// Splits says whether v can be split along d into Degree equal parts.
func (c ShardCtx) Splits(v *Value, d int) bool {
	return d >= 0 && d < len(v.Shape) && v.Shape[d]%int64(c.Degree) == 0
}

// A ShardRule gives, for op's operands in specs in (their specs where
// they are made), the specs the op needs them in (want; the tensor pass
// converts the others) and its results' specs. Every rule leaves a
// result whole when its operands are.
type ShardRule func(c ShardCtx, op *Op, in []Spec) (want, out []Spec)

// shardWhole is the rule of an op without one of its own: every operand
// whole, every result whole. Always right; only slower than a rule that
// lets splits pass.
func shardWhole(_ ShardCtx, op *Op, in []Spec) (want, out []Spec) {
	return fill(len(in), Whole), fill(len(op.Results), Whole)
}

func fill(n int, s Spec) []Spec {
	out := make([]Spec, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// last is the index of v's last dimension.
func last(v *Value) int { return len(v.Shape) - 1 }

// rowwise is the spec a row-wise op (a norm, a residual add, a
// pointwise op) takes its operands in, all the same shape: their common
// split when it is along a leading dimension (not the rows' own), else
// whole; partial sums resolved first.
func rowwise(c ShardCtx, vs []*Value, in []Spec, along func(Spec, *Value) bool) Spec {
	var common *Spec
	for i, s := range in {
		s = c.Resolve(s, vs[i])
		if s.Split >= 0 && !along(s, vs[i]) {
			return Whole
		}
		switch {
		case common == nil:
			common = &s
		case *common != s:
			// One split and one whole: the whole one is sliced (no
			// communication); two different splits: both gathered.
			if common.IsWhole() {
				common = &s
			} else if !s.IsWhole() {
				return Whole
			}
		}
	}
	if common == nil {
		return Whole
	}
	return *common
}

// leading says s splits a dimension before v's last (a row-wise op's
// rows are its last dimension).
func leading(s Spec, v *Value) bool { return s.Split < last(v) }

// anyDim says any split passes (a pointwise op).
func anyDim(Spec, *Value) bool { return true }

// heads says s splits v's last dimension (heads x head dim) or a
// dimension before the sequence (the batch): what attention and RoPE
// take (positions must be whole along the sequence).
func heads(s Spec, v *Value) bool { return s.Split == last(v) || s.Split == 0 && len(v.Shape) >= 3 }

// headRule is sameRule(args, heads) for an op with heads and kv_heads
// attributes: a split of the last dimension must fall between heads, of
// the queries' and of the keys' and values'.
func headRule(args []int) ShardRule {
	same := sameRule(args, heads)
	return func(c ShardCtx, op *Op, in []Spec) (want, out []Spec) {
		want, out = same(c, op, in)
		h, _ := op.Attr("heads")
		kv, ok := op.Attr("kv_heads")
		if !ok || kv.Int == 0 {
			kv = h
		}
		if s := out[0]; s.Split >= 0 && s.Split == last(op.Out()) && (h.Int%int64(c.Degree) != 0 || kv.Int%int64(c.Degree) != 0) {
			return fill(len(in), Whole), fill(len(op.Results), Whole)
		}
		return want, out
	}
}

// sameRule makes the rule of an op whose operands (those in args; the
// others whole) and results all share one spec, found by rowwise with
// along.
func sameRule(args []int, along func(Spec, *Value) bool) ShardRule {
	return func(c ShardCtx, op *Op, in []Spec) (want, out []Spec) {
		vs := make([]*Value, len(args))
		ss := make([]Spec, len(args))
		for i, a := range args {
			vs[i], ss[i] = op.Args[a], in[a]
		}
		s := rowwise(c, vs, ss, along)
		want = fill(len(in), Whole)
		for _, a := range args {
			want[a] = s
		}
		return want, fill(len(op.Results), s)
	}
}

// matmulRule: x @ w. A split of w's columns (its last dimension) needs x
// whole and splits the result's last dimension; a split of w's rows (the
// contracted dimension) needs x split along its last and makes the
// result partial; with w whole, x's split along a leading dimension
// passes to the result.
func matmulRule(c ShardCtx, op *Op, in []Spec) (want, out []Spec) {
	x := op.Args[0]
	sx, sw := c.Resolve(in[0], x), in[1]
	switch {
	case sw.Split == 1:
		return []Spec{Whole, sw}, []Spec{SplitAt(last(op.Out()))}
	case sw.Split == 0:
		return []Spec{SplitAt(last(x)), sw}, []Spec{PartialSum}
	case sx.Split >= 0 && sx.Split < last(x):
		return []Spec{sx, Whole}, []Spec{sx}
	}
	return []Spec{Whole, Whole}, []Spec{Whole}
}

// matmulGradARule: dx = dy @ w^T. With w split by columns dy must be
// split along its last dimension and dx is partial; by rows, dy whole
// and dx split along its last; whole, dy's leading split passes.
func matmulGradARule(c ShardCtx, op *Op, in []Spec) (want, out []Spec) {
	dy := op.Args[0]
	sdy, sw := c.Resolve(in[0], dy), in[1]
	switch {
	case sw.Split == 1:
		return []Spec{SplitAt(last(dy)), sw}, []Spec{PartialSum}
	case sw.Split == 0:
		return []Spec{Whole, sw}, []Spec{SplitAt(last(op.Out()))}
	case sdy.Split >= 0 && sdy.Split < last(dy):
		return []Spec{sdy, Whole}, []Spec{sdy}
	}
	return []Spec{Whole, Whole}, []Spec{Whole}
}

// matmulGradBRule: dw = x^T @ dy, contracting every leading dimension.
// dy split along its last dimension (with x whole) splits dw's columns,
// x along its last (dy whole) dw's rows; both split along the same
// leading dimension make dw partial.
func matmulGradBRule(c ShardCtx, op *Op, in []Spec) (want, out []Spec) {
	x, dy := op.Args[0], op.Args[1]
	sx, sdy := c.Resolve(in[0], x), c.Resolve(in[1], dy)
	switch {
	case sdy.Split == last(dy) && sx.Split != last(x):
		return []Spec{Whole, sdy}, []Spec{SplitAt(1)}
	case sx.Split == last(x) && sdy.Split != last(dy):
		return []Spec{sx, Whole}, []Spec{SplitAt(0)}
	case sx.Split >= 0 && sx == sdy:
		return []Spec{sx, sdy}, []Spec{PartialSum}
	}
	return []Spec{Whole, Whole}, []Spec{Whole}
}

// normRule: a norm (or add + norm) and its gradient take their
// activations split along a leading dimension (rows stay whole), the
// weight whole; the activations' results share the split, the weight's
// gradient is partial when the rows are split (each rank sums its rows).
func normRule(acts []int, wgrad int) ShardRule {
	same := sameRule(acts, leading)
	return func(c ShardCtx, op *Op, in []Spec) (want, out []Spec) {
		want, out = same(c, op, in)
		if wgrad >= 0 {
			if s := out[wgrad]; s.Split >= 0 {
				out[wgrad] = PartialSum
			} else {
				out[wgrad] = Whole
			}
		}
		return want, out
	}
}

// embedRule: a table split by rows (the vocabulary) makes each rank look
// up the ids in its rows, zeros elsewhere: a partial sum. A whole table
// passes the ids' split to the result.
func embedRule(c ShardCtx, op *Op, in []Spec) (want, out []Spec) {
	ids := in[0]
	if in[1].Split == 0 {
		return []Spec{Whole, in[1]}, []Spec{PartialSum}
	}
	if ids.Split >= 0 && !ids.Partial {
		return []Spec{ids, Whole}, []Spec{ids}
	}
	return []Spec{Whole, Whole}, []Spec{Whole}
}

// crossEntropyRule: logits split along the classes are taken as they
// are (a vocabulary-parallel cross-entropy: each rank's row maxima and
// sums of exponentials all-reduced inside the op); the loss is whole.
// Its gradient keeps the split.
func crossEntropyRule(c ShardCtx, op *Op, in []Spec) (want, out []Spec) {
	logits := op.Args[0]
	if s := in[0]; s.Split == last(logits) {
		return []Spec{s, Whole}, fill(len(op.Results), Whole)
	}
	return []Spec{Whole, Whole}, fill(len(op.Results), Whole)
}

func crossEntropyGradRule(c ShardCtx, op *Op, in []Spec) (want, out []Spec) {
	logits := op.Args[0]
	if s := in[0]; s.Split == last(logits) {
		return []Spec{s, Whole}, []Spec{s}
	}
	return []Spec{Whole, Whole}, []Spec{Whole}
}

// addRule: two partial sums add as partial sums (each rank adds its
// summands: one reduction of the sum instead of one of each, as
// Megatron sums the gradients of a column-parallel input's readers);
// otherwise a pointwise op's rule.
func addRule(c ShardCtx, op *Op, in []Spec) (want, out []Spec) {
	if in[0].Partial && in[1].Partial && op.Args[0].Shape.Equal(op.Args[1].Shape) {
		return []Spec{PartialSum, PartialSum}, []Spec{PartialSum}
	}
	return addSame(c, op, in)
}

var addSame = sameRule([]int{0, 1}, anyDim)

// adamwRule: the weights, the moments and the gradient in the weights'
// spec (each rank updates its part); the results in it too.
func adamwRule(c ShardCtx, op *Op, in []Spec) (want, out []Spec) {
	s := in[0]
	if s.Partial {
		s = Whole
	}
	return fill(len(in), s), fill(len(op.Results), s)
}

// ShardRules are the rules of the ops that let a split pass; every
// other op takes whole operands (shardWhole).
var shardRules = map[OpKind]ShardRule{
	MatMul:           matmulRule,
	MatMulGradA:      matmulGradARule,
	MatMulGradB:      matmulGradBRule,
	Embed:            embedRule,
	Add:              addRule,
	Mul:              sameRule([]int{0, 1}, anyDim),
	SiLU:             sameRule([]int{0}, anyDim),
	GELU:             sameRule([]int{0}, anyDim),
	GELUTanh:         sameRule([]int{0}, anyDim),
	Scale:            sameRule([]int{0}, anyDim),
	Cast:             sameRule([]int{0}, anyDim),
	SiLUGrad:         sameRule([]int{0, 1}, anyDim),
	GELUGrad:         sameRule([]int{0, 1}, anyDim),
	GELUTanhGrad:     sameRule([]int{0, 1}, anyDim),
	SwiGLU:           sameRule([]int{0, 1}, anyDim),
	SwiGLUGrad:       sameRule([]int{0, 1, 2}, anyDim),
	GeGLUTanh:        sameRule([]int{0, 1}, anyDim),
	GeGLUTanhGrad:    sameRule([]int{0, 1, 2}, anyDim),
	RMSNorm:          normRule([]int{0}, -1),
	RMSNormGrad:      normRule([]int{0, 2}, 1),
	AddRMSNorm:       normRule([]int{0, 1}, -1),
	AddRMSNormGrad:   normRule([]int{0, 2, 3}, 1),
	RoPE:             headRule([]int{0}),
	RoPEGrad:         headRule([]int{0}),
	RoPEQK:           headRule([]int{0, 1}),
	RoPEQKGrad:       headRule([]int{0, 1}),
	Attention:        headRule([]int{0, 1, 2}),
	AttentionGrad:    headRule([]int{0, 1, 2, 3, 4}),
	CrossEntropy:     crossEntropyRule,
	CrossEntropyGrad: crossEntropyGradRule,
	AdamWStep:        adamwRule,
	AdamWCopy:        adamwRule,
}

// Shard is op kind k's rule.
func (k OpKind) Shard() ShardRule {
	if r := shardRules[k]; r != nil {
		return r
	}
	return shardWhole
}

// FormatSpecs lists the values of g that are not whole with their specs,
// one a line, in definition order.
func FormatSpecs(g *Graph, specs map[*Value]Spec) string {
	var b strings.Builder
	for _, v := range g.Values {
		if s, ok := specs[v]; ok && !s.IsWhole() {
			fmt.Fprintf(&b, "  %s %v\n", v.Name, s)
		}
	}
	return b.String()
}

// initTPOps makes the tensor pass's ops: internal, no arithmetic; on a
// rank's part of the value (the graph after the tensor pass), parts the
// group's size: an all-reduce keeps the shape, an all-gather multiplies
// dimension dim by parts, a reduce-scatter and a slice divide it.
func initTPOps() {
	parts := AttrSpec{Name: "parts", Type: AttrInt, Required: true}
	dim := []AttrSpec{{Name: "dim", Type: AttrInt, Required: true}, parts}
	none := func(*Op) float64 { return 0 }
	scaled := func(mul bool) func([]*Value, []Attr) (Shape, DType, *OpError) {
		return func(args []*Value, attrs []Attr) (Shape, DType, *OpError) {
			d, _ := attrByName(attrs, "dim")
			k, _ := attrByName(attrs, "parts")
			x := args[0]
			if d.Int < 0 || int(d.Int) >= len(x.Shape) || k.Int < 1 {
				return nil, 0, argErr(0, "dim %d of %s (rank %d), parts %d", d.Int, x.Name, len(x.Shape), k.Int)
			}
			s := append(Shape{}, x.Shape...)
			switch {
			case mul:
				s[d.Int] *= k.Int
			case s[d.Int]%k.Int != 0:
				return nil, 0, argErr(0, "%d parts do not divide dimension %d (%d) of %s", k.Int, d.Int, s[d.Int], x.Name)
			default:
				s[d.Int] /= k.Int
			}
			return s, x.DType, nil
		}
	}
	parted := func(to bool) func([]*Value, []Attr) (Shape, DType, *OpError) {
		return func(args []*Value, attrs []Attr) (Shape, DType, *OpError) {
			d, _ := attrByName(attrs, "dim")
			k, _ := attrByName(attrs, "parts")
			x := args[0]
			s := append(Shape{}, x.Shape...)
			if to {
				if d.Int < 0 || int(d.Int) >= len(s) || k.Int < 1 || s[d.Int]%k.Int != 0 {
					return nil, 0, argErr(0, "%d parts along dimension %d of %s %v", k.Int, d.Int, x.Name, x.Shape)
				}
				s[d.Int] /= k.Int
				return append(Shape{k.Int}, s...), x.DType, nil
			}
			if len(s) < 2 || d.Int < 0 || int(d.Int) >= len(s)-1 || s[0] != k.Int {
				return nil, 0, argErr(0, "%s %v is not %d parts along dimension %d", x.Name, x.Shape, k.Int, d.Int)
			}
			s = s[1:]
			s[d.Int] *= k.Int
			return s, x.DType, nil
		}
	}
	scalar := func(args []*Value, _ []Attr) (Shape, DType, *OpError) { return Shape{1}, F32, nil }
	for k, info := range map[OpKind]OpInfo{
		GradSumSq:       {TrainOnly: true, Name: "grad_sumsq", Arity: 1, Infer: results(scalar), Traffic: plusResults()},
		ClipGrad:        {TrainOnly: true, Name: "clip_grad", Arity: 2, Attrs: []AttrSpec{{Name: "max_norm", Type: AttrFloat, Required: true}}, Infer: results(like(0))},
		ToParts:         {Name: "to_parts", Arity: 1, Attrs: dim, Infer: results(parted(true))},
		FromParts:       {Name: "from_parts", Arity: 1, Attrs: dim, Infer: results(parted(false))},
		TPAllReduce:     {Name: "tp_all_reduce", Arity: 1, Attrs: []AttrSpec{parts}, Infer: results(like(0))},
		TPAllGather:     {Name: "tp_all_gather", Arity: 1, Attrs: dim, Infer: results(scaled(true))},
		TPReduceScatter: {Name: "tp_reduce_scatter", Arity: 1, Attrs: dim, Infer: results(scaled(false))},
		TPSlice:         {Name: "tp_slice", Arity: 1, Attrs: dim, Infer: results(scaled(false))},
	} {
		info.Internal, info.Fusion, info.Flops = true, FuseNone, none
		opTable[k] = info
	}
}

// CollectiveOps are the tensor pass's ops, each with why no backend has
// a kernel for it: the lower pass makes it a collective instruction (or
// a copy of a view), never a kernel.
func CollectiveOps() map[OpKind]string {
	const why = "a tensor-parallel collective: the lower pass makes it a collective instruction on the tensor-parallel group, never a kernel"
	return map[OpKind]string{TPAllReduce: why, TPAllGather: why, TPReduceScatter: why, TPSlice: why}
}

// Converter is the op that turns spec from into spec to (ok false when
// none does: a split along one dimension into another, which the tensor
// pass gathers first), with its dim attribute (-1: none).
func Converter(from, to Spec) (k OpKind, dim int, ok bool) {
	switch {
	case from == to:
		return InvalidOp, -1, false
	case from.Partial && to.IsWhole():
		return TPAllReduce, -1, true
	case from.Partial && to.Split >= 0:
		return TPReduceScatter, to.Split, true
	case from.Split >= 0 && to.IsWhole():
		return TPAllGather, from.Split, true
	case from.IsWhole() && to.Split >= 0:
		return TPSlice, to.Split, true
	}
	return InvalidOp, -1, false
}

// VerifySpecs checks a sharded graph: every op gets each operand in the
// spec its rule wants for the specs they are in, and its results are in
// the specs the rule gives (a value missing from specs is whole); every
// state's update is held as the state is; and each tensor-parallel op
// turns its operand's spec into its result's.
func VerifySpecs(g *Graph, specs map[*Value]Spec, c ShardCtx) error {
	spec := func(v *Value) Spec {
		if s, ok := specs[v]; ok {
			return s
		}
		return Whole
	}
	for _, v := range g.Values {
		if u := v.Updates; u != nil && spec(u) != spec(v) {
			return fmt.Errorf("%s is %v, the state it updates %s %v", v.Name, spec(v), u.Name, spec(u))
		}
		op := v.Def
		if op == nil || op.Out() != v {
			continue
		}
		in := make([]Spec, len(op.Args))
		for i, a := range op.Args {
			in[i] = spec(a)
		}
		if k := op.Kind; k == TPAllReduce || k == TPAllGather || k == TPReduceScatter || k == TPSlice {
			want, dim, ok := Converter(in[0], spec(v))
			d, _ := op.Attr("dim")
			if !ok || want != k || dim >= 0 && int64(dim) != d.Int {
				return fmt.Errorf("%s = %v of %s (%v) is %v", v.Name, k, op.Args[0].Name, in[0], spec(v))
			}
			continue
		}
		want, out := op.Kind.Shard()(c, op, in)
		for i, a := range op.Args {
			if want[i] != in[i] {
				return fmt.Errorf("%s = %v reads %s %v, its rule wants it %v", v.Name, op.Kind, a.Name, in[i], want[i])
			}
		}
		for j, r := range op.Results {
			if out[j] != spec(r) {
				return fmt.Errorf("%s = %v is %v, its rule gives %v", r.Name, op.Kind, spec(r), out[j])
			}
		}
	}
	return nil
}
