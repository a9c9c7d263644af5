package passes

import (
	"fmt"
	"slices"

	"amspc/ir"
)

// schedule turns the sequence into the three streams every rank runs:
//
//   - deferral: each stage's use of its reduced gradient (its Finish
//     run) moves after the next stage's reduction is issued, so the
//     reduction overlaps that stage's backward instead of stalling
//     compute;
//   - liveness: activations and inputs are allocated before their writer
//     and freed after their last reader;
//   - streams: kernels and loads run on compute, collectives on the
//     stream the collectives pass gave them, an alloc on the stream of
//     the buffer's next user and a free on that of its last;
//   - events: an instruction waits for the last instruction of another
//     stream that wrote a buffer it reads, or touched a buffer it writes
//     (allocs and frees write), unless it already waited for a later one
//     (vector clocks); and the k-th gather waits for the release of the
//     (k-Depth)-th gathered buffer where that release comes before it,
//     which bounds the gathered stages live at once.
//
// Since every wait names an instruction earlier in the sequence and each
// stream runs in sequence order, no schedule can deadlock.
func schedule(s *State) error {
	// Scheduling reads the sequence and never changes it.
	s.Unscheduled = s.Prog.Seq
	return scheduleSeq(s.Prog, s.dist.d.Depth)
}

// Reschedule schedules the unscheduled sequence again at another
// prefetch depth, into a copy of the program.
func Reschedule(s *State, depth int) (*ir.Program, error) {
	if s.Unscheduled == nil {
		return nil, fmt.Errorf("the schedule pass has not run")
	}
	p := *s.Prog
	p.Seq = slices.Clone(s.Unscheduled)
	p.Streams = [ir.NumStreams][]ir.Instr{}
	p.Events = 0
	if err := scheduleSeq(&p, depth); err != nil {
		return nil, err
	}
	return &p, nil
}

func scheduleSeq(p *ir.Program, depth int) error {
	ent := liveness(p, p.Seq, deferFinish(p.Seq))
	placeAllocs(p, p.Seq, ent)
	return events(p, p.Seq, ent, max(depth, 1))
}

// entry is one instruction of the scheduled sequence: seq[k] itself, or
// (mark) the alloc or free of root buf that liveness placed next to
// seq[k], which lends it its stage, micro-batch and phase. The schedule
// works on entries so that it never copies the sequence's instructions
// before it writes the streams.
type entry struct {
	k      int32
	buf    int32 // a mark's buffer; seq[k].Buf otherwise
	op     ir.OpCode
	mark   bool
	stream int32
}

// instr returns e's instruction: seq[k] or, for a mark, into tmp.
func (e *entry) instr(seq []ir.SeqOp, tmp *ir.Instr) *ir.Instr {
	if !e.mark {
		return &seq[e.k].Instr
	}
	op := &seq[e.k]
	*tmp = ir.Instr{Op: e.op, Buf: e.buf, Stage: op.Stage, Micro: op.Micro}
	return tmp
}

// deferFinish orders the sequence (as indices into it) so that each run
// of Finish instructions moves after the next run of Sync instructions
// of the same micro-batch (the next stage's reduction), or to the
// micro-batch's end.
func deferFinish(seq []ir.SeqOp) []int32 {
	order := make([]int32, 0, len(seq))
	hs, he := 0, 0 // the run held back, seq[hs:he]
	release := func() {
		for k := hs; k < he; k++ {
			order = append(order, int32(k))
		}
		hs, he = 0, 0
	}
	for i := 0; i < len(seq); {
		op := &seq[i]
		if op.Phase == ir.Finish && op.Micro >= 0 {
			release()
			j := i
			for j < len(seq) && seq[j].Phase == ir.Finish && seq[j].Micro == op.Micro {
				j++
			}
			hs, he = i, j
			i = j
			continue
		}
		if he > hs && (op.Micro != seq[hs].Micro || op.Phase == ir.Forward || op.Phase == ir.Optimize) {
			release()
		}
		order = append(order, int32(i))
		i++
		if op.Phase == ir.Sync && he > hs && (i == len(seq) || seq[i].Phase != ir.Sync) {
			release()
		}
	}
	release()
	return order
}

// liveness allocates every buffer the sequence never allocates itself
// (activations, inputs, accumulators; not the persistent state) before
// each definition (a write of it by an instruction that does not read
// it) and frees it after its last access before the next definition. It
// returns the sequence in the given order with the allocs and frees, as
// entries.
func liveness(p *ir.Program, seq []ir.SeqOp, order []int32) []entry {
	root := roots(p)
	// implicit[b]: root b is allocated and freed here (not persistent,
	// not allocated by the sequence itself).
	implicit := make([]bool, len(p.Buffers))
	for b := range implicit {
		implicit[b] = true
	}
	for id := range p.Persistent() {
		implicit[id] = false
	}
	for _, op := range seq {
		if op.Op == ir.Alloc || op.Op == ir.Free {
			implicit[op.Buf] = false
		}
	}
	// The roots to allocate before and free after each instruction.
	before := make([][]int32, len(seq))
	after := make([][]int32, len(seq))
	nmark := 0
	live := make([]int, len(p.Buffers)) // root -> last access, -1 when not live
	for b := range live {
		live[b] = -1
	}
	for i, k := range order {
		op := &seq[k]
		reads := op.Reads()
		for _, r := range reads {
			if rt := root[r]; implicit[rt] {
				live[rt] = i
			}
		}
		for _, w := range op.Writes() {
			rt := root[w]
			if !implicit[rt] {
				continue
			}
			if last := live[rt]; last >= 0 && !readsRoot(root, reads, rt) {
				after[last] = append(after[last], rt)
				live[rt] = -1
			}
			if live[rt] < 0 {
				before[i] = append(before[i], rt)
				nmark++
			}
			live[rt] = i
		}
	}
	for rt, last := range live {
		if last >= 0 {
			after[last] = append(after[last], int32(rt))
		}
	}
	out := make([]entry, 0, len(seq)+2*nmark)
	mark := func(k int32, c ir.OpCode, ids []int32) {
		slices.Sort(ids)
		for _, id := range slices.Compact(ids) {
			out = append(out, entry{k: k, buf: id, op: c, mark: true})
		}
	}
	for i, k := range order {
		op := &seq[k]
		mark(k, ir.Alloc, before[i])
		out = append(out, entry{k: k, buf: op.Buf, op: op.Op, stream: int32(op.Stream)})
		mark(k, ir.Free, after[i])
	}
	return out
}

// readsRoot reports whether one of the buffers reads has root rt.
func readsRoot(root []int32, reads []int32, rt int32) bool {
	for _, r := range reads {
		if root[r] == rt {
			return true
		}
	}
	return false
}

// placeAllocs puts kernels and loads on compute, an alloc on the stream
// of the next instruction using its buffer and a free on that of the
// last.
func placeAllocs(p *ir.Program, seq []ir.SeqOp, ent []entry) {
	uses := func(e *entry, root int32) bool {
		return !e.mark && e.op != ir.Alloc && e.op != ir.Free && touches(p, &seq[e.k].Instr, root)
	}
	for i := range ent {
		e := &ent[i]
		switch e.op {
		case ir.Kernel, ir.Load:
			e.stream = ir.Compute
		case ir.Alloc:
			for j := i + 1; j < len(ent); j++ {
				if uses(&ent[j], e.buf) {
					e.stream = ent[j].stream
					break
				}
			}
		case ir.Free:
			for j := i - 1; j >= 0; j-- {
				if uses(&ent[j], e.buf) {
					e.stream = ent[j].stream
					break
				}
			}
		}
	}
}

// events splits the scheduled sequence into streams with the record/wait
// pairs its dependencies need.
func events(p *ir.Program, seq []ir.SeqOp, ent []entry, depth int) error {
	type clock [ir.NumStreams]int // ops of each stream known complete
	n := len(ent)
	root := roots(p)
	idx := make([]int, n) // position in its stream
	snap := make([]clock, n)
	var clocks [ir.NumStreams]clock
	var count [ir.NumStreams]int
	// Per instruction: the event recorded after it (-1 none) and the
	// events it waits for, waitEv[waitAt[i]:waitAt[i+1]].
	recordAfter := make([]int32, n)
	waitAt := make([]int, n+1)
	var waitEv []int32
	nextEvent := int32(0)
	// Per root buffer: its last writer and its last reader on each stream
	// since that write (-1 none).
	lastWrite := make([]int, len(p.Buffers))
	readers := make([][ir.NumStreams]int, len(p.Buffers))
	for b := range lastWrite {
		lastWrite[b] = -1
		readers[b] = [ir.NumStreams]int{-1, -1, -1}
	}

	// The prefetch bound: the k-th gathered buffer's alloc waits for the
	// free of the (k-depth)-th, where that free comes first.
	bound := make([]int, n)
	var gathers []int
	for i := range ent {
		bound[i] = -1
		if e := &ent[i]; e.op != ir.Alloc || e.stream != ir.CommGather {
			continue
		}
		if k := len(gathers) - depth; k >= 0 {
			prev := gathers[k]
			for j := prev + 1; j < i; j++ {
				if ent[j].op == ir.Free && ent[j].buf == ent[prev].buf {
					bound[i] = j
					break
				}
			}
		}
		gathers = append(gathers, i)
	}

	var deps []int
	// Each stream's waits and records (count has its instructions).
	size := [ir.NumStreams]int{}
	var tmp ir.Instr
	for i := range ent {
		op := ent[i].instr(seq, &tmp)
		s := int(ent[i].stream)
		if s < 0 || s >= ir.NumStreams {
			return fmt.Errorf("instruction %d (%s) has no stream", i, ir.FormatInstr(op, ir.Group.String))
		}
		idx[i] = count[s]
		count[s]++
		recordAfter[i] = -1
		waitAt[i] = len(waitEv)
		deps = deps[:0]
		reads, writes := op.Reads(), op.Writes()
		for _, r := range reads {
			if j := lastWrite[root[r]]; j >= 0 {
				deps = append(deps, j)
			}
		}
		for _, w := range writes {
			rt := root[w]
			if j := lastWrite[rt]; j >= 0 {
				deps = append(deps, j)
			}
			for _, j := range readers[rt] {
				if j >= 0 {
					deps = append(deps, j)
				}
			}
		}
		if j := bound[i]; j >= 0 {
			deps = append(deps, j)
		}
		slices.Sort(deps)
		for _, j := range slices.Compact(deps) {
			t := int(ent[j].stream)
			if t == s || clocks[s][t] > idx[j] {
				continue
			}
			ev := recordAfter[j]
			if ev < 0 {
				ev = nextEvent
				nextEvent++
				recordAfter[j] = ev
				size[t]++
			}
			waitEv = append(waitEv, ev)
			size[s]++
			for k := range clocks[s] {
				clocks[s][k] = max(clocks[s][k], snap[j][k])
			}
		}
		clocks[s][s] = idx[i] + 1
		snap[i] = clocks[s]
		for _, r := range reads {
			readers[root[r]][s] = i
		}
		for _, w := range writes {
			rt := root[w]
			lastWrite[rt] = i
			readers[rt] = [ir.NumStreams]int{-1, -1, -1}
		}
	}
	waitAt[n] = len(waitEv)
	for s := range p.Streams {
		p.Streams[s] = make([]ir.Instr, 0, count[s]+size[s])
	}
	for i := range ent {
		op := ent[i].instr(seq, &tmp)
		s := ent[i].stream
		for _, ev := range waitEv[waitAt[i]:waitAt[i+1]] {
			p.Streams[s] = append(p.Streams[s], ir.Instr{Op: ir.Wait, Event: ev, Stage: op.Stage, Micro: op.Micro})
		}
		p.Streams[s] = append(p.Streams[s], *op)
		if ev := recordAfter[i]; ev >= 0 {
			p.Streams[s] = append(p.Streams[s], ir.Instr{Op: ir.Record, Event: ev, Stage: op.Stage, Micro: op.Micro})
		}
	}
	p.Events = int(nextEvent)
	p.Seq = nil
	return nil
}

// roots maps every buffer to its root (Program.Root), computed once for
// the schedule's many lookups.
func roots(p *ir.Program) []int32 {
	out := make([]int32, len(p.Buffers))
	for i := range out {
		out[i] = p.Root(int32(i))
	}
	return out
}
