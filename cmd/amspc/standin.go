package main

import (
	"context"
	"fmt"
	"io"

	"amspc/engine"
	"amspc/ir"
	"amspc/simulator"
)

// collectivesStandIn is amspc run's --collectives standin: the overlap
// check of issue 29 (engine.StandIn).
const collectivesStandIn = "standin"

// standIn runs rank 0 of the plan alone twice (with --trace, both
// traced and the second's trace written): with every collective a
// stand-in that holds its stream for --standin-scale times the plan's
// simulated time of it, and with none (the compute alone, quietly,
// first). The difference of their median steps is the exposed
// communication, measured; the simulation's is its step with the
// collectives less its step without (cost.Machine.NoComm), both from the
// bundle's machine and --profile. Prints both.
func (o *runOptions) standIn(ctx context.Context, plan *trainPlan, tokens []int32, pw *procWorld, n int, progress engine.Progress, prof *cpuProfile, stdout, stderr io.Writer) int {
	if pw != nil {
		fmt.Fprintln(stderr, "amspc run: --collectives standin runs one rank in one process, not under mpirun")
		return exitUser
	}
	if n < 2 {
		fmt.Fprintln(stderr, "amspc run: --collectives standin needs --steps 2 or more (the first step warms up)")
		return exitUser
	}
	if !(o.standInScale >= 0) {
		fmt.Fprintf(stderr, "amspc run: --standin-scale %g: want 0 or more\n", o.standInScale)
		return exitUser
	}
	with, without, secs, err := standInTimes(plan)
	if err != nil {
		fmt.Fprintf(stderr, "amspc run: %v\n", err)
		return exitUser
	}
	var traced *engine.Trace
	step := func(scale float64, progress engine.Progress) (float64, int) {
		t := o.trainer(plan, tokens, nil, n, progress, prof, stderr)
		t.StandIn = &engine.StandIn{Rank: 0, Seconds: secs, Scale: scale}
		// Both runs traced alike (a traced step is enqueued, not
		// replayed), the stand-ins' trace written.
		traced = t.Trace
		res, err := t.Train(ctx)
		switch {
		case err != nil:
			fmt.Fprintf(stderr, "amspc run: %v\n", err)
			return 0, exitUser
		case res.Stopped:
			fmt.Fprintln(stderr, "amspc run: stopped")
			return 0, exitUser
		case len(res.StepSeconds) < 2:
			fmt.Fprintln(stderr, "amspc run: no steady step to time")
			return 0, exitUser
		}
		return median(res.StepSeconds[1:]), exitOK
	}
	alone, st := step(0, nil)
	if st != exitOK {
		return st
	}
	stood, st := step(o.standInScale, progress)
	if st != exitOK {
		return st
	}
	o.standInReport(stdout, plan, with, without, alone, stood, n)
	if traced != nil {
		return o.writeTrace(plan.bundle, traced, nil, stdout, stderr)
	}
	return exitOK
}

// standInTimes simulates rank 0's program with its collectives and with
// none, and gives each collective's simulated span (its stand-in's time).
func standInTimes(plan *trainPlan) (with, without *simulator.Timeline, secs [ir.NumStreams][]float64, err error) {
	if with, err = simulateBundleWith(plan.bundle, 0, plan.profilePath, false); err != nil {
		return nil, nil, secs, err
	}
	if without, err = simulateBundleWith(plan.bundle, 0, plan.profilePath, true); err != nil {
		return nil, nil, secs, err
	}
	p := plan.bundle.Template(0)
	for _, sp := range with.Spans {
		if p.Streams[sp.Stream][sp.Index].Op != ir.Collective {
			continue
		}
		if secs[sp.Stream] == nil {
			secs[sp.Stream] = make([]float64, len(p.Streams[sp.Stream]))
		}
		secs[sp.Stream][sp.Index] = sp.Dur
	}
	return with, without, secs, nil
}

// standInReport prints the two runs' steps and the exposed
// communication, measured and simulated.
func (o *runOptions) standInReport(stdout io.Writer, plan *trainPlan, with, without *simulator.Timeline, alone, stood float64, n int) {
	simExposed := o.standInScale * (with.Step - without.Step)
	if o.standInScale != 1 {
		// A scaled check: the simulation at that scale is not the
		// plan's; the unscaled figures are printed, scaled linearly.
		fmt.Fprintf(stdout, "(--standin-scale %g: the simulated exposed communication below is the plan's times %g, a linear guess)\n", o.standInScale, o.standInScale)
	}
	fmt.Fprintf(stdout, "stand-in run of rank 0 of %d, plan %s: a step takes %s with its collectives held for their simulated time, %s with none (medians of steps 2-%d)\n",
		plan.bundle.Topo.Ranks(), plan.bundle.Plan, dur(stood), dur(alone), n)
	fmt.Fprintf(stdout, "exposed communication: %s measured, %s simulated (step %s with the collectives, %s without)",
		dur(stood-alone), dur(simExposed), dur(with.Step), dur(without.Step))
	if simExposed > 0 {
		fmt.Fprintf(stdout, ": measured/simulated %.2f", (stood-alone)/simExposed)
	}
	fmt.Fprintln(stdout)
	if plan.profilePath == "" {
		fmt.Fprintln(stdout, "(the simulation uses the cluster's nominal figures; with a device profile, amspc profile --device, it uses the kernels' measured times)")
	}
}
