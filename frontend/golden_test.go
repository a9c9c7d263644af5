package frontend_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"

	"amspc/frontend"
	"amspc/internal/golden"
	"amspc/ir"
)

// lowerAndPrint loads a job, verifies it and checks that its printed IR
// round-trips through the parser.
func lowerAndPrint(t *testing.T, name string, src []byte) string {
	t.Helper()
	job, err := frontend.Load(frontend.Source{Name: name, Text: src})
	if err != nil {
		t.Fatalf("load %s: %v", name, err)
	}
	if err := ir.Verify(job.Graph); err != nil {
		t.Fatalf("verify %s: %v", name, err)
	}
	text := ir.Print(job.Graph)
	g, err := ir.Parse(name+".ir", text)
	if err != nil {
		t.Fatalf("parse printed IR of %s: %v", name, err)
	}
	if err := ir.Verify(g); err != nil {
		t.Fatalf("verify parsed IR of %s: %v", name, err)
	}
	if again := ir.Print(g); again != text {
		t.Fatalf("print(parse(x)) != x for %s", name)
	}
	return text
}

// TestLowerModels pins the forward graph of every example model.
func TestLowerModels(t *testing.T) {
	files, _ := filepath.Glob("../testdata/models/*.amsp")
	if len(files) == 0 {
		t.Fatal("no models")
	}
	for _, path := range files {
		base := filepath.Base(path)
		t.Run(base, func(t *testing.T) {
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			text := lowerAndPrint(t, base, src)
			golden.File(t, filepath.Join("testdata/lower", strings.TrimSuffix(base, ".amsp")+".ir"), text)
		})
	}
}

// TestLowerCases runs the small cases in testdata/lower/*.txtar: each has a
// model.amsp section and an ir section holding the printed graph.
func TestLowerCases(t *testing.T) {
	files, _ := filepath.Glob("testdata/lower/*.txtar")
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			ar, err := txtar.ParseFile(path)
			if err != nil {
				t.Fatal(err)
			}
			src, ok := golden.Section(ar, "model.amsp")
			if !ok {
				t.Fatalf("%s has no model.amsp section", path)
			}
			text := lowerAndPrint(t, "model.amsp", []byte(src))
			golden.Archive(t, path, ar, map[string]string{"ir": text})
		})
	}
}

// TestSourcesInSync keeps testdata/models identical to the normative
// examples when the shared design folder is present.
func TestSourcesInSync(t *testing.T) {
	shared, _ := filepath.Glob("../../shared/examples/*.amsp")
	if len(shared) == 0 {
		t.Skip("../shared/examples not present in this checkout")
	}
	for _, s := range shared {
		want, _ := os.ReadFile(s)
		got, err := os.ReadFile(filepath.Join("../testdata/models", filepath.Base(s)))
		if err != nil || string(got) != string(want) {
			t.Errorf("testdata/models/%s is out of sync with %s", filepath.Base(s), s)
		}
	}
}
