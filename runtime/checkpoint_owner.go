package runtime

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"amspc/codegen"
)

// A checkpoint directory belongs to one job. Its manifest names the
// model (its name and a hash of its params' names and shapes) and the
// step; a writer (run --save, ckpt import) first takes the directory's
// lock, .amspc-lock, holding its pid and host, and refuses to replace a
// checkpoint of another model or of a later step unless told to
// (--overwrite). Saves then delete only what amspc wrote: the files the
// previous manifest named, and directories of failed saves that hold
// nothing but amspc's files. A user's folder in the directory is never
// touched, even one named like amspc's.

// LockName is the lock file of a checkpoint directory being written.
const LockName = ".amspc-lock"

// ModelID is what a checkpoint is of: the model's name and the SHA-256
// (hex) of its params' names and shapes.
type ModelID struct {
	Name, Hash string
}

// NewModelID identifies model name with params. The hash does not depend
// on the params' order.
func NewModelID(name string, params []ParamShape) ModelID {
	lines := make([]string, 0, len(params))
	seen := map[string]bool{}
	for _, p := range params {
		if !seen[p.Name] {
			seen[p.Name] = true
			lines = append(lines, fmt.Sprintf("%s %v\n", p.Name, p.Shape))
		}
	}
	sort.Strings(lines)
	h := sha256.New()
	for _, l := range lines {
		io.WriteString(h, l)
	}
	return ModelID{name, hex.EncodeToString(h.Sum(nil))}
}

// BundleModel identifies the model a bundle trains, as NewModelID does
// the model's graph: its params with the shapes of their views.
func BundleModel(b *codegen.Bundle) ModelID {
	var params []ParamShape
	for _, l := range b.Template(0).Layouts {
		for i := range l.Params {
			s := &l.Params[i]
			params = append(params, ParamShape{Name: s.Name, Shape: paramShape(b, s)})
		}
	}
	return NewModelID(b.Model, params)
}

// manifestModel identifies the model of a manifest from the weights it
// lists (every tensor but Adam's moments), for a version 2 manifest that
// does not record it.
func manifestModel(m *Manifest) ModelID {
	var params []ParamShape
	for _, t := range m.Tensors {
		if !strings.HasSuffix(t.Name, ".adam_m") && !strings.HasSuffix(t.Name, ".adam_v") {
			params = append(params, ParamShape{Name: t.Name, Shape: t.Shape})
		}
	}
	return NewModelID(m.Model, params)
}

// owner is what a directory held before a save: the checkpoint's model,
// step and the files amspc wrote for it.
type owner struct {
	model ModelID // Hash "" when unknown (version 1)
	step  int
	files []string // relative to the directory, slash-separated
}

// previous reads the checkpoint dir holds, from its manifest alone (a
// version 1 checkpoint from state.json: its tensors are not read); nil
// when it holds none.
func previous(dir string) (*owner, error) {
	if _, err := os.Stat(filepath.Join(dir, ManifestName)); err == nil {
		m, err := ReadManifest(dir)
		if err != nil {
			return nil, err
		}
		o := &owner{model: ModelID{m.Model, m.ModelHash}, step: m.Step}
		if o.model.Hash == "" {
			o.model = manifestModel(m)
		}
		for _, f := range m.Files {
			o.files = append(o.files, f.Path)
		}
		return o, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	sb, err := readFileBounded(filepath.Join(dir, "state.json"), maxManifest)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var st stateV1
	if err := json.Unmarshal(sb, &st); err != nil || st.Version != 1 {
		return nil, fmt.Errorf("%s/state.json is not a version 1 checkpoint's (%v)", dir, err)
	}
	return &owner{model: ModelID{Name: st.Model}, step: st.Step, files: []string{"model.safetensors", "state.json"}}, nil
}

// PrepareSave readies dir for a checkpoint of model id whose first save is
// at step first: it makes dir, takes its lock and, unless overwrite,
// refuses when dir holds a checkpoint of another model or of a later step,
// or one it cannot read. A stale lock (its process ended, on this host) is
// taken over with a note on warn. release removes the lock; it is never
// nil.
func PrepareSave(dir string, id ModelID, first int, overwrite bool, warn io.Writer) (release func(), err error) {
	release = func() {}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return release, err
	}
	unlock, err := lockDir(dir, warn)
	if err != nil {
		return release, err
	}
	if !overwrite {
		if err := checkOwner(dir, id, first); err != nil {
			unlock()
			return release, err
		}
	}
	return unlock, nil
}

func checkOwner(dir string, id ModelID, first int) error {
	o, err := previous(dir)
	if err != nil {
		return fmt.Errorf("%v; pass --overwrite to replace what %s holds", err, dir)
	}
	switch {
	case o == nil:
		return nil
	case o.model.Name != id.Name:
		return fmt.Errorf("%s holds a checkpoint of model %s after step %d, not of %s; pass --overwrite to replace it", dir, o.model.Name, o.step, id.Name)
	case o.model.Hash != "" && o.model.Hash != id.Hash:
		return fmt.Errorf("%s holds a checkpoint of model %s with other params (their hash %.12s, this model's %.12s); pass --overwrite to replace it", dir, o.model.Name, o.model.Hash, id.Hash)
	case o.step > first:
		return fmt.Errorf("%s holds a checkpoint of model %s after step %d, later than step %d where this one starts; resume from it (--resume %s), or pass --overwrite to replace it", dir, o.model.Name, o.step, first, dir)
	}
	return nil
}

// PrepareSave is PrepareSave for a started run (after Resume): the
// process holding rank 0 takes the lock and checks dir against the run's
// model and step, and every process returns the same error.
func (r *Run) PrepareSave(dir string, overwrite bool, warn io.Writer) (release func(), err error) {
	release = func() {}
	if len(r.ranks) == 0 {
		return release, errors.New("internal error: PrepareSave before Start")
	}
	if r.ranks[0].r == 0 {
		release, err = PrepareSave(dir, BundleModel(r.Bundle), r.step, overwrite, warn)
	}
	if err = r.agree(err); err != nil {
		release()
		return func() {}, err
	}
	return release, nil
}

// lockInfo is the lock file's content.
type lockInfo struct {
	PID     int    `json:"pid"`
	Host    string `json:"host"`
	Started string `json:"started"`
}

// lockDir takes dir's lock: it creates the lock file, refusing when it
// exists unless its process has ended on this host.
func lockDir(dir string, warn io.Writer) (func(), error) {
	host, _ := os.Hostname()
	data, _ := json.Marshal(lockInfo{os.Getpid(), host, time.Now().UTC().Format(time.RFC3339)})
	data = append(data, '\n')
	path := filepath.Join(dir, LockName)
	for range 2 {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			_, err = f.Write(data)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				os.Remove(path)
				return nil, err
			}
			return func() {
				// Only our own lock: never one a later writer took over.
				if b, err := os.ReadFile(path); err == nil && string(b) == string(data) {
					os.Remove(path)
				}
			}, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("cannot write into %s: %w", dir, err)
		}
		held, raw, err := readLock(path)
		if err != nil {
			return nil, fmt.Errorf("%s is locked by %s, which cannot be read (%v); remove it if no amspc writes into %s", dir, path, err, dir)
		}
		if held.Host != host || !processGone(held.PID) {
			return nil, fmt.Errorf("%s is being written by another amspc (pid %d on host %s, since %s); wait for it to end, or remove %s if it has", dir, held.PID, held.Host, held.Started, path)
		}
		// Stale: its process has ended. Remove it only if it is still
		// the lock just read.
		fmt.Fprintf(warn, "amspc: %s: taking over a stale lock (pid %d on host %s has ended)\n", dir, held.PID, held.Host)
		if b, err := os.ReadFile(path); err == nil && string(b) == string(raw) {
			os.Remove(path)
		}
	}
	return nil, fmt.Errorf("%s: could not take the lock %s", dir, path)
}

func readLock(path string) (*lockInfo, []byte, error) {
	raw, err := readFileBounded(path, 1<<16)
	if err != nil {
		return nil, nil, err
	}
	var l lockInfo
	if err := json.Unmarshal(raw, &l); err != nil {
		return nil, nil, err
	}
	if l.PID <= 0 {
		return nil, nil, fmt.Errorf("pid %d", l.PID)
	}
	return &l, raw, nil
}

// Names amspc writes into a save's directory: the ranks' files, an
// import's file, and their temporary names while being written.
var (
	saveDirRE  = regexp.MustCompile(`^step-[0-9]{8,}-[0-9a-f]{8}$`)
	shardRE    = regexp.MustCompile(`^(rank-[0-9]{5,}|weights)\.safetensors$`)
	shardTmpRE = regexp.MustCompile(`^\.(rank-[0-9]{5,}|weights)\.safetensors\.tmp-?[0-9]+$`)
	// Temporary files of interrupted writes into the checkpoint
	// directory itself (writeAtomic's names, CheckWritable's probe).
	topTmpRE = regexp.MustCompile(`^\.(manifest\.json|model\.safetensors|state\.json)\.tmp-?[0-9]+$|^\.amspc-probe-[0-9]+$`)
)

// removeStale removes, after a save committed m into dir, what amspc
// wrote before it: the files of prev (the checkpoint dir held before, nil
// if none) that m does not name, directories of saves that failed before
// their commit (named as amspc names them and holding only amspc's
// files), and temporary files of interrupted writes. Nothing else is
// touched.
func removeStale(dir string, prev *owner, m *Manifest) {
	keep := map[string]bool{}
	for _, f := range m.Files {
		keep[f.Path] = true
		keep[strings.SplitN(f.Path, "/", 2)[0]] = true
	}
	if prev != nil {
		for _, p := range prev.files {
			if keep[p] {
				continue
			}
			base := filepath.Base(filepath.FromSlash(p))
			top := !strings.Contains(p, "/")
			if shardRE.MatchString(base) && !top || top && (p == "model.safetensors" || p == "state.json") {
				os.Remove(filepath.Join(dir, filepath.FromSlash(p)))
			}
			if !top {
				os.Remove(filepath.Join(dir, filepath.Dir(filepath.FromSlash(p)))) // if now empty
			}
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		switch {
		case e.IsDir() && saveDirRE.MatchString(name) && !keep[name]:
			if onlyShards(filepath.Join(dir, name)) {
				os.RemoveAll(filepath.Join(dir, name))
			}
		case e.Type().IsRegular() && topTmpRE.MatchString(name):
			os.Remove(filepath.Join(dir, name))
		}
	}
}

// onlyShards reports whether dir holds nothing but files amspc writes
// into a save's directory.
func onlyShards(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || !shardRE.MatchString(e.Name()) && !shardTmpRE.MatchString(e.Name()) {
			return false
		}
	}
	return true
}

// Damage is a file of a checkpoint that does not match its manifest.
type Damage struct {
	Path string // relative to the checkpoint, as the manifest names it
	What string
}

func (d Damage) String() string { return d.Path + ": " + d.What }

// CheckFiles finds the damage a checkpoint's files show without reading
// them: a file missing, or of another size than the manifest records.
func CheckFiles(dir string, m *Manifest) []Damage {
	var out []Damage
	for _, f := range m.Files {
		if d := checkSize(dir, f); d != "" {
			out = append(out, Damage{f.Path, d})
		}
	}
	return out
}

func checkSize(dir string, f ManifestFile) string {
	fi, err := os.Stat(filepath.Join(dir, filepath.FromSlash(f.Path)))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "missing"
	case err != nil:
		return err.Error()
	case !fi.Mode().IsRegular():
		return "not a regular file"
	case fi.Size() != f.Bytes:
		return fmt.Sprintf("%d bytes, the manifest records %d (truncated, or from another save)", fi.Size(), f.Bytes)
	}
	return ""
}

// VerifyCheckpoint checks every file of the checkpoint in dir against its
// manifest: present, of the recorded size and SHA-256, holding the
// pieces the manifest places in it; and, in a version 3 manifest, the
// model hash against the tensors listed. It returns the manifest and
// every damage found; an error when the manifest itself cannot be read.
func VerifyCheckpoint(dir string) (*Manifest, []Damage, error) {
	m, err := ReadManifest(dir) // version 1: its one file is hashed here
	if err != nil {
		return nil, nil, err
	}
	var out []Damage
	if m.Version >= 3 {
		if id := manifestModel(m); id.Hash != m.ModelHash {
			out = append(out, Damage{ManifestName, fmt.Sprintf("model_hash %.12s does not match its tensors' %.12s", m.ModelHash, id.Hash)})
		}
	}
	for i, f := range m.Files {
		if d := checkSize(dir, f); d != "" {
			out = append(out, Damage{f.Path, d})
			continue
		}
		path := filepath.Join(dir, filepath.FromSlash(f.Path))
		sum, err := fileSHA256(path)
		if err != nil {
			out = append(out, Damage{f.Path, err.Error()})
			continue
		}
		if sum != f.SHA256 {
			out = append(out, Damage{f.Path, "its SHA-256 is not the one the manifest records (corrupted, or from another save)"})
			continue
		}
		st, err := readHeader(path, maxCheckpointFile)
		if err != nil {
			out = append(out, Damage{f.Path, err.Error()})
			continue
		}
		for _, t := range m.Tensors {
			for _, p := range t.Pieces {
				if p.File != i {
					continue
				}
				key := p.Key
				if key == "" {
					key = t.Name
				}
				ti, ok := st.Tensors[key]
				if n, _ := ir64(ti.Shape); !ok || n != p.Len {
					out = append(out, Damage{f.Path, fmt.Sprintf("holds no tensor %s of %d elements, which the manifest places there", key, p.Len)})
				}
			}
		}
	}
	return m, out, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ImportInfo is what importing a safetensors file takes, from its header
// alone.
type ImportInfo struct {
	// Step is the step the checkpoint will be at: the file's "step"
	// metadata when it holds Adam's moments, else 0.
	Step int
	// Bytes is the memory ImportWeights holds at its peak: the file, and
	// its tensors as fp32 (which it writes from).
	Bytes int64
}

// InspectImport reads the header of a safetensors file to import.
func InspectImport(path string) (*ImportInfo, error) {
	f, err := readHeader(path, maxCheckpointFile)
	if err != nil {
		return nil, err
	}
	info := &ImportInfo{Bytes: f.size}
	optimizer := false
	for name, ti := range f.Tensors {
		n, _ := ir64(ti.Shape)
		info.Bytes += 4 * n
		optimizer = optimizer || strings.HasSuffix(name, ".adam_m") || strings.HasSuffix(name, ".adam_v")
	}
	if optimizer {
		// A bad step is ImportWeights' to refuse.
		if n, err := strconv.Atoi(f.Meta["step"]); err == nil && n > 0 {
			info.Step = n
		}
	}
	return info, nil
}
