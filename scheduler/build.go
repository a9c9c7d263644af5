// Package scheduler turns a training graph and a sharding plan into the
// instruction streams every rank runs for one step: M micro-batches of
// forward and backward, gradient synchronisation, the optimizer on each
// rank's shard, and the spread of updated parameters.
//
// In: a passes.State (forward + backward graph of a micro-batch with its
// optimizer states) and per-group factors. Out: a codegen.Program, the
// template every rank runs (SPMD: collectives name their group relative to
// the rank, views name "my shard").
//
// Every stage (the ops before the blocks, each block, the ops after)
// keeps its params in one flat buffer, padded so that it splits evenly
// into the shards of every component (FSDP's flat parameter). Per stage,
// with factors p, g, os of its layer group and dp the whole mesh:
//
//   - s_p > 1: all-gather P before forward and before backward (prefetched
//     on the gather stream), reduce-scatter the stage's gradient over the
//     p-group after backward (on the reduce stream, waited for only where
//     the result is used);
//   - micro-batches 1..M-1, s_g > s_p: all-reduce the p-chunk gradient over
//     the s_g/s_p replicas and keep this rank's slice (select and drop);
//   - last micro-batch: all-reduce over the s_dp/s_p replicas;
//   - optimizer: AdamW on this rank's os-slice; then, s_os > s_p, the spread:
//     an all-gather of the updated slices over the s_os/s_p replicas, at the
//     start of the next step, in layer order, overlapping its forward.
//
// DDP, ZeRO-1/2/3, MiCS, HSDP and ZeRO++ are all special cases of these
// rules (ZeRO++'s secondary shard adds a copy after forward and gathers
// backward's parameters from it); no preset has a code path of its own.
package scheduler

import (
	"fmt"
	"sort"

	"amspc/codegen"
	"amspc/cost"
	"amspc/ir"
	"amspc/passes"
)

// Options steer scheduling.
type Options struct {
	// Depth is how many stages' gathered parameters may be live at once
	// (the stage computing and Depth-1 prefetched); at least 1.
	Depth int
	// Topo, when set, lets the scheduler lower an all-reduce across nodes
	// into reduce-scatter inside the node, all-reduce across nodes on the
	// node's share and all-gather inside the node, where the cost model
	// says that is faster.
	Topo *cost.Topology
	// BucketBytes fuses the last micro-batch's data-parallel all-reduces
	// of consecutive stages (in backward order, on the same group) into
	// buckets of up to this many bytes, as DDP does; 0 turns it off.
	BucketBytes int64
}

// stage is one stage's flat buffers and values.
type stage struct {
	name   string
	group  cost.Group
	f      cost.Factors
	layout codegen.Layout
	fwd    []*ir.Value // values computed in forward, in order
	bwd    []*ir.Value // values computed in backward, in order
	// lastUser is the index of the last stage that reads one of this
	// stage's params (itself unless a param is shared); borrowed lists
	// the earlier stages whose params this stage reads.
	lastUser int
	borrowed []int
	// buffer ids
	pShard, pFull, pSec, gAcc, gFull, gPC int32
	gSel, osSel, pOS                      int32 // views: my g-slice and os-slice of the p-chunk, my os-slice of P
	master, m, v                          int32
	adamw                                 []ir.Attr // the optimizer pass's AdamW attributes for the stage
}

type builder struct {
	views   map[viewKey]int32 // views declared, so each is declared once
	s       *passes.State
	prog    *codegen.Program
	topo    codegen.Topology
	dp      ir.Factor
	stages  []*stage
	stageOf map[*ir.Value]*stage
	buf     map[*ir.Value]int32
	M       int
	opts    Options
	live    map[int32]bool // activation buffers allocated on compute
	// pFreed[i] is the event recorded when stage i's gathered params were
	// last freed: the next gather of the stage waits for it.
	pFreed []int32
	// final[i] is recorded when stage i's gradient is fully reduced (the
	// optimizer waits for it), -1 when no all-reduce runs.
	final []int32
	// The bucket being filled: stages whose replica all-reduce waits to
	// be fused, their group and bytes.
	bucket      []int
	bucketGroup codegen.Group
	bucketBytes int64
	// copyBack[i] is stage i's part of a fused bucket, copied back into
	// its gradient before the optimizer; bucketLast marks the stage after
	// whose copy the bucket is freed.
	copyBack   map[int]int32
	bucketLast map[int]int32
}

func (st *stage) hasParams() bool { return len(st.layout.Params) > 0 }

func (b *builder) addBuf(buf codegen.Buffer) int32 {
	b.prog.Buffers = append(b.prog.Buffers, buf)
	return int32(len(b.prog.Buffers) - 1)
}

func (b *builder) newBuf(name string, dt ir.DType, elems int64) int32 {
	return b.addBuf(codegen.Buffer{Name: name, DType: dt, Elems: elems, Parent: -1})
}

func (b *builder) view(name string, parent int32, elems, offset int64, part codegen.Group) int32 {
	if part.Outer.Size() == 0 {
		part = group(one, one) // the same place on every rank
	}
	// The same view (a hierarchical collective's node block, issued every
	// micro-batch) is declared once.
	key := viewKey{name, parent, elems, offset, part}
	if id, ok := b.views[key]; ok {
		return id
	}
	dt := b.prog.Buffers[parent].DType
	id := b.addBuf(codegen.Buffer{Name: name, DType: dt, Elems: elems, Parent: parent, Offset: offset, Part: part})
	if b.views == nil {
		b.views = map[viewKey]int32{}
	}
	b.views[key] = id
	return id
}

// viewKey identifies a view.
type viewKey struct {
	name          string
	parent        int32
	elems, offset int64
	part          codegen.Group
}

func (b *builder) event() int32 {
	b.prog.Events++
	return int32(b.prog.Events - 1)
}

func (b *builder) emit(stream int, in codegen.Instr) {
	b.prog.Streams[stream] = append(b.prog.Streams[stream], in)
}

func lcm(a, c int64) int64 {
	x, y := a, c
	for y != 0 {
		x, y = y, x%y
	}
	return a / x * c
}

func group(outer, inner ir.Factor) codegen.Group { return codegen.Group{Outer: outer, Inner: inner} }

var one = ir.Factor{S0: 1, S1: 1}

// Build schedules a step under plan on a cluster of topo.
func Build(s *passes.State, plan cost.Plan, topo codegen.Topology, M int, opts Options) (*codegen.Program, error) {
	if opts.Depth < 1 {
		opts.Depth = 2
	}
	b := &builder{s: s, prog: &codegen.Program{}, topo: topo, dp: ir.Factor{S0: topo.GPUsPerNode, S1: topo.Nodes},
		stageOf: map[*ir.Value]*stage{}, buf: map[*ir.Value]int32{}, M: M, opts: opts, live: map[int32]bool{}}
	if err := b.split(plan); err != nil {
		return nil, err
	}
	// Full recompute is the recompute pass's copies of each block's
	// forward in its backward: the plan must ask for what the passes did.
	if plan.Recompute != b.s.Recompute {
		return nil, &passes.InternalError{Pass: "scheduler", Err: fmt.Errorf("plan %s has recompute %v, the passes ran with %v", plan.Name, plan.Recompute, b.s.Recompute)}
	}
	b.buffers()
	if err := b.adamwAttrs(); err != nil {
		return nil, err
	}
	b.copyBack, b.bucketLast = map[int]int32{}, map[int]int32{}
	b.pFreed = make([]int32, len(b.stages))
	b.final = make([]int32, len(b.stages))
	for i := range b.pFreed {
		b.pFreed[i], b.final[i] = -1, -1
	}
	b.step()
	return b.prog, nil
}

// split takes the stages of the passes' partition and lays out each
// stage's flat params.
func (b *builder) split(plan cost.Plan) error {
	g := b.s.Graph
	part := b.s.Partition
	if part == nil {
		return fmt.Errorf("no stage partition: the partition pass must run first")
	}
	for _, ps := range part.Stages {
		st := &stage{name: ps.Name, group: ps.Group, fwd: ps.Fwd, bwd: ps.Bwd, lastUser: ps.LastUser, borrowed: ps.Borrowed}
		for _, v := range append(append([]*ir.Value{}, ps.Fwd...), ps.Bwd...) {
			b.stageOf[v] = st
		}
		for _, a := range ps.Params {
			b.stageOf[a] = st
			st.layout.Params = append(st.layout.Params, codegen.Slot{Name: a.Name,
				Elems: a.Shape.NumElements(), Decay: len(a.Shape) >= 2, Init: a.Init})
		}
		b.stages = append(b.stages, st)
	}
	grads := map[*ir.Value]*ir.Value{}
	for _, gp := range b.s.Grads {
		grads[gp.Param] = gp.Grad
	}
	for _, st := range b.stages {
		st.f = plan.Groups[st.group]
		st.layout.Stage = st.name
		var off int64
		for i := range st.layout.Params {
			st.layout.Params[i].Offset = off
			off += st.layout.Params[i].Elems
		}
		// Padded to split evenly into the shards of every component and
		// into the data-parallel replicas, so every collective on a
		// shard can be lowered hierarchically.
		pad := lcm(lcm(int64(st.f.P.Size()), int64(st.f.G.Size())), lcm(int64(st.f.OS.Size()), int64(b.dp.Size())))
		if st.f.Secondary.Size() > 1 {
			pad = lcm(pad, int64(st.f.Secondary.Size()))
		}
		st.layout.Padded = (off + pad - 1) / pad * pad
		for _, slot := range st.layout.Params {
			if gv := grads[g.Lookup(slot.Name)]; gv != nil && b.stageOf[gv] != st {
				return &passes.UserError{Pos: gv.Pos, Msg: fmt.Sprintf("the gradient of %s is formed outside its stage %s (a param whose first use does not reach the loss is not supported yet)", slot.Name, st.name)}
			}
		}
	}
	return nil
}

// buffers declares every buffer: the stages' flat P/G/OS shards and their
// views, and one buffer per activation and input.
func (b *builder) buffers() {
	g := b.s.Graph
	prec := b.s.Job.Train.Precision
	pdt := prec.DType()
	grads := map[*ir.Value]*ir.Value{}
	for _, gp := range b.s.Grads {
		grads[gp.Grad] = gp.Param
	}
	for _, st := range b.stages {
		f, n := st.f, st.layout.Padded
		sp, sg, sos := int64(f.P.Size()), int64(f.G.Size()), int64(f.OS.Size())
		st.pShard = b.newBuf("P."+st.name, pdt, n/sp)
		st.pFull = st.pShard
		if sp > 1 {
			st.pFull = b.newBuf("P.full."+st.name, pdt, n)
		}
		st.pSec = -1
		if k := int64(f.Secondary.Size()); k > 1 {
			st.pSec = b.newBuf("P.sec."+st.name, pdt, n/k)
		}
		st.gAcc = -1
		if b.M > 1 {
			st.gAcc = b.newBuf("G."+st.name, pdt, n/sg)
		}
		st.gFull = b.newBuf("G.full."+st.name, pdt, n)
		st.gPC = st.gFull
		if sp > 1 {
			st.gPC = b.newBuf("G.pchunk."+st.name, pdt, n/sp)
		}
		st.gSel = b.view("G.pchunk."+st.name+"[g]", st.gPC, n/sg, 0, group(f.G, f.P))
		st.osSel = b.view("G.pchunk."+st.name+"[os]", st.gPC, n/sos, 0, group(f.OS, f.P))
		st.pOS = b.view("P."+st.name+"[os]", st.pShard, n/sos, 0, group(f.OS, f.P))
		st.master = -1
		if prec != ir.FP32 {
			st.master = b.newBuf("OS.master."+st.name, ir.F32, n/sos)
		}
		st.m = b.newBuf("OS.m."+st.name, ir.F32, n/sos)
		st.v = b.newBuf("OS.v."+st.name, ir.F32, n/sos)
		for _, slot := range st.layout.Params {
			p := g.Lookup(slot.Name)
			b.buf[p] = b.view(slot.Name, st.pFull, slot.Elems, slot.Offset, codegen.Group{})
		}
		st.layout.PShard, st.layout.OSShard = group(f.P, one), group(f.OS, f.P)
		st.layout.P, st.layout.Master, st.layout.M, st.layout.V = st.pShard, st.master, st.m, st.v
		b.prog.Layouts = append(b.prog.Layouts, st.layout)
	}
	for _, st := range b.stages {
		for _, v := range append(append([]*ir.Value{}, st.fwd...), st.bwd...) {
			if p, ok := grads[v]; ok {
				pst := b.stageOf[p]
				for _, slot := range pst.layout.Params {
					if slot.Name == p.Name {
						b.buf[v] = b.view(v.Name, pst.gFull, slot.Elems, slot.Offset, codegen.Group{})
					}
				}
				continue
			}
			b.buf[v] = b.newBuf(v.Name, v.DType, v.Shape.NumElements())
		}
	}
	for _, v := range g.ByRole(ir.Input) {
		b.buf[v] = b.newBuf(v.Name, v.DType, v.Shape.NumElements())
		// An input read as cross_entropy's targets is the shifted window.
		shift := int32(0)
		for _, u := range g.Uses()[v] {
			if u.Kind == ir.CrossEntropy && u.Args[1] == v {
				shift = 1
			}
		}
		b.prog.Inputs = append(b.prog.Inputs, codegen.Input{Buf: b.buf[v], Shift: shift})
	}
	for v, id := range b.buf {
		b.prog.Buffers[id].Shape = append([]int64(nil), v.Shape...)
	}
}

// step emits the whole step.
func (b *builder) step() {
	// The spread of last step's updates opens the step, in layer order,
	// each stage's just before its first gather, so each stage's forward
	// waits only for its own parameters.
	spread := make([]bool, len(b.stages))
	for i, st := range b.stages {
		spread[i] = st.f.OS.Size() > st.f.P.Size()
	}
	// Every micro-batch runs the same ops, so liveness is computed once.
	last := b.lastUses()
	for m := 0; m < b.M; m++ {
		b.microBatch(m, spread, last)
		for i := range spread {
			spread[i] = false // done once per step
		}
	}
	b.optimizer()
}

// opsOf lists the ops computing values vs, in order, each once: an op
// with several results is one kernel.
func opsOf(vs []*ir.Value) []*ir.Op {
	ops := make([]*ir.Op, 0, len(vs))
	seen := make(map[*ir.Op]bool, len(vs))
	for _, v := range vs {
		if !seen[v.Def] {
			seen[v.Def] = true
			ops = append(ops, v.Def)
		}
	}
	return ops
}

// lastUses maps each value read in a micro-batch to the position (in
// emission order: forward stages, then backward stages reversed, one
// position per op) of its last reader.
func (b *builder) lastUses() map[*ir.Value]int {
	last := map[*ir.Value]int{}
	i := 0
	visit := func(ops []*ir.Op) {
		for _, op := range ops {
			for _, a := range op.Args {
				last[a] = i
			}
			i++
		}
	}
	for _, st := range b.stages {
		visit(opsOf(st.fwd))
	}
	for j := len(b.stages) - 1; j >= 0; j-- {
		visit(opsOf(b.stages[j].bwd))
	}
	return last
}

// kernel emits op as one kernel instruction, allocating its results
// first (gradients of params are views of the stage's flat gradient).
func (b *builder) kernel(op *ir.Op, stageIdx, m int) {
	args := make([]int32, len(op.Args))
	for i, a := range op.Args {
		args[i] = b.buf[a]
	}
	outs := make([]int32, len(op.Results))
	for i, r := range op.Results {
		outs[i] = b.buf[r]
		if !b.prog.Buffers[outs[i]].IsView() {
			b.emit(codegen.Compute, codegen.Instr{Op: codegen.Alloc, Buf: outs[i], Stage: int32(stageIdx), Micro: int32(m)})
			b.live[outs[i]] = true
		}
	}
	b.emit(codegen.Compute, codegen.Instr{Op: codegen.Kernel, Kern: op.Kind, Args: args, Outs: outs,
		Attrs: op.Attrs, Stage: int32(stageIdx), Micro: int32(m), Pos: op.Pos, Flops: op.Kind.Info().Flops(op)})
}

// spreadStage all-gathers stage i's updated os-slices over its replicas
// and returns the event compute waits for.
func (b *builder) spreadStage(i int) int32 {
	st := b.stages[i]
	b.collective(codegen.CommGather, codegen.AllGather, st.pOS, st.pShard, group(st.f.OS, st.f.P), i, -1, "spread updated params")
	ev := b.event()
	b.emit(codegen.CommGather, codegen.Instr{Op: codegen.Record, Event: ev, Stage: int32(i), Micro: -1})
	return ev
}

func (b *builder) microBatch(m int, spread []bool, last map[*ir.Value]int) {
	order := 0
	freeDead := func(op *ir.Op, stageIdx int) {
		for _, a := range op.Args {
			if last[a] == order && a.Role != ir.Param && a.Role != ir.Input {
				if id := b.buf[a]; b.live[id] {
					b.emit(codegen.Compute, codegen.Instr{Op: codegen.Free, Buf: id, Stage: int32(stageIdx), Micro: int32(m)})
					delete(b.live, id)
				}
			}
		}
		order++
	}
	for _, v := range b.s.Graph.ByRole(ir.Input) {
		b.emit(codegen.Compute, codegen.Instr{Op: codegen.Alloc, Buf: b.buf[v], Stage: -1, Micro: int32(m)})
		b.emit(codegen.Compute, codegen.Instr{Op: codegen.Load, Buf: b.buf[v], Stage: -1, Micro: int32(m)})
	}
	// Forward. freed[i] is recorded when stage i's gathered params are
	// freed; the gather stream waits for stage i-Depth's before gathering
	// stage i, which bounds the live gathered stages.
	freed := make([]int32, len(b.stages))
	for k := range freed {
		freed[k] = -1
	}
	// Params released at or after the last stage that has params are
	// needed again at once by backward, with no gather in between: they
	// stay gathered (kept) instead of being freed and gathered again.
	lastParams := -1
	for i, st := range b.stages {
		if st.hasParams() {
			lastParams = i
		}
	}
	kept := make([]bool, len(b.stages))
	for i, st := range b.stages {
		if spread[i] && st.hasParams() {
			ev := b.spreadStage(i)
			b.emit(codegen.Compute, codegen.Instr{Op: codegen.Wait, Event: ev, Stage: int32(i), Micro: int32(m)})
		}
		if st.hasParams() {
			if gathered := b.gather(i, i, st, m, freed, false); gathered >= 0 {
				b.emit(codegen.Compute, codegen.Instr{Op: codegen.Wait, Event: gathered, Stage: int32(i), Micro: int32(m)})
			}
		}
		for _, op := range opsOf(st.fwd) {
			b.kernel(op, i, m)
			freeDead(op, i)
		}
		// Release this stage's params and those of earlier stages whose
		// last user this is.
		for _, k := range append(append([]int{}, st.borrowed...), i) {
			switch {
			case b.stages[k].lastUser != i || !b.stages[k].hasParams():
			case i >= lastParams && b.stages[k].f.P.Size() > 1:
				kept[k] = true
			default:
				b.release(k, b.stages[k], m, freed, true)
			}
		}
	}
	// Backward, last stage first.
	for k := range freed {
		freed[k] = -1
	}
	pending, pendingEv := -1, int32(-1)
	for j := len(b.stages) - 1; j >= 0; j-- {
		st := b.stages[j]
		// Gather this stage's params, and those of earlier stages whose
		// first backward user this is.
		for _, k := range append([]int{j}, st.borrowed...) {
			if b.stages[k].lastUser != j || !b.stages[k].hasParams() || kept[k] {
				continue
			}
			if gathered := b.gather(k, j, b.stages[k], m, freed, true); gathered >= 0 {
				b.emit(codegen.Compute, codegen.Instr{Op: codegen.Wait, Event: gathered, Stage: int32(j), Micro: int32(m)})
			}
		}
		if st.hasParams() {
			b.emit(codegen.Compute, codegen.Instr{Op: codegen.Alloc, Buf: st.gFull, Stage: int32(j), Micro: int32(m)})
		}
		for _, op := range opsOf(st.bwd) {
			b.kernel(op, j, m)
			freeDead(op, j)
		}
		if !st.hasParams() {
			continue
		}
		b.release(j, st, m, freed, false)
		synced := b.reduce(j, st, m)
		// The result is used one stage later, so the reduction overlaps
		// the next stage's backward instead of stalling compute.
		if pending >= 0 {
			b.finish(pending, b.stages[pending], m, pendingEv)
		}
		pending, pendingEv = j, synced
	}
	if pending >= 0 {
		b.finish(pending, b.stages[pending], m, pendingEv)
	}
	b.flush(m)
	// Values nothing reads (the loss, for one) die with the micro-batch.
	var rest []int
	for id := range b.live {
		rest = append(rest, int(id))
	}
	sort.Ints(rest)
	for _, id := range rest {
		b.emit(codegen.Compute, codegen.Instr{Op: codegen.Free, Buf: int32(id), Stage: -1, Micro: int32(m)})
		delete(b.live, int32(id))
	}
	for _, v := range b.s.Graph.ByRole(ir.Input) {
		b.emit(codegen.Compute, codegen.Instr{Op: codegen.Free, Buf: b.buf[v], Stage: -1, Micro: int32(m)})
	}
}

// gather emits the all-gather of stage i's params on the gather stream and
// returns the event compute waits for (-1 when P is not sharded).
func (b *builder) gather(i, at int, st *stage, m int, freed []int32, backward bool) int32 {
	f := st.f
	if f.P.Size() <= 1 {
		return -1
	}
	// Bound the live gathered stages: wait until the stage Depth back
	// from where the gather is issued (at) has released its buffer. A
	// stage whose params are shared with later stages is released only
	// after its last user: in forward the wait is skipped while that
	// release is still ahead (waiting would deadlock), so shared stages
	// count on top of the bound.
	back := at - b.opts.Depth
	if backward {
		back = at + b.opts.Depth
	}
	if back >= 0 && back < len(freed) && freed[back] >= 0 && (backward || b.stages[back].lastUser < at) {
		b.emit(codegen.CommGather, codegen.Instr{Op: codegen.Wait, Event: freed[back], Stage: int32(i), Micro: int32(m)})
	}
	if b.pFreed[i] >= 0 {
		b.emit(codegen.CommGather, codegen.Instr{Op: codegen.Wait, Event: b.pFreed[i], Stage: int32(i), Micro: int32(m)})
	}
	b.emit(codegen.CommGather, codegen.Instr{Op: codegen.Alloc, Buf: st.pFull, Stage: int32(i), Micro: int32(m)})
	in, grp := st.pShard, group(f.P, one)
	if backward && st.pSec >= 0 {
		in, grp = st.pSec, group(f.Secondary, one)
	}
	b.collective(codegen.CommGather, codegen.AllGather, in, st.pFull, grp, i, m, "")
	ev := b.event()
	b.emit(codegen.CommGather, codegen.Instr{Op: codegen.Record, Event: ev, Stage: int32(i), Micro: int32(m)})
	return ev
}

// release frees stage i's gathered params after its compute (keeping the
// hpZ secondary shard after forward) and records the event that lets the
// gather stream reuse the memory.
func (b *builder) release(i int, st *stage, m int, freed []int32, forward bool) {
	if st.f.P.Size() <= 1 {
		return
	}
	if forward && st.pSec >= 0 {
		sec := b.view("P.full."+st.name+"[sec]", st.pFull, b.prog.Buffers[st.pSec].Elems, 0, group(st.f.Secondary, one))
		b.emit(codegen.Compute, codegen.Instr{Op: codegen.Kernel, Kern: ir.Cast, Args: []int32{sec}, Outs: []int32{st.pSec},
			Attrs: []ir.Attr{ir.IntAttr("dtype", int64(b.prog.Buffers[st.pSec].DType))}, Stage: int32(i), Micro: int32(m),
			Comment: "keep the secondary shard (hpZ)"})
	}
	b.emit(codegen.Compute, codegen.Instr{Op: codegen.Free, Buf: st.pFull, Stage: int32(i), Micro: int32(m)})
	freed[i] = b.event()
	b.pFreed[i] = freed[i]
	b.emit(codegen.Compute, codegen.Instr{Op: codegen.Record, Event: freed[i], Stage: int32(i), Micro: int32(m)})
}

// reduce issues the synchronisation of stage j's gradient of micro-batch
// m on the reduce stream and returns the event recorded when it is done.
func (b *builder) reduce(j int, st *stage, m int) int32 {
	f := st.f
	done := b.event()
	b.emit(codegen.Compute, codegen.Instr{Op: codegen.Record, Event: done, Stage: int32(j), Micro: int32(m)})
	b.emit(codegen.CommReduce, codegen.Instr{Op: codegen.Wait, Event: done, Stage: int32(j), Micro: int32(m)})
	if f.P.Size() > 1 {
		b.emit(codegen.CommReduce, codegen.Instr{Op: codegen.Alloc, Buf: st.gPC, Stage: int32(j), Micro: int32(m)})
		b.reduceScatter(st.gFull, st.gPC, group(f.P, one), j, m, "")
		b.emit(codegen.CommReduce, codegen.Instr{Op: codegen.Free, Buf: st.gFull, Stage: int32(j), Micro: int32(m)})
	}
	lastMB := m == b.M-1
	if !lastMB && f.G.Size() > f.P.Size() {
		// Select and drop: only this rank's g-slice is kept, so the
		// all-reduce is a reduce-scatter onto it.
		b.reduceScatter(st.gPC, st.gSel, group(f.G, f.P), j, m, "select and drop")
	}
	synced := b.event()
	b.emit(codegen.CommReduce, codegen.Instr{Op: codegen.Record, Event: synced, Stage: int32(j), Micro: int32(m)})
	return synced
}

// finish uses stage j's synchronised gradient on compute: accumulates it,
// or in the last micro-batch folds the accumulator in and starts the
// all-reduce over the data-parallel replicas, which the optimizer waits
// for.
func (b *builder) finish(j int, st *stage, m int, synced int32) {
	f := st.f
	lastMB := m == b.M-1
	b.emit(codegen.Compute, codegen.Instr{Op: codegen.Wait, Event: synced, Stage: int32(j), Micro: int32(m)})
	sel := st.gSel
	switch {
	case b.M == 1:
	case m == 0:
		b.emit(codegen.Compute, codegen.Instr{Op: codegen.Kernel, Kern: ir.Cast, Args: []int32{sel}, Outs: []int32{st.gAcc},
			Attrs: []ir.Attr{ir.IntAttr("dtype", int64(b.prog.Buffers[st.gAcc].DType))}, Stage: int32(j), Micro: int32(m), Comment: "start accumulating"})
	case !lastMB:
		b.emit(codegen.Compute, codegen.Instr{Op: codegen.Kernel, Kern: ir.Add, Args: []int32{st.gAcc, sel}, Outs: []int32{st.gAcc},
			Stage: int32(j), Micro: int32(m), Comment: "accumulate"})
	default:
		b.emit(codegen.Compute, codegen.Instr{Op: codegen.Kernel, Kern: ir.Add, Args: []int32{sel, st.gAcc}, Outs: []int32{sel},
			Stage: int32(j), Micro: int32(m), Comment: "fold in the accumulated micro-batches"})
	}
	if lastMB && b.dp.Size() > f.P.Size() && f.OS.Size() > f.P.Size() {
		// The optimizer reads only this rank's os-slice, so the replicas'
		// all-reduce becomes a reduce-scatter onto it over the os-group
		// and, across os-groups, an all-reduce of the slice.
		ready := b.event()
		b.emit(codegen.Compute, codegen.Instr{Op: codegen.Record, Event: ready, Stage: int32(j), Micro: int32(m)})
		b.emit(codegen.CommReduce, codegen.Instr{Op: codegen.Wait, Event: ready, Stage: int32(j), Micro: int32(m)})
		b.reduceScatter(st.gPC, st.osSel, group(f.OS, f.P), j, m, "data-parallel replicas: this rank's os-slice")
		if b.dp.Size() > f.OS.Size() {
			b.allReduce(st.osSel, group(b.dp, f.OS), j, m, "data-parallel replicas of the os-slice")
		}
		final := b.event()
		b.emit(codegen.CommReduce, codegen.Instr{Op: codegen.Record, Event: final, Stage: int32(j), Micro: int32(m)})
		b.final[j] = final
	} else if lastMB && b.dp.Size() > f.P.Size() {
		g := group(b.dp, f.P)
		size := b.prog.Buffers[st.gPC].Bytes()
		if len(b.bucket) > 0 && (g != b.bucketGroup || b.bucketBytes+size > b.opts.BucketBytes) {
			b.flush(m)
		}
		b.bucket = append(b.bucket, j)
		b.bucketGroup = g
		b.bucketBytes += size
		if b.bucketBytes >= b.opts.BucketBytes {
			b.flush(m)
		}
	}
	if !lastMB && f.P.Size() > 1 {
		b.emit(codegen.Compute, codegen.Instr{Op: codegen.Free, Buf: st.gPC, Stage: int32(j), Micro: int32(m)})
	}
	if !lastMB && f.P.Size() <= 1 {
		b.emit(codegen.Compute, codegen.Instr{Op: codegen.Free, Buf: st.gFull, Stage: int32(j), Micro: int32(m)})
	}
}

// flush all-reduces the pending bucket: one stage's gradient in place, or
// several copied into one buffer, reduced once, and copied back before the
// optimizer.
func (b *builder) flush(m int) {
	stages := b.bucket
	b.bucket, b.bucketBytes = nil, 0
	if len(stages) == 0 {
		return
	}
	first := stages[0]
	id := b.stages[first].gPC
	if len(stages) > 1 {
		var elems int64
		for _, j := range stages {
			elems += b.prog.Buffers[b.stages[j].gPC].Elems
		}
		names := b.stages[first].name + ".." + b.stages[stages[len(stages)-1]].name
		id = b.newBuf("G.bucket."+names, b.prog.Buffers[b.stages[first].gPC].DType, elems)
		b.emit(codegen.Compute, codegen.Instr{Op: codegen.Alloc, Buf: id, Stage: int32(first), Micro: int32(m)})
		var off int64
		for _, j := range stages {
			pc := b.prog.Buffers[b.stages[j].gPC]
			part := b.view(fmt.Sprintf("G.bucket.%s[%s]", names, b.stages[j].name), id, pc.Elems, off, codegen.Group{})
			off += pc.Elems
			b.emit(codegen.Compute, codegen.Instr{Op: codegen.Kernel, Kern: ir.Cast, Args: []int32{b.stages[j].gPC}, Outs: []int32{part},
				Attrs: []ir.Attr{ir.IntAttr("dtype", int64(pc.DType))}, Stage: int32(j), Micro: int32(m), Comment: "into the bucket"})
			b.copyBack[j] = part
		}
		// The optimizer runs stages in order, so the bucket's highest
		// stage copies back last.
		b.bucketLast[stages[0]] = id
	}
	ready := b.event()
	b.emit(codegen.Compute, codegen.Instr{Op: codegen.Record, Event: ready, Stage: int32(first), Micro: int32(m)})
	b.emit(codegen.CommReduce, codegen.Instr{Op: codegen.Wait, Event: ready, Stage: int32(first), Micro: int32(m)})
	b.allReduce(id, b.bucketGroup, first, m, "data-parallel replicas")
	final := b.event()
	b.emit(codegen.CommReduce, codegen.Instr{Op: codegen.Record, Event: final, Stage: int32(first), Micro: int32(m)})
	for _, j := range stages {
		b.final[j] = final
	}
}

// reduceScatter emits a reduce-scatter of buffer in onto out, this
// rank's part of it, over g on the reduce stream.
func (b *builder) reduceScatter(in, out int32, g codegen.Group, j, m int, why string) {
	b.collective(codegen.CommReduce, codegen.ReduceScatter, in, out, g, j, m, why)
}

// allReduce emits an in-place all-reduce of buffer id over g on the
// reduce stream.
func (b *builder) allReduce(id int32, g codegen.Group, j, m int, why string) {
	b.collective(codegen.CommReduce, codegen.AllReduce, id, id, g, j, m, why)
}

// collective emits collective c of in into out over g on stream s,
// lowered hierarchically where the cost model prefers that for a group
// spanning nodes (Group.Intra and Group.Inter: in group order a rank's
// inter-node group holds the intra-node group's Index-th block):
//
//   - all-gather: across nodes into this rank's block of out, then
//     inside the node (MiCS, ZeRO++);
//   - reduce-scatter: inside the node onto this rank's block of in, then
//     across nodes;
//   - all-reduce: reduce-scatter inside the node onto a 1/k share,
//     all-reduce of the share across nodes, all-gather inside the node.
func (b *builder) collective(s int, c codegen.Coll, in, out int32, g codegen.Group, j, m int, why string) {
	ib, ob := b.prog.Buffers[in], b.prog.Buffers[out]
	emit := func(c codegen.Coll, g codegen.Group, in, out int32, bytes int64, why string) {
		b.emit(s, codegen.Instr{Op: codegen.Collective, Coll: c, Group: g, In: in, Out: out,
			Bytes: bytes, DType: ib.DType, Stage: int32(j), Micro: int32(m), Comment: why})
	}
	full := ib // the buffer whose size the collective is named by
	if c == codegen.AllGather {
		full = ob
	}
	mesh := g.Outer.Div(g.Inner)
	k := int64(mesh.S0) // the group's ranks in a node
	parts := int64(mesh.Size())
	if c == codegen.AllReduce {
		parts = k
	}
	if b.opts.Topo == nil || mesh.S1 <= 1 || k <= 1 || full.Elems%parts != 0 ||
		!b.opts.Topo.Collective(c, float64(full.Bytes()), mesh).Hierarchical {
		emit(c, g, in, out, full.Bytes(), why)
		return
	}
	intra, inter := g.Intra(), g.Inter()
	if why != "" {
		why += ": "
	}
	switch c {
	case codegen.AllGather:
		block := b.view(ob.Name+"[node block]", out, ob.Elems/k, 0, intra)
		emit(c, inter, in, block, b.prog.Buffers[block].Bytes(), why+"across nodes")
		emit(c, intra, block, out, ob.Bytes(), why+"inside the node")
	case codegen.ReduceScatter:
		block := b.view(ib.Name+"[node block]", in, ib.Elems/k, 0, intra)
		emit(c, intra, in, block, ib.Bytes(), why+"inside the node")
		emit(c, inter, block, out, b.prog.Buffers[block].Bytes(), why+"across nodes")
	case codegen.AllReduce:
		share := b.view(ib.Name+"[node share]", in, ib.Elems/k, 0, intra)
		sb := b.prog.Buffers[share].Bytes()
		emit(codegen.ReduceScatter, intra, in, share, ib.Bytes(), why+"inside the node")
		emit(codegen.AllReduce, inter, share, share, sb, why+"across nodes")
		emit(codegen.AllGather, intra, share, out, ib.Bytes(), why+"inside the node")
	default:
		emit(c, g, in, out, full.Bytes(), why)
	}
}

// adamwAttrs takes each stage's AdamW attributes from the adamw ops the
// optimizer pass made for its params, the one definition of the step. One
// flat kernel runs them all, so they must agree, but for weight_decay:
// one value on the params the stage's layout decays, 0 on the others.
func (b *builder) adamwAttrs() error {
	steps := map[string]*ir.Op{}
	for _, ps := range b.s.States {
		steps[ps.Param.Name] = ps.Step
	}
	fail := func(format string, a ...any) error {
		return &passes.InternalError{Pass: "scheduler", Err: fmt.Errorf(format, a...)}
	}
	for _, st := range b.stages {
		var first string // the param whose attributes the stage takes
		wd, decayedBy := 0.0, ""
		for _, slot := range st.layout.Params {
			op := steps[slot.Name]
			if op == nil || op.Kind != ir.AdamWStep {
				return fail("param %s has no adamw op", slot.Name)
			}
			if first == "" {
				first, st.adamw = slot.Name, append([]ir.Attr(nil), op.Attrs...)
			} else if !sameBut(op.Attrs, st.adamw, "weight_decay") {
				return fail("params %s and %s of stage %s differ in their AdamW settings", first, slot.Name, st.name)
			}
			d, _ := op.Attr("weight_decay")
			switch {
			case !slot.Decay && d.Float != 0:
				return fail("param %s is not decayed in stage %s's layout, yet its adamw has weight_decay=%v", slot.Name, st.name, d)
			case slot.Decay && decayedBy == "":
				wd, decayedBy = d.Float, slot.Name
			case slot.Decay && d.Float != wd:
				return fail("params %s and %s of stage %s have weight_decay %v and %v", decayedBy, slot.Name, st.name, wd, d)
			}
		}
		for i := range st.adamw {
			if st.adamw[i].Name == "weight_decay" {
				st.adamw[i] = ir.FloatAttr("weight_decay", wd)
			}
		}
	}
	return nil
}

// sameBut compares two ops' attributes (both in normal form) but one.
func sameBut(a, b []ir.Attr, except string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || (a[i].Name != except && a[i].Val != b[i].Val) {
			return false
		}
	}
	return true
}

// optimizer runs AdamW on every stage's os-slice, with the attributes of
// the optimizer pass's adamw ops, and writes the updated slice of P; the
// spread at the next step's start completes P.
func (b *builder) optimizer() {
	for i, st := range b.stages {
		if len(st.layout.Params) == 0 {
			continue
		}
		if b.final[i] >= 0 {
			b.emit(codegen.Compute, codegen.Instr{Op: codegen.Wait, Event: b.final[i], Stage: int32(i), Micro: -1})
		}
		if part, ok := b.copyBack[i]; ok {
			b.emit(codegen.Compute, codegen.Instr{Op: codegen.Kernel, Kern: ir.Cast, Args: []int32{part}, Outs: []int32{st.gPC},
				Attrs: []ir.Attr{ir.IntAttr("dtype", int64(b.prog.Buffers[st.gPC].DType))}, Stage: int32(i), Micro: -1, Comment: "out of the bucket"})
		}
		if id, ok := b.bucketLast[i]; ok {
			b.emit(codegen.Compute, codegen.Instr{Op: codegen.Free, Buf: id, Stage: int32(i), Micro: -1})
		}
		w := st.master
		if w < 0 {
			w = st.pOS
		}
		// In place on the shard; the instruction's stage names the
		// layout that says which elements are decayed. No FLOPs: the
		// timeline prices compute-bound kernels, and AdamW is bound by
		// memory.
		b.emit(codegen.Compute, codegen.Instr{Op: codegen.Kernel, Kern: ir.AdamWStep,
			Args: []int32{w, st.m, st.v, st.osSel}, Outs: []int32{w, st.m, st.v}, Attrs: st.adamw,
			Stage: int32(i), Micro: -1, Comment: "weight decay only on params of 2+ dims (layout)"})
		if st.master >= 0 {
			b.emit(codegen.Compute, codegen.Instr{Op: codegen.Kernel, Kern: ir.Cast, Args: []int32{st.master}, Outs: []int32{st.pOS},
				Attrs: []ir.Attr{ir.IntAttr("dtype", int64(b.prog.Buffers[st.pOS].DType))}, Stage: int32(i), Micro: -1})
		}
		if st.f.P.Size() > 1 {
			b.emit(codegen.Compute, codegen.Instr{Op: codegen.Free, Buf: st.gPC, Stage: int32(i), Micro: -1})
		} else {
			b.emit(codegen.Compute, codegen.Instr{Op: codegen.Free, Buf: st.gFull, Stage: int32(i), Micro: -1})
		}
	}
}
