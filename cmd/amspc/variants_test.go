package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// variantPlans are the plans every variant check accepts must compile
// under: each preset, fixed factors inside a node and across nodes, and
// the planner's choice. -short keeps one of each kind.
func variantPlans(short bool) []string {
	if short {
		return []string{"ddp", "zero3", "zeropp(4)", "{params=2,grads=2,optim=8}", "auto"}
	}
	return []string{"ddp", "zero1", "zero2", "zero3", "mics(4)", "zeropp(4)", "hsdp(4)",
		"{params=2,grads=2,optim=8}", "{params=1,grads=1,optim=4}", "{params=4,grads=8,optim=8}", "auto"}
}

// variantAnnotation is the error corpus's `# ERROR "regexp"` (see
// frontend/errors_test.go): the regexp as written between the quotes.
var (
	variantAnnotation = regexp.MustCompile(`# ERROR "((?:[^"\\]|\\.)*)"`)
	positioned        = regexp.MustCompile(`^(.+):(\d+):(\d+): (\S.*)$`)
)

// TestVariants holds check and compile to one promise: whatever check
// accepts, compile compiles under every plan, or check rejects it with a
// positioned error. Each testdata/variants/*.amsp is a small model on 2
// nodes x 4 ranks exercising one shape of model; a variant carrying
// `# ERROR` annotations is one check must reject, at those lines.
func TestVariants(t *testing.T) {
	files, err := filepath.Glob("../../testdata/variants/*.amsp")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 22 {
		t.Fatalf("found %d variants, want at least 22", len(files))
	}
	plans := variantPlans(testing.Short())
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".amsp"), func(t *testing.T) {
			t.Parallel()
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(src, []byte("# ")) {
				t.Errorf("%s does not open with a comment saying what it exercises", path)
			}
			wants := variantExpectations(t, src)
			var stdout, stderr bytes.Buffer
			st := run([]string{"check", path}, &stdout, &stderr)
			noPanic(t, "check", stdout.String()+stderr.String())
			if len(wants) > 0 {
				checkRejects(t, path, src, st, stderr.String(), wants)
				return
			}
			if st != exitOK {
				t.Fatalf("check rejects a variant without # ERROR annotations (status %d):\n%s", st, stderr.String())
			}
			for _, plan := range plans {
				stdout.Reset()
				stderr.Reset()
				st := run([]string{"compile", "-o", t.TempDir(), "--shard", plan, path}, &stdout, &stderr)
				noPanic(t, "compile --shard "+plan, stdout.String()+stderr.String())
				if st != exitOK {
					t.Errorf("check accepts it, but compile --shard %s fails (status %d):\n%s", plan, st, stderr.String())
				}
			}
		})
	}
}

// variantExpectations reads the annotations by line (from 1).
func variantExpectations(t *testing.T, src []byte) map[int][]*regexp.Regexp {
	t.Helper()
	out := map[int][]*regexp.Regexp{}
	for i, line := range bytes.Split(src, []byte("\n")) {
		for _, m := range variantAnnotation.FindAllSubmatch(line, -1) {
			re, err := regexp.Compile(string(m[1]))
			if err != nil {
				t.Fatalf("line %d: bad annotation regexp %q: %v", i+1, m[1], err)
			}
			out[i+1] = append(out[i+1], re)
		}
	}
	return out
}

// checkRejects requires check to fail with status 1 and only positioned
// errors, each announced on its line and each annotation met.
func checkRejects(t *testing.T, path string, src []byte, st int, stderr string, wants map[int][]*regexp.Regexp) {
	t.Helper()
	if st != exitUser {
		t.Fatalf("check: status %d, want %d (a user error):\n%s", st, exitUser, stderr)
	}
	lines := bytes.Split(src, []byte("\n"))
	met := map[*regexp.Regexp]bool{}
	for _, l := range strings.Split(strings.TrimSuffix(stderr, "\n"), "\n") {
		m := positioned.FindStringSubmatch(l)
		if m == nil {
			t.Errorf("error is not file:line:col: message: %q", l)
			continue
		}
		line, _ := strconv.Atoi(m[2])
		col, _ := strconv.Atoi(m[3])
		switch {
		case m[1] != path:
			t.Errorf("%s: file is %q, want %q", l, m[1], path)
		case line < 1 || line > len(lines):
			t.Errorf("%s: line %d outside the file's %d lines", l, line, len(lines))
		case col < 1 || col > len(lines[line-1])+1:
			t.Errorf("%s: column %d outside line %d", l, col, line)
		}
		found := false
		for _, re := range wants[line] {
			if re.MatchString(m[4]) {
				met[re], found = true, true
			}
		}
		if !found {
			t.Errorf("unexpected error %s", l)
		}
	}
	for line, res := range wants {
		for _, re := range res {
			if !met[re] {
				t.Errorf("%s:%d: no error matching %q", path, line, re)
			}
		}
	}
}

func noPanic(t *testing.T, what, out string) {
	t.Helper()
	if strings.Contains(out, "goroutine ") || strings.Contains(out, "internal compiler error") {
		t.Fatalf("%s: compiler bug:\n%s", what, out)
	}
}
