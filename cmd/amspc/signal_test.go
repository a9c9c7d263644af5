package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRunStopsOnSignal: SIGINT and SIGTERM stop amspc run at the next step
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
	}{{syscall.SIGINT, 130, "interrupt"}, {syscall.SIGTERM, 143, "terminated"}} {
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
			b, err := os.ReadFile(filepath.Join(dir, "state.json"))
			if err != nil {
				t.Fatal(err)
			}
			var st struct{ Step int }
			if err := json.Unmarshal(b, &st); err != nil || st.Step < 2 || st.Step >= 500 {
				t.Errorf("checkpoint at step %d (%v)", st.Step, err)
			}
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), ".") {
					t.Errorf("left behind %s", e.Name())
				}
			}
		})
	}
}
