package main

import (
	"fmt"
	"io"
	"runtime"
	"sort"
	"strings"
	"time"

	"amspc/compiler"
	"amspc/cost"
	"amspc/cost/profile"
	"amspc/engine"
	"amspc/internal/outfile"
	"amspc/ir"
	"amspc/simulator"
)

// A calibration measures, between the rounds of validate's rotation,
// every distinct kernel and collective the rows' programs run, as
// `amspc profile` measures them (every rank at once); the predictions
// are then the rows' programs simulated on the medians of those
// measurements. A profile taken minutes before the steps carries the
// machine's drift into every prediction (on this machine's 2 vCPUs the
// same step varies by 20 % from one ten minutes to the next); taken in
// the rotation, the drift falls on the costs and the steps alike, and
// what the validation measures is the model's error.
type calibration struct {
	topo    ir.Topology
	reps    int
	kernels []profKernel
	packs   []profPack
	colls   []collProbe
	// a sample per round: kernels', packings', collectives' seconds,
	// and when each was taken (kat, pat, cat: seconds since ref started)
	kt, pt, ct    [][]float64
	kat, pat, cat [][]float64
	// ref, where not nil, is stepped between the measurements, and
	// every time measured is taken against it (speedRef).
	ref *speedRef
	// probes are the profile's plans (profilePlans, under shard auto),
	// each started afresh every round and traced a step: the kernels'
	// times as a step runs them (instep.go), in samples. Two runs of one
	// plan on this machine's 2 vCPUs land up to 17 % apart however long
	// each runs (bench/README.md), so a probe kept for every round would
	// carry its one run's luck into every prediction; a run per round
	// gives the rounds' median as many runs as rounds.
	probes  []*compiler.Result
	tokens  []int32
	samples *inStepSamples
	// ratio is the median of a kernel's time in the probes' steps over
	// its time alone; covered counts the kernels the probes ran.
	ratio   float64
	covered int
	rounds  int // measured so far
}

// collProbe is one collective the programs run: its kind, its group's
// shape, its size in elements (the CPU ranks store every float as
// float32, so a bf16 collective moves as many float32s), its size in
// bytes as the program counts them (which the cost model looks up), and
// whether it is an all-gather into a buffer the ranks share
// (simulator.Shareable).
type collProbe struct {
	c      ir.Coll
	g      ir.Factor
	elems  int
	bytes  int64
	shared bool
}

// calibrationReps is the samples of each measurement in a round (their
// median), after a warm-up: one, since every round adds a sample and the
// rounds' median is the cost (a wide model's round takes tens of seconds).
const calibrationReps = 1

// profileProbes compiles the profile's plans of job under shard auto (a
// file's fixed shard section would make its one plan the only probe),
// and names them: the probes, and the first (ZeRO-3) the reference.
func profileProbes(file string, job *ir.Job) ([]*compiler.Result, []string, error) {
	auto := *job
	auto.Shard = nil
	results, labels, st := compileProfilePlans(file, &auto, profilePlans(&auto), io.Discard)
	if st != exitOK || len(results) == 0 {
		return nil, nil, fmt.Errorf("%s: the profile's plans do not compile", file)
	}
	return results, labels, nil
}

// probe starts each probe's plan, traces a step of it into c.samples,
// and lets the run go. With a reference, the traced step runs between
// two of the reference's, and its times go in reference steps (profile
// shows them at its typical step).
func (c *calibration) probe() error {
	for _, r := range c.probes {
		s, err := startInStep(r, c.tokens)
		if err == nil && c.ref != nil {
			err = c.ref.step()
		}
		t0 := time.Now()
		if err == nil {
			err = s.step()
		}
		if err == nil && c.ref != nil {
			mid := c.ref.mid(t0)
			err = c.ref.step()
			s.unit = 1 / c.ref.stepAt(mid)
		}
		if err != nil {
			return fmt.Errorf("calibrating with %s: %v", r.Bundle.Plan, err)
		}
		s.times(c.samples)
		runtime.GC()
	}
	return nil
}

// sample takes one measurement into xs, and when it was taken into at
// (its middle, for the reference), after a reference step where one is
// due (speedRef.due).
func (c *calibration) sample(xs, at *[]float64, measure func() (float64, error)) error {
	if c.ref != nil {
		if err := c.ref.due(); err != nil {
			return err
		}
	}
	t0 := time.Now()
	s, err := measure()
	if err != nil {
		return err
	}
	*xs = append(*xs, s)
	if c.ref != nil {
		*at = append(*at, c.ref.mid(t0))
	}
	return nil
}

// atRef is xs[i] taken at at[i], shown at the reference's typical step
// (xs itself without a reference).
func (c *calibration) atRef(xs, at []float64) []float64 {
	if c.ref == nil {
		return xs
	}
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = x * c.ref.scale(at[i])
	}
	return out
}

// newCalibration lists what rows' programs run.
func newCalibration(rows []validationRow, topo ir.Topology) *calibration {
	results := make([]*compiler.Result, len(rows))
	for i := range rows {
		results[i] = rows[i].result
	}
	c := &calibration{topo: topo, reps: calibrationReps, kernels: distinctKernels(results), packs: distinctPacks(results)}
	seen := map[collProbe]bool{}
	shareable := map[*ir.Program][]bool{}
	eachInstr(results, ir.Collective, func(p *ir.Program, in *ir.Instr) {
		g := in.Group.Outer.Div(in.Group.Inner)
		n := g.Size()
		size := int64(4) // a collective naming no buffer moves float32s
		if bufs := append(append([]int32{}, in.Args...), in.Outs...); len(bufs) > 0 {
			size = int64(p.Buffers[bufs[0]].DType.Size())
		}
		elems := int(in.Bytes/size) / n * n
		if n < 2 || elems == 0 {
			return
		}
		sh, ok := shareable[p]
		if !ok {
			sh = simulator.Shareable(p)
			shareable[p] = sh
		}
		if pr := (collProbe{in.Coll, g, elems, in.Bytes, in.Coll == ir.AllGather && sh[in.Out]}); !seen[pr] {
			seen[pr] = true
			c.colls = append(c.colls, pr)
		}
	})
	sort.Slice(c.colls, func(i, j int) bool {
		a, b := c.colls[i], c.colls[j]
		if a.c != b.c {
			return a.c < b.c
		}
		if a.shared != b.shared {
			return !a.shared
		}
		if a.g != b.g {
			return a.g.S1 < b.g.S1 || a.g.S1 == b.g.S1 && a.g.S0 < b.g.S0
		}
		return a.elems < b.elems
	})
	c.kt, c.kat = make([][]float64, len(c.kernels)), make([][]float64, len(c.kernels))
	c.pt, c.pat = make([][]float64, len(c.packs)), make([][]float64, len(c.packs))
	c.ct, c.cat = make([][]float64, len(c.colls)), make([][]float64, len(c.colls))
	return c
}

// bytes is about the most a round holds at once beyond the runs: a
// kernel's operands or a collective's input and output on every rank,
// twice over for the garbage of the one before (measure collects it
// after each measurement, so the heap does not double under the runs).
func (c *calibration) bytes() float64 {
	most := 0.0
	for _, p := range c.colls {
		most = max(most, 8*float64(p.elems))
	}
	for _, k := range c.kernels {
		n := 0.0
		for _, id := range append(append([]int32{}, k.in.Args...), k.in.Outs...) {
			n += float64(k.prog.Buffers[id].Bytes())
		}
		most = max(most, n)
	}
	probes := 0.0
	for _, r := range c.probes {
		probes = max(probes, hostBytes(r))
	}
	return 2*most*float64(c.topo.Ranks()) + probes
}

// maxCalibrationRounds bounds the rounds measured: validate calls
// measure every round of every batch of plans it holds at once, and a
// wide model's round of measurements takes tens of seconds (fewwide's 8
// ranks took 22 minutes over five batches).
const maxCalibrationRounds = 12

// measure takes a round's samples (none past maxCalibrationRounds).
func (c *calibration) measure() error {
	if c.rounds >= maxCalibrationRounds {
		return nil
	}
	c.rounds++
	defer runtime.GC()
	for i, k := range c.kernels {
		err := c.sample(&c.kt[i], &c.kat[i], func() (float64, error) { return engine.MeasureKernel(c.topo, k.prog, k.in, c.reps) })
		if err != nil {
			return fmt.Errorf("calibrating %v %s: %v", k.in.Kern, profile.FormatShapes(k.shapes), err)
		}
		runtime.GC()
	}
	for j, pk := range c.packs {
		err := c.sample(&c.pt[j], &c.pat[j], func() (float64, error) { return engine.MeasurePack(c.topo, pk.kind, int(pk.k), int(pk.n), c.reps) })
		if err != nil {
			return fmt.Errorf("calibrating %s: %v", pk.key, err)
		}
	}
	for i, p := range c.colls {
		err := c.sample(&c.ct[i], &c.cat[i], func() (float64, error) { return measureColl(c.topo, p.c, p.shared, p.g, p.elems, c.reps, nil) })
		if err != nil {
			return fmt.Errorf("calibrating %v over %v: %v", p.c, p.g, err)
		}
		runtime.GC()
	}
	if err := c.probe(); err != nil {
		return err
	}
	if c.ref == nil {
		return nil
	}
	return c.ref.step()
}

// profile is the medians of the rounds' samples as a profile.
func (c *calibration) profile(job *ir.Job, rounds int) *profile.Profile {
	meta := profileMeta(job, []string{"every validated plan"}, c.reps, "cpu")
	meta = append(meta, profile.MetaEntry{Key: "calibration", Value: fmt.Sprintf("amspc validate --calibrate: the median of %d rounds, taken between the rounds of the steps' rotation", rounds)})
	prof := &profile.Profile{Meta: meta}
	alone := make([]float64, len(c.kernels))
	for i := range c.kernels {
		alone[i] = median(c.atRef(c.kt[i], c.kat[i]))
	}
	packAlone := make([]float64, len(c.packs))
	for j := range c.packs {
		packAlone[j] = median(c.atRef(c.pt[j], c.pat[j]))
	}
	t := inStepTimes{kernels: alone, packs: packAlone}
	var samples *inStepSamples
	if len(c.probes) > 0 {
		samples = c.samples
		if c.ref != nil {
			// From reference steps to its typical step.
			samples.scale(c.ref.typical())
		}
		t = applyInStep(c.kernels, alone, c.packs, packAlone, samples)
		c.ratio, c.covered = t.ratio, t.covered
	}
	ks := append([]profKernel(nil), c.kernels...)
	packs := append([]profPack(nil), c.packs...)
	for i := range ks {
		ks[i].secs = t.kernels[i]
	}
	for j := range packs {
		packs[j].secs = t.packs[j]
	}
	addKernels(prof, ks, packs)
	for i, p := range c.colls {
		bytes := float64(p.bytes)
		prof.AddCollective(profile.CollectiveRow{Coll: p.c, Group: p.g, Bytes: bytes, GBps: bytes / median(c.atRef(c.ct[i], c.cat[i])) / 1e9, Shared: p.shared})
	}
	if samples != nil {
		prof.Overhead = samples.overhead(job, prof)
	}
	return prof
}

// predictCalibrated costs every row's program, the one its steps ran,
// again with the calibration's profile as a profile file stores it (four
// significant digits: what --save-profile writes, and plan --profile
// reads back), sets its prediction, and returns that profile. The
// program is not compiled again: its cost-driven choices (a collective
// split into phases inside and across nodes,
// cost.Topology.HierarchicalFaster) were made with the profile the rows
// were compiled with, and may come out otherwise with the calibration's,
// which would predict another program than the one measured.
func predictCalibrated(rows []validationRow, prof *profile.Profile) (*profile.Profile, error) {
	var b strings.Builder
	if err := prof.Write(&b); err != nil {
		return nil, err
	}
	stored, err := profile.Parse("calibration.csv", strings.NewReader(b.String()))
	if err != nil {
		return nil, err
	}
	for i := range rows {
		prog := rows[i].ran
		m := cost.ProfiledMachine(rows[i].ranJob.Cluster, stored)
		tl, err := simulator.Simulate(prog, m, compiler.StageNames(prog))
		if err != nil {
			return nil, fmt.Errorf("%s with the calibration: %v", rows[i].Plan, err)
		}
		rows[i].Predicted = tl.Step
		rows[i].Error = rows[i].Predicted/rows[i].Measured - 1
	}
	return stored, nil
}

// measure times the rows' steps (measureRows) and, with --calibrate,
// costs them again with what the calibration measured between the
// rounds; it returns what the predictions were costed with.
func (o *validateOptions) measure(file string, job *ir.Job, rows []validationRow, tokens []int32) (string, *refSummary, error) {
	var cal *calibration
	between := func() error { return nil }
	reserve := 0.0
	if o.calibrate {
		cal = newCalibration(rows, ir.Topology{GPUsPerNode: job.Cluster.GPUsPerNode, Nodes: job.Cluster.Nodes})
		probes, labels, err := profileProbes(file, job)
		if err != nil {
			return "", nil, err
		}
		if o.inStep {
			cal.probes, cal.tokens, cal.samples = probes, tokens, newInStepSamples()
		}
		if o.reference {
			reserve += hostBytes(probes[0])
			if cal.ref, err = startSpeedRef(probes[0], labels[0], tokens); err != nil {
				return "", nil, fmt.Errorf("%s: %v", file, err)
			}
		}
		between, reserve = cal.measure, reserve+cal.bytes()
	}
	if err := measureRows(rows, tokens, o.warmup, o.steps, o.instances, between, reserve, cal.reference()); err != nil {
		return "", nil, err
	}
	if cal == nil {
		return job.Cluster.Profile, nil, nil
	}
	var ref *refSummary
	if cal.ref != nil {
		ref = cal.ref.summary()
		for i := range rows {
			rows[i].Measured *= ref.Median
		}
	}
	calibrated, err := predictCalibrated(rows, cal.profile(job, cal.rounds))
	if err != nil {
		return "", nil, err
	}
	if o.saveProfile != "" {
		if err := outfile.Write(o.saveProfile, nil, calibrated.Write); err != nil {
			return "", nil, err
		}
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Predicted < rows[j].Predicted })
	prof := fmt.Sprintf("a profile of the plans' %d kernels, %d packings and %d collectives measured between the rounds", len(cal.kernels), len(cal.packs), len(cal.colls))
	if cal.covered > 0 {
		o := calibrated.Overhead
		prof += fmt.Sprintf(", %d kernels as traced steps of the profile's plans ran them, the others scaled by %.2f; %s an instruction", cal.covered, cal.ratio, dur(o.Instruction))
		if o.InstructionTP > 0 {
			prof += fmt.Sprintf(" (%s in tensor-parallel steps)", dur(o.InstructionTP))
		}
		if o.Cores > 0 {
			prof += fmt.Sprintf(", %s a wake-up; tensor-parallel ranks queue for %d cores", dur(o.Wake), o.Cores)
		} else {
			prof += fmt.Sprintf(", %s a hand-off, %s a wake-up", dur(o.Collective), dur(o.Wake))
		}
	}
	return prof, ref, nil
}

// reference is c's reference (nil for none, or for no calibration).
func (c *calibration) reference() *speedRef {
	if c == nil {
		return nil
	}
	return c.ref
}
