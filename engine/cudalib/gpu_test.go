//go:build cgo

package cudalib

import (
	"errors"
	"math/rand/v2"
	"os"
	"testing"

	"amspc/kernels/gpu"
)

// openGPU loads CUDA and opens GPU 0, or skips: on a machine without a GPU
// the error must be the one sentence naming the driver library, unless
// AMSPC_REQUIRE_GPU is set, which makes a missing GPU a failure.
func openGPU(t *testing.T) (*Libs, *Context) {
	l, err := Load()
	if err != nil {
		if os.Getenv("AMSPC_REQUIRE_GPU") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	c, err := l.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%v; %v", l, c.Device)
	return l, c
}

// devFloats is device memory holding s, freed when the test ends.
func devFloats(tb testing.TB, c *Context, s []float32) Ptr {
	p, err := c.Alloc(int64(4 * max(len(s), 1)))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Free(p) })
	if err := c.CopyIn(p, s); err != nil {
		tb.Fatal(err)
	}
	return p
}

// devBF16 is device memory holding the bf16 values h (each its top 16
// bits, two bytes apiece), freed when the test ends.
func devBF16(tb testing.TB, c *Context, h []uint16) Ptr {
	pairs := make([]int32, (len(h)+1)/2) // little-endian: the even one low
	for i, v := range h {
		pairs[i/2] |= int32(v) << (16 * (i % 2))
	}
	p, err := c.Alloc(int64(4 * max(len(pairs), 1)))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Free(p) })
	if err := c.CopyInInts(p, pairs); err != nil {
		tb.Fatal(err)
	}
	return p
}

// TestNoDriverSentence: without the driver, Load says so in one sentence
// naming libcuda.so.1 (this machine kind and CI have no GPU).
func TestNoDriverSentence(t *testing.T) {
	l, err := Load()
	if err == nil {
		t.Skipf("CUDA is here: %v", l)
	}
	var le *LoadError
	if !errors.As(err, &le) {
		t.Fatalf("%T %v", err, err)
	}
	if le.Lib == libCUDA && le.Error()[:60] != "CUDA is not available: libcuda.so.1 (the NVIDIA driver's CUD" {
		t.Errorf("%q", le.Error())
	}
	t.Log(err)
}

const saxpySrc = `
extern "C" __global__ void saxpy(float *y, const float *x, float a, long n) {
	for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
		y[i] = a * x[i] + y[i];
	}
}
`

// TestGPUSaxpy: NVRTC compiles a kernel (and the cache hands it back),
// the driver loads and launches it, and it computes what the host does.
func TestGPUSaxpy(t *testing.T) {
	l, c := openGPU(t)
	t.Setenv("AMSPC_CUDA_CACHE", t.TempDir())
	d := c.Device
	cubin, err := l.Compile(saxpySrc, "saxpy.cu", d.Major, d.Minor)
	if err != nil {
		t.Fatal(err)
	}
	again, err := l.Compile(saxpySrc, "saxpy.cu", d.Major, d.Minor)
	if err != nil || string(again) != string(cubin) {
		t.Fatalf("cached compile: %v", err)
	}
	m, err := c.LoadModule(cubin)
	if err != nil {
		t.Fatal(err)
	}
	f, err := m.Function("saxpy")
	if err != nil {
		t.Fatal(err)
	}
	const n = 1<<20 + 3
	x, y := make([]float32, n), make([]float32, n)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range x {
		x[i], y[i] = rng.Float32(), rng.Float32()
	}
	px, err := c.Alloc(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Free(px)
	py, err := c.Alloc(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Free(py)
	if err := c.CopyIn(px, x); err != nil {
		t.Fatal(err)
	}
	if err := c.CopyIn(py, y); err != nil {
		t.Fatal(err)
	}
	if err := f.Launch([3]int{4 * d.SMs, 1, 1}, [3]int{256, 1, 1}, 0, py, px, float32(3), int64(n)); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, n)
	if err := c.CopyOut(got, py); err != nil {
		t.Fatal(err)
	}
	for i := range got {
		// One fused multiply-add on the GPU, two roundings on the host:
		// compare with the fused form.
		want := float32(3*float64(x[i]) + float64(y[i]))
		if d := got[i] - want; d > 1e-6 || d < -1e-6 {
			t.Fatalf("y[%d] = %v, want %v", i, got[i], want)
		}
	}
}

// benchLaunches times launch on c's GPU: three calls to warm up, then
// b.N timed ones between syncs; it reports per (work per call: FLOPs,
// bytes) per second over unitScale as unit ("TFLOP/s" with 1e12, "GB/s"
// with 1e9).
func benchLaunches(b *testing.B, c *Context, per, unitScale float64, unit string, launch func() error) {
	for range 3 {
		if err := launch(); err != nil {
			b.Fatal(err)
		}
	}
	if err := c.Sync(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if err := launch(); err != nil {
			b.Fatal(err)
		}
	}
	if err := c.Sync(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(per*float64(b.N)/b.Elapsed().Seconds()/unitScale, unit)
}

// benchGPU opens GPU 0 for a benchmark, or skips where CUDA does not
// load, and loads ops.cu compiled for it.
func benchGPU(b *testing.B) (*Libs, *Context, *Module) {
	l, c := benchContext(b)
	cubin, err := l.Compile(gpu.Source, "ops.cu", c.Device.Major, c.Device.Minor)
	if err != nil {
		b.Fatal(err)
	}
	ops, err := c.LoadModule(cubin)
	if err != nil {
		b.Fatal(err)
	}
	return l, c, ops
}
