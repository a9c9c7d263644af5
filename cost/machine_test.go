package cost

import (
	"testing"

	"amspc/cluster"
	"amspc/ir"
)

func presetMachine(t *testing.T, gpu string) *Machine {
	t.Helper()
	g, ok := cluster.LookupGPU(gpu)
	if !ok {
		t.Fatalf("no preset %s", gpu)
	}
	c := &ir.Cluster{Nodes: 1, GPUsPerNode: 8, GPU: g, IntraBW: g.IntraBW, InterBW: g.InterBW}
	return NewMachine(c, NewTopology(c))
}

func mmFlops(m, k, n int64) float64 { return 2 * float64(m) * float64(k) * float64(n) }

// TestKernelRoofline: a skinny matmul is memory bound (bytes over HBM
// bandwidth), a large one compute bound at no more than peak x
// efficiency, and elementwise ops are memory bound.
func TestKernelRoofline(t *testing.T) {
	for _, gpu := range []string{"A100-80GB", "H100-80GB", "H200-141GB"} {
		m := presetMachine(t, gpu)
		// [16, 8192] @ [8192, 8192]: reading the weight dominates.
		small := [][]int64{{16, 8192}, {8192, 8192}}
		f := mmFlops(16, 8192, 8192)
		got := m.KernelTime(ir.MatMul, small, ir.BF16, f)
		mem := float64(16*8192+8192*8192+16*8192) * 2 / m.MemBW
		near(t, gpu+" skinny matmul (memory bound)", got, mem)
		if f/got >= m.FlopRate() {
			t.Errorf("%s: skinny matmul at %g FLOP/s, not below %g", gpu, f/got, m.FlopRate())
		}
		// [8, 4096, 8192] @ [8192, 8192]: compute bound.
		big := [][]int64{{8, 4096, 8192}, {8192, 8192}}
		f = mmFlops(8*4096, 8192, 8192)
		got = m.KernelTime(ir.MatMul, big, ir.BF16, f)
		x := 8192.0
		near(t, gpu+" large matmul (compute bound)", got, f/(m.PeakFLOPS*m.Efficiency*x/(x+m.MatMulHalf)))
		if rate := f / got; rate > m.PeakFLOPS*m.Efficiency || rate < 0.9*m.FlopRate() {
			t.Errorf("%s: large matmul at %g FLOP/s, want just under %g", gpu, rate, m.FlopRate())
		}
		// Efficiency grows with the smallest dimension.
		prev := 0.0
		for _, d := range []int64{64, 128, 512, 2048, 8192} {
			sh := [][]int64{{d, 8192}, {8192, 8192}}
			rate := mmFlops(d, 8192, 8192) / m.KernelTime(ir.MatMul, sh, ir.BF16, mmFlops(d, 8192, 8192))
			if rate < prev {
				t.Errorf("%s: matmul with %d rows at %g FLOP/s, slower than fewer rows (%g)", gpu, d, rate, prev)
			}
			prev = rate
		}
		// The backward GEMMs by the same rule: dy·wᵀ and aᵀ·dy of the large one.
		near(t, gpu+" grad_a", m.KernelTime(ir.MatMulGradA, [][]int64{{8, 4096, 8192}, {8192, 8192}}, ir.BF16, f), got)
		near(t, gpu+" grad_b", m.KernelTime(ir.MatMulGradB, [][]int64{{8, 4096, 8192}, {8, 4096, 8192}}, ir.BF16, f), got)
		// silu of 64 Mi bf16 elements: read and write.
		act := [][]int64{{8, 4096, 2048}}
		near(t, gpu+" silu", m.KernelTime(ir.SiLU, act, ir.BF16, 4*64*(1<<20)), 2*64*(1<<20)*2/m.MemBW)
	}
}

type fakeKernels struct{}

func (fakeKernels) KernelTime(kind ir.OpKind, shapes [][]int64, flops float64) (float64, bool) {
	if kind == ir.MatMul {
		return 1e-3, true
	}
	return 0, false
}

// TestKernelProfileFirst: measured times replace the analytic ones where
// the profile has them.
func TestKernelProfileFirst(t *testing.T) {
	m := presetMachine(t, "A800-80GB")
	sh := [][]int64{{4096, 4096}, {4096, 4096}}
	analytic := m.KernelTime(ir.SiLU, sh[:1], ir.BF16, 1e6)
	m.Kernels = fakeKernels{}
	near(t, "measured matmul", m.KernelTime(ir.MatMul, sh, ir.BF16, mmFlops(4096, 4096, 4096)), 1e-3)
	near(t, "unmeasured silu", m.KernelTime(ir.SiLU, sh[:1], ir.BF16, 1e6), analytic)
}
