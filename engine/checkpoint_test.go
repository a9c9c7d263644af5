package engine_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"amspc/codegen"
	"amspc/cost"
	"amspc/engine"
	"amspc/ir"
)

// start starts a run of b on the README corpus (on the backends of
// newBackend, if given).
func start(t *testing.T, b *codegen.Bundle, newBackend ...func(int) (engine.Backend, error)) *engine.Run {
	t.Helper()
	tr := b.Train
	r := &engine.Run{Bundle: b, Seed: 1, Data: &engine.Data{Tokens: corpus(t), SeqLen: int(tr.SeqLen), MicroBatch: int(tr.MicroBatch), Global: int(tr.GlobalBatch)}}
	if len(newBackend) > 0 {
		r.NewBackend = newBackend[0]
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	return r
}

func steps(t *testing.T, r *engine.Run, n int) []float64 {
	t.Helper()
	var out []float64
	for range n {
		l, err := r.Step()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

// resumed resumes dir under b and trains n steps.
func resumed(t *testing.T, b *codegen.Bundle, dir string, n int) []float64 {
	t.Helper()
	r := start(t, b)
	if err := r.Resume(dir); err != nil {
		t.Fatal(err)
	}
	return steps(t, r, n)
}

func manifest(t *testing.T, dir string) *engine.Manifest {
	t.Helper()
	m, err := engine.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

var F = func(a, b int) ir.Factor { return ir.Factor{S0: a, S1: b} }

const bf16Train = `train { seq_len = 64 micro_batch = 2 global_batch = 32 precision = bf16
  optimizer = adamw(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1) }`

// TestResumeUnderOtherPlans trains under 2/2/8 on 2x4, saves at step 10,
// and resumes: under the same plan the losses are bitwise those of the
// uninterrupted run; under other plans and rank counts (reduction orders
// differ) within 1e-5.
func TestResumeUnderOtherPlans(t *testing.T) {
	a := cost.Factors{P: F(2, 1), G: F(2, 1), OS: F(4, 2)}
	const at, more = 10, 3
	full := train(t, compile(t, 2, 4, a), at+more)
	dir := t.TempDir()
	r := start(t, compile(t, 2, 4, a))
	steps(t, r, at)
	if err := r.Save(dir); err != nil {
		t.Fatal(err)
	}
	m := manifest(t, dir)
	// 2/2/8 on 8 ranks: every rank holds its own eighth of the state.
	if m.Step != at || len(m.Files) != 8 || m.Ranks != 8 {
		t.Errorf("manifest: step %d, %d files, %d ranks; want %d, 8, 8", m.Step, len(m.Files), m.Ranks, at)
	}
	for i, l := range resumed(t, compile(t, 2, 4, a), dir, more) {
		if l != full[at+i] {
			t.Errorf("same plan, step %d: resumed loss %.17g, uninterrupted %.17g", at+i+1, l, full[at+i])
		}
	}
	for _, c := range []struct {
		nodes, gpus int
		f           cost.Factors
	}{
		{2, 4, cost.Factors{P: F(1, 1), G: F(1, 1), OS: F(1, 1)}}, // DDP
		{2, 4, cost.Factors{P: F(1, 1), G: F(1, 1), OS: F(4, 2)}},
		{1, 4, cost.Factors{P: F(2, 1), G: F(4, 1), OS: F(4, 1)}},
		{1, 1, cost.Factors{P: F(1, 1), G: F(1, 1), OS: F(1, 1)}},
	} {
		for i, l := range resumed(t, compile(t, c.nodes, c.gpus, c.f), dir, more) {
			if d := math.Abs(l-full[at+i]) / full[at+i]; d > 1e-5 {
				t.Errorf("%dx%d %v step %d: resumed loss %.9g, uninterrupted %.9g", c.nodes, c.gpus, c.f, at+i+1, l, full[at+i])
			}
		}
	}
	// A DDP checkpoint is written once, by rank 0, and reshards to ZeRO-3.
	ddp := cost.Factors{P: F(1, 1), G: F(1, 1), OS: F(1, 1)}
	rd := start(t, compile(t, 2, 4, ddp))
	steps(t, rd, 2)
	ddir := t.TempDir()
	if err := rd.Save(ddir); err != nil {
		t.Fatal(err)
	}
	if m := manifest(t, ddir); len(m.Files) != 1 || !strings.HasSuffix(m.Files[0].Path, "/rank-00000.safetensors") {
		t.Errorf("DDP checkpoint files %v, want rank 0's alone", m.Files)
	}
	wantDDP := steps(t, rd, 1)
	z3 := resumed(t, compile(t, 2, 4, cost.Factors{P: F(4, 2), G: F(4, 2), OS: F(4, 2)}), ddir, 1)
	if d := math.Abs(z3[0]-wantDDP[0]) / wantDDP[0]; d > 1e-5 {
		t.Errorf("DDP checkpoint under ZeRO-3: loss %.9g, DDP's %.9g", z3[0], wantDDP[0])
	}
}

// TestCheckpointRefusesDamage: a changed byte, a truncated file, a
// missing file, a manifest naming a path outside the checkpoint, and a
// checkpoint of another model are refused with what is wrong.
func TestCheckpointRefusesDamage(t *testing.T) {
	b := compile(t, 2, 4, cost.Factors{P: F(2, 1), G: F(2, 1), OS: F(4, 2)})
	r := start(t, b)
	steps(t, r, 1)
	fresh := func() (string, *engine.Manifest) {
		dir := t.TempDir()
		if err := r.Save(dir); err != nil {
			t.Fatal(err)
		}
		return dir, manifest(t, dir)
	}
	for _, c := range []struct {
		name   string
		damage func(dir string, m *engine.Manifest)
		want   string
	}{
		{"flipped byte", func(dir string, m *engine.Manifest) {
			p := filepath.Join(dir, m.Files[3].Path)
			data, _ := os.ReadFile(p)
			data[len(data)-5] ^= 1
			os.WriteFile(p, data, 0o644)
		}, "SHA-256"},
		{"truncated", func(dir string, m *engine.Manifest) {
			p := filepath.Join(dir, m.Files[5].Path)
			data, _ := os.ReadFile(p)
			os.WriteFile(p, data[:len(data)/2], 0o644)
		}, "truncated"},
		{"missing", func(dir string, m *engine.Manifest) { os.Remove(filepath.Join(dir, m.Files[0].Path)) }, "no such file"},
		{"escaping path", func(dir string, m *engine.Manifest) {
			m.Files[1].Path = "../elsewhere.safetensors"
			writeJSON(t, filepath.Join(dir, "manifest.json"), m)
		}, "leaves the checkpoint directory"},
		{"overlapping pieces", func(dir string, m *engine.Manifest) {
			m.Tensors[0].Pieces = append(m.Tensors[0].Pieces, m.Tensors[0].Pieces[0])
			writeJSON(t, filepath.Join(dir, "manifest.json"), m)
		}, "overlapping"},
		{"another model", func(dir string, m *engine.Manifest) {
			m.Model = "llama"
			writeJSON(t, filepath.Join(dir, "manifest.json"), m)
		}, "checkpoint of model llama"},
		{"no manifest", func(dir string, m *engine.Manifest) { os.Remove(filepath.Join(dir, "manifest.json")) }, "holds no checkpoint"},
	} {
		dir, m := fresh()
		c.damage(dir, m)
		err := start(t, b).Resume(dir)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.want)
		}
	}
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCheckpointSurvivesCrash: what a save interrupted at any point
// leaves (some of its files, a manifest not yet renamed into place) does
// not disturb the previous checkpoint, which still loads; the next save
// removes it all, leaving no hidden files.
func TestCheckpointSurvivesCrash(t *testing.T) {
	f := cost.Factors{P: F(2, 1), G: F(2, 1), OS: F(4, 2)}
	r := start(t, compile(t, 2, 4, f))
	steps(t, r, 2)
	dir, next := t.TempDir(), t.TempDir()
	if err := r.Save(dir); err != nil {
		t.Fatal(err)
	}
	want := steps(t, r, 1)
	if err := r.Save(next); err != nil {
		t.Fatal(err)
	}
	// The interrupted save: its directory with half its files, one of
	// them cut short, a temporary file, and a manifest not yet renamed.
	m := manifest(t, next)
	sub := filepath.Dir(m.Files[0].Path)
	os.MkdirAll(filepath.Join(dir, sub), 0o755)
	for i, mf := range m.Files[:4] {
		data, _ := os.ReadFile(filepath.Join(next, mf.Path))
		if i == 3 {
			data = data[:len(data)/3]
		}
		os.WriteFile(filepath.Join(dir, mf.Path), data, 0o644)
	}
	os.WriteFile(filepath.Join(dir, sub, ".rank-00004.safetensors.tmp-123"), []byte("partial"), 0o644)
	mb, _ := os.ReadFile(filepath.Join(next, "manifest.json"))
	os.WriteFile(filepath.Join(dir, ".manifest.json.tmp-456"), mb[:len(mb)/2], 0o644)

	r2 := start(t, compile(t, 2, 4, f))
	if err := r2.Resume(dir); err != nil {
		t.Fatalf("the previous checkpoint does not load: %v", err)
	}
	if r2.Steps() != 2 {
		t.Errorf("resumed at step %d, want 2", r2.Steps())
	}
	if got := steps(t, r2, 1); got[0] != want[0] {
		t.Errorf("loss after resuming %.17g, want %.17g", got[0], want[0])
	}
	if err := r2.Save(dir); err != nil {
		t.Fatal(err)
	}
	m = manifest(t, dir)
	var left []string
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		rel, _ := filepath.Rel(dir, path)
		if rel == "." || d.IsDir() && filepath.Dir(rel) == "." {
			return nil
		}
		left = append(left, filepath.ToSlash(rel))
		return nil
	})
	var want2 []string
	want2 = append(want2, "manifest.json")
	for _, mf := range m.Files {
		want2 = append(want2, mf.Path)
	}
	if fmt.Sprint(left) != fmt.Sprint(want2) {
		t.Errorf("after the next save the directory holds %v, want %v", left, want2)
	}
}

// TestCheckpointAcrossPrecisions: a bf16 checkpoint resumes bitwise under
// its own plan (P is the rounding of the saved fp32 master), and loads
// under fp32 plans and other bf16 plans, the weights being fp32 in both.
func TestCheckpointAcrossPrecisions(t *testing.T) {
	f := cost.Factors{P: F(2, 1), G: F(2, 1), OS: F(4, 2)}
	full := train(t, compile(t, 2, 4, f, bf16Train), 4)
	r := start(t, compile(t, 2, 4, f, bf16Train))
	steps(t, r, 3)
	dir := t.TempDir()
	if err := r.Save(dir); err != nil {
		t.Fatal(err)
	}
	if got := resumed(t, compile(t, 2, 4, f, bf16Train), dir, 1); got[0] != full[3] {
		t.Errorf("bf16, same plan: loss %.17g, uninterrupted %.17g", got[0], full[3])
	}
	for _, c := range []struct {
		f     cost.Factors
		extra []string
	}{
		{cost.Factors{P: F(1, 1), G: F(1, 1), OS: F(1, 1)}, []string{bf16Train}},
		{f, nil},
	} {
		got := resumed(t, compile(t, 2, 4, c.f, c.extra...), dir, 1)
		if d := math.Abs(got[0]-full[3]) / full[3]; d > 1e-2 {
			t.Errorf("%v %v: loss %.6g, bf16 uninterrupted %.6g", c.f, c.extra, got[0], full[3])
		}
	}
}

// TestExportImport: export writes full tensors (their shapes, the
// weights alone or with Adam's moments); importing the export with its
// moments resumes bitwise where the checkpoint did; importing the weights
// alone starts at step 0; a version 1 checkpoint (state.json and one
// file of full tensors) still loads.
func TestExportImport(t *testing.T) {
	f := cost.Factors{P: F(2, 1), G: F(2, 1), OS: F(4, 2)}
	b := compile(t, 2, 4, f)
	r := start(t, b)
	steps(t, r, 3)
	dir := t.TempDir()
	if err := r.Save(dir); err != nil {
		t.Fatal(err)
	}
	want := steps(t, r, 2)
	out := t.TempDir()
	weights, all := filepath.Join(out, "w.safetensors"), filepath.Join(out, "all.safetensors")
	if _, err := engine.ExportCheckpoint(dir, weights, false); err != nil {
		t.Fatal(err)
	}
	if _, err := engine.ExportCheckpoint(dir, all, true); err != nil {
		t.Fatal(err)
	}
	params := paramShapes(b)
	for i, p := range params {
		if p.Name == "embed" && len(p.Shape) != 2 {
			t.Errorf("param %d %s shape %v", i, p.Name, p.Shape)
		}
	}
	back := t.TempDir()
	m, err := engine.ImportWeights(all, b.Model, params, back)
	if err != nil {
		t.Fatal(err)
	}
	if m.Step != 3 {
		t.Errorf("imported at step %d, want 3", m.Step)
	}
	if got := resumed(t, b, back, 2); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after export and import: losses %v, want %v", got, want)
	}
	fresh := t.TempDir()
	if m, err := engine.ImportWeights(weights, b.Model, params, fresh); err != nil || m.Step != 0 {
		t.Fatalf("import of the weights alone: step %v, %v", m, err)
	}
	r0 := start(t, b)
	if err := r0.Resume(fresh); err != nil || r0.Steps() != 0 {
		t.Fatalf("resume of imported weights: step %d, %v", r0.Steps(), err)
	}
	steps(t, r0, 1)
	// Refused: a tensor the model lacks, a wrong shape, another model.
	bad := append([]engine.ParamShape(nil), params[1:]...)
	if _, err := engine.ImportWeights(weights, b.Model, bad, t.TempDir()); err == nil || !strings.Contains(err.Error(), params[0].Name+" is not a param") {
		t.Errorf("import with an extra tensor: %v", err)
	}
	bad = append([]engine.ParamShape(nil), params...)
	bad[0].Shape = []int64{1, 2}
	if _, err := engine.ImportWeights(weights, b.Model, bad, t.TempDir()); err == nil || !strings.Contains(err.Error(), "has shape") {
		t.Errorf("import with a wrong shape: %v", err)
	}
	if _, err := engine.ImportWeights(weights, "other", params, t.TempDir()); err == nil || !strings.Contains(err.Error(), "weights of model") {
		t.Errorf("import for another model: %v", err)
	}
	// Version 1: the same tensors as one file, named by state.json.
	v1 := t.TempDir()
	data, _ := os.ReadFile(all)
	os.WriteFile(filepath.Join(v1, "model.safetensors"), data, 0o644)
	writeJSON(t, filepath.Join(v1, "state.json"), map[string]any{"version": 1, "model": b.Model, "step": 3, "seed": 1, "tensors_sha256": sha256hex(data)})
	if got := resumed(t, b, v1, 2); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("version 1 checkpoint: losses %v, want %v", got, want)
	}
}

// paramShapes lists a bundle's params with their shapes.
func paramShapes(b *codegen.Bundle) []engine.ParamShape {
	p := b.Template(0)
	var out []engine.ParamShape
	for _, l := range p.Layouts {
		for _, s := range l.Params {
			shape := []int64{s.Elems}
			for _, buf := range p.Buffers {
				if buf.Name == s.Name && buf.Shape != nil {
					shape = buf.Shape
				}
			}
			out = append(out, engine.ParamShape{Name: s.Name, Shape: shape})
		}
	}
	return out
}

func sha256hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
