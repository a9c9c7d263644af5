package engine

import (
	"fmt"

	"amspc/ir"
	"amspc/kernels"
)

// Backend is the device a rank's buffers live on and its kernels run on:
// memory (Alloc, Free, views through Mem.Slice, host copies), kernel
// launch by op, and the plan's three streams and its events. The runtime
// drives every backend the same way: one goroutine per stream issues that
// stream's instructions in order, and a Wait is issued only after the
// host has issued its Record, so a backend whose launches run to their
// end when called (the CPU) needs no streams or events of its own, and
// one with queues (CUDA) records and waits on device events.
//
// The CPU backend (NewCPUBackend) computes with package kernels on host
// memory and stores every float as float32 (bf16 values rounded); a
// device backend stores bf16 in two bytes. TestBackendOpaque runs every
// plan through a backend whose memory the runtime cannot see.
type Backend interface {
	// Name names the device in messages.
	Name() string
	// Alloc returns n zeroed elements of dt.
	Alloc(dt ir.DType, n int64) (Mem, error)
	// Free gives back memory from Alloc (not a slice of it).
	Free(m Mem)
	// Launch runs, or enqueues on stream s, one kernel instruction. It
	// writes every result in full, stores each at its dtype's precision,
	// and fails on a NaN or an infinity in a result, a loss included
	// (KernelCall.Losses): then, or, on a backend that checks results in
	// batches, at a later Launch, Read, ReadInts or Sync, with a
	// *KernelError naming the instruction.
	Launch(s int, c *KernelCall) error
	// Copy copies src into dst (the same dtype and length) on stream s.
	Copy(s int, dst, src Mem) error
	// Record marks event ev on stream s; Wait makes stream s's later work
	// wait for ev's last Record.
	Record(s, ev int) error
	Wait(s, ev int) error
	// Sync waits until every stream's work is done.
	Sync() error
	// Read copies m to host float32 values (len(dst) == m.N); Write
	// copies src into m, rounding to m's dtype. ReadInts and WriteInts
	// are the same for i32 memory. All four wait for the streams' work
	// first.
	Read(dst []float32, m Mem) error
	Write(m Mem, src []float32) error
	ReadInts(dst []int32, m Mem) error
	WriteInts(m Mem, src []int32) error
}

// A KernelError is a kernel instruction's failure that its backend
// found after Launch returned (a device backend reads its results'
// non-finite checks back in batches).
type KernelError struct {
	Stream int
	Instr  *ir.Instr
	Err    error
}

func (e *KernelError) Error() string { return e.Err.Error() }
func (e *KernelError) Unwrap() error { return e.Err }

// Mem is memory on a backend: N elements of DType. Host memory (the CPU
// backend's) is a Go slice, f32 for every float dtype, i32 for ids;
// device memory is an address and the bytes of an element there.
type Mem struct {
	DType ir.DType
	N     int64
	f32   []float32
	i32   []int32
	// Addr is a device backend's address of element 0, Elem the bytes of
	// an element on the device (bf16: 2).
	Addr uint64
	Elem int64
}

// HostMem wraps host slices as Mem (one of f32 or i32, the other nil).
func HostMem(dt ir.DType, f32 []float32, i32 []int32) Mem {
	n := int64(len(f32))
	if dt == ir.I32 {
		n = int64(len(i32))
	}
	return Mem{DType: dt, N: n, f32: f32, i32: i32}
}

// DeviceMem is n elements of dt at addr, elem bytes each.
func DeviceMem(dt ir.DType, n int64, addr uint64, elem int64) Mem {
	return Mem{DType: dt, N: n, Addr: addr, Elem: elem}
}

// Slice is the n elements from off.
func (m Mem) Slice(off, n int64) Mem {
	if off < 0 || n < 0 || off+n > m.N {
		panic(fmt.Sprintf("runtime: Mem.Slice(%d, %d) of %d elements", off, n, m.N))
	}
	s := Mem{DType: m.DType, N: n, Elem: m.Elem}
	switch {
	case m.f32 != nil:
		s.f32 = m.f32[off : off+n]
	case m.i32 != nil:
		s.i32 = m.i32[off : off+n]
	default:
		s.Addr = m.Addr + uint64(off*m.Elem)
	}
	return s
}

// Host is host memory's float32 values (nil on a device).
func (m Mem) Host() []float32 { return m.f32 }

// HostInts is host memory's int32 values (nil on a device).
func (m Mem) HostInts() []int32 { return m.i32 }

// IsHost says whether m is host memory the runtime may read and write.
func (m Mem) IsHost() bool { return m.f32 != nil || m.i32 != nil || (m.N == 0 && m.Addr == 0) }

// KernelCall is one kernel instruction with its operands resolved.
type KernelCall struct {
	Instr *ir.Instr
	// Args and Outs are the storage of Instr.Args and Instr.Outs,
	// ArgShapes and OutShapes their shapes.
	Args, Outs           []Mem
	ArgShapes, OutShapes [][]int64
	// Step is the optimizer's step, from 1 (AdamW's bias correction).
	Step int
	// LRAt, for an AdamW kernel, is the learning rate of a step: the
	// kernel's lr (the peak) on the train section's schedule.
	LRAt func(step int) float64
	// Decayed lists the elements of an AdamW shard that take weight
	// decay.
	Decayed []kernels.Range
	// Losses gets the loss of a CrossEntropy (the mean over its rows).
	Losses *[]float64
	// GradNorm gets the gradient's global norm a ClipGrad computes.
	GradNorm *float64
	// PackedB, for a MatMul or MatMulGradA on the host, is operand 1
	// already packed (kernels.PackB or PackBT): local ranks that read one
	// shared gather of a weight pack it once for all of them.
	PackedB *kernels.PackedB
}

// lr is an AdamW kernel's learning rate at its step: LRAt's, else (a
// call made outside a run: the profile's) the kernel's lr.
func (c *KernelCall) lr() float64 {
	if c.LRAt != nil {
		return c.LRAt(c.Step)
	}
	return c.attr("lr").Float
}

// attr is the instruction's attribute name.
func (c *KernelCall) attr(name string) ir.AttrVal { return attr(c.Instr, name) }

// cpuBackend is the host: package kernels on Go slices, in fp32.
type cpuBackend struct{}

// NewCPUBackend is the CPU backend. Its launches run to their end when
// called, so Record, Wait and Sync have nothing to do.
func NewCPUBackend() Backend { return cpuBackend{} }

func (cpuBackend) Name() string { return "cpu" }

func (cpuBackend) Alloc(dt ir.DType, n int64) (Mem, error) {
	if dt == ir.I32 {
		return HostMem(dt, nil, make([]int32, n)), nil
	}
	if dt == ir.F16 {
		return Mem{}, fmt.Errorf("the CPU backend has no fp16 yet (use precision = bf16 or fp32)")
	}
	return HostMem(dt, makeF32(n), nil), nil
}

func (cpuBackend) Free(Mem) {}

// Launch runs the op's CPU kernel (cpuKernels), then stores every bf16
// result as bf16 (kernels compute in fp32; NUMERICS.md) and checks it
// for NaN and Inf.
func (cpuBackend) Launch(_ int, c *KernelCall) error {
	run := cpuKernels[c.Instr.Kern]
	if run == nil {
		return fmt.Errorf("no CPU kernel for %v", c.Instr.Kern)
	}
	if err := run(c); err != nil {
		return err
	}
	for _, o := range c.Outs {
		if o.DType == ir.BF16 {
			roundAll(o.f32)
		}
		if err := checkFinite(o.f32); err != nil {
			return err
		}
	}
	return nil
}

func (cpuBackend) Copy(_ int, dst, src Mem) error {
	if dst.DType != src.DType || dst.N != src.N {
		return fmt.Errorf("copy of %d %v into %d %v", src.N, src.DType, dst.N, dst.DType)
	}
	copy(dst.f32, src.f32)
	copy(dst.i32, src.i32)
	return nil
}

func (cpuBackend) Record(int, int) error { return nil }
func (cpuBackend) Wait(int, int) error   { return nil }
func (cpuBackend) Sync() error           { return nil }

func (cpuBackend) Read(dst []float32, m Mem) error {
	copy(dst, m.f32)
	return nil
}

func (cpuBackend) Write(m Mem, src []float32) error {
	copy(m.f32, src)
	if m.DType == ir.BF16 {
		roundAll(m.f32)
	}
	return nil
}

func (cpuBackend) ReadInts(dst []int32, m Mem) error {
	copy(dst, m.i32)
	return nil
}

func (cpuBackend) WriteInts(m Mem, src []int32) error {
	copy(m.i32, src)
	return nil
}

// roundAll stores x's values as bf16 (round to nearest even).
func roundAll(x []float32) { kernels.RoundBF16To(x, x) }

// memComm runs the plan's collectives on backend memory through a Comm of
// host slices: host memory directly, device memory staged through the
// host (Read, the Comm, Write), so a backend without collectives of its
// own (or several ranks sharing one GPU) still runs every plan. Sums of
// bf16 values are formed in fp32 and stored as bf16, on either path.
type memComm struct {
	be Backend
	c  Comm
}

// host is m's float32 values: m's own storage on the host, else a copy
// (read says whether the copy needs m's values).
func (mc memComm) host(m Mem, read bool) ([]float32, error) {
	if m.IsHost() {
		return m.f32, nil
	}
	h := make([]float32, m.N)
	if !read {
		return h, nil
	}
	return h, mc.be.Read(h, m)
}

// back stores h into m after a collective: a staged copy goes back to
// the device (rounded there), a host bf16 sum is rounded.
func (mc memComm) back(m Mem, h []float32, sum bool) error {
	if !m.IsHost() {
		return mc.be.Write(m, h)
	}
	if sum && m.DType == ir.BF16 {
		roundAll(h)
	}
	return nil
}

// two runs f on host copies of in and out (a collective that reads in
// and writes out); one on a host copy of buf, read and written.
func (mc memComm) two(in, out Mem, sum bool, f func(hi, ho []float32) error) error {
	hi, err := mc.host(in, true)
	if err != nil {
		return err
	}
	ho, err := mc.host(out, false)
	if err != nil {
		return err
	}
	if err := f(hi, ho); err != nil {
		return err
	}
	return mc.back(out, ho, sum)
}

func (mc memComm) one(buf Mem, sum bool, f func(h []float32) error) error {
	h, err := mc.host(buf, true)
	if err != nil {
		return err
	}
	if err := f(h); err != nil {
		return err
	}
	return mc.back(buf, h, sum)
}

func (mc memComm) AllGather(s int, g []int, in, out Mem) error {
	return mc.two(in, out, false, func(hi, ho []float32) error { return mc.c.AllGather(s, g, hi, ho) })
}

func (mc memComm) ReduceScatter(s int, g []int, in, out Mem) error {
	return mc.two(in, out, true, func(hi, ho []float32) error { return mc.c.ReduceScatter(s, g, hi, ho) })
}

func (mc memComm) AllReduce(s int, g []int, buf Mem) error {
	return mc.one(buf, true, func(h []float32) error { return mc.c.AllReduce(s, g, h) })
}

func (mc memComm) Broadcast(s int, g []int, root int, buf Mem) error {
	return mc.one(buf, false, func(h []float32) error { return mc.c.Broadcast(s, g, root, h) })
}
