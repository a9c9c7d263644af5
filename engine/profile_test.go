package engine_test

import (
	"testing"

	"amspc/cost"
	"amspc/engine"
	"amspc/ir"
)

// TestMeasureEveryKernel: every kernel instruction of a compiled tiny
// plan (forward, backward, optimizer on flat shards, casts) can be
// measured on its own with all 8 ranks at once, and takes a positive
// time.
func TestMeasureEveryKernel(t *testing.T) {
	F := func(a, b int) ir.Factor { return ir.Factor{S0: a, S1: b} }
	b := compileModel(t, "tiny", 2, 4, cost.Factors{P: F(2, 1), G: F(2, 1), OS: F(4, 2)}, "train { seq_len = 16 micro_batch = 1 global_batch = 16 precision = bf16 }")
	p := b.Template(0)
	seen := map[ir.OpKind]bool{}
	for _, in := range engine.FirstOfEachKind(p) {
		seen[in.Kern] = true
		s, err := engine.MeasureKernel(b.Topo, p, in, 1)
		if err != nil {
			t.Fatalf("%v: %v", in.Kern, err)
		}
		if !(s > 0) {
			t.Errorf("%v: %v s", in.Kern, s)
		}
	}
	for _, k := range []ir.OpKind{ir.MatMul, ir.AttentionGrad, ir.AdamWCopy, ir.Embed, ir.CrossEntropy, ir.Cast} {
		if !seen[k] {
			t.Errorf("the plan has no %v kernel", k)
		}
	}
}

func TestMeasureCollective(t *testing.T) {
	topo := ir.Topology{GPUsPerNode: 4, Nodes: 2}
	for _, c := range []ir.Coll{ir.AllGather, ir.ReduceScatter, ir.AllReduce, ir.Broadcast} {
		for _, f := range []ir.Factor{{S0: 2, S1: 1}, {S0: 4, S1: 2}, {S0: 1, S1: 2}} {
			s, err := engine.MeasureCollective(topo, c, f, 1024, 2)
			if err != nil {
				t.Fatalf("%v %v: %v", c, f, err)
			}
			if !(s > 0) {
				t.Errorf("%v %v: %v s", c, f, s)
			}
		}
	}
	if _, err := engine.MeasureCollective(topo, ir.AllGather, ir.Factor{S0: 3, S1: 1}, 1023, 1); err == nil {
		t.Error("a group shape that does not divide the topology was measured")
	}
	if _, err := engine.MeasureCollective(topo, ir.AllGather, ir.Factor{S0: 4, S1: 1}, 1022, 1); err == nil {
		t.Error("a size that does not split over the group was measured")
	}
}

// The shared all-gather is measured over every group shape, and refused
// where the shape or the size does not split.
func TestMeasureSharedGather(t *testing.T) {
	topo := ir.Topology{GPUsPerNode: 4, Nodes: 2}
	for _, f := range []ir.Factor{{S0: 2, S1: 1}, {S0: 4, S1: 2}, {S0: 1, S1: 2}} {
		s, err := engine.MeasureSharedGather(topo, f, 1024, 2)
		if err != nil {
			t.Fatalf("%v: %v", f, err)
		}
		if !(s > 0) {
			t.Errorf("%v: %v s", f, s)
		}
	}
	if _, err := engine.MeasureSharedGather(topo, ir.Factor{S0: 3, S1: 1}, 1023, 1); err == nil {
		t.Error("a group shape that does not divide the topology was measured")
	}
	if _, err := engine.MeasureSharedGather(topo, ir.Factor{S0: 4, S1: 1}, 1022, 1); err == nil {
		t.Error("a size that does not split over the group was measured")
	}
}
