package compiler_test

import (
	"fmt"
	"os"
	"testing"

	"amspc/codegen"
	"amspc/compiler"
	"amspc/cost"
	"amspc/frontend"
	"amspc/internal/testjob"
	"amspc/ir"
	"amspc/passes"
	"amspc/planner"
)

// busBytes is what one rank sends in a template's collectives: each
// collective's size times its bus factor (nccl-tests).
func busBytes(b *codegen.Bundle) float64 {
	var n float64
	p := b.Template(0)
	for s := range p.Streams {
		for _, in := range p.Streams[s] {
			if in.Op == ir.Collective {
				n += float64(in.Bytes) * in.Coll.BusFactor(in.Group.Size())
			}
		}
	}
	return n
}

// TestZeROMovesDDPBytes: ZeRO-1 and ZeRO-2 reduce-scatter the gradient
// onto the optimizer's shard and gather the updated params, so they move
// no more bytes than DDP's all-reduce, in the compiled program and in the
// cost model alike. With M > 1 micro-batches ZeRO-2 reduce-scatters every
// micro-batch (its gradient is sharded, so it cannot accumulate whole),
// which ZeRO-1 does not.
func TestZeROMovesDDPBytes(t *testing.T) {
	dp := ir.Factor{S0: 4, S1: 2}
	bases := map[string]cost.Factors{}
	for _, b := range planner.Baselines(dp, 4) {
		bases[b.Name] = b.Factors
	}
	for _, c := range []struct {
		mb    int64
		names []string
	}{
		{4, []string{"ZeRO-1", "ZeRO-2"}}, // M = 1
		{2, []string{"ZeRO-1"}},           // M = 2
	} {
		job := testjob.Load(t, "tiny")
		m, err := cost.NewModel(job, cost.DefaultConfig)
		if err != nil {
			t.Fatal(err)
		}
		measure := func(name string) (prog, model float64) {
			p := cost.Uniform(name, bases[name], ir.RecomputeNone, c.mb)
			r, err := compiler.Compile(job, p, compiler.Options{})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			e := m.Evaluate(p)
			return busBytes(r.Bundle), e.CommIntra + e.CommInter
		}
		ddpProg, ddpModel := measure("DDP")
		if ddpProg <= 0 || ddpModel <= 0 {
			t.Fatalf("DDP moves %g bytes (program), %g (cost model)", ddpProg, ddpModel)
		}
		for _, name := range c.names {
			prog, model := measure(name)
			if prog > ddpProg*(1+1e-9) || model > ddpModel*(1+1e-9) {
				t.Errorf("micro-batch %d: %s moves %.0f bytes (program) and %.0f (cost model), DDP %.0f and %.0f",
					c.mb, name, prog, model, ddpProg, ddpModel)
			}
		}
	}
}

// TestCompileKeepsTheJob: compiling leaves the caller's job as it was,
// so one job compiles under many plans.
func TestCompileKeepsTheJob(t *testing.T) {
	job := testjob.Load(t, "tiny")
	before := ir.Print(job.Graph)
	one := ir.Factor{S0: 1, S1: 1}
	for _, mb := range []int64{2, 4} {
		if _, err := compiler.Compile(job, cost.Uniform("ddp", cost.Factors{P: one, G: one, OS: one}, ir.RecomputeNone, mb), compiler.Options{Passes: passes.Options{Check: true}}); err != nil {
			t.Fatal(err)
		}
	}
	if after := ir.Print(job.Graph); after != before {
		t.Errorf("the job's graph changed")
	}
}

// TestRebatchKeepsTheCluster: a plan at another micro-batch lowers the
// sources again, and the cluster a caller set on the job (validate's
// calibration names a profile on a copy) is the one it is costed on.
func TestRebatchKeepsTheCluster(t *testing.T) {
	job := testjob.Load(t, "tiny")
	cl := *job.Cluster
	cl.IntraBW /= 100
	j := *job
	j.Cluster = &cl
	one := ir.Factor{S0: 1, S1: 1}
	for _, mb := range []int64{2, 1} {
		r, err := compiler.Compile(&j, cost.Uniform("ddp", cost.Factors{P: one, G: one, OS: one}, ir.RecomputeNone, mb), compiler.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Job.Cluster.IntraBW != cl.IntraBW {
			t.Errorf("micro-batch %d: compiled on intra_node_bw %g, the job's is %g", mb, r.Job.Cluster.IntraBW, cl.IntraBW)
		}
	}
}

// BenchmarkCompile70B times the whole compile of LLaMA-2-70B as amspc
// compile runs it (parse, passes, schedule with its memory bound and
// simulation, collective matching, encoding) under 8x1 P/G, fully
// sharded OS and full recompute (so that it fits 80 GB), and reports the
// bundle size.
func BenchmarkCompile70B(b *testing.B) {
	src, err := os.ReadFile(testjob.Path("llama2-70b-gqa"))
	if err != nil {
		b.Fatal(err)
	}
	for _, gpus := range []int{256, 2048, 16384} {
		b.Run(fmt.Sprintf("gpus=%d", gpus), func(b *testing.B) {
			cl := fmt.Sprintf(`cluster { nodes = %d gpus_per_node = 8 gpu = "H100-80GB" }
train { seq_len = 4096 micro_batch = 1 global_batch = %d recompute = full }`, gpus/8, gpus)
			var size int
			for b.Loop() {
				job, err := frontend.Load(frontend.Source{Name: "70b.amsp", Text: src}, frontend.Source{Name: "c.amsp", Text: []byte(cl)})
				if err != nil {
					b.Fatal(err)
				}
				dp := ir.Factor{S0: 8, S1: gpus / 8}
				f := cost.Factors{P: ir.Factor{S0: 8, S1: 1}, G: ir.Factor{S0: 8, S1: 1}, OS: dp}
				r, err := compiler.Compile(job, cost.Uniform("", f, ir.RecomputeFull, 1), compiler.Options{})
				if err != nil {
					b.Fatal(err)
				}
				size = len(codegen.Encode(r.Bundle))
			}
			b.ReportMetric(float64(size), "bundle-bytes")
		})
	}
}

// TestOnePartition: the cost model's stages (of the forward graph) are
// the compiled program's, with the same params, for models with shared
// params and without blocks too.
func TestOnePartition(t *testing.T) {
	for _, model := range []string{"tiny", "shared", "norepeat"} {
		job := testjob.Load(t, model)
		plan, _, err := compiler.Choose(job, cost.Config{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := compiler.Compile(job, plan, compiler.Options{})
		if err != nil {
			t.Fatal(err)
		}
		stages := cost.Stages(job.Graph)
		lays := r.Program.Layouts
		if len(stages) != len(lays) {
			t.Fatalf("%s: %d stages in the cost model, %d in the program", model, len(stages), len(lays))
		}
		for i, st := range stages {
			if st.Name != lays[i].Stage || len(st.Params) != len(lays[i].Params) {
				t.Errorf("%s stage %d: cost model %s with %d params, program %s with %d", model, i, st.Name, len(st.Params), lays[i].Stage, len(lays[i].Params))
				continue
			}
			for j, n := range st.Params {
				if n != lays[i].Params[j].Elems {
					t.Errorf("%s stage %s param %d: %d elements in the cost model, %s of %d in the program", model, st.Name, j, n, lays[i].Params[j].Name, lays[i].Params[j].Elems)
				}
			}
		}
	}
}

// TestRecomputeCostsWhatIsCopied: the FLOPs the cost model charges full
// recompute (from the op table's Save facts on the forward graph) are
// those of the ops the recompute pass copies into backward, stage by
// stage.
func TestRecomputeCostsWhatIsCopied(t *testing.T) {
	for _, model := range []string{"tiny", "shared", "tied", "norepeat"} {
		job := testjob.Load(t, model)
		f := cost.Factors{P: ir.Factor{S0: 2, S1: 1}, G: ir.Factor{S0: 2, S1: 1}, OS: ir.Factor{S0: 4, S1: 2}}
		r, err := compiler.Compile(job, cost.Uniform("", f, ir.RecomputeFull, job.Train.MicroBatch), compiler.Options{})
		if err != nil {
			t.Fatal(err)
		}
		copied := make([]float64, len(r.State.Partition.Stages))
		n := 0
		for i, st := range r.State.Partition.Stages {
			for _, v := range st.Bwd {
				// An op of several results (a fused one) counts once.
				if r.State.Origin[v] != nil && r.State.Origin[v].Name+".rc" == v.Name && v == v.Def.Out() {
					copied[i] += v.Def.Kind.Info().Flops(v.Def)
					n++
				}
			}
		}
		if n == 0 && model != "norepeat" {
			t.Errorf("%s: nothing recomputed", model)
		}
		for i, st := range cost.Stages(job.Graph) {
			if st.RecomputeFlops != copied[i] {
				t.Errorf("%s stage %s: the cost model recomputes %g FLOPs, the pass copies %g", model, st.Name, st.RecomputeFlops, copied[i])
			}
		}
	}
}
