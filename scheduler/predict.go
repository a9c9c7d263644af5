package scheduler

import (
	"fmt"

	"amspc/codegen"
	"amspc/cost"
	"amspc/passes"
)

// BuildWithin schedules a plan with the deepest prefetch (up to two
// stages of gathered parameters live) whose simulated peak memory fits in
// memoryBytes, and returns the program with its timeline. A plan that does
// not fit even one stage at a time is an error naming the numbers.
func BuildWithin(s *passes.State, plan cost.Plan, topo codegen.Topology, M int, m *cost.Model, memoryBytes int64, stages func(*codegen.Program) []string) (*codegen.Program, *Timeline, error) {
	var lastPeak float64
	for depth := 2; depth >= 1; depth-- {
		prog, err := Build(s, plan, topo, M, Options{Depth: depth, Topo: m.Topo, BucketBytes: int64(m.Config.BucketBytes)})
		if err != nil {
			return nil, nil, err
		}
		tl, err := Simulate(prog, m.Topo, m.FlopRate(), stages(prog))
		if err != nil {
			return nil, nil, err
		}
		if tl.PeakBytes <= float64(memoryBytes) {
			return prog, tl, nil
		}
		lastPeak = tl.PeakBytes
	}
	return nil, nil, fmt.Errorf("the schedule needs %s per rank at its peak, more than the %s of a GPU, even gathering one stage at a time",
		cost.GiB(lastPeak), cost.GiB(float64(memoryBytes)))
}
