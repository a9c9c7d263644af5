//go:build amd64 && !purego

package kernels

import (
	"math"
	"os"

	"golang.org/x/sys/cpu"
)

// The instruction sets the assembly kernels use.
const (
	isaNone   = iota // portable Go
	isaAVX2          // AVX2 + FMA, 8 lanes
	isaAVX512        // AVX-512F, 16 lanes
)

// isa is the widest instruction set this CPU and OS support (chosen once,
// from CPUID and the OS's saved register state, as x/sys/cpu reports
// them), or narrower when AMSPC_SIMD says so (avx2 or none: for
// comparisons; the bits are the same on either SIMD path).
var isa = detectISA(os.Getenv("AMSPC_SIMD"))

// simd says whether an assembly microkernel runs.
var simd = isa != isaNone

func detectISA(force string) int {
	level := isaNone
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		level = isaAVX2
		if cpu.X86.HasAVX512F {
			level = isaAVX512
		}
	}
	switch force {
	case "none", "purego":
		level = isaNone
	case "avx2":
		level = min(level, isaAVX2)
	}
	return level
}

// setISA switches the kernels' instruction set (tests compare paths);
// it returns the previous one.
func setISA(level int) int {
	old := isa
	isa, simd = level, level != isaNone
	return old
}

func peakFMAAVX2(n int)
func peakFMAAVX512(n int)

// peakFMA runs n rounds of twelve independent fused multiply-adds, 8
// lanes wide (AVX2) or 16 (wide, AVX-512); false when the CPU lacks them.
func peakFMA(n int, wide bool) bool {
	switch {
	case wide && isa >= isaAVX512:
		peakFMAAVX512(n)
	case !wide && isa >= isaAVX2:
		peakFMAAVX2(n)
	default:
		return false
	}
	return true
}

//go:noescape
func kernel6x16AVX2(a *float32, ars, aks int, b *float32, bks, kb int, c *float32, ldc int, zero bool)

//go:noescape
func kernel6x32AVX512(a *float32, ars, aks int, b *float32, bks, kb int, c *float32, ldc int, zero bool)

//go:noescape
func kernel12x32AVX512(a *float32, ars, aks int, b *float32, bks, kb int, c *float32, ldc int, zero bool)

// The assembly kernels' strides are those of a 12x32 tile.
const _ = uint(mr-12) + uint(12-mr) + uint(nr-32) + uint(32-nr)

// microKernel adds the product of a packed mr-row A strip and a packed
// nr-column B strip (kb steps) into the tile t.
func microKernel(a, b []float32, kb int, t *[mr * nr]float32) {
	if !microKernelC(a, 1, mr, b, nr, kb, t[:], nr, false) {
		kernelGo(a, b, kb, t)
	}
}

// microKernelEdge is microKernelC for an edge strip of ni valid rows:
// one of at most mr/2 rows (256 rows leave 4) runs on the top half only,
// half the work of a full tile: the 6x32 AVX-512 kernel, or the two 6x16
// AVX2 kernels (the same per-element chains of fused multiply-adds, so
// the same bits).
func microKernelEdge(a []float32, ars, aks int, b []float32, bks, kb int, c []float32, ldc, ni int) bool {
	if !simd || ni > mr/2 || kb == 0 {
		return microKernelC(a, ars, aks, b, bks, kb, c, ldc, false)
	}
	_ = a[(mr/2-1)*ars+(kb-1)*aks]
	_ = b[(kb-1)*bks+nr-1]
	_ = c[(mr/2-1)*ldc+nr-1]
	if isa >= isaAVX512 {
		kernel6x32AVX512(&a[0], 4*ars, 4*aks, &b[0], 4*bks, kb, &c[0], ldc, false)
		return true
	}
	kernel6x16AVX2(&a[0], 4*ars, 4*aks, &b[0], 4*bks, kb, &c[0], ldc, false)
	kernel6x16AVX2(&a[0], 4*ars, 4*aks, &b[16], 4*bks, kb, &c[16], ldc, false)
	return true
}

//go:noescape
func anyNonFiniteAVX2(x *float32, n int) bool

// FirstNonFinite returns the index of the first NaN or ±Inf in x, or -1:
// a vector scan of the exponent bits, then a scalar search only when one
// is there.
func FirstNonFinite(x []float32) int {
	if simd && len(x) >= 8 {
		n := len(x) &^ 7
		if !anyNonFiniteAVX2(&x[0], n) {
			if i := firstNonFiniteGo(x[n:]); i >= 0 {
				return n + i
			}
			return -1
		}
	}
	return firstNonFiniteGo(x)
}

// microKernelC computes a full mr x nr tile of C in place (rows ldc
// apart), from zero when zero (the first k panel), else adding to it;
// false when there is no SIMD kernel (the caller then goes through the
// tile buffer and kernelGo). A(i, p) is a[i*ars + p*aks]: a packed strip
// (ars 1, aks mr) or A's rows in place (ars the row stride, aks 1).
// B(p, j) is b[p*bks + j]: a packed strip (bks nr) or B's rows in place.
// Under AVX2 the tile is four 6x16 quarters.
func microKernelC(a []float32, ars, aks int, b []float32, bks, kb int, c []float32, ldc int, zero bool) bool {
	if !simd {
		return false
	}
	if kb == 0 {
		if zero {
			for i := range mr {
				clear(c[i*ldc : i*ldc+nr])
			}
		}
		return true
	}
	_ = a[(mr-1)*ars+(kb-1)*aks]
	_ = b[(kb-1)*bks+nr-1]
	_ = c[(mr-1)*ldc+nr-1]
	if isa >= isaAVX512 {
		kernel12x32AVX512(&a[0], 4*ars, 4*aks, &b[0], 4*bks, kb, &c[0], ldc, zero)
		return true
	}
	h := mr / 2
	kernel6x16AVX2(&a[0], 4*ars, 4*aks, &b[0], 4*bks, kb, &c[0], ldc, zero)
	kernel6x16AVX2(&a[0], 4*ars, 4*aks, &b[16], 4*bks, kb, &c[16], ldc, zero)
	kernel6x16AVX2(&a[h*ars], 4*ars, 4*aks, &b[0], 4*bks, kb, &c[h*ldc], ldc, zero)
	kernel6x16AVX2(&a[h*ars], 4*ars, 4*aks, &b[16], 4*bks, kb, &c[h*ldc+16], ldc, zero)
	return true
}

//go:noescape
func adamwAVX2(p, m, v, grad *float32, n int, k *adamConsts)

// adamw runs adamwGo's update, four elements at a time in assembly when
// the CPU has AVX2 (the same operations, so the same bits).
func adamw(p, m, v, g []float32, k *adamConsts) {
	n := len(p)
	if simd && n >= 4 {
		m, v, g = m[:n], v[:n], g[:n]
		n4 := n &^ 3
		adamwAVX2(&p[0], &m[0], &v[0], &g[0], n4, k)
		p, m, v, g = p[n4:], m[n4:], v[n4:], g[n4:]
	}
	adamwGo(p, m, v, g, k)
}

//go:noescape
func expAVX2(x *float64, n int, c *[expConsts][8]float64)

// expTable is expAVX2's constants, each eight times, in the order its
// offsets (64 bytes apart) name them.
var expTable = func() (t [expConsts][8]float64) {
	for i, c := range [expConsts]float64{expLog2e, math.Copysign(0, -1), 0.5, expLn2Hi, expLn2Lo,
		expP1, expP2, expP3, expP4, expP5, 1, 2, math.Float64frombits(1022), expMax, math.Inf(1), expMin} {
		for j := range t[i] {
			t[i][j] = c
		}
	}
	return t
}()

const expConsts = 16

//go:noescape
func expAVX512(x *float64, n int, c *[expConsts][8]float64)

// expInPlace sets x[i] = exp64(x[i]), eight at a time with AVX-512, four
// with AVX2.
func expInPlace(x []float64) {
	if isa >= isaAVX512 && len(x) >= 8 {
		n := len(x) &^ 7
		expAVX512(&x[0], n, &expTable)
		x = x[n:]
	}
	if simd && len(x) >= 4 {
		n := len(x) &^ 3
		expAVX2(&x[0], n, &expTable)
		x = x[n:]
	}
	for i, v := range x {
		x[i] = exp64(v)
	}
}

//go:noescape
func packBTAVX2(dst, src *float32, cs, k8 int)

// packBT packs a full 32-column strip of a transposed B (B(p, j) =
// src[p + j*cs]) for p < k: dst[p*nr + j]; false without AVX2.
func packBT(dst, src []float32, cs, k int) bool {
	if !simd || k < 8 {
		return false
	}
	k8 := k &^ 7
	_ = dst[k*nr-1]
	_ = src[(nr-1)*cs+k-1]
	packBTAVX2(&dst[0], &src[0], cs, k8)
	for j := range nr {
		col := src[j*cs:]
		for p := k8; p < k; p++ {
			dst[p*nr+j] = col[p]
		}
	}
	return true
}

//go:noescape
func addAVX2(out, a, b *float32, n int)

//go:noescape
func mulAVX2(out, a, b *float32, n int)

// addVec sets out[i] = a[i] + b[i] (equal lengths), eight at a time with
// AVX2: one rounded add each, as the scalar loop.
func addVec(out, a, b []float32) {
	if simd && len(a) >= 8 {
		n := len(a) &^ 7
		_, _ = out[n-1], b[n-1]
		addAVX2(&out[0], &a[0], &b[0], n)
		out, a, b = out[n:], a[n:], b[n:]
	}
	addGo(out, a, b)
}

//go:noescape
func foldAVX2(dst *float32, parts **float32, np, n int)

// foldParts bounds the parts foldVec passes to the assembly from a table
// on the stack (a group of more ranks than that folds in Go).
const foldParts = 64

// foldVec is Fold: eight elements at a time with AVX2, each summed in
// part order in one register, as the scalar loop.
func foldVec(dst []float32, parts [][]float32) {
	n := len(dst) &^ 7
	if !simd || n == 0 || len(parts) > foldParts {
		foldGo(dst, parts, 0)
		return
	}
	var ptrs [foldParts]*float32
	for j, p := range parts {
		ptrs[j] = &p[:n][0]
	}
	foldAVX2(&dst[:n][0], &ptrs[0], len(parts), n)
	foldGo(dst, parts, n)
}

// mulVec sets out[i] = a[i] * b[i], as addVec.
func mulVec(out, a, b []float32) {
	if simd && len(a) >= 8 {
		n := len(a) &^ 7
		_, _ = out[n-1], b[n-1]
		mulAVX2(&out[0], &a[0], &b[0], n)
		out, a, b = out[n:], a[n:], b[n:]
	}
	mulGo(out, a, b)
}
