package gpu

import "amspc/ir"

// The linear cross-entropy's plans (ir.LinearCrossEntropy and its
// gradient): chunks of ir.LinearCEChunk rows, each a product into one
// chunk of logits (scratch) and the cross-entropy kernels on it, so the
// logits are never whole in memory. With bf16 h and w (RawBF16) the
// products read them as they are and write bf16 logits, which the
// storage kernels read (the logits a bf16 matmul would store); in fp32
// everything is fp32.

func init() {
	opPlans[ir.LinearCrossEntropy] = planLinearCE
	opPlans[ir.LinearCrossEntropyGrad] = planLinearCE
}

// linearCE is one plan's shapes: rows of h, d, vocab, the chunk of
// rows, and the logits' element size and storage mask bit (bf16).
type linearCE struct {
	rows, d, v, chunk, esz int64
	bf                     bool
}

func (l linearCE) mask(bits int64) int64 {
	if l.bf {
		return bits
	}
	return 0
}

// ce is the kernel of the storage (bf16) or fp32 family.
func (l linearCE) ce(op string) string {
	if l.bf {
		return op + "_st"
	}
	return op + "_f32"
}

func planLinearCE(c *OpCall, p *Plan, raw bool) error {
	w := c.ArgShapes[1]
	l := linearCE{d: w[0], v: w[1], esz: 4, bf: raw}
	l.rows = c.n(0) / l.d
	l.chunk = ir.LinearCEChunk(l.rows, l.d, l.v)
	if raw {
		l.esz = 2
	}
	// Scratch 0: the chunk's logits (or their gradient); 1: the chunk
	// kernels' own flag of a bad target, unused (check_ids has checked
	// them all, flagging the IDFlag).
	p.Scratch = []ScratchBuf{{Bytes: l.esz * l.chunk * l.v}, {Bytes: 8}}
	p.IDs = &IDCheck{What: "cross_entropy: target", Vocab: int(l.v)}
	p.Launches = []Launch{elementwise("check_ids", l.rows, opnd(2), i64(l.rows), i64(l.v), Arg{Kind: IDFlag})}
	if c.Op == ir.LinearCrossEntropy {
		// Scratch 2: each row's loss in double.
		p.Scratch = append(p.Scratch, ScratchBuf{Bytes: 8 * max(l.rows, 1)})
		p.Loss = true
	}
	for r0 := int64(0); r0 < l.rows; r0 += l.chunk {
		p.Launches = append(p.Launches, l.chunkLaunches(c, r0, min(l.chunk, l.rows-r0))...)
	}
	if p.Loss {
		p.Launches = append(p.Launches, meanLoss(l.rows, 2))
	}
	return nil
}

// chunkLaunches are rows [r0, r0+n): the logits, then the loss, or their
// gradient, dh's rows and dw's sum so far.
func (l linearCE) chunkLaunches(c *OpCall, r0, n int64) []Launch {
	h, tg := at(opnd(0), r0*l.d*l.esz), at(opnd(2), 4*r0)
	logits := gemmLaunch(Gemm{Kind: GemmAB, M: int(n), K: int(l.d), N: int(l.v), BF16: l.bf, OutBF16: l.bf}, h, opnd(1), scr(0))
	if c.Op == ir.LinearCrossEntropy {
		args := []Arg{at(scr(2), 8*r0), scr(0), tg, i64(n), i64(l.v), scr(1)}
		if l.bf {
			args = append(args, i64(l.mask(1<<1)))
		}
		return []Launch{logits, row(l.ce("cross_entropy"), n, l.v, args...)}
	}
	f := float64(float32(c.fa("scale"))) / float64(l.rows)
	args := []Arg{scr(0), scr(0), tg, i64(n), i64(l.v), f64(f)} // in place: each thread rewrites the elements it read
	if l.bf {
		args = append(args, i64(l.mask(1<<0|1<<1)), Arg{Kind: Null})
	}
	return []Launch{
		logits,
		row(l.ce("cross_entropy_grad"), n, l.v, args...),
		gemmLaunch(Gemm{Kind: GemmABt, M: int(n), K: int(l.d), N: int(l.v), BF16: l.bf}, scr(0), opnd(1), at(res(0), r0*l.d*4)),
		gemmLaunch(Gemm{Kind: GemmAtB, M: int(n), K: int(l.d), N: int(l.v), BF16: l.bf, Accumulate: r0 > 0}, h, scr(0), res(1)),
	}
}
