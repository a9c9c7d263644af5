package frontend_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"amspc/frontend"
	"amspc/ir"
)

// FuzzLoad feeds Load arbitrary text. Whatever the input, Load returns
// either a job whose graph verifies and whose printed IR round-trips, or a
// list of user errors with positions inside the input. A panic, an
// internal error or a hang is a bug. Crashers found by `go test -fuzz` are
// kept in testdata/fuzz/FuzzLoad and rerun by every `go test`.
func FuzzLoad(f *testing.F) {
	for _, pattern := range []string{"../testdata/models/*.amsp", "../testdata/errors/*.amsp", "../testdata/variants/*.amsp"} {
		files, err := filepath.Glob(pattern)
		if err != nil {
			f.Fatal(err)
		}
		for _, path := range files {
			src, err := os.ReadFile(path)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(src)
		}
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		const name = "fuzz.amsp"
		start := time.Now()
		job, err := frontend.Load(frontend.Source{Name: name, Text: src})
		// Not a benchmark: a hang detector, with room for a slow machine.
		// MaxLayers and the value limit keep real inputs in milliseconds.
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("Load took %v", d)
		}
		// Same input, same answer: nothing may depend on map order.
		job2, err2 := frontend.Load(frontend.Source{Name: name, Text: src})
		if (err == nil) != (err2 == nil) || (err != nil && err.Error() != err2.Error()) {
			t.Fatalf("two loads differ:\n%v\n---\n%v", err, err2)
		}
		if err != nil {
			checkUserErrors(t, name, src, err)
			return
		}
		if a, b := ir.Print(job.Graph), ir.Print(job2.Graph); a != b {
			t.Fatalf("two loads print differently:\n%s\n---\n%s", a, b)
		}
		if err := ir.Verify(job.Graph); err != nil {
			t.Fatalf("loaded graph does not verify: %v", err)
		}
		text := ir.Print(job.Graph)
		g, err := ir.Parse(name+".ir", text)
		if err != nil {
			t.Fatalf("printed IR does not parse: %v\n%s", err, text)
		}
		if err := ir.Verify(g); err != nil {
			t.Fatalf("parsed IR does not verify: %v", err)
		}
		if again := ir.Print(g); again != text {
			t.Fatalf("print(parse(print(g))) != print(g):\n%s\n---\n%s", text, again)
		}
		if job.Shard == nil {
			t.Fatal("job without a shard spec")
		}
	})
}

// panicText is what Go runtime failures and fmt mistakes look like; none of
// it belongs in a message to a user.
var panicText = []string{"runtime error", "panic", "goroutine", "%!", "<nil>", "nil pointer", "index out of range"}

func checkUserErrors(t *testing.T, name string, src []byte, err error) {
	t.Helper()
	var ie *ir.InternalError
	if errors.As(err, &ie) {
		t.Fatalf("internal error on user input: %v", err)
	}
	var list frontend.ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("error is a %T, not an ErrorList: %v", err, err)
	}
	if len(list) == 0 {
		t.Fatal("empty ErrorList")
	}
	lines := bytes.Split(src, []byte("\n"))
	for _, e := range list {
		p := e.Pos
		switch {
		case p.File != name:
			t.Errorf("%s: file %q, want %q", e, p.File, name)
		case p.Line < 1 || p.Col < 1:
			t.Errorf("%s: invalid position", e)
		case p.Line > len(lines):
			t.Errorf("%s: line %d past the end (%d lines)", e, p.Line, len(lines))
		case p.Col > len(lines[p.Line-1])+1:
			t.Errorf("%s: column %d past the end of line %d (%d bytes)", e, p.Col, p.Line, len(lines[p.Line-1]))
		}
		if strings.TrimSpace(e.Msg) == "" {
			t.Errorf("%s: empty message", e)
		}
		for _, bad := range panicText {
			if strings.Contains(e.Msg, bad) {
				t.Errorf("%s: message contains %q", e, bad)
			}
		}
	}
	_ = list.Error()
}
