package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestDeviceCuda: --device cuda exits 1 with one line: CUDA's missing
// library named (no GPU here), or, where CUDA loads, that the backend
// does not run plans yet. A device amspc does not know is refused.
func TestDeviceCuda(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if st := run([]string{"run", "--device", "cuda", "../../testdata/models/tiny.amsp"}, &stdout, &stderr); st != exitUser {
		t.Fatalf("status %d", st)
	}
	msg := stderr.String()
	if strings.Count(msg, "\n") != 1 || stdout.Len() != 0 ||
		!(strings.HasPrefix(msg, "amspc run: --device cuda: CUDA is not available: ") ||
			strings.HasPrefix(msg, "amspc run: --device cuda: the CUDA backend does not run plans yet")) {
		t.Errorf("stdout %q, stderr %q", stdout.String(), msg)
	}
	stderr.Reset()
	if st := run([]string{"run", "--device", "tpu", "../../testdata/models/tiny.amsp"}, &stdout, &stderr); st != exitUser ||
		stderr.String() != "amspc run: --device must be cpu or cuda, not \"tpu\"\n" {
		t.Errorf("--device tpu: status %d, %q", st, stderr.String())
	}
}
