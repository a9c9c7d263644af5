//go:build mpi

package main

import (
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMPIProgressLines: under mpirun every rank's stdout is the launcher's
// pty, not the user's terminal; amspc prints a line a step there, never a
// bar rewritten with carriage returns.
func TestMPIProgressLines(t *testing.T) {
	bin := mpiBinary(t)
	out, err := mpirun(t, 8, bin, "run", "--steps", "3", "../../testdata/models/tiny.amsp")
	if err != nil {
		t.Fatalf("mpirun: %v\n%s", err, out)
	}
	if strings.Contains(out, "\r") {
		t.Errorf("carriage returns in the output under mpirun:\n%q", out)
	}
	if n := strings.Count(out, "step "); n < 3 {
		t.Errorf("%d step lines, want 3:\n%s", n, out)
	}
}

// TestMPIInterruptedRanks: SIGINT to the processes themselves (kill -INT
// of the ranks, not of mpirun) stops all 8 at one step boundary; the message is printed once, and the
// job ends with status 130, as a local run does. (A signal to mpirun
// itself ends the job with mpirun's own status, 1 in Open MPI 4.1,
// whatever the processes return: TestMPIStopsOnSignal.)
func TestMPIInterruptedRanks(t *testing.T) {
	bin := mpiBinary(t)
	job := startMPI(t, 8, bin, "run", "--steps", "1000", "../../testdata/models/tiny.amsp")
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(job.output(), "step    2/") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	pids := rankPIDs(bin)
	if len(pids) != 8 {
		t.Fatalf("%d rank processes, want 8", len(pids))
	}
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGINT)
	}
	var err error
	select {
	case err = <-job.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the job still runs 30 s after SIGINT:\n%s", job.output())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Errorf("mpirun ended with %v, want exit status 130", err)
	}
	s := job.output()
	if n := strings.Count(s, "stopped by interrupt after step "); n != 1 {
		t.Errorf("%d stop messages, want 1:\n%s", n, s)
	}
}
