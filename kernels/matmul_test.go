package kernels

import (
	"fmt"
	"math"
	"math/big"
	"runtime"
	"sync"
	"testing"
)

// Shapes straddle the block sizes (mr=12, nr=32, kc=384, mc=96) so edge
// tiles, partial k panels, several row blocks, (20x200x302: one row
// block, split by columns) column chunks and (250x400x100: B in place, a
// tall row block ending in a partial strip) are all exercised.
var matmulShapes = [][3]int{
	{1, 1, 1}, {3, 5, 7}, {7, 13, 9}, {17, 33, 6}, {65, 257, 11}, {130, 300, 37}, {5, 600, 3}, {20, 200, 302},
	{100, 790, 70}, {250, 400, 100},
}

func TestMatMulForward(t *testing.T) {
	rng := newRand(1)
	for _, s := range matmulShapes {
		m, k, n := s[0], s[1], s[2]
		a, a64 := randVec(rng, m*k)
		b, b64 := randVec(rng, k*n)
		out := make([]float32, m*n)
		MatMul(out, a, b, m, k, n)
		checkClose(t, fmt.Sprintf("matmul %v", s), out, refMatMul(a64, b64, m, k, n), 1e-5)
	}
}

func TestMatMulGrad(t *testing.T) {
	rng := newRand(2)
	for _, s := range matmulShapes {
		m, k, n := s[0], s[1], s[2]
		if m*k*n > 100000 {
			continue // finite differences are quadratic; the forward test covers blocking
		}
		a, a64 := randVec(rng, m*k)
		b, b64 := randVec(rng, k*n)
		dy, r := randVec(rng, m*n)
		da := make([]float32, m*k)
		db := make([]float32, k*n)
		fill(da, 7) // backward overwrites
		fill(db, 7)
		MatMulGradA(da, dy, b, m, k, n)
		MatMulGradB(db, a, dy, m, k, n)
		f := func(in [][]float64) []float64 { return refMatMul(in[0], in[1], m, k, n) }
		g := numGrads(f, [][]float64{a64, b64}, r)
		checkClose(t, fmt.Sprintf("matmul %v da", s), da, g[0], 1e-4)
		checkClose(t, fmt.Sprintf("matmul %v db", s), db, g[1], 1e-4)
	}
}

// TestMatMulExactOrder: each output is the float32 sum in plain k order,
// so MatMul agrees bit for bit with a naive loop: of exactly rounded fused
// multiply-adds on the SIMD path, of separately rounded products and sums
// on the portable one (when this build does not fuse them itself: amd64
// at GOAMD64 v1 or v2).
func TestMatMulExactOrder(t *testing.T) {
	if !simd && fmaFused() {
		t.Skip("this build fuses multiply-adds in Go code, which the portable naive loop forbids")
	}
	rng := newRand(3)
	m, k, n := 23, 600, 19
	a, _ := randVec(rng, m*k)
	b, _ := randVec(rng, k*n)
	out := make([]float32, m*n)
	MatMul(out, a, b, m, k, n)
	naive := make([]float32, m*n)
	for i := range m {
		for j := range n {
			var s float32
			for p := range k {
				if simd {
					s = fma32(a[i*k+p], b[p*n+j], s)
				} else {
					s += float32(a[i*k+p] * b[p*n+j]) // conversion forbids fusion
				}
			}
			naive[i*n+j] = s
		}
	}
	for i := range out {
		if math.Float32bits(out[i]) != math.Float32bits(naive[i]) {
			t.Fatalf("out[%d] = %v, naive %v (simd %v)", i, out[i], naive[i], simd)
		}
	}
}

// fmaFused reports whether this build fuses x*y+z in Go code (which makes
// exact comparisons with the portable naive loop meaningless).
func fmaFused() bool {
	x, y, z := fmaProbe()
	return x*y+z != float32(x*y)+z
}

//go:noinline
func fmaProbe() (float32, float32, float32) {
	x := float32(1) + 1.0/(1<<12)
	return x, x, -(1 + 2.0/(1<<12))
}

// fma32 is x*y+z rounded once to float32 (exact arithmetic in big.Float,
// then round to nearest even).
func fma32(x, y, z float32) float32 {
	var p, s big.Float
	p.SetPrec(200).Mul(big.NewFloat(float64(x)).SetPrec(200), big.NewFloat(float64(y)).SetPrec(200))
	s.SetPrec(200).Add(&p, big.NewFloat(float64(z)).SetPrec(200))
	f, _ := s.Float32()
	return f
}

// TestMicroKernelPaths: the SIMD and the portable microkernels compute
// the same tile but for the rounding of fused multiply-adds; the largest
// difference seen, in units of the result's last place, is logged (and
// documented in doc.go).
func TestMicroKernelPaths(t *testing.T) {
	if !simd {
		t.Skip("no SIMD microkernel in this build or on this CPU")
	}
	rng := newRand(9)
	const kb = 512
	a, _ := randVec(rng, kb*mr)
	b, _ := randVec(rng, kb*nr)
	var fused, plain [mr * nr]float32
	microKernel(a, b, kb, &fused)
	kernelGo(a, b, kb, &plain)
	maxULP, maxRel := 0, 0.0
	for i := range fused {
		d := int(math.Float32bits(fused[i])) - int(math.Float32bits(plain[i]))
		maxULP = max(maxULP, d, -d)
		maxRel = max(maxRel, math.Abs(float64(fused[i]-plain[i])/float64(plain[i])))
	}
	if maxRel > 1e-4 {
		t.Errorf("paths differ by %.3g relative (%d ulp)", maxRel, maxULP)
	}
	t.Logf("k=%d: SIMD and portable differ by at most %d ulp (%.2g relative)", kb, maxULP, maxRel)
}

// TestMatMulGradTransposes: the backward products read a transposed
// operand in place (packed by 8x8 register transposes, or read as
// columns); they give the bits of MatMul on explicitly transposed copies.
func TestMatMulGradTransposes(t *testing.T) {
	rng := newRand(12)
	for _, sh := range [][3]int{{37, 100, 70}, {100, 790, 70}, {13, 35, 33}, {64, 8, 96}, {5, 7, 3}} {
		m, k, n := sh[0], sh[1], sh[2]
		a, _ := randVec(rng, m*k)
		b, _ := randVec(rng, k*n)
		dy, _ := randVec(rng, m*n)
		bT, aT := make([]float32, n*k), make([]float32, k*m)
		Transpose(bT, b, k, n)
		Transpose(aT, a, m, k)
		da, want := make([]float32, m*k), make([]float32, m*k)
		MatMulGradA(da, dy, b, m, k, n)
		MatMul(want, dy, bT, m, n, k)
		sameBits(t, fmt.Sprintf("%v grad_a", sh), da, want)
		db, wantB := make([]float32, k*n), make([]float32, k*n)
		MatMulGradB(db, a, dy, m, k, n)
		MatMul(wantB, aT, dy, k, m, n)
		sameBits(t, fmt.Sprintf("%v grad_b", sh), db, wantB)
	}
}

// TestMatMulISAs: the AVX-512 and AVX2 kernels give the same bits (each
// element is the same k-order chain of fused multiply-adds), for all three
// products, on shapes with edge tiles and several k panels.
func TestMatMulISAs(t *testing.T) {
	if isa < isaAVX512 {
		t.Skip("this CPU or build has no AVX-512 kernel to compare with AVX2")
	}
	rng := newRand(10)
	for _, sh := range [][3]int{{100, 790, 70}, {37, 400, 33}, {12, 384, 32}, {130, 300, 37}} {
		m, k, n := sh[0], sh[1], sh[2]
		a, _ := randVec(rng, m*k)
		b, _ := randVec(rng, k*n)
		dy, _ := randVec(rng, m*n)
		run := func(level int) [3][]float32 {
			defer setISA(setISA(level))
			out := [3][]float32{make([]float32, m*n), make([]float32, m*k), make([]float32, k*n)}
			MatMul(out[0], a, b, m, k, n)
			MatMulGradA(out[1], dy, b, m, k, n)
			MatMulGradB(out[2], a, dy, m, k, n)
			return out
		}
		wide, narrow := run(isaAVX512), run(isaAVX2)
		for i, name := range []string{"matmul", "grad_a", "grad_b"} {
			sameBits(t, fmt.Sprintf("%v %s AVX-512 vs AVX2", sh, name), wide[i], narrow[i])
		}
	}
}

// TestMatMulDeterministic: bits do not depend on the worker count or on
// GOMAXPROCS, for all three products.
func TestMatMulDeterministic(t *testing.T) {
	// The second shape has one row block, so its units are column chunks;
	// the third reads B in place in tall blocks of 12k+10 rows.
	for _, sh := range [][3]int{{300, 530, 70}, {10, 300, 200}, {250, 530, 70}} {
		m, k, n := sh[0], sh[1], sh[2]
		rng := newRand(4)
		a, _ := randVec(rng, m*k)
		b, _ := randVec(rng, k*n)
		dy, _ := randVec(rng, m*n)
		type prod struct {
			name   string
			size   int
			run    func(workers int, out []float32)
			public func(out []float32)
		}
		prods := []prod{
			{"matmul", m * n, func(w int, o []float32) { gemm(w, o, view{a, k, 1}, view{b, n, 1}, m, k, n) },
				func(o []float32) { MatMul(o, a, b, m, k, n) }},
			{"grad_a", m * k, func(w int, o []float32) { gemm(w, o, view{dy, n, 1}, view{b, 1, n}, m, n, k) },
				func(o []float32) { MatMulGradA(o, dy, b, m, k, n) }},
			{"grad_b", k * n, func(w int, o []float32) { gemm(w, o, view{a, 1, k}, view{dy, n, 1}, k, m, n) },
				func(o []float32) { MatMulGradB(o, a, dy, m, k, n) }},
		}
		for _, p := range prods {
			ref := make([]float32, p.size)
			p.run(1, ref)
			for _, w := range []int{2, 3, 4, 7} {
				got := make([]float32, p.size)
				p.run(w, got)
				sameBits(t, fmt.Sprintf("%v %s workers=%d", sh, p.name, w), got, ref)
			}
			for _, procs := range []int{1, 2, 4} {
				got := make([]float32, p.size)
				withProcs(procs, func() int { p.public(got); return 0 })
				sameBits(t, fmt.Sprintf("%v %s GOMAXPROCS=%d", sh, p.name, procs), got, ref)
			}
		}
	}
}

func sameBits(t *testing.T, name string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: element %d = %v, want %v (bits differ)", name, i, got[i], want[i])
		}
	}
}

var matmulBenchShapes = [][3]int{{512, 512, 512}, {1024, 1024, 1024}, {4096, 512, 2048},
	{2048, 512, 512}, {2048, 512, 1376}, {2048, 1376, 512}, {2048, 512, 256}}

// BenchmarkMatMul: square shapes, and the d512x8 model's (2,048 tokens a
// step on one rank: the q/k/v/o projections, w1 and w3, w2, the head).
func BenchmarkMatMul(b *testing.B) { benchGemm(b, MatMul) }

// benchGemm runs mul on each of matmulBenchShapes and reports GFLOP/s.
func benchGemm(b *testing.B, mul func(out, x, y []float32, m, k, n int)) {
	for _, s := range matmulBenchShapes {
		m, k, n := s[0], s[1], s[2]
		b.Run(fmt.Sprintf("%dx%dx%d", m, k, n), func(b *testing.B) {
			rng := newRand(5)
			x, _ := randVec(rng, m*k)
			y, _ := randVec(rng, k*n)
			out := make([]float32, m*n)
			for b.Loop() {
				mul(out, x, y, m, k, n)
			}
			b.ReportMetric(2*float64(m)*float64(k)*float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkMatMulGrad measures the two backward products at 1024 cubed.
func BenchmarkMatMulGrad(b *testing.B) {
	const m, k, n = 1024, 1024, 1024
	rng := newRand(6)
	x, _ := randVec(rng, m*k)
	y, _ := randVec(rng, k*n)
	dy, _ := randVec(rng, m*n)
	out := make([]float32, 1024*1024)
	for _, c := range []struct {
		name string
		f    func()
	}{
		{"A", func() { MatMulGradA(out, dy, y, m, k, n) }},
		{"B", func() { MatMulGradB(out, x, dy, m, k, n) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				c.f()
			}
			b.ReportMetric(2*float64(m)*float64(k)*float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkPeakFMA measures the float32 multiply-add peak, one goroutine
// per GOMAXPROCS: "avx2" is twelve independent 8-lane AVX2 FMA chains in
// assembly, "avx512" the same 16 lanes wide (the hardware's peaks that
// MatMul's GFLOP/s are fractions of); "scalar" the same as Go compiles
// it, one lane.
func BenchmarkPeakFMA(b *testing.B) {
	const iters = 1 << 18
	workers := runtime.GOMAXPROCS(0)
	for _, v := range []struct {
		name  string
		wide  bool
		lanes int
	}{{"avx2", false, 8}, {"avx512", true, 16}} {
		b.Run(v.name, func(b *testing.B) {
			if !peakFMA(1, v.wide) {
				b.Skip("no such SIMD FMA in this build or on this CPU")
			}
			for b.Loop() {
				var wg sync.WaitGroup
				for range workers {
					wg.Go(func() { peakFMA(iters, v.wide) })
				}
				wg.Wait()
			}
			b.ReportMetric(float64(workers)*iters*12*float64(v.lanes)*2*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
	b.Run("scalar", func(b *testing.B) {
		for b.Loop() {
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					x := [12]float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, float32(w)}
					peakLoop(&x, iters, 0.999, 0.001)
				})
			}
			wg.Wait()
		}
		b.ReportMetric(float64(workers)*iters*12*2*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
}

// peakLoop's multiplier and addend arrive as arguments and its accumulators
// differ, so the compiler can neither fold nor merge the chains.
//
//go:noinline
func peakLoop(x *[12]float32, n int, m, c float32) {
	x0, x1, x2, x3, x4, x5 := x[0], x[1], x[2], x[3], x[4], x[5]
	x6, x7, x8, x9, x10, x11 := x[6], x[7], x[8], x[9], x[10], x[11]
	for range n {
		x0 = x0*m + c
		x1 = x1*m + c
		x2 = x2*m + c
		x3 = x3*m + c
		x4 = x4*m + c
		x5 = x5*m + c
		x6 = x6*m + c
		x7 = x7*m + c
		x8 = x8*m + c
		x9 = x9*m + c
		x10 = x10*m + c
		x11 = x11*m + c
	}
	x[0], x[1], x[2], x[3], x[4], x[5] = x0, x1, x2, x3, x4, x5
	x[6], x[7], x[8], x[9], x[10], x[11] = x6, x7, x8, x9, x10, x11
}

func withProcs[T any](procs int, f func() T) T {
	old := runtime.GOMAXPROCS(procs)
	defer runtime.GOMAXPROCS(old)
	return f()
}

// TestMatMulPackedB: a B packed once (PackB, PackBT) gives MatMul's and
// MatMulGradA's bits, on shapes with edge strips and several k panels.
func TestMatMulPackedB(t *testing.T) {
	rng := newRand(13)
	for _, sh := range [][3]int{{37, 400, 70}, {256, 64, 172}, {5, 7, 3}, {100, 790, 33}} {
		m, k, n := sh[0], sh[1], sh[2]
		a, _ := randVec(rng, m*k)
		b, _ := randVec(rng, k*n)
		dy, _ := randVec(rng, m*n)
		out, want := make([]float32, m*n), make([]float32, m*n)
		MatMul(want, a, b, m, k, n)
		MatMulPacked(out, a, PackB(b, k, n), m)
		sameBits(t, fmt.Sprintf("%v matmul", sh), out, want)
		da, wantA := make([]float32, m*k), make([]float32, m*k)
		MatMulGradA(wantA, dy, b, m, k, n)
		MatMulGradAPacked(da, dy, PackBT(b, k, n), m)
		sameBits(t, fmt.Sprintf("%v grad_a", sh), da, wantA)
	}
}
