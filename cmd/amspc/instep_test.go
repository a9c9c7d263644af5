package main

import (
	"io"
	"runtime"
	"testing"

	"amspc/cost/profile"
)

// TestInStepOverheadCores: traced steps of tiny's 8 ranks measure the
// cores the ranks queued for where they outnumber this process's cores
// (the profile's `cores` row: the simulator replays that queue for
// tensor-parallel programs) and no hand-off then; with as many cores as
// ranks, no queue.
func TestInStepOverheadCores(t *testing.T) {
	if testing.Short() {
		t.Skip("runs steps")
	}
	for _, procs := range []int{2, 8} {
		t.Run(map[int]string{2: "2 cores", 8: "8 cores"}[procs], func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			job := loadJob(t, "../../testdata/models/tiny.amsp")
			results, _, st := compileProfilePlans("tiny.amsp", job, profilePlans(job)[:1], io.Discard)
			if st != exitOK {
				t.Fatal("ZeRO-3 of tiny does not compile")
			}
			tokens, _, err := loadTokens("", job.Train.Data)
			if err != nil {
				t.Fatal(err)
			}
			s, err := startInStep(results[0], tokens)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.step(); err != nil {
				t.Fatal(err)
			}
			samples := newInStepSamples()
			s.times(samples)
			o := samples.overhead(job, &profile.Profile{})
			want := 0
			if ranks := job.Cluster.Nodes * job.Cluster.GPUsPerNode; ranks > procs {
				want = procs
			}
			if o.Cores != want || (want > 0 && o.Collective != 0) {
				t.Errorf("overhead %+v on %d cores: want %d cores and, queued, no hand-off", o, procs, want)
			}
			if !(o.Instruction > 0) {
				t.Errorf("no instruction overhead measured: %+v", o)
			}
		})
	}
}
