package main

import (
	"io"
	"runtime"
	"testing"

	"amspc/cost"
	"amspc/cost/profile"
)

// TestInStepOverheadCores: traced steps of tiny's 8 ranks measure the
// cores the ranks queued for where they outnumber this process's cores
// (the profile's `cores` row: the simulator replays that queue for
// tensor-parallel programs) and no hand-off then; with as many cores as
// ranks, no queue. An instruction's cost is measured apart in
// tensor-parallel steps (instruction_tp) and in the others.
func TestInStepOverheadCores(t *testing.T) {
	if testing.Short() {
		t.Skip("runs steps")
	}
	for _, procs := range []int{2, 8} {
		t.Run(map[int]string{2: "2 cores", 8: "8 cores"}[procs], func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			job := loadJob(t, "../../testdata/models/tiny.amsp")
			job.Shard = nil            // shard auto
			plans := profilePlans(job) // ZeRO-3, DDP, then tensor-parallel ones
			tp := plans[len(plans)-1]
			if tp.Tensor <= 1 {
				t.Fatalf("the profile's last plan %s is not tensor-parallel", tp.Name)
			}
			results, _, st := compileProfilePlans("tiny.amsp", job, []cost.Plan{plans[0], tp}, io.Discard)
			if st != exitOK {
				t.Fatal("ZeRO-3 or FSDP+TP of tiny does not compile")
			}
			tokens, _, err := loadTokens("", job.Train.Data)
			if err != nil {
				t.Fatal(err)
			}
			samples := newInStepSamples()
			for i, r := range results {
				s, err := startInStep(r, tokens)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.step(); err != nil {
					t.Fatal(err)
				}
				s.times(samples)
				if i == 0 {
					// ZeRO-3 alone: no tensor-parallel instruction cost.
					if o := samples.overhead(job, &profile.Profile{}); !(o.Instruction > 0) || o.InstructionTP != 0 {
						t.Errorf("ZeRO-3's overhead %+v: want an instruction cost, and none for tensor-parallel steps", o)
					}
				}
			}
			o := samples.overhead(job, &profile.Profile{})
			want := 0
			if ranks := job.Cluster.Nodes * job.Cluster.GPUsPerNode; ranks > procs {
				want = procs
			}
			if o.Cores != want || (want > 0 && o.Collective != 0) {
				t.Errorf("overhead %+v on %d cores: want %d cores and, queued, no hand-off", o, procs, want)
			}
			if !(o.Instruction > 0) || !(o.InstructionTP > 0) {
				t.Errorf("overhead %+v: want instruction costs of both kinds of step", o)
			}
		})
	}
}
