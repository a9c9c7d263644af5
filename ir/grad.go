package ir

// The backward and optimizer rows of the op table, and each forward op's
// backward rule. A rule builds its operands' gradients from ops of the
// table through a GradBuilder, so autodiff itself knows no op.

// GradBuilder makes the ops of a backward rule.
type GradBuilder interface {
	// Apply makes op kind on args with attrs and returns its results in
	// order. The attributes are normalised against the op's spec
	// (defaults may be omitted); one the spec does not declare, or a
	// missing required one, is a compiler bug and stops the pass.
	Apply(kind OpKind, args []*Value, attrs ...Attr) []*Value
}

// apply makes a single-result op and returns its result.
func apply(b GradBuilder, kind OpKind, args []*Value, attrs ...Attr) *Value {
	return b.Apply(kind, args, attrs...)[0]
}

// IntAttr, FloatAttr and BoolAttr build attributes.
func IntAttr(name string, v int64) Attr { return Attr{name, AttrVal{Type: AttrInt, Int: v}} }

func FloatAttr(name string, v float64) Attr { return Attr{name, AttrVal{Type: AttrFloat, Float: v}} }

func BoolAttr(name string, v bool) Attr { return Attr{name, AttrVal{Type: AttrBool, Bool: v}} }

// sameAttrs passes the forward op's attributes on to its backward ops.
func sameAttrs(op *Op) []Attr { return append([]Attr(nil), op.Attrs...) }

// A shape rule of one result, combined into a row's rule by results.
type rule func(args []*Value, attrs []Attr) (Shape, DType, *OpError)

func results(rules ...rule) func([]*Value, []Attr) ([]Type, *OpError) {
	return func(args []*Value, attrs []Attr) ([]Type, *OpError) {
		out := make([]Type, len(rules))
		for i, r := range rules {
			s, dt, err := r(args, attrs)
			if err != nil {
				return nil, err
			}
			out[i] = Type{s, dt}
		}
		return out, nil
	}
}

// like(i) is operand i's type.
func like(i int) rule {
	return func(args []*Value, _ []Attr) (Shape, DType, *OpError) {
		return append(Shape{}, args[i].Shape...), args[i].DType, nil
	}
}

// lastDim(i) is a vector of operand i's last dim, of its dtype.
func lastDim(i int) rule {
	return func(args []*Value, _ []Attr) (Shape, DType, *OpError) {
		s := args[i].Shape
		if len(s) == 0 {
			return nil, 0, argErr(i, "operand %s is a scalar", args[i].Name)
		}
		return Shape{s[len(s)-1]}, args[i].DType, nil
	}
}

// normGrad checks a norm backward's operands (x, w, dy): dy shaped like x,
// w a vector of x's last dim. Its result is dx.
func normGrad(args []*Value, _ []Attr) (Shape, DType, *OpError) {
	x, w, dy := args[0], args[1], args[2]
	if len(x.Shape) == 0 {
		return nil, 0, argErr(0, "cannot normalise scalar %s", x.Name)
	}
	if !dy.Shape.Equal(x.Shape) {
		return nil, 0, argErr(2, "gradient %s is %s, want %s like %s", dy.Name, dy.Shape, x.Shape, x.Name)
	}
	if d := x.Shape[len(x.Shape)-1]; len(w.Shape) != 1 || w.Shape[0] != d {
		return nil, 0, argErr(1, "norm parameter %s is %s, want [%d]", w.Name, w.Shape, d)
	}
	return append(Shape{}, x.Shape...), x.DType, nil
}

// addNorm checks add_rmsnorm's operands (x, r, w): r like x, w a vector
// of x's last dim. Both results are like x.
func addNorm(args []*Value, attrs []Attr) (Shape, DType, *OpError) {
	x, r := args[0], args[1]
	if !r.Shape.Equal(x.Shape) || r.DType != x.DType {
		return nil, 0, argErr(1, "operand %s is %s %s, want %s %s like %s", r.Name, r.DType, r.Shape, x.DType, x.Shape, x.Name)
	}
	return inferNorm([]*Value{x, args[2]}, attrs)
}

// addNormGrad checks add_rmsnorm_grad's operands (y, w, dh, dy): dy like
// y, the rest as rmsnorm_grad's. Its result is dx.
func addNormGrad(args []*Value, attrs []Attr) (Shape, DType, *OpError) {
	if y, dy := args[0], args[3]; !dy.Shape.Equal(y.Shape) {
		return nil, 0, argErr(3, "gradient %s is %s, want %s like %s", dy.Name, dy.Shape, y.Shape, y.Name)
	}
	return normGrad(args[:3], attrs)
}

// ropeQK(i) is rope_qk's result i (and rope_qk_grad's): rope's shape
// rule on operand i, q's (0) with heads, k's (1) with kv_heads, the two
// of one dtype, batch and sequence (an attention's q and k).
func ropeQK(i int) rule {
	return func(args []*Value, attrs []Attr) (Shape, DType, *OpError) {
		q, k := args[0], args[1]
		if q.DType != k.DType {
			return nil, 0, opErr("rope of q and k of mixed dtypes %s and %s", q.DType, k.DType)
		}
		if len(q.Shape) == 3 && len(k.Shape) == 3 && (q.Shape[0] != k.Shape[0] || q.Shape[1] != k.Shape[1]) {
			return nil, 0, argErr(1, "rope of q %s and k %s of different batch or seq", q.Shape, k.Shape)
		}
		heads, _ := attrInt(attrs, "heads")
		if i == 1 {
			heads, _ = attrInt(attrs, "kv_heads")
		}
		s, dt, err := inferRoPE(args[i:i+1], []Attr{IntAttr("heads", heads)})
		switch {
		case err != nil && err.Arg == 0:
			err.Arg = i
		case err != nil && i == 1:
			err.Attr = "kv_heads"
		}
		return s, dt, err
	}
}

// castTo is x's shape in the dtype attribute's type.
func castTo(x *Value, attrs []Attr) (Shape, DType, *OpError) {
	d, _ := attrInt(attrs, "dtype")
	if dt := DType(d); d < int64(BF16) || d > int64(F32) || !dt.IsFloat() {
		return nil, 0, attrErr("dtype", "cast to dtype code %d (2 bf16, 3 f16, 4 f32)", d)
	}
	return append(Shape{}, x.Shape...), DType(d), nil
}

// adamw checks (weights, m, v, grad): one shape, fp32 states. Each result
// is an fp32 tensor of that shape.
func adamw(args []*Value, _ []Attr) (Shape, DType, *OpError) {
	for j, a := range args {
		if !a.Shape.Equal(args[0].Shape) {
			return nil, 0, argErr(j, "operand %s is %s, want %s", a.Name, a.Shape, args[0].Shape)
		}
		if j < 3 && a.DType != F32 {
			return nil, 0, argErr(j, "optimizer state %s must be f32, not %s", a.Name, a.DType)
		}
	}
	if err := needFloat(args, 3); err != nil {
		return nil, 0, err
	}
	return append(Shape{}, args[0].Shape...), F32, nil
}

// gated is the shape rule of a gated activation act(a) * b: a and b
// of one shape and dtype.
func gated(name string) rule {
	return func(args []*Value, _ []Attr) (Shape, DType, *OpError) {
		if err := needFloat(args, 0, 1); err != nil {
			return nil, 0, err
		}
		if !args[0].Shape.Equal(args[1].Shape) || args[0].DType != args[1].DType {
			return nil, 0, opErr("%s of %s %s and %s %s (one shape and dtype)", name, args[0].DType, args[0].Shape, args[1].DType, args[1].Shape)
		}
		return append(Shape{}, args[0].Shape...), args[0].DType, nil
	}
}

func initGradOps() {
	eps := AttrSpec{Name: "eps", Type: AttrFloat, Default: AttrVal{Type: AttrFloat, Float: 1e-5}}
	ropeAttrs := opTable[RoPE].Attrs
	// rope_qk's: q's heads, k's kv_heads, their one theta.
	ropeQKSpec := append([]AttrSpec{ropeAttrs[0], {Name: "kv_heads", Type: AttrInt, Required: true}}, ropeAttrs[1:]...)
	// rope's 3 FLOPs an element, of both results (elementwise counts
	// the first's alone).
	ropeQKFlops := func(op *Op) float64 {
		return 3 * float64(op.Results[0].Shape.NumElements()+op.Results[1].Shape.NumElements())
	}
	attnAttrs := []AttrSpec{
		{Name: "heads", Type: AttrInt, Required: true},
		{Name: "kv_heads", Type: AttrInt, Required: true},
		{Name: "causal", Type: AttrBool, Default: AttrVal{Type: AttrBool}},
	}
	required := func(names ...string) []AttrSpec {
		specs := make([]AttrSpec, len(names))
		for i, n := range names {
			specs[i] = AttrSpec{Name: n, Type: AttrFloat, Required: true}
		}
		return specs
	}
	// Backward FLOPs: matmul gradients are matmuls; attention's backward
	// recomputes the scores, about 2.5x its forward.
	mm := func(op *Op) float64 {
		return 2 * float64(op.Out().Shape.NumElements()) * float64(op.Args[0].Shape[len(op.Args[0].Shape)-1])
	}
	mmB := func(op *Op) float64 {
		return 2 * float64(op.Args[0].Shape.NumElements()) * float64(op.Out().Shape[1])
	}
	attn := func(op *Op) float64 {
		q := op.Args[0].Shape
		return 10 * float64(q[0]) * float64(q[1]) * float64(q[1]) * float64(q[2])
	}
	internal := func(info OpInfo) OpInfo { info.Internal = true; return info }
	rows := map[OpKind]OpInfo{
		EmbedGrad: {TrainOnly: true, Name: "embed_grad", Arity: 2, Fusion: FuseGather, Traffic: embedGradTraffic, Attrs: []AttrSpec{{Name: "vocab", Type: AttrInt, Required: true}}, IDs: &IDOperand{Arg: 0, From: -1, Dim: 0},
			Infer: results(func(args []*Value, attrs []Attr) (Shape, DType, *OpError) {
				v, _ := attrInt(attrs, "vocab")
				dy := args[1].Shape
				if len(dy) == 0 {
					return nil, 0, argErr(1, "operand %s is a scalar", args[1].Name)
				}
				return Shape{v, dy[len(dy)-1]}, args[1].DType, nil
			}), Flops: elementwise(1)},
		MatMulGradA: {TrainOnly: true, Name: "matmul_grad_a", Arity: 2, Fusion: FuseGEMM, GEMM: gemmMatMulGradA, Traffic: gemmTraffic(MatMulGradA), Flops: mm,
			Infer: results(func(args []*Value, _ []Attr) (Shape, DType, *OpError) {
				dy, b := args[0].Shape, args[1].Shape
				if len(dy) == 0 || len(b) != 2 || dy[len(dy)-1] != b[1] {
					return nil, 0, opErr("matmul_grad_a of %s and %s", dy, b)
				}
				return append(append(Shape{}, dy[:len(dy)-1]...), b[0]), args[0].DType, nil
			})},
		MatMulGradB: {TrainOnly: true, Name: "matmul_grad_b", Arity: 2, Fusion: FuseGEMM, GEMM: gemmMatMulGradB, Traffic: gemmTraffic(MatMulGradB), Flops: mmB,
			Infer: results(func(args []*Value, _ []Attr) (Shape, DType, *OpError) {
				a, dy := args[0].Shape, args[1].Shape
				if len(a) == 0 || len(a) != len(dy) || !a[:len(a)-1].Equal(dy[:len(dy)-1]) {
					return nil, 0, opErr("matmul_grad_b of %s and %s", a, dy)
				}
				return Shape{a[len(a)-1], dy[len(dy)-1]}, args[1].DType, nil
			})},
		// The norms' backward computes every gradient in one pass over
		// the rows: dx, dw (and layernorm's db, the row sum of dy).
		RMSNormGrad: {TrainOnly: true, Name: "rmsnorm_grad", Arity: 3, Results: 2, Fusion: FuseRow, Traffic: plusResults(0, 1), Attrs: []AttrSpec{eps},
			Infer: results(normGrad, lastDim(0)), Flops: elementwise(12)},
		LayerNormGrad: {TrainOnly: true, Name: "layernorm_grad", Arity: 3, Results: 3, Fusion: FuseRow, Traffic: plusResults(0, 1, 1), Attrs: []AttrSpec{eps},
			Infer: results(normGrad, lastDim(0), lastDim(2)), Flops: elementwise(19)},
		SumRows:  {TrainOnly: true, Name: "sum_rows", Arity: 1, Fusion: FuseRow, Traffic: sumRowsTraffic, Infer: results(lastDim(0)), Flops: elementwise(1)},
		RoPEGrad: {TrainOnly: true, Name: "rope_grad", Arity: 1, Fusion: FuseRow, Attrs: ropeAttrs, Infer: results(like(0)), Flops: elementwise(3)},
		// Flash-attention style: one pass gives all three gradients.
		AttentionGrad: {TrainOnly: true, Name: "attention_grad", Arity: 5, Results: 3, Fusion: FuseAttention, Traffic: plusResults(0, 1, 2), Attrs: attnAttrs,
			Infer: results(like(0), like(1), like(2)), Flops: attn},
		SiLUGrad: {TrainOnly: true, Name: "silu_grad", Arity: 2, Fusion: FuseElementwise, Infer: results(like(0)), Flops: elementwise(6)},
		GELUGrad: {TrainOnly: true, Name: "gelu_grad", Arity: 2, Fusion: FuseElementwise, Infer: results(like(0)), Flops: elementwise(10)},
		// swiglu(a, b) = silu(a) * b in one pass (passes' fuse): a and b
		// of one shape; backward reads both and computes silu(a) again,
		// so silu(a) is never stored.
		SwiGLU: {Name: "swiglu", Arity: 2, Fusion: FuseElementwise, Save: []int{0, 1}, Flops: elementwise(5),
			Infer: results(gated("swiglu"))},
		SwiGLUGrad: {TrainOnly: true, Name: "swiglu_grad", Arity: 3, Results: 2, Fusion: FuseElementwise, Traffic: plusResults(0, 1),
			Infer: results(like(0), like(1)), Flops: elementwise(11)},
		// geglu_tanh(a, b) = gelu_tanh(a) * b, swiglu's twin for Gemma.
		GeGLUTanh: {Name: "geglu_tanh", Arity: 2, Fusion: FuseElementwise, Save: []int{0, 1}, Flops: elementwise(11),
			Infer: results(gated("geglu_tanh"))},
		GeGLUTanhGrad: {TrainOnly: true, Name: "geglu_tanh_grad", Arity: 3, Results: 2, Fusion: FuseElementwise, Traffic: plusResults(0, 1),
			Infer: results(like(0), like(1)), Flops: elementwise(17)},
		// linear_cross_entropy(h, w, targets) = cross_entropy(h @ w,
		// targets) with the logits formed LinearCEChunk rows at a time
		// (passes' fuse): the logits, the step's largest activation, are
		// never stored whole, and backward forms each chunk again. The
		// logits are of h's dtype, as the matmul's would be.
		LinearCrossEntropy: {Name: "linear_cross_entropy", Arity: 3, Fusion: FuseGEMM, GEMM: gemmMatMul, Traffic: argsOnly, Workspace: linearCEWorkspace,
			Infer: results(inferLinearCE), Save: []int{0, 1, 2}, IDs: &IDOperand{Arg: 2, From: 1, Dim: -1},
			Flops: func(op *Op) float64 { return linearCEFlops(op, 1) }},
		LinearCrossEntropyGrad: {TrainOnly: true, Name: "linear_cross_entropy_grad", Arity: 3, Results: 2, Fusion: FuseGEMM, GEMM: gemmMatMul, Traffic: plusResults(0, 1), Workspace: linearCEWorkspace,
			Attrs: []AttrSpec{{Name: "scale", Type: AttrFloat, Required: true}}, Infer: results(like(0), like(1)), IDs: &IDOperand{Arg: 2, From: 1, Dim: -1},
			Flops: func(op *Op) float64 { return linearCEFlops(op, 3) }}, // the chunk's logits again, then dh and dw
		GELUTanhGrad: {TrainOnly: true, Name: "gelu_tanh_grad", Arity: 2, Fusion: FuseElementwise, Infer: results(like(0)), Flops: elementwise(14)},
		CrossEntropyGrad: {TrainOnly: true, Name: "cross_entropy_grad", Arity: 2, Fusion: FuseRow, Attrs: []AttrSpec{{Name: "scale", Type: AttrFloat, Required: true}}, Infer: results(like(0)), Flops: elementwise(5),
			IDs: &IDOperand{Arg: 1, From: 0, Dim: -1}},
		// y = x + r and h = rmsnorm(y, w) in one pass over the rows (a
		// pre-norm block's residual add and the next norm): backward
		// reads y, as rmsnorm's reads its x. y is stored in its dtype
		// before h is formed from it, so both have the unfused ops' bits.
		AddRMSNorm: {Name: "add_rmsnorm", Arity: 3, Results: 2, Fusion: FuseRow, Traffic: plusResults(0, 0), Attrs: []AttrSpec{eps},
			Infer: results(addNorm, addNorm), Save: []int{2}, SaveOut: true, Flops: elementwise(5)},
		// dx = dy + rmsnorm_grad's dx (rounded to dx's dtype first, as the
		// unfused add reads it), and dw, in one pass: dx is both x's and
		// r's gradient.
		AddRMSNormGrad: {TrainOnly: true, Name: "add_rmsnorm_grad", Arity: 4, Results: 2, Fusion: FuseRow, Traffic: plusResults(0, 1), Attrs: []AttrSpec{eps},
			Infer: results(addNormGrad, lastDim(0)), Flops: elementwise(13)},
		// rope_qk(xq, xk) = rope(xq, heads), rope(xk, heads=kv_heads), of
		// one theta, in one pass over both (passes' fuse: an attention's
		// q and k): each pair turned as rope turns it, so both results
		// have rope's bits. Linear, as rope: nothing saved, and backward
		// turns both gradients back in one pass (rope_qk_grad).
		RoPEQK: {Name: "rope_qk", Arity: 2, Results: 2, Fusion: FuseRow, Traffic: plusResults(0, 1), Attrs: ropeQKSpec,
			Infer: results(ropeQK(0), ropeQK(1)), Flops: ropeQKFlops},
		RoPEQKGrad: {TrainOnly: true, Name: "rope_qk_grad", Arity: 2, Results: 2, Fusion: FuseRow, Traffic: plusResults(0, 1), Attrs: ropeQKSpec,
			Infer: results(ropeQK(0), ropeQK(1)), Flops: ropeQKFlops},
		// adamw(weights, m, v, grad) -> weights, m, v: the AdamW step of
		// NUMERICS.md, the compiler's one definition of it. The step
		// count t is supplied at run time; weight_decay is 0 for params
		// that are not decayed. weights is the fp32 master, or P itself
		// when P is fp32.
		AdamWStep: {TrainOnly: true, Name: "adamw", Arity: 4, Results: 3, Fusion: FuseNone, Decays: true, Traffic: plusResults(0, 1, 2), Attrs: required("lr", "beta1", "beta2", "eps", "weight_decay"),
			Infer: results(adamw, adamw, adamw), Flops: elementwise(17)},
		// adamw_copy(weights, m, v, grad, dtype=D) -> adamw's three
		// results and the new weights cast to D (the bf16 P a mixed-
		// precision step gathers), written in the same pass over the
		// shard: adamw then cast, fused (ir.LoweredFusions).
		AdamWCopy: {TrainOnly: true, Name: "adamw_copy", Arity: 4, Results: 4, Fusion: FuseNone, Decays: true, Traffic: plusResults(0, 1, 2, 0),
			Attrs: append(required("lr", "beta1", "beta2", "eps", "weight_decay"), AttrSpec{Name: "dtype", Type: AttrInt, Required: true}),
			Infer: results(adamw, adamw, adamw, func(args []*Value, attrs []Attr) (Shape, DType, *OpError) {
				if _, _, err := adamw(args, attrs); err != nil {
					return nil, 0, err
				}
				return castTo(args[0], attrs)
			}), Flops: elementwise(18)},
		// cast(x, dtype=D): D is a DType code (2 bf16, 3 f16, 4 f32);
		// rounding to nearest even.
		Cast: {Name: "cast", Arity: 1, Fusion: FuseNone, Attrs: []AttrSpec{{Name: "dtype", Type: AttrInt, Required: true}},
			Infer: results(func(args []*Value, attrs []Attr) (Shape, DType, *OpError) { return castTo(args[0], attrs) }),
			Flops: elementwise(1)},
	}
	for k, info := range rows {
		opTable[k] = internal(info)
	}

	opTable[Embed].Backward = func(b GradBuilder, op *Op, dy *Value) []*Value {
		vocab := op.Args[1].Shape[0]
		return []*Value{nil, apply(b, EmbedGrad, []*Value{op.Args[0], dy}, IntAttr("vocab", vocab))}
	}
	opTable[Cast].Backward = func(b GradBuilder, op *Op, dy *Value) []*Value {
		// The gradient goes back at the operand's precision.
		return []*Value{apply(b, Cast, []*Value{dy}, IntAttr("dtype", int64(op.Args[0].DType)))}
	}
	opTable[MatMul].Backward = func(b GradBuilder, op *Op, dy *Value) []*Value {
		a, w := op.Args[0], op.Args[1]
		return []*Value{apply(b, MatMulGradA, []*Value{dy, w}), apply(b, MatMulGradB, []*Value{a, dy})}
	}
	opTable[RMSNorm].Backward = func(b GradBuilder, op *Op, dy *Value) []*Value {
		return b.Apply(RMSNormGrad, []*Value{op.Args[0], op.Args[1], dy}, sameAttrs(op)...)
	}
	opTable[AddRMSNorm].BackwardAll = func(b GradBuilder, op *Op, dys []*Value) []*Value {
		y, w, dy, dh := op.Results[0], op.Args[2], dys[0], dys[1]
		switch {
		case dh == nil: // only y is read on: the add's backward
			return []*Value{dy, dy, nil}
		case dy == nil:
			g := b.Apply(RMSNormGrad, []*Value{y, w, dh}, sameAttrs(op)...)
			return []*Value{g[0], g[0], g[1]}
		}
		g := b.Apply(AddRMSNormGrad, []*Value{y, w, dh, dy}, sameAttrs(op)...)
		return []*Value{g[0], g[0], g[1]}
	}
	opTable[LayerNorm].Backward = func(b GradBuilder, op *Op, dy *Value) []*Value {
		return b.Apply(LayerNormGrad, []*Value{op.Args[0], op.Args[1], dy}, sameAttrs(op)...)
	}
	opTable[RoPE].Backward = func(b GradBuilder, op *Op, dy *Value) []*Value {
		return []*Value{apply(b, RoPEGrad, []*Value{dy}, sameAttrs(op)...)}
	}
	opTable[RoPEQK].BackwardAll = func(b GradBuilder, op *Op, dys []*Value) []*Value {
		// One result read on: a plain rope_grad of it, with its heads.
		dq, dk := dys[0], dys[1]
		heads, _ := op.Attr("heads")
		kvHeads, _ := op.Attr("kv_heads")
		theta, _ := op.Attr("theta")
		switch {
		case dk == nil:
			return []*Value{apply(b, RoPEGrad, []*Value{dq}, Attr{"heads", heads}, Attr{"theta", theta}), nil}
		case dq == nil:
			return []*Value{nil, apply(b, RoPEGrad, []*Value{dk}, Attr{"heads", kvHeads}, Attr{"theta", theta})}
		}
		return b.Apply(RoPEQKGrad, []*Value{dq, dk}, sameAttrs(op)...)
	}
	opTable[Attention].Backward = func(b GradBuilder, op *Op, dy *Value) []*Value {
		return b.Apply(AttentionGrad, []*Value{op.Args[0], op.Args[1], op.Args[2], op.Out(), dy}, sameAttrs(op)...)
	}
	opTable[Transpose].Backward = func(b GradBuilder, op *Op, dy *Value) []*Value {
		return []*Value{apply(b, Transpose, []*Value{dy})}
	}
	opTable[SiLU].Backward = func(b GradBuilder, op *Op, dy *Value) []*Value {
		return []*Value{apply(b, SiLUGrad, []*Value{op.Args[0], dy})}
	}
	opTable[GELU].Backward = func(b GradBuilder, op *Op, dy *Value) []*Value {
		return []*Value{apply(b, GELUGrad, []*Value{op.Args[0], dy})}
	}
	opTable[GELUTanh].Backward = func(b GradBuilder, op *Op, dy *Value) []*Value {
		return []*Value{apply(b, GELUTanhGrad, []*Value{op.Args[0], dy})}
	}
	opTable[SwiGLU].Backward = func(b GradBuilder, op *Op, dy *Value) []*Value {
		return b.Apply(SwiGLUGrad, []*Value{op.Args[0], op.Args[1], dy})
	}
	opTable[GeGLUTanh].Backward = func(b GradBuilder, op *Op, dy *Value) []*Value {
		return b.Apply(GeGLUTanhGrad, []*Value{op.Args[0], op.Args[1], dy})
	}
	opTable[CrossEntropy].LossGrad = func(b GradBuilder, op *Op, weight float64) []*Value {
		return []*Value{apply(b, CrossEntropyGrad, []*Value{op.Args[0], op.Args[1]}, FloatAttr("scale", weight)), nil}
	}
	opTable[LinearCrossEntropy].LossGrad = func(b GradBuilder, op *Op, weight float64) []*Value {
		g := b.Apply(LinearCrossEntropyGrad, []*Value{op.Args[0], op.Args[1], op.Args[2]}, FloatAttr("scale", weight))
		return []*Value{g[0], g[1], nil}
	}
	opTable[Scale].Backward = func(b GradBuilder, op *Op, dy *Value) []*Value {
		return []*Value{apply(b, Scale, []*Value{dy}, sameAttrs(op)...)}
	}
	// Broadcast operands (a 1-D right operand) get their gradient summed
	// over the rows.
	reduce := func(b GradBuilder, g *Value, like *Value) *Value {
		if len(like.Shape) == 1 && len(g.Shape) > 1 {
			return apply(b, SumRows, []*Value{g})
		}
		return g
	}
	opTable[Add].Backward = func(b GradBuilder, op *Op, dy *Value) []*Value {
		return []*Value{dy, reduce(b, dy, op.Args[1])}
	}
	opTable[Mul].Backward = func(b GradBuilder, op *Op, dy *Value) []*Value {
		x, y := op.Args[0], op.Args[1]
		return []*Value{apply(b, Mul, []*Value{dy, y}), reduce(b, apply(b, Mul, []*Value{dy, x}), y)}
	}
}
