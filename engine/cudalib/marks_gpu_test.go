//go:build cgo

package cudalib

import (
	"testing"

	"amspc/ir"
	"amspc/kernels/gpu"
)

// TestGPUSpinMarks: on the GPU, spin_ns holds its stream for its time
// and the marks around it say so: marks on the gather stream before and
// after a 2 ms spin are 2 to 50 ms apart, a mark on the compute stream
// while it spins is not held back by it (the streams overlap), and
// ResetMarks numbers from 0 again.
func TestGPUSpinMarks(t *testing.T) {
	_, g, _ := openStreamGPU(t)
	for round := range 2 {
		g.ResetMarks()
		const ns = 2e6
		l := gpu.Spin(ns)
		var m [4]int
		steps := []func() error{
			func() (err error) { m[0], err = g.Mark(ir.CommGather); return },
			func() error { return g.Launch(ir.CommGather, &l, []uint64{0}) },
			func() (err error) { m[1], err = g.Mark(ir.CommGather); return },
			func() (err error) { m[2], err = g.Mark(ir.Compute); return },
			g.Sync,
		}
		for _, f := range steps {
			if err := f(); err != nil {
				t.Fatal(err)
			}
		}
		if m[0] != 0 || m[1] != 1 || m[2] != 2 {
			t.Fatalf("round %d: marks numbered %v", round, m[:3])
		}
		times, err := g.MarkTimes()
		if err != nil {
			t.Fatal(err)
		}
		held := times[m[1]] - times[m[0]]
		if held < ns/1e9 || held > 50e-3 {
			t.Errorf("round %d: the spin of %g ms held its stream %.3f ms", round, ns/1e6, held*1e3)
		}
		if times[m[2]] >= times[m[1]] {
			t.Errorf("round %d: the compute stream's mark (%.3f ms) waited for the gather stream's spin (%.3f ms)", round, times[m[2]]*1e3, times[m[1]]*1e3)
		}
		t.Logf("spins: %.3f ms for %g ms", held*1e3, ns/1e6)
	}
}
