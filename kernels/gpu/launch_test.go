package gpu

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"amspc/ir"
	"amspc/kernels"
)

// TestPlanEveryOp plans every op of the language on small fp32 shapes:
// each launch's arguments match its kernel's parameters in ops.cu,
// matmuls go to cuBLASLt, and bf16 operands are refused as not supported
// yet.
func TestPlanEveryOp(t *testing.T) {
	attrs := map[string]ir.AttrVal{"eps": {Float: 1e-5}, "heads": {Int: 2}, "kv_heads": {Int: 1}, "theta": {Float: 1e4},
		"causal": {Bool: true}, "scale": {Float: 1}, "dtype": {Int: int64(ir.F32)}, "lr": {Float: 1e-3}, "beta1": {Float: 0.9},
		"beta2": {Float: 0.95}, "weight_decay": {Float: 0.1}, "by": {Float: 45.25}, "dim": {Int: 1}, "parts": {Int: 3}}
	x, w, ids, q, kv := []int64{2, 3, 8}, []int64{8}, []int64{2, 3}, []int64{2, 3, 8}, []int64{2, 3, 4}
	cases := []struct {
		op        ir.OpKind
		args, out [][]int64
		gemm      bool
	}{
		{ir.Embed, [][]int64{ids, {10, 8}}, [][]int64{x}, false},
		{ir.EmbedGrad, [][]int64{ids, x}, [][]int64{{10, 8}}, false},
		{ir.MatMul, [][]int64{x, {8, 4}}, [][]int64{{2, 3, 4}}, true},
		{ir.MatMulGradA, [][]int64{{2, 3, 4}, {8, 4}}, [][]int64{x}, true},
		{ir.MatMulGradB, [][]int64{x, {2, 3, 4}}, [][]int64{{8, 4}}, true},
		{ir.RMSNorm, [][]int64{x, w}, [][]int64{x}, false},
		{ir.RMSNormGrad, [][]int64{x, w, x}, [][]int64{x, w}, false},
		{ir.AddRMSNorm, [][]int64{x, x, w}, [][]int64{x, x}, false},
		{ir.AddRMSNormGrad, [][]int64{x, w, x, x}, [][]int64{x, w}, false},
		{ir.LayerNorm, [][]int64{x, w, w}, [][]int64{x}, false},
		{ir.LayerNormGrad, [][]int64{x, w, x}, [][]int64{x, w, w}, false},
		{ir.SumRows, [][]int64{x}, [][]int64{w}, false},
		{ir.RoPE, [][]int64{x}, [][]int64{x}, false},
		{ir.RoPEGrad, [][]int64{x}, [][]int64{x}, false},
		{ir.RoPEQK, [][]int64{q, kv}, [][]int64{q, kv}, false},
		{ir.RoPEQKGrad, [][]int64{q, kv}, [][]int64{q, kv}, false},
		{ir.Attention, [][]int64{q, kv, kv}, [][]int64{q}, false},
		{ir.AttentionGrad, [][]int64{q, kv, kv, q, q}, [][]int64{q, kv, kv}, false},
		{ir.Transpose, [][]int64{{6, 8}}, [][]int64{{8, 6}}, false},
		{ir.ToParts, [][]int64{x}, [][]int64{{3, 2, 1, 8}}, false},
		{ir.FromParts, [][]int64{{3, 2, 1, 8}}, [][]int64{x}, false},
		{ir.SiLU, [][]int64{x}, [][]int64{x}, false},
		{ir.SiLUGrad, [][]int64{x, x}, [][]int64{x}, false},
		{ir.GELU, [][]int64{x}, [][]int64{x}, false},
		{ir.GELUGrad, [][]int64{x, x}, [][]int64{x}, false},
		{ir.GELUTanh, [][]int64{x}, [][]int64{x}, false},
		{ir.GELUTanhGrad, [][]int64{x, x}, [][]int64{x}, false},
		{ir.Scale, [][]int64{x}, [][]int64{x}, false},
		{ir.SwiGLU, [][]int64{x, x}, [][]int64{x}, false},
		{ir.SwiGLUGrad, [][]int64{x, x, x}, [][]int64{x, x}, false},
		{ir.GeGLUTanh, [][]int64{x, x}, [][]int64{x}, false},
		{ir.GeGLUTanhGrad, [][]int64{x, x, x}, [][]int64{x, x}, false},
		{ir.Add, [][]int64{x, w}, [][]int64{x}, false},
		{ir.Mul, [][]int64{x, x}, [][]int64{x}, false},
		{ir.CrossEntropy, [][]int64{{6, 10}, {6}}, [][]int64{{1}}, false},
		{ir.CrossEntropyGrad, [][]int64{{6, 10}, {6}}, [][]int64{{6, 10}}, false},
		{ir.Cast, [][]int64{x}, [][]int64{x}, false},
		{ir.AdamWStep, [][]int64{{48}, {48}, {48}, {48}}, [][]int64{{48}, {48}, {48}}, false},
		{ir.AdamWCopy, [][]int64{{48}, {48}, {48}, {48}}, [][]int64{{48}, {48}, {48}, {48}}, false},
		{ir.LinearCrossEntropy, [][]int64{x, {8, 40}, ids}, [][]int64{{1}}, false},
		{ir.LinearCrossEntropyGrad, [][]int64{x, {8, 40}, ids}, [][]int64{x, {8, 40}}, false},
	}
	covered := map[ir.OpKind]bool{}
	for _, c := range cases {
		covered[c.op] = true
	}
	for _, k := range ir.OpKinds() {
		if HasPlan(k) && !covered[k] {
			t.Errorf("%v has a launch plan and no case here", k)
		}
	}
	for _, c := range cases {
		oc := &OpCall{Op: c.op, ArgShapes: c.args, OutShapes: c.out, Step: 1, Decayed: [][2]int{{0, 40}},
			Attr: func(name string) ir.AttrVal { return attrs[name] },
		}
		for i, s := range c.args {
			dt := ir.F32
			if ids := c.op.Info().IDs; ids != nil && i == ids.Arg {
				dt = ir.I32
			}
			oc.ArgTypes, oc.ArgElems = append(oc.ArgTypes, dt), append(oc.ArgElems, elems(s))
		}
		for _, s := range c.out {
			oc.OutTypes, oc.OutElems = append(oc.OutTypes, ir.F32), append(oc.OutElems, elems(s))
		}
		p, err := PlanOp(oc)
		if err != nil {
			t.Errorf("%v: %v", c.op, err)
			continue
		}
		if (p.Gemm != nil) != c.gemm {
			t.Errorf("%v: gemm %v, want %v", c.op, p.Gemm, c.gemm)
		}
		if !c.gemm && len(p.Launches) == 0 && len(p.Copies) == 0 {
			t.Errorf("%v: nothing to run", c.op)
		}
		for _, l := range p.Launches {
			if err := l.CheckArgs(); err != nil {
				t.Errorf("%v: %v", c.op, err)
			}
			for _, a := range l.Args {
				if a.Kind == Scratch && a.N >= len(p.Scratch) {
					t.Errorf("%v: %s uses scratch %d of %d", c.op, l.Kernel, a.N, len(p.Scratch))
				}
			}
		}
		oc.ArgTypes[len(oc.ArgTypes)-1] = ir.BF16
		var unsup *ErrUnsupported
		if _, err := PlanOp(oc); !errors.As(err, &unsup) {
			t.Errorf("%v with a bf16 operand: %v, want not supported yet", c.op, err)
		}
		if c.gemm {
			oc.ArgTypes[0] = ir.BF16
			if p, err := PlanOp(oc); err != nil || !p.Gemm.BF16 {
				t.Errorf("%v of two bf16 operands: %+v, %v; want a bf16 gemm", c.op, p, err)
			}
		}
	}
}

// TestPlanTensorCoreAttention: with TensorCores, attention and its
// gradient on bf16 operands with a head dim of a multiple of 16 (up to
// 128) plan mma.cu's kernels, whose launches match their parameters;
// fp32 operands, other head dims or no TensorCores plan the fp32
// kernels (a bf16 operand then refused: the backend widens it first).
func TestPlanTensorCoreAttention(t *testing.T) {
	attrs := map[string]ir.AttrVal{"heads": {Int: 4}, "kv_heads": {Int: 2}, "causal": {Bool: true}}
	plan := func(op ir.OpKind, hd int64, dt ir.DType, tc bool) (*Plan, error) {
		q, kv := []int64{2, 5, 4 * hd}, []int64{2, 5, 2 * hd}
		args, outs := [][]int64{q, kv, kv}, [][]int64{q}
		if op == ir.AttentionGrad {
			args, outs = [][]int64{q, kv, kv, q, q}, [][]int64{q, kv, kv}
		}
		oc := &OpCall{Op: op, ArgShapes: args, OutShapes: outs, TensorCores: tc, Attr: func(name string) ir.AttrVal { return attrs[name] }}
		for _, s := range args {
			oc.ArgTypes, oc.ArgElems = append(oc.ArgTypes, dt), append(oc.ArgElems, elems(s))
		}
		for _, s := range outs {
			oc.OutTypes, oc.OutElems = append(oc.OutTypes, ir.F32), append(oc.OutElems, elems(s))
		}
		return PlanOp(oc)
	}
	kernelsOf := func(p *Plan) []string {
		var ks []string
		for _, l := range p.Launches {
			if err := l.CheckArgs(); err != nil {
				t.Error(err)
			}
			ks = append(ks, l.Kernel)
		}
		return ks
	}
	for _, c := range []struct {
		op    ir.OpKind
		hd    int64
		dt    ir.DType
		tc    bool
		first string
	}{
		{ir.Attention, 64, ir.BF16, true, "attention_mma_fwd"},
		{ir.AttentionGrad, 64, ir.BF16, true, "attention_mma_fwd"},
		{ir.AttentionGrad, 128, ir.BF16, true, "attention_mma_fwd"},
		{ir.Attention, 64, ir.F32, true, "attention_f32"},
		{ir.AttentionGrad, 24, ir.F32, true, "attention_f32"},
		{ir.Attention, 64, ir.F32, false, "attention_f32"},
	} {
		p, err := plan(c.op, c.hd, c.dt, c.tc)
		if err != nil {
			t.Fatalf("%v hd %d %v tensor cores %v: %v", c.op, c.hd, c.dt, c.tc, err)
		}
		if ks := kernelsOf(p); ks[0] != c.first {
			t.Errorf("%v hd %d %v tensor cores %v: kernels %v, want %s first", c.op, c.hd, c.dt, c.tc, ks, c.first)
		}
	}
	for _, c := range []struct {
		hd int64
		tc bool
	}{{24, true}, {64, false}, {144, true}} {
		if _, err := plan(ir.Attention, c.hd, ir.BF16, c.tc); !errors.As(err, new(*ErrUnsupported)) {
			t.Errorf("bf16 attention hd %d tensor cores %v: %v, want not supported (widened by the backend)", c.hd, c.tc, err)
		}
	}
}

// TestMMASmem: every head dim mma.cu's kernels take fits the 48 KiB of
// shared memory a launch gets without asking (and the host shim's 64 KiB).
func TestMMASmem(t *testing.T) {
	for hd := 16; hd <= 128; hd += 16 {
		fwd, dq, dkv := MMASmem(hd)
		if m := max(fwd, dq, dkv); m > 48<<10 {
			t.Errorf("head dim %d: %d, %d, %d bytes, more than 48 KiB", hd, fwd, dq, dkv)
		}
	}
}

// TestStoredPlans: every op with a stored plan (OpCall.Storage) reads
// and writes its bf16 or fp32 storage as it is, with only kernels and
// scratch memory: each launch's arguments match its _st kernel, the mask
// marks exactly the bf16 pointers, and each result gets its flag; other
// dtypes are refused.
func TestStoredPlans(t *testing.T) {
	x := []int64{2, 3, 8}
	attrs := map[string]ir.AttrVal{"by": {Float: 0.5}, "eps": {Float: 1e-5}, "heads": {Int: 2}, "kv_heads": {Int: 1}, "theta": {Float: 1e4}}
	n := 0
	for _, op := range ir.OpKinds() {
		if !HasStoredPlan(op) {
			continue
		}
		n++
		info := op.Info()
		for _, dt := range []ir.DType{ir.F32, ir.BF16} {
			oc := &OpCall{Op: op, Storage: true, Attr: func(name string) ir.AttrVal { return attrs[name] }}
			for i := range info.Arity {
				at, as := dt, x
				if ids := info.IDs; ids != nil && ids.Arg == i {
					at, as = ir.I32, x[:len(x)-1]
				}
				if info.Decays && i < 3 { // the optimizer's states are fp32
					at = ir.F32
				}
				oc.ArgTypes, oc.ArgShapes, oc.ArgElems = append(oc.ArgTypes, at), append(oc.ArgShapes, as), append(oc.ArgElems, elems(as))
			}
			for i := range info.NumResults() {
				rt := dt
				if info.Decays && i < 3 || info.IsLoss() { // the optimizer's states and a loss are fp32
					rt = ir.F32
				}
				oc.OutTypes, oc.OutShapes, oc.OutElems = append(oc.OutTypes, rt), append(oc.OutShapes, x), append(oc.OutElems, elems(x))
			}
			p, err := PlanOp(oc)
			if err != nil {
				t.Fatalf("%v %v: %v", op, dt, err)
			}
			if !p.Stored || len(p.Launches) == 0 || p.Gemm != nil || len(p.Copies) > 0 {
				t.Fatalf("%v %v: stored %v with %d launches, gemm %v, %d copies", op, dt, p.Stored, len(p.Launches), p.Gemm, len(p.Copies))
			}
			flagged := map[int]bool{}
			for _, l := range p.Launches {
				if err := l.CheckArgs(); err != nil {
					t.Errorf("%v: %v", op, err)
				}
				if !strings.HasSuffix(l.Kernel, "_st") { // mean_loss: fp32 and float64 only
					continue
				}
				var mask int64
				flags := 0 // the trailing flags (a null one where a result is absent)
				for k, a := range l.Args {
					if (a.Kind == Operand && oc.ArgTypes[a.N] == ir.BF16) || (a.Kind == Result && oc.OutTypes[a.N] == ir.BF16) {
						mask |= 1 << k
					}
					switch {
					case a.Kind == Flag:
						flags++
						flagged[a.N] = true
					case a.Kind == Null && flags > 0:
						flags++
					}
				}
				if got := l.Args[len(l.Args)-1-flags]; got.Kind != Int || got.I != mask {
					t.Errorf("%v %v %s: mask argument %+v, want %b", op, dt, l.Kernel, got, mask)
				}
			}
			// A loss is checked on the host; every other result by
			// its kernel.
			if want := info.NumResults(); len(flagged) != want && !(p.Loss && len(flagged) == want-1) {
				t.Errorf("%v: %d results flagged of %d", op, len(flagged), want)
			}
		}
		oc := &OpCall{Op: op, Storage: true, ArgTypes: []ir.DType{ir.F16, ir.F16, ir.F16}, ArgShapes: [][]int64{x, x, x}, ArgElems: []int64{48, 48, 48},
			OutTypes: []ir.DType{ir.F16, ir.F16, ir.F16}, OutShapes: [][]int64{x, x, x}, OutElems: []int64{48, 48, 48}, Attr: func(name string) ir.AttrVal { return attrs[name] }}
		var unsup *ErrUnsupported
		if _, err := PlanOp(oc); !errors.As(err, &unsup) {
			t.Errorf("%v with f16 storage: %v, want not supported", op, err)
		}
	}
	if n < 27 {
		t.Errorf("%d ops with stored plans, want the 13 elementwise ones, the norms and the fused add and norm, RoPE and the fused q and k RoPE, cross-entropy and AdamW", n)
	}
}

// TestPlanAddRMSNorm: the fused add and rmsnorm and its gradient run
// the unfused ops' kernels on fp32 (rounding what they read back of a
// bf16-stored result first: OutTypes, or StoredOut when given), or one
// pass of their own kernel on storage (the gradient's dw
// rmsnorm_grad_w_st's, as rmsnorm_grad's).
func TestPlanAddRMSNorm(t *testing.T) {
	x, w := []int64{2, 3, 8}, []int64{8}
	attr := func(string) ir.AttrVal { return ir.AttrVal{Float: 1e-5} }
	for _, c := range []struct {
		op        ir.OpKind
		args      [][]int64
		storage   bool
		dt        ir.DType   // every operand and result
		storedOut []ir.DType // plain plans: OpCall.StoredOut
		want      string
	}{
		{ir.AddRMSNorm, [][]int64{x, x, w}, false, ir.F32, nil, "[add_f32 rmsnorm_f32]"},
		{ir.AddRMSNorm, [][]int64{x, x, w}, false, ir.F32, []ir.DType{ir.F32, ir.BF16}, "[add_f32 rmsnorm_f32]"},
		{ir.AddRMSNorm, [][]int64{x, x, w}, false, ir.F32, []ir.DType{ir.BF16, ir.BF16}, "[add_f32 bf16_round rmsnorm_f32]"},
		{ir.AddRMSNorm, [][]int64{x, x, w}, true, ir.F32, nil, "[add_rmsnorm_st]"},
		{ir.AddRMSNorm, [][]int64{x, x, w}, true, ir.BF16, nil, "[add_rmsnorm_st]"},
		{ir.AddRMSNormGrad, [][]int64{x, w, x, x}, false, ir.F32, nil, "[rmsnorm_grad_f32 rmsnorm_grad_w_f32 add_f32]"},
		{ir.AddRMSNormGrad, [][]int64{x, w, x, x}, false, ir.F32, []ir.DType{ir.BF16, ir.F32},
			"[rmsnorm_grad_f32 rmsnorm_grad_w_f32 bf16_round add_f32]"},
		{ir.AddRMSNormGrad, [][]int64{x, w, x, x}, true, ir.BF16, nil, "[add_rmsnorm_grad_st rmsnorm_grad_w_st]"},
	} {
		outs := [][]int64{x, x}
		if c.op == ir.AddRMSNormGrad {
			outs = [][]int64{x, w}
		}
		oc := &OpCall{Op: c.op, ArgShapes: c.args, OutShapes: outs, Attr: attr, Storage: c.storage, StoredOut: c.storedOut}
		for _, s := range c.args {
			oc.ArgTypes, oc.ArgElems = append(oc.ArgTypes, c.dt), append(oc.ArgElems, elems(s))
		}
		for _, s := range outs {
			oc.OutTypes, oc.OutElems = append(oc.OutTypes, c.dt), append(oc.OutElems, elems(s))
		}
		what := fmt.Sprintf("%v storage %v %v stored as %v", c.op, c.storage, c.dt, c.storedOut)
		p, err := PlanOp(oc)
		if err != nil {
			t.Errorf("%s: %v", what, err)
			continue
		}
		var ks []string
		for _, l := range p.Launches {
			if err := l.CheckArgs(); err != nil {
				t.Errorf("%s: %v", what, err)
			}
			ks = append(ks, l.Kernel)
		}
		if got := fmt.Sprint(ks); got != c.want {
			t.Errorf("%s: kernels %s, want %s", what, got, c.want)
		}
	}
}

// TestPlanLinearCrossEntropy: the linear cross-entropy's plans go over
// the rows in chunks of ir.LinearCEChunk (1100 rows: 512, 512 and 76),
// one product into the chunk of logits each, then the cross-entropy
// kernel (forward), or the gradient kernel, dh's rows and dw, added to
// from the second chunk on (backward); every pointer a launch passes
// stays inside its buffer; bf16 h and w are read as they are, the
// logits written and read as bf16.
func TestPlanLinearCrossEntropy(t *testing.T) {
	h, w, tg := []int64{1100, 8}, []int64{8, 40}, []int64{1100}
	for _, op := range []ir.OpKind{ir.LinearCrossEntropy, ir.LinearCrossEntropyGrad} {
		for _, bf := range []bool{false, true} {
			dt, esz := ir.F32, int64(4)
			if bf {
				dt, esz = ir.BF16, 2
			}
			oc := &OpCall{Op: op, ArgShapes: [][]int64{h, w, tg}, ArgTypes: []ir.DType{dt, dt, ir.I32}, ArgElems: []int64{8800, 320, 1100},
				Attr: func(string) ir.AttrVal { return ir.AttrVal{Float: 0.5} }}
			bytes := map[ArgKind][]int64{Operand: {8800 * esz, 320 * esz, 4400}}
			if op == ir.LinearCrossEntropy {
				oc.OutShapes, oc.OutTypes, oc.OutElems = [][]int64{{}}, []ir.DType{ir.F32}, []int64{1}
				bytes[Result] = []int64{4}
			} else {
				oc.OutShapes, oc.OutTypes, oc.OutElems = [][]int64{h, w}, []ir.DType{ir.F32, ir.F32}, []int64{8800, 320}
				bytes[Result] = []int64{8800 * 4, 320 * 4}
			}
			p, err := PlanOp(oc)
			if err != nil {
				t.Fatalf("%v bf16 %v: %v", op, bf, err)
			}
			for _, sb := range p.Scratch {
				bytes[Scratch] = append(bytes[Scratch], sb.Bytes)
			}
			var gemms, accumulating []int
			for _, l := range p.Launches {
				if err := l.CheckArgs(); err != nil {
					t.Errorf("%v: %v", op, err)
				}
				for _, a := range l.Args {
					if a.Kind == Operand || a.Kind == Result || a.Kind == Scratch {
						if a.I < 0 || a.I >= bytes[a.Kind][a.N] {
							t.Errorf("%v bf16 %v: %s passes byte %d of a %d-byte buffer", op, bf, l.Kernel, a.I, bytes[a.Kind][a.N])
						}
					}
				}
				if g := l.Gemm; g != nil {
					gemms = append(gemms, g.M)
					if g.Accumulate {
						accumulating = append(accumulating, g.M)
					}
					if g.BF16 != bf || (g.Kind == GemmAB && g.OutBF16 != bf) {
						t.Errorf("%v bf16 %v: gemm %+v", op, bf, *g)
					}
				}
			}
			want := []int{512, 512, 76}
			if op == ir.LinearCrossEntropyGrad {
				want = []int{512, 512, 512, 512, 512, 512, 76, 76, 76}
				if fmt.Sprint(accumulating) != "[512 76]" {
					t.Errorf("%v bf16 %v: accumulating products of %v rows, want [512 76]", op, bf, accumulating)
				}
			}
			if fmt.Sprint(gemms) != fmt.Sprint(want) {
				t.Errorf("%v bf16 %v: products of %v rows, want %v", op, bf, gemms, want)
			}
		}
	}
}

// TestPlanEmbedGrad: the embedding's gradient lists each id's positions
// on the device (an OpCall has no way to read them on the host), in
// scratch sized by the shapes alone, the counts per chunk zeroed first.
func TestPlanEmbedGrad(t *testing.T) {
	for _, c := range []struct{ n, vocab, chunks int64 }{{1, 1, 1}, {256, 7, 1}, {257, 300, 2}, {8192, 5000, 16}, {100000, 9, 16}} {
		const d = 3
		oc := &OpCall{Op: ir.EmbedGrad, ArgShapes: [][]int64{{c.n}, {c.n, d}}, ArgTypes: []ir.DType{ir.I32, ir.F32}, ArgElems: []int64{c.n, c.n * d},
			OutShapes: [][]int64{{c.vocab, d}}, OutTypes: []ir.DType{ir.F32}, OutElems: []int64{c.vocab * d}}
		p, err := PlanOp(oc)
		if err != nil {
			t.Errorf("n %d, vocab %d: %v", c.n, c.vocab, err)
			continue
		}
		var ks []string
		for _, l := range p.Launches {
			if err := l.CheckArgs(); err != nil {
				t.Errorf("n %d, vocab %d: %v", c.n, c.vocab, err)
			}
			ks = append(ks, l.Kernel)
		}
		if got, want := fmt.Sprint(ks), "[embed_count embed_offsets embed_scan embed_place embed_grad_f32]"; got != want {
			t.Errorf("n %d, vocab %d: kernels %s, want %s", c.n, c.vocab, got, want)
		}
		if s := p.Launches[2]; s.Grid != [3]int{1, 1, 1} {
			t.Errorf("n %d, vocab %d: embed_scan on %v blocks, want one", c.n, c.vocab, s.Grid)
		}
		var bytes []int64
		for _, sb := range p.Scratch {
			if sb.Init != nil || sb.Fill != 0 {
				t.Errorf("n %d, vocab %d: scratch %+v, want zeroed (nothing from the host)", c.n, c.vocab, sb)
			}
			bytes = append(bytes, sb.Bytes)
		}
		if got, want := fmt.Sprint(bytes), fmt.Sprint([]int64{4 * (c.vocab + 1), 4 * c.n, 4 * c.n, 4 * c.chunks * c.vocab}); got != want {
			t.Errorf("n %d, vocab %d: scratch bytes %s, want %s", c.n, c.vocab, got, want)
		}
		if p.IDs != nil || p.Loss || p.Gemm != nil || len(p.Copies) > 0 {
			t.Errorf("n %d, vocab %d: host work in %+v", c.n, c.vocab, p)
		}
	}
}

// TestPlanRoPEQK: rope_qk and its gradient turn q (operand 0, heads) and
// k (operand 1, kv_heads, fewer) as rope turns each: rope_f32 on each
// on fp32, one rope_qk_st launch over both tensors' pairs on storage,
// each tensor with its own heads and head dim.
func TestPlanRoPEQK(t *testing.T) {
	q, k := []int64{2, 3, 32}, []int64{2, 3, 8} // 4 heads and 1 kv head of 8
	attrs := map[string]ir.AttrVal{"heads": {Int: 4}, "kv_heads": {Int: 1}, "theta": {Float: 5e5}}
	for _, op := range []ir.OpKind{ir.RoPEQK, ir.RoPEQKGrad} {
		sign := 1.0
		if op == ir.RoPEQKGrad {
			sign = -1
		}
		for _, c := range []struct {
			storage bool
			want    string // kernels and their scalar arguments (the mask left out)
		}{
			{false, fmt.Sprintf("rope_f32 [2 3 4 8 %g] rope_f32 [2 3 1 8 %g]", sign, sign)},
			{true, fmt.Sprintf("rope_qk_st [2 3 4 8 1 8 %g]", sign)},
		} {
			oc := &OpCall{Op: op, ArgShapes: [][]int64{q, k}, OutShapes: [][]int64{q, k}, ArgElems: []int64{elems(q), elems(k)},
				OutElems: []int64{elems(q), elems(k)}, ArgTypes: []ir.DType{ir.F32, ir.F32}, OutTypes: []ir.DType{ir.F32, ir.F32},
				Storage: c.storage, Attr: func(name string) ir.AttrVal { return attrs[name] }}
			p, err := PlanOp(oc)
			if err != nil {
				t.Fatalf("%v storage %v: %v", op, c.storage, err)
			}
			var got []string
			for _, l := range p.Launches {
				if err := l.CheckArgs(); err != nil {
					t.Errorf("%v storage %v: %v", op, c.storage, err)
				}
				var dims []float64
				for _, a := range l.Args {
					switch a.Kind {
					case Int:
						dims = append(dims, float64(a.I))
					case Float32, Float64:
						dims = append(dims, a.F)
					}
				}
				if c.storage {
					dims = dims[:len(dims)-1]
				}
				got = append(got, fmt.Sprint(l.Kernel, " ", dims))
			}
			if g := strings.Join(got, " "); g != c.want {
				t.Errorf("%v storage %v: launches %s, want %s", op, c.storage, g, c.want)
			}
			// theta's frequencies for each head dim, kept.
			freqs := float64Bytes(kernels.RoPEFreq{Theta: 500000}.Freqs(8))
			if len(p.Scratch) != 2 || !bytes.Equal(p.Scratch[0].Init, freqs) || !bytes.Equal(p.Scratch[1].Init, freqs) || !p.Scratch[0].Keep || !p.Scratch[1].Keep {
				t.Errorf("%v storage %v: scratch %+v, want theta 500000's frequencies for head dim 8, twice, kept", op, c.storage, p.Scratch)
			}
			if n := (elems(q) + elems(k)) / 2; c.storage && p.Launches[0].Grid[0] != Grid1D(n, DefaultBlock, MaxGrid) {
				t.Errorf("%v: rope_qk_st on %d blocks, want %d for %d pairs", op, p.Launches[0].Grid[0], Grid1D(n, DefaultBlock, MaxGrid), n)
			}
		}
	}
}
