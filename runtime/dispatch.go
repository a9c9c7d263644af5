package runtime

import (
	"fmt"
	"math"

	"amspc/codegen"
	"amspc/ir"
	"amspc/kernels"
)

func attr(in *codegen.Instr, name string) ir.AttrVal {
	for _, a := range in.Attrs {
		if a.Name == name {
			return a.Val
		}
	}
	return ir.AttrVal{}
}

func (k *rank) shape(id int32) []int64 { return k.p.Buffers[id].Shape }

func last(s []int64) int { return int(s[len(s)-1]) }

// kernel runs one kernel instruction on the CPU backend (fp32).
func (k *rank) kernel(in *codegen.Instr) error {
	a := func(i int) []float32 { return k.f(in.Args[i]) }
	out := func() []float32 { return k.f(in.Outs[0]) }
	switch in.Kern {
	case ir.Embed:
		t := k.shape(in.Args[1])
		if err := kernels.Embed(out(), k.ints(in.Args[0]), a(1), int(t[0]), int(t[1])); err != nil {
			return err
		}
	case ir.EmbedGrad:
		o := k.shape(in.Outs[0])
		kernels.EmbedGrad(out(), k.ints(in.Args[0]), a(1), int(o[0]), int(o[1]))
	case ir.MatMul:
		b := k.shape(in.Args[1])
		kk, n := int(b[0]), int(b[1])
		kernels.MatMul(out(), a(0), a(1), len(a(0))/kk, kk, n)
	case ir.MatMulGradA:
		b := k.shape(in.Args[1])
		kk, n := int(b[0]), int(b[1])
		kernels.MatMulGradA(out(), a(0), a(1), len(a(0))/n, kk, n)
	case ir.MatMulGradB:
		o := k.shape(in.Outs[0])
		kk, n := int(o[0]), int(o[1])
		kernels.MatMulGradB(out(), a(0), a(1), len(a(0))/kk, kk, n)
	case ir.RMSNorm:
		d := len(a(1))
		kernels.RMSNorm(out(), a(0), a(1), len(a(0))/d, d, float32(attr(in, "eps").Float))
	case ir.RMSNormGradX:
		d := len(a(1))
		dw := make([]float32, d)
		kernels.RMSNormGrad(out(), dw, a(0), a(1), a(2), len(a(0))/d, d, float32(attr(in, "eps").Float))
	case ir.RMSNormGradW:
		d := last(k.shape(in.Args[0]))
		dx := make([]float32, len(a(0)))
		kernels.RMSNormGrad(dx, out(), a(0), ones(d), a(1), len(a(0))/d, d, float32(attr(in, "eps").Float))
	case ir.LayerNorm:
		d := len(a(1))
		kernels.LayerNorm(out(), a(0), a(1), a(2), len(a(0))/d, d, float32(attr(in, "eps").Float))
	case ir.LayerNormGradX:
		d := len(a(1))
		dw, db := make([]float32, d), make([]float32, d)
		kernels.LayerNormGrad(out(), dw, db, a(0), a(1), a(2), len(a(0))/d, d, float32(attr(in, "eps").Float))
	case ir.LayerNormGradW:
		d := last(k.shape(in.Args[0]))
		dx, db := make([]float32, len(a(0))), make([]float32, d)
		kernels.LayerNormGrad(dx, out(), db, a(0), ones(d), a(1), len(a(0))/d, d, float32(attr(in, "eps").Float))
	case ir.SumRows:
		kernels.AddGradBroadcast(out(), a(0))
	case ir.RoPE, ir.RoPEGrad:
		s := k.shape(in.Args[0])
		heads := int(attr(in, "heads").Int)
		hd := int(s[2]) / heads
		if in.Kern == ir.RoPE {
			kernels.RoPE(out(), a(0), int(s[0]), int(s[1]), heads, hd, attr(in, "theta").Float)
		} else {
			kernels.RoPEGrad(out(), a(0), int(s[0]), int(s[1]), heads, hd, attr(in, "theta").Float)
		}
	case ir.Attention:
		b, s, heads, kvh, hd := k.attnDims(in)
		lse := make([]float32, b*heads*s)
		kernels.Attention(out(), lse, a(0), a(1), a(2), b, s, heads, kvh, hd, attr(in, "causal").Bool)
	case ir.AttentionGradQ, ir.AttentionGradK, ir.AttentionGradV:
		k.attentionGrad(in, out())
	case ir.SiLU:
		kernels.SiLU(out(), a(0))
	case ir.SiLUGrad:
		kernels.SiLUGrad(out(), a(0), a(1))
	case ir.GELU:
		kernels.GELU(out(), a(0))
	case ir.GELUGrad:
		kernels.GELUGrad(out(), a(0), a(1))
	case ir.Add:
		kernels.Add(out(), a(0), a(1))
	case ir.Mul:
		kernels.Mul(out(), a(0), a(1))
	case ir.CrossEntropy:
		v := last(k.shape(in.Args[0]))
		loss, err := kernels.CrossEntropy(a(0), k.ints(in.Args[1]), len(a(0))/v, v)
		if err != nil {
			return err
		}
		out()[0] = float32(loss)
		k.losses = append(k.losses, loss)
		if math.IsNaN(loss) || math.IsInf(loss, 0) {
			return fmt.Errorf("loss is %v", loss)
		}
		return nil
	case ir.CrossEntropyGrad:
		v := last(k.shape(in.Args[0]))
		kernels.CrossEntropyGrad(out(), a(0), k.ints(in.Args[1]), len(a(0))/v, v, float32(attr(in, "scale").Float))
	case ir.Cast:
		o, x := out(), a(0)
		switch ir.DType(attr(in, "dtype").Int) {
		case ir.F32:
			copy(o, x)
		case ir.BF16:
			for i, v := range x {
				o[i] = kernels.RoundBF16(v)
			}
		default:
			return fmt.Errorf("cast to %v is not supported on the CPU backend yet", ir.DType(attr(in, "dtype").Int))
		}
	case ir.AdamM:
		b1 := float32(attr(in, "beta1").Float)
		m, g := out(), a(1)
		for i := range m {
			m[i] = b1*m[i] + (1-b1)*g[i]
		}
	case ir.AdamV:
		b2 := float32(attr(in, "beta2").Float)
		v, g := out(), a(1)
		for i := range v {
			v[i] = b2*v[i] + (1-b2)*g[i]*g[i]
		}
	case ir.AdamUpdate:
		err := k.adamUpdate(in)
		k.round(in.Outs[0])
		return err
	default:
		return fmt.Errorf("no CPU kernel for %v", in.Kern)
	}
	k.round(in.Outs[0])
	return checkFinite(out())
}

// round stores a bf16 buffer's values as bf16: kernels compute in fp32
// and every bf16 result is rounded to nearest even, as a bf16 tensor would
// hold it (NUMERICS.md).
func (k *rank) round(id int32) {
	if k.p.Buffers[id].DType != ir.BF16 {
		return
	}
	o := k.f(id)
	for i, x := range o {
		o[i] = kernels.RoundBF16(x)
	}
}

// attentionGrad computes one of attention's three gradients. One fused
// backward yields all three; the IR asks for them as three ops on the same
// operands, so the first computes them all and keeps the other two for its
// siblings (keyed by operands, step and micro-batch, so nothing stale is
// ever reused).
func (k *rank) attentionGrad(in *codegen.Instr, out []float32) {
	key := fmt.Sprint(k.step, in.Micro, in.Args)
	if e, ok := k.attnCache[key]; ok {
		if g, ok := e[in.Kern]; ok {
			copy(out, g)
			delete(e, in.Kern)
			if len(e) == 0 {
				delete(k.attnCache, key)
			}
			return
		}
	}
	a := func(i int) []float32 { return k.f(in.Args[i]) }
	b, s, heads, kvh, hd := k.attnDims(in)
	causal := attr(in, "causal").Bool
	q, kk, v, o, dout := a(0), a(1), a(2), a(3), a(4)
	// The log-sum-exp of forward is not kept, so forward runs again.
	lse := make([]float32, b*heads*s)
	kernels.Attention(make([]float32, len(o)), lse, q, kk, v, b, s, heads, kvh, hd, causal)
	grads := map[ir.OpKind][]float32{
		ir.AttentionGradQ: make([]float32, len(q)),
		ir.AttentionGradK: make([]float32, len(kk)),
		ir.AttentionGradV: make([]float32, len(v)),
	}
	kernels.AttentionGrad(grads[ir.AttentionGradQ], grads[ir.AttentionGradK], grads[ir.AttentionGradV],
		q, kk, v, o, lse, dout, b, s, heads, kvh, hd, causal)
	copy(out, grads[in.Kern])
	delete(grads, in.Kern)
	if k.attnCache == nil {
		k.attnCache = map[string]map[ir.OpKind][]float32{}
	}
	k.attnCache[key] = grads
}

func (k *rank) attnDims(in *codegen.Instr) (b, s, heads, kvh, hd int) {
	q := k.shape(in.Args[0])
	heads = int(attr(in, "heads").Int)
	kvh = int(attr(in, "kv_heads").Int)
	if kvh == 0 {
		kvh = heads
	}
	return int(q[0]), int(q[1]), heads, kvh, int(q[2]) / heads
}

func ones(n int) []float32 {
	o := make([]float32, n)
	for i := range o {
		o[i] = 1
	}
	return o
}

// adamUpdate is AdamW on a flat os-shard (NUMERICS.md, torch.optim.AdamW):
// decoupled decay first (p *= 1 - lr wd, only for params of 2+ dims,
// which the stage's layout says element by element), then the bias-
// corrected Adam step, t counting from 1.
func (k *rank) adamUpdate(in *codegen.Instr) error {
	lay := k.p.Layouts[attr(in, "layout").Int]
	lr, b1, b2 := attr(in, "lr").Float, attr(in, "beta1").Float, attr(in, "beta2").Float
	eps, wd := attr(in, "eps").Float, attr(in, "weight_decay").Float
	w, m, v := k.f(in.Outs[0]), k.f(in.Args[1]), k.f(in.Args[2])
	sp := int64(lay.PShard.Size())
	chunk := lay.Padded / sp
	start := int64(lay.PShard.Index(k.topo, k.r))*chunk + int64(lay.OSShard.Index(k.topo, k.r))*int64(len(w))
	c1 := 1 - math.Pow(b1, float64(k.step))
	c2 := 1 - math.Pow(b2, float64(k.step))
	slot := 0
	for i := range w {
		g := start + int64(i)
		for slot < len(lay.Params) && g >= lay.Params[slot].Offset+lay.Params[slot].Elems {
			slot++
		}
		if slot >= len(lay.Params) {
			break // padding
		}
		p := float64(w[i])
		if lay.Params[slot].Decay {
			p *= 1 - lr*wd
		}
		mh := float64(m[i]) / c1
		vh := float64(v[i]) / c2
		p -= lr * mh / (math.Sqrt(vh) + eps)
		w[i] = float32(p)
	}
	return checkFinite(w)
}
