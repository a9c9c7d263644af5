//go:build cgo

package hostc

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"amspc/kernels"
	"amspc/kernels/gpu"
)

func rnd(rng *rand.Rand, n int, scale float32) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = (rng.Float32()*2 - 1) * scale
	}
	return s
}

// relErr is the largest difference over the largest reference value (the
// infinity-norm relative error); exact says the bits are equal.
func relErr(got, want []float32) (rel float64, exact bool) {
	exact = len(got) == len(want)
	var diff, big float64
	for i := range want {
		diff = max(diff, math.Abs(float64(got[i])-float64(want[i])))
		big = max(big, math.Abs(float64(want[i])))
		exact = exact && math.Float32bits(got[i]) == math.Float32bits(want[i])
	}
	if big == 0 {
		return diff, exact
	}
	return diff / big, exact
}

// tol is the tolerance of issue 12 for fp32: 1e-5 relative.
const tol = 1e-5

// same checks got against want within tol, and bit for bit when exact.
func same(t *testing.T, what string, got, want []float32, exact bool) {
	t.Helper()
	rel, eq := relErr(got, want)
	switch {
	case rel > tol:
		t.Errorf("%s: relative error %.3g > %g", what, rel, tol)
	case exact && !eq:
		t.Errorf("%s: within %.3g but not the Go kernel's bits", what, rel)
	default:
		t.Logf("%s: relative error %.3g, same bits %v", what, rel, eq)
	}
}

var shapes = [][2]int{{1, 1}, {3, 37}, {5, 1100}, {64, 96}}

// TestElementwise: add, mul (same shape and broadcast) and their
// gradients, SiLU and GELU with theirs, and SwiGLU and GeGLUTanh with
// their gradients.
func TestElementwise(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, sh := range shapes {
		rows, d := sh[0], sh[1]
		n := rows * d
		a, b, bb, dy := rnd(rng, n, 3), rnd(rng, n, 3), rnd(rng, d, 3), rnd(rng, n, 1)
		for _, c := range []struct {
			name string
			b    []float32
		}{{"same", b}, {"broadcast", bb}} {
			got, want := make([]float32, n), make([]float32, n)
			Add(got, a, c.b)
			kernels.Add(want, a, c.b)
			same(t, "add "+c.name, got, want, true)
			Mul(got, a, c.b)
			kernels.Mul(want, a, c.b)
			same(t, "mul "+c.name, got, want, true)
			gda, gdb := make([]float32, n), make([]float32, len(c.b))
			wda, wdb := make([]float32, n), make([]float32, len(c.b))
			MulGrad(gda, gdb, a, c.b, dy)
			kernels.MulGrad(wda, wdb, a, c.b, dy)
			same(t, "mul_grad da "+c.name, gda, wda, true)
			same(t, "mul_grad db "+c.name, gdb, wdb, true)
		}
		got, want := make([]float32, n), make([]float32, n)
		Transpose(got, a, rows, d)
		kernels.Transpose(want, a, rows, d)
		same(t, "transpose", got, want, true)
		gdb, wdb := make([]float32, d), make([]float32, d)
		AddGradBroadcast(gdb, dy)
		kernels.AddGradBroadcast(wdb, dy)
		same(t, "add_grad_broadcast", gdb, wdb, true)
		x := rnd(rng, n, 8)
		for _, op := range []struct {
			name string
			fwd  [2]func(out, x []float32)
			bwd  [2]func(dx, x, dy []float32)
		}{
			{"silu", [2]func(out, x []float32){SiLU, kernels.SiLU}, [2]func(dx, x, dy []float32){SiLUGrad, kernels.SiLUGrad}},
			{"gelu", [2]func(out, x []float32){GELU, kernels.GELU}, [2]func(dx, x, dy []float32){GELUGrad, kernels.GELUGrad}},
		} {
			got, want := make([]float32, n), make([]float32, n)
			op.fwd[0](got, x)
			op.fwd[1](want, x)
			same(t, op.name, got, want, false)
			op.bwd[0](got, x, dy)
			op.bwd[1](want, x, dy)
			same(t, op.name+"_grad", got, want, false)
		}
		// swiglu against the Go kernels (as silu), and bit for bit
		// against the unfused kernels it replaces: silu_f32 then mul_f32;
		// mul_f32 twice and silu_grad_f32.
		b8 := rnd(rng, n, 8)
		want, tw := make([]float32, n), make([]float32, n)
		SwiGLU(got, x, b8)
		kernels.SwiGLU(want, x, b8)
		same(t, "swiglu", got, want, false)
		SiLU(tw, x)
		Mul(want, tw, b8)
		same(t, "swiglu unfused", got, want, true)
		gda, gdb := make([]float32, n), make([]float32, n)
		wda, wdb := make([]float32, n), make([]float32, n)
		SwiGLUGrad(gda, gdb, x, b8, dy)
		kernels.SwiGLUGrad(wda, wdb, x, b8, dy)
		same(t, "swiglu_grad da", gda, wda, false)
		same(t, "swiglu_grad db", gdb, wdb, false)
		dt := make([]float32, n)
		Mul(dt, dy, b8)
		SiLUGrad(wda, x, dt)
		Mul(wdb, dy, tw)
		same(t, "swiglu_grad da unfused", gda, wda, true)
		same(t, "swiglu_grad db unfused", gdb, wdb, true)
		// geglu_tanh likewise: against the Go kernels, and bit for bit
		// against gelu_tanh_f32 then mul_f32; mul_f32 twice and
		// gelu_tanh_grad_f32.
		GeGLUTanh(got, x, b8)
		kernels.GeGLUTanh(want, x, b8)
		same(t, "geglu_tanh", got, want, false)
		unary("gelu_tanh_f32", tw, x)
		Mul(want, tw, b8)
		same(t, "geglu_tanh unfused", got, want, true)
		GeGLUTanhGrad(gda, gdb, x, b8, dy)
		kernels.GeGLUTanhGrad(wda, wdb, x, b8, dy)
		same(t, "geglu_tanh_grad da", gda, wda, false)
		same(t, "geglu_tanh_grad db", gdb, wdb, false)
		unaryGrad("gelu_tanh_grad_f32", wda, x, dt)
		Mul(wdb, dy, tw)
		same(t, "geglu_tanh_grad da unfused", gda, wda, true)
		same(t, "geglu_tanh_grad db unfused", gdb, wdb, true)
	}
}

// TestNorms: RMSNorm and LayerNorm, forward and backward (the weight and
// bias gradients sum rows in the Go kernels' order).
func TestNorms(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	for _, sh := range shapes {
		rows, d := sh[0], sh[1]
		n := rows * d
		x, w, b, dy := rnd(rng, n, 2), rnd(rng, d, 1.5), rnd(rng, d, 1), rnd(rng, n, 1)
		got, want := make([]float32, n), make([]float32, n)
		RMSNorm(got, x, w, rows, d, 1e-5)
		kernels.RMSNorm(want, x, w, rows, d, 1e-5)
		same(t, "rmsnorm", got, want, false)
		gdw, wdw := make([]float32, d), make([]float32, d)
		RMSNormGrad(got, gdw, x, w, dy, rows, d, 1e-5)
		kernels.RMSNormGrad(want, wdw, x, w, dy, rows, d, 1e-5)
		same(t, "rmsnorm_grad dx", got, want, false)
		same(t, "rmsnorm_grad dw", gdw, wdw, false)
		LayerNorm(got, x, w, b, rows, d, 1e-5)
		kernels.LayerNorm(want, x, w, b, rows, d, 1e-5)
		same(t, "layernorm", got, want, false)
		gdb, wdb := make([]float32, d), make([]float32, d)
		LayerNormGrad(got, gdw, gdb, x, w, dy, rows, d, 1e-5)
		kernels.LayerNormGrad(want, wdw, wdb, x, w, dy, rows, d, 1e-5)
		same(t, "layernorm_grad dx", got, want, false)
		same(t, "layernorm_grad dw", gdw, wdw, false)
		same(t, "layernorm_grad db", gdb, wdb, true)
	}
}

// TestRoPE: the rotation and its inverse, plain and with Llama 3's
// scaling of the frequencies (Llama 3.2's: factor 32, over a context of
// 8,192 positions, at positions past it).
func TestRoPE(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	llama3 := kernels.RoPEFreq{Theta: 500000, Factor: 32, Low: 1, High: 4, Original: 8192}
	for _, sh := range [][4]int{{1, 1, 1, 2}, {2, 7, 3, 8}, {2, 128, 4, 64}, {1, 9000, 1, 64}} {
		batch, seq, heads, hd := sh[0], sh[1], sh[2], sh[3]
		n := batch * seq * heads * hd
		x := rnd(rng, n, 2)
		got, want := make([]float32, n), make([]float32, n)
		RoPE(got, x, batch, seq, heads, hd, kernels.RoPEFreq{Theta: 10000})
		kernels.RoPE(want, x, batch, seq, heads, hd, kernels.RoPEFreq{Theta: 10000})
		same(t, "rope", got, want, false)
		RoPEGrad(got, x, batch, seq, heads, hd, kernels.RoPEFreq{Theta: 500000})
		kernels.RoPEGrad(want, x, batch, seq, heads, hd, kernels.RoPEFreq{Theta: 500000})
		same(t, "rope_grad", got, want, false)
		RoPE(got, x, batch, seq, heads, hd, llama3)
		kernels.RoPE(want, x, batch, seq, heads, hd, llama3)
		same(t, "rope llama3", got, want, false)
		RoPEGrad(got, x, batch, seq, heads, hd, llama3)
		kernels.RoPEGrad(want, x, batch, seq, heads, hd, llama3)
		same(t, "rope_grad llama3", got, want, false)
	}
}

// TestEmbed: the lookup, its gradient (repeated ids summed in position
// order: the Go kernel's bits), and a bad id named as the Go kernel
// names it.
func TestEmbed(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	const vocab, d = 50, 37
	ids := make([]int32, 300)
	for i := range ids {
		ids[i] = int32(rng.IntN(vocab / 2)) // repeats, and unused rows
	}
	table, dy := rnd(rng, vocab*d, 1), rnd(rng, len(ids)*d, 1)
	got, want := make([]float32, len(ids)*d), make([]float32, len(ids)*d)
	if err := Embed(got, ids, table, vocab, d); err != nil {
		t.Fatal(err)
	}
	kernels.Embed(want, ids, table, vocab, d)
	same(t, "embed", got, want, true)
	gdt, wdt := rnd(rng, vocab*d, 1), make([]float32, vocab*d) // stale values must go
	EmbedGrad(gdt, ids, dy, vocab, d)
	kernels.EmbedGrad(wdt, ids, dy, vocab, d)
	same(t, "embed_grad", gdt, wdt, true)
	ids[200], ids[100] = vocab, -1
	gerr, werr := Embed(got, ids, table, vocab, d), kernels.Embed(want, ids, table, vocab, d)
	if gerr == nil || werr == nil || gerr.Error() != werr.Error() {
		t.Errorf("bad ids: %v, want %v", gerr, werr)
	}
}

// TestCrossEntropy: the mean loss, its gradient, and a bad target.
func TestCrossEntropy(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	for _, sh := range [][2]int{{1, 2}, {7, 37}, {130, 256}, {3, 1100}} {
		rows, vocab := sh[0], sh[1]
		logits := rnd(rng, rows*vocab, 6)
		targets := make([]int32, rows)
		for i := range targets {
			targets[i] = int32(rng.IntN(vocab))
		}
		gl, err := CrossEntropy(logits, targets, rows, vocab)
		if err != nil {
			t.Fatal(err)
		}
		wl, _ := kernels.CrossEntropy(logits, targets, rows, vocab)
		if math.Abs(gl-wl) > tol*math.Abs(wl) {
			t.Errorf("cross_entropy %v: %v, want %v", sh, gl, wl)
		}
		got, want := make([]float32, rows*vocab), make([]float32, rows*vocab)
		CrossEntropyGrad(got, logits, targets, rows, vocab, 0.25)
		kernels.CrossEntropyGrad(want, logits, targets, rows, vocab, 0.25)
		same(t, "cross_entropy_grad", got, want, false)
		targets[rows-1] = int32(vocab)
		_, gerr := CrossEntropy(logits, targets, rows, vocab)
		_, werr := kernels.CrossEntropy(logits, targets, rows, vocab)
		if gerr == nil || werr == nil || gerr.Error() != werr.Error() {
			t.Errorf("bad target: %v, want %v", gerr, werr)
		}
	}
}

// TestAdamW: several steps with weight decay on some ranges: the Go
// kernel's bits (explicitly rounded double arithmetic).
func TestAdamW(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	const n = 1000
	decayed := [][2]int{{0, 100}, {250, 251}, {400, 999}}
	var ranges []kernels.Range
	for _, r := range decayed {
		ranges = append(ranges, kernels.Range{Lo: r[0], Hi: r[1]})
	}
	p := rnd(rng, n, 1)
	gp, gm, gv := append([]float32(nil), p...), make([]float32, n), make([]float32, n)
	wp, wm, wv := append([]float32(nil), p...), make([]float32, n), make([]float32, n)
	for step := 1; step <= 5; step++ {
		g := rnd(rng, n, 0.1)
		AdamW(gp, gm, gv, g, step, 1e-3, 0.9, 0.95, 1e-8, 0.1, decayed)
		kernels.AdamW(wp, wm, wv, g, step, 1e-3, 0.9, 0.95, 1e-8, 0.1, ranges)
	}
	same(t, "adamw p", gp, wp, true)
	same(t, "adamw m", gm, wm, true)
	same(t, "adamw v", gv, wv, true)
}

// TestAttention: forward and backward, causal or not, with grouped KV
// heads, against the Go kernels (an online softmax and other orders of
// summation: within 1e-5), on the GPU's geometry (blocks of 128 threads
// as POSIX threads): head dims of one to sixteen lanes a row, some not a
// multiple of four, sequences that end inside a block, a tile and a
// group of 16 keys, and several tiles.
func TestAttention(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	for _, sh := range [][5]int{{1, 1, 1, 1, 2}, {2, 13, 4, 2, 8}, {1, 70, 2, 1, 64}, {2, 33, 3, 3, 16},
		{1, 50, 4, 2, 128}, {2, 21, 2, 1, 6}, {1, 37, 2, 2, 100}, {1, 40, 2, 1, 256}, {1, 150, 2, 1, 16}} {
		batch, seq, heads, kvHeads, hd := sh[0], sh[1], sh[2], sh[3], sh[4]
		nq, nkv := batch*seq*heads*hd, batch*seq*kvHeads*hd
		q, k, v, dout := rnd(rng, nq, 2), rnd(rng, nkv, 2), rnd(rng, nkv, 1), rnd(rng, nq, 1)
		for _, causal := range []bool{false, true} {
			name := fmt.Sprintf("attention %v causal=%v", sh, causal)
			got, want := make([]float32, nq), make([]float32, nq)
			glse, wlse := make([]float32, batch*heads*seq), make([]float32, batch*heads*seq)
			Attention(got, glse, q, k, v, batch, seq, heads, kvHeads, hd, causal)
			kernels.Attention(want, wlse, q, k, v, batch, seq, heads, kvHeads, hd, causal)
			same(t, name+" out", got, want, false)
			same(t, name+" lse", glse, wlse, false)
			gdq, gdk, gdv := make([]float32, nq), make([]float32, nkv), make([]float32, nkv)
			wdq, wdk, wdv := make([]float32, nq), make([]float32, nkv), make([]float32, nkv)
			AttentionGrad(gdq, gdk, gdv, q, k, v, want, wlse, dout, batch, seq, heads, kvHeads, hd, causal)
			kernels.AttentionGrad(wdq, wdk, wdv, q, k, v, want, wlse, dout, batch, seq, heads, kvHeads, hd, causal)
			same(t, name+" dq", gdq, wdq, false)
			same(t, name+" dk", gdk, wdk, false)
			same(t, name+" dv", gdv, wdv, false)
		}
	}
}

// TestFirstNonFinite: the smallest index of a NaN or infinity.
func TestFirstNonFinite(t *testing.T) {
	x := make([]float32, 5000)
	if i := FirstNonFinite(x); i != -1 {
		t.Errorf("clean: %d", i)
	}
	x[4000], x[1234] = float32(math.Inf(-1)), float32(math.NaN())
	if i, w := FirstNonFinite(x), kernels.FirstNonFinite(x); i != 1234 || w != 1234 {
		t.Errorf("got %d, Go kernel %d, want 1234", i, w)
	}
	x[1234] = 0
	if i := FirstNonFinite(x); i != 4000 {
		t.Errorf("infinity: %d", i)
	}
}

// TestShimSourceIsCUDA: the file the shim compiles is the embedded one,
// with the CUDA spellings the shim stands in for.
func TestShimSourceIsCUDA(t *testing.T) {
	for _, s := range []string{"__global__", "__syncthreads()", "__shared__", "atomicMin", "blockIdx.x"} {
		if !strings.Contains(gpu.Source, s) {
			t.Errorf("ops.cu lacks %s", s)
		}
	}
}

// TestBF16: bf16_round, bf16_pack and bf16_widen store a value as
// kernels.RoundBF16 does (to nearest, ties to even; infinities and NaNs
// kept), in two bytes that widen back to it exactly: random values over
// many binades, ties both ways, subnormals, the largest finite values
// (which round to infinity) and the non-finite ones.
func TestBF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	x := []float32{0, float32(math.Copysign(0, -1)), 1, -1, math.MaxFloat32, -math.MaxFloat32, float32(math.Inf(1)), float32(math.Inf(-1)),
		math.Float32frombits(0x3f808000), math.Float32frombits(0x3f818000), math.Float32frombits(0x00000001), math.Float32frombits(0x807fffff),
		math.Float32frombits(0x7f7f8000), math.Float32frombits(0x7fc00000), math.Float32frombits(0x7f800001), math.Float32frombits(0xff800100)}
	for range 10000 {
		x = append(x, math.Float32frombits(rng.Uint32()))
	}
	bits, back := BF16(x)
	for i, v := range x {
		want := kernels.RoundBF16(v)
		if v != v {
			if back[i] == back[i] {
				t.Errorf("%#08x (NaN) stored as %#04x, not a NaN", math.Float32bits(v), bits[i])
			}
			continue
		}
		if math.Float32bits(back[i]) != math.Float32bits(want) || uint32(bits[i]) != math.Float32bits(want)>>16 {
			t.Errorf("%#08x: stored %#04x, widened %#08x; RoundBF16 gives %#08x", math.Float32bits(v), bits[i], math.Float32bits(back[i]), math.Float32bits(want))
		}
	}
	// bf16_finish in one pass stores the same bits, and flags what
	// first_nonfinite_f32 flags in the rounded values.
	fin, first := BF16Finish(x)
	for i := range x {
		if fin[i] != bits[i] {
			t.Fatalf("%#08x: bf16_finish stored %#04x, round and pack %#04x", math.Float32bits(x[i]), fin[i], bits[i])
		}
	}
	if want := FirstNonFinite(back); first != want || first < 0 {
		t.Errorf("bf16_finish flags element %d, first_nonfinite_f32 of the rounded values %d", first, want)
	}
	clean := []float32{1, -2.5, math.MaxFloat32, 1e-40}
	if _, first := BF16Finish(clean); first != 2 { // rounds past bf16's largest finite value
		t.Errorf("bf16_finish of %v flags %d, want 2", clean, first)
	}
}

// mmaOperands are a random 16x16 and 16x8 of bf16 values (their top 16
// bits) and a 16x8 fp32 c.
func mmaOperands(rng *rand.Rand) (a, b []uint16, c []float32) {
	bf := func(n int) []uint16 {
		s := make([]uint16, n)
		for i := range s {
			s[i] = uint16(math.Float32bits(rng.Float32()*2-1) >> 16)
		}
		return s
	}
	return bf(256), bf(128), rnd(rng, 128, 1)
}

// TestMMAProbe: mma.cu's probe on the shim's emulated tensor-core product
// (the PTX ISA's fragment layout, which runtime/cudalib's TestGPUMMA
// checks on a GPU) computes a b + c: a lane that loaded the wrong
// elements would put them in the wrong places.
func TestMMAProbe(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 8))
	for range 3 {
		a, b, c := mmaOperands(rng)
		got, want := MMAProbe(a, b, c), gpu.MMAReference(a, b, c)
		for i := range want {
			if d := math.Abs(float64(got[i]) - want[i]); d > 1e-5 {
				t.Fatalf("element %d (row %d, col %d): %g, want %g", i, i/8, i%8, got[i], want[i])
			}
		}
	}
}

// TestAttentionMMA: mma.cu's tensor-core attention, forward and backward,
// on the shim's emulated products, against the Go kernels on the same
// (bf16) values: out, lse, dq, dk and dv within bf16's precision (1e-2
// of the largest magnitude, issue 12's bf16 bound; probabilities and ds
// enter the products rounded to bf16), over
// head dims 16 to 128, grouped KV heads, causal or not, sequences that
// end inside a tile and span several.
func TestAttentionMMA(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	bf := func(x []float32) ([]uint16, []float32) {
		h, w := make([]uint16, len(x)), make([]float32, len(x))
		for i, v := range x {
			w[i] = kernels.RoundBF16(v)
			h[i] = uint16(math.Float32bits(w[i]) >> 16)
		}
		return h, w
	}
	for _, sh := range [][5]int{{1, 70, 2, 1, 64}, {2, 100, 4, 2, 64}, {1, 150, 2, 2, 128}, {1, 33, 2, 1, 16}, {1, 64, 8, 2, 32}} {
		batch, seq, heads, kvHeads, hd := sh[0], sh[1], sh[2], sh[3], sh[4]
		nq, nkv := batch*seq*heads*hd, batch*seq*kvHeads*hd
		hq, q := bf(rnd(rng, nq, 2))
		hk, k := bf(rnd(rng, nkv, 2))
		hv, v := bf(rnd(rng, nkv, 1))
		hd16, dout := bf(rnd(rng, nq, 1))
		for _, causal := range []bool{false, true} {
			name := fmt.Sprintf("attention_mma_fwd %v causal=%v", sh, causal)
			got, want := make([]float32, nq), make([]float32, nq)
			glse, wlse := make([]float32, batch*heads*seq), make([]float32, batch*heads*seq)
			AttentionMMA(got, glse, hq, hk, hv, batch, seq, heads, kvHeads, hd, causal)
			kernels.Attention(want, wlse, q, k, v, batch, seq, heads, kvHeads, hd, causal)
			for _, c := range []struct {
				what      string
				got, want []float32
			}{{"out", got, want}, {"lse", glse, wlse}} {
				if rel, _ := relErr(c.got, c.want); rel > 1e-2 {
					t.Errorf("%s %s: relative error %.3g > 1e-2", name, c.what, rel)
				} else {
					t.Logf("%s %s: relative error %.3g", name, c.what, rel)
				}
			}
			// The backward from the Go forward's out and lse.
			dsum := gpu.AttentionDsum(want, dout, batch, seq, heads, hd)
			gdq, pk, pv := make([]float32, nq), make([]float32, nq), make([]float32, nq)
			AttentionMMAGrad(gdq, pk, pv, hq, hk, hv, hd16, wlse, dsum, batch, seq, heads, kvHeads, hd, causal)
			gdk, gdv := gpu.SumGroupParts(pk, batch, seq, heads, kvHeads, hd), gpu.SumGroupParts(pv, batch, seq, heads, kvHeads, hd)
			wdq, wdk, wdv := make([]float32, nq), make([]float32, nkv), make([]float32, nkv)
			kernels.AttentionGrad(wdq, wdk, wdv, q, k, v, want, wlse, dout, batch, seq, heads, kvHeads, hd, causal)
			for _, c := range []struct {
				what      string
				got, want []float32
			}{{"dq", gdq, wdq}, {"dk", gdk, wdk}, {"dv", gdv, wdv}} {
				if rel, _ := relErr(c.got, c.want); rel > 1e-2 {
					t.Errorf("%s %s: relative error %.3g > 1e-2", name, c.what, rel)
				} else {
					t.Logf("%s %s: relative error %.3g", name, c.what, rel)
				}
			}
		}
	}
}
