package passes

import (
	"fmt"

	"amspc/ir"
)

// collectives inserts the communication of every component, stage by
// stage, in the naive form the rewrites then improve (with s_p, s_g,
// s_os the stage's factors and dp the whole mesh):
//
//   - s_p > 1: all-gather P before forward and before backward (from the
//     hpZ secondary shard in backward, copied after forward), free it
//     after its last reader; reduce-scatter the gradient over the p-group
//     after backward;
//   - micro-batches 1..M-1, s_g > s_p: all-reduce the p-chunk over the
//     s_g/s_p replicas (select and drop: only this rank's g-slice is read
//     after, the reduce-scatter pass makes it a reduce-scatter);
//   - last micro-batch: all-reduce the p-chunk over the dp/s_p replicas;
//   - s_os > s_p: the spread, an all-gather of the updated os-slices over
//     the s_os/s_p replicas, at the next step's start before the stage's
//     first gather.
//
// It consumes lower's sequence in order: loads, each stage's forward,
// each stage's backward and accumulation (last stage first), then the
// optimizer.
func collectives(s *State) error {
	ds, p := s.dist, s.Prog
	in := p.Seq
	// Room for what each stage adds every micro-batch, so the sequence
	// is rarely copied as it grows.
	p.Seq = make([]ir.SeqOp, 0, len(in)+16*ds.d.Micro*len(ds.stages))
	cur := 0
	take := func(m int, ph ir.Phase, stage int) {
		for cur < len(in) && int(in[cur].Micro) == m && in[cur].Phase == ph && int(in[cur].Stage) == stage {
			p.Seq = append(p.Seq, in[cur])
			cur++
		}
	}
	emit := func(ph ir.Phase, stream int, x ir.Instr, stage, m int) {
		x.Stage, x.Micro = int32(stage), int32(m)
		p.Seq = append(p.Seq, ir.SeqOp{Instr: x, Phase: ph, Stream: stream})
	}
	coll := func(ph ir.Phase, stream int, c ir.Coll, from, to int32, g ir.Group, stage, m int, why string) {
		emit(ph, stream, collInstr(p, c, from, to, g, why), stage, m)
	}
	M := ds.d.Micro
	for m := 0; m < M; m++ {
		last := m == M-1
		take(m, ir.Forward, -1)
		for i, st := range ds.stages {
			if st.params > 0 && m == 0 && st.f.OS.Size() > st.f.P.Size() {
				coll(ir.Forward, ir.CommGather, ir.AllGather, st.pOS, st.pShard, ds.group(st.f.OS, st.f.P), i, -1, "spread updated params")
			}
			if st.params > 0 && st.f.P.Size() > 1 {
				emit(ir.Forward, ir.CommGather, ir.Instr{Op: ir.Alloc, Buf: st.pFull}, i, m)
				coll(ir.Forward, ir.CommGather, ir.AllGather, st.pShard, st.pFull, ds.group(st.f.P, one), i, m, "")
			}
			take(m, ir.Forward, i)
			// Release this stage's params and those of earlier stages
			// whose last user this is.
			for _, k := range append(append([]int{}, st.borrowed...), i) {
				sk := ds.stages[k]
				if sk.lastUser != i || sk.params == 0 || sk.f.P.Size() <= 1 {
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
				if sk.lastUser != j || sk.params == 0 || sk.f.P.Size() <= 1 {
					continue
				}
				from, g := sk.pShard, ds.group(sk.f.P, one)
				if sk.pSec >= 0 {
					from, g = sk.pSec, ds.group(sk.f.Secondary, one)
				}
				emit(ir.Backward, ir.CommGather, ir.Instr{Op: ir.Alloc, Buf: sk.pFull}, k, m)
				coll(ir.Backward, ir.CommGather, ir.AllGather, from, sk.pFull, g, k, m, "")
			}
			if st.params > 0 {
				emit(ir.Backward, ir.Compute, ir.Instr{Op: ir.Alloc, Buf: st.gFull}, j, m)
			}
			take(m, ir.Backward, j)
			if st.params == 0 {
				continue
			}
			f := st.f
			if f.P.Size() > 1 {
				emit(ir.Sync, ir.Compute, ir.Instr{Op: ir.Free, Buf: st.pFull}, j, m)
				emit(ir.Sync, ir.CommReduce, ir.Instr{Op: ir.Alloc, Buf: st.gPC}, j, m)
				coll(ir.Sync, ir.CommReduce, ir.ReduceScatter, st.gFull, st.gPC, ds.group(f.P, one), j, m, "")
				emit(ir.Sync, ir.CommReduce, ir.Instr{Op: ir.Free, Buf: st.gFull}, j, m)
			}
			if !last && f.G.Size() > f.P.Size() {
				coll(ir.Sync, ir.CommReduce, ir.AllReduce, st.gPC, st.gPC, ds.group(f.G, f.P), j, m, "select and drop")
			}
			take(m, ir.Finish, j)
			switch {
			case last && ds.dp.Size() > f.P.Size():
				coll(ir.Finish, ir.CommReduce, ir.AllReduce, st.gPC, st.gPC, ds.group(ds.dp, f.P), j, m, "data-parallel replicas")
			case !last:
				emit(ir.Finish, ir.Compute, ir.Instr{Op: ir.Free, Buf: st.gPC}, j, m)
			}
		}
	}
	for i, st := range ds.stages {
		take(-1, ir.Optimize, i)
		if st.params > 0 {
			emit(ir.Optimize, ir.Compute, ir.Instr{Op: ir.Free, Buf: st.gPC}, i, -1)
		}
	}
	if cur != len(in) {
		return fmt.Errorf("lower's sequence has %d instructions past the expected ones, from %q", len(in)-cur, ir.FormatInstr(&in[cur].Instr, ir.Group.String))
	}
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
