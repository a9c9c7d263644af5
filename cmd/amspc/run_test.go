package main

import (
	"bufio"
	"bytes"
	"encoding/json"
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
