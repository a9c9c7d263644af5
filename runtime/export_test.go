package runtime

import (
	"slices"

	"amspc/codegen"
)

// SharedGatherBuffers is how many of rank 0's buffers a shared all-gather
// can fill (for tests in package runtime_test).
func SharedGatherBuffers(r *Run) int {
	n := 0
	for _, ok := range r.ranks[0].shareable {
		if ok {
			n++
		}
	}
	return n
}

// RunKernel runs kernel instruction in of program p as rank 0 of topo on
// backend be (nil: the CPU's), its operands filled as MeasureKernel fills
// them, and returns its results' values.
func RunKernel(be Backend, topo codegen.Topology, p *codegen.Program, in *codegen.Instr) ([][]float32, error) {
	k := &rank{p: p, r: 0, topo: topo, step: 1}
	k.setBackend(be)
	bound := idBound(k, in)
	for _, id := range slices.Concat(in.Args, in.Outs) {
		root, _ := k.offset(id)
		if k.have[root] {
			continue
		}
		if err := k.alloc(root); err != nil {
			return nil, err
		}
		if err := fillOn(k, root, uint64(root), bound); err != nil {
			return nil, err
		}
	}
	if err := k.kernel(codegen.Compute, in); err != nil {
		return nil, err
	}
	var outs [][]float32
	for _, id := range in.Outs {
		v, err := k.read(id)
		if err != nil {
			return nil, err
		}
		outs = append(outs, slices.Clone(v))
	}
	return outs, nil
}
