// Package arch holds tests of the repository's shape: which package may
// import which (CONVENTIONS.md).
package arch

import (
	"go/parser"
	"go/token"
	"os"
	"os/exec"
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
	// A rule naming a package that is gone would pass silently.
	for _, named := range []string{"ir", "frontend", "engine", "codegen", "internal/outfile", "simulator", "planner", "passes", "compiler"} {
		if _, ok := pkgs[named]; !ok {
			t.Errorf("the rules name package %s, which does not exist", named)
		}
	}
	for pkg, imps := range pkgs {
		for _, imp := range imps {
			switch {
			case pkg == "ir" && strings.HasPrefix(imp, "amspc/"):
				t.Errorf("ir imports %s; ir imports nothing of ours", imp)
			case strings.HasPrefix(imp, "github.com/alecthomas/participle") && pkg != "frontend":
				t.Errorf("%s imports participle; only frontend may", pkg)
			case strings.HasPrefix(pkg, "engine") && (imp == "amspc/passes" || imp == "amspc/frontend" || imp == "amspc/compiler"):
				t.Errorf("%s imports %s; the engine runs plans, it does not compile models", pkg, imp)
			case pkg == "frontend" && strings.HasPrefix(imp, "amspc/") && imp != "amspc/ir" && imp != "amspc/cluster":
				t.Errorf("frontend imports %s; it reads its sources and imports only ir and cluster (and participle) of ours", imp)
			case pkg == "codegen" && imp != "amspc/ir" && imp != "amspc/internal/outfile" && strings.HasPrefix(imp, "amspc/"):
				t.Errorf("codegen imports %s; it encodes what the scheduler decided and imports only ir (and outfile to write it)", imp)
			case pkg == "internal/outfile" && strings.HasPrefix(imp, "amspc/"):
				t.Errorf("internal/outfile imports %s; it writes bytes for every package and imports nothing of ours", imp)
			case pkg == "simulator" && imp == "amspc/codegen":
				t.Errorf("simulator imports codegen; it simulates ir programs, which codegen only encodes")
			case (pkg == "planner" || pkg == "simulator" || pkg == "passes") && imp == "amspc/compiler":
				t.Errorf("%s imports the compiler, which imports it", pkg)
			}
		}
	}
}

// TestNoStandardNames keeps our package names clear of the standard
// library's importable packages: a package named runtime, errors or sort
// makes every file that needs both rename one of them.
func TestNoStandardNames(t *testing.T) {
	out, err := exec.Command("go", "list", "std").Output()
	if err != nil {
		t.Skipf("go list std: %v", err)
	}
	std := map[string]string{}
	for _, p := range strings.Fields(string(out)) {
		if strings.Contains(p, "internal") || strings.HasPrefix(p, "vendor/") {
			continue // not importable by us
		}
		std[p[strings.LastIndex(p, "/")+1:]] = p
	}
	for dir := range imports(t, "../..") {
		name := dir[strings.LastIndex(dir, "/")+1:]
		if dir == "." {
			continue
		}
		if p, ok := std[name]; ok {
			t.Errorf("package %s has the name of the standard library's %s", dir, p)
		}
	}
}
