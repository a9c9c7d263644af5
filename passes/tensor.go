package passes

import (
	"fmt"
	"io"

	"amspc/ir"
)

// tensor shards the training graph over the tensor-parallel group
// (shard { tensor = T, sequence = true|false }, issue 30): it gives
// every value a spec (ir.Spec) and inserts the collectives (ir.Converter)
// where an op's rule (ir.OpKind.Shard) needs an operand in another spec
// than the one it is made in. It walks forward, backward and optimizer
// alike, so the backward's collectives (Megatron's f and g operators,
// sequence parallelism's gathers and scatters) come from the same rules
// as the forward's, not from differentiating the forward's.
//
// The one choice the rules leave is each weight's: the first matmul to
// read a weight splits it by columns when its input is whole along the
// contracted dimension, by rows when that input is split along it. The
// embedding's table and the head (a matmul a loss reads) stay whole for
// now: their vocabulary-parallel forms (ir.SplitAt(0) of the table, the
// rules embedRule and crossEntropyRule give them) need kernels that know
// the rank's rows, not written yet (vocabParallel). Every other value that
// comes into the step takes the spec of its weight (an optimizer state)
// or the one its first reader wants (norm weights, token ids).
//
// At the end the graph is made the one a rank runs (localize): split
// dimensions cut to the rank's part, heads to the rank's heads. The step
// program does not take tensor-parallel graphs yet: the lower pass
// refuses them, and -dump-after=tensor shows the sharded graph.
func tensor(s *State) error {
	sh := s.Job.Shard
	if sh == nil || sh.Tensor <= 1 {
		return nil
	}
	c := ir.ShardCtx{Degree: sh.Tensor, Sequence: sh.Sequence}
	specs, err := shard(s, c)
	if err != nil {
		return err
	}
	localize(s.Graph, specs, c.Degree)
	s.Specs = specs
	return nil
}

// shard gives every value of s's graph its spec and inserts the
// converting ops, the shapes left global.
func shard(s *State, c ir.ShardCtx) (map[*ir.Value]ir.Spec, error) {
	g := s.Graph
	specs := map[*ir.Value]ir.Spec{}
	convs := &conversions{made: map[convKey]*ir.Value{}, names: map[string]bool{}}
	for _, v := range g.Values {
		convs.names[v.Name] = true
	}
	// An optimizer state is held as its weight is (its weight's spec is
	// decided by the weight's first reader, in forward).
	owner := map[*ir.Value]*ir.Value{}
	for _, st := range s.States {
		for _, v := range []*ir.Value{st.Master, st.M, st.V} {
			if v != nil {
				owner[v] = st.Param
			}
		}
	}
	logits := logitsOf(g)
	loss := g.LossValue()
	old := g.Values
	g.Values = make([]*ir.Value, 0, len(old)+len(old)/4)
	for _, v := range old {
		op := v.Def
		if op == nil || op.Out() != v {
			g.Values = append(g.Values, v)
			continue
		}
		if err := divides(c, op); err != nil {
			return nil, err
		}
		in := make([]ir.Spec, len(op.Args))
		for i, a := range op.Args {
			if _, ok := specs[a]; !ok && a.Def == nil {
				sp, err := weightSpec(c, op, i, specs, logits)
				if err != nil {
					return nil, err
				}
				if p, ok := specs[owner[a]]; ok && owner[a] != nil {
					sp = &p
				}
				if sp != nil {
					specs[a] = *sp
				}
			}
			in[i] = specOf(specs, a)
		}
		want, out := op.Kind.Shard()(c, op, in)
		for i, a := range op.Args {
			if _, ok := specs[a]; !ok && a.Def == nil {
				// A value coming into the step, unclaimed: held as its
				// first reader wants it.
				specs[a], in[i] = want[i], want[i]
			}
			if want[i] == in[i] {
				continue
			}
			from := in[i]
			cur := a
			// A split along another dimension is gathered first.
			if from.Split >= 0 && want[i].Split >= 0 {
				var err error
				if cur, err = convert(g, s.Origin, specs, convs, c.Degree, cur, from, ir.Whole, v); err != nil {
					return nil, err
				}
				from = ir.Whole
			}
			conv, err := convert(g, s.Origin, specs, convs, c.Degree, cur, from, want[i], v)
			if err != nil {
				return nil, err
			}
			op.Args[i] = conv
		}
		for j, r := range op.Results {
			specs[r] = out[j]
		}
		g.Values = append(g.Values, v)
		if v == loss {
			convs.backward = true
		}
	}
	if err := ir.VerifySpecs(g, specs, c); err != nil {
		return nil, &ir.InternalError{Pass: "tensor", Err: err}
	}
	// A param's gradient is what its optimizer step reads: after a
	// conversion (the all-reduce of a norm weight's partial sums under
	// sequence parallelism), the converted value, which the lower pass
	// then places in the stage's flat gradient.
	final := map[*ir.Value]*ir.Value{}
	for _, st := range s.States {
		if st.Step != nil {
			final[st.Param] = st.Step.Args[3]
		}
	}
	for i, gp := range s.Grads {
		if v := final[gp.Param]; v != nil {
			s.Grads[i].Grad = v
		}
	}
	return specs, nil
}

// localize makes g the graph one rank of the group runs: each split
// value's split dimension its part's size, and the heads of an attention
// or RoPE op on split heads the rank's heads. (Its specs stay, and the
// ops keep their meaning: each computes its part.)
func localize(g *ir.Graph, specs map[*ir.Value]ir.Spec, degree int) {
	for _, v := range g.Values {
		if s := specs[v]; s.Split >= 0 {
			sh := append(ir.Shape{}, v.Shape...)
			sh[s.Split] /= int64(degree)
			v.Shape = sh
		}
	}
	for _, v := range g.Values {
		op := v.Def
		if op == nil || op.Out() != v {
			continue
		}
		switch op.Kind {
		case ir.Attention, ir.AttentionGrad, ir.RoPE, ir.RoPEGrad, ir.RoPEQK, ir.RoPEQKGrad:
		default:
			continue
		}
		a := op.Args[0]
		if s := specs[a]; s.Split != len(a.Shape)-1 {
			continue
		}
		attrs := append([]ir.Attr(nil), op.Attrs...)
		for i, at := range attrs {
			if (at.Name == "heads" || at.Name == "kv_heads") && at.Val.Int > 0 {
				attrs[i] = ir.IntAttr(at.Name, at.Val.Int/int64(degree))
			}
		}
		op.Attrs = attrs
	}
}

// convKey names a conversion made once and shared by its readers: the
// value, the spec it is made in, and for a gather whether backward
// reads it.
type convKey struct {
	v        *ir.Value
	to       ir.Spec
	backward bool
}

// convert is v, made in spec from, in spec to: a new value made by the
// converting op, appended to g.Values before reader (the first result of
// the op that needs it), or the one made before for the same v and spec.
// The conversion has its reader's origin, or its value's.
func convert(g *ir.Graph, origin map[*ir.Value]*ir.Value, specs map[*ir.Value]ir.Spec, convs *conversions, degree int, v *ir.Value, from, to ir.Spec, reader *ir.Value) (*ir.Value, error) {
	k, dim, ok := ir.Converter(from, to)
	if !ok {
		return nil, &ir.InternalError{Pass: "tensor", Err: fmt.Errorf("no op turns %s from %v into %v", v.Name, from, to)}
	}
	// Backward gathers again what forward gathered (Megatron's sequence
	// parallelism does): forward's whole copy then dies in forward, and
	// only the parts are kept for backward.
	key := convKey{v, to, convs.backward && k == ir.TPAllGather}
	if cv, ok := convs.made[key]; ok {
		return cv, nil
	}
	attrs := []ir.Attr{ir.IntAttr("parts", int64(degree))}
	if dim >= 0 {
		attrs = []ir.Attr{ir.IntAttr("dim", int64(dim)), attrs[0]}
	}
	role := v.Role
	if !role.Defined() {
		role = ir.Activation
	}
	suffix := convSuffix[k]
	name := v.Name + "." + suffix
	for n := 1; convs.names[name]; n++ {
		name = fmt.Sprintf("%s.%s%d", v.Name, suffix, n)
	}
	convs.names[name] = true
	cv := &ir.Value{Name: name, Shape: append(ir.Shape{}, v.Shape...), DType: v.DType, Role: role, Layer: reader.Layer, Pos: reader.Pos}
	cv.Def = &ir.Op{Kind: k, Args: []*ir.Value{v}, Attrs: attrs, Results: []*ir.Value{cv}, Pos: reader.Pos}
	g.Values = append(g.Values, cv)
	// Placed with its reader: a conversion a backward value reads is
	// backward (of the reader's origin), else of its value's.
	if o, ok := origin[reader]; ok {
		origin[cv] = o
	} else if o, ok := origin[v]; ok {
		origin[cv] = o
	}
	specs[cv] = to
	convs.made[key] = cv
	return cv, nil
}

// conversions are the converting ops the tensor pass made, by what they
// convert, and the names the graph's values take; backward says the
// walk is past the loss.
type conversions struct {
	made     map[convKey]*ir.Value
	names    map[string]bool
	backward bool
}

// convSuffix names a converted value after its converting op.
var convSuffix = map[ir.OpKind]string{ir.TPAllReduce: "ar", ir.TPAllGather: "ag", ir.TPReduceScatter: "rs", ir.TPSlice: "sl"}

// weightSpec is the spec the tensor pass gives arg i of op when it is a
// weight the op decides (nil: the op does not decide it): a matmul's
// right operand by columns or rows, an embed's table by rows. A weight
// that does not split into equal parts is refused at its declaration:
// the degree must divide the dimension (ffn, vocab, heads x head dim).
func weightSpec(c ir.ShardCtx, op *ir.Op, i int, specs map[*ir.Value]ir.Spec, logits map[*ir.Value]bool) (*ir.Spec, error) {
	w := op.Args[i]
	if w.Role != ir.Param {
		return nil, nil
	}
	var d int
	switch {
	case op.Kind == ir.MatMul && i == 1 && len(w.Shape) == 2:
		if !vocabParallel && logits[op.Out()] {
			sp := ir.Whole
			return &sp, nil
		}
		x := op.Args[0]
		d = 1 // by columns: x whole along the contracted dimension
		if sx := c.Resolve(specOf(specs, x), x); sx.Split == len(x.Shape)-1 {
			d = 0 // by rows: x split along it
		}
	case op.Kind == ir.Embed && i == 1:
		if !vocabParallel {
			sp := ir.Whole
			return &sp, nil
		}
		d = 0
	default:
		return nil, nil
	}
	if !c.Splits(w, d) {
		what := map[int]string{0: "rows", 1: "columns"}[d]
		return nil, &UserError{Pos: w.Pos, Msg: fmt.Sprintf("shard.tensor = %d does not divide the %d %s of %s, which tensor parallelism splits", c.Degree, w.Shape[d], what, w.Name)}
	}
	sp := ir.SplitAt(d)
	return &sp, nil
}

// vocabParallel splits the embedding's table and the head by the
// vocabulary (Megatron's VocabParallelEmbedding and parallel
// cross-entropy); off until kernels that take the rank's rows exist.
const vocabParallel = false

// logitsOf is every value a loss op reads: the head's matmul makes one.
func logitsOf(g *ir.Graph) map[*ir.Value]bool {
	out := map[*ir.Value]bool{}
	for _, v := range g.Values {
		if op := v.Def; op != nil && op.Out() == v && op.Kind.Info().IsLoss() {
			for _, a := range op.Args {
				out[a] = true
			}
		}
	}
	return out
}

// divides refuses an attention or RoPE op whose heads the degree does
// not divide, at the op.
func divides(c ir.ShardCtx, op *ir.Op) error {
	switch op.Kind {
	case ir.Attention, ir.RoPE, ir.RoPEQK:
	default:
		return nil
	}
	for _, name := range []string{"heads", "kv_heads"} {
		if h, ok := op.Attr(name); ok && h.Int > 0 && h.Int%int64(c.Degree) != 0 {
			return &UserError{Pos: op.Pos, Msg: fmt.Sprintf("shard.tensor = %d does not divide %s's %s = %d (tensor parallelism splits the heads)", c.Degree, op.Kind, name, h.Int)}
		}
	}
	return nil
}

func specOf(specs map[*ir.Value]ir.Spec, v *ir.Value) ir.Spec {
	if s, ok := specs[v]; ok {
		return s
	}
	return ir.Whole
}

// dumpTensor prints the sharded graph and, after it, every value not
// held whole with its spec.
func dumpTensor(w io.Writer, s *State) {
	io.WriteString(w, ir.Print(s.Graph))
	if s.Specs == nil {
		return
	}
	fmt.Fprintf(w, "# specs (tensor = %d, sequence = %v): every value not listed is whole\n", s.Job.Shard.Tensor, s.Job.Shard.Sequence)
	io.WriteString(w, ir.FormatSpecs(s.Graph, s.Specs))
}
