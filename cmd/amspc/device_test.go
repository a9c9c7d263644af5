package main

import (
	"bytes"
	"strings"
	"testing"

	"amspc/engine"
)

// cudaOpens reports whether CUDA loads and sees a GPU here, asked of the
// engine's device registry as amspc asks it.
func cudaOpens() bool {
	_, err := engine.OpenDevices("cuda", engine.DeviceOptions{})
	return err == nil
}

// TestDeviceCuda: without a GPU (this machine kind, CI), --device cuda
// exits 1 with one line naming CUDA's missing library; where CUDA loads,
// it trains tiny two steps. A device amspc does not know is refused.
func TestDeviceCuda(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if cudaOpens() {
		if st := run([]string{"run", "--steps", "2", "--device", "cuda", "../../testdata/models/tiny.amsp"}, &stdout, &stderr); st != exitOK {
			t.Fatalf("--device cuda where CUDA loads: status %d, stderr %q", st, stderr.String())
		}
		t.Log(stdout.String())
	} else {
		if st := run([]string{"run", "--device", "cuda", "../../testdata/models/tiny.amsp"}, &stdout, &stderr); st != exitUser {
			t.Fatalf("status %d", st)
		}
		msg := stderr.String()
		if strings.Count(msg, "\n") != 1 || stdout.Len() != 0 || !strings.HasPrefix(msg, "amspc run: --device cuda: CUDA is not available: ") {
			t.Errorf("stdout %q, stderr %q", stdout.String(), msg)
		}
	}
	// profile --device cuda measures on the GPU, or says why it cannot.
	if !cudaOpens() {
		stdout.Reset()
		stderr.Reset()
		if st := run([]string{"profile", "--device", "cuda", "-o", t.TempDir() + "/p.csv", "../../testdata/models/tiny.amsp"}, &stdout, &stderr); st != exitUser ||
			!strings.HasPrefix(stderr.String(), "amspc profile: --device cuda: CUDA is not available: ") || strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("profile --device cuda: status %d, stderr %q", st, stderr.String())
		}
	}
	stderr.Reset()
	if st := run([]string{"run", "--device", "tpu", "../../testdata/models/tiny.amsp"}, &stdout, &stderr); st != exitUser ||
		stderr.String() != "amspc run: --device must be cpu, cuda or sim, not \"tpu\"\n" {
		t.Errorf("--device tpu: status %d, %q", st, stderr.String())
	}
}
