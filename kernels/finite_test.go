package kernels

import (
	"math"
	"testing"
)

// TestFirstNonFinite: NaN, +Inf and -Inf are found at every position of
// every length up to 70 (vector body and tail); the largest finite
// values, zeros and subnormals are not.
func TestFirstNonFinite(t *testing.T) {
	bad := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), math.Float32frombits(0x7f800001), math.Float32frombits(0xffc00000)}
	good := []float32{math.MaxFloat32, -math.MaxFloat32, 0, float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32, 1}
	for n := 0; n <= 70; n++ {
		x := make([]float32, n)
		for i := range x {
			x[i] = good[i%len(good)]
		}
		if i := FirstNonFinite(x); i != -1 {
			t.Fatalf("n=%d: finite data reported at %d", n, i)
		}
		for pos := 0; pos < n; pos++ {
			for _, b := range bad {
				x[pos] = b
				if i := FirstNonFinite(x); i != pos {
					t.Fatalf("n=%d: %v at %d reported at %d", n, b, pos, i)
				}
			}
			x[pos] = good[pos%len(good)]
		}
	}
}

func BenchmarkFirstNonFinite(b *testing.B) {
	x := make([]float32, 1<<20)
	for i := range x {
		x[i] = float32(i)
	}
	b.SetBytes(4 << 20)
	for b.Loop() {
		FirstNonFinite(x)
	}
}
