//go:build cgo

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunDeviceCollectives: amspc run --device sim --collectives device
// (tiny's plan on 8 simulated-GPU ranks, the collectives on the devices'
// comm streams) logs the losses --collectives ordered logs, to the last
// digit; under a world spread over processes it would refuse (the
// engine's and hostc's tests check that).
func TestRunDeviceCollectives(t *testing.T) {
	dir := t.TempDir()
	var logs [2]string
	for i, mode := range []string{"ordered", "device"} {
		logs[i] = filepath.Join(dir, mode+".jsonl")
		var stdout, stderr bytes.Buffer
		args := []string{"run", "--device", "sim", "--collectives", mode, "--steps", "2", "--log", logs[i], "../../testdata/models/tiny.amsp"}
		if st := run(args, &stdout, &stderr); st != exitOK {
			t.Fatalf("--collectives %s: status %d: %s", mode, st, stderr.String())
		}
	}
	losses := func(path string) []string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			i := strings.Index(line, `"loss":`)
			j := strings.Index(line, `,"step"`)
			if i < 0 || j < i {
				t.Fatalf("%s: no loss in %q", path, line)
			}
			out = append(out, line[i:j])
		}
		return out
	}
	ordered, device := losses(logs[0]), losses(logs[1])
	if len(ordered) != 2 || strings.Join(ordered, " ") != strings.Join(device, " ") {
		t.Errorf("ordered %v, device %v", ordered, device)
	}
}
