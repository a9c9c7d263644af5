package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/tools/txtar"

	"amspc/internal/golden"
)

// TestPlanFits120 keeps `amspc plan`, under both objectives, within 120
// columns for every model we ship, with no exponent in any number.
func TestPlanFits120(t *testing.T) {
	models, _ := filepath.Glob("../../testdata/models/*.amsp")
	// The shared examples, where this checkout sits beside them, unless
	// they are copies of ours.
	examples, _ := filepath.Glob("../../../shared/examples/*.amsp")
	for _, e := range examples {
		b, _ := os.ReadFile(e)
		ours, _ := os.ReadFile(filepath.Join("../../testdata/models", filepath.Base(e)))
		if !bytes.Equal(b, ours) {
			models = append(models, e)
		}
	}
	if testing.Short() {
		models = []string{"../../testdata/models/tiny.amsp"}
	}
	exponent := regexp.MustCompile(`[0-9]e[+-][0-9]`)
	for _, m := range models {
		for _, obj := range []string{"step", "paper"} {
			t.Run(filepath.Base(m)+"/"+obj, func(t *testing.T) {
				var stdout, stderr bytes.Buffer
				run([]string{"plan", "--objective", obj, m}, &stdout, &stderr)
				out := stdout.String() + stderr.String()
				for _, l := range strings.Split(out, "\n") {
					if n := utf8.RuneCountInString(l); n > lineWidth {
						t.Errorf("line of %d runes:\n%s", n, l)
					}
					if exponent.MatchString(l) {
						t.Errorf("number with an exponent:\n%s", l)
					}
				}
			})
		}
	}
}

// TestShortBytes pins the byte format where %.3g used to print
// "1.02e+03K".
func TestShortBytes(t *testing.T) {
	for _, c := range []struct {
		b    float64
		want string
	}{{512, "512"}, {1023.9 * 1024, "1.0M"}, {1020 * 1024, "1.0M"}, {900 * 1024, "900.0K"}, {23.3 * (1 << 30), "23.3G"}} {
		if got := shortBytes(c.b); got != c.want {
			t.Errorf("shortBytes(%g) = %q, want %q", c.b, got, c.want)
		}
	}
	for _, c := range []struct {
		s    float64
		want string
	}{{0, "0"}, {9e-3, "9.00 ms"}, {1234, "1234 s"}, {0.99996, "1.00 s"}, {491e-6, "491 µs"}, {99.96, "100 s"}} {
		if got := dur(c.s); got != c.want {
			t.Errorf("dur(%g) = %q, want %q", c.s, got, c.want)
		}
	}
}

// checkSweepJSON requires the fields of `amspc plan --sweep ... --json`:
// one point per size, each planned (a chosen plan and baselines, or no
// plan) or saying why not.
func checkSweepJSON(t *testing.T, out []byte) {
	var obj map[string]any
	if err := json.Unmarshal(out, &obj); err != nil {
		t.Fatalf("--json output is not JSON: %v", err)
	}
	for _, f := range []string{"objective", "sweep", "batch"} {
		if obj[f] == nil {
			t.Errorf("--sweep --json output lacks %s", f)
		}
	}
	points, _ := obj["points"].([]any)
	if len(points) == 0 {
		t.Fatal("--sweep --json output has no points")
	}
	for _, p := range points {
		m, _ := p.(map[string]any)
		for _, f := range []string{"nodes", "gpus", "global_batch", "tokens_per_step", "baselines", "explanation"} {
			if m[f] == nil {
				t.Errorf("point %v lacks %s", m["nodes"], f)
			}
		}
		bs, _ := m["baselines"].([]any)
		if m["error"] == nil && len(bs) == 0 {
			t.Errorf("point %v has neither baselines nor an error", m["nodes"])
		}
	}
}

// TestPlanGoldensFit120 holds every plan and sweep table in the CLI
// goldens to 120 columns, except --wide's and JSON.
func TestPlanGoldensFit120(t *testing.T) {
	files, _ := filepath.Glob("testdata/plan-*.txtar")
	for _, path := range files {
		ar, err := txtar.ParseFile(path)
		if err != nil {
			t.Fatal(err)
		}
		args, _ := golden.Section(ar, "args")
		if strings.Contains(args, "--wide") || strings.Contains(args, "--json") {
			continue
		}
		out, _ := golden.Section(ar, "stdout")
		for _, l := range strings.Split(out, "\n") {
			if n := utf8.RuneCountInString(l); n > lineWidth {
				t.Errorf("%s: line of %d runes:\n%s", path, n, l)
			}
		}
	}
}

// TestPlanTensorShard: with a tensor-parallel shard section, amspc plan
// compiles the baselines and the search's plans each with its own
// tensor parallelism (none for the AMSP candidates and the prior
// systems) and the shard section's plan as it is: its row, named tp2,
// is the simulation of its compiled program, and the choice is no
// slower than it.
func TestPlanTensorShard(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if st := run([]string{"plan", "--shard", "{ tensor = 2, params = 2x2, grads = 2x2, optim = 2x2 }", tinyModel}, &stdout, &stderr); st != exitOK {
		t.Fatalf("status %d: %s", st, stderr.String())
	}
	out := stdout.String()
	if strings.Contains(out, "internal compiler error") || strings.Contains(out, "does not fit") {
		t.Errorf("a row failed to compile:\n%s", out)
	}
	row := regexp.MustCompile(`(?m)^ +shard tp2 .* tp2 2x2/2x2/2x2 +none .* yes$`)
	if !row.MatchString(out) {
		t.Errorf("no simulated row for the tensor-parallel shard section:\n%s", out)
	}
}
