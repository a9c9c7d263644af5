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
