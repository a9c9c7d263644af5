package ir

import "testing"

// TestOpFacts checks the op table's backend facts against each other:
// exactly the GEMM-class ops give a matrix product, and the products of
// matmul and its two gradients on one layer's shapes are the same m x k
// x n problem read three ways.
func TestOpFacts(t *testing.T) {
	for _, k := range OpKinds() {
		info := k.Info()
		if (info.GEMM != nil) != (info.Fusion == FuseGEMM) {
			t.Errorf("%v: fusion class %v, GEMM rule %v", k, info.Fusion, info.GEMM != nil)
		}
		if info.Fusion.String() == "fusion(?)" {
			t.Errorf("%v: fusion class %d has no name", k, info.Fusion)
		}
	}
	const m, kk, n = 6, 4, 5
	x, w, y := []int64{2, 3, kk}, []int64{kk, n}, []int64{2, 3, n}
	for _, c := range []struct {
		op   OpKind
		args [][]int64
		want GEMM
	}{
		{MatMul, [][]int64{x, w}, GEMM{M: m, K: kk, N: n}},      // x @ w
		{MatMulGradA, [][]int64{y, w}, GEMM{M: m, K: n, N: kk}}, // dy @ wᵀ
		{MatMulGradB, [][]int64{x, y}, GEMM{M: kk, K: m, N: n}}, // xᵀ @ dy
	} {
		g, ok := c.op.Info().GEMMOf(c.args)
		if !ok || g != c.want {
			t.Errorf("%v%v: GEMM %+v %v, want %+v", c.op, c.args, g, ok, c.want)
		}
		// Both operands read once, the product written once.
		in := elemsOf(c.args[0]) + elemsOf(c.args[1])
		if got, want := c.op.Info().TrafficElems(c.args), in+c.want.M*c.want.N; got != want {
			t.Errorf("%v: traffic %d elements, want %d", c.op, got, want)
		}
	}
	if _, ok := Add.Info().GEMMOf([][]int64{x, x}); ok {
		t.Error("add is a matrix product")
	}
	// An elementwise op reads its operands and writes one result.
	if got := Add.Info().TrafficElems([][]int64{x, {kk}}); got != 24+4+24 {
		t.Errorf("add traffic %d, want 52", got)
	}
}

// TestRoPEQKFacts: rope_qk (and its gradient) costs what rope on q and
// rope on grouped k cost: 3 FLOPs an element of both results, both
// operands read and both results written; its results are the ropes',
// and k's head count is kv_heads.
func TestRoPEQKFacts(t *testing.T) {
	xq := &Value{Name: "xq", Shape: Shape{2, 3, 16}, DType: BF16}
	xk := &Value{Name: "xk", Shape: Shape{2, 3, 8}, DType: BF16}
	q, err := NewOp(RoPE, []*Value{xq}, []Attr{IntAttr("heads", 4)}, Pos{})
	if err != nil {
		t.Fatal(err)
	}
	k, err := NewOp(RoPE, []*Value{xk}, []Attr{IntAttr("heads", 2)}, Pos{})
	if err != nil {
		t.Fatal(err)
	}
	shapes := [][]int64{xq.Shape, xk.Shape}
	for _, kind := range []OpKind{RoPEQK, RoPEQKGrad} {
		qk, err := NewOp(kind, []*Value{xq, xk}, []Attr{IntAttr("heads", 4), IntAttr("kv_heads", 2)}, Pos{})
		if err != nil {
			t.Fatal(err)
		}
		info := kind.Info()
		if got, want := info.Flops(qk), RoPE.Info().Flops(q)+RoPE.Info().Flops(k); got != want || got != 3*(96+48) {
			t.Errorf("%v: %g FLOPs, want %g", kind, got, want)
		}
		want := RoPE.Info().TrafficElems(shapes[:1]) + RoPE.Info().TrafficElems(shapes[1:])
		if got := info.TrafficElems(shapes); got != want || got != 2*(96+48) {
			t.Errorf("%v: traffic %d elements, want %d", kind, got, want)
		}
		for i, r := range qk.Results {
			if o := []*Op{q, k}[i].Out(); !r.Shape.Equal(o.Shape) || r.DType != o.DType {
				t.Errorf("%v: result %d %v %v, want rope's %v %v", kind, i, r.DType, r.Shape, o.DType, o.Shape)
			}
		}
		if len(info.Save) != 0 || info.SaveOut {
			t.Errorf("%v saves %v (result %v); rope saves nothing", kind, info.Save, info.SaveOut)
		}
	}
	if _, err := NewOp(RoPEQK, []*Value{xq, xk}, []Attr{IntAttr("heads", 4), IntAttr("kv_heads", 3)}, Pos{}); err == nil {
		t.Error("rope_qk of k [2,3,8] with kv_heads=3: no error")
	}
	if _, err := NewOp(RoPEQK, []*Value{xq, {Name: "xk", Shape: Shape{2, 4, 8}, DType: BF16}}, []Attr{IntAttr("heads", 4), IntAttr("kv_heads", 2)}, Pos{}); err == nil {
		t.Error("rope_qk of q [2,3,16] and k [2,4,8]: no error")
	}
}
