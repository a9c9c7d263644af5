package runtime_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"amspc/cost"
	"amspc/internal/testjob"
	"amspc/runtime"
)

// TestCheckpointModelHash: the model hash a run computes from its bundle
// is the one an import computes from the model's graph, under any plan,
// for models with tied and shared params; it does not depend on the
// params' order and changes with a shape.
func TestCheckpointModelHash(t *testing.T) {
	for _, model := range []string{"tiny", "tied", "shared", "norepeat"} {
		var params []runtime.ParamShape
		job := testjob.Load(t, model)
		for _, v := range job.Graph.Params() {
			params = append(params, runtime.ParamShape{Name: v.Name, Shape: v.Shape})
		}
		want := runtime.NewModelID(job.Graph.Name, params)
		for _, f := range []cost.Factors{{P: F(1, 1), G: F(1, 1), OS: F(1, 1)}, {P: F(2, 1), G: F(2, 1), OS: F(4, 2)}} {
			if got := runtime.BundleModel(compileModel(t, model, 2, 4, f)); got != want {
				t.Errorf("%s under %v: bundle %v, graph %v", model, f, got, want)
			}
		}
		rev := make([]runtime.ParamShape, len(params))
		for i, p := range params {
			rev[len(params)-1-i] = p
		}
		if got := runtime.NewModelID(job.Graph.Name, rev); got != want {
			t.Errorf("%s: params reversed %v, in order %v", model, got, want)
		}
		params[0].Shape = append([]int64{1}, params[0].Shape...)
		if got := runtime.NewModelID(job.Graph.Name, params); got.Hash == want.Hash {
			t.Errorf("%s: the hash does not see a shape", model)
		}
	}
}

// TestCheckpointOwnership: PrepareSave refuses a directory holding another
// model's checkpoint, a later step's, or one it cannot read, unless told
// to overwrite; a save over a version 1 checkpoint removes its files, a
// save beside a user's model.safetensors keeps it.
func TestCheckpointOwnership(t *testing.T) {
	b := compile(t, 2, 4, cost.Factors{P: F(2, 1), G: F(2, 1), OS: F(4, 2)})
	id := runtime.BundleModel(b)
	r := start(t, b)
	steps(t, r, 2)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "model.safetensors"), []byte("mine"), 0o644)
	if err := r.Save(dir); err != nil {
		t.Fatal(err)
	}
	if m := manifest(t, dir); m.Version != 3 || m.ModelHash != id.Hash {
		t.Errorf("manifest version %d, model hash %q, want 3 and %q", m.Version, m.ModelHash, id.Hash)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "model.safetensors")); string(b) != "mine" {
		t.Errorf("the user's model.safetensors: %q, %v", b, err)
	}
	var warn bytes.Buffer
	for _, c := range []struct {
		id    runtime.ModelID
		first int
		want  string
	}{
		{runtime.ModelID{Name: "other", Hash: id.Hash}, 2, "of model tiny after step 2, not of other"},
		{runtime.ModelID{Name: id.Name, Hash: strings.Repeat("0", 64)}, 2, "with other params"},
		{id, 1, "later than step 1"},
	} {
		release, err := runtime.PrepareSave(dir, c.id, c.first, false, &warn)
		release()
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), dir) {
			t.Errorf("%v at step %d: %v, want an error naming %s and saying %q", c.id, c.first, err, dir, c.want)
		}
		release, err = runtime.PrepareSave(dir, c.id, c.first, true, &warn)
		if err != nil {
			t.Errorf("%v at step %d with overwrite: %v", c.id, c.first, err)
		}
		release()
	}
	release, err := runtime.PrepareSave(dir, id, 2, false, &warn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runtime.PrepareSave(dir, id, 2, false, &warn); err == nil || !strings.Contains(err.Error(), "being written by another amspc") {
		t.Errorf("a second writer: %v", err)
	}
	release()
	if _, err := os.Stat(filepath.Join(dir, runtime.LockName)); !os.IsNotExist(err) {
		t.Errorf("the lock is left after release: %v", err)
	}
	// An unreadable manifest is not replaced without overwrite.
	bad := t.TempDir()
	os.WriteFile(filepath.Join(bad, "manifest.json"), []byte("{"), 0o644)
	if release, err := runtime.PrepareSave(bad, id, 0, false, &warn); err == nil || !strings.Contains(err.Error(), "--overwrite") {
		t.Errorf("over an unreadable manifest: %v", err)
	} else {
		release()
	}

	// Version 1: a save over it removes model.safetensors and state.json.
	v1 := t.TempDir()
	all := filepath.Join(t.TempDir(), "all.safetensors")
	if _, err := runtime.ExportCheckpoint(dir, all, true); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(all)
	os.WriteFile(filepath.Join(v1, "model.safetensors"), data, 0o644)
	writeJSON(t, filepath.Join(v1, "state.json"), map[string]any{"version": 1, "model": b.Model, "step": 2, "seed": 1, "tensors_sha256": sha256hex(data)})
	if release, err := runtime.PrepareSave(v1, runtime.ModelID{Name: "other"}, 2, false, &warn); err == nil || !strings.Contains(err.Error(), "of model tiny after step 2") {
		t.Errorf("over a version 1 checkpoint of another model: %v", err)
	} else {
		release()
	}
	r2 := start(t, b)
	if err := r2.Resume(v1); err != nil {
		t.Fatal(err)
	}
	release, err = r2.PrepareSave(v1, false, &warn)
	if err != nil {
		t.Fatal(err)
	}
	steps(t, r2, 1)
	if err := r2.Save(v1); err != nil {
		t.Fatal(err)
	}
	release()
	for _, name := range []string{"model.safetensors", "state.json"} {
		if _, err := os.Stat(filepath.Join(v1, name)); !os.IsNotExist(err) {
			t.Errorf("the version 1 checkpoint's %s is left: %v", name, err)
		}
	}
	if warn.Len() > 0 {
		t.Errorf("warnings: %s", warn.String())
	}
}
