package passes

import (
	"math"
	"slices"

	"amspc/ir"
)

// reduceScatter is XLA's reduce-scatter creator: an all-reduce over group
// (O, I) whose result is read, until the buffer is freed or allocated
// again, only through one view V, this rank's part over (O', I) with O'
// a sub-mesh of O, becomes a reduce-scatter onto V over (O', I), followed
// when O' is smaller than O by an all-reduce of V across the (O, O')
// groups. It moves the bytes of the all-reduce's first half and no more:
// select and drop, and ZeRO-1/2's data-parallel reduction, move DDP's
// bytes.
func reduceScatter(s *State) error {
	p, ds := s.Prog, s.dist
	out := ds.newSeq(len(p.Seq) + collectiveCount(p.Seq))
	for i, op := range p.Seq {
		if op.Op != ir.Collective || op.Coll != ir.AllReduce || op.In != op.Out {
			out = append(out, op)
			continue
		}
		v, ok := onlyReadThrough(p, i, op.Out)
		if !ok {
			out = append(out, op)
			continue
		}
		rsg, arg, across := ir.SplitAllReduce(op.Group.Outer, op.Group.Inner, p.Buffers[v].Part.Outer)
		rs := op
		rs.Instr = collInstr(p, ir.ReduceScatter, op.In, v, rsg, op.Comment)
		rs.Stage, rs.Micro = op.Stage, op.Micro
		out = append(out, rs)
		if across {
			ar := op
			ar.Instr = collInstr(p, ir.AllReduce, v, v, arg, op.Comment)
			ar.Stage, ar.Micro = op.Stage, op.Micro
			out = append(out, ar)
		}
	}
	ds.setSeq(p, out)
	return nil
}

// onlyReadThrough reports the view through which every reader after
// instruction i reads buffer x (until x is freed or allocated again),
// when there is one and it is a part of x fitting the all-reduce's group.
func onlyReadThrough(p *ir.Program, i int, x int32) (int32, bool) {
	g := p.Seq[i].Group
	view := int32(-1)
	for _, op := range p.Seq[i+1:] {
		if (op.Op == ir.Alloc || op.Op == ir.Free) && op.Buf == x {
			break
		}
		for _, r := range op.Reads() {
			if r == x {
				return -1, false
			}
			if p.Buffers[r].Parent != x {
				continue
			}
			if view >= 0 && r != view {
				return -1, false
			}
			view = r
		}
	}
	if view < 0 {
		return -1, false
	}
	b := p.Buffers[view]
	sub := b.Part.Outer
	if b.Offset != 0 || b.Part.Inner != g.Inner || b.Part.Size() <= 1 ||
		g.Outer.S0%sub.S0 != 0 || g.Outer.S1%sub.S1 != 0 || sub.S0%g.Inner.S0 != 0 || sub.S1%g.Inner.S1 != 0 ||
		b.Elems*int64(b.Part.Size()) != p.Buffers[x].Elems {
		return -1, false
	}
	return view, true
}

// redundantGathers drops all-gathers whose result the rank already holds:
//
//   - a gathered buffer freed and gathered again, with no other gather
//     allocated in between and its shard unchanged, stays gathered (the
//     last stage's params, needed again at once by backward);
//   - an all-gather whose result is read only through this rank's own
//     part of it: the readers read the gather's input instead.
//
// Kernels left writing only buffers nothing reads (the hpZ secondary
// shard of a stage that stays gathered) go too.
func redundantGathers(s *State) error {
	p := s.Prog
	for keepGathered(s) {
	}
	ownPartGathers(p)
	deadKernels(p)
	unusedAllocs(p)
	return nil
}

// unusedAllocs drops the allocs and frees of buffers nothing else uses.
func unusedAllocs(p *ir.Program) {
	used := map[int32]bool{}
	for i := range p.Seq {
		op := &p.Seq[i].Instr
		if op.Op == ir.Alloc || op.Op == ir.Free {
			continue
		}
		for _, b := range append(op.Reads(), op.Writes()...) {
			used[p.Root(b)] = true
		}
	}
	out := p.Seq[:0]
	for _, op := range p.Seq {
		if (op.Op == ir.Alloc || op.Op == ir.Free) && !used[op.Buf] {
			continue
		}
		out = append(out, op)
	}
	p.Seq = out
}

// keepGathered removes one free/re-gather pair and reports whether it
// found one.
func keepGathered(s *State) bool {
	p := s.Prog
	shardOf := map[int32]int32{} // gathered buffer -> the P shard it gathers
	for _, st := range s.dist.stages {
		shardOf[st.pFull] = st.pShard
	}
	for a, op := range p.Seq {
		shard, ok := shardOf[op.Buf]
		if op.Op != ir.Free || !ok {
			continue
		}
		x := op.Buf
		for b := a + 1; b < len(p.Seq); b++ {
			ob := p.Seq[b]
			if ob.Op == ir.Alloc && ob.Stream == ir.CommGather && ob.Buf != x {
				break // another gather allocated in between
			}
			if writes(p, &ob.Instr, shard) {
				break
			}
			if ob.Op != ir.Alloc || ob.Buf != x {
				if touches(p, &ob.Instr, x) {
					break
				}
				continue
			}
			c := b + 1
			if c < len(p.Seq) && p.Seq[c].Op == ir.Collective && p.Seq[c].Coll == ir.AllGather && p.Seq[c].Out == x {
				p.Seq = slices.Delete(p.Seq, b, c+1) // the alloc and the gather
				p.Seq = slices.Delete(p.Seq, a, a+1) // the free
				return true
			}
			break
		}
	}
	return false
}

// ownPartGathers redirects readers of an all-gather read only through
// this rank's own part to the gather's input, and drops the gather.
func ownPartGathers(p *ir.Program) {
	for i := 0; i < len(p.Seq); i++ {
		op := p.Seq[i]
		if op.Op != ir.Collective || op.Coll != ir.AllGather {
			continue
		}
		x := op.Out
		var readers []int
		own := true
		for j := i + 1; j < len(p.Seq) && own; j++ {
			o := &p.Seq[j]
			if (o.Op == ir.Free || o.Op == ir.Alloc) && o.Buf == x {
				break
			}
			for _, r := range o.Reads() {
				b := p.Buffers[r]
				switch {
				case r == x:
					own = false
				case b.Parent == x && (b.Part != op.Group || b.Offset != 0 || b.Elems != p.Buffers[op.In].Elems):
					own = false
				case b.Parent == x:
					readers = append(readers, j)
				}
			}
		}
		if !own || len(readers) == 0 {
			continue
		}
		for _, j := range readers {
			o := &p.Seq[j]
			args := append([]int32(nil), o.Args...)
			for k, r := range args {
				if p.Buffers[r].Parent == x {
					args[k] = op.In
				}
			}
			o.Args = args
			if o.Op == ir.Collective && p.Buffers[o.In].Parent == x {
				o.In = op.In
			}
		}
		p.Seq = append(p.Seq[:i], p.Seq[i+1:]...)
		i--
	}
}

// deadKernels removes kernels all of whose outputs are transient buffers
// written again, freed or left before anything reads them (through any
// buffer sharing their root). One sweep from the end decides it: a
// kernel found dead is dropped before the kernels before it are looked
// at, so their outputs that only it read are dead too, and removing a
// dead kernel's writes never makes an earlier output read (what follows
// them is not read before the next overwrite).
func deadKernels(p *ir.Program) {
	persistent := p.Persistent()
	const never = math.MaxInt
	// The next instruction, after the one being looked at, that reads a
	// root; that allocates or frees it; that writes a buffer without
	// reading its root.
	nextRead := make([]int, len(p.Buffers))
	nextAllocFree := make([]int, len(p.Buffers))
	nextWrite := make([]int, len(p.Buffers))
	for i := range nextRead {
		nextRead[i], nextAllocFree[i], nextWrite[i] = never, never, never
	}
	keep := make([]bool, len(p.Seq))
	var roots []int32
	for i := len(p.Seq) - 1; i >= 0; i-- {
		op := &p.Seq[i]
		if op.Op == ir.Kernel && !op.Kern.Info().IsLoss() {
			live := false
			for _, o := range op.Outs {
				r := p.Root(o)
				if persistent[r] || (nextRead[r] < nextAllocFree[r] && nextRead[r] < nextWrite[o]) {
					live = true
				}
			}
			if !live {
				continue
			}
		}
		keep[i] = true
		roots = roots[:0]
		for _, r := range op.Reads() {
			roots = append(roots, p.Root(r))
		}
		for _, r := range roots {
			nextRead[r] = i
		}
		if (op.Op == ir.Alloc || op.Op == ir.Free) && !slices.Contains(roots, op.Buf) {
			nextAllocFree[op.Buf] = i
		}
		for _, w := range op.Writes() {
			if !slices.Contains(roots, p.Root(w)) {
				nextWrite[w] = i
			}
		}
	}
	out := p.Seq[:0]
	for i, op := range p.Seq {
		if keep[i] {
			out = append(out, op)
		}
	}
	p.Seq = out
}

// writes reports whether instruction in writes buffer x or a view of it.
func writes(p *ir.Program, in *ir.Instr, x int32) bool {
	for _, w := range in.Writes() {
		if p.Root(w) == p.Root(x) {
			return true
		}
	}
	return false
}

// touches reports whether instruction in reads or writes buffer x's root.
func touches(p *ir.Program, in *ir.Instr, x int32) bool {
	for _, r := range in.Reads() {
		if p.Root(r) == p.Root(x) {
			return true
		}
	}
	return writes(p, in, x)
}
