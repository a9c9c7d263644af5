package kernels

import (
	"fmt"
	"math"
)

// Elementwise kernels. Their transcendental parts are evaluated in float64
// and rounded once; all of them split work by contiguous index ranges.

// SiLU computes out = x * sigmoid(x).
func SiLU(out, x []float32) {
	out = out[:len(x)]
	expNegChunks(x, func(c int, xs []float32, e []float64) {
		for j, v := range xs {
			out[c+j] = float32(float64(v) / (1 + e[j]))
		}
	})
}

// SiLUGrad computes dx = dy * s * (1 + x*(1-s)), s = sigmoid(x).
func SiLUGrad(dx, x, dy []float32) {
	dx, dy = dx[:len(x)], dy[:len(x)]
	expNegChunks(x, func(c int, xs []float32, e []float64) {
		for j, v := range xs {
			x := float64(v)
			s := 1 / (1 + e[j])
			dx[c+j] = float32(float64(dy[c+j]) * s * (1 + x*(1-s)))
		}
	})
}

// expNegChunks calls use on consecutive chunks xs = x[c:c+len(xs)] of at
// most expChunk values with e[j] = exp64(-xs[j]), the chunks split among
// workers.
func expNegChunks(x []float32, use func(c int, xs []float32, e []float64)) {
	parallelFor(len(x), 20, func(lo, hi int) {
		var e [expChunk]float64
		for c := lo; c < hi; c += expChunk {
			xs := x[c:min(c+expChunk, hi)]
			b := e[:len(xs)]
			for j, v := range xs {
				b[j] = -float64(v)
			}
			expInPlace(b)
			use(c, xs, b)
		}
	})
}

// GELU computes the exact form out = x/2 * (1 + erf(x/sqrt 2)).
func GELU(out, x []float32) {
	out = out[:len(x)]
	parallelFor(len(x), 20, func(lo, hi int) {
		for i, v := range x[lo:hi] {
			x := float64(v)
			out[lo+i] = float32(0.5 * x * (1 + math.Erf(x/math.Sqrt2)))
		}
	})
}

// GELUGrad computes dx = dy * (Phi(x) + x*phi(x)), Phi and phi the standard
// normal CDF and density.
func GELUGrad(dx, x, dy []float32) {
	dx, dy = dx[:len(x)], dy[:len(x)]
	const invSqrt2Pi = 0.3989422804014327
	parallelFor(len(x), 30, func(lo, hi int) {
		var e [expChunk]float64
		for c := lo; c < hi; c += expChunk {
			xs := x[c:min(c+expChunk, hi)]
			b := e[:len(xs)]
			for j, v := range xs {
				x := float64(v)
				b[j] = -0.5 * x * x
			}
			expInPlace(b)
			for j, v := range xs {
				x := float64(v)
				cdf := 0.5 * (1 + math.Erf(x/math.Sqrt2))
				dx[c+j] = float32(float64(dy[c+j]) * (cdf + x*(invSqrt2Pi*b[j])))
			}
		}
	})
}

// geluTanhC is √(2/π), geluTanhA the cubic term's coefficient of the
// tanh approximation.
const (
	geluTanhC = 0.7978845608028654
	geluTanhA = 0.044715
)

// GELUTanh computes out = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))),
// PyTorch's gelu(x, approximate="tanh"), in float64, rounded once.
func GELUTanh(out, x []float32) {
	out = out[:len(x)]
	parallelFor(len(x), 20, func(lo, hi int) {
		for i, v := range x[lo:hi] {
			x := float64(v)
			out[lo+i] = float32(0.5 * x * (1 + math.Tanh(geluTanhC*(x+geluTanhA*x*x*x))))
		}
	})
}

// GELUTanhGrad computes dx = dy·(0.5·(1 + t) + 0.5·x·(1 − t²)·√(2/π)·(1 +
// 3·0.044715·x²)), t = tanh(√(2/π)·(x + 0.044715·x³)): the derivative of
// GELUTanh.
func GELUTanhGrad(dx, x, dy []float32) {
	dx, dy = dx[:len(x)], dy[:len(x)]
	parallelFor(len(x), 30, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			x := float64(x[i])
			t := math.Tanh(geluTanhC * (x + geluTanhA*x*x*x))
			d := 0.5*(1+t) + 0.5*x*(1-t*t)*geluTanhC*(1+3*geluTanhA*x*x)
			dx[i] = float32(float64(dy[i]) * d)
		}
	})
}

// Scale computes out = x·c in fp32, c rounded to fp32 first: what
// PyTorch computes for an fp32 tensor times a Python float.
func Scale(out, x []float32, c float64) {
	out = out[:len(x)]
	k := float32(c)
	parallelFor(len(x), 1, func(lo, hi int) {
		for i, v := range x[lo:hi] {
			out[lo+i] = v * k
		}
	})
}

// broadcast reports whether b is a last-dim operand repeated over the rows
// of a, and panics when the lengths fit neither rule.
func broadcast(what string, a, b []float32) bool {
	switch {
	case len(b) == len(a):
		return false
	case len(b) > 0 && len(b) < len(a) && len(a)%len(b) == 0:
		return true
	}
	panic("kernels: " + what + ": operand lengths differ and do not broadcast")
}

// Add computes out = a + b; b is either as long as a or a last-dim vector
// broadcast over the rows of a.
func Add(out, a, b []float32) {
	out = out[:len(a)]
	if !broadcast("Add", a, b) {
		b = b[:len(a)]
		parallelFor(len(a), 1, func(lo, hi int) {
			addVec(out[lo:hi], a[lo:hi], b[lo:hi])
		})
		return
	}
	d := len(b)
	parallelFor(len(a)/d, d, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			addVec(out[r*d:(r+1)*d], a[r*d:(r+1)*d], b)
		}
	})
}

// Fold sets dst[i] to the left fold of parts[j][i] in part order,
// ((p0[i] + p1[i]) + p2[i]) + ..., one rounded float32 add per part (the
// collectives' reduction order), on the calling goroutine: every part is
// read once and dst written once, with no pass over a partial sum. Every
// part has dst's length (at least one part); dst may be one of the parts
// (the same slice), never a partial overlap of one.
func Fold(dst []float32, parts [][]float32) {
	for _, p := range parts {
		if len(p) != len(dst) {
			panic(fmt.Sprintf("kernels: Fold of a part of %d elements into %d", len(p), len(dst)))
		}
	}
	foldVec(dst, parts)
}

// foldGo is Fold's scalar loop from element lo on (the SIMD path's tail
// and the fallback), a block at a time through a buffer so that dst may be
// a part.
func foldGo(dst []float32, parts [][]float32, lo int) {
	var buf [256]float32
	for ; lo < len(dst); lo += len(buf) {
		s := buf[:min(len(buf), len(dst)-lo)]
		copy(s, parts[0][lo:])
		for _, p := range parts[1:] {
			addGo(s, s, p[lo:lo+len(s)])
		}
		copy(dst[lo:], s)
	}
}

// addGo and mulGo are the scalar loops (and the SIMD paths' tails).
func addGo(out, a, b []float32) {
	b, out = b[:len(a)], out[:len(a)]
	for i, v := range a {
		out[i] = v + b[i]
	}
}

func mulGo(out, a, b []float32) {
	b, out = b[:len(a)], out[:len(a)]
	for i, v := range a {
		out[i] = v * b[i]
	}
}

// AddGradBroadcast sums dy over rows into db (d = len(db)): the gradient of
// a broadcast right operand of +. For equal shapes both gradients are dy
// itself and no kernel is needed.
func AddGradBroadcast(db, dy []float32) {
	d := len(db)
	if d == 0 || len(dy)%d != 0 {
		panic("kernels: AddGradBroadcast: len(dy) is not a multiple of len(db)")
	}
	reduceRows(db, nil, len(dy)/d, d, func(r, j0 int, acc, _ *[colBlock]float64) {
		row := dy[r*d+j0 : r*d+min(j0+colBlock, d)]
		for j, v := range row {
			acc[j] += float64(v)
		}
	})
}

// Mul computes out = a * b with Add's broadcast rule.
func Mul(out, a, b []float32) {
	out = out[:len(a)]
	if !broadcast("Mul", a, b) {
		b = b[:len(a)]
		parallelFor(len(a), 1, func(lo, hi int) {
			mulVec(out[lo:hi], a[lo:hi], b[lo:hi])
		})
		return
	}
	d := len(b)
	parallelFor(len(a)/d, d, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			mulVec(out[r*d:(r+1)*d], a[r*d:(r+1)*d], b)
		}
	})
}

// MulGrad computes da = dy * b and db = dy * a, summed over rows when b is
// broadcast (in float64, by column blocks). A nil da or db is skipped (an
// operand that needs no gradient).
func MulGrad(da, db, a, b, dy []float32) {
	bc := broadcast("MulGrad", a, b)
	dy = dy[:len(a)]
	d := len(b)
	switch {
	case da == nil:
	case bc:
		da = da[:len(a)]
		parallelFor(len(a)/d, d, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				mulVec(da[r*d:(r+1)*d], dy[r*d:(r+1)*d], b)
			}
		})
	default:
		da = da[:len(a)]
		parallelFor(len(a), 1, func(lo, hi int) {
			mulVec(da[lo:hi], dy[lo:hi], b[lo:hi])
		})
	}
	switch {
	case db == nil:
	case !bc:
		db = db[:len(a)]
		parallelFor(len(a), 1, func(lo, hi int) {
			mulVec(db[lo:hi], dy[lo:hi], a[lo:hi])
		})
	default:
		reduceRows(db[:d], nil, len(a)/d, d, func(r, j0 int, acc, _ *[colBlock]float64) {
			ar := a[r*d+j0 : r*d+min(j0+colBlock, d)]
			dyr := dy[r*d+j0:]
			for j, v := range ar {
				acc[j] += float64(dyr[j] * v)
			}
		})
	}
}

// Transpose writes the n x m transpose of the m x n matrix x into out.
func Transpose(out, x []float32, m, n int) {
	for i := 0; i < m; i++ {
		row := x[i*n : (i+1)*n]
		for j, v := range row {
			out[j*m+i] = v
		}
	}
}

// SwiGLU computes out = SiLU(a) * b (equal lengths, no broadcast), the
// fusion of Mul(out, SiLU(a), b) with its bits: t = SiLU(a) rounded to
// fp32 exactly as SiLU computes it (float64 a / (1 + exp(-a)), the
// exponential from expNegChunks), then out = t * b as one fp32 multiply,
// which is exactly rounded, so it is mulVec's product (scalar or SIMD).
func SwiGLU(out, a, b []float32) {
	if len(b) != len(a) {
		panic(fmt.Sprintf("kernels: SwiGLU: operands of %d and %d values", len(a), len(b)))
	}
	out = out[:len(a)]
	expNegChunks(a, func(c int, xs []float32, e []float64) {
		for j, v := range xs {
			t := float32(float64(v) / (1 + e[j]))
			out[c+j] = t * b[c+j]
		}
	})
}

// SwiGLUGrad computes the gradients of out = SwiGLU(a, b) given dy, with
// the bits of the unfused backward (Mul, Mul, SiLUGrad): t = SiLU(a) as
// in SwiGLU, db = dy * t and dt = dy * b (fp32 multiplies, each rounded to
// fp32), and da = float32(float64(dt) * s * (1 + a*(1-s))) with
// s = 1/(1+exp(-a)) (the exponential from expNegChunks), exactly what
// SiLUGrad(da, a, dt) computes from the rounded dt.
func SwiGLUGrad(da, db, a, b, dy []float32) {
	if len(b) != len(a) || len(dy) != len(a) {
		panic(fmt.Sprintf("kernels: SwiGLUGrad: operands of %d, %d and %d values", len(a), len(b), len(dy)))
	}
	da, db = da[:len(a)], db[:len(a)]
	expNegChunks(a, func(c int, xs []float32, e []float64) {
		for j, v := range xs {
			g := dy[c+j]
			t := float32(float64(v) / (1 + e[j]))
			db[c+j] = float32(g * t)
			dt := float32(g * b[c+j])
			x := float64(v)
			s := 1 / (1 + e[j])
			da[c+j] = float32(float64(dt) * s * (1 + x*(1-s)))
		}
	})
}

// GeGLUTanh computes out = GELUTanh(a) * b (equal lengths, no broadcast),
// the fusion of Mul(out, GELUTanh(a), b) with its bits: t = GELUTanh(a)
// rounded to fp32 exactly as GELUTanh computes it (in float64, rounded
// once), then out = t * b as one fp32 multiply, which is exactly rounded,
// so it is mulVec's product (scalar or SIMD).
func GeGLUTanh(out, a, b []float32) {
	if len(b) != len(a) {
		panic(fmt.Sprintf("kernels: GeGLUTanh: operands of %d and %d values", len(a), len(b)))
	}
	out = out[:len(a)]
	parallelFor(len(a), 20, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			x := float64(a[i])
			t := float32(0.5 * x * (1 + math.Tanh(geluTanhC*(x+geluTanhA*x*x*x))))
			out[i] = t * b[i]
		}
	})
}

// GeGLUTanhGrad computes the gradients of out = GeGLUTanh(a, b) given dy,
// with the bits of the unfused backward (Mul, Mul, GELUTanhGrad):
// t = GELUTanh(a) as in GeGLUTanh, db = dy * t and dt = dy * b (fp32
// multiplies, each rounded to fp32), and da = float32(float64(dt) * d)
// with d GELUTanhGrad's derivative, exactly what GELUTanhGrad(da, a, dt)
// computes from the rounded dt.
func GeGLUTanhGrad(da, db, a, b, dy []float32) {
	if len(b) != len(a) || len(dy) != len(a) {
		panic(fmt.Sprintf("kernels: GeGLUTanhGrad: operands of %d, %d and %d values", len(a), len(b), len(dy)))
	}
	da, db = da[:len(a)], db[:len(a)]
	parallelFor(len(a), 40, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			g := dy[i]
			x := float64(a[i])
			th := math.Tanh(geluTanhC * (x + geluTanhA*x*x*x))
			t := float32(0.5 * x * (1 + th))
			db[i] = float32(g * t)
			dt := float32(g * b[i])
			d := 0.5*(1+th) + 0.5*x*(1-th*th)*geluTanhC*(1+3*geluTanhA*x*x)
			da[i] = float32(float64(dt) * d)
		}
	})
}
