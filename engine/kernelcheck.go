package engine

import (
	"fmt"
	"math"
	"slices"

	"amspc/ir"
)

// RunKernel runs kernel instruction in of program p as rank 0 of topo on
// backend be (nil: the CPU's), its operands filled as MeasureKernel fills
// them, and returns its results' values.
func RunKernel(be Backend, topo ir.Topology, p *ir.Program, in *ir.Instr) ([][]float32, error) {
	k, err := probeRank(topo, p, in, 0, be)
	if err != nil {
		return nil, err
	}
	if err := k.kernel(ir.Compute, in); err != nil {
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

// FirstOfEachKind is the first kernel instruction of each op on p's
// compute stream, in program order.
func FirstOfEachKind(p *ir.Program) []*ir.Instr {
	var out []*ir.Instr
	seen := map[ir.OpKind]bool{}
	for i := range p.Streams[ir.Compute] {
		in := &p.Streams[ir.Compute][i]
		if in.Op == ir.Kernel && !seen[in.Kern] {
			seen[in.Kern] = true
			out = append(out, in)
		}
	}
	return out
}

// KernelTolerance is how far a backend's result may be from the CPU
// backend's, relative to the result's largest magnitude: fp32 results
// 1e-5 (attention's sums run in other orders), bf16 results 1e-2 (one
// bf16 rounding apart).
func KernelTolerance(dt ir.DType) float64 {
	if dt == ir.BF16 {
		return 1e-2
	}
	return 1e-5
}

// CheckKernel runs kernel instruction in of p on be and on the CPU
// backend from the same operands and returns the largest difference of
// any result element, relative to its result's largest magnitude, and an
// error naming the first result beyond KernelTolerance.
func CheckKernel(be Backend, topo ir.Topology, p *ir.Program, in *ir.Instr) (float64, error) {
	want, err := RunKernel(nil, topo, p, in)
	if err != nil {
		return 0, fmt.Errorf("%v on the CPU: %w", in.Kern, err)
	}
	got, err := RunKernel(be, topo, p, in)
	if err != nil {
		return 0, fmt.Errorf("%v on %s: %w", in.Kern, be.Name(), err)
	}
	all := 0.0
	for o := range want {
		scale := 0.0
		for _, v := range want[o] {
			scale = math.Max(scale, math.Abs(float64(v)))
		}
		if scale == 0 {
			scale = 1
		}
		worst, at := 0.0, 0
		for j := range want[o] {
			d := math.Abs(float64(got[o][j]-want[o][j])) / scale
			if d > worst || d != d {
				worst, at = d, j
			}
		}
		if tol := KernelTolerance(p.Buffers[in.Outs[o]].DType); !(worst <= tol) {
			return worst, fmt.Errorf("%v result %d: element %d is %g on %s, %g on the CPU (%.3g of the result's largest magnitude, more than %g)",
				in.Kern, o, at, got[o][at], be.Name(), want[o][at], worst, tol)
		}
		all = math.Max(all, worst)
	}
	return all, nil
}
