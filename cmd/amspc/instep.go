package main

import (
	"fmt"
	"math"
	"runtime"
	"sort"
	"time"

	"amspc/compiler"
	"amspc/cost"
	"amspc/cost/profile"
	"amspc/engine"
	"amspc/ir"
	"amspc/simulator"
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
//
// A matrix product that packs its weight (simulator.Packings) is traced
// with the packing in it; the profile keeps products without it and the
// packings apart. So a product's traced times are taken apart: those
// that reuse a packing are the product's; a packing's time in steps is
// the median, over the products of its weight, of their packing calls'
// median less their reusing calls' median. A packing call is one that
// made the packing (engine.TraceSpan.Pack): a rank's first use of a
// packing the local ranks share that another rank made is neither.

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
	// unit multiplies every time it adds (1; validate --calibrate sets
	// it to take a step's times against its reference: speedRef).
	unit   float64
	cores  int // the cores they queue for then (else 0)
	meets  int // 1: its ranks meet on their compute stream (simulator.MeetsInCompute); else 0
	packs  map[*ir.Program][ir.NumStreams][]bool
	shared map[*ir.Program][]bool // simulator.Shareable
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
	ranks, cores := r.Bundle.Topo.Ranks(), runtime.GOMAXPROCS(0)
	s := &inStepRun{r: r, run: run, trace: tr, share: 1, unit: 1,
		packs: map[*ir.Program][ir.NumStreams][]bool{}, shared: map[*ir.Program][]bool{}}
	if ranks > cores {
		// As engine.shareCores gates them.
		s.share, s.cores = float64(ranks)/float64(cores), cores
	}
	for i := range r.Bundle.Templates {
		if simulator.MeetsInCompute(&r.Bundle.Templates[i]) {
			s.meets = 1
		}
	}
	return s, nil
}

// step takes one traced step.
func (s *inStepRun) step() error {
	_, err := s.run.Step()
	return err
}

// inStepSamples is what traced steps measured: each kernel's times by
// key; the time between consecutive kernels of a compute stream over the
// instructions in it (an instruction's cost to its stream beyond its
// work: Overhead.Instruction); and the compute stream's collectives as
// they ran (tensor parallelism's: the ranks meeting in the middle of
// their computation, Overhead.Collective).
type inStepSamples struct {
	kernels map[string][]float64
	// gap: the seconds between two kernels while no rank's collective
	// ran (a kernel yields its core when it ends, and a collective's
	// copies would take it: the simulator has those as the processor's
	// sharing), scaled by the ranks per core as kernels are, over the
	// instructions in them; by whether the program's ranks meet on their
	// compute stream (simulator.MeetsInCompute: 1) or not (0), which
	// Overhead.InstructionTP and Instruction take apart.
	gap       [2]float64
	gapInstrs [2]int
	colls     []inStepColl
	// wakes: for each compute-stream wait that blocked (its event
	// recorded after it began), the seconds from the event to the
	// stream's next traced instruction, and the instructions up to that
	// one.
	wakes float64
	// wakeInstrs: those instructions, each divided by its run's ranks
	// per core (instruction is scaled by it as kernels are; a wake-up is
	// wall time), by meeting as gap.
	wakeInstrs [2]float64
	waits      int
	// cores: where the steps ran more ranks than cores, the cores they
	// queued for (a rank waits for a place at the gate: Overhead.Cores);
	// else 0.
	cores int
}

// inStepColl is one traced collective: its kind, group shape, bytes as
// the program counts them, seconds, and whether it gathered into a
// buffer the local ranks share (simulator.Shareable).
type inStepColl struct {
	c      ir.Coll
	g      ir.Factor
	bytes  float64
	secs   float64
	shared bool
}

func newInStepSamples() *inStepSamples {
	return &inStepSamples{kernels: map[string][]float64{}}
}

// scale multiplies every time in the samples by f.
func (in *inStepSamples) scale(f float64) {
	for _, ts := range in.kernels {
		for i := range ts {
			ts[i] *= f
		}
	}
	for i := range in.gap {
		in.gap[i] *= f
	}
	in.wakes *= f
	for i := range in.colls {
		in.colls[i].secs *= f
	}
}

// instruction is the seconds an instruction costs its stream beyond its
// work in programs whose ranks meet on their compute stream (meets) or
// not: the times between consecutive kernels that no collective
// overlapped over the instructions in them (allocations, frees and the
// dispatch of each; with both kernels on the stream's core, no wait for
// one in it), 0 where the steps had none.
func (in *inStepSamples) instruction(meets int) float64 {
	if in.gapInstrs[meets] == 0 {
		return 0
	}
	return max(0, in.gap[meets]/float64(in.gapInstrs[meets]))
}

// wake is the mean seconds a blocked wait's stream took to go on after
// its event, less what the instructions up to its next traced one cost
// (instruction), 0 where no wait blocked.
func (in *inStepSamples) wake() float64 {
	if in.waits == 0 {
		return 0
	}
	w := in.wakes
	for meets := range in.wakeInstrs {
		w -= in.instruction(meets) * in.wakeInstrs[meets]
	}
	return max(0, w/float64(in.waits))
}

// handOff is the mean seconds a compute-stream collective took in the
// steps beyond its time alone by topo (the profile's collectives), the
// slowest 1 % left out; 0 where the steps ran none. The mean, since a
// step pays every collective's: a collective whose partner comes late
// pays the wait, and on deep's tensor-parallel step on 2 ranks the
// reduce-scatters' mean was 6 µs over their median and the gathers' 13
// µs, over thousands a step. The slowest 1 % (a collective caught by a
// pause that a median step does not have) would move it by more than
// the rest.
func (in *inStepSamples) handOff(topo *cost.Topology) float64 {
	var extra []float64
	for _, c := range in.colls {
		cc := topo.Collective(c.c, c.bytes, c.g)
		if c.shared {
			cc = topo.SharedGather(c.bytes, c.g)
		}
		extra = append(extra, c.secs-cc.Time)
	}
	if len(extra) == 0 {
		return 0
	}
	sort.Float64s(extra)
	kept := extra[:len(extra)-len(extra)/100]
	sum := 0.0
	for _, x := range kept {
		sum += x
	}
	return max(0, sum/float64(len(kept)))
}

// overhead is the instruction, hand-off and wake-up overheads the
// samples measured, the hand-offs against the collectives of prof on
// job's cluster. Where the ranks outnumbered the cores, it is the cores
// they queued for instead of a hand-off: the simulator then replays that
// queue for programs whose ranks meet on their compute stream
// (simulator.MeetsInCompute), in which a partner comes late because it
// waits for a place at the gate behind other ranks' kernels; other
// programs have no collective there to hand off.
func (in *inStepSamples) overhead(job *ir.Job, prof *profile.Profile) profile.Overhead {
	o := profile.Overhead{Instruction: in.instruction(0), InstructionTP: in.instruction(1), Wake: in.wake(), Cores: in.cores}
	if in.cores == 0 {
		topo := cost.NewTopology(job.Cluster)
		topo.Profile = prof
		o.Collective = in.handOff(topo)
	}
	return o
}

// times adds what the steps so far ran, on every rank, to out. A
// compute-stream kernel goes under its key; a product that packed its
// weight under its key plus packingSuffix. A rank that waits for a core
// between its kernels (more ranks than cores) holds one while a kernel
// runs, so its traced time is the kernel's on a core of its own; the
// profile's time is the kernel's with the cores shared, as the simulator
// takes it, so the traced time is scaled by the ranks per core (and so
// is the time between two kernels, held on the same core).
func (s *inStepRun) times(out *inStepSamples) {
	out.cores = max(out.cores, s.cores)
	spans := s.trace.Spans()
	busy := collectiveTimes(spans)
	s.wakes(spans, out)
	var prev engine.TraceSpan
	for _, sp := range spans {
		if sp.Stream != ir.Compute {
			continue
		}
		if in := sp.Instr; in.Op == ir.Collective {
			p := s.r.Bundle.Template(sp.Rank)
			shared, ok := s.shared[p]
			if !ok {
				shared = simulator.Shareable(p)
				s.shared[p] = shared
			}
			out.colls = append(out.colls, inStepColl{in.Coll, in.Group.Outer.Div(in.Group.Inner), float64(in.Bytes), sp.Dur.Seconds() * s.unit, in.Coll == ir.AllGather && shared[in.Out]})
		}
		if sp.Instr.Op == ir.Kernel && prev.Instr != nil && prev.Instr.Op == ir.Kernel && prev.Rank == sp.Rank && prev.Step == sp.Step {
			if a := prev.Start + prev.Dur; !busy.overlaps(a, sp.Start) {
				out.gap[s.meets] += (sp.Start - a).Seconds() * s.share * s.unit
				out.gapInstrs[s.meets] += sp.Index - prev.Index
			}
		}
		prev = sp
		if sp.Instr.Op != ir.Kernel {
			continue
		}
		p := s.r.Bundle.Template(sp.Rank)
		packs, ok := s.packs[p]
		if !ok {
			packs = simulator.Packings(p)
			s.packs[p] = packs
		}
		k := kernelKey(p, sp.Instr)
		switch {
		case packs[sp.Stream][sp.Index] && sp.Pack == engine.PackReused:
			// A rank's first use of a packing the local ranks share,
			// which another rank made: this call found it made or
			// waited for it, and is neither the packing nor the product
			// alone. (Counted as packings, they made a packing shared
			// by 8 ranks on 2 cores take microseconds: one call in 8
			// made it.)
			continue
		case packs[sp.Stream][sp.Index] || sp.Pack == engine.PackMade:
			k += packingSuffix
		}
		out.kernels[k] = append(out.kernels[k], sp.Dur.Seconds()*s.share*s.unit)
	}
}

// wakes adds the blocked waits of spans' compute streams to out. (A
// communication stream's wait is woken while the ranks' kernels hold the
// cores: the simulator has that as the processor's sharing.)
func (s *inStepRun) wakes(spans []engine.TraceSpan, out *inStepSamples) {
	type event struct {
		rank, step int
		ev         int32
	}
	recorded := map[event]time.Duration{}
	for _, sp := range spans {
		if sp.Instr.Op == ir.Record {
			recorded[event{sp.Rank, sp.Step, sp.Instr.Event}] = sp.Start + sp.Dur
		}
	}
	// Spans come by rank, stream, step and index: a wait's next is the
	// one after it.
	for i, sp := range spans[:max(len(spans)-1, 0)] {
		next := spans[i+1]
		if sp.Instr.Op != ir.Wait || sp.Stream != ir.Compute || next.Rank != sp.Rank || next.Stream != sp.Stream || next.Step != sp.Step {
			continue
		}
		r, ok := recorded[event{sp.Rank, sp.Step, sp.Instr.Event}]
		if !ok || r <= sp.Start || next.Start < r {
			continue
		}
		out.wakes += (next.Start - r).Seconds() * s.unit
		out.wakeInstrs[s.meets] += float64(next.Index-sp.Index) / s.share
		out.waits++
	}
}

// intervals are disjoint time intervals, sorted.
type intervals [][2]time.Duration

// collectiveTimes is when any rank ran a collective, as disjoint
// intervals.
func collectiveTimes(spans []engine.TraceSpan) intervals {
	var iv intervals
	for _, sp := range spans {
		if sp.Instr.Op == ir.Collective {
			iv = append(iv, [2]time.Duration{sp.Start, sp.Start + sp.Dur})
		}
	}
	sort.Slice(iv, func(i, j int) bool { return iv[i][0] < iv[j][0] })
	var out intervals
	for _, x := range iv {
		if n := len(out); n > 0 && x[0] <= out[n-1][1] {
			out[n-1][1] = max(out[n-1][1], x[1])
			continue
		}
		out = append(out, x)
	}
	return out
}

// overlaps reports whether [a, b] meets an interval.
func (iv intervals) overlaps(a, b time.Duration) bool {
	i := sort.Search(len(iv), func(i int) bool { return iv[i][1] >= a })
	return i < len(iv) && iv[i][0] <= b
}

// packingSuffix marks a product's traced calls that packed its weight.
const packingSuffix = " +pack"

// profPack is one distinct packing: a product kind and its weight's
// shape.
type profPack struct {
	kind ir.OpKind
	k, n int64
	key  string
	secs float64 // measured
}

// packOf is the packing product kernel k makes where it packs (ok false
// for a kernel that is not a product).
func packOf(p *ir.Program, in *ir.Instr) (profPack, bool) {
	if in.Kern != ir.MatMul && in.Kern != ir.MatMulGradA {
		return profPack{}, false
	}
	w := p.Buffers[in.Args[1]].Shape
	if len(w) != 2 {
		return profPack{}, false
	}
	return profPack{kind: in.Kern, k: w[0], n: w[1], key: fmt.Sprintf("pack %v %dx%d", in.Kern, w[0], w[1])}, true
}

// distinctPacks lists the packings the results' products can make,
// sorted by key.
func distinctPacks(results []*compiler.Result) []profPack {
	seen := map[string]bool{}
	var out []profPack
	eachInstr(results, ir.Kernel, func(p *ir.Program, in *ir.Instr) {
		if pk, ok := packOf(p, in); ok && !seen[pk.key] {
			seen[pk.key] = true
			out = append(out, pk)
		}
	})
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
}

// measurePacks times each packing on every rank at once.
func measurePacks(topo ir.Topology, packs []profPack, reps int) error {
	for i, pk := range packs {
		s, err := engine.MeasurePack(topo, pk.kind, int(pk.k), int(pk.n), reps)
		if err != nil {
			return fmt.Errorf("%s: %v", pk.key, err)
		}
		packs[i].secs = s
	}
	return nil
}

// inStepKernels is what steps runs of each result's plan measured, a
// traced step each (after an untimed one): two runs of one plan land up
// to 17 % apart on a 2-vCPU machine however long each runs, so the
// samples are of several runs rather than of one.
func inStepKernels(results []*compiler.Result, tokens []int32, steps int) (*inStepSamples, error) {
	out := newInStepSamples()
	for range steps {
		for _, r := range results {
			s, err := startInStep(r, tokens)
			if err == nil {
				err = s.step()
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %v", r.Bundle.Plan, err)
			}
			s.times(out)
			runtime.GC()
		}
	}
	return out, nil
}

// nearestRatio is the ratio of time in steps to time alone of the kernel
// of ks[i]'s op nearest to it in time alone (log) among those the steps
// ran (covered[j] > 0): how a kernel of that op and size runs in a step
// against alone (the smallest carry the most wake-up alone); else
// fallback.
func nearestRatio(ks []profKernel, alone, covered []float64, i int, fallback float64) float64 {
	best, bestD := fallback, math.Inf(1)
	for j, k := range ks {
		if j == i || k.in.Kern != ks[i].in.Kern || !(covered[j] > 0) || !(alone[j] > 0) || !(alone[i] > 0) {
			continue
		}
		if d := math.Abs(math.Log(alone[j] / alone[i])); d < bestD {
			best, bestD = covered[j]/alone[j], d
		}
	}
	return best
}

// inStepTimes is applyInStep's answer: each kernel's and each packing's
// time, the median ratio of a kernel's time in steps to its time alone
// (by which the kernels and packings the steps did not run are scaled),
// and how many kernels the steps ran.
type inStepTimes struct {
	kernels, packs []float64
	ratio          float64
	covered        int
}

// applyInStep sets each kernel's time (alone: alone[i]) to its traced
// times' typical (callTime) where the steps ran it, and elsewhere to its time
// alone times the ratio of the two for the kernel of its op nearest in
// time alone that the steps ran (the median ratio where they ran none of
// its op); each packing's (alone: packAlone[j]) likewise, from the
// products of its weight that the steps ran both packing and reusing (a
// product the steps ran only packing takes its calls' median less its
// packing's time, a difference of medians: their mean less it counted
// the packings' long tail into the product, and put wide's ZeRO-3 on 2
// ranks 28 % slow).
//
// callTime is the mean of a kernel's traced times where the ranks had a
// core each: a step pays every call's time, and a kernel's times in
// steps lean right (on 2 ranks tiny's probes' kernels added up 7-11 %
// more by their means than by their medians, which predicted every
// non-tensor-parallel plan of tiny about 10 % fast with the instruction
// cost measured apart). Where they queued for the cores it is the
// median: a traced time there is scaled to the cores shared evenly by
// all ranks, and the calls that ran beside an idle core (faster: the
// means came out 4-6 % under the medians on 8 ranks) are not evenly
// shared ones; that core's idle time is not in the evenly shared
// model's step either.
func applyInStep(ks []profKernel, alone []float64, packs []profPack, packAlone []float64, samples *inStepSamples) inStepTimes {
	inStep := samples.kernels
	callTime := mean
	if samples.cores > 0 {
		callTime = median
	}
	packIndex := map[string]int{}
	for j, pk := range packs {
		packIndex[pk.key] = j
	}
	packOfKernel := make([]int, len(ks))
	est := make([][]float64, len(packs))
	for i, k := range ks {
		packOfKernel[i] = -1
		if pk, ok := packOf(k.prog, k.in); ok {
			if j, ok := packIndex[pk.key]; ok {
				packOfKernel[i] = j
				reuse, packing := inStep[k.key], inStep[k.key+packingSuffix]
				if d := median(packing) - median(reuse); len(reuse) > 0 && len(packing) > 0 && d > 0 {
					est[j] = append(est[j], d)
				}
			}
		}
	}
	out := inStepTimes{kernels: make([]float64, len(ks)), packs: make([]float64, len(packs)), ratio: 1}
	var packRatios []float64
	for j := range packs {
		if len(est[j]) > 0 && packAlone[j] > 0 {
			out.packs[j] = median(est[j])
			packRatios = append(packRatios, out.packs[j]/packAlone[j])
		}
	}
	var ratios []float64
	for i, k := range ks {
		if ts := inStep[k.key]; len(ts) > 0 {
			out.kernels[i] = callTime(ts)
		} else if ts := inStep[k.key+packingSuffix]; len(ts) > 0 && packOfKernel[i] >= 0 && out.packs[packOfKernel[i]] > 0 {
			// Less a packing that medians measured: the median.
			out.kernels[i] = median(ts) - out.packs[packOfKernel[i]]
		}
		if out.kernels[i] > 0 && alone[i] > 0 {
			ratios = append(ratios, out.kernels[i]/alone[i])
			out.covered++
		}
	}
	if len(ratios) > 0 {
		out.ratio = median(ratios)
	}
	packRatio := out.ratio
	if len(packRatios) > 0 {
		packRatio = median(packRatios)
	}
	covered := append([]float64(nil), out.kernels...)
	for i := range ks {
		if !(out.kernels[i] > 0) || math.IsNaN(out.kernels[i]) {
			out.kernels[i] = alone[i] * nearestRatio(ks, alone, covered, i, out.ratio)
		}
	}
	for j := range packs {
		if !(out.packs[j] > 0) || math.IsNaN(out.packs[j]) {
			out.packs[j] = packAlone[j] * packRatio
		}
	}
	return out
}

// mean is the mean of xs (0 for none).
func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}
