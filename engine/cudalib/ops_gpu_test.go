//go:build cgo

package cudalib

import (
	"math"
	"math/rand/v2"
	"testing"

	"amspc/kernels"
	"amspc/kernels/gpu"
)

// TestGPUOps: NVRTC compiles kernels/gpu's ops.cu for this GPU, every
// kernel of the table resolves, and a forward, a row reduction, a
// column reduction and AdamW compute what package kernels computes
// (within issue 12's 1e-5; AdamW's explicitly rounded arithmetic bit
// for bit).
func TestGPUOps(t *testing.T) {
	l, c := openGPU(t)
	d := c.Device
	cubin, err := l.Compile(gpu.Source, "ops.cu", d.Major, d.Minor)
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.LoadModule(cubin)
	if err != nil {
		t.Fatal(err)
	}
	fn := map[string]*Function{}
	for _, k := range gpu.Kernels {
		if fn[k.Name], err = m.Function(k.Name); err != nil {
			t.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(7, 7))
	rnd := func(n int) []float32 {
		s := make([]float32, n)
		for i := range s {
			s[i] = rng.Float32()*2 - 1
		}
		return s
	}
	dev := func(s []float32) Ptr { return devFloats(t, c, s) }
	back := func(p Ptr, n int) []float32 {
		out := make([]float32, n)
		if err := c.CopyOut(out, p); err != nil {
			t.Fatal(err)
		}
		return out
	}
	check := func(what string, got, want []float32, exact bool) {
		var diff, big float64
		eq := true
		for i := range want {
			diff = max(diff, math.Abs(float64(got[i]-want[i])))
			big = max(big, math.Abs(float64(want[i])))
			eq = eq && math.Float32bits(got[i]) == math.Float32bits(want[i])
		}
		if diff > 1e-5*big || (exact && !eq) {
			t.Errorf("%s: relative error %.3g, same bits %v", what, diff/big, eq)
		} else {
			t.Logf("%s: relative error %.3g, same bits %v", what, diff/big, eq)
		}
	}
	const rows, dim = 300, 1100
	n := rows * dim
	x, w, dy := rnd(n), rnd(dim), rnd(n)
	px, pw, pdy, pout := dev(x), dev(w), dev(dy), dev(make([]float32, n))
	grid := [3]int{gpu.Grid1D(int64(n), 256, 8*d.SMs), 1, 1}

	if err := fn["silu_f32"].Launch(grid, [3]int{256, 1, 1}, 0, pout, px, int64(n)); err != nil {
		t.Fatal(err)
	}
	want := make([]float32, n)
	kernels.SiLU(want, x)
	check("silu", back(pout, n), want, false)

	blk := gpu.RowBlock(dim)
	if err := fn["rmsnorm_f32"].Launch([3]int{rows, 1, 1}, [3]int{blk, 1, 1}, 0, pout, px, pw, int64(rows), int64(dim), float32(1e-5)); err != nil {
		t.Fatal(err)
	}
	kernels.RMSNorm(want, x, w, rows, dim, 1e-5)
	check("rmsnorm", back(pout, n), want, false)

	pdb := dev(make([]float32, dim))
	if err := fn["col_sum_f32"].Launch([3]int{gpu.Grid1D(dim, 256, 8*d.SMs), 1, 1}, [3]int{256, 1, 1}, 0, pdb, pdy, Ptr(0), int64(rows), int64(dim)); err != nil {
		t.Fatal(err)
	}
	wdb := make([]float32, dim)
	kernels.AddGradBroadcast(wdb, dy)
	check("col_sum (add_grad_broadcast)", back(pdb, dim), wdb, true)

	p, g := rnd(n), rnd(n)
	pp, pm, pv, pg := dev(p), dev(make([]float32, n)), dev(make([]float32, n)), dev(g)
	k := gpu.AdamWArgs(1, 1e-3, 0.9, 0.95, 1e-8, 0.1)
	kd := devFloat64s(t, c, k[:])
	if err := fn["adamw_f32"].Launch(grid, [3]int{256, 1, 1}, 0, pp, pm, pv, pg, int64(n), Ptr(0), int64(0), kd); err != nil {
		t.Fatal(err)
	}
	wm, wv := make([]float32, n), make([]float32, n)
	kernels.AdamW(p, wm, wv, g, 1, 1e-3, 0.9, 0.95, 1e-8, 0.1, nil)
	check("adamw p", back(pp, n), p, true)

	// Attention with grouped KV heads, causal, on the launch plans'
	// geometry: a head dim of four lanes a row, a sequence that ends
	// inside a block and crosses tiles.
	const batch, seq, heads, kvHeads, hd = 2, 200, 8, 2, 64
	nq, nkv := batch*seq*heads*hd, batch*seq*kvHeads*hd
	q, kk, vv, dout := rnd(nq), rnd(nkv), rnd(nkv), rnd(nq)
	pq, pk, pvv, pdo := dev(q), dev(kk), dev(vv), dev(dout)
	po, plse := dev(make([]float32, nq)), dev(make([]float32, batch*heads*seq))
	geo := gpu.AttentionGeometry(hd)
	ag := [3]int{(seq + geo.Rows - 1) / geo.Rows, heads, batch}
	attn := []any{int64(batch), int64(seq), int64(heads), int64(kvHeads), int64(hd), int64(1), int64(geo.Lanes), int64(geo.Tile)}
	block := [3]int{gpu.AttentionThreads, 1, 1}
	if err := fn["attention_f32"].Launch(ag, block, geo.Smem, append([]any{po, plse, pq, pk, pvv}, attn...)...); err != nil {
		t.Fatal(err)
	}
	wo, wlse := make([]float32, nq), make([]float32, batch*heads*seq)
	kernels.Attention(wo, wlse, q, kk, vv, batch, seq, heads, kvHeads, hd, true)
	check("attention out", back(po, nq), wo, false)
	check("attention lse", back(plse, batch*heads*seq), wlse, false)
	pds, pdq, pdk, pdv := dev(make([]float32, batch*heads*seq)), dev(make([]float32, nq)), dev(make([]float32, nkv)), dev(make([]float32, nkv))
	partK, partV := dev(make([]float32, nq)), dev(make([]float32, nq))
	pwo, pwl := dev(wo), dev(wlse)
	if err := fn["attention_dsum_f32"].Launch(grid, [3]int{256, 1, 1}, 0, pds, pwo, pdo, int64(batch), int64(seq), int64(heads), int64(hd)); err != nil {
		t.Fatal(err)
	}
	if err := fn["attention_dq_f32"].Launch(ag, block, geo.Smem, append([]any{pdq, pq, pk, pvv, pwl, pdo, pds}, attn...)...); err != nil {
		t.Fatal(err)
	}
	if err := fn["attention_dkv_f32"].Launch(ag, block, geo.Smem, append([]any{partK, partV, pq, pk, pvv, pwl, pdo, pds}, attn...)...); err != nil {
		t.Fatal(err)
	}
	if err := fn["attention_dkv_sum_f32"].Launch(grid, [3]int{256, 1, 1}, 0, pdk, pdv, partK, partV, int64(batch), int64(seq), int64(heads), int64(kvHeads), int64(hd)); err != nil {
		t.Fatal(err)
	}
	wdq, wdk, wdv := make([]float32, nq), make([]float32, nkv), make([]float32, nkv)
	kernels.AttentionGrad(wdq, wdk, wdv, q, kk, vv, wo, wlse, dout, batch, seq, heads, kvHeads, hd, true)
	check("attention dq", back(pdq, nq), wdq, false)
	check("attention dk", back(pdk, nkv), wdk, false)
	check("attention dv", back(pdv, nkv), wdv, false)
	if err := c.Sync(); err != nil {
		t.Fatal(err)
	}
}
