package main

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"amspc/engine"
)

// TestRunStopsOnSignal: SIGINT, SIGTERM and SIGHUP stop amspc run at the next step
// boundary; with --save it writes a checkpoint of the last whole step,
// says where, exits 128 + the signal, and leaves no temporary file.
func TestRunStopsOnSignal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds amspc and trains until signalled")
	}
	bin := filepath.Join(t.TempDir(), "amspc")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, c := range []struct {
		sig  syscall.Signal
		code int
		name string
	}{{syscall.SIGINT, 130, "interrupt"}, {syscall.SIGTERM, 143, "terminated"}, {syscall.SIGHUP, 129, "hangup"}} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ckpt")
			cmd := exec.Command(bin, "run", "--steps", "500", "--save", dir, "../../testdata/models/tiny.amsp")
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(stdout)
			var out []string
			for sc.Scan() {
				out = append(out, sc.Text())
				if strings.HasPrefix(sc.Text(), "step    2/") {
					cmd.Process.Signal(c.sig)
					break
				}
			}
			for sc.Scan() {
				out = append(out, sc.Text())
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			var werr error
			select {
			case werr = <-done:
			case <-time.After(30 * time.Second):
				cmd.Process.Kill()
				t.Fatalf("still running 30 s after %s", c.name)
			}
			var ee *exec.ExitError
			if !errors.As(werr, &ee) || ee.ExitCode() != c.code {
				t.Errorf("exit %v, want status %d", werr, c.code)
			}
			if !strings.Contains(stderr.String(), "stopped by "+c.name+" after step") || !strings.Contains(stderr.String(), "; saved "+dir) {
				t.Errorf("stderr %q\nstdout:\n%s", stderr.String(), strings.Join(out, "\n"))
			}
			m, err := engine.ReadManifest(dir)
			if err != nil {
				t.Fatal(err)
			}
			if m.Step < 2 || m.Step >= 500 {
				t.Errorf("checkpoint at step %d", m.Step)
			}
			filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
				if strings.HasPrefix(d.Name(), ".") && path != dir {
					t.Errorf("left behind %s", path)
				}
				return nil
			})
		})
	}
}
