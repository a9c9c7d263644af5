package runtime_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"amspc/compiler"
	"amspc/cost"
	"amspc/frontend"
	"amspc/ir"
	"amspc/runtime"
)

// wide is the wider model of the benchmarks: d 512, 8 layers.
const wide = `model wide {
  dim vocab = 256
  dim d = 512
  dim heads = 8
  dim ffn = 1376
  input tokens : i32[batch, seq]
  input targets : i32[batch, seq]
  param tok_emb : [vocab, d]
  x = embed(tokens, tok_emb)
  repeat 8 {
    param attn_norm : [d] init ones
    param wq : [d, d]
    param wk : [d, d]
    param wv : [d, d]
    param wo : [d, d]
    param ffn_norm : [d] init ones
    param w1 : [d, ffn]
    param w2 : [ffn, d]
    param w3 : [d, ffn]
    h = rmsnorm(x, attn_norm, eps=1e-5)
    q = rope(h @ wq, heads=heads, theta=10000)
    k = rope(h @ wk, heads=heads, theta=10000)
    v = h @ wv
    x = x + attention(q, k, v, heads=heads, causal=true) @ wo
    h = rmsnorm(x, ffn_norm, eps=1e-5)
    x = x + (silu(h @ w1) * (h @ w3)) @ w2
  }
  param norm : [d] init ones
  param lm_head : [d, vocab]
  loss = cross_entropy(rmsnorm(x, norm, eps=1e-5) @ lm_head, targets)
}
cluster { nodes = 2 gpus_per_node = 4 gpu = "cpu" }
train { seq_len = 64 micro_batch = 1 global_batch = 16 precision = fp32 }
`

// benchTrain measures tokens/s of training a model on 8 local ranks
// under a plan, and the ratio of measured to predicted step time.
func benchTrain(b *testing.B, name string, src []byte, f cost.Factors) {
	job, err := frontend.Load(frontend.Source{Name: name, Text: src}, frontend.Source{Name: "s.amsp", Text: []byte("shard auto")})
	if err != nil {
		b.Fatal(err)
	}
	c, err := compiler.Compile(job, cost.Uniform("", f, ir.RecomputeNone, job.Train.MicroBatch), compiler.Options{Depth: 2})
	if err != nil {
		b.Fatal(err)
	}
	tl := c.Timeline
	r := &runtime.Run{Bundle: c.Bundle, Seed: 1,
		Data: &runtime.Data{Tokens: corpus(b), SeqLen: int(job.Train.SeqLen), MicroBatch: int(job.Train.MicroBatch), Global: int(job.Train.GlobalBatch)}}
	if err := r.Start(); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for b.Loop() {
		if _, err := r.Step(); err != nil {
			b.Fatal(err)
		}
	}
	step := time.Since(start).Seconds() / float64(b.N)
	b.ReportMetric(float64(job.Train.TokensPerStep())/step, "tokens/s")
	b.ReportMetric(step/tl.Step, "measured/predicted")
}

// BenchmarkTrain: `go test ./runtime -run '^$' -bench Train -benchtime 3x`.
func BenchmarkTrain(b *testing.B) {
	tiny, err := os.ReadFile("../testdata/models/tiny.amsp")
	if err != nil {
		b.Fatal(err)
	}
	F := func(a, c int) ir.Factor { return ir.Factor{S0: a, S1: c} }
	plans := []struct {
		name string
		f    cost.Factors
	}{
		{"ddp", cost.Factors{P: F(1, 1), G: F(1, 1), OS: F(1, 1)}},
		{"zero3", cost.Factors{P: F(4, 2), G: F(4, 2), OS: F(4, 2)}},
		{"2-2-8", cost.Factors{P: F(2, 1), G: F(2, 1), OS: F(4, 2)}},
	}
	for _, p := range plans {
		b.Run(fmt.Sprintf("tiny/%s", p.name), func(b *testing.B) { benchTrain(b, "tiny", tiny, p.f) })
	}
	for _, p := range plans {
		b.Run(fmt.Sprintf("wide/%s", p.name), func(b *testing.B) { benchTrain(b, "wide", []byte(wide), p.f) })
	}
}
