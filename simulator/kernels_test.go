package simulator_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"amspc/cost"
	"amspc/internal/testjob"
	"amspc/ir"
	"amspc/passes"
)

// compileTiny builds tiny on 2 nodes x 4 ranks under f, with extra
// sections, and returns the passes' state too.
func compileTiny(t *testing.T, f cost.Factors, extra ...string) (*passes.State, *ir.Program, error) {
	t.Helper()
	job := testjob.Load(t, "tiny", extra...)
	topo := ir.Topology{GPUsPerNode: 4, Nodes: 2}
	M, err := job.Train.MicroBatches(topo.Ranks())
	if err != nil {
		t.Fatal(err)
	}
	plan := cost.Uniform("", f, job.Train.Recompute, job.Train.MicroBatch)
	s, err := passes.Run(job, passes.Options{Recompute: job.Train.Recompute, Check: true,
		Dist: &passes.Distribution{Groups: plan.Groups, Topo: topo, Micro: int(M), Depth: 2}})
	if err != nil {
		return nil, nil, err
	}
	return s, s.Prog, nil
}

var (
	p2os8   = cost.Factors{P: ir.Factor{S0: 2, S1: 1}, G: ir.Factor{S0: 2, S1: 1}, OS: ir.Factor{S0: 4, S1: 2}}
	bf16    = "train { seq_len = 64 micro_batch = 2 global_batch = 32 precision = bf16\n  optimizer = adamw(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1) }"
	recomp  = "train { seq_len = 64 micro_batch = 2 global_batch = 32 precision = fp32\n  optimizer = adamw(lr=2e-3, beta1=0.8, beta2=0.9, eps=1e-7, weight_decay=0.5) recompute = full }"
	noDecay = "train { seq_len = 64 micro_batch = 2 global_batch = 32 precision = fp32\n  optimizer = adamw(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0) }"
)

// TestOneKernelPerOp: a micro-batch runs each op of forward and backward
// as exactly one kernel instruction (an op with several results too), and
// every buffer a kernel reads or writes is live then: allocated once
// before, freed once after.
func TestOneKernelPerOp(t *testing.T) {
	for _, c := range []struct {
		name  string
		extra []string
	}{{"fp32", nil}, {"bf16", []string{bf16}}, {"recompute", []string{recomp}}} {
		t.Run(c.name, func(t *testing.T) {
			s, prog, err := compileTiny(t, p2os8, c.extra...)
			if err != nil {
				t.Fatal(err)
			}
			// The ops a micro-batch runs: all but the optimizer's.
			want, multi := 0, 0
			for _, op := range s.Graph.Ops() {
				if r := op.Out(); r.Role == ir.OptState || r.Updates != nil {
					continue
				}
				want++
				if len(op.Results) > 1 {
					multi++
				}
			}
			if multi == 0 {
				t.Fatal("no multi-result op in tiny's backward")
			}
			// A kernel is its op's (kernel, operands, results); full
			// recompute's second run of a block's forward is ops of its
			// own (the recompute pass's copies), each run once too.
			runs := map[string]int{}
			for _, in := range prog.Streams[ir.Compute] {
				if in.Op == ir.Kernel && in.Micro == 0 && in.Pos.IsValid() {
					sig := fmt.Sprint(in.Kern, in.Args, in.Outs)
					runs[sig]++
					if n := runs[sig]; n > 1 {
						t.Errorf("%s runs %d times", sig, n)
					}
				}
			}
			if len(runs) != want {
				t.Errorf("%d distinct kernel instructions in micro-batch 0, want one per op: %d", len(runs), want)
			}
			if err := kernelsUseLiveBuffers(prog); err != nil {
				t.Error(err)
			}
		})
	}
}

// kernelsUseLiveBuffers follows the buffers that the compute stream alone
// allocates and frees: each kernel's operands and results among them are
// live, allocs and frees alternate, nothing is left at the end.
func kernelsUseLiveBuffers(p *ir.Program) error {
	other := map[int32]bool{} // allocated or freed on a communication stream
	for s := ir.CommGather; s < ir.NumStreams; s++ {
		for _, in := range p.Streams[s] {
			if in.Op == ir.Alloc || in.Op == ir.Free {
				other[in.Buf] = true
			}
		}
	}
	transient := map[int32]bool{}
	for _, in := range p.Streams[ir.Compute] {
		if in.Op == ir.Alloc && !other[in.Buf] {
			transient[in.Buf] = true
		}
	}
	live := map[int32]bool{}
	for i, in := range p.Streams[ir.Compute] {
		at := func(format string, a ...any) error {
			return fmt.Errorf("compute %d (%v %v): %s", i, in.Op, in.Kern, fmt.Sprintf(format, a...))
		}
		switch in.Op {
		case ir.Alloc, ir.Free:
			if !transient[in.Buf] {
				continue
			}
			if live[in.Buf] == (in.Op == ir.Alloc) {
				return at("b%d %s while live=%v", in.Buf, in.Op, live[in.Buf])
			}
			live[in.Buf] = in.Op == ir.Alloc
		case ir.Kernel:
			seen := map[int32]bool{}
			for _, id := range append(append([]int32{}, in.Args...), in.Outs...) {
				if transient[id] && !live[id] {
					return at("b%d %s is not allocated", id, p.Buffers[id].Name)
				}
			}
			for _, id := range in.Outs {
				if seen[id] {
					return at("writes b%d twice", id)
				}
				seen[id] = true
			}
		}
	}
	for id, l := range live {
		if l {
			return fmt.Errorf("b%d %s is still allocated at the end", id, p.Buffers[id].Name)
		}
	}
	return nil
}

// TestAdamWFromTheOptimizerPass: each stage's optimizer kernel is the
// optimizer pass's adamw with its attributes, weight decay taken from the
// stage's decayed params; the scheduler does not read the train section.
func TestAdamWFromTheOptimizerPass(t *testing.T) {
	for _, c := range []struct {
		extra []string
		want  string
	}{
		{nil, "lr=0.001, beta1=0.9, beta2=0.95, eps=1e-08, weight_decay=0.1"},
		{[]string{recomp}, "lr=0.002, beta1=0.8, beta2=0.9, eps=1e-07, weight_decay=0.5"},
		{[]string{noDecay}, "lr=0.001, beta1=0.9, beta2=0.95, eps=1e-08, weight_decay=0"},
	} {
		s, prog, err := compileTiny(t, p2os8, c.extra...)
		if err != nil {
			t.Fatal(err)
		}
		// What the scheduler may not look at.
		s.Job.Train.Optimizer = ir.AdamW{}
		n := 0
		for _, in := range prog.Streams[ir.Compute] {
			if in.Op != ir.Kernel || in.Kern != ir.AdamWStep {
				continue
			}
			n++
			var attrs []string
			for _, a := range in.Attrs {
				attrs = append(attrs, a.Name+"="+a.Val.String())
			}
			if got := strings.Join(attrs, ", "); got != c.want {
				t.Errorf("stage %d: adamw {%s}, want {%s}", in.Stage, got, c.want)
			}
			if len(in.Args) != 4 || in.Outs[0] != in.Args[0] || in.Outs[1] != in.Args[1] || in.Outs[2] != in.Args[2] {
				t.Errorf("stage %d: adamw %v -> %v is not in place", in.Stage, in.Args, in.Outs)
			}
		}
		if n != 4 { // embedding, two blocks, head
			t.Errorf("%d adamw kernels, want one per stage", n)
		}
	}

	// Params of one stage that disagree are a compiler bug.
	for _, c := range []struct {
		name   string
		mutate func(ps []passes.ParamStates)
		want   string
	}{
		{"lr", func(ps []passes.ParamStates) { ps[2].Step.Attrs[0] = ir.FloatAttr("lr", 0.5) },
			"internal compiler error: lower: params layers.0.attn_norm and layers.0.wq of stage layers.0 differ in their AdamW settings"},
		{"1-D decayed", func(ps []passes.ParamStates) { ps[1].Step.Attrs[4] = ir.FloatAttr("weight_decay", 0.1) },
			"internal compiler error: lower: param layers.0.attn_norm is not decayed in stage layers.0's layout, yet its adamw has weight_decay=0.1"},
		{"two decays", func(ps []passes.ParamStates) { ps[3].Step.Attrs[4] = ir.FloatAttr("weight_decay", 0.2) },
			"internal compiler error: lower: params layers.0.wq and layers.0.wk of stage layers.0 have weight_decay 0.1 and 0.2"},
	} {
		job := testjob.Load(t, "tiny")
		s, err := passes.Run(job, passes.Options{})
		if err != nil {
			t.Fatal(err)
		}
		c.mutate(s.States)
		topo := ir.Topology{GPUsPerNode: 4, Nodes: 2}
		err = s.Distribute(&passes.Distribution{Groups: cost.Uniform("", p2os8, ir.RecomputeNone, 2).Groups, Topo: topo, Micro: 2, Depth: 2}, passes.Options{})
		var ice *ir.InternalError
		if !errors.As(err, &ice) || err.Error() != c.want {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
