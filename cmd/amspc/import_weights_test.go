package main

import (
	"bytes"
	"encoding/json"
	"fmt"
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
	for _, f := range []string{"config.json", "model.safetensors", "tokenizer.json"} {
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

// TestClipFindsPyTorchsNorm: the gradient norm amspc's clip_grad_norm
// computes (and logs) for a stream of tiny-llama's reference text's
// first tokens repeated is the one torch.nn.utils.clip_grad_norm_
// returns for its window (make.py), on one rank and on 2 x 2 ranks
// under ZeRO-3 (where every rank holds a quarter of each gradient, and
// every rank's window is that one).
func TestClipFindsPyTorchsNorm(t *testing.T) {
	var ref struct {
		Tokens   []int32
		GradSeq  int     `json:"grad_seq"`
		GradNorm float64 `json:"grad_norm"`
	}
	b, err := os.ReadFile(filepath.Join(tinyLlama, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file, ckpt := importTinyLlama(t, dir)
	text := make([]byte, len(ref.Tokens))
	for i, id := range ref.Tokens {
		text[i] = byte(id)
	}
	data := filepath.Join(dir, "text.txt")
	if err := os.WriteFile(data, text, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ cluster, shard, batch string }{
		{"nodes = 1 gpus_per_node = 1", "ddp", "1"},
		{"nodes = 2 gpus_per_node = 2", "zero3", "4"},
	} {
		tr := filepath.Join(dir, "train.amsp")
		section := fmt.Sprintf("train { seq_len = %d micro_batch = 1 global_batch = %s precision = fp32\n  optimizer = adamw(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1)\n  clip_grad_norm = 1 }\ncluster c { %s gpu = \"cpu\" }\n",
			ref.GradSeq, c.batch, c.cluster)
		if err := os.WriteFile(tr, []byte(section), 0o644); err != nil {
			t.Fatal(err)
		}
		one := filepath.Join(dir, "one.txt")
		if err := os.WriteFile(one, []byte(strings.Repeat(string(text[:ref.GradSeq]), 8)+string(text[0])), 0o644); err != nil {
			t.Fatal(err)
		}
		log := filepath.Join(dir, c.shard+".jsonl")
		var stdout, stderr bytes.Buffer
		args := []string{"run", "--resume", ckpt, "--steps", "1", "--train", tr, "--cluster", tr, "--shard", c.shard, "--data", one, "--log", log, "--progress", "lines", file}
		if st := run(args, &stdout, &stderr); st != exitOK {
			t.Fatalf("amspc %s: exit %d\n%s", strings.Join(args, " "), st, stderr.String())
		}
		lb, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		var rec struct {
			GradNorm *float64 `json:"grad_norm"`
		}
		if err := json.Unmarshal(lb, &rec); err != nil || rec.GradNorm == nil {
			t.Fatalf("%s: log %q has no grad_norm (%v)", c.shard, lb, err)
		}
		if d := math.Abs(*rec.GradNorm-ref.GradNorm) / ref.GradNorm; d > 1e-5 {
			t.Errorf("%s: gradient norm %.9g, PyTorch's %.9g", c.shard, *rec.GradNorm, ref.GradNorm)
		}
	}
}
