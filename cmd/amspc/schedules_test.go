package main

import (
	"bytes"
	"path/filepath"
	"testing"

	"amspc/internal/golden"
)

// TestGoldenSchedules compiles tiny on 2 nodes x 4 ranks under the plans
// the design pins and compares ranks 0 and 5's disassembled streams with
// testdata/schedules/, regenerated with -update and reviewed as diffs.
func TestGoldenSchedules(t *testing.T) {
	plans := []struct{ name, shard string }{
		{"ddp", "ddp"},
		{"zero1", "zero1"},
		{"zero3", "zero3"},
		{"mics4", "mics(4)"},
		{"p2-g2-os8", "{params=2,grads=2,optim=8}"},
		{"p1-g1-os8", "{params=1,grads=1,optim=8}"},
	}
	goldenDir, _ := filepath.Abs("../../testdata/schedules")
	// Run beside the model so positions print as tiny.amsp:L:C.
	t.Chdir("../../testdata/models")
	const model = "tiny.amsp"
	for _, p := range plans {
		t.Run(p.name, func(t *testing.T) {
			dir := t.TempDir()
			var stdout, stderr bytes.Buffer
			if st := run([]string{"compile", model, "--shard", p.shard, "-o", dir}, &stdout, &stderr); st != 0 {
				t.Fatalf("compile: %s", stderr.String())
			}
			stdout.Reset()
			if st := run([]string{"disasm", dir, "--rank", "0,5"}, &stdout, &stderr); st != 0 {
				t.Fatalf("disasm: %s", stderr.String())
			}
			golden.File(t, filepath.Join(goldenDir, p.name+".txt"), stdout.String())
		})
	}
}
