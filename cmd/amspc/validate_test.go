package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"amspc/compiler"
	"amspc/cost"
	"amspc/ir"
	"amspc/simulator"
)

// TestValidateCommand runs the rows plan prints for tiny one step each
// and checks the result's shape: every row compiled, ran and was
// compared, and the summary agrees with the rows. (The figures
// themselves are machine-dependent; bench/ reports them.)
func TestValidateCommand(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if st := run([]string{"validate", "--steps", "1", "--warmup", "0", "--json", "../../testdata/models/tiny.amsp"}, &stdout, &stderr); st != exitOK {
		t.Fatalf("status %d: %s", st, stderr.String())
	}
	var sum validationSummary
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Model != "tiny" || sum.Ranks != 8 || len(sum.Rows) < 5 {
		t.Fatalf("summary %+v", sum)
	}
	seen := map[string]bool{}
	var errs []float64
	for _, r := range sum.Rows {
		key := r.Factors + " " + r.Recompute
		if seen[key] {
			t.Errorf("%s ran twice", key)
		}
		seen[key] = true
		if !(r.Predicted > 0) || !(r.Measured > 0) || math.Abs(r.Error-(r.Predicted/r.Measured-1)) > 1e-12 {
			t.Errorf("row %+v", r)
		}
		errs = append(errs, math.Abs(r.Error))
	}
	if sum.MedianAbsError != median(errs) || !(sum.Spearman >= -1 && sum.Spearman <= 1) {
		t.Errorf("median error %g (rows: %g), Spearman %g", sum.MedianAbsError, median(errs), sum.Spearman)
	}
	for i := 1; i < len(sum.Rows); i++ {
		if sum.Rows[i].Predicted < sum.Rows[i-1].Predicted {
			t.Errorf("rows not in predicted order at %d", i)
		}
	}

	stderr.Reset()
	if st := run([]string{"validate", "--plans", "best", "../../testdata/models/tiny.amsp"}, &stdout, &stderr); st != exitUser ||
		!strings.Contains(stderr.String(), "want rows, all or extremes=N") {
		t.Errorf("--plans best: status %d, %s", st, stderr.String())
	}
}

// Spearman's rank correlation: ties take their mean rank.
func TestSpearman(t *testing.T) {
	for _, c := range []struct {
		x, y []float64
		want float64
	}{
		{[]float64{1, 2, 3, 4}, []float64{10, 20, 30, 40}, 1},
		{[]float64{1, 2, 3, 4}, []float64{4, 3, 2, 1}, -1},
		{[]float64{1, 2, 3, 4, 5}, []float64{2, 1, 4, 3, 5}, 0.8},
		{[]float64{1, 1, 2}, []float64{1, 2, 3}, math.Sqrt(3) / 2},
	} {
		if got := spearman(c.x, c.y); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("spearman(%v, %v) = %g, want %g", c.x, c.y, got, c.want)
		}
	}
	if got := ranks([]float64{3, 1, 3, 2}); got[0] != 3.5 || got[1] != 1 || got[2] != 3.5 || got[3] != 2 {
		t.Errorf("ranks %v", got)
	}
}

// pairAgreement counts only the pairs measured further apart than the
// noise, and the share of them predicted in order.
func TestPairAgreement(t *testing.T) {
	meas := []float64{1.00, 1.01, 1.50, 2.00}
	pred := []float64{1.2, 1.0, 1.1, 2.5} // 1.00 and 1.01 swapped: within the noise
	reach := func(r float64) []float64 { return []float64{r, r, r, r} }
	n, a := pairAgreement(pred, meas, reach(0.05))
	if n != 5 || a != 0.8 { // (1.00,1.50) is predicted backwards
		t.Errorf("%d pairs, agreement %g; want 5 and 0.8", n, a)
	}
	if n, a := pairAgreement(pred, meas, reach(5)); n != 0 || a != 0 {
		t.Errorf("with a noise wider than every gap: %d pairs, %g", n, a)
	}
	if n, a := pairAgreement([]float64{1, 1}, []float64{1, 2}, []float64{0, 0}); n != 1 || a != 0.5 {
		t.Errorf("a tie in the predictions: %d pairs, %g", n, a)
	}
	// A plan whose runs measured 60 % apart is apart from none of the
	// others, though the noise is 5 %: (1.00, 2.00) and (1.01, 2.00)
	// are left.
	if n, _ := pairAgreement(pred, meas, []float64{0.05, 0.05, 0.6, 0.05}); n != 2 {
		t.Errorf("with the third plan's runs 60 %% apart: %d pairs, want 2", n)
	}
}

// separated picks plans from the fastest measured on, each more than
// the noise slower than the last picked.
func TestSeparated(t *testing.T) {
	meas := []float64{1.00, 1.50, 1.01, 1.04, 1.12, 2.00}
	reach := func(r float64) []float64 { return []float64{r, r, r, r, r, r} }
	if got := separated(meas, reach(0.05)); !slices.Equal(got, []int{0, 4, 1, 5}) {
		t.Errorf("separated %v, want [0 4 1 5]", got)
	}
	// 1.12's runs 40 % apart: 1.50 is apart from 1.00 but not from it,
	// and is picked after 1.00.
	if got := separated(meas, []float64{0.05, 0.05, 0.05, 0.05, 0.4, 0.05}); !slices.Equal(got, []int{0, 1, 5}) {
		t.Errorf("separated with 1.12's runs 40 %% apart: %v, want [0 1 5]", got)
	}
	if got := separated(meas, reach(5)); !slices.Equal(got, []int{0}) {
		t.Errorf("with a noise wider than every gap: %v", got)
	}
	s := validationSummary{Rows: []validationRow{
		{Predicted: 1, Measured: 1.00, Spread: 0.01},
		{Predicted: 3, Measured: 1.01, Spread: 0.01}, // within the noise of the first: left out
		{Predicted: 2, Measured: 1.50, Spread: 0.01},
		{Predicted: 4, Measured: 2.00, Spread: 0.01},
	}}
	s.score()
	if s.Separated != 3 || s.SpearmanSeparated != 1 || !(s.Spearman < 1) {
		t.Errorf("%d separated plans, Spearman %g among them, %g over all", s.Separated, s.SpearmanSeparated, s.Spearman)
	}
}

// TestValidateCalibrated is the validation's short version, run by CI:
// tiny's rows on 2 local ranks, the profile measured in the rotation.
// CI runs other packages' tests on the same cores meanwhile, which slows
// every step (by 2x in one CI run) in ways no profile of this process
// sees, so the bound is on how the plans' predictions compare with each
// other: each prediction and measurement over its own median, the median
// of their relative differences under 30 %. A model that costs one kind
// of plan wrongly (collectives, recompute, tensor parallelism) cannot
// land silently; bench/validation.md has the full run's absolute figures.
func TestValidateCalibrated(t *testing.T) {
	if testing.Short() {
		t.Skip("times steps of a dozen plans")
	}
	two := filepath.Join(t.TempDir(), "two.amsp")
	if err := os.WriteFile(two, []byte(`cluster two { nodes = 1 gpus_per_node = 2 gpu = "cpu" intra_node_bw = 10 GB/s inter_node_bw = 1 GB/s }`), 0o644); err != nil {
		t.Fatal(err)
	}
	saved := filepath.Join(t.TempDir(), "calibration.csv")
	var stdout, stderr bytes.Buffer
	if st := run([]string{"validate", "--calibrate", "--steps", "3", "--instances", "1", "--json", "--save-profile", saved, "--cluster", two, "--shard", "auto", "../../testdata/models/tiny.amsp"}, &stdout, &stderr); st != exitOK {
		t.Fatalf("status %d: %s", st, stderr.String())
	}
	var sum validationSummary
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Ranks != 2 || len(sum.Rows) < 4 || !strings.Contains(sum.Profile, "measured between the rounds") {
		t.Fatalf("summary %+v", sum)
	}
	// Every time was taken against the reference (--reference, on by
	// default), which stepped beside each of the rows' timed steps.
	if ref := sum.Reference; ref == nil || ref.Plan != "ZeRO-3 (2x1/2x1/2x1)" || ref.Steps < 3*len(sum.Rows) || !(ref.P10 <= ref.Median && ref.Median <= ref.P90) {
		t.Fatalf("reference %+v", sum.Reference)
	}
	for _, r := range sum.Rows {
		if !(r.Wall > 0) || !(r.Measured > 0) {
			t.Fatalf("%s: wall %g s, measured %g s", r.Plan, r.Wall, r.Measured)
		}
	}
	// The saved profile is what the predictions were costed with: plan
	// --profile costs DDP's row to the same step (its baseline row).
	ddp := -1
	for i, r := range sum.Rows {
		if r.Plan == "DDP" {
			ddp = i
		}
	}
	if ddp < 0 {
		t.Fatalf("no DDP row in %+v", sum.Rows)
	}
	stdout.Reset()
	if st := run([]string{"plan", "--json", "--profile", saved, "--cluster", two, "--shard", "auto", "../../testdata/models/tiny.amsp"}, &stdout, &stderr); st != exitOK {
		t.Fatalf("plan with the saved profile: status %d: %s", st, stderr.String())
	}
	var planned struct {
		Baselines []struct {
			Name string  `json:"name"`
			Step float64 `json:"step_time_s"`
		} `json:"baselines"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &planned); err != nil {
		t.Fatal(err)
	}
	got := math.NaN()
	for _, b := range planned.Baselines {
		if b.Name == "DDP" {
			got = b.Step
		}
	}
	if want := sum.Rows[ddp].Predicted; !(math.Abs(got/want-1) <= 1e-9) {
		t.Errorf("plan --profile of the saved calibration costs DDP at %g s, validate predicted %g s", got, want)
	}
	var pred, meas []float64
	for _, r := range sum.Rows {
		pred = append(pred, r.Predicted)
		meas = append(meas, r.Measured)
	}
	mp, mm := median(pred), median(meas)
	var rel []float64
	for i, r := range sum.Rows {
		e := (pred[i]/mp)/(meas[i]/mm) - 1
		rel = append(rel, math.Abs(e))
		t.Logf("%-40s predicted %8.2f ms, measured %8.2f ms, %+6.1f%%; against the medians %+6.1f%%", r.Plan, 1e3*r.Predicted, 1e3*r.Measured, 100*r.Error, 100*e)
	}
	t.Logf("median |error| %.1f%%, worst %.1f%%, Spearman %.2f, noise %.1f%%; against the medians %.1f%%",
		100*sum.MedianAbsError, 100*sum.MaxAbsError, sum.Spearman, 100*sum.Noise, 100*median(rel))
	if m := median(rel); m > 0.3 {
		t.Errorf("the plans' predictions against their median are %.1f%% off their measurements against theirs (median): more than 30 %%", 100*m)
	}
}

// The calibrated prediction is of the program the steps ran. tiny's DDP
// on its 2 x 4 cluster all-reduces in phases inside and across nodes by
// the cluster's nominal figures and in one call by bench's profile:
// compiled with the one and costed with the other, the row is predicted
// as the program it ran (with the phases), not as the program compiling
// again with the profile would make.
func TestPredictCalibratedCostsTheProgramRun(t *testing.T) {
	job := loadJob(t, "../../testdata/models/tiny.amsp")
	one := ir.Factor{S0: 1, S1: 1}
	ddp := cost.Uniform("DDP", cost.Factors{P: one, G: one, OS: one}, job.Train.Recompute, job.Train.MicroBatch)
	ran, err := compiler.Compile(job, ddp, compiler.Options{Config: cost.DefaultConfig})
	if err != nil {
		t.Fatal(err)
	}
	prof, err := cost.ReadProfile("../../bench/profiles/tiny.csv")
	if err != nil {
		t.Fatal(err)
	}
	rows := []validationRow{{Plan: "DDP", Measured: 0.1, ran: ran.Program, ranJob: ran.Job}}
	if _, err := predictCalibrated(rows, prof); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "calibration.csv")
	var text strings.Builder
	if err := prof.Write(&text); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	j := *job
	cl := *job.Cluster
	cl.Profile = path
	j.Cluster = &cl
	again, err := compiler.Compile(&j, ddp, compiler.Options{Config: cost.DefaultConfig})
	if err != nil {
		t.Fatal(err)
	}
	reduces := func(p *ir.Program) int { return len(p.Streams[ir.CommReduce]) }
	if reduces(ran.Program) == reduces(again.Program) {
		t.Fatalf("the two compiles made the same reduce stream (%d instructions): the test needs programs that differ", reduces(ran.Program))
	}
	m, err := cost.NewModel(&j, cost.DefaultConfig)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := simulator.Simulate(ran.Program, m.Machine, compiler.StageNames(ran.Program))
	if err != nil {
		t.Fatal(err)
	}
	if got := rows[0].Predicted; got != tl.Step || got == again.Timeline.Step {
		t.Errorf("predicted %g s; the program run costs %g s with the calibration, the program compiled again %g s", got, tl.Step, again.Timeline.Step)
	}
}
