package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"amspc/engine"
	"amspc/frontend"
	"amspc/infer"
)

// tinyLlama is testdata/hf/tiny-llama: a LLaMA (grouped KV heads, untied
// head) in Hugging Face's names and layout, bf16 weights, and the logits
// and loss PyTorch computes for a text from them (make.py, which writes
// transformers' LlamaForCausalLM forward out).
const tinyLlama = "../../testdata/hf/tiny-llama"

// importTinyLlama imports tiny-llama's job and weights into dir.
func importTinyLlama(t *testing.T, dir string) (job, ckpt string) {
	t.Helper()
	job, ckpt = filepath.Join(dir, "job.amsp"), filepath.Join(dir, "ckpt")
	var stdout, stderr bytes.Buffer
	args := []string{"import", "hf", "--gpu", "cpu", "--gpus-per-node", "1", "--precision", "fp32", "--seq", "64", "--global-batch", "4", "-o", job, "--ckpt", ckpt, tinyLlama}
	if st := run(args, &stdout, &stderr); st != exitOK {
		t.Fatalf("amspc %s: exit %d\n%s", strings.Join(args, " "), st, stderr.String())
	}
	return job, ckpt
}

// TestImportHFLogits: amspc's forward of tiny-llama's imported weights
// gives PyTorch's logits of every position within 1e-5, and its loss.
func TestImportHFLogits(t *testing.T) {
	var ref struct {
		Tokens []int32
		Loss   float64
		Logits [][]float64
	}
	b, err := os.ReadFile(filepath.Join(tinyLlama, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	file, ckpt := importTinyLlama(t, t.TempDir())
	m := loadInfer(t, file, ckpt)
	logits, err := m.NewSession().Feed(ref.Tokens)
	if err != nil {
		t.Fatal(err)
	}
	v := m.Vocab()
	worst := 0.0
	for p, row := range ref.Logits {
		for i, want := range row {
			worst = max(worst, math.Abs(float64(logits[p*v+i])-want)/max(1, math.Abs(want)))
		}
	}
	if worst > 1e-5 {
		t.Errorf("logits differ from PyTorch's by up to %.3g (relative, at least 1 in the denominator)", worst)
	}
	var loss float64
	for p := range len(ref.Tokens) - 1 {
		row := logits[p*v : (p+1)*v]
		mx := slices.Max(row)
		var sum float64
		for _, x := range row {
			sum += math.Exp(float64(x - mx))
		}
		loss += math.Log(sum) + float64(mx) - float64(row[ref.Tokens[p+1]])
	}
	loss /= float64(len(ref.Tokens) - 1)
	if math.Abs(loss-ref.Loss) > 1e-5*ref.Loss {
		t.Errorf("loss %.8g, PyTorch's %.8g", loss, ref.Loss)
	}
}

func loadInfer(t *testing.T, file, ckpt string) *infer.Model {
	t.Helper()
	text, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	job, err := frontend.Load(frontend.Source{Name: file, Text: text})
	if err != nil {
		t.Fatal(err)
	}
	w, err := engine.OpenWeights(ckpt)
	if err != nil {
		t.Fatal(err)
	}
	m, err := infer.New(job.Graph, w.Param)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestExportHFRoundTrips: a checkpoint exported in Hugging Face's names
// and layout and imported again holds the same params, bit for bit; the
// export writes the config beside the weights; and a model whose params
// are not the config's is refused.
func TestExportHFRoundTrips(t *testing.T) {
	dir := t.TempDir()
	_, ckpt := importTinyLlama(t, dir)
	out := filepath.Join(dir, "hf")
	var stdout, stderr bytes.Buffer
	if st := run([]string{"ckpt", "export", ckpt, "--hf", out, "--config", tinyLlama}, &stdout, &stderr); st != exitOK {
		t.Fatalf("ckpt export --hf: exit %d\n%s", st, stderr.String())
	}
	for _, f := range []string{"config.json", "model.safetensors"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("the export has no %s: %v", f, err)
		}
	}
	again := filepath.Join(dir, "again")
	args := []string{"import", "hf", "--gpu", "cpu", "--gpus-per-node", "1", "--precision", "fp32", "--seq", "64", "--global-batch", "4", "-o", filepath.Join(dir, "job2.amsp"), "--ckpt", again, out}
	if st := run(args, &stdout, &stderr); st != exitOK {
		t.Fatalf("import of the export: exit %d\n%s", st, stderr.String())
	}
	a, err := engine.OpenWeights(ckpt)
	if err != nil {
		t.Fatal(err)
	}
	b, err := engine.OpenWeights(again)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Manifest.Tensors) != len(b.Manifest.Tensors) || len(a.Manifest.Tensors) == 0 {
		t.Fatalf("%d tensors imported, %d after the round trip", len(a.Manifest.Tensors), len(b.Manifest.Tensors))
	}
	for _, tn := range a.Manifest.Tensors {
		x, err := a.Param(tn.Name)
		if err != nil {
			t.Fatal(err)
		}
		y, err := b.Param(tn.Name)
		if err != nil {
			t.Fatal(err)
		}
		for i := range x {
			if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
				t.Fatalf("%s element %d: %v imported, %v after export and import", tn.Name, i, x[i], y[i])
			}
		}
	}

	stderr.Reset()
	if st := run([]string{"ckpt", "export", ckpt, "--hf", filepath.Join(dir, "bad"), "--config", "../../testdata/hf/Qwen2-0.5B.json"}, &stdout, &stderr); st != exitUser ||
		!strings.Contains(stderr.String(), "whose params are not those") {
		t.Errorf("export under another model's config: exit %d, %q", st, stderr.String())
	}
}
