package kernels

import "math"

// exp64 is e^x in float64, the kernels' one exponential (every exp of
// NUMERICS.md's kernels goes through it, or through expInPlace, which
// gives the same bits four lanes at a time). It is the classic reduction
// (fdlibm's e_exp.c, as Go's portable math.Exp): x = k ln2 + r with ln2
// split in two, a degree-5 minimax polynomial for the remainder, then
// y 2^k; error below 1 ulp. Two choices of ours: results below the
// smallest normal float64 (x < -708) are 0, so that scaling by 2^k is one
// exact multiply on every path, and the explicit float64 conversions
// forbid the compiler to fuse multiply-adds, so this loop and the SIMD
// one agree bit for bit on every architecture.
func exp64(x float64) float64 {
	switch {
	case x != x:
		return x
	case x > expMax:
		return math.Inf(1)
	case x < expMin:
		return 0
	}
	h := float64(expLog2e * x)
	if x < 0 {
		h -= 0.5
	} else {
		h += 0.5
	}
	kf := math.Trunc(h)
	hi := x - float64(kf*expLn2Hi)
	lo := float64(kf * expLn2Lo)
	r := hi - lo
	t := float64(r * r)
	c := r - float64(t*(expP1+float64(t*(expP2+float64(t*(expP3+float64(t*(expP4+float64(t*expP5)))))))))
	y := 1 - ((lo - float64(r*c)/(2-c)) - hi)
	return float64(y+y) * math.Float64frombits(uint64(int64(kf)+1022)<<52)
}

const (
	expLn2Hi = 6.93147180369123816490e-01
	expLn2Lo = 1.90821492927058770002e-10
	expLog2e = 1.44269504088896338700e+00
	expMax   = 7.09782712893383973096e+02 // above: +Inf
	expMin   = -708                       // below: 0 (e^-708 is about 3.3e-308, just above the smallest normal)

	expP1 = 1.66666666666666657415e-01
	expP2 = -2.77777777770155933842e-03
	expP3 = 6.61375632143793436117e-05
	expP4 = -1.65339022054652515390e-06
	expP5 = 4.13813679705723846039e-08
)

// expChunk is how many exponentials the elementwise kernels take at a
// time (a float64 scratch array on the stack).
const expChunk = 256
