//go:build cgo

package hostc

/*
#include <stdlib.h>
#include <string.h>
*/
import "C"

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"amspc/ir"
	"amspc/kernels"
	"amspc/kernels/gpu"
)

// Device is a GPU simulated on the host for launch plans (gpu.PlanOp):
// memory from C's malloc, addressed by its address as a GPU's is, each
// launch run to its end by this package's shim (one thread per block, or
// the plan's block of coroutine threads for the attention kernels),
// matmuls by package kernels. A backend that drives it (the runtime's
// device backend) drives a CUDA device the same way, so its tests run the
// CUDA backend's logic (plans, scratch, copies, checks) without a GPU.
//
// Its streams run as CUDA streams do: each stream a FIFO queue of the
// work enqueued on it (Launch, Gemm, Copy, Zero return once the work is
// queued), run by a worker of its own, the streams at once (a worker is
// a goroutine that lives while its stream has work, so a Device needs
// no closing; the shim's state is per OS thread). Record(s, ev)
// queues a marker that completes ev's newest generation when stream s
// reaches it; Wait(s, ev) holds s's later work until the generation of
// ev recorded last before the call completes (cuStreamWaitEvent; a wait
// on an event never recorded is nothing). So a backend that leaves out a
// Wait its plan needs races here, as it would on a GPU.
//
// Upload, Download and Free are what the runtime relies on from CUDA's
// synchronous cuMemcpy and cuMemFree on the legacy default stream, which
// synchronises with every (blocking) stream: they start once all the
// work enqueued on any stream before the call is done, and no work
// enqueued after the call starts before they are done; but a world's
// comm streams (ir.CommGather and ir.CommReduce of a device in a world,
// not held back) are non-blocking, as PyTorch makes NCCL's streams
// (CU_STREAM_NON_BLOCKING): transfers neither wait for them nor hold
// them back, since their collectives wait for other ranks that may be in
// a transfer of their own. Sync waits for all enqueued work. A failed operation's error comes back from the next
// Upload, Download, Free or Sync (and from every later call that enqueues
// on its stream, whose later work is skipped): an error sticks, as a
// CUDA context's does.
//
// The devices of a world (NewWorld, or the kind "sim" opened with
// --collectives device) also run collectives among themselves on their
// streams (engine.DeviceCollectives; coll.go says how they meet and how
// each mode runs them).
type Device struct {
	mu    sync.Mutex
	sizes map[uint64]int64

	// waits counts Upload and Download (the host waits for every
	// stream), onStream UploadOn (it does not): Transfers reads them.
	waits, onStream atomic.Int64

	sequential, holdBack, dropWaits bool
	seqMu                           sync.Mutex // Sequential: one operation at a time

	// barrier orders Upload, Download, Free and Sync among themselves (a
	// held-back device runs the work they wait for in the caller).
	barrier sync.Mutex

	// The streams, under q; done signals every change a waiter may wait
	// for (work done, a fence lifted).
	q       sync.Mutex
	done    sync.Cond
	streams []*stream
	events  map[int]*generation // each event's newest generation
	next    uint64              // the number of the next item enqueued
	// While fenced, no item numbered fence or later starts (a transfer
	// is under way).
	fenced bool
	fence  uint64
	err    error // the first error of any enqueued operation
	// reordered counts, with DropWaits, the work items that started
	// before a dropped Wait would have let them.
	reordered int

	// coll is the device's part in a world of devices that run
	// collectives among themselves (coll.go); nil: none.
	coll *devColl

	// capture records the enqueued work instead of running it, while a
	// graph is captured (graph.go); under q.
	capture *capture

	marks marks // timestamps (marks.go)
}

// A stream is a FIFO of items: items[0] runs (or waits) first, and stays
// in the queue until it is done.
type stream struct {
	items   []*item
	running bool // a worker drains the queue
	// nonBlocking: transfers neither wait for the stream's work nor hold
	// it back (CU_STREAM_NON_BLOCKING): a world's comm streams, whose
	// collectives wait for other ranks that may themselves be in a
	// transfer (as PyTorch creates NCCL's streams). Sync still waits.
	nonBlocking bool
	err         error // the first error of its work: its later work is skipped
	// dropped are the generations of the Waits DropWaits dropped that
	// the stream has passed and that were not yet done then.
	dropped []*generation
}

// An item is one enqueued operation: work to run (a launch, a matmul, a
// copy, a zero), a Record's marker (rec: the generation it completes),
// a Wait (wait: the generation the stream's later items wait for;
// dropped: what it would have been, had DropWaits not dropped it), or a
// collective (coll: this member's side of it, coll.go). seq numbers
// items in the order they were enqueued, over all streams.
type item struct {
	seq     uint64
	nb      bool // on a nonBlocking stream
	work    func() error
	rec     *generation
	wait    *generation
	dropped *generation
	coll    *member
}

// A generation is one Record of an event; done once the stream that
// recorded it reaches its marker.
type generation struct{ done bool }

// An Option changes how a Device runs its streams; the default runs each
// stream on its own worker as soon as it has work.
type Option int

const (
	// Sequential runs every operation to its end when it is called, one
	// at a time, in the calling goroutine; Record and Wait do nothing.
	// The device as it was before streams ran at once: a reference that
	// no stream order can change.
	Sequential Option = iota + 1
	// HoldBack holds enqueued work back as long as it legally can: no
	// stream runs until an Upload, Download, Free or Sync needs the work
	// done, and then the caller runs it, one item at a time, always the
	// most recently enqueued of the items the streams' order and their
	// waits allow. Host order is thus reversed wherever the events do not
	// forbid it: work that a missing Wait should have held, still queued
	// at the next transfer, runs before what it depends on, and the run
	// is deterministic given what was enqueued before each transfer.
	// (The devices of a world also run each other's held-back work
	// where a collective needs it: coll.go.)
	HoldBack
	// DropWaits makes Wait do nothing: a deliberate ordering bug, for
	// tests that must catch one (with HoldBack a dropped Wait reorders
	// every time it can). Reordered counts what it did.
	DropWaits
)

// NewDevice is an empty Device with the given options (none: streams run
// at once, each on its worker, as soon as they have work).
func NewDevice(opts ...Option) *Device {
	d := &Device{sizes: map[uint64]int64{}, events: map[int]*generation{}}
	d.done.L = &d.q
	for _, o := range opts {
		switch o {
		case Sequential:
			d.sequential = true
		case HoldBack:
			d.holdBack = true
		case DropWaits:
			d.dropWaits = true
		default:
			panic(fmt.Sprintf("hostc: unknown device option %d", o))
		}
	}
	if d.sequential && d.holdBack {
		panic("hostc: a device cannot be both Sequential and HoldBack")
	}
	return d
}

func (d *Device) Name() string { return "host-simulated GPU" }

// Live is the number of allocations not freed.
// Transfers is how many copies between host and device memory made the
// host wait for the streams (Upload, Download) and how many went in a
// stream's order (UploadOn), so far.
func (d *Device) Transfers() (waited, onStream int64) { return d.waits.Load(), d.onStream.Load() }

func (d *Device) Live() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.sizes)
}

func (d *Device) Alloc(bytes int64) (uint64, error) {
	p := C.calloc(C.size_t(max(bytes, 1)), 1)
	if p == nil {
		return 0, fmt.Errorf("out of host memory allocating %d bytes", bytes)
	}
	a := uint64(uintptr(p))
	d.mu.Lock()
	d.sizes[a] = bytes
	d.mu.Unlock()
	return a, nil
}

func (d *Device) Free(addr uint64) {
	d.mu.Lock()
	_, ok := d.sizes[addr]
	delete(d.sizes, addr)
	d.mu.Unlock()
	if !ok {
		panic(fmt.Sprintf("hostc: free of %#x, which Alloc did not return", addr))
	}
	// Work enqueued before may still use it (its error, if any, comes
	// back from the next transfer or Sync).
	if err := d.transfer(func() { C.free(ptr(addr)) }); err == errCapturing {
		panic("hostc: Free while capturing a graph") // the graph may use the memory
	}
}

// ptr is the C pointer at addr (C memory: the collector never sees it).
func ptr(addr uint64) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&addr)) }

func (d *Device) Upload(addr uint64, src []byte) error {
	d.waits.Add(1)
	return d.transfer(func() {
		if len(src) > 0 {
			C.memcpy(ptr(addr), unsafe.Pointer(&src[0]), C.size_t(len(src)))
		}
	})
}

// UploadOn copies src (as it is now) to addr when stream s gets there.
func (d *Device) UploadOn(s int, addr uint64, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	d.onStream.Add(1)
	b := append([]byte(nil), src...)
	work := func() error {
		C.memcpy(ptr(addr), unsafe.Pointer(&b[0]), C.size_t(len(b)))
		return nil
	}
	if d.capturing(capOp{s: s, kind: capUpload, work: work, up: &b}) {
		return nil
	}
	return d.enqueue(s, work)
}

func (d *Device) Download(dst []byte, addr uint64) error {
	d.waits.Add(1)
	return d.transfer(func() {
		if len(dst) > 0 {
			C.memcpy(unsafe.Pointer(&dst[0]), ptr(addr), C.size_t(len(dst)))
		}
	})
}

func (d *Device) Copy(s int, dst, src uint64, bytes int64) error {
	return d.enqueue(s, func() error {
		C.memmove(ptr(dst), ptr(src), C.size_t(bytes))
		return nil
	})
}

func (d *Device) Zero(s int, addr uint64, bytes int64) error {
	return d.enqueue(s, func() error {
		C.memset(ptr(addr), 0, C.size_t(bytes))
		return nil
	})
}

func floats(addr uint64, n int) []float32 {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(ptr(addr)), n)
}

// Gemm runs a plan's matmul with package kernels: bf16 operands widened
// exactly first; a bf16 output (OutBF16) rounded to nearest even from
// the fp32 results; Accumulate (GemmAtB only here) adding to the output
// as kernels.MatMulGradBAcc does.
func (d *Device) Gemm(s int, g *gpu.Gemm, a, b, out uint64) error {
	if err := g.Check(); err != nil {
		return err
	}
	switch {
	case g.Kind != gpu.GemmAB && g.Kind != gpu.GemmABt && g.Kind != gpu.GemmAtB:
		return fmt.Errorf("hostc: gemm kind %d", g.Kind)
	case g.Accumulate && g.Kind != gpu.GemmAtB:
		return fmt.Errorf("hostc: an accumulating gemm of kind %d", g.Kind)
	}
	gc := *g
	return d.enqueue(s, func() error {
		gemm(&gc, a, b, out)
		return nil
	})
}

func gemm(g *gpu.Gemm, a, b, out uint64) {
	m, k, n := g.M, g.K, g.N
	in := func(addr uint64, n int) []float32 {
		if !g.BF16 {
			return floats(addr, n)
		}
		w := make([]float32, n)
		for i, v := range unsafe.Slice((*uint16)(ptr(addr)), n) {
			w[i] = math.Float32frombits(uint32(v) << 16)
		}
		return w
	}
	rows, cols := m, n // the output's
	switch g.Kind {
	case gpu.GemmABt:
		cols = k
	case gpu.GemmAtB:
		rows = k
	}
	o := floats(out, rows*cols)
	if g.OutBF16 {
		o = make([]float32, rows*cols)
	}
	switch {
	case g.Kind == gpu.GemmAB:
		kernels.MatMul(o, in(a, m*k), in(b, k*n), m, k, n)
	case g.Kind == gpu.GemmABt:
		kernels.MatMulGradA(o, in(a, m*n), in(b, k*n), m, k, n)
	case g.Accumulate:
		kernels.MatMulGradBAcc(o, in(a, m*k), in(b, m*n), m, k, n)
	default:
		kernels.MatMulGradB(o, in(a, m*k), in(b, m*n), m, k, n)
	}
	if g.OutBF16 {
		bits := unsafe.Slice((*uint16)(ptr(out)), len(o))
		for i, v := range o {
			u := math.Float32bits(kernels.RoundBF16(v))
			if v != v {
				u |= 0x00400000 // a NaN stays one
			}
			bits[i] = uint16(u >> 16)
		}
	}
}

// Launch enqueues l with its pointer arguments at addrs (addrs[i] for
// l.Args[i] of a pointer kind; 0 for Null); neither is used after the
// call. Elementwise kernels get a grid of at most 61 one-thread blocks
// (their loops stride), row kernels a block per row, attention kernels
// (ops.cu's and mma.cu's) the plan's grid and block, their threads
// coroutines.
func (d *Device) Launch(s int, l *gpu.Launch, addrs []uint64) error {
	if err := l.CheckArgs(); err != nil {
		return err
	}
	sl, err := prepare(l, addrs)
	if err != nil {
		return err
	}
	return d.enqueue(s, sl.run)
}

func (d *Device) Record(s, ev int) error {
	d.q.Lock()
	defer d.q.Unlock()
	if d.captured(capOp{s: s, kind: capRecord, ev: ev}) || d.sequential {
		return nil
	}
	st, err := d.stream(s)
	if err != nil {
		return err
	}
	g := &generation{}
	d.events[ev] = g
	if len(st.items) == 0 { // nothing to wait for on s: done now
		g.done = true
		return nil
	}
	d.push(s, st, &item{rec: g})
	return nil
}

func (d *Device) Wait(s, ev int) error {
	d.q.Lock()
	defer d.q.Unlock()
	if d.captured(capOp{s: s, kind: capWait, ev: ev}) || d.sequential {
		return nil
	}
	st, err := d.stream(s)
	if err != nil {
		return err
	}
	g := d.events[ev]
	switch {
	case g == nil || g.done:
	case d.dropWaits:
		d.push(s, st, &item{dropped: g})
	default:
		d.push(s, st, &item{wait: g})
	}
	return nil
}

// Reordered is how many work items, under DropWaits, started before a
// Wait that was dropped would have let them: none, and the mutation
// changed nothing.
func (d *Device) Reordered() int {
	d.q.Lock()
	defer d.q.Unlock()
	return d.reordered
}

// Sync waits for all the work enqueued before it and returns the first
// error any enqueued work has had.
func (d *Device) Sync() error {
	if d.sequential {
		d.q.Lock()
		defer d.q.Unlock()
		if d.capture != nil {
			return errCapturing
		}
		return nil
	}
	d.barrier.Lock()
	defer d.barrier.Unlock()
	d.q.Lock()
	defer d.q.Unlock()
	if d.capture != nil {
		return errCapturing
	}
	d.drainAll(d.next, true)
	return d.err
}

// transfer runs f, a copy between the host and the device or a free, as
// CUDA's legacy stream would: once all work enqueued before is done, and
// before any work enqueued after starts.
func (d *Device) transfer(f func()) error {
	d.q.Lock()
	capturing := d.capture != nil
	d.q.Unlock()
	if capturing {
		return errCapturing
	}
	if d.sequential {
		d.seqMu.Lock()
		defer d.seqMu.Unlock()
		f()
		return nil
	}
	d.barrier.Lock()
	defer d.barrier.Unlock()
	d.q.Lock()
	d.fenced, d.fence = true, d.next
	d.drainAll(d.fence, false)
	err := d.err
	d.q.Unlock()
	f()
	d.q.Lock()
	d.fenced = false
	d.done.Broadcast()
	d.q.Unlock()
	d.collWake() // a world's held-back drain may wait for the fence
	return err
}

// stream is stream s, made on its first use, or the error its work has
// had. Callers hold q.
func (d *Device) stream(s int) (*stream, error) {
	if s < 0 {
		return nil, fmt.Errorf("hostc: stream %d", s)
	}
	for len(d.streams) <= s {
		i := len(d.streams)
		// A world's comm streams run collectives that wait for other
		// ranks: transfers pass them by (a held-back world forces what
		// they need as coll.go says instead).
		nb := d.coll != nil && !d.holdBack && (i == ir.CommGather || i == ir.CommReduce)
		d.streams = append(d.streams, &stream{nonBlocking: nb})
	}
	st := d.streams[s]
	return st, st.err
}

// enqueue puts work on stream s (Sequential: runs it now).
func (d *Device) enqueue(s int, work func() error) error {
	if d.capturing(capOp{s: s, work: work}) {
		return nil
	}
	if d.sequential {
		if s < 0 {
			return fmt.Errorf("hostc: stream %d", s)
		}
		d.seqMu.Lock()
		defer d.seqMu.Unlock()
		return protect(work)
	}
	d.q.Lock()
	defer d.q.Unlock()
	st, err := d.stream(s)
	if err != nil {
		return err
	}
	d.push(s, st, &item{work: work})
	return nil
}

// push appends it to stream s, starting the stream's worker unless the
// device holds work back. Callers hold q.
func (d *Device) push(s int, st *stream, it *item) {
	it.seq, it.nb = d.next, st.nonBlocking
	d.next++
	st.items = append(st.items, it)
	if !d.holdBack && !st.running {
		st.running = true
		go d.work(st)
	}
}

// ready says whether it may start: its wait done, and not held by a
// fence (a held-back device ignores fences, its caller running only
// what the transfer waits for). Callers hold q.
func (d *Device) ready(it *item) bool {
	return (it.wait == nil || it.wait.done) && (d.holdBack || !d.fenced || it.seq < d.fence || it.nb)
}

// work is stream st's worker: it runs the queue's items in order until
// the queue is empty.
func (d *Device) work(st *stream) {
	d.q.Lock()
	defer d.q.Unlock()
	for len(st.items) > 0 {
		if it := st.items[0]; d.ready(it) {
			d.run(st, it)
		} else {
			d.done.Wait()
		}
	}
	st.running = false
}

// run runs it, the head of st, with q held on entry and return (not
// while the work runs), then takes it off the queue.
//
// A collective joins its rendezvous (joinColl) even on a failed stream,
// as a failure, so that no member waits for it. Held back, joining does
// not wait: the item stays at the head of st until its rendezvous ends,
// which takes it off the queue (finishHeld).
func (d *Device) run(st *stream, it *item) {
	if it.dropped != nil {
		st.dropped = append(st.dropped, it.dropped)
	}
	if (it.work != nil || it.coll != nil) && st.err == nil {
		st.dropped = slices.DeleteFunc(st.dropped, func(g *generation) bool { return g.done })
		if len(st.dropped) > 0 {
			d.reordered++
		}
	}
	var err error
	switch {
	case it.coll != nil:
		failed := st.err
		d.q.Unlock()
		err = d.joinColl(it.coll, failed)
		d.q.Lock()
		if d.holdBack {
			return
		}
	case it.work != nil && st.err == nil:
		d.q.Unlock()
		err = protect(it.work)
		d.q.Lock()
	}
	d.finish(st, it, err)
}

// finish takes it, the head of st, off the queue once it is done (err:
// how it failed). Callers hold q.
func (d *Device) finish(st *stream, it *item, err error) {
	if st.items[0] != it {
		panic("hostc: an item finished that is not its stream's head")
	}
	st.items[0] = nil
	st.items = st.items[1:]
	if it.rec != nil {
		it.rec.done = true
	}
	if err != nil {
		if st.err == nil {
			st.err = err
		}
		if d.err == nil {
			d.err = err
		}
	}
	d.done.Broadcast()
}

// protect runs work, a panic becoming its error (a worker has no caller
// to recover it).
func protect(work func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("hostc: %v", r)
		}
	}()
	return work()
}

// drainAll returns once every item numbered below n is done, of the
// nonBlocking streams too when all (a Sync), else of the others only (a
// transfer); a held-back device runs them here, in the order HoldBack
// describes (one of a world runs its world's items as coll.go says).
// Callers hold q.
func (d *Device) drainAll(n uint64, all bool) {
	if d.holdBack && d.coll != nil {
		d.coll.w.drainHeld(d, n)
		return
	}
	for {
		var best *stream
		pending := false
		for _, st := range d.streams {
			if len(st.items) == 0 || st.items[0].seq >= n || st.nonBlocking && !all {
				continue
			}
			pending = true
			it := st.items[0]
			if !d.holdBack || !d.ready(it) {
				continue
			}
			if it.work == nil { // a marker or a met wait: it touches no memory
				best = st
				break
			}
			if best == nil || it.seq > best.items[0].seq {
				best = st
			}
		}
		switch {
		case !pending:
			return
		case !d.holdBack:
			d.done.Wait()
		case best == nil:
			// The oldest item pending is always ready: its stream's
			// earlier items and the marker it may wait for came before.
			panic("hostc: held-back streams wait on one another")
		default:
			d.run(best, best.items[0])
		}
	}
}
