//go:build cgo

package engine_test

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"amspc/codegen"
	"amspc/compiler"
	"amspc/cost"
	"amspc/engine"
	"amspc/frontend"
	"amspc/ir"
	"amspc/kernels/gpu/hostc"
)

// TestDeviceKernels runs every kernel instruction of tiny's programs (a
// ZeRO-3 rank's and a single rank's, fp32 and bf16), a GPT-2 style
// block's, tied embeddings' (fp32 and bf16: the linear cross-entropy) and
// a Gemma-style model's (scale, gelu_tanh) on the device backend
// over the host-simulated GPU and on the CPU backend, from the same
// operands: the results agree to 1e-5 of each result's largest magnitude,
// bf16 results to 1e-2 (issue 12's bounds).
func TestDeviceKernels(t *testing.T) {
	F := func(a, b int) ir.Factor { return ir.Factor{S0: a, S1: b} }
	bf16 := `train { seq_len = 64 micro_batch = 2 global_batch = 32 precision = bf16
  optimizer = adamw(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1) }`
	for _, b := range []*codegen.Bundle{
		compile(t, 1, 1, cost.Factors{P: F(1, 1), G: F(1, 1), OS: F(1, 1)}),
		compile(t, 2, 4, cost.Factors{P: F(4, 2), G: F(4, 2), OS: F(4, 2)}),
		compile(t, 1, 1, cost.Factors{P: F(1, 1), G: F(1, 1), OS: F(1, 1)}, bf16),
		compileModel(t, "../variants/layernorm_gelu", 1, 1, cost.Factors{P: F(1, 1), G: F(1, 1), OS: F(1, 1)}),
		compileModel(t, "tied", 1, 1, cost.Factors{P: F(1, 1), G: F(1, 1), OS: F(1, 1)}),
		compileModel(t, "gemma", 1, 1, cost.Factors{P: F(1, 1), G: F(1, 1), OS: F(1, 1)}),
		compileModel(t, "tied", 1, 1, cost.Factors{P: F(1, 1), G: F(1, 1), OS: F(1, 1)}, bf16), // the linear cross-entropy on bf16 logits
	} {
		p := b.Template(0)
		for _, in := range engine.FirstOfEachKind(p) {
			if _, err := engine.CheckKernel(engine.NewDeviceBackend(hostc.NewDevice()), b.Topo, p, in); err != nil {
				t.Error(err)
			}
		}
	}
}

// TestDeviceTensorCoreAttention: with DeviceOptions.TensorCoreAttention,
// bf16 attention and its gradient run mma.cu's tensor-core kernels (on
// the simulated GPU, their products emulated): each within bf16's 1e-2 of
// the CPU backend, and tiny in bf16 trains like the CPU for 3 steps
// within 1e-3 (the probabilities enter the products rounded to bf16);
// fp32 attention keeps the fp32 kernels.
func TestDeviceTensorCoreAttention(t *testing.T) {
	F := func(a, b int) ir.Factor { return ir.Factor{S0: a, S1: b} }
	one := cost.Factors{P: F(1, 1), G: F(1, 1), OS: F(1, 1)}
	bf16 := `train { seq_len = 64 micro_batch = 2 global_batch = 8 precision = bf16
  optimizer = adamw(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1) }`
	tc := func(int) (engine.Backend, error) {
		return engine.NewDeviceBackendWith(hostc.NewDevice(), engine.DeviceOptions{TensorCoreAttention: true}), nil
	}
	b := compile(t, 1, 1, one, bf16)
	p := b.Template(0)
	n := 0
	for _, in := range engine.FirstOfEachKind(p) {
		if in.Kern != ir.Attention && in.Kern != ir.AttentionGrad {
			continue
		}
		be, _ := tc(0)
		worst, err := engine.CheckKernel(be, b.Topo, p, in)
		if err != nil {
			t.Error(err)
		}
		t.Logf("%v on tensor cores: %.2g of the result's magnitude", in.Kern, worst)
		n++
	}
	if n != 2 {
		t.Fatalf("checked %d attention kernels, want the forward and the gradient", n)
	}
	want := train(t, b, 3)
	got := steps(t, start(t, compile(t, 1, 1, one, bf16), tc), 3)
	for i := range got {
		if d := math.Abs(got[i]-want[i]) / want[i]; !(d <= 1e-3) {
			t.Errorf("bf16 step %d on tensor cores: loss %.9g, CPU %.9g (relative %.2g)", i+1, got[i], want[i], d)
		}
	}
	t.Logf("losses on tensor cores %.7g, CPU %.7g", got, want)
}

// bf16Tol bounds a bf16 loss's difference between the device and the
// CPU backend: the same arithmetic but attention's, whose last-bit
// differences a bf16 rounding can make one bf16 ulp (2^-8) of an
// element.
const bf16Tol = 1e-4

// TestDeviceBackendPlans runs tiny on the device backend, the CUDA
// backend's logic (launch plans, scratch memory, copies, staged
// collectives, device-side checks), over kernels/gpu/hostc's host-
// simulated GPU: ops.cu's kernels compiled as C. Every plan trains like
// the CPU backend to 1e-7 (the kernels give the Go kernels' bits but for
// attention, within 6.6e-7), a step after the first allocates no more
// device memory,
// a NaN-making step stops the run naming adamw, and bf16 plans (two-byte
// storage on the device) train like the CPU's to bf16Tol.
func TestDeviceBackendPlans(t *testing.T) {
	F := func(a, b int) ir.Factor { return ir.Factor{S0: a, S1: b} }
	const n = 3
	for _, c := range []struct {
		nodes, gpus int
		f           cost.Factors
	}{
		{1, 1, cost.Factors{P: F(1, 1), G: F(1, 1), OS: F(1, 1)}},
		{2, 4, cost.Factors{P: F(4, 2), G: F(4, 2), OS: F(4, 2)}},
		{2, 4, cost.Factors{P: F(2, 1), G: F(4, 1), OS: F(4, 2)}},
	} {
		t.Run(fmt.Sprintf("%dx%d %v", c.nodes, c.gpus, c.f), func(t *testing.T) {
			want := train(t, compile(t, c.nodes, c.gpus, c.f), n)
			b := compile(t, c.nodes, c.gpus, c.f)
			var devs []*hostc.Device
			var mu sync.Mutex
			r := start(t, b, func(int) (engine.Backend, error) {
				mu.Lock()
				defer mu.Unlock()
				d := hostc.NewDevice()
				devs = append(devs, d)
				return engine.NewDeviceBackend(d), nil
			})
			got := steps(t, r, n-1)
			// The device backend reuses freed memory by size: from the
			// second step on, a step allocates nothing more.
			live := devs[0].Live()
			got = append(got, steps(t, r, 1)...)
			if more := devs[0].Live(); more != live {
				t.Errorf("rank 0 had %d device allocations after step %d, %d after step %d", live, n-1, more, n)
			}
			for i := range got {
				if d := math.Abs(got[i]-want[i]) / want[i]; d > 1e-7 {
					t.Errorf("step %d: device loss %.9g, CPU %.9g (relative %.2g)", i+1, got[i], want[i], d)
				}
			}
			t.Logf("device %.9g, CPU %.9g", got, want)
		})
	}
	t.Run("inf", func(t *testing.T) {
		huge := `train { seq_len = 64 micro_batch = 2 global_batch = 32 precision = fp32
  optimizer = adamw(lr=1e39, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0) }`
		b := compile(t, 1, 2, cost.Factors{P: F(2, 1), G: F(2, 1), OS: F(2, 1)}, huge)
		r := start(t, b, func(int) (engine.Backend, error) { return engine.NewDeviceBackend(hostc.NewDevice()), nil })
		// The device backend reads its checks back in batches: the error
		// still names the instruction that made the Inf.
		_, err := r.Step()
		if err == nil || !strings.Contains(err.Error(), ": adamw") || !strings.Contains(err.Error(), "produced +Inf at element") {
			t.Fatalf("error %v, want adamw producing +Inf", err)
		}
		t.Log(err)
	})
	t.Run("bf16", func(t *testing.T) {
		bf16 := `train { seq_len = 64 micro_batch = 2 global_batch = 32 precision = bf16
  optimizer = adamw(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1) }`
		for _, f := range []cost.Factors{{P: F(1, 1), G: F(1, 1), OS: F(1, 1)}, {P: F(2, 1), G: F(2, 1), OS: F(4, 2)}} {
			nodes, gpus := 1, 1
			if f.OS.S1 > 1 {
				nodes, gpus = 2, 4
			}
			want := train(t, compile(t, nodes, gpus, f, bf16), n)
			r := start(t, compile(t, nodes, gpus, f, bf16), func(int) (engine.Backend, error) { return engine.NewDeviceBackend(hostc.NewDevice()), nil })
			got := steps(t, r, n)
			for i := range got {
				if d := math.Abs(got[i]-want[i]) / want[i]; d > bf16Tol {
					t.Errorf("%v bf16 step %d: device loss %.9g, CPU %.9g (relative %.2g)", f, i+1, got[i], want[i], d)
				}
			}
			t.Logf("%v bf16: device %.9g, CPU %.9g", f, got, want)
		}
	})
}

// TestDeviceProfile: amspc profile's measurements run on the device
// backend (over the host-simulated GPU): every distinct kernel of a
// ZeRO-3 rank of tiny and each collective kind over a group of 4 take a
// positive time.
func TestDeviceProfile(t *testing.T) {
	F := func(a, b int) ir.Factor { return ir.Factor{S0: a, S1: b} }
	b := compile(t, 2, 4, cost.Factors{P: F(4, 2), G: F(4, 2), OS: F(4, 2)})
	dev := func(int) (engine.Backend, error) { return engine.NewDeviceBackend(hostc.NewDevice()), nil }
	p := b.Template(0)
	for _, in := range engine.FirstOfEachKind(p) {
		s, err := engine.MeasureKernelOn(b.Topo, p, in, 1, dev)
		if err != nil || !(s > 0) {
			t.Errorf("%v on the device: %v s, %v", in.Kern, s, err)
		}
	}
	for _, c := range []ir.Coll{ir.AllGather, ir.ReduceScatter, ir.AllReduce, ir.Broadcast} {
		s, err := engine.MeasureCollectiveOn(b.Topo, c, F(4, 1), 1<<12, 1, dev)
		if err != nil || !(s > 0) {
			t.Errorf("%v on the device: %v s, %v", c, s, err)
		}
	}
}

// TestDeviceStoredKernels: the ops whose kernels take bf16 and fp32
// storage as it is and check their own results (gpu.Plan.Stored: the
// elementwise ops, the norms and RoPE) give the bits of the multi-pass
// path (widen, fp32 kernel, round, check, pack): tiny, the Gemma-style
// model and tied embeddings with gelu, fp32 and bf16, train on the
// simulated GPU to the same losses, bit for bit, either way (layernorm's
// stored kernels are checked bit for bit in kernels/gpu/hostc).
func TestDeviceStoredKernels(t *testing.T) {
	F := func(a, b int) ir.Factor { return ir.Factor{S0: a, S1: b} }
	one := cost.Factors{P: F(1, 1), G: F(1, 1), OS: F(1, 1)}
	bf16 := `train { seq_len = 64 micro_batch = 2 global_batch = 8 precision = bf16
  optimizer = adamw(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1) }`
	var made []engine.Backend
	backend := func(o engine.DeviceOptions) func(int) (engine.Backend, error) {
		return func(int) (engine.Backend, error) {
			be := engine.NewDeviceBackendWith(hostc.NewDevice(), o)
			made = append(made, be)
			return be, nil
		}
	}
	for _, c := range []struct {
		name string
		b    func() *codegen.Bundle
	}{
		{"tiny fp32", func() *codegen.Bundle { return compile(t, 1, 1, one) }},
		{"tiny bf16", func() *codegen.Bundle { return compile(t, 1, 1, one, bf16) }},
		{"gemma bf16", func() *codegen.Bundle { return compileModel(t, "gemma", 1, 1, one, bf16) }},
		{"tied bf16", func() *codegen.Bundle { return compileModel(t, "tied", 1, 1, one, bf16) }},
	} {
		made = nil
		stored := steps(t, start(t, c.b(), backend(engine.DeviceOptions{})), 2)
		if len(made) != 1 || engine.StoredLaunches(made[0]) == 0 {
			t.Fatalf("%s: no instruction ran through a stored plan", c.name)
		}
		multi := steps(t, start(t, c.b(), backend(engine.DeviceOptions{MultiPass: true})), 2)
		if engine.StoredLaunches(made[1]) != 0 {
			t.Errorf("%s: MultiPass ran %d instructions through stored plans", c.name, engine.StoredLaunches(made[1]))
		}
		for i := range stored {
			if stored[i] != multi[i] {
				t.Errorf("%s step %d: loss %.17g with the stored kernels, %.17g multi-pass", c.name, i+1, stored[i], multi[i])
			}
		}
	}
}

// TestDeviceStoredKernelInf: a stored plan's kernel flags its own
// result: scale by 3e38 twice overflows fp32 in the second scale, and
// the run stops naming that instruction and the element, as the
// separate check does for the other ops.
func TestDeviceStoredKernelInf(t *testing.T) {
	src := `model m {
  input tokens : i32[batch, seq]
  input targets : i32[batch, seq]
  param emb : [256, 8] init ones
  x = scale(scale(embed(tokens, emb), by=3e38), by=3e38)
  loss = cross_entropy(x @ transpose(emb), targets)
}
cluster { nodes = 1 gpus_per_node = 1 gpu = "cpu" }
train { seq_len = 4 micro_batch = 1 global_batch = 1 precision = fp32 }
shard ddp
`
	b := compileSource(t, src)
	var be engine.Backend
	r := start(t, b, func(int) (engine.Backend, error) {
		be = engine.NewDeviceBackend(hostc.NewDevice())
		return be, nil
	})
	_, err := r.Step()
	if err == nil || !strings.Contains(err.Error(), ": scale") || !strings.Contains(err.Error(), "produced +Inf at element 0") {
		t.Fatalf("error %v, want scale producing +Inf at element 0", err)
	}
	if engine.StoredLaunches(be) == 0 {
		t.Error("no instruction ran through a stored plan")
	}
	t.Log(err)
}

// TestDeviceBadIDs: an id out of range stops the run on the device as on
// the CPU, naming the instruction, the first bad position and its id,
// though the device backend reads its id checks only after the step (the
// kernels flag position and id in one word): an embedding's id, a plain
// cross-entropy's target and a fused linear cross-entropy's target (the
// README's bytes against vocabularies of 64 and 32).
func TestDeviceBadIDs(t *testing.T) {
	for _, c := range []struct{ name, body, want string }{
		{"embed", "param emb : [64, 8]\n  loss = cross_entropy(embed(tokens, emb) @ transpose(emb), targets)",
			"embed: id 97 at position 2 is outside [0, 64)"},
		{"cross_entropy", "param emb : [256, 8]\n  param head : [8, 32]\n  loss = cross_entropy(embed(tokens, emb) @ head, targets)",
			"cross_entropy: target 32 at position 0 is outside [0, 32)"},
		{"linear_cross_entropy", "param emb : [256, 8]\n  param head : [8, 64]\n  loss = cross_entropy(embed(tokens, emb) @ head, targets)",
			"cross_entropy: target 97 at position 1 is outside [0, 64)"},
	} {
		src := "model m {\n  input tokens : i32[batch, seq]\n  input targets : i32[batch, seq]\n  " + c.body + `
}
cluster { nodes = 1 gpus_per_node = 1 gpu = "cpu" }
train { seq_len = 4 micro_batch = 1 global_batch = 1 precision = fp32 }
shard ddp
`
		b := compileSource(t, src)
		for _, be := range []struct {
			name string
			new  func(int) (engine.Backend, error)
		}{
			{"cpu", func(int) (engine.Backend, error) { return engine.NewCPUBackend(), nil }},
			{"device", func(int) (engine.Backend, error) { return engine.NewDeviceBackend(hostc.NewDevice()), nil }},
			{"multi-pass", func(int) (engine.Backend, error) {
				return engine.NewDeviceBackendWith(hostc.NewDevice(), engine.DeviceOptions{MultiPass: true}), nil
			}},
		} {
			_, err := start(t, b, be.new).Step()
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), ": "+c.name+" ") {
				t.Errorf("%s on %s: %v, want %s naming %s", c.name, be.name, err, c.want, c.name)
			}
		}
	}
}

// TestDeviceStepTransfers: after the first step, a step on the device
// waits for the device only at its end (the checks, losses among them,
// read back in one copy and their slots reset in another), and moves
// in the streams' order only its inputs and AdamW's factors for the new
// step (each stage's kept scratch; the decayed ranges stay): no loss, id
// check, position list or scratch upload makes the host wait mid-step.
// tiny in bf16 on one simulated GPU, stored and multi-pass plans.
func TestDeviceStepTransfers(t *testing.T) {
	F := func(a, b int) ir.Factor { return ir.Factor{S0: a, S1: b} }
	one := cost.Factors{P: F(1, 1), G: F(1, 1), OS: F(1, 1)}
	bf16 := `train { seq_len = 64 micro_batch = 2 global_batch = 8 precision = bf16
  optimizer = adamw(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1) }`
	for _, multi := range []bool{false, true} {
		b := compile(t, 1, 1, one, bf16)
		var loads, steps int64
		p := b.Template(0)
		for s := range p.Streams {
			for _, in := range p.Streams[s] {
				switch {
				case in.Op == ir.Load:
					loads++
				case in.Op == ir.Kernel && in.Kern.Info().Decays:
					steps++
				}
			}
		}
		dev := hostc.NewDevice()
		r := start(t, b, func(int) (engine.Backend, error) {
			return engine.NewDeviceBackendWith(dev, engine.DeviceOptions{MultiPass: multi}), nil
		})
		if _, err := r.Step(); err != nil {
			t.Fatal(err)
		}
		w0, o0 := dev.Transfers()
		if _, err := r.Step(); err != nil {
			t.Fatal(err)
		}
		w1, o1 := dev.Transfers()
		if w1-w0 != 2 || o1-o0 != loads+steps {
			t.Errorf("multi-pass %v: the second step waited for the device in %d copies (want 2, at its end) and made %d in stream order (want %d inputs and %d AdamW steps' factors)",
				multi, w1-w0, o1-o0, loads, steps)
		}
	}
}

// TestDeviceRoPEScaling: Llama 3's scaling of RoPE's frequencies (a
// context of 16 original positions, so each band holds some of a head's
// 8 frequencies at seq 64) trains alike on the CPU and the simulated
// GPU, whose kernels read the frequencies the host computed; q's and k's
// ropes still fuse, keeping the scaling.
func TestDeviceRoPEScaling(t *testing.T) {
	src := `model m {
  dim d = 32
  dim heads = 2
  input tokens : i32[batch, seq]
  input targets : i32[batch, seq]
  param emb : [256, d]
  param wq : [d, d]
  param wk : [d, d]
  param wv : [d, d]
  x = embed(tokens, emb)
  q = rope(x @ wq, heads=heads, theta=500000, scaling_factor=8, low_freq_factor=1, high_freq_factor=4, original_max_positions=16)
  k = rope(x @ wk, heads=heads, theta=500000, scaling_factor=8, low_freq_factor=1, high_freq_factor=4, original_max_positions=16)
  x = x + attention(q, k, x @ wv, heads=heads, causal=true)
  loss = cross_entropy(x @ transpose(emb), targets)
}
cluster { nodes = 1 gpus_per_node = 1 gpu = "cpu" }
train { seq_len = 64 micro_batch = 2 global_batch = 4 precision = fp32 }
shard ddp
`
	b := compileSource(t, src)
	if text := engineProgramText(b); !strings.Contains(text, "kernel rope_qk ") || !strings.Contains(text, "scaling_factor=8, low_freq_factor=1, high_freq_factor=4, original_max_positions=16") {
		t.Fatalf("the program does not run rope_qk with the scaling:\n%s", text)
	}
	cpu := steps(t, start(t, b), 3)
	dev := steps(t, start(t, b, func(int) (engine.Backend, error) { return engine.NewDeviceBackend(hostc.NewDevice()), nil }), 3)
	for i := range cpu {
		if d := math.Abs(dev[i]-cpu[i]) / cpu[i]; d > 1e-6 {
			t.Errorf("step %d: device loss %.9g, CPU %.9g", i+1, dev[i], cpu[i])
		}
	}
	// Without the scaling the losses differ: the attributes reach the kernels.
	plain := strings.ReplaceAll(src, ", scaling_factor=8, low_freq_factor=1, high_freq_factor=4, original_max_positions=16", "")
	if unscaled := steps(t, start(t, compileSource(t, plain)), 3); unscaled[2] == cpu[2] {
		t.Errorf("the scaling changed nothing: step 3's loss %.17g either way", cpu[2])
	}
}

// compileSource compiles a job written out whole (model, cluster, train
// and shard) with the plan the planner chooses.
func compileSource(t *testing.T, src string) *codegen.Bundle {
	t.Helper()
	job, err := frontend.Load(frontend.Source{Name: "m.amsp", Text: []byte(src)})
	if err != nil {
		t.Fatal(err)
	}
	plan, _, err := compiler.Choose(job, cost.Config{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := compiler.Compile(job, plan, compiler.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return res.Bundle
}
