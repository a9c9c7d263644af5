package kernels

import "testing"

// gatedKernels are the fused gated activations act(a) * b, each with the
// unfused kernels it replaces and a float64 reference of act.
var gatedKernels = []struct {
	name         string
	fused        func(out, a, b []float32)
	fusedGrad    func(da, db, a, b, dy []float32)
	act          func(out, x []float32)
	actGrad      func(dx, x, dy []float32)
	ref          func([]float64) []float64
	seed1, seed2 uint64
}{
	{"swiglu", SwiGLU, SwiGLUGrad, SiLU, SiLUGrad, refSiLU, 17, 18},
	{"geglu_tanh", GeGLUTanh, GeGLUTanhGrad, GELUTanh, GELUTanhGrad, refGELUTanh, 19, 20},
}

// TestGated: each fused forward against the float64 reference, and its
// backward against central differences.
func TestGated(t *testing.T) {
	for _, k := range gatedKernels {
		rng := newRand(k.seed1)
		n := 200
		a, a64 := randVec(rng, n)
		for i := range a { // both tails of the activation
			a[i] *= 3
			a64[i] *= 3
		}
		b, b64 := randVec(rng, n)
		out := make([]float32, n)
		k.fused(out, a, b)
		f := func(in [][]float64) []float64 {
			out := k.ref(in[0])
			for i := range out {
				out[i] *= in[1][i]
			}
			return out
		}
		checkClose(t, k.name, out, f([][]float64{a64, b64}), fwdTol)
		dy, r := randVec(rng, n)
		da, db := make([]float32, n), make([]float32, n)
		k.fusedGrad(da, db, a, b, dy)
		g := numGrads(f, [][]float64{a64, b64}, r)
		checkClose(t, k.name+" da", da, g[0], bwdTol)
		checkClose(t, k.name+" db", db, g[1], bwdTol)
	}
}

// TestGatedUnfused: the fused kernels give every bit (sameBits) of the
// ops they replace, mul(act(a), b) forward and act_grad(a, mul(dy, b))
// and mul(dy, act(a)) backward, on sizes around the SIMD and chunk
// widths and over a wide range of values.
func TestGatedUnfused(t *testing.T) {
	for _, k := range gatedKernels {
		rng := newRand(k.seed2)
		for _, n := range []int{1, 37, 1100, 4096 + 3} {
			a, _ := randVec(rng, n)
			b, _ := randVec(rng, n)
			dy, _ := randVec(rng, n)
			for i := range a {
				a[i] *= 8
				b[i] *= 8
				dy[i] *= 8
			}
			// The activation's saturated ends and zero.
			a[0] = 0
			if n > 3 {
				a[1], a[2], a[3] = 100, -100, -1e-30
			}

			got, t1, want := make([]float32, n), make([]float32, n), make([]float32, n)
			k.fused(got, a, b)
			k.act(t1, a)
			Mul(want, t1, b)
			sameBits(t, k.name, got, want)

			da, db := make([]float32, n), make([]float32, n)
			k.fusedGrad(da, db, a, b, dy)
			dt, wda, wdb := make([]float32, n), make([]float32, n), make([]float32, n)
			Mul(dt, dy, b)
			k.actGrad(wda, a, dt)
			Mul(wdb, dy, t1)
			sameBits(t, k.name+" da", da, wda)
			sameBits(t, k.name+" db", db, wdb)
		}
	}
}
