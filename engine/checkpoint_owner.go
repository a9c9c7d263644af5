package engine

import (
	"bytes"
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
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"amspc/codegen"
)

// A checkpoint directory belongs to one job. Its manifest names the
// model (its name and a hash of its params' names and shapes) and the
// step; a writer (run --save, ckpt import) first takes the directory's
// lock, .amspc-lock, holding its pid, host, boot id and start time, and
// refuses to replace a checkpoint of another model, or of the step where
// it starts or a later one (unless it resumed from that directory),
// unless told to (--overwrite). A manifest.json or state.json that is
// not amspc's is the user's: a save never deletes it, and never replaces
// a manifest.json, even with --overwrite. Saves then delete only what
// amspc wrote: the files the previous manifest named (a version 1
// checkpoint's only when model.safetensors has the recorded SHA-256),
// and directories of failed saves that hold nothing but amspc's files. A
// user's folder in the directory is never touched, even one named like
// amspc's.

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
	v1sum string   // a version 1 checkpoint's model.safetensors SHA-256
}

// notOurs is a file in a checkpoint directory that is not amspc's: the
// user's, which a save never deletes.
type notOurs struct {
	path string // the directory and the file's name
	why  string
}

func (e *notOurs) Error() string { return e.path + " is not an amspc checkpoint: " + e.why }

// previous reads the checkpoint dir holds, from its manifest alone (a
// version 1 checkpoint from state.json: its tensors are not read); nil
// when it holds none. A manifest.json or state.json that is not amspc's
// is a *notOurs error.
func previous(dir string) (*owner, error) {
	if data, err := readFileBounded(filepath.Join(dir, ManifestName), maxManifest); err == nil {
		if why := foreignManifest(data); why != "" {
			return nil, &notOurs{filepath.Join(dir, ManifestName), why}
		}
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
	// Only all of what readV1 reads makes a version 1 checkpoint: any
	// program's state.json may say "version": 1.
	var st stateV1
	why := ""
	if err := json.Unmarshal(sb, &st); err != nil {
		why = err.Error()
	} else if st.Version != 1 || st.Model == "" || st.Step < 0 || !isSHA256(st.Tensors) {
		why = "not a version 1 checkpoint's state (its version, model, step and tensors_sha256)"
	} else if fi, err := os.Stat(filepath.Join(dir, "model.safetensors")); err != nil || !fi.Mode().IsRegular() {
		why = "no model.safetensors beside it"
	}
	if why != "" {
		return nil, &notOurs{filepath.Join(dir, "state.json"), why}
	}
	return &owner{model: ModelID{Name: st.Model}, step: st.Step, files: []string{"model.safetensors", "state.json"}, v1sum: st.Tensors}, nil
}

// foreignManifest says why data is not a manifest amspc wrote, "" when it
// is one: one this build decodes (no field it does not know) of version 2
// or later, or one of a later version naming its model. A manifest of
// amspc's that fails ReadManifest's checks is still amspc's.
func foreignManifest(data []byte) string {
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(&m)
	if err == nil && m.Version >= 2 {
		return ""
	}
	var later struct {
		Version int    `json:"version"`
		Model   string `json:"model"`
	}
	if json.Unmarshal(data, &later) == nil && later.Version > CheckpointVersion && later.Model != "" {
		return ""
	}
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("version %d", m.Version)
}

func isSHA256(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil && len(s) == 64
}

// PrepareSave readies dir for a checkpoint of model id whose first save is
// at step first, of a run that resumed from the checkpoint in directory
// from ("" for none): it makes dir, takes its lock and, unless
// overwrite, refuses when dir holds a checkpoint of another model, of a
// later step, of step first itself (a fresh run's or an import's save
// would silently replace it) unless dir is from, or one it cannot read,
// or a state.json that is not amspc's. A manifest.json that is not
// amspc's is refused even with overwrite: the save would replace it. A
// stale lock (see lockDir) is taken over with a note on warn. release
// removes the lock; it is never nil.
//
// Every message names dir and what to do first, the details last: under
// MPI only the first agreeMessage bytes reach the other processes.
func PrepareSave(dir string, id ModelID, first int, from string, overwrite bool, warn io.Writer) (release func(), err error) {
	release = func() {}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return release, err
	}
	unlock, err := lockDir(dir, warn)
	if err != nil {
		return release, err
	}
	if err := checkOwner(dir, id, first, from != "" && sameDir(dir, from), overwrite); err != nil {
		unlock()
		return release, err
	}
	return unlock, nil
}

// sameDir reports whether paths a and b name the same directory.
func sameDir(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

// checkOwner refuses a save into dir, as PrepareSave says; resumed when
// the run resumed from dir itself.
func checkOwner(dir string, id ModelID, first int, resumed, overwrite bool) error {
	o, err := previous(dir)
	var foreign *notOurs
	errors.As(err, &foreign)
	switch {
	case foreign != nil && filepath.Base(foreign.path) == ManifestName:
		return fmt.Errorf("%s is not an amspc checkpoint: choose another directory (a save would replace it, even with --overwrite): %s", foreign.path, foreign.why)
	case overwrite:
		return nil
	case foreign != nil:
		return fmt.Errorf("%s is not an amspc checkpoint; pass --overwrite to save beside it (it is kept), or choose another directory: %s", foreign.path, foreign.why)
	case err != nil:
		return fmt.Errorf("%s holds a checkpoint that cannot be read; pass --overwrite to replace it: %v", dir, err)
	case o == nil:
		return nil
	case o.model.Name != id.Name:
		return fmt.Errorf("%s holds another model's checkpoint; pass --overwrite to replace it (of model %s after step %d, not of %s)", dir, o.model.Name, o.step, id.Name)
	case o.model.Hash != "" && o.model.Hash != id.Hash:
		return fmt.Errorf("%s holds a checkpoint with other params; pass --overwrite to replace it (of model %s, params' hash %.12s, this model's %.12s)", dir, o.model.Name, o.model.Hash, id.Hash)
	case o.step > first:
		return fmt.Errorf("%s holds a later step's checkpoint; pass --overwrite to replace it, or train on from it (run --resume %s) (model %s after step %d, later than step %d where this one starts)", dir, dir, o.model.Name, o.step, first)
	case o.step == first && !resumed:
		return fmt.Errorf("%s already holds this step's checkpoint; pass --overwrite to replace it, or train on from it (run --resume %s) (model %s after step %d, where this one starts)", dir, dir, o.model.Name, o.step)
	}
	return nil
}

// PrepareSave is PrepareSave for a started run (after Resume from the
// directory from, "" if none): the process holding rank 0 takes the lock
// and checks dir against the run's model and step, and every process
// returns the same error.
func (r *Run) PrepareSave(dir, from string, overwrite bool, warn io.Writer) (release func(), err error) {
	release = func() {}
	if len(r.ranks) == 0 {
		return release, errors.New("internal error: PrepareSave before Start")
	}
	if r.ranks[0].r == 0 {
		release, err = PrepareSave(dir, BundleModel(r.Bundle), r.step, from, overwrite, warn)
	}
	if err = r.agree(err); err != nil {
		release()
		return func() {}, err
	}
	return release, nil
}

// lockInfo is the lock file's content. BootID and Start are absent from
// locks of earlier builds and where /proc does not say.
type lockInfo struct {
	PID     int    `json:"pid"`
	Host    string `json:"host"`
	Started string `json:"started"`
	BootID  string `json:"boot_id,omitempty"` // the kernel's, /proc/sys/kernel/random/boot_id
	Start   string `json:"start,omitempty"`   // the holder's start time (/proc/PID/stat field 22)
}

// heldLocks are the lock files this process holds, by identity, not by
// path: a pid names another process after a restart (a container's amspc
// is pid 1 each time, on the same host name), and a lock naming this
// process that it does not hold is a dead one's.
var heldLocks struct {
	sync.Mutex
	files []os.FileInfo
}

func holdsLock(fi os.FileInfo) bool {
	heldLocks.Lock()
	defer heldLocks.Unlock()
	for _, h := range heldLocks.files {
		if os.SameFile(h, fi) {
			return true
		}
	}
	return false
}

func setHeld(fi os.FileInfo, held bool) {
	heldLocks.Lock()
	defer heldLocks.Unlock()
	heldLocks.files = slices.DeleteFunc(heldLocks.files, func(h os.FileInfo) bool { return os.SameFile(h, fi) })
	if held {
		heldLocks.files = append(heldLocks.files, fi)
	}
}

// lockDir takes dir's lock: it creates the lock file, refusing when it
// exists unless it is stale (lockInfo.stale).
func lockDir(dir string, warn io.Writer) (func(), error) {
	host, _ := os.Hostname()
	boot := bootID()
	start, _ := procStart(os.Getpid())
	data, _ := json.Marshal(lockInfo{os.Getpid(), host, time.Now().UTC().Format(time.RFC3339), boot, start})
	data = append(data, '\n')
	path := filepath.Join(dir, LockName)
	for range 2 {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			_, err = f.Write(data)
			fi, serr := f.Stat()
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err == nil {
				err = serr
			}
			if err != nil {
				os.Remove(path)
				return nil, err
			}
			setHeld(fi, true)
			return func() {
				setHeld(fi, false)
				// Only our own lock: never one a later writer took over.
				if b, err := os.ReadFile(path); err == nil && string(b) == string(data) {
					os.Remove(path)
				}
			}, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("cannot write into %s: %w", dir, err)
		}
		held, raw, fi, err := readLock(path)
		if err != nil {
			return nil, fmt.Errorf("%s: the lock cannot be read; remove it if no amspc writes into the directory: %v", path, err)
		}
		why := held.stale(fi, host, boot)
		if why == "" {
			who := "another amspc"
			if held.PID == os.Getpid() && held.Host == host {
				who = "this process already"
			}
			return nil, fmt.Errorf("%s: the directory is being written by %s; wait for it to end, or remove this lock if it has (pid %d on host %s, since %s)", path, who, held.PID, held.Host, held.Started)
		}
		// Stale. Remove it only if it is still the lock just read.
		fmt.Fprintf(warn, "amspc: %s: taking over a stale lock (pid %d on host %s %s)\n", dir, held.PID, held.Host, why)
		if b, err := os.ReadFile(path); err == nil && string(b) == string(raw) {
			os.Remove(path)
		}
	}
	return nil, fmt.Errorf("%s: could not take the lock %s", dir, path)
}

// stale says why lock l (the file fi) no longer holds, "" while it may:
// only on its own host can it tell, and there when the machine has
// restarted since (another boot id), or the lock names this process,
// which does not hold it, or its process has ended, or the pid names a
// process started at another time.
func (l *lockInfo) stale(fi os.FileInfo, host, boot string) string {
	switch {
	case l.Host != host:
		return ""
	case l.BootID != "" && boot != "" && l.BootID != boot:
		return "ran before this host restarted"
	case l.PID == os.Getpid():
		if holdsLock(fi) {
			return ""
		}
		return "was an earlier process with this one's pid"
	case processGone(l.PID):
		return "has ended"
	}
	if now, ok := procStart(l.PID); ok && l.Start != "" && now != l.Start {
		return "has ended; the pid is another process's now"
	}
	return ""
}

// readLock reads the lock file at path: its content, parsed and raw, and
// the file's identity.
func readLock(path string) (*lockInfo, []byte, os.FileInfo, error) {
	// Not a FIFO, which would block the open.
	if fi, err := os.Lstat(path); err != nil {
		return nil, nil, nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, nil, nil, errors.New("not a regular file")
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, nil, err
	}
	raw, err := io.ReadAll(io.LimitReader(f, 1<<16))
	if err != nil {
		return nil, nil, nil, err
	}
	var l lockInfo
	if err := json.Unmarshal(raw, &l); err != nil {
		return nil, nil, nil, err
	}
	if l.PID <= 0 {
		return nil, nil, nil, fmt.Errorf("pid %d", l.PID)
	}
	return &l, raw, fi, nil
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
// if none) that m does not name (a version 1 checkpoint's only while its
// model.safetensors has the SHA-256 its state.json records), directories of saves that failed before
// their commit (named as amspc names them and holding only amspc's
// files), and temporary files of interrupted writes. Nothing else is
// touched.
func removeStale(dir string, prev *owner, m *Manifest) {
	keep := map[string]bool{}
	for _, f := range m.Files {
		keep[f.Path] = true
		keep[strings.SplitN(f.Path, "/", 2)[0]] = true
	}
	switch {
	case prev == nil:
	case prev.v1sum != "":
		// Version 1: only the files state.json describes, and only if
		// model.safetensors is still the one it records.
		if sum, err := fileSHA256(filepath.Join(dir, "model.safetensors")); err == nil && sum == prev.v1sum && !keep["model.safetensors"] && !keep["state.json"] {
			os.Remove(filepath.Join(dir, "model.safetensors"))
			os.Remove(filepath.Join(dir, "state.json"))
		}
	default:
		for _, p := range prev.files {
			if keep[p] || !strings.Contains(p, "/") {
				continue
			}
			if shardRE.MatchString(filepath.Base(filepath.FromSlash(p))) {
				os.Remove(filepath.Join(dir, filepath.FromSlash(p)))
			}
			os.Remove(filepath.Join(dir, filepath.Dir(filepath.FromSlash(p)))) // if now empty
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
