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
