package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"

	"amspc/internal/golden"
)

// TestCLI runs the cases in testdata/*.txtar. Each archive has an `args`
// section (one command line, space-separated), any input files, and the
// expected `stdout`, `stderr` and `status`, regenerated with -update. The
// command runs in a temporary directory holding the archive's files and
// the example models under models/.
func TestCLI(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.txtar")
	if len(files) == 0 {
		t.Fatal("no cases")
	}
	models, _ := filepath.Glob("../../testdata/models/*.amsp")
	for _, path := range files {
		abs, _ := filepath.Abs(path)
		t.Run(filepath.Base(path), func(t *testing.T) {
			ar, err := txtar.ParseFile(abs)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			for _, m := range models {
				copyFile(t, m, filepath.Join(dir, "models", filepath.Base(m)))
			}
			outputs := map[string]bool{"args": true, "stdout": true, "stderr": true, "status": true}
			for _, f := range ar.Files {
				if !outputs[f.Name] {
					writeFile(t, filepath.Join(dir, f.Name), f.Data)
				}
			}
			args, ok := golden.Section(ar, "args")
			if !ok {
				t.Fatal("no args section")
			}
			t.Chdir(dir)
			var stdout, stderr bytes.Buffer
			status := run(strings.Fields(args), &stdout, &stderr)
			if strings.Contains(stdout.String()+stderr.String(), "goroutine ") {
				t.Fatalf("Go panic trace in output:\n%s", stderr.String())
			}
			if strings.Contains(args, "--json") && status == 0 {
				switch {
				case strings.HasPrefix(args, "plan") && strings.Contains(args, "--sweep"):
					checkSweepJSON(t, stdout.Bytes())
				case strings.HasPrefix(args, "plan"):
					checkPlanJSON(t, stdout.Bytes())
				default:
					checkJSON(t, stdout.Bytes())
				}
			}
			golden.Archive(t, abs, ar, map[string]string{
				"stdout": untimed(stdout.String()),
				"stderr": stderr.String(),
				"status": strconv.Itoa(status) + "\n",
			})
		})
	}
}

// untimed blanks the solver's wall-clock time, the one thing in amspc's
// output that varies from run to run.
func untimed(s string) string {
	s = timedText.ReplaceAllString(s, "${1}TIME")
	return timedJSON.ReplaceAllString(s, "${1}0")
}

var (
	timedText = regexp.MustCompile(`(candidates in |bounds\) in |gap [0-9.]+%\) in )[0-9.]+ (s|ms|µs)`)
	timedJSON = regexp.MustCompile(`("solve_time_s": )[0-9.e+-]+`)
)

// checkJSON requires every object printed by --json to parse and to carry
// the fields scripts rely on.
func checkJSON(t *testing.T, out []byte) {
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			t.Fatalf("--json output is not JSON: %v", err)
		}
		for _, path := range []string{"model.name", "model.params", "model.layers", "model.params_per_layer", "flops_per_token"} {
			if lookup(obj, path) == nil {
				t.Errorf("--json output lacks %s", path)
			}
		}
		if obj["cluster"] != nil {
			for _, path := range []string{"cluster.gpus", "cluster.gpu_memory_bytes"} {
				if lookup(obj, path) == nil {
					t.Errorf("--json output lacks %s", path)
				}
			}
		}
		if obj["train"] != nil && lookup(obj, "train.tokens_per_step") == nil {
			t.Errorf("--json output lacks train.tokens_per_step")
		}
	}
}

// checkPlanJSON requires the fields of `amspc plan --json`.
func checkPlanJSON(t *testing.T, out []byte) {
	var obj map[string]any
	if err := json.Unmarshal(out, &obj); err != nil {
		t.Fatalf("--json output is not JSON: %v", err)
	}
	plans := []any{obj["chosen"]}
	bs, _ := obj["baselines"].([]any)
	if len(bs) == 0 {
		t.Error("--json output has no baselines")
	}
	plans = append(plans, bs...)
	for _, p := range plans {
		m, ok := p.(map[string]any)
		if !ok {
			t.Fatalf("plan %v is not an object", p)
		}
		for _, f := range []string{"name", "s_p", "s_g", "s_os", "memory_bytes.params", "memory_bytes.grads",
			"memory_bytes.optim", "memory_bytes.activations", "memory_bytes.buffers", "memory_bytes.total",
			"comm_bytes.intra", "comm_bytes.inter", "comm_time_s", "compute_time_s", "step_time_s",
			"tokens_per_s_per_gpu", "mfu", "feasible"} {
			if lookup(m, f) == nil {
				t.Errorf("plan %v lacks %s", m["name"], f)
			}
		}
	}
	if obj["solve_time_s"] == nil {
		t.Error("--json output lacks solve_time_s")
	}
}

func lookup(obj map[string]any, path string) any {
	var cur any = obj
	for _, k := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	return cur
}

func copyFile(t *testing.T, from, to string) {
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, to, b)
}

func writeFile(t *testing.T, path string, b []byte) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReadmeExample keeps the README's language example a valid job.
func TestReadmeExample(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "## The language in one example")
	if !ok {
		t.Fatal("README has no language example")
	}
	parts := strings.SplitN(rest, "```", 3)
	if len(parts) < 3 {
		t.Fatal("README's language example is not in a code block")
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "example.amsp"), []byte(parts[1]))
	var stdout, stderr bytes.Buffer
	if status := run([]string{"check", filepath.Join(dir, "example.amsp")}, &stdout, &stderr); status != 0 {
		t.Fatalf("README example fails to check:\n%s", stderr.String())
	}
}
