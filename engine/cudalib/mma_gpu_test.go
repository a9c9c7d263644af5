//go:build cgo

package cudalib

import (
	"math"
	"math/rand/v2"
	"testing"

	"amspc/kernels"
	"amspc/kernels/gpu"
)

// TestGPUMMA: kernels/gpu's mma.cu compiles for this GPU (tensor cores:
// sm_80 and later) and its probe, which loads a warp's fragments as the
// PTX ISA lays them out (and kernels/gpu/hostc's shim emulates them),
// computes a b + c: the layout the future tensor-core kernels are
// developed against on the host is the hardware's.
func TestGPUMMA(t *testing.T) {
	l, c := openGPU(t)
	fn, err := mmaModule(t, l, c).Function("mma_probe")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(16, 8))
	for range 3 {
		bf := func(n int) []uint16 {
			s := make([]uint16, n)
			for i := range s {
				s[i] = uint16(math.Float32bits(rng.Float32()*2-1) >> 16)
			}
			return s
		}
		a, b := bf(256), bf(128)
		cc := make([]float32, 128)
		for i := range cc {
			cc[i] = rng.Float32()*2 - 1
		}
		pa, pb, pc, pd := devBF16(t, c, a), devBF16(t, c, b), devFloats(t, c, cc), devFloats(t, c, make([]float32, 128))
		if err := fn.Launch([3]int{1, 1, 1}, [3]int{32, 1, 1}, 0, pd, pa, pb, pc); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, 128)
		if err := c.CopyOut(got, pd); err != nil {
			t.Fatal(err)
		}
		want := gpu.MMAReference(a, b, cc)
		worst := 0.0
		for i := range want {
			if dd := math.Abs(float64(got[i]) - want[i]); dd > 1e-5 {
				t.Fatalf("element %d (row %d, col %d): %g, want %g", i, i/8, i%8, got[i], want[i])
			} else {
				worst = math.Max(worst, dd)
			}
		}
		t.Logf("mma_probe: largest difference from the float64 product %.2g", worst)
	}
}

// mmaModule loads kernels/gpu's mma.cu on c.
func mmaModule(tb testing.TB, l *Libs, c *Context) *Module {
	d := c.Device
	if d.Major < 8 {
		tb.Skipf("%v has no bf16 tensor cores (sm_80 and later)", d)
	}
	cubin, err := l.Compile(gpu.MMASource, "mma.cu", d.Major, d.Minor)
	if err != nil {
		tb.Fatal(err)
	}
	m, err := c.LoadModule(cubin)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// attnOperands are random bf16 q, k, v (as device pairs and as their
// float32 values) for an attention of the given shape, on c.
type attnOperands struct {
	q, k, v, dout   []float32
	pq, pk, pv, pdo Ptr
}

func newAttnOperands(tb testing.TB, c *Context, rng *rand.Rand, nq, nkv int) *attnOperands {
	mk := func(n int, scale float32) ([]float32, Ptr) {
		w, h := make([]float32, n), make([]uint16, n)
		for i := range w {
			w[i] = math.Float32frombits(math.Float32bits((rng.Float32()*2-1)*scale) &^ 0xffff)
			h[i] = uint16(math.Float32bits(w[i]) >> 16)
		}
		return w, devBF16(tb, c, h)
	}
	a := &attnOperands{}
	a.q, a.pq = mk(nq, 2)
	a.k, a.pk = mk(nkv, 2)
	a.v, a.pv = mk(nkv, 1)
	a.dout, a.pdo = mk(nq, 1)
	return a
}

// TestGPUAttentionMMA: mma.cu's tensor-core attention, forward and
// backward, on the GPU against the Go kernels on the same bf16 values:
// out, lse, dq, dk and dv within 1e-2 of their largest magnitude
// (probabilities and ds enter the products rounded to bf16), as on the
// host (kernels/gpu/hostc TestAttentionMMA).
func TestGPUAttentionMMA(t *testing.T) {
	l, c := openGPU(t)
	m := mmaModule(t, l, c)
	fn, err := m.Function("attention_mma_fwd")
	if err != nil {
		t.Fatal(err)
	}
	var gradFn [2]*Function
	for i, name := range []string{"attention_mma_dq", "attention_mma_dkv"} {
		if gradFn[i], err = m.Function(name); err != nil {
			t.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(9, 9))
	for _, sh := range [][5]int{{2, 200, 8, 2, 64}, {1, 130, 4, 4, 128}, {1, 33, 2, 1, 16}} {
		batch, seq, heads, kvHeads, hd := sh[0], sh[1], sh[2], sh[3], sh[4]
		nq, nkv, nl := batch*seq*heads*hd, batch*seq*kvHeads*hd, batch*heads*seq
		a := newAttnOperands(t, c, rng, nq, nkv)
		po, pl := devFloats(t, c, make([]float32, nq)), devFloats(t, c, make([]float32, nl))
		for _, causal := range []bool{false, true} {
			cf := int64(0)
			if causal {
				cf = 1
			}
			fwdSmem, _, _ := gpu.MMASmem(hd)
			if err := fn.Launch([3]int{(seq + 63) / 64, heads, batch}, [3]int{gpu.MMAThreads, 1, 1}, fwdSmem,
				po, pl, a.pq, a.pk, a.pv, int64(batch), int64(seq), int64(heads), int64(kvHeads), int64(hd), cf); err != nil {
				t.Fatal(err)
			}
			got, glse := make([]float32, nq), make([]float32, nl)
			if err := c.CopyOut(got, po); err != nil {
				t.Fatal(err)
			}
			if err := c.CopyOut(glse, pl); err != nil {
				t.Fatal(err)
			}
			want, wlse := make([]float32, nq), make([]float32, nl)
			kernels.Attention(want, wlse, a.q, a.k, a.v, batch, seq, heads, kvHeads, hd, causal)
			gdq, gdk, gdv, wdq, wdk, wdv := mmaGrad(t, c, gradFn, a, want, wlse, batch, seq, heads, kvHeads, hd, causal)
			for _, x := range []struct {
				what      string
				got, want []float32
			}{{"out", got, want}, {"lse", glse, wlse}, {"dq", gdq, wdq}, {"dk", gdk, wdk}, {"dv", gdv, wdv}} {
				rel := relMax(x.got, x.want)
				if !(rel <= 1e-2) {
					t.Errorf("%v causal=%v %s: relative error %.3g > 1e-2", sh, causal, x.what, rel)
				} else {
					t.Logf("%v causal=%v %s: relative error %.3g", sh, causal, x.what, rel)
				}
			}
		}
	}
}

// mmaGrad runs attention_mma_dq and attention_mma_dkv (fn) on a's bf16
// operands with the Go forward's out and lse, adds the dk and dv parts
// of each KV head's group, and returns them with the Go kernel's
// gradients.
func mmaGrad(t *testing.T, c *Context, fn [2]*Function, a *attnOperands, out, lse []float32, batch, seq, heads, kvHeads, hd int, causal bool) (gdq, gdk, gdv, wdq, wdk, wdv []float32) {
	nq, nkv := batch*seq*heads*hd, batch*seq*kvHeads*hd
	dsum := gpu.AttentionDsum(out, a.dout, batch, seq, heads, hd)
	dev := func(s []float32) Ptr { return devFloats(t, c, s) }
	pl, pds := dev(lse), dev(dsum)
	pdq, pk, pv := dev(make([]float32, nq)), dev(make([]float32, nq)), dev(make([]float32, nq))
	cf := int64(0)
	if causal {
		cf = 1
	}
	_, dqSmem, dkvSmem := gpu.MMASmem(hd)
	grid, block := [3]int{(seq + 63) / 64, heads, batch}, [3]int{gpu.MMAThreads, 1, 1}
	dims := []any{int64(batch), int64(seq), int64(heads), int64(kvHeads), int64(hd), cf}
	if err := fn[0].Launch(grid, block, dqSmem, append([]any{pdq, a.pq, a.pk, a.pv, pl, a.pdo, pds}, dims...)...); err != nil {
		t.Fatal(err)
	}
	if err := fn[1].Launch(grid, block, dkvSmem, append([]any{pk, pv, a.pq, a.pk, a.pv, pl, a.pdo, pds}, dims...)...); err != nil {
		t.Fatal(err)
	}
	gdq, parts := make([]float32, nq), [2][]float32{make([]float32, nq), make([]float32, nq)}
	for i, p := range []Ptr{pdq, pk, pv} {
		dst := gdq
		if i > 0 {
			dst = parts[i-1]
		}
		if err := c.CopyOut(dst, p); err != nil {
			t.Fatal(err)
		}
	}
	gdk, gdv = gpu.SumGroupParts(parts[0], batch, seq, heads, kvHeads, hd), gpu.SumGroupParts(parts[1], batch, seq, heads, kvHeads, hd)
	wdq, wdk, wdv = make([]float32, nq), make([]float32, nkv), make([]float32, nkv)
	kernels.AttentionGrad(wdq, wdk, wdv, a.q, a.k, a.v, out, lse, a.dout, batch, seq, heads, kvHeads, hd, causal)
	return gdq, gdk, gdv, wdq, wdk, wdv
}

// relMax is the largest difference over the largest reference magnitude.
func relMax(got, want []float32) float64 {
	var diff, big float64
	for i := range want {
		diff = math.Max(diff, math.Abs(float64(got[i])-float64(want[i])))
		big = math.Max(big, math.Abs(float64(want[i])))
	}
	return diff / big
}

// BenchmarkGPUAttention: the causal attention forward at TinyLlama-1.1B's
// shapes (seq 2048, 32 heads of 64, 4 KV heads, one sequence) on fp32
// CUDA cores (ops.cu's attention_f32 at the launch plans' geometry) and
// on bf16 tensor cores (mma.cu's attention_mma_fwd); reports TFLOP/s of
// the causal half's work.
func BenchmarkGPUAttention(b *testing.B) {
	l, c, ops := benchGPU(b)
	const batch, seq, heads, kvHeads, hd = 1, 2048, 32, 4, 64
	nq, nkv, nl := batch*seq*heads*hd, batch*seq*kvHeads*hd, batch*heads*seq
	rng := rand.New(rand.NewPCG(1, 2))
	a := newAttnOperands(b, c, rng, nq, nkv)
	dev := func(s []float32) Ptr { return devFloats(b, c, s) }
	fq, fk, fv := dev(a.q), dev(a.k), dev(a.v)
	po, pl := dev(make([]float32, nq)), dev(make([]float32, nl))
	flops := 4.0 * seq * seq * heads * hd / 2 // QK^T and PV, causal half
	f32, err := ops.Function("attention_f32")
	if err != nil {
		b.Fatal(err)
	}
	mma, err := mmaModule(b, l, c).Function("attention_mma_fwd")
	if err != nil {
		b.Fatal(err)
	}
	geo := gpu.AttentionGeometry(hd)
	run := func(b *testing.B, launch func() error) { benchLaunches(b, c, flops, 1e12, "TFLOP/s", launch) }
	b.Run("fp32-cuda-cores", func(b *testing.B) {
		run(b, func() error {
			return f32.Launch([3]int{(seq + geo.Rows - 1) / geo.Rows, heads, batch}, [3]int{gpu.AttentionThreads, 1, 1}, geo.Smem,
				po, pl, fq, fk, fv, int64(batch), int64(seq), int64(heads), int64(kvHeads), int64(hd), int64(1), int64(geo.Lanes), int64(geo.Tile))
		})
	})
	fwdSmem, dqSmem, dkvSmem := gpu.MMASmem(hd)
	mgrid, mblock := [3]int{(seq + 63) / 64, heads, batch}, [3]int{gpu.MMAThreads, 1, 1}
	dims := []any{int64(batch), int64(seq), int64(heads), int64(kvHeads), int64(hd), int64(1)}
	b.Run("bf16-tensor-cores", func(b *testing.B) {
		run(b, func() error {
			return mma.Launch(mgrid, mblock, fwdSmem, append([]any{po, pl, a.pq, a.pk, a.pv}, dims...)...)
		})
	})
	// The backward's dq and dk/dv kernels (the forward it recomputes,
	// dsum and the group sum are left out of both): 2.5 times the
	// forward's work.
	flops *= 2.5
	fdo, pds := dev(a.dout), dev(make([]float32, nl))
	pdq, pk, pv := dev(make([]float32, nq)), dev(make([]float32, nq)), dev(make([]float32, nq))
	fdq, err := ops.Function("attention_dq_f32")
	if err != nil {
		b.Fatal(err)
	}
	fdkv, err := ops.Function("attention_dkv_f32")
	if err != nil {
		b.Fatal(err)
	}
	mm := mmaModule(b, l, c)
	mdq, err := mm.Function("attention_mma_dq")
	if err != nil {
		b.Fatal(err)
	}
	mdkv, err := mm.Function("attention_mma_dkv")
	if err != nil {
		b.Fatal(err)
	}
	fdims := append(append([]any(nil), dims...), int64(geo.Lanes), int64(geo.Tile))
	fgrid := [3]int{(seq + geo.Rows - 1) / geo.Rows, heads, batch}
	b.Run("backward-fp32-cuda-cores", func(b *testing.B) {
		run(b, func() error {
			if err := fdq.Launch(fgrid, [3]int{gpu.AttentionThreads, 1, 1}, geo.Smem, append([]any{pdq, fq, fk, fv, pl, fdo, pds}, fdims...)...); err != nil {
				return err
			}
			return fdkv.Launch(fgrid, [3]int{gpu.AttentionThreads, 1, 1}, geo.Smem, append([]any{pk, pv, fq, fk, fv, pl, fdo, pds}, fdims...)...)
		})
	})
	b.Run("backward-bf16-tensor-cores", func(b *testing.B) {
		run(b, func() error {
			if err := mdq.Launch(mgrid, mblock, dqSmem, append([]any{pdq, a.pq, a.pk, a.pv, pl, a.pdo, pds}, dims...)...); err != nil {
				return err
			}
			return mdkv.Launch(mgrid, mblock, dkvSmem, append([]any{pk, pv, a.pq, a.pk, a.pv, pl, a.pdo, pds}, dims...)...)
		})
	})
}
