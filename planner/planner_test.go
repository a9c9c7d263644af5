package planner

import (
	"amspc/internal/testjob"
	"fmt"
	"math"
	"testing"

	"amspc/cost"
	"amspc/ir"
)

// TestSpaceSize matches the sizes of the paper's filtered space counted
// by hand in AMSP-NOTES (R = 8, with the s_g rule).
func TestSpaceSize(t *testing.T) {
	for _, c := range []struct{ nodes, want int }{{1, 16}, {4, 36}, {16, 64}, {128, 121}} {
		dp := ir.Factor{S0: 8, S1: c.nodes}
		sp := Space(dp)
		if len(sp) != c.want {
			t.Errorf("R=8 N=%d: %d candidates, want %d", c.nodes, len(sp), c.want)
		}
		for _, f := range sp {
			if err := ir.ValidateFactors(dp, f.P, f.G, f.OS); err != nil {
				t.Errorf("space holds an invalid plan %v: %v", f, err)
			}
		}
	}
}

// TestMILPMatchesEnumeration: wherever brute force over per-group factors,
// micro-batch sizes and recompute is feasible, the MILP finds the same
// optimum.
func TestMILPMatchesEnumeration(t *testing.T) {
	cases := []struct {
		name  string
		extra []string
	}{
		{"tiny 2x4", nil},
		{"tiny 1x4", []string{`cluster { nodes = 1 gpus_per_node = 4 gpu = "cpu" }`}},
		{"tiny 2x2 tight memory", []string{`cluster { nodes = 2 gpus_per_node = 2 gpu = "cpu" memory = 3 MiB }`}},
		{"tiny 4x2 fp32 small memory", []string{`cluster { nodes = 4 gpus_per_node = 2 gpu = "cpu" memory = 2500 KiB }`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			job := testjob.Load(t, "tiny", append([]string{"shard auto"}, c.extra...)...)
			m, err := cost.NewModel(job, cost.DefaultConfig)
			if err != nil {
				t.Fatal(err)
			}
			space := Space(m.DP)
			mr, err := SolveMILP(m, job, space)
			if err != nil {
				t.Fatal(err)
			}
			brute := Enumerate(m, job, space)
			switch {
			case brute == nil && mr.Best == nil:
				return
			case brute == nil || mr.Best == nil:
				t.Fatalf("enumeration found %v, MILP %v", brute != nil, mr.Best != nil)
			}
			if math.Abs(brute.Step-mr.Best.Step) > 1e-9*brute.Step {
				t.Errorf("MILP step %.9g (%v), enumeration %.9g (%v)", mr.Best.Step, mr.Best.Plan.Groups, brute.Step, brute.Plan.Groups)
			}
			if math.Abs(mr.Objective-mr.Best.Step) > 1e-9*mr.Best.Step {
				t.Errorf("MILP objective %.9g differs from the cost model's step %.9g", mr.Objective, mr.Best.Step)
			}
			if !mr.Best.Feasible {
				t.Errorf("MILP chose an infeasible plan: %s", mr.Best.Why)
			}
		})
	}
}

// TestPresetsAreBaselines: every baseline is a valid point of the space
// (or, for hpZ, a full shard with a valid secondary group).
func TestPresetsAreBaselines(t *testing.T) {
	dp := ir.Factor{S0: 8, S1: 16}
	bs := Baselines(dp, 8)
	if len(bs) != 7 {
		t.Fatalf("%d baselines, want 7", len(bs))
	}
	for _, b := range bs {
		if err := ir.ValidateFactors(dp, b.Factors.P, b.Factors.G, b.Factors.OS); err != nil {
			t.Errorf("%s: %v", b.Name, err)
		}
	}
}

// TestNoPlanFits reports the binding constraint when nothing fits.
func TestNoPlanFits(t *testing.T) {
	job := testjob.Load(t, "llama-7b", `cluster { nodes = 1 gpus_per_node = 1 gpu = "A100-80GB" }`,
		`train { seq_len = 4096 global_batch = 2 }`)
	r, err := Plan(job, Options{Top: 3, PerGroup: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Chosen != nil {
		t.Fatalf("7B on one GPU cannot fit, chose %s (%s)", r.Chosen.Plan.Name, cost.GiB(r.Chosen.Mem.Total))
	}
	if ex := r.Explain(); len(ex) != 1 || r.Smallest == nil {
		t.Errorf("explanation %q", ex)
	}
}

func benchCluster(gpus int) []string {
	return []string{
		fmt.Sprintf(`cluster { nodes = %d gpus_per_node = 8 gpu = "A800-80GB" inter_node_bw = 100 GB/s }`, gpus/8),
		fmt.Sprintf(`train { seq_len = 4096 micro_batch = 1 global_batch = %d }`, 4*gpus),
	}
}

// BenchmarkPaperSpace times planning the paper's space (uniform factors,
// every baseline) for LLaMA-7B on 8 to 16384 GPUs.
func BenchmarkPaperSpace(b *testing.B) {
	for _, gpus := range []int{8, 64, 512, 1024, 4096, 16384} {
		job := testjob.Load(b, "llama-7b", benchCluster(gpus)...)
		b.Run(fmt.Sprintf("gpus=%d", gpus), func(b *testing.B) {
			for b.Loop() {
				if _, err := Plan(job, Options{Objective: Paper, Top: 3}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMILP times the per-group MILP (factors per layer group,
// recompute, micro-batch) for the 80-layer LLaMA-2-70B on 2048 H100s.
func BenchmarkMILP(b *testing.B) {
	job := testjob.Load(b, "llama2-70b-gqa")
	m, err := cost.NewModel(job, cost.DefaultConfig)
	if err != nil {
		b.Fatal(err)
	}
	space := Space(m.DP)
	for b.Loop() {
		mr, err := SolveMILP(m, job, space)
		if err != nil || mr.Best == nil {
			b.Fatal(err)
		}
	}
}
