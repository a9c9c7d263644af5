package passes_test

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"amspc/compiler"
	"amspc/cost"
	"amspc/frontend"
	"amspc/ir"
	"amspc/passes"
)

// tinyTP runs the graph passes on tiny (fp32) with shard section shard
// on a 2 x 4 cluster.
func tinyTP(t *testing.T, shard string) (*passes.State, error) {
	t.Helper()
	job, err := tinyJob(t, shard)
	if err != nil {
		return nil, err
	}
	return passes.Run(job, passes.Options{Check: true, Recompute: job.Train.Recompute})
}

// tinyJob is tiny with shard section shard.
func tinyJob(t *testing.T, shard string) (*ir.Job, error) {
	t.Helper()
	src, err := os.ReadFile("../testdata/models/tiny.amsp")
	if err != nil {
		t.Fatal(err)
	}
	return frontend.Load(frontend.Source{Name: "tiny.amsp", Text: src}, frontend.Source{Name: "--shard", Text: []byte(shard)})
}

func loadTiny(t *testing.T, shard string) *ir.Job {
	t.Helper()
	job, err := tinyJob(t, shard)
	if err != nil {
		t.Fatal(err)
	}
	return job
}

// shardedGlobal is the job's step graph after the tensor pass with its
// values in their global shapes (passes.ShardGlobal), and their specs.
func shardedGlobal(t *testing.T, job *ir.Job) (*ir.Graph, map[*ir.Value]ir.Spec) {
	t.Helper()
	g, specs, err := passes.ShardGlobal(job)
	if err != nil {
		t.Fatal(err)
	}
	return g, specs
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
// collectives (the embedding and the head whole, as the tensor pass
// keeps them until the vocabulary-parallel kernels exist). Under tensor
// = 2: two all-reduces a layer in forward (after the attention's and
// the MLP's row-parallel linears) and two in backward (the gradients of
// the column-parallel linears' shared inputs, summed first), nothing
// else. With sequence = true: no activation is all-reduced; the
// row-parallel outputs are reduce-scattered along the sequence instead
// (two a layer in forward, two in backward for the column-parallel
// inputs' gradients), and only the norms' weight gradients, partial sums
// over the sequence's parts, are all-reduced, one a norm. Each rank's
// weights are its part (wq [64, 32]), attention its heads. Every op
// reads its operands in the specs its rule wants (ir.VerifySpecs, run on
// the global shapes inside the pass and here on a fresh run), and a
// spec changed by hand fails that check.
func TestTensorMegatron(t *testing.T) {
	const layers = 2
	s, err := tinyTP(t, "shard { tensor = 2, params = 2x2, grads = 2x2, optim = 2x2 }")
	if err != nil {
		t.Fatal(err)
	}
	fwd, bwd := tpOps(s)
	if want := map[ir.OpKind]int{ir.TPAllReduce: 2 * layers}; !equalCounts(fwd, want) {
		t.Errorf("tensor 2, forward: %v, want %v", fwd, want)
	}
	if want := map[ir.OpKind]int{ir.TPAllReduce: 2 * layers}; !equalCounts(bwd, want) {
		t.Errorf("tensor 2, backward: %v, want %v", bwd, want)
	}
	for name, want := range map[string]ir.Spec{
		"tok_emb": ir.Whole, "layers.0.wq": ir.SplitAt(1), "layers.0.wo": ir.SplitAt(0),
		"layers.1.w1": ir.SplitAt(1), "layers.1.w2": ir.SplitAt(0), "lm_head": ir.Whole,
		"layers.0.attn_norm": ir.Whole, "layers.1.q": ir.SplitAt(2),
	} {
		if got := s.Specs[s.Graph.Lookup(name)]; got != want {
			t.Errorf("%s is %v, want %v", name, got, want)
		}
	}
	if sh := s.Graph.Lookup("layers.0.wq").Shape; !sh.Equal(ir.Shape{64, 32}) {
		t.Errorf("rank's wq is %v, want [64 32]", sh)
	}
	for _, v := range s.Graph.Values {
		if v.Def != nil && v.Def.Kind == ir.Attention {
			if h, _ := v.Def.Attr("heads"); h.Int != 2 {
				t.Errorf("%s: a rank's attention has %d heads, want 2", v.Name, h.Int)
			}
		}
	}

	// The check, on a graph of global shapes (the pass's own run of it
	// comes before it cuts the shapes to a rank's).
	job := loadTiny(t, "shard { tensor = 2, params = 2x2, grads = 2x2, optim = 2x2 }")
	g, specs := shardedGlobal(t, job)
	c := ir.ShardCtx{Degree: 2}
	if err := ir.VerifySpecs(g, specs, c); err != nil {
		t.Fatal(err)
	}
	wo := g.Lookup("layers.0.wo")
	specs[wo] = ir.SplitAt(1)
	if err := ir.VerifySpecs(g, specs, c); err == nil {
		t.Error("VerifySpecs passed a weight split by columns that its matmul reads split by rows")
	}

	s, err = tinyTP(t, "shard { tensor = 2, sequence = true, params = 2x2, grads = 2x2, optim = 2x2 }")
	if err != nil {
		t.Fatal(err)
	}
	fwd, bwd = tpOps(s)
	if fwd[ir.TPAllReduce] != 0 || fwd[ir.TPReduceScatter] != 2*layers || bwd[ir.TPReduceScatter] != 2*layers {
		t.Errorf("sequence parallel: forward %v, backward %v: want no all-reduce in forward and %d reduce-scatters each way", fwd, bwd, 2*layers)
	}
	norms := 0
	for _, v := range s.Graph.Values {
		if v.Def != nil && v.Def.Kind == ir.TPAllReduce {
			if a := v.Def.Args[0]; a.Role != ir.Grad || len(a.Shape) != 1 {
				t.Errorf("sequence parallel all-reduces %s %v, not a norm weight's gradient", a.Name, a.Shape)
			}
			norms++
		}
	}
	if norms != 2*layers+1 {
		t.Errorf("sequence parallel: %d norm weight gradients all-reduced, want %d", norms, 2*layers+1)
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

// TestTensorProgram: tiny compiles under tensor parallelism of 2 and 4
// combined with DDP, ZeRO-1, ZeRO-3 and a 2/2/8-like plan over the other
// ranks (2 nodes x 4 GPUs): the program verifies, schedules, simulates
// and matches; every tensor-parallel collective runs on the compute
// stream over a node's tp consecutive ranks; every other collective's
// group holds only ranks at the rank's tensor-parallel position; and
// the params' slots record their whole shapes and the split dimension.
func TestTensorProgram(t *testing.T) {
	for _, c := range []struct {
		tp     int
		shards []string
	}{
		{2, []string{"1, grads = 1, optim = 1", "1, grads = 1, optim = 2x2", "2x2, grads = 2x2, optim = 2x2", "2, grads = 2, optim = 2x2"}},
		{4, []string{"1, grads = 1, optim = 1", "1x2, grads = 1x2, optim = 1x2"}},
	} {
		for _, f := range c.shards {
			shard := fmt.Sprintf("shard { tensor = %d, params = %s }", c.tp, f)
			job := loadTiny(t, shard)
			plan, _, err := compiler.Choose(job, cost.Config{})
			if err != nil {
				t.Fatal(err)
			}
			r, err := compiler.Compile(job, plan, compiler.Options{Passes: passes.Options{Check: true}})
			if err != nil {
				t.Fatalf("%s: %v", shard, err)
			}
			b := r.Bundle
			if b.Tensor != c.tp || !strings.HasPrefix(b.Plan, fmt.Sprintf("tp%d ", c.tp)) {
				t.Errorf("%s: bundle tensor %d, plan %q", shard, b.Tensor, b.Plan)
			}
			topo := b.Topo
			p := b.Template(0)
			tpColls := 0
			for s, ins := range p.Streams {
				for _, in := range ins {
					if in.Op != ir.Collective {
						continue
					}
					for r := range topo.Ranks() {
						for _, m := range in.Group.Ranks(topo, r) {
							if in.Comment == "tensor-parallel partial sums" {
								if m/c.tp != r/c.tp {
									t.Fatalf("%s: rank %d's tensor-parallel all-reduce reaches rank %d", shard, r, m)
								}
							} else if m%c.tp != r%c.tp {
								t.Fatalf("%s: rank %d's %v over %v reaches rank %d, at another tensor-parallel position", shard, r, in.Coll, in.Group, m)
							}
						}
					}
					if in.Comment == "tensor-parallel partial sums" {
						tpColls++
						if s != ir.Compute {
							t.Errorf("%s: a tensor-parallel all-reduce on %s", shard, ir.StreamName(s))
						}
					}
				}
			}
			// Two all-reduces a layer each way, every micro-batch.
			if want := 4 * 2 * b.Micro; tpColls != want {
				t.Errorf("%s: %d tensor-parallel all-reduces, want %d", shard, tpColls, want)
			}
			for _, l := range p.Layouts {
				for _, sl := range l.Params {
					if sl.Name == "layers.0.w1" && (sl.Split != 1 || !slices.Equal(sl.Shape, []int64{64, 172}) || sl.Elems != 64*172/int64(c.tp)) {
						t.Errorf("%s: w1's slot %+v", shard, sl)
					}
				}
			}
		}
	}
}
