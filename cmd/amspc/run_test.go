package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunTrains runs the README's main command for three steps: the loss
// is printed every step, the JSON log has one object per step with the
// named fields, and the loss falls.
func TestRunTrains(t *testing.T) {
	log := filepath.Join(t.TempDir(), "log.jsonl")
	var stdout, stderr bytes.Buffer
	if st := run([]string{"run", "../../testdata/models/tiny.amsp", "--steps", "3", "--log", log}, &stdout, &stderr); st != 0 {
		t.Fatalf("status %d: %s", st, stderr.String())
	}
	if n := strings.Count(stdout.String(), "loss "); n != 3 {
		t.Errorf("%d loss lines:\n%s", n, stdout.String())
	}
	if !strings.Contains(stdout.String(), "measured: step") {
		t.Errorf("no measured-vs-predicted summary:\n%s", stdout.String())
	}
	f, err := os.Open(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var losses []float64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var rec struct {
			Step     *int     `json:"step"`
			Loss     *float64 `json:"loss"`
			TokPerS  *float64 `json:"tokens_per_s"`
			StepTime *float64 `json:"step_time_s"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil || rec.Step == nil || rec.Loss == nil || rec.TokPerS == nil || rec.StepTime == nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		losses = append(losses, *rec.Loss)
	}
	if len(losses) != 3 || !(losses[2] < losses[0]) {
		t.Errorf("losses %v: want 3, falling", losses)
	}
}

// losses runs amspc with args plus --log and returns the logged losses.
func losses(t *testing.T, args ...string) []float64 {
	t.Helper()
	log := filepath.Join(t.TempDir(), "log.jsonl")
	var stdout, stderr bytes.Buffer
	if st := run(append(args, "--log", log), &stdout, &stderr); st != 0 {
		t.Fatalf("%v: status %d: %s", args, st, stderr.String())
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	var out []float64
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var rec struct{ Loss float64 }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		out = append(out, rec.Loss)
	}
	return out
}

// TestShardAutoTrainsTheGlobalBatch: the planner may choose another
// micro-batch size than the train section's; run --shard auto and a
// bundle from compile --shard auto still train the whole global batch,
// like one rank does.
func TestShardAutoTrainsTheGlobalBatch(t *testing.T) {
	dir := t.TempDir()
	one := filepath.Join(dir, "one.amsp")
	if err := os.WriteFile(one, []byte(`cluster { nodes = 1 gpus_per_node = 1 gpu = "cpu" }`), 0o644); err != nil {
		t.Fatal(err)
	}
	tiny := "../../testdata/models/tiny.amsp"
	ref := losses(t, "run", "--steps", "3", "--cluster", one, "--shard", "ddp", tiny)
	var stdout, stderr bytes.Buffer
	out := filepath.Join(dir, "auto")
	if st := run([]string{"compile", "--shard", "auto", "-o", out, tiny}, &stdout, &stderr); st != 0 {
		t.Fatalf("compile: status %d: %s", st, stderr.String())
	}
	b, err := readBundle(out)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Train.MicroBatch * int64(b.Micro) * int64(b.Topo.Ranks()); got != b.Train.GlobalBatch || got != 32 {
		t.Errorf("bundle computes %d sequences a step (micro-batch %d x M %d x %d ranks), want the global batch 32",
			got, b.Train.MicroBatch, b.Micro, b.Topo.Ranks())
	}
	for _, c := range []struct {
		name string
		got  []float64
	}{
		{"run --shard auto", losses(t, "run", "--steps", "3", "--shard", "auto", tiny)},
		{"compile --shard auto; run", losses(t, "run", "--steps", "3", out)},
	} {
		name, got := c.name, c.got
		if len(got) != len(ref) {
			t.Fatalf("%s: %d losses, want %d", name, len(got), len(ref))
		}
		for i := range ref {
			if d := math.Abs(got[i]-ref[i]) / ref[i]; d > 1e-5 {
				t.Errorf("%s step %d: loss %.9g, one rank %.9g", name, i+1, got[i], ref[i])
			}
		}
	}
}

// TestRunRefuses: nonsense flags, an unwritable --save, unbounded data
// and a plan that cannot fit in this process are refused before any
// training, with a message that says why.
func TestRunRefuses(t *testing.T) {
	defer func(m int64) { maxData = m }(maxData)
	maxData = 1 << 20
	tiny := "../../testdata/models/tiny.amsp"
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--steps", "-3", tiny}, "--steps -3: want 0 or more"},
		{[]string{"--steps", "0", tiny}, "--steps 0 trains nothing"},
		{[]string{"--save-every", "0", "--save", t.TempDir(), tiny}, "--save-every 0: want 1 or more"},
		{[]string{"--save-every", "2", tiny}, "--save-every needs --save DIR"},
		{[]string{"--save", filepath.Join(file, "sub"), tiny}, "--save: mkdir"},
		{[]string{"--data", "/dev/zero", tiny}, "/dev/zero: more than 1.0 MiB of data"},
		{[]string{"--steps", "1", "../../testdata/models/llama-7b.amsp"}, "the plan needs about"},
	} {
		var stdout, stderr bytes.Buffer
		st := run(append([]string{"run"}, c.args...), &stdout, &stderr)
		if st != exitUser || !strings.Contains(stderr.String(), c.want) || strings.Contains(stdout.String(), "loss") {
			t.Errorf("run %v: status %d, stderr %q, stdout %q; want %q", c.args, st, stderr.String(), stdout.String(), c.want)
		}
	}
}

// TestRunInitialCheckpoint: --steps 0 --save writes the initial weights;
// resuming them trains exactly as a fresh run, periodic checkpoints are
// announced, and resuming a checkpoint that is already at --steps says
// there is nothing to do.
func TestRunInitialCheckpoint(t *testing.T) {
	tiny := "../../testdata/models/tiny.amsp"
	dir, every := t.TempDir(), t.TempDir()
	runOK := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if st := run(append([]string{"run"}, args...), &stdout, &stderr); st != exitOK {
			t.Fatalf("run %v: status %d: %s", args, st, stderr.String())
		}
		return stdout.String()
	}
	if out := runOK("--steps", "0", "--save", dir, tiny); !strings.Contains(out, "saved "+dir+" after step 0") {
		t.Errorf("--steps 0 --save:\n%s", out)
	}
	fresh := printedLosses(runOK("--steps", "2", "--save", every, "--save-every", "1", tiny))
	resumed := printedLosses(runOK("--steps", "2", "--resume", dir, tiny))
	if len(fresh) != 2 || strings.Join(fresh, " ") != strings.Join(resumed, " ") {
		t.Errorf("losses fresh %v, from the initial checkpoint %v", fresh, resumed)
	}
	out := runOK("--steps", "2", "--resume", every, tiny)
	if !strings.Contains(out, "nothing to do: the checkpoint is at step 2") || strings.Contains(out, "rank 0's time") {
		t.Errorf("resume at --steps:\n%s", out)
	}
	// --more N: N steps after the checkpoint's, the same as --steps to
	// its step + N.
	more := printedLosses(runOK("--more", "2", "--resume", every, "--progress", "lines", tiny))
	upTo := printedLosses(runOK("--steps", "4", "--resume", every, "--progress", "lines", tiny))
	if len(more) != 2 || strings.Join(more, " ") != strings.Join(upTo, " ") {
		t.Errorf("losses of --more 2 %v, of --steps 4 %v, after step 2", more, upTo)
	}
	// A fresh run over the step-2 checkpoint: refused without --overwrite
	// (the directory belongs to that run), replaced with it.
	var so, se bytes.Buffer
	if st := run([]string{"run", "--steps", "3", "--save", every, tiny}, &so, &se); st != exitUser || !strings.Contains(se.String(), "--overwrite") {
		t.Errorf("a fresh run saving over step 2: exit %d\n%s", st, se.String())
	}
	out = runOK("--steps", "3", "--save", every, "--save-every", "1", "--overwrite", tiny)
	for _, s := range []string{"after step 1", "after step 2", "after step 3"} {
		if !strings.Contains(out, "saved "+every+" "+s) {
			t.Errorf("no announcement %q:\n%s", s, out)
		}
	}
}

// printedLosses are the losses run prints, one per step line, as printed.
func printedLosses(out string) []string {
	var ls []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 3 && f[0] == "step" {
			ls = append(ls, f[3])
		}
	}
	return ls
}

// TestRunCPUProfile: --cpuprofile writes a pprof file (gzipped protobuf)
// for the steps after the first, and with one step, for that step.
func TestRunCPUProfile(t *testing.T) {
	for _, steps := range []string{"1", "2"} {
		prof := filepath.Join(t.TempDir(), "cpu.prof")
		var stdout, stderr bytes.Buffer
		if st := run([]string{"run", "../../testdata/models/tiny.amsp", "--steps", steps, "--cpuprofile", prof}, &stdout, &stderr); st != 0 {
			t.Fatalf("--steps %s: status %d: %s", steps, st, stderr.String())
		}
		b, err := os.ReadFile(prof)
		if err != nil {
			t.Fatalf("--steps %s: %v", steps, err)
		}
		if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
			t.Errorf("--steps %s: %s is not a gzipped profile (%d bytes)", steps, prof, len(b))
		}
	}
}

// TestRunEvaluates: --eval-tokens holds the data's last tokens out and
// evaluates them after every --eval-every-th step and the last, in the
// output and the log, without changing the training: the losses are
// those of a run on the same tokens that does not evaluate.
func TestRunEvaluates(t *testing.T) {
	tiny := "../../testdata/models/tiny.amsp"
	dir := t.TempDir()
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	const held = 4096
	rest := filepath.Join(dir, "rest.txt")
	if err := os.WriteFile(rest, data[:len(data)-held], 0o644); err != nil {
		t.Fatal(err)
	}
	full := filepath.Join(dir, "all.txt")
	if err := os.WriteFile(full, data, 0o644); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "log.jsonl")
	var stdout, stderr bytes.Buffer
	if st := run([]string{"run", "--steps", "3", "--progress", "lines", "--data", full, "--eval-tokens", fmt.Sprint(held), "--eval-every", "2", "--log", log, tiny}, &stdout, &stderr); st != exitOK {
		t.Fatalf("exit %d\n%s", st, stderr.String())
	}
	out := stdout.String()
	for _, s := range []string{"eval after step 2: loss", "eval after step 3: loss", "less the last 4096 tokens held out"} {
		if !strings.Contains(out, s) {
			t.Errorf("no %q in:\n%s", s, out)
		}
	}
	if strings.Contains(out, "eval after step 1:") {
		t.Errorf("evaluated after step 1:\n%s", out)
	}
	var plain bytes.Buffer
	if st := run([]string{"run", "--steps", "3", "--progress", "lines", "--data", rest, tiny}, &plain, &stderr); st != exitOK {
		t.Fatalf("exit %d\n%s", st, stderr.String())
	}
	if a, b := printedLosses(out), printedLosses(plain.String()); strings.Join(a, " ") != strings.Join(b, " ") || len(a) != 3 {
		t.Errorf("losses %v evaluating, %v on the same tokens without", a, b)
	}
	lb, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(lb), `"eval_loss"`); n != 2 {
		t.Errorf("%d eval_loss records in the log, want 2:\n%s", n, lb)
	}
}
