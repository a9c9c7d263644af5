package simulator_test

import (
	"amspc/internal/testjob"
	"encoding/json"
	"strings"
	"testing"

	"amspc/codegen"
	"amspc/cost"
	"amspc/ir"
	"amspc/planner"
	. "amspc/simulator"
)

// buildFor compiles tiny on 2 nodes x 4 ranks under uniform factors f.
func buildFor(t *testing.T, f cost.Factors) *ir.Program {
	t.Helper()
	_, prog, err := compileTiny(t, f)
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
		if len(prog.Streams[ir.Compute]) == 0 {
			t.Errorf("%v: empty compute stream", f)
		}
		if err := wellFormed(prog); err != nil {
			t.Errorf("%v: %v", f, err)
		}
		b := &codegen.Bundle{Model: "tiny", Topo: ir.Topology{GPUsPerNode: 4, Nodes: 2}, Micro: 2, Templates: []ir.Program{*prog}}
		if err := codegen.Match(b); err != nil {
			t.Errorf("%v: collective matching: %v", f, err)
		}
	}
}

// TestSimulateEveryTriple replays every plan on the cost model: no
// deadlock, every alloc matched, and a step time at least the compute.
func TestSimulateEveryTriple(t *testing.T) {
	job := testjob.Load(t, "tiny")
	m, err := cost.NewModel(job, cost.DefaultConfig)
	if err != nil {
		t.Fatal(err)
	}
	dp := ir.Factor{S0: 4, S1: 2}
	for _, f := range planner.Space(dp) {
		prog := buildFor(t, f)
		tl, err := Simulate(prog, cost.NewMachine(job.Cluster, m.Topo), nil)
		if err != nil {
			t.Fatalf("%v: %v", f, err)
		}
		if tl.Step < tl.Compute || tl.Compute <= 0 || tl.PeakBytes < tl.PersistentBytes {
			t.Errorf("%v: step %g compute %g peak %g persistent %g", f, tl.Step, tl.Compute, tl.PeakBytes, tl.PersistentBytes)
		}
	}
}

func TestTraceIsJSON(t *testing.T) {
	job := testjob.Load(t, "tiny")
	m, _ := cost.NewModel(job, cost.DefaultConfig)
	f := cost.Factors{P: ir.Factor{S0: 2, S1: 1}, G: ir.Factor{S0: 2, S1: 1}, OS: ir.Factor{S0: 4, S1: 2}}
	tl, err := Simulate(buildFor(t, f), cost.NewMachine(job.Cluster, m.Topo), nil)
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	if err := WriteTrace(&sb, tl, []int{0, 5}); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []map[string]any `json:"traceEvents"`
	}
	if err := json.Unmarshal([]byte(sb.String()), &doc); err != nil {
		t.Fatalf("trace is not JSON: %v", err)
	}
	if len(doc.TraceEvents) != 2*(1+ir.NumStreams+len(tl.Spans)) {
		t.Errorf("%d events for %d spans", len(doc.TraceEvents), len(tl.Spans))
	}
}
