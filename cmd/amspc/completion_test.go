package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCompletion: the bash script parses (bash -n) and completes
// commands, a command's flags, --shard's presets and .amsp files; the zsh
// script parses where zsh is installed; an unknown shell is refused.
func TestCompletion(t *testing.T) {
	script := func(shell string) string {
		var stdout, stderr bytes.Buffer
		if st := run([]string{"completion", shell}, &stdout, &stderr); st != exitOK {
			t.Fatalf("completion %s: status %d: %s", shell, st, stderr.String())
		}
		f := filepath.Join(t.TempDir(), "amspc."+shell)
		if err := os.WriteFile(f, stdout.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	var stdout, stderr bytes.Buffer
	if st := run([]string{"completion", "fish"}, &stdout, &stderr); st != exitUser || !strings.Contains(stderr.String(), `unknown shell "fish"`) {
		t.Errorf("completion fish: status %d, stderr %q", st, stderr.String())
	}
	if zsh, err := exec.LookPath("zsh"); err == nil {
		if out, err := exec.Command(zsh, "-n", script("zsh")).CombinedOutput(); err != nil {
			t.Errorf("zsh -n: %v\n%s", err, out)
		}
	} else {
		t.Log("zsh is not installed: its script is not parsed")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash is not installed")
	}
	f := script("bash")
	if out, err := exec.Command(bash, "-n", f).CombinedOutput(); err != nil {
		t.Fatalf("bash -n: %v\n%s", err, out)
	}
	for _, c := range []struct {
		words []string
		want  string
	}{
		{[]string{"amspc", "pl"}, "plan"},
		{[]string{"amspc", "comp"}, "compile completion"},
		{[]string{"amspc", "run", "--ste"}, "--steps"},
		{[]string{"amspc", "run", "--st"}, "--standin-scale --steps"},
		{[]string{"amspc", "plan", "--shard", "zero"}, "zero1 zero2 zero3"},
		{[]string{"amspc", "check", "ti"}, "tied.amsp tiny.amsp"},
	} {
		cmd := exec.Command(bash, "-c", `source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _amspc; printf '%s\n' "${COMPREPLY[@]}" | sort | tr '\n' ' '`, "-", f)
		cmd.Args = append(cmd.Args, c.words...)
		cmd.Dir = "../../testdata/models"
		out, err := cmd.CombinedOutput()
		if got := strings.TrimSpace(string(out)); err != nil || got != c.want {
			t.Errorf("%v: %q (%v), want %q", c.words, got, err, c.want)
		}
	}
}
