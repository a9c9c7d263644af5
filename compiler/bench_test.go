package compiler_test

import (
	"fmt"
	"testing"

	"amspc/compiler"
	"amspc/cost"
	"amspc/internal/testjob"
	"amspc/ir"
	"amspc/planner"
)

// BenchmarkCompilePlan times one plan's compile as the planner's
// simulated objective runs it: ZeRO-3 (P, G and OS over the whole mesh)
// at a fixed prefetch depth, the job loaded once.
func BenchmarkCompilePlan(b *testing.B) {
	for _, model := range []string{"tiny", "llama-7b", "llama2-70b-gqa"} {
		b.Run(model, func(b *testing.B) {
			job := testjob.Load(b, model)
			mesh := ir.Factor{S0: job.Cluster.GPUsPerNode, S1: job.Cluster.Nodes}
			f := cost.Factors{P: mesh, G: mesh, OS: mesh}
			plan := cost.Uniform("zero3", f, job.Train.Recompute, job.Train.MicroBatch)
			for b.Loop() {
				if _, err := compiler.Compile(job, plan, compiler.Options{Depth: 2}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPlanSearch times `amspc plan`'s whole search under the step
// objective, the job loaded once: the baselines, the fixed plan and the
// MILP's per-group plan simulated, then branch and bound over every
// candidate, simulating those its bound cannot rule out.
// With gap=0 the search is exact, with planner.DefaultGap as amspc runs it.
// `go test ./compiler -run '^$' -bench PlanSearch -count 5`.
func BenchmarkPlanSearch(b *testing.B) {
	for _, model := range []string{"tiny", "llama-7b", "llama2-70b-gqa"} {
		for _, gap := range []float64{0, planner.DefaultGap} {
			b.Run(fmt.Sprintf("%s/gap=%g", model, gap), func(b *testing.B) {
				job := testjob.Load(b, model)
				var res *planner.Result
				for b.Loop() {
					var err error
					res, err = planner.Plan(job, planner.Options{Objective: planner.Step, Top: 3, PerGroup: true,
						Config: cost.DefaultConfig, NewEvaluator: compiler.NewEvaluator, Gap: gap})
					if err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(res.Simulated), "simulated")
				b.ReportMetric(float64(res.Candidates), "candidates")
			})
		}
	}
}
