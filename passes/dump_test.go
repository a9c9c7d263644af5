package passes_test

import (
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"

	"amspc/compiler"
	"amspc/cost"
	"amspc/frontend"
	"amspc/internal/golden"
	"amspc/passes"
)

// TestDumpAfterEachPass pins the IR after one pass: each archive in
// testdata/<pass>/ holds a model (model.amsp) and the expected
// -dump-after=<pass> output (section "dump"), which -update regenerates.
// A model with a shard section is compiled under that plan on its
// cluster (the distribution passes need one), as amspc compile does: the
// fit pass takes the deepest prefetch that fits the cluster's memory. An
// optional section "d" holds -d flags (check is always on).
// Every pass of the pipeline has at least one case.
func TestDumpAfterEachPass(t *testing.T) {
	for _, name := range passes.Names() {
		files, _ := filepath.Glob(filepath.Join("testdata", name, "*.txtar"))
		if len(files) == 0 {
			t.Errorf("pass %s has no golden case in testdata/%s/", name, name)
		}
		for _, path := range files {
			t.Run(name+"/"+filepath.Base(path), func(t *testing.T) {
				ar, err := txtar.ParseFile(path)
				if err != nil {
					t.Fatal(err)
				}
				src, _ := golden.Section(ar, "model.amsp")
				job, err := frontend.Load(frontend.Source{Name: "model.amsp", Text: []byte(src)})
				if err != nil {
					t.Fatal(err)
				}
				var dump strings.Builder
				opts := passes.Options{Check: true, Recompute: job.Train.Recompute, DumpAfter: name, Dump: &dump}
				if d, ok := golden.Section(ar, "d"); ok {
					if err := opts.SetDebug(strings.TrimSpace(d)); err != nil {
						t.Fatal(err)
					}
				}
				if isDist(name) {
					// A distribution pass: compiled under the shard
					// section's plan on the file's cluster.
					plan, _, err := compiler.Choose(job, cost.Config{})
					if err != nil {
						t.Fatal(err)
					}
					if _, err := compiler.Compile(job, plan, compiler.Options{Passes: opts}); err != nil {
						t.Fatal(err)
					}
				} else if _, err := passes.Run(job, opts); err != nil {
					t.Fatal(err)
				}
				golden.Archive(t, path, ar, map[string]string{"dump": dump.String()})
			})
		}
	}
}

func isDist(name string) bool {
	for _, p := range passes.Pipeline {
		if p.Name == name {
			return p.Dist
		}
	}
	return false
}
