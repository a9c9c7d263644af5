//go:build cgo

package cudalib

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// matmulShapes are the products of TinyLlama-1.1B's step at 8,192 tokens
// (4 sequences of 2,048): a [tokens, in] @ w [in, out] for each distinct
// weight shape (d 2048, KV dim 256, ffn 5632, vocab 32000), as {in, out}.
var matmulShapes = [][2]int{
	{2048, 2048},  // wq, wo
	{2048, 256},   // wk, wv
	{2048, 5632},  // w1, w3
	{5632, 2048},  // w2
	{2048, 32000}, // the head
}

const matmulTokens = 8192

// BenchmarkGPUMatMulShapes: cuBLASLt's three products at the 1B model's
// shapes on bf16 inputs with bf16 outputs (fp32 accumulation), what
// torch.matmul computes in bf16 (bench/torch_ops.py times it on the same
// shapes): sub-benchmarks IN x OUT x TOKENS / matmul (y = a w), grad_a
// (da = dy w^T) and grad_b (dw = a^T dy), each 2 x tokens x in x out
// FLOPs, reported in TFLOP/s.
func BenchmarkGPUMatMulShapes(b *testing.B) {
	_, c := benchContext(b)
	// One pool of random bf16 values serves every operand (inputs only
	// read it; aliasing does not matter to the timing), and one for the
	// outputs: the largest of each shape's three.
	var in, out int
	for _, s := range matmulShapes {
		k, n := s[0], s[1]
		in = max(in, matmulTokens*k+k*n+matmulTokens*n+256)
		out = max(out, matmulTokens*n, matmulTokens*k, k*n)
	}
	pool := devRandomBF16(b, c, in)
	res, err := c.Alloc(int64(2 * out))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Free(res) })
	for _, s := range matmulShapes {
		m, k, n := matmulTokens, s[0], s[1]
		// Operands at 256-byte boundaries, as cuBLASLt's heuristic
		// assumes by default.
		pa := pool
		pw := pa + align256(2*m*k)
		pdy := pw + align256(2*k*n)
		flops := 2.0 * float64(m) * float64(k) * float64(n)
		bf := Out{DType: BF16}
		b.Run(fmt.Sprintf("%dx%dx%d", k, n, m), func(b *testing.B) {
			run := func(name string, launch func() error) {
				b.Run(name, func(b *testing.B) { benchLaunches(b, c, flops, 1e12, "TFLOP/s", launch) })
			}
			run("matmul", func() error { return c.MatMulOut(res, pa, pw, m, k, n, BF16, bf) })
			run("grad_a", func() error { return c.MatMulGradAOut(res, pdy, pw, m, k, n, BF16, bf) })
			run("grad_b", func() error { return c.MatMulGradBOut(res, pa, pdy, m, k, n, BF16, bf) })
		})
	}
}

// align256 is bytes rounded up to a multiple of 256.
func align256(bytes int) Ptr { return Ptr((bytes + 255) &^ 255) }

// benchContext opens GPU 0 for a benchmark, or skips where CUDA does not
// load.
func benchContext(b *testing.B) (*Libs, *Context) {
	l, err := Load()
	if err != nil {
		b.Skip(err)
	}
	c, err := l.Open(0)
	if err != nil {
		b.Fatal(err)
	}
	return l, c
}

// devRandomBF16 is device memory holding n bf16 values drawn uniformly
// from [-1, 1) (a block of 1Mi values repeated), freed when the benchmark
// ends.
func devRandomBF16(b *testing.B, c *Context, n int) Ptr {
	const block = 1 << 20 // values; two to an int32
	rng := rand.New(rand.NewPCG(28, 3))
	pairs := make([]int32, block/2)
	for i := range pairs {
		lo := math.Float32bits(rng.Float32()*2-1) >> 16
		hi := math.Float32bits(rng.Float32()*2-1) >> 16
		pairs[i] = int32(lo | hi<<16)
	}
	n = (n + block - 1) / block * block
	p, err := c.Alloc(int64(2 * n))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Free(p) })
	for off := 0; off < n; off += block {
		if err := c.CopyInInts(p+Ptr(2*off), pairs); err != nil {
			b.Fatal(err)
		}
	}
	return p
}
