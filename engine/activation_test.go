package engine_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"amspc/compiler"
	"amspc/cost"
	"amspc/frontend"
	"amspc/internal/testjob"
	"amspc/ir"
	"amspc/passes"
)

// layerPeak is rank 0's measured peak bytes training tiny with layers
// blocks, mb sequences per micro-batch (one micro-batch), tensor
// parallelism tp (sequence parallel sp) and recompute rc.
func layerPeak(t *testing.T, layers, mb, tp int, sp bool, rc string) int64 {
	t.Helper()
	src, err := os.ReadFile(testjob.Path("tiny"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(src), "dim layers = 2", fmt.Sprintf("dim layers = %d", layers), 1)
	extra := []string{
		fmt.Sprintf("cluster { nodes = 1 gpus_per_node = %d gpu = \"cpu\" }", tp),
		fmt.Sprintf("shard { tensor = %d, sequence = %v, params = 1, grads = 1, optim = 1 }", tp, sp),
		fmt.Sprintf(`train { seq_len = 64 micro_batch = %d global_batch = %d precision = fp32
  optimizer = adamw(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1) recompute = %s }`, mb, mb, rc),
	}
	srcs := []frontend.Source{}
	for i, x := range extra {
		srcs = append(srcs, frontend.Source{Name: fmt.Sprintf("extra%d.amsp", i), Text: []byte(x)})
	}
	job, err := frontend.Load(frontend.Source{Name: "tiny.amsp", Text: []byte(text)}, srcs...)
	if err != nil {
		t.Fatal(err)
	}
	plan, _, err := compiler.Choose(job, cost.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := compiler.Compile(job, plan, compiler.Options{Passes: passes.Options{Check: true}, Depth: 2})
	if err != nil {
		t.Fatal(err)
	}
	run := start(t, r.Bundle)
	steps(t, run, 1)
	return run.PeakBytes()[0]
}

// TestLayerActivations: the activation memory one block keeps, measured
// on CPU ranks, is cost.LayerActivations' count (Korthikanti et al.'s
// formula made for amspc's block), to the byte, under tensor parallelism
// of 1, 2 and 4, with and without sequence parallelism, and under each
// recompute choice. One block's bytes for b sequences are measured as a
// second difference of rank 0's peak: (3 blocks - 2 blocks) at 2b
// sequences less the same at b, which cancels the parameters, optimizer
// states and workspaces; b is large enough that the peak is where
// backward starts, every block's activations live.
func TestLayerActivations(t *testing.T) {
	const b = 16
	blk := cost.Block{H: 64, KV: 64, F: 172} // tiny's
	for _, c := range []struct {
		tp int
		sp bool
	}{{1, false}, {2, false}, {2, true}, {4, false}, {4, true}} {
		for _, rc := range ir.Recomputes {
			p := func(l, b int) int64 { return layerPeak(t, l, b, c.tp, c.sp, rc.String()) }
			got := p(3, 2*b) - p(2, 2*b) - p(3, b) + p(2, b)
			want := cost.LayerActivations(blk, 64, b, 4, c.tp, c.sp, rc)
			if got != want {
				t.Errorf("tensor %d sequence %v recompute %v: one block keeps %d bytes for %d sequences, the formula says %d", c.tp, c.sp, rc, got, b, want)
			}
		}
	}
}
