package scheduler

import (
	"os"
	"testing"

	"amspc/codegen"
	"amspc/cost"
	"amspc/frontend"
	"amspc/ir"
	"amspc/passes"
	"amspc/planner"
)

func loadTiny(t testing.TB) *ir.Job {
	t.Helper()
	b, err := os.ReadFile("../testdata/models/tiny.amsp")
	if err != nil {
		t.Fatal(err)
	}
	job, err := frontend.Load(frontend.Source{Name: "tiny.amsp", Text: b})
	if err != nil {
		t.Fatal(err)
	}
	return job
}

// buildFor compiles tiny on 2 nodes x 4 ranks under uniform factors f.
func buildFor(t testing.TB, f cost.Factors) *codegen.Program {
	t.Helper()
	job := loadTiny(t)
	s, err := passes.Run(job, passes.Options{})
	if err != nil {
		t.Fatal(err)
	}
	topo := codegen.Topology{GPUsPerNode: 4, Nodes: 2}
	M, err := job.Train.MicroBatches(topo.Ranks())
	if err != nil {
		t.Fatal(err)
	}
	prog, err := Build(s, cost.Uniform("", f, job.Train.Recompute, job.Train.MicroBatch), topo, int(M), Options{})
	if err != nil {
		t.Fatal(err)
	}
	return prog
}

// TestEveryTripleBuilds schedules tiny on 2x4 under every valid factor
// triple of the paper's space and every baseline.
func TestEveryTripleBuilds(t *testing.T) {
	dp := ir.Factor{S0: 4, S1: 2}
	space := planner.Space(dp)
	for _, b := range planner.Baselines(dp, 4) {
		space = append(space, b.Factors)
	}
	for _, f := range space {
		prog := buildFor(t, f)
		if len(prog.Streams[codegen.Compute]) == 0 {
			t.Errorf("%v: empty compute stream", f)
		}
		if err := wellFormed(prog); err != nil {
			t.Errorf("%v: %v", f, err)
		}
	}
}

// TestSimulateEveryTriple replays every plan on the cost model: no
// deadlock, every alloc matched, and a step time at least the compute.
func TestSimulateEveryTriple(t *testing.T) {
	job := loadTiny(t)
	m, err := cost.NewModel(job, cost.DefaultConfig)
	if err != nil {
		t.Fatal(err)
	}
	dp := ir.Factor{S0: 4, S1: 2}
	for _, f := range planner.Space(dp) {
		prog := buildFor(t, f)
		tl, err := Simulate(prog, m, nil)
		if err != nil {
			t.Fatalf("%v: %v", f, err)
		}
		if tl.Step < tl.Compute || tl.Compute <= 0 || tl.PeakBytes < tl.PersistentBytes {
			t.Errorf("%v: step %g compute %g peak %g persistent %g", f, tl.Step, tl.Compute, tl.PeakBytes, tl.PersistentBytes)
		}
	}
}
