package engine_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"amspc/codegen"
	"amspc/compiler"
	"amspc/cost"
	"amspc/engine"
	"amspc/internal/testjob"
	"amspc/ir"
	"amspc/passes"
	"amspc/planner"
)

// compileModel compiles an example model for nodes x gpus under f.
func compileModel(t testing.TB, model string, nodes, gpus int, f cost.Factors, extra ...string) *codegen.Bundle {
	t.Helper()
	var groups [cost.NumGroups]cost.Factors
	for g := range groups {
		groups[g] = f
	}
	return compileGroups(t, model, nodes, gpus, groups, extra...)
}

// compileGroups compiles an example model for nodes x gpus with factors
// per layer group.
func compileGroups(t testing.TB, model string, nodes, gpus int, groups [cost.NumGroups]cost.Factors, extra ...string) *codegen.Bundle {
	t.Helper()
	cl := fmt.Sprintf("cluster { nodes = %d gpus_per_node = %d gpu = \"cpu\" }\nshard auto", nodes, gpus)
	job := testjob.Load(t, model, append([]string{cl}, extra...)...)
	cfg := cost.DefaultConfig
	cfg.BucketBytes = 64 << 10
	p := cost.Uniform("", groups[0], job.Train.Recompute, job.Train.MicroBatch)
	p.Groups = groups
	r, err := compiler.Compile(job, p, compiler.Options{Passes: passes.Options{Check: true}, Config: cfg, Depth: 2})
	if err != nil {
		t.Fatalf("%s %v: %v", model, groups, err)
	}
	return r.Bundle
}

// TestModelsTrainLikeOneRank: models whose params are shared between
// stages (a weight used twice in a block, one used by every block, one
// used by the embedding and the head), that have no repeat block, or
// that are Gemma-shaped (scaled embeddings, multi-query attention, GELU's
// tanh approximation, a tied head) train
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
	for _, model := range []string{"shared", "norepeat", "tied", "gemma"} {
		ref := train(t, compileModel(t, model, 1, 1, cost.Factors{P: one, G: one, OS: one}), steps)
		for _, rc := range []string{"none", "selective", "full"} {
			var extra []string
			if rc != "none" {
				extra = []string{`train { seq_len = 64 micro_batch = 2 global_batch = 32 precision = fp32
  optimizer = adamw(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1) recompute = ` + rc + ` }`}
			}
			// Uniform plans, and one whose groups differ, so a param tied
			// across stages is gathered under its owner's factors.
			var bundles []*codegen.Bundle
			for _, f := range plans {
				bundles = append(bundles, compileModel(t, model, 2, 4, f, extra...))
			}
			mixed := [cost.NumGroups]cost.Factors{
				cost.Embedding: {P: F(4, 2), G: F(4, 2), OS: F(4, 2)},
				cost.Blocks:    {P: F(2, 1), G: F(2, 1), OS: F(4, 2)},
				cost.Head:      {P: F(1, 1), G: F(1, 1), OS: F(1, 1)},
			}
			bundles = append(bundles, compileGroups(t, model, 2, 4, mixed, extra...))
			for _, b := range bundles {
				got := train(t, b, steps)
				for i := range ref {
					if d := math.Abs(got[i]-ref[i]) / math.Abs(ref[i]); d > 1e-5 {
						t.Errorf("%s plan %s recompute %s step %d: loss %.9g, single rank %.9g (relative difference %.2g)", model, b.Plan, rc, i, got[i], ref[i], d)
						break
					}
				}
			}
		}
	}
}

// TestEveryPlanEveryMicroBatch trains tiny on 2 nodes x 4 ranks under
// every valid (s_p, s_g, s_os) and every baseline, crossed with
// micro-batch sizes 1, 2 and 4 (M = 4, 2, 1) and recompute none and full,
// each compiled as amspc compile does (the cluster's network decides
// which collectives are lowered hierarchically), and compares each loss
// curve with a single-rank run of the same global batch: at most 1e-5
// relative at every step over 20 steps (-short: 3 steps, every preset and
// every sixth triple).
func TestEveryPlanEveryMicroBatch(t *testing.T) {
	steps := 20
	if testing.Short() {
		steps = 3
	}
	one := ir.Factor{S0: 1, S1: 1}
	ref := train(t, compileModel(t, "tiny", 1, 1, cost.Factors{P: one, G: one, OS: one}), steps)
	dp := ir.Factor{S0: 4, S1: 2}
	var plans []cost.Factors
	for i, f := range planner.Space(dp) {
		if !testing.Short() || i%6 == 0 {
			plans = append(plans, f)
		}
	}
	for _, b := range planner.Baselines(dp, 4) {
		plans = append(plans, b.Factors)
	}
	hier := 0
	for _, mb := range []int64{1, 2, 4} {
		for _, rc := range []string{"none", "full"} {
			tr := fmt.Sprintf(`train { seq_len = 64 micro_batch = %d global_batch = 32 precision = fp32
  optimizer = adamw(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1) recompute = %s }`, mb, rc)
			for _, f := range plans {
				b := compileModel(t, "tiny", 2, 4, f, tr)
				hier += hierarchical(b)
				got := train(t, b, steps)
				for i := range ref {
					if d := math.Abs(got[i]-ref[i]) / math.Abs(ref[i]); d > 1e-5 {
						t.Errorf("%v micro-batch %d recompute %s step %d: loss %.9g, single rank %.9g (relative difference %.2g)", f, mb, rc, i, got[i], ref[i], d)
						break
					}
				}
			}
		}
	}
	if hier == 0 {
		t.Errorf("no plan lowered a collective hierarchically")
	}
}

// hierarchical counts the collectives across nodes that a hierarchical
// lowering made (one GPU in each of several nodes).
func hierarchical(b *codegen.Bundle) int {
	n := 0
	p := b.Template(0)
	for s := range p.Streams {
		for _, in := range p.Streams[s] {
			mesh := in.Group.Outer.Div(in.Group.Inner)
			if in.Op == ir.Collective && mesh.S0 == 1 && mesh.S1 > 1 && b.Topo.GPUsPerNode > 1 {
				n++
			}
		}
	}
	return n
}

// TestSelectiveRecompute: selective recompute (the attention cores
// computed again for backward) trains tiny and the GQA model to the
// same bits as no recompute, runs one more attention kernel per layer
// and micro-batch, and holds less at its measured peak; full recompute
// holds less still.
func TestSelectiveRecompute(t *testing.T) {
	one := ir.Factor{S0: 1, S1: 1}
	for _, model := range []string{"tiny", "shared"} {
		var losses [3][]float64
		var peaks [3]int64
		var attention [3]int
		for i, rc := range []string{"none", "selective", "full"} {
			b := compileModel(t, model, 1, 1, cost.Factors{P: one, G: one, OS: one}, `train { seq_len = 64 micro_batch = 2 global_batch = 4 precision = fp32
  optimizer = adamw(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1) recompute = `+rc+` }`)
			attention[i] = strings.Count(engineProgramText(b), "kernel attention ")
			r := start(t, b)
			losses[i] = steps(t, r, 3)
			peaks[i] = r.PeakBytes()[0]
		}
		for s := range losses[0] {
			if losses[1][s] != losses[0][s] {
				t.Errorf("%s step %d: loss %.17g under selective recompute, %.17g under none", model, s+1, losses[1][s], losses[0][s])
			}
		}
		if attention[1] != 2*attention[0] {
			t.Errorf("%s: %d attention kernels under selective recompute, %d under none (want twice as many)", model, attention[1], attention[0])
		}
		if !(peaks[2] < peaks[1] && peaks[1] < peaks[0]) {
			t.Errorf("%s: peaks none %d, selective %d, full %d bytes: want each smaller than the last", model, peaks[0], peaks[1], peaks[2])
		}
		t.Logf("%s: measured peaks none %d, selective %d, full %d bytes", model, peaks[0], peaks[1], peaks[2])
	}
}

// TestSchedulesAndClippingTrainLikeOneRank: under a learning-rate
// schedule (cosine, linear and WSD, each with warmup) and with the
// gradients clipped by their global norm (at micro-batches of 2 and 1),
// every preset plan of tiny on 2 x 4 ranks trains like one rank, within
// 1e-5 at every step, and finds the single rank's gradient norm; the
// schedule and the clipping are applied: their losses are not those
// without them.
func TestSchedulesAndClippingTrainLikeOneRank(t *testing.T) {
	const steps = 8
	F := func(a, b int) ir.Factor { return ir.Factor{S0: a, S1: b} }
	one := F(1, 1)
	section := func(mb int, extra string) string {
		return fmt.Sprintf(`train { seq_len = 64 micro_batch = %d global_batch = 32 precision = fp32 steps = 8
  optimizer = adamw(lr=3e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1) %s }`, mb, extra)
	}
	plain := trainNorms(t, compileModel(t, "tiny", 1, 1, cost.Factors{P: one, G: one, OS: one}, section(2, "")), steps)
	for _, c := range []struct {
		extra string
		mb    int
	}{
		{"lr_schedule = cosine(warmup=2, min_lr=1e-4)", 2},
		{"lr_schedule = linear(warmup=3, min_lr=0)", 2},
		{"lr_schedule = wsd(warmup=1, decay=3, min_lr=3e-4)", 2},
		{"clip_grad_norm = 0.3", 2},
		{"clip_grad_norm = 0.3 lr_schedule = cosine(warmup=2, min_lr=1e-4)", 1},
	} {
		ref := trainNorms(t, compileModel(t, "tiny", 1, 1, cost.Factors{P: one, G: one, OS: one}, section(c.mb, c.extra)), steps)
		if ref.loss[steps-1] == plain.loss[steps-1] {
			t.Errorf("%s: the last loss %.9g is the plain run's", c.extra, ref.loss[steps-1])
		}
		clips := strings.Contains(c.extra, "clip")
		if clips && (len(ref.norm) != steps || slices.Max(ref.norm) <= 0.3) {
			t.Errorf("%s: gradient norms %v: want one a step, some above the clip", c.extra, ref.norm)
		}
		for _, b := range planner.Baselines(F(4, 2), 4) {
			got := trainNorms(t, compileModel(t, "tiny", 2, 4, b.Factors, section(c.mb, c.extra)), steps)
			for i := range ref.loss {
				if d := math.Abs(got.loss[i]-ref.loss[i]) / math.Abs(ref.loss[i]); d > 1e-5 {
					t.Errorf("%s %s step %d: loss %.9g, single rank %.9g (relative difference %.2g)", c.extra, b.Name, i, got.loss[i], ref.loss[i], d)
					break
				}
			}
			for i := range ref.norm {
				if d := math.Abs(got.norm[i]-ref.norm[i]) / ref.norm[i]; d > 1e-5 {
					t.Errorf("%s %s step %d: gradient norm %.9g, single rank %.9g", c.extra, b.Name, i, got.norm[i], ref.norm[i])
					break
				}
			}
		}
	}
}

// normsRun is a run's losses and, where it clips, gradient norms.
type normsRun struct{ loss, norm []float64 }

func trainNorms(t *testing.T, b *codegen.Bundle, steps int) normsRun {
	t.Helper()
	tr := b.Train
	r := &engine.Run{Bundle: b, Seed: 1, Data: &engine.Data{Tokens: corpus(t), SeqLen: int(tr.SeqLen), MicroBatch: int(tr.MicroBatch), Global: int(tr.GlobalBatch)}}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	var out normsRun
	for i := range steps {
		l, err := r.Step()
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		out.loss = append(out.loss, l)
		if n, ok := r.GradNorm(); ok {
			out.norm = append(out.norm, n)
		}
	}
	return out
}
