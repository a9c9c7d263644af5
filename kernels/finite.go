package kernels

import "math"

// firstNonFiniteGo scans the exponent bits: a float32 is NaN or ±Inf when
// its bits with the sign cleared exceed the largest finite value's.
func firstNonFiniteGo(x []float32) int {
	for i, v := range x {
		if math.Float32bits(v)&0x7fffffff > 0x7f7fffff {
			return i
		}
	}
	return -1
}
