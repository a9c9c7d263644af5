//go:build !amd64 || purego

package kernels

// simd is false: this build has no assembly microkernel.
const simd = false

func microKernel(a, b []float32, kb int, t *[mr * nr]float32) {
	kernelGo(a, b, kb, t)
}

// peakFMA: no SIMD in this build.
func peakFMA(n int, wide bool) bool { return false }

// The instruction sets of amd64's assembly kernels; this build has none.
const (
	isaNone = iota
	isaAVX2
	isaAVX512
	isa = isaNone
)

// setISA: this build has only the portable kernels.
func setISA(level int) int { return isaNone }

// FirstNonFinite returns the index of the first NaN or ±Inf in x, or -1.
func FirstNonFinite(x []float32) int { return firstNonFiniteGo(x) }

// microKernelC: no in-place kernel in this build.
func microKernelC(a []float32, ars, aks int, b []float32, bks, kb int, c []float32, ldc int, zero bool) bool {
	return false
}

// microKernelEdge: no edge kernel in this build.
func microKernelEdge(a []float32, ars, aks int, b []float32, bks, kb int, c []float32, ldc, ni int) bool {
	return false
}

func adamw(p, m, v, g []float32, k *adamConsts) { adamwGo(p, m, v, g, k) }

// expInPlace sets x[i] = exp64(x[i]).
func expInPlace(x []float64) {
	for i, v := range x {
		x[i] = exp64(v)
	}
}

// packBT: no assembly in this build.
func packBT(dst, src []float32, cs, k int) bool { return false }

func addVec(out, a, b []float32)               { addGo(out, a, b) }
func foldVec(dst []float32, parts [][]float32) { foldGo(dst, parts, 0) }
func mulVec(out, a, b []float32)               { mulGo(out, a, b) }
