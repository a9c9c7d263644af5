package ir

// The backward and optimizer rows of the op table, and each forward op's
// backward rule. A rule builds its operands' gradients from ops of the
// table through a GradBuilder, so autodiff itself knows no op.

// GradBuilder makes the ops of a backward rule.
type GradBuilder interface {
	// Apply makes op kind on args with attrs (in the op's spec order,
	// defaults may be omitted) and returns its result.
	Apply(kind OpKind, args []*Value, attrs ...Attr) *Value
}

// IntAttr, FloatAttr and BoolAttr build attributes.
func IntAttr(name string, v int64) Attr { return Attr{name, AttrVal{Type: AttrInt, Int: v}} }

func FloatAttr(name string, v float64) Attr { return Attr{name, AttrVal{Type: AttrFloat, Float: v}} }

func BoolAttr(name string, v bool) Attr { return Attr{name, AttrVal{Type: AttrBool, Bool: v}} }

// sameAttrs passes the forward op's attributes on to its backward ops.
func sameAttrs(op *Op) []Attr { return append([]Attr(nil), op.Attrs...) }

func initGradOps() {
	eps := AttrSpec{Name: "eps", Type: AttrFloat, Default: AttrVal{Type: AttrFloat, Float: 1e-5}}
	ropeAttrs := opTable[RoPE].Attrs
	attnAttrs := []AttrSpec{
		{Name: "heads", Type: AttrInt, Required: true},
		{Name: "kv_heads", Type: AttrInt, Required: true},
		{Name: "causal", Type: AttrBool, Default: AttrVal{Type: AttrBool}},
	}
	like := func(i int) func([]*Value, []Attr) (Shape, DType, *OpError) {
		return func(args []*Value, _ []Attr) (Shape, DType, *OpError) {
			return append(Shape{}, args[i].Shape...), args[i].DType, nil
		}
	}
	lastDim := func(i int) func([]*Value, []Attr) (Shape, DType, *OpError) {
		return func(args []*Value, _ []Attr) (Shape, DType, *OpError) {
			s := args[i].Shape
			if len(s) == 0 {
				return nil, 0, argErr(i, "operand %s is a scalar", args[i].Name)
			}
			return Shape{s[len(s)-1]}, args[i].DType, nil
		}
	}
	// Backward FLOPs: matmul gradients are matmuls, attention's backward
	// recomputes the scores (about 2.5x its forward, split over q, k, v).
	mm := func(op *Op) float64 {
		return 2 * float64(op.Out.Shape.NumElements()) * float64(op.Args[0].Shape[len(op.Args[0].Shape)-1])
	}
	mmB := func(op *Op) float64 {
		return 2 * float64(op.Args[0].Shape.NumElements()) * float64(op.Out.Shape[1])
	}
	attn := func(op *Op) float64 {
		q := op.Args[0].Shape
		return 10.0 / 3 * float64(q[0]) * float64(q[1]) * float64(q[1]) * float64(q[2])
	}
	internal := func(info OpInfo) OpInfo { info.Internal = true; return info }
	rows := map[OpKind]OpInfo{
		EmbedGrad: {Name: "embed_grad", Arity: 2, Attrs: []AttrSpec{{Name: "vocab", Type: AttrInt, Required: true}},
			Infer: func(args []*Value, attrs []Attr) (Shape, DType, *OpError) {
				v, _ := attrInt(attrs, "vocab")
				dy := args[1].Shape
				return Shape{v, dy[len(dy)-1]}, args[1].DType, nil
			}, Flops: elementwise(1)},
		MatMulGradA: {Name: "matmul_grad_a", Arity: 2, Flops: mm,
			Infer: func(args []*Value, _ []Attr) (Shape, DType, *OpError) {
				dy, b := args[0].Shape, args[1].Shape
				if len(b) != 2 || dy[len(dy)-1] != b[1] {
					return nil, 0, opErr("matmul_grad_a of %s and %s", dy, b)
				}
				return append(append(Shape{}, dy[:len(dy)-1]...), b[0]), args[0].DType, nil
			}},
		MatMulGradB: {Name: "matmul_grad_b", Arity: 2, Flops: mmB,
			Infer: func(args []*Value, _ []Attr) (Shape, DType, *OpError) {
				a, dy := args[0].Shape, args[1].Shape
				if len(a) != len(dy) || !a[:len(a)-1].Equal(dy[:len(dy)-1]) {
					return nil, 0, opErr("matmul_grad_b of %s and %s", a, dy)
				}
				return Shape{a[len(a)-1], dy[len(dy)-1]}, args[1].DType, nil
			}},
		RMSNormGradX:     {Name: "rmsnorm_grad_x", Arity: 3, Attrs: []AttrSpec{eps}, Infer: like(0), Flops: elementwise(8)},
		RMSNormGradW:     {Name: "rmsnorm_grad_w", Arity: 2, Attrs: []AttrSpec{eps}, Infer: lastDim(0), Flops: elementwise(4)},
		LayerNormGradX:   {Name: "layernorm_grad_x", Arity: 3, Attrs: []AttrSpec{eps}, Infer: like(0), Flops: elementwise(12)},
		LayerNormGradW:   {Name: "layernorm_grad_w", Arity: 2, Attrs: []AttrSpec{eps}, Infer: lastDim(0), Flops: elementwise(6)},
		SumRows:          {Name: "sum_rows", Arity: 1, Infer: lastDim(0), Flops: elementwise(1)},
		RoPEGrad:         {Name: "rope_grad", Arity: 1, Attrs: ropeAttrs, Infer: like(0), Flops: elementwise(3)},
		AttentionGradQ:   {Name: "attention_grad_q", Arity: 5, Attrs: attnAttrs, Infer: like(0), Flops: attn},
		AttentionGradK:   {Name: "attention_grad_k", Arity: 5, Attrs: attnAttrs, Infer: like(1), Flops: attn},
		AttentionGradV:   {Name: "attention_grad_v", Arity: 5, Attrs: attnAttrs, Infer: like(2), Flops: attn},
		SiLUGrad:         {Name: "silu_grad", Arity: 2, Infer: like(0), Flops: elementwise(6)},
		GELUGrad:         {Name: "gelu_grad", Arity: 2, Infer: like(0), Flops: elementwise(10)},
		CrossEntropyGrad: {Name: "cross_entropy_grad", Arity: 2, Attrs: []AttrSpec{{Name: "scale", Type: AttrFloat, Required: true}}, Infer: like(0), Flops: elementwise(5)},
		AdamM: {Name: "adam_m", Arity: 2, Attrs: []AttrSpec{{Name: "beta1", Type: AttrFloat, Required: true}},
			Infer: f32Like(0), Flops: elementwise(3)},
		AdamV: {Name: "adam_v", Arity: 2, Attrs: []AttrSpec{{Name: "beta2", Type: AttrFloat, Required: true}},
			Infer: f32Like(0), Flops: elementwise(4)},
		// adam_update(master, m, v): the AdamW step of NUMERICS.md, with the
		// step count t supplied at run time; weight_decay 0 for params
		// that are not decayed.
		AdamUpdate: {Name: "adam_update", Arity: 3, Attrs: []AttrSpec{
			{Name: "lr", Type: AttrFloat, Required: true},
			{Name: "beta1", Type: AttrFloat, Required: true},
			{Name: "beta2", Type: AttrFloat, Required: true},
			{Name: "eps", Type: AttrFloat, Required: true},
			{Name: "weight_decay", Type: AttrFloat, Required: true},
		}, Infer: f32Like(0), Flops: elementwise(10)},
		// cast(x, dtype=D): D is a DType code (2 bf16, 3 f16, 4 f32);
		// rounding to nearest even.
		Cast: {Name: "cast", Arity: 1, Attrs: []AttrSpec{{Name: "dtype", Type: AttrInt, Required: true}},
			Infer: func(args []*Value, attrs []Attr) (Shape, DType, *OpError) {
				d, _ := attrInt(attrs, "dtype")
				if dt := DType(d); d < int64(BF16) || d > int64(F32) || !dt.IsFloat() {
					return nil, 0, attrErr("dtype", "cast to dtype code %d (2 bf16, 3 f16, 4 f32)", d)
				}
				return append(Shape{}, args[0].Shape...), DType(d), nil
			}, Flops: elementwise(1)},
	}
	for k, info := range rows {
		opTable[k] = internal(info)
	}

	opTable[Embed].Backward = func(b GradBuilder, op *Op, dy *Value) []*Value {
		vocab := op.Args[1].Shape[0]
		return []*Value{nil, b.Apply(EmbedGrad, []*Value{op.Args[0], dy}, IntAttr("vocab", vocab))}
	}
	opTable[MatMul].Backward = func(b GradBuilder, op *Op, dy *Value) []*Value {
		a, w := op.Args[0], op.Args[1]
		return []*Value{b.Apply(MatMulGradA, []*Value{dy, w}), b.Apply(MatMulGradB, []*Value{a, dy})}
	}
	opTable[RMSNorm].Backward = func(b GradBuilder, op *Op, dy *Value) []*Value {
		x, w := op.Args[0], op.Args[1]
		return []*Value{
			b.Apply(RMSNormGradX, []*Value{x, w, dy}, sameAttrs(op)...),
			b.Apply(RMSNormGradW, []*Value{x, dy}, sameAttrs(op)...),
		}
	}
	opTable[LayerNorm].Backward = func(b GradBuilder, op *Op, dy *Value) []*Value {
		x, w := op.Args[0], op.Args[1]
		return []*Value{
			b.Apply(LayerNormGradX, []*Value{x, w, dy}, sameAttrs(op)...),
			b.Apply(LayerNormGradW, []*Value{x, dy}, sameAttrs(op)...),
			b.Apply(SumRows, []*Value{dy}),
		}
	}
	opTable[RoPE].Backward = func(b GradBuilder, op *Op, dy *Value) []*Value {
		return []*Value{b.Apply(RoPEGrad, []*Value{dy}, sameAttrs(op)...)}
	}
	opTable[Attention].Backward = func(b GradBuilder, op *Op, dy *Value) []*Value {
		args := []*Value{op.Args[0], op.Args[1], op.Args[2], op.Out, dy}
		return []*Value{
			b.Apply(AttentionGradQ, args, sameAttrs(op)...),
			b.Apply(AttentionGradK, args, sameAttrs(op)...),
			b.Apply(AttentionGradV, args, sameAttrs(op)...),
		}
	}
	opTable[SiLU].Backward = func(b GradBuilder, op *Op, dy *Value) []*Value {
		return []*Value{b.Apply(SiLUGrad, []*Value{op.Args[0], dy})}
	}
	opTable[GELU].Backward = func(b GradBuilder, op *Op, dy *Value) []*Value {
		return []*Value{b.Apply(GELUGrad, []*Value{op.Args[0], dy})}
	}
	// Broadcast operands (a 1-D right operand) get their gradient summed
	// over the rows.
	reduce := func(b GradBuilder, g *Value, like *Value) *Value {
		if len(like.Shape) == 1 && len(g.Shape) > 1 {
			return b.Apply(SumRows, []*Value{g})
		}
		return g
	}
	opTable[Add].Backward = func(b GradBuilder, op *Op, dy *Value) []*Value {
		return []*Value{dy, reduce(b, dy, op.Args[1])}
	}
	opTable[Mul].Backward = func(b GradBuilder, op *Op, dy *Value) []*Value {
		x, y := op.Args[0], op.Args[1]
		return []*Value{b.Apply(Mul, []*Value{dy, y}), reduce(b, b.Apply(Mul, []*Value{dy, x}), y)}
	}
}

func f32Like(i int) func([]*Value, []Attr) (Shape, DType, *OpError) {
	return func(args []*Value, _ []Attr) (Shape, DType, *OpError) {
		for j, a := range args {
			if !a.Shape.Equal(args[i].Shape) {
				return nil, 0, argErr(j, "operand %s is %s, want %s", a.Name, a.Shape, args[i].Shape)
			}
		}
		return append(Shape{}, args[i].Shape...), F32, nil
	}
}
