package main

// amspc profile's last measurement: what a step costs beyond its
// kernels and collectives (issue 31), fitted against steps it runs.

import (
	"fmt"
	"io"
	"math"
	"os"
	"strconv"

	"amspc/compiler"
	"amspc/cost"
	"amspc/cost/profile"
	"amspc/ir"
	"amspc/simulator"
)

// overheadFit is a fitted overhead and the steps it was fitted to.
type overheadFit struct {
	o                   profile.Overhead
	plans               []string
	measured, simulated []float64
}

// fitToSteps runs the probe plans' steps on the local ranks (as
// validate does: in rotation, the median of steps after warmup) and
// finds the kernel scale and the overhead per collective that make their
// simulated steps, on prof's kernel and collective times, closest to
// the measured ones (least squares of the relative errors). ZeRO-3 and
// DDP, the default probes, differ most in their collectives per step,
// which separates the two.
func fitToSteps(job *ir.Job, probes []*compiler.Result, names []string, prof *profile.Profile, tokens []int32, warmup, steps int) (*overheadFit, error) {
	rows := make([]validationRow, len(probes))
	for i, r := range probes {
		rows[i] = validationRow{Plan: names[i], result: r}
	}
	progs := make([]*ir.Program, len(probes))
	for i, r := range probes {
		progs[i] = r.Program
	}
	if err := measureRows(rows, tokens, warmup, steps, 1, func() error { return nil }, 0, nil); err != nil {
		return nil, err
	}
	fit := &overheadFit{plans: names}
	for _, r := range rows {
		fit.measured = append(fit.measured, r.Measured)
	}
	m := cost.ProfiledMachine(job.Cluster, prof)
	simulate := func(o profile.Overhead) ([]float64, float64, error) {
		m.Overhead = o
		var out []float64
		var loss float64
		for i, p := range progs {
			tl, err := simulator.Simulate(p, m, compiler.StageNames(p))
			if err != nil {
				return nil, 0, err
			}
			out = append(out, tl.Step)
			e := tl.Step/fit.measured[i] - 1
			loss += e * e
		}
		return out, loss, nil
	}
	best, err := searchOverhead(simulate)
	if err != nil {
		return nil, err
	}
	// As the profile stores it (four significant digits), so that what
	// is printed is what later runs use.
	g4 := func(x float64) float64 { v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'g', 4, 64), 64); return v }
	fit.o = profile.Overhead{KernelScale: g4(best.KernelScale), Collective: g4(best.Collective)}
	fit.simulated, _, err = simulate(fit.o)
	return fit, err
}

// searchOverhead minimises loss over the two parameters: a coarse grid
// (kernel scale 1/4 to 2 by factors of 1.1; per collective 0, and 1 µs
// to 10 ms by factors of 2), then halving multiplicative steps around
// the best point, each parameter in turn.
func searchOverhead(loss func(profile.Overhead) ([]float64, float64, error)) (profile.Overhead, error) {
	grid := []float64{0}
	for x := 1e-6; x <= 1e-2; x *= 2 {
		grid = append(grid, x)
	}
	var scales []float64
	for x := 0.25; x <= 2; x *= 1.1 {
		scales = append(scales, x)
	}
	var best profile.Overhead
	bestLoss := math.Inf(1)
	try := func(o profile.Overhead) error {
		_, l, err := loss(o)
		if err == nil && l < bestLoss {
			best, bestLoss = o, l
		}
		return err
	}
	for _, k := range scales {
		for _, c := range grid {
			if err := try(profile.Overhead{KernelScale: k, Collective: c}); err != nil {
				return best, err
			}
		}
	}
	for step := 0.5; step > 0.01; step /= 2 {
		for _, f := range []float64{1 - step/4, 1 + step/4, 1 - step, 1 + step} {
			for _, o := range []profile.Overhead{{KernelScale: best.KernelScale * f, Collective: best.Collective}, {KernelScale: best.KernelScale, Collective: best.Collective * f}} {
				if err := try(o); err != nil {
					return best, err
				}
			}
		}
	}
	return best, nil
}

// print says what was fitted, and how close the probes' steps come.
func (f *overheadFit) print(w io.Writer) {
	fmt.Fprintf(w, "  overhead: kernels x %.3g, %s per collective, fitted to steps of %d plans:\n", f.o.KernelScale, dur(f.o.Collective), len(f.plans))
	for i, p := range f.plans {
		fmt.Fprintf(w, "    %s: measured %s, simulated %s (%+.1f%%)\n", p, dur(f.measured[i]), dur(f.simulated[i]), 100*(f.simulated[i]/f.measured[i]-1))
	}
}

// fitOverhead fits prof's overhead on the CPU ranks (not on devices yet:
// it runs steps on the local CPU backend), compiling ZeRO-3 and DDP with
// prof's measurements, as validate and plan --profile compile them.
func (o *profileOptions) fitOverhead(file string, job *ir.Job, prof *profile.Profile, stderr io.Writer) (*overheadFit, int) {
	if !o.overhead || o.device != "cpu" || job.Cluster.GPUs() < 2 {
		return nil, exitOK
	}
	tmp, err := os.CreateTemp("", "amspc-profile-*.csv")
	if err != nil {
		fmt.Fprintf(stderr, "amspc profile: %v\n", err)
		return nil, exitUser
	}
	defer os.Remove(tmp.Name())
	err = prof.Write(tmp)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintf(stderr, "amspc profile: %v\n", err)
		return nil, exitUser
	}
	pj := *job
	cl := *job.Cluster
	cl.Profile = tmp.Name()
	pj.Cluster = &cl
	pj.Shard = nil // the probes: ZeRO-3 and DDP
	var plans []cost.Plan
	for _, p := range profilePlans(&pj) {
		if p.Tensor <= 1 {
			plans = append(plans, p)
		}
	}
	probes, _, st := compileProfilePlans(file, &pj, plans, stderr)
	if st != exitOK {
		return nil, st
	}
	var names []string
	for _, p := range plans {
		names = append(names, p.Name)
	}
	tokens, _, err := loadTokens("", job.Train.Data)
	if err != nil {
		fmt.Fprintf(stderr, "amspc profile: %v\n", err)
		return nil, exitUser
	}
	fit, err := fitToSteps(&pj, probes, names, prof, tokens, 1, 5)
	if err != nil {
		fmt.Fprintf(stderr, "amspc profile: fitting the overhead: %v\n", err)
		return nil, exitUser
	}
	prof.Overhead = fit.o
	return fit, exitOK
}
