package runtime_test

import (
	"fmt"
	"math"
	"os"
	"testing"

	"amspc/codegen"
	"amspc/cost"
	"amspc/frontend"
	"amspc/ir"
	"amspc/passes"
	"amspc/planner"
	"amspc/runtime"
	"amspc/scheduler"
)

// compile builds tiny's bundle for a cluster of nodes x gpus under f.
func compile(t testing.TB, nodes, gpus int, f cost.Factors) *codegen.Bundle {
	t.Helper()
	src, err := os.ReadFile("../testdata/models/tiny.amsp")
	if err != nil {
		t.Fatal(err)
	}
	cl := fmt.Sprintf("cluster { nodes = %d gpus_per_node = %d gpu = \"cpu\" }\nshard auto", nodes, gpus)
	job, err := frontend.Load(frontend.Source{Name: "tiny.amsp", Text: src}, frontend.Source{Name: "c.amsp", Text: []byte(cl)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := passes.Run(job, passes.Options{})
	if err != nil {
		t.Fatal(err)
	}
	topo := codegen.Topology{GPUsPerNode: gpus, Nodes: nodes}
	M, err := job.Train.MicroBatches(topo.Ranks())
	if err != nil {
		t.Fatal(err)
	}
	prog, err := scheduler.Build(s, cost.Uniform("", f, ir.RecomputeNone, job.Train.MicroBatch), topo, int(M), scheduler.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &codegen.Bundle{Model: "tiny", Topo: topo, Micro: int(M), Templates: []codegen.Program{*prog}}
}

func corpus(t testing.TB) []int32 {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int32, len(b))
	for i, c := range b {
		out[i] = int32(c)
	}
	return out
}

func train(t testing.TB, b *codegen.Bundle, steps int) []float64 {
	t.Helper()
	r := &runtime.Run{Bundle: b, Seed: 1, Data: &runtime.Data{Tokens: corpus(t), SeqLen: 64, MicroBatch: 2, Global: 32}}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	var losses []float64
	for i := 0; i < steps; i++ {
		l, err := r.Step()
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		losses = append(losses, l)
	}
	return losses
}

// TestEveryPlanTrainsLikeOneRank trains tiny on 2 nodes x 4 ranks under
// every valid (s_p, s_g, s_os) and every baseline, and compares each loss
// curve with a single-rank run of the same global batch.
func TestEveryPlanTrainsLikeOneRank(t *testing.T) {
	steps := 20
	if testing.Short() {
		steps = 5
	}
	one := ir.Factor{S0: 1, S1: 1}
	ref := train(t, compile(t, 1, 1, cost.Factors{P: one, G: one, OS: one}), steps)
	dp := ir.Factor{S0: 4, S1: 2}
	plans := planner.Space(dp)
	for _, b := range planner.Baselines(dp, 4) {
		plans = append(plans, b.Factors)
	}
	for _, f := range plans {
		got := train(t, compile(t, 2, 4, f), steps)
		for i := range ref {
			if d := math.Abs(got[i]-ref[i]) / math.Abs(ref[i]); d > 1e-5 {
				t.Errorf("%v step %d: loss %.9g, single rank %.9g (relative difference %.2g)", f, i, got[i], ref[i], d)
				break
			}
		}
	}
	t.Logf("single-rank losses: %.4f", ref)
}
