package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
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
	fs, o := newValidateFlags(stderr)
	file, ok := oneFile(fs, args)
	if !ok || !o.check(stderr) {
		return exitUser
	}
	if setFlags(fs)["in-step"] && !o.calibrate {
		fmt.Fprintln(stderr, "amspc validate: --in-step says how --calibrate costs kernels: give --calibrate too")
		return exitUser
	}
	if setFlags(fs)["reference"] && !o.calibrate {
		fmt.Fprintln(stderr, "amspc validate: --reference says how --calibrate takes its times: give --calibrate too")
		return exitUser
	}
	if o.saveProfile != "" && !o.calibrate {
		fmt.Fprintln(stderr, "amspc validate: --save-profile writes what --calibrate measured: give --calibrate too")
		return exitUser
	}
	if o.saveProfile != "" {
		// Found now, not after minutes of measurements.
		if st, err := os.Stat(filepath.Dir(o.saveProfile)); err != nil || !st.IsDir() {
			fmt.Fprintf(stderr, "amspc validate: --save-profile %s: no directory %s to write it in\n", o.saveProfile, filepath.Dir(o.saveProfile))
			return exitUser
		}
	}
	job, err := o.lf.load(file)
	if err != nil {
		return report(stderr, err)
	}
	if job.Cluster == nil || job.Train == nil {
		fmt.Fprintf(stderr, "%s: validating needs a cluster and a train section (or --cluster / --train FILE)\n", file)
		return exitUser
	}
	tokens, what, err := loadTokens(o.data, job.Train.Data)
	if err != nil {
		fmt.Fprintf(stderr, "amspc validate: %v\n", err)
		return exitUser
	}
	start := time.Now()
	rows, st := o.compileRows(file, job, stderr)
	if st != exitOK {
		return st
	}
	// Every plan must fit this machine on its own, found now rather than
	// by the kernel's OOM killer minutes into the measurements.
	for _, r := range rows {
		if err := checkMemory(hostBytes(r.result), fmt.Sprintf("plan %s on %d CPU ranks", planLabel(r.Plan, r.Factors), r.result.Bundle.Topo.Ranks())); err != nil {
			fmt.Fprintf(stderr, "amspc validate: %s: %v\n", file, err)
			return exitUser
		}
	}
	clock := startLoadClock()
	prof, ref, err := o.measure(file, job, rows, tokens)
	if err != nil {
		fmt.Fprintf(stderr, "amspc validate: %v\n", err)
		return exitUser
	}
	sum := validationSummary{Model: job.Graph.Name, Ranks: job.Cluster.GPUs(), Profile: prof, Calibrated: o.calibrate, Reference: ref,
		Data: what, Steps: o.steps, Warmup: o.warmup, Instances: o.instances, Plans: o.plans, Rows: rows}
	if load, ok := clock.load(); ok {
		sum.Load = &load
	}
	sum.score()
	sum.Seconds = time.Since(start).Seconds()
	switch {
	case o.json:
		b, _ := json.MarshalIndent(sum, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
	case o.markdown:
		sum.markdown(stdout)
	default:
		sum.text(stdout, file)
	}
	return exitOK
}

// validateOptions are amspc validate's flags.
type validateOptions struct {
	lf             loadFlags
	plans, data    string
	steps, warmup  int
	instances      int
	markdown, json bool
	calibrate      bool
	inStep         bool
	reference      bool
	saveProfile    string
	extremes       int // from --plans extremes=N; 0: every plan
}

func newValidateFlags(stderr io.Writer) (*flag.FlagSet, *validateOptions) {
	fs := newFlagSet("validate", "usage: amspc validate [--plans rows|all|extremes=N] [--steps N] [--warmup K] [--instances K] [--calibrate [--in-step=false] [--reference=false] [--save-profile FILE]] [--markdown|--json] [--shard PLAN] [--profile FILE] [--cluster FILE] [--train FILE] FILE", stderr)
	o := &validateOptions{}
	o.lf.register(fs)
	o.lf.registerShard(fs, "validate, among the rows, (auto: no fixed plan)")
	fs.StringVar(&o.plans, "plans", "rows", "which `PLANS` to run: rows (the rows plan prints), all (every candidate of the space and every row), extremes=N (the N predicted fastest and N slowest of all)")
	fs.IntVar(&o.steps, "steps", 5, "time `N` steps of each plan (the median is its measured step)")
	fs.IntVar(&o.warmup, "warmup", 1, "run `K` steps of each plan before timing")
	fs.IntVar(&o.instances, "instances", 2, "start each plan `K` times, as separate runs in the rotation, each timing --steps steps: how far their medians differ is how far measuring a plan again may move it, and plans apart by less are not counted as ordered")
	fs.BoolVar(&o.markdown, "markdown", false, "print the table as Markdown (for bench/)")
	fs.BoolVar(&o.json, "json", false, "print the result as one JSON object")
	fs.StringVar(&o.data, "data", "", "train on `PATH` (as amspc run --data; default: the embedded corpus)")
	fs.BoolVar(&o.calibrate, "calibrate", false, "predict with a profile of the plans' own kernels and collectives measured in the rotation (before the first round and after each), not one taken earlier: the machine's drift then falls on costs and steps alike (the plans are still chosen by --profile's or the cluster's figures)")
	fs.BoolVar(&o.inStep, "in-step", true, "with --calibrate, also start each of the profile's plans every round, trace a step of it and cost kernels as those steps ran them (as amspc profile does); false: every kernel's time alone")
	fs.BoolVar(&o.reference, "reference", true, "with --calibrate, keep a run of the profile's first plan (ZeRO-3) and step it beside every step and measurement, taking each time against the reference's step at that moment and showing it at the reference's median step: what moves every plan alike (this machine's speed, which moves in episodes of seconds) falls out of the comparison; false: times as the clock measured them")
	fs.StringVar(&o.saveProfile, "save-profile", "", "with --calibrate, also write the profile the predictions were costed with to `FILE` (plan, compile and trace --profile FILE cost with it)")
	return fs, o
}

// check checks the flags and reads --plans, saying what is wrong.
func (o *validateOptions) check(stderr io.Writer) bool {
	switch {
	case o.steps < 1:
		fmt.Fprintf(stderr, "amspc validate: --steps %d: want 1 or more\n", o.steps)
		return false
	case o.warmup < 0:
		fmt.Fprintf(stderr, "amspc validate: --warmup %d: want 0 or more\n", o.warmup)
		return false
	case o.instances < 1:
		fmt.Fprintf(stderr, "amspc validate: --instances %d: want 1 or more\n", o.instances)
		return false
	case o.markdown && o.json:
		fmt.Fprintln(stderr, "amspc validate: --markdown and --json each choose the output: give one")
		return false
	}
	switch {
	case o.plans == "rows" || o.plans == "all":
	case strings.HasPrefix(o.plans, "extremes="):
		if _, err := fmt.Sscanf(strings.TrimPrefix(o.plans, "extremes="), "%d", &o.extremes); err != nil || o.extremes < 1 {
			fmt.Fprintf(stderr, "amspc validate: --plans %s: want extremes=N with N >= 1\n", o.plans)
			return false
		}
	default:
		fmt.Fprintf(stderr, "amspc validate: --plans %s: want rows, all or extremes=N\n", o.plans)
		return false
	}
	return true
}

// compileRows compiles the plans --plans names into rows, the predicted
// fastest first. Plans that compile to the same program (MiCS and HSDP,
// a baseline and the candidate it equals) run once; plans that do not
// fit or do not split are left out.
func (o *validateOptions) compileRows(file string, job *ir.Job, stderr io.Writer) ([]validationRow, int) {
	plans, err := validationPlans(job, o.plans != "rows")
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", file, err)
		return nil, exitUser
	}
	var rows []validationRow
	seen := map[string]bool{}
	for _, p := range plans {
		r, err := compiler.Compile(job, p, compiler.Options{Config: cost.DefaultConfig})
		if err != nil {
			continue
		}
		key := fmt.Sprintf("%s %v %d", r.Bundle.Plan, p.Recompute, r.Micro)
		if seen[key] {
			continue
		}
		seen[key] = true
		rows = append(rows, validationRow{Plan: p.Name, Factors: r.Bundle.Plan, Micro: r.Micro,
			Recompute: p.Recompute.String(), Predicted: r.Timeline.Step, result: r, plan: p})
	}
	if len(rows) == 0 {
		fmt.Fprintf(stderr, "%s: no plan compiles\n", file)
		return nil, exitUser
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Predicted < rows[j].Predicted })
	if n := o.extremes; n > 0 && len(rows) > 2*n {
		rows = append(rows[:n:n], rows[len(rows)-n:]...)
	}
	return rows, exitOK
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
	// Wall is the timed steps' median as the clock measured them;
	// Measured is the same steps each taken against the reference's
	// step beside it (validate --calibrate: speedRef), else Wall.
	Wall  float64 `json:"wall_s"`
	Error float64 `json:"error"` // predicted / measured - 1
	// Spread is the timed steps' median absolute deviation over their
	// median: how much this plan's own steps vary. Repeat is how far
	// apart the medians of the plan's instances (separate runs of it,
	// validate --instances) are, over its median: how far measuring the
	// plan again may move it (0 with one instance).
	Spread float64 `json:"spread"`
	Repeat float64 `json:"repeat"`
	result *compiler.Result
	plan   cost.Plan
	// ran is the program the steps ran and the job it was compiled
	// from, kept when result is let go after the measurement (the
	// calibrated prediction costs it again: predictCalibrated).
	ran    *ir.Program
	ranJob *ir.Job
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
	MaxAbsError    float64         `json:"max_abs_error"`
	Spearman       float64         `json:"spearman"`
	// Noise is the rows' median Spread, Instances the runs of each
	// plan and Repeat the rows' largest Repeat. Two plans are apart when
	// their measured steps differ by more than twice the noise and by
	// more than each one's Repeat (relative to the faster): more than
	// their steps vary and more than measuring either again may move
	// it. Distinct counts the pairs apart, and Agreement is the share
	// of them the predictions order as measured.
	Noise     float64 `json:"noise"`
	Instances int     `json:"instances"`
	Repeat    float64 `json:"repeat"`
	Distinct  int     `json:"distinct_pairs"`
	Agreement float64 `json:"pair_agreement"`
	// Separated counts the plans picked from the fastest measured on,
	// each apart from the last picked (so apart pairwise), and
	// SpearmanSeparated is the rank correlation of their predicted and
	// measured steps.
	Separated         int     `json:"separated_plans"`
	SpearmanSeparated float64 `json:"spearman_separated"`
	// Calibrated: Profile describes validate --calibrate's measurements
	// (else it names a profile file, or is empty).
	Calibrated bool `json:"calibrated,omitempty"`
	// Reference is the run every time was taken against (validate
	// --calibrate --reference: speedRef), nil for none.
	Reference *refSummary `json:"reference,omitempty"`
	Seconds   float64     `json:"seconds"`
	// Load is how quiet the machine was while the steps and the
	// calibration ran (nil where it cannot be read).
	Load *machineLoad `json:"machine_load,omitempty"`
}

// score sets how well the predictions did: the median absolute error
// and the rank correlation of predicted and measured steps.
func (s *validationSummary) score() {
	var errs, pred, meas, spreads []float64
	for _, r := range s.Rows {
		errs = append(errs, math.Abs(r.Error))
		pred = append(pred, r.Predicted)
		meas = append(meas, r.Measured)
		spreads = append(spreads, r.Spread)
	}
	s.MedianAbsError = median(errs)
	s.MaxAbsError = slices.Max(append(errs, 0))
	s.Spearman = spearman(pred, meas)
	s.Noise = median(spreads)
	// reach: how much slower than a plan another must measure to be
	// apart from it.
	reach := make([]float64, len(s.Rows))
	s.Repeat = 0
	for i, r := range s.Rows {
		reach[i] = max(2*s.Noise, r.Repeat)
		s.Repeat = max(s.Repeat, r.Repeat)
	}
	s.Distinct, s.Agreement = pairAgreement(pred, meas, reach)
	var sp, sm []float64
	for _, i := range separated(meas, reach) {
		sp, sm = append(sp, pred[i]), append(sm, meas[i])
	}
	s.Separated, s.SpearmanSeparated = len(sp), spearman(sp, sm)
}

// apart says whether measured values a <= b are further apart than
// either one's reach (relative to a).
func apart(a, b, reachA, reachB float64) bool {
	return b-a > max(reachA, reachB)*a
}

// separated is the plans (indexes into meas, fastest first) picked from
// the fastest measured on, each apart from the last picked (reach: each
// plan's, relative).
func separated(meas, reach []float64) []int {
	order := make([]int, len(meas))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return meas[order[a]] < meas[order[b]] })
	var out []int
	for _, i := range order {
		if last := len(out) - 1; last < 0 || apart(meas[out[last]], meas[i], reach[out[last]], reach[i]) {
			out = append(out, i)
		}
	}
	return out
}

// pairAgreement is, among the pairs whose measured values are apart
// (reach: each plan's, relative), how many there are and the share that
// pred orders as meas does (a tie in pred counts half; 0 when there are
// none).
func pairAgreement(pred, meas, reach []float64) (int, float64) {
	n, agree := 0, 0.0
	for i := range meas {
		for j := i + 1; j < len(meas); j++ {
			lo, hi := i, j
			if meas[j] < meas[i] {
				lo, hi = j, i
			}
			if !apart(meas[lo], meas[hi], reach[lo], reach[hi]) {
				continue
			}
			n++
			switch {
			case pred[lo] < pred[hi]:
				agree++
			case pred[lo] == pred[hi]:
				agree += 0.5
			}
		}
	}
	if n == 0 {
		return 0, 0
	}
	return n, agree / float64(n)
}

// pairsText says how noisy the steps were and how well the predictions
// order the plans the noise does not blur.
func (s *validationSummary) pairsText() string {
	t := fmt.Sprintf("noise %.1f%% (the plans' median spread of their own steps)", 100*s.Noise)
	apartText := "apart by more than twice it"
	if s.Instances > 1 {
		t += fmt.Sprintf("; %d runs of each plan, their medians at most %.1f%% apart (a plan's own, at most)", s.Instances, 100*s.Repeat)
		apartText = "apart by more than twice the noise and either one's runs"
	}
	if s.Distinct == 0 {
		return t + ", no two plans " + apartText
	}
	t = fmt.Sprintf("%s; of the %d pairs of plans %s, %.0f%% predicted in the measured order", t, s.Distinct, apartText, 100*s.Agreement)
	if s.Separated >= 3 {
		t += fmt.Sprintf("; Spearman %.3f among %d plans each so far slower than the one before (picked from the fastest)", s.SpearmanSeparated, s.Separated)
	}
	return t
}

// loadText says how quiet the machine was while measuring ("" where
// unknown).
func (s *validationSummary) loadText() string {
	if s.Load == nil {
		return ""
	}
	return "; the machine while measuring: " + s.Load.String()
}

func (s *validationSummary) text(w io.Writer, file string) {
	prof := "the cluster's nominal figures"
	if s.Profile != "" {
		prof = "profile " + s.Profile
	}
	fmt.Fprintf(w, "%s: %s on %d local ranks, %d plans, %d timed steps of each of %d runs (after %d), predicted with %s%s\n",
		file, s.Model, s.Ranks, len(s.Rows), s.Steps, max(1, s.Instances), s.Warmup, prof, s.refText())
	wall := s.Reference != nil
	fmt.Fprintf(w, "    %-36s %-16s %-9s %3s %10s %10s %7s %6s", "plan", "s_p/s_g/s_os", "recompute", "M", "predicted", "measured", "error", "runs")
	if wall {
		fmt.Fprintf(w, " %10s", "wall")
	}
	fmt.Fprintln(w)
	for _, r := range s.Rows {
		fmt.Fprintf(w, "    %-36s %-16s %-9s %3d %10s %10s %+6.1f%% %5.1f%%", r.Plan, r.Factors, r.Recompute, r.Micro, dur(r.Predicted), dur(r.Measured), 100*r.Error, 100*r.Repeat)
		if wall {
			fmt.Fprintf(w, " %10s", dur(r.Wall))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "median |error| %.1f%%, worst %.1f%%, Spearman rank correlation %.3f; %s; in %s%s\n",
		100*s.MedianAbsError, 100*s.MaxAbsError, s.Spearman, s.pairsText(), dur(s.Seconds), s.loadText())
}

// refText says what the times were taken against ("" for none).
func (s *validationSummary) refText() string {
	if s.Reference == nil {
		return ""
	}
	return "; " + s.Reference.String()
}

func (s *validationSummary) markdown(w io.Writer) {
	prof := "the cluster's nominal figures"
	switch {
	case s.Calibrated:
		prof = s.Profile
	case s.Profile != "":
		prof = "`" + s.Profile + "`"
	}
	fmt.Fprintf(w, "### %s on %d ranks: %d plans (%s)\n\n%d local ranks on %s, GOMAXPROCS %d; predicted with %s; measured on %s, %d steps of each of %d runs per plan in a shuffled rotation after %d%s.\n\n",
		s.Model, s.Ranks, len(s.Rows), s.Plans, s.Ranks, cpuModel(), runtime.GOMAXPROCS(0), prof, s.Data, s.Steps, max(1, s.Instances), s.Warmup, s.refText())
	wall := s.Reference != nil
	head, rule := "| plan | s_p/s_g/s_os | recompute | M | predicted | measured | error | runs apart |", "|---|---|---|---:|---:|---:|---:|---:|"
	if wall {
		head, rule = head+" wall |", rule+"---:|"
	}
	fmt.Fprintf(w, "%s\n%s\n", head, rule)
	for _, r := range s.Rows {
		fmt.Fprintf(w, "| %s | %s | %s | %d | %s | %s | %+.1f %% | %.1f %% |", r.Plan, r.Factors, r.Recompute, r.Micro, dur(r.Predicted), dur(r.Measured), 100*r.Error, 100*r.Repeat)
		if wall {
			fmt.Fprintf(w, " %s |", dur(r.Wall))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "\nMedian absolute error **%.1f %%**, worst **%.1f %%**, Spearman rank correlation of predicted and measured steps **%.3f** (%d plans, %s); %s%s.\n\n",
		100*s.MedianAbsError, 100*s.MaxAbsError, s.Spearman, len(s.Rows), dur(s.Seconds), s.pairsText(), s.loadText())
}

// validationPlans are the plans to run: the rows `amspc plan` prints
// (baselines, the shard section's plan, the MILP's per-group plan, the
// best candidates and the choice), and with all every uniform candidate
// of the space too.
func validationPlans(job *ir.Job, all bool) ([]cost.Plan, error) {
	res, err := planner.Plan(job, planner.Options{Objective: planner.Step, Top: 3, PerGroup: true, Gap: planner.DefaultGap,
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
// median of the timed steps (steps of each of instances runs of the
// plan, each after warmup untimed ones). The runs take one step each per
// round, in an order shuffled every round (the same every time: seeded
// by the round), so that a machine that slows down for a while (another
// process, a noisy neighbour) slows every plan alike rather than the few
// that ran then, and no run always follows the same one. As many plans
// are kept at once as fit in half the memory available (by their
// predicted peaks). With a reference (validate --calibrate: speedRef),
// it steps before every timed step and after each round's last, and
// the measured step is of the steps each taken against it, in its
// steps (the caller shows them at its typical step); Wall is the
// clock's median either way.
func measureRows(rows []validationRow, tokens []int32, warmup, steps, instances int, between func() error, reserve float64, ref *speedRef) error {
	budget := availableBytes()/2 - reserve
	for lo := 0; lo < len(rows); {
		hi, used := lo, 0.0
		for hi < len(rows) {
			r := rows[hi].result
			need := hostBytes(r) * float64(instances)
			if hi > lo && used+need > budget {
				break
			}
			used += need
			hi++
		}
		batch := rows[lo:hi]
		// Run k is instance k%instances of row k/instances.
		runs := make([]*engine.Run, len(batch)*instances)
		for k := range runs {
			row := &batch[k/instances]
			t := &engine.Trainer{Bundle: row.result.Bundle, Tokens: tokens}
			var err error
			if runs[k], err = t.Start(); err != nil {
				return fmt.Errorf("%s: %v", row.Plan, err)
			}
		}
		// times and at: each run's timed steps and their middles (for
		// the reference: seconds since it started).
		times := make([][]float64, len(runs))
		at := make([][]float64, len(runs))
		if err := between(); err != nil {
			return err
		}
		for round := 0; round < warmup+steps; round++ {
			order := rand.New(rand.NewPCG(uint64(round), 0x616d7370)).Perm(len(runs))
			for _, k := range order {
				if ref != nil && round >= warmup {
					if err := ref.step(); err != nil {
						return err
					}
				}
				t0 := time.Now()
				if _, err := runs[k].Step(); err != nil {
					return fmt.Errorf("%s: step %d: %v", batch[k/instances].Plan, round+1, err)
				}
				if round >= warmup {
					times[k] = append(times[k], time.Since(t0).Seconds())
					if ref != nil {
						at[k] = append(at[k], ref.mid(t0))
					}
				}
			}
			if ref != nil && round >= warmup {
				if err := ref.step(); err != nil {
					return err
				}
			}
			if err := between(); err != nil {
				return err
			}
		}
		for i := range batch {
			k := i * instances
			batch[i].settle(times[k:k+instances], at[k:k+instances], ref)
		}
		lo = hi
		runtime.GC()
	}
	return nil
}

// settle sets r's measured step, spread and repeat from its runs' timed
// steps (times) and their middles (at, for ref), and lets its compiled
// plan go (the program it ran stays).
func (r *validationRow) settle(times, at [][]float64, ref *speedRef) {
	var all, meds, wall []float64
	for k, ts := range times {
		wall = append(wall, ts...)
		if ref != nil {
			// In reference steps; measure shows them at its typical
			// step once every step is taken.
			ts = make([]float64, len(times[k]))
			for j, x := range times[k] {
				ts[j] = x / ref.stepAt(at[k][j])
			}
		}
		all = append(all, ts...)
		meds = append(meds, median(ts))
	}
	r.Measured, r.Wall = median(all), median(wall)
	r.Error = r.Predicted/r.Measured - 1
	dev := make([]float64, len(all))
	for k, x := range all {
		dev[k] = math.Abs(x - r.Measured)
	}
	r.Spread = median(dev) / r.Measured
	r.Repeat = (slices.Max(meds) - slices.Min(meds)) / r.Measured
	r.ran, r.ranJob = r.result.Program, r.result.Job
	r.result = nil
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
