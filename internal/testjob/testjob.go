// Package testjob loads the example models for tests of every package,
// optionally with extra sections (a cluster, a train section, a shard
// choice) given as source text that replace the model file's.
package testjob

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"amspc/frontend"
	"amspc/ir"
)

// Path is the path of testdata/models/NAME.amsp.
func Path(name string) string {
	_, here, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(here), "../../testdata/models", name+".amsp")
}

// Load loads an example model with extra sections; a failure fails the
// test.
func Load(t testing.TB, name string, extra ...string) *ir.Job {
	t.Helper()
	b, err := os.ReadFile(Path(name))
	if err != nil {
		t.Fatal(err)
	}
	var srcs []frontend.Source
	for i, x := range extra {
		srcs = append(srcs, frontend.Source{Name: fmt.Sprintf("extra%d.amsp", i), Text: []byte(x)})
	}
	job, err := frontend.Load(frontend.Source{Name: name + ".amsp", Text: b}, srcs...)
	if err != nil {
		t.Fatal(err)
	}
	return job
}
