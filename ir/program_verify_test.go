package ir

import (
	"errors"
	"strings"
	"testing"
)

// TestVerifyProgramChecks: each check VerifyProgram can select finds its
// violation, which the form alone lets pass.
func TestVerifyProgramChecks(t *testing.T) {
	g := Group{Outer: Factor{S0: 2, S1: 1}, Inner: Factor{S0: 1, S1: 1}}
	instr := func(op OpCode) Instr { return Instr{Op: op, Stage: -1, Micro: -1} }
	coll := func(c Coll, from, to int32, bytes int64) Instr {
		in := instr(Collective)
		in.Coll, in.In, in.Out, in.Group, in.Bytes, in.DType = c, from, to, g, bytes, BF16
		return in
	}
	ev := func(op OpCode, e int32) Instr { in := instr(op); in.Event = e; return in }
	prog := func() *Program {
		return &Program{
			Buffers: []Buffer{
				{Name: "w", DType: BF16, Elems: 8, Parent: -1},
				{Name: "w.shard", DType: BF16, Elems: 4, Parent: 0, Part: g},
			},
			Streams: [NumStreams][]Instr{
				Compute:    {ev(Wait, 0)},
				CommGather: {coll(AllGather, 1, 0, 16), ev(Record, 0)},
			},
			Events: 1,
		}
	}
	topo := Topology{GPUsPerNode: 2, Nodes: 1}
	all := Consistent | Runnable | Written | Scheduled
	if err := VerifyProgram(prog(), topo, all); err != nil {
		t.Fatalf("a sound program: %v", err)
	}
	for _, c := range []struct {
		name   string
		checks Checks
		break_ func(p *Program)
		want   string
	}{
		{"collective sizes", Consistent, func(p *Program) { p.Streams[CommGather][0].Bytes = 8 }, "comm.gather 0 (all_gather b1 -> b0 group 2x1 8 B bf16): all_gather of w.shard (4 bf16) into w (8 bf16) over 2x1 (2 ranks), 8 bytes: sizes disagree"},
		{"view dtype", Consistent, func(p *Program) { p.Buffers[1].DType = F32 }, `view b1 "w.shard" is f32, its parent "w" bf16`},
		{"group tiling", 0, func(p *Program) { p.Buffers[1].Part.Outer.S0 = 4; p.Buffers[1].Elems = 2 }, `view b1 "w.shard": part group 4x1 does not tile 1 nodes x 2 GPUs`},
		{"recorded twice", Runnable, func(p *Program) { p.Streams[Compute] = append(p.Streams[Compute], ev(Record, 0)) }, "comm.gather 1: record e0: event e0 is recorded twice, first at compute 1"},
		{"never recorded", Runnable, func(p *Program) { p.Streams[CommGather] = p.Streams[CommGather][:1] }, "compute 0: wait e0: event e0 is never recorded on this rank"},
		{"deadlock", Runnable, func(p *Program) {
			p.Streams[CommGather] = append([]Instr{ev(Wait, 0)}, p.Streams[CommGather]...)
		}, "compute 0: wait e0: deadlock: compute 0 (wait e0) waits for comm.gather 2 (record e0), comm.gather 0 (wait e0) waits for comm.gather 2 (record e0)"},
		{"unscheduled", Scheduled, func(p *Program) { p.Seq = []SeqOp{{Instr: instr(Alloc)}} }, "program not scheduled: 1 instructions still in sequence form"},
		{"read before written", Written, func(p *Program) {
			p.Streams = [NumStreams][]Instr{}
			p.Events = 0
			p.Seq = []SeqOp{{Instr: coll(AllGather, 1, 0, 16), Stream: CommGather}}
		}, "sequence 0 (all_gather b1 -> b0 group 2x1 16 B bf16) reads w.shard before anything writes it"},
	} {
		p := prog()
		c.break_(p)
		base := all
		if len(p.Seq) > 0 && c.checks != Scheduled {
			base &^= Scheduled
		}
		if c.checks != 0 {
			if err := VerifyProgram(p, topo, base&^c.checks); err != nil {
				t.Errorf("%s: found without its check: %v", c.name, err)
			}
		}
		err := VerifyProgram(p, topo, base)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v\nwant %s", c.name, err, c.want)
		}
		var ee *EventError
		if errors.As(err, &ee) != (c.checks == Runnable) {
			t.Errorf("%s: %T is an *EventError: %v", c.name, err, errors.As(err, &ee))
		}
	}
}
