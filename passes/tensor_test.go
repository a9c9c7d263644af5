package passes_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"amspc/frontend"
	"amspc/ir"
	"amspc/passes"
)

// tinyTP runs the graph passes on tiny (fp32) with shard section shard
// on a 2 x 4 cluster.
func tinyTP(t *testing.T, shard string) (*passes.State, error) {
	t.Helper()
	src, err := os.ReadFile("../testdata/models/tiny.amsp")
	if err != nil {
		t.Fatal(err)
	}
	job, err := frontend.Load(frontend.Source{Name: "tiny.amsp", Text: src},
		frontend.Source{Name: "--shard", Text: []byte(shard)})
	if err != nil {
		return nil, err
	}
	return passes.Run(job, passes.Options{Check: true, Recompute: job.Train.Recompute})
}

// tpOps counts the tensor-parallel ops of the graph by kind, in forward
// (values no pass made for a backward) and in backward.
func tpOps(s *passes.State) (fwd, bwd map[ir.OpKind]int) {
	fwd, bwd = map[ir.OpKind]int{}, map[ir.OpKind]int{}
	for _, v := range s.Graph.Values {
		if v.Def == nil || v.Def.Out() != v {
			continue
		}
		switch k := v.Def.Kind; k {
		case ir.TPAllReduce, ir.TPAllGather, ir.TPReduceScatter, ir.TPSlice:
			if _, made := s.Origin[v]; made || v.Role == ir.Grad {
				bwd[k]++
			} else {
				fwd[k]++
			}
		}
	}
	return fwd, bwd
}

// TestTensorMegatron: the tensor pass's rules give tiny Megatron's
// collectives. Under tensor = 2: in forward one all-reduce after the
// vocabulary-parallel embedding and two a layer (after the attention's
// and the MLP's row-parallel linears), in backward one for the head's
// input and two a layer (the gradients of the column-parallel linears'
// shared inputs, summed first), the embedding's gradient sliced to its
// rows; no gather. With sequence = true: those all-reduces are
// reduce-scatters along the sequence, each column-parallel input is
// all-gathered first (forward: the attention's and the MLP's input and
// the head's; backward: the gradients the row-parallel linears read,
// the MLP input that its weights' gradients read again, the
// embedding's gradient), and the norms' weight gradients, partial sums
// over the sequence's parts, all-reduced. Every op reads its operands in
// the specs its rule wants (ir.VerifySpecs), and a spec changed by hand
// fails that check.
func TestTensorMegatron(t *testing.T) {
	const layers = 2
	s, err := tinyTP(t, "shard { tensor = 2, params = 2x2, grads = 2x2, optim = 2x2 }")
	if err != nil {
		t.Fatal(err)
	}
	fwd, bwd := tpOps(s)
	if want := map[ir.OpKind]int{ir.TPAllReduce: 1 + 2*layers}; !equalCounts(fwd, want) {
		t.Errorf("tensor 2, forward: %v, want %v", fwd, want)
	}
	if want := map[ir.OpKind]int{ir.TPAllReduce: 1 + 2*layers, ir.TPSlice: 1}; !equalCounts(bwd, want) {
		t.Errorf("tensor 2, backward: %v, want %v", bwd, want)
	}
	for name, want := range map[string]ir.Spec{
		"tok_emb": ir.SplitAt(0), "layers.0.wq": ir.SplitAt(1), "layers.0.wo": ir.SplitAt(0),
		"layers.1.w1": ir.SplitAt(1), "layers.1.w2": ir.SplitAt(0), "lm_head": ir.SplitAt(1),
		"layers.0.attn_norm": ir.Whole, "layers.1.q": ir.SplitAt(2),
	} {
		if got := s.Specs[s.Graph.Lookup(name)]; got != want {
			t.Errorf("%s is %v, want %v", name, got, want)
		}
	}
	c := ir.ShardCtx{Degree: 2}
	if err := ir.VerifySpecs(s.Graph, s.Specs, c); err != nil {
		t.Fatal(err)
	}
	wo := s.Graph.Lookup("layers.0.wo")
	s.Specs[wo] = ir.SplitAt(1)
	if err := ir.VerifySpecs(s.Graph, s.Specs, c); err == nil {
		t.Error("VerifySpecs passed a weight split by columns that its matmul reads split by rows")
	}

	s, err = tinyTP(t, "shard { tensor = 2, sequence = true, params = 2x2, grads = 2x2, optim = 2x2 }")
	if err != nil {
		t.Fatal(err)
	}
	fwd, bwd = tpOps(s)
	if want := map[ir.OpKind]int{ir.TPReduceScatter: 1 + 2*layers, ir.TPAllGather: 2*layers + 1}; !equalCounts(fwd, want) {
		t.Errorf("sequence parallel, forward: %v, want %v", fwd, want)
	}
	norms := 2*layers + 1
	if want := map[ir.OpKind]int{ir.TPReduceScatter: 1 + 2*layers, ir.TPAllGather: 2*layers + 1, ir.TPAllReduce: norms, ir.TPSlice: 1}; !equalCounts(bwd, want) {
		t.Errorf("sequence parallel, backward: %v, want %v", bwd, want)
	}
	if err := ir.VerifySpecs(s.Graph, s.Specs, ir.ShardCtx{Degree: 2, Sequence: true}); err != nil {
		t.Fatal(err)
	}
}

func equalCounts(a, b map[ir.OpKind]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, n := range a {
		if b[k] != n {
			return false
		}
	}
	return true
}

// TestTensorRefusals: a degree that does not divide the heads or a
// weight's split dimension is refused at its source position, and a
// plan with tensor parallelism stops at the step program with a
// sentence saying it is not supported yet.
func TestTensorRefusals(t *testing.T) {
	for _, c := range []struct{ shard, want string }{
		{"shard { tensor = 4, params = 1x2, grads = 1x2, optim = 1x2 }", ""},
		{"shard { tensor = 8, params = 1, grads = 1, optim = 1 }", "must divide the 4 GPUs of a node"},
		{"shard { sequence = true, params = 1, grads = 1, optim = 1 }", "needs shard.tensor = 2 or more"},
	} {
		_, err := tinyTP(t, c.shard)
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: %v", c.shard, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.shard, err, c.want)
		}
	}
}

// TestTensorDivides: a degree that does not divide the heads is refused
// at the op, one that does not divide a weight's split dimension at the
// weight's declaration.
func TestTensorDivides(t *testing.T) {
	for _, c := range []struct{ model, want string }{
		{`model m {
  dim d = 6
  input tokens : i32[batch, seq]
  input targets : i32[batch, seq]
  param emb : [16, d]
  param w : [d, 6]
  q = embed(tokens, emb) @ w
  x = attention(q, q, q, heads=3, causal=true)
  param head : [6, 16]
  loss = cross_entropy(x @ head, targets)
}`, "m.amsp:8:7: shard.tensor = 2 does not divide attention's heads = 3"},
		{`model m {
  dim d = 8
  input tokens : i32[batch, seq]
  input targets : i32[batch, seq]
  param emb : [16, d]
  param w : [d, 5]
  param head : [5, 16]
  loss = cross_entropy(embed(tokens, emb) @ w @ head, targets)
}`, "m.amsp:6:3: shard.tensor = 2 does not divide the 5 columns of w"},
	} {
		src := c.model + "\ncluster c { nodes = 1 gpus_per_node = 2 gpu = \"cpu\" }\ntrain { seq_len = 4 micro_batch = 1 global_batch = 1 precision = fp32 }\nshard { tensor = 2, params = 1, grads = 1, optim = 1 }\n"
		job, err := frontend.Load(frontend.Source{Name: "m.amsp", Text: []byte(src)})
		if err != nil {
			t.Fatal(err)
		}
		_, err = passes.Run(job, passes.Options{Check: true})
		var ue *passes.UserError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v, want a UserError %q", err, c.want)
		}
	}
}
