package kernels

import "testing"

// BenchmarkFusedNorm: the fused residual add and norm against Add then
// RMSNorm, forward and backward, on one micro-batch of TinyLlama's rows
// (2048 tokens of d 2048), bf16 storage.
func BenchmarkFusedNorm(b *testing.B) {
	const rows, d = 2048, 2048
	rng := newRand(30)
	x, _ := randVec(rng, rows*d)
	r, _ := randVec(rng, rows*d)
	w, _ := randVec(rng, d)
	dh, _ := randVec(rng, rows*d)
	dy, _ := randVec(rng, rows*d)
	y, h, dx, dw := make([]float32, rows*d), make([]float32, rows*d), make([]float32, rows*d), make([]float32, d)
	round := func(v []float32) {
		for i, x := range v {
			v[i] = RoundBF16(x)
		}
	}
	b.Run("forward-fused", func(b *testing.B) {
		for range b.N {
			AddRMSNorm(y, h, x, r, w, rows, d, 1e-5, true)
		}
	})
	b.Run("forward-unfused", func(b *testing.B) {
		for range b.N {
			Add(y, x, r)
			round(y)
			RMSNorm(h, y, w, rows, d, 1e-5)
		}
	})
	b.Run("backward-fused", func(b *testing.B) {
		for range b.N {
			AddRMSNormGrad(dx, dw, y, w, dh, dy, rows, d, 1e-5, true)
		}
	})
	dn := make([]float32, rows*d)
	b.Run("backward-unfused", func(b *testing.B) {
		for range b.N {
			RMSNormGrad(dn, dw, y, w, dh, rows, d, 1e-5)
			round(dn)
			Add(dx, dy, dn)
		}
	})
}

// BenchmarkAdamWCopy: the fused optimizer step with the bf16 copy of P
// against AdamW then a rounding pass, on a 16M-element shard.
func BenchmarkAdamWCopy(b *testing.B) {
	const n = 16 << 20
	rng := newRand(31)
	p, _ := randVec(rng, n)
	m, v, g, pc := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
	b.Run("fused", func(b *testing.B) {
		for i := range b.N {
			AdamWCopy(p, m, v, g, pc, i+1, 1e-4, 0.9, 0.95, 1e-8, 0.1, nil)
		}
	})
	b.Run("unfused", func(b *testing.B) {
		for i := range b.N {
			AdamW(p, m, v, g, i+1, 1e-4, 0.9, 0.95, 1e-8, 0.1, nil)
			for j, x := range p {
				pc[j] = RoundBF16(x)
			}
		}
	})
}

// BenchmarkRoundBF16: a bf16 result's storage pass over one of
// TinyLlama's MLP activations (2048 x 5632), on the kernels' workers
// against one loop.
func BenchmarkRoundBF16(b *testing.B) {
	x, _ := randVec(newRand(32), 2048*5632)
	out := make([]float32, len(x))
	b.Run("workers", func(b *testing.B) {
		for range b.N {
			RoundBF16To(out, x)
		}
	})
	b.Run("one-loop", func(b *testing.B) {
		for range b.N {
			for i, v := range x {
				out[i] = RoundBF16(v)
			}
		}
	})
}
