package kernels

import (
	"fmt"
	"math"
	"sort"
)

// Range is the index range [Lo, Hi) of a slice.
type Range struct{ Lo, Hi int }

// AdamW applies one torch.optim.AdamW step (t = step, counting from 1) to
// parameters p with moments m and v and gradient g:
//
//	p *= 1 - lr*wd                      (only the decayed elements)
//	m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g^2
//	p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
//
// decayed lists the index ranges of p that are decayed, ascending and
// disjoint: on a flat shard holding several params, those with two or
// more dims (NUMERICS.md); every other element is not. Each element is
// updated in float64 and stored back as float32 (the master copy; a bf16
// run rounds it with RoundBF16 afterwards).
func AdamW(p, m, v, g []float32, step int, lr, beta1, beta2, eps, weightDecay float64, decayed []Range) {
	AdamWCopy(p, m, v, g, nil, step, lr, beta1, beta2, eps, weightDecay, decayed)
}

// AdamWCopy is AdamW that also writes the new p rounded to bfloat16
// (RoundBF16) into pc, each chunk while it is in cache: the bits of
// AdamW then a cast, in one pass over memory. A nil pc writes nothing.
func AdamWCopy(p, m, v, g, pc []float32, step int, lr, beta1, beta2, eps, weightDecay float64, decayed []Range) {
	n := len(p)
	if pc != nil {
		pc = pc[:n]
	}
	m, v, g = m[:n], v[:n], g[:n]
	if step < 1 {
		panic("kernels: AdamW: step counts from 1")
	}
	for i, r := range decayed {
		if r.Lo > r.Hi || r.Lo < 0 || r.Hi > n || (i > 0 && r.Lo < decayed[i-1].Hi) {
			panic(fmt.Sprintf("kernels: AdamW: decayed range %d [%d, %d) is not ascending, disjoint and inside [0, %d)", i, r.Lo, r.Hi, n))
		}
	}
	t := float64(step)
	k := adamConsts{beta1: beta1, c1: 1 - beta1, beta2: beta2, c2: 1 - beta2,
		stepSize: lr / (1 - math.Pow(beta1, t)), bc2: math.Sqrt(1 - math.Pow(beta2, t)), eps: eps, keep: 1}
	kd := k
	kd.keep = 1 - lr*weightDecay
	parallelFor(n, 20, func(lo, hi int) {
		if pc == nil {
			adamwRange(p, m, v, g, lo, hi, decayed, &k, &kd)
			return
		}
		// Block by block, so each block's p is still in cache when it
		// is rounded into pc.
		for b := lo; b < hi; b += copyBlock {
			e := min(b+copyBlock, hi)
			adamwRange(p, m, v, g, b, e, decayed, &k, &kd)
			for i, x := range p[b:e] {
				pc[b+i] = RoundBF16(x)
			}
		}
	})
}

// copyBlock is AdamWCopy's block: its p, m, v and g (64 KiB each) stay in
// the L2 cache between the update and the rounding.
const copyBlock = 16384

// adamwRange updates elements [lo, hi): those inside a decayed range with
// kd, the others with k.
func adamwRange(p, m, v, g []float32, lo, hi int, decayed []Range, k, kd *adamConsts) {
	// Runs of decayed and undecayed elements; r is the first decayed
	// range not wholly before i.
	r := sort.Search(len(decayed), func(j int) bool { return decayed[j].Hi > lo })
	for i := lo; i < hi; {
		switch {
		case r < len(decayed) && decayed[r].Lo <= i:
			e := min(hi, decayed[r].Hi)
			adamw(p[i:e], m[i:e], v[i:e], g[i:e], kd)
			i = e
			r++
		case r < len(decayed):
			e := min(hi, decayed[r].Lo)
			adamw(p[i:e], m[i:e], v[i:e], g[i:e], k)
			i = e
		default:
			adamw(p[i:hi], m[i:hi], v[i:hi], g[i:hi], k)
			i = hi
		}
	}
}

// adamConsts are one AdamW step's factors (the SIMD kernel reads them in
// this order). keep is 1 - lr*wd for decayed elements and 1 for the
// others: multiplying by 1 is exact, so it is the same as not decaying.
type adamConsts struct {
	beta1, c1, beta2, c2, stepSize, bc2, eps, keep float64
}

// adamwGo updates every element of p (and m, v) from g, in float64, each
// element stored back as float32.
func adamwGo(p, m, v, g []float32, k *adamConsts) {
	m, v, g = m[:len(p)], v[:len(p)], g[:len(p)]
	for i := range p {
		// The conversions round each product, so no compiler fuses a
		// multiply-add here: every architecture gets these bits.
		pi := float64(float64(p[i]) * k.keep)
		gi := float64(g[i])
		mi := float64(k.beta1*float64(m[i])) + float64(k.c1*gi)
		vi := float64(k.beta2*float64(v[i])) + float64(float64(k.c2*gi)*gi)
		m[i], v[i] = float32(mi), float32(vi)
		p[i] = float32(pi - float64(k.stepSize*mi)/(math.Sqrt(vi)/k.bc2+k.eps))
	}
}

// RoundBF16To stores each x[i] rounded to bfloat16 (RoundBF16) in out[i]
// (out may be x), on the kernels' workers: the bf16 storage of a result.
func RoundBF16To(out, x []float32) {
	out = out[:len(x)]
	parallelFor(len(x), 2, func(lo, hi int) {
		for i, v := range x[lo:hi] {
			out[lo+i] = RoundBF16(v)
		}
	})
}

// RoundBF16 rounds x to the nearest bfloat16 value, ties to even, and
// returns it as a float32 (low 16 bits zero). Overflow rounds to infinity
// as IEEE rounding does; a NaN stays a (quiet) NaN.
func RoundBF16(x float32) float32 {
	b := math.Float32bits(x)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep sign, force a mantissa bit that survives
		return math.Float32frombits((b | 0x00400000) &^ 0xffff)
	}
	b += 0x7fff + (b>>16)&1
	return math.Float32frombits(b &^ 0xffff)
}
