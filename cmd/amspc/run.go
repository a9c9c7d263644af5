package main

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"amspc"
	"amspc/codegen"
	"amspc/cost"
	"amspc/engine"
	"amspc/internal/outfile"
	"amspc/passes"
	"amspc/simulator"
)

// runRun compiles a job and trains it on CPU ranks (goroutines of this
// process), printing the loss of every step.
func runRun(args []string, stdout, stderr io.Writer) (status int) {
	fs := newFlagSet("run", "usage: amspc run [--steps N] [--device cpu|cuda|sim [--tensor-cores]] [--cpuprofile FILE] [--data PATH] [--log FILE] [--progress MODE] [--save DIR [--save-every K] [--overwrite]] [--resume DIR] [--shard PLAN] [--cluster FILE] [--train FILE] FILE|PLAN", stderr)
	var lf loadFlags
	lf.register(fs)
	steps := fs.Int("steps", 0, "train `N` steps (default: the train section's steps; 0 with --save writes the initial weights)")
	data := fs.String("data", "", "train on `PATH`: text as bytes (vocab 256), or a .bin/.tok file of uint16 little-endian tokens (default: the embedded README and docs)")
	logPath := fs.String("log", "", "append one JSON object per step to `FILE`")
	lf.registerShard(fs, "train under")
	save := fs.String("save", "", "write a checkpoint into `DIR` at the end (and every --save-every steps)")
	saveEvery := fs.Int("save-every", 0, "also checkpoint every `K` steps")
	overwrite := fs.Bool("overwrite", false, "with --save, replace a checkpoint in DIR of another model, of a later step than this run starts from, or of the step it starts at when it did not resume from DIR")
	resume := fs.String("resume", "", "resume from the checkpoint in `DIR` (saved under any plan or rank count)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the training steps after the first to `FILE` (go tool pprof reads it; under MPI, each rank appends .rank<R>)")
	tensorCores := fs.Bool("tensor-cores", false, "with --device cuda or sim, run bf16 attention and its gradient on tensor cores (mma.cu: head dims a multiple of 16 up to 128; probabilities rounded to bf16 as PyTorch's bf16 attention does; checked on the simulated GPU, not yet on a GPU)")
	device := fs.String("device", "cpu", "run the ranks' kernels on `DEVICE`: cpu, cuda (NVIDIA GPUs: rank r on GPU r mod the GPUs), or sim (the CUDA backend on a GPU simulated on the CPU, to check the GPU path without one; slow)")
	progress := fs.String("progress", "auto", "`MODE` of the progress: bar (a live bar rewritten in place), lines (a line a step), or auto: a bar when standard output is a terminal and no launcher (mpirun, srun) started the process")
	file, ok := oneFile(fs, args)
	if !ok {
		return exitUser
	}
	for _, o := range []struct{ flag, path string }{{"--log", *logPath}, {"--cpuprofile", *cpuProfile}} {
		if err := notAnInput(o.flag, o.path, file, *data, lf.cluster, lf.train, lf.profile); err != nil {
			fmt.Fprintf(stderr, "amspc run: %v\n", err)
			return exitUser
		}
	}
	// A closed pipe on standard output (amspc run ... | head) does not
	// kill the run: its writes fail, the training and the checkpoints go
	// on, and the run ends with status 1 saying so.
	signal.Ignore(syscall.SIGPIPE)
	defer signal.Reset(syscall.SIGPIPE)
	var bar bool
	switch *progress {
	case "auto":
		// Under mpirun and srun every rank's stdout is the launcher's
		// pty, not the user's terminal: a bar there fills logs with
		// carriage returns.
		_, launched := launchedSize()
		bar = isTerminal(stdout) && !launched
	case "bar":
		bar = true
	case "lines":
	default:
		fmt.Fprintf(stderr, "amspc run: --progress must be auto, bar or lines, not %q\n", *progress)
		return exitUser
	}
	var newBackend func(int) (engine.Backend, error)
	var gpuPeak func() int64
	switch *device {
	case "cpu":
	case "cuda":
		var err error
		if newBackend, gpuPeak, err = openCUDA(engine.DeviceOptions{TensorCoreAttention: *tensorCores}); err != nil {
			fmt.Fprintf(stderr, "amspc run: --device cuda: %v\n", err)
			return exitUser
		}
	case "sim":
		var err error
		if newBackend, err = openSim(engine.DeviceOptions{TensorCoreAttention: *tensorCores}); err != nil {
			fmt.Fprintf(stderr, "amspc run: --device sim: %v\n", err)
			return exitUser
		}
	default:
		fmt.Fprintf(stderr, "amspc run: --device must be cpu, cuda or sim, not %q\n", *device)
		return exitUser
	}
	if *tensorCores && *device == "cpu" {
		fmt.Fprintln(stderr, "amspc run: --tensor-cores needs --device cuda or sim")
		return exitUser
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case *steps < 0:
		fmt.Fprintf(stderr, "amspc run: --steps %d: want 0 or more\n", *steps)
		return exitUser
	case set["steps"] && *steps == 0 && *save == "":
		fmt.Fprintln(stderr, "amspc run: --steps 0 trains nothing; with --save DIR it writes the initial weights as a checkpoint")
		return exitUser
	case set["save-every"] && *saveEvery < 1:
		fmt.Fprintf(stderr, "amspc run: --save-every %d: want 1 or more\n", *saveEvery)
		return exitUser
	case set["save-every"] && *save == "":
		fmt.Fprintln(stderr, "amspc run: --save-every needs --save DIR")
		return exitUser
	case *overwrite && *save == "":
		fmt.Fprintln(stderr, "amspc run: --overwrite needs --save DIR")
		return exitUser
	}
	if *save != "" {
		// Found now, not after training.
		if err := engine.CheckWritable(*save); err != nil {
			fmt.Fprintf(stderr, "amspc run: --save: %v\n", err)
			return exitUser
		}
	}
	// A plan bundle (or compile's output directory) runs as it is; a
	// model file is compiled first.
	var bundle *codegen.Bundle
	var predicted *simulator.Timeline
	dataPath, profilePath := "", ""
	var err error
	if isPlan(file) {
		if lf.shard != "" || lf.cluster != "" || lf.train != "" {
			fmt.Fprintln(stderr, "amspc run: --shard, --cluster and --train apply to model files, not to a compiled plan")
			return exitUser
		}
		if bundle, err = readBundle(file); err != nil {
			fmt.Fprintf(stderr, "amspc run: %v\n", err)
			return exitUser
		}
		profilePath = lf.profile
		if predicted, err = simulateBundle(bundle, 0, lf.profile); err != nil {
			fmt.Fprintf(stderr, "amspc run: %v\n", err)
			return exitUser
		}
	} else {
		job, err := lf.load(file)
		if err != nil {
			return report(stderr, err)
		}
		cj, st := compileJob(file, job, passes.Options{}, cost.DefaultConfig, stderr)
		if st != exitOK {
			return st
		}
		bundle, predicted, dataPath, profilePath = cj.Bundle, cj.Timeline, job.Train.Data, job.Cluster.Profile
	}
	tl, topo, M, tr := predicted, bundle.Topo, bundle.Micro, bundle.Train
	tokens, what, err := loadTokens(*data, dataPath)
	if err != nil {
		fmt.Fprintf(stderr, "amspc run: %v\n", err)
		return exitUser
	}
	n := *steps
	if !set["steps"] {
		n = int(tr.Steps)
	}
	r := &engine.Run{Bundle: bundle, Seed: uint64(tr.Seed),
		Data:       &engine.Data{Tokens: tokens, SeqLen: int(tr.SeqLen), MicroBatch: int(tr.MicroBatch), Global: int(tr.GlobalBatch)},
		NewBackend: newBackend}
	// Under mpirun or srun (an mpi build), this process runs one rank;
	// only rank 0 prints and logs.
	pw, err := openWorld(bundle)
	agreed := false // every process ends here, with the same status
	// refuse reports an error that every process finds alike (in the
	// input or the plan): rank 0 prints it, and no process ends the job
	// before it has.
	refuse := func(err error) int {
		agreed = true
		if pw == nil || pw.rank == 0 {
			fmt.Fprintf(stderr, "amspc run: %v\n", err)
		}
		if pw != nil {
			pw.barrier()
		}
		return exitUser
	}
	if err != nil {
		st := refuse(err)
		if pw != nil {
			pw.finish() // MPI started, the world refused: end it cleanly
		}
		return st
	}
	local := topo.Ranks()
	if pw != nil {
		defer func() {
			// An end every process agreed on finishes MPI and exits with
			// its status; any other failure ends the whole job.
			if status == exitOK || agreed {
				pw.barrier()
				pw.finish()
			} else {
				pw.abort(status)
			}
		}()
		r.World, local = pw.world, 1
		if pw.rank != 0 {
			stdout, *logPath = io.Discard, ""
		}
	}
	if err := r.Check(); err != nil {
		return refuse(err)
	}
	if err := engine.CheckVocab(bundle, tokens); err != nil {
		return refuse(err)
	}
	// The local backend holds every rank in this process: refuse a plan
	// that cannot fit before allocating any of it.
	need := tl.PeakHostBytes * float64(local)
	if avail := availableBytes(); need > avail {
		// Per process (machines differ), so every process that finds it
		// says so, naming its rank under MPI.
		who := "amspc run"
		if pw != nil {
			who = fmt.Sprintf("amspc run: rank %d", pw.rank)
		}
		fmt.Fprintf(stderr, "%s: the plan needs about %s of memory in this process (%d ranks x %s at their peak, every element stored in 4 bytes on CPU ranks), more than the %s available\n",
			who, cost.GiB(need), local, cost.GiB(tl.PeakHostBytes), cost.GiB(avail))
		return exitUser
	}
	if err := r.Start(); err != nil {
		fmt.Fprintf(stderr, "amspc run: %v\n", err)
		return exitUser
	}
	first := 0
	if *resume != "" {
		if err := r.Resume(*resume); err != nil {
			return refuse(fmt.Errorf("resume: %w", err)) // agreed by every process
		}
		first = r.Steps()
		fmt.Fprintf(stdout, "resumed from %s after step %d\n", *resume, first)
		if first >= n && n > 0 {
			fmt.Fprintf(stdout, "nothing to do: the checkpoint is at step %d and the run ends at step %d (--steps)\n", first, n)
			return exitOK
		}
	}
	if *save != "" {
		// Before the first step: DIR is this job's (not another model's
		// checkpoint, nor a later step's, nor the start step's unless
		// resumed from DIR; --overwrite allows them), locked until the
		// run ends, however it ends.
		release, err := r.PrepareSave(*save, *resume, *overwrite, stderr)
		if err != nil {
			return refuse(fmt.Errorf("--save: %w", err)) // agreed by every process
		}
		defer release()
	}
	checkpoint := func() bool {
		if err := r.Save(*save); err != nil {
			refuse(fmt.Errorf("save: %w", err)) // agreed by every process
			return false
		}
		return true
	}
	var logw *outfile.Checked
	if *logPath != "" {
		// Appended to step by step, so written in place, not atomically;
		// a write that fails stops the log (training goes on) and the run
		// ends with exit status 1 saying why.
		f, err := os.OpenFile(*logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintf(stderr, "amspc run: --log: %v\n", err)
			return exitUser
		}
		logw = &outfile.Checked{W: f}
		defer func() {
			err := logw.Err()
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				fmt.Fprintf(stderr, "amspc run: --log: writing %s: %v\n", *logPath, err)
				status = max(status, exitUser)
			}
		}()
	}
	where := "CPU ranks"
	switch {
	case pw != nil:
		where = "MPI processes"
	case *device == "cuda":
		where = "ranks on CUDA GPUs"
	case *device == "sim":
		where = "ranks on simulated GPUs"
	}
	fmt.Fprintf(stdout, "%s: training %s on %d %s (%d x %d), plan %s, M = %d, %d steps on %s\n",
		file, bundle.Model, topo.Ranks(), where, topo.Nodes, topo.GPUsPerNode, bundle.Plan, M, n, what)
	tokPerStep := float64(tr.GlobalBatch * tr.SeqLen)
	// SIGINT, SIGTERM and SIGHUP (the terminal closed) stop the run at
	// the next step boundary (every process at the same one), after a
	// checkpoint when --save is given.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	var caught os.Signal
	// The profile starts after the first step when there are more: the
	// first step's page faults and allocations are not the steady state.
	profileAt := first
	if n-first > 1 {
		profileAt = first + 1
	}
	stopProfile := func() error { return nil }
	defer func() {
		if err := stopProfile(); err != nil {
			fmt.Fprintf(stderr, "amspc run: --cpuprofile: %v\n", err)
			status = max(status, exitUser)
		}
	}()
	start := time.Now()
	var stepTimes []float64
	for i := first; i < n; i++ {
		if i > first {
			select {
			case caught = <-sigs:
			default:
			}
			stop, err := r.AgreeStop(caught != nil)
			if err != nil {
				fmt.Fprintf(stderr, "amspc run: step %d: %v\n", i+1, err)
				return exitUser
			}
			if stop {
				// The stop is agreed: rank 0 says so.
				said := stderr
				if pw != nil && pw.rank != 0 {
					said = io.Discard
				}
				agreed = true
				return stopped(r, caught, *save, checkpoint, bar, stdout, said)
			}
		}
		if *cpuProfile != "" && i == profileAt {
			path := *cpuProfile
			if pw != nil {
				path = fmt.Sprintf("%s.rank%d", path, pw.rank)
			}
			stop, err := startCPUProfile(path)
			if err != nil {
				fmt.Fprintf(stderr, "amspc run: --cpuprofile: %v\n", err)
				return exitUser
			}
			stopProfile = stop
		}
		t0 := time.Now()
		loss, err := r.Step()
		if err != nil {
			// Across processes, a failing rank has reported its error
			// when it aborted the job.
			if pw == nil || !closed(pw.world.Done()) {
				fmt.Fprintf(stderr, "amspc run: step %d: %v\n", i+1, err)
			}
			return exitUser
		}
		dt := time.Since(t0).Seconds()
		stepTimes = append(stepTimes, dt)
		elapsed := time.Since(start).Seconds()
		remaining := elapsed / float64(i+1-first) * float64(n-i-1)
		line := fmt.Sprintf("step %4d/%d  loss %.4f  %8.0f tokens/s  %6.2fs elapsed  %6.2fs left",
			i+1, n, loss, tokPerStep/dt, elapsed, remaining)
		if bar {
			// A live bar: one line rewritten in place, the last kept.
			done := (i + 1) * 30 / n
			fmt.Fprintf(stdout, "\r[%s%s] %s", strings.Repeat("#", done), strings.Repeat(" ", 30-done), line)
			if i+1 == n {
				fmt.Fprintln(stdout)
			}
		} else {
			fmt.Fprintln(stdout, line)
		}
		if logw != nil {
			b, _ := json.Marshal(map[string]any{"step": i + 1, "loss": loss, "tokens_per_s": tokPerStep / dt, "step_time_s": dt})
			fmt.Fprintf(logw, "%s\n", b)
		}
		if *save != "" && *saveEvery > 0 && (i+1)%*saveEvery == 0 && i+1 < n {
			if !checkpoint() {
				return exitUser
			}
			fmt.Fprintf(stdout, "saved %s after step %d\n", *save, r.Steps())
		}
	}
	if *save != "" {
		if !checkpoint() {
			return exitUser
		}
		fmt.Fprintf(stdout, "saved %s after step %d\n", *save, r.Steps())
	}
	if len(stepTimes) == 0 {
		return exitOK // --steps 0 --save: the initial weights
	}
	var peak int64
	for _, p := range r.PeakBytes() {
		peak = max(peak, p)
	}
	fmt.Fprintf(stdout, "measured: step %s (median), peak %s per rank; predicted by the plan: step %s, peak %s per rank\n",
		dur(median(stepTimes)), cost.GiB(float64(peak)), dur(tl.Step), cost.GiB(tl.PeakBytes))
	if gpuPeak != nil {
		fmt.Fprintf(stdout, "GPU memory: at most %s allocated by a rank (its buffers at their device sizes and the kernels' scratch)\n", cost.GiB(float64(gpuPeak())))
	}
	if profilePath != "" {
		fmt.Fprintf(stdout, "(the prediction uses the profile %s)\n", profilePath)
	} else {
		fmt.Fprintln(stdout, "(the prediction uses the cluster's nominal figures; measure this machine with amspc profile and pass --profile)")
	}
	var top []string
	for i, t := range r.Timings(0) {
		if i == 6 {
			break
		}
		top = append(top, fmt.Sprintf("%s %s (%d)", t.Name, dur(t.Seconds), t.Count))
	}
	if *device == "cpu" {
		fmt.Fprintf(stdout, "rank 0's time by instruction: %s\n", strings.Join(top, ", "))
	} else {
		// A device runs its work after the host issues it: an
		// instruction's host time is its issue and whatever wait for the
		// device it does (amspc profile --device times kernels alone).
		fmt.Fprintf(stdout, "rank 0's host time by instruction (issue, and waits for the device): %s\n", strings.Join(top, ", "))
	}
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
func loadTokens(flagPath, trainPath string) ([]int32, string, error) {
	path := flagPath
	if path == "" {
		path = trainPath
	}
	if path == "" {
		b := amspc.DefaultCorpus()
		return bytesToTokens(b), fmt.Sprintf("the embedded corpus (%d bytes)", len(b)), nil
	}
	b, err := readBounded(path, maxData)
	if err != nil {
		return nil, "", err
	}
	if ext := pathExt(path); ext == ".bin" || ext == ".tok" {
		if len(b)%2 != 0 {
			return nil, "", fmt.Errorf("%s: a token file holds 2 bytes per token, but has %d bytes", path, len(b))
		}
		out := make([]int32, len(b)/2)
		for i := range out {
			out[i] = int32(binary.LittleEndian.Uint16(b[2*i:]))
		}
		return out, fmt.Sprintf("%s (%d tokens)", path, len(out)), nil
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
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
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

// stopped ends a run stopped by a signal at a step boundary: it writes a
// checkpoint when --save is given, says where, and returns 128 + the
// signal's number (130 for SIGINT, 143 for SIGTERM), as a shell would.
func stopped(r *engine.Run, sig os.Signal, save string, checkpoint func() bool, bar bool, stdout, stderr io.Writer) int {
	name, code := "a signal on another process", 130
	if s, ok := sig.(syscall.Signal); ok {
		name, code = s.String(), 128+int(s)
	}
	msg := fmt.Sprintf("stopped by %s after step %d", name, r.Steps())
	if save != "" {
		if !checkpoint() {
			return exitUser
		}
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
