package kernels

import (
	"fmt"
	"math"
	"testing"
)

// The chunked linear cross-entropy gives the bits of the unfused ops:
// MatMul (rounded to bf16 with bf16), CrossEntropy; and backward
// CrossEntropyGrad (rounded), MatMulGradA, MatMulGradB over all rows.
func TestLinearCrossEntropyBits(t *testing.T) {
	for _, c := range []struct{ rows, d, vocab, chunk int }{
		{200, 24, 100, 64},  // a short last chunk
		{256, 40, 130, 128}, // whole chunks
		{100, 16, 50, 100},  // one chunk of every row
		{1000, 48, 37, 384}, // chunks past the product's 384-row panel
		{7, 8, 11, 7},       // fewer rows than a loss group
	} {
		for _, bf16 := range []bool{false, true} {
			t.Run(fmt.Sprintf("%dx%dx%d/chunk%d/bf16=%v", c.rows, c.d, c.vocab, c.chunk, bf16), func(t *testing.T) {
				rng := newRand(uint64(c.rows + c.vocab))
				h, _ := randVec(rng, c.rows*c.d)
				w, _ := randVec(rng, c.d*c.vocab)
				if bf16 {
					roundBF16s(h)
					roundBF16s(w)
				}
				targets := make([]int32, c.rows)
				for i := range targets {
					targets[i] = int32(rng.IntN(c.vocab))
				}
				logits := make([]float32, c.rows*c.vocab)
				MatMul(logits, h, w, c.rows, c.d, c.vocab)
				if bf16 {
					roundBF16s(logits)
				}
				want, err := CrossEntropy(logits, targets, c.rows, c.vocab)
				if err != nil {
					t.Fatal(err)
				}
				got, err := LinearCrossEntropy(h, w, targets, c.rows, c.d, c.vocab, c.chunk, bf16)
				if err != nil {
					t.Fatal(err)
				}
				if math.Float64bits(got) != math.Float64bits(want) {
					t.Fatalf("loss %v, unfused %v", got, want)
				}

				const scale = 0.37
				dl := make([]float32, len(logits))
				CrossEntropyGrad(dl, logits, targets, c.rows, c.vocab, scale)
				if bf16 {
					roundBF16s(dl)
				}
				wantDh, wantDw := make([]float32, c.rows*c.d), make([]float32, c.d*c.vocab)
				MatMulGradA(wantDh, dl, w, c.rows, c.d, c.vocab)
				MatMulGradB(wantDw, h, dl, c.rows, c.d, c.vocab)
				dh, dw := make([]float32, c.rows*c.d), make([]float32, c.d*c.vocab)
				for i := range dw {
					dw[i] = float32(i) // overwritten, not added to
				}
				LinearCrossEntropyGrad(dh, dw, h, w, targets, c.rows, c.d, c.vocab, c.chunk, bf16, scale)
				sameBits(t, "dh", dh, wantDh)
				sameBits(t, "dw", dw, wantDw)
			})
		}
	}
}

// MatMulGradBAcc over consecutive row ranges in order is MatMulGradB
// over all of them, bit for bit.
func TestMatMulGradBAcc(t *testing.T) {
	rng := newRand(9)
	m, k, n := 777, 33, 65
	a, _ := randVec(rng, m*k)
	dy, _ := randVec(rng, m*n)
	want := make([]float32, k*n)
	MatMulGradB(want, a, dy, m, k, n)
	got := make([]float32, k*n)
	MatMulGradB(got, a[:100*k], dy[:100*n], 100, k, n)
	for _, r := range [][2]int{{100, 500}, {500, 501}, {501, 777}} {
		MatMulGradBAcc(got, a[r[0]*k:r[1]*k], dy[r[0]*n:r[1]*n], r[1]-r[0], k, n)
	}
	sameBits(t, "accumulated", got, want)
}

func TestLinearCrossEntropyBadTarget(t *testing.T) {
	h, w := make([]float32, 4*2), make([]float32, 2*3)
	_, err := LinearCrossEntropy(h, w, []int32{0, 1, 3, 2}, 4, 2, 3, 4, false)
	if err == nil || err.Error() != "cross_entropy: target 3 at position 2 is outside [0, 3)" {
		t.Fatalf("err = %v", err)
	}
}

// BenchmarkLinearCrossEntropy: forward and backward, fused (chunks of
// 64, 256 and 512 rows) against MatMul, CrossEntropy, CrossEntropyGrad,
// MatMulGradA and MatMulGradB over the whole logits.
func BenchmarkLinearCrossEntropy(b *testing.B) {
	for _, c := range []struct{ rows, d, vocab int }{{128, 32, 256}, {2048, 256, 8192}} {
		rng := newRand(1)
		h, _ := randVec(rng, c.rows*c.d)
		w, _ := randVec(rng, c.d*c.vocab)
		targets := make([]int32, c.rows)
		for i := range targets {
			targets[i] = int32(rng.IntN(c.vocab))
		}
		dh, dw := make([]float32, c.rows*c.d), make([]float32, c.d*c.vocab)
		name := fmt.Sprintf("%dx%dx%d", c.rows, c.d, c.vocab)
		for _, chunk := range []int{64, 256, 512} {
			if chunk > c.rows {
				continue
			}
			b.Run(fmt.Sprintf("%s/fused-chunk%d", name, chunk), func(b *testing.B) {
				for b.Loop() {
					if _, err := LinearCrossEntropy(h, w, targets, c.rows, c.d, c.vocab, chunk, false); err != nil {
						b.Fatal(err)
					}
					LinearCrossEntropyGrad(dh, dw, h, w, targets, c.rows, c.d, c.vocab, chunk, false, 1)
				}
			})
		}
		logits, dl := make([]float32, c.rows*c.vocab), make([]float32, c.rows*c.vocab)
		b.Run(name+"/unfused", func(b *testing.B) {
			for b.Loop() {
				MatMul(logits, h, w, c.rows, c.d, c.vocab)
				if _, err := CrossEntropy(logits, targets, c.rows, c.vocab); err != nil {
					b.Fatal(err)
				}
				CrossEntropyGrad(dl, logits, targets, c.rows, c.vocab, 1)
				MatMulGradA(dh, dl, w, c.rows, c.d, c.vocab)
				MatMulGradB(dw, h, dl, c.rows, c.d, c.vocab)
			}
		})
	}
}
