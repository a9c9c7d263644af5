package kernels

import (
	"testing"
)

func refGeGLUTanh(a, b []float64) []float64 {
	out := refGELUTanh(a)
	for i := range out {
		out[i] *= b[i]
	}
	return out
}

// TestGeGLUTanh: the fused forward against the float64 reference, and the
// backward against its central differences.
func TestGeGLUTanh(t *testing.T) {
	rng := newRand(19)
	n := 200
	a, a64 := randVec(rng, n)
	for i := range a { // both tails of the tanh
		a[i] *= 3
		a64[i] *= 3
	}
	b, b64 := randVec(rng, n)
	out := make([]float32, n)
	GeGLUTanh(out, a, b)
	f := func(in [][]float64) []float64 { return refGeGLUTanh(in[0], in[1]) }
	checkClose(t, "geglu_tanh", out, f([][]float64{a64, b64}), fwdTol)
	dy, r := randVec(rng, n)
	da, db := make([]float32, n), make([]float32, n)
	GeGLUTanhGrad(da, db, a, b, dy)
	g := numGrads(f, [][]float64{a64, b64}, r)
	checkClose(t, "geglu_tanh da", da, g[0], bwdTol)
	checkClose(t, "geglu_tanh db", db, g[1], bwdTol)
}

// TestGeGLUTanhUnfused: the fused kernels give every bit (sameBits) of the
// ops they replace, mul(gelu_tanh(a), b) forward and
// gelu_tanh_grad(a, mul(dy, b)) and mul(dy, gelu_tanh(a)) backward, on
// sizes around the SIMD and chunk widths and over a wide range of values.
func TestGeGLUTanhUnfused(t *testing.T) {
	rng := newRand(20)
	for _, n := range []int{1, 37, 1100, 4096 + 3} {
		a, _ := randVec(rng, n)
		b, _ := randVec(rng, n)
		dy, _ := randVec(rng, n)
		for i := range a {
			a[i] *= 8
			b[i] *= 8
			dy[i] *= 8
		}
		// The tanh's saturated ends, zero and a tiny value.
		a[0] = 0
		if n > 3 {
			a[1], a[2], a[3] = 100, -100, -1e-30
		}

		got, t1, want := make([]float32, n), make([]float32, n), make([]float32, n)
		GeGLUTanh(got, a, b)
		GELUTanh(t1, a)
		Mul(want, t1, b)
		sameBits(t, "geglu_tanh", got, want)

		da, db := make([]float32, n), make([]float32, n)
		GeGLUTanhGrad(da, db, a, b, dy)
		dt, wda, wdb := make([]float32, n), make([]float32, n), make([]float32, n)
		Mul(dt, dy, b)
		GELUTanhGrad(wda, a, dt)
		Mul(wdb, dy, t1)
		sameBits(t, "geglu_tanh da", da, wda)
		sameBits(t, "geglu_tanh db", db, wdb)
	}
}
