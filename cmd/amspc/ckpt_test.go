package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCkptCommands: info describes a checkpoint; export with --optimizer
// and import give a checkpoint that resumes with the same losses as the
// original; the weights alone import at step 0; mistakes are refused with
// what is wrong.
func TestCkptCommands(t *testing.T) {
	tiny := "../../testdata/models/tiny.amsp"
	dir := t.TempDir()
	ck, back, fresh := filepath.Join(dir, "ck"), filepath.Join(dir, "back"), filepath.Join(dir, "fresh")
	all, weights := filepath.Join(dir, "all.safetensors"), filepath.Join(dir, "w.safetensors")
	amspc := func(want int, args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if st := run(args, &stdout, &stderr); st != want {
			t.Fatalf("amspc %v: status %d, want %d: %s%s", args, st, want, stdout.String(), stderr.String())
		}
		return stdout.String() + stderr.String()
	}
	amspc(exitOK, "run", "--steps", "2", "--save", ck, tiny)
	if out := amspc(exitOK, "ckpt", "info", ck); !strings.Contains(out, "model tiny after step 2") || !strings.Contains(out, "in 8 files") {
		t.Errorf("ckpt info:\n%s", out)
	}
	amspc(exitOK, "ckpt", "export", ck, "-o", weights)
	amspc(exitOK, "ckpt", "export", "--optimizer", ck, "-o", all)
	if out := amspc(exitOK, "ckpt", "import", all, "--model", tiny, "-o", back); !strings.Contains(out, "at step 2") {
		t.Errorf("ckpt import:\n%s", out)
	}
	a := printedLosses(amspc(exitOK, "run", "--steps", "4", "--resume", ck, tiny))
	b := printedLosses(amspc(exitOK, "run", "--steps", "4", "--resume", back, tiny))
	if len(a) != 2 || strings.Join(a, " ") != strings.Join(b, " ") {
		t.Errorf("losses from the checkpoint %v, from its export imported %v", a, b)
	}
	if out := amspc(exitOK, "ckpt", "import", weights, "--model", tiny, "-o", fresh); !strings.Contains(out, "at step 0") {
		t.Errorf("ckpt import of the weights alone:\n%s", out)
	}
	amspc(exitOK, "run", "--steps", "1", "--resume", fresh, tiny)

	notCkpt := t.TempDir()
	garbage := filepath.Join(dir, "garbage.safetensors")
	os.WriteFile(garbage, []byte("not a safetensors file"), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"ckpt"}, "usage: amspc ckpt"},
		{[]string{"ckpt", "frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"ckpt", "info", notCkpt}, "holds no checkpoint"},
		{[]string{"ckpt", "export", ck}, "-o FILE is required"},
		{[]string{"ckpt", "import", all, "-o", t.TempDir()}, "--model MODEL.amsp and -o DIR are required"},
		{[]string{"ckpt", "import", garbage, "--model", tiny, "-o", t.TempDir()}, "header of"},
		{[]string{"ckpt", "import", all, "--model", "../../testdata/models/tied.amsp", "-o", t.TempDir()}, "weights of model tiny"},
		{[]string{"run", "--steps", "1", "--resume", notCkpt, tiny}, "holds no checkpoint"},
	} {
		if out := amspc(exitUser, c.args...); !strings.Contains(out, c.want) {
			t.Errorf("amspc %v: %q does not say %q", c.args, out, c.want)
		}
	}
}
