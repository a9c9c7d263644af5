package kernels

import "math"

// RoPE rotates x [batch, seq, heads*hd] in the rotate-half layout: for i in
// [0, hd/2) the pair (x[i], x[i+hd/2]) of every head at position p (from 0
// in each sequence) turns by p * theta^(-2i/hd). Angles, sines and cosines
// are float64, rounded once to float32.
func RoPE(out, x []float32, batch, seq, heads, hd int, theta float64) {
	rope(out, x, batch, seq, heads, hd, theta, 1)
}

// RoPEGrad is the transposed rotation (the inverse): dx = R(p)^T dy.
func RoPEGrad(dx, dy []float32, batch, seq, heads, hd int, theta float64) {
	rope(dx, dy, batch, seq, heads, hd, theta, -1)
}

func rope(out, x []float32, batch, seq, heads, hd int, theta float64, sign float64) {
	n := batch * seq * heads * hd
	checkLen("RoPE out", out, n)
	checkLen("RoPE x", x, n)
	if hd%2 != 0 {
		panic("kernels: RoPE needs an even head dim")
	}
	half := hd / 2
	width := heads * hd
	// Positions are the parallel unit: one sin/cos row serves every batch
	// entry and head at that position.
	parallelFor(seq, batch*width*3, func(lo, hi int) {
		bufp := getF32(2 * half)
		defer putF32(bufp)
		cos, sin := (*bufp)[:half], (*bufp)[half:]
		for p := lo; p < hi; p++ {
			for i := range half {
				ang := float64(p) * math.Pow(theta, -2*float64(i)/float64(hd))
				s, c := math.Sincos(ang)
				cos[i], sin[i] = float32(c), float32(sign*s)
			}
			for b := range batch {
				base := (b*seq + p) * width
				xr, or := x[base:base+width], out[base:base+width]
				for h := 0; h < width; h += hd {
					x1, x2 := xr[h:h+half], xr[h+half:h+hd]
					o1, o2 := or[h:h+half], or[h+half:h+hd]
					for i := range half {
						u, v := x1[i], x2[i]
						o1[i] = u*cos[i] - v*sin[i]
						o2[i] = v*cos[i] + u*sin[i]
					}
				}
			}
		}
	})
}
