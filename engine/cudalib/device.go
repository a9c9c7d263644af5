//go:build cgo

package cudalib

/*
#include "dl.h"
*/
import "C"

import (
	"fmt"
	"os"
	"sync"
	"unsafe"

	"amspc/engine"
	"amspc/ir"
	"amspc/kernels/gpu"
)

// GPU is one GPU as the engine's device backend drives it (it has
// engine.Device's methods): ops.cu compiled by NVRTC for the GPU's
// architecture (cached on disk) and loaded, cuBLASLt for the matmuls.
//
// Each stream index (the plan's compute, gather and reduce streams and
// the engine's control stream) is a CUDA stream of its own, and each
// event index a CUDA event: a launch, copy, memset or product on stream
// s is enqueued on s's CUDA stream, Record is cuEventRecord and Wait
// cuStreamWaitEvent, so the streams' work overlaps on the device and
// only the plan's events order it. The streams are blocking ones (flags
// 0): the legacy default stream waits for all their earlier work and
// they wait for its. Upload and Download are synchronous copies on the
// legacy stream, so each runs after every stream's work issued before
// it and before any issued after it: the engine relies on that (its
// Read, Write and scratch uploads need no event).
//
// With $AMSPC_CUDA_STREAMS=legacy every stream index is the legacy
// default stream, as before streams were real: everything runs in issue
// order, which tells an ordering bug (a missing event) from others.
type GPU struct {
	ctx     *Context
	fns     map[string]*Function
	streams [numStreams]Stream
	legacy  bool // every index is the legacy stream ($AMSPC_CUDA_STREAMS)

	mu         sync.Mutex
	sizes      map[uint64]int64
	live, peak int64

	emu    sync.Mutex
	events []C.CUevent // by index, each made on its first Record or Wait
	closed bool

	staged staging // UploadOn's

	// The capture under way (graph.go), nil if none, under cmu; the
	// events captures fork and join with.
	cmu     sync.Mutex
	capture *gpuCapture
	gevents *graphEvents
	graphs  []*Graph // destroyed by Close

	marks marks // timing events (marks.go)
}

// numStreams is the stream indices a GPU has: the plan's and the
// engine's control stream.
const numStreams = engine.ControlStream + 1

// EnvStreams set to "legacy" puts all of a GPU's work on the legacy
// default stream.
const EnvStreams = "AMSPC_CUDA_STREAMS"

// maxEvents bounds event indices: a larger one is a bug, not a plan.
const maxEvents = 1 << 20

// Stream is a CUDA stream of a context; the zero Stream is the context's
// legacy default stream.
type Stream struct{ h C.CUstream }

// NewStream creates a CUDA stream that synchronizes with the legacy
// default stream (flags 0, CU_STREAM_DEFAULT).
func (c *Context) NewStream() (Stream, error) { return c.newStream(0) }

// newStream creates a CUDA stream with flags (CU_STREAM_NON_BLOCKING =
// 1: the legacy stream does not synchronize with it).
func (c *Context) newStream(flags uint) (Stream, error) {
	var s Stream
	err := c.do(func() error { return check("cuStreamCreate", C.amsp_cuStreamCreate(&s.h, C.uint(flags))) })
	return s, err
}

// nonBlockingComm makes the plan's comm streams non-blocking, as
// PyTorch makes NCCL's: with the collectives on the GPU, a collective
// waits for the other ranks, which may themselves be in a synchronous
// copy mid-step (an id check, a loss), so the copies must not wait for
// the comm streams (the engine orders what they read through events).
// Called before any work.
func (g *GPU) nonBlockingComm() error {
	if g.legacy {
		return nil
	}
	for _, s := range []int{ir.CommGather, ir.CommReduce} {
		g.ctx.releaseWorkspace(g.streams[s])
		if err := g.ctx.DestroyStream(g.streams[s]); err != nil {
			return err
		}
		st, err := g.ctx.newStream(1)
		if err != nil {
			return err
		}
		g.streams[s] = st
	}
	return nil
}

// DestroyStream destroys s (its pending work still completes).
func (c *Context) DestroyStream(s Stream) error {
	if s.h == nil {
		return nil
	}
	return c.do(func() error { return check("cuStreamDestroy", C.amsp_cuStreamDestroy(s.h)) })
}

// SyncStream waits for s's work.
func (c *Context) SyncStream(s Stream) error {
	return c.do(func() error { return check("cuStreamSynchronize", C.amsp_cuStreamSynchronize(s.h)) })
}

// Peak is the most device memory this GPU value had allocated at once,
// in bytes (the plan's buffers and every launch's scratch).
func (g *GPU) Peak() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.peak
}

// NewGPU opens GPU ordinal and loads amspc's kernels onto it.
func (l *Libs) NewGPU(ordinal int) (*GPU, error) {
	c, err := l.Open(ordinal)
	if err != nil {
		return nil, err
	}
	cubin, err := l.Compile(gpu.Source, "ops.cu", c.Device.Major, c.Device.Minor)
	if err != nil {
		return nil, fmt.Errorf("compiling ops.cu for %v: %w", c.Device, err)
	}
	m, err := c.LoadModule(cubin)
	if err != nil {
		return nil, err
	}
	g := &GPU{ctx: c, fns: map[string]*Function{}, sizes: map[uint64]int64{}}
	for _, k := range gpu.Kernels {
		if g.fns[k.Name], err = m.Function(k.Name); err != nil {
			return nil, err
		}
	}
	switch v := os.Getenv(EnvStreams); v {
	case "":
	case "legacy":
		g.legacy = true
		return g, nil
	default:
		return nil, fmt.Errorf("%s=%q: the only value is legacy", EnvStreams, v)
	}
	for i := range g.streams {
		if g.streams[i], err = c.NewStream(); err != nil {
			g.Close()
			return nil, err
		}
	}
	return g, nil
}

// Context is the GPU's context (for NCCL: Context.NCCLInit).
func (g *GPU) Context() *Context { return g.ctx }

// Stream is stream index s's CUDA stream (to enqueue NCCL's collectives
// on it).
func (g *GPU) Stream(s int) (Stream, error) {
	if s < 0 || s >= numStreams {
		return Stream{}, fmt.Errorf("stream %d: the GPU has streams 0 to %d", s, numStreams-1)
	}
	// The zero Stream, the legacy one, only when asked for: it orders
	// everything.
	if g.streams[s].h == nil && !g.legacy {
		return Stream{}, fmt.Errorf("stream %d of a closed GPU", s)
	}
	return g.streams[s], nil
}

// event is event index ev's CUDA event, made on first use (no timing:
// CU_EVENT_DISABLE_TIMING makes record and wait cheapest).
func (g *GPU) event(ev int) (C.CUevent, error) {
	if ev < 0 || ev >= maxEvents {
		return nil, fmt.Errorf("event %d out of range", ev)
	}
	g.emu.Lock()
	defer g.emu.Unlock()
	if g.closed {
		return nil, fmt.Errorf("event %d of a closed GPU", ev)
	}
	if ev >= len(g.events) {
		g.events = append(g.events, make([]C.CUevent, ev+1-len(g.events))...)
	}
	if g.events[ev] == nil {
		var e C.CUevent
		const disableTiming = 2 // CU_EVENT_DISABLE_TIMING
		if err := g.ctx.do(func() error { return check("cuEventCreate", C.amsp_cuEventCreate(&e, disableTiming)) }); err != nil {
			return nil, err
		}
		g.events[ev] = e
	}
	return g.events[ev], nil
}

// Close waits for the GPU's work and destroys its streams and events
// (and the streams' cuBLASLt workspaces); the GPU is not to be used
// after. (engine.Device has no Close: the engine never calls it.)
func (g *GPU) Close() error {
	g.emu.Lock()
	defer g.emu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	err := g.ctx.Sync()
	if e := g.staged.free(g.ctx); err == nil {
		err = e
	}
	if e := g.closeGraphs(); err == nil {
		err = e
	}
	if e := g.closeMarks(); err == nil {
		err = e
	}
	// NCCL's communicators go before the streams they ran on.
	if e := g.closeCollectives(); err == nil {
		err = e
	}
	for i, ev := range g.events {
		if ev == nil {
			continue
		}
		if e := g.ctx.do(func() error { return check("cuEventDestroy", C.amsp_cuEventDestroy(ev)) }); err == nil {
			err = e
		}
		g.events[i] = nil
	}
	for i, st := range g.streams {
		if st.h == nil {
			continue
		}
		g.ctx.releaseWorkspace(st)
		if e := g.ctx.DestroyStream(st); err == nil {
			err = e
		}
		g.streams[i] = Stream{}
	}
	return err
}

// LoadTensorCoreKernels compiles and loads mma.cu (attention on bf16
// tensor cores, for runtime.DeviceOptions.TensorCoreAttention): sm_80 and
// later.
func (g *GPU) LoadTensorCoreKernels(l *Libs) error {
	d := g.ctx.Device
	if d.Major < 8 {
		return fmt.Errorf("%v has no bf16 tensor cores (sm_80 and later)", d)
	}
	cubin, err := l.Compile(gpu.MMASource, "mma.cu", d.Major, d.Minor)
	if err != nil {
		return fmt.Errorf("compiling mma.cu for %v: %w", d, err)
	}
	m, err := g.ctx.LoadModule(cubin)
	if err != nil {
		return err
	}
	for _, k := range gpu.MMAKernels {
		if g.fns[k.Name], err = m.Function(k.Name); err != nil {
			return err
		}
	}
	return nil
}

func (g *GPU) Name() string { return g.ctx.Device.String() }

func (g *GPU) Alloc(bytes int64) (uint64, error) {
	p, err := g.ctx.Alloc(max(bytes, 1))
	if err != nil {
		return 0, err
	}
	g.mu.Lock()
	g.sizes[uint64(p)] = bytes
	g.live += bytes
	g.peak = max(g.peak, g.live)
	g.mu.Unlock()
	return uint64(p), nil
}

func (g *GPU) Free(addr uint64) {
	g.mu.Lock()
	g.live -= g.sizes[addr]
	delete(g.sizes, addr)
	g.mu.Unlock()
	g.ctx.Free(Ptr(addr))
}

// Upload and Download are synchronous copies (pageable host memory) on
// the legacy stream: after every stream's earlier work, before its later
// work (see GPU).
func (g *GPU) Upload(addr uint64, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return g.ctx.do(func() error {
		return check("cuMemcpyHtoD", C.amsp_cuMemcpyHtoD(C.CUdeviceptr(addr), unsafe.Pointer(&src[0]), C.size_t(len(src))))
	})
}

func (g *GPU) Download(dst []byte, addr uint64) error {
	if len(dst) == 0 {
		return nil
	}
	return g.ctx.do(func() error {
		return check("cuMemcpyDtoH", C.amsp_cuMemcpyDtoH(unsafe.Pointer(&dst[0]), C.CUdeviceptr(addr), C.size_t(len(dst))))
	})
}

func (g *GPU) Copy(s int, dst, src uint64, bytes int64) error {
	st, err := g.Stream(s)
	if err != nil {
		return err
	}
	return g.ctx.do(func() error {
		return check("cuMemcpyDtoDAsync", C.amsp_cuMemcpyDtoDAsync(C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(bytes), st.h))
	})
}

// Launch enqueues l on stream s with its pointer arguments at addrs.
func (g *GPU) Launch(s int, l *gpu.Launch, addrs []uint64) error {
	st, err := g.Stream(s)
	if err != nil {
		return err
	}
	f := g.fns[l.Kernel]
	if f == nil {
		return fmt.Errorf("no kernel %s on the GPU", l.Kernel)
	}
	if err := l.CheckArgs(); err != nil {
		return err
	}
	args, err := launchArgs(l, addrs)
	if err != nil {
		return err
	}
	return f.LaunchOn(st, l.Grid, [3]int{l.Block, 1, 1}, l.Smem, args...)
}

// launchArgs are l's arguments as cuLaunchKernel takes them: every
// pointer kind (gpu.Null and those before it) the address in addrs, the
// scalars their values.
func launchArgs(l *gpu.Launch, addrs []uint64) ([]any, error) {
	args := make([]any, len(l.Args))
	for i, a := range l.Args {
		switch {
		case a.Kind <= gpu.Null:
			args[i] = Ptr(addrs[i])
		case a.Kind == gpu.Int:
			args[i] = a.I
		case a.Kind == gpu.Float32:
			args[i] = float32(a.F)
		case a.Kind == gpu.Float64:
			args[i] = a.F
		default:
			return nil, fmt.Errorf("%s: argument %d is of kind %d", l.Kernel, i, a.Kind)
		}
	}
	return args, nil
}

// Gemm runs a plan's matmul through cuBLASLt: fp32 accumulation, fp32
// or bf16 inputs, an fp32 output (or bf16, or added to, as m says).
func (g *GPU) Gemm(s int, m *gpu.Gemm, a, b, out uint64) error {
	st, err := g.Stream(s)
	if err != nil {
		return err
	}
	if err := m.Check(); err != nil {
		return err
	}
	dt, o := F32, Out{DType: F32, Accumulate: m.Accumulate, Stream: st}
	if m.BF16 {
		dt = BF16
	}
	if m.OutBF16 {
		o.DType = BF16
	}
	switch m.Kind {
	case gpu.GemmAB:
		return g.ctx.MatMulOut(Ptr(out), Ptr(a), Ptr(b), m.M, m.K, m.N, dt, o)
	case gpu.GemmABt:
		return g.ctx.MatMulGradAOut(Ptr(out), Ptr(a), Ptr(b), m.M, m.K, m.N, dt, o)
	case gpu.GemmAtB:
		return g.ctx.MatMulGradBOut(Ptr(out), Ptr(a), Ptr(b), m.M, m.K, m.N, dt, o)
	}
	return fmt.Errorf("gemm kind %d", m.Kind)
}

func (g *GPU) Zero(s int, addr uint64, bytes int64) error {
	st, err := g.Stream(s)
	if err != nil {
		return err
	}
	return g.ctx.do(func() error {
		return check("cuMemsetD8Async", C.amsp_cuMemsetD8Async(C.CUdeviceptr(addr), 0, C.size_t(bytes), st.h))
	})
}

// Record marks event ev at this point of stream s's work.
func (g *GPU) Record(s, ev int) error {
	st, err := g.Stream(s)
	if err != nil {
		return err
	}
	e, err := g.event(ev)
	if err != nil {
		return err
	}
	return g.ctx.do(func() error { return check("cuEventRecord", C.amsp_cuEventRecord(e, st.h)) })
}

// Wait makes stream s's later work wait for ev's last Record (the
// engine issues a Wait only after its Record; a Wait on an event never
// recorded waits for nothing).
func (g *GPU) Wait(s, ev int) error {
	st, err := g.Stream(s)
	if err != nil {
		return err
	}
	e, err := g.event(ev)
	if err != nil {
		return err
	}
	return g.ctx.do(func() error { return check("cuStreamWaitEvent", C.amsp_cuStreamWaitEvent(st.h, e, 0)) })
}

// Sync waits for every stream's work (cuCtxSynchronize).
func (g *GPU) Sync() error {
	mark := g.staged.mark()
	if err := g.ctx.Sync(); err != nil {
		return err
	}
	g.staged.reset(mark)
	return nil
}
