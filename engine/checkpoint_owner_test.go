package engine_test

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"amspc/cost"
	"amspc/engine"
	"amspc/internal/testjob"
)

// TestCheckpointModelHash: the model hash a run computes from its bundle
// is the one an import computes from the model's graph, under any plan,
// for models with tied and shared params; it does not depend on the
// params' order and changes with a shape.
func TestCheckpointModelHash(t *testing.T) {
	for _, model := range []string{"tiny", "tied", "shared", "norepeat"} {
		var params []engine.ParamShape
		job := testjob.Load(t, model)
		for _, v := range job.Graph.Params() {
			params = append(params, engine.ParamShape{Name: v.Name, Shape: v.Shape})
		}
		want := engine.NewModelID(job.Graph.Name, params)
		for _, f := range []cost.Factors{{P: F(1, 1), G: F(1, 1), OS: F(1, 1)}, {P: F(2, 1), G: F(2, 1), OS: F(4, 2)}} {
			if got := engine.BundleModel(compileModel(t, model, 2, 4, f)); got != want {
				t.Errorf("%s under %v: bundle %v, graph %v", model, f, got, want)
			}
		}
		rev := make([]engine.ParamShape, len(params))
		for i, p := range params {
			rev[len(params)-1-i] = p
		}
		if got := engine.NewModelID(job.Graph.Name, rev); got != want {
			t.Errorf("%s: params reversed %v, in order %v", model, got, want)
		}
		params[0].Shape = append([]int64{1}, params[0].Shape...)
		if got := engine.NewModelID(job.Graph.Name, params); got.Hash == want.Hash {
			t.Errorf("%s: the hash does not see a shape", model)
		}
	}
}

// TestCheckpointOwnership: PrepareSave refuses a directory holding another
// model's checkpoint, a later step's, the starting step's unless the run
// resumed from it, or one it cannot read, unless told to overwrite; a
// manifest.json not amspc's even then; a save over a version 1
// checkpoint removes its files, a save beside a user's model.safetensors
// keeps it.
func TestCheckpointOwnership(t *testing.T) {
	b := compile(t, 2, 4, cost.Factors{P: F(2, 1), G: F(2, 1), OS: F(4, 2)})
	id := engine.BundleModel(b)
	r := start(t, b)
	steps(t, r, 2)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "model.safetensors"), []byte("mine"), 0o644)
	if err := r.Save(dir); err != nil {
		t.Fatal(err)
	}
	if m := manifest(t, dir); m.Version != engine.CheckpointVersion || m.ModelHash != id.Hash {
		t.Errorf("manifest version %d, model hash %q, want %d and %q", m.Version, m.ModelHash, engine.CheckpointVersion, id.Hash)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "model.safetensors")); string(b) != "mine" {
		t.Errorf("the user's model.safetensors: %q, %v", b, err)
	}
	var warn bytes.Buffer
	elsewhere := t.TempDir()
	for _, c := range []struct {
		id    engine.ModelID
		first int
		from  string
		want  string
	}{
		{engine.ModelID{Name: "other", Hash: id.Hash}, 2, "", "of model tiny after step 2, not of other"},
		{engine.ModelID{Name: id.Name, Hash: strings.Repeat("0", 64)}, 2, dir, "with other params"},
		{id, 1, "", "later than step 1"},
		{id, 2, "", "where this one starts"},
		{id, 2, elsewhere, "where this one starts"},
	} {
		release, err := engine.PrepareSave(dir, c.id, c.first, c.from, false, &warn)
		release()
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), dir) {
			t.Errorf("%v at step %d: %v, want an error naming %s and saying %q", c.id, c.first, err, dir, c.want)
		}
		release, err = engine.PrepareSave(dir, c.id, c.first, c.from, true, &warn)
		if err != nil {
			t.Errorf("%v at step %d with overwrite: %v", c.id, c.first, err)
		}
		release()
	}
	release, err := engine.PrepareSave(dir, id, 2, filepath.Join(dir, "."), false, &warn)
	if err != nil {
		t.Fatal(err)
	}
	// This process holds the lock, which names its pid: not stale.
	if _, err := engine.PrepareSave(dir, id, 2, dir, false, &warn); err == nil || !strings.Contains(err.Error(), "being written by this process") {
		t.Errorf("a second writer: %v", err)
	}
	release()
	if _, err := os.Stat(filepath.Join(dir, engine.LockName)); !os.IsNotExist(err) {
		t.Errorf("the lock is left after release: %v", err)
	}
	// A manifest.json that is not amspc's is not replaced, even with
	// overwrite; a damaged one of amspc's is, with overwrite only.
	bad := t.TempDir()
	os.WriteFile(filepath.Join(bad, "manifest.json"), []byte("{"), 0o644)
	for _, overwrite := range []bool{false, true} {
		release, err := engine.PrepareSave(bad, id, 0, "", overwrite, &warn)
		release()
		if err == nil || !strings.Contains(err.Error(), "manifest.json is not an amspc checkpoint") || !strings.Contains(err.Error(), "another directory") {
			t.Errorf("over an unreadable manifest (overwrite %v): %v", overwrite, err)
		}
	}
	writeJSON(t, filepath.Join(bad, "manifest.json"), map[string]any{"version": 3, "model": "tiny", "step": -1})
	if release, err := engine.PrepareSave(bad, id, 0, "", false, &warn); err == nil || !strings.Contains(err.Error(), "cannot be read; pass --overwrite") {
		t.Errorf("over a damaged manifest: %v", err)
	} else {
		release()
	}
	release, err = engine.PrepareSave(bad, id, 0, "", true, &warn)
	if err != nil {
		t.Errorf("over a damaged manifest with overwrite: %v", err)
	}
	release()

	// Version 1: a save over it removes model.safetensors and state.json.
	v1 := t.TempDir()
	all := filepath.Join(t.TempDir(), "all.safetensors")
	if _, err := engine.ExportCheckpoint(dir, all, true); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(all)
	os.WriteFile(filepath.Join(v1, "model.safetensors"), data, 0o644)
	writeJSON(t, filepath.Join(v1, "state.json"), map[string]any{"version": 1, "model": b.Model, "step": 2, "seed": 1, "tensors_sha256": sha256hex(data)})
	if release, err := engine.PrepareSave(v1, engine.ModelID{Name: "other"}, 2, "", false, &warn); err == nil || !strings.Contains(err.Error(), "of model tiny after step 2") {
		t.Errorf("over a version 1 checkpoint of another model: %v", err)
	} else {
		release()
	}
	r2 := start(t, b)
	if err := r2.Resume(v1); err != nil {
		t.Fatal(err)
	}
	release, err = r2.PrepareSave(v1, v1, false, &warn)
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

// TestCheckpointLockRecordsProcess: the lock names its process by pid,
// host, boot id and start time, so that a later process given the same
// pid can tell the lock is not its own.
func TestCheckpointLockRecordsProcess(t *testing.T) {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	stat, serr := os.ReadFile("/proc/self/stat")
	if err != nil || serr != nil {
		t.Skip("no /proc here")
	}
	s := string(stat)
	start := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])[19]
	dir := t.TempDir()
	release, err := engine.PrepareSave(dir, engine.ModelID{Name: "tiny"}, 0, "", false, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	var l struct {
		PID    int    `json:"pid"`
		BootID string `json:"boot_id"`
		Start  string `json:"start"`
	}
	b, err := os.ReadFile(filepath.Join(dir, engine.LockName))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatal(err)
	}
	if l.PID != os.Getpid() || l.BootID != strings.TrimSpace(string(boot)) || l.Start != start {
		t.Errorf("lock %s, want pid %d, boot id %s, start %s", b, os.Getpid(), boot, start)
	}
}

// TestCheckpointMessagesFit: under MPI, other processes get only the
// first 240 bytes (agreeMessage) of PrepareSave's error; they hold the
// directory and what to do, even for a long path.
func TestCheckpointMessagesFit(t *testing.T) {
	const agreeMessage = 240
	host, _ := os.Hostname()
	long := strings.Repeat("a-rather-long-folder-name/", 3)
	id := engine.ModelID{Name: "tiny", Hash: strings.Repeat("1", 64)}
	for _, c := range []struct {
		name  string
		setup func(dir string)
		want  []string
	}{
		{"another model", func(dir string) {
			writeJSON(t, filepath.Join(dir, "manifest.json"), map[string]any{"version": 3, "model": "other", "model_hash": strings.Repeat("2", 64), "step": 5})
		}, []string{"--overwrite"}},
		{"other params", func(dir string) {
			writeJSON(t, filepath.Join(dir, "manifest.json"), map[string]any{"version": 3, "model": "tiny", "model_hash": strings.Repeat("2", 64), "step": 5})
		}, []string{"--overwrite"}},
		{"a later step", func(dir string) {
			writeJSON(t, filepath.Join(dir, "manifest.json"), map[string]any{"version": 3, "model": "tiny", "model_hash": id.Hash, "step": 5})
		}, []string{"--overwrite"}},
		{"unreadable", func(dir string) {
			writeJSON(t, filepath.Join(dir, "manifest.json"), map[string]any{"version": 9, "model": "tiny", "step": 5, "files": []map[string]any{{"path": "../x", "sha256": "zz"}}})
		}, []string{"--overwrite"}},
		{"state.json", func(dir string) {
			writeJSON(t, filepath.Join(dir, "state.json"), map[string]any{"version": 1, "epoch": 3})
		}, []string{"state.json", "--overwrite"}},
		{"manifest.json", func(dir string) {
			os.WriteFile(filepath.Join(dir, "manifest.json"), []byte(`{"name": "my-app"}`), 0o644)
		}, []string{"manifest.json", "another directory"}},
		{"locked", func(dir string) {
			writeJSON(t, filepath.Join(dir, engine.LockName), map[string]any{"pid": 1, "host": host + "-elsewhere", "started": "2025-01-02T03:04:05Z"})
		}, []string{engine.LockName}},
		{"unreadable lock", func(dir string) {
			os.WriteFile(filepath.Join(dir, engine.LockName), []byte("{"), 0o644)
		}, []string{engine.LockName}},
	} {
		dir := filepath.Join(t.TempDir(), long)
		os.MkdirAll(dir, 0o755)
		c.setup(dir)
		release, err := engine.PrepareSave(dir, id, 0, "", false, io.Discard)
		release()
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		msg := err.Error()
		cut := msg[:min(len(msg), agreeMessage)]
		for _, w := range append([]string{dir}, c.want...) {
			if !strings.Contains(cut, w) {
				t.Errorf("%s: %q (%d bytes) does not say %q in its first %d bytes", c.name, msg, len(msg), w, agreeMessage)
			}
		}
	}
}
