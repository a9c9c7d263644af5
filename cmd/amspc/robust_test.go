package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"amspc/internal/testfs"
)

// The CLI robustness test (issue 26 item 7): every command with every flag
// given bad values, and every output pointed at device nodes and at a full
// filesystem. Each case runs the built binary as a user would, in its own
// process with a time limit, so a panic is a crash and a hang a failure,
// not a stuck test. AMSPC_BIN=PATH runs the cases against another build
// (an older commit's, to see which cases it fails).

// buildDirs are the temporary directories of the binaries tests built;
// TestMain removes them once every test is done with them.
var buildDirs []string

func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range buildDirs {
		os.RemoveAll(d)
	}
	os.Exit(code)
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// amspcBinary builds amspc once for the tests that run it as a process.
func amspcBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("AMSPC_BIN"); p != "" {
		return p
	}
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "amspc-bin-")
		if err != nil {
			binErr = err
			return
		}
		buildDirs = append(buildDirs, dir)
		binPath = filepath.Join(dir, "amspc")
		if out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// result is what a run of amspc did.
type result struct {
	status         int
	stdout, stderr string
}

// exe runs amspc with args in dir (a new temporary directory when empty) and
// stdout to the given file (a buffer when nil), within limit.
func exe(t *testing.T, dir string, stdout *os.File, limit time.Duration, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, amspcBinary(t), args...)
	if dir == "" {
		// A case that wrongly succeeds writes its default outputs
		// (out/, report.html) here, not into the source tree.
		dir = t.TempDir()
	}
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdout != nil {
		cmd.Stdout = stdout
	}
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Errorf("amspc %s: still running after %v (killed)\nstderr: %s", strings.Join(args, " "), limit, errb.String())
		return result{-1, out.String(), errb.String()}
	}
	status := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		status = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("amspc %s: %v", strings.Join(args, " "), err)
	}
	return result{status, out.String(), errb.String()}
}

// crashed reports whether stderr shows a Go panic or a compiler bug.
func crashed(stderr string) bool {
	return strings.Contains(stderr, "goroutine ") || strings.Contains(stderr, "panic:") ||
		strings.Contains(stderr, "internal compiler error")
}

// fixtures are the files the cases point at.
type fixtures struct {
	tiny, llama, plan, ckpt, tensors, hf, noTrain, noCluster, dir string
	bigIDs                                                        string // uint16 tokens, one of them 300: beyond tiny's vocab of 256
}

func makeFixtures(t *testing.T) fixtures {
	t.Helper()
	tmp := t.TempDir()
	abs := func(p string) string {
		a, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	// Copies of the inputs a case might write over (the cases that
	// point an output at an input, run against a build that does so).
	copyFile := func(from string) string {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		to := filepath.Join(tmp, filepath.Base(from))
		if err := os.WriteFile(to, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return to
	}
	f := fixtures{
		tiny:      copyFile("../../testdata/models/tiny.amsp"),
		llama:     abs("../../testdata/models/llama-7b.amsp"),
		hf:        copyFile("../../testdata/hf/TinyLlama-1.1B-Chat-v1.0.json"),
		plan:      filepath.Join(tmp, "plan"),
		ckpt:      filepath.Join(tmp, "ckpt"),
		tensors:   filepath.Join(tmp, "tiny.safetensors"),
		noTrain:   filepath.Join(tmp, "no-train.amsp"),
		noCluster: filepath.Join(tmp, "no-cluster.amsp"),
		dir:       filepath.Join(tmp, "a-directory"),
	}
	os.Mkdir(f.dir, 0o755)
	f.bigIDs = filepath.Join(tmp, "ids.bin")
	ids := make([]byte, 2*8192)
	for i := range 8192 {
		ids[2*i] = byte(i % 200)
	}
	ids[2*4000], ids[2*4000+1] = 300%256, 300/256
	os.WriteFile(f.bigIDs, ids, 0o644)
	// Files that hold a section, but not the one a flag takes from them.
	os.WriteFile(f.noTrain, []byte("cluster { nodes = 1  gpus_per_node = 2  gpu = \"cpu\" }\n"), 0o644)
	os.WriteFile(f.noCluster, []byte("train { seq_len = 64  micro_batch = 2  global_batch = 32 }\n"), 0o644)
	for _, args := range [][]string{
		{"compile", "-o", f.plan, f.tiny},
		{"run", "--steps", "0", "--save", f.ckpt, f.tiny},
		{"ckpt", "export", f.ckpt, "-o", f.tensors},
	} {
		if r := exe(t, "", nil, 2*time.Minute, args...); r.status != 0 {
			t.Fatalf("amspc %s: exit %d\n%s", strings.Join(args, " "), r.status, r.stderr)
		}
	}
	return f
}

// badCase is a command line that must be refused: exit 1, the flag (or
// what is named by want) in the message, no crash.
type badCase struct {
	args []string
	want string // a regexp stderr must match; the flag's name
}

// gpt2Tokenizer is GPT-2's tokenizer.json (testdata/tokenizers/gpt2).
var gpt2Tokenizer, _ = filepath.Abs("../../testdata/tokenizers/gpt2/tokenizer.json")

func badFlagCases(f fixtures) []badCase {
	tiny, plan := f.tiny, f.plan
	return []badCase{
		// check
		{[]string{"check", "--dp", "-8", tiny}, `-dp`},
		{[]string{"check", "--dp", "0", tiny}, `-dp`},
		{[]string{"check", "--dp", "abc", tiny}, `-dp`},
		{[]string{"check", "--dp", "99999999999999999999", tiny}, `-dp`},
		{[]string{"check", "--json=maybe", tiny}, `-json`},
		{[]string{"check", "--cluster", "/nonexistent/c.amsp", tiny}, `/nonexistent/c.amsp`},
		{[]string{"check", "--cluster", f.noCluster, tiny}, `no-cluster.amsp.*cluster`},
		{[]string{"check", "--train", f.noTrain, tiny}, `no-train.amsp.*train`},
		{[]string{"check", "--profile", "/nonexistent/p.csv", tiny}, `/nonexistent/p.csv`},
		// plan
		{[]string{"plan", "--bucket", "-1", tiny}, `-bucket`},
		{[]string{"plan", "--bucket", "0", tiny}, `-bucket`},
		{[]string{"plan", "--top", "0", tiny}, `-top`},
		{[]string{"plan", "--gap", "100%", tiny}, `--gap "100%"`},
		{[]string{"plan", "--gap", "-1%", tiny}, `--gap "-1%"`},
		{[]string{"plan", "--gap", "NaN", tiny}, `--gap "NaN"`},
		{[]string{"plan", "--gap", "x%", tiny}, `--gap "x%"`},
		{[]string{"plan", "--top", "-3", tiny}, `-top`},
		{[]string{"plan", "--top", "abc", tiny}, `-top`},
		{[]string{"plan", "--top", "99999999999999999999", tiny}, `-top`},
		{[]string{"plan", "--bucket", "abc", tiny}, `-bucket`},
		{[]string{"plan", "--objective", "fast", tiny}, `-objective`},
		{[]string{"plan", "--sweep", "nodes=0", tiny}, `-sweep|nodes`},
		{[]string{"plan", "--sweep", "nodes=-4", tiny}, `-sweep|nodes`},
		{[]string{"plan", "--sweep", "nodes=abc", tiny}, `-sweep|nodes`},
		{[]string{"plan", "--sweep-batch", "some", "--sweep", "nodes=1,2", tiny}, `-sweep-batch`},
		{[]string{"plan", "--export", "pytorch", tiny}, `-export`},
		{[]string{"plan", "--export", "deepspeed", "--sweep", "nodes=1,2", tiny}, `-export`},
		{[]string{"plan", "--json=x", tiny}, `-json`},
		{[]string{"plan", "--wide=x", tiny}, `-wide`},
		{[]string{"plan", "--per-group=x", tiny}, `-per-group`},
		{[]string{"plan", "--simulate=x", tiny}, `-simulate`},
		{[]string{"plan", "--shard", "mics(7)", tiny}, `--shard`},
		{[]string{"plan", "--shard", "zero9", tiny}, `--shard`},
		{[]string{"plan", "--profile", "/nonexistent/p.csv", tiny}, `/nonexistent/p.csv`},
		{[]string{"plan", "--cluster", f.noCluster, tiny}, `no-cluster.amsp.*cluster`},
		{[]string{"plan", "--train", f.noTrain, tiny}, `no-train.amsp.*train`},
		// compile
		{[]string{"compile", "--bucket", "0", "-o", filepath.Join(f.dir, "c"), tiny}, `-bucket`},
		{[]string{"compile", "--bucket", "-5", "-o", filepath.Join(f.dir, "c"), tiny}, `-bucket`},
		{[]string{"compile", "--bucket", "abc", "-o", filepath.Join(f.dir, "c"), tiny}, `-bucket`},
		{[]string{"compile", "-d=bogus", "-o", filepath.Join(f.dir, "c"), tiny}, `-d`},
		{[]string{"compile", "-dump-after=nosuchpass", "-o", filepath.Join(f.dir, "c"), tiny}, `nosuchpass`},
		{[]string{"compile", "--shard", "mics(7)", "-o", filepath.Join(f.dir, "c"), tiny}, `--shard`},
		{[]string{"compile", "-o", f.tiny, tiny}, `tiny.amsp`},
		{[]string{"compile", "--profile", "/nonexistent/p.csv", tiny}, `/nonexistent/p.csv`},
		{[]string{"compile", "--cluster", f.noCluster, tiny}, `no-cluster.amsp.*cluster`},
		{[]string{"compile", "--train", f.noTrain, tiny}, `no-train.amsp.*train`},
		// disasm and trace
		{[]string{"disasm", "--rank", "-1", plan}, `-rank`},
		{[]string{"disasm", "--rank", "99999", plan}, `-rank`},
		{[]string{"disasm", "--rank", "abc", plan}, `-rank`},
		{[]string{"trace", "--ranks", "-1", "-o", filepath.Join(f.dir, "t.json"), plan}, `-ranks`},
		{[]string{"trace", "--ranks", "99999", "-o", filepath.Join(f.dir, "t.json"), plan}, `-ranks`},
		{[]string{"trace", "-o", f.dir, plan}, regexp.QuoteMeta(f.dir)},
		{[]string{"trace", "--profile", "/nonexistent/p.csv", "-o", filepath.Join(f.dir, "t.json"), plan}, `/nonexistent/p.csv`},
		// report
		{[]string{"report", "--bucket", "-1", "-o", filepath.Join(f.dir, "r.html"), tiny}, `-bucket`},
		{[]string{"report", "--top", "0", "-o", filepath.Join(f.dir, "r.html"), tiny}, `-top`},
		{[]string{"report", "--top", "-1", "-o", filepath.Join(f.dir, "r.html"), tiny}, `-top`},
		{[]string{"report", "--bucket", "0", "-o", filepath.Join(f.dir, "r.html"), tiny}, `-bucket`},
		{[]string{"report", "--sweep", "nodes=0", "-o", filepath.Join(f.dir, "r.html"), tiny}, `-sweep|nodes`},
		{[]string{"report", "--sweep-batch", "some", "--sweep", "nodes=1,2", "-o", filepath.Join(f.dir, "r.html"), tiny}, `-sweep-batch`},
		{[]string{"report", "-o", f.dir, tiny}, regexp.QuoteMeta(f.dir)},
		{[]string{"report", "--shard", "mics(7)", "-o", filepath.Join(f.dir, "r.html"), tiny}, `--shard`},
		{[]string{"report", "--profile", "/nonexistent/p.csv", tiny}, `/nonexistent/p.csv`},
		{[]string{"report", "--cluster", f.noCluster, tiny}, `no-cluster.amsp.*cluster`},
		{[]string{"report", "--train", f.noTrain, tiny}, `no-train.amsp.*train`},
		// run
		{[]string{"run", "--steps", "-1", tiny}, `-steps`},
		{[]string{"run", "--steps", "abc", tiny}, `-steps`},
		{[]string{"run", "--steps", "99999999999999999999", tiny}, `-steps`},
		{[]string{"run", "--save-every", "-3", "--save", filepath.Join(f.dir, "s"), tiny}, `-save-every`},
		{[]string{"run", "--save-every", "abc", "--save", filepath.Join(f.dir, "s"), tiny}, `-save-every`},
		{[]string{"run", "--save-every", "0", "--save", filepath.Join(f.dir, "s"), tiny}, `-save-every`},
		{[]string{"run", "--save-every", "2", tiny}, `-save-every`},
		{[]string{"run", "--save", f.tiny, tiny}, `tiny.amsp`},
		{[]string{"run", "--device", "tpu", tiny}, `-device`},
		{[]string{"run", "--tensor-cores", tiny}, `-tensor-cores`},
		{[]string{"run", "--tensor-cores=x", tiny}, `-tensor-cores`},
		{[]string{"run", "--graphs=false", tiny}, `-graphs`},
		{[]string{"run", "--standin-scale", "2", tiny}, `-standin-scale`},
		{[]string{"run", "--collectives", "standin", "--device", "sim", "--standin-scale", "-1", tiny}, `-standin-scale`},
		{[]string{"run", "--collectives", "standin", "--device", "sim", "--steps", "1", tiny}, `-steps 2`},
		{[]string{"run", "--collectives", "standin", "--device", "sim", "--save", filepath.Join(f.dir, "si"), tiny}, `-save`},
		{[]string{"run", "--graphs=x", "--device", "sim", tiny}, `-graphs`},
		{[]string{"run", "--collectives", "nccl", "--device", "sim", tiny}, `-collectives`},
		{[]string{"run", "--collectives", "device", tiny}, `-collectives`},
		{[]string{"run", "--progress", "dots", tiny}, `-progress`},
		{[]string{"run", "--data", "/nonexistent/d.txt", tiny}, `/nonexistent/d.txt`},
		{[]string{"run", "--data", f.dir, tiny}, regexp.QuoteMeta(f.dir)},
		{[]string{"run", "--data", f.bigIDs, tiny}, `token id 300, the model has 256 classes`},
		{[]string{"run", "--resume", "/nonexistent/ck", tiny}, `/nonexistent/ck`},
		{[]string{"run", "--steps", "1", "--log", f.dir, tiny}, `-log`},
		{[]string{"run", "--steps", "2", "--cpuprofile", f.dir, tiny}, `-cpuprofile`},
		{[]string{"run", "--steps", "2", "--trace", f.dir, tiny}, `-trace`},
		{[]string{"run", "--steps", "2", "--trace", filepath.Join(f.dir, "t.json"), "--trace-steps", "0", tiny}, `-trace-steps`},
		{[]string{"run", "--shard", "zero3", plan}, `--shard`},
		{[]string{"run", "--shard", "mics(7)", tiny}, `--shard`},
		{[]string{"run", "--profile", "/nonexistent/p.csv", tiny}, `/nonexistent/p.csv`},
		{[]string{"run", "--cluster", f.noCluster, tiny}, `no-cluster.amsp.*cluster`},
		{[]string{"run", "--train", f.noTrain, tiny}, `no-train.amsp.*train`},
		{[]string{"run", "--overwrite=x", "--save", filepath.Join(f.dir, "s"), tiny}, `-overwrite`},
		{[]string{"run", "--overwrite", tiny}, `-overwrite`},
		{[]string{"run", f.llama}, `memory`}, // 1024 ranks of LLaMA-7B in this process
		// profile
		{[]string{"profile", "--reps", "0", tiny}, `-reps`},
		{[]string{"profile", "--reps", "-1", tiny}, `-reps`},
		{[]string{"profile", "--reps", "abc", tiny}, `-reps`},
		{[]string{"profile", "--min-bytes", "abc", tiny}, `-min-bytes`},
		{[]string{"profile", "--max-bytes", "-1", tiny}, `-max-bytes`},
		{[]string{"profile", "--min-bytes", "0", tiny}, `-min-bytes`},
		{[]string{"profile", "--min-bytes", "-4", tiny}, `-min-bytes`},
		{[]string{"profile", "--max-bytes", "1024", "--min-bytes", "4096", tiny}, `-max-bytes`},
		{[]string{"profile", "--device", "tpu", tiny}, `-device`},
		{[]string{"profile", "--tensor-cores", tiny}, `-tensor-cores`},
		{[]string{"profile", "--overhead=x", tiny}, `-overhead`},
		{[]string{"profile", "--overhead", "--device", "cuda", tiny}, `--overhead`},
		{[]string{"profile", "-o", f.dir, "--reps", "1", "--max-bytes", "4096", tiny}, regexp.QuoteMeta(f.dir)},
		{[]string{"profile", "--shard", "mics(7)", tiny}, `--shard`},
		{[]string{"profile", "--profile", "/nonexistent/p.csv", tiny}, `/nonexistent/p.csv`},
		{[]string{"profile", "--cluster", f.noCluster, tiny}, `no-cluster.amsp.*cluster`},
		{[]string{"profile", "--train", f.noTrain, tiny}, `no-train.amsp.*train`},
		{[]string{"profile", "--max-bytes", "99999999999999999", tiny}, `-max-bytes`},
		{[]string{"profile", "--shard", "zero3", f.llama}, `memory`},
		// validate
		{[]string{"validate", "--plans", "bogus", tiny}, `-plans`},
		{[]string{"validate", "--calibrate=maybe", tiny}, `-calibrate`},
		{[]string{"validate", "--in-step=false", tiny}, `--in-step says how --calibrate`},
		{[]string{"validate", "--reference=false", tiny}, `--reference says how --calibrate`},
		{[]string{"validate", "--calibrate", "--reference=maybe", tiny}, `-reference`},
		{[]string{"validate", "--save-profile", filepath.Join(f.dir, "p.csv"), tiny}, `--save-profile writes what --calibrate measured`},
		{[]string{"validate", "--calibrate", "--save-profile", "/nonexistent/dir/p.csv", tiny}, `/nonexistent/dir`},
		{[]string{"profile", "--in-step=maybe", "-o", filepath.Join(f.dir, "p.csv"), tiny}, `-in-step`},
		{[]string{"validate", "--shard", "zero9", tiny}, `--shard`},
		{[]string{"validate", "--plans", "extremes=0", tiny}, `-plans`},
		{[]string{"validate", "--plans", "extremes=-1", tiny}, `-plans`},
		{[]string{"validate", "--steps", "0", tiny}, `-steps`},
		{[]string{"validate", "--steps", "-1", tiny}, `-steps`},
		{[]string{"validate", "--warmup", "-1", tiny}, `-warmup`},
		{[]string{"validate", "--steps", "abc", tiny}, `-steps`},
		{[]string{"validate", "--warmup", "abc", tiny}, `-warmup`},
		{[]string{"validate", "--instances", "0", tiny}, `-instances`},
		{[]string{"validate", "--instances", "two", tiny}, `-instances`},
		{[]string{"validate", "--markdown", "--json", tiny}, `-markdown|-json`},
		{[]string{"validate", "--markdown=x", tiny}, `-markdown`},
		{[]string{"validate", "--data", "/nonexistent/d.txt", tiny}, `/nonexistent/d.txt`},
		{[]string{"validate", "--profile", "/nonexistent/p.csv", tiny}, `/nonexistent/p.csv`},
		{[]string{"validate", "--cluster", f.noCluster, tiny}, `no-cluster.amsp.*cluster`},
		{[]string{"validate", "--train", f.noTrain, tiny}, `no-train.amsp.*train`},
		{[]string{"validate", f.llama}, `memory`}, // was killed by the kernel after 5 minutes
		// import hf
		{[]string{"import", "hf", "--nodes", "0", f.hf}, `-nodes`},
		{[]string{"import", "hf", "--nodes", "-1", f.hf}, `-nodes`},
		{[]string{"import", "hf", "--nodes", "abc", f.hf}, `-nodes`},
		{[]string{"import", "hf", "--nodes", "99999999999999999999", f.hf}, `-nodes`},
		{[]string{"import", "hf", "--gpus-per-node", "0", f.hf}, `-gpus-per-node`},
		{[]string{"import", "hf", "--gpus-per-node", "-8", f.hf}, `-gpus-per-node`},
		{[]string{"import", "hf", "--seq", "0", f.hf}, `-seq`},
		{[]string{"import", "hf", "--seq", "-1", f.hf}, `-seq`},
		{[]string{"import", "hf", "--seq", "abc", f.hf}, `-seq`},
		{[]string{"import", "hf", "--micro-batch", "0", f.hf}, `-micro-batch`},
		{[]string{"import", "hf", "--micro-batch", "-2", f.hf}, `-micro-batch`},
		{[]string{"import", "hf", "--global-batch", "abc", f.hf}, `-global-batch`},
		{[]string{"import", "hf", "--global-batch", "0", f.hf}, `-global-batch`},
		{[]string{"import", "hf", "--precision", "fp7", f.hf}, `-precision`},
		{[]string{"import", "hf", "--gpu", "nosuchgpu", f.hf}, `-gpu`},
		{[]string{"import", "hf", "--name", "not a name", f.hf}, `-name`},
		{[]string{"import", "hf", "-o", f.dir, f.hf}, regexp.QuoteMeta(f.dir)},
		{[]string{"import", "hf", "--force=x", f.hf}, `-force`},
		{[]string{"import", "hf", "--ckpt", "", f.hf}, `-ckpt`},
		{[]string{"import", "hf", "--ckpt", filepath.Join(f.dir, "ck"), f.hf}, `no model.safetensors`},
		{[]string{"import", "hf", "--overwrite", f.hf}, `-overwrite .*-ckpt`},
		{[]string{"import", "hf", "--overwrite=x", "--ckpt", filepath.Join(f.dir, "ck"), f.hf}, `-overwrite`},
		// ckpt
		{[]string{"ckpt", "info", "/nonexistent/ck"}, `/nonexistent/ck`},
		{[]string{"ckpt", "verify", "/nonexistent/ck"}, `/nonexistent/ck`},
		{[]string{"ckpt", "verify", f.dir}, regexp.QuoteMeta(f.dir)},
		{[]string{"ckpt", "export", f.ckpt}, `-o`},
		{[]string{"ckpt", "export", f.ckpt, "-o", f.dir}, regexp.QuoteMeta(f.dir)},
		{[]string{"ckpt", "export", f.ckpt, "--optimizer=x", "-o", filepath.Join(f.dir, "x.safetensors")}, `-optimizer`},
		{[]string{"ckpt", "export", f.dir, "-o", filepath.Join(f.dir, "x.safetensors")}, regexp.QuoteMeta(f.dir)},
		{[]string{"ckpt", "export", f.ckpt, "--hf", filepath.Join(f.dir, "hf")}, `-hf OUT_DIR takes --config`},
		{[]string{"ckpt", "export", f.ckpt, "--config", f.hf}, `-hf OUT_DIR takes --config`},
		{[]string{"ckpt", "export", f.ckpt, "--hf", filepath.Join(f.dir, "hf"), "--config", "/nonexistent/config.json"}, `/nonexistent/config.json`},
		{[]string{"ckpt", "export", f.ckpt, "--hf", filepath.Join(f.dir, "hf"), "--config", f.hf}, `whose params are not those`},
		{[]string{"ckpt", "import", f.tensors, "-o", filepath.Join(f.dir, "ck")}, `-model`},
		{[]string{"ckpt", "import", f.tensors, "--model", tiny}, `-o`},
		{[]string{"ckpt", "import", f.tensors, "--model", "/nonexistent/m.amsp", "-o", filepath.Join(f.dir, "ck")}, `/nonexistent/m.amsp`},
		{[]string{"ckpt", "import", f.tensors, "--model", tiny, "-o", f.tiny}, `tiny.amsp`},
		{[]string{"ckpt", "import", f.tensors, "--model", tiny, "--overwrite=x", "-o", filepath.Join(f.dir, "ck")}, `-overwrite`},
		{[]string{"ckpt", "import", f.tensors, "--model", f.llama, "-o", filepath.Join(f.dir, "ck")}, `llama|tensor|param`},
		{[]string{"run", "--more", "0", "--resume", f.ckpt, tiny}, `-more`},
		{[]string{"run", "--steps", "1", "--eval-data", "/nonexistent/eval.txt", tiny}, `/nonexistent/eval.txt`},
		{[]string{"run", "--steps", "1", "--eval-data", tiny, "--eval-tokens", "1000", tiny}, `-eval-data and --eval-tokens`},
		{[]string{"run", "--steps", "1", "--eval-tokens", "0", tiny}, `-eval-tokens`},
		{[]string{"run", "--steps", "1", "--eval-tokens", "99999999", tiny}, `eval_tokens 99999999`},
		{[]string{"run", "--steps", "1", "--eval-every", "0", tiny}, `-eval-every`},
		{[]string{"run", "--steps", "1", "--eval-every", "2", tiny}, `-eval-every and --eval-batches need held-out data`},
		{[]string{"run", "--steps", "1", "--eval-batches", "-1", "--eval-tokens", "1000", tiny}, `-eval-batches`},
		{[]string{"run", "--more", "3", tiny}, `-more`},
		{[]string{"run", "--more", "3", "--steps", "4", "--resume", f.ckpt, tiny}, `-more`},
		// tokenize
		{[]string{"tokenize", "--ids", tiny}, `-tokenizer`},
		{[]string{"tokenize", "--tokenizer", gpt2Tokenizer, tiny}, `-o FILE or --ids`},
		{[]string{"tokenize", "--tokenizer", gpt2Tokenizer, "--ids", "-o", filepath.Join(f.dir, "t.tokens"), tiny}, `-o FILE or --ids`},
		{[]string{"tokenize", "--tokenizer", "/nonexistent/tokenizer.json", "--ids", tiny}, `/nonexistent/tokenizer.json`},
		{[]string{"tokenize", "--tokenizer", f.hf, "--ids", tiny}, `model type`},
		{[]string{"tokenize", "--tokenizer", gpt2Tokenizer, "--ids", "/nonexistent/in.txt"}, `/nonexistent/in.txt`},
		{[]string{"tokenize", "--tokenizer", gpt2Tokenizer, "-o", tiny, tiny}, `-o .*is the input`},
		{[]string{"tokenize", "--tokenizer", gpt2Tokenizer, "--ids", "--bos=x", tiny}, `-bos`},
		{[]string{"tokenize", "--tokenizer", gpt2Tokenizer, "--ids", "--eos=x", tiny}, `-eos`},
		{[]string{"run", "--steps", "1", "--tokenizer", "/nonexistent/tokenizer.json", tiny}, `/nonexistent/tokenizer.json`},
		{[]string{"run", "--steps", "1", "--tokenizer", gpt2Tokenizer, tiny}, `50256|vocab`},
		// sample
		{[]string{"sample", f.ckpt, "--prompt", "a"}, `-model`},
		{[]string{"sample", f.ckpt, "--model", "/nonexistent/m.amsp", "--prompt", "a"}, `/nonexistent/m.amsp`},
		{[]string{"sample", f.ckpt, "--model", f.llama, "--prompt", "a"}, `holds model`},
		{[]string{"sample", f.ckpt, "--model", tiny, "--prompt", ""}, `-prompt`},
		{[]string{"sample", f.ckpt, "--model", tiny, "--prompt", "a", "--tokens", "-1"}, `-tokens`},
		{[]string{"sample", f.ckpt, "--model", tiny, "--prompt", "a", "--temperature", "-1"}, `-temperature`},
		{[]string{"sample", f.ckpt, "--model", tiny, "--prompt", "a", "--top-p", "0"}, `-top-p`},
		{[]string{"sample", f.ckpt, "--model", tiny, "--prompt", "a", "--top-p", "1.5"}, `-top-p`},
		{[]string{"sample", f.ckpt, "--model", tiny, "--prompt", "a", "--seed", "-1"}, `-seed`},
		{[]string{"sample", f.ckpt, "--model", tiny, "--prompt", "a", "--tokenizer", "/nonexistent/t.json"}, `/nonexistent/t.json`},
		{[]string{"sample", f.ckpt, "--model", tiny, "--prompt", "a", "--tokenizer", gpt2Tokenizer}, `fewer than`},
		{[]string{"sample", "/nonexistent/ck", "--model", tiny, "--prompt", "a"}, `/nonexistent/ck`},
		// an output that is an input
		{[]string{"report", "-o", tiny, tiny}, `-o .*tiny.amsp is the input`},
		{[]string{"trace", "-o", filepath.Join(plan, BundleName), plan}, `-o .*is the input`},
		{[]string{"profile", "-o", tiny, tiny}, `-o .*is the input`},
		{[]string{"ckpt", "export", f.ckpt, "-o", filepath.Join(f.ckpt, "manifest.json")}, `-o .*is the input`},
		{[]string{"import", "hf", "--force", "-o", f.hf, f.hf}, `-o .*is the input`},
		{[]string{"run", "--steps", "1", "--log", tiny, tiny}, `--log .*is the input`},
		{[]string{"run", "--steps", "2", "--cpuprofile", tiny, tiny}, `--cpuprofile .*is the input`},
		// a string flag given as "" would mean its default
		{[]string{"run", "--steps", "1", "--cpuprofile", "", tiny}, `--cpuprofile ""`},
		{[]string{"run", "--steps", "1", "--log", "", tiny}, `--log ""`},
		{[]string{"plan", "--profile", "", tiny}, `--profile ""`},
		{[]string{"report", "-o", "", tiny}, `-o ""`},
		// the commands without flags
		{[]string{"completion", "fish"}, `fish`},
		{[]string{"grammar", "extra"}, `grammar`},
		{[]string{"version", "extra"}, `version`},
	}
}

// TestCLIBadFlags: every case is refused with exit status 1, the flag or
// path at fault named, and no crash.
func TestCLIBadFlags(t *testing.T) {
	f := makeFixtures(t)
	for _, c := range badFlagCases(f) {
		name := strings.Join(c.args, " ")
		r := exe(t, "", nil, time.Minute, c.args...)
		switch {
		case r.status == -1: // reported by exe
		case crashed(r.stderr):
			t.Errorf("amspc %s: crashed:\n%s", name, r.stderr)
		case r.status != 1:
			t.Errorf("amspc %s: exit %d, want 1\nstderr: %s", name, r.status, r.stderr)
		case !regexp.MustCompile(c.want).MatchString(r.stderr):
			t.Errorf("amspc %s: stderr does not name %s:\n%s", name, c.want, r.stderr)
		}
	}
}

// TestCLIBadFlagsCoverEveryFlag: every flag every command's help lists has
// at least one bad-value case, so a new flag cannot skip the table.
func TestCLIBadFlagsCoverEveryFlag(t *testing.T) {
	covered := map[string]bool{} // "cmd -flag"
	flagRe := regexp.MustCompile(`^--?([a-z][a-z0-9-]*)`)
	for _, c := range badFlagCases(fixtures{}) {
		cmd := c.args[0]
		if cmd == "ckpt" {
			cmd += " " + c.args[1]
		}
		for _, a := range c.args {
			if m := flagRe.FindStringSubmatch(a); m != nil {
				covered[cmd+" -"+m[1]] = true
			}
		}
		covered[cmd] = true
	}
	// Every command and subcommand with its flags, as completion reads
	// them from the help.
	var missing []string
	for _, top := range commands {
		for _, c := range completionCommand(top.name) {
			if c.subs {
				continue // ckpt: its subcommands are checked
			}
			if !covered[c.name] {
				missing = append(missing, c.name+" (no case at all)")
			}
			for _, f := range c.flags {
				if !covered[c.name+" -"+f.name] {
					missing = append(missing, c.name+" -"+f.name)
				}
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("flags without a bad-value case in badFlagCases:\n%s", strings.Join(missing, "\n"))
	}
}

// outputCase is a command line with one output path, OUT, to be replaced.
type outputCase struct {
	args []string
	dir  bool // OUT is a directory amspc writes into
}

func outputCases(f fixtures) []outputCase {
	return []outputCase{
		{args: []string{"report", "-o", "OUT", f.tiny}},
		{args: []string{"trace", "-o", "OUT", f.plan}},
		{args: []string{"profile", "--reps", "1", "--max-bytes", "4096", "-o", "OUT", f.tiny}},
		{args: []string{"run", "--steps", "2", "--log", "OUT", f.tiny}},
		{args: []string{"run", "--steps", "3", "--cpuprofile", "OUT", f.tiny}},
		{args: []string{"run", "--steps", "2", "--trace", "OUT", f.tiny}},
		{args: []string{"ckpt", "export", f.ckpt, "-o", "OUT"}},
		{args: []string{"import", "hf", "-o", "OUT", f.hf}},
		{args: []string{"compile", "-o", "OUT", f.tiny}, dir: true},
		{args: []string{"run", "--steps", "1", "--save", "OUT", f.tiny}, dir: true},
		{args: []string{"ckpt", "import", f.tensors, "--model", f.tiny, "-o", "OUT"}, dir: true},
	}
}

func withOut(args []string, out string) []string {
	a := slices.Clone(args)
	a[slices.Index(a, "OUT")] = out
	return a
}

// TestCLIOutputsToDevices: every output flag pointed at a null device
// writes through it (a directory output is refused), at a full device
// fails naming it; the devices stay devices.
func TestCLIOutputsToDevices(t *testing.T) {
	f := makeFixtures(t)
	null, full := testfs.Devices(t)
	for _, c := range outputCases(f) {
		for _, dev := range []string{null, full} {
			args := withOut(c.args, dev)
			name := strings.Join(args, " ")
			r := exe(t, "", nil, 2*time.Minute, args...)
			wantOK := dev == null && !c.dir
			switch {
			case crashed(r.stderr):
				t.Errorf("amspc %s: crashed:\n%s", name, r.stderr)
			case wantOK && r.status != 0:
				t.Errorf("amspc %s: exit %d, want 0\nstderr: %s", name, r.status, r.stderr)
			case !wantOK && r.status != 1:
				t.Errorf("amspc %s: exit %d, want 1\nstderr: %s", name, r.status, r.stderr)
			case !wantOK && !strings.Contains(r.stderr, dev):
				t.Errorf("amspc %s: stderr does not name %s:\n%s", name, dev, r.stderr)
			}
			testfs.AssertDevice(t, dev)
		}
	}
}

// TestCLIOutputsToFullDisk: every output flag pointed into a full
// filesystem, at a file of the user's, fails naming the path and leaves
// the file as it was, and no temporary file behind.
func TestCLIOutputsToFullDisk(t *testing.T) {
	f := makeFixtures(t)
	// A page's worth, so that not even an append (--log) finds room in
	// the page the file already has.
	old := strings.Repeat("what the user had\n", 4096/18) + strings.Repeat("-", 4096%18)
	cases := outputCases(f)
	full := testfs.Full(t, func(dir string) {
		// Every file output already holds something of the user's.
		for i, c := range cases {
			if !c.dir {
				os.WriteFile(filepath.Join(dir, fmt.Sprintf("out%d", i)), []byte(old), 0o644)
			}
		}
	})
	for i, c := range cases {
		out := filepath.Join(full, fmt.Sprintf("out%d", i))
		args := withOut(c.args, out)
		name := strings.Join(args, " ")
		r := exe(t, "", nil, 2*time.Minute, args...)
		switch {
		case crashed(r.stderr):
			t.Errorf("amspc %s: crashed:\n%s", name, r.stderr)
		case r.status != 1:
			t.Errorf("amspc %s: exit %d, want 1\nstderr: %s", name, r.status, r.stderr)
		case !strings.Contains(r.stderr, out):
			t.Errorf("amspc %s: stderr does not name %s:\n%s", name, out, r.stderr)
		}
		if !c.dir {
			if b, err := os.ReadFile(out); err != nil || string(b) != old {
				t.Errorf("amspc %s: the user's %s changed to %d bytes (%v)", name, out, len(b), err)
			}
		}
	}
	// Nothing but the user's files and what a directory output made
	// before the disk was found full (empty): no temporary files.
	filepath.WalkDir(full, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), ".tmp") {
			t.Errorf("left %s on the full filesystem", p)
		}
		return nil
	})
}

// TestCLIStdoutFull: every command whose output is standard output fails
// with exit 1 when it cannot be written (a full disk), saying so.
func TestCLIStdoutFull(t *testing.T) {
	f := makeFixtures(t)
	_, full := testfs.Devices(t)
	for _, args := range [][]string{
		{"check", f.tiny},
		{"check", "--json", f.tiny},
		{"plan", f.tiny},
		{"plan", "--json", f.tiny},
		{"plan", "--export", "deepspeed", f.tiny},
		{"compile", "-o", filepath.Join(t.TempDir(), "p"), f.tiny},
		{"disasm", f.plan},
		{"grammar"},
		{"completion", "bash"},
		{"version"},
		{"help"},
		{"plan", "-h"},
		{"import", "hf", f.hf},
		{"ckpt", "info", f.ckpt},
		{"ckpt", "verify", f.ckpt},
		{"trace", "-o", "-", f.plan},
		{"report", "-o", "-", f.tiny},
		{"run", "--steps", "2", f.tiny},
	} {
		name := strings.Join(args, " ")
		w, err := os.OpenFile(full, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		r := exe(t, "", w, 2*time.Minute, args...)
		w.Close()
		switch {
		case crashed(r.stderr):
			t.Errorf("amspc %s: crashed:\n%s", name, r.stderr)
		case r.status != 1:
			t.Errorf("amspc %s > full: exit %d, want 1\nstderr: %s", name, r.status, r.stderr)
		case !strings.Contains(r.stderr, "standard output"):
			t.Errorf("amspc %s > full: stderr does not say standard output failed:\n%s", name, r.stderr)
		}
	}
}

// TestRunStopMessageOnce: with stdout and stderr on one terminal or file,
// a run stopped by Ctrl-C says so once, not once a stream.
func TestRunStopMessageOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds amspc and trains until signalled")
	}
	out, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command(amspcBinary(t), "run", "--steps", "500", "../../testdata/models/tiny.amsp")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	read := func() string {
		b, _ := os.ReadFile(out.Name())
		return string(b)
	}
	for deadline := time.Now().Add(time.Minute); !strings.Contains(read(), "step    2/"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no second step within a minute:\n%s", read())
		}
	}
	cmd.Process.Signal(os.Interrupt)
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Errorf("exit %v, want status 130", err)
	}
	if n := strings.Count(read(), "stopped by interrupt after step"); n != 1 {
		t.Errorf("%d stop messages, want 1:\n%s", n, read())
	}
}

// TestRunClosedPipe: `amspc run ... | head` closes standard output early;
// the run is not killed by SIGPIPE: it trains to the end, saves, and
// exits 1 saying standard output broke.
func TestRunClosedPipe(t *testing.T) {
	if testing.Short() {
		t.Skip("builds amspc and trains")
	}
	ck := filepath.Join(t.TempDir(), "ck")
	cmd := exec.Command(amspcBinary(t), "run", "--steps", "4", "--save", ck, "../../testdata/models/tiny.amsp")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close() // the reader is gone before the first line
	cmd.Stdout = w
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err = cmd.Run()
	w.Close()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("exit %v, want status 1\nstderr: %s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "writing standard output") {
		t.Errorf("stderr does not say standard output broke:\n%s", stderr.String())
	}
	if b, err := os.ReadFile(filepath.Join(ck, "manifest.json")); err != nil || !strings.Contains(string(b), `"step": 4`) {
		t.Errorf("no checkpoint after step 4: %v", err)
	}
}
