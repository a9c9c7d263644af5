//go:build cgo

package cudalib

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"amspc/kernels"
)

// TestGPUMatMul: cuBLASLt's three row-major products in fp32 against
// package kernels, within issue 12's 1e-5 (infinity-norm relative).
func TestGPUMatMul(t *testing.T) {
	_, c := openGPU(t)
	rng := rand.New(rand.NewPCG(9, 9))
	for _, sh := range [][3]int{{1, 1, 1}, {100, 790, 70}, {256, 512, 1376}, {2048, 2048, 512}} {
		m, k, n := sh[0], sh[1], sh[2]
		rnd := func(l int) []float32 {
			s := make([]float32, l)
			for i := range s {
				s[i] = rng.Float32()*2 - 1
			}
			return s
		}
		a, b, dy := rnd(m*k), rnd(k*n), rnd(m*n)
		dev := func(s []float32) Ptr { return devFloats(t, c, s) }
		pa, pb, pdy := dev(a), dev(b), dev(dy)
		pout, pda, pdb := dev(make([]float32, m*n)), dev(make([]float32, m*k)), dev(make([]float32, k*n))
		if err := c.MatMul(pout, pa, pb, m, k, n, F32); err != nil {
			t.Fatal(err)
		}
		if err := c.MatMulGradA(pda, pdy, pb, m, k, n, F32); err != nil {
			t.Fatal(err)
		}
		if err := c.MatMulGradB(pdb, pa, pdy, m, k, n, F32); err != nil {
			t.Fatal(err)
		}
		want := [3][]float32{make([]float32, m*n), make([]float32, m*k), make([]float32, k*n)}
		kernels.MatMul(want[0], a, b, m, k, n)
		kernels.MatMulGradA(want[1], dy, b, m, k, n)
		kernels.MatMulGradB(want[2], a, dy, m, k, n)
		for i, p := range []Ptr{pout, pda, pdb} {
			got := make([]float32, len(want[i]))
			if err := c.CopyOut(got, p); err != nil {
				t.Fatal(err)
			}
			var diff, big float64
			for j := range got {
				diff = max(diff, math.Abs(float64(got[j]-want[i][j])))
				big = max(big, math.Abs(float64(want[i][j])))
			}
			name := fmt.Sprintf("%v %s", sh, []string{"matmul", "grad_a", "grad_b"}[i])
			if diff > 1e-5*big {
				t.Errorf("%s: relative error %.3g", name, diff/big)
			} else {
				t.Logf("%s: relative error %.3g", name, diff/big)
			}
		}
	}
}
