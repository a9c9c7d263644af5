// Package arch holds tests of the repository's shape: which package may
// import which (CONVENTIONS.md).
package arch

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// imports returns the import paths of the non-test Go files of every
// package under root, keyed by package directory relative to root.
func imports(t *testing.T, root string) map[string][]string {
	out := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			out[filepath.ToSlash(rel)] = append(out[filepath.ToSlash(rel)], p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestImportDirection(t *testing.T) {
	pkgs := imports(t, "../..")
	if len(pkgs) == 0 {
		t.Fatal("no packages found")
	}
	for pkg, imps := range pkgs {
		for _, imp := range imps {
			switch {
			case pkg == "ir" && strings.HasPrefix(imp, "amspc/"):
				t.Errorf("ir imports %s; ir imports nothing of ours", imp)
			case strings.HasPrefix(imp, "github.com/alecthomas/participle") && pkg != "frontend":
				t.Errorf("%s imports participle; only frontend may", pkg)
			case strings.HasPrefix(pkg, "runtime") && (imp == "amspc/passes" || imp == "amspc/frontend" || imp == "amspc/compiler"):
				t.Errorf("%s imports %s; the runtime reads plans, not models", pkg, imp)
			case pkg == "codegen" && imp != "amspc/ir" && imp != "amspc/internal/outfile" && strings.HasPrefix(imp, "amspc/"):
				t.Errorf("codegen imports %s; it encodes what the scheduler decided and imports only ir (and outfile to write it)", imp)
			case pkg == "internal/outfile" && strings.HasPrefix(imp, "amspc/"):
				t.Errorf("internal/outfile imports %s; it writes bytes for every package and imports nothing of ours", imp)
			case pkg == "scheduler" && imp == "amspc/codegen":
				t.Errorf("scheduler imports codegen; it simulates ir programs, which codegen only encodes")
			case (pkg == "planner" || pkg == "scheduler" || pkg == "passes") && imp == "amspc/compiler":
				t.Errorf("%s imports the compiler, which imports it", pkg)
			}
		}
	}
}
