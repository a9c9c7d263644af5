package runtime

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
)

// A checkpoint is a directory holding model.safetensors (every param as a
// full, unsharded fp32 tensor, plus its optimizer state: NAME.master under
// mixed precision, NAME.adam_m and NAME.adam_v) and state.json (the step,
// the data position, the seed, and the SHA-256 of the tensors file). Both
// files are written to a temporary name, synced and renamed, tensors
// first, so a crash leaves the previous checkpoint whole; a state.json
// whose checksum does not match its tensors is refused. Because tensors
// are full, a checkpoint saved under one plan or rank count loads under
// any other.

// CheckpointVersion is the version of the checkpoint format.
const CheckpointVersion = 1

// State is state.json.
type State struct {
	Version int    `json:"version"`
	Model   string `json:"model"`
	// Step is the number of optimizer steps taken; training resumes with
	// step Step+1, which also says where the data stream resumes.
	Step    int    `json:"step"`
	Seed    uint64 `json:"seed"`
	Tensors string `json:"tensors_sha256"`
}

type tensorInfo struct {
	DType   string  `json:"dtype"`
	Shape   []int64 `json:"shape"`
	Offsets [2]int  `json:"data_offsets"`
}

// gatherFlat assembles the full flat buffer of one layout's component
// from the ranks: P from P shards, the rest from OS shards.
func (r *Run) gatherFlat(li int, which string) []float32 {
	lay := r.ranks[0].p.Layouts[li]
	flat := make([]float32, lay.Padded)
	for _, k := range r.ranks {
		l := k.p.Layouts[li]
		sp := int64(l.PShard.Size())
		chunk := l.Padded / sp
		pOff := int64(l.PShard.Index(k.topo, k.r)) * chunk
		switch which {
		case "p":
			// Between steps only each rank's os-slice of P is current:
			// the spread that completes P opens the next step.
			n := chunk / int64(l.OSShard.Size())
			o := int64(l.OSShard.Index(k.topo, k.r)) * n
			copy(flat[pOff+o:pOff+o+n], k.f(l.P)[o:o+n])
		default:
			id := map[string]int32{"master": l.Master, "m": l.M, "v": l.V}[which]
			if id < 0 {
				return nil
			}
			src := k.f(id)
			off := pOff + int64(l.OSShard.Index(k.topo, k.r))*int64(len(src))
			copy(flat[off:off+int64(len(src))], src)
		}
	}
	return flat
}

// errCheckpointProcesses: a checkpoint is gathered from every rank's
// memory, which a process that runs only its own rank does not have.
var errCheckpointProcesses = fmt.Errorf("checkpoints of a run across processes are not supported yet (every process would write its own shards); save and resume on local ranks")

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

// Save writes a checkpoint into dir.
func (r *Run) Save(dir string) error {
	if !r.spansAll() {
		return errCheckpointProcesses
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	type entry struct {
		name  string
		shape []int64
		data  []float32
	}
	var entries []entry
	p := r.ranks[0].p
	for li, lay := range p.Layouts {
		comps := []struct{ which, suffix string }{{"p", ""}, {"master", ".master"}, {"m", ".adam_m"}, {"v", ".adam_v"}}
		for _, c := range comps {
			flat := r.gatherFlat(li, c.which)
			if flat == nil {
				continue
			}
			for _, s := range lay.Params {
				entries = append(entries, entry{s.Name + c.suffix, r.shapeOf(s.Name, s.Elems), flat[s.Offset : s.Offset+s.Elems]})
			}
		}
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	header := map[string]any{"__metadata__": map[string]string{"format": "amspc", "version": fmt.Sprint(CheckpointVersion)}}
	off := 0
	for _, e := range entries {
		n := 4 * len(e.data)
		header[e.name] = tensorInfo{DType: "F32", Shape: e.shape, Offsets: [2]int{off, off + n}}
		off += n
	}
	hb, err := json.Marshal(header)
	if err != nil {
		return err
	}
	for len(hb)%8 != 0 {
		hb = append(hb, ' ')
	}
	buf := make([]byte, 8, 8+len(hb)+off)
	binary.LittleEndian.PutUint64(buf, uint64(len(hb)))
	buf = append(buf, hb...)
	for _, e := range entries {
		for _, x := range e.data {
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(x))
		}
	}
	sum := sha256.Sum256(buf)
	if err := writeAtomic(filepath.Join(dir, "model.safetensors"), buf); err != nil {
		return err
	}
	st := State{Version: CheckpointVersion, Model: r.Bundle.Model, Step: r.step, Seed: r.Seed, Tensors: hex.EncodeToString(sum[:])}
	sb, _ := json.MarshalIndent(st, "", "  ")
	return writeAtomic(filepath.Join(dir, "state.json"), append(sb, '\n'))
}

// shapeOf finds a param's shape from its view buffer.
func (r *Run) shapeOf(name string, elems int64) []int64 {
	for _, b := range r.ranks[0].p.Buffers {
		if b.Name == name && b.Shape != nil {
			return b.Shape
		}
	}
	return []int64{elems}
}

// writeAtomic writes a file under a temporary name, syncs it and renames
// it into place, then syncs the directory.
func writeAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = f.Chmod(0o644)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// Resume loads a checkpoint into a started run: every rank takes its
// shards of the full tensors, and the step count (so the data position and
// Adam's bias correction) continues.
func (r *Run) Resume(dir string) error {
	if !r.spansAll() {
		return errCheckpointProcesses
	}
	sb, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return err
	}
	var st State
	if err := json.Unmarshal(sb, &st); err != nil {
		return fmt.Errorf("%s/state.json: %v", dir, err)
	}
	if st.Version != CheckpointVersion {
		return fmt.Errorf("%s: checkpoint version %d, this build reads version %d", dir, st.Version, CheckpointVersion)
	}
	if st.Model != r.Bundle.Model {
		return fmt.Errorf("%s: checkpoint of model %s, the plan trains %s", dir, st.Model, r.Bundle.Model)
	}
	data, err := os.ReadFile(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != st.Tensors {
		return fmt.Errorf("%s: model.safetensors does not match state.json (corrupted or from another save)", dir)
	}
	tensors, err := parseSafetensors(data)
	if err != nil {
		return fmt.Errorf("%s/model.safetensors: %v", dir, err)
	}
	for li, lay := range r.ranks[0].p.Layouts {
		for _, c := range []struct{ which, suffix string }{{"p", ""}, {"master", ".master"}, {"m", ".adam_m"}, {"v", ".adam_v"}} {
			if c.which == "master" && lay.Master < 0 {
				continue
			}
			flat := make([]float32, lay.Padded)
			for _, s := range lay.Params {
				t, ok := tensors[s.Name+c.suffix]
				if !ok {
					return fmt.Errorf("%s: no tensor %s%s", dir, s.Name, c.suffix)
				}
				if int64(len(t)) != s.Elems {
					return fmt.Errorf("%s: tensor %s%s has %d elements, the plan wants %d", dir, s.Name, c.suffix, len(t), s.Elems)
				}
				copy(flat[s.Offset:], t)
			}
			for _, k := range r.ranks {
				k.setShard(li, c.which, flat)
			}
		}
	}
	r.step = st.Step
	return nil
}

// setShard copies this rank's shard of a full flat buffer into place.
func (k *rank) setShard(li int, which string, flat []float32) {
	l := k.p.Layouts[li]
	chunk := l.Padded / int64(l.PShard.Size())
	pOff := int64(l.PShard.Index(k.topo, k.r)) * chunk
	if which == "p" {
		copy(k.f(l.P), flat[pOff:pOff+chunk])
		return
	}
	id := map[string]int32{"master": l.Master, "m": l.M, "v": l.V}[which]
	dst := k.f(id)
	off := pOff + int64(l.OSShard.Index(k.topo, k.r))*int64(len(dst))
	copy(dst, flat[off:off+int64(len(dst))])
}

// parseSafetensors reads F32 tensors from a safetensors file, refusing
// anything malformed.
func parseSafetensors(data []byte) (map[string][]float32, error) {
	if len(data) < 8 {
		return nil, fmt.Errorf("truncated (%d bytes)", len(data))
	}
	n := binary.LittleEndian.Uint64(data)
	if n > uint64(len(data)-8) {
		return nil, fmt.Errorf("header of %d bytes runs past the end of the file", n)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data[8:8+n], &raw); err != nil {
		return nil, fmt.Errorf("header: %v", err)
	}
	body := data[8+n:]
	out := map[string][]float32{}
	for name, msg := range raw {
		if name == "__metadata__" {
			continue
		}
		var ti tensorInfo
		if err := json.Unmarshal(msg, &ti); err != nil {
			return nil, fmt.Errorf("tensor %s: %v", name, err)
		}
		a, b := ti.Offsets[0], ti.Offsets[1]
		if ti.DType != "F32" || a < 0 || b < a || b > len(body) || (b-a)%4 != 0 {
			return nil, fmt.Errorf("tensor %s: bad dtype %s or offsets [%d, %d)", name, ti.DType, a, b)
		}
		t := make([]float32, (b-a)/4)
		for i := range t {
			t[i] = math.Float32frombits(binary.LittleEndian.Uint32(body[a+4*i:]))
		}
		out[name] = t
	}
	return out, nil
}
