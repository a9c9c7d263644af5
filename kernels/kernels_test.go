package kernels

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

// Every op: the fp32 forward against the float64 reference (tight), and
// the fp32 backward against central differences of the reference.

const (
	fwdTol = 1e-5
	bwdTol = 1e-4
)

func TestEmbed(t *testing.T) {
	rng := newRand(10)
	vocab, d := 7, 5
	ids := []int32{3, 0, 6, 3, 3, 1} // repeated ids exercise the scatter-add
	table, table64 := randVec(rng, vocab*d)
	out := make([]float32, len(ids)*d)
	if err := Embed(out, ids, table, vocab, d); err != nil {
		t.Fatal(err)
	}
	checkClose(t, "embed", out, refEmbed(ids, table64, d), 0)
	dy, r := randVec(rng, len(ids)*d)
	dt := make([]float32, vocab*d)
	fill(dt, 9)
	EmbedGrad(dt, ids, dy, vocab, d)
	g := numGrads(func(in [][]float64) []float64 { return refEmbed(ids, in[0], d) }, [][]float64{table64}, r)
	checkClose(t, "embed dtable", dt, g[0], bwdTol)
}

func TestEmbedBadID(t *testing.T) {
	table := make([]float32, 4*2)
	out := make([]float32, 3*2)
	for _, c := range []struct {
		ids  []int32
		want string
	}{
		{[]int32{0, 4, 1}, "id 4 at position 1 is outside [0, 4)"},
		{[]int32{0, 1, -1}, "id -1 at position 2 is outside [0, 4)"},
	} {
		err := Embed(out, c.ids, table, 4, 2)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Embed(%v) = %v, want error containing %q", c.ids, err, c.want)
		}
	}
}

func TestRMSNorm(t *testing.T) {
	rng := newRand(11)
	rows, d := 6, 70 // d straddles the 64-column reduction block
	eps := float32(1e-5)
	x, x64 := randVec(rng, rows*d)
	w, w64 := randVec(rng, d)
	out := make([]float32, rows*d)
	RMSNorm(out, x, w, rows, d, eps)
	f := func(in [][]float64) []float64 { return refRMSNorm(in[0], in[1], d, float64(eps)) }
	checkClose(t, "rmsnorm", out, f([][]float64{x64, w64}), fwdTol)
	dy, r := randVec(rng, rows*d)
	dx, dw := make([]float32, rows*d), make([]float32, d)
	fill(dw, 9)
	RMSNormGrad(dx, dw, x, w, dy, rows, d, eps)
	g := numGrads(f, [][]float64{x64, w64}, r)
	checkClose(t, "rmsnorm dx", dx, g[0], bwdTol)
	checkClose(t, "rmsnorm dw", dw, g[1], bwdTol)
}

func TestLayerNorm(t *testing.T) {
	rng := newRand(12)
	rows, d := 6, 70
	eps := float32(1e-5)
	x, x64 := randVec(rng, rows*d)
	for i := range x { // an offset makes the mean matter
		x[i] += 0.5
		x64[i] += 0.5
	}
	w, w64 := randVec(rng, d)
	b, b64 := randVec(rng, d)
	out := make([]float32, rows*d)
	LayerNorm(out, x, w, b, rows, d, eps)
	f := func(in [][]float64) []float64 { return refLayerNorm(in[0], in[1], in[2], d, float64(eps)) }
	checkClose(t, "layernorm", out, f([][]float64{x64, w64, b64}), fwdTol)
	dy, r := randVec(rng, rows*d)
	dx, dw, db := make([]float32, rows*d), make([]float32, d), make([]float32, d)
	fill(db, 9)
	LayerNormGrad(dx, dw, db, x, w, dy, rows, d, eps)
	g := numGrads(f, [][]float64{x64, w64, b64}, r)
	checkClose(t, "layernorm dx", dx, g[0], bwdTol)
	checkClose(t, "layernorm dw", dw, g[1], bwdTol)
	checkClose(t, "layernorm db", db, g[2], bwdTol)
}

func TestRoPE(t *testing.T) {
	rng := newRand(13)
	// seq 6 covers position 0 (identity), odd and even positions; three
	// heads check the per-head pairing.
	batch, seq, heads, hd := 2, 6, 3, 8
	theta := 10000.0
	n := batch * seq * heads * hd
	x, x64 := randVec(rng, n)
	out := make([]float32, n)
	RoPE(out, x, batch, seq, heads, hd, RoPEFreq{Theta: theta})
	f := func(in [][]float64) []float64 { return refRoPE(in[0], batch, seq, heads, hd, theta) }
	checkClose(t, "rope", out, f([][]float64{x64}), fwdTol)
	for i := range heads * hd { // position 0 of batch 0 is not rotated
		if out[i] != x[i] {
			t.Fatalf("rope moved position 0: out[%d] = %v, x = %v", i, out[i], x[i])
		}
	}
	// A hand-computed pair: position 1, head 0, i = 1 turns by
	// theta^(-2/8) = 0.1 radians.
	base := 1 * heads * hd
	c, s := math.Cos(0.1), math.Sin(0.1)
	want := float64(x[base+1])*c - float64(x[base+5])*s
	if math.Abs(float64(out[base+1])-want) > 1e-6 {
		t.Errorf("rope pos 1 i 1 = %v, want %v", out[base+1], want)
	}
	dy, r := randVec(rng, n)
	dx := make([]float32, n)
	RoPEGrad(dx, dy, batch, seq, heads, hd, RoPEFreq{Theta: theta})
	g := numGrads(f, [][]float64{x64}, r)
	checkClose(t, "rope dx", dx, g[0], bwdTol)
	// In place is allowed.
	RoPE(x, x, batch, seq, heads, hd, RoPEFreq{Theta: theta})
	sameBits(t, "rope in place", x, out)
}

// TestAttention checks forward and backward against float64 references
// and finite differences, within one query block and (seq 70, attnBlock
// 64) across two, where causal units skip keys past their last row.
func TestAttention(t *testing.T) {
	for _, c := range []struct {
		heads, kvHeads int
		causal         bool
		batch, seq, hd int
	}{{4, 2, true, 2, 5, 6}, {4, 2, false, 2, 5, 6}, {4, 4, true, 2, 5, 6}, {4, 4, false, 2, 5, 6}, {4, 1, true, 2, 5, 6},
		{2, 1, true, 1, 70, 3}, {2, 2, false, 1, 70, 3}} {
		t.Run(fmt.Sprintf("heads%d_kv%d_causal%v_seq%d", c.heads, c.kvHeads, c.causal, c.seq), func(t *testing.T) {
			rng := newRand(14)
			batch, seq, hd := c.batch, c.seq, c.hd
			nq, nkv := batch*seq*c.heads*hd, batch*seq*c.kvHeads*hd
			q, q64 := randVec(rng, nq)
			k, k64 := randVec(rng, nkv)
			v, v64 := randVec(rng, nkv)
			out := make([]float32, nq)
			lse := make([]float32, batch*c.heads*seq)
			Attention(out, lse, q, k, v, batch, seq, c.heads, c.kvHeads, hd, c.causal)
			f := func(in [][]float64) []float64 {
				o, _ := refAttention(in[0], in[1], in[2], batch, seq, c.heads, c.kvHeads, hd, c.causal)
				return o
			}
			refOut, refLSE := refAttention(q64, k64, v64, batch, seq, c.heads, c.kvHeads, hd, c.causal)
			checkClose(t, "attention out", out, refOut, fwdTol)
			checkClose(t, "attention lse", lse, refLSE, fwdTol)
			dout, r := randVec(rng, nq)
			dq, dk, dv := make([]float32, nq), make([]float32, nkv), make([]float32, nkv)
			fill(dk, 9)
			fill(dv, 9)
			AttentionGrad(dq, dk, dv, q, k, v, out, lse, dout, batch, seq, c.heads, c.kvHeads, hd, c.causal)
			g := numGrads(f, [][]float64{q64, k64, v64}, r)
			checkClose(t, "attention dq", dq, g[0], bwdTol)
			checkClose(t, "attention dk", dk, g[1], bwdTol)
			checkClose(t, "attention dv", dv, g[2], bwdTol)
		})
	}
}

func TestActivations(t *testing.T) {
	for _, c := range []struct {
		name string
		fwd  func(out, x []float32)
		bwd  func(dx, x, dy []float32)
		ref  func([]float64) []float64
	}{
		{"silu", SiLU, SiLUGrad, refSiLU},
		{"gelu", GELU, GELUGrad, refGELU},
		{"gelu_tanh", GELUTanh, GELUTanhGrad, refGELUTanh},
		{"scale", func(out, x []float32) { Scale(out, x, -1.7) }, func(dx, _, dy []float32) { Scale(dx, dy, -1.7) },
			func(x []float64) []float64 {
				out := make([]float64, len(x))
				for i, v := range x {
					out[i] = v * -1.7
				}
				return out
			}},
	} {
		rng := newRand(15)
		x, x64 := randVec(rng, 200)
		for i := range x { // widen the range to reach both tails
			x[i] *= 3
			x64[i] *= 3
		}
		out := make([]float32, len(x))
		c.fwd(out, x)
		f := func(in [][]float64) []float64 { return c.ref(in[0]) }
		checkClose(t, c.name, out, f([][]float64{x64}), fwdTol)
		dy, r := randVec(rng, len(x))
		dx := make([]float32, len(x))
		c.bwd(dx, x, dy)
		g := numGrads(f, [][]float64{x64}, r)
		checkClose(t, c.name+" dx", dx, g[0], bwdTol)
	}
}

func TestAddMul(t *testing.T) {
	rows, d := 5, 67
	for _, bcast := range []bool{false, true} {
		rng := newRand(16)
		a, a64 := randVec(rng, rows*d)
		nb := rows * d
		if bcast {
			nb = d
		}
		b, b64 := randVec(rng, nb)
		dy, r := randVec(rng, rows*d)
		name := fmt.Sprintf("broadcast=%v", bcast)

		out := make([]float32, rows*d)
		Add(out, a, b)
		addRef := func(in [][]float64) []float64 {
			return refBinary(in[0], in[1], func(x, y float64) float64 { return x + y })
		}
		checkClose(t, "add "+name, out, addRef([][]float64{a64, b64}), fwdTol)
		g := numGrads(addRef, [][]float64{a64, b64}, r)
		checkClose(t, "add da "+name, dy, g[0], bwdTol) // da is dy itself
		if bcast {
			db := make([]float32, d)
			fill(db, 9)
			AddGradBroadcast(db, dy)
			checkClose(t, "add db "+name, db, g[1], bwdTol)
		} else {
			checkClose(t, "add db "+name, dy, g[1], bwdTol)
		}

		Mul(out, a, b)
		mulRef := func(in [][]float64) []float64 {
			return refBinary(in[0], in[1], func(x, y float64) float64 { return x * y })
		}
		checkClose(t, "mul "+name, out, mulRef([][]float64{a64, b64}), fwdTol)
		da, db := make([]float32, rows*d), make([]float32, nb)
		fill(db, 9)
		MulGrad(da, db, a, b, dy)
		g = numGrads(mulRef, [][]float64{a64, b64}, r)
		checkClose(t, "mul da "+name, da, g[0], bwdTol)
		checkClose(t, "mul db "+name, db, g[1], bwdTol)
		MulGrad(nil, db, a, b, dy) // a nil gradient is skipped
		checkClose(t, "mul db only "+name, db, g[1], bwdTol)
	}
}

func TestCrossEntropy(t *testing.T) {
	rng := newRand(17)
	rows, vocab := 70, 11 // two partial-sum chunks
	logits, l64 := randVec(rng, rows*vocab)
	targets := make([]int32, rows)
	for i := range targets {
		targets[i] = int32(rng.IntN(vocab))
	}
	loss, err := CrossEntropy(logits, targets, rows, vocab)
	if err != nil {
		t.Fatal(err)
	}
	if want := refCrossEntropy(l64, targets, rows, vocab); math.Abs(loss-want) > 1e-6*want {
		t.Errorf("loss %v, want %v", loss, want)
	}
	const scale = 0.37
	dl := make([]float32, rows*vocab)
	CrossEntropyGrad(dl, logits, targets, rows, vocab, scale)
	f := func(in [][]float64) []float64 { return []float64{refCrossEntropy(in[0], targets, rows, vocab)} }
	g := numGrads(f, [][]float64{l64}, []float64{scale})
	checkClose(t, "cross_entropy dlogits", dl, g[0], bwdTol)
}

func TestCrossEntropyBadTarget(t *testing.T) {
	logits := make([]float32, 3*4)
	_, err := CrossEntropy(logits, []int32{0, 3, 4}, 3, 4)
	if want := "target 4 at position 2 is outside [0, 4)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v, want %q", err, want)
	}
}

// TestAdamW follows torch.optim.AdamW's single-tensor loop in float64 for
// three steps with changing gradients: nothing decayed, everything, and
// two ranges of a flat shard (the params of 2+ dims among 1-D ones).
func TestAdamW(t *testing.T) {
	const lr, b1, b2, eps, wd = 1e-2, 0.9, 0.95, 1e-8, 0.1
	const n = 50
	for _, c := range []struct {
		name    string
		decayed []Range
	}{
		{"none", nil},
		{"all", []Range{{0, n}}},
		{"ranges", []Range{{3, 17}, {17, 20}, {31, 50}}},
	} {
		rng := newRand(18)
		p, p64 := randVec(rng, n)
		m, v := make([]float32, n), make([]float32, n)
		m64, v64 := make([]float64, n), make([]float64, n)
		decay := func(i int) bool {
			for _, r := range c.decayed {
				if r.Lo <= i && i < r.Hi {
					return true
				}
			}
			return false
		}
		for step := 1; step <= 3; step++ {
			g, g64 := randVec(rng, n)
			AdamW(p, m, v, g, step, lr, b1, b2, eps, wd, c.decayed)
			for i := range p64 {
				if decay(i) {
					p64[i] *= 1 - lr*wd
				}
				m64[i] = b1*m64[i] + (1-b1)*g64[i]
				v64[i] = b2*v64[i] + (1-b2)*g64[i]*g64[i]
				bc1 := 1 - math.Pow(b1, float64(step))
				bc2 := 1 - math.Pow(b2, float64(step))
				denom := math.Sqrt(v64[i])/math.Sqrt(bc2) + eps
				p64[i] -= lr / bc1 * m64[i] / denom
			}
			name := fmt.Sprintf("adamw decay %s step %d", c.name, step)
			checkClose(t, name+" p", p, p64, 1e-6)
			checkClose(t, name+" m", m, m64, 1e-6)
			checkClose(t, name+" v", v, v64, 1e-6)
		}
	}
}

// TestAdamWPaths: the SIMD update gives the portable loop's bits, on
// lengths with tails, with and without decay, over gradients from 1e-30
// to 1e10 and zeros.
func TestAdamWPaths(t *testing.T) {
	rng := newRand(19)
	for _, n := range []int{1, 3, 4, 7, 64, 1001} {
		for _, keep := range []float64{1, 1 - 1e-3} {
			k := adamConsts{beta1: 0.9, c1: 1 - 0.9, beta2: 0.95, c2: 1 - 0.95, stepSize: 1e-3 / (1 - 0.9*0.9),
				bc2: math.Sqrt(1 - 0.95*0.95), eps: 1e-8, keep: keep}
			p, _ := randVec(rng, n)
			m, _ := randVec(rng, n)
			v, _ := randVec(rng, n)
			g, _ := randVec(rng, n)
			for i := range n {
				v[i] *= v[i]
				g[i] *= float32(math.Pow(10, float64(i%41-30)))
				if i%13 == 0 {
					g[i] = 0
				}
			}
			p2, m2, v2 := slices.Clone(p), slices.Clone(m), slices.Clone(v)
			adamw(p, m, v, g, &k)
			adamwGo(p2, m2, v2, g, &k)
			name := fmt.Sprintf("n=%d keep=%v", n, keep)
			sameBits(t, name+" p", p, p2)
			sameBits(t, name+" m", m, m2)
			sameBits(t, name+" v", v, v2)
		}
	}
}

// TestAddMulPaths: the vector add and multiply give the scalar loops'
// bits, in place and not, on lengths around the 8- and 32-element steps,
// with infinities and NaNs among the values.
func TestAddMulPaths(t *testing.T) {
	rng := newRand(23)
	for _, n := range []int{0, 1, 7, 8, 9, 31, 32, 33, 40, 1001} {
		a, _ := randVec(rng, n)
		b, _ := randVec(rng, n)
		for i := 0; i < n; i += 11 {
			a[i] = float32(math.Inf(1 - 2*(i%2)))
			if i%3 == 0 {
				b[i] = float32(math.NaN())
			}
		}
		for _, op := range []struct {
			name      string
			vec, scal func(out, a, b []float32)
		}{{"add", addVec, addGo}, {"mul", mulVec, mulGo}} {
			want := make([]float32, n)
			op.scal(want, a, b)
			got := make([]float32, n)
			op.vec(got, a, b)
			sameBits(t, fmt.Sprintf("%s n=%d", op.name, n), got, want)
			inPlace := slices.Clone(a)
			op.vec(inPlace, inPlace, b)
			sameBits(t, fmt.Sprintf("%s in place n=%d", op.name, n), inPlace, want)
		}
	}
}

// TestFold: Fold gives the scalar left fold's bits (each element summed
// in part order, one rounding per add) for 1 to 65 parts (65: more than
// the assembly's table), on lengths around the 8- and 32-element steps
// and the scalar path's 256-element blocks, into a fresh slice and into
// the first or the last part, with magnitudes far apart (so another order
// would round differently) and infinities and NaNs among the values.
func TestFold(t *testing.T) {
	rng := newRand(29)
	for _, np := range []int{1, 2, 3, 8, 65} {
		for _, n := range []int{0, 1, 7, 8, 9, 31, 32, 33, 257, 1001} {
			parts := make([][]float32, np)
			for j := range parts {
				parts[j], _ = randVec(rng, n)
				for i := range parts[j] {
					parts[j][i] *= float32(math.Ldexp(1, (i*7+j*13)%40-20))
				}
			}
			if n > 5 {
				parts[0][3] = float32(math.Inf(1))
				parts[np-1][5] = float32(math.NaN())
			}
			want := make([]float32, n)
			for i := range want {
				s := parts[0][i]
				for _, p := range parts[1:] {
					s += p[i]
				}
				want[i] = s
			}
			name := fmt.Sprintf("Fold of %d parts n=%d", np, n)
			got := make([]float32, n)
			Fold(got, parts)
			sameBits(t, name, got, want)
			for _, j := range []int{0, np - 1} {
				in := make([][]float32, np)
				for k := range parts {
					in[k] = slices.Clone(parts[k])
				}
				Fold(in[j], in)
				sameBits(t, fmt.Sprintf("%s into part %d", name, j), in[j], want)
			}
		}
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "Fold of a part of 3 elements into 4") {
			t.Errorf("recovered %v", r)
		}
	}()
	Fold(make([]float32, 4), [][]float32{make([]float32, 4), make([]float32, 3)})
}

// TestAdamWRanges: decayed ranges out of order, overlapping or outside
// the shard are a caller's bug.
func TestAdamWRanges(t *testing.T) {
	for _, bad := range [][]Range{{{5, 3}}, {{0, 4}, {3, 6}}, {{2, 11}}, {{-1, 2}}} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "not ascending, disjoint and inside [0, 10)") {
					t.Errorf("%v: recovered %v", bad, r)
				}
			}()
			x := make([]float32, 10)
			AdamW(x, x, x, x, 1, 1, 0.9, 0.9, 1e-8, 0, bad)
		}()
	}
}

func TestRoundBF16(t *testing.T) {
	f := math.Float32frombits
	for _, c := range []struct {
		in, want uint32
	}{
		{0x3f800000, 0x3f800000}, // 1.0 exact
		{0x3f808000, 0x3f800000}, // 1 + 2^-8: tie, even below
		{0x3f818000, 0x3f820000}, // 1 + 3*2^-8: tie, even above
		{0x3f808001, 0x3f810000}, // just above the tie
		{0x3f807fff, 0x3f800000}, // just below the tie
		{0xbf818000, 0xbf820000}, // negative tie
		{0xbf80c000, 0xbf810000}, // negative, above half
		{0x7f7f7fff, 0x7f7f0000}, // large, rounds down
		{0x7f7fffff, 0x7f800000}, // max float32 rounds up to +Inf
		{0x7f800000, 0x7f800000}, // +Inf
		{0xff800000, 0xff800000}, // -Inf
		{0x00018000, 0x00020000}, // subnormal tie, odd: up
		{0x00008000, 0x00000000}, // subnormal tie, even: down
		{0x80000000, 0x80000000}, // -0
	} {
		if got := math.Float32bits(RoundBF16(f(c.in))); got != c.want {
			t.Errorf("RoundBF16(%#08x = %g) = %#08x, want %#08x", c.in, f(c.in), got, c.want)
		}
	}
	for _, nan := range []uint32{0x7fc00000, 0x7f800001, 0xff800001, 0x7fffffff} {
		got := RoundBF16(f(nan))
		if got == got || math.Float32bits(got)&0xffff != 0 {
			t.Errorf("RoundBF16(NaN %#08x) = %#08x, want a NaN with low bits zero", nan, math.Float32bits(got))
		}
	}
}

// TestParallelDeterminism: the row- and column-split kernels give the same
// bits for any worker count (big enough inputs to split).
func TestParallelDeterminism(t *testing.T) {
	rng := newRand(19)
	rows, d := 512, 200
	x, _ := randVec(rng, rows*d)
	w, _ := randVec(rng, d)
	dy, _ := randVec(rng, rows*d)
	run := func() [][]float32 {
		dx, dw := make([]float32, rows*d), make([]float32, d)
		RMSNormGrad(dx, dw, x, w, dy, rows, d, 1e-5)
		db := make([]float32, d)
		AddGradBroadcast(db, dy)
		seq, heads, hd := 64, 4, 50
		q, k, v := x[:seq*heads*hd], x[seq*heads*hd:2*seq*heads*hd], dy[:seq*heads*hd]
		out, lse := make([]float32, seq*heads*hd), make([]float32, heads*seq)
		Attention(out, lse, q, k, v, 1, seq, heads, heads, hd, true)
		dq, dk, dv := make([]float32, len(q)), make([]float32, len(q)), make([]float32, len(q))
		AttentionGrad(dq, dk, dv, q, k, v, out, lse, dy[len(q):2*len(q)], 1, seq, heads, heads, hd, true)
		return [][]float32{dx, dw, db, out, lse, dq, dk, dv}
	}
	ref := withProcs(1, run)
	for _, procs := range []int{2, 3, 4} {
		got := withProcs(procs, run)
		for i := range ref {
			sameBits(t, fmt.Sprintf("output %d GOMAXPROCS=%d", i, procs), got[i], ref[i])
		}
	}
}

// BenchmarkAttention times one causal forward and backward at a small
// training shape (batch 1, seq 512, 8 heads of 64); GFLOP/s counts the
// full s x s score matrix, as the op table does.
func BenchmarkAttention(b *testing.B) {
	const batch, seq, heads, hd = 1, 512, 8, 64
	n := batch * seq * heads * hd
	rng := newRand(20)
	q, _ := randVec(rng, n)
	k, _ := randVec(rng, n)
	v, _ := randVec(rng, n)
	dout, _ := randVec(rng, n)
	out, lse := make([]float32, n), make([]float32, batch*heads*seq)
	dq, dk, dv := make([]float32, n), make([]float32, n), make([]float32, n)
	flops := 4.0 * batch * seq * seq * heads * hd
	b.Run("fwd", func(b *testing.B) {
		for b.Loop() {
			Attention(out, lse, q, k, v, batch, seq, heads, heads, hd, true)
		}
		b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
	b.Run("bwd", func(b *testing.B) {
		for b.Loop() {
			AttentionGrad(dq, dk, dv, q, k, v, out, lse, dout, batch, seq, heads, heads, hd, true)
		}
		b.ReportMetric(2*flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
}

// TestParallelForCoversOnce: every index is handed out exactly once, for
// any worker count and size.
func TestParallelForCoversOnce(t *testing.T) {
	for _, workers := range []int{1, 2, 3, 8} {
		for _, n := range []int{1, 5, 63, 1000} {
			hits := make([]int32, n)
			parallelForWorkers(workers, n, minParallelWork, func(lo, hi int) {
				for i := lo; i < hi; i++ {
					hits[i]++ // ranges are disjoint, so no race
				}
			})
			for i, h := range hits {
				if h != 1 {
					t.Fatalf("workers %d n %d: index %d handed out %d times", workers, n, i, h)
				}
			}
		}
	}
}

func TestTranspose(t *testing.T) {
	x := []float32{1, 2, 3, 4, 5, 6} // 2 x 3
	out := make([]float32, 6)
	Transpose(out, x, 2, 3)
	want := []float32{1, 4, 2, 5, 3, 6}
	for i := range want {
		if out[i] != want[i] {
			t.Fatalf("transpose: %v, want %v", out, want)
		}
	}
}

// BenchmarkAdamW: one step over 4M elements, half of them decayed.
func BenchmarkAdamW(b *testing.B) {
	const n = 1 << 22
	rng := newRand(20)
	p, _ := randVec(rng, n)
	g, _ := randVec(rng, n)
	m, v := make([]float32, n), make([]float32, n)
	for b.Loop() {
		AdamW(p, m, v, g, 1, 1e-3, 0.9, 0.95, 1e-8, 0.1, []Range{{0, n / 2}})
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/element")
}

// BenchmarkFold: a reduce-scatter's fold on one of 8 local ranks of the
// d512x8 model (its 1/8 of 25.6 M gradients, 3.2 M elements, from 8
// parts); bytes are the parts read and the result written.
func BenchmarkFold(b *testing.B) {
	const np, n = 8, 25_600_000 / 8
	rng := newRand(21)
	parts := make([][]float32, np)
	for j := range parts {
		parts[j], _ = randVec(rng, n)
	}
	dst := make([]float32, n)
	b.SetBytes((np + 1) * 4 * n)
	for b.Loop() {
		Fold(dst, parts)
	}
}

// TestAdamWCopy checks the fused step against AdamW then rounding, on a
// shard larger than a block, split among workers, with decayed ranges
// across block boundaries.
func TestAdamWCopy(t *testing.T) {
	const n = 3*copyBlock + 77
	rng := newRand(20)
	p, _ := randVec(rng, n)
	m, _ := randVec(rng, n)
	v, _ := randVec(rng, n)
	for i := range v {
		v[i] *= v[i]
	}
	decayed := []Range{{5, copyBlock + 3}, {2*copyBlock - 1, 2*copyBlock + 9}, {n - 10, n}}
	p2, m2, v2 := slices.Clone(p), slices.Clone(m), slices.Clone(v)
	pc := make([]float32, n)
	for step := 1; step <= 2; step++ {
		g, _ := randVec(rng, n)
		AdamW(p, m, v, g, step, 1e-3, 0.9, 0.95, 1e-8, 0.1, decayed)
		AdamWCopy(p2, m2, v2, g, pc, step, 1e-3, 0.9, 0.95, 1e-8, 0.1, decayed)
		sameBits(t, "p", p2, p)
		sameBits(t, "m", m2, m)
		sameBits(t, "v", v2, v)
		want := make([]float32, n)
		for i, x := range p {
			want[i] = RoundBF16(x)
		}
		sameBits(t, "copy", pc, want)
	}
}

// TestAddRMSNorm: the fused residual add and norm, forward and backward,
// give the bits of Add then RMSNorm and of RMSNormGrad then Add, in fp32
// and with bf16 storage (each result rounded as the backend stores it),
// on rows wider than a column block and more rows than workers.
func TestAddRMSNorm(t *testing.T) {
	rng := newRand(21)
	round := func(x []float32) {
		for i, v := range x {
			x[i] = RoundBF16(v)
		}
	}
	for _, bf16 := range []bool{false, true} {
		for _, sh := range [][2]int{{1, 1}, {3, 7}, {37, 200}} {
			rows, d := sh[0], sh[1]
			n := rows * d
			x, _ := randVec(rng, n)
			r, _ := randVec(rng, n)
			w, _ := randVec(rng, d)
			dh, _ := randVec(rng, n)
			dy, _ := randVec(rng, n)
			if bf16 {
				round(x)
				round(r)
				round(w)
				round(dh)
				round(dy)
			}
			name := fmt.Sprintf("bf16 %v %dx%d", bf16, rows, d)
			// Unfused, each result stored as the backend stores it.
			y, h := make([]float32, n), make([]float32, n)
			Add(y, x, r)
			if bf16 {
				round(y)
			}
			RMSNorm(h, y, w, rows, d, 1e-5)
			dn, dw, dx := make([]float32, n), make([]float32, d), make([]float32, n)
			RMSNormGrad(dn, dw, y, w, dh, rows, d, 1e-5)
			if bf16 {
				round(dn)
			}
			Add(dx, dy, dn)
			// Fused.
			fy, fh := make([]float32, n), make([]float32, n)
			AddRMSNorm(fy, fh, x, r, w, rows, d, 1e-5, bf16)
			fdx, fdw := make([]float32, n), make([]float32, d)
			AddRMSNormGrad(fdx, fdw, fy, w, dh, dy, rows, d, 1e-5, bf16)
			sameBits(t, name+" y", fy, y)
			sameBits(t, name+" h", fh, h)
			sameBits(t, name+" dx", fdx, dx)
			sameBits(t, name+" dw", fdw, dw)
		}
	}
}

// TestRoPEFreqLlama3: Llama 3.1's scaling (theta 500,000, factor 8, low
// 1, high 4, original 8,192, head dim 128) keeps the frequencies whose
// wavelength is under 2,048 positions, divides those over 8,192 by 8,
// blends those between (Hugging Face's _compute_llama3_parameters), and
// without a factor gives theta's powers, bit for bit.
func TestRoPEFreqLlama3(t *testing.T) {
	const hd = 128
	plain := RoPEFreq{Theta: 500000}.Freqs(hd)
	scaled := RoPEFreq{Theta: 500000, Factor: 8, Low: 1, High: 4, Original: 8192}.Freqs(hd)
	blended := 0
	for i, inv := range plain {
		if want := math.Pow(500000, -2*float64(i)/hd); inv != want {
			t.Fatalf("freq %d: %v, want %v", i, inv, want)
		}
		wavelen := 2 * math.Pi / inv
		switch {
		case wavelen < 2048:
			if scaled[i] != inv {
				t.Errorf("freq %d (wavelength %.0f): %v, want it kept: %v", i, wavelen, scaled[i], inv)
			}
		case wavelen > 8192:
			if scaled[i] != inv/8 {
				t.Errorf("freq %d (wavelength %.0f): %v, want %v / 8", i, wavelen, scaled[i], inv)
			}
		default:
			blended++
			smooth := (8192/wavelen - 1) / 3
			if want := (1-smooth)*inv/8 + smooth*inv; math.Abs(scaled[i]-want) > 1e-15*inv || !(scaled[i] > inv/8 && scaled[i] < inv) {
				t.Errorf("freq %d (wavelength %.0f): %v, want %v between %v and %v", i, wavelen, scaled[i], want, inv/8, inv)
			}
		}
	}
	if blended == 0 {
		t.Error("no frequency in the blended band")
	}
}

// TestRoundBF16To: the workers' pass gives RoundBF16 of every element,
// in place or not, on more elements than one worker's share.
func TestRoundBF16To(t *testing.T) {
	x, _ := randVec(newRand(33), 100003)
	x[7], x[8] = float32(math.Inf(1)), float32(math.NaN())
	want := make([]float32, len(x))
	for i, v := range x {
		want[i] = RoundBF16(v)
	}
	out := make([]float32, len(x))
	RoundBF16To(out, x)
	sameBits(t, "out", out, want)
	RoundBF16To(x, x)
	sameBits(t, "in place", x, want)
}
