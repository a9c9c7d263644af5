package ir

import (
	"fmt"
	"math"
	"strconv"
)

// OpKind names an op. Every per-op fact (spelling, arity, attributes, shape
// rule, FLOPs) lives in the table below; passes look facts up instead of
// switching on kinds.
type OpKind uint8

const (
	InvalidOp OpKind = iota
	Embed
	MatMul
	RMSNorm
	LayerNorm
	RoPE
	Attention
	SiLU
	GELU
	Add
	Mul
	CrossEntropy
	Transpose

	// Backward ops, made by autodiff (ir/grad.go); not callable from
	// source.
	EmbedGrad
	MatMulGradA
	MatMulGradB
	RMSNormGrad   // (x, w, dy) -> dx, dw
	LayerNormGrad // (x, w, dy) -> dx, dw, db
	SumRows
	RoPEGrad
	AttentionGrad // (q, k, v, out, dy) -> dq, dk, dv
	SiLUGrad
	GELUGrad
	CrossEntropyGrad

	// Optimizer ops, made by the optimizer pass.
	AdamWStep // adamw(weights, m, v, grad) -> new weights, new m, new v
	Cast

	// Ops added since: appended, so that the kinds before keep their
	// numbers (a bundle encodes an instruction's op by its kind).
	GELUTanh     // gelu_tanh(x): GELU with the tanh approximation (Gemma's MLP)
	GELUTanhGrad // (x, dy) -> dx, made by autodiff
	Scale        // scale(x, by=C): x times a constant (Gemma's embedding)
	SwiGLU       // swiglu(a, b) = silu(a) * b, made by the fuse pass
	SwiGLUGrad   // (a, b, dy) -> da, db
	GeGLUTanh    // geglu_tanh(a, b) = gelu_tanh(a) * b, made by the fuse pass (Gemma's MLP)
	GeGLUTanhGrad
	LinearCrossEntropy     // linear_cross_entropy(h, w, targets) = cross_entropy(h @ w, targets), made by the fuse pass
	LinearCrossEntropyGrad // (h, w, targets) -> dh, dw
	AdamWCopy              // adamw_copy(weights, m, v, grad, dtype=D) -> adamw's results and the weights cast to D, made by the lower pass
	AddRMSNorm             // add_rmsnorm(x, r, w) -> y = x + r, rmsnorm(y, w), made by the fuse pass
	AddRMSNormGrad         // (y, w, dh, dy) -> dx = dy + rmsnorm's dx, dw
	RoPEQK                 // rope_qk(xq, xk, heads=H, kv_heads=KV, theta=T) -> rope of each, made by the fuse pass
	RoPEQKGrad             // (dq, dk) -> dxq, dxk: rope_grad of each
	// The tensor-parallel group's collectives and slice, made by the
	// tensor pass (spec.go): x's global shape and type, its spec changed.
	TPAllReduce     // tp_all_reduce(x): partial -> whole
	TPAllGather     // tp_all_gather(x, dim=D): split(D) -> whole
	TPReduceScatter // tp_reduce_scatter(x, dim=D): partial -> split(D)
	TPSlice         // tp_slice(x, dim=D): whole -> split(D), no communication
	// The layouts around a collective of parts along a dimension other
	// than the first (sequence parallelism's), made by the lower pass:
	// to_parts(x, dim=D, parts=T) lays x out as its T parts along D one
	// after another (each part contiguous), from_parts undoes it.
	ToParts
	FromParts
	// Gradient clipping by global norm, made by the lower pass:
	// grad_sumsq(g) is the sum of the squares of a gradient shard (one
	// element, f32); clip_grad(g, sums, max_norm=C) scales g in place
	// by min(1, C / (sqrt(sum of sums) + 1e-6)), torch's
	// clip_grad_norm_, the sums being every stage's total.
	GradSumSq
	ClipGrad
	numOps
)

// AttrSpec declares an attribute an op accepts.
type AttrSpec struct {
	Name     string
	Type     AttrType
	Required bool
	Default  AttrVal // used when !Required and the attribute is absent
	// Range says what is wrong with a float attribute's value, "" when
	// nothing is; every float attribute a source can write has one
	// (the frontend reports it at the value).
	Range func(v float64) string
	// Omit leaves the attribute out of the normal form at zero, its
	// default: ops that do not use it print as they did before it
	// existed (rope's scaling), and a kernel reads it absent as zero.
	Omit bool
}

// positive is the range of a float attribute meaningless at zero or
// below (rope's theta, a base wavelength).
func positive(v float64) string {
	if !(v > 0) {
		return "must be positive, not " + FormatFloat(v)
	}
	return ""
}

// nonNegative is the range of an attribute that is 0 when unused.
func nonNegative(v float64) string {
	if !(v >= 0) || math.IsInf(v, 0) {
		return "must be 0 or positive and finite, not " + FormatFloat(v)
	}
	return ""
}

// ropeFreqAttrs are rope's attributes that set its frequencies.
var ropeFreqAttrs = []string{"theta", "scaling_factor", "low_freq_factor", "high_freq_factor", "original_max_positions"}

// positiveF32 is the range of a positive attribute an op computes with in
// fp32 (a norm's eps, which keeps it from dividing by zero): a value
// positive in float64 can round to 0 in fp32, or overflow.
func positiveF32(v float64) string {
	switch {
	case !(v > 0):
		return "must be positive, not " + FormatFloat(v)
	case float32(v) == 0:
		return "= " + FormatFloat(v) + " is 0 in fp32, the precision the norm computes in"
	case math.IsInf(float64(float32(v)), 0):
		return "= " + FormatFloat(v) + " is beyond the range of fp32, the precision the norm computes in"
	}
	return ""
}

// finiteF32 is the range of a factor an op multiplies by in fp32.
func finiteF32(v float64) string {
	if math.IsNaN(v) || math.IsInf(float64(float32(v)), 0) {
		return "= " + FormatFloat(v) + " is beyond the range of fp32, the precision scale multiplies in"
	}
	return ""
}

// OpError is a shape or type error found by an op's shape rule. Arg (an
// operand index, or -1) and Attr (an attribute name, or "") say which part
// of the expression is at fault, so the frontend can point at it.
type OpError struct {
	Arg  int
	Attr string
	Msg  string
}

func (e *OpError) Error() string { return e.Msg }

func argErr(i int, format string, a ...any) *OpError {
	return &OpError{Arg: i, Msg: fmt.Sprintf(format, a...)}
}

func attrErr(name, format string, a ...any) *OpError {
	return &OpError{Arg: -1, Attr: name, Msg: fmt.Sprintf(format, a...)}
}

func opErr(format string, a ...any) *OpError {
	return &OpError{Arg: -1, Msg: fmt.Sprintf(format, a...)}
}

// Type is the shape and dtype of a value.
type Type struct {
	Shape Shape
	DType DType
}

// OpInfo is one row of the op table.
type OpInfo struct {
	Name  string // spelling in the language and in printed IR
	Infix string // operator spelling for binary infix ops ("@", "+", "*")
	Arity int
	// Results is the number of values the op computes; 0 means 1. Only
	// internal ops have several (a fused backward, the optimizer step).
	Results int
	Attrs   []AttrSpec
	// Infer computes the type of each result from operand types and
	// attributes (attributes already defaulted and ordered as in Attrs).
	Infer func(args []*Value, attrs []Attr) ([]Type, *OpError)
	// Flops is the forward FLOP count of one application (a float: the
	// counts of shapes that fit in memory can still overflow an int64).
	Flops func(op *Op) float64
	// Save lists the operands backward reads (so forward keeps them
	// alive), and SaveOut whether it reads the (first) result. Params
	// among them cost nothing extra: they are model states.
	Save    []int
	SaveOut bool
	// Internal ops are made by passes, never written in source.
	Internal bool
	// TrainOnly ops make or apply a gradient (autodiff's, the
	// optimizer's, clipping's): an evaluation step leaves them out.
	TrainOnly bool
	// Backward returns the gradient of each operand given the gradient
	// dy of the result (nil where an operand has none: ids, targets).
	// Only single-result ops have one.
	Backward func(b GradBuilder, op *Op, dy *Value) []*Value
	// BackwardAll is Backward for a forward op of several results (a
	// fused one), given the gradient of each result (nil for a result
	// nothing differentiable reads; never all nil).
	BackwardAll func(b GradBuilder, op *Op, dys []*Value) []*Value
	// LossGrad, for an op a step's loss may be (cross-entropy, plain or
	// fused with the head's matmul), returns the gradient of each
	// operand given the loss's weight in the step (autodiff's seed; nil
	// for targets).
	LossGrad func(b GradBuilder, op *Op, weight float64) []*Value
	// Workspace is the bytes of scratch memory one kernel of the op
	// holds while it runs, given its argument shapes (nil: none beyond
	// its operands and results); the simulator counts it in the peak.
	Workspace func(args [][]int64) int64
	// IDs, for an op that reads token ids (class indices), says which
	// operand holds them and where their bound is; nil for the others.
	IDs *IDOperand
	// Traffic is the elements a kernel reads and writes given its
	// argument shapes, where it is not TrafficElems' default (opfacts.go).
	Traffic func(args [][]int64) int64
	// GEMM, for a matrix product, gives its M, K and N from its two
	// operands' shapes; nil for the other ops.
	GEMM func(a, b []int64) GEMM
	// Fusion is how the op's kernel may fuse with its neighbours.
	Fusion Fusion
	// Decays says the op is an optimizer step on a stage's flat shard,
	// decaying the elements its stage's layout says (instruction.Stage).
	Decays bool
}

// IDOperand locates an op's token ids: argument Arg holds them, and they
// must be below dimension Dim (negative: counted from the end) of the
// shape of argument From, or of the result when From is -1 (the vocab of
// an embedding table, the classes of logits).
type IDOperand struct{ Arg, From, Dim int }

// Bound is the exclusive bound of the ids, given the shapes of the
// op's arguments and of its (first) result.
func (d *IDOperand) Bound(args [][]int64, result []int64) int64 {
	s := result
	if d.From >= 0 {
		s = args[d.From]
	}
	i := d.Dim
	if i < 0 {
		i += len(s)
	}
	return s[i]
}

// IsLoss says whether a step's loss may be an op of this kind (it has a
// LossGrad).
func (info *OpInfo) IsLoss() bool { return info.LossGrad != nil }

// NumResults is the number of values an op of this kind computes.
func (info *OpInfo) NumResults() int {
	if info.Results == 0 {
		return 1
	}
	return info.Results
}

var opTable [numOps]OpInfo

func init() {
	eps := AttrSpec{Name: "eps", Type: AttrFloat, Default: AttrVal{Type: AttrFloat, Float: 1e-5}, Range: positiveF32}
	opTable = [numOps]OpInfo{
		Embed: {Name: "embed", Arity: 2, Fusion: FuseGather, Traffic: embedTraffic, Infer: one(inferEmbed), Save: []int{0}, IDs: &IDOperand{Arg: 0, From: 1, Dim: 0},
			Flops: func(*Op) float64 { return 0 }}, // a gather, no arithmetic
		MatMul: {Name: "matmul", Infix: "@", Arity: 2, Fusion: FuseGEMM, GEMM: gemmMatMul, Traffic: gemmTraffic(MatMul), Infer: one(inferMatMul), Save: []int{0, 1},
			Flops: func(op *Op) float64 {
				k := float64(op.Args[1].Shape[0])
				return 2 * float64(op.Out().Shape.NumElements()) * k
			}},
		RMSNorm: {Name: "rmsnorm", Arity: 2, Fusion: FuseRow, Attrs: []AttrSpec{eps}, Infer: one(inferNorm), Save: []int{0, 1},
			Flops: elementwise(4)}, // square, mean, scale, weight
		// Backward reads x and w, never the bias.
		LayerNorm: {Name: "layernorm", Arity: 3, Fusion: FuseRow, Attrs: []AttrSpec{eps}, Infer: one(inferNorm), Save: []int{0, 1},
			Flops: elementwise(7)},
		RoPE: {Name: "rope", Arity: 1, Fusion: FuseRow, Attrs: []AttrSpec{
			{Name: "heads", Type: AttrInt, Required: true},
			{Name: "theta", Type: AttrFloat, Default: AttrVal{Type: AttrFloat, Float: 10000}, Range: positive},
			// Llama 3's scaling of the frequencies (Hugging Face's
			// rope_scaling of rope_type "llama3"; kernels.RoPEFreq):
			// none without a factor.
			{Name: "scaling_factor", Type: AttrFloat, Omit: true, Range: nonNegative},
			{Name: "low_freq_factor", Type: AttrFloat, Omit: true, Range: nonNegative},
			{Name: "high_freq_factor", Type: AttrFloat, Omit: true, Range: nonNegative},
			{Name: "original_max_positions", Type: AttrInt, Omit: true},
		}, Infer: one(inferRoPE), Flops: elementwise(3)}, // linear: backward rotates back, saves nothing
		Attention: {Name: "attention", Arity: 3, Fusion: FuseAttention, Attrs: []AttrSpec{
			{Name: "heads", Type: AttrInt, Required: true},
			{Name: "kv_heads", Type: AttrInt}, // defaults to heads
			{Name: "causal", Type: AttrBool, Default: AttrVal{Type: AttrBool}},
		}, Infer: one(inferAttention), Flops: attentionFlops,
			// Flash-attention style: q, k, v and the output (plus a
			// per-row log-sum-exp, negligible), never the s x s scores.
			Save: []int{0, 1, 2}, SaveOut: true},
		SiLU: {Name: "silu", Arity: 1, Fusion: FuseElementwise, Infer: one(inferUnary), Flops: elementwise(4), Save: []int{0}},
		GELU: {Name: "gelu", Arity: 1, Fusion: FuseElementwise, Infer: one(inferUnary), Flops: elementwise(8), Save: []int{0}},
		Add:  {Name: "add", Infix: "+", Arity: 2, Fusion: FuseElementwise, Infer: one(inferBroadcast), Flops: elementwise(1)},
		Mul:  {Name: "mul", Infix: "*", Arity: 2, Fusion: FuseElementwise, Infer: one(inferBroadcast), Flops: elementwise(1), Save: []int{0, 1}},
		CrossEntropy: {Name: "cross_entropy", Arity: 2, Fusion: FuseRow, Traffic: argsOnly, Infer: one(inferCrossEntropy), Flops: crossEntropyFlops, Save: []int{0, 1},
			IDs: &IDOperand{Arg: 1, From: 0, Dim: -1}},
		// transpose(w) of a 2-D tensor, for a weight read both ways (an
		// embedding table tied to the output head); data movement only.
		// gelu_tanh(x) = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), what
		// PyTorch's gelu(x, approximate="tanh") computes (NUMERICS.md).
		GELUTanh: {Name: "gelu_tanh", Arity: 1, Fusion: FuseElementwise, Infer: one(inferUnary), Flops: elementwise(10), Save: []int{0}},
		// scale(x, by=C): each element times C rounded to fp32, in fp32,
		// as PyTorch multiplies an fp32 tensor by a Python float. Linear:
		// its backward scales dy by the same C and saves nothing.
		Scale: {Name: "scale", Arity: 1, Fusion: FuseElementwise, Attrs: []AttrSpec{{Name: "by", Type: AttrFloat, Required: true, Range: finiteF32}},
			Infer: one(inferUnary), Flops: elementwise(1)},
		Transpose: {Name: "transpose", Arity: 1, Fusion: FuseNone, Infer: one(inferTranspose), Flops: func(*Op) float64 { return 0 }},
	}
	initGradOps()
	initTPOps()
}

// OpKinds lists every op kind in table order.
func OpKinds() []OpKind {
	kinds := make([]OpKind, 0, numOps-1)
	for k := InvalidOp + 1; k < numOps; k++ {
		kinds = append(kinds, k)
	}
	return kinds
}

// Info returns the op table row of k.
func (k OpKind) Info() *OpInfo {
	if k <= InvalidOp || k >= numOps {
		panic(fmt.Sprintf("ir: invalid op kind %d", int(k)))
	}
	return &opTable[k]
}

func (k OpKind) String() string {
	if k <= InvalidOp || k >= numOps {
		return fmt.Sprintf("op(%d)", int(k))
	}
	return opTable[k].Name
}

// LookupOp finds an op by its name ("rmsnorm", "matmul", ...).
func LookupOp(name string) (OpKind, bool) {
	for k := InvalidOp + 1; k < numOps; k++ {
		if opTable[k].Name == name {
			return k, true
		}
	}
	return InvalidOp, false
}

// LookupInfix finds a binary op by its operator ("@", "+", "*").
func LookupInfix(sym string) (OpKind, bool) {
	for k := InvalidOp + 1; k < numOps; k++ {
		if opTable[k].Infix != "" && opTable[k].Infix == sym {
			return k, true
		}
	}
	return InvalidOp, false
}

// OpNames lists the source-language ops' names in table order.
func OpNames() []string {
	var names []string
	for k := InvalidOp + 1; k < numOps; k++ {
		if !opTable[k].Internal {
			names = append(names, opTable[k].Name)
		}
	}
	return names
}

// NormalizeAttrs checks a call's attributes against the op's spec and
// returns them in spec order with defaults filled in. Each given attribute
// must be declared, appear once and have the declared type (an integer is
// accepted where a number is expected).
func NormalizeAttrs(k OpKind, given []Attr) ([]Attr, *OpError) {
	info := k.Info()
	out := make([]Attr, 0, len(info.Attrs))
	for i, a := range given {
		found := false
		for _, s := range info.Attrs {
			if s.Name == a.Name {
				found = true
			}
		}
		if !found {
			return nil, attrErr(a.Name, "%s has no attribute %q%s", info.Name, a.Name, attrList(info))
		}
		for _, b := range given[:i] {
			if b.Name == a.Name {
				return nil, attrErr(a.Name, "attribute %q given twice", a.Name)
			}
		}
	}
	for _, s := range info.Attrs {
		var val *AttrVal
		for i := range given {
			if given[i].Name == s.Name {
				val = &given[i].Val
			}
		}
		switch {
		case val == nil && s.Required:
			return nil, opErr("%s needs attribute %s=", info.Name, s.Name)
		case val == nil && s.Omit:
		case val == nil && s.Name == "kv_heads":
			// Defaults to heads, written out so that one op has one
			// printed form.
			if h, ok := attrInt(given, "heads"); ok {
				out = append(out, Attr{Name: s.Name, Val: AttrVal{Type: AttrInt, Int: h}})
			}
		case val == nil:
			out = append(out, Attr{Name: s.Name, Val: s.Default})
		default:
			v := *val
			if s.Type == AttrFloat && v.Type == AttrInt {
				v = AttrVal{Type: AttrFloat, Float: float64(v.Int)}
			}
			if v.Type != s.Type {
				return nil, attrErr(s.Name, "attribute %s of %s must be %s, not %s", s.Name, info.Name, s.Type, v)
			}
			if s.Omit && v == (AttrVal{Type: s.Type}) {
				continue
			}
			out = append(out, Attr{Name: s.Name, Val: v})
		}
	}
	return out, nil
}

// CheckAttrs reports whether attrs are k's attributes in normal form,
// exactly as NormalizeAttrs returns them: what a kernel instruction
// carries, so that no kernel reads a missing attribute as zero.
func CheckAttrs(k OpKind, attrs []Attr) error {
	norm, oerr := NormalizeAttrs(k, attrs)
	if oerr != nil {
		return oerr
	}
	if !attrsEqual(attrs, norm) {
		return fmt.Errorf("attributes (%s) are not in normal form (%s)", attrString(attrs), attrString(norm))
	}
	return nil
}

func attrList(info *OpInfo) string {
	if len(info.Attrs) == 0 {
		return " (it takes none)"
	}
	s := " (it takes"
	for i, a := range info.Attrs {
		if i > 0 {
			s += ","
		}
		s += " " + a.Name
	}
	return s + ")"
}

// Infer runs k's shape rule after checking arity: the type of each
// result, in order.
func Infer(k OpKind, args []*Value, attrs []Attr) ([]Type, *OpError) {
	info := k.Info()
	if len(args) != info.Arity {
		return nil, opErr("%s takes %d operand%s, got %d", info.Name, info.Arity, plural(info.Arity), len(args))
	}
	for i, a := range args {
		if a == nil {
			return nil, argErr(i, "operand %d of %s is missing", i, info.Name)
		}
	}
	types, oerr := info.Infer(args, attrs)
	if oerr == nil && len(types) != info.NumResults() {
		// A shape rule disagreeing with its row is a table bug.
		panic(fmt.Sprintf("ir: %s's shape rule gives %d results, the table says %d", info.Name, len(types), info.NumResults()))
	}
	return types, oerr
}

// NewOp makes an op of kind on args, the way every pass builds one: the
// attributes are normalised against the op's spec (a misspelt, repeated,
// mistyped or missing required attribute is an error, never a silent
// default) and each result's type comes from the shape rule. The results
// are fresh values of role Activation, with no name, layer -1 and the
// op's position; the caller names them and adds them to a graph.
func NewOp(kind OpKind, args []*Value, attrs []Attr, pos Pos) (*Op, error) {
	if kind <= InvalidOp || kind >= numOps {
		return nil, fmt.Errorf("invalid op kind %d", int(kind))
	}
	norm, oerr := NormalizeAttrs(kind, attrs)
	if oerr != nil {
		return nil, fmt.Errorf("%s: %s", kind, oerr.Msg)
	}
	types, oerr := Infer(kind, args, norm)
	if oerr != nil {
		return nil, fmt.Errorf("%s: %s", kind, oerr.Msg)
	}
	op := &Op{Kind: kind, Args: args, Attrs: norm, Pos: pos}
	for _, t := range types {
		op.Results = append(op.Results, &Value{Shape: t.Shape, DType: t.DType, Role: Activation, Def: op, Layer: -1, Pos: pos})
	}
	return op, nil
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func attrInt(attrs []Attr, name string) (int64, bool) {
	for _, a := range attrs {
		if a.Name == name {
			return a.Val.Int, true
		}
	}
	return 0, false
}

func needFloat(args []*Value, idx ...int) *OpError {
	for _, i := range idx {
		if !args[i].DType.IsFloat() {
			return argErr(i, "operand %s must be a float tensor, not %s", args[i].Name, args[i].DType)
		}
	}
	return nil
}

func inferEmbed(args []*Value, _ []Attr) (Shape, DType, *OpError) {
	ids, table := args[0], args[1]
	if ids.DType != I32 {
		return nil, 0, argErr(0, "embed ids %s must be i32, not %s", ids.Name, ids.DType)
	}
	if len(table.Shape) != 2 {
		return nil, 0, argErr(1, "embed table %s must be 2-D [vocab, d], not %s", table.Name, table.Shape)
	}
	if err := needFloat(args, 1); err != nil {
		return nil, 0, err
	}
	out := append(append(Shape{}, ids.Shape...), table.Shape[1])
	return out, table.DType, nil
}

func inferMatMul(args []*Value, _ []Attr) (Shape, DType, *OpError) {
	a, b := args[0], args[1]
	if err := needFloat(args, 0, 1); err != nil {
		return nil, 0, err
	}
	if len(a.Shape) < 1 {
		return nil, 0, argErr(0, "matmul of a scalar %s", a.Name)
	}
	if len(b.Shape) != 2 {
		return nil, 0, argErr(1, "right operand of @ must be 2-D [in, out], not %s", b.Shape)
	}
	if k := a.Shape[len(a.Shape)-1]; k != b.Shape[0] {
		return nil, 0, opErr("matmul inner dimensions differ: %s @ %s (%d != %d)", a.Shape, b.Shape, k, b.Shape[0])
	}
	if a.DType != b.DType {
		return nil, 0, opErr("matmul of %s and %s", a.DType, b.DType)
	}
	out := append(append(Shape{}, a.Shape[:len(a.Shape)-1]...), b.Shape[1])
	return out, a.DType, nil
}

func inferNorm(args []*Value, _ []Attr) (Shape, DType, *OpError) {
	x := args[0]
	if err := needFloat(args, 0); err != nil {
		return nil, 0, err
	}
	if len(x.Shape) < 1 {
		return nil, 0, argErr(0, "cannot normalise scalar %s", x.Name)
	}
	d := x.Shape[len(x.Shape)-1]
	for i, w := range args[1:] {
		if len(w.Shape) != 1 || w.Shape[0] != d {
			return nil, 0, argErr(i+1, "norm parameter %s is %s, want [%d] (the last dim of %s)", w.Name, w.Shape, d, x.Shape)
		}
		if err := needFloat(args, i+1); err != nil {
			return nil, 0, err
		}
	}
	return append(Shape{}, x.Shape...), x.DType, nil
}

func inferRoPE(args []*Value, attrs []Attr) (Shape, DType, *OpError) {
	x := args[0]
	if err := needFloat(args, 0); err != nil {
		return nil, 0, err
	}
	if len(x.Shape) != 3 {
		return nil, 0, argErr(0, "rope input must be [batch, seq, dim], not %s", x.Shape)
	}
	heads, _ := attrInt(attrs, "heads")
	d := x.Shape[2]
	if heads <= 0 {
		return nil, 0, attrErr("heads", "heads must be positive, not %d", heads)
	}
	if d%heads != 0 {
		return nil, 0, attrErr("heads", "heads %d does not divide the dim %d", heads, d)
	}
	if hd := d / heads; hd%2 != 0 {
		return nil, 0, attrErr("heads", "rope needs an even head dim, got %d (%d / %d heads)", hd, d, heads)
	}
	if err := checkRoPEScaling(attrs); err != nil {
		return nil, 0, err
	}
	return append(Shape{}, x.Shape...), x.DType, nil
}

// checkRoPEScaling checks rope's scaling attributes: none, or a factor
// with low_freq_factor < high_freq_factor and original_max_positions,
// all positive.
func checkRoPEScaling(attrs []Attr) *OpError {
	f := RoPEScalingOf(attrs)
	switch {
	case f.Factor == 0 && (f.Low != 0 || f.High != 0 || f.Original != 0):
		return attrErr("scaling_factor", "rope's low_freq_factor, high_freq_factor and original_max_positions need a scaling_factor")
	case f.Factor == 0:
		return nil
	case !(f.Low > 0 && f.High > f.Low):
		return attrErr("low_freq_factor", "rope's scaling needs 0 < low_freq_factor < high_freq_factor, not %s and %s", FormatFloat(f.Low), FormatFloat(f.High))
	case f.Original <= 0:
		return attrErr("original_max_positions", "rope's scaling needs original_max_positions, positive, not %d", f.Original)
	}
	return nil
}

// RoPEScaling is rope's frequencies as its attributes set them: theta,
// and Llama 3's scaling (Factor 0: none).
type RoPEScaling struct {
	Theta, Factor, Low, High float64
	Original                 int
}

// RoPEScalingOf reads a rope op's attributes (rope, rope_grad, rope_qk,
// rope_qk_grad); absent ones are zero.
func RoPEScalingOf(attrs []Attr) RoPEScaling {
	return RoPEScalingFrom(func(name string) AttrVal {
		v, _ := attrByName(attrs, name)
		return v
	})
}

// RoPEScalingFrom is RoPEScalingOf through a lookup of attributes by
// name (zero for an absent one).
func RoPEScalingFrom(attr func(name string) AttrVal) RoPEScaling {
	return RoPEScaling{Theta: attr("theta").Float, Factor: attr("scaling_factor").Float, Low: attr("low_freq_factor").Float,
		High: attr("high_freq_factor").Float, Original: int(attr("original_max_positions").Int)}
}

// attrByName is the named attribute of attrs and whether it is there.
func attrByName(attrs []Attr, name string) (AttrVal, bool) {
	for _, a := range attrs {
		if a.Name == name {
			return a.Val, true
		}
	}
	return AttrVal{}, false
}

func inferAttention(args []*Value, attrs []Attr) (Shape, DType, *OpError) {
	q, k, v := args[0], args[1], args[2]
	if err := needFloat(args, 0, 1, 2); err != nil {
		return nil, 0, err
	}
	for i, t := range args {
		if len(t.Shape) != 3 {
			return nil, 0, argErr(i, "attention operand %s must be [batch, seq, dim], not %s", t.Name, t.Shape)
		}
	}
	if !k.Shape.Equal(v.Shape) {
		return nil, 0, argErr(2, "attention keys %s and values %s differ in shape", k.Shape, v.Shape)
	}
	if q.Shape[0] != k.Shape[0] || q.Shape[1] != k.Shape[1] {
		return nil, 0, argErr(1, "attention queries %s and keys %s differ in batch or seq", q.Shape, k.Shape)
	}
	heads, _ := attrInt(attrs, "heads")
	kvHeads, ok := attrInt(attrs, "kv_heads")
	if !ok {
		kvHeads = heads
	}
	d := q.Shape[2]
	if heads <= 0 {
		return nil, 0, attrErr("heads", "heads must be positive, not %d", heads)
	}
	if d%heads != 0 {
		return nil, 0, attrErr("heads", "heads %d does not divide the dim %d", heads, d)
	}
	if kvHeads <= 0 {
		return nil, 0, attrErr("kv_heads", "kv_heads must be positive, not %d", kvHeads)
	}
	if heads%kvHeads != 0 {
		return nil, 0, attrErr("kv_heads", "kv_heads %d does not divide heads %d", kvHeads, heads)
	}
	if hd := d / heads; k.Shape[2] != kvHeads*hd {
		return nil, 0, argErr(1, "attention keys have dim %d, want kv_heads x head dim = %d x %d = %d", k.Shape[2], kvHeads, hd, kvHeads*hd)
	}
	if q.DType != k.DType || q.DType != v.DType {
		return nil, 0, opErr("attention of mixed dtypes %s, %s, %s", q.DType, k.DType, v.DType)
	}
	return append(Shape{}, q.Shape...), q.DType, nil
}

func inferUnary(args []*Value, _ []Attr) (Shape, DType, *OpError) {
	if err := needFloat(args, 0); err != nil {
		return nil, 0, err
	}
	return append(Shape{}, args[0].Shape...), args[0].DType, nil
}

func inferBroadcast(args []*Value, _ []Attr) (Shape, DType, *OpError) {
	a, b := args[0], args[1]
	if err := needFloat(args, 0, 1); err != nil {
		return nil, 0, err
	}
	bcast := len(b.Shape) == 1 && len(a.Shape) >= 1 && b.Shape[0] == a.Shape[len(a.Shape)-1]
	if !a.Shape.Equal(b.Shape) && !bcast {
		return nil, 0, opErr("operand shapes differ: %s and %s", a.Shape, b.Shape)
	}
	if a.DType != b.DType {
		return nil, 0, opErr("operands of mixed dtypes %s and %s", a.DType, b.DType)
	}
	return append(Shape{}, a.Shape...), a.DType, nil
}

func inferTranspose(args []*Value, _ []Attr) (Shape, DType, *OpError) {
	x := args[0]
	if err := needFloat(args, 0); err != nil {
		return nil, 0, err
	}
	if len(x.Shape) != 2 {
		return nil, 0, argErr(0, "transpose takes a 2-D tensor, not %s", x.Shape)
	}
	return Shape{x.Shape[1], x.Shape[0]}, x.DType, nil
}

func inferCrossEntropy(args []*Value, _ []Attr) (Shape, DType, *OpError) {
	logits, targets := args[0], args[1]
	if err := needFloat(args, 0); err != nil {
		return nil, 0, err
	}
	if targets.DType != I32 {
		return nil, 0, argErr(1, "cross_entropy targets %s must be i32, not %s", targets.Name, targets.DType)
	}
	if len(logits.Shape) < 2 {
		return nil, 0, argErr(0, "cross_entropy logits must have a class dim, got %s", logits.Shape)
	}
	want := logits.Shape[:len(logits.Shape)-1]
	if !targets.Shape.Equal(want) {
		return nil, 0, argErr(1, "cross_entropy targets are %s, want %s (logits %s without the class dim)", targets.Shape, want, logits.Shape)
	}
	return Shape{}, F32, nil
}

// one adapts a single-result shape rule to the table's form.
func one(f func([]*Value, []Attr) (Shape, DType, *OpError)) func([]*Value, []Attr) ([]Type, *OpError) {
	return func(args []*Value, attrs []Attr) ([]Type, *OpError) {
		s, dt, err := f(args, attrs)
		if err != nil {
			return nil, err
		}
		return []Type{{s, dt}}, nil
	}
}

// elementwise counts perElem FLOPs per element of the (first) result.
func elementwise(perElem float64) func(op *Op) float64 {
	return func(op *Op) float64 { return perElem * float64(op.Out().Shape.NumElements()) }
}

// attentionFlops counts QK^T and the weighted sum of V over the full s x s
// score matrix (PaLM's convention: the causal mask is not discounted).
func attentionFlops(op *Op) float64 {
	q := op.Args[0].Shape
	return 4 * float64(q[0]) * float64(q[1]) * float64(q[1]) * float64(q[2])
}

// inferLinearCE checks linear_cross_entropy's (h, w, targets): h @ w's
// shape rule, and targets as cross_entropy's of the logits h @ w would
// be. The result is the f32 loss.
func inferLinearCE(args []*Value, attrs []Attr) (Shape, DType, *OpError) {
	logits, dt, err := inferMatMul(args[:2], attrs)
	if err != nil {
		return nil, 0, err
	}
	s, dt, err := inferCrossEntropy([]*Value{{Name: "h @ w", Shape: logits, DType: dt}, args[2]}, attrs)
	if err != nil && err.Arg == 1 {
		err.Arg = 2
	}
	return s, dt, err
}

// linearCEFlops is linear_cross_entropy's products (gemms of them, each
// 2·rows·d·vocab) and its softmax over the logits.
func linearCEFlops(op *Op, gemms float64) float64 {
	h, w := op.Args[0].Shape, op.Args[1].Shape
	rows, d, vocab := float64(h.NumElements()/h[len(h)-1]), float64(w[0]), float64(w[1])
	return gemms*2*rows*d*vocab + 5*rows*vocab
}

func crossEntropyFlops(op *Op) float64 {
	return 5 * float64(op.Args[0].Shape.NumElements())
}

// FormatFloat prints a float in its shortest exact form, so printing and
// parsing round-trip.
func FormatFloat(f float64) string {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return fmt.Sprint(f)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}
