//go:build openblas && cgo

package kernels

import (
	"runtime"
	"testing"

	"amspc/kernels/internal/openblas"
)

// BenchmarkMatMulOpenBLAS runs Debian's OpenBLAS sgemm on BenchmarkMatMul's
// shapes with as many threads as GOMAXPROCS (-cpu 1: one thread), for the
// comparison in the same run: go test -tags openblas ./kernels -run '^$'
// -bench MatMul -cpu 1.
func BenchmarkMatMulOpenBLAS(b *testing.B) {
	openblas.SetThreads(runtime.GOMAXPROCS(0))
	b.Logf("OpenBLAS core: %s, %d threads", openblas.Core(), runtime.GOMAXPROCS(0))
	benchGemm(b, openblas.MatMul)
}

// TestOpenBLASAgrees: the comparison is of the same product (OpenBLAS
// sums in another order, so within float32 rounding, not bitwise).
func TestOpenBLASAgrees(t *testing.T) {
	rng := newRand(11)
	m, k, n := 100, 790, 70
	a, a64 := randVec(rng, m*k)
	b, b64 := randVec(rng, k*n)
	out := make([]float32, m*n)
	openblas.MatMul(out, a, b, m, k, n)
	checkClose(t, "openblas", out, refMatMul(a64, b64, m, k, n), 1e-5)
}
