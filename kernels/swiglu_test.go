package kernels

import (
	"math"
	"testing"
)

func refSwiGLU(a, b []float64) []float64 {
	out := make([]float64, len(a))
	for i, v := range a {
		out[i] = v / (1 + math.Exp(-v)) * b[i]
	}
	return out
}

// TestSwiGLU: the fused forward against the float64 reference, and the
// backward against its central differences.
func TestSwiGLU(t *testing.T) {
	rng := newRand(17)
	n := 200
	a, a64 := randVec(rng, n)
	for i := range a { // both tails of the sigmoid
		a[i] *= 3
		a64[i] *= 3
	}
	b, b64 := randVec(rng, n)
	out := make([]float32, n)
	SwiGLU(out, a, b)
	f := func(in [][]float64) []float64 { return refSwiGLU(in[0], in[1]) }
	checkClose(t, "swiglu", out, f([][]float64{a64, b64}), fwdTol)
	dy, r := randVec(rng, n)
	da, db := make([]float32, n), make([]float32, n)
	SwiGLUGrad(da, db, a, b, dy)
	g := numGrads(f, [][]float64{a64, b64}, r)
	checkClose(t, "swiglu da", da, g[0], bwdTol)
	checkClose(t, "swiglu db", db, g[1], bwdTol)
}

// TestSwiGLUUnfused: the fused kernels give every bit (sameBits) of the ops they
// replace, mul(silu(a), b) forward and silu_grad(a, mul(dy, b)) and
// mul(dy, silu(a)) backward, on sizes around the SIMD and chunk widths
// and over a wide range of values.
func TestSwiGLUUnfused(t *testing.T) {
	rng := newRand(18)
	for _, n := range []int{1, 37, 1100, 4096 + 3} {
		a, _ := randVec(rng, n)
		b, _ := randVec(rng, n)
		dy, _ := randVec(rng, n)
		for i := range a {
			a[i] *= 8
			b[i] *= 8
			dy[i] *= 8
		}
		// The sigmoid's saturated ends and zero.
		a[0] = 0
		if n > 3 {
			a[1], a[2], a[3] = 100, -100, -1e-30
		}

		got, t1, want := make([]float32, n), make([]float32, n), make([]float32, n)
		SwiGLU(got, a, b)
		SiLU(t1, a)
		Mul(want, t1, b)
		sameBits(t, "swiglu", got, want)

		da, db := make([]float32, n), make([]float32, n)
		SwiGLUGrad(da, db, a, b, dy)
		dt, wda, wdb := make([]float32, n), make([]float32, n), make([]float32, n)
		Mul(dt, dy, b)
		SiLUGrad(wda, a, dt)
		Mul(wdb, dy, t1)
		sameBits(t, "swiglu da", da, wda)
		sameBits(t, "swiglu db", db, wdb)
	}
}
