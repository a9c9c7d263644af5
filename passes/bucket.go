package passes

import (
	"fmt"

	"amspc/ir"
)

// bucket fuses consecutive gradient all-reduces (in place on a whole
// buffer, on the reduce stream, same micro-batch, group and dtype) into
// buckets of up to Distribution.BucketBytes, as DDP does: each member is
// copied into its part of one buffer where its all-reduce stood, the
// bucket is reduced once where the last member's stood, and each part is
// copied back before the member's gradient is next read. Reduce-scatters
// are not bucketed yet (their shards would interleave the members).
func bucket(s *State) error {
	p, ds := s.Prog, s.dist
	capBytes := ds.d.BucketBytes
	fusable := func(op *ir.SeqOp) bool {
		return op.Op == ir.Collective && op.Coll == ir.AllReduce && op.Stream == ir.CommReduce &&
			op.In == op.Out && p.Buffers[op.In].Parent < 0 && op.Micro >= 0
	}
	var buckets [][]int // positions of each bucket's all-reduces
	var cur []int
	var bytes int64
	flush := func() {
		if len(cur) > 1 {
			buckets = append(buckets, cur)
		}
		cur, bytes = nil, 0
	}
	for i := range p.Seq {
		op := &p.Seq[i]
		if !fusable(op) {
			continue
		}
		if len(cur) > 0 {
			first := &p.Seq[cur[0]]
			if first.Group != op.Group || first.Micro != op.Micro || first.DType != op.DType || bytes+op.Bytes > capBytes {
				flush()
			}
		}
		cur = append(cur, i)
		bytes += op.Bytes
		if bytes >= capBytes {
			flush()
		}
	}
	flush()
	if len(buckets) == 0 {
		return nil
	}
	// Rewrite: what to put before and instead of each position.
	before := map[int][]ir.SeqOp{}
	instead := map[int][]ir.SeqOp{}
	for _, members := range buckets {
		first, lastPos := p.Seq[members[0]], members[len(members)-1]
		var elems int64
		for _, i := range members {
			elems += p.Buffers[p.Seq[i].In].Elems
		}
		names := stageName(ds, first.Stage) + ".." + stageName(ds, p.Seq[lastPos].Stage)
		b := newBuf(p, "G.bucket."+names, p.Buffers[first.In].DType, elems)
		at := func(op ir.SeqOp, x ir.Instr) ir.SeqOp {
			x.Stage, x.Micro = op.Stage, op.Micro
			return ir.SeqOp{Instr: x, Phase: op.Phase, Stream: ir.Compute}
		}
		before[members[0]] = append(before[members[0]], at(first, ir.Instr{Op: ir.Alloc, Buf: b}))
		var off int64
		lastCopy := -1
		for _, i := range members {
			op := p.Seq[i]
			g := p.Buffers[op.In]
			part := ds.view(p, fmt.Sprintf("G.bucket.%s[%s]", names, stageName(ds, op.Stage)), b, g.Elems, off, ir.Group{})
			off += g.Elems
			in := at(op, castInstr(p, op.In, part))
			in.Comment = "into the bucket"
			instead[i] = append(instead[i], in)
			// Copied back before the gradient is next read.
			for j := lastPos + 1; j < len(p.Seq); j++ {
				if touches(p, &p.Seq[j].Instr, op.In) {
					back := at(p.Seq[j], castInstr(p, part, op.In))
					back.Stage = op.Stage
					back.Comment = "out of the bucket"
					before[j] = append(before[j], back)
					lastCopy = max(lastCopy, j)
					break
				}
			}
		}
		ar := first
		ar.Instr = collInstr(p, ir.AllReduce, b, b, first.Group, first.Comment)
		ar.Stage, ar.Micro = first.Stage, first.Micro
		instead[lastPos] = append(instead[lastPos], ar)
		if lastCopy >= 0 {
			free := at(p.Seq[lastCopy], ir.Instr{Op: ir.Free, Buf: b})
			free.Stage = p.Seq[lastCopy].Stage
			before[lastCopy] = append(before[lastCopy], free)
		}
	}
	extra := 0
	for _, ops := range before {
		extra += len(ops)
	}
	for _, ops := range instead {
		extra += len(ops)
	}
	out := ds.newSeq(len(p.Seq) + extra)
	for i, op := range p.Seq {
		out = append(out, before[i]...)
		if r, ok := instead[i]; ok {
			out = append(out, r...)
		} else {
			out = append(out, op)
		}
	}
	ds.setSeq(p, out)
	return nil
}

// castInstr copies buffer from into to, converting to to's dtype.
func castInstr(p *ir.Program, from, to int32) ir.Instr {
	return ir.Instr{Op: ir.Kernel, Kern: ir.Cast, Args: []int32{from}, Outs: []int32{to},
		Attrs: []ir.Attr{ir.IntAttr("dtype", int64(p.Buffers[to].DType))}}
}

func stageName(ds *dist, i int32) string {
	if i >= 0 && int(i) < len(ds.stages) {
		return ds.stages[i].name
	}
	return "step"
}
