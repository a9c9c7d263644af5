package runtime

import (
	"math"
	"testing"

	"amspc/codegen"
	"amspc/ir"
)

// TestEveryOpHasACPUKernel: every op of the op table can appear in a
// bundle (forward, backward, optimizer and copies), so the CPU backend's
// table must have a kernel for each.
func TestEveryOpHasACPUKernel(t *testing.T) {
	for _, k := range ir.OpKinds() {
		if cpuKernels[k] == nil {
			t.Errorf("no CPU kernel for %v", k)
		}
	}
	if n := len(cpuKernels); n != len(ir.OpKinds()) {
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
	grp2 := codegen.Group{Outer: ir.Factor{S0: 2, S1: 1}, Inner: ir.Factor{S0: 1, S1: 1}}
	// norm [6] at 0, w [4,5] at 6, padding to 32; 16 elements per rank.
	lay := codegen.Layout{Stage: "s", Padded: 32, Params: []codegen.Slot{
		{Name: "norm", Offset: 0, Elems: 6}, {Name: "w", Offset: 6, Elems: 20, Decay: true}},
		PShard: codegen.Group{Outer: ir.Factor{S0: 1, S1: 1}, Inner: ir.Factor{S0: 1, S1: 1}}, OSShard: grp2,
		P: 0, Master: -1, M: 3, V: 4}
	prog := codegen.Program{
		Buffers: []codegen.Buffer{
			{Name: "P", DType: ir.F32, Elems: 32, Parent: -1},
			{Name: "P[os]", DType: ir.F32, Elems: 16, Parent: 0, Part: grp2},
			{Name: "G", DType: ir.F32, Elems: 32, Parent: -1},
			{Name: "OS.m", DType: ir.F32, Elems: 16, Parent: -1},
			{Name: "OS.v", DType: ir.F32, Elems: 16, Parent: -1},
			{Name: "G[os]", DType: ir.F32, Elems: 16, Parent: 2, Part: grp2},
		},
		Layouts: []codegen.Layout{lay},
	}
	step := codegen.Instr{Op: codegen.Kernel, Kern: ir.AdamWStep, Args: []int32{1, 3, 4, 5}, Outs: []int32{1, 3, 4},
		Attrs: []ir.Attr{ir.FloatAttr("lr", lr), ir.FloatAttr("beta1", b1), ir.FloatAttr("beta2", b2),
			ir.FloatAttr("eps", eps), ir.FloatAttr("weight_decay", wd)}}
	prog.Streams[codegen.Compute] = []codegen.Instr{step}
	b := &codegen.Bundle{Model: "adamw", Topo: codegen.Topology{GPUsPerNode: 2, Nodes: 1}, Micro: 1, Templates: []codegen.Program{prog}}
	if err := codegen.Validate(b); err != nil {
		t.Fatal(err)
	}
	ranks := []*rank{newRank(b, 0, nil, nil), newRank(b, 1, nil, nil)}
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
			if err := k.kernel(&b.Templates[0].Streams[codegen.Compute][0]); err != nil {
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
