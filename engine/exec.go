// Package engine executes plan bundles: every rank runs its instruction
// streams (compute and two communication streams, concurrently, ordered
// only by the plan's events) on a kernel backend and a Comm for
// collectives. The CPU backend (package kernels) computes in fp32; ranks
// are goroutines of one process (LocalWorld).
//
// In: a codegen.Bundle, data and a seed. Out: trained parameters, the loss
// of every step, and measurements (time per instruction, peak bytes per
// rank). The runtime reads plans, never models: it imports neither passes
// nor frontend.
package engine

import (
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"amspc/codegen"
	"amspc/ir"
	"amspc/kernels"
)

// rank is one rank's execution state.
type rank struct {
	b    *codegen.Bundle
	p    *ir.Program
	r    int
	comm Comm
	topo ir.Topology

	// be holds the buffers and runs the kernels; host says it is the CPU
	// backend, whose memory the rank may read (shared gathers, pooling).
	be   Backend
	host bool
	// dc runs the collectives on the device, when the backend's device
	// does (DeviceOptions.Collectives); comms maps each (stream, group)
	// of the program to its communicator there.
	dc    DeviceCollectives
	comms map[streamGroup]int

	mu   sync.Mutex
	mem  []Mem  // storage of non-view buffers
	have []bool // which are allocated
	live int64  // bytes allocated now
	peak int64

	// On the host, freed float buffers by length, reused by the next
	// Alloc of that length (no page faults, no garbage; cleared unless
	// overwritten), holding at most peak bytes in all.
	pool      map[int64][]Mem
	poolBytes int64
	// overwritten[id]: the first instruction to touch buffer id after its
	// Alloc writes all of it and reads none of it, so a reused slice needs
	// no clearing.
	overwritten []bool

	// shareable[id]: transient buffer id is written only by all-gathers
	// of all of it, so with a sharingComm the members read one gathered
	// buffer (released[id] gives it back; own[id] is the rank's own
	// allocation meanwhile, which keeps the rank's memory accounting).
	shareable []bool
	own       []Mem
	release   []func()
	memos     []*memo // the shared gather's memo, while root id shows one

	// reps shares the packings of replicated weights with the other local
	// ranks (replica.go); nil where the Comm or the backend cannot.
	reps *replicaState
	// prepacked is a profile probe's matmul operand 1, packed once
	// (MeasureKernel), where no sharing gives one.
	prepacked *kernels.PackedB
	// packCalls counts the products that packed their weight or were the
	// rank's first use of a shared packing, where countPacks is set
	// (tests: simulator.Packings says which).
	packCalls int64
	packSeen  map[*kernels.PackedB]bool
	// packUse is how the kernel each stream ran last took a packing the
	// local ranks share (traced: TraceSpan.Pack).
	packUse [ir.NumStreams]PackUse

	// gate, when the process runs more ranks than it has cores, lets only
	// as many streams compute at once as there are cores: each runs its
	// kernels to their end with its caches instead of being time-sliced
	// with the others (a place is given up before every wait and
	// collective, so holding one cannot deadlock).
	gate chan struct{}

	step int // 1-based optimizer step
	// gradNorm is the step's gradient norm, where the step clips it.
	gradNorm float64
	// evaluating: the step is an evaluation (eval.go), which leaves out
	// the instructions evalSkip marks.
	evaluating bool
	evalSkip   *[ir.NumStreams][]bool
	// horizon is the step the learning rate's decay ends at (Run.Horizon).
	horizon int
	ran     int // steps this rank has run in this process
	// hostColls says the program has collectives, which run through the
	// host unless the device runs them (dc).
	hostColls bool

	// standIn replaces the rank's collectives by stand-ins (standin.go).
	standIn *StandIn
	data    *Data // shared by all ranks
	losses  []float64
	events  []chan struct{}
	calls   [ir.NumStreams]KernelCall // each stream's scratch

	timeMu sync.Mutex
	timing map[string]*Timing // per instruction kind, summed over steps

	// trace records this rank's instructions for a Trace (trace.go), nil
	// without one; rec is it during a step the trace records, else nil.
	trace, rec *rankTrace
}

// Timing is the measured time of one kind of instruction on a rank.
type Timing struct {
	Name    string
	Count   int
	Seconds float64
}

func (k *rank) time(name string, d time.Duration) {
	k.timeMu.Lock()
	defer k.timeMu.Unlock()
	if k.timing == nil {
		k.timing = map[string]*Timing{}
	}
	t := k.timing[name]
	if t == nil {
		t = &Timing{Name: name}
		k.timing[name] = t
	}
	t.Count++
	t.Seconds += d.Seconds()
}

func newRank(b *codegen.Bundle, r int, comm Comm, data *Data, be Backend) (*rank, error) {
	p := b.Template(r)
	k := &rank{b: b, p: p, r: r, comm: comm, topo: b.Topo, data: data}
	k.setBackend(be)
	// Buffers no instruction allocates are the persistent shards.
	trans := map[int32]bool{}
	for s := range p.Streams {
		for _, in := range p.Streams[s] {
			switch in.Op {
			case ir.Alloc:
				trans[in.Buf] = true
			case ir.Collective:
				k.hostColls = true
			}
		}
	}
	for id, buf := range p.Buffers {
		if !buf.IsView() && !trans[int32(id)] {
			if err := k.alloc(int32(id), ir.Compute); err != nil {
				return nil, err
			}
		}
	}
	k.overwritten = k.findOverwritten()
	if _, ok := comm.(sharingComm); ok && k.host {
		k.shareable = k.findShareable(trans)
		k.own = make([]Mem, len(p.Buffers))
		k.release = make([]func(), len(p.Buffers))
		k.memos = make([]*memo, len(p.Buffers))
	}
	if rs, ok := comm.(replicaSharer); ok && k.host {
		k.reps = newReplicaState(rs.replicas(), k)
	}
	return k, nil
}

// setBackend gives the rank its backend (nil: the CPU's) and empty
// storage.
func (k *rank) setBackend(be Backend) {
	if be == nil {
		be = NewCPUBackend()
	}
	_, k.host = be.(cpuBackend)
	k.be = be
	k.mem = make([]Mem, len(k.p.Buffers))
	k.have = make([]bool, len(k.p.Buffers))
}

// findShareable finds the transient float buffers that only all-gathers
// write, one of them all of it (parameters gathered for a layer, in one
// level or, across nodes then inside the node, in two): a shared
// all-gather can stand for the one that writes all of it.
func (k *rank) findShareable(trans map[int32]bool) []bool {
	ok := make([]bool, len(k.p.Buffers))
	for id := range trans {
		ok[id] = k.p.Buffers[id].DType != ir.I32
	}
	root := func(b int32) int32 { r, _ := k.offset(b); return r }
	whole := make([]bool, len(k.p.Buffers))
	for _, ins := range k.p.Streams {
		for _, in := range ins {
			switch in.Op {
			case ir.Kernel:
				for _, o := range in.Outs {
					ok[root(o)] = false
				}
			case ir.Load:
				ok[root(in.Buf)] = false
			case ir.Collective:
				r := root(in.Out)
				switch {
				case in.Coll != ir.AllGather:
					ok[r] = false
				case r == in.Out:
					whole[r] = true
				}
			}
		}
	}
	for id := range ok {
		ok[id] = ok[id] && whole[id]
	}
	return ok
}

// findOverwritten finds the transient buffers whose first uses after
// each Alloc write all of them before reading any part not yet written:
// on the allocating stream, before any Record (so no other stream can be
// ordered between the Alloc and those uses), kernels' results (kernels
// write their results in full) and collectives' outputs, whole or as
// views (a two-level all-gather writes its node's part, then the whole
// from it). A buffer allocated more than once qualifies only if every
// Alloc does.
func (k *rank) findOverwritten() []bool {
	ok := make([]bool, len(k.p.Buffers))
	seen := make([]bool, len(k.p.Buffers))
	for _, ins := range k.p.Streams {
		for i, in := range ins {
			if in.Op != ir.Alloc {
				continue
			}
			id := in.Buf
			good := k.writtenBeforeRead(id, ins[i+1:])
			ok[id] = good && (!seen[id] || ok[id])
			seen[id] = true
		}
	}
	return ok
}

// writtenBeforeRead says whether the instructions ins, from the start,
// write every element of root buffer id before reading any of it that
// they have not written, and before any Record, Free or Load of it.
func (k *rank) writtenBeforeRead(id int32, ins []ir.Instr) bool {
	var done elemRanges
	whole := k.p.Buffers[id].Elems
	// part is the span of root id that buffer b covers, or false.
	part := func(b int32) (elemRange, bool) {
		r, off := k.offset(b)
		return elemRange{off, off + k.p.Buffers[b].Elems}, r == id
	}
	for _, x := range ins {
		switch x.Op {
		case ir.Record:
			return false
		case ir.Free, ir.Load:
			if x.Buf == id {
				return false
			}
		case ir.Kernel:
			for _, a := range x.Args {
				if sp, mine := part(a); mine && !done.cover(sp) {
					return false
				}
			}
			for _, o := range x.Outs {
				if sp, mine := part(o); mine {
					done.add(sp)
				}
			}
		case ir.Collective:
			reads := []int32{x.In}
			if x.Coll == ir.Broadcast || x.In == x.Out {
				reads = append(reads, x.Out)
			}
			for _, b := range reads {
				if sp, mine := part(b); mine && !done.cover(sp) {
					return false
				}
			}
			if sp, mine := part(x.Out); mine {
				done.add(sp)
			}
		}
		if done.cover(elemRange{0, whole}) {
			return true
		}
	}
	return false
}

// elemRange is the elements [lo, hi) of a buffer; elemRanges a sorted,
// disjoint, non-adjacent union of them.
type elemRange struct{ lo, hi int64 }
type elemRanges []elemRange

func (ss *elemRanges) add(x elemRange) {
	if x.lo >= x.hi {
		return
	}
	var out elemRanges
	for _, s := range *ss {
		switch {
		case s.hi < x.lo || x.hi < s.lo:
			out = append(out, s)
		default:
			x = elemRange{min(s.lo, x.lo), max(s.hi, x.hi)}
		}
	}
	out = append(out, x)
	sort.Slice(out, func(i, j int) bool { return out[i].lo < out[j].lo })
	*ss = out
}

func (ss elemRanges) cover(x elemRange) bool {
	if x.lo >= x.hi {
		return true
	}
	for _, s := range ss {
		if s.lo <= x.lo && x.hi <= s.hi {
			return true
		}
	}
	return false
}

// alloc gives buffer id its memory for stream s, which is the first to
// use it (a device backend zeroes it there and reuses only memory s
// freed, or any after a Sync).
func (k *rank) alloc(id int32, s int) error {
	buf := k.p.Buffers[id]
	k.mu.Lock()
	defer k.mu.Unlock()
	if free := k.pool[buf.Elems]; k.host && buf.DType != ir.I32 && len(free) > 0 {
		m := free[len(free)-1]
		k.pool[buf.Elems] = free[:len(free)-1]
		k.poolBytes -= 4 * buf.Elems
		if !k.overwritten[id] {
			clear(m.f32)
		}
		m.DType = buf.DType
		k.mem[id] = m
	} else {
		m, err := allocOn(k.be, s, buf.DType, buf.Elems)
		if err != nil {
			return fmt.Errorf("%s of %v%v: %w", buf.Name, buf.DType, ir.Shape(buf.Shape), err)
		}
		k.mem[id] = m
	}
	k.have[id] = true
	k.live += buf.Bytes()
	k.peak = max(k.peak, k.live)
	return nil
}

// free gives buffer id's memory back; s is the stream that frees it,
// after its own and (through events) the other streams' last uses.
func (k *rank) free(id int32, s int) {
	buf := k.p.Buffers[id]
	k.mu.Lock()
	defer k.mu.Unlock()
	k.unshare(id)
	m := k.mem[id]
	switch {
	case !k.have[id]:
	case k.host && buf.DType != ir.I32 && k.poolBytes+4*buf.Elems <= k.peak:
		if k.pool == nil {
			k.pool = map[int64][]Mem{}
		}
		k.pool[buf.Elems] = append(k.pool[buf.Elems], m)
		k.poolBytes += 4 * buf.Elems
	default:
		freeOn(k.be, s, m)
	}
	k.mem[id], k.have[id] = Mem{}, false
	k.live -= buf.Bytes()
}

// unshare gives back the shared gather that root buffer id shows, if
// any, and shows the rank's own allocation again. Callers hold k.mu.
func (k *rank) unshare(id int32) {
	if k.release != nil && k.release[id] != nil {
		k.release[id]()
		k.release[id], k.memos[id] = nil, nil
		k.mem[id], k.own[id] = k.own[id], Mem{}
	}
}

// offset is where view id starts in its root buffer, and the root.
func (k *rank) offset(id int32) (int32, int64) {
	var off int64
	for {
		buf := k.p.Buffers[id]
		if !buf.IsView() {
			return id, off
		}
		off += buf.Offset + int64(buf.Part.Index(k.topo, k.r))*buf.Elems
		id = buf.Parent
	}
}

// m returns buffer id's storage (a view resolves to its part).
func (k *rank) m(id int32) Mem {
	root, off := k.offset(id)
	k.mu.Lock()
	s, ok := k.mem[root], k.have[root]
	k.mu.Unlock()
	if !ok {
		panic(fmt.Sprintf("buffer %s is not allocated", k.p.Buffers[root].Name))
	}
	return s.Slice(off, k.p.Buffers[id].Elems)
}

// f returns buffer id's float storage on the host backend.
func (k *rank) f(id int32) []float32 {
	if !k.host {
		panic("runtime: host access to " + k.be.Name() + " memory")
	}
	return k.m(id).f32
}

// read and write copy buffer id to and from host float32 values (on the
// host backend, read returns the storage itself); readInts and
// writeInts are the same for ids.
func (k *rank) read(id int32) ([]float32, error) {
	m := k.m(id)
	if k.host {
		return m.f32, nil
	}
	out := make([]float32, m.N)
	return out, k.be.Read(out, m)
}

func (k *rank) write(id int32, src []float32) error {
	k.wrote(id)
	return k.be.Write(k.m(id), src)
}

// wrote tells the replica memo that buffer id (or the buffer it is a view
// of) is about to be written, by anything (a whole all-gather then calls
// gathered once it is done).
func (k *rank) wrote(id int32) {
	if k.reps == nil {
		return
	}
	r, _ := k.offset(id)
	if k.reps.group[r].stage < 0 { // not a P buffer (group is fixed at start)
		return
	}
	k.mu.Lock()
	k.reps.wrote(k.r, r)
	k.mu.Unlock()
}

// ErrStopped is returned by the ranks that stop because another failed.
var ErrStopped = errors.New("stopped because another rank failed")

// runStep runs one step of this rank's program: three goroutines, one per
// stream. A failure aborts the Comm, so every rank stops. A backend that
// replays steps as graphs (graph.go) captures the second step this rank
// runs and replays it for the steps after.
func (k *rank) runStep(abort <-chan struct{}) error {
	g, graphs := k.be.(stepGrapher)
	graphs = graphs && g.graphs() && k.graphable()
	if graphs && g.replaying() {
		if err := g.replay(k.step); err != nil {
			err = k.fail(ir.Compute, nil, err)
			k.abort(err)
			return err
		}
		return k.endStep()
	}
	capture := graphs && k.ran > 0
	if capture {
		if err := g.beginCapture(); err != nil {
			err = k.fail(ir.Compute, nil, err)
			k.abort(err)
			return err
		}
	}
	if err := k.enqueueStep(abort); err != nil {
		if capture {
			g.abortCapture()
		}
		return err
	}
	if capture {
		if err := g.endCapture(); err != nil {
			err = k.fail(ir.Compute, nil, err)
			k.abort(err)
			return err
		}
	}
	return k.endStep()
}

// graphable says whether every step of the rank's program can be a
// replay of one: its collectives (if any) run on the device, and no
// trace records the steps' instructions.
func (k *rank) graphable() bool {
	if k.trace != nil {
		return false
	}
	return k.dc != nil || k.standIn != nil || !k.hostColls
}

// endStep waits for the step's work and reports the checks it made (and
// a device rank's traced times).
func (k *rank) endStep() error {
	// A backend that checks results in batches reports the step's last
	// ones now. (Its collectives read through the host, which reports
	// the ones before: no NaN leaves a rank unreported.)
	err := k.be.Sync()
	if err == nil && k.rec != nil {
		err = k.rec.resolve()
	}
	if err != nil {
		err = k.fail(ir.Compute, nil, err)
		k.abort(err)
		return err
	}
	k.ran++
	return nil
}

// enqueueStep runs (on a device backend, enqueues) the instructions of
// one step: three goroutines, one per stream.
func (k *rank) enqueueStep(abort <-chan struct{}) error {
	k.rec = nil
	if !k.evaluating {
		k.rec = k.trace.begin()
	}
	k.events = make([]chan struct{}, k.p.Events)
	for i := range k.events {
		k.events[i] = make(chan struct{})
	}
	var wg sync.WaitGroup
	errs := make([]error, ir.NumStreams)
	var failed atomic.Bool
	for s := 0; s < ir.NumStreams; s++ {
		wg.Add(1)
		go func(s int) {
			defer wg.Done()
			errs[s] = k.runStream(s, abort, &failed)
			if errs[s] != nil {
				failed.Store(true)
				k.abort(errs[s])
			}
		}(s)
	}
	wg.Wait()
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func (k *rank) runStream(s int, abort <-chan struct{}, failed *atomic.Bool) (err error) {
	ins := k.p.Streams[s]
	var cur *ir.Instr
	// tr records this step's instructions, when traced: each reads the
	// clock before and after (t0, t1), a kernel and a collective as
	// k.time always does.
	tr := k.rec
	var t0 time.Time
	var st traceStamp
	// With a gate, a stream holds its place through a run of kernels (the
	// next one finds its inputs in this core's caches) and gives it up
	// before anything that may block.
	held := false
	defer func() {
		if held {
			<-k.gate
		}
		if r := recover(); r != nil {
			err = k.fail(s, cur, fmt.Errorf("%v", r))
		}
	}()
	var skip []bool
	if k.evaluating {
		skip = k.evalSkip[s]
	}
	for i := range ins {
		in := &ins[i]
		cur = in
		if skip != nil && skip[i] {
			continue
		}
		if k.gate != nil {
			switch {
			case in.Op == ir.Kernel && !held:
				k.gate <- struct{}{}
				held = true
			case (in.Op == ir.Wait || in.Op == ir.Collective) && held:
				<-k.gate
				held = false
			}
		}
		switch in.Op {
		case ir.Alloc:
			if err := k.alloc(in.Buf, s); err != nil {
				return k.fail(s, in, err)
			}
		case ir.Free:
			k.free(in.Buf, s)
		case ir.Record:
			if tr != nil {
				st = tr.stamp(s)
			}
			if err := k.be.Record(s, int(in.Event)); err != nil {
				return k.fail(s, in, err)
			}
			close(k.events[in.Event])
			if tr != nil {
				tr.add(s, i, st, tr.stamp(s))
			}
		case ir.Wait:
			if tr != nil {
				st = tr.stamp(s)
			}
			select {
			case <-k.events[in.Event]:
			case <-abort:
				return ErrStopped
			}
			if err := k.be.Wait(s, int(in.Event)); err != nil {
				return k.fail(s, in, err)
			}
			if tr != nil {
				tr.add(s, i, st, tr.stamp(s))
			}
		case ir.Load:
			if tr != nil {
				st = tr.stamp(s)
			}
			k.wrote(in.Buf)
			if err := k.load(s, in); err != nil {
				return k.fail(s, in, err)
			}
			if tr != nil {
				tr.add(s, i, st, tr.stamp(s))
			}
		case ir.Kernel:
			t0 = time.Now()
			if tr != nil {
				st = tr.stampAt(s, t0)
			}
			if err := k.kernel(s, in); err != nil {
				return k.fail(s, in, err)
			}
			t1 := time.Now()
			k.time(in.Kern.String(), t1.Sub(t0))
			if tr != nil {
				tr.add(s, i, st, tr.stampAt(s, t1))
				tr.markPack(s, k.packUse[s])
			}
			// A collective woken while both cores compute would wait for
			// the scheduler's 10 ms preemption: let it run now.
			runtime.Gosched()
		case ir.Collective:
			t0 = time.Now()
			if tr != nil {
				st = tr.stampAt(s, t0)
			}
			if k.standIn != nil {
				if err := k.standInColl(s, i); err != nil {
					return k.fail(s, in, err)
				}
				if tr != nil {
					tr.add(s, i, st, tr.stamp(s))
				}
				continue
			}
			if err := k.collective(s, in); err != nil {
				if failed.Load() || errors.Is(err, ErrCommAborted) {
					return ErrStopped
				}
				return k.fail(s, in, err)
			}
			t1 := time.Now()
			k.time(in.Coll.String()+" "+in.Group.String(), t1.Sub(t0))
			if tr != nil {
				tr.add(s, i, st, tr.stampAt(s, t1))
			}
		}
	}
	return nil
}

// fail wraps an error with where it happened: rank, stream, op and the
// source position of the op, so a NaN or a bad id names its origin.
func (k *rank) fail(s int, in *ir.Instr, err error) error {
	if ke, ok := errors.AsType[*KernelError](err); ok { // found after its launch: where it happened
		s, in, err = ke.Stream, ke.Instr, ke.Err
	}
	if in == nil {
		return fmt.Errorf("rank %d %s: %v", k.r, ir.StreamName(s), err)
	}
	what := in.Op.String()
	if in.Op == ir.Kernel {
		what = in.Kern.String()
	}
	where := ""
	if in.Stage >= 0 && int(in.Stage) < len(k.p.Layouts) {
		where = " in " + k.p.Layouts[in.Stage].Stage
	}
	if in.Micro >= 0 {
		where += fmt.Sprintf(" (micro-batch %d)", in.Micro)
	}
	if in.Pos.IsValid() {
		where += " at " + in.Pos.String()
	}
	return fmt.Errorf("rank %d %s: %s%s: %v", k.r, ir.StreamName(s), what, where, err)
}

func (k *rank) collective(s int, in *ir.Instr) (err error) {
	g := in.Group.Ranks(k.topo, k.r)
	k.wrote(in.Out)
	if r, _ := k.offset(in.Out); k.reps != nil && in.Coll == ir.AllGather && r == in.Out {
		// Once the gather is done, the buffer holds what every replica's
		// holds.
		defer func() {
			if err == nil {
				k.mu.Lock()
				k.reps.settled(r)
				k.mu.Unlock()
			}
		}()
	}
	if k.host && in.Coll == ir.AllGather {
		if sc, ok := k.comm.(sharingComm); ok {
			if r, _ := k.offset(in.Out); k.shareable[r] {
				// A write into a buffer that shows a shared gather: this
				// rank has read that gather (the program orders its reads
				// before this write), so it writes its own memory again.
				k.mu.Lock()
				k.unshare(r)
				k.mu.Unlock()
				if r == in.Out {
					res, release, m, err := sc.AllGatherShared(s, g, k.f(in.In), k.f(in.Out))
					if err != nil {
						return err
					}
					k.mu.Lock()
					k.own[r], k.mem[r], k.release[r], k.memos[r] = k.mem[r], HostMem(k.mem[r].DType, res, nil), release, m
					k.mu.Unlock()
					return nil
				}
			}
		}
	}
	if k.dc != nil {
		return k.deviceCollective(s, in)
	}
	c := memComm{k.be, k.comm}
	switch in.Coll {
	case ir.AllGather:
		return c.AllGather(s, g, k.m(in.In), k.m(in.Out))
	case ir.ReduceScatter:
		return c.ReduceScatter(s, g, k.m(in.In), k.m(in.Out))
	case ir.AllReduce:
		buf := k.m(in.Out)
		if in.In != in.Out {
			if err := k.be.Copy(s, buf, k.m(in.In)); err != nil {
				return err
			}
		}
		return c.AllReduce(s, g, buf)
	case ir.Broadcast:
		return c.Broadcast(s, g, g[0], k.m(in.Out))
	}
	return fmt.Errorf("unknown collective %v", in.Coll)
}

// checkFinite stops the run at the first NaN or Inf a kernel produces.
// The scan is on the exponent bits, eight lanes at a time where the CPU
// has AVX2.
func checkFinite(out []float32) error {
	if i := kernels.FirstNonFinite(out); i >= 0 {
		return fmt.Errorf("produced %v at element %d", out[i], i)
	}
	return nil
}
