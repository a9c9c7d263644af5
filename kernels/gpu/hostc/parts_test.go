//go:build cgo

package hostc

import (
	"slices"
	"testing"

	"amspc/ir"
	"amspc/kernels/gpu"
)

// TestParts: to_parts_f32 lays a [2, 6, 3] tensor out as its 3 parts
// along dimension 1 one after another (part p: rows 2p and 2p+1 of each
// outer index), and from_parts_f32 lays it back, through the launch
// plans the device backend uses.
func TestParts(t *testing.T) {
	d := NewDevice(Sequential)
	shape, parts := []int64{2, 6, 3}, int64(3)
	x := make([]float32, 36)
	for i := range x {
		x[i] = float32(i)
	}
	want := make([]float32, 0, 36)
	for p := range parts {
		for o := range int64(2) {
			for r := 2 * p; r < 2*p+2; r++ {
				want = append(want, x[o*18+r*3:o*18+r*3+3]...)
			}
		}
	}
	run := func(op ir.OpKind, in, out uint64, argShape, outShape []int64) {
		t.Helper()
		oc := &gpu.OpCall{Op: op, ArgShapes: [][]int64{argShape}, OutShapes: [][]int64{outShape},
			ArgTypes: []ir.DType{ir.F32}, OutTypes: []ir.DType{ir.F32}, ArgElems: []int64{36}, OutElems: []int64{36},
			Attr: func(name string) ir.AttrVal {
				return map[string]ir.AttrVal{"dim": {Type: ir.AttrInt, Int: 1}, "parts": {Type: ir.AttrInt, Int: parts}}[name]
			}}
		p, err := gpu.PlanOp(oc)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range p.Launches {
			addrs := make([]uint64, len(l.Args))
			for i, a := range l.Args {
				switch a.Kind {
				case gpu.Operand:
					addrs[i] = in
				case gpu.Result:
					addrs[i] = out
				}
			}
			if err := d.Launch(0, &l, addrs); err != nil {
				t.Fatal(err)
			}
		}
	}
	xa, pa, ba := buf(t, d, 36, x), buf(t, d, 36, nil), buf(t, d, 36, nil)
	partShape := []int64{parts, 2, 2, 3}
	run(ir.ToParts, xa, pa, shape, partShape)
	if got := read(t, d, pa, 36); !slices.Equal(got, want) {
		t.Errorf("to_parts: %v, want %v", got, want)
	}
	run(ir.FromParts, pa, ba, partShape, shape)
	if got := read(t, d, ba, 36); !slices.Equal(got, x) {
		t.Errorf("from_parts: %v, want %v", got, x)
	}
}
