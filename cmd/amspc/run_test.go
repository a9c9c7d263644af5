package main

import (
	"bufio"
	"bytes"
	"encoding/json"
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
