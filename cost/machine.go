package cost

import (
	"amspc/cost/profile"
	"amspc/ir"
)

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
	// NoComm makes every collective take no time: the step's compute
	// alone, against which a step's exposed communication is measured.
	NoComm bool
	// Overhead is how a step's kernels and collectives run against
	// their measured or modelled times (a profile's, fitted to measured
	// steps; zero otherwise): KernelTime scales every kernel by
	// KernelScale, and the simulator adds Collective to every
	// collective's latency.
	Overhead Overhead
}

// Overhead is a machine's profile.Overhead.
type Overhead = profile.Overhead

// NewMachine reads a cluster's GPU; topo is its network (NewTopology, with
// any collective profile attached).
func NewMachine(c *ir.Cluster, topo *Topology) *Machine {
	eff := c.GPU.Efficiency
	if eff == 0 {
		eff = 0.5 // as cost.Model's FLOP rate
	}
	return &Machine{Topo: topo, PeakFLOPS: c.GPU.PeakFLOPS, Efficiency: eff, MemBW: c.GPU.MemBW, MatMulHalf: c.GPU.MatMulHalf, SharedCores: c.GPU.SharedCores}
}

// ProfiledMachine is cluster c's machine costed with the measured
// profile p (nil: by the cluster's figures alone): collectives by p's
// rows, kernels by p's where it measured kernels, and p's overheads.
func ProfiledMachine(c *ir.Cluster, p *Profile) *Machine {
	topo := NewTopology(c)
	topo.Profile = p
	m := NewMachine(c, topo)
	if p != nil {
		if p.HasKernels() {
			m.Kernels = p // measured kernel times replace the roofline
		}
		m.Overhead = p.Overhead
	}
	return m
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
// bound in practice. The machine's Overhead.KernelScale scales either.
func (m *Machine) KernelTime(kind ir.OpKind, shapes [][]int64, dtype ir.DType, flops float64) float64 {
	t := m.kernelTime(kind, shapes, dtype, flops)
	if s := m.Overhead.KernelScale; s > 0 {
		t *= s
	}
	return t
}

func (m *Machine) kernelTime(kind ir.OpKind, shapes [][]int64, dtype ir.DType, flops float64) float64 {
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
		t = max(t, float64(kind.Info().TrafficElems(shapes))*float64(dtype.Size())/m.MemBW)
	}
	return t
}

// PackProfile is a KernelProfile that also measured the CPU runtime's
// packing of a matrix product's B operand (profile.Profile's pack
// table): its products' times are then without the packing, which the
// simulator adds where a product packs (simulator.Packings).
type PackProfile interface {
	HasPacks() bool
	PackTime(kind ir.OpKind, k, n int64) (seconds float64, ok bool)
}

// Packs reports whether the machine's products pay for packing their B
// operand apart from their kernel times (a profile with a pack table).
func (m *Machine) Packs() bool {
	pp, ok := m.Kernels.(PackProfile)
	return ok && pp.HasPacks()
}

// PackTime is the seconds of packing a weight of shape [k, n] as kind's
// B operand (kind ir.MatMul or ir.MatMulGradA), scaled as kernels are; 0
// where the machine's profile did not measure packing.
func (m *Machine) PackTime(kind ir.OpKind, w []int64) float64 {
	pp, ok := m.Kernels.(PackProfile)
	if !ok || len(w) != 2 {
		return 0
	}
	t, ok := pp.PackTime(kind, w[0], w[1])
	if !ok {
		return 0
	}
	if s := m.Overhead.KernelScale; s > 0 {
		t *= s
	}
	return max(t, 0)
}

// FlopRate is the FLOP rate of large GEMMs: peak x efficiency.
func (m *Machine) FlopRate() float64 { return m.PeakFLOPS * m.Efficiency }

// gemmMinDim is the smallest dimension of kind's matrix product on
// arguments of these shapes; false for an op that is not one.
func gemmMinDim(kind ir.OpKind, shapes [][]int64) (float64, bool) {
	g, ok := kind.Info().GEMMOf(shapes)
	if !ok {
		return 0, false
	}
	return float64(max(min(g.M, g.K, g.N), 1)), true
}
