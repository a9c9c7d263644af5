package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"amspc/codegen"
	"amspc/ir"
	"amspc/kernels/gpu"
)

// TestEveryOpHasAKernel: every op of the op table can appear in a
// bundle (forward, backward, optimizer and copies), so each backend's
// table has a kernel for it or declares it unsupported with a reason,
// never both: the CPU backend's cpuKernels, and the GPU's launch plans
// (kernels/gpu, which the CUDA backend and the simulated GPU share).
func TestEveryOpHasAKernel(t *testing.T) {
	backends := []struct {
		name        string
		has         func(ir.OpKind) bool
		unsupported map[ir.OpKind]string
	}{
		{"CPU", func(k ir.OpKind) bool { return cpuKernels[k] != nil }, cpuUnsupported},
		{"GPU", gpu.HasPlan, gpu.Unsupported},
	}
	for _, b := range backends {
		for _, k := range ir.OpKinds() {
			why, declared := b.unsupported[k]
			switch {
			case b.has(k) && declared:
				t.Errorf("%s backend: %v has a kernel and is declared unsupported (%q)", b.name, k, why)
			case !b.has(k) && !declared:
				t.Errorf("%s backend: no kernel for %v, and it is not declared unsupported with a reason", b.name, k)
			case declared && strings.TrimSpace(why) == "":
				t.Errorf("%s backend: %v is declared unsupported without a reason", b.name, k)
			}
		}
		for k := range b.unsupported {
			if k <= ir.InvalidOp || int(k) > len(ir.OpKinds()) {
				t.Errorf("%s backend declares op kind %d unsupported, which is not in the op table", b.name, int(k))
			}
		}
	}
	if n := len(cpuKernels); n > len(ir.OpKinds()) {
		t.Errorf("%d CPU kernels for %d op kinds", n, len(ir.OpKinds()))
	}
}

// TestAdamWOnFlatShards runs the adamw kernel on the os-shards of a flat
// buffer holding a 1-D param, a 2-D one and padding, split over two
// ranks, for three steps, and checks every element against AdamW as
// NUMERICS.md defines it (torch.optim.AdamW), in float64: decay only on
// the 2-D param, padding untouched.
func TestAdamWOnFlatShards(t *testing.T) {
	const lr, b1, b2, eps, wd = 1e-2, 0.9, 0.95, 1e-8, 0.1
	grp2 := ir.Group{Outer: ir.Factor{S0: 2, S1: 1}, Inner: ir.Factor{S0: 1, S1: 1}}
	// norm [6] at 0, w [4,5] at 6, padding to 32; 16 elements per rank.
	lay := ir.Layout{Stage: "s", Padded: 32, Params: []ir.Slot{
		{Name: "norm", Offset: 0, Elems: 6}, {Name: "w", Offset: 6, Elems: 20, Decay: true}},
		PShard: ir.Group{Outer: ir.Factor{S0: 1, S1: 1}, Inner: ir.Factor{S0: 1, S1: 1}}, OSShard: grp2,
		P: 0, Master: -1, M: 3, V: 4}
	prog := ir.Program{
		Buffers: []ir.Buffer{
			{Name: "P", DType: ir.F32, Elems: 32, Parent: -1},
			{Name: "P[os]", DType: ir.F32, Elems: 16, Parent: 0, Part: grp2},
			{Name: "G", DType: ir.F32, Elems: 32, Parent: -1},
			{Name: "OS.m", DType: ir.F32, Elems: 16, Parent: -1},
			{Name: "OS.v", DType: ir.F32, Elems: 16, Parent: -1},
			{Name: "G[os]", DType: ir.F32, Elems: 16, Parent: 2, Part: grp2},
		},
		Layouts: []ir.Layout{lay},
	}
	step := ir.Instr{Op: ir.Kernel, Kern: ir.AdamWStep, Args: []int32{1, 3, 4, 5}, Outs: []int32{1, 3, 4},
		Attrs: []ir.Attr{ir.FloatAttr("lr", lr), ir.FloatAttr("beta1", b1), ir.FloatAttr("beta2", b2),
			ir.FloatAttr("eps", eps), ir.FloatAttr("weight_decay", wd)}}
	prog.Streams[ir.Compute] = []ir.Instr{step}
	b := &codegen.Bundle{Model: "adamw", Topo: ir.Topology{GPUsPerNode: 2, Nodes: 1}, Micro: 1, Templates: []ir.Program{prog}}
	if err := codegen.Validate(b); err != nil {
		t.Fatal(err)
	}
	ranks := []*rank{testRank(t, b, 0), testRank(t, b, 1)}
	p64, m64, v64 := make([]float64, 32), make([]float64, 32), make([]float64, 32)
	for i := range 26 { // the padding stays zero, as the runtime keeps it
		p64[i] = float64(float32(math.Sin(float64(i)) / 10))
	}
	for _, k := range ranks {
		p := k.f(0)
		for i := range p {
			p[i] = float32(p64[i])
		}
	}
	for s := 1; s <= 3; s++ {
		g := make([]float64, 32)
		for i := range 26 {
			g[i] = float64(float32(math.Cos(float64(i*s)) / 100))
		}
		for _, k := range ranks {
			for i, x := range g {
				k.f(2)[i] = float32(x)
			}
			k.step = s
			if err := k.kernel(ir.Compute, &b.Templates[0].Streams[ir.Compute][0]); err != nil {
				t.Fatal(err)
			}
		}
		for i := range p64 {
			if 6 <= i && i < 26 {
				p64[i] *= 1 - lr*wd
			}
			m64[i] = b1*m64[i] + (1-b1)*g[i]
			v64[i] = b2*v64[i] + (1-b2)*g[i]*g[i]
			mh := m64[i] / (1 - math.Pow(b1, float64(s)))
			vh := v64[i] / (1 - math.Pow(b2, float64(s)))
			p64[i] -= lr * mh / (math.Sqrt(vh) + eps)
		}
		for r, k := range ranks {
			for j := range 16 {
				i := 16*r + j
				got := []float32{k.f(0)[i], k.f(3)[j], k.f(4)[j]}
				for n, want := range []float64{p64[i], m64[i], v64[i]} {
					if d := math.Abs(float64(got[n]) - want); d > 1e-6*math.Max(math.Abs(want), 1e-3) {
						t.Errorf("step %d element %d (rank %d) %s = %.9g, want %.9g", s, i, r, []string{"p", "m", "v"}[n], got[n], want)
					}
				}
				if i >= 26 && got[0] != 0 {
					t.Errorf("step %d: padding element %d became %g", s, i, got[0])
				}
			}
		}
	}
}

// gradRecorder is the GradBuilder of TestBackwardThroughDispatch: it makes
// the ops of a backward rule, in order.
type gradRecorder struct{ ops []*ir.Op }

func (r *gradRecorder) Apply(kind ir.OpKind, args []*ir.Value, attrs ...ir.Attr) []*ir.Value {
	op, err := ir.NewOp(kind, args, attrs, ir.Pos{})
	if err != nil {
		panic(err)
	}
	for i, v := range op.Results {
		v.Name = fmt.Sprintf("bwd%d.%d", len(r.ops), i)
	}
	r.ops = append(r.ops, op)
	return op.Results
}

// TestBackwardThroughDispatch checks every forward op's backward rule as
// the CPU runtime runs it: the forward op and the ops of its rule (the
// fused multi-result ones included) go through the kernel table on
// buffers shaped as in a bundle, and each operand's gradient of
// J = sum(out * R) matches central differences of the forward kernel.
// Kernels are checked against float64 references in package kernels;
// this checks that the IR's operand and result order and the runtime's
// wiring agree.
func TestBackwardThroughDispatch(t *testing.T) {
	in := func(name string, dt ir.DType, shape ...int64) *ir.Value {
		return &ir.Value{Name: name, Shape: shape, DType: dt, Role: ir.Activation, Layer: -1}
	}
	f32 := func(name string, shape ...int64) *ir.Value { return in(name, ir.F32, shape...) }
	ropeQK := []ir.Attr{ir.IntAttr("heads", 4), ir.IntAttr("kv_heads", 2), ir.FloatAttr("theta", 100)}
	cases := []struct {
		kind  ir.OpKind
		args  []*ir.Value
		attrs []ir.Attr
		// drop lists results of a multi-result op that J leaves out
		// (their gradient nil, as when nothing reads them on).
		drop []int
	}{
		{ir.Embed, []*ir.Value{in("ids", ir.I32, 2, 3), f32("table", 10, 4)}, nil, nil},
		{ir.MatMul, []*ir.Value{f32("a", 2, 3, 5), f32("b", 5, 4)}, nil, nil},
		{ir.RMSNorm, []*ir.Value{f32("x", 2, 3, 8), f32("w", 8)}, nil, nil},
		{ir.LayerNorm, []*ir.Value{f32("x", 2, 3, 8), f32("w", 8), f32("b", 8)}, nil, nil},
		{ir.RoPE, []*ir.Value{f32("x", 1, 4, 16)}, []ir.Attr{ir.IntAttr("heads", 2)}, nil},
		{ir.Attention, []*ir.Value{f32("q", 1, 4, 16), f32("k", 1, 4, 8), f32("v", 1, 4, 8)},
			[]ir.Attr{ir.IntAttr("heads", 4), ir.IntAttr("kv_heads", 2), ir.BoolAttr("causal", true)}, nil},
		{ir.Attention, []*ir.Value{f32("q", 2, 3, 8), f32("k", 2, 3, 8), f32("v", 2, 3, 8)}, []ir.Attr{ir.IntAttr("heads", 2)}, nil},
		{ir.Transpose, []*ir.Value{f32("w", 3, 5)}, nil, nil},
		{ir.SiLU, []*ir.Value{f32("x", 2, 6)}, nil, nil},
		{ir.GELU, []*ir.Value{f32("x", 2, 6)}, nil, nil},
		{ir.GELUTanh, []*ir.Value{f32("x", 2, 6)}, nil, nil},
		{ir.SwiGLU, []*ir.Value{f32("a", 2, 6), f32("b", 2, 6)}, nil, nil},
		{ir.GeGLUTanh, []*ir.Value{f32("a", 2, 6), f32("b", 2, 6)}, nil, nil},
		{ir.Scale, []*ir.Value{f32("x", 2, 6)}, []ir.Attr{ir.FloatAttr("by", 45.254833995939045)}, nil},
		{ir.Add, []*ir.Value{f32("x", 2, 3, 4), f32("y", 2, 3, 4)}, nil, nil},
		{ir.Add, []*ir.Value{f32("x", 2, 3, 4), f32("bias", 4)}, nil, nil},
		{ir.Mul, []*ir.Value{f32("x", 2, 3, 4), f32("y", 2, 3, 4)}, nil, nil},
		{ir.Mul, []*ir.Value{f32("x", 2, 3, 4), f32("scale", 4)}, nil, nil},
		// fp32 to fp32: a rounding cast has no useful finite differences.
		{ir.Cast, []*ir.Value{f32("x", 2, 6)}, []ir.Attr{ir.IntAttr("dtype", int64(ir.F32))}, nil},
		// The fused residual add and norm: both results read on, or
		// either alone.
		{ir.AddRMSNorm, []*ir.Value{f32("x", 2, 3, 8), f32("r", 2, 3, 8), f32("w", 8)}, nil, nil},
		{ir.AddRMSNorm, []*ir.Value{f32("x", 2, 3, 8), f32("r", 2, 3, 8), f32("w", 8)}, nil, []int{0}},
		{ir.AddRMSNorm, []*ir.Value{f32("x", 2, 3, 8), f32("r", 2, 3, 8), f32("w", 8)}, nil, []int{1}},
		// RoPE of q and of grouped k (4 heads, 2 kv heads of 4) in one
		// op: both results read on, or either alone (a plain rope_grad).
		{ir.RoPEQK, []*ir.Value{f32("xq", 2, 3, 16), f32("xk", 2, 3, 8)}, ropeQK, nil},
		{ir.RoPEQK, []*ir.Value{f32("xq", 2, 3, 16), f32("xk", 2, 3, 8)}, ropeQK, []int{0}},
		{ir.RoPEQK, []*ir.Value{f32("xq", 2, 3, 16), f32("xk", 2, 3, 8)}, ropeQK, []int{1}},
	}
	covered := map[ir.OpKind]bool{}
	for _, c := range cases {
		covered[c.kind] = true
	}
	for _, k := range ir.OpKinds() {
		if (k.Info().Backward != nil || k.Info().BackwardAll != nil) && !covered[k] {
			t.Errorf("%v has a backward rule and no case here", k)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range cases {
		name := fmt.Sprint(c.kind, c.args[0].Shape)
		if c.drop != nil {
			name += fmt.Sprint(" without result ", c.drop)
		}
		t.Run(name, func(t *testing.T) {
			fwd, err := ir.NewOp(c.kind, c.args, c.attrs, ir.Pos{})
			if err != nil {
				t.Fatal(err)
			}
			dys := make([]*ir.Value, len(fwd.Results))
			for j, r := range fwd.Results {
				r.Name = fmt.Sprint("out", j)
				if !slices.Contains(c.drop, j) {
					dys[j] = f32(fmt.Sprint("dy", j), r.Shape...)
				}
			}
			rec := &gradRecorder{}
			var grads []*ir.Value
			if len(fwd.Results) > 1 {
				grads = c.kind.Info().BackwardAll(rec, fwd, dys)
			} else {
				grads = c.kind.Info().Backward(rec, fwd, dys[0])
			}

			// One buffer per value, one instruction per op.
			ids := map[*ir.Value]int32{}
			var prog ir.Program
			buf := func(v *ir.Value) int32 {
				if id, ok := ids[v]; ok {
					return id
				}
				ids[v] = int32(len(prog.Buffers))
				prog.Buffers = append(prog.Buffers, ir.Buffer{Name: v.Name, DType: v.DType, Elems: v.Shape.NumElements(), Parent: -1, Shape: v.Shape})
				return ids[v]
			}
			instr := func(op *ir.Op) ir.Instr {
				k := ir.Instr{Op: ir.Kernel, Kern: op.Kind, Attrs: op.Attrs}
				for _, a := range op.Args {
					k.Args = append(k.Args, buf(a))
				}
				for _, r := range op.Results {
					k.Outs = append(k.Outs, buf(r))
				}
				return k
			}
			fi := instr(fwd)
			for _, dy := range dys {
				if dy != nil {
					buf(dy)
				}
			}
			var bi []ir.Instr
			for _, op := range rec.ops {
				bi = append(bi, instr(op))
			}
			prog.Streams[ir.Compute] = append([]ir.Instr{fi}, bi...)
			b := &codegen.Bundle{Model: "ops", Topo: ir.Topology{GPUsPerNode: 1, Nodes: 1}, Micro: 1, Templates: []ir.Program{prog}}
			if err := codegen.Validate(b); err != nil {
				t.Fatal(err)
			}
			k := testRank(t, b, 0)
			for _, a := range c.args {
				if a.DType == ir.I32 {
					for i := range k.ints(ids[a]) {
						k.ints(ids[a])[i] = int32(rng.IntN(int(c.args[1].Shape[0])))
					}
					continue
				}
				for i := range k.f(ids[a]) {
					k.f(ids[a])[i] = float32(rng.NormFloat64())
				}
			}
			for _, dy := range dys {
				if dy != nil {
					R := k.f(ids[dy])
					for i := range R {
						R[i] = float32(rng.NormFloat64())
					}
				}
			}
			J := func() float64 {
				if err := k.kernel(ir.Compute, &fi); err != nil {
					t.Fatal(err)
				}
				var s float64
				for j, r := range fwd.Results {
					if dys[j] == nil {
						continue
					}
					R := k.f(ids[dys[j]])
					for i, o := range k.f(ids[r]) {
						s += float64(o) * float64(R[i])
					}
				}
				return s
			}
			J()
			for i := range bi {
				if err := k.kernel(ir.Compute, &bi[i]); err != nil {
					t.Fatal(err)
				}
			}
			for j, a := range c.args {
				if a.DType == ir.I32 {
					continue
				}
				if j >= len(grads) {
					t.Fatalf("no gradient for operand %d", j)
				}
				x := k.f(ids[a])
				got := make([]float32, len(x)) // no gradient: zero, which J must agree with
				if grads[j] != nil {
					got = append(got[:0], k.f(ids[grads[j]])...)
				}
				const h = 1e-2
				for e := range x {
					x0 := x[e]
					x[e] = x0 + h
					jp := J()
					x[e] = x0 - h
					jm := J()
					x[e] = x0
					fd := (jp - jm) / (2 * h)
					if d := math.Abs(fd - float64(got[e])); d > 2e-3+2e-3*math.Abs(fd) {
						t.Errorf("d/d%s[%d] = %.6g, central difference %.6g", a.Name, e, got[e], fd)
					}
				}
			}
		})
	}
}

// TestCrossEntropyGradThroughDispatch: the loss seed autodiff makes,
// cross_entropy_grad(logits, targets, scale), is scale times the
// gradient of the cross_entropy kernel's loss.
func TestCrossEntropyGradThroughDispatch(t *testing.T) {
	const rows, vocab, scale = 6, 7, 0.37
	prog := ir.Program{Buffers: []ir.Buffer{
		{Name: "logits", DType: ir.F32, Elems: rows * vocab, Parent: -1, Shape: []int64{2, 3, vocab}},
		{Name: "targets", DType: ir.I32, Elems: rows, Parent: -1, Shape: []int64{2, 3}},
		{Name: "loss", DType: ir.F32, Elems: 1, Parent: -1, Shape: []int64{}},
		{Name: "dlogits", DType: ir.F32, Elems: rows * vocab, Parent: -1, Shape: []int64{2, 3, vocab}},
	}}
	fwd := ir.Instr{Op: ir.Kernel, Kern: ir.CrossEntropy, Args: []int32{0, 1}, Outs: []int32{2}}
	bwd := ir.Instr{Op: ir.Kernel, Kern: ir.CrossEntropyGrad, Args: []int32{0, 1}, Outs: []int32{3},
		Attrs: []ir.Attr{ir.FloatAttr("scale", scale)}}
	prog.Streams[ir.Compute] = []ir.Instr{fwd, bwd}
	b := &codegen.Bundle{Model: "ce", Topo: ir.Topology{GPUsPerNode: 1, Nodes: 1}, Micro: 1, Templates: []ir.Program{prog}}
	if err := codegen.Validate(b); err != nil {
		t.Fatal(err)
	}
	k := testRank(t, b, 0)
	rng := rand.New(rand.NewPCG(3, 4))
	x := k.f(0)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for i := range k.ints(1) {
		k.ints(1)[i] = int32(rng.IntN(vocab))
	}
	loss := func() float64 {
		if err := k.kernel(ir.Compute, &fwd); err != nil {
			t.Fatal(err)
		}
		return float64(k.f(2)[0])
	}
	if err := k.kernel(ir.Compute, &bwd); err != nil {
		t.Fatal(err)
	}
	const h = 1e-2
	for e := range x {
		x0 := x[e]
		x[e] = x0 + h
		lp := loss()
		x[e] = x0 - h
		lm := loss()
		x[e] = x0
		if fd, got := scale*(lp-lm)/(2*h), float64(k.f(3)[e]); math.Abs(fd-got) > 1e-3 {
			t.Errorf("dlogits[%d] = %.6g, central difference %.6g", e, got, fd)
		}
	}
}

// testRank is rank r of b on the CPU backend, without a Comm or data.
func testRank(t testing.TB, b *codegen.Bundle, r int) *rank {
	t.Helper()
	k, err := newRank(b, r, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// ints is buffer id's ids on the host.
func (k *rank) ints(id int32) []int32 { return k.m(id).HostInts() }
