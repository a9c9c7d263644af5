package main

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
)

// TestCheckStdin: `amspc check -` reads the job from standard input and
// names it <stdin> in what it prints and in errors.
func TestCheckStdin(t *testing.T) {
	src, err := os.ReadFile("../../testdata/models/tiny.amsp")
	if err != nil {
		t.Fatal(err)
	}
	defer func(r io.Reader) { stdin = r }(stdin)
	for _, c := range []struct {
		text       string
		status     int
		out, errst string
	}{
		{string(src), exitOK, "<stdin>", ""},
		{"model m {\n  x = 1 +\n}\n", exitUser, "", "<stdin>:"},
	} {
		stdin = strings.NewReader(c.text)
		var stdout, stderr bytes.Buffer
		st := run([]string{"check", "-"}, &stdout, &stderr)
		if st != c.status || !strings.Contains(stdout.String(), c.out) || !strings.Contains(stderr.String(), c.errst) {
			t.Errorf("status %d (want %d)\nstdout %q\nstderr %q", st, c.status, stdout.String(), stderr.String())
		}
	}
}
