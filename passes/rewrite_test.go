package passes

import (
	"strings"
	"testing"

	"amspc/ir"
)

// program builds a sequence over buffers for the rewrite tests.
func program(bufs []ir.Buffer, ops ...ir.SeqOp) *ir.Program {
	return &ir.Program{Buffers: bufs, Seq: ops}
}

func root(name string, elems int64) ir.Buffer {
	return ir.Buffer{Name: name, DType: ir.F32, Elems: elems, Parent: -1}
}

func part(name string, parent int32, elems int64, g ir.Group) ir.Buffer {
	return ir.Buffer{Name: name, DType: ir.F32, Elems: elems, Parent: parent, Part: g}
}

func on(stream int, in ir.Instr) ir.SeqOp {
	in.Stage, in.Micro = -1, -1
	return ir.SeqOp{Instr: in, Stream: stream}
}

func cast(from, to int32) ir.Instr {
	return ir.Instr{Op: ir.Kernel, Kern: ir.Cast, Args: []int32{from}, Outs: []int32{to}, Attrs: []ir.Attr{ir.IntAttr("dtype", int64(ir.F32))}}
}

func text(p *ir.Program) string {
	var b strings.Builder
	for i := range p.Seq {
		b.WriteString(ir.FormatInstr(&p.Seq[i].Instr, ir.Group.String))
		b.WriteByte('\n')
	}
	return b.String()
}

var (
	node4 = ir.Factor{S0: 4, S1: 1}
	all8  = ir.Factor{S0: 4, S1: 2}
)

// An all-gather read only through this rank's own part is dropped: the
// reader reads the gather's input, and the gathered buffer's alloc and
// free go with it. Read whole, the gather stays.
func TestOwnPartGather(t *testing.T) {
	for _, c := range []struct {
		name   string
		reader int32
		want   string
	}{
		{"own part", 2, "kernel cast b0 -> b3 {dtype=4}\n"},
		{"whole", 1, "alloc b1\nall_gather b0 -> b1 group 4x1 128 B f32\nkernel cast b1 -> b4 {dtype=4}\nfree b1\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := ir.Group{Outer: node4, Inner: one}
			bufs := []ir.Buffer{root("shard", 8), root("full", 32), part("full[own]", 1, 8, g), root("out", 8), root("out.full", 32)}
			out := int32(3)
			if c.reader == 1 {
				out = 4
			}
			p := program(bufs,
				on(ir.CommGather, ir.Instr{Op: ir.Alloc, Buf: 1}),
				on(ir.CommGather, collInstr(&ir.Program{Buffers: bufs}, ir.AllGather, 0, 1, g, "")),
				on(ir.Compute, cast(c.reader, out)),
				on(ir.Compute, ir.Instr{Op: ir.Free, Buf: 1}))
			ownPartGathers(p)
			unusedAllocs(p)
			if got := text(p); got != c.want {
				t.Errorf("got\n%swant\n%s", got, c.want)
			}
		})
	}
}

// An all-reduce read only through a part over a sub-mesh becomes a
// reduce-scatter onto the part and an all-reduce of the part across the
// sub-meshes; read whole, or through two different views, it stays.
func TestAllReduceToReduceScatter(t *testing.T) {
	g := ir.Group{Outer: all8, Inner: one}
	sub := ir.Group{Outer: node4, Inner: one}
	for _, c := range []struct {
		name    string
		readers []int32
		want    string
	}{
		{"own part", []int32{2}, "reduce_scatter b0 -> b2 group 4x1 128 B f32\nall_reduce b2 -> b2 group 4x2/4x1 32 B f32\nkernel cast b2 -> b4 {dtype=4}\n"},
		{"whole", []int32{0}, "all_reduce b0 -> b0 group 4x2 128 B f32\nkernel cast b0 -> b4 {dtype=4}\n"},
		{"two parts", []int32{2, 3}, "all_reduce b0 -> b0 group 4x2 128 B f32\nkernel cast b2 -> b4 {dtype=4}\nkernel cast b3 -> b4 {dtype=4}\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			bufs := []ir.Buffer{root("g", 32), root("unused", 1), part("g[os]", 0, 8, sub),
				{Name: "g[other]", DType: ir.F32, Elems: 8, Parent: 0, Offset: 8, Part: ir.Group{Outer: one, Inner: one}}, root("out", 8)}
			s := &State{Prog: program(bufs, on(ir.CommReduce, collInstr(&ir.Program{Buffers: bufs}, ir.AllReduce, 0, 0, g, "")))}
			for _, r := range c.readers {
				s.Prog.Seq = append(s.Prog.Seq, on(ir.Compute, cast(r, 4)))
			}
			if err := reduceScatter(s); err != nil {
				t.Fatal(err)
			}
			if got := text(s.Prog); got != c.want {
				t.Errorf("got\n%swant\n%s", got, c.want)
			}
			if err := ir.VerifyProgram(s.Prog, ir.Topology{}, ir.Consistent); err != nil {
				t.Error(err)
			}
		})
	}
}
