//go:build mpi

package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"amspc/codegen"
	"amspc/compiler"
	"amspc/cost"
	"amspc/engine"
)

// The MPI tests launch the amspc binary under Open MPI's mpirun, 8
// processes on this machine (--oversubscribe: more processes than cores).
// `go test -tags mpi ./cmd/amspc -run MPI` (.ci/run does).

// mpiBinary builds amspc with -tags mpi, once for all the tests here.
func mpiBinary(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Fatalf("mpirun not found (install openmpi-bin): %v", err)
	}
	mpiBuild.Do(func() {
		dir, err := os.MkdirTemp("", "amspc-mpi-")
		if err != nil {
			mpiBuild.err = err
			return
		}
		buildDirs = append(buildDirs, dir)
		mpiBuild.bin = filepath.Join(dir, "amspc")
		if out, err := exec.Command("go", "build", "-tags", "mpi", "-o", mpiBuild.bin, ".").CombinedOutput(); err != nil {
			mpiBuild.err = fmt.Errorf("go build -tags mpi: %v\n%s", err, out)
		}
	})
	if mpiBuild.err != nil {
		t.Fatal(mpiBuild.err)
	}
	return mpiBuild.bin
}

var mpiBuild struct {
	sync.Once
	bin string
	err error
}

// mpiEnv lets Open MPI run as root (CI containers), which it refuses
// without both variables, over shared memory and TCP only.
var mpiEnv = []string{"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "OMPI_MCA_btl=self,vader,tcp"}

// mpirun runs bin with args on n processes and returns its output.
func mpirun(t *testing.T, n int, bin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("mpirun", append([]string{"--oversubscribe", "-n", fmt.Sprint(n), bin}, args...)...)
	cmd.Env = append(os.Environ(), mpiEnv...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// mpiJob is mpirun running in the background, its output collected.
type mpiJob struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan error
}

// startMPI starts bin with args on n processes; the test's end kills
// whatever is left of it.
func startMPI(t *testing.T, n int, bin string, args ...string) *mpiJob {
	t.Helper()
	j := &mpiJob{cmd: exec.Command("mpirun", append([]string{"--oversubscribe", "-n", fmt.Sprint(n), bin}, args...)...), done: make(chan error, 1)}
	j.cmd.Env = append(os.Environ(), mpiEnv...)
	j.cmd.Stdout, j.cmd.Stderr = j, j
	if err := j.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { j.done <- j.cmd.Wait() }()
	t.Cleanup(func() { j.cmd.Process.Kill() })
	return j
}

func (j *mpiJob) Write(p []byte) (int, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.out.Write(p)
}

// output is what the job printed so far.
func (j *mpiJob) output() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.out.String()
}

// rankPIDs are the pids of bin's processes running "run" (not mpirun's).
func rankPIDs(bin string) []int {
	b, _ := exec.Command("pgrep", "-f", "^"+bin+" run").Output()
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		var pid int
		fmt.Sscan(f, &pid)
		pids = append(pids, pid)
	}
	return pids
}

// endsFailing waits up to within for the job, which must end with a
// non-zero status after what happened to it.
func (j *mpiJob) endsFailing(t *testing.T, within time.Duration, after string) {
	t.Helper()
	select {
	case err := <-j.done:
		if err == nil {
			t.Errorf("the job exited 0 after %s", after)
		}
	case <-time.After(within):
		t.Fatalf("the job still runs %s after %s:\n%s", within, after, j.output())
	}
}

// TestMPITrainsLikeLocal: every distinct plan of tiny (the paper's space,
// ZeRO++'s secondary copy, both recompute choices, the baselines and the
// MILP's plan), compiled to a bundle, trains on 8 MPI processes exactly as
// on 8 local ranks: the logged losses are the same float64 bits, 20 steps
// (3 under -short).
func TestMPITrainsLikeLocal(t *testing.T) {
	bin := mpiBinary(t)
	steps := 20
	if testing.Short() {
		steps = 3
	}
	lf := loadFlags{}
	job, err := lf.load("../../testdata/models/tiny.amsp")
	if err != nil {
		t.Fatal(err)
	}
	plans, err := validationPlans(job, true)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	seen := map[string]bool{}
	for _, p := range plans {
		r, err := compiler.Compile(job, p, compiler.Options{Config: cost.DefaultConfig})
		if err != nil {
			continue
		}
		key := fmt.Sprintf("%s %v %d", r.Bundle.Plan, p.Recompute, r.Micro)
		if seen[key] {
			continue
		}
		seen[key] = true
		t.Run(strings.ReplaceAll(key, " ", "_"), func(t *testing.T) {
			bundle := filepath.Join(dir, fmt.Sprintf("p%d.amspplan", len(seen)))
			if err := codegen.WriteFile(bundle, r.Bundle); err != nil {
				t.Fatal(err)
			}
			mlog, llog := bundle+".mpi.jsonl", bundle+".local.jsonl"
			if out, err := mpirun(t, 8, bin, "run", "--steps", fmt.Sprint(steps), "--log", mlog, bundle); err != nil {
				t.Fatalf("mpirun: %v\n%s", err, out)
			}
			var stdout, stderr bytes.Buffer
			if st := run([]string{"run", "--steps", fmt.Sprint(steps), "--log", llog, bundle}, &stdout, &stderr); st != exitOK {
				t.Fatalf("local: %s", stderr.String())
			}
			m, l := lossLines(t, mlog), lossLines(t, llog)
			if len(m) != steps || strings.Join(m, "\n") != strings.Join(l, "\n") {
				t.Errorf("losses on MPI processes:\n%s\non local ranks:\n%s", strings.Join(m, "\n"), strings.Join(l, "\n"))
			}
		})
	}
	if len(seen) < 20 {
		t.Errorf("only %d distinct plans", len(seen))
	}
}

// TestMPITensorParallel: tiny's tensor-parallel plans (tp 2 with ZeRO-3
// over the other ranks, tp 4 with DDP, tp 2 with sequence parallelism
// and a 2/2/8-like plan), compiled to bundles, train on 8
// MPI processes to the bits of 8 local ranks, and within 1e-5 of one
// rank; the checkpoint the processes save resumes on one rank, its next
// step within 1e-5 of the uninterrupted run's.
func TestMPITensorParallel(t *testing.T) {
	bin := mpiBinary(t)
	const steps = 3
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	one := filepath.Join(dir, "one.jsonl")
	oneCluster := filepath.Join(dir, "one.amsp")
	if err := os.WriteFile(oneCluster, []byte("cluster one { nodes = 1 gpus_per_node = 1 gpu = \"cpu\" }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if st := run([]string{"run", "--steps", fmt.Sprint(steps + 1), "--cluster", oneCluster, "--shard", "ddp", "--log", one, "../../testdata/models/tiny.amsp"}, &stdout, &stderr); st != exitOK {
		t.Fatalf("one rank: %s", stderr.String())
	}
	want := lossLines(t, one)
	for i, shard := range []string{"{ tensor = 2, params = 2x2, grads = 2x2, optim = 2x2 }", "{ tensor = 4, params = 1, grads = 1, optim = 1 }", "{ tensor = 2, sequence = true, params = 2, grads = 2, optim = 2x2 }"} {
		bundle := filepath.Join(dir, fmt.Sprintf("tp%d", i))
		stdout.Reset()
		stderr.Reset()
		if st := run([]string{"compile", "--shard", shard, "-o", bundle, "../../testdata/models/tiny.amsp"}, &stdout, &stderr); st != exitOK {
			t.Fatalf("%s: compile: %s", shard, stderr.String())
		}
		mlog, llog := bundle+".mpi.jsonl", bundle+".local.jsonl"
		ck := bundle + ".ck"
		if out, err := mpirun(t, 8, bin, "run", "--steps", fmt.Sprint(steps), "--log", mlog, "--save", ck, bundle); err != nil {
			t.Fatalf("%s: mpirun: %v\n%s", shard, err, out)
		}
		// The processes' checkpoint, resumed on one rank: its next step
		// is the uninterrupted one-rank run's.
		rlog := bundle + ".resumed.jsonl"
		if st := run([]string{"run", "--steps", fmt.Sprint(steps + 1), "--resume", ck, "--cluster", oneCluster, "--shard", "ddp", "--log", rlog, "../../testdata/models/tiny.amsp"}, &stdout, &stderr); st != exitOK {
			t.Fatalf("%s: resumed on one rank: %s", shard, stderr.String())
		}
		if r := lossLines(t, rlog); len(r) != 1 {
			t.Errorf("%s: resumed for %d steps, want 1", shard, len(r))
		} else {
			var a, b float64
			fmt.Sscan(r[0], &a)
			fmt.Sscan(want[steps], &b)
			if math.Abs(a-b)/b > 1e-5 {
				t.Errorf("%s: step %d resumed on one rank from the processes' checkpoint: loss %s, uninterrupted %s", shard, steps+1, r[0], want[steps])
			}
		}
		if st := run([]string{"run", "--steps", fmt.Sprint(steps), "--log", llog, bundle}, &stdout, &stderr); st != exitOK {
			t.Fatalf("%s: local: %s", shard, stderr.String())
		}
		m, l := lossLines(t, mlog), lossLines(t, llog)
		if len(m) != steps || strings.Join(m, "\n") != strings.Join(l, "\n") {
			t.Errorf("%s: losses on MPI processes:\n%s\non local ranks:\n%s", shard, strings.Join(m, "\n"), strings.Join(l, "\n"))
		}
		for j := range m {
			var a, b float64
			fmt.Sscan(m[j], &a)
			fmt.Sscan(want[j], &b)
			if math.Abs(a-b)/b > 1e-5 {
				t.Errorf("%s step %d: loss %s on MPI processes, %s on one rank", shard, j+1, m[j], want[j])
			}
		}
	}
}

// lossLines are the "loss" fields of a --log file, as written (shortest
// representation that round-trips: equal strings are equal bits).
func lossLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		_, rest, ok := strings.Cut(line, `"loss":`)
		if !ok {
			t.Fatalf("%s: no loss in %q", path, line)
		}
		v, _, _ := strings.Cut(rest, ",")
		out = append(out, v)
	}
	return out
}

// TestMPIRefusesWrongSize: a job of 4 processes for a plan of 8 ranks is
// refused on every process before any work, with one message.
func TestMPIRefusesWrongSize(t *testing.T) {
	bin := mpiBinary(t)
	out, err := mpirun(t, 4, bin, "run", "--steps", "1", "../../testdata/models/tiny.amsp")
	if err == nil || strings.Count(out, "launch it with mpirun -n 8") != 1 || strings.Contains(out, "loss") {
		t.Errorf("status %v, output:\n%s", err, out)
	}
}

// TestMPIKilledRank: a process killed with SIGKILL in the middle of a run
// ends the whole job within 10 s, with a message naming the lost rank.
func TestMPIKilledRank(t *testing.T) {
	bin := mpiBinary(t)
	job := startMPI(t, 8, bin, "run", "--steps", "1000", "../../testdata/models/tiny.amsp")
	// Wait for training to start, then kill one rank's process.
	deadline := time.Now().Add(60 * time.Second)
	var victim int
	for victim == 0 && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
		if pids := rankPIDs(bin); strings.Contains(job.output(), "step ") && len(pids) >= 8 {
			victim = pids[len(pids)/2]
		}
	}
	if victim == 0 {
		t.Fatalf("training did not start:\n%s", job.output())
	}
	killed := time.Now()
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	job.endsFailing(t, 10*time.Second, "a rank was killed")
	if d := time.Since(killed); d > 10*time.Second {
		t.Errorf("the job took %s to end", d)
	}
	if s := job.output(); !strings.Contains(s, "exited on signal 9") || !strings.Contains(s, "rank") {
		t.Errorf("no message naming the lost rank:\n%s", s)
	}
}

// TestMPITwoMachines emulates two machines: two network namespaces
// joined by a veth pair (10.77.0.1 and 10.77.0.2), 4 processes in each,
// Open MPI over TCP only on that link, its daemons started in the other
// namespace by an rsh agent that enters it (with its own host name).
// Tiny under its 2/2/8 plan trains bitwise like local ranks, 20 steps (3
// under -short). Everything the test creates is removed at the end, and
// no traffic leaves the namespaces.
func TestMPITwoMachines(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("ip (iproute2) not found: %v", err)
	}
	bin := mpiBinary(t)
	steps := 20
	if testing.Short() {
		steps = 3
	}
	dir := t.TempDir()
	id := fmt.Sprint(os.Getpid() % 100000)
	nsA, nsB, vA, vB := "amspcA"+id, "amspcB"+id, "amspva"+id, "amspvb"+id
	sh := func(cmds ...string) {
		t.Helper()
		for _, c := range cmds {
			if out, err := exec.Command("sh", "-c", c).CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", c, err, out)
			}
		}
	}
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", nsA).Run()
		exec.Command("ip", "netns", "del", nsB).Run()
	})
	sh("ip netns add "+nsA, "ip netns add "+nsB,
		"ip link add "+vA+" type veth peer name "+vB,
		"ip link set "+vA+" netns "+nsA, "ip link set "+vB+" netns "+nsB,
		"ip -n "+nsA+" addr add 10.77.0.1/24 dev "+vA, "ip -n "+nsB+" addr add 10.77.0.2/24 dev "+vB,
		"ip -n "+nsA+" link set "+vA+" up", "ip -n "+nsB+" link set "+vB+" up",
		"ip -n "+nsA+" link set lo up", "ip -n "+nsB+" link set lo up")
	agent := filepath.Join(dir, "agent.sh")
	script := "#!/bin/sh\n# rsh agent: HOST CMD... runs CMD in HOST's namespace.\nhost=$1; shift\ncase $host in\n" +
		"10.77.0.1) ns=" + nsA + " ;;\n10.77.0.2) ns=" + nsB + " ;;\n*) echo unknown host $host >&2; exit 1 ;;\nesac\n" +
		"exec ip netns exec $ns unshare --uts sh -c \"hostname node-$ns; exec $*\"\n"
	hosts := filepath.Join(dir, "hosts")
	if err := os.WriteFile(agent, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hosts, []byte("10.77.0.1 slots=4\n10.77.0.2 slots=4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	model, err := filepath.Abs("../../testdata/models/tiny.amsp")
	if err != nil {
		t.Fatal(err)
	}
	mlog, llog := filepath.Join(dir, "mpi.jsonl"), filepath.Join(dir, "local.jsonl")
	mpi := fmt.Sprintf("hostname node-%s; mpirun -n 8 --hostfile %s --mca plm_rsh_agent %s --mca btl self,tcp"+
		" --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24"+
		" -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"+
		" sh -c 'echo host $(hostname); exec %s run --steps %d --log %s %s'", nsA, hosts, agent, bin, steps, mlog, model)
	cmd := exec.Command("ip", "netns", "exec", nsA, "unshare", "--uts", "sh", "-c", mpi)
	cmd.Env = append(os.Environ(), mpiEnv[:2]...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mpirun across two namespaces: %v\n%s", err, out)
	}
	// Four processes on each emulated machine.
	for _, ns := range []string{nsA, nsB} {
		if n := strings.Count(string(out), "host node-"+ns+"\n"); n != 4 {
			t.Errorf("%d processes on %s, want 4:\n%s", n, ns, out)
		}
	}
	var stdout, stderr bytes.Buffer
	if st := run([]string{"run", "--steps", fmt.Sprint(steps), "--log", llog, model}, &stdout, &stderr); st != exitOK {
		t.Fatalf("local: %s", stderr.String())
	}
	m, l := lossLines(t, mlog), lossLines(t, llog)
	if len(m) != steps || strings.Join(m, "\n") != strings.Join(l, "\n") {
		t.Errorf("losses on two emulated machines:\n%s\non local ranks:\n%s", strings.Join(m, "\n"), strings.Join(l, "\n"))
	}
}

// relClose compares two logs' losses within tol (relative), for plans
// whose reduction orders differ.
func relClose(t *testing.T, what string, got, want []string, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d losses, want %d", what, len(got), len(want))
	}
	for i := range got {
		var g, w float64
		fmt.Sscan(got[i], &g)
		fmt.Sscan(want[i], &w)
		if d := (g - w) / w; d > tol || d < -tol {
			t.Errorf("%s: loss %d is %s, uninterrupted %s", what, i, got[i], want[i])
		}
	}
}

// TestMPICheckpoint: 8 processes under 2/2/8 save at step 10, every
// process writing its own shards; the checkpoint resumes on 8 processes
// under the same plan bitwise like the uninterrupted run, and on 4
// processes under ZeRO-3 and on local ranks under DDP within 1e-5; a
// checkpoint those 4 processes save resumes on 8.
func TestMPICheckpoint(t *testing.T) {
	bin := mpiBinary(t)
	tiny := "../../testdata/models/tiny.amsp"
	dir := t.TempDir()
	at, end := 10, 13
	if testing.Short() {
		at, end = 3, 5
	}
	path := func(name string) string { return filepath.Join(dir, name) }
	plan := "{ params = 2, grads = 2, optim = 8 }"
	cluster4 := path("c4.amsp")
	if err := os.WriteFile(cluster4, []byte("cluster cpu_1x4 {\n  nodes = 1\n  gpus_per_node = 4\n  gpu = \"cpu\"\n  intra_node_bw = 10 GB/s\n  inter_node_bw = 1 GB/s\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun := func(n int, args ...string) {
		t.Helper()
		if out, err := mpirun(t, n, bin, append([]string{"run"}, args...)...); err != nil {
			t.Fatalf("mpirun -n %d %v: %v\n%s", n, args, err, out)
		}
	}
	mustRun(8, "--steps", fmt.Sprint(end), "--shard", plan, "--log", path("full.jsonl"), tiny)
	full := lossLines(t, path("full.jsonl"))[at:]
	mustRun(8, "--steps", fmt.Sprint(at), "--shard", plan, "--save", path("ck"), tiny)
	m, err := engine.ReadManifest(path("ck"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Step != at || len(m.Files) != 8 {
		t.Fatalf("checkpoint at step %d in %d files, want %d in 8", m.Step, len(m.Files), at)
	}
	mustRun(8, "--steps", fmt.Sprint(end), "--shard", plan, "--resume", path("ck"), "--log", path("same.jsonl"), tiny)
	if got := lossLines(t, path("same.jsonl")); strings.Join(got, " ") != strings.Join(full, " ") {
		t.Errorf("resumed on 8 processes, same plan: %v, uninterrupted %v", got, full)
	}
	mustRun(4, "--steps", fmt.Sprint(end), "--cluster", cluster4, "--shard", "zero3", "--resume", path("ck"),
		"--log", path("four.jsonl"), "--save", path("ck4"), tiny)
	relClose(t, "4 processes under ZeRO-3", lossLines(t, path("four.jsonl")), full, 1e-5)
	var stdout, stderr bytes.Buffer
	if st := run([]string{"run", "--steps", fmt.Sprint(end), "--shard", "ddp", "--resume", path("ck"), "--log", path("local.jsonl"), tiny}, &stdout, &stderr); st != exitOK {
		t.Fatalf("local: %s", stderr.String())
	}
	relClose(t, "local ranks under DDP", lossLines(t, path("local.jsonl")), full, 1e-5)
	// The 4 processes' checkpoint (step end) on 8 processes: one more step.
	mustRun(8, "--steps", fmt.Sprint(end+1), "--shard", plan, "--resume", path("ck4"), "--log", path("back.jsonl"), tiny)
	if got := lossLines(t, path("back.jsonl")); len(got) != 1 {
		t.Errorf("resumed the 4-process checkpoint: losses %v, want one", got)
	}
}

// TestMPIKilledDuringSave: a process killed while a checkpoint is being
// written (the save's directory exists, the manifest is not yet
// replaced) ends the job; the checkpoint directory still loads (the
// previous checkpoint), and the next save leaves only the new one.
func TestMPIKilledDuringSave(t *testing.T) {
	bin := mpiBinary(t)
	tiny := "../../testdata/models/tiny.amsp"
	ck := filepath.Join(t.TempDir(), "ck")
	if out, err := mpirun(t, 8, bin, "run", "--steps", "1", "--save", ck, tiny); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	job := startMPI(t, 8, bin, "run", "--steps", "1000", "--resume", ck, "--save", ck, "--save-every", "1", tiny)
	// The processes, once they run.
	var pids []int
	deadline := time.Now().Add(60 * time.Second)
	for len(pids) < 8 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		pids = rankPIDs(bin)
	}
	if len(pids) < 8 {
		t.Fatalf("the processes did not start:\n%s", job.output())
	}
	victim := pids[3]
	// Kill one as soon as a save's directory exists that the manifest
	// does not name.
	committed := func() string {
		m, err := engine.ReadManifest(ck)
		if err != nil {
			return ""
		}
		return filepath.Dir(m.Files[0].Path)
	}
	var killedStep string
	for killedStep == "" && time.Now().Before(deadline) {
		entries, _ := os.ReadDir(ck)
		cur := committed()
		for _, e := range entries {
			if e.IsDir() && strings.HasPrefix(e.Name(), "step-") && cur != "" && e.Name() != cur {
				syscall.Kill(victim, syscall.SIGKILL)
				killedStep = e.Name()
				break
			}
		}
		time.Sleep(time.Millisecond)
	}
	if killedStep == "" {
		t.Fatalf("no save was seen in progress:\n%s", job.output())
	}
	job.endsFailing(t, 10*time.Second, "a rank was killed")
	m, err := engine.ReadManifest(ck)
	if err != nil {
		t.Fatalf("the checkpoint does not load after the crash: %v", err)
	}
	if c := committed(); c == killedStep {
		t.Logf("the save in %s committed before the kill landed", killedStep)
	} else {
		t.Logf("killed during the save into %s; the checkpoint of step %d (%s) loads", killedStep, m.Step, c)
	}
	// It resumes, and the next save leaves only itself.
	if out, err := mpirun(t, 8, bin, "run", "--steps", fmt.Sprint(m.Step+1), "--resume", ck, "--save", ck, tiny); err != nil {
		t.Fatalf("resume after the crash: %v\n%s", err, out)
	}
	m2, err := engine.ReadManifest(ck)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	filepath.WalkDir(ck, func(p string, d os.DirEntry, err error) error {
		if !d.IsDir() {
			rel, _ := filepath.Rel(ck, p)
			left = append(left, filepath.ToSlash(rel))
		}
		return nil
	})
	want := []string{"manifest.json"}
	for _, f := range m2.Files {
		want = append(want, f.Path)
	}
	if strings.Join(left, " ") != strings.Join(want, " ") {
		t.Errorf("after the next save the checkpoint holds %v, want %v", left, want)
	}
}

// TestMPINaNOnOneRank: a NaN that only one rank meets (row 1 of the
// embedding table is NaN, and token 1 is in rank 5's first window alone)
// stops every process at once; the message names the rank, the op, its
// stage and micro-batch, and the source position.
func TestMPINaNOnOneRank(t *testing.T) {
	bin := mpiBinary(t)
	tiny := "../../testdata/models/tiny.amsp"
	dir := t.TempDir()
	path := func(name string) string { return filepath.Join(dir, name) }
	var stdout, stderr bytes.Buffer
	if st := run([]string{"run", "--steps", "0", "--save", path("ck0"), tiny}, &stdout, &stderr); st != exitOK {
		t.Fatal(stderr.String())
	}
	if _, err := engine.ExportCheckpoint(path("ck0"), path("w.safetensors"), false); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	if st := run([]string{"ckpt", "import", path("w.safetensors"), "--model", tiny, "-o", path("ck")}, &stdout, &stderr); st != exitOK {
		t.Fatal(stderr.String())
	}
	// Row 1 of tok_emb [256, 64] becomes NaN in the checkpoint's files
	// (import refuses NaN, so the checkpoint is changed after it, its
	// hashes recomputed: a checkpoint some other tool wrote).
	poisonCheckpoint(t, path("ck"), "tok_emb", 64, 64)
	// The data: the README, with token 1 at position 645, input 5 of
	// window 10, rank 5's first sequence of step 1 (8 ranks, 2 sequences
	// per micro-batch: windows (m*8 + r)*2 + i).
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.IndexByte(data, 1) >= 0 {
		t.Fatal("the README holds byte 1")
	}
	data[645] = 1
	os.WriteFile(path("data.txt"), data, 0o644)
	start := time.Now()
	out, err := mpirun(t, 8, bin, "run", "--steps", "3", "--resume", path("ck"), "--data", path("data.txt"), tiny)
	if err == nil {
		t.Fatalf("the job succeeded:\n%s", out)
	}
	for _, want := range []string{"amspc: rank 5 compute: embed in embedding (micro-batch 0) at ", "tiny.amsp:15:7: produced NaN"} {
		if !strings.Contains(out, want) {
			t.Errorf("the output does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "step    1/") || strings.Contains(out, "rank 0 compute") {
		t.Errorf("a step finished, or another rank reported:\n%s", out)
	}
	t.Logf("the job ended %s after it started", time.Since(start).Round(time.Millisecond))
}

// TestMPIStopsOnSignal: SIGTERM to mpirun (which forwards it to every
// process) stops all 8 at the same step boundary; the checkpoint --save
// names is written, rank 0 says so once, and the job exits non-zero.
func TestMPIStopsOnSignal(t *testing.T) {
	bin := mpiBinary(t)
	ck := filepath.Join(t.TempDir(), "ck")
	job := startMPI(t, 8, bin, "run", "--steps", "1000", "--save", ck, "../../testdata/models/tiny.amsp")
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(job.output(), "step    2/") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	job.cmd.Process.Signal(syscall.SIGTERM)
	job.endsFailing(t, 30*time.Second, "SIGTERM")
	s := job.output()
	if n := strings.Count(s, "stopped by terminated after step "); n != 1 {
		t.Fatalf("%d stop messages, want 1:\n%s", n, s)
	}
	m, err := engine.ReadManifest(ck)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("stopped by terminated after step %d; saved %s", m.Step, ck); !strings.Contains(s, want) {
		t.Errorf("the output does not say %q:\n%s", want, s)
	}
}

// TestMPISimDevice (issue 12 item 5's path without a GPU): tiny on 8 MPI
// processes, each with the CUDA backend on a simulated GPU (--device sim:
// device memory, launch plans, collectives staged through the host over
// MPI), logs the same loss bits as 8 local ranks on the simulated GPU,
// and stays within 1e-6 of the CPU backend.
func TestMPISimDevice(t *testing.T) {
	bin := mpiBinary(t)
	const steps = 3
	dir := t.TempDir()
	mlog, slog, clog := filepath.Join(dir, "mpi.jsonl"), filepath.Join(dir, "sim.jsonl"), filepath.Join(dir, "cpu.jsonl")
	tiny := "../../testdata/models/tiny.amsp"
	if out, err := mpirun(t, 8, bin, "run", "--device", "sim", "--steps", fmt.Sprint(steps), "--log", mlog, tiny); err != nil {
		t.Fatalf("mpirun: %v\n%s", err, out)
	}
	for _, c := range []struct{ device, log string }{{"sim", slog}, {"cpu", clog}} {
		var stdout, stderr bytes.Buffer
		if st := run([]string{"run", "--device", c.device, "--steps", fmt.Sprint(steps), "--log", c.log, tiny}, &stdout, &stderr); st != exitOK {
			t.Fatalf("local %s: %s", c.device, stderr.String())
		}
	}
	m, s, c := lossLines(t, mlog), lossLines(t, slog), lossLines(t, clog)
	if len(m) != steps || strings.Join(m, "\n") != strings.Join(s, "\n") {
		t.Errorf("losses on MPI processes (simulated GPUs):\n%s\non local ranks (simulated GPUs):\n%s", strings.Join(m, "\n"), strings.Join(s, "\n"))
	}
	for i := range c {
		var a, b float64
		fmt.Sscan(m[i], &a)
		fmt.Sscan(c[i], &b)
		if d := (a - b) / b; d > 1e-6 || d < -1e-6 {
			t.Errorf("step %d: %s on simulated GPUs, %s on the CPU", i+1, m[i], c[i])
		}
	}
}

// poisonCheckpoint sets elements [from, from+n) of tensor name to NaN in
// the checkpoint in dir, in whichever files hold them, and rewrites the
// manifest's sizes and SHA-256s to match.
func poisonCheckpoint(t *testing.T, dir, name string, from, n int64) {
	t.Helper()
	m, err := engine.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tensor := range m.Tensors {
		if tensor.Name != name {
			continue
		}
		for _, p := range tensor.Pieces {
			lo, hi := max(from, p.Start), min(from+n, p.Start+p.Len)
			if lo >= hi {
				continue
			}
			mf := &m.Files[p.File]
			file := filepath.Join(dir, filepath.FromSlash(mf.Path))
			w, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			hn := int(binary.LittleEndian.Uint64(w))
			var header map[string]json.RawMessage
			if err := json.Unmarshal(w[8:8+hn], &header); err != nil {
				t.Fatal(err)
			}
			key := p.Key
			if key == "" {
				key = name
			}
			var info struct {
				Offsets []int64 `json:"data_offsets"`
			}
			if err := json.Unmarshal(header[key], &info); err != nil {
				t.Fatal(err)
			}
			for e := lo; e < hi; e++ {
				binary.LittleEndian.PutUint32(w[int64(8+hn)+info.Offsets[0]+4*(e-p.Start):], 0x7fc00000)
			}
			if err := os.WriteFile(file, w, 0o644); err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(w)
			mf.Bytes, mf.SHA256 = int64(len(w)), hex.EncodeToString(sum[:])
		}
	}
	b, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, engine.ManifestName), append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}
