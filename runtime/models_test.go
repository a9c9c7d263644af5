package runtime_test

import (
	"fmt"
	"math"
	"testing"

	"amspc/codegen"
	"amspc/compiler"
	"amspc/cost"
	"amspc/internal/testjob"
	"amspc/ir"
	"amspc/passes"
	"amspc/planner"
)

// compileModel compiles an example model for nodes x gpus under f.
func compileModel(t testing.TB, model string, nodes, gpus int, f cost.Factors, extra ...string) *codegen.Bundle {
	t.Helper()
	cl := fmt.Sprintf("cluster { nodes = %d gpus_per_node = %d gpu = \"cpu\" }\nshard auto", nodes, gpus)
	job := testjob.Load(t, model, append([]string{cl}, extra...)...)
	cfg := cost.DefaultConfig
	cfg.BucketBytes = 64 << 10
	r, err := compiler.Compile(job, cost.Uniform("", f, job.Train.Recompute, job.Train.MicroBatch),
		compiler.Options{Passes: passes.Options{Check: true}, Config: cfg, Depth: 2})
	if err != nil {
		t.Fatalf("%s %v: %v", model, f, err)
	}
	return r.Bundle
}

// TestModelsTrainLikeOneRank: models whose params are shared between
// stages (a weight used twice in a block, one used by every block, one
// used by the embedding and the head) or that have no repeat block train
// under every preset and a mixed triple like a single rank, with and
// without full recompute.
func TestModelsTrainLikeOneRank(t *testing.T) {
	steps := 6
	if testing.Short() {
		steps = 3
	}
	F := func(a, b int) ir.Factor { return ir.Factor{S0: a, S1: b} }
	one := F(1, 1)
	dp := F(4, 2)
	plans := []cost.Factors{{P: F(2, 1), G: F(2, 1), OS: F(4, 2)}, {P: F(1, 1), G: F(4, 1), OS: F(4, 2)}}
	for _, b := range planner.Baselines(dp, 4) {
		plans = append(plans, b.Factors)
	}
	full := `train { seq_len = 64 micro_batch = 2 global_batch = 32 precision = fp32
  optimizer = adamw(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1) recompute = full }`
	for _, model := range []string{"shared", "norepeat"} {
		ref := train(t, compileModel(t, model, 1, 1, cost.Factors{P: one, G: one, OS: one}), steps)
		for _, rc := range []string{"none", "full"} {
			var extra []string
			if rc == "full" {
				extra = []string{full}
			}
			for _, f := range plans {
				got := train(t, compileModel(t, model, 2, 4, f, extra...), steps)
				for i := range ref {
					if d := math.Abs(got[i]-ref[i]) / math.Abs(ref[i]); d > 1e-5 {
						t.Errorf("%s %v recompute %s step %d: loss %.9g, single rank %.9g (relative difference %.2g)", model, f, rc, i, got[i], ref[i], d)
						break
					}
				}
			}
		}
	}
}
