package main

import (
	"bufio"
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
	fs := newFlagSet("profile", "usage: amspc profile [-o profile.csv] [--device cpu|cuda [--tensor-cores]] [--reps N] [--min-bytes N] [--max-bytes N] [--shard PLAN] [--cluster FILE] [--train FILE] FILE", stderr)
	var lf loadFlags
	lf.register(fs)
	lf.registerShard(fs, "measure the kernels of")
	out := fs.String("o", "profile.csv", "write the profile to `FILE`")
	reps := fs.Int("reps", 7, "take the median of `N` samples of each measurement (after a warm-up)")
	minBytes := fs.Int64("min-bytes", 4<<10, "smallest collective size in `bytes`")
	maxBytes := fs.Int64("max-bytes", 4<<20, "largest collective size in `bytes` (sizes go up by factors of 4)")
	device := fs.String("device", "cpu", "measure on `DEVICE`: cpu, or cuda (rank r on GPU r mod the GPUs; collectives as the CUDA backend runs them, staged through the host)")
	tensorCores := fs.Bool("tensor-cores", false, "with --device cuda, measure bf16 attention on tensor cores, as run --tensor-cores trains it")
	file, ok := oneFile(fs, args)
	if !ok {
		return exitUser
	}
	if err := notAnInput("-o", *out, file, lf.cluster, lf.train, lf.profile); err != nil {
		fmt.Fprintf(stderr, "amspc profile: %v\n", err)
		return exitUser
	}
	var newBackend func(int) (engine.Backend, error)
	if *tensorCores && *device != "cuda" {
		fmt.Fprintln(stderr, "amspc profile: --tensor-cores needs --device cuda")
		return exitUser
	}
	switch *device {
	case "cpu":
	case "cuda":
		var err error
		if newBackend, _, err = openCUDA(engine.DeviceOptions{TensorCoreAttention: *tensorCores}); err != nil {
			fmt.Fprintf(stderr, "amspc profile: --device cuda: %v\n", err)
			return exitUser
		}
	default:
		fmt.Fprintf(stderr, "amspc profile: --device must be cpu or cuda, not %q\n", *device)
		return exitUser
	}
	switch {
	case *reps < 1:
		fmt.Fprintf(stderr, "amspc profile: --reps %d: want 1 or more\n", *reps)
		return exitUser
	case *minBytes < 4:
		fmt.Fprintf(stderr, "amspc profile: --min-bytes %d: want 4 or more (one fp32 element)\n", *minBytes)
		return exitUser
	case *maxBytes < *minBytes:
		fmt.Fprintf(stderr, "amspc profile: --max-bytes %d: want at least --min-bytes (%d)\n", *maxBytes, *minBytes)
		return exitUser
	case *maxBytes > 1<<40:
		fmt.Fprintf(stderr, "amspc profile: --max-bytes %d: want at most 1 TiB\n", *maxBytes)
		return exitUser
	}
	job, err := lf.load(file)
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
	var results []*compiler.Result
	var labels []string
	for _, p := range plans {
		r, err := compiler.Compile(job, p, compiler.Options{Passes: passes.Options{}})
		if st := passError(stderr, file, err); st != exitOK {
			return st
		}
		results = append(results, r)
		label := p.Name
		if label != r.Bundle.Plan {
			label += " (" + r.Bundle.Plan + ")"
		}
		labels = append(labels, label)
	}
	if *device == "cpu" {
		// Before anything is allocated: a kernel's operands are live
		// together in a step, so a plan's peak bounds them; a collective
		// holds its input and output on every rank.
		need := float64(2 * *maxBytes * int64(topo.Ranks()))
		for _, r := range results {
			need = max(need, hostBytes(r))
		}
		if err := checkMemory(need, fmt.Sprintf("profiling %s on %d CPU ranks", job.Graph.Name, topo.Ranks())); err != nil {
			fmt.Fprintf(stderr, "amspc profile: %s: %v\n", file, err)
			return exitUser
		}
	}
	prof := &profile.Profile{Meta: profileMeta(job, labels, *reps, *device)}

	t0 := time.Now()
	ks := distinctKernels(results)
	for i, k := range ks {
		s, err := engine.MeasureKernelOn(topo, k.prog, k.in, *reps, newBackend)
		if err != nil {
			fmt.Fprintf(stderr, "amspc profile: %v %s: %v\n", k.in.Kern, profile.FormatShapes(k.shapes), err)
			return exitUser
		}
		ks[i].secs = s
		prof.AddKernel(profile.KernelRow{Op: k.in.Kern, Shapes: k.shapes, DType: k.dtype, Flops: k.in.Flops, Seconds: s})
	}
	kernelTime := time.Since(t0)

	t0 = time.Now()
	shapes := groupShapes(c.GPUsPerNode, c.Nodes)
	var sizes []int64
	for b := *minBytes; b <= *maxBytes; b *= 4 {
		sizes = append(sizes, b)
	}
	for _, f := range shapes {
		for _, coll := range []cost.Coll{cost.AllGather, cost.ReduceScatter, cost.AllReduce, cost.Broadcast} {
			for _, b := range sizes {
				// float32 elements, a whole number per member.
				n := int(b/4) / f.Size() * f.Size()
				if n == 0 {
					continue
				}
				s, err := engine.MeasureCollectiveOn(topo, coll, f, n, *reps, newBackend)
				if err != nil {
					fmt.Fprintf(stderr, "amspc profile: %v over %v: %v\n", coll, f, err)
					return exitUser
				}
				bytes := float64(4 * n)
				prof.AddCollective(profile.CollectiveRow{Coll: coll, Group: f, Bytes: bytes, GBps: bytes / s / 1e9})
			}
		}
	}
	collTime := time.Since(t0)

	if err := outfile.Write(*out, stdout, prof.Write); err != nil {
		fmt.Fprintf(stderr, "amspc profile: -o: %v\n", err)
		return exitUser
	}
	// What the first plan's step costs by the profile: rank 0's kernels
	// (their sum is the step's compute time, overlap aside).
	p0 := results[0].Bundle.Template(0)
	calls, step := 0, 0.0
	for i := range p0.Streams[ir.Compute] {
		in := &p0.Streams[ir.Compute][i]
		if in.Op == ir.Kernel {
			s, _ := prof.KernelTime(in.Kern, profile.KernelShapes(p0, in), in.Flops)
			calls, step = calls+1, step+s
		}
	}
	fmt.Fprintf(stdout, "%s: %s on %d local ranks (%d x %d), GOMAXPROCS %d, plans %s\n",
		file, job.Graph.Name, topo.Ranks(), c.Nodes, c.GPUsPerNode, runtime.GOMAXPROCS(0), strings.Join(labels, ", "))
	fmt.Fprintf(stdout, "  kernels: %d distinct (rank 0 calls %d per step), measured in %s\n", len(ks), calls, dur(kernelTime.Seconds()))
	printSlowest(stdout, ks)
	fmt.Fprintf(stdout, "  collectives: 4 kinds x %d group shapes x %d sizes (%s to %s), measured in %s\n",
		len(shapes), len(sizes), shortBytes(float64(sizes[0])), shortBytes(float64(sizes[len(sizes)-1])), dur(collTime.Seconds()))
	for _, f := range []ir.Factor{{S0: c.GPUsPerNode, S1: 1}, {S0: c.GPUsPerNode, S1: c.Nodes}} {
		if f.Size() < 2 {
			continue
		}
		bw, _ := prof.Bandwidth(cost.AllReduce, f, float64(sizes[len(sizes)-1]))
		fmt.Fprintf(stdout, "    all_reduce over %v at %s: %.3g GB/s\n", f, shortBytes(float64(sizes[len(sizes)-1])), bw/1e9)
	}
	fmt.Fprintf(stdout, "  rank 0's kernels of one %s step add up to %s by this profile\n", plans[0].Name, dur(step))
	fmt.Fprintf(stdout, "wrote %s (%d kernel rows, %d collective rows) in %s\n",
		*out, len(prof.Kernels), len(prof.Collectives), dur(time.Since(start).Seconds()))
	return exitOK
}

// profilePlans are the plans whose kernels are measured: the shard
// section's, or for shard auto ZeRO-3 and DDP, whose optimizer and cast
// kernels run on the smallest and the largest shards any plan has (the
// planner's other choices interpolate between them).
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
	for _, r := range results {
		for t := range r.Bundle.Templates {
			p := &r.Bundle.Templates[t]
			for s := range p.Streams {
				for i := range p.Streams[s] {
					in := &p.Streams[s][i]
					if in.Op != ir.Kernel {
						continue
					}
					k := profKernel{prog: p, in: in, shapes: profile.KernelShapes(p, in), dtype: p.Buffers[in.Outs[0]].DType}
					k.key = fmt.Sprintf("%v %s %v", in.Kern, profile.FormatShapes(k.shapes), k.dtype)
					if !seen[k.key] {
						seen[k.key] = true
						out = append(out, k)
					}
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
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
