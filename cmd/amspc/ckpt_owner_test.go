package main

import (
	"amspc/engine"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A checkpoint directory belongs to one job: these tests check what
// amspc refuses to write over, what it deletes, its lock, and how it
// reports damage.

const tinyModel = "../../testdata/models/tiny.amsp"

// amspcStatus runs amspc with args, fails the test unless it exits with
// want, and returns what it printed.
func amspcStatus(t *testing.T, want int, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if st := run(args, &stdout, &stderr); st != want {
		t.Fatalf("amspc %s: status %d, want %d:\n%s%s", strings.Join(args, " "), st, want, stdout.String(), stderr.String())
	}
	return stdout.String() + stderr.String()
}

func wantSays(t *testing.T, what, out string, says ...string) {
	t.Helper()
	for _, s := range says {
		if !strings.Contains(out, s) {
			t.Errorf("%s: %q does not say %q", what, out, s)
		}
	}
}

// TestSaveRefusesOtherModel: run --save into a directory holding another
// model's checkpoint (another name, or the same name with other params)
// is refused before training, naming the directory, the other model and
// --overwrite; with --overwrite it replaces it.
func TestSaveRefusesOtherModel(t *testing.T) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	amspcStatus(t, exitOK, "run", "--steps", "1", "--save", ck, tinyModel)
	out := amspcStatus(t, exitUser, "run", "--steps", "1", "--save", ck, "../../testdata/models/tied.amsp")
	wantSays(t, "save of tied over tiny", out, ck, "model tiny", "--overwrite")
	if strings.Contains(out, "step    1/") {
		t.Errorf("trained before refusing:\n%s", out)
	}
	// The same name, other params: d = 32.
	src, err := os.ReadFile(tinyModel)
	if err != nil {
		t.Fatal(err)
	}
	narrow := filepath.Join(dir, "narrow.amsp")
	os.WriteFile(narrow, bytes.Replace(src, []byte("dim d      = 64"), []byte("dim d      = 32"), 1), 0o644)
	out = amspcStatus(t, exitUser, "run", "--steps", "1", "--save", ck, narrow)
	wantSays(t, "save of tiny with other params", out, ck, "other params", "--overwrite")
	amspcStatus(t, exitOK, "run", "--steps", "1", "--save", ck, "--overwrite", "../../testdata/models/tied.amsp")
	wantSays(t, "ckpt info after --overwrite", amspcStatus(t, exitOK, "ckpt", "info", ck), "model tied after step 1")
}

// TestSaveRefusesLaterStep: a fresh run saving over a later step of the
// same model is refused; resuming the checkpoint and saving into it is the
// normal case; --overwrite replaces it.
func TestSaveRefusesLaterStep(t *testing.T) {
	ck := filepath.Join(t.TempDir(), "ck")
	amspcStatus(t, exitOK, "run", "--steps", "2", "--save", ck, tinyModel)
	out := amspcStatus(t, exitUser, "run", "--steps", "1", "--save", ck, tinyModel)
	wantSays(t, "save over step 2", out, ck, "step 2", "--overwrite")
	amspcStatus(t, exitOK, "run", "--steps", "3", "--resume", ck, "--save", ck, tinyModel)
	wantSays(t, "resumed and saved", amspcStatus(t, exitOK, "ckpt", "info", ck), "after step 3")
	amspcStatus(t, exitOK, "run", "--steps", "1", "--save", ck, "--overwrite", tinyModel)
	wantSays(t, "overwritten", amspcStatus(t, exitOK, "ckpt", "info", ck), "after step 1")
}

// TestSaveKeepsUserFiles: saves delete only what amspc wrote: the
// previous save's directory and a failed save's directory holding only
// amspc's files, never a user's folder or file, even one named like
// amspc's.
func TestSaveKeepsUserFiles(t *testing.T) {
	ck := filepath.Join(t.TempDir(), "ck")
	mine := []string{"notes/todo.txt", "step-foo/x.txt", "step-00000007-0000abcd/mine.txt", "model.safetensors", "state.json.bak"}
	for _, p := range mine {
		os.MkdirAll(filepath.Dir(filepath.Join(ck, p)), 0o755)
		os.WriteFile(filepath.Join(ck, p), []byte("mine"), 0o644)
	}
	failed := filepath.Join(ck, "step-00000009-0badf00d")
	os.MkdirAll(failed, 0o755)
	os.WriteFile(filepath.Join(failed, "rank-00003.safetensors"), []byte("half"), 0o644)
	os.WriteFile(filepath.Join(failed, ".rank-00004.safetensors.tmp-123"), []byte("half"), 0o644)
	amspcStatus(t, exitOK, "run", "--steps", "1", "--save", ck, tinyModel)
	first := stepDirs(t, ck)
	amspcStatus(t, exitOK, "run", "--steps", "2", "--resume", ck, "--save", ck, tinyModel)
	for _, p := range mine {
		if b, err := os.ReadFile(filepath.Join(ck, p)); err != nil || string(b) != "mine" {
			t.Errorf("%s: %q, %v after the saves", p, b, err)
		}
	}
	if _, err := os.Stat(failed); !os.IsNotExist(err) {
		t.Errorf("the failed save's %s is left: %v", failed, err)
	}
	for _, d := range first {
		if _, err := os.Stat(filepath.Join(ck, d)); !os.IsNotExist(err) {
			t.Errorf("the first save's %s is left: %v", d, err)
		}
	}
	if _, err := os.Stat(filepath.Join(ck, ".amspc-lock")); !os.IsNotExist(err) {
		t.Errorf("the lock is left after the run: %v", err)
	}
}

// stepDirs lists the save directories a checkpoint's manifest names.
func stepDirs(t *testing.T, ck string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(ck, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct{ Files []struct{ Path string } }
	json.Unmarshal(b, &m)
	var out []string
	for _, f := range m.Files {
		out = append(out, strings.SplitN(f.Path, "/", 2)[0])
	}
	return out
}

// lockedDir makes a checkpoint directory for the lock tests: this host's
// name, the directory and its lock file's path.
func lockedDir(t *testing.T) (host, ck, lock string) {
	host, err := os.Hostname()
	if err != nil {
		t.Skip(err)
	}
	ck = filepath.Join(t.TempDir(), "ck")
	os.MkdirAll(ck, 0o755)
	return host, ck, filepath.Join(ck, engine.LockName)
}

// TestSaveLock: a second writer is refused while the lock is held,
// naming the holder's pid and host; a lock whose process is gone (same
// host) is taken over with a note.
func TestSaveLock(t *testing.T) {
	host, ck, lock := lockedDir(t)
	hold := func(pid int, host string) {
		b, _ := json.Marshal(map[string]any{"pid": pid, "host": host, "started": "2025-01-02T03:04:05Z"})
		if err := os.WriteFile(lock, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	live := liveProcess(t)
	hold(live, host)
	out := amspcStatus(t, exitUser, "run", "--steps", "1", "--save", ck, tinyModel)
	wantSays(t, "locked by a live process", out, ck, fmt.Sprint("pid ", live), host)
	out = amspcStatus(t, exitUser, "run", "--steps", "1", "--save", ck, "--overwrite", tinyModel)
	wantSays(t, "--overwrite does not break a lock", out, fmt.Sprint("pid ", live))
	hold(4242, "elsewhere.example")
	// A file whose header reads (import checks it before the lock).
	norm := filepath.Join(t.TempDir(), "norm.safetensors")
	hdr := `{"norm":{"dtype":"F32","shape":[64],"data_offsets":[0,256]}}`
	hb := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	os.WriteFile(norm, append(append(hb, hdr...), make([]byte, 256)...), 0o644)
	out = amspcStatus(t, exitUser, "ckpt", "import", norm, "--model", tinyModel, "-o", ck)
	wantSays(t, "import into a locked directory", out, "pid 4242", "elsewhere.example")
	// A process that has ended.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip(err)
	}
	hold(cmd.Process.Pid, host)
	out = amspcStatus(t, exitOK, "run", "--steps", "1", "--save", ck, tinyModel)
	wantSays(t, "stale lock", out, "stale", fmt.Sprint("pid ", cmd.Process.Pid))
	if _, err := os.Stat(lock); !os.IsNotExist(err) {
		t.Errorf("the lock is left after the run: %v", err)
	}
	// A process that has ended but is not yet reaped (a zombie: an MPI
	// job's orphaned rank 0, until init reaps it) is gone too.
	zombie := exec.Command("true")
	if err := zombie.Start(); err != nil {
		t.Skip(err)
	}
	defer zombie.Wait()
	stat := fmt.Sprintf("/proc/%d/stat", zombie.Process.Pid)
	for i := 0; i < 200; i++ {
		if b, err := os.ReadFile(stat); err != nil || strings.Contains(string(b), ") Z ") {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	hold(zombie.Process.Pid, host)
	out = amspcStatus(t, exitOK, "run", "--steps", "2", "--resume", ck, "--save", ck, tinyModel)
	wantSays(t, "a zombie's lock", out, "stale", fmt.Sprint("pid ", zombie.Process.Pid))
}

// TestCkptVerify: verify passes a good checkpoint and names each damaged
// or missing file; info refuses what it can see without hashing.
func TestCkptVerify(t *testing.T) {
	ck := filepath.Join(t.TempDir(), "ck")
	amspcStatus(t, exitOK, "run", "--steps", "1", "--save", ck, tinyModel)
	wantSays(t, "verify", amspcStatus(t, exitOK, "ckpt", "verify", ck), "ok", "8 files")
	var m struct{ Files []struct{ Path string } }
	b, _ := os.ReadFile(filepath.Join(ck, "manifest.json"))
	json.Unmarshal(b, &m)
	flip, gone := filepath.Join(ck, m.Files[3].Path), filepath.Join(ck, m.Files[5].Path)
	orig, err := os.ReadFile(flip)
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), orig...)
	bad[len(bad)-5] ^= 1
	os.WriteFile(flip, bad, 0o644)
	wantSays(t, "verify of a flipped byte", amspcStatus(t, exitUser, "ckpt", "verify", ck), m.Files[3].Path, "SHA-256")
	// info sees only sizes: a flipped byte passes, and it says how to check.
	wantSays(t, "info of a flipped byte", amspcStatus(t, exitOK, "ckpt", "info", ck), "ckpt verify")
	os.WriteFile(flip, orig[:len(orig)-1], 0o644)
	wantSays(t, "info of a truncated file", amspcStatus(t, exitUser, "ckpt", "info", ck), m.Files[3].Path, "damaged")
	os.WriteFile(flip, orig, 0o644)
	os.Remove(gone)
	out := amspcStatus(t, exitUser, "ckpt", "verify", ck)
	wantSays(t, "verify of a missing file", out, m.Files[5].Path, "missing")
	if strings.Contains(out, m.Files[3].Path) {
		t.Errorf("verify names the restored file:\n%s", out)
	}
	wantSays(t, "info of a missing file", amspcStatus(t, exitUser, "ckpt", "info", ck), m.Files[5].Path, "missing", "damaged")
	amspcStatus(t, exitUser, "ckpt", "verify", t.TempDir())
}

// exportedWeights trains tiny for steps and exports its weights (with
// Adam's moments when optimizer) into a safetensors file.
func exportedWeights(t *testing.T, steps string, optimizer bool) (ck, file string) {
	t.Helper()
	dir := t.TempDir()
	ck, file = filepath.Join(dir, "ck"), filepath.Join(dir, "w.safetensors")
	amspcStatus(t, exitOK, "run", "--steps", steps, "--save", ck, tinyModel)
	args := []string{"ckpt", "export", ck, "-o", file}
	if optimizer {
		args = append(args, "--optimizer")
	}
	amspcStatus(t, exitOK, args...)
	return ck, file
}

// poke sets element i of tensor name of a safetensors file (F32) to x.
func poke(t *testing.T, file, name string, i int, x float32) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(b)
	var header map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &header); err != nil {
		t.Fatal(err)
	}
	var ti struct {
		DType   string `json:"dtype"`
		Offsets [2]int `json:"data_offsets"`
	}
	if err := json.Unmarshal(header[name], &ti); err != nil || ti.DType != "F32" {
		t.Fatalf("tensor %s: %s, %v", name, header[name], err)
	}
	binary.LittleEndian.PutUint32(b[8+int(n)+ti.Offsets[0]+4*i:], math.Float32bits(x))
	os.WriteFile(file, b, 0o644)
}

// TestCkptImportRefusesNonFinite: a NaN or an infinity among the tensors
// is refused, naming the tensor and the element.
func TestCkptImportRefusesNonFinite(t *testing.T) {
	_, file := exportedWeights(t, "1", true)
	data, _ := os.ReadFile(file)
	out := filepath.Join(t.TempDir(), "ck")
	poke(t, file, "tok_emb", 3*64+5, float32(math.NaN()))
	wantSays(t, "import of a NaN", amspcStatus(t, exitUser, "ckpt", "import", file, "--model", tinyModel, "-o", out),
		file, "tok_emb", "element 197", "[3, 5]", "NaN")
	os.WriteFile(file, data, 0o644)
	poke(t, file, "norm.adam_v", 7, float32(math.Inf(1)))
	wantSays(t, "import of an infinity", amspcStatus(t, exitUser, "ckpt", "import", file, "--model", tinyModel, "-o", out),
		"norm.adam_v", "element 7", "+Inf")
	if _, err := os.Stat(filepath.Join(out, "manifest.json")); !os.IsNotExist(err) {
		t.Errorf("a refused import wrote a checkpoint: %v", err)
	}
}

// TestCkptImportOwnership: import follows save's rules: not over a later
// step or another model's checkpoint without --overwrite.
func TestCkptImportOwnership(t *testing.T) {
	ck, weights := exportedWeights(t, "2", false)
	out := amspcStatus(t, exitUser, "ckpt", "import", weights, "--model", tinyModel, "-o", ck)
	wantSays(t, "import over step 2", out, ck, "step 2", "--overwrite")
	wantSays(t, "kept", amspcStatus(t, exitOK, "ckpt", "info", ck), "after step 2")
	other := filepath.Join(t.TempDir(), "tied")
	amspcStatus(t, exitOK, "run", "--steps", "0", "--save", other, "../../testdata/models/tied.amsp")
	wantSays(t, "import over tied", amspcStatus(t, exitUser, "ckpt", "import", weights, "--model", tinyModel, "-o", other), other, "model tied", "--overwrite")
	amspcStatus(t, exitOK, "ckpt", "import", weights, "--model", tinyModel, "-o", ck, "--overwrite")
	wantSays(t, "overwritten", amspcStatus(t, exitOK, "ckpt", "info", ck), "after step 0")
	// The weights of a checkpoint imported into itself (over its step 0,
	// so with --overwrite): the file is the user's and stays.
	inside := filepath.Join(ck, "model.safetensors")
	b, _ := os.ReadFile(weights)
	os.WriteFile(inside, b, 0o644)
	amspcStatus(t, exitOK, "ckpt", "import", inside, "--model", tinyModel, "-o", ck, "--overwrite")
	if _, err := os.Stat(inside); err != nil {
		t.Errorf("import deleted its own input: %v", err)
	}
}

// TestCkptImportMemory: a file whose tensors would not fit in memory is
// refused from its header, before anything is read or allocated (a sparse
// file of 512 GiB).
func TestCkptImportMemory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "huge.safetensors")
	const elems = int64(1) << 37
	hdr := fmt.Sprintf(`{"tok_emb":{"dtype":"F32","shape":[%d],"data_offsets":[0,%d]}}`, elems, 4*elems)
	for len(hdr)%8 != 0 {
		hdr += " "
	}
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	binary.Write(f, binary.LittleEndian, uint64(len(hdr)))
	f.WriteString(hdr)
	err = f.Truncate(8 + int64(len(hdr)) + 4*elems)
	f.Close()
	if err != nil {
		t.Skipf("no sparse file of 512 GiB here: %v", err)
	}
	if availableBytes() > float64(8*elems) {
		t.Skip("this machine has the memory")
	}
	out := amspcStatus(t, exitUser, "ckpt", "import", file, "--model", tinyModel, "-o", filepath.Join(t.TempDir(), "ck"))
	wantSays(t, "import of 512 GiB", out, file, "memory", "available")
}

// TestSaveOverVersion2: a version 2 checkpoint (no model hash) resumes and
// is saved over by the model of its name; another model is refused.
func TestSaveOverVersion2(t *testing.T) {
	ck := filepath.Join(t.TempDir(), "ck")
	amspcStatus(t, exitOK, "run", "--steps", "1", "--save", ck, tinyModel)
	downgrade := func() {
		path := filepath.Join(ck, "manifest.json")
		b, _ := os.ReadFile(path)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		delete(m, "model_hash")
		m["version"] = 2
		b, _ = json.Marshal(m)
		os.WriteFile(path, b, 0o644)
	}
	downgrade()
	wantSays(t, "info of version 2", amspcStatus(t, exitOK, "ckpt", "info", ck), "format version 2")
	amspcStatus(t, exitOK, "ckpt", "verify", ck)
	wantSays(t, "tied over version 2", amspcStatus(t, exitUser, "run", "--steps", "1", "--save", ck, "../../testdata/models/tied.amsp"), "model tiny", "--overwrite")
	amspcStatus(t, exitOK, "run", "--steps", "2", "--resume", ck, "--save", ck, tinyModel)
	wantSays(t, "saved over version 2", amspcStatus(t, exitOK, "ckpt", "info", ck), fmt.Sprintf("format version %d", engine.CheckpointVersion), "after step 2")
}

// TestSaveRefusesSameStep: a fresh run (or an import) into a directory
// holding a checkpoint of its model at the step where it starts is
// refused, saying to resume it or to pass --overwrite: it would silently
// replace the weights (an import's, say) with freshly initialised ones.
// Resuming the directory and saving into it continues it, however the
// path is spelled; resuming one and saving into another is refused only
// when the other holds the same step or a later one.
func TestSaveRefusesSameStep(t *testing.T) {
	_, weights := exportedWeights(t, "1", false)
	dir := t.TempDir()
	imp := filepath.Join(dir, "imp")
	amspcStatus(t, exitOK, "ckpt", "import", weights, "--model", tinyModel, "-o", imp)
	out := amspcStatus(t, exitUser, "run", "--steps", "1", "--save", imp, tinyModel)
	wantSays(t, "a fresh run over an import", out, imp, "step 0", "--resume "+imp, "--overwrite")
	if strings.Contains(out, "step    1/") {
		t.Errorf("trained before refusing:\n%s", out)
	}
	wantSays(t, "kept", amspcStatus(t, exitOK, "ckpt", "info", imp), "after step 0")
	out = amspcStatus(t, exitUser, "ckpt", "import", weights, "--model", tinyModel, "-o", imp)
	wantSays(t, "an import over an import", out, imp, "step 0", "--overwrite")
	amspcStatus(t, exitOK, "ckpt", "import", weights, "--model", tinyModel, "-o", imp, "--overwrite")

	// --resume DIR --save DIR, DIR spelled another way.
	amspcStatus(t, exitOK, "run", "--steps", "1", "--resume", imp, "--save", filepath.Join(dir, ".", "imp")+"/", tinyModel)
	wantSays(t, "resumed and saved", amspcStatus(t, exitOK, "ckpt", "info", imp), "after step 1")

	// --resume A --save B: B empty, B at an earlier step, B at the same.
	b := filepath.Join(dir, "b")
	amspcStatus(t, exitOK, "run", "--steps", "0", "--save", b, tinyModel)
	amspcStatus(t, exitOK, "run", "--steps", "2", "--resume", imp, "--save", b, tinyModel)
	wantSays(t, "B at an earlier step", amspcStatus(t, exitOK, "ckpt", "info", b), "after step 2")
	amspcStatus(t, exitOK, "run", "--steps", "2", "--resume", imp, "--save", filepath.Join(dir, "c"), tinyModel)
	out = amspcStatus(t, exitUser, "run", "--steps", "3", "--resume", filepath.Join(dir, "c"), "--save", b, tinyModel)
	wantSays(t, "B at the same step", out, b, "step 2", "--overwrite")
	wantSays(t, "B kept", amspcStatus(t, exitOK, "ckpt", "info", b), "after step 2")
}

// TestSaveLeavesUserState: a user's state.json is not a version 1
// checkpoint unless it has all of one (a model, a tensors hash, and
// model.safetensors beside it): a save refuses the directory saying so,
// and with --overwrite saves beside the user's files, never deleting
// them; nor those of a version 1 checkpoint whose model.safetensors is
// not the one its state.json records. A manifest.json that is not
// amspc's is refused even with --overwrite: the save would replace it.
func TestSaveLeavesUserState(t *testing.T) {
	for _, c := range []struct {
		name, state, says string
	}{
		{"epoch", `{"version": 1, "epoch": 3}`, "state.json is not an amspc checkpoint"},
		{"nohash", `{"version": 1, "model": "tiny", "step": 0}`, "state.json is not an amspc checkpoint"},
		{"otherfile", `{"version": 1, "model": "tiny", "step": 0, "tensors_sha256": "` + strings.Repeat("ab", 32) + `"}`, "model tiny after step 0"},
	} {
		u := filepath.Join(t.TempDir(), "u")
		os.MkdirAll(u, 0o755)
		os.WriteFile(filepath.Join(u, "state.json"), []byte(c.state), 0o644)
		os.WriteFile(filepath.Join(u, "model.safetensors"), []byte("mine"), 0o644)
		out := amspcStatus(t, exitUser, "run", "--steps", "1", "--save", u, tinyModel)
		wantSays(t, c.name, out, u, c.says, "--overwrite")
		amspcStatus(t, exitOK, "run", "--steps", "1", "--save", u, "--overwrite", tinyModel)
		for name, want := range map[string]string{"state.json": c.state, "model.safetensors": "mine"} {
			if b, err := os.ReadFile(filepath.Join(u, name)); err != nil || string(b) != want {
				t.Errorf("%s: the user's %s after the save: %q, %v", c.name, name, b, err)
			}
		}
		wantSays(t, c.name+": saved", amspcStatus(t, exitOK, "ckpt", "info", u), "after step 1")
	}

	f := filepath.Join(t.TempDir(), "f")
	os.MkdirAll(f, 0o755)
	theirs := `{"name": "my-app", "version": "1.0.0"}`
	os.WriteFile(filepath.Join(f, "manifest.json"), []byte(theirs), 0o644)
	_, weights := exportedWeights(t, "1", false)
	for _, args := range [][]string{
		{"run", "--steps", "1", "--save", f, tinyModel},
		{"run", "--steps", "1", "--save", f, "--overwrite", tinyModel},
		{"ckpt", "import", weights, "--model", tinyModel, "-o", f, "--overwrite"},
	} {
		out := amspcStatus(t, exitUser, args...)
		wantSays(t, strings.Join(args, " "), out, f, "manifest.json is not an amspc checkpoint")
		if slicesContains(args, "--overwrite") {
			wantSays(t, strings.Join(args, " "), out, "another directory")
		}
	}
	if b, err := os.ReadFile(filepath.Join(f, "manifest.json")); err != nil || string(b) != theirs {
		t.Errorf("the user's manifest.json: %q, %v", b, err)
	}
}

func slicesContains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// liveProcess starts a process that lives until the test ends and
// returns its pid.
func liveProcess(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd.Process.Pid
}

// TestSaveLockReusedPID: a lock is stale when its pid now names another
// process: this process's own pid (a restarted container's amspc is pid 1
// again, on the same host name) where this process holds no such lock,
// or a live process started at another time than the lock records, or
// any pid after a reboot (another boot id). A live holder started when
// the lock says, on this boot, still holds it.
func TestSaveLockReusedPID(t *testing.T) {
	host, ck, lock := lockedDir(t)
	hold := func(l map[string]any) {
		l["host"], l["started"] = host, "2025-01-02T03:04:05Z"
		b, _ := json.Marshal(l)
		if err := os.WriteFile(lock, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hold(map[string]any{"pid": os.Getpid()})
	out := amspcStatus(t, exitOK, "run", "--steps", "1", "--save", ck, tinyModel)
	wantSays(t, "our own pid", out, "stale", fmt.Sprint("pid ", os.Getpid()))

	live := liveProcess(t)
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", live))
	boot, berr := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil || berr != nil {
		t.Skip("no /proc here")
	}
	s := string(stat)
	start := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])[19]
	bootID := strings.TrimSpace(string(boot))
	hold(map[string]any{"pid": live, "boot_id": bootID, "start": start + "0"})
	out = amspcStatus(t, exitOK, "run", "--steps", "2", "--resume", ck, "--save", ck, tinyModel)
	wantSays(t, "a reused pid", out, "stale", fmt.Sprint("pid ", live))
	hold(map[string]any{"pid": live, "boot_id": "00000000-0000-0000-0000-000000000000", "start": start})
	out = amspcStatus(t, exitOK, "run", "--steps", "3", "--resume", ck, "--save", ck, tinyModel)
	wantSays(t, "another boot", out, "stale", fmt.Sprint("pid ", live))
	hold(map[string]any{"pid": live, "boot_id": bootID, "start": start})
	out = amspcStatus(t, exitUser, "run", "--steps", "4", "--resume", ck, "--save", ck, tinyModel)
	wantSays(t, "its holder", out, ck, fmt.Sprint("pid ", live), "another amspc")
}
