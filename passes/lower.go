package passes

import (
	"fmt"

	"amspc/ir"
)

// Distribution is what the distribution passes lower for: the plan's
// factors per layer group and the cluster.
type Distribution struct {
	Groups [ir.NumStageGroups]ir.Factors
	Topo   ir.Topology
	// Micro is the number of micro-batches per step.
	Micro int
	// Depth is how many stages' gathered params may be live at once (the
	// stage computing and Depth-1 prefetched); at least 1.
	Depth int
	// BucketBytes caps a bucket of fused gradient all-reduces; 0 turns
	// bucketing off.
	BucketBytes int64
	// Hierarchical reports whether collective c of bytes over a group of
	// mesh ranks (S0 in a node, S1 nodes) is faster lowered in intra- and
	// inter-node phases (the cost model's choice); nil means never.
	Hierarchical func(c ir.Coll, bytes float64, mesh ir.Factor) bool
}

// dist is what the distribution passes share: each stage's buffers.
type dist struct {
	d *Distribution
	// tp is the tensor-parallel degree: the group of tp consecutive
	// ranks of a node that hold the parts of one replica (1: none); dp
	// is the mesh of the data-parallel ranks of one tensor-parallel
	// position (GPUs per node / tp x nodes), which the plan's factors
	// shard (ds.group).
	tp     int
	dp     ir.Factor
	stages []*distStage
	views  map[viewKey]int32
	// spare is a sequence a pass replaced, for the next pass that
	// rebuilds the sequence to write into (newSeq, setSeq).
	spare []ir.SeqOp
}

// newSeq returns an empty sequence with room for n instructions, for a
// pass that rebuilds the sequence and then hands it to setSeq. A pass's
// input dies as the next pass replaces it, so the passes take turns with
// two buffers instead of each copying the sequence into fresh memory (at
// LLaMA-2-70B's 140k instructions, 12 MB a pass). A new buffer has a
// quarter to spare, as the passes grow the sequence. A nil ds (a pass
// run alone, in tests) keeps no buffer.
func (ds *dist) newSeq(n int) []ir.SeqOp {
	if ds != nil && cap(ds.spare) >= n {
		out := ds.spare[:0]
		ds.spare = nil
		return out
	}
	return make([]ir.SeqOp, 0, n+n/4)
}

// setSeq makes seq, from newSeq, the program's sequence and keeps the
// sequence it replaces for the next newSeq.
func (ds *dist) setSeq(p *ir.Program, seq []ir.SeqOp) {
	if ds != nil {
		ds.spare = p.Seq[:0]
	}
	p.Seq = seq
}

// distStage is one stage's flat buffers (ids into the program).
type distStage struct {
	name     string
	f        ir.Factors
	params   int // params in the stage's layout
	lastUser int
	borrowed []int
	// P shard, gathered P, hpZ secondary shard, gradient accumulator,
	// full gradient, p-chunk of the gradient; views: my g-slice and
	// os-slice of the p-chunk, my os-slice of P; optimizer states.
	pShard, pFull, pSec, gAcc, gFull, gPC int32
	gSel, osSel, pOS                      int32
	master, m, v                          int32
	adamw                                 []ir.Attr
}

type viewKey struct {
	name          string
	parent        int32
	elems, offset int64
	part          ir.Group
}

var one = ir.Factor{S0: 1, S1: 1}

func group(outer, inner ir.Factor) ir.Group { return ir.Group{Outer: outer, Inner: inner} }

// group is the group of a plan's factors, outer and inner blocks of the
// data-parallel mesh: the ranks of the block at this rank's
// tensor-parallel position (the tensor-parallel group is innermost in a
// node, so a block of the data-parallel mesh is tp times as wide in the
// node's ranks, and its replicas are tp apart).
func (ds *dist) group(outer, inner ir.Factor) ir.Group {
	return ir.Group{Outer: ir.Factor{S0: outer.S0 * ds.tp, S1: outer.S1}, Inner: ir.Factor{S0: inner.S0 * ds.tp, S1: inner.S1}}
}

// tpGroup is the tensor-parallel group: tp consecutive ranks of a node.
func (ds *dist) tpGroup() ir.Group { return group(ir.Factor{S0: ds.tp, S1: 1}, one) }

// view declares a view of parent once (the same view asked for again,
// a hierarchical collective's node block every micro-batch, is reused).
func (ds *dist) view(p *ir.Program, name string, parent int32, elems, offset int64, part ir.Group) int32 {
	if part.Outer.Size() == 0 {
		part = group(one, one)
	}
	key := viewKey{name, parent, elems, offset, part}
	if id, ok := ds.views[key]; ok {
		return id
	}
	id := p.AddBuffer(ir.Buffer{Name: name, DType: p.Buffers[parent].DType, Elems: elems, Parent: parent, Offset: offset, Part: part})
	ds.views[key] = id
	return id
}

func newBuf(p *ir.Program, name string, dt ir.DType, elems int64) int32 {
	return p.AddBuffer(ir.Buffer{Name: name, DType: dt, Elems: elems, Parent: -1})
}

func lcm(a, c int64) int64 {
	x, y := a, c
	for y != 0 {
		x, y = y, x%y
	}
	return a / x * c
}

// lower is micro-batching and sharding (under tensor parallelism, of
// each rank's parts: the graph is the rank's, and the plan's factors
// shard over the ranks of one tensor-parallel position): every stage's params, gradients
// and optimizer states become flat buffers, padded so that every shard
// and every data-parallel replica gets an equal part (FSDP's flat
// parameter), with views naming this rank's shards; then the sequence of
// M micro-batches of forward and backward kernels, each stage's gradient
// accumulation on its g-slice, and AdamW on each stage's os-slice. The
// buffers the collectives fill (the gathered P, the reduced gradient)
// are read here before anything writes them: the collectives pass adds
// their writers.
func lower(s *State) error {
	d := s.Dist
	if d.Depth < 1 {
		d.Depth = 2
	}
	if s.Partition == nil {
		return fmt.Errorf("no stage partition: the partition pass must run first")
	}
	g := s.Graph
	// A buffer per value, about twenty per stage and the views the later
	// passes add: room enough that the list is rarely copied.
	p := &ir.Program{Buffers: make([]ir.Buffer, 0, len(g.Values)+32*len(s.Partition.Stages))}
	tp := 1
	if s.Specs != nil {
		tp = s.Job.Shard.Tensor
	}
	if d.Topo.GPUsPerNode%tp != 0 {
		return fmt.Errorf("tensor parallelism of %d on nodes of %d GPUs", tp, d.Topo.GPUsPerNode)
	}
	ds := &dist{d: d, tp: tp, dp: ir.Factor{S0: d.Topo.GPUsPerNode, S1: d.Topo.Nodes}.DataMesh(tp), views: map[viewKey]int32{}}
	s.Prog, s.dist = p, ds
	stageOf := map[*ir.Value]int{}
	var layouts []ir.Layout
	for i, ps := range s.Partition.Stages {
		st := &distStage{name: ps.Name, f: d.Groups[ps.Group], params: len(ps.Params), lastUser: ps.LastUser, borrowed: ps.Borrowed}
		for _, v := range ps.Fwd {
			stageOf[v] = i
		}
		for _, v := range ps.Bwd {
			stageOf[v] = i
		}
		l := ir.Layout{Stage: ps.Name}
		var off int64
		for _, a := range ps.Params {
			n := a.Shape.NumElements()
			slot := ir.Slot{Name: a.Name, Offset: off, Elems: n, Decay: len(a.Shape) >= 2, Init: a.Init, Split: -1, Shape: append([]int64(nil), a.Shape...)}
			if sp, ok := s.Specs[a]; ok && sp.Split >= 0 {
				slot.Split = sp.Split
				slot.Shape[sp.Split] *= int64(tp) // the whole param's
			}
			l.Params = append(l.Params, slot)
			off += n
		}
		// Padded to split evenly into the shards of every component and
		// into the data-parallel replicas, so every collective on a
		// shard can be lowered hierarchically.
		f := st.f
		pad := lcm(lcm(int64(f.P.Size()), int64(f.G.Size())), lcm(int64(f.OS.Size()), int64(ds.dp.Size())))
		if f.Secondary.Size() > 1 {
			pad = lcm(pad, int64(f.Secondary.Size()))
		}
		l.Padded = (off + pad - 1) / pad * pad
		layouts = append(layouts, l)
		ds.stages = append(ds.stages, st)
	}
	gradOf := map[*ir.Value]*ir.Value{} // param -> gradient
	paramOf := map[*ir.Value]*ir.Value{}
	for _, gp := range s.Grads {
		gradOf[gp.Param], paramOf[gp.Grad] = gp.Grad, gp.Param
	}
	for i, l := range layouts {
		for _, slot := range l.Params {
			if gv := gradOf[g.Lookup(slot.Name)]; gv != nil && stageOf[gv] != i {
				return &UserError{Pos: gv.Pos, Msg: fmt.Sprintf("the gradient of %s is formed outside its stage %s (a param whose first use does not reach the loss is not supported yet)", slot.Name, l.Stage)}
			}
		}
	}
	// The stages' flat buffers.
	prec := s.Job.Train.Precision
	pdt := prec.DType()
	buf := map[*ir.Value]int32{}
	slotOf := map[string]struct {
		stage int
		slot  ir.Slot
	}{}
	for i, st := range ds.stages {
		l := &layouts[i]
		f, n := st.f, l.Padded
		sp, sg, sos := int64(f.P.Size()), int64(f.G.Size()), int64(f.OS.Size())
		st.pShard = newBuf(p, "P."+st.name, pdt, n/sp)
		st.pFull = st.pShard
		if sp > 1 {
			st.pFull = newBuf(p, "P.full."+st.name, pdt, n)
		}
		st.pSec = -1
		if k := int64(f.Secondary.Size()); k > 1 {
			st.pSec = newBuf(p, "P.sec."+st.name, pdt, n/k)
		}
		st.gAcc = -1
		if d.Micro > 1 {
			st.gAcc = newBuf(p, "G."+st.name, pdt, n/sg)
		}
		st.gFull = newBuf(p, "G.full."+st.name, pdt, n)
		st.gPC = st.gFull
		if sp > 1 {
			st.gPC = newBuf(p, "G.pchunk."+st.name, pdt, n/sp)
		}
		st.gSel = ds.view(p, "G.pchunk."+st.name+"[g]", st.gPC, n/sg, 0, ds.group(f.G, f.P))
		st.osSel = ds.view(p, "G.pchunk."+st.name+"[os]", st.gPC, n/sos, 0, ds.group(f.OS, f.P))
		st.pOS = ds.view(p, "P."+st.name+"[os]", st.pShard, n/sos, 0, ds.group(f.OS, f.P))
		st.master = -1
		if prec != ir.FP32 {
			st.master = newBuf(p, "OS.master."+st.name, ir.F32, n/sos)
		}
		st.m = newBuf(p, "OS.m."+st.name, ir.F32, n/sos)
		st.v = newBuf(p, "OS.v."+st.name, ir.F32, n/sos)
		for _, slot := range l.Params {
			buf[g.Lookup(slot.Name)] = ds.view(p, slot.Name, st.pFull, slot.Elems, slot.Offset, ir.Group{})
			slotOf[slot.Name] = struct {
				stage int
				slot  ir.Slot
			}{i, slot}
		}
		l.PShard, l.OSShard = ds.group(f.P, one), ds.group(f.OS, f.P)
		l.P, l.Master, l.M, l.V = st.pShard, st.master, st.m, st.v
	}
	p.Layouts = layouts
	// One buffer per activation; a param's gradient is a view of its
	// stage's flat gradient.
	for _, ps := range s.Partition.Stages {
		for _, v := range append(append([]*ir.Value{}, ps.Fwd...), ps.Bwd...) {
			if pv, ok := paramOf[v]; ok {
				so := slotOf[pv.Name]
				buf[v] = ds.view(p, v.Name, ds.stages[so.stage].gFull, so.slot.Elems, so.slot.Offset, ir.Group{})
				continue
			}
			buf[v] = newBuf(p, v.Name, v.DType, v.Shape.NumElements())
		}
	}
	// An input read as the loss's targets is the shifted window.
	targets := map[*ir.Value]bool{}
	for _, v := range g.Values {
		if op := v.Def; op != nil && op.Results[0] == v && op.Kind.Info().IsLoss() {
			targets[op.Args[op.Kind.Info().IDs.Arg]] = true
		}
	}
	inputs := g.ByRole(ir.Input)
	for _, v := range inputs {
		buf[v] = newBuf(p, v.Name, v.DType, v.Shape.NumElements())
		shift := int32(0)
		if targets[v] {
			shift = 1
		}
		p.Inputs = append(p.Inputs, ir.DataInput{Buf: buf[v], Shift: shift})
	}
	for v, id := range buf {
		p.Buffers[id].Shape = append([]int64(nil), v.Shape...)
	}
	if err := ds.adamwAttrs(s, layouts); err != nil {
		return err
	}

	// The sequence: M micro-batches, then the optimizer. Each stage's
	// kernels are made once and repeated every micro-batch.
	fwd := make([][]ir.Instr, len(ds.stages))
	bwd := make([][]ir.Instr, len(ds.stages))
	perMicro := len(inputs) + 2*len(ds.stages)
	for i, ps := range s.Partition.Stages {
		var err error
		if fwd[i], err = ds.kernels(p, ps.Fwd, buf, i); err != nil {
			return err
		}
		if bwd[i], err = ds.kernels(p, ps.Bwd, buf, i); err != nil {
			return err
		}
		perMicro += len(fwd[i]) + len(bwd[i])
	}
	M := d.Micro
	p.Seq = ds.newSeq(M*perMicro + 2*len(ds.stages))
	emit := func(ph ir.Phase, in ir.Instr) {
		p.Seq = append(p.Seq, ir.SeqOp{Instr: in, Phase: ph})
	}
	emitKernels := func(ks []ir.Instr, m int, ph ir.Phase) {
		for _, in := range ks {
			in.Micro = int32(m)
			emit(ph, in)
		}
	}
	for m := 0; m < M; m++ {
		for _, v := range inputs {
			emit(ir.Forward, ir.Instr{Op: ir.Load, Buf: buf[v], Stage: -1, Micro: int32(m)})
		}
		for i := range s.Partition.Stages {
			emitKernels(fwd[i], m, ir.Forward)
		}
		for j := len(ds.stages) - 1; j >= 0; j-- {
			emitKernels(bwd[j], m, ir.Backward)
			st := ds.stages[j]
			if st.params == 0 || M == 1 {
				continue
			}
			// Accumulate this rank's g-slice of the reduced gradient.
			var in ir.Instr
			switch {
			case m == 0:
				in = castInstr(p, st.gSel, st.gAcc)
				in.Comment = "start accumulating"
			case m < M-1:
				in = ir.Instr{Op: ir.Kernel, Kern: ir.Add, Args: []int32{st.gAcc, st.gSel}, Outs: []int32{st.gAcc}, Comment: "accumulate"}
			default:
				in = ir.Instr{Op: ir.Kernel, Kern: ir.Add, Args: []int32{st.gSel, st.gAcc}, Outs: []int32{st.gSel}, Comment: "fold in the accumulated micro-batches"}
			}
			in.Stage, in.Micro = int32(j), int32(m)
			emit(ir.Finish, in)
		}
	}
	sums, err := ds.clipNorm(p, emit, s.Job.Train.ClipGradNorm, s.Job.Train.ClipGradNormPos)
	if err != nil {
		return err
	}
	lastClip := -1
	for i, st := range ds.stages {
		if st.params > 0 {
			lastClip = i
		}
	}
	for i, st := range ds.stages {
		if st.params == 0 {
			continue
		}
		if sums >= 0 {
			clip := ir.Instr{Op: ir.Kernel, Kern: ir.ClipGrad, Args: []int32{st.osSel, sums}, Outs: []int32{st.osSel},
				Attrs: []ir.Attr{ir.FloatAttr("max_norm", s.Job.Train.ClipGradNorm)}, Stage: int32(i), Micro: -1,
				Comment: "clip to the global norm"}
			emit(ir.Optimize, clip)
			if i == lastClip {
				emit(ir.Optimize, ir.Instr{Op: ir.Free, Buf: sums, Stage: int32(i), Micro: -1})
			}
		}
		w := st.master
		if w < 0 {
			w = st.pOS
		}
		// In place on the shard; the instruction's stage names the layout
		// that says which elements are decayed. No FLOPs: the timeline
		// prices compute-bound kernels, and AdamW is bound by memory.
		step := ir.Instr{Op: ir.Kernel, Kern: ir.AdamWStep,
			Args: []int32{w, st.m, st.v, st.osSel}, Outs: []int32{w, st.m, st.v}, Attrs: st.adamw,
			Stage: int32(i), Micro: -1, Comment: "weight decay only on params of 2+ dims (layout)"}
		if st.master >= 0 && s.Fused {
			// ir.LoweredFusions' adamw-copy: the step writes P's shard too.
			step.Kern, step.Outs = ir.AdamWCopy, append(step.Outs, st.pOS)
			step.Attrs = append(append([]ir.Attr(nil), st.adamw...), ir.IntAttr("dtype", int64(p.Buffers[st.pOS].DType)))
		}
		emit(ir.Optimize, step)
		if st.master >= 0 && !s.Fused {
			in := castInstr(p, st.master, st.pOS)
			in.Stage, in.Micro = int32(i), -1
			emit(ir.Optimize, in)
		}
	}
	return nil
}

// clipNorm emits, before the optimizer, the gradient's global norm for
// clipping at maxNorm (0: none, and it returns -1): each stage's sum of
// squares over this rank's os-slice of its reduced gradient, summed over
// the ranks of the rank's os block, which hold every slice once (their
// replicas in other blocks hold the same values), into that stage's
// element of the buffer it returns; every rank then holds every stage's
// sum, and clip_grad adds them in stage order, the same on every rank.
func (ds *dist) clipNorm(p *ir.Program, emit func(ir.Phase, ir.Instr), maxNorm float64, at ir.Pos) (int32, error) {
	if maxNorm == 0 {
		return -1, nil
	}
	if ds.tp > 1 {
		return -1, &UserError{Pos: at, Msg: "clip_grad_norm with tensor parallelism is not supported yet (the norm of parts and of replicated params over the tensor-parallel group)"}
	}
	n := 0
	for _, st := range ds.stages {
		if st.params > 0 {
			n++
		}
	}
	sums := newBuf(p, "clip.sumsq", ir.F32, int64(n))
	p.Buffers[sums].Shape = []int64{int64(n)}
	// Allocated here, not by liveness, which takes a write for a
	// definition of the whole buffer: each stage's sum is a part of it.
	emit(ir.Optimize, ir.Instr{Op: ir.Alloc, Buf: sums, Stage: -1, Micro: -1})
	k := 0
	for _, st := range ds.stages {
		if st.params == 0 {
			continue
		}
		mine := ds.view(p, fmt.Sprintf("clip.sumsq[%s]", st.name), sums, 1, int64(k), ir.Group{})
		k++
		emit(ir.Optimize, ir.Instr{Op: ir.Kernel, Kern: ir.GradSumSq, Args: []int32{st.osSel}, Outs: []int32{mine},
			Stage: -1, Micro: -1, Comment: "this rank's share of the gradient's squared norm (" + st.name + ")"})
		if g := ds.group(st.f.OS, one); g.Size() > 1 {
			in := collInstr(p, ir.AllReduce, mine, mine, g, "the stage's squared norm: every os-slice once")
			in.Stage, in.Micro = -1, -1
			emit(ir.Optimize, in)
		}
	}
	return sums, nil
}

// kernels lists the kernels of stage computing values vs, in order, each
// op once (an op with several results is one kernel), for micro-batch 0;
// the tensor pass's ops become collectives over the tensor-parallel
// group on the compute stream (tpInstr). The micro-batches' copies share
// their Args and Outs: the passes after copy before changing them.
func (ds *dist) kernels(p *ir.Program, vs []*ir.Value, buf map[*ir.Value]int32, stage int) ([]ir.Instr, error) {
	out := make([]ir.Instr, 0, len(vs))
	seen := make(map[*ir.Op]bool, len(vs))
	for _, v := range vs {
		op := v.Def
		if seen[op] {
			continue
		}
		seen[op] = true
		switch op.Kind {
		case ir.TPAllReduce, ir.TPAllGather, ir.TPReduceScatter, ir.TPSlice:
			ins, err := ds.tpInstrs(p, op, buf)
			if err != nil {
				return nil, err
			}
			for _, in := range ins {
				in.Stage = int32(stage)
				out = append(out, in)
			}
			continue
		}
		in := ir.Instr{Op: ir.Kernel, Kern: op.Kind, Attrs: op.Attrs, Stage: int32(stage), Pos: op.Pos, Flops: op.Kind.Info().Flops(op)}
		for _, a := range op.Args {
			in.Args = append(in.Args, buf[a])
		}
		for _, r := range op.Results {
			in.Outs = append(in.Outs, buf[r])
		}
		out = append(out, in)
	}
	return out, nil
}

// tpInstrs is a tensor-parallel op as the rank runs it: a collective
// over the tensor-parallel group (an all-reduce, an all-gather, a
// reduce-scatter), or for a slice the copy of the rank's part, a view.
// Along the first dimension a rank's part is a contiguous run; along
// another (sequence parallelism's sequence) the parts are laid out one
// after another first (to_parts) or after (from_parts), in a buffer of
// their own.
func (ds *dist) tpInstrs(p *ir.Program, op *ir.Op, buf map[*ir.Value]int32) ([]ir.Instr, error) {
	from, to := buf[op.Args[0]], buf[op.Out()]
	d, _ := op.Attr("dim")
	tp := ds.tpGroup()
	// layout is the layout change between x and its parts: a buffer of
	// the parts (of shape [tp, x's with d cut]) and the kernel.
	layout := func(x int32, k ir.OpKind) (int32, ir.Instr) {
		xb := p.Buffers[x]
		shape := append([]int64(nil), xb.Shape...)
		shape[d.Int] /= int64(ds.tp)
		id := newBuf(p, xb.Name+"[parts]", xb.DType, xb.Elems)
		p.Buffers[id].Shape = append([]int64{int64(ds.tp)}, shape...)
		attrs := []ir.Attr{ir.IntAttr("dim", d.Int), ir.IntAttr("parts", int64(ds.tp))}
		in := ir.Instr{Op: ir.Kernel, Kern: k, Attrs: attrs, Pos: op.Pos, Comment: "sequence parallelism's parts"}
		if k == ir.ToParts {
			in.Args, in.Outs = []int32{x}, []int32{id}
		} else {
			in.Args, in.Outs = []int32{id}, []int32{x}
		}
		return id, in
	}
	var out []ir.Instr
	switch {
	case op.Kind == ir.TPAllReduce:
		out = []ir.Instr{collInstr(p, ir.AllReduce, from, to, tp, "tensor-parallel partial sums")}
	case op.Kind == ir.TPAllGather && d.Int == 0:
		out = []ir.Instr{collInstr(p, ir.AllGather, from, to, tp, "tensor-parallel parts")}
	case op.Kind == ir.TPAllGather:
		parts, back := layout(to, ir.FromParts)
		out = []ir.Instr{collInstr(p, ir.AllGather, from, parts, tp, "tensor-parallel parts"), back}
	case op.Kind == ir.TPReduceScatter && d.Int == 0:
		out = []ir.Instr{collInstr(p, ir.ReduceScatter, from, to, tp, "tensor-parallel partial sums, to parts")}
	case op.Kind == ir.TPReduceScatter:
		parts, lay := layout(from, ir.ToParts)
		out = []ir.Instr{lay, collInstr(p, ir.ReduceScatter, parts, to, tp, "tensor-parallel partial sums, to parts")}
	case op.Kind == ir.TPSlice:
		whole := from
		if d.Int != 0 {
			var lay ir.Instr
			whole, lay = layout(from, ir.ToParts)
			out = append(out, lay)
		}
		part := ds.view(p, p.Buffers[whole].Name+"[tp]", whole, p.Buffers[to].Elems, 0, tp)
		in := castInstr(p, part, to)
		in.Comment = "this rank's tensor-parallel part"
		out = append(out, in)
	}
	for i := range out {
		out[i].Pos = op.Pos
	}
	return out, nil
}

// adamwAttrs takes each stage's AdamW attributes from the adamw ops the
// optimizer pass made for its params, the one definition of the step. One
// flat kernel runs them all, so they must agree, but for weight_decay:
// one value on the params the stage's layout decays, 0 on the others.
func (ds *dist) adamwAttrs(s *State, layouts []ir.Layout) error {
	steps := map[string]*ir.Op{}
	for _, ps := range s.States {
		steps[ps.Param.Name] = ps.Step
	}
	for i, st := range ds.stages {
		l := layouts[i]
		var first string // the param whose attributes the stage takes
		wd, decayedBy := 0.0, ""
		for _, slot := range l.Params {
			op := steps[slot.Name]
			if op == nil || op.Kind != ir.AdamWStep { // the optimizer pass's, before any fusion
				return fmt.Errorf("param %s has no adamw op", slot.Name)
			}
			if first == "" {
				first, st.adamw = slot.Name, append([]ir.Attr(nil), op.Attrs...)
			} else if !sameBut(op.Attrs, st.adamw, "weight_decay") {
				return fmt.Errorf("params %s and %s of stage %s differ in their AdamW settings", first, slot.Name, st.name)
			}
			dv, _ := op.Attr("weight_decay")
			switch {
			case !slot.Decay && dv.Float != 0:
				return fmt.Errorf("param %s is not decayed in stage %s's layout, yet its adamw has weight_decay=%v", slot.Name, st.name, dv)
			case slot.Decay && decayedBy == "":
				wd, decayedBy = dv.Float, slot.Name
			case slot.Decay && dv.Float != wd:
				return fmt.Errorf("params %s and %s of stage %s have weight_decay %v and %v", decayedBy, slot.Name, st.name, wd, dv)
			}
		}
		for k := range st.adamw {
			if st.adamw[k].Name == "weight_decay" {
				st.adamw[k] = ir.FloatAttr("weight_decay", wd)
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
