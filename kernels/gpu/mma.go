package gpu

import "math"

// MMAReference is what mma.cu's mma_probe computes, in float64: a b + c
// for a 16x16 a and a 16x8 b of bf16 values (row-major, each its top 16
// bits) and a 16x8 c.
func MMAReference(a, b []uint16, c []float32) []float64 {
	bf := func(h uint16) float64 { return float64(math.Float32frombits(uint32(h) << 16)) }
	out := make([]float64, 128)
	for i := range 16 {
		for j := range 8 {
			s := float64(c[i*8+j])
			for k := range 16 {
				s += bf(a[i*16+k]) * bf(b[k*8+j])
			}
			out[i*8+j] = s
		}
	}
	return out
}

// MMAThreads is the block of mma.cu's attention kernels; each covers 64
// rows (queries, or for attention_mma_dkv keys) a block.
const MMAThreads = 128

// MMASmem are the dynamic shared memory bytes of mma.cu's attention
// kernels for head dim hd: attention_mma_fwd's, attention_mma_dq's and
// attention_mma_dkv's.
func MMASmem(hd int) (fwd, dq, dkv int) {
	tile := 64
	if hd > 64 {
		tile = 32
	}
	return 256 * hd, 6 * tile * hd, 8*tile*hd + 8*tile
}
