package main

// Issue 26, item 6: small lies in the output, one test each.

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"amspc/cost"
	"amspc/ir"
)

// check's formula, 6*N_mm + 12*L*d*s, adds up to the total it prints,
// also where the head is the embedding table read through transpose.
func TestCheckFlopsFormulaAddsUp(t *testing.T) {
	files := []string{"../../testdata/hf/Qwen2-0.5B.amsp", "../../testdata/variants/tied_embedding.amsp"}
	models, _ := filepath.Glob("../../testdata/models/*.amsp")
	for _, f := range append(files, models...) {
		var stdout, stderr bytes.Buffer
		if st := run([]string{"check", "--json", f}, &stdout, &stderr); st != exitOK {
			t.Fatalf("check %s: status %d: %s", f, st, stderr.String())
		}
		var s checkSummary
		if err := json.Unmarshal(stdout.Bytes(), &s); err != nil {
			t.Fatal(err)
		}
		sum := 6*float64(s.MatMulWeights) + s.AttentionFlopsPerTok
		if math.Abs(sum-s.FlopsPerToken) > 1e-9*s.FlopsPerToken {
			t.Errorf("%s: 6*N_mm + attention = 6*%d + %g = %g, but flops/token says %g", f, s.MatMulWeights, s.AttentionFlopsPerTok, sum, s.FlopsPerToken)
		}
	}
}

// A simulated plan holds gradients at its peak; the table, JSON and the
// report's memory bars used to show 0 for every simulated row.
func TestSimulatedPlansShowGradients(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if st := run([]string{"plan", "--json", "--top", "1", "../../testdata/models/tiny.amsp"}, &stdout, &stderr); st != exitOK {
		t.Fatalf("status %d: %s", st, stderr.String())
	}
	var r planResultJSON
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	for _, e := range append(append(r.Baselines, r.Top...), r.Chosen, r.Fixed) {
		if !e.Simulated {
			t.Errorf("%s: not simulated", e.Name)
			continue
		}
		m := e.Memory
		if m.Grads <= 0 {
			t.Errorf("%s: simulated, %g bytes of gradients", e.Name, m.Grads)
		}
		if m.Activations < 0 || m.Params+m.Grads+m.Optim+m.Activations > m.Total {
			t.Errorf("%s: parts %+v add up to more than the total", e.Name, m)
		}
	}
}

// fastJob is tiny with links so fast that sharding buys nothing: the
// MILP's per-group plan is DDP's factors.
func fastJob(t *testing.T) string {
	b, err := os.ReadFile("../../testdata/models/tiny.amsp")
	if err != nil {
		t.Fatal(err)
	}
	s := regexp.MustCompile(`(?m)^\s*(intra|inter)_node_bw.*$`).ReplaceAllString(string(b), "  ${1}_node_bw = 10000 GB/s")
	s = regexp.MustCompile(`(?m)^shard .*$`).ReplaceAllString(s, "")
	f := filepath.Join(t.TempDir(), "fast.amsp")
	if err := os.WriteFile(f, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// A plan with a baseline's factors is labelled as that baseline, not as
// "AMSP 1x1/1x1/1x1".
func TestBaselineFactorsLabelled(t *testing.T) {
	f := fastJob(t)
	for _, sim := range []string{"--simulate=false", "--simulate=true"} {
		var stdout, stderr bytes.Buffer
		if st := run([]string{"plan", sim, f}, &stdout, &stderr); st != exitOK {
			t.Fatalf("status %d: %s", st, stderr.String())
		}
		out := stdout.String()
		if !strings.Contains(out, "DDP mb=1 ") {
			t.Errorf("%s: no row DDP mb=1:\n%s", sim, out)
		}
		for _, b := range []string{"1x1/1x1/1x1", "1x1/1x1/4x2", "1x1/4x2/4x2", "4x2/4x2/4x2", "4x1/4x1/4x1"} {
			if strings.Contains(out, "AMSP "+b) {
				t.Errorf("%s: a baseline's factors labelled AMSP %s:\n%s", sim, b, out)
			}
		}
	}
}

// --export of a plan the framework cannot run exports the fastest plan
// of the table (as the table ranks it) that the framework can.
func TestExportFastestExpressible(t *testing.T) {
	tiny := "../../testdata/models/tiny.amsp"
	var stdout, stderr bytes.Buffer
	if st := run([]string{"plan", "--json", tiny}, &stdout, &stderr); st != exitOK {
		t.Fatalf("status %d: %s", st, stderr.String())
	}
	var r planResultJSON
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	all := append(append(r.Baselines, r.Top...), r.Chosen)
	dp := ir.Factor{S0: 4, S1: 2}
	for _, fw := range exportTargets {
		var best *estimateJSON
		for _, e := range all {
			f := cost.Factors{P: ir.Factor{S0: e.SP[0], S1: e.SP[1]}, G: ir.Factor{S0: e.SG[0], S1: e.SG[1]}, OS: ir.Factor{S0: e.SOS[0], S1: e.SOS[1]}}
			if e.Secondary != nil {
				f.Secondary = ir.Factor{S0: e.Secondary[0], S1: e.Secondary[1]}
			}
			if _, no := fw.express(e.Name, f, dp, &cost.Estimate{Plan: cost.Plan{MicroBatch: e.MicroBatch}, M: e.MicroBatches}, loadJob(t, tiny), cost.DefaultConfig); no != "" || !e.Feasible || e.Groups != nil {
				continue
			}
			if best == nil || e.Step < best.Step {
				best = e
			}
		}
		if best == nil {
			t.Fatalf("%s: no row it runs", fw.name)
		}
		stdout.Reset()
		stderr.Reset()
		if st := run([]string{"plan", "--export", fw.name, tiny}, &stdout, &stderr); st != exitOK {
			t.Fatalf("%s: status %d: %s", fw.name, st, stderr.String())
		}
		if !strings.Contains(stderr.String(), "exporting "+best.Name+" (") {
			t.Errorf("%s: want the fastest plan it runs, %s (step %g s); stderr:\n%s", fw.name, best.Name, best.Step, stderr.String())
		}
	}
}

func loadJob(t *testing.T, name string) *ir.Job {
	var lf loadFlags
	job, err := lf.load(name)
	if err != nil {
		t.Fatal(err)
	}
	return job
}

// An error in --shard's value points at its column in the value, not 6
// columns on (the "shard " the flag's text is parsed behind).
func TestShardFlagErrorColumn(t *testing.T) {
	for _, c := range []struct{ shard, want string }{
		{"mics(7)", "--shard:1:6: "},
		{"{params=3,grads=3,optim=3}", "--shard:1:9: "},
		{"mics(4", "--shard:1:7: "},
	} {
		var stdout, stderr bytes.Buffer
		st := run([]string{"plan", "--shard", c.shard, "../../testdata/models/tiny.amsp"}, &stdout, &stderr)
		if st != exitUser || !strings.HasPrefix(stderr.String(), c.want) {
			t.Errorf("--shard %s: status %d, stderr %q, want it to start %q", c.shard, st, stderr.String(), c.want)
		}
	}
}

// bashComplete runs the bash completion for words (the last is the one
// being completed) in dir and returns the sorted candidates.
func bashComplete(t *testing.T, script, dir string, words ...string) string {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash is not installed")
	}
	cmd := exec.Command(bash, "-c", `source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _amspc; printf '%s\n' "${COMPREPLY[@]}" | sort | tr '\n' ' '`, "-", script)
	cmd.Args = append(cmd.Args, words...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v: %s", words, err, out)
	}
	return strings.TrimSpace(string(out))
}

// Completion offers ckpt's commands after ckpt and hf after import, not
// directories, and the values of every flag that takes one of a few.
func TestCompletionValues(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if st := run([]string{"completion", "bash"}, &stdout, &stderr); st != exitOK {
		t.Fatal(stderr.String())
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "amspc.bash")
	if err := os.WriteFile(script, stdout.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"ckpts", "hfdir"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		words []string
		want  string
	}{
		{[]string{"amspc", "import", ""}, "hf"},
		{[]string{"amspc", "import", "h"}, "hf"},
		{[]string{"amspc", "import", "hf", "--pre"}, "--precision"},
		{[]string{"amspc", "import", "hf", "--precision", ""}, "bf16 fp16 fp32"},
		{[]string{"amspc", "import", "hf", "--gpu", "H1"}, "H100-80GB"},
		{[]string{"amspc", "import", "hf", "c"}, "ckpts config.json"},
		{[]string{"amspc", "ckpt", "i"}, "import info"},
		{[]string{"amspc", "ckpt", "info", "ck"}, "ckpts"},
		{[]string{"amspc", "ckpt", "export", "--o"}, "--optimizer"},
		{[]string{"amspc", "plan", "--objective", ""}, "paper step"},
		{[]string{"amspc", "plan", "--export", ""}, "deepspeed fsdp megatron torchtitan"},
		{[]string{"amspc", "plan", "--sweep-batch", ""}, "fixed per-gpu"},
		{[]string{"amspc", "report", "--sweep-batch", "f"}, "fixed"},
		{[]string{"amspc", "run", "--device", ""}, "cpu cuda sim"},
		{[]string{"amspc", "profile", "--device", ""}, "cpu cuda"},
		{[]string{"amspc", "run", "--progress", ""}, "auto bar lines"},
		{[]string{"amspc", "validate", "--plans", ""}, "all extremes= rows"},
		{[]string{"amspc", "compile", "-d", ""}, "check"},
		{[]string{"amspc", "compile", "-dump-after", "a"}, "all autodiff"},
		{[]string{"amspc", "completion", ""}, "bash zsh"},
	} {
		if got := bashComplete(t, script, dir, c.words...); got != c.want {
			t.Errorf("%q: %q, want %q", c.words, got, c.want)
		}
	}
	// ckpt's commands, whatever they are now, and nothing else.
	got := strings.Fields(bashComplete(t, script, dir, "amspc", "ckpt", ""))
	for _, w := range got {
		if strings.HasSuffix(w, "/") || strings.Contains(w, ".") {
			t.Errorf("ckpt: offers %q", w)
		}
	}
	if len(got) < 3 {
		t.Errorf("ckpt: %q, want its commands", got)
	}
}
