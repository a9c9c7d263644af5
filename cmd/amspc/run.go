package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"syscall"

	"amspc"
	"amspc/codegen"
	"amspc/compiler"
	"amspc/cost"
	"amspc/engine"
	"amspc/internal/outfile"
	"amspc/ir"
	"amspc/passes"
	"amspc/simulator"
	"amspc/tokenizer"
)

// runRun compiles a job and trains it on CPU ranks (goroutines of this
// process), printing the loss of every step. The training is an
// engine.Trainer's; what is here reads the flags, loads the plan and
// the data, and says how the run went.
func runRun(args []string, stdout, stderr io.Writer) (status int) {
	fs, o := newRunFlags(stderr)
	file, ok := oneFile(fs, args)
	if !ok || !o.checkOutputs(file, stderr) {
		return exitUser
	}
	// A closed pipe on standard output (amspc run ... | head) does not
	// kill the run: its writes fail, the training and the checkpoints go
	// on, and the run ends with status 1 saying so.
	signal.Ignore(syscall.SIGPIPE)
	defer signal.Reset(syscall.SIGPIPE)
	fs.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	if !o.check(stdout, stderr) {
		return exitUser
	}
	plan, st := loadTrainPlan(file, &o.lf, stderr)
	if st != exitOK {
		return st
	}
	var err error
	if o.tokenizer != "" {
		if o.tk, err = loadTokenizer(o.tokenizer); err != nil {
			fmt.Fprintf(stderr, "amspc run: --tokenizer: %v\n", err)
			return exitUser
		}
	}
	tokens, what, err := loadTokensWith(o.data, plan.dataPath, o.tk)
	if err == nil {
		tokens, what, err = o.evaluation(plan, tokens, what)
	}
	if err != nil {
		fmt.Fprintf(stderr, "amspc run: %v\n", err)
		return exitUser
	}
	return o.train(file, plan, tokens, what, stdout, stderr)
}

// runOptions are amspc run's flags, and what checking them found.
type runOptions struct {
	lf                           loadFlags
	steps, saveEvery, traceSteps int
	more                         int // --more: steps after the resumed checkpoint
	evalData, tokenizer          string
	tk                           *tokenizer.Tokenizer // --tokenizer's
	evalTokens, evalEvery        int64
	evalBatches                  int
	eval                         *engine.Evaluation // what the flags and the train section ask
	data, logPath, save, resume  string
	cpuProfile, device, progress string
	trace, collectives           string
	overwrite, tensorCores       bool
	graphs                       bool
	standInScale                 float64
	set                          map[string]bool // the flags given
	bar                          bool            // a live progress bar, not lines
	devices                      *engine.Devices
}

func newRunFlags(stderr io.Writer) (*flag.FlagSet, *runOptions) {
	fs := newFlagSet("run", "usage: amspc run [--steps N] [--device cpu|cuda|sim [--tensor-cores] [--collectives MODE [--standin-scale F]] [--graphs=false]] [--cpuprofile FILE] [--trace FILE [--trace-steps N]] [--data PATH] [--log FILE] [--progress MODE] [--save DIR [--save-every K] [--overwrite]] [--resume DIR [--more N]] [--shard PLAN] [--cluster FILE] [--train FILE] FILE|PLAN", stderr)
	o := &runOptions{set: map[string]bool{}}
	o.lf.register(fs)
	fs.IntVar(&o.steps, "steps", 0, "train up to step `N`, counting a resumed checkpoint's steps (default: the train section's steps; 0 with --save writes the initial weights); the learning rate's schedule ends its decay there")
	fs.IntVar(&o.more, "more", 0, "with --resume, train `N` steps more than the checkpoint's (instead of --steps)")
	fs.StringVar(&o.tokenizer, "tokenizer", "", "encode text data (--data, --eval-data) with the Hugging Face `tokenizer.json` (a token file of amspc tokenize must come from it)")
	fs.StringVar(&o.evalData, "eval-data", "", "evaluate the loss of `PATH` (read as --data is) under the plan, without training on it")
	fs.Int64Var(&o.evalTokens, "eval-tokens", 0, "hold out the last `N` tokens of the data from training and evaluate their loss (default: the train section's eval_tokens)")
	fs.Int64Var(&o.evalEvery, "eval-every", 0, "evaluate after every `K`-th step and the last (default: the train section's eval_every, else a tenth of the steps)")
	fs.IntVar(&o.evalBatches, "eval-batches", 0, "evaluate `N` global batches of the held-out data each time (default: enough to cover it once)")
	fs.StringVar(&o.data, "data", "", "train on `PATH`: text as bytes (vocab 256), or a .bin/.tok file of uint16 little-endian tokens (default: the embedded README and docs)")
	fs.StringVar(&o.logPath, "log", "", "append one JSON object per step to `FILE`")
	o.lf.registerShard(fs, "train under")
	fs.StringVar(&o.save, "save", "", "write a checkpoint into `DIR` at the end (and every --save-every steps)")
	fs.IntVar(&o.saveEvery, "save-every", 0, "also checkpoint every `K` steps")
	fs.BoolVar(&o.overwrite, "overwrite", false, "with --save, replace a checkpoint in DIR of another model, of a later step than this run starts from, or of the step it starts at when it did not resume from DIR")
	fs.StringVar(&o.resume, "resume", "", "resume from the checkpoint in `DIR` (saved under any plan or rank count)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the training steps after the first to `FILE` (go tool pprof reads it; under MPI, each rank appends .rank<R>)")
	fs.StringVar(&o.trace, "trace", "", "write a trace of what ran to `FILE` (amspc trace's format, to open beside the plan's in Perfetto): each instruction's wall time on CPU ranks, for --trace-steps steps from the steady state's first (the second when the run takes more than one); under MPI, each rank appends .rank<R>")
	fs.IntVar(&o.traceSteps, "trace-steps", 1, "with --trace, trace `N` steps")
	fs.BoolVar(&o.tensorCores, "tensor-cores", false, "with --device cuda or sim, run bf16 attention and its gradient on tensor cores (mma.cu: head dims a multiple of 16 up to 128; probabilities rounded to bf16 as PyTorch's bf16 attention does; checked against the CPU kernels on the simulated GPU and on an H200)")
	fs.StringVar(&o.device, "device", "cpu", "run the ranks' kernels on `DEVICE`: cpu, cuda (NVIDIA GPUs: rank r on GPU r mod the GPUs), or sim (the CUDA backend on a GPU simulated on the CPU, to check the GPU path without one; slow)")
	fs.BoolVar(&o.graphs, "graphs", true, "with --device cuda or sim, capture the second step as a graph (CUDA graphs) and replay it for every step after: one launch a step, the same bits as enqueueing every step (=false does that); with --collectives ordered, only one-rank plans (the host's part of a collective cannot be captured)")
	fs.StringVar(&o.collectives, "collectives", engine.CollectivesOrdered, "with --device cuda or sim, where collectives run: `MODE` ordered (staged through the host, sums a left fold in group order: the same bits for every plan), device (on the device, enqueued on the plan's comm streams: NCCL on GPUs, one rank per GPU, not yet working on a GPU; the simulated GPU's own with every rank in one process, the same bits as ordered) or standin (rank 0 alone, each collective a kernel holding its stream for the plan's simulated time of it, moving no data; run once so and once with none: the exposed communication, measured against the simulation's; the losses mean nothing)")
	fs.Float64Var(&o.standInScale, "standin-scale", 1, "with --collectives standin, hold each stream `F` times the simulated time of its collective")
	fs.StringVar(&o.progress, "progress", "auto", "`MODE` of the progress: bar (a live bar rewritten in place), lines (a line a step), or auto: a bar when standard output is a terminal and no launcher (mpirun, srun) started the process")
	return fs, o
}

// checkOutputs refuses a --log, --cpuprofile or --trace that names an
// input, and a --trace that names another output or standard output.
func (o *runOptions) checkOutputs(file string, stderr io.Writer) bool {
	for _, out := range []struct{ flag, path string }{{"--log", o.logPath}, {"--cpuprofile", o.cpuProfile}, {"--trace", o.trace}} {
		if err := notAnInput(out.flag, out.path, file, o.data, o.lf.cluster, o.lf.train, o.lf.profile); err != nil {
			fmt.Fprintf(stderr, "amspc run: %v\n", err)
			return false
		}
	}
	switch {
	case o.trace == "":
		return true
	case o.trace == outfile.Stdout:
		fmt.Fprintln(stderr, "amspc run: --trace -: standard output shows the run's progress; name a file")
		return false
	case samePath(o.trace, o.logPath):
		fmt.Fprintf(stderr, "amspc run: --trace and --log both name %s\n", o.trace)
		return false
	case samePath(o.trace, o.cpuProfile):
		fmt.Fprintf(stderr, "amspc run: --trace and --cpuprofile both name %s\n", o.trace)
		return false
	}
	// Written after the training: a directory is refused before it.
	if fi, err := os.Stat(o.trace); err == nil && fi.IsDir() {
		fmt.Fprintf(stderr, "amspc run: --trace %s is a directory\n", o.trace)
		return false
	}
	return true
}

// samePath reports whether a and b (b may be empty) name the same file:
// the same path, or two names of one existing file.
func samePath(a, b string) bool {
	if b == "" {
		return false
	}
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

// check checks the flags against each other, chooses the progress's
// form and opens the device, saying what is wrong.
func (o *runOptions) check(stdout, stderr io.Writer) bool {
	switch o.progress {
	case "auto":
		// Under mpirun and srun every rank's stdout is the launcher's
		// pty, not the user's terminal: a bar there fills logs with
		// carriage returns.
		_, launched := launchedSize()
		o.bar = isTerminal(stdout) && !launched
	case "bar":
		o.bar = true
	case "lines":
	default:
		fmt.Fprintf(stderr, "amspc run: --progress must be auto, bar or lines, not %q\n", o.progress)
		return false
	}
	if names := engine.DeviceNames(); !slices.Contains(names, o.device) {
		fmt.Fprintf(stderr, "amspc run: --device must be %s, not %q\n", oneOf(names), o.device)
		return false
	}
	switch {
	case o.set["trace-steps"] && o.trace == "":
		fmt.Fprintln(stderr, "amspc run: --trace-steps needs --trace FILE")
		return false
	case o.traceSteps < 1:
		fmt.Fprintf(stderr, "amspc run: --trace-steps %d: want 1 or more\n", o.traceSteps)
		return false
	}
	switch {
	case o.collectives != engine.CollectivesOrdered && o.collectives != engine.CollectivesDevice && o.collectives != collectivesStandIn:
		fmt.Fprintf(stderr, "amspc run: --collectives must be %s, %s or %s, not %q\n", engine.CollectivesOrdered, engine.CollectivesDevice, collectivesStandIn, o.collectives)
		return false
	case o.collectives != engine.CollectivesOrdered && o.device == "cpu":
		fmt.Fprintf(stderr, "amspc run: --collectives %s needs --device cuda or sim (CPU ranks run their collectives on the host)\n", o.collectives)
		return false
	case o.set["standin-scale"] && o.collectives != collectivesStandIn:
		fmt.Fprintln(stderr, "amspc run: --standin-scale needs --collectives standin")
		return false
	case o.collectives == collectivesStandIn && (o.save != "" || o.resume != ""):
		fmt.Fprintln(stderr, "amspc run: --collectives standin times one rank on stand-ins: no --save or --resume")
		return false
	}
	var ok bool
	if o.devices, ok = openDevices("run", o.device, o.deviceOptions(), stderr); !ok {
		return false
	}
	if o.tensorCores && o.device == "cpu" {
		fmt.Fprintln(stderr, "amspc run: --tensor-cores needs --device cuda or sim")
		return false
	}
	if o.set["graphs"] && o.device == "cpu" {
		fmt.Fprintln(stderr, "amspc run: --graphs needs --device cuda or sim (CPU ranks run each kernel when they reach it)")
		return false
	}
	return o.checkSteps(stderr)
}

// deviceOptions are the device options the flags ask for.
func (o *runOptions) deviceOptions() engine.DeviceOptions {
	coll := o.collectives
	if coll == collectivesStandIn {
		coll = engine.CollectivesOrdered // the devices run no collective
	}
	return engine.DeviceOptions{TensorCoreAttention: o.tensorCores, Collectives: coll, Eager: !o.graphs}
}

// checkSteps checks --steps and the checkpoint flags, and that --save's
// directory can be written (found now, not after training).
func (o *runOptions) checkSteps(stderr io.Writer) bool {
	switch {
	case o.steps < 0:
		fmt.Fprintf(stderr, "amspc run: --steps %d: want 0 or more\n", o.steps)
		return false
	case o.set["eval-tokens"] && o.evalTokens < 1, o.set["eval-every"] && o.evalEvery < 1, o.set["eval-batches"] && o.evalBatches < 1:
		fmt.Fprintf(stderr, "amspc run: --eval-tokens %d, --eval-every %d, --eval-batches %d: want 1 or more where given\n", o.evalTokens, o.evalEvery, o.evalBatches)
		return false
	case o.set["more"] && (o.more < 1 || o.resume == "" || o.set["steps"]):
		fmt.Fprintf(stderr, "amspc run: --more %d: want 1 or more steps after a checkpoint of --resume, without --steps\n", o.more)
		return false
	case o.set["steps"] && o.steps == 0 && o.save == "":
		fmt.Fprintln(stderr, "amspc run: --steps 0 trains nothing; with --save DIR it writes the initial weights as a checkpoint")
		return false
	case o.set["save-every"] && o.saveEvery < 1:
		fmt.Fprintf(stderr, "amspc run: --save-every %d: want 1 or more\n", o.saveEvery)
		return false
	case o.set["save-every"] && o.save == "":
		fmt.Fprintln(stderr, "amspc run: --save-every needs --save DIR")
		return false
	case o.overwrite && o.save == "":
		fmt.Fprintln(stderr, "amspc run: --overwrite needs --save DIR")
		return false
	}
	if o.save != "" {
		if err := engine.CheckWritable(o.save); err != nil {
			fmt.Fprintf(stderr, "amspc run: --save: %v\n", err)
			return false
		}
	}
	return true
}

// trainPlan is what amspc run trains: a plan bundle, the timeline it is
// predicted to take, and the data and profile its job names.
type trainPlan struct {
	bundle                *codegen.Bundle
	predicted             *simulator.Timeline
	dataPath, profilePath string
	evalEvery, evalTokens int64 // the train section's
}

// loadTrainPlan reads a plan bundle (or compile's output directory) as it
// is, or compiles a model file.
func loadTrainPlan(file string, lf *loadFlags, stderr io.Writer) (*trainPlan, int) {
	if isPlan(file) {
		if lf.shard != "" || lf.cluster != "" || lf.train != "" {
			fmt.Fprintln(stderr, "amspc run: --shard, --cluster and --train apply to model files, not to a compiled plan")
			return nil, exitUser
		}
		bundle, err := readBundle(file)
		if err != nil {
			fmt.Fprintf(stderr, "amspc run: %v\n", err)
			return nil, exitUser
		}
		predicted, err := simulateBundle(bundle, 0, lf.profile)
		if err != nil {
			fmt.Fprintf(stderr, "amspc run: %v\n", err)
			return nil, exitUser
		}
		return &trainPlan{bundle: bundle, predicted: predicted, profilePath: lf.profile}, exitOK
	}
	job, err := lf.load(file)
	if err != nil {
		return nil, report(stderr, err)
	}
	cj, st := compileJob(file, job, passes.Options{}, cost.DefaultConfig, stderr)
	if st != exitOK {
		return nil, st
	}
	return &trainPlan{bundle: cj.Bundle, predicted: cj.Timeline, dataPath: job.Train.Data, profilePath: job.Cluster.Profile,
		evalEvery: job.Train.EvalEvery, evalTokens: job.Train.EvalTokens}, exitOK
}

// train trains the plan on tokens: as the one process of the run, or
// under mpirun or srun (an mpi build) as the process of one rank, where
// only rank 0 prints and logs, and every process ends with the same
// status.
func (o *runOptions) train(file string, plan *trainPlan, tokens []int32, what string, stdout, stderr io.Writer) (status int) {
	pw, err := openWorld(plan.bundle)
	proc := &runProcess{pw: pw, stderr: stderr}
	if err != nil {
		st := proc.refuse(err)
		if pw != nil {
			pw.finish() // MPI started, the world refused: end it cleanly
		}
		return st
	}
	if pw != nil {
		defer func() { proc.end(status) }()
		if pw.rank != 0 {
			stdout, o.logPath = io.Discard, ""
		}
	}
	if o.collectives == engine.CollectivesDevice {
		// Opened again, now that the world is known: the devices'
		// collectives run among its ranks.
		opts := o.deviceOptions()
		opts.World = deviceWorld(plan.bundle.Topo.Ranks(), pw)
		d, err := engine.OpenDevices(o.device, opts)
		if err != nil {
			return proc.refuse(fmt.Errorf("--device %s: %w", o.device, err))
		}
		if err := o.devices.Close(); err != nil {
			return proc.fail(err)
		}
		o.devices = d
	}
	n := o.steps
	if !o.set["steps"] {
		n = int(plan.bundle.Train.Steps)
	}
	if o.set["more"] {
		m, err := engine.ReadManifest(o.resume)
		if err != nil {
			return proc.refuse(fmt.Errorf("--resume: %w", err))
		}
		n = m.Step + o.more
	}
	ctx, stop := context.WithCancelCause(context.Background())
	defer stop(nil)
	progress := &runProgress{stdout: stdout, bar: o.bar, logPath: o.logPath, stop: stop,
		header: o.header(file, plan.bundle, pw, n, what), schedule: plan.bundle.Train.Schedule != (ir.LRSchedule{})}
	defer func() { status = max(status, progress.close(stderr)) }()
	var prof cpuProfile
	defer func() { status = max(status, prof.stop(stderr)) }()
	if o.collectives == collectivesStandIn {
		return o.standIn(ctx, plan, tokens, pw, n, progress, &prof, stdout, stderr)
	}
	t := o.trainer(plan, tokens, pw, n, progress, &prof, stderr)
	defer func() {
		if err := o.devices.Close(); err != nil {
			fmt.Fprintf(stderr, "amspc run: closing --device %s: %v\n", o.device, err)
			status = max(status, exitUser)
		}
	}()
	res, err := t.Train(ctx)
	if err == nil && t.Trace != nil && len(res.StepSeconds) > 0 {
		// Written however the steps ended (a stop's included), after
		// the summary.
		defer func() { status = max(status, o.writeTrace(plan.bundle, t.Trace, pw, stdout, stderr)) }()
	}
	switch {
	case err != nil:
		return proc.fail(err)
	case res.UpToDate:
		fmt.Fprintf(stdout, "nothing to do: the checkpoint is at step %d and the run ends at step %d (--steps)\n", res.First, n)
		return exitOK
	case res.Stopped:
		proc.agreed = true
		return stopped(res, o.save, o.bar, stdout, proc.said())
	case len(res.StepSeconds) == 0:
		return exitOK // --steps 0 --save: the initial weights
	}
	o.summary(stdout, plan, res)
	return exitOK
}

// trainer is the engine's training run the flags ask for. Its hooks
// refuse a plan this process's memory cannot hold (the local backend
// holds every rank in this process) and start --cpuprofile's profile.
func (o *runOptions) trainer(plan *trainPlan, tokens []int32, pw *procWorld, n int, progress engine.Progress, prof *cpuProfile, stderr io.Writer) *engine.Trainer {
	t := &engine.Trainer{Bundle: plan.bundle, Tokens: tokens, Devices: o.devices, Steps: n,
		Resume: o.resume, Save: o.save, SaveEvery: o.saveEvery, Overwrite: o.overwrite, Warn: stderr,
		Progress: progress, Eval: o.eval}
	if e := o.eval; e != nil && e.Every == 0 {
		e.Every = max(1, n/10)
	}
	if pw != nil {
		t.World = pw.world
	}
	peak := plan.predicted.PeakHostBytes
	t.CheckFit = func(local int) error {
		need := peak * float64(local)
		avail := availableBytes()
		if need <= avail {
			return nil
		}
		// Per process (machines differ), so every process that finds it
		// says so, naming its rank under MPI.
		err := fmt.Errorf("the plan needs about %s of memory in this process (%d ranks x %s at their peak, every element stored in 4 bytes on CPU ranks), more than the %s available",
			cost.GiB(need), local, cost.GiB(peak), cost.GiB(avail))
		if pw != nil {
			err = fmt.Errorf("rank %d: %w", pw.rank, err)
		}
		return err
	}
	if o.trace != "" {
		t.Trace = &engine.Trace{Steps: o.traceSteps}
	}
	if o.cpuProfile != "" || o.trace != "" {
		path := o.cpuProfile
		if pw != nil && path != "" {
			path = fmt.Sprintf("%s.rank%d", path, pw.rank)
		}
		t.SteadyState = func() error {
			if t.Trace != nil {
				t.Trace.Start()
			}
			if path == "" {
				return nil
			}
			return prof.start(path)
		}
	}
	return t
}

// header is the line that starts the training.
func (o *runOptions) header(file string, b *codegen.Bundle, pw *procWorld, n int, what string) string {
	where := "CPU ranks"
	switch {
	case pw != nil:
		where = "MPI processes"
	case o.device == "cuda":
		where = "ranks on CUDA GPUs"
	case o.device == "sim":
		where = "ranks on simulated GPUs"
	}
	ranks := fmt.Sprintf("%d %s", b.Topo.Ranks(), where)
	if o.collectives == collectivesStandIn {
		ranks = fmt.Sprintf("rank 0 of %d %s, its collectives stand-ins", b.Topo.Ranks(), where)
	}
	return fmt.Sprintf("%s: training %s on %s (%d x %d), plan %s, M = %d, %d steps on %s",
		file, b.Model, ranks, b.Topo.Nodes, b.Topo.GPUsPerNode, b.Plan, b.Micro, n, what)
}

// summary compares what the run measured with what the plan predicted.
func (o *runOptions) summary(stdout io.Writer, plan *trainPlan, res *engine.TrainResult) {
	var peak int64
	for _, p := range res.Run.PeakBytes() {
		peak = max(peak, p)
	}
	tl := plan.predicted
	fmt.Fprintf(stdout, "measured: step %s (median), peak %s per rank; predicted by the plan: step %s, peak %s per rank\n",
		dur(median(res.StepSeconds)), cost.GiB(float64(peak)), dur(tl.Step), cost.GiB(tl.PeakBytes))
	if gpu, ok := o.devices.PeakBytes(); ok {
		fmt.Fprintf(stdout, "GPU memory: at most %s allocated by a rank (its buffers at their device sizes and the kernels' scratch)\n", cost.GiB(float64(gpu)))
	}
	if plan.profilePath != "" {
		fmt.Fprintf(stdout, "(the prediction uses the profile %s)\n", plan.profilePath)
	} else {
		fmt.Fprintln(stdout, "(the prediction uses the cluster's nominal figures; measure this machine with amspc profile and pass --profile)")
	}
	var top []string
	for i, t := range res.Run.Timings(0) {
		if i == 6 {
			break
		}
		top = append(top, fmt.Sprintf("%s %s (%d)", t.Name, dur(t.Seconds), t.Count))
	}
	if o.device == "cpu" {
		fmt.Fprintf(stdout, "rank 0's time by instruction: %s\n", strings.Join(top, ", "))
	} else {
		// A device runs its work after the host issues it: an
		// instruction's host time is its issue and whatever wait for the
		// device it does (amspc profile --device times kernels alone).
		fmt.Fprintf(stdout, "rank 0's host time by instruction (issue, and waits for the device): %s\n", strings.Join(top, ", "))
	}
}

// runProcess is this process's part in how a run ends. Under MPI (pw
// set), an end every process agreed on (a refusal all of them found
// alike, a stop) finishes MPI and exits with its status; any other
// failure ends the whole job.
type runProcess struct {
	pw     *procWorld
	agreed bool // every process ends here, with the same status
	stderr io.Writer
}

// refuse reports an error that every process finds alike (in the input,
// the plan or a checkpoint): rank 0 prints it, and no process ends the
// job before it has.
func (p *runProcess) refuse(err error) int {
	p.agreed = true
	if p.pw == nil || p.pw.rank == 0 {
		fmt.Fprintf(p.stderr, "amspc run: %v\n", err)
	}
	if p.pw != nil {
		p.pw.barrier()
	}
	return exitUser
}

// fail reports a training run's error: a refusal where every process
// returned it, else this process's own.
func (p *runProcess) fail(err error) int {
	var te *engine.TrainError
	switch {
	case !errors.As(err, &te):
		// A hook's (--log, --cpuprofile, the memory check): each
		// wraps its error as it is to be printed.
	case te.Stage == engine.StagePrepareSave:
		return p.refuse(fmt.Errorf("--save: %w", te.Err))
	case te.Agreed:
		return p.refuse(te)
	case te.Stage == engine.StageStep && p.pw != nil && closed(p.pw.world.Done()):
		// Across processes, a failing rank has reported its error
		// when it aborted the job.
		return exitUser
	}
	fmt.Fprintf(p.stderr, "amspc run: %v\n", err)
	return exitUser
}

// said is where an agreed end is said: rank 0's stderr.
func (p *runProcess) said() io.Writer {
	if p.pw != nil && p.pw.rank != 0 {
		return io.Discard
	}
	return p.stderr
}

// end ends this process's part of an MPI job with the run's status.
func (p *runProcess) end(status int) {
	if status == exitOK || p.agreed {
		p.pw.barrier()
		p.pw.finish()
	} else {
		p.pw.abort(status)
	}
}

// runProgress shows a training run: its header, a line a step or a live
// bar, the saves, and the JSON log (--log). From the first step on, it
// turns SIGINT, SIGTERM and SIGHUP (the terminal closed) into a stop at
// the next step boundary (every process at the same one).
type runProgress struct {
	stdout   io.Writer
	bar      bool
	schedule bool // the lr moves: each step's line shows it
	header   string
	logPath  string
	log      *outfile.Checked // nil without --log
	logFile  *os.File
	stop     context.CancelCauseFunc
	sigs     chan os.Signal
	done     chan struct{}
}

func (p *runProgress) Resumed(dir string, step int) {
	fmt.Fprintf(p.stdout, "resumed from %s after step %d\n", dir, step)
}

func (p *runProgress) Begin(first, last int) error {
	if p.logPath != "" {
		// Appended to step by step, so written in place, not atomically;
		// a write that fails stops the log (training goes on) and the run
		// ends with exit status 1 saying why.
		f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("--log: %w", err)
		}
		p.log, p.logFile = &outfile.Checked{W: f}, f
	}
	fmt.Fprintln(p.stdout, p.header)
	p.sigs, p.done = make(chan os.Signal, 1), make(chan struct{})
	signal.Notify(p.sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		select {
		case sig := <-p.sigs:
			p.stop(stopSignal{sig})
		case <-p.done:
		}
	}()
	return nil
}

func (p *runProgress) Step(s engine.StepReport) {
	line := fmt.Sprintf("step %4d/%d  loss %.4f  %8.0f tokens/s  %6.2fs elapsed  %6.2fs left",
		s.Step, s.Last, s.Loss, s.TokensPerSecond, s.Elapsed, s.Remaining)
	if p.schedule || s.Clips {
		extra := ""
		if p.schedule {
			extra += fmt.Sprintf("  lr %.3g", s.LR)
		}
		if s.Clips {
			extra += fmt.Sprintf("  grad norm %.3g", s.GradNorm)
		}
		line = fmt.Sprintf("step %4d/%d  loss %.4f%s  %8.0f tokens/s  %6.2fs elapsed  %6.2fs left",
			s.Step, s.Last, s.Loss, extra, s.TokensPerSecond, s.Elapsed, s.Remaining)
	}
	if p.bar {
		// A live bar: one line rewritten in place, the last kept.
		done := s.Step * 30 / s.Last
		fmt.Fprintf(p.stdout, "\r[%s%s] %s", strings.Repeat("#", done), strings.Repeat(" ", 30-done), line)
		if s.Step == s.Last {
			fmt.Fprintln(p.stdout)
		}
	} else {
		fmt.Fprintln(p.stdout, line)
	}
	if s.Evaluated {
		ev := fmt.Sprintf("eval after step %d: loss %.4f (perplexity %.4g) on the held-out data", s.Step, s.EvalLoss, math.Exp(s.EvalLoss))
		if p.bar && s.Step != s.Last {
			ev = "\n" + ev
		}
		fmt.Fprintln(p.stdout, ev)
	}
	if p.log != nil {
		rec := map[string]any{"step": s.Step, "loss": s.Loss, "lr": s.LR, "tokens_per_s": s.TokensPerSecond, "step_time_s": s.Seconds}
		if s.Clips {
			rec["grad_norm"] = s.GradNorm
		}
		if s.Evaluated {
			rec["eval_loss"] = s.EvalLoss
		}
		b, _ := json.Marshal(rec)
		fmt.Fprintf(p.log, "%s\n", b)
	}
}

func (p *runProgress) Saved(dir string, step int) {
	fmt.Fprintf(p.stdout, "saved %s after step %d\n", dir, step)
}

// close stops catching signals and closes the log, returning the exit
// status its failure calls for.
func (p *runProgress) close(stderr io.Writer) int {
	if p.sigs != nil {
		signal.Stop(p.sigs)
		close(p.done)
	}
	if p.log == nil {
		return exitOK
	}
	err := p.log.Err()
	if cerr := p.logFile.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintf(stderr, "amspc run: --log: writing %s: %v\n", p.logPath, err)
		return exitUser
	}
	return exitOK
}

// stopSignal is why a run stopped: the signal this process caught.
type stopSignal struct{ sig os.Signal }

func (s stopSignal) Error() string { return "caught " + s.sig.String() }

// cpuProfile is --cpuprofile's profile, from the steady state's first
// step to the run's end, however it ends.
type cpuProfile struct{ end func() error }

func (p *cpuProfile) start(path string) error {
	end, err := startCPUProfile(path)
	if err != nil {
		return fmt.Errorf("--cpuprofile: %w", err)
	}
	p.end = end
	return nil
}

// stop ends a profile that started, returning the exit status its
// failure calls for.
func (p *cpuProfile) stop(stderr io.Writer) int {
	if p.end == nil {
		return exitOK
	}
	if err := p.end(); err != nil {
		fmt.Fprintf(stderr, "amspc run: --cpuprofile: %v\n", err)
		return exitUser
	}
	return exitOK
}

// writeTrace writes what tr recorded to --trace's file (under MPI, this
// process's rank's: FILE.rank<R>), returning the exit status its failure
// calls for. The trace has amspc trace's processes (rank r is pid r),
// threads (a stream each), event names and categories for the same
// instructions, so a plan's predicted trace and the run's open side by
// side; it adds the records, waits and loads, and each event's step. Its
// times are this process's wall clock from the first traced step's start.
func (o *runOptions) writeTrace(b *codegen.Bundle, tr *engine.Trace, pw *procWorld, stdout, stderr io.Writer) int {
	path := o.trace
	ranks := make([]int, b.Topo.Ranks())
	for r := range ranks {
		ranks[r] = r
	}
	if o.collectives == collectivesStandIn {
		ranks = []int{0}
	}
	if pw != nil {
		path = fmt.Sprintf("%s.rank%d", path, pw.rank)
		ranks = []int{pw.rank}
	}
	first, n := tr.Recorded()
	steps, what := "none", "no step (the run stopped before the steady state)"
	switch {
	case n == 1:
		steps = fmt.Sprint(first)
		what = "step " + steps
	case n > 1:
		steps = fmt.Sprintf("%d-%d", first, first+n-1)
		what = "steps " + steps
	}
	spans := tr.Spans()
	err := outfile.Write(path, nil, func(w io.Writer) error {
		clock := "wall time of the host (CPU ranks), from the start of the first step traced"
		if o.device != "cpu" {
			clock = "the device's timestamps around each instruction's work (CUDA events), each step's from its start on the device, placed at the host time the step began"
		}
		tw := simulator.NewTraceWriter(w, "trace", "measured by amspc run --trace", "model", b.Model, "plan", b.Plan,
			"steps", steps, "clock", clock)
		stages := map[*ir.Program][]string{}
		for _, r := range ranks {
			tw.Rank(r)
			p := b.Template(r)
			if stages[p] == nil {
				stages[p] = compiler.StageNames(p)
			}
			for len(spans) > 0 && spans[0].Rank < r {
				spans = spans[1:]
			}
			for ; len(spans) > 0 && spans[0].Rank == r; spans = spans[1:] {
				sp := &spans[0]
				in := sp.Instr
				stage := ""
				if in.Stage >= 0 && int(in.Stage) < len(stages[p]) {
					stage = stages[p][in.Stage]
				}
				args := []simulator.TraceArg{{Key: "step", Val: int64(sp.Step)}}
				if in.Op == ir.Record || in.Op == ir.Wait {
					args = append(args, simulator.TraceArg{Key: "event", Val: int64(in.Event)})
				}
				tw.Span(r, &simulator.Span{Stream: sp.Stream, Index: sp.Index, Start: sp.Start.Seconds(), Dur: sp.Dur.Seconds(),
					Name: simulator.SpanName(p, in), Stage: stage}, args...)
			}
		}
		return tw.Close()
	})
	if err != nil {
		fmt.Fprintf(stderr, "amspc run: --trace: %v\n", err)
		return exitUser
	}
	who := fmt.Sprintf("%d ranks", len(ranks))
	if pw != nil {
		who = fmt.Sprintf("rank %d (every rank writes its own %s.rank<R>)", pw.rank, o.trace)
	}
	fmt.Fprintf(stdout, "wrote %s: %s as measured on %s; open it in https://ui.perfetto.dev beside amspc trace's plan\n", path, what, who)
	return exitOK
}

// isPlan reports whether path names a plan bundle or compile's output
// directory rather than a model file.
func isPlan(path string) bool {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return true
	}
	return strings.HasSuffix(path, ".amspplan")
}

// loadTokens reads the training data: a token file of uint16 little-endian
// tokens (.bin, .tok), any other file as bytes, or the embedded corpus.
// evaluation resolves what the run evaluates (o.eval; nil: nothing)
// from --eval-data, --eval-tokens and the train section's eval_tokens,
// which hold the data's last tokens out: it returns the tokens left to
// train on, and their description.
func (o *runOptions) evaluation(plan *trainPlan, tokens []int32, what string) ([]int32, string, error) {
	held := plan.evalTokens
	if o.set["eval-tokens"] {
		held = o.evalTokens
	}
	every := plan.evalEvery
	if o.set["eval-every"] {
		every = o.evalEvery
	}
	seq := plan.bundle.Train.SeqLen
	var eval []int32
	switch {
	case o.evalData != "" && o.set["eval-tokens"]:
		return nil, "", fmt.Errorf("--eval-data and --eval-tokens: evaluate a file, or tokens held out of the data, not both")
	case o.evalData != "":
		e, _, err := loadTokensWith(o.evalData, "", o.tk)
		if err != nil {
			return nil, "", fmt.Errorf("--eval-data: %w", err)
		}
		eval = e
	case held > 0:
		if held < seq+1 || int64(len(tokens))-held < seq+1 {
			return nil, "", fmt.Errorf("eval_tokens %d: the held-out part and the rest of the %d tokens must each hold a window of %d", held, len(tokens), seq+1)
		}
		eval = tokens[int64(len(tokens))-held:]
		tokens = tokens[:int64(len(tokens))-held]
		what += fmt.Sprintf(", less the last %d tokens held out for evaluation", held)
	case o.set["eval-every"] || o.set["eval-batches"]:
		return nil, "", fmt.Errorf("--eval-every and --eval-batches need held-out data: --eval-data PATH, --eval-tokens N or the train section's eval_tokens")
	default:
		return tokens, what, nil
	}
	o.eval = &engine.Evaluation{Tokens: eval, Every: int(every), Batches: o.evalBatches}
	return tokens, what, nil
}

func loadTokens(flagPath, trainPath string) ([]int32, string, error) {
	return loadTokensWith(flagPath, trainPath, nil)
}

// loadTokensWith reads the data: amspc tokenize's token files (checked
// against tk's hash when given), llm.c's .bin (its 256-int32 header),
// nanoGPT's raw uint16 .bin or .tok (extensions in any case), else text:
// encoded by tk, or bytes (vocab 256) without one.
func loadTokensWith(flagPath, trainPath string, tk *tokenizer.Tokenizer) ([]int32, string, error) {
	path := flagPath
	if path == "" {
		path = trainPath
	}
	if path == "" {
		b := amspc.DefaultCorpus()
		if tk != nil {
			ids := tk.Encode(string(b))
			return ids, fmt.Sprintf("the embedded corpus (%d bytes, %d tokens)", len(b), len(ids)), nil
		}
		return bytesToTokens(b), fmt.Sprintf("the embedded corpus (%d bytes)", len(b)), nil
	}
	b, err := readBounded(path, maxData)
	if err != nil {
		return nil, "", err
	}
	switch ext := tokenizer.Ext(path); {
	case tokenizer.IsFile(b):
		ids, fi, err := tokenizer.DecodeFile(b)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %v", path, err)
		}
		if tk != nil && fi.Hash != tk.Hash() {
			return nil, "", fmt.Errorf("%s: made by another tokenizer (SHA-256 %s...) than --tokenizer's (%s...)", path, fi.Hash[:12], tk.Hash()[:12])
		}
		return ids, fmt.Sprintf("%s (%d tokens)", path, len(ids)), nil
	case (ext == ".bin" || ext == ".tok") && tokenizer.IsLLMC(b):
		ids, err := tokenizer.DecodeLLMC(b)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %v", path, err)
		}
		return ids, fmt.Sprintf("%s (llm.c, %d tokens)", path, len(ids)), nil
	case ext == ".bin" || ext == ".tok":
		if len(b)%2 != 0 {
			return nil, "", fmt.Errorf("%s: a token file holds 2 bytes per token, but has %d bytes", path, len(b))
		}
		out := make([]int32, len(b)/2)
		for i := range out {
			out[i] = int32(binary.LittleEndian.Uint16(b[2*i:]))
		}
		return out, fmt.Sprintf("%s (%d tokens)", path, len(out)), nil
	case tk != nil:
		ids := tk.Encode(string(b))
		return ids, fmt.Sprintf("%s (%d bytes, %d tokens)", path, len(b), len(ids)), nil
	}
	return bytesToTokens(b), fmt.Sprintf("%s (%d bytes)", path, len(b)), nil
}

func bytesToTokens(b []byte) []int32 {
	out := make([]int32, len(b))
	for i, c := range b {
		out[i] = int32(c)
	}
	return out
}

func pathExt(p string) string {
	for i := len(p) - 1; i >= 0 && p[i] != '/'; i-- {
		if p[i] == '.' {
			return p[i:]
		}
	}
	return ""
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// maxData bounds the training data amspc run reads: it holds the whole
// stream in memory as int32 tokens (streaming is not supported yet).
var maxData int64 = 1 << 30

// readBounded reads a file of at most limit bytes. A regular file larger
// than that is refused from its size; a device or pipe (/dev/zero) is
// refused once it has given more.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	tooBig := fmt.Errorf("%s: more than %s of data; amspc run holds the data in memory and reads at most that much (streaming is not supported yet)", path, cost.GiB(float64(limit)))
	if fi.Mode().IsRegular() && fi.Size() > limit {
		return nil, tooBig
	}
	if fi.IsDir() {
		return nil, fmt.Errorf("%s is a directory, not a data file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, tooBig
	}
	return b, nil
}

// stopped ends a run stopped by a signal at a step boundary (after a
// checkpoint when --save is given): it says so, and where it saved, and
// returns 128 + the signal's number (130 for SIGINT, 143 for SIGTERM),
// as a shell would.
func stopped(res *engine.TrainResult, save string, bar bool, stdout, stderr io.Writer) int {
	name, code := "a signal on another process", 130
	var caught stopSignal
	if errors.As(res.StopCause, &caught) {
		if s, ok := caught.sig.(syscall.Signal); ok {
			name, code = s.String(), 128+int(s)
		}
	}
	msg := fmt.Sprintf("stopped by %s after step %d", name, res.Run.Steps())
	if save != "" {
		msg += "; saved " + save
	} else {
		msg += "; nothing saved (no --save)"
	}
	// On stdout, which a log may capture, and on stderr, which the user
	// sees: once where the two are the same terminal or file.
	// Under mpirun or srun both streams reach the launcher's terminal:
	// stderr alone says it there.
	if bar {
		fmt.Fprintln(stdout) // ends the live bar's line
	}
	if _, launched := launchedSize(); !launched && !sameFile(stdout, stderr) {
		fmt.Fprintln(stdout, msg)
	}
	fmt.Fprintf(stderr, "amspc run: %s\n", msg)
	return code
}

// closed reports whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// startCPUProfile profiles this process's CPU into path until the
// returned function is called.
func startCPUProfile(path string) (stop func() error, err error) {
	f, err := outfile.Create(path, nil)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Abort()
		return nil, err
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Commit()
	}, nil
}
