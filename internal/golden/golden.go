// Package golden compares test output with files under testdata/ and
// rewrites them when tests run with -update (or UPDATE_GOLDEN=1). Goldens
// are never edited by hand: regenerate, then review the diff like code.
package golden

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"
)

var update = flag.Bool("update", false, "rewrite golden files with the current output")

// Updating reports whether goldens are being rewritten.
func Updating() bool { return *update || os.Getenv("UPDATE_GOLDEN") == "1" }

// File compares got with the content of path, or writes it when updating.
func File(t *testing.T, path, got string) {
	t.Helper()
	if Updating() {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs from the output (run go test -update and review the diff):\n%s", path, diff(string(want), got))
	}
}

// Archive checks the named sections of a txtar archive: each section in
// outputs must equal the archive's section of that name. When updating, the
// archive is rewritten with the new outputs (inputs kept as they are).
func Archive(t *testing.T, path string, ar *txtar.Archive, outputs map[string]string) {
	t.Helper()
	if Updating() {
		var files []txtar.File
		seen := map[string]bool{}
		for _, f := range ar.Files {
			if out, ok := outputs[f.Name]; ok {
				f.Data = []byte(out)
				seen[f.Name] = true
			}
			files = append(files, f)
		}
		for _, name := range sortedKeys(outputs) {
			if !seen[name] {
				files = append(files, txtar.File{Name: name, Data: []byte(outputs[name])})
			}
		}
		ar.Files = files
		if err := os.WriteFile(path, txtar.Format(ar), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	for _, name := range sortedKeys(outputs) {
		got := outputs[name]
		var want *string
		for _, f := range ar.Files {
			if f.Name == name {
				s := string(f.Data)
				want = &s
			}
		}
		switch {
		case want == nil:
			t.Errorf("%s has no section %q (run go test -update to add it)", path, name)
		case *want != got:
			t.Errorf("%s: section %q differs (run go test -update and review the diff):\n%s", path, name, diff(*want, got))
		}
	}
}

// Section returns the named section of an archive.
func Section(ar *txtar.Archive, name string) (string, bool) {
	for _, f := range ar.Files {
		if f.Name == name {
			return string(f.Data), true
		}
	}
	return "", false
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}

// diff shows the first differing line with a little context; enough to
// find the change, the full diff comes from git after -update.
func diff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b || i >= len(w) || i >= len(g) {
			return "first difference at line " + itoa(i+1) + ":\n  want: " + a + "\n  got:  " + b
		}
	}
	return "(no line differs; trailing newline?)"
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for n > 0 {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
	}
	return string(b)
}
