//go:build cgo

package cudalib

import (
	"time"

	"fmt"
	"math"
	"os"
	"testing"

	"amspc/codegen"
	"amspc/compiler"
	"amspc/cost"
	"amspc/engine"
	"amspc/internal/testjob"
	"amspc/ir"
	"amspc/passes"
)

// compileTiny compiles tiny for nodes x gpus under f.
func compileTiny(t *testing.T, nodes, gpus int, f cost.Factors) *codegen.Bundle {
	t.Helper()
	return compileModel(t, "tiny", nodes, gpus, f)
}

// compileModel compiles an example model (a name under testdata/models)
// for nodes x gpus under f, with extra sections.
func compileModel(t *testing.T, model string, nodes, gpus int, f cost.Factors, extra ...string) *codegen.Bundle {
	t.Helper()
	cl := fmt.Sprintf("cluster { nodes = %d gpus_per_node = %d gpu = \"cpu\" }\nshard auto", nodes, gpus)
	job := testjob.Load(t, model, append([]string{cl}, extra...)...)
	cfg := cost.DefaultConfig
	cfg.BucketBytes = 64 << 10
	r, err := compiler.Compile(job, cost.Uniform("", f, job.Train.Recompute, job.Train.MicroBatch), compiler.Options{Passes: passes.Options{Check: true}, Config: cfg, Depth: 2})
	if err != nil {
		t.Fatal(err)
	}
	return r.Bundle
}

// trainOn trains b for n steps on the README, on GPU 0 when gpu (every
// rank its own context handle on it, collectives staged through the
// host), else on the CPU.
func trainOn(t *testing.T, l *Libs, b *codegen.Bundle, n int, gpu bool) []float64 {
	t.Helper()
	text, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	tokens := make([]int32, len(text))
	for i, c := range text {
		tokens[i] = int32(c)
	}
	tr := b.Train
	r := &engine.Run{Bundle: b, Seed: 1, Data: &engine.Data{Tokens: tokens, SeqLen: int(tr.SeqLen), MicroBatch: int(tr.MicroBatch), Global: int(tr.GlobalBatch)}}
	if gpu {
		r.NewBackend = func(int) (engine.Backend, error) {
			g, err := l.NewGPU(0)
			if err != nil {
				return nil, err
			}
			return engine.NewDeviceBackend(g), nil
		}
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	var out []float64
	for i := range n {
		loss, err := r.Step()
		if err != nil {
			t.Fatalf("step %d: %v", i+1, err)
		}
		out = append(out, loss)
	}
	return out
}

// kernelBundles are the programs whose kernels TestGPUKernels checks:
// tiny (one rank and a ZeRO-3 rank, fp32 and bf16), a GPT-2 style block
// (layernorm, gelu, biases), tied embeddings (a transposed head; its vocab
// of 8 x d makes the head a linear cross-entropy in chunks: fp32 and
// bf16, whose products write bf16 logits and add to dw) and a Gemma-style
// model (scale, gelu_tanh, multi-query attention).
func kernelBundles(t *testing.T) []*codegen.Bundle {
	F := func(a, b int) ir.Factor { return ir.Factor{S0: a, S1: b} }
	one := cost.Factors{P: F(1, 1), G: F(1, 1), OS: F(1, 1)}
	bf16 := `train { seq_len = 64 micro_batch = 2 global_batch = 32 precision = bf16
  optimizer = adamw(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1) }`
	return []*codegen.Bundle{
		compileModel(t, "tiny", 1, 1, one),
		compileModel(t, "tiny", 2, 4, cost.Factors{P: F(4, 2), G: F(4, 2), OS: F(4, 2)}),
		compileModel(t, "tiny", 1, 1, one, bf16),
		compileModel(t, "../variants/layernorm_gelu", 1, 1, one),
		compileModel(t, "../variants/layernorm_gelu", 1, 1, one, bf16),
		compileModel(t, "tied", 1, 1, one),
		compileModel(t, "tied", 1, 1, one, bf16),
		compileModel(t, "gemma", 1, 1, one),
	}
}

// TestGPUKernels (issue 12's first check): every kernel instruction, forward
// and backward, of kernelBundles' programs on the GPU through the device
// backend and on the CPU backend from the same operands: fp32 results
// within 1e-5 of the result's largest magnitude, bf16 within 1e-2.
func TestGPUKernels(t *testing.T) {
	l, _ := openGPU(t)
	g, err := l.NewGPU(0)
	if err != nil {
		t.Fatal(err)
	}
	be := engine.NewDeviceBackend(g)
	kinds := map[ir.OpKind]bool{}
	for _, b := range kernelBundles(t) {
		p := b.Template(0)
		for _, in := range engine.FirstOfEachKind(p) {
			worst, err := engine.CheckKernel(be, b.Topo, p, in)
			if err != nil {
				t.Error(err)
				continue
			}
			kinds[in.Kern] = true
			t.Logf("%v (%v results): largest difference %.2g of the result's magnitude", in.Kern, p.Buffers[in.Outs[0]].DType, worst)
		}
	}
	t.Logf("%d op kinds checked", len(kinds))
}

// TestGPUTrainsTiny (issue 12's checks): tiny trains 50 steps on one GPU
// with a loss curve within 1e-4 of the CPU run (fp32), and tiny's plans
// on 8 ranks sharing the GPU train like the 1-rank GPU run (1e-5).
func TestGPUTrainsTiny(t *testing.T) {
	l, _ := openGPU(t)
	F := func(a, b int) ir.Factor { return ir.Factor{S0: a, S1: b} }
	one := cost.Factors{P: F(1, 1), G: F(1, 1), OS: F(1, 1)}
	const n = 50
	cpu := trainOn(t, l, compileTiny(t, 1, 1, one), n, false)
	gpu1 := trainOn(t, l, compileTiny(t, 1, 1, one), n, true)
	worst := 0.0
	for i := range cpu {
		worst = math.Max(worst, math.Abs(gpu1[i]-cpu[i])/cpu[i])
	}
	t.Logf("1 rank, %d steps: GPU loss %.6f -> %.6f, CPU %.6f -> %.6f, largest relative difference %.2g", n, gpu1[0], gpu1[n-1], cpu[0], cpu[n-1], worst)
	if worst > 1e-4 {
		t.Errorf("GPU loss curve differs from the CPU's by %.2g (relative), more than 1e-4", worst)
	}
	for _, f := range []cost.Factors{
		{P: F(1, 1), G: F(1, 1), OS: F(1, 1)},
		{P: F(4, 2), G: F(4, 2), OS: F(4, 2)},
		{P: F(2, 1), G: F(4, 1), OS: F(4, 2)},
		{P: F(1, 1), G: F(4, 2), OS: F(4, 2)},
	} {
		got := trainOn(t, l, compileTiny(t, 2, 4, f), 10, true)
		for i := range got {
			if d := math.Abs(got[i]-gpu1[i]) / gpu1[i]; d > 1e-5 {
				t.Errorf("%v on 8 ranks sharing the GPU, step %d: loss %.9g, 1-rank GPU %.9g", f, i+1, got[i], gpu1[i])
			}
		}
	}
}

// TestGPUStoredKernels: on the GPU, the elementwise ops' one-pass kernels
// on bf16 and fp32 storage (gpu.Plan.Stored) give the bits of the
// multi-pass path (widen, fp32 kernel, round, check, pack): tiny in fp32
// and bf16 trains to the same losses, bit for bit, either way.
func TestGPUStoredKernels(t *testing.T) {
	l, _ := openGPU(t)
	F := func(a, b int) ir.Factor { return ir.Factor{S0: a, S1: b} }
	one := cost.Factors{P: F(1, 1), G: F(1, 1), OS: F(1, 1)}
	bf16 := `train { seq_len = 64 micro_batch = 2 global_batch = 8 precision = bf16
  optimizer = adamw(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1) }`
	for _, extra := range [][]string{nil, {bf16}} {
		var losses [2][]float64
		for i, o := range []engine.DeviceOptions{{}, {MultiPass: true}} {
			losses[i], _ = gpuSteps(t, l, compileModel(t, "tiny", 1, 1, one, extra...), o, 3)
		}
		for i := range losses[0] {
			if losses[0][i] != losses[1][i] {
				t.Errorf("%v step %d: loss %.17g stored, %.17g multi-pass", extra, i+1, losses[0][i], losses[1][i])
			}
		}
		t.Logf("%v: losses %.9g, stored and multi-pass", extra, losses[0])
	}
}

// gpuSteps trains b for n steps on one rank on GPU 0 with options o and
// returns the losses and each step's time.
func gpuSteps(t *testing.T, l *Libs, b *codegen.Bundle, o engine.DeviceOptions, n int) ([]float64, []time.Duration) {
	t.Helper()
	r := &engine.Run{Bundle: b, Seed: 1, Data: tinyData(b), NewBackend: func(int) (engine.Backend, error) {
		g, err := l.NewGPU(0)
		if err != nil {
			return nil, err
		}
		return engine.NewDeviceBackendWith(g, o), nil
	}}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	var losses []float64
	var took []time.Duration
	for range n {
		t0 := time.Now()
		loss, err := r.Step()
		if err != nil {
			t.Fatal(err)
		}
		took = append(took, time.Since(t0))
		losses = append(losses, loss)
	}
	return losses, took
}

// tinyData is a data window over bytes of a fixed pseudo-random stream.
func tinyData(b *codegen.Bundle) *engine.Data {
	tokens := make([]int32, 1<<14)
	x := uint32(1)
	for i := range tokens {
		x = x*1664525 + 1013904223
		tokens[i] = int32(x >> 24)
	}
	tr := b.Train
	return &engine.Data{Tokens: tokens, SeqLen: int(tr.SeqLen), MicroBatch: int(tr.MicroBatch), Global: int(tr.GlobalBatch)}
}
