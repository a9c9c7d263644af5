//go:build cgo

package hostc

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"unsafe"

	"amspc/ir"
	"amspc/kernels/gpu"
)

// A planBuf is an operand or result of a plan run on the host, stored as
// fp32 (f) or bf16 (h).
type planBuf struct {
	f []float32
	h []uint16
}

// storeAs is v stored in dt, bf16 rounded to nearest even.
func storeAs(v []float32, dt ir.DType) planBuf {
	if dt != ir.BF16 {
		return planBuf{f: v}
	}
	h := make([]uint16, len(v))
	for i, x := range v {
		h[i] = toBF16(x)
	}
	return planBuf{h: h}
}

// fresh is an unwritten result of n elements in dt: garbage, so a
// result a plan leaves unwritten shows.
func fresh(n int, dt ir.DType) planBuf {
	if dt == ir.BF16 {
		h := make([]uint16, n)
		for i := range h {
			h[i] = 0xdead
		}
		return planBuf{h: h}
	}
	f := make([]float32, n)
	for i := range f {
		f[i] = math.Float32frombits(0xdeadbeef)
	}
	return planBuf{f: f}
}

// wide is b as fp32, as the backend widens a bf16 operand (bf16_widen).
func (b planBuf) wide() []float32 {
	if b.h == nil {
		return b.f
	}
	f := make([]float32, len(b.h))
	hostRun("bf16_widen", len(b.h), f, b.h, len(b.h))
	return f
}

// finish is an fp32 result stored in dt and its flag, as the backend
// stores and checks it after a plain plan (bf16_finish or
// first_nonfinite_f32).
func finish(f []float32, dt ir.DType) (planBuf, uint64) {
	flag := gpu.NoneNonFinite
	if dt == ir.BF16 {
		h := make([]uint16, len(f))
		hostRun("bf16_finish", len(f), h, f, len(f), &flag)
		return planBuf{h: h}, flag
	}
	hostRun("first_nonfinite_f32", len(f), f, len(f), &flag)
	return planBuf{f: f}, flag
}

// planCall is the OpCall of op on shapes and dtypes; eps is stEps.
func planCall(op ir.OpKind, argS [][]int64, argT []ir.DType, outS [][]int64, outT []ir.DType) *gpu.OpCall {
	c := &gpu.OpCall{Op: op, ArgShapes: argS, ArgTypes: argT, OutShapes: outS, OutTypes: outT,
		Attr: func(string) ir.AttrVal { return ir.AttrVal{Float: float64(stEps)} }}
	for _, s := range argS {
		c.ArgElems = append(c.ArgElems, elemsOf(s))
	}
	for _, s := range outS {
		c.OutElems = append(c.OutElems, elemsOf(s))
	}
	return c
}

func elemsOf(s []int64) int64 {
	n := int64(1)
	for _, d := range s {
		n *= d
	}
	return n
}

// runPlan plans c and runs the plan's launches on args and outs, as the
// device backend resolves their arguments, with scratch memory as the
// plan asks for and a flag for each result (a stored plan's kernels
// flag them). It returns the flags.
func runPlan(t *testing.T, c *gpu.OpCall, args, outs []planBuf) []uint64 {
	t.Helper()
	p, err := gpu.PlanOp(c)
	if err != nil {
		t.Fatalf("%v: %v", c.Op, err)
	}
	if p.Gemm != nil || len(p.Copies) > 0 || p.IDs != nil || p.Loss {
		t.Fatalf("%v: a plan with a matmul, copies or host work", c.Op)
	}
	var pin runtime.Pinner
	defer pin.Unpin()
	addr := func(b planBuf) uint64 {
		var q unsafe.Pointer
		if b.h != nil {
			q = unsafe.Pointer(&b.h[0])
		} else {
			q = unsafe.Pointer(&b.f[0])
		}
		pin.Pin(q)
		return uint64(uintptr(q))
	}
	scratch := make([][]uint64, len(p.Scratch))
	for i, sb := range p.Scratch {
		scratch[i] = make([]uint64, (sb.Bytes+7)/8+1)
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&scratch[i][0])), 8*len(scratch[i])), sb.Content())
		pin.Pin(&scratch[i][0])
	}
	flags := make([]uint64, len(outs))
	for i := range flags {
		flags[i] = gpu.NoneNonFinite
	}
	pin.Pin(&flags[0])
	for li := range p.Launches {
		l := p.Launches[li]
		addrs := make([]uint64, len(l.Args))
		for i, a := range l.Args {
			switch a.Kind {
			case gpu.Operand:
				addrs[i] = addr(args[a.N]) + uint64(a.I)
			case gpu.Result:
				addrs[i] = addr(outs[a.N]) + uint64(a.I)
			case gpu.Scratch:
				addrs[i] = uint64(uintptr(unsafe.Pointer(&scratch[a.N][0]))) + uint64(a.I)
			case gpu.Flag:
				addrs[i] = uint64(uintptr(unsafe.Pointer(&flags[a.N])))
			}
		}
		if err := l.CheckArgs(); err != nil {
			t.Fatalf("%v: %v", c.Op, err)
		}
		if err := launch(&l, addrs); err != nil {
			t.Fatalf("%v: %v", c.Op, err)
		}
	}
	return flags
}

// A normPath is one way to compute a fused op's results: the fused or
// the unfused ops, the stored or the plain family.
type normPath struct {
	name  string
	outs  []planBuf
	flags []uint64
}

// sameResults reports where a path's results or flags differ from the
// reference's (the first path): bits as stored, NaNs as one NaN
// (stored's rule).
func sameResults(t *testing.T, what string, names []string, paths []normPath) {
	t.Helper()
	ref := paths[0]
	for _, p := range paths[1:] {
		for o, name := range names {
			g, w := stored(p.outs[o].f, p.outs[o].h), stored(ref.outs[o].f, ref.outs[o].h)
			for i := range w {
				if g[i] != w[i] {
					t.Errorf("%s: %s: %s element %d stored %#x (as fp32 bits), %s %#x", what, p.name, name, i, g[i], ref.name, w[i])
					break
				}
			}
			if p.flags[o] != ref.flags[o] {
				t.Errorf("%s: %s: %s flag %#x, %s's %#x", what, p.name, name, p.flags[o], ref.name, ref.flags[o])
			}
		}
	}
}

// The shapes of the fused norms' tests: several rows of d not a
// multiple of a block (and more rows than a column kernel loads ahead).
var addNormShapes = [][2]int{{4, 1}, {3, 7}, {20, 64}, {5, 300}, {3, 1000}}

// dtypesOf is the dtypes of mask's bits 0 to n-1 (set: bf16).
func dtypesOf(mask, n int) []ir.DType {
	dts := make([]ir.DType, n)
	for i := range dts {
		dts[i] = ir.F32
		if mask>>i&1 == 1 {
			dts[i] = ir.BF16
		}
	}
	return dts
}

// checkFlags: finite values (variant 0) flag nothing, a NaN or infinity
// in x or y (variant 2) flags every result.
func checkFlags(t *testing.T, what string, variant int, names []string, flags []uint64) {
	t.Helper()
	for o, f := range flags {
		if variant == 0 && f != gpu.NoneNonFinite {
			t.Errorf("%s: finite values: %s flagged %#x", what, names[o], f)
		}
		if variant == 2 && f == gpu.NoneNonFinite {
			t.Errorf("%s: a NaN and an infinity in the rows: %s not flagged", what, names[o])
		}
	}
}

// TestAddRMSNorm: add_rmsnorm's plans, stored (add_rmsnorm_st on x, r,
// w, y and h as stored) and plain (add_f32, y rounded as stored, then
// rmsnorm_f32 on fp32, each result then stored by the test as the
// backend stores it), give the bits and flags of add then rmsnorm (each
// family's plans, y stored in between), for every storage of x and r,
// w, y and h: random values, values near fp32's largest (y and h
// overflowing, some only once rounded to bf16), NaNs and infinities.
func TestAddRMSNorm(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	names := []string{"y", "h"}
	for _, sh := range addNormShapes {
		rows, d := sh[0], sh[1]
		n := rows * d
		xs, ws := []int64{int64(rows), int64(d)}, []int64{int64(d)}
		for variant := range 3 {
			x, w, _, _ := normValues(rng, rows, d, variant)
			r := stValues(rng, n, variant >= 1, variant == 2)
			for mask := range 16 { // x and r, w, y, h
				dt := dtypesOf(mask, 4)
				xt, wt, yt, ht := dt[0], dt[1], dt[2], dt[3]
				what := fmt.Sprintf("add_rmsnorm %dx%d variant %d x,r %v w %v y %v h %v", rows, d, variant, xt, wt, yt, ht)
				sx, sr, sw := storeAs(x, xt), storeAs(r, xt), storeAs(w, wt)
				f32s := []ir.DType{ir.F32, ir.F32, ir.F32}

				// The unfused reference, plain: add, y stored, rmsnorm.
				y32 := fresh(n, ir.F32)
				runPlan(t, planCall(ir.Add, [][]int64{xs, xs}, f32s[:2], [][]int64{xs}, f32s[:1]),
					[]planBuf{{f: sx.wide()}, {f: sr.wide()}}, []planBuf{y32})
				y, yFlag := finish(y32.f, yt)
				h32 := fresh(n, ir.F32)
				runPlan(t, planCall(ir.RMSNorm, [][]int64{xs, ws}, f32s[:2], [][]int64{xs}, f32s[:1]),
					[]planBuf{{f: y.wide()}, {f: sw.wide()}}, []planBuf{h32})
				h, hFlag := finish(h32.f, ht)
				plainUnfused := normPath{"add then rmsnorm (plain)", []planBuf{y, h}, []uint64{yFlag, hFlag}}

				// Fused, plain: fp32 results stored afterwards as y and h.
				c := planCall(ir.AddRMSNorm, [][]int64{xs, xs, ws}, f32s, [][]int64{xs, xs}, f32s[:2])
				c.StoredOut = []ir.DType{yt, ht}
				y32, h32 = fresh(n, ir.F32), fresh(n, ir.F32)
				runPlan(t, c, []planBuf{{f: sx.wide()}, {f: sr.wide()}, {f: sw.wide()}}, []planBuf{y32, h32})
				y, yFlag = finish(y32.f, yt)
				h, hFlag = finish(h32.f, ht)
				plainFused := normPath{"add_rmsnorm (plain)", []planBuf{y, h}, []uint64{yFlag, hFlag}}

				// Unfused, stored.
				c = planCall(ir.Add, [][]int64{xs, xs}, []ir.DType{xt, xt}, [][]int64{xs}, []ir.DType{yt})
				c.Storage = true
				y = fresh(n, yt)
				yFlag = runPlan(t, c, []planBuf{sx, sr}, []planBuf{y})[0]
				c = planCall(ir.RMSNorm, [][]int64{xs, ws}, []ir.DType{yt, wt}, [][]int64{xs}, []ir.DType{ht})
				c.Storage = true
				h = fresh(n, ht)
				hFlag = runPlan(t, c, []planBuf{y, sw}, []planBuf{h})[0]
				storedUnfused := normPath{"add then rmsnorm (stored)", []planBuf{y, h}, []uint64{yFlag, hFlag}}

				// Fused, stored.
				c = planCall(ir.AddRMSNorm, [][]int64{xs, xs, ws}, []ir.DType{xt, xt, wt}, [][]int64{xs, xs}, []ir.DType{yt, ht})
				c.Storage = true
				y, h = fresh(n, yt), fresh(n, ht)
				flags := runPlan(t, c, []planBuf{sx, sr, sw}, []planBuf{y, h})
				storedFused := normPath{"add_rmsnorm (stored)", []planBuf{y, h}, flags}

				sameResults(t, what, names, []normPath{plainUnfused, plainFused, storedUnfused, storedFused})
				checkFlags(t, what, variant, names, flags)
			}
		}
	}
}

// TestAddRMSNormGrad: add_rmsnorm_grad's plans, stored
// (add_rmsnorm_grad_st and rmsnorm_grad_w_st) and plain (rmsnorm_grad_f32
// and rmsnorm_grad_w_f32, rmsnorm_grad's dx rounded as dx is stored, then
// add_f32), give the bits and flags of rmsnorm_grad, its dx stored as dx,
// then add(dy, that dx), each family's plans, for every storage of y, w,
// dh, dy, dx and dw, on the values of TestAddRMSNorm.
func TestAddRMSNormGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	names := []string{"dx", "dw"}
	for _, sh := range addNormShapes {
		rows, d := sh[0], sh[1]
		n := rows * d
		xs, ws := []int64{int64(rows), int64(d)}, []int64{int64(d)}
		for variant := range 3 {
			y, w, _, dh := normValues(rng, rows, d, variant)
			dy := stValues(rng, n, variant >= 1, variant == 2)
			for mask := range 64 { // y, w, dh, dy, dx, dw
				dt := dtypesOf(mask, 6)
				yt, wt, dht, dyt, dxt, dwt := dt[0], dt[1], dt[2], dt[3], dt[4], dt[5]
				what := fmt.Sprintf("add_rmsnorm_grad %dx%d variant %d y %v w %v dh %v dy %v dx %v dw %v", rows, d, variant,
					yt, wt, dht, dyt, dxt, dwt)
				sy, sw, sdh, sdy := storeAs(y, yt), storeAs(w, wt), storeAs(dh, dht), storeAs(dy, dyt)
				f32s := []ir.DType{ir.F32, ir.F32, ir.F32, ir.F32}
				normArgs := [][]int64{xs, ws, xs}

				// The unfused reference, plain: rmsnorm_grad, its dx
				// stored as dx, add.
				dn32, dw32 := fresh(n, ir.F32), fresh(d, ir.F32)
				runPlan(t, planCall(ir.RMSNormGrad, normArgs, f32s[:3], [][]int64{xs, ws}, f32s[:2]),
					[]planBuf{{f: sy.wide()}, {f: sw.wide()}, {f: sdh.wide()}}, []planBuf{dn32, dw32})
				dn, _ := finish(dn32.f, dxt)
				dwS, dwFlag := finish(dw32.f, dwt)
				dx32 := fresh(n, ir.F32)
				runPlan(t, planCall(ir.Add, [][]int64{xs, xs}, f32s[:2], [][]int64{xs}, f32s[:1]),
					[]planBuf{{f: sdy.wide()}, {f: dn.wide()}}, []planBuf{dx32})
				dx, dxFlag := finish(dx32.f, dxt)
				plainUnfused := normPath{"rmsnorm_grad then add (plain)", []planBuf{dx, dwS}, []uint64{dxFlag, dwFlag}}

				// Fused, plain.
				c := planCall(ir.AddRMSNormGrad, [][]int64{xs, ws, xs, xs}, f32s, [][]int64{xs, ws}, f32s[:2])
				c.StoredOut = []ir.DType{dxt, dwt}
				dx32, dw32 = fresh(n, ir.F32), fresh(d, ir.F32)
				runPlan(t, c, []planBuf{{f: sy.wide()}, {f: sw.wide()}, {f: sdh.wide()}, {f: sdy.wide()}}, []planBuf{dx32, dw32})
				dx, dxFlag = finish(dx32.f, dxt)
				dwS, dwFlag = finish(dw32.f, dwt)
				plainFused := normPath{"add_rmsnorm_grad (plain)", []planBuf{dx, dwS}, []uint64{dxFlag, dwFlag}}

				// Unfused, stored.
				c = planCall(ir.RMSNormGrad, normArgs, []ir.DType{yt, wt, dht}, [][]int64{xs, ws}, []ir.DType{dxt, dwt})
				c.Storage = true
				dn, dwS = fresh(n, dxt), fresh(d, dwt)
				fl := runPlan(t, c, []planBuf{sy, sw, sdh}, []planBuf{dn, dwS})
				dwFlag = fl[1]
				c = planCall(ir.Add, [][]int64{xs, xs}, []ir.DType{dyt, dxt}, [][]int64{xs}, []ir.DType{dxt})
				c.Storage = true
				dx = fresh(n, dxt)
				dxFlag = runPlan(t, c, []planBuf{sdy, dn}, []planBuf{dx})[0]
				storedUnfused := normPath{"rmsnorm_grad then add (stored)", []planBuf{dx, dwS}, []uint64{dxFlag, dwFlag}}

				// Fused, stored.
				c = planCall(ir.AddRMSNormGrad, [][]int64{xs, ws, xs, xs}, []ir.DType{yt, wt, dht, dyt}, [][]int64{xs, ws},
					[]ir.DType{dxt, dwt})
				c.Storage = true
				dx, dwS = fresh(n, dxt), fresh(d, dwt)
				flags := runPlan(t, c, []planBuf{sy, sw, sdh, sdy}, []planBuf{dx, dwS})
				storedFused := normPath{"add_rmsnorm_grad (stored)", []planBuf{dx, dwS}, flags}

				sameResults(t, what, names, []normPath{plainUnfused, plainFused, storedUnfused, storedFused})
				checkFlags(t, what, variant, names, flags)
			}
		}
	}
}
