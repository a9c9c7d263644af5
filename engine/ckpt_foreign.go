package engine

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"amspc/kernels"
)

// Foreign is where one param lives in another framework's checkpoint
// (Hugging Face's, importer/hf maps it): the tensor's name and the layout
// change between the two.
type Foreign struct {
	Param, Name string
	Transpose   bool    // the other framework's 2-D tensor is the param's transpose
	Offset      float32 // the param's value is the other's plus this
	// Copy: the tensor is a second copy of a param another tensor
	// holds (a tied head some checkpoints store beside the embedding):
	// checked equal to it when present, never written.
	Copy bool
}

// ForeignFiles lists the safetensors files of a Hugging Face model
// directory: those model.safetensors.index.json's weight_map names (a
// sharded checkpoint), else model.safetensors.
func ForeignFiles(dir string) ([]string, error) {
	index := filepath.Join(dir, "model.safetensors.index.json")
	b, err := os.ReadFile(index)
	if os.IsNotExist(err) {
		one := filepath.Join(dir, "model.safetensors")
		if _, err := os.Stat(one); err != nil {
			return nil, fmt.Errorf("%s: no model.safetensors or model.safetensors.index.json (amspc reads safetensors weights; a pytorch_model.bin is not supported)", dir)
		}
		return []string{one}, nil
	}
	if err != nil {
		return nil, err
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &idx); err != nil || len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("%s: not an index of safetensors shards (want a weight_map of tensor names to files): %v", index, err)
	}
	seen := map[string]bool{}
	var files []string
	for _, f := range idx.WeightMap {
		if f != filepath.Base(f) {
			return nil, fmt.Errorf("%s: shard %q is not a file beside the index", index, f)
		}
		if !seen[f] {
			seen[f] = true
			files = append(files, filepath.Join(dir, f))
		}
	}
	sort.Strings(files)
	return files, nil
}

// ImportForeign makes a step-0 checkpoint in dir from another framework's
// safetensors files (ForeignFiles): each param from its tensor of
// mapping, changed to the param's layout, in fp32 (BF16 and F16 widen
// exactly). A tensor mapping names that is missing or misshapen, one in
// two files, a non-finite value, and a tensor the files hold that no
// param maps and skip (why a tensor is left out, "" for no reason) does
// not excuse are refused by name. seed is the checkpoint's seed (the
// data order of a run that resumes it).
func ImportForeign(files []string, mapping []Foreign, skip func(name string) string, model string, params []ParamShape, seed uint64, dir string) (*Manifest, error) {
	where := map[string]*stFile{}
	file := map[string]string{}
	for _, path := range files {
		f, err := readSafetensors(path, maxCheckpointFile, "")
		if err != nil {
			return nil, err
		}
		for name := range f.Tensors {
			if prev, ok := file[name]; ok {
				return nil, fmt.Errorf("tensor %s is in %s and in %s", name, prev, path)
			}
			where[name], file[name] = f, path
		}
	}
	shapes := map[string][]int64{}
	for _, p := range params {
		shapes[p.Name] = p.Shape
	}
	byName := map[string]Foreign{}
	for _, w := range mapping {
		byName[w.Name] = w
	}
	names := make([]string, 0, len(where))
	for n := range where {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if _, ok := byName[n]; !ok && skip(n) == "" {
			return nil, fmt.Errorf("%s: tensor %s is not a weight of model %s", file[n], n, model)
		}
	}
	sub := fmt.Sprintf("step-%08d-%08x", 0, rand.Uint32())
	m := &Manifest{Version: CheckpointVersion, Model: model, ModelHash: NewModelID(model, params).Hash, Seed: seed}
	var tensors []stTensor
	values := map[string][]float32{}
	var copies []Foreign
	for _, w := range mapping {
		if w.Copy {
			copies = append(copies, w)
			continue
		}
		shape, ok := shapes[w.Param]
		if !ok {
			return nil, fmt.Errorf("model %s has no param %s (for tensor %s)", model, w.Param, w.Name)
		}
		f := where[w.Name]
		if f == nil {
			return nil, fmt.Errorf("no tensor %s in %v (model %s's param %s, shape %v)", w.Name, files, model, w.Param, shape)
		}
		want := shape
		if w.Transpose {
			want = []int64{shape[1], shape[0]}
		}
		if ti := f.Tensors[w.Name]; !slices.Equal(ti.Shape, want) {
			return nil, fmt.Errorf("%s: tensor %s has shape %v; model %s's param %s needs %v", file[w.Name], w.Name, ti.Shape, model, w.Param, want)
		}
		data, err := f.F32(w.Name)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", file[w.Name], err)
		}
		if i := nonFinite(data); i >= 0 {
			return nil, fmt.Errorf("%s: tensor %s element %d%s is %v; amspc imports finite values only", file[w.Name], w.Name, i, multiIndex(want, int64(i)), data[i])
		}
		data = toParam(data, w, want)
		values[w.Param] = data
		tensors = append(tensors, stTensor{Name: w.Param, Shape: shape, Data: data})
		mt := ManifestTensor{Name: w.Param, Shape: shape}
		if len(data) > 0 {
			mt.Pieces = []Piece{{File: 0, Start: 0, Len: int64(len(data))}}
		}
		m.Tensors = append(m.Tensors, mt)
	}
	for _, w := range copies {
		f := where[w.Name]
		if f == nil {
			continue
		}
		data, err := f.F32(w.Name)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", file[w.Name], err)
		}
		shape := shapes[w.Param]
		if w.Transpose {
			shape = []int64{shape[1], shape[0]}
		}
		if ti := f.Tensors[w.Name]; !slices.Equal(ti.Shape, shape) || !slices.Equal(toParam(data, w, shape), values[w.Param]) {
			return nil, fmt.Errorf("%s: tensor %s is not the copy of param %s the model ties it to", file[w.Name], w.Name, w.Param)
		}
	}
	for _, p := range params {
		if !slices.ContainsFunc(mapping, func(w Foreign) bool { return w.Param == p.Name }) {
			return nil, fmt.Errorf("model %s's param %s has no tensor in the mapping", model, p.Name)
		}
	}
	if err := writeImported(dir, sub, m, tensors); err != nil {
		return nil, err
	}
	return m, nil
}

// toParam changes a foreign tensor of shape s to its param's layout.
func toParam(x []float32, w Foreign, s []int64) []float32 {
	if w.Transpose {
		x = transpose2(x, int(s[0]), int(s[1]))
	}
	if w.Offset != 0 {
		for i := range x {
			x[i] += w.Offset
		}
	}
	return x
}

// fromParam is toParam's inverse: the param's values in the foreign
// layout. Adding and then subtracting the offset is exact for Gemma's
// norms near 1 only when no bits fall off; ExportForeign checks it.
func fromParam(x []float32, w Foreign, s []int64) []float32 {
	out := slices.Clone(x)
	if w.Offset != 0 {
		for i := range out {
			out[i] -= w.Offset
		}
	}
	if w.Transpose {
		out = transpose2(out, int(s[0]), int(s[1]))
	}
	return out
}

// transpose2 is x [r, c] transposed, in new memory.
func transpose2(x []float32, r, c int) []float32 {
	out := make([]float32, len(x))
	kernels.Transpose(out, x, r, c)
	return out
}

// ForeignShard is the most bytes of tensors ExportForeign puts in one
// file, as transformers' save_pretrained shards (max_shard_size 5GB).
const ForeignShard = 5_000_000_000

// ExportForeign writes the params of the checkpoint in ckpt under
// mapping's names and layouts, fp32, into the directory out: one
// model.safetensors, or, past shard bytes, files of at most shard bytes
// (a larger tensor alone in its file) named model-0000i-of-0000n.safetensors
// with model.safetensors.index.json, as transformers writes them. It
// returns the files written. A value the layout change cannot carry
// exactly (an offset whose subtraction rounds) is refused by name.
func ExportForeign(ckpt string, mapping []Foreign, out string, shard int64) ([]string, error) {
	w, err := OpenWeights(ckpt)
	if err != nil {
		return nil, err
	}
	shapes := map[string][]int64{}
	for _, t := range w.Manifest.Tensors {
		shapes[t.Name] = t.Shape
	}
	var tensors []stTensor
	var total int64
	for _, f := range mapping {
		if f.Copy {
			continue
		}
		s, ok := shapes[f.Param]
		if !ok {
			return nil, fmt.Errorf("%s: the checkpoint of model %s has no param %s (for tensor %s)", ckpt, w.Manifest.Model, f.Param, f.Name)
		}
		x, err := w.Param(f.Param)
		if err != nil {
			return nil, err
		}
		y := fromParam(x, f, s)
		if f.Offset != 0 {
			for i := range y {
				if y[i]+f.Offset != x[i] {
					return nil, fmt.Errorf("%s: param %s element %d is %v; %v less does not give it back exactly", ckpt, f.Param, i, x[i], f.Offset)
				}
			}
		}
		shape := s
		if f.Transpose {
			shape = []int64{s[1], s[0]}
		}
		tensors = append(tensors, stTensor{Name: f.Name, Shape: shape, Data: y})
		total += 4 * int64(len(y))
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	meta := map[string]string{"format": "pt"}
	var groups [][]stTensor
	var size int64
	for _, t := range tensors {
		b := 4 * int64(len(t.Data))
		if len(groups) == 0 || size > 0 && size+b > shard {
			groups = append(groups, nil)
			size = 0
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], t)
		size += b
	}
	if len(groups) <= 1 {
		path := filepath.Join(out, "model.safetensors")
		_, _, err := writeSafetensors(path, tensors, meta)
		return []string{path}, err
	}
	weightMap := map[string]string{}
	var written []string
	for i, g := range groups {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(groups))
		if _, _, err := writeSafetensors(filepath.Join(out, name), g, meta); err != nil {
			return written, err
		}
		written = append(written, filepath.Join(out, name))
		for _, t := range g {
			weightMap[t.Name] = name
		}
	}
	index := struct {
		Metadata  map[string]int64  `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}{map[string]int64{"total_size": total}, weightMap}
	b, err := json.MarshalIndent(index, "", "  ") // encoding/json sorts the map's keys
	if err != nil {
		return written, err
	}
	path := filepath.Join(out, "model.safetensors.index.json")
	if err := writeAtomic(path, func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	}); err != nil {
		return written, err
	}
	return append(written, path), nil
}
