//go:build cgo

package engine_test

import (
	"strings"
	"testing"

	"amspc/codegen"
	"amspc/compiler"
	"amspc/cost"
	"amspc/engine"
	"amspc/internal/testjob"
	"amspc/ir"
	"amspc/kernels/gpu/hostc"
	"amspc/passes"
)

// TestDeviceLinearCrossEntropy: on the simulated GPU the linear
// cross-entropy's plan (chunks of rows: a product into a chunk of logits,
// bf16 ones in bf16, the cross-entropy kernels on it, dh's rows and dw
// accumulated over the chunks) gives the bits of the unfused matmul and
// cross-entropy: the tied model in bf16 and the Gemma-style model in
// fp32 (both with vocab 8 x d, so the head fuses; 640 rows, so in two
// chunks) train to the same losses with fuse on and off.
func TestDeviceLinearCrossEntropy(t *testing.T) {
	// 640 rows a micro-batch: chunks of 512 and 128 (ir.LinearCEChunk).
	bf16 := `train { seq_len = 320 micro_batch = 2 global_batch = 8 precision = bf16
  optimizer = adamw(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1) }`
	fp32 := `train { seq_len = 320 micro_batch = 2 global_batch = 8 precision = fp32
  optimizer = adamw(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1) }`
	for _, c := range []struct {
		model string
		extra []string
	}{
		{"tied", []string{bf16}},
		{"gemma", []string{fp32}},
	} {
		var losses [2][]float64
		for i, off := range [][]string{nil, {"fuse"}} {
			b := compileOff(t, c.model, off, c.extra...)
			text := engineProgramText(b)
			if fused := i == 0; fused != strings.Contains(text, "kernel linear_cross_entropy_grad ") {
				t.Fatalf("%s, fuse %v: the program runs linear_cross_entropy_grad: %v", c.model, fused, !fused)
			}
			newBackend := func(int) (engine.Backend, error) { return engine.NewDeviceBackend(hostc.NewDevice()), nil }
			losses[i] = steps(t, start(t, b, newBackend), 3)
		}
		for s := range losses[0] {
			if losses[0][s] != losses[1][s] {
				t.Errorf("%s step %d: loss %.17g fused, %.17g unfused", c.model, s+1, losses[0][s], losses[1][s])
			}
		}
	}
}

// compileOff compiles an example model on one rank with the passes off
// named off.
func compileOff(t *testing.T, model string, off []string, extra ...string) *codegen.Bundle {
	t.Helper()
	job := testjob.Load(t, model, append([]string{"cluster { nodes = 1 gpus_per_node = 1 gpu = \"cpu\" }\nshard auto"}, extra...)...)
	one := ir.Factor{S0: 1, S1: 1}
	p := cost.Uniform("", cost.Factors{P: one, G: one, OS: one}, job.Train.Recompute, job.Train.MicroBatch)
	r, err := compiler.Compile(job, p, compiler.Options{Passes: passes.Options{Check: true, Off: off}, Depth: 2})
	if err != nil {
		t.Fatalf("%s, %v off: %v", model, off, err)
	}
	return r.Bundle
}

// engineProgramText is rank 0's program, one instruction a line.
func engineProgramText(b *codegen.Bundle) string {
	var sb strings.Builder
	p := b.Template(0)
	for s := range p.Streams {
		for i := range p.Streams[s] {
			sb.WriteString(ir.FormatInstr(&p.Streams[s][i], ir.Group.String))
			sb.WriteByte('\n')
		}
	}
	return sb.String()
}

// TestBF16Fusions: the fusions of a bf16 step keep its bits. The
// optimizer writes the bf16 P in the pass that updates the fp32 master
// (adamw_copy, ir.LoweredFusions), a block's residual add and MLP norm
// run as one add_rmsnorm (backward add_rmsnorm_grad) and its q and k
// ropes as one rope_qk (backward rope_qk_grad) when fuse runs; adamw then
// a cast, add then rmsnorm, rmsnorm_grad then add, two ropes and two
// rope_grads when it does not. The tied model (whose other fusion, the
// head's, keeps the bits too) trains to the same bits either way, with
// and without full recompute (which copies add_rmsnorm and rope_qk
// whole), on the CPU and on the simulated GPU (there through the stored
// plans, adamw_st, add_rmsnorm_st and rope_qk_st among them, and through
// the multi-pass plans).
func TestBF16Fusions(t *testing.T) {
	backends := map[string]func(int) (engine.Backend, error){
		"cpu":    func(int) (engine.Backend, error) { return engine.NewCPUBackend(), nil },
		"device": func(int) (engine.Backend, error) { return engine.NewDeviceBackend(hostc.NewDevice()), nil },
		"multi-pass": func(int) (engine.Backend, error) {
			return engine.NewDeviceBackendWith(hostc.NewDevice(), engine.DeviceOptions{MultiPass: true}), nil
		},
	}
	for _, rc := range []string{"none", "full"} {
		train := `train { seq_len = 64 micro_batch = 2 global_batch = 8 precision = bf16 recompute = ` + rc + `
  optimizer = adamw(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1) }`
		for _, name := range []string{"cpu", "device", "multi-pass"} {
			var losses [2][]float64
			for i, off := range [][]string{nil, {"fuse"}} {
				b := compileOff(t, "tied", off, train)
				text := engineProgramText(b)
				for _, k := range []string{"adamw_copy", "add_rmsnorm", "add_rmsnorm_grad", "rope_qk", "rope_qk_grad"} {
					if fused := i == 0; fused != strings.Contains(text, "kernel "+k+" ") {
						t.Fatalf("recompute %s, fuse %v: the program runs %s: %v", rc, fused, k, !fused)
					}
				}
				losses[i] = steps(t, start(t, b, backends[name]), 3)
			}
			for s := range losses[0] {
				if losses[0][s] != losses[1][s] {
					t.Errorf("recompute %s, %s step %d: loss %.17g fused, %.17g unfused", rc, name, s+1, losses[0][s], losses[1][s])
				}
			}
		}
	}
}
