//go:build cgo

package cudalib

import (
	"math"
	"math/rand/v2"
	"testing"

	"amspc/kernels/gpu"
)

// TestGPUMMA: kernels/gpu's mma.cu compiles for this GPU (tensor cores:
// sm_80 and later) and its probe, which loads a warp's fragments as the
// PTX ISA lays them out (and kernels/gpu/hostc's shim emulates them),
// computes a b + c: the layout the future tensor-core kernels are
// developed against on the host is the hardware's.
func TestGPUMMA(t *testing.T) {
	l, c := openGPU(t)
	d := c.Device
	if d.Major < 8 {
		t.Skipf("%v has no bf16 tensor cores (sm_80 and later)", d)
	}
	cubin, err := l.Compile(gpu.MMASource, "mma.cu", d.Major, d.Minor)
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.LoadModule(cubin)
	if err != nil {
		t.Fatal(err)
	}
	fn, err := m.Function("mma_probe")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(16, 8))
	// bf16 values as pairs in int32s (little-endian: the even one low).
	pairs := func(h []uint16) []int32 {
		out := make([]int32, len(h)/2)
		for i := range out {
			out[i] = int32(uint32(h[2*i]) | uint32(h[2*i+1])<<16)
		}
		return out
	}
	alloc := func(bytes int64) Ptr {
		p, err := c.Alloc(bytes)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Free(p) })
		return p
	}
	pa, pb, pc, pd := alloc(512), alloc(256), alloc(512), alloc(512)
	for range 3 {
		bf := func(n int) []uint16 {
			s := make([]uint16, n)
			for i := range s {
				s[i] = uint16(math.Float32bits(rng.Float32()*2-1) >> 16)
			}
			return s
		}
		a, b := bf(256), bf(128)
		cc := make([]float32, 128)
		for i := range cc {
			cc[i] = rng.Float32()*2 - 1
		}
		if err := c.CopyInInts(pa, pairs(a)); err != nil {
			t.Fatal(err)
		}
		if err := c.CopyInInts(pb, pairs(b)); err != nil {
			t.Fatal(err)
		}
		if err := c.CopyIn(pc, cc); err != nil {
			t.Fatal(err)
		}
		if err := fn.Launch([3]int{1, 1, 1}, [3]int{32, 1, 1}, 0, pd, pa, pb, pc); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, 128)
		if err := c.CopyOut(got, pd); err != nil {
			t.Fatal(err)
		}
		want := gpu.MMAReference(a, b, cc)
		worst := 0.0
		for i := range want {
			if dd := math.Abs(float64(got[i]) - want[i]); dd > 1e-5 {
				t.Fatalf("element %d (row %d, col %d): %g, want %g", i, i/8, i%8, got[i], want[i])
			} else {
				worst = math.Max(worst, dd)
			}
		}
		t.Logf("mma_probe: largest difference from the float64 product %.2g", worst)
	}
}
