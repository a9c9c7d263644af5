package engine_test

import (
	"math"
	"testing"

	"amspc/cost"
	"amspc/engine"
	"amspc/infer"
	"amspc/internal/testjob"
	"amspc/ir"
	"amspc/kernels"
	"amspc/planner"
)

// TestEvalLikeOneRank: evaluating held-out data under every preset plan
// of tiny on 2 x 4 ranks (and with full recompute at micro-batch 1)
// gives one rank's loss within 1e-5, before training and after two
// steps; one rank's first is the loss package infer's logits give for
// those windows; and evaluating changes nothing: the steps after it are
// bitwise those of a run that never evaluated.
func TestEvalLikeOneRank(t *testing.T) {
	F := func(a, b int) ir.Factor { return ir.Factor{S0: a, S1: b} }
	one := F(1, 1)
	tokens := corpus(t)
	heldOut := tokens[len(tokens)*3/4:]
	evalData := func(tr engine.Data) *engine.Data {
		return &engine.Data{Tokens: heldOut, SeqLen: tr.SeqLen, MicroBatch: tr.MicroBatch, Global: tr.Global}
	}
	evals := func(t *testing.T, extra ...string) (func(cost.Factors) []float64, []float64) {
		run := func(f cost.Factors, nodes, gpus int, evaluate bool) ([]float64, []float64) {
			b := compileModel(t, "tiny", nodes, gpus, f, extra...)
			tr := b.Train
			d := engine.Data{Tokens: tokens[:len(tokens)*3/4], SeqLen: int(tr.SeqLen), MicroBatch: int(tr.MicroBatch), Global: int(tr.GlobalBatch)}
			r := &engine.Run{Bundle: b, Seed: 1, Data: &d}
			if err := r.Start(); err != nil {
				t.Fatal(err)
			}
			var ev, losses []float64
			for step := range 4 {
				if evaluate && step%2 == 0 {
					l, err := r.Eval(evalData(d), 2)
					if err != nil {
						t.Fatal(err)
					}
					ev = append(ev, l)
				}
				l, err := r.Step()
				if err != nil {
					t.Fatal(err)
				}
				losses = append(losses, l)
			}
			return ev, losses
		}
		ref, plain := run(cost.Factors{P: one, G: one, OS: one}, 1, 1, true)
		_, without := run(cost.Factors{P: one, G: one, OS: one}, 1, 1, false)
		for i := range plain {
			if plain[i] != without[i] {
				t.Errorf("step %d: loss %.17g after evaluations, %.17g without", i, plain[i], without[i])
			}
		}
		return func(f cost.Factors) []float64 {
			ev, _ := run(f, 2, 4, true)
			return ev
		}, ref
	}
	// The first evaluation from the initial weights, by infer: the
	// cross-entropy of its logits over the two batches' windows.
	job := testjob.Load(t, "tiny")
	m, err := infer.New(job.Graph, func(name string) ([]float32, error) {
		v := job.Graph.Lookup(name)
		x := make([]float32, v.Shape.NumElements())
		engine.InitParam(x, v.Init, uint64(job.Train.Seed), name)
		return x, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	seq, windows := int(job.Train.SeqLen), 2*int(job.Train.GlobalBatch)
	var sum float64
	for w := range windows {
		win := heldOut[w*seq : w*seq+seq+1]
		logits, err := m.NewSession().Feed(win[:seq])
		if err != nil {
			t.Fatal(err)
		}
		l, err := kernels.CrossEntropy(logits, win[1:], seq, m.Vocab())
		if err != nil {
			t.Fatal(err)
		}
		sum += l
	}
	byInfer := sum / float64(windows)
	for _, extra := range [][]string{nil,
		{`train { seq_len = 64 micro_batch = 1 global_batch = 32 precision = fp32
  optimizer = adamw(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1) recompute = full }`}} {
		evalOn, ref := evals(t, extra...)
		if d := math.Abs(ref[0]-byInfer) / byInfer; d > 1e-6 {
			t.Errorf("one rank's first evaluation %.9g, infer's loss of its windows %.9g", ref[0], byInfer)
		}
		for _, base := range planner.Baselines(F(4, 2), 4) {
			got := evalOn(base.Factors)
			for i := range ref {
				if d := math.Abs(got[i]-ref[i]) / ref[i]; d > 1e-5 {
					t.Errorf("%s %v: evaluation %d: loss %.9g, one rank %.9g", base.Name, extra != nil, i, got[i], ref[i])
				}
			}
		}
	}
}
