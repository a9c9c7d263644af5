package frontend

import (
	"testing"

	"amspc/ir"
)

// Under bf16 the loss reads fp32 logits (NUMERICS.md): cross_entropy's
// first operand is an fp32 cast of the bf16 matmul, and under fp32 no
// cast is made.
func TestLogitsFP32(t *testing.T) {
	for _, tc := range []struct {
		precision string
		cast      bool
	}{{"bf16", true}, {"fp32", false}} {
		src := "model m {\n  input t : i32[2, 4]\n  param e : [16, 8]\n  param h : [8, 16]\n" +
			"  logits = embed(t, e) @ h\n  loss = cross_entropy(logits, t)\n}\n" +
			"train {\n  seq_len = 4\n  micro_batch = 2\n  global_batch = 2\n  precision = " + tc.precision + "\n" +
			"  optimizer = adamw(lr=1e-3)\n  steps = 1\n}\n"
		job, err := Load(Source{Name: "m.amsp", Text: []byte(src)})
		if err != nil {
			t.Fatalf("%s: %v", tc.precision, err)
		}
		loss := job.Graph.Lookup("loss")
		x := loss.Def.Args[0]
		if x.DType != ir.F32 {
			t.Errorf("%s: cross_entropy reads %s logits, want f32", tc.precision, x.DType)
		}
		cast := x.Def.Kind == ir.Cast
		if cast != tc.cast {
			t.Errorf("%s: cross_entropy's operand is made by %s", tc.precision, x.Def.Kind)
		}
		if cast && (x.Def.Args[0].Name != "logits" || x.Def.Args[0].DType != ir.BF16) {
			t.Errorf("%s: the cast reads %s %s, want the bf16 logits", tc.precision, x.Def.Args[0].Name, x.Def.Args[0].DType)
		}
	}
}
