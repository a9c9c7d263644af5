package passes_test

import (
	"amspc/internal/testjob"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"

	"amspc/frontend"
	"amspc/internal/golden"
	"amspc/ir"
	"amspc/passes"
)

// TestPipeline runs every pass on the models in testdata/pipeline/*.txtar
// (a model.amsp section) with verification after each pass, and pins the
// training graph (section "ir"); the graph also round-trips through the
// printer and parser.
func TestPipeline(t *testing.T) {
	files, _ := filepath.Glob("testdata/pipeline/*.txtar")
	if len(files) == 0 {
		t.Fatal("no cases")
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			ar, err := txtar.ParseFile(path)
			if err != nil {
				t.Fatal(err)
			}
			src, _ := golden.Section(ar, "model.amsp")
			job, err := frontend.Load(frontend.Source{Name: "model.amsp", Text: []byte(src)})
			if err != nil {
				t.Fatal(err)
			}
			s, err := passes.Run(job, passes.Options{Check: true, Recompute: job.Train.Recompute})
			if err != nil {
				t.Fatal(err)
			}
			text := ir.Print(s.Graph)
			g, err := ir.Parse("model.ir", text)
			if err != nil {
				t.Fatal(err)
			}
			if err := ir.Verify(g); err != nil {
				t.Fatal(err)
			}
			if ir.Print(g) != text {
				t.Fatal("print(parse(x)) != x")
			}
			var stages strings.Builder
			passes.DumpPartition(&stages, s.Partition)
			golden.Archive(t, path, ar, map[string]string{"ir": text, "stages": stages.String()})
		})
	}
}

// TestEveryParamGetsStates: each param has a gradient, AdamW states, one
// adamw op and an update, on the example models.
func TestEveryParamGetsStates(t *testing.T) {
	for _, name := range []string{"tiny", "llama-7b"} {
		job := testjob.Load(t, name)
		s, err := passes.Run(job, passes.Options{})
		if err != nil {
			t.Fatal(err)
		}
		params := job.Graph.Params()
		if len(s.Grads) != len(params) || len(s.States) != len(params) {
			t.Fatalf("%s: %d params, %d grads, %d states", name, len(params), len(s.Grads), len(s.States))
		}
		for i, ps := range s.States {
			if ps.Param != params[i] || s.Grads[i].Grad.Role != ir.Grad || ps.NewParam.Updates != params[i] {
				t.Errorf("%s: param %s is not wired to its grad and update", name, params[i].Name)
			}
			if st := ps.Step; st == nil || st.Kind != ir.AdamWStep || st.Args[3] != s.Grads[i].Grad || st.Results[1].Updates != ps.M || st.Results[2].Updates != ps.V {
				t.Errorf("%s: param %s's adamw op is not wired to its grad and moments", name, params[i].Name)
			}
			mixed := params[i].DType != ir.F32
			if (ps.Master != nil) != mixed {
				t.Errorf("%s: master copy of %s: %v, mixed precision %v", name, params[i].Name, ps.Master != nil, mixed)
			}
		}
	}
}

func TestDumpAfter(t *testing.T) {
	var b strings.Builder
	if _, err := passes.Run(testjob.Load(t, "tiny"), passes.Options{DumpAfter: "autodiff", Dump: &b}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "# after autodiff\nmodel tiny") || strings.Contains(b.String(), "adamw") {
		t.Errorf("dump after autodiff:\n%.200s", b.String())
	}
	if _, err := passes.Run(testjob.Load(t, "tiny"), passes.Options{DumpAfter: "nosuch"}); err == nil || !strings.Contains(err.Error(), "no such pass") {
		t.Errorf("unknown pass: %v", err)
	}
}

// TestSetDebug: -d takes check and NAME/off for an optional pass,
// comma-separated; a pass that is not optional, or not a pass, is
// refused by name, and so is Options.Off naming one.
func TestSetDebug(t *testing.T) {
	var o passes.Options
	if err := o.SetDebug("check,bucket/off,hierarchical/off,bucket/off"); err != nil || !o.Check || strings.Join(o.Off, " ") != "bucket hierarchical" {
		t.Errorf("check,bucket/off,hierarchical/off: %v, %+v", err, o)
	}
	for _, c := range []struct{ flags, want string }{
		{"nocheck", "unknown debug flag -d=nocheck (known: check, and PASS/off for an optional pass: fuse, reduce-scatter, redundant-gathers, bucket, hierarchical)"},
		{"check,lower/off", "-d=lower/off: lower cannot be switched off; the optional passes are fuse, reduce-scatter, redundant-gathers, bucket, hierarchical"},
		{"sharding/off", "-d=sharding/off: no such pass (passes: fuse, autodiff, "},
	} {
		var o passes.Options
		if err := o.SetDebug(c.flags); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("-d=%s: %v, want %s", c.flags, err, c.want)
		}
	}
	if _, err := passes.Run(testjob.Load(t, "tiny"), passes.Options{Off: []string{"schedule"}}); err == nil || !strings.Contains(err.Error(), "schedule cannot be switched off") {
		t.Errorf("Off: [schedule]: %v", err)
	}
}
