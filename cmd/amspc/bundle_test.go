package main

import (
	"bytes"
	"io"
	"path/filepath"
	"testing"

	"amspc/codegen"
	"amspc/cost"
	"amspc/passes"
)

// A bundle predicts what compile predicted: the machine it records (the
// roofline, whether streams share cores) and the profile given again
// reproduce compile's simulated step, for a GPU cluster and for CPU ranks
// with a measured profile.
func TestBundleSimulatesAsCompiled(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "tiny.csv")
	var stdout, stderr bytes.Buffer
	if st := run([]string{"profile", "--reps", "1", "--max-bytes", "16384", "-o", prof, "../../testdata/models/tiny.amsp"}, &stdout, &stderr); st != exitOK {
		t.Fatalf("profile: status %d: %s", st, stderr.String())
	}
	for _, c := range []struct {
		file, profile string
	}{
		{"../../testdata/models/tiny.amsp", ""},
		{"../../testdata/models/tiny.amsp", prof},
		{"../../testdata/models/llama-7b.amsp", ""},
	} {
		lf := loadFlags{profile: c.profile}
		job, err := lf.load(c.file)
		if err != nil {
			t.Fatal(err)
		}
		cj, st := compileJob(c.file, job, passes.Options{}, cost.DefaultConfig, io.Discard)
		if st != exitOK {
			t.Fatalf("%s: compile failed", c.file)
		}
		b, err := codegen.Decode(codegen.Encode(cj.Bundle))
		if err != nil {
			t.Fatal(err)
		}
		tl, err := simulateBundle(b, 0, c.profile)
		if err != nil {
			t.Fatal(err)
		}
		if tl.Step != cj.Timeline.Step || tl.PeakBytes != cj.Timeline.PeakBytes {
			t.Errorf("%s (profile %q): the bundle predicts step %g s, peak %g B; compile predicted %g s, %g B",
				c.file, c.profile, tl.Step, tl.PeakBytes, cj.Timeline.Step, cj.Timeline.PeakBytes)
		}
	}
}
