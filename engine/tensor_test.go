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

// TestTensorParallelCheckpoint: a checkpoint saved under tensor
// parallelism holds each param whole, in its ranks' parts (manifest
// pieces of a part), so it resumes under any plan: saved under tensor =
// 4 after 2 steps and resumed under ZeRO-3 without tensor parallelism,
// and saved under ZeRO-3 and resumed under tensor = 2 with sequence
// parallelism and ZeRO-3, the next 2 steps' losses are within 1e-5 of an
// uninterrupted one-rank run's. And its weights and moments, read whole,
// are within 1e-6 of the one-rank run's after the same steps.
func TestTensorParallelCheckpoint(t *testing.T) {
	one := compileShard(t, 1, 1, "shard ddp")
	want := train(t, one, 4)
	tp4 := compileShard(t, 2, 4, "shard { tensor = 4, params = 1x2, grads = 1x2, optim = 1x2 }")
	zero3 := compileShard(t, 2, 4, "shard zero3")
	tp2sp := compileShard(t, 2, 4, "shard { tensor = 2, sequence = true, params = 2x2, grads = 2x2, optim = 2x2 }")
	for _, c := range []struct {
		name       string
		save, load *codegen.Bundle
	}{{"tp4 -> zero3", tp4, zero3}, {"zero3 -> tp2+sp", zero3, tp2sp}} {
		dir := t.TempDir()
		r := start(t, c.save)
		steps(t, r, 2)
		if err := r.Save(dir); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := resumed(t, c.load, dir, 2)
		for i, l := range got {
			if d := math.Abs(l-want[2+i]) / want[2+i]; d > 1e-5 {
				t.Errorf("%s step %d: loss %.9g, one rank %.9g", c.name, 3+i, l, want[2+i])
			}
		}
	}
	// The weights, whole: the tensor-parallel save against one rank's.
	dirTP, dirOne := t.TempDir(), t.TempDir()
	for _, s := range []struct {
		b   *codegen.Bundle
		dir string
	}{{tp4, dirTP}, {one, dirOne}} {
		r := start(t, s.b)
		steps(t, r, 2)
		if err := r.Save(s.dir); err != nil {
			t.Fatal(err)
		}
	}
	a, b := engine.ReadTensors(t, dirTP), engine.ReadTensors(t, dirOne)
	if len(a) != len(b) {
		t.Fatalf("%d tensors under tensor parallelism, %d on one rank", len(a), len(b))
	}
	for name, x := range b {
		y := a[name]
		if len(y) != len(x) {
			t.Fatalf("%s: %d elements, one rank's %d", name, len(y), len(x))
		}
		for i := range x {
			if math.Abs(float64(x[i]-y[i])) > 1e-6 {
				t.Errorf("%s[%d]: %g under tensor parallelism, %g on one rank", name, i, y[i], x[i])
				break
			}
		}
	}
}
