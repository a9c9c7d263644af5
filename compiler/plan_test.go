package compiler_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"amspc/compiler"
	"amspc/cost"
	"amspc/frontend"
	"amspc/internal/testjob"
	"amspc/ir"
	"amspc/planner"
)

// TestBoundBelowSimulation: the bound the planner prunes with is at most
// the simulated step, and its memory at most what the simulated program
// needs, for every candidate of the small models and LLaMA-7B
// (tensor-parallel ones included), and for the per-group plan the MILP
// picks.
//
// On tiny's CPU ranks it is checked again with a profile whose shared
// all-gathers (the local ranks' gathers into one buffer) are a thousand
// times faster than its plain ones, so that a bound that took every gather
// as a plain one would show.
func TestBoundBelowSimulation(t *testing.T) {
	var rows strings.Builder
	rows.WriteString("collective,s0,s1,bytes,effective_gbps\n")
	for _, g := range []string{"2,1", "4,1", "1,2", "2,2", "4,2"} {
		fmt.Fprintf(&rows, "all_gather,%s,4096,0.01\nall_gather,%s,1e9,0.01\n", g, g)
		fmt.Fprintf(&rows, "all_gather_shared,%s,4096,10\nall_gather_shared,%s,1e9,10\n", g, g)
	}
	sharedProfile := filepath.Join(t.TempDir(), "shared.csv")
	if err := os.WriteFile(sharedProfile, []byte(rows.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tiny", "tied", "shared", "norepeat", "llama-7b", "tiny+shared-gathers"} {
		t.Run(name, func(t *testing.T) {
			job := testjob.Load(t, strings.TrimSuffix(name, "+shared-gathers"))
			if strings.HasSuffix(name, "+shared-gathers") {
				c := *job.Cluster
				c.Profile = sharedProfile
				job.Cluster = &c
			}
			m, err := cost.NewModel(job, cost.DefaultConfig)
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasSuffix(name, "+shared-gathers") && !m.Topo.Profile.HasShared() {
				t.Fatal("the profile's shared gathers did not reach the model")
			}
			ev := compiler.NewEvaluator(job, m)
			plans := planner.Candidates(m.DP, job.Train.Recompute, job.Train.MicroBatch)
			plans = append(plans, planner.TensorCandidates(m.DP, job.Train.Recompute, job.Train.MicroBatch)...)
			if mr, err := planner.SolveMILP(m, job, planner.Space(m.DP)); err == nil && mr.Best != nil {
				plans = append(plans, mr.Best.Plan)
			}
			prs, errs := ev.Predict(plans)
			bounds := ev.Bounds(plans)
			checked := 0
			for i, p := range plans {
				if errs[i] != nil {
					continue // a plan the batch cannot split: the planner never simulates it either
				}
				step, mem, err := bounds[i].Step, bounds[i].Mem, bounds[i].Err
				if err != nil {
					t.Fatalf("%s: %v", p.Name, err)
				}
				pr := prs[i]
				if step > pr.Step*(1+1e-12) {
					t.Errorf("%s (%v, recompute %v): bound %.9g s > simulated step %.9g s", p.Name, p.Groups, p.Recompute, step, pr.Step)
				}
				if need := m.Needed(pr.PeakBytes, pr.PersistentBytes); mem > need*(1+1e-12) {
					t.Errorf("%s: memory bound %s > needed %s", p.Name, cost.GiB(mem), cost.GiB(need))
				}
				checked++
			}
			if checked < len(plans)/2 {
				t.Fatalf("only %d of %d candidates compiled", checked, len(plans))
			}
		})
	}
}

// plan runs the planner as `amspc plan` does.
func plan(t *testing.T, job *ir.Job) *planner.Result {
	t.Helper()
	r, err := planner.Plan(job, planner.Options{Objective: planner.Step, Top: 3, PerGroup: true, NewEvaluator: compiler.NewEvaluator})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// checkChosen: the chosen plan's simulated step is at most every feasible
// printed row's, and every printed row was simulated.
func checkChosen(t *testing.T, what string, r *planner.Result) {
	t.Helper()
	rows := append(append([]*cost.Estimate{}, r.Baselines...), r.Top...)
	if r.Fixed != nil {
		rows = append(rows, r.Fixed)
	}
	if r.MILP != nil && r.MILP.Best != nil {
		rows = append(rows, r.MILP.Best)
	}
	for _, e := range rows {
		if e.Feasible && !e.Simulated {
			t.Errorf("%s: row %s is feasible but was not simulated", what, e.Plan.Name)
		}
		if !e.Feasible {
			continue
		}
		if r.Chosen == nil {
			t.Errorf("%s: no plan chosen, but %s fits", what, e.Plan.Name)
			continue
		}
		if r.Chosen.Step > e.Step {
			t.Errorf("%s: chosen %s (%.6g s) is slower than %s (%.6g s)", what, r.Chosen.Plan.Name, r.Chosen.Step, e.Plan.Name, e.Step)
		}
	}
	if c := r.Chosen; c != nil && (!c.Simulated || !c.Feasible) {
		t.Errorf("%s: chosen %s simulated %v feasible %v", what, c.Plan.Name, c.Simulated, c.Feasible)
	}
}

// TestChosenNeverSlower: for every example model on its own cluster, the
// chosen plan is never slower than a feasible row the planner prints.
func TestChosenNeverSlower(t *testing.T) {
	var files []string
	for _, dir := range []string{"../testdata/models", "../../shared/examples"} {
		fs, _ := filepath.Glob(filepath.Join(dir, "*.amsp"))
		files = append(files, fs...)
	}
	if len(files) < 6 {
		t.Fatalf("found %d example models", len(files))
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".amsp")
		t.Run(filepath.Base(filepath.Dir(f))+"/"+name, func(t *testing.T) {
			if testing.Short() && name == "llama2-70b-gqa" {
				t.Skip("70B search takes a while; -short skips it")
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			job, err := frontend.Load(frontend.Source{Name: f, Text: b})
			if err != nil {
				t.Fatal(err)
			}
			checkChosen(t, name, plan(t, job))
		})
	}
}

// TestGapBoundsTheChoice: a search with an optimality gap simulates no
// more candidates than the exact one, and its choice is within the gap of
// the exact choice; the printed rows still hold (checkChosen).
func TestGapBoundsTheChoice(t *testing.T) {
	for _, name := range []string{"tiny", "tied", "llama-7b"} {
		job := testjob.Load(t, name)
		exact := plan(t, job)
		gapped, err := planner.Plan(job, planner.Options{Objective: planner.Step, Top: 3, PerGroup: true,
			NewEvaluator: compiler.NewEvaluator, Gap: planner.DefaultGap})
		if err != nil {
			t.Fatal(err)
		}
		checkChosen(t, name+" with a gap", gapped)
		if gapped.Simulated > exact.Simulated {
			t.Errorf("%s: %d simulated with a gap, %d without", name, gapped.Simulated, exact.Simulated)
		}
		if g, e := gapped.Chosen.Step, exact.Chosen.Step; g > e*(1+planner.DefaultGap) {
			t.Errorf("%s: chose %s (%.6g s) with a gap of %g, %s (%.6g s) without", name, gapped.Chosen.Plan.Name, g, planner.DefaultGap, exact.Chosen.Plan.Name, e)
		}
		t.Logf("%s: %d simulated exactly, %d within %g; chosen %.6g s and %.6g s", name, exact.Simulated, gapped.Simulated, planner.DefaultGap, exact.Chosen.Step, gapped.Chosen.Step)
	}
	job := testjob.Load(t, "tiny")
	for _, g := range []float64{-0.01, 1, 2} {
		if _, err := planner.Plan(job, planner.Options{Objective: planner.Step, Gap: g}); err == nil {
			t.Errorf("gap %g was taken", g)
		}
	}
}

// TestChosenNeverSlowerSweep: the same on LLaMA-7B and LLaMA-2-70B at
// every power of two from 8 to 16384 A800s (four sequences per GPU per
// step).
func TestChosenNeverSlowerSweep(t *testing.T) {
	if testing.Short() {
		t.Skip("plans 24 clusters, about a minute")
	}
	for _, name := range []string{"llama-7b", "llama2-70b-gqa"} {
		for gpus := 8; gpus <= 16384; gpus *= 2 {
			t.Run(fmt.Sprintf("%s/%d", name, gpus), func(t *testing.T) {
				job := testjob.Load(t, name,
					fmt.Sprintf(`cluster { nodes = %d gpus_per_node = 8 gpu = "A800-80GB" }`, gpus/8),
					fmt.Sprintf(`train { seq_len = 4096 micro_batch = 1 global_batch = %d precision = bf16 recompute = full }`, 4*gpus))
				checkChosen(t, fmt.Sprintf("%s on %d GPUs", name, gpus), plan(t, job))
			})
		}
	}
}
