package simulator

import "amspc/ir"

// Packings says which of a program's matrix products pack their B
// operand (operand 1, the weight) on CPU ranks, by stream and position:
// packings[s][i] is true where instruction i of stream s is a MatMul or
// MatMulGradA that packs. It follows the CPU runtime (engine's
// sharedPack and replicaPack): a product reads its weight packed, and the
// packing of a weight that stays the same is made once and reused,
//
//   - in a stage's P buffer (a replicated or tensor-parallel parameter),
//     from a whole write of the buffer (an all-gather into all of it, or
//     a kernel writing all of it: DDP's optimizer, a cast of the master
//     copy) to the next write of any part of it;
//   - in a transient buffer that only whole all-gathers write (a gathered
//     ZeRO-3 weight), from the gather to the buffer's next write or free.
//
// Every other product packs its B each call. The local ranks holding one
// copy share a packing: one packs while the others wait for it or find it
// made. Each pays its share of the group's one packing (PackSharers,
// PackShare): a replicated weight's, made once a step, and a gathered
// weight's, made once a gather. MatMul packs B,
// MatMulGradA B^T: two packings of one weight. Under MPI (a rank a process) a rank keeps its
// own packings of replicated weights the same way; a gathered weight's
// is not kept there (no shared gathers), which differs from this only
// where one gather feeds two products of one kind.
//
// Writes and reads are taken in an order of the streams that respects
// the program's events (each stream runs until a wait whose event is not
// recorded yet; a collective completes at once): the program orders every
// read of a buffer after the write it reads and before the next write, so
// every such order gives the same answer.
func Packings(p *ir.Program) [ir.NumStreams][]bool {
	var out [ir.NumStreams][]bool
	for s := range p.Streams {
		out[s] = make([]bool, len(p.Streams[s]))
	}
	n := len(p.Buffers)
	isP := make([]bool, n)
	for _, l := range p.Layouts {
		if l.P >= 0 && !p.Buffers[l.P].IsView() && p.Buffers[l.P].DType != ir.I32 {
			isP[l.P] = true
		}
	}
	shareable := Shareable(p)
	gen := make([]int, n)
	stable := make([]bool, n)
	type key struct {
		b    int32
		kind ir.OpKind
	}
	packed := map[key]int{} // the generation a packing was made in
	write := func(id int32, whole bool) {
		r := p.Root(id)
		gen[r]++
		stable[r] = whole && (isP[r] || shareable[r])
	}
	// Two steps: the first leaves the buffers as a step finds them (DDP's
	// optimizer writes the weights at the end of the step before, whose
	// packing the next step's products reuse); the second is recorded.
	for step := range 2 {
		walk(p, func(s, i int, in *ir.Instr) {
			switch in.Op {
			case ir.Load:
				write(in.Buf, false)
			case ir.Alloc, ir.Free:
				if r := p.Root(in.Buf); shareable[r] {
					write(r, false)
				}
			case ir.Collective:
				r := p.Root(in.Out)
				write(in.Out, in.Coll == ir.AllGather && r == in.Out)
			case ir.Kernel:
				if in.Kern == ir.MatMul || in.Kern == ir.MatMulGradA {
					b := in.Args[1]
					r := p.Root(b)
					k := key{b, in.Kern}
					if g, ok := packed[k]; !stable[r] || !ok || g != gen[r] {
						out[s][i] = step == 1
						if stable[r] {
							packed[k] = gen[r]
						}
					}
				}
				for _, o := range in.Outs {
					r := p.Root(o)
					write(o, o == r || p.Buffers[o].Elems == p.Buffers[r].Elems)
				}
			}
		})
	}
	return out
}

// walk calls f on every instruction of p in an order of its streams that
// respects its events: each stream runs until a wait for an event not
// yet recorded (a deadlocked program's rest is not walked).
func walk(p *ir.Program, f func(s, i int, in *ir.Instr)) {
	recorded := make([]bool, p.Events)
	var at [ir.NumStreams]int
	for progress := true; progress; {
		progress = false
		for s := range p.Streams {
			for at[s] < len(p.Streams[s]) {
				in := &p.Streams[s][at[s]]
				if in.Op == ir.Wait && (int(in.Event) >= len(recorded) || !recorded[in.Event]) {
					break
				}
				if in.Op == ir.Record {
					for int(in.Event) >= len(recorded) {
						recorded = append(recorded, false)
					}
					recorded[in.Event] = true
				}
				f(s, at[s], in)
				at[s]++
				progress = true
			}
		}
	}
}

// Shareable marks the transient buffers (allocated in the step) that
// only all-gathers write, one of them into the whole buffer: the gathers
// the local ranks share (engine's findShareable).
func Shareable(p *ir.Program) []bool {
	ok := make([]bool, len(p.Buffers))
	whole := make([]bool, len(p.Buffers))
	for _, ins := range p.Streams {
		for _, in := range ins {
			if in.Op == ir.Alloc {
				ok[in.Buf] = p.Buffers[in.Buf].DType != ir.I32
			}
		}
	}
	bad := make([]bool, len(p.Buffers))
	for _, ins := range p.Streams {
		for _, in := range ins {
			switch in.Op {
			case ir.Kernel:
				for _, o := range in.Outs {
					bad[p.Root(o)] = true
				}
			case ir.Load:
				bad[p.Root(in.Buf)] = true
			case ir.Collective:
				r := p.Root(in.Out)
				switch {
				case in.Coll != ir.AllGather:
					bad[r] = true
				case r == in.Out:
					whole[r] = true
				}
			}
		}
	}
	for id := range ok {
		ok[id] = ok[id] && whole[id] && !bad[id]
	}
	return ok
}
