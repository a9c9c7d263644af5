package infer_test

import (
	"math"
	"os"
	"testing"

	"amspc/compiler"
	"amspc/cost"
	"amspc/engine"
	"amspc/infer"
	"amspc/internal/testjob"
	"amspc/ir"
	"amspc/kernels"
)

func corpus(t *testing.T) []int32 {
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

// initial is a model's params as training starts them (seed 1).
func initial(job *ir.Job) func(string) ([]float32, error) {
	return func(name string) ([]float32, error) {
		v := job.Graph.Lookup(name)
		x := make([]float32, v.Shape.NumElements())
		engine.InitParam(x, v.Init, uint64(job.Train.Seed), name)
		return x, nil
	}
}

// TestLogitsGiveTrainingsLoss: the cross-entropy of infer's logits over
// the first step's global batch is the loss the engine's first step
// reports, from the same initial weights, for the example models: an
// untied head, a tied one (a transpose of a param), Gemma's scaled
// embedding and gelu_tanh, no repeat, and weights shared between layers.
func TestLogitsGiveTrainingsLoss(t *testing.T) {
	one := ir.Factor{S0: 1, S1: 1}
	for _, model := range []string{"tiny", "tied", "gemma", "norepeat", "shared"} {
		job := testjob.Load(t, model, `cluster { nodes = 1 gpus_per_node = 1 gpu = "cpu" }`, "shard auto")
		tr := job.Train
		p := cost.Uniform("", cost.Factors{P: one, G: one, OS: one}, tr.Recompute, tr.MicroBatch)
		res, err := compiler.Compile(job, p, compiler.Options{})
		if err != nil {
			t.Fatal(err)
		}
		tokens := corpus(t)
		run := &engine.Run{Bundle: res.Bundle, Seed: uint64(tr.Seed), Data: &engine.Data{Tokens: tokens, SeqLen: int(tr.SeqLen), MicroBatch: int(tr.MicroBatch), Global: int(tr.GlobalBatch)}}
		if err := run.Start(); err != nil {
			t.Fatal(err)
		}
		want, err := run.Step()
		if err != nil {
			t.Fatal(err)
		}

		m, err := infer.New(job.Graph, initial(job))
		if err != nil {
			t.Fatal(err)
		}
		seq := int(tr.SeqLen)
		var sum float64
		for j := range int(tr.GlobalBatch) {
			w := tokens[j*seq : j*seq+seq+1]
			logits, err := m.NewSession().Feed(w[:seq])
			if err != nil {
				t.Fatal(err)
			}
			l, err := kernels.CrossEntropy(logits, w[1:], seq, m.Vocab())
			if err != nil {
				t.Fatal(err)
			}
			sum += l
		}
		got := sum / float64(tr.GlobalBatch)
		if math.Abs(got-want) > 1e-6*want {
			t.Errorf("%s: loss %.9g from infer's logits, %.9g from the engine's first step", model, got, want)
		}
	}
}

// TestCacheGivesWholeLogits: feeding a text a token at a time (the KV
// cache) gives the logits of feeding it whole, to float32 rounding; and
// a token outside the vocabulary is an error.
func TestCacheGivesWholeLogits(t *testing.T) {
	job := testjob.Load(t, "tiny")
	m, err := infer.New(job.Graph, initial(job))
	if err != nil {
		t.Fatal(err)
	}
	text := corpus(t)[:40]
	whole, err := m.NewSession().Feed(text)
	if err != nil {
		t.Fatal(err)
	}
	s := m.NewSession()
	for _, piece := range [][]int32{text[:7], text[7:8], text[8:30], text[30:]} {
		before := s.Pos()
		got, err := s.Feed(piece)
		if err != nil {
			t.Fatal(err)
		}
		for i, x := range got {
			y := whole[before*m.Vocab()+i]
			if math.Abs(float64(x-y)) > 1e-5*max(1, math.Abs(float64(y))) {
				t.Fatalf("position %d logit %d: %v fed in pieces, %v fed whole", before+i/m.Vocab(), i%m.Vocab(), x, y)
			}
		}
	}
	if _, err := m.NewSession().Feed([]int32{3, 256}); err == nil {
		t.Error("token 256 of a 256-token vocabulary: no error")
	}
}
