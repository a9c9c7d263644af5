package compiler_test

import (
	"reflect"
	"testing"

	"amspc/compiler"
	"amspc/cost"
	"amspc/internal/testjob"
	"amspc/ir"
)

// TestCloneIsReparse: Graph.Clone, the copy each compile starts from, is
// the graph printing and parsing again would make, for the example
// models' forward graphs and their training graphs after the passes.
func TestCloneIsReparse(t *testing.T) {
	for _, model := range []string{"tiny", "shared", "tied", "norepeat", "llama-7b"} {
		job := testjob.Load(t, model)
		one := ir.Factor{S0: 1, S1: 1}
		r, err := compiler.Compile(job, cost.Uniform("ddp", cost.Factors{P: one, G: one, OS: one}, ir.RecomputeFull, job.Train.MicroBatch), compiler.Options{Depth: 2})
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range []*ir.Graph{job.Graph, r.Job.Graph} {
			want, err := ir.Parse(g.Pos.File, ir.Print(g))
			if err != nil {
				t.Fatal(err)
			}
			if got := g.Clone(); !reflect.DeepEqual(got, want) {
				t.Errorf("%s: the clone of %d values differs from the graph parsed again", model, len(g.Values))
			}
		}
	}
}
