package passes_test

import (
	"os"
	"testing"

	"amspc/frontend"
	"amspc/ir"
)

func load(t testing.TB, name string) *ir.Job {
	t.Helper()
	b, err := os.ReadFile("../testdata/models/" + name + ".amsp")
	if err != nil {
		t.Fatal(err)
	}
	job, err := frontend.Load(frontend.Source{Name: name + ".amsp", Text: b})
	if err != nil {
		t.Fatal(err)
	}
	return job
}
