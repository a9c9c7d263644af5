//go:build cgo

package cudalib

import (
	"encoding/binary"
	"math"
	"testing"

	"amspc/kernels/gpu"
)

// streamSrc are the kernels the stream tests time and order work with:
// spin_fill holds its stream for a number of clock cycles, then fills;
// wait_flag holds its stream until set_flag (on another stream) raises
// the flag, or a time-out: it records which came first.
const streamSrc = `
extern "C" __global__ void spin_fill(float *out, long n, float v, long long cycles) {
	long long t0 = clock64();
	while (clock64() - t0 < cycles) {
	}
	for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
		out[i] = v;
	}
}
extern "C" __global__ void scale(float *y, const float *x, float a, long n) {
	for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
		y[i] = a * x[i];
	}
}
extern "C" __global__ void wait_flag(volatile int *flag, int *seen, long long cycles) {
	long long t0 = clock64();
	while (*flag == 0 && clock64() - t0 < cycles) {
	}
	*seen = *flag;
}
extern "C" __global__ void set_flag(volatile int *flag) {
	*flag = 1;
	__threadfence_system();
}
`

// spinCycles is how long spin_fill holds its stream: about half a
// second at an H100's clock, far longer than the host takes to enqueue
// what follows it (the test warms cuBLASLt up first), so work that does
// not wait for it runs before it ends.
const spinCycles = int64(1 << 30)

// openStreamGPU opens GPU 0 as the engine drives it, with streamSrc's
// kernels loaded beside ops.cu's, or skips as openGPU does.
func openStreamGPU(t *testing.T) (*Libs, *GPU, map[string]*Function) {
	l, c := openGPU(t)
	g, err := l.NewGPU(c.Device.Ordinal)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Error(err)
		}
	})
	d := g.ctx.Device
	cubin, err := l.Compile(streamSrc, "streams.cu", d.Major, d.Minor)
	if err != nil {
		t.Fatal(err)
	}
	m, err := g.ctx.LoadModule(cubin)
	if err != nil {
		t.Fatal(err)
	}
	fns := map[string]*Function{}
	for _, name := range []string{"spin_fill", "scale", "wait_flag", "set_flag"} {
		if fns[name], err = m.Function(name); err != nil {
			t.Fatal(err)
		}
	}
	return l, g, fns
}

// gpuBuf is bytes of the GPU's memory, freed when the test ends.
func gpuBuf(t *testing.T, g *GPU, bytes int64) uint64 {
	a, err := g.Alloc(bytes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Free(a) })
	return a
}

// gpuFloats is n floats at a, read back once all streams are done.
func gpuFloats(t *testing.T, g *GPU, a uint64, n int) []float32 {
	raw := make([]byte, 4*n)
	if err := g.Download(raw, a); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out
}

// setFloats uploads s to a.
func setFloats(t *testing.T, g *GPU, a uint64, s []float32) {
	raw := make([]byte, 4*len(s))
	for i, v := range s {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	if err := g.Upload(a, raw); err != nil {
		t.Fatal(err)
	}
}

func filled(n int, v float32) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = v
	}
	return s
}

// allEqual fails the test where s is not want (a pattern of period
// len(want)).
func allEqual(t *testing.T, what string, s []float32, want ...float32) {
	t.Helper()
	for i, v := range s {
		if w := want[i%len(want)]; v != w {
			t.Errorf("%s[%d] = %v, want %v", what, i, v, w)
			return
		}
	}
}

// launchOn enqueues a test kernel on the GPU's stream s (one block of
// 256 threads: it leaves the rest of the GPU to the other streams).
func launchOn(t *testing.T, g *GPU, s int, f *Function, args ...any) {
	t.Helper()
	st, err := g.Stream(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.LaunchOn(st, [3]int{1, 1, 1}, [3]int{256, 1, 1}, 0, args...); err != nil {
		t.Fatal(err)
	}
}

// TestGPUStreamsWait: work on stream 1 that waits (Record on stream 0,
// Wait on stream 1) for a long kernel on stream 0 sees its result: a
// copy, an ops.cu kernel (bf16_widen) through GPU.Launch, a test kernel,
// a cuBLASLt product through GPU.Gemm and, last, a memset that the long
// kernel's write must not follow. Without the wait each of them would
// run while the long kernel still spins, and read or be overwritten
// before its fill.
func TestGPUStreamsWait(t *testing.T) {
	_, g, fns := openStreamGPU(t)
	const n, d = 1 << 20, 64
	a, b, c := gpuBuf(t, g, 4*n), gpuBuf(t, g, 4*n), gpuBuf(t, g, 4*n)
	wide := gpuBuf(t, g, 8*n) // a's 2n bf16 halves, widened
	ones, prod := gpuBuf(t, g, 4*d*d), gpuBuf(t, g, 4*d*d)
	setFloats(t, g, a, make([]float32, n))
	setFloats(t, g, b, filled(n, -1))
	setFloats(t, g, c, filled(n, -1))
	setFloats(t, g, ones, filled(d*d, 1))
	mm := &gpu.Gemm{Kind: gpu.GemmAB, M: d, K: d, N: d}
	// cuBLASLt's handle, this shape's plan and stream 1's workspace are
	// made on first use, outside the timed part.
	if err := g.Gemm(1, mm, b, ones, prod); err != nil {
		t.Fatal(err)
	}
	if err := g.Sync(); err != nil {
		t.Fatal(err)
	}

	launchOn(t, g, 0, fns["spin_fill"], Ptr(a), int64(n), float32(7), spinCycles)
	const ev = 5
	if err := g.Record(0, ev); err != nil {
		t.Fatal(err)
	}
	if err := g.Wait(1, ev); err != nil {
		t.Fatal(err)
	}
	if err := g.Copy(1, b, a, 4*n); err != nil {
		t.Fatal(err)
	}
	w := gpu.BF16Widen(2 * n)
	if err := g.Launch(1, &w, []uint64{wide, a, 0}); err != nil {
		t.Fatal(err)
	}
	launchOn(t, g, 1, fns["scale"], Ptr(c), Ptr(b), float32(2), int64(n))
	if err := g.Gemm(1, mm, b, ones, prod); err != nil {
		t.Fatal(err)
	}
	if err := g.Zero(1, a, 4*n); err != nil {
		t.Fatal(err)
	}
	if err := g.Sync(); err != nil {
		t.Fatal(err)
	}
	allEqual(t, "copy", gpuFloats(t, g, b, n), 7)
	// 7 is 0x40e00000: as little-endian bf16 halves, 0 then 7.
	allEqual(t, "bf16_widen", gpuFloats(t, g, wide, 2*n), 0, 7)
	allEqual(t, "scale", gpuFloats(t, g, c, n), 14)
	allEqual(t, "gemm", gpuFloats(t, g, prod, d*d), 7*d)
	allEqual(t, "memset", gpuFloats(t, g, a, n), 0)
}

// TestGPUStreamsConcurrent: streams without events between them run at
// once: a kernel on stream 0 that waits for a flag sees it raised by a
// kernel on stream 1 enqueued after it (on one stream, or on the legacy
// stream, it would time out first); streams 2 and 3 fill buffers
// meanwhile, and after Sync every stream's work is done. Stream indices
// outside the GPU's are errors, and a Wait on an event never recorded
// waits for nothing.
func TestGPUStreamsConcurrent(t *testing.T) {
	_, g, fns := openStreamGPU(t)
	if g.legacy {
		t.Skipf("%s=legacy: one stream", EnvStreams)
	}
	const n = 1 << 16
	flag, seen := gpuBuf(t, g, 4), gpuBuf(t, g, 4)
	x, y := gpuBuf(t, g, 4*n), gpuBuf(t, g, 4*n)
	setFloats(t, g, flag, []float32{0})
	setFloats(t, g, seen, filled(1, -1))
	setFloats(t, g, y, filled(n, -1))

	launchOn(t, g, 0, fns["wait_flag"], Ptr(flag), Ptr(seen), 4*spinCycles)
	launchOn(t, g, 1, fns["set_flag"], Ptr(flag))
	launchOn(t, g, 2, fns["spin_fill"], Ptr(x), int64(n), float32(3), spinCycles/8)
	if err := g.Wait(3, 77); err != nil {
		t.Fatal(err)
	}
	if err := g.Zero(3, y, 4*n); err != nil {
		t.Fatal(err)
	}
	if err := g.Sync(); err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, 4)
	if err := g.Download(raw, seen); err != nil {
		t.Fatal(err)
	}
	if got := binary.LittleEndian.Uint32(raw); got != 1 {
		t.Errorf("the kernel on stream 0 saw flag %d: streams 0 and 1 did not run at once", got)
	}
	allEqual(t, "stream 2's fill", gpuFloats(t, g, x, n), 3)
	allEqual(t, "stream 3's memset", gpuFloats(t, g, y, n), 0)

	w := gpu.BF16Widen(2)
	for _, err := range []error{
		g.Launch(numStreams, &w, []uint64{x, y, 0}),
		g.Copy(-1, x, y, 4),
		g.Record(numStreams, 0),
		g.Wait(0, -1),
	} {
		if err == nil {
			t.Error("a stream or event index out of range was accepted")
		}
	}
}
