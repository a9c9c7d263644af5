package arch

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// maxCLIFunc is the longest a function of cmd/amspc may be, in lines from
// its func keyword to its closing brace: the CLI parses flags, builds a
// library call and reports its result; mechanism that needs more belongs
// in the libraries (engine's Trainer, compiler.Compile, planner).
const maxCLIFunc = 80

// TestThinCLI keeps cmd/amspc's functions short.
func TestThinCLI(t *testing.T) {
	files, err := filepath.Glob("../../cmd/amspc/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no files in cmd/amspc (%v)", err)
	}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			start, end := fset.Position(fn.Pos()), fset.Position(fn.End())
			if n := end.Line - start.Line + 1; n > maxCLIFunc {
				t.Errorf("%s:%d: %s is %d lines (at most %d)", filepath.Base(path), start.Line, fn.Name.Name, n, maxCLIFunc)
			}
		}
	}
}
