//go:build cgo

package hostc

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"amspc/ir"
	"amspc/kernels/gpu"
)

// ropeQKShapes are batch, seq, heads, kv_heads and head dim of the tests
// of rope_qk: grouped KV heads (fewer than q's), and one head of one
// pair.
var ropeQKShapes = [][5]int{{1, 1, 1, 1, 2}, {2, 3, 4, 2, 8}, {2, 5, 8, 1, 64}, {3, 4, 6, 2, 16}}

// TestRoPEQK: rope_qk's and rope_qk_grad's plans, stored (one rope_qk_st
// launch over both tensors) and plain (rope_f32 on each, each result
// then stored by the test as the backend stores it), give the bits and
// flags of rope (rope_grad) on q of heads and on k of kv_heads, each
// family's plans, for every storage of xq, xk, q and k: random values,
// values near fp32's largest, NaNs and infinities.
func TestRoPEQK(t *testing.T) {
	rng := rand.New(rand.NewPCG(45, 46))
	names := []string{"q", "k"}
	for _, op := range []ir.OpKind{ir.RoPEQK, ir.RoPEQKGrad} {
		single := ir.RoPE
		if op == ir.RoPEQKGrad {
			single = ir.RoPEGrad
		}
		for _, sh := range ropeQKShapes {
			batch, seq, heads, kvHeads, hd := sh[0], sh[1], sh[2], sh[3], sh[4]
			qs := []int64{int64(batch), int64(seq), int64(heads * hd)}
			ks := []int64{int64(batch), int64(seq), int64(kvHeads * hd)}
			nq, nk := int(elemsOf(qs)), int(elemsOf(ks))
			attrs := map[string]ir.AttrVal{"heads": {Int: int64(heads)}, "kv_heads": {Int: int64(kvHeads)}, "theta": {Float: 500000}}
			attr := func(name string) ir.AttrVal { return attrs[name] }
			// rope's call on operand i: q's heads, or k's as its heads.
			ropeAttr := func(i int) func(string) ir.AttrVal {
				return func(name string) ir.AttrVal {
					if name == "heads" && i == 1 {
						return attrs["kv_heads"]
					}
					return attrs[name]
				}
			}
			for variant := range 3 {
				xq := stValues(rng, nq, variant >= 1, variant == 2)
				xk := stValues(rng, nk, variant >= 1, variant == 2)
				if variant == 2 { // a NaN in each, so both results are flagged
					xq[rng.IntN(nq)], xk[rng.IntN(nk)] = float32(math.NaN()), float32(math.NaN())
				}
				for mask := range 16 { // xq, xk, q, k
					dt := dtypesOf(mask, 4)
					what := fmt.Sprintf("%v %v variant %d xq %v xk %v q %v k %v", op, sh, variant, dt[0], dt[1], dt[2], dt[3])
					sx := []planBuf{storeAs(xq, dt[0]), storeAs(xk, dt[1])}
					shapes := [][]int64{qs, ks}
					ns := []int{nq, nk}
					f32s := []ir.DType{ir.F32, ir.F32}

					// The unfused reference, plain: rope on each.
					var ref normPath
					ref.name = fmt.Sprintf("%v on each (plain)", single)
					for i := range 2 {
						c := planCall(single, shapes[i:i+1], f32s[:1], shapes[i:i+1], f32s[:1])
						c.Attr = ropeAttr(i)
						o := fresh(ns[i], ir.F32)
						runPlan(t, c, []planBuf{{f: sx[i].wide()}}, []planBuf{o})
						s, fl := finish(o.f, dt[2+i])
						ref.outs, ref.flags = append(ref.outs, s), append(ref.flags, fl)
					}

					// Fused, plain: fp32 results stored afterwards.
					c := planCall(op, shapes, f32s, shapes, f32s)
					c.Attr = attr
					outs := []planBuf{fresh(nq, ir.F32), fresh(nk, ir.F32)}
					runPlan(t, c, []planBuf{{f: sx[0].wide()}, {f: sx[1].wide()}}, outs)
					plainFused := normPath{name: fmt.Sprintf("%v (plain)", op)}
					for i := range 2 {
						s, fl := finish(outs[i].f, dt[2+i])
						plainFused.outs, plainFused.flags = append(plainFused.outs, s), append(plainFused.flags, fl)
					}

					// Unfused, stored.
					storedUnfused := normPath{name: fmt.Sprintf("%v on each (stored)", single)}
					for i := range 2 {
						c := planCall(single, shapes[i:i+1], dt[i:i+1], shapes[i:i+1], dt[2+i:3+i])
						c.Attr, c.Storage = ropeAttr(i), true
						o := fresh(ns[i], dt[2+i])
						fl := runPlan(t, c, sx[i:i+1], []planBuf{o})[0]
						storedUnfused.outs, storedUnfused.flags = append(storedUnfused.outs, o), append(storedUnfused.flags, fl)
					}

					// Fused, stored: one launch.
					c = planCall(op, shapes, dt[:2], shapes, dt[2:])
					c.Attr, c.Storage = attr, true
					if p, err := gpu.PlanOp(c); err != nil || len(p.Launches) != 1 {
						t.Fatalf("%s: stored plan %+v, %v; want one launch", what, p, err)
					}
					outs = []planBuf{fresh(nq, dt[2]), fresh(nk, dt[3])}
					flags := runPlan(t, c, sx, outs)
					storedFused := normPath{fmt.Sprintf("%v (stored)", op), outs, flags}

					sameResults(t, what, names, []normPath{ref, plainFused, storedUnfused, storedFused})
					checkFlags(t, what, variant, names, flags)
				}
			}
		}
	}
}
