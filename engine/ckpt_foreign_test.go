package engine

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestForeignCheckpoints: another framework's tensors import through a
// mapping (a transpose, an offset, a tied copy), export back in shards
// with an index, and import again bit for bit; a missing, extra,
// misshapen, doubled, non-finite or unequal copy tensor is refused by
// name.
func TestForeignCheckpoints(t *testing.T) {
	params := []ParamShape{{"a", []int64{2, 3}}, {"b", []int64{4}}}
	mapping := []Foreign{
		{Param: "a", Name: "x.weight", Transpose: true},
		{Param: "b", Name: "y.weight", Offset: 1},
		{Param: "a", Name: "x_copy", Transpose: true, Copy: true},
	}
	skip := func(name string) string {
		if strings.HasSuffix(name, ".inv_freq") {
			return "computed"
		}
		return ""
	}
	x := []float32{1, 2, 3, 4, 5, 6} // [3, 2]: a is its transpose
	y := []float32{0.5, -0.25, 0, 2}
	write := func(t *testing.T, dir string, ts ...stTensor) []string {
		t.Helper()
		path := filepath.Join(dir, "model.safetensors")
		if _, _, err := writeSafetensors(path, ts, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
		return []string{path}
	}
	good := func() []stTensor {
		return []stTensor{
			{Name: "x.weight", Shape: []int64{3, 2}, Data: slices.Clone(x)},
			{Name: "y.weight", Shape: []int64{4}, Data: slices.Clone(y)},
			{Name: "x_copy", Shape: []int64{3, 2}, Data: slices.Clone(x)},
			{Name: "rotary.inv_freq", Shape: []int64{1}, Data: []float32{9}},
		}
	}

	src := t.TempDir()
	ckpt := filepath.Join(t.TempDir(), "ck")
	if _, err := ImportForeign(write(t, src, good()...), mapping, skip, "m", params, 7, ckpt); err != nil {
		t.Fatal(err)
	}
	w, err := OpenWeights(ckpt)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]float32{"a": {1, 3, 5, 2, 4, 6}, "b": {1.5, 0.75, 1, 3}} {
		got, err := w.Param(name)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("param %s: %v (%v), want %v", name, got, err, want)
		}
	}
	if w.Manifest.Seed != 7 || w.Manifest.Step != 0 {
		t.Errorf("seed %d step %d, want 7 and 0", w.Manifest.Seed, w.Manifest.Step)
	}

	out := t.TempDir()
	files, err := ExportForeign(ckpt, mapping, out, 16) // 16 bytes a shard: a and b apart
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 || filepath.Base(files[2]) != "model.safetensors.index.json" {
		t.Fatalf("export wrote %v, want two shards and the index", files)
	}
	shards, err := ForeignFiles(out)
	if err != nil || len(shards) != 2 {
		t.Fatalf("ForeignFiles of the export: %v, %v", shards, err)
	}
	again := filepath.Join(t.TempDir(), "ck")
	if _, err := ImportForeign(shards, mapping, skip, "m", params, 7, again); err != nil {
		t.Fatal(err)
	}
	w2, err := OpenWeights(again)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range params {
		a, _ := w.Param(p.Name)
		b, _ := w2.Param(p.Name)
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
				t.Errorf("%s[%d]: %v, %v after the round trip", p.Name, i, a[i], b[i])
			}
		}
	}

	for _, c := range []struct {
		name string
		edit func([]stTensor) []stTensor
		want string
	}{
		{"extra", func(ts []stTensor) []stTensor {
			return append(ts, stTensor{Name: "z", Shape: []int64{1}, Data: []float32{0}})
		}, "tensor z is not a weight of model m"},
		{"missing", func(ts []stTensor) []stTensor { return ts[1:] }, "no tensor x.weight"},
		{"misshapen", func(ts []stTensor) []stTensor { ts[0].Shape = []int64{2, 3}; return ts }, "tensor x.weight has shape [2 3]; model m's param a needs [3 2]"},
		{"nan", func(ts []stTensor) []stTensor { ts[1].Data[2] = float32(math.NaN()); return ts }, "tensor y.weight element 2 is NaN"},
		{"copy", func(ts []stTensor) []stTensor { ts[2].Data[0] = 7; return ts }, "tensor x_copy is not the copy of param a"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := ImportForeign(write(t, dir, c.edit(good())...), mapping, skip, "m", params, 7, filepath.Join(dir, "ck"))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one saying %q", err, c.want)
			}
		})
	}
	t.Run("doubled", func(t *testing.T) {
		dir := t.TempDir()
		files := write(t, dir, good()...)
		second := filepath.Join(dir, "second.safetensors")
		if _, _, err := writeSafetensors(second, good()[:1], nil); err != nil {
			t.Fatal(err)
		}
		_, err := ImportForeign(append(files, second), mapping, skip, "m", params, 7, filepath.Join(dir, "ck"))
		if err == nil || !strings.Contains(err.Error(), "tensor x.weight is in") {
			t.Errorf("error %v, want one naming x.weight in two files", err)
		}
	})
	t.Run("no weights", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "pytorch_model.bin"), nil, 0o644)
		if _, err := ForeignFiles(dir); err == nil || !strings.Contains(err.Error(), "no model.safetensors") {
			t.Errorf("error %v", err)
		}
	})
}
