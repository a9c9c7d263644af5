package compiler_test

import (
	"strings"
	"testing"

	"amspc/compiler"
	"amspc/cost"
	"amspc/internal/testjob"
	"amspc/ir"
	"amspc/passes"
)

// TestFuseTrainsBitwise: the fuse pass changes how tiny's gated MLP runs
// (one swiglu and one swiglu_grad instead of silu, mul, two muls and
// silu_grad), not what it computes. In fp32 the fused kernels round as
// the ops they replace, so tiny trains to the same bits with fuse on and
// off, on one rank and under ZeRO-3 on 2 x 4; and the fused program no
// longer keeps silu's output for backward, so its simulated peak is
// lower.
func TestFuseTrainsBitwise(t *testing.T) {
	F := func(a, b int) ir.Factor { return ir.Factor{S0: a, S1: b} }
	for _, c := range []struct {
		cluster string
		f       cost.Factors
	}{
		{`cluster { nodes = 1 gpus_per_node = 1 gpu = "cpu" }`, cost.Factors{P: F(1, 1), G: F(1, 1), OS: F(1, 1)}},
		{`cluster { nodes = 2 gpus_per_node = 4 gpu = "cpu" }`, cost.Factors{P: F(4, 2), G: F(4, 2), OS: F(4, 2)}},
	} {
		job := testjob.Load(t, "tiny", c.cluster+"\nshard auto")
		p := cost.Uniform("", c.f, job.Train.Recompute, job.Train.MicroBatch)
		var results [2]*compiler.Result
		for i, off := range [][]string{nil, {"fuse"}} {
			r, err := compiler.Compile(job, p, compiler.Options{Passes: passes.Options{Check: true, Off: off}, Depth: 2})
			if err != nil {
				t.Fatalf("%v, %v off: %v", c.f, off, err)
			}
			results[i] = r
		}
		fused, unfused := results[0], results[1]
		text := programText(fused.Bundle)
		if !strings.Contains(text, "kernel swiglu ") || !strings.Contains(text, "kernel swiglu_grad ") || strings.Contains(text, "kernel silu") {
			t.Errorf("%v: the fused program does not run swiglu and swiglu_grad in place of silu:\n%s", c.f, text)
		}
		on, off := train(t, fused.Bundle, 4), train(t, unfused.Bundle, 4)
		for i := range on {
			if on[i] != off[i] {
				t.Errorf("%v step %d: loss %.17g fused, %.17g unfused", c.f, i, on[i], off[i])
			}
		}
		if fp, up := fused.Timeline.PeakBytes, unfused.Timeline.PeakBytes; fp >= up {
			t.Errorf("%v: fused peak %.0f bytes, unfused %.0f: fusing keeps less", c.f, fp, up)
		}
	}
}
