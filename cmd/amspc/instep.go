package main

import (
	"fmt"
	"math"
	"runtime"

	"amspc/compiler"
	"amspc/cost/profile"
	"amspc/engine"
	"amspc/ir"
)

// Kernels as a step runs them. The profile times each kernel alone,
// called back to back on the same operands: hot in the caches, and, for
// the smallest, with the ranks' start and wake-up spread over a few calls.
// A step runs it once, after other kernels (and, on CPU ranks sharing
// cores, other ranks) have filled the caches with their data; on this
// machine tiny's kernels take about 30 % longer in a step. So the
// profile also runs a few steps of its plans with the trace on and
// takes, for every kernel those steps run, the median of its traced
// times; every other kernel keeps its time alone scaled by the median
// ratio of the two (issue 31).

// kernelKey names a kernel as the profile's rows do: its op, its
// operands' shapes and its result's dtype.
func kernelKey(p *ir.Program, in *ir.Instr) string {
	return fmt.Sprintf("%v %s %v", in.Kern, profile.FormatShapes(profile.KernelShapes(p, in)), p.Buffers[in.Outs[0]].DType)
}

// inStepRun is one plan's run, traced a step at a time.
type inStepRun struct {
	r     *compiler.Result
	run   *engine.Run
	trace *engine.Trace
	share float64 // ranks per core, when the ranks outnumber the cores
}

// startInStep starts r's plan on the local ranks and takes one untimed
// step (its first allocations and page faults are not a step's).
func startInStep(r *compiler.Result, tokens []int32) (*inStepRun, error) {
	tr := &engine.Trace{Steps: 1 << 30}
	run, err := (&engine.Trainer{Bundle: r.Bundle, Tokens: tokens, Trace: tr}).Start()
	if err != nil {
		return nil, err
	}
	if _, err := run.Step(); err != nil {
		return nil, err
	}
	tr.Start()
	ranks := float64(r.Bundle.Topo.Ranks())
	return &inStepRun{r: r, run: run, trace: tr, share: max(1, ranks/float64(runtime.GOMAXPROCS(0)))}, nil
}

// step takes one traced step.
func (s *inStepRun) step() error {
	_, err := s.run.Step()
	return err
}

// times adds every compute-stream kernel the steps so far ran, on every
// rank, to out by its key. A rank that waits for a core between its
// kernels (more ranks than cores) holds one while a kernel runs, so its
// traced time is the kernel's on a core of its own; the profile's time
// is the kernel's with the cores shared, as the simulator takes it, so
// the traced time is scaled by the ranks per core.
func (s *inStepRun) times(out map[string][]float64) {
	for _, sp := range s.trace.Spans() {
		if sp.Stream != ir.Compute || sp.Instr.Op != ir.Kernel {
			continue
		}
		k := kernelKey(s.r.Bundle.Template(sp.Rank), sp.Instr)
		out[k] = append(out[k], sp.Dur.Seconds()*s.share)
	}
}

// inStepKernels is the traced times of steps steps of each result's plan,
// by kernel key.
func inStepKernels(results []*compiler.Result, tokens []int32, steps int) (map[string][]float64, error) {
	out := map[string][]float64{}
	for _, r := range results {
		s, err := startInStep(r, tokens)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", r.Bundle.Plan, err)
		}
		for range steps {
			if err := s.step(); err != nil {
				return nil, fmt.Errorf("%s: %v", r.Bundle.Plan, err)
			}
		}
		s.times(out)
		runtime.GC()
	}
	return out, nil
}

// applyInStep sets each kernel's time (alone: alone[i]) to the median of
// its traced times where the steps ran it, and to its time alone times
// the median ratio of the two elsewhere; it returns the times, that
// ratio, and how many kernels the steps ran.
func applyInStep(keys []string, alone []float64, inStep map[string][]float64) ([]float64, float64, int) {
	out := make([]float64, len(keys))
	var ratios []float64
	for i, k := range keys {
		if ts := inStep[k]; len(ts) > 0 && alone[i] > 0 {
			ratios = append(ratios, median(ts)/alone[i])
		}
	}
	ratio := 1.0
	if len(ratios) > 0 {
		ratio = median(ratios)
	}
	covered := 0
	for i, k := range keys {
		if ts := inStep[k]; len(ts) > 0 {
			out[i] = median(ts)
			covered++
		} else {
			out[i] = alone[i] * ratio
		}
		if math.IsNaN(out[i]) {
			out[i] = alone[i]
		}
	}
	return out, ratio, covered
}
