package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sort"
	"strings"
	"time"

	"amspc/compiler"
	"amspc/cost"
	"amspc/engine"
	"amspc/ir"
	"amspc/planner"
)

// runValidate checks the planner's predictions on this machine: it
// compiles plans of a job, trains each a few steps on the local ranks (the
// runtime `amspc run` uses), and compares the measured step time with the
// step the plan's simulated program predicts. It prints one row per plan,
// the median absolute error and the rank correlation of predicted and
// measured steps.
func runValidate(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("validate", "usage: amspc validate [--plans rows|all|extremes=N] [--steps N] [--warmup K] [--markdown|--json] [--profile FILE] [--cluster FILE] [--train FILE] FILE", stderr)
	var lf loadFlags
	lf.register(fs)
	which := fs.String("plans", "rows", "which `PLANS` to run: rows (the rows plan prints), all (every candidate of the space and every row), extremes=N (the N predicted fastest and N slowest of all)")
	steps := fs.Int("steps", 5, "time `N` steps of each plan (the median is its measured step)")
	warmup := fs.Int("warmup", 1, "run `K` steps of each plan before timing")
	markdown := fs.Bool("markdown", false, "print the table as Markdown (for bench/)")
	asJSON := fs.Bool("json", false, "print the result as one JSON object")
	data := fs.String("data", "", "train on `PATH` (as amspc run --data; default: the embedded corpus)")
	file, ok := oneFile(fs, args)
	if !ok {
		return exitUser
	}
	switch {
	case *steps < 1:
		fmt.Fprintf(stderr, "amspc validate: --steps %d: want 1 or more\n", *steps)
		return exitUser
	case *warmup < 0:
		fmt.Fprintf(stderr, "amspc validate: --warmup %d: want 0 or more\n", *warmup)
		return exitUser
	case *markdown && *asJSON:
		fmt.Fprintln(stderr, "amspc validate: --markdown and --json each choose the output: give one")
		return exitUser
	}
	extremes := 0
	switch {
	case *which == "rows" || *which == "all":
	case strings.HasPrefix(*which, "extremes="):
		if _, err := fmt.Sscanf(strings.TrimPrefix(*which, "extremes="), "%d", &extremes); err != nil || extremes < 1 {
			fmt.Fprintf(stderr, "amspc validate: --plans %s: want extremes=N with N >= 1\n", *which)
			return exitUser
		}
	default:
		fmt.Fprintf(stderr, "amspc validate: --plans %s: want rows, all or extremes=N\n", *which)
		return exitUser
	}
	job, err := lf.load(file)
	if err != nil {
		return report(stderr, err)
	}
	if job.Cluster == nil || job.Train == nil {
		fmt.Fprintf(stderr, "%s: validating needs a cluster and a train section (or --cluster / --train FILE)\n", file)
		return exitUser
	}
	tokens, what, err := loadTokens(*data, job.Train.Data)
	if err != nil {
		fmt.Fprintf(stderr, "amspc validate: %v\n", err)
		return exitUser
	}
	start := time.Now()
	plans, err := validationPlans(job, *which != "rows")
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", file, err)
		return exitUser
	}
	// Compile every plan; plans that compile to the same program (MiCS
	// and HSDP, a baseline and the candidate it equals) run once.
	var rows []validationRow
	seen := map[string]bool{}
	for _, p := range plans {
		r, err := compiler.Compile(job, p, compiler.Options{Config: cost.DefaultConfig})
		if err != nil {
			continue // does not fit or does not split: nothing to run
		}
		key := fmt.Sprintf("%s %v %d", r.Bundle.Plan, p.Recompute, r.Micro)
		if seen[key] {
			continue
		}
		seen[key] = true
		rows = append(rows, validationRow{Plan: p.Name, Factors: r.Bundle.Plan, Micro: r.Micro,
			Recompute: p.Recompute.String(), Predicted: r.Timeline.Step, result: r})
	}
	if len(rows) == 0 {
		fmt.Fprintf(stderr, "%s: no plan compiles\n", file)
		return exitUser
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Predicted < rows[j].Predicted })
	if extremes > 0 && len(rows) > 2*extremes {
		rows = append(rows[:extremes:extremes], rows[len(rows)-extremes:]...)
	}
	// Every plan must fit this machine on its own, found now rather than
	// by the kernel's OOM killer minutes into the measurements.
	for _, r := range rows {
		if err := checkMemory(hostBytes(r.result), fmt.Sprintf("plan %s on %d CPU ranks", planLabel(r.Plan, r.Factors), r.result.Bundle.Topo.Ranks())); err != nil {
			fmt.Fprintf(stderr, "amspc validate: %s: %v\n", file, err)
			return exitUser
		}
	}
	if err := measureRows(rows, tokens, *warmup, *steps); err != nil {
		fmt.Fprintf(stderr, "amspc validate: %v\n", err)
		return exitUser
	}
	sum := validationSummary{Model: job.Graph.Name, Ranks: job.Cluster.GPUs(), Profile: job.Cluster.Profile,
		Data: what, Steps: *steps, Warmup: *warmup, Plans: *which, Rows: rows}
	var errs, pred, meas []float64
	for _, r := range rows {
		errs = append(errs, math.Abs(r.Error))
		pred = append(pred, r.Predicted)
		meas = append(meas, r.Measured)
	}
	sum.MedianAbsError = median(errs)
	sum.Spearman = spearman(pred, meas)
	sum.Seconds = time.Since(start).Seconds()
	switch {
	case *asJSON:
		b, _ := json.MarshalIndent(sum, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
	case *markdown:
		sum.markdown(stdout)
	default:
		sum.text(stdout, file)
	}
	return exitOK
}

// validationRow is one plan: what the simulation predicted and what the
// local ranks measured.
type validationRow struct {
	Plan      string  `json:"plan"`
	Factors   string  `json:"factors"`
	Recompute string  `json:"recompute"`
	Micro     int     `json:"micro_batches"`
	Predicted float64 `json:"predicted_s"`
	Measured  float64 `json:"measured_s"`
	Error     float64 `json:"error"` // predicted / measured - 1
	result    *compiler.Result
}

type validationSummary struct {
	Model          string          `json:"model"`
	Ranks          int             `json:"ranks"`
	Profile        string          `json:"profile,omitempty"`
	Data           string          `json:"data"`
	Plans          string          `json:"plans"`
	Steps          int             `json:"steps"`
	Warmup         int             `json:"warmup"`
	Rows           []validationRow `json:"rows"`
	MedianAbsError float64         `json:"median_abs_error"`
	Spearman       float64         `json:"spearman"`
	Seconds        float64         `json:"seconds"`
}

func (s *validationSummary) text(w io.Writer, file string) {
	prof := "the cluster's nominal figures"
	if s.Profile != "" {
		prof = "profile " + s.Profile
	}
	fmt.Fprintf(w, "%s: %s on %d local ranks, %d plans, %d timed steps each (after %d), predicted with %s\n",
		file, s.Model, s.Ranks, len(s.Rows), s.Steps, s.Warmup, prof)
	fmt.Fprintf(w, "    %-36s %-16s %-9s %3s %10s %10s %7s\n", "plan", "s_p/s_g/s_os", "recompute", "M", "predicted", "measured", "error")
	for _, r := range s.Rows {
		fmt.Fprintf(w, "    %-36s %-16s %-9s %3d %10s %10s %+6.1f%%\n", r.Plan, r.Factors, r.Recompute, r.Micro, dur(r.Predicted), dur(r.Measured), 100*r.Error)
	}
	fmt.Fprintf(w, "median |error| %.1f%%, Spearman rank correlation %.3f, in %s\n", 100*s.MedianAbsError, s.Spearman, dur(s.Seconds))
}

func (s *validationSummary) markdown(w io.Writer) {
	prof := "the cluster's nominal figures"
	if s.Profile != "" {
		prof = "`" + s.Profile + "`"
	}
	fmt.Fprintf(w, "### %s: %d plans (%s)\n\n%d local ranks on %s, GOMAXPROCS %d; predicted with %s; measured on %s, %d steps per plan in rotation after %d.\n\n",
		s.Model, len(s.Rows), s.Plans, s.Ranks, cpuModel(), runtime.GOMAXPROCS(0), prof, s.Data, s.Steps, s.Warmup)
	fmt.Fprintf(w, "| plan | s_p/s_g/s_os | recompute | M | predicted | measured | error |\n|---|---|---|---:|---:|---:|---:|\n")
	for _, r := range s.Rows {
		fmt.Fprintf(w, "| %s | %s | %s | %d | %s | %s | %+.1f %% |\n", r.Plan, r.Factors, r.Recompute, r.Micro, dur(r.Predicted), dur(r.Measured), 100*r.Error)
	}
	fmt.Fprintf(w, "\nMedian absolute error **%.1f %%**, Spearman rank correlation of predicted and measured steps **%.3f** (%d plans, %s).\n\n",
		100*s.MedianAbsError, s.Spearman, len(s.Rows), dur(s.Seconds))
}

// validationPlans are the plans to run: the rows `amspc plan` prints
// (baselines, the shard section's plan, the MILP's per-group plan, the
// best candidates and the choice), and with all every uniform candidate
// of the space too.
func validationPlans(job *ir.Job, all bool) ([]cost.Plan, error) {
	res, err := planner.Plan(job, planner.Options{Objective: planner.Step, Top: 3, PerGroup: true,
		Config: cost.DefaultConfig, NewEvaluator: compiler.NewEvaluator})
	if err != nil {
		return nil, err
	}
	nameBaselines(res) // rows named as plan names them
	var out []cost.Plan
	add := func(e *cost.Estimate) {
		if e != nil {
			out = append(out, e.Plan)
		}
	}
	for _, e := range res.Baselines {
		add(e)
	}
	add(res.Fixed)
	if res.MILP != nil {
		add(res.MILP.Best)
	}
	for _, e := range res.Top {
		add(e)
	}
	add(res.Chosen)
	if all {
		out = append(out, planner.Candidates(res.Model.DP, job.Train.Recompute, job.Train.MicroBatch)...)
	}
	return out, nil
}

// spearman is the rank correlation of xs and ys: Pearson's correlation
// of their ranks, ties given their mean rank.
func spearman(xs, ys []float64) float64 {
	rx, ry := ranks(xs), ranks(ys)
	n := float64(len(xs))
	if n < 2 {
		return math.NaN()
	}
	mean := (n + 1) / 2
	var sxy, sxx, syy float64
	for i := range rx {
		dx, dy := rx[i]-mean, ry[i]-mean
		sxy += dx * dy
		sxx += dx * dx
		syy += dy * dy
	}
	return sxy / math.Sqrt(sxx*syy)
}

// ranks are the 1-based ranks of xs, ties averaged.
func ranks(xs []float64) []float64 {
	idx := make([]int, len(xs))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return xs[idx[a]] < xs[idx[b]] })
	out := make([]float64, len(xs))
	for i := 0; i < len(idx); {
		j := i
		for j < len(idx) && xs[idx[j]] == xs[idx[i]] {
			j++
		}
		for k := i; k < j; k++ {
			out[idx[k]] = float64(i+j+1) / 2
		}
		i = j
	}
	return out
}

// measureRows trains every row's plan and sets its measured step: the
// median of steps timed steps after warmup untimed ones. The plans run
// in rotation, one step each per round, starting one later every round,
// so that a machine that slows down for a while (another process, a
// noisy neighbour) slows every plan alike rather than the few that ran
// then. As many plans are kept at once as fit in half the memory
// available (by their predicted peaks).
func measureRows(rows []validationRow, tokens []int32, warmup, steps int) error {
	budget := availableBytes() / 2
	for lo := 0; lo < len(rows); {
		hi, used := lo, 0.0
		for hi < len(rows) {
			r := rows[hi].result
			need := hostBytes(r)
			if hi > lo && used+need > budget {
				break
			}
			used += need
			hi++
		}
		batch := rows[lo:hi]
		runs := make([]*engine.Run, len(batch))
		for i, row := range batch {
			tr := row.result.Job.Train
			runs[i] = &engine.Run{Bundle: row.result.Bundle, Seed: uint64(tr.Seed),
				Data: &engine.Data{Tokens: tokens, SeqLen: int(tr.SeqLen), MicroBatch: int(tr.MicroBatch), Global: int(tr.GlobalBatch)}}
			if err := runs[i].Start(); err != nil {
				return fmt.Errorf("%s: %v", row.Plan, err)
			}
		}
		times := make([][]float64, len(batch))
		for round := 0; round < warmup+steps; round++ {
			for k := range batch {
				i := (k + round) % len(batch)
				t0 := time.Now()
				if _, err := runs[i].Step(); err != nil {
					return fmt.Errorf("%s: step %d: %v", batch[i].Plan, round+1, err)
				}
				if round >= warmup {
					times[i] = append(times[i], time.Since(t0).Seconds())
				}
			}
		}
		for i := range batch {
			row := &batch[i]
			row.Measured = median(times[i])
			row.Error = row.Predicted/row.Measured - 1
			row.result = nil
		}
		lo = hi
		runtime.GC()
	}
	return nil
}

// planLabel names a plan by its row name and, where they differ, its
// factors.
func planLabel(name, factors string) string {
	if name == factors || strings.HasSuffix(name, " "+factors) {
		return name
	}
	return name + " (" + factors + ")"
}

// hostBytes is what a compiled plan holds in this process when its ranks
// run here: every rank's peak, every element stored in 4 bytes on CPU
// ranks (amspc run's check).
func hostBytes(r *compiler.Result) float64 {
	return r.Timeline.PeakHostBytes * float64(r.Bundle.Topo.Ranks())
}

// checkMemory refuses work that needs more memory than this machine has
// available, before it allocates: what says what needs need bytes.
func checkMemory(need float64, what string) error {
	if avail := availableBytes(); need > avail {
		return fmt.Errorf("%s needs about %s of memory, more than the %s available", what, cost.GiB(need), cost.GiB(avail))
	}
	return nil
}

// availableBytes is the memory this machine can give a new allocation
// (MemAvailable), or 4 GiB where it cannot be read.
func availableBytes() float64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			var kb float64
			if _, err := fmt.Sscanf(line, "MemAvailable: %f kB", &kb); err == nil {
				return kb * 1024
			}
		}
	}
	return 4 << 30
}
