package passes

import (
	"fmt"

	"amspc/ir"
)

// collectives inserts the communication of every component, stage by
// stage, in the naive form the rewrites then improve: the collectives
// ir.StateCollectives lists for the stage's factors, each where its role
// puts it:
//
//   - gather forward: before the stage's forward (params freed after
//     their last reader, the hpZ secondary shard copied first);
//   - gather backward: before the backward of the stage's first backward
//     reader (from the secondary shard under hpZ);
//   - reduce gradients: after the stage's backward;
//   - select and drop: micro-batches 1..M-1, after it (only this rank's
//     g-slice is read after: the reduce-scatter pass makes it a
//     reduce-scatter);
//   - replica reduce: the last micro-batch, at the stage's finish;
//   - spread: at the next step's start, before the stage's first
//     gather.
//
// It consumes lower's sequence in order: loads, each stage's forward,
// each stage's backward and accumulation (last stage first), then the
// optimizer.
func collectives(s *State) error {
	ds, p := s.dist, s.Prog
	in := p.Seq
	// Room for what each stage adds every micro-batch, so the sequence
	// is rarely copied as it grows.
	out := ds.newSeq(len(in) + 16*ds.d.Micro*len(ds.stages))
	cur := 0
	take := func(m int, ph ir.Phase, stage int) {
		for cur < len(in) && int(in[cur].Micro) == m && in[cur].Phase == ph && int(in[cur].Stage) == stage {
			out = append(out, in[cur])
			cur++
		}
	}
	emit := func(ph ir.Phase, stream int, x ir.Instr, stage, m int) {
		x.Stage, x.Micro = int32(stage), int32(m)
		out = append(out, ir.SeqOp{Instr: x, Phase: ph, Stream: stream})
	}
	coll := func(ph ir.Phase, stream int, c ir.StateColl, from, to int32, stage, m int, why string) {
		emit(ph, stream, collInstr(p, c.Coll, from, to, ds.group(c.Outer, c.Inner), why), stage, m)
	}
	// has says stage st has the collective of role r; the collective.
	has := func(st *distStage, r ir.StateRole) (ir.StateColl, bool) {
		if st.params == 0 {
			return ir.StateColl{}, false
		}
		return st.f.StateColl(r, ds.dp)
	}
	M := ds.d.Micro
	for m := 0; m < M; m++ {
		last := m == M-1
		take(m, ir.Forward, -1)
		for i, st := range ds.stages {
			if c, ok := has(st, ir.Spread); ok && m == 0 {
				coll(ir.Forward, ir.CommGather, c, st.pOS, st.pShard, i, -1, "spread updated params")
			}
			if c, ok := has(st, ir.GatherForward); ok {
				emit(ir.Forward, ir.CommGather, ir.Instr{Op: ir.Alloc, Buf: st.pFull}, i, m)
				coll(ir.Forward, ir.CommGather, c, st.pShard, st.pFull, i, m, "")
			}
			take(m, ir.Forward, i)
			// Release this stage's params and those of earlier stages
			// whose last user this is.
			for _, k := range append(append([]int{}, st.borrowed...), i) {
				sk := ds.stages[k]
				if _, gathered := has(sk, ir.GatherForward); sk.lastUser != i || !gathered {
					continue
				}
				if sk.pSec >= 0 {
					sec := ds.view(p, p.Buffers[sk.pFull].Name+"[sec]", sk.pFull, p.Buffers[sk.pSec].Elems, 0, ds.group(sk.f.Secondary, one))
					keep := castInstr(p, sec, sk.pSec)
					keep.Comment = "keep the secondary shard (hpZ)"
					emit(ir.Forward, ir.Compute, keep, k, m)
				}
				emit(ir.Forward, ir.Compute, ir.Instr{Op: ir.Free, Buf: sk.pFull}, k, m)
			}
		}
		for j := len(ds.stages) - 1; j >= 0; j-- {
			st := ds.stages[j]
			// Gather this stage's params, and those of earlier stages
			// whose first backward user this is.
			for _, k := range append([]int{j}, st.borrowed...) {
				sk := ds.stages[k]
				c, ok := has(sk, ir.GatherBackward)
				if sk.lastUser != j || !ok {
					continue
				}
				from := sk.pShard
				if sk.pSec >= 0 {
					from = sk.pSec
				}
				emit(ir.Backward, ir.CommGather, ir.Instr{Op: ir.Alloc, Buf: sk.pFull}, k, m)
				coll(ir.Backward, ir.CommGather, c, from, sk.pFull, k, m, "")
			}
			if st.params > 0 {
				emit(ir.Backward, ir.Compute, ir.Instr{Op: ir.Alloc, Buf: st.gFull}, j, m)
			}
			take(m, ir.Backward, j)
			if st.params == 0 {
				continue
			}
			if c, ok := has(st, ir.ReduceGrads); ok {
				emit(ir.Sync, ir.Compute, ir.Instr{Op: ir.Free, Buf: st.pFull}, j, m)
				emit(ir.Sync, ir.CommReduce, ir.Instr{Op: ir.Alloc, Buf: st.gPC}, j, m)
				coll(ir.Sync, ir.CommReduce, c, st.gFull, st.gPC, j, m, "")
				emit(ir.Sync, ir.CommReduce, ir.Instr{Op: ir.Free, Buf: st.gFull}, j, m)
			}
			if c, ok := has(st, ir.SelectDrop); ok && !last {
				coll(ir.Sync, ir.CommReduce, c, st.gPC, st.gPC, j, m, "select and drop")
			}
			take(m, ir.Finish, j)
			c, replicas := has(st, ir.ReplicaReduce)
			switch {
			case last && replicas:
				coll(ir.Finish, ir.CommReduce, c, st.gPC, st.gPC, j, m, "data-parallel replicas")
			case !last:
				emit(ir.Finish, ir.Compute, ir.Instr{Op: ir.Free, Buf: st.gPC}, j, m)
			}
		}
	}
	take(-1, ir.Optimize, -1) // clipping's norm, before any stage's step
	for i, st := range ds.stages {
		take(-1, ir.Optimize, i)
		if st.params > 0 {
			emit(ir.Optimize, ir.Compute, ir.Instr{Op: ir.Free, Buf: st.gPC}, i, -1)
		}
	}
	if cur != len(in) {
		return fmt.Errorf("lower's sequence has %d instructions past the expected ones, from %q", len(in)-cur, ir.FormatInstr(&in[cur].Instr, ir.Group.String))
	}
	ds.setSeq(p, out)
	return nil
}

// collInstr is collective c from one buffer into another over g, sized
// by the nccl-tests convention: the full buffer (the output of an
// all-gather, the input of the others).
func collInstr(p *ir.Program, c ir.Coll, from, to int32, g ir.Group, why string) ir.Instr {
	full := p.Buffers[from]
	if c == ir.AllGather {
		full = p.Buffers[to]
	}
	return ir.Instr{Op: ir.Collective, Coll: c, Group: g, In: from, Out: to, Bytes: full.Bytes(), DType: p.Buffers[from].DType, Comment: why}
}
