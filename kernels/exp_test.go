package kernels

import (
	"math"
	"testing"
)

// expInputs spans the whole range: zeros, tiny values, the softmax range
// (-100, 0], both clamps and just inside them, infinities and NaN.
func expInputs() []float64 {
	xs := []float64{0, math.Copysign(0, -1), 1e-300, -1e-300, 1e-10, -1e-10, 0.5, -0.5, 1, -1, math.Ln2, -math.Ln2,
		expMin, expMin + 1e-9, expMin - 1e-9, -745.2, expMax, expMax - 1e-9, expMax + 1e-9, 709, -709,
		math.Inf(1), math.Inf(-1), math.NaN(), 88.7, -103.9}
	rng := newRand(30)
	for range 20000 {
		xs = append(xs, (rng.Float64()*2-1)*720, -rng.Float64()*30, (rng.Float64()*2-1)*1e-3)
	}
	return xs
}

// TestExp64: within 2 ulp of math.Exp (each is within 1 ulp of e^x)
// where the result is normal, 0 below
// expMin, +Inf above expMax, NaN for NaN.
func TestExp64(t *testing.T) {
	for _, x := range expInputs() {
		got, want := exp64(x), math.Exp(x)
		switch {
		case math.IsNaN(x):
			if !math.IsNaN(got) {
				t.Fatalf("exp64(NaN) = %v", got)
			}
		case x < expMin:
			if got != 0 {
				t.Fatalf("exp64(%v) = %v, want 0 below expMin", x, got)
			}
		case x > 709 && x <= expMax:
			// math.Exp on amd64 overflows early (at about 709.44); e^x is
			// finite up to expMax (fdlibm's threshold).
			if math.IsInf(got, 0) || got < 8.2e307 {
				t.Fatalf("exp64(%v) = %v, want finite, above e^709", x, got)
			}
		case want == 0 || math.IsInf(x, 0):
			if got != want {
				t.Fatalf("exp64(%v) = %v, want %v", x, got, want)
			}
		default:

			d := int64(math.Float64bits(got)) - int64(math.Float64bits(want))
			if d > 2 || d < -2 {
				t.Fatalf("exp64(%v) = %v, math.Exp %v: %d ulp apart", x, got, want, d)
			}
		}
	}
}

// TestExpPaths: expInPlace (AVX-512 and AVX2 where the CPU has them)
// gives exp64's bits.
func TestExpPaths(t *testing.T) {
	xs := expInputs()
	for _, level := range []int{isaAVX512, isaAVX2} {
		if level > isa {
			continue
		}
		old := setISA(level)
		got := append([]float64(nil), xs...)
		expInPlace(got)
		setISA(old)
		for i, x := range xs {
			want := exp64(x)
			if math.Float64bits(got[i]) != math.Float64bits(want) && !(math.IsNaN(got[i]) && math.IsNaN(want)) {
				t.Fatalf("isa %d: expInPlace(%v) = %v (%#x), exp64 %v (%#x)", level, x, got[i], math.Float64bits(got[i]), want, math.Float64bits(want))
			}
		}
	}
}

func BenchmarkExp(b *testing.B) {
	xs := make([]float64, expChunk)
	rng := newRand(31)
	for i := range xs {
		xs[i] = -rng.Float64() * 20
	}
	buf := make([]float64, expChunk)
	b.Run("simd", func(b *testing.B) {
		for b.Loop() {
			copy(buf, xs)
			expInPlace(buf)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/expChunk, "ns/exp")
	})
	b.Run("math.Exp", func(b *testing.B) {
		for b.Loop() {
			for i, x := range xs {
				buf[i] = math.Exp(x)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/expChunk, "ns/exp")
	})
}
