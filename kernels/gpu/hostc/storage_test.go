//go:build cgo

package hostc

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"amspc/kernels"
	"amspc/kernels/gpu"
)

// hostRun runs the elementwise kernel over n elements with args in
// order: []float32 and []uint16 slices (pointers), *uint64 (a flag), int
// (long long) and float32 (float).
func hostRun(kernel string, n int, args ...any) {
	var c hostCall
	for _, a := range args {
		switch a := a.(type) {
		case []float32:
			c.f32(a)
		case []uint16:
			c.u16(a)
		case *uint64:
			c.ptr(unsafe.Pointer(a))
		case int:
			c.ints(a)
		case float32:
			c.float(a)
		default:
			panic(fmt.Sprintf("hostRun: argument of type %T", a))
		}
	}
	c.each(kernel, n)
}

// stKernel is a storage-typed kernel K_st and its fp32 twin K_f32, both
// taking outs results then ins operands as their first parameters.
type stKernel struct {
	name      string
	outs, ins int
	bcast     bool      // n, bn follow the pointers (operand 1 has bn elements)
	scale     []float32 // c values to try (n, c follow the pointers)
}

var stKernels = []stKernel{
	{name: "add", outs: 1, ins: 2, bcast: true},
	{name: "mul", outs: 1, ins: 2, bcast: true},
	{name: "silu", outs: 1, ins: 1},
	{name: "silu_grad", outs: 1, ins: 2},
	{name: "gelu", outs: 1, ins: 1},
	{name: "gelu_grad", outs: 1, ins: 2},
	{name: "gelu_tanh", outs: 1, ins: 1},
	{name: "gelu_tanh_grad", outs: 1, ins: 2},
	{name: "swiglu", outs: 1, ins: 2},
	{name: "swiglu_grad", outs: 2, ins: 3},
	{name: "geglu_tanh", outs: 1, ins: 2},
	{name: "geglu_tanh_grad", outs: 2, ins: 3},
	{name: "scale", outs: 1, ins: 1, scale: []float32{1, -1.5, 0.3}},
}

// toBF16 is v stored as bf16 (rounded to nearest even; a NaN stays one).
func toBF16(v float32) uint16 { return uint16(math.Float32bits(kernels.RoundBF16(v)) >> 16) }

// stValues are n random values (scale 8); big puts values near fp32's and
// bf16's largest (some rounding to infinity in bf16) at a few random
// places, special also NaNs and infinities.
func stValues(rng *rand.Rand, n int, big, special bool) []float32 {
	x := rnd(rng, n, 8)
	edges := []float32{3.4e38, -3.4e38, math.Float32frombits(0x7f7f8000), math.Float32frombits(0x7f7f0000),
		math.Float32frombits(0x7b000000), 2e38, 1, 0}
	if special {
		edges = append(edges, float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)))
	}
	if big || special {
		for range max(1, n/64) {
			x[rng.IntN(n)] = edges[rng.IntN(len(edges))]
		}
	}
	return x
}

// stored is a result as stored, as fp32 bits (bf16 halves widened), NaNs
// as one NaN: which NaN operand an operation passes on (its sign and
// payload) is the C compiler's choice of operand order on the host (a
// GPU gives the canonical NaN), not the kernel's.
func stored(f []float32, h []uint16) []uint32 {
	s := make([]uint32, 0, len(f)+len(h))
	for _, v := range f {
		s = append(s, math.Float32bits(v))
	}
	for _, v := range h {
		s = append(s, uint32(v)<<16)
	}
	for i, b := range s {
		if b&0x7fffffff > 0x7f800000 {
			s[i] = 0x7fc00000
		}
	}
	return s
}

// stCase runs k on n elements (operand 1 of a broadcast op bn), storage
// mask bf, the given operand values, as K_st and as the multi-pass path
// (bf16_widen, K_f32, bf16_finish or first_nonfinite_f32), and reports
// where the stored bits or flags differ. It returns the flags.
func stCase(t *testing.T, k stKernel, n, bn, bf int, c float32, vals [][]float32) []uint64 {
	t.Helper()
	scalars := []any{n}
	switch {
	case k.bcast:
		scalars = []any{n, bn}
	case k.scale != nil:
		scalars = []any{n, c}
	}
	isBF := func(p int) bool { return bf>>p&1 == 1 }

	// One pass.
	var stArgs []any
	outF, outH := make([][]float32, k.outs), make([][]uint16, k.outs)
	for o := range k.outs {
		if isBF(o) {
			outH[o] = make([]uint16, n)
			for i := range outH[o] {
				outH[o][i] = 0xdead
			}
			stArgs = append(stArgs, outH[o])
		} else {
			outF[o] = make([]float32, n)
			for i := range outF[o] {
				outF[o][i] = math.Float32frombits(0xdeadbeef)
			}
			stArgs = append(stArgs, outF[o])
		}
	}
	wide := make([][]float32, k.ins) // the reference's fp32 operands
	for j, v := range vals {
		if !isBF(k.outs + j) {
			stArgs = append(stArgs, v)
			wide[j] = v
			continue
		}
		h := make([]uint16, len(v))
		for i, x := range v {
			h[i] = toBF16(x)
		}
		stArgs = append(stArgs, h)
		wide[j] = make([]float32, len(v))
		hostRun("bf16_widen", len(v), wide[j], h, len(v))
	}
	flags := make([]uint64, k.outs)
	stArgs = append(stArgs, scalars...)
	stArgs = append(stArgs, bf)
	for o := range flags {
		flags[o] = gpu.NoneNonFinite
		stArgs = append(stArgs, &flags[o])
	}
	hostRun(k.name+"_st", n, stArgs...)

	// The multi-pass reference.
	var refArgs []any
	res := make([][]float32, k.outs)
	for o := range res {
		res[o] = make([]float32, n)
		refArgs = append(refArgs, res[o])
	}
	for _, w := range wide {
		refArgs = append(refArgs, w)
	}
	hostRun(k.name+"_f32", n, append(refArgs, scalars...)...)
	for o := range k.outs {
		want, got := res[o], outF[o]
		wantFlag := gpu.NoneNonFinite
		var wantH []uint16
		if isBF(o) {
			wantH = make([]uint16, n)
			hostRun("bf16_finish", n, wantH, res[o], n, &wantFlag)
			want = nil
		} else {
			hostRun("first_nonfinite_f32", n, res[o], n, &wantFlag)
		}
		what := fmt.Sprintf("%s_st n=%d bn=%d bf=%#b c=%g result %d", k.name, n, bn, bf, c, o)
		g, w := stored(got, outH[o]), stored(want, wantH)
		for i := range w {
			if g[i] != w[i] {
				t.Errorf("%s: element %d stored %#x (as fp32 bits), the multi-pass path %#x", what, i, g[i], w[i])
				break
			}
		}
		if flags[o] != wantFlag {
			t.Errorf("%s: flag %#x, the multi-pass path's %#x", what, flags[o], wantFlag)
		}
	}
	return flags
}

// TestStorageKernels: every storage-typed kernel, over every mask of
// its pointer parameters, stores the bits and flags the multi-pass path
// (bf16_widen, the fp32 kernel, bf16_finish or first_nonfinite_f32)
// stores, on random values, values that overflow (in fp32, or in bf16
// only once rounded), NaNs and infinities; on finite values that stay
// finite, the flag stays all ones.
func TestStorageKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	flagged := 0
	for _, k := range stKernels {
		cs := k.scale
		if cs == nil {
			cs = []float32{0}
		}
		for _, n := range []int{1, 37, 1100, 4099} {
			bns := []int{n}
			if k.bcast && n > 1 {
				bns = append(bns, 1)
				if n%100 == 0 {
					bns = append(bns, 100)
				}
			}
			for _, bn := range bns {
				for variant := range 3 {
					big, special := variant >= 1, variant == 2
					vals := make([][]float32, k.ins)
					for j := range vals {
						m := n
						if k.bcast && j == 1 {
							m = bn
						}
						vals[j] = stValues(rng, m, big, special)
					}
					for _, c := range cs {
						for bf := range 1 << (k.outs + k.ins) {
							flags := stCase(t, k, n, bn, bf, c, vals)
							for o, f := range flags {
								if variant == 0 && f != gpu.NoneNonFinite {
									t.Errorf("%s_st n=%d bf=%#b finite values: result %d flagged %#x", k.name, n, bf, o, f)
								}
								if f != gpu.NoneNonFinite {
									flagged++
								}
							}
						}
					}
				}
			}
		}
	}
	if flagged == 0 {
		t.Error("no case flagged a NaN or an infinity")
	}
	t.Logf("%d results flagged", flagged)
}

// hostLaunch runs l with args as hostRun passes them (float64: double;
// []int32 and []float64: pointers).
func hostLaunch(l gpu.Launch, args ...any) {
	var c hostCall
	for _, a := range args {
		switch a := a.(type) {
		case []float32:
			c.f32(a)
		case []uint16:
			c.u16(a)
		case []int32:
			c.i32(a)
		case []float64:
			c.ptr(elem0(a))
		case *uint64:
			c.ptr(unsafe.Pointer(a))
		case int:
			c.ints(a)
		case float32:
			c.float(a)
		case float64:
			c.doubles(a)
		default:
			panic(fmt.Sprintf("hostLaunch: argument of type %T", a))
		}
	}
	c.run(l)
}

// The launch geometries of package gpu's plans (the shim runs a row
// kernel's block as one thread, and an elementwise grid capped).
func rowGeom(rows, d int) func(string) gpu.Launch {
	return func(k string) gpu.Launch {
		return gpu.Launch{Kernel: k, Grid: [3]int{max(rows, 1), 1, 1}, Block: gpu.RowBlock(int64(d))}
	}
}

func colGeom(d int) func(string) gpu.Launch {
	return func(k string) gpu.Launch {
		return gpu.Launch{Kernel: k, Grid: [3]int{gpu.Grid1D(int64(d), 32, gpu.MaxGrid), 1, 1}, Block: 32}
	}
}

func eachGeom(n int) func(string) gpu.Launch {
	return func(k string) gpu.Launch {
		return gpu.Launch{Kernel: k, Grid: [3]int{gpu.Grid1D(int64(n), gpu.DefaultBlock, gpu.MaxGrid), 1, 1},
			Block: gpu.DefaultBlock}
	}
}

// stTensor is a tensor of a storage case: an operand (vals), a result
// or fp32 scratch of n elements.
type stTensor struct {
	name    string
	n       int
	vals    []float32 // an operand's values
	scratch bool
}

// stStep is one launch of a storage case: K_st and its twin K_f32 over
// the named tensors (their pointer parameters, in order), then scalars.
// K_st takes bf and a flag for each result after them.
type stStep struct {
	kernel  string
	ptrs    []string
	scalars []any
	geom    func(kernel string) gpu.Launch
}

// stChain runs steps as _st kernels on the tensors stored by mask (bit t
// of mask: the t-th non-scratch tensor is bf16) and as the multi-pass
// path (bf16_widen, the _f32 kernels, bf16_finish or first_nonfinite_f32
// for each result), and reports where stored bits, scratch bits or flags
// differ. It returns the results' flags.
func stChain(t *testing.T, what string, tensors []stTensor, steps []stStep, mask int) []uint64 {
	t.Helper()
	byName := map[string]int{}
	isBF := make([]bool, len(tensors))
	bit := 0
	for i, x := range tensors {
		byName[x.name] = i
		if !x.scratch {
			isBF[i] = mask>>bit&1 == 1
			bit++
		}
	}
	stF, stH := make([][]float32, len(tensors)), make([][]uint16, len(tensors)) // stored
	ref := make([][]float32, len(tensors))                                      // the reference's fp32
	flags, wantFlags := make([]uint64, len(tensors)), make([]uint64, len(tensors))
	for i, x := range tensors {
		flags[i], wantFlags[i] = gpu.NoneNonFinite, gpu.NoneNonFinite
		switch {
		case x.vals != nil && isBF[i]:
			stH[i] = make([]uint16, len(x.vals))
			for j, v := range x.vals {
				stH[i][j] = toBF16(v)
			}
			ref[i] = make([]float32, len(x.vals))
			hostRun("bf16_widen", len(x.vals), ref[i], stH[i], len(x.vals))
		case x.vals != nil:
			stF[i], ref[i] = x.vals, x.vals
		case isBF[i]:
			stH[i] = make([]uint16, x.n)
			for j := range stH[i] {
				stH[i][j] = 0xdead
			}
			ref[i] = make([]float32, x.n)
		default:
			stF[i], ref[i] = make([]float32, x.n), make([]float32, x.n)
			for j := range stF[i] {
				stF[i][j] = math.Float32frombits(0xdeadbeef)
			}
		}
	}
	for _, s := range steps {
		var stArgs, refArgs []any
		bf := 0
		var outs []int
		for k, name := range s.ptrs {
			i, ok := byName[name]
			if !ok {
				panic("stChain: no tensor " + name)
			}
			if isBF[i] {
				bf |= 1 << k
				stArgs = append(stArgs, stH[i])
			} else {
				stArgs = append(stArgs, stF[i])
			}
			refArgs = append(refArgs, ref[i])
			if tensors[i].vals == nil && !tensors[i].scratch {
				outs = append(outs, i)
			}
		}
		stArgs = append(append(stArgs, s.scalars...), bf)
		for _, i := range outs {
			stArgs = append(stArgs, &flags[i])
		}
		hostLaunch(s.geom(s.kernel+"_st"), stArgs...)
		hostLaunch(s.geom(s.kernel+"_f32"), append(refArgs, s.scalars...)...)
	}
	for i, x := range tensors {
		if x.vals != nil {
			continue
		}
		want, wantH := ref[i], []uint16(nil)
		switch {
		case x.scratch:
		case isBF[i]:
			wantH = make([]uint16, x.n)
			hostRun("bf16_finish", x.n, wantH, ref[i], x.n, &wantFlags[i])
			want = nil
		default:
			hostRun("first_nonfinite_f32", x.n, ref[i], x.n, &wantFlags[i])
		}
		at := fmt.Sprintf("%s mask=%#b %s", what, mask, x.name)
		g, w := stored(stF[i], stH[i]), stored(want, wantH)
		for j := range w {
			if g[j] != w[j] {
				t.Errorf("%s: element %d stored %#x (as fp32 bits), the multi-pass path %#x", at, j, g[j], w[j])
				break
			}
		}
		if flags[i] != wantFlags[i] {
			t.Errorf("%s: flag %#x, the multi-pass path's %#x", at, flags[i], wantFlags[i])
		}
	}
	var out []uint64
	for i, x := range tensors {
		if x.vals == nil && !x.scratch {
			out = append(out, flags[i])
		}
	}
	return out
}

// stRowCase is a norm or RoPE storage case: its tensors and launches for
// the values of a variant.
type stRowCase struct {
	name  string
	cases func(rng *rand.Rand, variant int) []stRowShape
}

type stRowShape struct {
	what    string
	tensors []stTensor
	steps   []stStep
}

// normValues are x (scale 4), w (near 1), b and dy (scale 1) of rows x d
// for a variant: 0 finite, 1 overflowing (w = 3e38 at a column, dy near
// fp32's largest at a few places), 2 also an infinity and a NaN in x.
func normValues(rng *rand.Rand, rows, d, variant int) (x, w, b, dy []float32) {
	x, b, dy = rnd(rng, rows*d, 4), rnd(rng, d, 1), rnd(rng, rows*d, 1)
	w = rnd(rng, d, 0.1)
	for j := range w {
		w[j]++
	}
	if variant >= 1 {
		w[rng.IntN(d)] = 3e38
		for range max(1, rows*d/64) {
			dy[rng.IntN(rows*d)] = 3.3e38
		}
	}
	if variant == 2 {
		x[rng.IntN(rows*d)] = float32(math.Inf(1 - 2*rng.IntN(2)))
		x[rng.IntN(rows*d)] = float32(math.NaN())
	}
	return x, w, b, dy
}

var normShapes = [][2]int{{1, 1}, {3, 37}, {5, 1100}, {64, 96}}

const stEps = float32(1e-5)

var stRowCases = []stRowCase{
	{name: "rmsnorm", cases: func(rng *rand.Rand, variant int) []stRowShape {
		var s []stRowShape
		for _, sh := range normShapes {
			rows, d := sh[0], sh[1]
			x, w, _, _ := normValues(rng, rows, d, variant)
			s = append(s, stRowShape{
				what:    fmt.Sprintf("rmsnorm %dx%d", rows, d),
				tensors: []stTensor{{name: "out", n: rows * d}, {name: "x", vals: x}, {name: "w", vals: w}},
				steps:   []stStep{{"rmsnorm", []string{"out", "x", "w"}, []any{rows, d, stEps}, rowGeom(rows, d)}},
			})
		}
		return s
	}},
	{name: "rmsnorm_grad", cases: func(rng *rand.Rand, variant int) []stRowShape {
		var s []stRowShape
		for _, sh := range normShapes {
			rows, d := sh[0], sh[1]
			x, w, _, dy := normValues(rng, rows, d, variant)
			s = append(s, stRowShape{
				what: fmt.Sprintf("rmsnorm_grad %dx%d", rows, d),
				tensors: []stTensor{{name: "dx", n: rows * d}, {name: "dw", n: d}, {name: "rstd", n: rows, scratch: true},
					{name: "x", vals: x}, {name: "w", vals: w}, {name: "dy", vals: dy}},
				steps: []stStep{
					{"rmsnorm_grad", []string{"dx", "rstd", "x", "w", "dy"}, []any{rows, d, stEps}, rowGeom(rows, d)},
					{"rmsnorm_grad_w", []string{"dw", "x", "dy", "rstd"}, []any{rows, d}, colGeom(d)},
				},
			})
		}
		return s
	}},
	{name: "layernorm", cases: func(rng *rand.Rand, variant int) []stRowShape {
		var s []stRowShape
		for _, sh := range normShapes {
			rows, d := sh[0], sh[1]
			x, w, b, _ := normValues(rng, rows, d, variant)
			s = append(s, stRowShape{
				what: fmt.Sprintf("layernorm %dx%d", rows, d),
				tensors: []stTensor{{name: "out", n: rows * d}, {name: "x", vals: x}, {name: "w", vals: w},
					{name: "b", vals: b}},
				steps: []stStep{{"layernorm", []string{"out", "x", "w", "b"}, []any{rows, d, stEps}, rowGeom(rows, d)}},
			})
		}
		return s
	}},
	{name: "layernorm_grad", cases: func(rng *rand.Rand, variant int) []stRowShape {
		var s []stRowShape
		for _, sh := range normShapes {
			rows, d := sh[0], sh[1]
			x, w, _, dy := normValues(rng, rows, d, variant)
			s = append(s, stRowShape{
				what: fmt.Sprintf("layernorm_grad %dx%d", rows, d),
				tensors: []stTensor{{name: "dx", n: rows * d}, {name: "dw", n: d}, {name: "db", n: d},
					{name: "stats", n: 2 * rows, scratch: true}, {name: "x", vals: x}, {name: "w", vals: w},
					{name: "dy", vals: dy}},
				steps: []stStep{
					{"layernorm_grad", []string{"dx", "stats", "x", "w", "dy"}, []any{rows, d, stEps}, rowGeom(rows, d)},
					{"layernorm_grad_wb", []string{"dw", "db", "x", "dy", "stats"}, []any{rows, d}, colGeom(d)},
				},
			})
		}
		return s
	}},
	{name: "rope", cases: func(rng *rand.Rand, variant int) []stRowShape {
		var s []stRowShape
		const batch, seq, heads = 2, 3, 2
		for _, hd := range []int{8, 64} {
			for _, theta := range []float64{10000, 500000} {
				for _, sign := range []float32{1, -1} {
					n := batch * seq * heads * hd
					x := stValues(rng, n, variant >= 1, variant == 2)
					s = append(s, stRowShape{
						what:    fmt.Sprintf("rope hd=%d theta=%g sign=%g", hd, theta, sign),
						tensors: []stTensor{{name: "out", n: n}, {name: "x", vals: x}},
						steps: []stStep{{"rope", []string{"out", "x"}, []any{batch, seq, heads, hd, kernels.RoPEFreq{Theta: theta}.Freqs(hd), sign},
							eachGeom(n / 2)}},
					})
				}
			}
		}
		return s
	}},
}

// TestStorageRowKernels: the storage-typed norms (and their gradients,
// the row kernel then the column kernel on the operands as stored) and
// RoPE, over every mask of their operands and results, store the bits,
// scratch and flags of the multi-pass path on random values, values that
// overflow, infinities and NaNs; on finite values the flags stay all
// ones.
func TestStorageRowKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	for _, rc := range stRowCases {
		flagged := 0
		for variant := range 3 {
			for _, sc := range rc.cases(rng, variant) {
				nt := 0
				for _, x := range sc.tensors {
					if !x.scratch {
						nt++
					}
				}
				for mask := range 1 << nt {
					for o, f := range stChain(t, fmt.Sprintf("%s variant %d", sc.what, variant), sc.tensors, sc.steps, mask) {
						if variant == 0 && f != gpu.NoneNonFinite {
							t.Errorf("%s mask=%#b finite values: result %d flagged %#x", sc.what, mask, o, f)
						}
						if f != gpu.NoneNonFinite {
							flagged++
						}
					}
				}
			}
		}
		if flagged == 0 {
			t.Errorf("%s: no case flagged a NaN or an infinity", rc.name)
		}
		t.Logf("%s: %d results flagged", rc.name, flagged)
	}
}

// TestStorageCrossEntropy: cross_entropy_st stores the per-row double
// losses and names the bad row of cross_entropy_f32 on the logits as
// bf16_widen widens them, and cross_entropy_grad_st stores the bits and
// flag of bf16_widen, cross_entropy_grad_f32, then bf16_finish or
// first_nonfinite_f32, over every mask of logits and dlogits: random
// logits, logits near 1e4 (exp overflows unless the row's max is
// subtracted), an out-of-range target, and an f large enough that
// some gradients overflow once stored.
func TestStorageCrossEntropy(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	flagged := 0
	for _, sh := range normShapes {
		rows, vocab := sh[0], sh[1]
		for variant := range 3 {
			scale := float32(4)
			if variant == 1 {
				scale = 1e4
			}
			logits := rnd(rng, rows*vocab, scale)
			if variant == 1 {
				for i := range logits {
					logits[i] += 1e4
				}
			}
			targets := make([]int32, rows)
			for i := range targets {
				targets[i] = int32(rng.IntN(vocab))
			}
			if variant == 2 {
				targets[rng.IntN(rows)] = int32(vocab)
				targets[rng.IntN(rows)] = -1
			}
			what := fmt.Sprintf("cross_entropy %dx%d variant %d", rows, vocab, variant)
			geom := rowGeom(rows, vocab)
			for lbf := range 2 { // logits bf16
				// The loss.
				var in any = logits
				wide := logits
				if lbf == 1 {
					h := make([]uint16, len(logits))
					for i, v := range logits {
						h[i] = toBF16(v)
					}
					in, wide = h, make([]float32, len(logits))
					hostRun("bf16_widen", len(h), wide, h, len(h))
				}
				loss, want := make([]float64, rows), make([]float64, rows)
				for i := range loss {
					loss[i], want[i] = math.NaN(), math.Inf(1)
				}
				bad, wantBad := uint64(math.MaxUint64), uint64(math.MaxUint64)
				hostLaunch(geom("cross_entropy_st"), loss, in, targets, rows, vocab, &bad, lbf<<1)
				hostLaunch(geom("cross_entropy_f32"), want, wide, targets, rows, vocab, &wantBad)
				at := fmt.Sprintf("%s logits bf16=%d", what, lbf)
				for r := range loss {
					g, w := math.Float64bits(loss[r]), math.Float64bits(want[r])
					if g != w && !(math.IsNaN(loss[r]) && math.IsNaN(want[r])) {
						t.Errorf("%s: row %d loss %v (%#x), the fp32 kernel's %v (%#x)", at, r, loss[r], g, want[r], w)
					}
					if math.IsNaN(want[r]) || math.IsInf(want[r], 0) {
						t.Errorf("%s: row %d loss %v", at, r, want[r])
					}
				}
				if bad != wantBad {
					t.Errorf("%s: bad %#x, the fp32 kernel's %#x", at, bad, wantBad)
				}
				if pos, id := gpu.BadID(bad); (variant == 2) != (pos >= 0) || pos >= 0 && targets[pos] != id {
					t.Errorf("%s: bad %#x (position %d, target %d)", at, bad, pos, id)
				}
			}
			// The gradient.
			for _, f := range []float64{0.25 / float64(rows), 3.4e38, 1e39} {
				tensors := []stTensor{{name: "dlogits", n: rows * vocab}, {name: "logits", vals: logits}}
				steps := []stStep{{"cross_entropy_grad", []string{"dlogits", "logits"},
					[]any{targets, rows, vocab, f}, geom}}
				for mask := range 4 {
					fl := stChain(t, fmt.Sprintf("%s f=%g", what, f), tensors, steps, mask)
					if f < 1 && fl[0] != gpu.NoneNonFinite {
						t.Errorf("%s mask=%#b f=%g: flagged %#x", what, mask, f, fl[0])
					}
					if fl[0] != gpu.NoneNonFinite {
						flagged++
					}
				}
			}
		}
	}
	if flagged == 0 {
		t.Error("no case flagged an infinity")
	}
	t.Logf("%d results flagged", flagged)
}
