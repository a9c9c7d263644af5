package engine_test

import (
	"fmt"
	"math"
	"testing"

	"amspc/codegen"
	"amspc/compiler"
	"amspc/cost"
	"amspc/internal/testjob"
	"amspc/passes"
)

// compileShard compiles tiny on nodes x gpus under shard section shard.
func compileShard(t testing.TB, nodes, gpus int, shard string, extra ...string) *codegen.Bundle {
	t.Helper()
	cl := fmt.Sprintf("cluster { nodes = %d gpus_per_node = %d gpu = \"cpu\" }", nodes, gpus)
	job := testjob.Load(t, "tiny", append([]string{cl, shard}, extra...)...)
	plan, _, err := compiler.Choose(job, cost.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := compiler.Compile(job, plan, compiler.Options{Passes: passes.Options{Check: true}, Depth: 2})
	if err != nil {
		t.Fatalf("%s: %v", shard, err)
	}
	return r.Bundle
}

// TestTensorParallelTrains: tiny under tensor parallelism of 2 and 4 on
// 2 nodes x 4 local ranks, combined with DDP, ZeRO-1, ZeRO-3 and a
// 2/2/8-like plan over the other ranks, trains like one rank (each
// rank's part of a weight cut from the one-rank run's initial weight;
// the ranks of a tensor-parallel group on the same sequences): every
// step's loss within 1e-5, and bitwise the same on a second run.
// Sequence parallelism does not compile to a program yet.
func TestTensorParallelTrains(t *testing.T) {
	const steps = 3
	want := train(t, compileShard(t, 1, 1, "shard ddp"), steps)
	for _, c := range []struct{ tp, params, grads, optim string }{
		{"2", "1", "1", "1"},       // DDP
		{"2", "1", "1", "2x2"},     // ZeRO-1
		{"2", "2x2", "2x2", "2x2"}, // ZeRO-3
		{"2", "2", "2", "2x2"},     // 2/2/8-like
		{"4", "1", "1", "1"},
		{"4", "1x2", "1x2", "1x2"},
	} {
		shard := fmt.Sprintf("shard { tensor = %s, params = %s, grads = %s, optim = %s }", c.tp, c.params, c.grads, c.optim)
		if testing.Short() && c.tp == "4" && c.params == "1" {
			continue
		}
		b := compileShard(t, 2, 4, shard)
		got := train(t, b, steps)
		for i := range want {
			if d := math.Abs(got[i]-want[i]) / want[i]; d > 1e-5 {
				t.Errorf("%s step %d: loss %.9g, one rank %.9g (relative %.2g)", shard, i+1, got[i], want[i], d)
			}
		}
		again := train(t, b, steps)
		for i := range got {
			if math.Float64bits(got[i]) != math.Float64bits(again[i]) {
				t.Errorf("%s step %d: %.17g, then %.17g on a repeat", shard, i+1, got[i], again[i])
			}
		}
	}
}
