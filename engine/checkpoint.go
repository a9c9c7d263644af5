package engine

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"amspc/codegen"
	"amspc/ir"
)

// A checkpoint is a directory:
//
//	manifest.json                                  what the checkpoint holds
//	step-00000010-1a2b3c4d/rank-00000.safetensors  the pieces rank 0 wrote
//	step-00000010-1a2b3c4d/rank-00004.safetensors  ...
//
// It holds three fp32 tensors per param, whatever the precision it was
// trained in: NAME, the weights (the fp32 master copy under mixed
// precision, else P), NAME.adam_m and NAME.adam_v. Every rank holds the
// same flat range of a layout in each of them (its OS shard), so each
// range is written once, by the lowest rank holding it, as the pieces of
// the params it cuts: under ZeRO-3 every rank writes 1/n of the state,
// under DDP rank 0 writes it all.
//
// Save: the ranks write their files in parallel into a directory new to
// this save; when all have written (every process says so), rank 0 writes
// manifest.json (to a temporary name, synced, renamed: the commit point)
// and then removes the previous save's files (removeStale: only what
// amspc wrote). A crash at any point leaves the previous manifest and the
// files it names intact, so the previous checkpoint still loads. The
// manifest records each file's size and SHA-256; a file that does not
// match is refused. It also names the model (its name and a hash of its
// params' names and shapes) so that a directory is not overwritten by
// another job's checkpoint: see checkpoint_owner.go.
//
// Resume: every rank reads the pieces covering its shards, so a
// checkpoint loads under any plan, rank count and precision, on local
// ranks or MPI processes. `amspc ckpt export` and `import` convert to and
// from one safetensors file of full tensors.

// CheckpointVersion is the version of manifest.json: 3 adds model_hash,
// 4 pieces of a tensor-parallel part (Piece.Part); versions 1 to 3 are
// still read.
const CheckpointVersion = 4

// ManifestName is the file whose presence makes a directory a checkpoint.
const ManifestName = "manifest.json"

// Manifest is manifest.json.
type Manifest struct {
	Version int    `json:"version"`
	Model   string `json:"model"`
	// ModelHash is ModelID.Hash of the model (version 3; empty in
	// versions 1 and 2).
	ModelHash string `json:"model_hash,omitempty"`
	// Step is the number of optimizer steps taken; training resumes with
	// step Step+1, which also says where the data stream resumes.
	Step int    `json:"step"`
	Seed uint64 `json:"seed"`
	// Plan and Ranks say what the checkpoint was saved under (for
	// people: loading does not depend on them).
	Plan    string           `json:"plan,omitempty"`
	Ranks   int              `json:"ranks,omitempty"`
	Tensors []ManifestTensor `json:"tensors"`
	Files   []ManifestFile   `json:"files"`
}

// ManifestTensor is one full tensor and where its pieces lie.
type ManifestTensor struct {
	Name   string  `json:"name"`
	Shape  []int64 `json:"shape"`
	Pieces []Piece `json:"pieces"`
}

// Piece is elements [Start, Start+Len) of a flattened tensor, stored as a
// 1-D tensor named Key (the tensor's name when empty) in file File; with
// Part, of the flattened part (a tensor-parallel rank's) that Part names.
type Piece struct {
	File  int        `json:"file"`
	Key   string     `json:"key,omitempty"`
	Start int64      `json:"start"`
	Len   int64      `json:"len"`
	Part  *PiecePart `json:"part,omitempty"`
}

// PiecePart is part Index of Of equal parts of a tensor along dimension
// Dim (a rank's part of a param under tensor parallelism).
type PiecePart struct {
	Dim   int `json:"dim"`
	Index int `json:"index"`
	Of    int `json:"of"`
}

// runs calls f for each run of part p of a tensor of shape that lies in
// elements [from, to) of the whole flattened tensor (of the flattened
// part, when inPart): the run's start in the whole tensor and in the
// part, and its length. A part is one run per index of the dimensions
// before Dim.
func (p *PiecePart) runs(shape []int64, from, to int64, inPart bool, f func(whole, part, n int64)) {
	inner := int64(1)
	for _, k := range shape[p.Dim+1:] {
		inner *= k
	}
	stride := shape[p.Dim] * inner            // a whole run of the outer index
	run := shape[p.Dim] / int64(p.Of) * inner // the part's share of it
	step := stride
	if inPart {
		step = run
	}
	for o := from / step; o*step < to; o++ {
		w, q := o*stride+int64(p.Index)*run, o*run // the run's start, whole and in the part
		if inPart {
			if a, e := max(from, q), min(to, q+run); a < e {
				f(w+a-q, a, e-a)
			}
		} else if a, e := max(from, w), min(to, w+run); a < e {
			f(a, q+a-w, e-a)
		}
	}
}

// ManifestFile is one data file, by its path relative to the checkpoint.
type ManifestFile struct {
	Path   string `json:"path"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// The tensors of a param: its weights and Adam's two moments.
var components = [...]string{"", ".adam_m", ".adam_v"}

// span is a flat range [Off, Off+N) of layout Layout.
type span struct {
	Layout int
	Off, N int64
}

// ownSpan is the flat range of layout li whose optimizer state rank q
// holds: part OSShard.Index of part PShard.Index.
func ownSpan(b *codegen.Bundle, li, q int) span {
	l := &b.Template(q).Layouts[li]
	chunk := l.Padded / int64(l.PShard.Size())
	n := chunk / int64(l.OSShard.Size())
	return span{li, int64(l.PShard.Index(b.Topo, q))*chunk + int64(l.OSShard.Index(b.Topo, q))*n, n}
}

// writesSlot says whether rank q writes its pieces of slot: a param the
// ranks of a tensor-parallel group hold parts of, each; a whole one, the
// group's first.
func writesSlot(b *codegen.Bundle, q int, slot *ir.Slot) bool {
	return slot.Split >= 0 && len(slot.Shape) > 0 && b.Tensor > 1 || tpPosition(b, q) == 0
}

// shardWrites is what every rank writes: the spans it holds that no lower
// rank holds (under tensor parallelism, no lower rank at its position).
func shardWrites(b *codegen.Bundle) [][]span {
	n := b.Topo.Ranks()
	out := make([][]span, n)
	nl := len(b.Template(0).Layouts)
	for li := 0; li < nl; li++ {
		// Ranks at different tensor-parallel positions hold different
		// parts under the same span.
		type key struct {
			off int64
			tp  int
		}
		taken := map[key]bool{}
		for q := 0; q < n; q++ {
			s := ownSpan(b, li, q)
			if k := (key{s.Off, tpPosition(b, q)}); !taken[k] {
				taken[k] = true
				out[q] = append(out[q], s)
			}
		}
	}
	return out
}

// cut calls f for each param of lay that [off, off+n) cuts: the piece's
// range in the param and where it starts in the span.
func cut(lay *ir.Layout, off, n int64, f func(s *ir.Slot, start, length, at int64)) {
	for i := range lay.Params {
		s := &lay.Params[i]
		a, e := max(off, s.Offset), min(off+n, s.Offset+s.Elems)
		if a < e {
			f(s, a-s.Offset, e-a, a-off)
		}
	}
}

// shardFile is the path of rank q's file in a save's directory.
func shardFile(sub string, q int) string {
	return filepath.ToSlash(filepath.Join(sub, fmt.Sprintf("rank-%05d.safetensors", q)))
}

// stateMem is this rank's component c over its own span: the weights
// (the master, else P's os-slice), m or v.
func (k *rank) stateMem(l *ir.Layout, c string, s span) (Mem, error) {
	var m Mem
	switch c {
	case "":
		if l.Master >= 0 {
			m = k.m(l.Master)
		} else {
			chunk := l.Padded / int64(l.PShard.Size())
			o := s.Off - int64(l.PShard.Index(k.topo, k.r))*chunk
			p := k.m(l.P)
			if o < 0 || o+s.N > p.N {
				return Mem{}, fmt.Errorf("rank %d holds elements [%d, %d) of layout %s's weights, the plan says [%d, %d)", k.r, o, o+s.N, l.Stage, 0, p.N)
			}
			m = p.Slice(o, s.N)
		}
	case ".adam_m":
		m = k.m(l.M)
	case ".adam_v":
		m = k.m(l.V)
	}
	if m.N != s.N {
		return Mem{}, fmt.Errorf("rank %d holds %d elements of layout %s's %q state, the plan says %d", k.r, m.N, l.Stage, c, s.N)
	}
	return m, nil
}

// state is stateMem's values: the storage itself on the host, a copy
// from a device.
func (k *rank) state(l *ir.Layout, c string, s span) ([]float32, error) {
	m, err := k.stateMem(l, c, s)
	if err != nil || m.IsHost() {
		return m.f32, err
	}
	buf := make([]float32, m.N)
	return buf, k.be.Read(buf, m)
}

// writeShards writes the spans into rank k's file; it returns the file's
// size and SHA-256.
func (k *rank) writeShards(dir, sub string, spans []span, meta map[string]string) (int64, string, error) {
	var tensors []stTensor
	for _, s := range spans {
		l := &k.p.Layouts[s.Layout]
		for _, c := range components {
			buf, err := k.state(l, c, s)
			if err != nil {
				return 0, "", err
			}
			cut(l, s.Off, s.N, func(slot *ir.Slot, _, length, at int64) {
				if writesSlot(k.b, k.r, slot) {
					tensors = append(tensors, stTensor{Name: slot.Name + c, Shape: []int64{length}, Data: buf[at : at+length]})
				}
			})
		}
	}
	return writeSafetensors(filepath.Join(dir, shardFile(sub, k.r)), tensors, meta)
}

// CheckWritable makes dir (and its parents) if needed and checks that a
// checkpoint can be written into it, by creating and removing a probe
// file, so that a bad --save is found before training rather than after.
func CheckWritable(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".amspc-probe-*")
	if err != nil {
		return fmt.Errorf("cannot write into %s: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// Save writes a checkpoint into dir. Every process of the run calls it at
// the same step; each writes its ranks' shards, and every process returns
// the same error, naming the rank that failed.
func (r *Run) Save(dir string) error {
	if r.StandIn != nil {
		return errors.New("a stand-in run saves no checkpoint: it holds one rank's shards, trained on stand-ins")
	}
	b := r.Bundle
	nonce, err := r.agreeWord(rand.Uint32())
	if err != nil {
		return err
	}
	sub := fmt.Sprintf("step-%08d-%08x", r.step, nonce)
	writes := shardWrites(b)
	meta := map[string]string{"format": "amspc", "model": b.Model, "step": strconv.Itoa(r.step)}
	type result struct {
		bytes int64
		sum   string
		err   error
	}
	results := make([]result, len(r.ranks))
	err = os.MkdirAll(filepath.Join(dir, sub), 0o755)
	if err == nil {
		var wg sync.WaitGroup
		for i, k := range r.ranks {
			if len(writes[k.r]) == 0 {
				continue
			}
			wg.Go(func() {
				n, sum, err := k.writeShards(dir, sub, writes[k.r], meta)
				results[i] = result{n, sum, err}
			})
		}
		wg.Wait()
		for i, res := range results {
			if res.err != nil {
				err = fmt.Errorf("rank %d: %w", r.ranks[i].r, res.err)
				break
			}
		}
	}
	holdsRank0 := r.ranks[0].r == 0
	if err = r.agree(err); err != nil {
		if holdsRank0 {
			os.RemoveAll(filepath.Join(dir, sub))
		}
		return err
	}
	// Every rank's file: its size and SHA-256, all-gathered across
	// processes (rank order).
	files := make([]ManifestFile, b.Topo.Ranks())
	for i, k := range r.ranks {
		files[k.r] = ManifestFile{Path: shardFile(sub, k.r), Bytes: results[i].bytes, SHA256: results[i].sum}
	}
	if !r.spansAll() {
		if files, err = r.gatherFiles(files[r.ranks[0].r], sub); err != nil {
			return err
		}
	}
	if holdsRank0 {
		m := &Manifest{Version: CheckpointVersion, Model: b.Model, ModelHash: BundleModel(b).Hash, Step: r.step, Seed: r.Seed, Plan: b.Plan, Ranks: b.Topo.Ranks()}
		index := map[int]int{} // rank -> file
		for q, w := range writes {
			if len(w) > 0 {
				index[q] = len(m.Files)
				m.Files = append(m.Files, files[q])
			}
		}
		tensors := map[string]*ManifestTensor{}
		for q, w := range writes {
			for _, s := range w {
				l := &b.Template(q).Layouts[s.Layout]
				cut(l, s.Off, s.N, func(slot *ir.Slot, start, length, _ int64) {
					if !writesSlot(b, q, slot) {
						return
					}
					for _, c := range components {
						t := tensors[slot.Name+c]
						if t == nil {
							t = &ManifestTensor{Name: slot.Name + c, Shape: paramShape(b, slot)}
							tensors[t.Name] = t
						}
						piece := Piece{File: index[q], Start: start, Len: length}
						if slot.Split >= 0 && len(slot.Shape) > 0 && b.Tensor > 1 {
							piece.Part = &PiecePart{Dim: slot.Split, Index: tpPosition(b, q), Of: b.Tensor}
						}
						t.Pieces = append(t.Pieces, piece)
					}
				})
			}
		}
		m.Tensors = sortedTensors(tensors)
		// What the directory held, read before the commit replaces it:
		// the files removeStale may delete (none when unreadable).
		prev, _ := previous(dir)
		err = writeManifest(dir, m)
		if err != nil {
			os.RemoveAll(filepath.Join(dir, sub))
		} else {
			removeStale(dir, prev, m)
		}
	}
	return r.agree(err)
}

// sortedTensors lists tensors by name, each with its pieces in order.
func sortedTensors(tensors map[string]*ManifestTensor) []ManifestTensor {
	out := make([]ManifestTensor, 0, len(tensors))
	for _, t := range tensors {
		sort.Slice(t.Pieces, func(i, j int) bool {
			if a, b := t.Pieces[i].partIndex(), t.Pieces[j].partIndex(); a != b {
				return a < b
			}
			return t.Pieces[i].Start < t.Pieces[j].Start
		})
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// wholeElems is the elements of a slot's whole param.
func wholeElems(s *ir.Slot) int64 {
	if s.Split < 0 || len(s.Shape) == 0 {
		return s.Elems
	}
	n := int64(1)
	for _, d := range s.Shape {
		n *= d
	}
	return n
}

// partIndex is the part a piece is of, -1 for a piece of the whole.
func (p *Piece) partIndex() int {
	if p.Part == nil {
		return -1
	}
	return p.Part.Index
}

// paramShape is a param's whole shape: its slot's, else its view
// buffer's.
func paramShape(b *codegen.Bundle, s *ir.Slot) []int64 {
	if len(s.Shape) > 0 {
		return s.Shape
	}
	for _, buf := range b.Template(0).Buffers {
		if buf.Name == s.Name && buf.Shape != nil {
			return buf.Shape
		}
	}
	return []int64{s.Elems}
}

// writeManifest commits a checkpoint: manifest.json, atomically.
func writeManifest(dir string, m *Manifest) error {
	data, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, ManifestName), func(w io.Writer) error {
		_, err := w.Write(append(data, '\n'))
		return err
	})
}

// maxManifest bounds manifest.json (a 70B model's has some ten thousand
// pieces: a few MB).
const maxManifest = 1 << 28

// ReadManifest reads and checks a checkpoint's manifest: every piece lies
// inside its tensor and in a listed file, no two pieces of a tensor
// overlap, and file paths stay inside dir. A directory holding a version 1
// checkpoint (state.json and model.safetensors) is read as one file of
// full tensors.
func ReadManifest(dir string) (*Manifest, error) {
	data, err := readFileBounded(filepath.Join(dir, ManifestName), maxManifest)
	if errors.Is(err, os.ErrNotExist) {
		if _, serr := os.Stat(filepath.Join(dir, "state.json")); serr == nil {
			return readV1(dir)
		}
		if fi, serr := os.Stat(dir); serr != nil {
			return nil, serr
		} else if !fi.IsDir() {
			return nil, fmt.Errorf("%s is not a checkpoint directory", dir)
		}
		return nil, fmt.Errorf("%s holds no checkpoint (no %s)", dir, ManifestName)
	}
	if err != nil {
		return nil, err
	}
	var m Manifest
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%s/%s: %v", dir, ManifestName, err)
	}
	if m.Version < 2 || m.Version > CheckpointVersion {
		return nil, fmt.Errorf("%s: checkpoint version %d, this build reads versions 1 to %d", dir, m.Version, CheckpointVersion)
	}
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("%s/%s: %v", dir, ManifestName, err)
	}
	return &m, nil
}

func (m *Manifest) check() error {
	if m.Step < 0 {
		return fmt.Errorf("step %d", m.Step)
	}
	if _, err := hex.DecodeString(m.ModelHash); err != nil || m.Version >= 3 && len(m.ModelHash) != 64 || m.Version < 3 && m.ModelHash != "" {
		return fmt.Errorf("version %d with model_hash %q", m.Version, m.ModelHash)
	}
	for _, f := range m.Files {
		p := filepath.FromSlash(f.Path)
		if f.Path == "" || filepath.IsAbs(p) || !filepath.IsLocal(p) {
			return fmt.Errorf("file path %q leaves the checkpoint directory", f.Path)
		}
		if _, err := hex.DecodeString(f.SHA256); err != nil || len(f.SHA256) != 64 {
			return fmt.Errorf("file %s: bad SHA-256 %q", f.Path, f.SHA256)
		}
	}
	seen := map[string]bool{}
	for _, t := range m.Tensors {
		if seen[t.Name] {
			return fmt.Errorf("tensor %s listed twice", t.Name)
		}
		seen[t.Name] = true
		n, ok := ir64(t.Shape)
		if !ok {
			return fmt.Errorf("tensor %s: bad shape %v", t.Name, t.Shape)
		}
		end, part := int64(0), -1
		for _, p := range t.Pieces {
			size := n
			if pp := p.Part; pp != nil {
				if m.Version < 4 || pp.Dim < 0 || pp.Dim >= len(t.Shape) || pp.Of < 2 || t.Shape[pp.Dim]%int64(pp.Of) != 0 || pp.Index < 0 || pp.Index >= pp.Of {
					return fmt.Errorf("tensor %s %v: piece of part %d of %d along dimension %d", t.Name, t.Shape, pp.Index, pp.Of, pp.Dim)
				}
				size = n / int64(pp.Of)
			}
			if p.partIndex() != part {
				if p.partIndex() < part {
					return fmt.Errorf("tensor %s: pieces of part %d after part %d", t.Name, p.partIndex(), part)
				}
				end, part = 0, p.partIndex()
			}
			if p.File < 0 || p.File >= len(m.Files) || p.Len <= 0 || p.Start < end || p.Start+p.Len > size {
				return fmt.Errorf("tensor %s: piece [%d, +%d) in file %d is outside the tensor's (or its part's) %d elements, out of order or overlapping, or in no listed file", t.Name, p.Start, p.Len, p.File, size)
			}
			end = p.Start + p.Len
		}
	}
	return nil
}

// state.json of a version 1 checkpoint.
type stateV1 struct {
	Version int    `json:"version"`
	Model   string `json:"model"`
	Step    int    `json:"step"`
	Seed    uint64 `json:"seed"`
	Tensors string `json:"tensors_sha256"`
}

// readV1 reads a version 1 checkpoint (full tensors in model.safetensors:
// P, NAME.master under mixed precision, NAME.adam_m, NAME.adam_v) as a
// manifest: the weights are the master where there is one.
func readV1(dir string) (*Manifest, error) {
	sb, err := readFileBounded(filepath.Join(dir, "state.json"), maxManifest)
	if err != nil {
		return nil, err
	}
	var st stateV1
	if err := json.Unmarshal(sb, &st); err != nil {
		return nil, fmt.Errorf("%s/state.json: %v", dir, err)
	}
	if st.Version != 1 {
		return nil, fmt.Errorf("%s/state.json: checkpoint version %d, this build reads versions 1 to %d", dir, st.Version, CheckpointVersion)
	}
	f, err := readSafetensors(filepath.Join(dir, "model.safetensors"), maxCheckpointFile, st.Tensors)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		return nil, err
	}
	m := &Manifest{Version: 1, Model: st.Model, Step: st.Step, Seed: st.Seed,
		Files: []ManifestFile{{Path: "model.safetensors", Bytes: fi.Size(), SHA256: st.Tensors}}}
	for _, name := range f.Names() {
		if strings.HasSuffix(name, ".master") {
			continue
		}
		key := name
		if _, ok := f.Tensors[name+".master"]; ok {
			key = name + ".master"
		}
		ti := f.Tensors[key]
		n, _ := ir64(ti.Shape)
		m.Tensors = append(m.Tensors, ManifestTensor{Name: name, Shape: ti.Shape, Pieces: []Piece{{File: 0, Key: key, Start: 0, Len: n}}})
	}
	return m, m.check()
}

// maxCheckpointFile bounds one data file of a checkpoint.
const maxCheckpointFile = 1 << 40

// pieceReader reads the pieces of a checkpoint's tensors, opening each
// file once and checking its size and SHA-256 first.
type pieceReader struct {
	dir    string
	m      *Manifest
	index  map[string]*ManifestTensor
	mu     sync.Mutex
	files  map[int]*stFile
	pieces map[string][]float32 // "file/key" -> data
}

func newPieceReader(dir string, m *Manifest) *pieceReader {
	pr := &pieceReader{dir: dir, m: m, index: map[string]*ManifestTensor{}, files: map[int]*stFile{}, pieces: map[string][]float32{}}
	for i := range m.Tensors {
		pr.index[m.Tensors[i].Name] = &m.Tensors[i]
	}
	return pr
}

func (pr *pieceReader) file(i int) (*stFile, error) {
	if f, ok := pr.files[i]; ok {
		return f, nil
	}
	mf := pr.m.Files[i]
	path := filepath.Join(pr.dir, filepath.FromSlash(mf.Path))
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%v (the checkpoint lists it)", err)
	}
	if fi.Size() != mf.Bytes {
		return nil, fmt.Errorf("%s has %d bytes, the checkpoint recorded %d (truncated or from another save)", path, fi.Size(), mf.Bytes)
	}
	f, err := readSafetensors(path, maxCheckpointFile, mf.SHA256)
	if err != nil {
		return nil, err
	}
	pr.files[i] = f
	return f, nil
}

// read fills dst with elements [from, from+len(dst)) of tensor t.
func (pr *pieceReader) read(t *ManifestTensor, from int64, dst []float32) error {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	to := from + int64(len(dst))
	covered := int64(0)
	for i := range t.Pieces {
		p := &t.Pieces[i]
		// copyIn copies the piece's elements [a, e) (in the tensor's or
		// its part's flattening) to the tensor's element at.
		copyIn := func(a, e, at int64) error {
			name := p.Key
			if name == "" {
				name = t.Name
			}
			// Decoded once, for every local rank that reads it.
			key := strconv.Itoa(p.File) + "/" + name
			data, ok := pr.pieces[key]
			if !ok {
				f, err := pr.file(p.File)
				if err != nil {
					return err
				}
				data, err = f.F32(name)
				if err != nil {
					return fmt.Errorf("%s: %v", pr.m.Files[p.File].Path, err)
				}
				if int64(len(data)) != p.Len {
					return fmt.Errorf("%s: tensor %s has %d elements, the manifest says %d", pr.m.Files[p.File].Path, name, len(data), p.Len)
				}
				pr.pieces[key] = data
			}
			copy(dst[at-from:at-from+e-a], data[a-p.Start:e-p.Start])
			covered += e - a
			return nil
		}
		if p.Part == nil {
			if a, e := max(from, p.Start), min(to, p.Start+p.Len); a < e {
				if err := copyIn(a, e, a); err != nil {
					return err
				}
			}
			continue
		}
		var err error
		p.Part.runs(t.Shape, from, to, false, func(whole, part, n int64) {
			if a, e := max(part, p.Start), min(part+n, p.Start+p.Len); a < e && err == nil {
				err = copyIn(a, e, whole+a-part)
			}
		})
		if err != nil {
			return err
		}
	}
	if covered != to-from {
		return fmt.Errorf("the checkpoint lacks part of elements [%d, %d) of %s", from, to, t.Name)
	}
	return nil
}

// Resume loads a checkpoint into a started run: every rank reads the
// pieces covering its shards, whatever plan, rank count or precision the
// checkpoint was saved under, and the step count (so the data position
// and Adam's bias correction) continues. Every process of the run calls
// it; every process returns the same error.

func (r *Run) Resume(dir string) error {
	return r.agree(r.resume(dir))
}

func (r *Run) resume(dir string) error {
	m, err := ReadManifest(dir)
	if err != nil {
		return err
	}
	if m.Model != r.Bundle.Model {
		return fmt.Errorf("%s: checkpoint of model %s, the plan trains %s", dir, m.Model, r.Bundle.Model)
	}
	pr := newPieceReader(dir, m)
	// Every param's tensors must be there, whole; Adam's moments may be
	// missing only at step 0 (imported weights), where they are zero.
	for _, lay := range r.ranks[0].p.Layouts {
		for _, s := range lay.Params {
			for _, c := range components {
				t := pr.index[s.Name+c]
				if t == nil {
					if c != "" && m.Step == 0 {
						continue
					}
					return fmt.Errorf("%s: no tensor %s%s", dir, s.Name, c)
				}
				if n, _ := ir64(t.Shape); n != wholeElems(&s) {
					return fmt.Errorf("%s: tensor %s has %d elements (shape %v), the plan's has %d", dir, t.Name, n, t.Shape, wholeElems(&s))
				}
			}
		}
	}
	// fill reads component c over the flat range [off, off+len(dst)) of
	// lay, of rank k; padding is zero. A param k holds a part of reads
	// the runs of its part.
	fill := func(dst []float32, k *rank, lay *ir.Layout, off int64, c string) error {
		clear(dst)
		var err error
		cut(lay, off, int64(len(dst)), func(s *ir.Slot, start, length, at int64) {
			t := pr.index[s.Name+c]
			if t == nil || err != nil {
				return
			}
			if s.Split < 0 || len(s.Shape) == 0 || r.Bundle.Tensor <= 1 {
				err = pr.read(t, start, dst[at:at+length])
				return
			}
			part := &PiecePart{Dim: s.Split, Index: tpPosition(r.Bundle, k.r), Of: r.Bundle.Tensor}
			part.runs(s.Shape, start, start+length, true, func(whole, p, n int64) {
				if err == nil {
					err = pr.read(t, whole, dst[at+p-start:at+p-start+n])
				}
			})
		})
		return err
	}
	for _, k := range r.ranks {
		for li := range k.p.Layouts {
			l := &k.p.Layouts[li]
			chunk := l.Padded / int64(l.PShard.Size())
			pOff := int64(l.PShard.Index(k.topo, k.r)) * chunk
			own := ownSpan(r.Bundle, li, k.r)
			// P's whole shard from the weights (rounded on bf16 plans, as
			// it is at the start: Write stores it so), the master's
			// os-slice.
			p := make([]float32, k.p.Buffers[l.P].Elems)
			if err := fill(p, k, l, pOff, ""); err != nil {
				return err
			}
			if l.Master >= 0 {
				if err := k.write(l.Master, p[own.Off-pOff:own.Off-pOff+own.N]); err != nil {
					return err
				}
			}
			if err := k.write(l.P, p); err != nil {
				return err
			}
			for _, c := range components[1:] {
				m, err := k.stateMem(l, c, own)
				if err != nil {
					return err
				}
				buf := make([]float32, m.N)
				if err := fill(buf, k, l, own.Off, c); err != nil {
					return err
				}
				if err := k.be.Write(m, buf); err != nil {
					return err
				}
			}
		}
	}
	r.step = m.Step
	return nil
}
