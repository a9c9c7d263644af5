package compiler_test

import (
	"testing"

	"amspc/compiler"
	"amspc/cost"
	"amspc/internal/testjob"
	"amspc/ir"
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
