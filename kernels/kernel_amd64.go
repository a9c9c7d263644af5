//go:build amd64 && !purego

package kernels

import "golang.org/x/sys/cpu"

// simd says whether the AVX2+FMA microkernel runs (chosen once, from
// CPUID and the OS's saved register state, as x/sys/cpu reports them).
var simd = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// peakFMAAVX2 runs n rounds of twelve independent 8-lane FMAs.
func peakFMAAVX2(n int)

// peakFMA runs n rounds of twelve independent 8-lane fused multiply-adds
// (192 float32 FLOPs a round); false when the CPU has no AVX2 and FMA.
func peakFMA(n int) bool {
	if !simd {
		return false
	}
	peakFMAAVX2(n)
	return true
}

//go:noescape
func kernel6x16AVX2(a, b *float32, kb int, c *float32, ldc int, zero bool)

// microKernel adds the product of a packed mr-row A strip and a packed
// nr-column B strip (kb steps) into the tile t.
func microKernel(a, b []float32, kb int, t *[mr * nr]float32) {
	if !microKernelC(a, b, kb, t[:], nr, false) {
		kernelGo(a, b, kb, t)
	}
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
// tile buffer and kernelGo).
func microKernelC(a, b []float32, kb int, c []float32, ldc int, zero bool) bool {
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
	_ = a[kb*mr-1]
	_ = b[kb*nr-1]
	_ = c[(mr-1)*ldc+nr-1]
	kernel6x16AVX2(&a[0], &b[0], kb, &c[0], ldc, zero)
	return true
}
