//go:build cgo

package cudalib

import (
	"math"
	"testing"
	"time"

	"amspc/cost"
	"amspc/engine"
	"amspc/ir"
)

// TestGPUGraphSteps: on the GPU, tiny in fp32 and bf16 on one rank,
// its second step captured as a CUDA graph and replayed for the steps
// after (the default), trains to the bits of the run that enqueues every
// step (DeviceOptions.Eager); it logs the mean time of the steps after
// the capture either way.
func TestGPUGraphSteps(t *testing.T) {
	l, _ := openGPU(t)
	F := func(a, b int) ir.Factor { return ir.Factor{S0: a, S1: b} }
	one := cost.Factors{P: F(1, 1), G: F(1, 1), OS: F(1, 1)}
	bf16 := `train { seq_len = 64 micro_batch = 2 global_batch = 8 precision = bf16
  optimizer = adamw(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1) }`
	const n = 8
	for _, extra := range [][]string{nil, {bf16}} {
		var losses [2][]float64
		var took [2]time.Duration
		for i, o := range []engine.DeviceOptions{{Eager: true}, {}} {
			var steps []time.Duration
			losses[i], steps = gpuSteps(t, l, compileModel(t, "tiny", 1, 1, one, extra...), o, n)
			for _, d := range steps[2:] {
				took[i] += d
			}
		}
		for i := range losses[0] {
			if math.Float64bits(losses[0][i]) != math.Float64bits(losses[1][i]) {
				t.Errorf("%v step %d: loss %.17g replayed, %.17g eager", extra, i+1, losses[1][i], losses[0][i])
			}
		}
		t.Logf("graphs: tiny %v: a step %.3f ms eager, %.3f ms replayed (mean of steps 3-%d); losses %.9g", extra, took[0].Seconds()*1e3/(n-2), took[1].Seconds()*1e3/(n-2), n, losses[1])
	}
}
