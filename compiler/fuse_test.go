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

// TestFuseTrainsBitwise: the fuse pass changes how a gated MLP runs
// (one swiglu or geglu_tanh and one fused gradient instead of the
// activation, a mul, two muls and the activation's gradient), not what it
// computes. In fp32 the fused kernels round as the ops they replace, so
// tiny (swiglu) and the Gemma-style model (geglu_tanh) train to the same
// bits with fuse on and off, on one rank and under ZeRO-3 on 2 x 4; and
// the fused program no longer keeps the activation's output for
// backward, so tiny's simulated peak is lower.
func TestFuseTrainsBitwise(t *testing.T) {
	F := func(a, b int) ir.Factor { return ir.Factor{S0: a, S1: b} }
	for _, c := range []struct {
		model, cluster string
		f              cost.Factors
		fused, act     string
		lowerPeak      bool
	}{
		{"tiny", `cluster { nodes = 1 gpus_per_node = 1 gpu = "cpu" }`, cost.Factors{P: F(1, 1), G: F(1, 1), OS: F(1, 1)}, "swiglu", "silu", true},
		{"tiny", `cluster { nodes = 2 gpus_per_node = 4 gpu = "cpu" }`, cost.Factors{P: F(4, 2), G: F(4, 2), OS: F(4, 2)}, "swiglu", "silu", true},
		{"gemma", `cluster { nodes = 2 gpus_per_node = 4 gpu = "cpu" }`, cost.Factors{P: F(2, 1), G: F(4, 1), OS: F(4, 2)}, "geglu_tanh", "gelu_tanh", false},
	} {
		job := testjob.Load(t, c.model, c.cluster+"\nshard auto")
		p := cost.Uniform("", c.f, job.Train.Recompute, job.Train.MicroBatch)
		var results [2]*compiler.Result
		for i, off := range [][]string{nil, {"fuse"}} {
			r, err := compiler.Compile(job, p, compiler.Options{Passes: passes.Options{Check: true, Off: off}, Depth: 2})
			if err != nil {
				t.Fatalf("%s %v, %v off: %v", c.model, c.f, off, err)
			}
			results[i] = r
		}
		fused, unfused := results[0], results[1]
		text := programText(fused.Bundle)
		if !strings.Contains(text, "kernel "+c.fused+" ") || !strings.Contains(text, "kernel "+c.fused+"_grad ") || strings.Contains(text, "kernel "+c.act+" ") {
			t.Errorf("%s %v: the fused program does not run %s and %s_grad in place of %s:\n%s", c.model, c.f, c.fused, c.fused, c.act, text)
		}
		on, off := train(t, fused.Bundle, 4), train(t, unfused.Bundle, 4)
		for i := range on {
			if on[i] != off[i] {
				t.Errorf("%s %v step %d: loss %.17g fused, %.17g unfused", c.model, c.f, i, on[i], off[i])
			}
		}
		if fp, up := fused.Timeline.PeakBytes, unfused.Timeline.PeakBytes; c.lowerPeak && fp >= up {
			t.Errorf("%s %v: fused peak %.0f bytes, unfused %.0f: fusing keeps less", c.model, c.f, fp, up)
		}
	}
}

// TestFuseCrossEntropyCastBitwise: in bf16, cross-entropy on the bf16
// logits gives the bits of cross-entropy on their fp32 cast (the widening
// is exact, and the gradient is rounded from the same fp32 value), and
// the head's matmul joins it (linear_cross_entropy, in chunks of rows):
// the tied model, whose MLP has no swiglu to fuse, trains to the same
// losses with fuse on and off, and the fused program casts no logits.
func TestFuseCrossEntropyCastBitwise(t *testing.T) {
	job := testjob.Load(t, "tied", `cluster { nodes = 1 gpus_per_node = 2 gpu = "cpu" }
train { seq_len = 64 micro_batch = 2 global_batch = 8 precision = bf16
  optimizer = adamw(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1) }
shard auto`)
	F := func(a, b int) ir.Factor { return ir.Factor{S0: a, S1: b} }
	p := cost.Uniform("", cost.Factors{P: F(2, 1), G: F(2, 1), OS: F(2, 1)}, job.Train.Recompute, job.Train.MicroBatch)
	var losses [2][]float64
	for i, off := range [][]string{nil, {"fuse"}} {
		r, err := compiler.Compile(job, p, compiler.Options{Passes: passes.Options{Check: true, Off: off}, Depth: 2})
		if err != nil {
			t.Fatal(err)
		}
		// The frontend casts the logits at the loss's position.
		logitCasts := 0
		for _, line := range strings.Split(programText(r.Bundle), "\n") {
			if strings.Contains(line, "kernel cast ") && strings.Contains(line, "@tied.amsp:35:") {
				logitCasts++
			}
		}
		if fused := i == 0; fused != (logitCasts == 0) {
			t.Errorf("fuse %v: %d casts of the logits", fused, logitCasts)
		}
		text := programText(r.Bundle)
		if fused, runs := i == 0, strings.Contains(text, "kernel linear_cross_entropy ") && strings.Contains(text, "kernel linear_cross_entropy_grad "); fused != runs {
			t.Errorf("fuse %v: the program runs the linear cross-entropy: %v", fused, runs)
		}
		losses[i] = train(t, r.Bundle, 3)
	}
	for i := range losses[0] {
		if losses[0][i] != losses[1][i] {
			t.Errorf("step %d: loss %.17g fused, %.17g unfused", i+1, losses[0][i], losses[1][i])
		}
	}
}
