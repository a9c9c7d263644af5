package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"amspc/codegen"
	"amspc/compiler"
	"amspc/cost"
	"amspc/internal/outfile"
	"amspc/ir"
	"amspc/passes"
	"amspc/simulator"
)

// BundleName is the plan file compile writes into its output directory.
const BundleName = "plan.amspplan"

// runCompile compiles a training step into a plan bundle: the passes, the
// plan (the file's shard section, --shard, or the planner's choice), the
// scheduler's per-rank streams, collective matching, and the bundle.
func runCompile(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("compile", "usage: amspc compile [-o DIR] [--shard PLAN] [--bucket BYTES] [-dump-after=PASS|all] [-d=check|PASS/off] [--cluster FILE] [--train FILE] FILE", stderr)
	var lf loadFlags
	lf.register(fs)
	out := fs.String("o", "out", "write the plan bundle into `DIR`")
	lf.registerShard(fs, "compile")
	dump := fs.String("dump-after", "", "print what `PASS` produced (or every pass's: all): "+strings.Join(passes.Names(), ", "))
	debug := fs.String("d", "", "debug flags, comma-separated: check (verify the IR after every pass), PASS/off (skip an optional pass: "+strings.Join(passes.Optional(), ", ")+")")
	bucket := fs.Int64("bucket", int64(cost.DefaultConfig.BucketBytes), "fuse the replica all-reduces of consecutive stages into buckets of `BYTES`")
	file, ok := oneFile(fs, args)
	if !ok {
		return exitUser
	}
	if *bucket < 1 {
		fmt.Fprintf(stderr, "amspc compile: --bucket %d is out of range (at least 1 byte)\n", *bucket)
		return exitUser
	}
	opts := passes.Options{DumpAfter: *dump, Dump: stdout}
	if err := opts.SetDebug(*debug); err != nil {
		fmt.Fprintf(stderr, "amspc compile: %v\n", err)
		return exitUser
	}
	// Before loading, so a typo costs nothing (the passes check it too).
	if *dump != "" && *dump != "all" && !slices.Contains(passes.Names(), *dump) {
		fmt.Fprintf(stderr, "amspc compile: -dump-after=%s: no such pass (passes: %s, or all)\n", *dump, strings.Join(passes.Names(), ", "))
		return exitUser
	}
	job, err := lf.load(file)
	if err != nil {
		return report(stderr, err)
	}
	cfg := cost.DefaultConfig
	cfg.BucketBytes = float64(*bucket)
	cj, st := compileJob(file, job, opts, cfg, stderr)
	if st != exitOK {
		return st
	}
	bundle, prog, tl, est, c, topo, M := cj.Bundle, cj.Program, cj.Timeline, cj.est, job.Cluster, cj.Bundle.Topo, cj.Bundle.Micro
	path := filepath.Join(*out, BundleName)
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintf(stderr, "amspc compile: %v\n", err)
		return exitUser
	}
	if err := codegen.WriteFile(path, bundle); err != nil {
		fmt.Fprintf(stderr, "amspc compile: %v\n", err)
		return exitUser
	}
	fi, err := os.Stat(path)
	if err != nil {
		fmt.Fprintf(stderr, "amspc compile: %v\n", err)
		return exitUser
	}
	size := fi.Size()
	var n [ir.NumStreams]int
	for i := range prog.Streams {
		n[i] = len(prog.Streams[i])
	}
	fmt.Fprintf(stdout, "%s: %s on %d x %d, plan %s, M = %d\n", file, job.Graph.Name, c.Nodes, c.GPUsPerNode, bundle.Plan, M)
	fmt.Fprintf(stdout, "  wrote %s: %s, %d template for %d ranks, %d buffers, %d/%d/%d instructions (compute/gather/reduce)\n",
		path, shortBytes(float64(size)), len(bundle.Templates), topo.Ranks(), len(prog.Buffers), n[0], n[1], n[2])
	fmt.Fprintf(stdout, "  predicted step %s (compute %s, exposed communication %s); peak memory per rank %s\n",
		dur(tl.Step), dur(tl.Compute), dur(tl.Exposed), cost.GiB(tl.PeakBytes))
	switch {
	case bundle.Tensor > 1:
		// The analytic model prices the whole model on every rank.
		fmt.Fprintln(stdout, "  (tensor parallelism is priced by simulating the compiled program only: the prediction above)")
	case est != nil:
		fmt.Fprintf(stdout, "  planner's analytic estimate: step %s, memory %s\n", dur(est.Step), cost.GiB(est.Mem.Total))
	}
	return exitOK
}

// compiled is a job compiled for its cluster.
type compiled struct {
	*compiler.Result
	est *cost.Estimate // the planner's analytic estimate of the plan
}

// compileJob chooses the plan and compiles it (compiler.Compile);
// errors are reported on stderr and turned into an exit status.
func compileJob(file string, job *ir.Job, opts passes.Options, cfg cost.Config, stderr io.Writer) (*compiled, int) {
	if job.Cluster == nil || job.Train == nil {
		fmt.Fprintf(stderr, "%s: compiling needs a cluster and a train section (or --cluster / --train FILE)\n", file)
		return nil, exitUser
	}
	// With the fuse pass off, the planner costs the unfused graph too.
	cfg.Unfused = cfg.Unfused || slices.Contains(opts.Off, "fuse")
	plan, est, err := compiler.Choose(job, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", file, err)
		return nil, exitUser
	}
	r, err := compiler.Compile(job, plan, compiler.Options{Passes: opts, Config: cfg})
	if st := passError(stderr, file, err); st != exitOK {
		return nil, st
	}
	return &compiled{Result: r, est: est}, exitOK
}

// passError reports an error of the passes or the scheduler.
func passError(stderr io.Writer, file string, err error) int {
	var internal *ir.InternalError
	var user *passes.UserError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &internal):
		fmt.Fprintln(stderr, err)
		return exitInternal
	case errors.As(err, &user):
		fmt.Fprintln(stderr, err)
		return exitUser
	}
	fmt.Fprintf(stderr, "%s: %v\n", file, err)
	return exitUser
}

func runDisasm(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("disasm", "usage: amspc disasm [--rank N,M,...] PLAN", stderr)
	rank := fs.String("rank", "0", "the `RANKS` to print, comma-separated")
	file, ok := oneFile(fs, args)
	if !ok {
		return exitUser
	}
	b, err := readBundle(file)
	if err != nil {
		fmt.Fprintf(stderr, "amspc disasm: %v\n", err)
		return exitUser
	}
	ranks, err := parseRanks("rank", *rank, b.Topo.Ranks())
	if err != nil {
		fmt.Fprintf(stderr, "amspc disasm: %v\n", err)
		return exitUser
	}
	if err := codegen.DisasmAll(stdout, b, ranks); err != nil {
		fmt.Fprintf(stderr, "amspc disasm: %v\n", err)
		return exitUser
	}
	return exitOK
}

func runTrace(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("trace", "usage: amspc trace [-o trace.json] [--ranks N,M,...] [--profile FILE] PLAN", stderr)
	out := fs.String("o", "trace.json", "write the trace to `FILE`")
	rank := fs.String("ranks", "", "the `RANKS` to include, comma-separated (default: all, up to 64)")
	prof := fs.String("profile", "", "time kernels and collectives with the measured profile `FILE` (amspc profile), as compile --profile did")
	file, ok := oneFile(fs, args)
	if !ok {
		return exitUser
	}
	if err := notAnInput("-o", *out, filepath.Join(file, BundleName), file, *prof); err != nil {
		fmt.Fprintf(stderr, "amspc trace: %v\n", err)
		return exitUser
	}
	b, err := readBundle(file)
	if err != nil {
		fmt.Fprintf(stderr, "amspc trace: %v\n", err)
		return exitUser
	}
	var ranks []int
	if !flagSet(fs, "ranks") {
		for r := 0; r < min(b.Topo.Ranks(), 64); r++ {
			ranks = append(ranks, r)
		}
	} else if ranks, err = parseRanks("ranks", *rank, b.Topo.Ranks()); err != nil {
		fmt.Fprintf(stderr, "amspc trace: %v\n", err)
		return exitUser
	}
	tl, err := simulateBundle(b, ranks[0], *prof)
	if err != nil {
		fmt.Fprintf(stderr, "amspc trace: %v\n", err)
		return exitUser
	}
	if err := outfile.Write(*out, stdout, func(w io.Writer) error { return simulator.WriteTrace(w, tl, ranks) }); err != nil {
		fmt.Fprintf(stderr, "amspc trace: -o: %v\n", err)
		return exitUser
	}
	fmt.Fprintf(besideOutput(*out, stdout, stderr), "wrote %s: %d ranks, predicted step %s (open it in https://ui.perfetto.dev)\n", *out, len(ranks), dur(tl.Step))
	return exitOK
}

// simulateBundle predicts rank r's timeline of a bundle from the machine
// it was compiled for, without the source files, and with the measured
// profile at profilePath when it is not empty: the prediction compile
// printed, when it was compiled with that profile.
func simulateBundle(b *codegen.Bundle, r int, profilePath string) (*simulator.Timeline, error) {
	return simulateBundleWith(b, r, profilePath, false)
}

// simulateBundleWith is simulateBundle, with every collective taking no
// time when noComm (cost.Machine.NoComm).
func simulateBundleWith(b *codegen.Bundle, r int, profilePath string, noComm bool) (*simulator.Timeline, error) {
	mc := b.Machine
	topo := &cost.Topology{GPUsPerNode: b.Topo.GPUsPerNode, Nodes: b.Topo.Nodes, IntraBW: mc.IntraBW, InterBW: mc.InterBW,
		IntraLatency: mc.IntraLatency, InterLat: mc.InterLatency}
	eff := mc.Efficiency
	if eff == 0 {
		eff = 0.5 // as cost.NewMachine
	}
	m := &cost.Machine{Topo: topo, PeakFLOPS: mc.PeakFLOPS, Efficiency: eff, MemBW: mc.MemBW, MatMulHalf: mc.MatMulHalf, SharedCores: mc.SharedCores, NoComm: noComm}
	if profilePath != "" {
		p, err := cost.ReadProfile(profilePath)
		if err != nil {
			return nil, fmt.Errorf("--profile: %v", err)
		}
		topo.Profile = p
		if p.HasKernels() {
			m.Kernels = p
		}
		m.Overhead = p.Overhead
	}
	tmpl := b.Template(r)
	return simulator.Simulate(tmpl, m, compiler.StageNames(tmpl))
}

// readBundle reads a plan bundle, or the bundle inside a compile output
// directory.
func readBundle(path string) (*codegen.Bundle, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		path = filepath.Join(path, BundleName)
	}
	return codegen.ReadFile(path)
}

// parseRanks reads the comma-separated ranks of --name, each a rank of a
// plan of n ranks, each once.
func parseRanks(name, s string, n int) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		r, err := strconv.Atoi(f)
		switch {
		case err != nil:
			return nil, fmt.Errorf("--%s %s: %q is not a rank number", name, s, f)
		case r < 0 || r >= n:
			return nil, fmt.Errorf("--%s %s: rank %d is not in the plan's %d ranks (0 to %d)", name, s, r, n, n-1)
		case slices.Contains(out, r):
			return nil, fmt.Errorf("--%s %s: rank %d is given twice", name, s, r)
		}
		out = append(out, r)
	}
	return out, nil
}

// flagSet reports whether the command line set the flag name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
