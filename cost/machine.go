package cost

import "amspc/ir"

// KernelProfile gives measured kernel times (amspc profile writes them;
// another package implements it). ok is false where it has no
// measurement for the kernel, which is then costed analytically.
type KernelProfile interface {
	KernelTime(kind ir.OpKind, shapes [][]int64, flops float64) (seconds float64, ok bool)
}

// Machine is everything the simulator needs to cost an instruction: the
// network (collectives), the GPU (kernels) and, optionally, measured
// kernel times.
type Machine struct {
	Topo *Topology
	// PeakFLOPS is the dense tensor-core peak, Efficiency the fraction of
	// it large GEMMs reach, MemBW the HBM bandwidth (0: kernels are not
	// bound by memory), MatMulHalf the GEMM dimension at which half of
	// Efficiency is reached (0: every GEMM at Efficiency).
	PeakFLOPS, Efficiency, MemBW, MatMulHalf float64
	// Kernels, when set, replaces the analytic time of the kernels it
	// measured.
	Kernels KernelProfile
	// SharedCores: kernels and the copies of collectives share the
	// rank's processor (ir.GPU.SharedCores), so they slow each other.
	SharedCores bool
}

// NewMachine reads a cluster's GPU; topo is its network (NewTopology, with
// any collective profile attached).
func NewMachine(c *ir.Cluster, topo *Topology) *Machine {
	eff := c.GPU.Efficiency
	if eff == 0 {
		eff = 0.5 // as cost.Model's FLOP rate
	}
	return &Machine{Topo: topo, PeakFLOPS: c.GPU.PeakFLOPS, Efficiency: eff, MemBW: c.GPU.MemBW, MatMulHalf: c.GPU.MatMulHalf, SharedCores: c.GPU.SharedCores}
}

// KernelTime is the predicted time of one kernel of kind on arguments of
// the given shapes (in order; a flat buffer is one dimension) whose
// elements are dtype (the first argument's), doing flops FLOPs. It is a
// pure function of its arguments, so the planner costs a graph op with it
// exactly as the simulator costs the op's instruction.
//
// Measured times come first. Otherwise a roofline: the larger of the
// compute time, flops over peak x efficiency, and the memory time, the
// bytes the kernel reads and writes over the HBM bandwidth. GEMMs'
// efficiency grows with their smallest dimension x as
// Efficiency·x/(x+MatMulHalf); attention (flash-style kernels) runs at
// Efficiency; every other op is costed at Efficiency too, and is memory
// bound in practice.
func (m *Machine) KernelTime(kind ir.OpKind, shapes [][]int64, dtype ir.DType, flops float64) float64 {
	if m.Kernels != nil {
		if t, ok := m.Kernels.KernelTime(kind, shapes, flops); ok {
			return max(t, 0)
		}
	}
	var t float64
	if flops > 0 && m.PeakFLOPS > 0 {
		eff := m.Efficiency
		if x, ok := gemmMinDim(kind, shapes); ok && m.MatMulHalf > 0 {
			eff *= x / (x + m.MatMulHalf)
		}
		if eff > 0 {
			t = flops / (m.PeakFLOPS * eff)
		}
	}
	if m.MemBW > 0 {
		t = max(t, float64(trafficElems(kind, shapes))*float64(dtype.Size())/m.MemBW)
	}
	return t
}

// FlopRate is the FLOP rate of large GEMMs: peak x efficiency.
func (m *Machine) FlopRate() float64 { return m.PeakFLOPS * m.Efficiency }

func elems(s []int64) int64 {
	n := int64(1)
	for _, d := range s {
		n *= d
	}
	return n
}

// rows is the product of all but the last dimension.
func rows(s []int64) int64 {
	if len(s) == 0 {
		return 1
	}
	return elems(s[:len(s)-1])
}

func last(s []int64) int64 {
	if len(s) == 0 {
		return 1
	}
	return s[len(s)-1]
}

// gemmDims gives a matmul kernel's GEMM as m x k times k x n, from its
// argument shapes: matmul(a [.., m, k], b [k, n]); matmul_grad_a(dy [.., m,
// n], w [k, n]) = dy·wᵀ; matmul_grad_b(a [.., m, k], dy [.., m, n]) = aᵀ·dy.
func gemmDims(kind ir.OpKind, shapes [][]int64) (m, k, n int64, ok bool) {
	if len(shapes) < 2 || len(shapes[1]) == 0 {
		return 0, 0, 0, false
	}
	a, b := shapes[0], shapes[1]
	switch kind {
	case ir.MatMul:
		return rows(a), last(a), last(b), true
	case ir.MatMulGradA:
		return rows(a), last(a), b[0], true
	case ir.MatMulGradB:
		return last(a), rows(a), last(b), true
	}
	return 0, 0, 0, false
}

func gemmMinDim(kind ir.OpKind, shapes [][]int64) (float64, bool) {
	m, k, n, ok := gemmDims(kind, shapes)
	if !ok {
		return 0, false
	}
	return float64(max(min(m, k, n), 1)), true
}

// trafficElems is the elements a kernel reads and writes: its arguments
// and its results, each once (a fused kernel keeps its intermediates in
// registers and shared memory).
func trafficElems(kind ir.OpKind, shapes [][]int64) int64 {
	var in, largest int64
	for _, s := range shapes {
		n := elems(s)
		in += n
		largest = max(largest, n)
	}
	arg := func(i int) int64 {
		if i < len(shapes) {
			return elems(shapes[i])
		}
		return 0
	}
	switch kind {
	case ir.MatMul, ir.MatMulGradA, ir.MatMulGradB:
		m, _, n, _ := gemmDims(kind, shapes)
		return in + m*n
	case ir.Embed:
		// Only the looked-up rows of the table are read.
		if len(shapes) == 2 {
			out := arg(0) * last(shapes[1])
			return arg(0) + 2*out
		}
	case ir.EmbedGrad:
		// Scatter-add of dy into the rows the ids name.
		return arg(0) + 2*arg(1)
	case ir.CrossEntropy:
		return in // a scalar loss
	case ir.SumRows:
		if len(shapes) > 0 {
			return in + last(shapes[0])
		}
	case ir.RMSNormGrad:
		return in + arg(0) + arg(1) // dx, dw
	case ir.LayerNormGrad:
		return in + arg(0) + 2*arg(1) // dx, dw, db
	case ir.AttentionGrad:
		return in + arg(0) + arg(1) + arg(2) // dq, dk, dv
	case ir.AdamWStep:
		return in + arg(0) + arg(1) + arg(2) // new weights, m, v
	}
	// One result as large as the largest argument: elementwise ops,
	// norms, rope, attention's output, casts, the backward of
	// elementwise ops.
	return in + largest
}
