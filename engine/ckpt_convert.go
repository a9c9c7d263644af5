package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ExportCheckpoint writes the checkpoint in dir as one safetensors file of
// full fp32 tensors, for tools other than amspc: every param's weights
// under its own name and, with optimizer, NAME.adam_m and NAME.adam_v.
// The file's metadata names the format, the model, the step and the seed,
// so that ImportWeights can make a checkpoint of it again.
func ExportCheckpoint(dir, out string, optimizer bool) (*Manifest, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	pr := newPieceReader(dir, m)
	var tensors []stTensor
	for i := range m.Tensors {
		t := &m.Tensors[i]
		if !optimizer && (strings.HasSuffix(t.Name, ".adam_m") || strings.HasSuffix(t.Name, ".adam_v")) {
			continue
		}
		n, _ := ir64(t.Shape)
		data := make([]float32, n)
		if err := pr.read(t, 0, data); err != nil {
			return nil, fmt.Errorf("%s: %v", dir, err)
		}
		tensors = append(tensors, stTensor{Name: t.Name, Shape: t.Shape, Data: data})
	}
	meta := map[string]string{"format": "amspc", "model": m.Model, "step": strconv.Itoa(m.Step), "seed": strconv.FormatUint(m.Seed, 10)}
	if _, _, err := writeSafetensors(out, tensors, meta); err != nil {
		return nil, err
	}
	return m, nil
}

// Weights is a checkpoint's params, read whole on demand.
type Weights struct {
	Manifest *Manifest
	dir      string
	pr       *pieceReader
}

// OpenWeights opens the checkpoint in dir for reading its params whole.
func OpenWeights(dir string) (*Weights, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	return &Weights{Manifest: m, dir: dir, pr: newPieceReader(dir, m)}, nil
}

// Param is param name's values, full fp32, row-major in its shape.
func (w *Weights) Param(name string) ([]float32, error) {
	for i := range w.Manifest.Tensors {
		if t := &w.Manifest.Tensors[i]; t.Name == name {
			n, _ := ir64(t.Shape)
			data := make([]float32, n)
			if err := w.pr.read(t, 0, data); err != nil {
				return nil, fmt.Errorf("%s: %v", w.dir, err)
			}
			return data, nil
		}
	}
	return nil, fmt.Errorf("%s: the checkpoint of model %s has no param %s", w.dir, w.Manifest.Model, name)
}

// ParamShape is a param of the model a checkpoint is for.
type ParamShape struct {
	Name  string
	Shape []int64
}

// ImportWeights makes a checkpoint in dir from a safetensors file of full
// tensors (F32, BF16 or F16): every param of the model under its own name,
// with the param's shape; a tensor the model does not have is refused by
// name, never dropped. With NAME.adam_m and NAME.adam_v for every param
// and a "step" in the file's metadata (what ExportCheckpoint writes), the
// checkpoint resumes at that step; with the weights alone it starts
// training at step 0 from them, Adam's moments zero. A NaN or an
// infinity is refused, naming its tensor and element. It checks nothing
// about dir: PrepareSave does, and takes its lock.
func ImportWeights(path, model string, params []ParamShape, dir string) (*Manifest, error) {
	f, err := readSafetensors(path, maxCheckpointFile, "")
	if err != nil {
		return nil, err
	}
	if m, ok := f.Meta["model"]; ok && m != model {
		return nil, fmt.Errorf("%s: weights of model %s, not %s", path, m, model)
	}
	want := map[string][]int64{}
	for _, p := range params {
		want[p.Name] = p.Shape
	}
	optimizer := false
	for _, name := range f.Names() {
		base := strings.TrimSuffix(strings.TrimSuffix(name, ".adam_m"), ".adam_v")
		if _, ok := want[base]; !ok {
			return nil, fmt.Errorf("%s: tensor %s is not a param of model %s", path, name, model)
		}
		optimizer = optimizer || base != name
	}
	step := 0
	if optimizer {
		s, ok := f.Meta["step"]
		if step, err = strconv.Atoi(s); !ok || err != nil || step < 0 {
			return nil, fmt.Errorf("%s: holds Adam's moments but no step in its metadata (\"step\": %q), so training could not resume where they were made", path, s)
		}
	}
	var seed uint64
	if s, ok := f.Meta["seed"]; ok {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	sub := fmt.Sprintf("step-%08d-%08x", step, rand.Uint32())
	m := &Manifest{Version: CheckpointVersion, Model: model, ModelHash: NewModelID(model, params).Hash, Step: step, Seed: seed}
	var tensors []stTensor
	for _, p := range params {
		for _, c := range components {
			if c != "" && !optimizer {
				continue
			}
			name := p.Name + c
			ti, ok := f.Tensors[name]
			if !ok {
				return nil, fmt.Errorf("%s: no tensor %s (model %s has the param, shape %v)", path, name, model, p.Shape)
			}
			if !slices.Equal(ti.Shape, p.Shape) {
				return nil, fmt.Errorf("%s: tensor %s has shape %v, model %s's has %v", path, name, ti.Shape, model, p.Shape)
			}
			data, err := f.F32(name)
			if err != nil {
				return nil, fmt.Errorf("%s: %v", path, err)
			}
			if i := nonFinite(data); i >= 0 {
				return nil, fmt.Errorf("%s: tensor %s element %d%s is %v; amspc imports finite values only", path, name, i, multiIndex(p.Shape, int64(i)), data[i])
			}
			tensors = append(tensors, stTensor{Name: name, Shape: p.Shape, Data: data})
			mt := ManifestTensor{Name: name, Shape: p.Shape}
			if len(data) > 0 {
				mt.Pieces = []Piece{{File: 0, Start: 0, Len: int64(len(data))}}
			}
			m.Tensors = append(m.Tensors, mt)
		}
	}
	if err := writeImported(dir, sub, m, tensors); err != nil {
		return nil, err
	}
	return m, nil
}

// writeImported writes an imported checkpoint's one file of tensors and
// its manifest m into dir.
func writeImported(dir, sub string, m *Manifest, tensors []stTensor) error {
	model, step := m.Model, m.Step
	slices.SortFunc(m.Tensors, func(a, b ManifestTensor) int { return strings.Compare(a.Name, b.Name) })
	if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
		return err
	}
	prev, _ := previous(dir)
	file := filepath.ToSlash(filepath.Join(sub, "weights.safetensors"))
	n, sum, err := writeSafetensors(filepath.Join(dir, file), tensors, map[string]string{"format": "amspc", "model": model, "step": strconv.Itoa(step)})
	if err == nil {
		m.Files = []ManifestFile{{Path: file, Bytes: n, SHA256: sum}}
		err = writeManifest(dir, m)
	}
	if err != nil {
		os.RemoveAll(filepath.Join(dir, sub))
		return err
	}
	removeStale(dir, prev, m)
	return nil
}

// nonFinite is the index of the first NaN or infinity in x, else -1.
func nonFinite(x []float32) int {
	for i, v := range x {
		if f := float64(v); math.IsNaN(f) || math.IsInf(f, 0) {
			return i
		}
	}
	return -1
}

// multiIndex is flat index i of a tensor of shape as " ([a, b, ...])",
// empty for a vector.
func multiIndex(shape []int64, i int64) string {
	if len(shape) < 2 {
		return ""
	}
	idx := make([]string, len(shape))
	for d := len(shape) - 1; d >= 0; d-- {
		if shape[d] > 0 {
			idx[d] = strconv.FormatInt(i%shape[d], 10)
			i /= shape[d]
		}
	}
	return " ([" + strings.Join(idx, ", ") + "])"
}
