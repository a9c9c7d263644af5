package engine_test

import (
	"fmt"
	"math"
	"testing"

	"amspc/codegen"
	"amspc/compiler"
	"amspc/cost"
	"amspc/engine"
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
// 2 nodes x 4 local ranks, with and without sequence parallelism,
// combined with DDP, ZeRO-1, ZeRO-3 and a 2/2/8-like plan over the other
// ranks, trains like one rank (each rank's part of a weight cut from the
// one-rank run's initial weight; the ranks of a tensor-parallel group on
// the same sequences): every step's loss within 1e-5, and bitwise the
// same on a second run. (-short: a third of them.)
func TestTensorParallelTrains(t *testing.T) {
	const steps = 3
	want := train(t, compileShard(t, 1, 1, "shard ddp"), steps)
	n := 0
	for _, c := range []struct{ tp, params, grads, optim string }{
		{"2", "1", "1", "1"},       // DDP
		{"2", "1", "1", "2x2"},     // ZeRO-1
		{"2", "2x2", "2x2", "2x2"}, // ZeRO-3
		{"2", "2", "2", "2x2"},     // 2/2/8-like
		{"4", "1", "1", "1"},
		{"4", "1x2", "1x2", "1x2"},
	} {
		for _, sp := range []bool{false, true} {
			n++
			shard := fmt.Sprintf("shard { tensor = %s, sequence = %v, params = %s, grads = %s, optim = %s }", c.tp, sp, c.params, c.grads, c.optim)
			if testing.Short() && n%3 != 0 {
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
}

// TestSequenceParallelWeights: with sequence parallelism each rank forms
// a norm weight's gradient on its part of the sequence and the parts
// are all-reduced; the optimizer must step on that sum. After two
// steps every weight of rank 0 under tensor = 2, sequence = true is
// within 1e-6 of its value under tensor = 2 alone (AdamW's first steps
// go by the gradient's sign, so a gradient of half the rows moves a
// weight by 2 x lr = 2e-3 where the signs differ: the losses alone
// would hide it).
func TestSequenceParallelWeights(t *testing.T) {
	var got [2]map[string][]float32
	var names []string
	for i, sp := range []bool{false, true} {
		b := compileShard(t, 2, 4, fmt.Sprintf("shard { tensor = 2, sequence = %v, params = 1, grads = 1, optim = 1 }", sp))
		tr := b.Train
		r := &engine.Run{Bundle: b, Seed: 1, Data: &engine.Data{Tokens: corpus(t), SeqLen: int(tr.SeqLen), MicroBatch: int(tr.MicroBatch), Global: int(tr.GlobalBatch)}}
		if err := r.Start(); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := r.Step(); err != nil {
				t.Fatal(err)
			}
		}
		got[i] = map[string][]float32{}
		p := b.Template(0)
		for _, l := range p.Layouts {
			name := p.Buffers[l.P].Name
			x, err := engine.RankBuffer(r, 0, name)
			if err != nil {
				t.Fatal(err)
			}
			got[i][name] = x
			if i == 0 {
				names = append(names, name)
			}
		}
	}
	for _, name := range names {
		a, b := got[0][name], got[1][name]
		if len(a) != len(b) {
			t.Fatalf("%s: %d and %d elements", name, len(a), len(b))
		}
		for j := range a {
			if d := math.Abs(float64(a[j] - b[j])); d > 1e-6 {
				t.Errorf("%s[%d]: %g with sequence parallelism, %g without", name, j, b[j], a[j])
				break
			}
		}
	}
}
