package engine_test

import (
	"math"
	"os"
	"strings"
	"testing"

	"amspc/codegen"
	"amspc/cost"
	"amspc/engine"
	"amspc/ir"
	"amspc/simulator"
)

// compile compiles tiny for a cluster of nodes x gpus under f.
func compile(t testing.TB, nodes, gpus int, f cost.Factors, extra ...string) *codegen.Bundle {
	t.Helper()
	return compileModel(t, "tiny", nodes, gpus, f, extra...)
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

// train trains a bundle on the README for steps steps, with the data
// windows its train section says.
func train(t testing.TB, b *codegen.Bundle, steps int) []float64 {
	t.Helper()
	tr := b.Train
	r := &engine.Run{Bundle: b, Seed: 1, Data: &engine.Data{Tokens: corpus(t), SeqLen: int(tr.SeqLen), MicroBatch: int(tr.MicroBatch), Global: int(tr.GlobalBatch)}}
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

// TestRecomputeIsExact: full recompute runs the same kernels on the same
// values, so the losses are bitwise those of the plan without it.
func TestRecomputeIsExact(t *testing.T) {
	F := func(a, b int) ir.Factor { return ir.Factor{S0: a, S1: b} }
	full := `train { seq_len = 64 micro_batch = 2 global_batch = 32 precision = fp32
  optimizer = adamw(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1) recompute = full }`
	for _, f := range []cost.Factors{
		{P: F(2, 1), G: F(2, 1), OS: F(4, 2)},
		{P: F(4, 2), G: F(4, 2), OS: F(4, 2), Secondary: F(4, 1)},
		{P: F(1, 1), G: F(1, 1), OS: F(1, 1)},
	} {
		want := train(t, compile(t, 2, 4, f), 3)
		got := train(t, compile(t, 2, 4, f, full), 3)
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%v step %d: recompute loss %.17g, without %.17g", f, i, got[i], want[i])
			}
		}
	}
}

// TestFailingRankStopsAll: a token outside the vocabulary on one rank's
// data fails that rank's embedding; the error names the op, the layer
// stage and the source position, and every other rank stops instead of
// hanging in its next collective.
func TestFailingRankStopsAll(t *testing.T) {
	F := func(a, b int) ir.Factor { return ir.Factor{S0: a, S1: b} }
	tokens := corpus(t)
	tokens[5*64+3] = 300 // in window 5: rank 2's second sequence of step 0
	r := &engine.Run{Bundle: compile(t, 2, 4, cost.Factors{P: F(2, 1), G: F(2, 1), OS: F(4, 2)}), Seed: 1,
		Data: &engine.Data{Tokens: tokens, SeqLen: 64, MicroBatch: 2, Global: 32}}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	_, err := r.Step()
	if err == nil {
		t.Fatal("a bad token went through")
	}
	for _, want := range []string{"embed", "in embedding", "tiny.amsp:15:7", "300"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// TestInfStopsTheRun: a learning rate that overflows float32 makes the
// optimizer produce Inf; the run stops at that kernel, naming it.
func TestInfStopsTheRun(t *testing.T) {
	F := func(a, b int) ir.Factor { return ir.Factor{S0: a, S1: b} }
	huge := `train { seq_len = 64 micro_batch = 2 global_batch = 32 precision = fp32
  optimizer = adamw(lr=1e39, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0) }`
	r := &engine.Run{Bundle: compile(t, 2, 4, cost.Factors{P: F(1, 1), G: F(1, 1), OS: F(4, 2)}, huge), Seed: 1,
		Data: &engine.Data{Tokens: corpus(t), SeqLen: 64, MicroBatch: 2, Global: 32}}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	_, err := r.Step()
	if err == nil || !strings.Contains(err.Error(), "adamw") || !strings.Contains(err.Error(), "Inf") {
		t.Fatalf("error %v, want adamw producing Inf", err)
	}
}

// TestRepeatIsBitwise: a second run of the same plan gives the same
// losses bit for bit (fixed reduction orders, no scheduling-dependent
// arithmetic).
func TestRepeatIsBitwise(t *testing.T) {
	F := func(a, b int) ir.Factor { return ir.Factor{S0: a, S1: b} }
	f := cost.Factors{P: F(2, 1), G: F(4, 2), OS: F(4, 2)}
	a := train(t, compile(t, 2, 4, f), 4)
	b := train(t, compile(t, 2, 4, f), 4)
	for i := range a {
		if a[i] != b[i] {
			t.Errorf("step %d: %.17g then %.17g", i, a[i], b[i])
		}
	}
}

// TestBF16Trains: under bf16 mixed precision (bf16 P, G and activations
// stored as bf16, fp32 master and Adam states) tiny trains: the loss falls,
// a repeat is bitwise identical, and it stays near the single-rank bf16
// run (bf16 rounding after sums in other orders is not exact).
func TestBF16Trains(t *testing.T) {
	F := func(a, b int) ir.Factor { return ir.Factor{S0: a, S1: b} }
	bf16 := `train { seq_len = 64 micro_batch = 2 global_batch = 32 precision = bf16
  optimizer = adamw(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1) }`
	f := cost.Factors{P: F(2, 1), G: F(2, 1), OS: F(4, 2)}
	a := train(t, compile(t, 2, 4, f, bf16), 5)
	b := train(t, compile(t, 2, 4, f, bf16), 5)
	one := ir.Factor{S0: 1, S1: 1}
	ref := train(t, compile(t, 1, 1, cost.Factors{P: one, G: one, OS: one}, bf16), 5)
	for i := range a {
		if a[i] != b[i] {
			t.Errorf("step %d: repeat differs: %.17g vs %.17g", i, a[i], b[i])
		}
		if d := math.Abs(a[i]-ref[i]) / ref[i]; d > 1e-2 {
			t.Errorf("step %d: loss %.6g, single-rank bf16 %.6g", i, a[i], ref[i])
		}
	}
	if !(a[4] < a[0]) {
		t.Errorf("bf16 losses do not fall: %v", a)
	}
	t.Logf("bf16 losses %.4f, single rank %.4f", a, ref)
}

// copyingWorld is a LocalWorld whose Comms only have Comm's methods: every
// all-gather copies into each member's own buffer, as across processes.
type copyingWorld struct{ *engine.LocalWorld }

func (w copyingWorld) Comm(r int) engine.Comm { return struct{ engine.Comm }{w.LocalWorld.Comm(r)} }

// TestSharedGathersAreExact: local ranks reading one shared buffer per
// parameter gather train bitwise like ranks with a copy each, on plans
// that gather parameters in one level (2x1) and in two (across nodes,
// then inside: 4x2, and ZeRO++'s from its secondary shard); a plan that
// gathers no parameters has nothing to share. Likewise the ranks that
// share their packings of replicated weights (ZeRO-1 and -2: gathered
// whole into every rank's copy; every use checks the copy is the one
// packed, replica.go; a rank is done with a packing after its last use
// in the step, and none is alive after it) against ranks that pack their own; DDP, whose optimizer
// writes every copy whole, shares them from that write on.
// The simulator's model of which products pack their weight
// (simulator.Packings) is what the ranks do: in a steady step, each
// rank's products that packed or first used a shared packing are the
// ones it names, under plans with replicated, gathered and shared
// weights, micro-batches, recompute and a two-level gather.
func TestPackingsAreTheRuntimes(t *testing.T) {
	F := func(a, b int) ir.Factor { return ir.Factor{S0: a, S1: b} }
	for _, f := range []cost.Factors{
		{P: F(1, 1), G: F(1, 1), OS: F(1, 1)},
		{P: F(1, 1), G: F(1, 1), OS: F(4, 2)},
		{P: F(1, 1), G: F(4, 2), OS: F(4, 2)},
		{P: F(2, 1), G: F(2, 1), OS: F(4, 2)},
		{P: F(4, 2), G: F(4, 2), OS: F(4, 2)},
		{P: F(4, 2), G: F(4, 2), OS: F(4, 2), Secondary: F(4, 1)},
	} {
		b := compile(t, 2, 4, f)
		tr := b.Train
		run := &engine.Run{Bundle: b, Seed: 1, Data: &engine.Data{Tokens: corpus(t), SeqLen: int(tr.SeqLen), MicroBatch: int(tr.MicroBatch), Global: int(tr.GlobalBatch)}}
		if err := run.Start(); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := run.Step(); err != nil {
				t.Fatal(err)
			}
		}
		engine.PackCalls(run)
		if _, err := run.Step(); err != nil {
			t.Fatal(err)
		}
		got := engine.PackCalls(run)
		for r := range b.Topo.Ranks() {
			want, products := 0, 0
			p := b.Template(r)
			packs := simulator.Packings(p)
			for s := range packs {
				for i, ok := range packs[s] {
					if ok {
						want++
					}
					if in := p.Streams[s][i]; in.Op == ir.Kernel && (in.Kern == ir.MatMul || in.Kern == ir.MatMulGradA) {
						products++
					}
				}
			}
			if got[r] != int64(want) {
				t.Errorf("%v rank %d: %d of %d products packed, the simulator says %d", f, r, got[r], products, want)
			}
		}
	}
}

func TestSharedGathersAreExact(t *testing.T) {
	F := func(a, b int) ir.Factor { return ir.Factor{S0: a, S1: b} }
	for _, c := range []struct {
		f        cost.Factors
		shared   bool // whether some gather is shared
		replicas bool // whether some packing of a replicated weight is
	}{
		{cost.Factors{P: F(4, 2), G: F(4, 2), OS: F(4, 2)}, true, false},
		{cost.Factors{P: F(2, 1), G: F(2, 1), OS: F(4, 2)}, true, false},
		{cost.Factors{P: F(4, 2), G: F(4, 2), OS: F(4, 2), Secondary: F(4, 1)}, true, false},
		{cost.Factors{P: F(1, 1), G: F(4, 2), OS: F(4, 2)}, false, true},
		{cost.Factors{P: F(1, 1), G: F(1, 1), OS: F(4, 2)}, false, true},
		{cost.Factors{P: F(1, 1), G: F(1, 1), OS: F(1, 1)}, false, true},
	} {
		b := compile(t, 2, 4, c.f)
		tr := b.Train
		data := func() *engine.Data {
			return &engine.Data{Tokens: corpus(t), SeqLen: int(tr.SeqLen), MicroBatch: int(tr.MicroBatch), Global: int(tr.GlobalBatch)}
		}
		shared := &engine.Run{Bundle: b, Seed: 1, Data: data()}
		copying := &engine.Run{Bundle: b, Seed: 1, Data: data(), World: copyingWorld{engine.NewLocalWorld(b.Topo.Ranks())}}
		for _, r := range []*engine.Run{shared, copying} {
			if err := r.Start(); err != nil {
				t.Fatal(err)
			}
		}
		if n := engine.SharedGatherBuffers(shared); (n > 0) != c.shared {
			t.Errorf("%v: %d buffers filled by shared gathers, want some: %v", c.f, n, c.shared)
		}
		for step := range 3 {
			a, err := shared.Step()
			if err != nil {
				t.Fatal(err)
			}
			want, err := copying.Step()
			if err != nil {
				t.Fatal(err)
			}
			if a != want {
				t.Errorf("%v step %d: loss %.17g with shared gathers, %.17g with copies", c.f, step, a, want)
			}
			if _, _, live := engine.ReplicaPackings(shared); live != 0 {
				t.Errorf("%v step %d: %d packings of replicated weights alive after the step", c.f, step, live)
			}
		}
		if n, early, _ := engine.ReplicaPackings(shared); (n > 0) != c.replicas || (early > 0) != c.replicas {
			t.Errorf("%v: %d packings of replicated weights reused, %d times a rank was done with one after its last use, want some: %v", c.f, n, early, c.replicas)
		}
	}
}
