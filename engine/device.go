package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"amspc/ir"
	"amspc/kernels"
	"amspc/kernels/gpu"
)

// Device is a GPU as the device backend drives it: memory by address,
// the launch plans of package gpu (ops.cu kernels and cuBLASLt matmuls)
// on the plan's streams, and events. engine/cudalib's GPU is one;
// kernels/gpu/hostc's host-simulated GPU is another, which the tests run
// every plan on. Each package registers its kind (RegisterDevice), and a
// run opens one by name (OpenDevices).
type Device interface {
	Name() string
	Alloc(bytes int64) (uint64, error)
	Free(addr uint64)
	// Upload and Download copy between host bytes and device memory once
	// every stream's work is done.
	Upload(addr uint64, src []byte) error
	Download(dst []byte, addr uint64) error
	// UploadOn copies src to device memory at addr in stream s's order,
	// the host not waiting for the stream (src may change once it
	// returns): a plan's scratch data, inside a step.
	UploadOn(s int, addr uint64, src []byte) error
	Copy(s int, dst, src uint64, bytes int64) error
	// Zero sets bytes bytes at addr to zero on stream s.
	Zero(s int, addr uint64, bytes int64) error
	// Launch enqueues l on stream s; addrs[i] is the address of l.Args[i]
	// when that is a pointer.
	Launch(s int, l *gpu.Launch, addrs []uint64) error
	Gemm(s int, g *gpu.Gemm, a, b, out uint64) error
	Record(s, ev int) error
	Wait(s, ev int) error
	Sync() error
}

// A GraphDevice is a Device that captures the work enqueued on its
// streams into a graph and replays it (CUDA graphs): a step's hundreds
// of launches become one, and the host enqueues nothing else.
type GraphDevice interface {
	Device
	// Captures says whether the device can capture graphs.
	Captures() bool
	// BeginCapture starts a capture: until EndCapture, the work enqueued
	// on every stream (Launch, Gemm, Copy, Zero, UploadOn, Record, Wait,
	// collectives) is recorded, not run. Each stream's captured work
	// follows the work enqueued on the compute stream (ir.Compute) before
	// the capture. Upload, Download and Sync fail while capturing.
	BeginCapture() error
	// EndCapture ends the capture and returns what it recorded. A failed
	// capture's error may also come back here.
	EndCapture() (Graph, error)
}

// A Graph is the work a GraphDevice captured.
type Graph interface {
	// Launch enqueues the captured work again, on the streams it was
	// captured on, ordered as the capture's events ordered it, after the
	// work enqueued on the compute stream before the Launch; the compute
	// stream's later work waits for all of it. Sync waits for it.
	Launch() error
	// SetUpload replaces the bytes that the k-th UploadOn captured on
	// stream s copies, for the launches that follow (src the length
	// captured). Call it only when no launch is in flight (after a
	// Sync).
	SetUpload(s, k int, src []byte) error
	// Close releases the graph.
	Close() error
}

// deviceBackend is a Backend on a Device: fp32 in four bytes, bf16 in
// two; each instruction runs its gpu.Plan in fp32 (bf16 operands widened
// exactly into scratch memory, bf16 results rounded to nearest even and
// packed: the CPU backend's arithmetic; a matmul of two bf16 operands
// takes them as they are, accumulating in fp32), and every result is
// checked for NaN and Inf on the device (first_nonfinite_f32, after
// rounding) before the next instruction. Elementwise ops whose kernels
// take their storage as it is (gpu.HasStoredPlan) do all of that in one
// pass: the same bits, read once and written once.
type deviceBackend struct {
	dev  Device
	opts DeviceOptions

	// Checks in flight: results' non-finite flags, plans' id checks and
	// losses, each in a slot of device memory, read back when the host
	// next waits for the device anyway (a read, Sync at the end of a
	// step), so no kernel costs a round trip to the host and no step
	// waits for the device before its end. The i-th pending check's slot
	// is slot i%checkChunk of chunks[i/checkChunk]; a chunk, once made,
	// stays for the next steps.
	checks checkSlots

	// Freed device memory by size, reused by the next allocation of that
	// size (each step asks for the same sizes again): a step allocates
	// from the device only until it reaches its largest working set.
	// Memory a stream frees is reused by that stream only (its later
	// work runs after the freed memory's last use there), until a Sync
	// has waited for every stream: then by any (free[anyStream]). So no
	// stream's work can write memory another stream's queued work still
	// reads, whatever the streams' overlap.
	mu    sync.Mutex
	sizes map[uint64]int64
	free  map[int]map[int64][]uint64

	storedRuns atomic.Int64 // instructions run through stored plans (tests)

	// capturing is the capture on (graph.go), nil if none; graph the
	// step it captured, replayed for the steps after.
	capturing atomic.Pointer[stepCapture]
	graph     *stepGraph
	replays   atomic.Int64 // steps replayed (tests)
	// staleInputs, set by tests, keeps a replay from refilling the
	// token windows (true) or the per-step scratch (false) it returns
	// true for: the mutation graph replays are tested with.
	staleInputs func(tokens bool) bool

	// keep holds the instructions' kept scratch (gpu.ScratchBuf.Keep),
	// under mu.
	keep map[keptKey]*keptBuf
}

// NewDeviceBackend is the backend that runs a rank on dev.
func NewDeviceBackend(dev Device) Backend {
	return NewDeviceBackendWith(dev, DeviceOptions{})
}

// DeviceOptions choose among a device backend's kernels.
type DeviceOptions struct {
	// TensorCoreAttention runs attention and its gradient on bf16
	// operands with mma.cu's tensor-core kernels (head dims a multiple
	// of 16 up to 128): the probabilities and ds enter the products
	// rounded to bf16, within bf16's precision of the fp32 kernels.
	TensorCoreAttention bool
	// MultiPass runs every instruction through its fp32 kernels, bf16
	// operands widened and results rounded, packed and checked in passes
	// of their own, even where the op has kernels that take its storage
	// as it is (gpu.HasStoredPlan): the reference those are tested
	// against, bit for bit.
	MultiPass bool
	// Collectives is where collectives run: CollectivesOrdered (or "")
	// through the host, CollectivesDevice on the device
	// (DeviceCollectives), among World's ranks.
	Collectives string
	World       DeviceWorld
	// Eager runs every step as the engine enqueues it. Otherwise, on a
	// device that captures graphs (GraphDevice), the second step a run
	// takes is captured and every later one replays it: the same work,
	// one launch, no host work but its inputs (graph.go).
	Eager bool
}

// NewDeviceBackendWith is NewDeviceBackend with options.
func NewDeviceBackendWith(dev Device, o DeviceOptions) Backend {
	return &deviceBackend{dev: dev, opts: o, sizes: map[uint64]int64{}, free: map[int]map[int64][]uint64{}, keep: map[keptKey]*keptBuf{}}
}

// anyStream is the free list of memory every stream may reuse.
const anyStream = -1

// alloc is bytes of device memory for stream s, from s's free list or
// the one every stream may use when they have that size; its contents
// are undefined.
func (b *deviceBackend) alloc(s int, bytes int64) (uint64, error) {
	b.mu.Lock()
	for _, from := range [2]int{s, anyStream} {
		if l := b.free[from][bytes]; len(l) > 0 {
			a := l[len(l)-1]
			b.free[from][bytes] = l[:len(l)-1]
			b.sizes[a] = bytes
			b.mu.Unlock()
			return a, nil
		}
	}
	b.mu.Unlock()
	a, err := b.dev.Alloc(bytes)
	if err != nil {
		return 0, err
	}
	b.mu.Lock()
	b.sizes[a] = bytes
	b.mu.Unlock()
	return a, nil
}

// release puts memory from alloc on stream s's free list of its size.
func (b *deviceBackend) release(s int, addr uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, ok := b.sizes[addr]
	if !ok {
		panic(fmt.Sprintf("runtime: release of device address %#x, which alloc did not give", addr))
	}
	delete(b.sizes, addr)
	if b.free[s] == nil {
		b.free[s] = map[int64][]uint64{}
	}
	b.free[s][n] = append(b.free[s][n], addr)
}

// synced moves every stream's free memory to the list every stream may
// use: a Sync has waited for all the work that used it.
func (b *deviceBackend) synced() {
	b.mu.Lock()
	defer b.mu.Unlock()
	all := b.free[anyStream]
	if all == nil {
		all = map[int64][]uint64{}
		b.free[anyStream] = all
	}
	for s, l := range b.free {
		if s == anyStream {
			continue
		}
		for n, addrs := range l {
			all[n] = append(all[n], addrs...)
		}
		delete(b.free, s)
	}
	for n := range all { // the same reuse order whatever the map order above
		slices.Sort(all[n])
	}
}

func (b *deviceBackend) Name() string { return b.dev.Name() }

// elemBytes is a dtype's bytes on the device.
func elemBytes(dt ir.DType) int64 {
	if dt == ir.BF16 {
		return 2
	}
	return 4
}

func (b *deviceBackend) Alloc(dt ir.DType, n int64) (Mem, error) { return b.AllocOn(ir.Compute, dt, n) }

// AllocOn is Alloc for stream s: the memory is zeroed on s, before s's
// later work.
func (b *deviceBackend) AllocOn(s int, dt ir.DType, n int64) (Mem, error) {
	if dt != ir.F32 && dt != ir.I32 && dt != ir.BF16 {
		return Mem{}, &gpu.ErrUnsupported{What: fmt.Sprintf("%v storage (use precision = bf16 or fp32)", dt)}
	}
	e := elemBytes(dt)
	addr, err := b.alloc(s, e*n)
	if err != nil {
		return Mem{}, err
	}
	if err := b.dev.Zero(s, addr, e*n); err != nil {
		b.release(s, addr)
		return Mem{}, err
	}
	return DeviceMem(dt, n, addr, e), nil
}

func (b *deviceBackend) Free(m Mem) { b.FreeOn(ir.Compute, m) }

// FreeOn is Free by stream s, after s's uses of m (reused by s alone
// until the next Sync).
func (b *deviceBackend) FreeOn(s int, m Mem) { b.release(s, m.Addr) }

func (b *deviceBackend) Copy(s int, dst, src Mem) error {
	if dst.DType != src.DType || dst.N != src.N {
		return fmt.Errorf("copy of %d %v into %d %v", src.N, src.DType, dst.N, dst.DType)
	}
	if dst.Addr == src.Addr || dst.N == 0 {
		return nil
	}
	return b.dev.Copy(s, dst.Addr, src.Addr, dst.Elem*dst.N)
}

func (b *deviceBackend) Record(s, ev int) error { return b.dev.Record(s, ev) }
func (b *deviceBackend) Wait(s, ev int) error   { return b.dev.Wait(s, ev) }
func (b *deviceBackend) Sync() error {
	if err := b.dev.Sync(); err != nil {
		return err
	}
	b.synced()
	return b.flushChecks()
}

func (b *deviceBackend) Read(dst []float32, m Mem) error {
	raw := make([]byte, m.Elem*m.N)
	if err := b.dev.Download(raw, m.Addr); err != nil {
		return err
	}
	if err := b.flushChecks(); err != nil {
		return err
	}
	for i := range dst {
		if m.DType == ir.BF16 {
			dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(raw[2*i:])) << 16)
		} else {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	}
	return nil
}

// Write stores src in m; into bf16, each value rounded to nearest even
// (kernels.RoundBF16, as bf16_round; a NaN stays one).
func (b *deviceBackend) Write(m Mem, src []float32) error {
	raw := make([]byte, m.Elem*int64(len(src)))
	for i, v := range src {
		if m.DType == ir.BF16 {
			u := math.Float32bits(kernels.RoundBF16(v))
			if v != v {
				u |= 0x00400000
			}
			binary.LittleEndian.PutUint16(raw[2*i:], uint16(u>>16))
		} else {
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
		}
	}
	return b.dev.Upload(m.Addr, raw)
}

func (b *deviceBackend) ReadInts(dst []int32, m Mem) error {
	raw := make([]byte, 4*m.N)
	if err := b.dev.Download(raw, m.Addr); err != nil {
		return err
	}
	if err := b.flushChecks(); err != nil {
		return err
	}
	for i := range dst {
		dst[i] = int32(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return nil
}

// LoadInput writes step's input in stream s's order, the host not
// waiting (the CPU backend's Load writes when its stream gets there
// too); a captured step's graph refills it for each step it replays.
func (b *deviceBackend) LoadInput(s int, m Mem, step int, fill func(step int, dst []int32)) error {
	input := func(step int) ([]byte, error) {
		dst := make([]int32, m.N)
		fill(step, dst)
		return int32Bytes(dst), nil
	}
	raw, _ := input(step)
	return b.uploadOn(s, m.Addr, raw, true, input)
}

// int32Bytes is x's little-endian bytes.
func int32Bytes(x []int32) []byte {
	raw := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(raw[4*i:], uint32(v))
	}
	return raw
}

func (b *deviceBackend) WriteInts(m Mem, src []int32) error {
	return b.dev.Upload(m.Addr, int32Bytes(src))
}

// Launch runs the instruction in fp32: bf16 operands widened into
// scratch memory (an operand that is also a result, once), its plan,
// then every result checked for NaN and Inf, bf16 results rounded first
// and packed after.
func (b *deviceBackend) Launch(s int, c *KernelCall) error {
	if !b.opts.MultiPass && gpu.HasStoredPlan(c.Instr.Kern) {
		return b.launchStored(s, c)
	}
	var scratch []uint64
	defer func() {
		for _, a := range scratch {
			b.release(s, a)
		}
	}()
	wide := map[uint64]Mem{} // a bf16 operand's address: its fp32 copy
	f32 := func(m Mem, widen bool) (Mem, error) {
		if m.DType != ir.BF16 {
			return m, nil
		}
		if w, ok := wide[m.Addr]; ok && w.N == m.N {
			return w, nil
		}
		a, err := b.alloc(s, 4*m.N)
		if err != nil {
			return Mem{}, err
		}
		scratch = append(scratch, a)
		w := DeviceMem(ir.F32, m.N, a, 4)
		if widen {
			l := gpu.BF16Widen(m.N)
			if err := b.dev.Launch(s, &l, []uint64{a, m.Addr, 0}); err != nil {
				return Mem{}, err
			}
		}
		wide[m.Addr] = w
		return w, nil
	}
	fc := *c
	fc.Args, fc.Outs = make([]Mem, len(c.Args)), make([]Mem, len(c.Outs))
	// A matmul of two bf16 operands reads them as they are (cuBLASLt's
	// bf16 inputs), and so does attention on tensor cores (gpu.RawBF16);
	// every other bf16 operand is widened.
	types := make([]ir.DType, len(c.Args))
	for i, m := range c.Args {
		types[i] = m.DType
	}
	var heads int64
	if k := c.Instr.Kern; k == ir.Attention || k == ir.AttentionGrad {
		heads = c.attr("heads").Int
	}
	raw := gpu.RawBF16(c.Instr.Kern, types, c.ArgShapes, heads, b.opts.TensorCoreAttention)
	var err error
	for i, m := range c.Args {
		if raw {
			fc.Args[i] = m
		} else if fc.Args[i], err = f32(m, true); err != nil {
			return err
		}
	}
	for i, m := range c.Outs {
		if fc.Outs[i], err = f32(m, false); err != nil {
			return err
		}
	}
	stored := make([]ir.DType, len(c.Outs))
	for i, o := range c.Outs {
		stored[i] = o.DType
	}
	if err := b.runPlan(s, &fc, stored); err != nil {
		return err
	}
	for i, o := range fc.Outs {
		// A bf16 result is rounded, checked and packed in one pass
		// (bf16_finish), an fp32 one checked.
		var l gpu.Launch
		var addrs []uint64
		if c.Outs[i].DType == ir.BF16 {
			l, addrs = gpu.BF16Finish(o.N), []uint64{c.Outs[i].Addr, o.Addr, 0, 0}
		} else if o.DType != ir.I32 && o.N > 0 {
			l, addrs = gpu.CheckFinite(o.N), []uint64{o.Addr, 0, 0}
		} else {
			continue
		}
		if err := b.checkFinite(s, c.Instr, o.N, &l, addrs); err != nil {
			return err
		}
	}
	return nil
}

// launchStored runs an instruction whose plan takes its operands and
// results as they are stored and flags each result's first NaN or
// infinity itself (gpu.Plan.Stored): one pass where Launch's widening,
// fp32 kernels and finishing take several. The check slots are taken and
// the kernels launched under the checks' lock, as checkFinite does, so a
// flush never reads a slot whose kernel is not yet launched.
func (b *deviceBackend) launchStored(s int, c *KernelCall) error {
	oc := b.opCall(c)
	oc.Storage = true
	p, err := gpu.PlanOp(oc)
	if err != nil {
		return err
	}
	if !p.Stored || p.Gemm != nil || len(p.Copies) > 0 {
		return fmt.Errorf("%v: a stored plan with a matmul or copies", c.Instr.Kern)
	}
	scratch, owned, err := b.scratch(s, c.Instr, oc, p.Scratch)
	defer b.releaseAll(s, owned)
	if err != nil {
		return err
	}
	ns := make([]int64, len(c.Outs))
	for i, o := range c.Outs {
		ns[i] = o.N
	}
	b.storedRuns.Add(1)
	return b.launchChecked(s, c, p, scratch, ns)
}

// launchChecked launches a plan's kernels with the check slots they
// flag (each result's, for a stored plan: ns; the plan's id check and
// loss), under the checks' lock.
func (b *deviceBackend) launchChecked(s int, c *KernelCall, p *gpu.Plan, scratch []uint64, ns []int64) error {
	slots, err := b.reserve(s, c, p, ns)
	if err != nil {
		return err
	}
	defer b.checks.Unlock()
	return b.launchAll(s, c, p, scratch, slots)
}

// planSlots are the check slots a plan's launches write: each result's
// non-finite flag (a stored plan's), its id check and its loss.
type planSlots struct {
	flags    []uint64
	id, loss uint64
}

// launchAll launches a plan's kernels, each argument resolved to the
// operand's, result's, scratch buffer's or check slot's address.
func (b *deviceBackend) launchAll(s int, c *KernelCall, p *gpu.Plan, scratch []uint64, slots planSlots) error {
	for li := range p.Launches {
		l := &p.Launches[li]
		addrs := make([]uint64, len(l.Args))
		for i, a := range l.Args {
			switch a.Kind {
			case gpu.Operand:
				addrs[i] = c.Args[a.N].Addr
			case gpu.Result:
				addrs[i] = c.Outs[a.N].Addr
			case gpu.Scratch:
				addrs[i] = scratch[a.N]
			case gpu.Flag:
				addrs[i] = slots.flags[a.N]
			case gpu.IDFlag:
				addrs[i] = slots.id
			case gpu.LossSlot:
				addrs[i] = slots.loss
			}
			if a.Kind < gpu.Null {
				addrs[i] += uint64(a.I) // a chunk of the buffer
			}
		}
		if l.Gemm != nil {
			if err := l.CheckArgs(); err != nil {
				return err
			}
			if err := b.dev.Gemm(s, l.Gemm, addrs[0], addrs[1], addrs[2]); err != nil {
				return err
			}
			continue
		}
		if err := b.dev.Launch(s, l, addrs); err != nil {
			return fmt.Errorf("%s: %w", l.Kernel, err)
		}
	}
	return nil
}

// reserveChecks takes a check slot for each result of in (of ns
// elements) and returns their addresses, with the checks' lock held (the
// caller launches the kernels that flag them, then unlocks). With too
// few slots free it flushes first.
func (b *deviceBackend) reserveChecks(s int, in *ir.Instr, ns []int64) ([]uint64, error) {
	checks := make([]pendingCheck, len(ns))
	for i, n := range ns {
		checks[i] = pendingCheck{s: s, in: in, n: n}
	}
	return b.reserveSlots(checks)
}

// reserve is reserveChecks for a plan's launches: a slot for each
// result of a stored plan (ns), for its id check and for its loss.
func (b *deviceBackend) reserve(s int, c *KernelCall, p *gpu.Plan, ns []int64) (planSlots, error) {
	checks := make([]pendingCheck, 0, len(ns)+2)
	for _, n := range ns {
		checks = append(checks, pendingCheck{s: s, in: c.Instr, n: n})
	}
	if p.IDs != nil {
		checks = append(checks, pendingCheck{s: s, in: c.Instr, kind: idCheck, ids: p.IDs})
	}
	if p.Loss {
		checks = append(checks, pendingCheck{s: s, in: c.Instr, kind: lossCheck, losses: c.Losses})
	}
	addrs, err := b.reserveSlots(checks)
	if err != nil {
		return planSlots{}, err
	}
	slots := planSlots{flags: addrs[:len(ns)]}
	addrs = addrs[len(ns):]
	if p.IDs != nil {
		slots.id, addrs = addrs[0], addrs[1:]
	}
	if p.Loss {
		slots.loss = addrs[0]
	}
	return slots, nil
}

// reserveSlots takes a slot for each check, with the checks' lock held
// on success. A new chunk of slots is made (a transfer, so the host
// waits for the device) only when a step has more checks than every step
// before it.
func (b *deviceBackend) reserveSlots(checks []pendingCheck) ([]uint64, error) {
	b.checks.Lock()
	for len(b.checks.chunks)*checkChunk < len(b.checks.pending)+len(checks) {
		if b.capturing.Load() != nil {
			b.checks.Unlock()
			return nil, errors.New("a captured step checks more results than the step before it")
		}
		a, err := b.dev.Alloc(8 * checkChunk)
		if err == nil {
			if err = b.dev.Upload(a, noneFlags(checkChunk)); err != nil {
				b.dev.Free(a)
			}
		}
		if err != nil {
			b.checks.Unlock()
			return nil, err
		}
		b.checks.chunks = append(b.checks.chunks, a)
	}
	addrs := make([]uint64, len(checks))
	for i, c := range checks {
		addrs[i] = b.checks.slot(len(b.checks.pending))
		b.checks.pending = append(b.checks.pending, c)
	}
	return addrs, nil
}

// scratch allocates a plan's scratch memory (the plan of oc, for
// instruction in) and fills it (zeroes, or its content) on stream s; a
// buffer to Keep is in's own, allocated once and uploaded when its
// content changes. It returns every buffer's address and, for
// releaseAll (with an error too), those it allocated for this launch.
func (b *deviceBackend) scratch(s int, in *ir.Instr, oc *gpu.OpCall, bufs []gpu.ScratchBuf) (addrs, owned []uint64, err error) {
	addrs = make([]uint64, 0, len(bufs))
	for i, sb := range bufs {
		if sb.Keep {
			a, err := b.kept(s, keptKey{in, i}, oc, sb)
			if err != nil {
				return addrs, owned, err
			}
			addrs = append(addrs, a)
			continue
		}
		a, err := b.alloc(s, sb.Bytes)
		if err != nil {
			return addrs, owned, err
		}
		addrs, owned = append(addrs, a), append(owned, a)
		if sb.Init == nil && sb.Fill == 0 {
			err = b.dev.Zero(s, a, sb.Bytes)
		} else {
			err = b.uploadOn(s, a, sb.Content(), false, nil) // the same for every step
		}
		if err != nil {
			return addrs, owned, err
		}
	}
	return addrs, owned, nil
}

// keptKey names an instruction's kept scratch buffer.
type keptKey struct {
	in *ir.Instr
	i  int
}

// keptBuf is a kept scratch buffer and its content on the device.
type keptBuf struct {
	addr    uint64
	bytes   int64
	content []byte
}

// kept is the instruction's kept buffer k, its content made sb's (in
// stream s's order) if it is not already. A captured step uploads a
// buffer whose content changes with the step (PerStep) whatever it
// holds, its graph refilling it for each step from oc's plan.
func (b *deviceBackend) kept(s int, k keptKey, oc *gpu.OpCall, sb gpu.ScratchBuf) (uint64, error) {
	b.mu.Lock()
	kb, ok := b.keep[k]
	b.mu.Unlock()
	content := sb.Content()
	if ok && kb.bytes != sb.Bytes {
		return 0, fmt.Errorf("%v: kept scratch %d of %d bytes, now %d", k.in.Kern, k.i, kb.bytes, sb.Bytes)
	}
	capturing := b.capturing.Load() != nil
	if ok && bytes.Equal(kb.content, content) && !(capturing && sb.PerStep) {
		return kb.addr, nil
	}
	if !ok {
		a, err := b.dev.Alloc(sb.Bytes)
		if err != nil {
			return 0, err
		}
		kb = &keptBuf{addr: a, bytes: sb.Bytes}
		b.mu.Lock()
		b.keep[k] = kb
		b.mu.Unlock()
	}
	var refill func(int) ([]byte, error)
	if sb.PerStep {
		refill = scratchRefill(oc, k)
	}
	if err := b.uploadOn(s, kb.addr, content, false, refill); err != nil {
		return 0, err
	}
	kb.content = content
	return kb.addr, nil
}

// releaseAll releases scratch memory.
func (b *deviceBackend) releaseAll(s int, addrs []uint64) {
	for _, a := range addrs {
		b.release(s, a)
	}
}

// opCall is what gpu.PlanOp needs of an instruction.
func (b *deviceBackend) opCall(c *KernelCall) *gpu.OpCall {
	oc := &gpu.OpCall{Op: c.Instr.Kern, ArgShapes: c.ArgShapes, OutShapes: c.OutShapes, Attr: c.attr, Step: c.Step, LRAt: c.LRAt, TensorCores: b.opts.TensorCoreAttention}
	for _, m := range c.Args {
		oc.ArgTypes, oc.ArgElems = append(oc.ArgTypes, m.DType), append(oc.ArgElems, m.N)
	}
	for _, m := range c.Outs {
		oc.OutTypes, oc.OutElems = append(oc.OutTypes, m.DType), append(oc.OutElems, m.N)
	}
	for _, r := range c.Decayed {
		oc.Decayed = append(oc.Decayed, [2]int{r.Lo, r.Hi})
	}
	return oc
}

// runPlan runs the plan of an instruction on fp32 memory (its results
// stored afterwards in the dtypes stored): copies, the matmul or the
// kernels with their scratch memory and check slots.
func (b *deviceBackend) runPlan(s int, c *KernelCall, stored []ir.DType) error {
	oc := b.opCall(c)
	oc.StoredOut = stored
	p, err := gpu.PlanOp(oc)
	if err != nil {
		return err
	}
	for _, cp := range p.Copies {
		if err := b.Copy(s, c.Outs[cp[0]], c.Args[cp[1]]); err != nil {
			return err
		}
	}
	if p.Gemm != nil {
		if err := b.dev.Gemm(s, p.Gemm, c.Args[0].Addr, c.Args[1].Addr, c.Outs[0].Addr); err != nil {
			return err
		}
	}
	scratch, owned, err := b.scratch(s, c.Instr, oc, p.Scratch)
	defer b.releaseAll(s, owned)
	if err != nil {
		return err
	}
	return b.launchChecked(s, c, p, scratch, nil)
}

// checkSlots are a device backend's checks in flight, each in a slot.
type checkSlots struct {
	sync.Mutex
	chunks  []uint64 // checkChunk flags each, gpu.NoneNonFinite until flagged
	pending []pendingCheck
}

// slot is the address of the i-th pending check's slot.
func (c *checkSlots) slot(i int) uint64 { return c.chunks[i/checkChunk] + 8*uint64(i%checkChunk) }

// checkChunk is how many check slots a chunk holds.
const checkChunk = 4096

// A pendingCheck is a check in flight, in slot i of the flags if it is
// the i-th pending, of instruction in on stream s: a result of n
// elements checked for NaN and Inf, the instruction's ids checked
// against ids.Vocab, or its loss (a float64, appended to *losses when
// read).
type pendingCheck struct {
	s      int
	in     *ir.Instr
	n      int64
	kind   checkKind
	ids    *gpu.IDCheck
	losses *[]float64
}

type checkKind uint8

const (
	finiteCheck checkKind = iota
	idCheck
	lossCheck
)

// checkFinite launches l (first_nonfinite_f32, or bf16_finish) on the
// result of n elements of instruction in, its flag (the last of addrs)
// the next free slot; flushChecks reports what it finds.
func (b *deviceBackend) checkFinite(s int, in *ir.Instr, n int64, l *gpu.Launch, addrs []uint64) error {
	flags, err := b.reserveChecks(s, in, []int64{n})
	if err != nil {
		return err
	}
	defer b.checks.Unlock()
	addrs[len(addrs)-1] = flags[0]
	return b.dev.Launch(s, l, addrs)
}

// noneFlags is n flags that say none.
func noneFlags(n int) []byte {
	raw := make([]byte, 8*n)
	for i := range n {
		binary.LittleEndian.PutUint64(raw[8*i:], gpu.NoneNonFinite)
	}
	return raw
}

// flushChecks reads the checks in flight (waiting for the device),
// appends the losses among them to their runs' losses in launch order,
// and fails, as a *KernelError naming its instruction, on the first
// check in launch order that found a NaN or an infinity, an id out of
// range or a loss that is not finite.
func (b *deviceBackend) flushChecks() error {
	b.checks.Lock()
	defer b.checks.Unlock()
	p := b.checks.pending
	if len(p) == 0 {
		return nil
	}
	b.checks.pending = b.checks.pending[:0]
	raw := make([]byte, 8*len(p))
	for c := 0; c*checkChunk < len(p); c++ {
		if err := b.dev.Download(raw[8*c*checkChunk:min(8*(c+1)*checkChunk, len(raw))], b.checks.chunks[c]); err != nil {
			return err
		}
	}
	var bad error
	fail := func(c pendingCheck, err error) {
		if bad == nil {
			bad = &KernelError{Stream: c.s, Instr: c.in, Err: err}
		}
	}
	for i, c := range p {
		flag := binary.LittleEndian.Uint64(raw[8*i:])
		switch c.kind {
		case finiteCheck:
			if first, v := gpu.NonFinite(flag); first >= 0 && first < int(c.n) {
				fail(c, fmt.Errorf("produced %v at element %d", v, first))
			}
		case idCheck:
			if pos, id := gpu.BadID(flag); pos >= 0 {
				fail(c, fmt.Errorf("%s %d at position %d is outside [0, %d)", c.ids.What, id, pos, c.ids.Vocab))
			}
		case lossCheck:
			loss := math.Float64frombits(flag)
			*c.losses = append(*c.losses, loss)
			if math.IsNaN(loss) || math.IsInf(loss, 0) {
				fail(c, fmt.Errorf("loss is %v", loss))
			}
		}
	}
	for c := 0; c*checkChunk < len(p); c++ {
		if err := b.dev.Upload(b.checks.chunks[c], noneFlags(min(checkChunk, len(p)-c*checkChunk))); err != nil {
			return err
		}
	}
	return bad
}
