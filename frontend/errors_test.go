package frontend_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"amspc/frontend"
	"amspc/ir"
)

// annotation is `# ERROR "regexp"`: the text between the quotes is the
// regexp as written (no unquoting, as in Go's test/ directory), so `\(`
// needs no doubled backslash. A line may carry several.
var annotation = regexp.MustCompile(`# ERROR "((?:[^"\\]|\\.)*)"`)

type want struct {
	re      *regexp.Regexp
	matched bool
}

// expectations reads the annotations of a corpus file by line (from 1).
func expectations(t *testing.T, src []byte) map[int][]*want {
	t.Helper()
	out := map[int][]*want{}
	for i, line := range bytes.Split(src, []byte("\n")) {
		for _, m := range annotation.FindAllSubmatch(line, -1) {
			re, err := regexp.Compile(string(m[1]))
			if err != nil {
				t.Fatalf("line %d: bad annotation regexp %q: %v", i+1, m[1], err)
			}
			out[i+1] = append(out[i+1], &want{re: re})
		}
	}
	return out
}

// TestErrors loads every testdata/errors/*.amsp and checks the reported
// errors against the `# ERROR` annotations: every error is announced on
// its line, every annotation is met, and positions are inside the file.
func TestErrors(t *testing.T) {
	files, err := filepath.Glob("../testdata/errors/*.amsp")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 60 {
		t.Fatalf("error corpus has %d files, want at least 60", len(files))
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			wants := expectations(t, src)
			if len(wants) == 0 {
				t.Fatalf("%s has no # ERROR annotation", path)
			}
			list := loadErrors(t, path, src)
			lines := bytes.Split(src, []byte("\n"))
			for _, e := range list {
				if testing.Verbose() {
					t.Logf("%s", e)
				}
				checkPos(t, e, path, lines)
				// An error points at code, not into its own annotation
				// (a whole-file error may sit on a comment-only line).
				// The exception is a quote that starts no string: the
				// annotation's quotes pair with it, leaving the last alone.
				if line := lines[e.Pos.Line-1]; e.Msg != "unterminated string" {
					if i := bytes.Index(line, []byte("# ERROR")); i > 0 && e.Pos.Col > i {
						t.Errorf("%s: column %d is inside the annotation (from column %d)", e, e.Pos.Col, i+1)
					}
				}
				found := false
				for _, w := range wants[e.Pos.Line] {
					if w.re.MatchString(e.Msg) {
						w.matched, found = true, true
					}
				}
				if !found {
					t.Errorf("unexpected error %s", e)
				}
			}
			for line, ws := range wants {
				for _, w := range ws {
					if !w.matched {
						t.Errorf("%s:%d: no error matching %q", path, line, w.re)
					}
				}
			}
		})
	}
}

// loadErrors loads src and returns its ErrorList, failing the test on a
// success, a panic or any other kind of error.
func loadErrors(t *testing.T, path string, src []byte) (list frontend.ErrorList) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("Load panicked: %v", r)
		}
	}()
	job, err := frontend.Load(frontend.Source{Name: path, Text: src})
	if err == nil {
		t.Fatalf("Load succeeded (graph %s), want errors", job.Graph.Name)
	}
	var ie *ir.InternalError
	if errors.As(err, &ie) {
		t.Fatalf("internal error: %v", err)
	}
	if !errors.As(err, &list) {
		t.Fatalf("error is a %T, not an ErrorList: %v", err, err)
	}
	if len(list) == 0 {
		t.Fatal("empty ErrorList")
	}
	return list
}

func checkPos(t *testing.T, e *frontend.Error, path string, lines [][]byte) {
	t.Helper()
	p := e.Pos
	switch {
	case p.File != path:
		t.Errorf("%s: file is %q, want %q", e, p.File, path)
	case p.Line < 1 || p.Line > len(lines):
		t.Errorf("%s: line %d outside the file's %d lines", e, p.Line, len(lines))
	case p.Col < 1 || p.Col > len(lines[p.Line-1])+1:
		t.Errorf("%s: column %d outside line %d (%d bytes)", e, p.Col, p.Line, len(lines[p.Line-1]))
	}
	if e.Msg == "" || e.Msg != strings.TrimSpace(e.Msg) || strings.HasSuffix(e.Msg, ".") {
		t.Errorf("%s: message is empty, padded or ends in a period", e)
	}
	if first := e.Msg[:1]; first != strings.ToLower(first) {
		t.Errorf("%s: message does not start in lower case", e)
	}
}

// TestTooManyErrors checks that lowering goes on after a bad statement and
// that the rendering stops after MaxErrors with "too many errors".
func TestTooManyErrors(t *testing.T) {
	path := "../testdata/errors/too_many_errors.amsp"
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	list := loadErrors(t, path, src)
	if len(list) <= frontend.MaxErrors+1 {
		t.Fatalf("got %d errors, want more than %d", len(list), frontend.MaxErrors+1)
	}
	lines := strings.Split(list.Error(), "\n")
	if len(lines) != frontend.MaxErrors+1 {
		t.Fatalf("Error() has %d lines, want %d:\n%s", len(lines), frontend.MaxErrors+1, list.Error())
	}
	for i, l := range lines[:frontend.MaxErrors] {
		if l != list[i].Error() {
			t.Errorf("line %d is %q, want %q", i+1, l, list[i].Error())
		}
	}
	if last := lines[frontend.MaxErrors]; last != "too many errors" {
		t.Errorf("last line is %q, want \"too many errors\"", last)
	}

	// At exactly MaxErrors there is nothing to cut.
	short := list[:frontend.MaxErrors]
	if strings.Contains(short.Error(), "too many errors") {
		t.Errorf("%d errors rendered with \"too many errors\"", frontend.MaxErrors)
	}
}

// TestModelsLoad is the positive side: the example models load cleanly.
func TestModelsLoad(t *testing.T) {
	files, _ := filepath.Glob("../testdata/models/*.amsp")
	if len(files) < 3 {
		t.Fatalf("found %d example models, want the 3 examples", len(files))
	}
	for _, path := range files {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		job, err := frontend.Load(frontend.Source{Name: path, Text: src})
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		if job.Cluster == nil || job.Train == nil || job.Shard == nil {
			t.Errorf("%s: missing cluster, train or shard in the job", path)
		}
	}
}
