package engine

import (
	"fmt"
	"math"
	"sort"

	"amspc/ir"
	"amspc/kernels"
)

// attr is a kernel's attribute. Validate has checked that every kernel
// carries its op's attributes, so a missing one is a runtime bug, never
// a zero.
func attr(in *ir.Instr, name string) ir.AttrVal {
	for _, a := range in.Attrs {
		if a.Name == name {
			return a.Val
		}
	}
	for _, s := range in.Kern.Info().Attrs {
		if s.Name == name && s.Omit { // absent at zero (ir.AttrSpec.Omit)
			return ir.AttrVal{Type: s.Type}
		}
	}
	panic(fmt.Sprintf("kernel %v has no attribute %s", in.Kern, name))
}

func (k *rank) shape(id int32) []int64 { return k.p.Buffers[id].Shape }

func last(s []int64) int { return int(s[len(s)-1]) }

// cpuKernel runs one kernel call on the CPU backend (fp32): it reads
// c.Args and writes every buffer of c.Outs in full.
type cpuKernel func(c *KernelCall) error

// cpuUnsupported lists the ops the CPU backend has no kernel for, each
// with the reason: an op is in cpuKernels or here, never both, never
// neither (TestEveryOpHasAKernel).
var cpuUnsupported = ir.CollectiveOps()

// cpuKernels is the CPU backend's kernel of every op a bundle can name,
// by op kind: the backend's one table of them.
var cpuKernels = map[ir.OpKind]cpuKernel{
	ir.Embed: func(c *KernelCall) error {
		t := c.ArgShapes[1]
		return kernels.Embed(c.out(0), c.ints(0), c.arg(1), int(t[0]), int(t[1]))
	},
	ir.EmbedGrad: func(c *KernelCall) error {
		o := c.OutShapes[0]
		kernels.EmbedGrad(c.out(0), c.ints(0), c.arg(1), int(o[0]), int(o[1]))
		return nil
	},
	ir.MatMul: func(c *KernelCall) error {
		b := c.ArgShapes[1]
		kk, n := int(b[0]), int(b[1])
		if c.PackedB != nil {
			kernels.MatMulPacked(c.out(0), c.arg(0), c.PackedB, len(c.arg(0))/kk)
			return nil
		}
		kernels.MatMul(c.out(0), c.arg(0), c.arg(1), len(c.arg(0))/kk, kk, n)
		return nil
	},
	ir.MatMulGradA: func(c *KernelCall) error {
		b := c.ArgShapes[1]
		kk, n := int(b[0]), int(b[1])
		if c.PackedB != nil {
			kernels.MatMulGradAPacked(c.out(0), c.arg(0), c.PackedB, len(c.arg(0))/n)
			return nil
		}
		kernels.MatMulGradA(c.out(0), c.arg(0), c.arg(1), len(c.arg(0))/n, kk, n)
		return nil
	},
	ir.MatMulGradB: func(c *KernelCall) error {
		o := c.OutShapes[0]
		kk, n := int(o[0]), int(o[1])
		kernels.MatMulGradB(c.out(0), c.arg(0), c.arg(1), len(c.arg(0))/kk, kk, n)
		return nil
	},
	ir.RMSNorm: func(c *KernelCall) error {
		x, w := c.arg(0), c.arg(1)
		kernels.RMSNorm(c.out(0), x, w, len(x)/len(w), len(w), float32(c.attr("eps").Float))
		return nil
	},
	ir.RMSNormGrad: func(c *KernelCall) error {
		x, w := c.arg(0), c.arg(1)
		kernels.RMSNormGrad(c.out(0), c.out(1), x, w, c.arg(2), len(x)/len(w), len(w), float32(c.attr("eps").Float))
		return nil
	},
	ir.AddRMSNorm: func(c *KernelCall) error {
		x, w := c.arg(0), c.arg(2)
		kernels.AddRMSNorm(c.out(0), c.out(1), x, c.arg(1), w, len(x)/len(w), len(w), float32(c.attr("eps").Float), c.Outs[0].DType == ir.BF16)
		return nil
	},
	ir.AddRMSNormGrad: func(c *KernelCall) error {
		y, w := c.arg(0), c.arg(1)
		kernels.AddRMSNormGrad(c.out(0), c.out(1), y, w, c.arg(2), c.arg(3), len(y)/len(w), len(w), float32(c.attr("eps").Float), c.Outs[0].DType == ir.BF16)
		return nil
	},
	ir.LayerNorm: func(c *KernelCall) error {
		x, w := c.arg(0), c.arg(1)
		kernels.LayerNorm(c.out(0), x, w, c.arg(2), len(x)/len(w), len(w), float32(c.attr("eps").Float))
		return nil
	},
	ir.LayerNormGrad: func(c *KernelCall) error {
		x, w := c.arg(0), c.arg(1)
		kernels.LayerNormGrad(c.out(0), c.out(1), c.out(2), x, w, c.arg(2), len(x)/len(w), len(w), float32(c.attr("eps").Float))
		return nil
	},
	ir.SumRows: func(c *KernelCall) error {
		kernels.AddGradBroadcast(c.out(0), c.arg(0))
		return nil
	},
	ir.RoPE: func(c *KernelCall) error {
		b, s, heads, hd := ropeDims(c)
		kernels.RoPE(c.out(0), c.arg(0), b, s, heads, hd, ropeFreq(c))
		return nil
	},
	ir.RoPEGrad: func(c *KernelCall) error {
		b, s, heads, hd := ropeDims(c)
		kernels.RoPEGrad(c.out(0), c.arg(0), b, s, heads, hd, ropeFreq(c))
		return nil
	},
	ir.RoPEQK:     func(c *KernelCall) error { return ropeQK(c, kernels.RoPE) },
	ir.RoPEQKGrad: func(c *KernelCall) error { return ropeQK(c, kernels.RoPEGrad) },
	ir.Attention: func(c *KernelCall) error {
		b, s, heads, kvh, hd := attnDims(c)
		lse := make([]float32, b*heads*s)
		kernels.Attention(c.out(0), lse, c.arg(0), c.arg(1), c.arg(2), b, s, heads, kvh, hd, c.attr("causal").Bool)
		return nil
	},
	// One fused backward gives dq, dk and dv. Forward's log-sum-exp is
	// not kept, so forward runs again for it.
	ir.AttentionGrad: func(c *KernelCall) error {
		b, s, heads, kvh, hd := attnDims(c)
		causal := c.attr("causal").Bool
		q, kk, v, o, dout := c.arg(0), c.arg(1), c.arg(2), c.arg(3), c.arg(4)
		lse := make([]float32, b*heads*s)
		kernels.Attention(make([]float32, len(o)), lse, q, kk, v, b, s, heads, kvh, hd, causal)
		kernels.AttentionGrad(c.out(0), c.out(1), c.out(2), q, kk, v, o, lse, dout, b, s, heads, kvh, hd, causal)
		return nil
	},
	ir.ToParts: func(c *KernelCall) error {
		parts(c.out(0), c.arg(0), c.ArgShapes[0], int(c.attr("dim").Int), int(c.attr("parts").Int), true)
		return nil
	},
	ir.FromParts: func(c *KernelCall) error {
		parts(c.arg(0), c.out(0), c.OutShapes[0], int(c.attr("dim").Int), int(c.attr("parts").Int), false)
		return nil
	},
	ir.Transpose: func(c *KernelCall) error {
		s := c.ArgShapes[0]
		kernels.Transpose(c.out(0), c.arg(0), int(s[0]), int(s[1]))
		return nil
	},
	ir.SiLU: func(c *KernelCall) error {
		kernels.SiLU(c.out(0), c.arg(0))
		return nil
	},
	ir.SiLUGrad: func(c *KernelCall) error {
		kernels.SiLUGrad(c.out(0), c.arg(0), c.arg(1))
		return nil
	},
	ir.GELU: func(c *KernelCall) error {
		kernels.GELU(c.out(0), c.arg(0))
		return nil
	},
	ir.GELUGrad: func(c *KernelCall) error {
		kernels.GELUGrad(c.out(0), c.arg(0), c.arg(1))
		return nil
	},
	ir.GELUTanh: func(c *KernelCall) error {
		kernels.GELUTanh(c.out(0), c.arg(0))
		return nil
	},
	ir.GELUTanhGrad: func(c *KernelCall) error {
		kernels.GELUTanhGrad(c.out(0), c.arg(0), c.arg(1))
		return nil
	},
	ir.SwiGLU: func(c *KernelCall) error {
		kernels.SwiGLU(c.out(0), c.arg(0), c.arg(1))
		return nil
	},
	ir.SwiGLUGrad: func(c *KernelCall) error {
		kernels.SwiGLUGrad(c.out(0), c.out(1), c.arg(0), c.arg(1), c.arg(2))
		return nil
	},
	ir.GeGLUTanh: func(c *KernelCall) error {
		kernels.GeGLUTanh(c.out(0), c.arg(0), c.arg(1))
		return nil
	},
	ir.GeGLUTanhGrad: func(c *KernelCall) error {
		kernels.GeGLUTanhGrad(c.out(0), c.out(1), c.arg(0), c.arg(1), c.arg(2))
		return nil
	},
	ir.Scale: func(c *KernelCall) error {
		kernels.Scale(c.out(0), c.arg(0), c.attr("by").Float)
		return nil
	},
	ir.Add: func(c *KernelCall) error {
		kernels.Add(c.out(0), c.arg(0), c.arg(1))
		return nil
	},
	ir.Mul: func(c *KernelCall) error {
		kernels.Mul(c.out(0), c.arg(0), c.arg(1))
		return nil
	},
	ir.CrossEntropy: func(c *KernelCall) error {
		logits := c.arg(0)
		v := last(c.ArgShapes[0])
		return c.loss(kernels.CrossEntropy(logits, c.ints(1), len(logits)/v, v))
	},
	ir.CrossEntropyGrad: func(c *KernelCall) error {
		logits := c.arg(0)
		v := last(c.ArgShapes[0])
		kernels.CrossEntropyGrad(c.out(0), logits, c.ints(1), len(logits)/v, v, float32(c.attr("scale").Float))
		return nil
	},
	ir.LinearCrossEntropy: func(c *KernelCall) error {
		rows, d, v, chunk := linearCE(c)
		return c.loss(kernels.LinearCrossEntropy(c.arg(0), c.arg(1), c.ints(2), rows, d, v, chunk, c.Args[0].DType == ir.BF16))
	},
	ir.LinearCrossEntropyGrad: func(c *KernelCall) error {
		rows, d, v, chunk := linearCE(c)
		kernels.LinearCrossEntropyGrad(c.out(0), c.out(1), c.arg(0), c.arg(1), c.ints(2), rows, d, v, chunk,
			c.Args[0].DType == ir.BF16, float32(c.attr("scale").Float))
		return nil
	},
	ir.GradSumSq: func(c *KernelCall) error {
		c.out(0)[0] = float32(kernels.SumSquares(c.arg(0)))
		return nil
	},
	ir.ClipGrad: func(c *KernelCall) error {
		g, sums := c.out(0), c.arg(1)
		if a := c.arg(0); &a[0] != &g[0] {
			copy(g, a)
		}
		norm, coef := clipCoef(sums, c.attr("max_norm").Float)
		if c.GradNorm != nil {
			*c.GradNorm = norm
		}
		if coef < 1 {
			kernels.Scale(g, g, coef)
			if c.Outs[0].DType == ir.BF16 {
				kernels.RoundBF16To(g, g)
			}
		}
		return nil
	},
	ir.Cast: func(c *KernelCall) error {
		o, x := c.out(0), c.arg(0)
		switch dt := ir.DType(c.attr("dtype").Int); dt {
		case ir.F32:
			copy(o, x)
		case ir.BF16:
			kernels.RoundBF16To(o, x)
		default:
			return fmt.Errorf("cast to %v is not supported on the CPU backend yet", dt)
		}
		return nil
	},
	ir.AdamWStep: func(c *KernelCall) error { return cpuAdamW(c) },
	ir.AdamWCopy: func(c *KernelCall) error { return cpuAdamW(c) },
}

// kernel runs one kernel instruction on stream s: its operands resolved
// into a KernelCall, launched on the rank's backend.
func (k *rank) kernel(s int, in *ir.Instr) error {
	c := &k.calls[s]
	*c = KernelCall{Instr: in, Step: k.step, Losses: &k.losses, GradNorm: &k.gradNorm,
		Args: c.Args[:0], Outs: c.Outs[:0], ArgShapes: c.ArgShapes[:0], OutShapes: c.OutShapes[:0]}
	if in.Kern == ir.AdamWStep || in.Kern == ir.AdamWCopy {
		c.LRAt = k.lrAt(in)
	}
	for _, id := range in.Args {
		c.Args = append(c.Args, k.m(id))
		c.ArgShapes = append(c.ArgShapes, k.shape(id))
	}
	for _, id := range in.Outs {
		c.Outs = append(c.Outs, k.m(id))
		c.OutShapes = append(c.OutShapes, k.shape(id))
	}
	if in.Kern.Info().Decays {
		d, err := k.decayed(in, k.p.Buffers[in.Outs[0]].Elems)
		if err != nil {
			return err
		}
		c.Decayed = d
	}
	for _, id := range in.Outs {
		k.wrote(id)
	}
	k.packUse[s] = 0
	if in.Kern == ir.MatMul || in.Kern == ir.MatMulGradA {
		if k.memos != nil {
			c.PackedB, k.packUse[s] = k.sharedPack(in)
		}
		if c.PackedB == nil && k.reps != nil {
			p, done, use, err := k.replicaPack(in)
			k.packUse[s] = use
			if done != nil {
				defer done()
			}
			if err != nil {
				return err
			}
			c.PackedB = p
		}
		if c.PackedB == nil && k.prepacked != nil {
			c.PackedB = k.prepacked
		}
		if countPacks && k.host {
			k.countPack(c.PackedB)
		}
	}
	if err := k.be.Launch(s, c); err != nil {
		return err
	}
	if k.reps != nil { // a host kernel is done when Launch returns
		for _, id := range in.Outs {
			if r, ok := k.reps.wholeRoot(k, id); ok {
				k.mu.Lock()
				k.reps.settled(r)
				k.mu.Unlock()
			}
		}
	}
	return nil
}

// countPacks makes every rank count its packing products (tests).
var countPacks = false

// countPack counts a product that packs its weight itself (pb nil) or
// uses a shared packing pb for the first time: the products whose time
// includes a packing's, either making it or waiting for it.
func (k *rank) countPack(pb *kernels.PackedB) {
	if pb != nil {
		if k.packSeen[pb] {
			return
		}
		if k.packSeen == nil {
			k.packSeen = map[*kernels.PackedB]bool{}
		}
		k.packSeen[pb] = true
	}
	k.packCalls++
}

// sharedPack is the packing of a matmul's operand 1 when it lies in a
// shared gather (a weight every local rank of the group reads): computed
// by the first rank to need it, reused by the others; else nil. use says
// which this call was (PackMade, PackReused).
func (k *rank) sharedPack(in *ir.Instr) (pb *kernels.PackedB, use PackUse) {
	root, off := k.offset(in.Args[1])
	k.mu.Lock()
	m := k.memos[root]
	k.mu.Unlock()
	if m == nil {
		return nil, 0
	}
	b := k.m(in.Args[1]).f32
	use = PackReused
	pb = m.get(memoKey{off, int64(len(b)), in.Kern}, func() any { use = PackMade; return k.packOperand(in, b) }).(*kernels.PackedB)
	return pb, use
}

// packOperand packs b, operand 1 of matmul instruction in, as the
// product reads it: B for MatMul, B^T for MatMulGradA.
func (k *rank) packOperand(in *ir.Instr, b []float32) *kernels.PackedB {
	s := k.shape(in.Args[1])
	return packAs(in.Kern, b, int(s[0]), int(s[1]))
}

// packAs packs b[k,n] as product kind's B: B for MatMul, B^T for
// MatMulGradA.
func packAs(kind ir.OpKind, b []float32, k, n int) *kernels.PackedB {
	if kind == ir.MatMul {
		return kernels.PackB(b, k, n)
	}
	return kernels.PackBT(b, k, n)
}

// arg and out are the host storage of operand i and result i, ints the
// ids of operand i.
// loss stores a loss kernel's result (the mean over its rows) as its
// result and the step's loss; a NaN or an infinity is an error.
func (c *KernelCall) loss(loss float64, err error) error {
	if err != nil {
		return err
	}
	c.out(0)[0] = float32(loss)
	*c.Losses = append(*c.Losses, loss)
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		return fmt.Errorf("loss is %v", loss)
	}
	return nil
}

// linearCE is a linear cross-entropy's rows, d, vocab and chunk of rows
// (ir.LinearCEChunk).
func linearCE(c *KernelCall) (rows, d, vocab, chunk int) {
	w := c.ArgShapes[1]
	r := c.Args[0].N / w[0]
	return int(r), int(w[0]), int(w[1]), int(ir.LinearCEChunk(r, w[0], w[1]))
}

func (c *KernelCall) arg(i int) []float32 { return c.Args[i].f32 }
func (c *KernelCall) out(i int) []float32 { return c.Outs[i].f32 }
func (c *KernelCall) ints(i int) []int32  { return c.Args[i].i32 }

func attnDims(c *KernelCall) (b, s, heads, kvh, hd int) {
	q := c.ArgShapes[0]
	heads = int(c.attr("heads").Int)
	kvh = int(c.attr("kv_heads").Int)
	if kvh == 0 {
		kvh = heads
	}
	return int(q[0]), int(q[1]), heads, kvh, int(q[2]) / heads
}

func ropeDims(c *KernelCall) (b, s, heads, hd int) {
	x := c.ArgShapes[0]
	heads = int(c.attr("heads").Int)
	return int(x[0]), int(x[1]), heads, int(x[2]) / heads
}

// ropeQK is rope_qk's (or its gradient's) turn of each operand into the
// result of its index: q (0) of heads, k (1) of kv_heads, one theta.
func ropeQK(c *KernelCall, turn func(out, x []float32, batch, seq, heads, hd int, f kernels.RoPEFreq)) error {
	for i, name := range []string{"heads", "kv_heads"} {
		x, heads := c.ArgShapes[i], int(c.attr(name).Int)
		turn(c.out(i), c.arg(i), int(x[0]), int(x[1]), heads, int(x[2])/heads, ropeFreq(c))
	}
	return nil
}

// ropeFreq is a rope instruction's frequencies: theta and its scaling
// (absent attributes zero).
func ropeFreq(c *KernelCall) kernels.RoPEFreq {
	return kernels.RoPEFreq(ir.RoPEScalingOf(c.Instr.Attrs))
}

// cpuAdamW is the optimizer's step (NUMERICS.md, torch.optim.AdamW) on a
// flat os-shard of a stage: kernels.AdamW on (weights, m, v, grad),
// updating weights, m and v in place (results that are other buffers get
// a copy first), decaying only c.Decayed (the params of 2+ dims, which
// the stage's layout places element by element); c.Step is the run's
// step, from 1.
func cpuAdamW(c *KernelCall) error {
	for i := range 3 {
		if o, a := c.out(i), c.arg(i); len(o) > 0 && &o[0] != &a[0] {
			copy(o, a)
		}
	}
	w, m, v, g := c.out(0), c.out(1), c.out(2), c.arg(3)
	var pc []float32
	if c.Instr.Kern == ir.AdamWCopy {
		if dt := ir.DType(c.attr("dtype").Int); dt != ir.BF16 {
			return fmt.Errorf("adamw_copy to %v is not supported on the CPU backend yet", dt)
		}
		pc = c.out(3)
	}
	kernels.AdamWCopy(w, m, v, g, pc, c.Step, c.lr(), c.attr("beta1").Float, c.attr("beta2").Float,
		c.attr("eps").Float, c.attr("weight_decay").Float, c.Decayed)
	return nil
}

// clipCoef is the gradient's global norm, the square root of the
// stages' sums of squares added in stage order in float64, and the
// factor clip_grad scales by: min(1, maxNorm / (norm + 1e-6)), as
// torch.nn.utils.clip_grad_norm_.
func clipCoef(sums []float32, maxNorm float64) (norm, coef float64) {
	var total float64
	for _, s := range sums {
		total += float64(s)
	}
	norm = math.Sqrt(total)
	return norm, min(1, maxNorm/(norm+1e-6))
}

// lrAt is an AdamW kernel's learning rate of a step: its lr on the
// schedule of the bundle's train section, whose decay ends at the run's
// horizon.
func (k *rank) lrAt(in *ir.Instr) func(step int) float64 {
	if k.b == nil { // the profile's rank: the kernel's lr
		return nil
	}
	peak, sched, horizon := attr(in, "lr").Float, k.b.Train.Schedule, int64(k.horizon)
	return func(step int) float64 { return sched.LR(peak, int64(step), horizon) }
}

// decayed lists the ranges of this rank's os-shard (n elements) of stage
// in.Stage's flat params that hold params with weight decay.
func (k *rank) decayed(in *ir.Instr, n int64) ([]kernels.Range, error) {
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

// parts moves between a tensor x of shape along dimension d and its n
// parts along d laid out one after another (xp): into xp when to, else
// back into x.
func parts(xp, x []float32, shape []int64, d, n int, to bool) {
	size := int64(len(x)) / int64(n)
	for p := range n {
		movePart(xp[int64(p)*size:int64(p+1)*size], x, shape, d, p, n, to)
	}
}
