package runtime

import (
	"fmt"
	"math"
	"sort"

	"amspc/codegen"
	"amspc/ir"
	"amspc/kernels"
)

// attr is a kernel's attribute. Validate has checked that every kernel
// carries its op's attributes, so a missing one is a runtime bug, never
// a zero.
func attr(in *codegen.Instr, name string) ir.AttrVal {
	for _, a := range in.Attrs {
		if a.Name == name {
			return a.Val
		}
	}
	panic(fmt.Sprintf("kernel %v has no attribute %s", in.Kern, name))
}

func (k *rank) shape(id int32) []int64 { return k.p.Buffers[id].Shape }

func last(s []int64) int { return int(s[len(s)-1]) }

// cpuKernel runs one kernel instruction on the CPU backend (fp32): it
// reads in.Args and writes every buffer of in.Outs in full.
type cpuKernel func(k *rank, in *codegen.Instr) error

// cpuKernels is the CPU backend's kernel of every op a bundle can name
// (TestEveryOpHasACPUKernel checks the table is complete).
var cpuKernels = map[ir.OpKind]cpuKernel{
	ir.Embed: func(k *rank, in *codegen.Instr) error {
		t := k.shape(in.Args[1])
		return kernels.Embed(k.out(in, 0), k.ints(in.Args[0]), k.arg(in, 1), int(t[0]), int(t[1]))
	},
	ir.EmbedGrad: func(k *rank, in *codegen.Instr) error {
		o := k.shape(in.Outs[0])
		kernels.EmbedGrad(k.out(in, 0), k.ints(in.Args[0]), k.arg(in, 1), int(o[0]), int(o[1]))
		return nil
	},
	ir.MatMul: func(k *rank, in *codegen.Instr) error {
		b := k.shape(in.Args[1])
		kk, n := int(b[0]), int(b[1])
		kernels.MatMul(k.out(in, 0), k.arg(in, 0), k.arg(in, 1), len(k.arg(in, 0))/kk, kk, n)
		return nil
	},
	ir.MatMulGradA: func(k *rank, in *codegen.Instr) error {
		b := k.shape(in.Args[1])
		kk, n := int(b[0]), int(b[1])
		kernels.MatMulGradA(k.out(in, 0), k.arg(in, 0), k.arg(in, 1), len(k.arg(in, 0))/n, kk, n)
		return nil
	},
	ir.MatMulGradB: func(k *rank, in *codegen.Instr) error {
		o := k.shape(in.Outs[0])
		kk, n := int(o[0]), int(o[1])
		kernels.MatMulGradB(k.out(in, 0), k.arg(in, 0), k.arg(in, 1), len(k.arg(in, 0))/kk, kk, n)
		return nil
	},
	ir.RMSNorm: func(k *rank, in *codegen.Instr) error {
		x, w := k.arg(in, 0), k.arg(in, 1)
		kernels.RMSNorm(k.out(in, 0), x, w, len(x)/len(w), len(w), float32(attr(in, "eps").Float))
		return nil
	},
	ir.RMSNormGrad: func(k *rank, in *codegen.Instr) error {
		x, w := k.arg(in, 0), k.arg(in, 1)
		kernels.RMSNormGrad(k.out(in, 0), k.out(in, 1), x, w, k.arg(in, 2), len(x)/len(w), len(w), float32(attr(in, "eps").Float))
		return nil
	},
	ir.LayerNorm: func(k *rank, in *codegen.Instr) error {
		x, w := k.arg(in, 0), k.arg(in, 1)
		kernels.LayerNorm(k.out(in, 0), x, w, k.arg(in, 2), len(x)/len(w), len(w), float32(attr(in, "eps").Float))
		return nil
	},
	ir.LayerNormGrad: func(k *rank, in *codegen.Instr) error {
		x, w := k.arg(in, 0), k.arg(in, 1)
		kernels.LayerNormGrad(k.out(in, 0), k.out(in, 1), k.out(in, 2), x, w, k.arg(in, 2), len(x)/len(w), len(w), float32(attr(in, "eps").Float))
		return nil
	},
	ir.SumRows: func(k *rank, in *codegen.Instr) error {
		kernels.AddGradBroadcast(k.out(in, 0), k.arg(in, 0))
		return nil
	},
	ir.RoPE: func(k *rank, in *codegen.Instr) error {
		b, s, heads, hd := k.ropeDims(in)
		kernels.RoPE(k.out(in, 0), k.arg(in, 0), b, s, heads, hd, attr(in, "theta").Float)
		return nil
	},
	ir.RoPEGrad: func(k *rank, in *codegen.Instr) error {
		b, s, heads, hd := k.ropeDims(in)
		kernels.RoPEGrad(k.out(in, 0), k.arg(in, 0), b, s, heads, hd, attr(in, "theta").Float)
		return nil
	},
	ir.Attention: func(k *rank, in *codegen.Instr) error {
		b, s, heads, kvh, hd := k.attnDims(in)
		lse := make([]float32, b*heads*s)
		kernels.Attention(k.out(in, 0), lse, k.arg(in, 0), k.arg(in, 1), k.arg(in, 2), b, s, heads, kvh, hd, attr(in, "causal").Bool)
		return nil
	},
	// One fused backward gives dq, dk and dv. Forward's log-sum-exp is
	// not kept, so forward runs again for it.
	ir.AttentionGrad: func(k *rank, in *codegen.Instr) error {
		b, s, heads, kvh, hd := k.attnDims(in)
		causal := attr(in, "causal").Bool
		q, kk, v, o, dout := k.arg(in, 0), k.arg(in, 1), k.arg(in, 2), k.arg(in, 3), k.arg(in, 4)
		lse := make([]float32, b*heads*s)
		kernels.Attention(make([]float32, len(o)), lse, q, kk, v, b, s, heads, kvh, hd, causal)
		kernels.AttentionGrad(k.out(in, 0), k.out(in, 1), k.out(in, 2), q, kk, v, o, lse, dout, b, s, heads, kvh, hd, causal)
		return nil
	},
	ir.Transpose: func(k *rank, in *codegen.Instr) error {
		s := k.shape(in.Args[0])
		kernels.Transpose(k.out(in, 0), k.arg(in, 0), int(s[0]), int(s[1]))
		return nil
	},
	ir.SiLU: func(k *rank, in *codegen.Instr) error {
		kernels.SiLU(k.out(in, 0), k.arg(in, 0))
		return nil
	},
	ir.SiLUGrad: func(k *rank, in *codegen.Instr) error {
		kernels.SiLUGrad(k.out(in, 0), k.arg(in, 0), k.arg(in, 1))
		return nil
	},
	ir.GELU: func(k *rank, in *codegen.Instr) error {
		kernels.GELU(k.out(in, 0), k.arg(in, 0))
		return nil
	},
	ir.GELUGrad: func(k *rank, in *codegen.Instr) error {
		kernels.GELUGrad(k.out(in, 0), k.arg(in, 0), k.arg(in, 1))
		return nil
	},
	ir.Add: func(k *rank, in *codegen.Instr) error {
		kernels.Add(k.out(in, 0), k.arg(in, 0), k.arg(in, 1))
		return nil
	},
	ir.Mul: func(k *rank, in *codegen.Instr) error {
		kernels.Mul(k.out(in, 0), k.arg(in, 0), k.arg(in, 1))
		return nil
	},
	ir.CrossEntropy: func(k *rank, in *codegen.Instr) error {
		logits := k.arg(in, 0)
		v := last(k.shape(in.Args[0]))
		loss, err := kernels.CrossEntropy(logits, k.ints(in.Args[1]), len(logits)/v, v)
		if err != nil {
			return err
		}
		k.out(in, 0)[0] = float32(loss)
		k.losses = append(k.losses, loss)
		if math.IsNaN(loss) || math.IsInf(loss, 0) {
			return fmt.Errorf("loss is %v", loss)
		}
		return nil
	},
	ir.CrossEntropyGrad: func(k *rank, in *codegen.Instr) error {
		logits := k.arg(in, 0)
		v := last(k.shape(in.Args[0]))
		kernels.CrossEntropyGrad(k.out(in, 0), logits, k.ints(in.Args[1]), len(logits)/v, v, float32(attr(in, "scale").Float))
		return nil
	},
	ir.Cast: func(k *rank, in *codegen.Instr) error {
		o, x := k.out(in, 0), k.arg(in, 0)
		switch dt := ir.DType(attr(in, "dtype").Int); dt {
		case ir.F32:
			copy(o, x)
		case ir.BF16:
			for i, v := range x {
				o[i] = kernels.RoundBF16(v)
			}
		default:
			return fmt.Errorf("cast to %v is not supported on the CPU backend yet", dt)
		}
		return nil
	},
	ir.AdamWStep: func(k *rank, in *codegen.Instr) error { return k.adamw(in) },
}

// kernel runs one kernel instruction: one call of its op's CPU kernel.
// Every result is then stored at its buffer's precision and checked for
// NaN and Inf.
func (k *rank) kernel(in *codegen.Instr) error {
	run := cpuKernels[in.Kern]
	if run == nil {
		return fmt.Errorf("no CPU kernel for %v", in.Kern)
	}
	if err := run(k, in); err != nil {
		return err
	}
	for _, o := range in.Outs {
		k.round(o)
		if err := checkFinite(k.f(o)); err != nil {
			return err
		}
	}
	return nil
}

// arg and out are the storage of operand i and result i.
func (k *rank) arg(in *codegen.Instr, i int) []float32 { return k.f(in.Args[i]) }
func (k *rank) out(in *codegen.Instr, i int) []float32 { return k.f(in.Outs[i]) }

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

func (k *rank) attnDims(in *codegen.Instr) (b, s, heads, kvh, hd int) {
	q := k.shape(in.Args[0])
	heads = int(attr(in, "heads").Int)
	kvh = int(attr(in, "kv_heads").Int)
	if kvh == 0 {
		kvh = heads
	}
	return int(q[0]), int(q[1]), heads, kvh, int(q[2]) / heads
}

func (k *rank) ropeDims(in *codegen.Instr) (b, s, heads, hd int) {
	x := k.shape(in.Args[0])
	heads = int(attr(in, "heads").Int)
	return int(x[0]), int(x[1]), heads, int(x[2]) / heads
}

// adamw is the optimizer's step (NUMERICS.md, torch.optim.AdamW) on a
// flat os-shard of a stage: kernels.AdamW on (weights, m, v, grad),
// updating weights, m and v in place (results that are other buffers get
// a copy first), decaying only the params of 2+ dims, which the stage's
// layout places element by element; t is the run's step, from 1.
func (k *rank) adamw(in *codegen.Instr) error {
	for i := range 3 {
		if in.Outs[i] != in.Args[i] {
			copy(k.out(in, i), k.arg(in, i))
		}
	}
	w, m, v, g := k.out(in, 0), k.out(in, 1), k.out(in, 2), k.arg(in, 3)
	decayed, err := k.decayed(in, int64(len(w)))
	if err != nil {
		return err
	}
	kernels.AdamW(w, m, v, g, k.step, attr(in, "lr").Float, attr(in, "beta1").Float, attr(in, "beta2").Float,
		attr(in, "eps").Float, attr(in, "weight_decay").Float, decayed)
	return nil
}

// decayed lists the ranges of this rank's os-shard (n elements) of stage
// in.Stage's flat params that hold params with weight decay.
func (k *rank) decayed(in *codegen.Instr, n int64) ([]kernels.Range, error) {
	lay := k.p.Layouts[in.Stage]
	sp, sos := int64(lay.PShard.Size()), int64(lay.OSShard.Size())
	if sp < 1 || sos < 1 || n*sp*sos != lay.Padded {
		return nil, fmt.Errorf("%d elements are not an os-shard of stage %s (%d elements in %d x %d shards)", n, lay.Stage, lay.Padded, sp, sos)
	}
	start := int64(lay.PShard.Index(k.topo, k.r))*(lay.Padded/sp) + int64(lay.OSShard.Index(k.topo, k.r))*n
	var out []kernels.Range
	for _, s := range lay.Params {
		lo, hi := max(s.Offset, start), min(s.Offset+s.Elems, start+n)
		if s.Decay && lo < hi {
			out = append(out, kernels.Range{Lo: int(lo - start), Hi: int(hi - start)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Lo < out[j].Lo })
	return out, nil
}
