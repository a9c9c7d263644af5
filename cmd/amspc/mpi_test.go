//go:build mpi

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"amspc/codegen"
	"amspc/compiler"
	"amspc/cost"
)

// The MPI tests launch the amspc binary under Open MPI's mpirun, 8
// processes on this machine (--oversubscribe: more processes than cores).
// `go test -tags mpi ./cmd/amspc -run MPI` (.ci/run does).

// mpiBinary builds amspc with -tags mpi once per test run.
func mpiBinary(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Fatalf("mpirun not found (install openmpi-bin): %v", err)
	}
	bin := filepath.Join(t.TempDir(), "amspc")
	out, err := exec.Command("go", "build", "-tags", "mpi", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build -tags mpi: %v\n%s", err, out)
	}
	return bin
}

// mpirun runs bin with args on n processes and returns its output.
func mpirun(t *testing.T, n int, bin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("mpirun", append([]string{"--oversubscribe", "-n", fmt.Sprint(n), bin}, args...)...)
	// Root in CI containers; Open MPI refuses root without these.
	cmd.Env = append(os.Environ(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "OMPI_MCA_btl=self,vader,tcp")
	out, err := cmd.CombinedOutput()
	return string(out), err
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
	cmd := exec.Command("mpirun", "--oversubscribe", "-n", "8", bin, "run", "--steps", "1000", "../../testdata/models/tiny.amsp")
	cmd.Env = append(os.Environ(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "OMPI_MCA_btl=self,vader,tcp")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait for training to start, then kill one rank's process.
	deadline := time.Now().Add(60 * time.Second)
	var victim int
	for victim == 0 && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
		if !strings.Contains(out.String(), "step ") {
			continue
		}
		pids, _ := exec.Command("pgrep", "-f", bin+" run").Output()
		fields := strings.Fields(string(pids))
		if len(fields) >= 8 {
			fmt.Sscan(fields[len(fields)/2], &victim)
		}
	}
	if victim == 0 {
		cmd.Process.Kill()
		t.Fatalf("training did not start:\n%s", out.String())
	}
	killed := time.Now()
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("the job exited 0 after a rank was killed")
		}
		if d := time.Since(killed); d > 10*time.Second {
			t.Errorf("the job took %s to end", d)
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("the job still runs 10 s after a rank was killed:\n%s", out.String())
	}
	if s := out.String(); !strings.Contains(s, "exited on signal 9") || !strings.Contains(s, "rank") {
		t.Errorf("no message naming the lost rank:\n%s", s)
	}
}
