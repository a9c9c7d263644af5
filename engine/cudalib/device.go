//go:build cgo

package cudalib

/*
#include "dl.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"

	"amspc/kernels/gpu"
)

// GPU is one GPU as the runtime's device backend drives it (it has
// runtime.Device's methods): ops.cu compiled by NVRTC for the GPU's
// architecture (cached on disk) and loaded, cuBLASLt for the matmuls.
//
// Every launch, copy and product goes to the context's legacy default
// stream, which orders each after all earlier work, so the plan's three
// streams and its events need nothing on the device: this first version
// is correct, not overlapped (CUDA streams per plan stream are next).
type GPU struct {
	ctx *Context
	fns map[string]*Function

	mu         sync.Mutex
	sizes      map[uint64]int64
	live, peak int64
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
	return g, nil
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

// Upload and Download are synchronous copies (pageable host memory).
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

func (g *GPU) Copy(_ int, dst, src uint64, bytes int64) error {
	return g.ctx.do(func() error {
		return check("cuMemcpyDtoD", C.amsp_cuMemcpyDtoD(C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(bytes)))
	})
}

// Launch runs l with its pointer arguments at addrs.
func (g *GPU) Launch(_ int, l *gpu.Launch, addrs []uint64) error {
	f := g.fns[l.Kernel]
	if f == nil {
		return fmt.Errorf("no kernel %s on the GPU", l.Kernel)
	}
	if err := l.CheckArgs(); err != nil {
		return err
	}
	args := make([]any, len(l.Args))
	for i, a := range l.Args {
		switch a.Kind {
		case gpu.Operand, gpu.Result, gpu.Scratch, gpu.Flag, gpu.Null:
			args[i] = Ptr(addrs[i])
		case gpu.Int:
			args[i] = a.I
		case gpu.Float32:
			args[i] = float32(a.F)
		case gpu.Float64:
			args[i] = a.F
		}
	}
	return f.Launch(l.Grid, [3]int{l.Block, 1, 1}, l.Smem, args...)
}

// Gemm runs a plan's matmul through cuBLASLt: fp32 accumulation and
// output, fp32 or bf16 inputs.
func (g *GPU) Gemm(_ int, m *gpu.Gemm, a, b, out uint64) error {
	dt := F32
	if m.BF16 {
		dt = BF16
	}
	switch m.Kind {
	case gpu.GemmAB:
		return g.ctx.MatMul(Ptr(out), Ptr(a), Ptr(b), m.M, m.K, m.N, dt)
	case gpu.GemmABt:
		return g.ctx.MatMulGradA(Ptr(out), Ptr(a), Ptr(b), m.M, m.K, m.N, dt)
	case gpu.GemmAtB:
		return g.ctx.MatMulGradB(Ptr(out), Ptr(a), Ptr(b), m.M, m.K, m.N, dt)
	}
	return fmt.Errorf("gemm kind %d", m.Kind)
}

func (g *GPU) Zero(_ int, addr uint64, bytes int64) error {
	return g.ctx.do(func() error {
		return check("cuMemsetD8", C.amsp_cuMemsetD8(C.CUdeviceptr(addr), 0, C.size_t(bytes)))
	})
}

func (g *GPU) Record(int, int) error { return nil }
func (g *GPU) Wait(int, int) error   { return nil }
func (g *GPU) Sync() error           { return g.ctx.Sync() }
