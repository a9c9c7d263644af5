package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
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
	"amspc/passes"
	"amspc/planner"
	"amspc/simulator"
)

// runProfile measures, on the backend amspc runs on (local ranks: one
// goroutine per rank, CPU kernels, or with --device cuda the CUDA
// backend's), the time of every distinct kernel of
// a job's compiled step and the bandwidth of every collective kind over
// every group shape of the cluster at a range of sizes, and writes the
// profile `plan --profile` and a cluster's `profile = "..."` read
// (docs/profile.md). Every measurement runs on all the cluster's ranks at
// once, as a step does.
func runProfile(args []string, stdout, stderr io.Writer) int {
	fs, o := newProfileFlags(stderr)
	file, ok := oneFile(fs, args)
	if !ok || !o.check(file, stderr) {
		return exitUser
	}
	job, err := o.lf.load(file)
	if err != nil {
		return report(stderr, err)
	}
	if job.Cluster == nil || job.Train == nil {
		fmt.Fprintf(stderr, "%s: profiling needs a cluster and a train section (or --cluster / --train FILE)\n", file)
		return exitUser
	}
	start := time.Now()
	c := job.Cluster
	topo := ir.Topology{GPUsPerNode: c.GPUsPerNode, Nodes: c.Nodes}
	plans := profilePlans(job)
	results, labels, st := compileProfilePlans(file, job, plans, stderr)
	if st != exitOK {
		return st
	}
	if o.device == "cpu" && !o.fits(file, job, results, stderr) {
		return exitUser
	}
	prof := &profile.Profile{Meta: profileMeta(job, labels, o.reps, o.device)}
	clock := startLoadClock()
	t0 := time.Now()
	ks, ok := o.measureKernels(prof, topo, results, stderr)
	if !ok {
		return exitUser
	}
	packs, inStepLine, samples, ok := o.measurePacksInStep(file, job, topo, ks, results, stderr)
	if !ok {
		return exitUser
	}
	addKernels(prof, ks, packs)
	kernelTime := time.Since(t0)
	t0 = time.Now()
	shapes, sizes, ok := o.measureCollectives(prof, topo, stderr)
	if !ok {
		return exitUser
	}
	collTime := time.Since(t0)
	if samples != nil {
		prof.Overhead = samples.overhead(job, prof)
		inStepLine += inStepOverheadLine(prof.Overhead)
	}
	fit, st := o.fitOverhead(file, job, prof, stderr)
	if st != exitOK {
		return st
	}
	clock.note(prof)
	if err := outfile.Write(o.out, stdout, prof.Write); err != nil {
		fmt.Fprintf(stderr, "amspc profile: -o: %v\n", err)
		return exitUser
	}
	fmt.Fprintf(stdout, "%s: %s on %d local ranks (%d x %d), GOMAXPROCS %d, plans %s\n",
		file, job.Graph.Name, topo.Ranks(), c.Nodes, c.GPUsPerNode, runtime.GOMAXPROCS(0), strings.Join(labels, ", "))
	fmt.Fprintf(stdout, "  kernels: %d distinct (rank 0 calls %d per step), measured in %s\n", len(ks), kernelCalls(results[0]), dur(kernelTime.Seconds()))
	if inStepLine != "" {
		fmt.Fprintln(stdout, inStepLine)
	}
	printSlowest(stdout, ks)
	kinds := "4 kinds"
	if prof.HasShared() {
		kinds = "4 kinds and the shared all-gather"
	}
	fmt.Fprintf(stdout, "  collectives: %s x %d group shapes x %d sizes (%s to %s), measured in %s\n",
		kinds, len(shapes), len(sizes), shortBytes(float64(sizes[0])), shortBytes(float64(sizes[len(sizes)-1])), dur(collTime.Seconds()))
	printAllReduce(stdout, prof, c, sizes[len(sizes)-1])
	fmt.Fprintf(stdout, "  rank 0's kernels of one %s step add up to %s by this profile\n", plans[0].Name, dur(profiledStep(prof, results[0])))
	if fit != nil {
		fit.print(stdout)
	}
	fmt.Fprintf(stdout, "wrote %s (%d kernel rows, %d collective rows) in %s\n",
		o.out, len(prof.Kernels), len(prof.Collectives), dur(time.Since(start).Seconds()))
	return exitOK
}

// profileOptions are amspc profile's flags, and the devices they name.
type profileOptions struct {
	lf                 loadFlags
	out, device        string
	reps               int
	minBytes, maxBytes int64
	tensorCores        bool
	overhead           bool
	inStepTimes        bool
	devices            *engine.Devices
}

func newProfileFlags(stderr io.Writer) (*flag.FlagSet, *profileOptions) {
	fs := newFlagSet("profile", "usage: amspc profile [-o profile.csv] [--device cpu|cuda [--tensor-cores]] [--reps N] [--min-bytes N] [--max-bytes N] [--overhead] [--in-step=false] [--shard PLAN] [--cluster FILE] [--train FILE] FILE", stderr)
	o := &profileOptions{}
	o.lf.register(fs)
	o.lf.registerShard(fs, "measure the kernels of")
	fs.StringVar(&o.out, "o", "profile.csv", "write the profile to `FILE`")
	fs.IntVar(&o.reps, "reps", 7, "take the median of `N` samples of each measurement (after a warm-up)")
	fs.Int64Var(&o.minBytes, "min-bytes", 4<<10, "smallest collective size in `bytes`")
	fs.Int64Var(&o.maxBytes, "max-bytes", 4<<20, "largest collective size in `bytes` (sizes go up by factors of 4)")
	fs.StringVar(&o.device, "device", "cpu", "measure on `DEVICE`: cpu, or cuda (rank r on GPU r mod the GPUs; collectives as the CUDA backend runs them, staged through the host)")
	fs.BoolVar(&o.tensorCores, "tensor-cores", false, "with --device cuda, measure bf16 attention on tensor cores, as run --tensor-cores trains it")
	fs.BoolVar(&o.inStepTimes, "in-step", true, "on CPU ranks, also run each plan 3 times, a traced step each, and take each kernel's time as the steps ran it (its time alone, scaled by the median ratio of the two, where they do not run it); false: every kernel's time alone")
	fs.BoolVar(&o.overhead, "overhead", false, "fit a kernel scale and an overhead per collective to steps of ZeRO-3 and DDP run on the local ranks (--device cpu; experimental: on a noisy machine the fit follows the noise)")
	return fs, o
}

// check checks the flags and opens the device, saying what is wrong.
func (o *profileOptions) check(file string, stderr io.Writer) bool {
	if err := notAnInput("-o", o.out, file, o.lf.cluster, o.lf.train, o.lf.profile); err != nil {
		fmt.Fprintf(stderr, "amspc profile: %v\n", err)
		return false
	}
	if o.overhead && o.device != "cpu" {
		fmt.Fprintf(stderr, "amspc profile: --overhead fits steps run on the local CPU ranks; it does not apply to --device %s\n", o.device)
		return false
	}
	if o.tensorCores && o.device != "cuda" {
		fmt.Fprintln(stderr, "amspc profile: --tensor-cores needs --device cuda")
		return false
	}
	// The simulated GPU would measure the simulation, not a machine.
	if o.device != "cpu" && o.device != "cuda" {
		fmt.Fprintf(stderr, "amspc profile: --device must be cpu or cuda, not %q\n", o.device)
		return false
	}
	var ok bool
	if o.devices, ok = openDevices("profile", o.device, engine.DeviceOptions{TensorCoreAttention: o.tensorCores}, stderr); !ok {
		return false
	}
	switch {
	case o.reps < 1:
		fmt.Fprintf(stderr, "amspc profile: --reps %d: want 1 or more\n", o.reps)
		return false
	case o.minBytes < 4:
		fmt.Fprintf(stderr, "amspc profile: --min-bytes %d: want 4 or more (one fp32 element)\n", o.minBytes)
		return false
	case o.maxBytes < o.minBytes:
		fmt.Fprintf(stderr, "amspc profile: --max-bytes %d: want at least --min-bytes (%d)\n", o.maxBytes, o.minBytes)
		return false
	case o.maxBytes > 1<<40:
		fmt.Fprintf(stderr, "amspc profile: --max-bytes %d: want at most 1 TiB\n", o.maxBytes)
		return false
	}
	return true
}

// compileProfilePlans compiles each plan and labels it by its name and,
// where they differ, its factors.
func compileProfilePlans(file string, job *ir.Job, plans []cost.Plan, stderr io.Writer) ([]*compiler.Result, []string, int) {
	var results []*compiler.Result
	var labels []string
	for _, p := range plans {
		r, err := compiler.Compile(job, p, compiler.Options{Passes: passes.Options{}})
		if err != nil && p.Tensor > 1 {
			continue // a tensor-parallel probe the model cannot run
		}
		if st := passError(stderr, file, err); st != exitOK {
			return nil, nil, st
		}
		results = append(results, r)
		label := p.Name
		if label != r.Bundle.Plan {
			label += " (" + r.Bundle.Plan + ")"
		}
		labels = append(labels, label)
	}
	return results, labels, exitOK
}

// fits refuses, before anything is allocated, a profile of CPU ranks
// that this machine's memory cannot hold: a kernel's operands are live
// together in a step, so a plan's peak bounds them; a collective holds
// its input and output on every rank.
func (o *profileOptions) fits(file string, job *ir.Job, results []*compiler.Result, stderr io.Writer) bool {
	ranks := job.Cluster.GPUs()
	need := float64(2 * o.maxBytes * int64(ranks))
	for _, r := range results {
		need = max(need, hostBytes(r))
	}
	if err := checkMemory(need, fmt.Sprintf("profiling %s on %d CPU ranks", job.Graph.Name, ranks)); err != nil {
		fmt.Fprintf(stderr, "amspc profile: %s: %v\n", file, err)
		return false
	}
	return true
}

// measureKernels times every distinct kernel of the results on every
// rank at once and adds its row to prof.
func (o *profileOptions) measureKernels(prof *profile.Profile, topo ir.Topology, results []*compiler.Result, stderr io.Writer) ([]profKernel, bool) {
	ks := distinctKernels(results)
	for i, k := range ks {
		s, err := engine.MeasureKernelOn(topo, k.prog, k.in, o.reps, o.devices.Backend)
		if err != nil {
			fmt.Fprintf(stderr, "amspc profile: %v %s: %v\n", k.in.Kern, profile.FormatShapes(k.shapes), err)
			return nil, false
		}
		ks[i].secs = s
	}
	return ks, true
}

// measurePacksInStep times the results' packings on CPU ranks, then
// puts the kernels' and packings' times as the profile's plans' steps
// run them (inStep).
func (o *profileOptions) measurePacksInStep(file string, job *ir.Job, topo ir.Topology, ks []profKernel, results []*compiler.Result, stderr io.Writer) ([]profPack, string, *inStepSamples, bool) {
	var packs []profPack
	if o.device == "cpu" {
		packs = distinctPacks(results)
		if err := measurePacks(topo, packs, o.reps); err != nil {
			fmt.Fprintf(stderr, "amspc profile: %s: %v\n", file, err)
			return nil, "", nil, false
		}
	}
	line, samples, err := o.inStep(job, ks, packs, results)
	if err != nil {
		fmt.Fprintf(stderr, "amspc profile: %s: timing kernels in steps: %v\n", file, err)
		return nil, "", nil, false
	}
	return packs, line, samples, true
}

// addKernels adds the kernels' and the packings' rows to prof.
func addKernels(prof *profile.Profile, ks []profKernel, packs []profPack) {
	for _, k := range ks {
		prof.AddKernel(profile.KernelRow{Op: k.in.Kern, Shapes: k.shapes, DType: k.dtype, Flops: k.in.Flops, Seconds: k.secs})
	}
	for _, pk := range packs {
		prof.AddPack(profile.PackRow{Op: pk.kind, K: pk.k, N: pk.n, Seconds: pk.secs})
	}
}

// inStep puts the kernels' times as the profile's plans' steps run them
// (instep.go), on CPU ranks, and says what it did; an empty line where
// --in-step=false or the device is not the CPU.
func (o *profileOptions) inStep(job *ir.Job, ks []profKernel, packs []profPack, results []*compiler.Result) (string, *inStepSamples, error) {
	if !o.inStepTimes || o.device != "cpu" {
		return "", nil, nil
	}
	tokens, _, err := loadTokens("", job.Train.Data)
	if err != nil {
		return "", nil, err
	}
	times, err := inStepKernels(results, tokens, inStepSteps)
	if err != nil {
		return "", nil, err
	}
	alone := make([]float64, len(ks))
	for i, k := range ks {
		alone[i] = k.secs
	}
	packAlone := make([]float64, len(packs))
	for j, pk := range packs {
		packAlone[j] = pk.secs
	}
	t := applyInStep(ks, alone, packs, packAlone, times)
	for i := range ks {
		ks[i].secs = t.kernels[i]
	}
	for j := range packs {
		packs[j].secs = t.packs[j]
	}
	return fmt.Sprintf("  in steps: %d of the %d kernels timed in %d runs of each plan, a traced step each (a kernel takes %.2fx its time alone, the median; the others are scaled by it)",
		t.covered, len(ks), inStepSteps, t.ratio), times, nil
}

// inStepSteps is how many runs of each plan the profile traces a step of.
const inStepSteps = 3

// measureCollectives times every collective kind over every group shape
// of the cluster at sizes from --min-bytes to --max-bytes, by factors of
// 4, and adds their rows to prof; on CPU ranks, also the all-gather into
// a buffer the ranks share.
func (o *profileOptions) measureCollectives(prof *profile.Profile, topo ir.Topology, stderr io.Writer) ([]ir.Factor, []int64, bool) {
	shapes := groupShapes(topo.GPUsPerNode, topo.Nodes)
	var sizes []int64
	for b := o.minBytes; b <= o.maxBytes; b *= 4 {
		sizes = append(sizes, b)
	}
	// On CPU ranks of one process, also the gather of a parameter into
	// one buffer the group shares (all_gather_shared rows).
	kinds := []profile.CollectiveRow{{Coll: cost.AllGather}, {Coll: cost.ReduceScatter}, {Coll: cost.AllReduce}, {Coll: cost.Broadcast}}
	if o.device == "cpu" {
		kinds = append(kinds, profile.CollectiveRow{Coll: cost.AllGather, Shared: true})
	}
	for _, f := range shapes {
		for _, kind := range kinds {
			for _, b := range sizes {
				// float32 elements, a whole number per member.
				n := int(b/4) / f.Size() * f.Size()
				if n == 0 {
					continue
				}
				s, err := measureColl(topo, kind.Coll, kind.Shared, f, n, o.reps, o.devices.Backend)
				if err != nil {
					fmt.Fprintf(stderr, "amspc profile: %v (shared %v) over %v: %v\n", kind.Coll, kind.Shared, f, err)
					return nil, nil, false
				}
				row := kind
				row.Group, row.Bytes = f, float64(4*n)
				row.GBps = row.Bytes / s / 1e9
				prof.AddCollective(row)
			}
		}
	}
	return shapes, sizes, true
}

// measureColl times collective c of elems float32s over every group of
// shape f at once on newBackend's ranks (engine.MeasureCollectiveOn), or
// with shared the all-gather into one buffer the local CPU ranks share
// (engine.MeasureSharedGather).
func measureColl(topo ir.Topology, c ir.Coll, shared bool, f ir.Factor, elems, reps int, newBackend func(int) (engine.Backend, error)) (float64, error) {
	if shared {
		return engine.MeasureSharedGather(topo, f, elems, reps)
	}
	return engine.MeasureCollectiveOn(topo, c, f, elems, reps, newBackend)
}

// kernelCalls is the number of kernel instructions of rank 0's step.
func kernelCalls(r *compiler.Result) int {
	p0 := r.Bundle.Template(0)
	calls := 0
	for i := range p0.Streams[ir.Compute] {
		if p0.Streams[ir.Compute][i].Op == ir.Kernel {
			calls++
		}
	}
	return calls
}

// profiledStep is what the plan's step costs by the profile: rank 0's
// kernels and their products' packings (their sum is the step's compute
// time, overlap aside).
func profiledStep(prof *profile.Profile, r *compiler.Result) float64 {
	p0 := r.Bundle.Template(0)
	step := 0.0
	packs := simulator.Packings(p0)
	for i := range p0.Streams[ir.Compute] {
		in := &p0.Streams[ir.Compute][i]
		if packs[ir.Compute][i] {
			if w := p0.Buffers[in.Args[1]].Shape; len(w) == 2 {
				s, _ := prof.PackTime(in.Kern, w[0], w[1])
				step += s
			}
		}
		if in.Op == ir.Kernel {
			s, _ := prof.KernelTime(in.Kern, profile.KernelShapes(p0, in), in.Flops)
			step += s
		}
	}
	return step
}

// printAllReduce prints the all-reduce bandwidth at the largest size
// inside a node and across the cluster.
func printAllReduce(w io.Writer, prof *profile.Profile, c *ir.Cluster, largest int64) {
	for i, f := range []ir.Factor{{S0: c.GPUsPerNode, S1: 1}, {S0: c.GPUsPerNode, S1: c.Nodes}} {
		if f.Size() < 2 || i > 0 && c.Nodes == 1 { // one node: the same group twice
			continue
		}
		bw, _ := prof.Bandwidth(cost.AllReduce, f, float64(largest))
		fmt.Fprintf(w, "    all_reduce over %v at %s: %.3g GB/s\n", f, shortBytes(float64(largest)), bw/1e9)
	}
}

// profilePlans are the plans whose kernels are measured: the shard
// section's, or for shard auto ZeRO-3 and DDP, whose optimizer and cast
// kernels run on the smallest and the largest shards any plan has (the
// planner's other choices interpolate between them), and for each
// tensor-parallel degree the planner searches, FSDP with it and sequence
// parallelism, whose matmuls, attention and sequence-sharded kernels no
// other plan runs (probes a model cannot run, compileProfilePlans
// drops).
func profilePlans(job *ir.Job) []cost.Plan {
	t, c := job.Train, job.Cluster
	if sh := job.Shard; sh != nil && sh.Mode != ir.ShardAuto {
		return []cost.Plan{cost.Uniform(sh.Label(), cost.Factors{P: sh.P, G: sh.G, OS: sh.OS, Secondary: sh.Secondary}, t.Recompute, t.MicroBatch)}
	}
	dp, one := ir.Factor{S0: c.GPUsPerNode, S1: c.Nodes}, ir.Factor{S0: 1, S1: 1}
	plans := []cost.Plan{cost.Uniform("ZeRO-3", cost.Factors{P: dp, G: dp, OS: dp}, t.Recompute, t.MicroBatch)}
	if dp.Size() > 1 {
		plans = append(plans, cost.Uniform("DDP", cost.Factors{P: one, G: one, OS: one}, t.Recompute, t.MicroBatch))
	}
	for _, tp := range planner.TensorDegrees(dp) {
		rest := dp.DataMesh(tp)
		p := cost.Uniform(fmt.Sprintf("FSDP+TP%d+SP", tp), cost.Factors{P: rest, G: rest, OS: rest}, t.Recompute, t.MicroBatch)
		p.Tensor, p.Sequence = tp, true
		plans = append(plans, p)
	}
	return plans
}

// profKernel is one distinct kernel: an instruction of a template.
type profKernel struct {
	prog   *ir.Program
	in     *ir.Instr
	shapes [][]int64
	dtype  ir.DType
	key    string
	secs   float64 // measured
}

// distinctKernels lists the kernels of every template of the results,
// one per (op, operand shapes, result dtype), sorted by that key.
func distinctKernels(results []*compiler.Result) []profKernel {
	seen := map[string]bool{}
	var out []profKernel
	eachInstr(results, ir.Kernel, func(p *ir.Program, in *ir.Instr) {
		k := profKernel{prog: p, in: in, shapes: profile.KernelShapes(p, in), dtype: p.Buffers[in.Outs[0]].DType}
		k.key = kernelKey(p, in)
		if !seen[k.key] {
			seen[k.key] = true
			out = append(out, k)
		}
	})
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
}

// eachInstr calls f with every instruction of kind op of every template
// of the results, in order.
func eachInstr(results []*compiler.Result, op ir.OpCode, f func(p *ir.Program, in *ir.Instr)) {
	for _, r := range results {
		for t := range r.Bundle.Templates {
			p := &r.Bundle.Templates[t]
			for s := range p.Streams {
				for i := range p.Streams[s] {
					if in := &p.Streams[s][i]; in.Op == op {
						f(p, in)
					}
				}
			}
		}
	}
}

// groupShapes are the group shapes s0 x s1 the planner's collectives can
// have on the cluster: s0 GPUs of a node (a divisor of gpus_per_node) in
// each of s1 nodes (a divisor of nodes), two ranks or more; inside a
// node first, then spanning nodes.
func groupShapes(gpus, nodes int) []ir.Factor {
	var out []ir.Factor
	for s1 := 1; s1 <= nodes; s1++ {
		for s0 := 1; s0 <= gpus; s0++ {
			if gpus%s0 == 0 && nodes%s1 == 0 && s0*s1 > 1 {
				out = append(out, ir.Factor{S0: s0, S1: s1})
			}
		}
	}
	return out
}

// profileMeta says what the profile was measured on.
func profileMeta(job *ir.Job, plans []string, reps int, device string) []profile.MetaEntry {
	c := job.Cluster
	backend := "local (ranks are goroutines of one process), cpu kernels"
	if device == "cuda" {
		backend = "local (ranks are goroutines of one process), cuda kernels (rank r on GPU r mod the GPUs), collectives staged through the host"
	}
	return []profile.MetaEntry{
		{Key: "backend", Value: backend},
		{Key: "ranks", Value: fmt.Sprintf("%d (%d nodes x %d per node), all measured at once", c.GPUs(), c.Nodes, c.GPUsPerNode)},
		{Key: "gomaxprocs", Value: fmt.Sprint(runtime.GOMAXPROCS(0))},
		{Key: "cpu", Value: cpuModel()},
		{Key: "go", Value: runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH},
		{Key: "model", Value: job.Graph.Name},
		{Key: "plans", Value: strings.Join(plans, ", ")},
		{Key: "reps", Value: fmt.Sprintf("%d (median, after a warm-up)", reps)},
		{Key: "date", Value: time.Now().UTC().Format("2006-01-02")},
	}
}

// cpuModel is the processor's name from /proc/cpuinfo, or "unknown".
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// printSlowest prints the three kernels that take longest per call.
func printSlowest(w io.Writer, ks []profKernel) {
	rows := append([]profKernel(nil), ks...)
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].secs > rows[j].secs })
	for _, k := range rows[:min(3, len(rows))] {
		rate := ""
		if k.in.Flops > 0 {
			rate = fmt.Sprintf(", %.3g GFLOP/s per rank", k.in.Flops/k.secs/1e9)
		}
		fmt.Fprintf(w, "    %s %s %v: %s%s\n", k.in.Kern, profile.FormatShapes(k.shapes), k.dtype, dur(k.secs), rate)
	}
}

// inStepOverheadLine is the summary's line for what traced steps
// measured beyond the kernels.
func inStepOverheadLine(o profile.Overhead) string {
	instr := dur(o.Instruction)
	if o.InstructionTP > 0 {
		instr += fmt.Sprintf(" (%s in tensor-parallel steps)", dur(o.InstructionTP))
	}
	if o.Cores > 0 {
		return fmt.Sprintf("\n  in steps: an instruction costs its stream %s beyond its work, a blocked wait %s after its event; the ranks queue for %d cores (the simulator replays that queue where they meet on the compute stream: tensor parallelism)",
			instr, dur(o.Wake), o.Cores)
	}
	return fmt.Sprintf("\n  in steps: an instruction costs its stream %s beyond its work, a collective on the compute stream %s beyond its time alone, a blocked wait %s after its event",
		instr, dur(o.Collective), dur(o.Wake))
}
