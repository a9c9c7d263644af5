package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"amspc/importer/hf"
	"amspc/internal/golden"
)

// published are the configs of testdata/hf that import, with the parameter
// count their publishers state. Where the count is a safetensors index's
// total_size, it is halved for 2-byte weights.
var published = []struct {
	config string
	params int64
	source string
}{
	{"Llama-2-7b-hf.json", 6_738_415_616, "Llama 2 paper and model card (7B); exact count in issue 13 and HF's safetensors metadata"},
	{"Mistral-7B-v0.1.json", 7_241_732_096, "model.safetensors.index.json total_size 14,483,464,192 / 2"},
	{"Meta-Llama-3-8B.json", 8_030_261_248, "model.safetensors.index.json total_size 16,060,522,496 / 2"},
	{"Meta-Llama-3.1-8B.json", 8_030_261_248, "Llama 3's shapes (model.safetensors.index.json total_size 16,060,522,496 / 2); rope_scaling changes no param"},
	{"Llama-3.2-1B.json", 1_235_814_400, "HF safetensors metadata of meta-llama/Llama-3.2-1B (1,235,814,400 params, tied embeddings)"},
	{"Qwen2-0.5B.json", 494_032_768, "HF safetensors metadata (494M params), Qwen2 report's 0.49B"},
	{"Qwen2-7B.json", 7_615_616_512, "model.safetensors.index.json total_size 15,231,233,024 / 2"},
	{"TinyLlama-1.1B-Chat-v1.0.json", 1_100_048_384, "HF safetensors metadata (1.1B params)"},
	{"gemma-2b.json", 2_506_172_416, "HF safetensors metadata of google/gemma-2b (2,506,172,416 params)"},
}

// refused are the configs of testdata/hf that must not import, and the
// errors (regexps, one a line, in order) naming each field at fault.
var refused = []struct {
	config string
	args   []string
	want   []string
}{
	{"Mistral-7B-v0.1.json", []string{"--seq", "8192"}, []string{`^Mistral-7B-v0\.1\.json:18:3: sliding_window: 4096 is shorter than the sequence \(seq_len 8192\)`}},
	{"Llama-2-7b-hf.json", []string{"--seq", "8192"}, []string{`^Llama-2-7b-hf\.json:12:3: max_position_embeddings: 4096 is shorter than the sequence asked for \(--seq 8192\)$`}},
	{"gpt2.json", nil, []string{`^gpt2\.json:12:17: model_type: "gpt2" is not supported \(supported: llama, mistral, qwen2, gemma\)$`}},
	{"bad-architecture.json", nil, []string{`^bad-architecture\.json:3:5: architectures: "LlamaForSequenceClassification" is not supported`}},
	{"bad-dropout.json", nil, []string{`^bad-dropout\.json:8:24: attention_dropout: 0\.1 is not supported yet \(the language has no dropout\)$`}},
	{"bad-duplicate.json", nil, []string{`^bad-duplicate\.json:8:3: hidden_size: given twice \(first at 3:3\)$`}},
	{"bad-hidden-act.json", nil, []string{`^bad-hidden-act\.json:3:17: hidden_act: "relu" is not supported yet`}},
	{"bad-kv-heads.json", nil, []string{`^bad-kv-heads\.json:8:26: num_key_value_heads: 5 does not divide num_attention_heads 32$`}},
	{"bad-missing.json", nil, []string{`^bad-missing\.json: num_hidden_layers: missing \(a required field\)$`}},
	{"bad-quantized.json", nil, []string{`^bad-quantized\.json:8:3: quantization_config: unknown field for model_type llama \(refused rather than dropped\)$`}},
	{"bad-qwen2-sliding-window.json", nil, []string{`^bad-qwen2-sliding-window\.json:20:3: sliding_window: 2048 is shorter than the sequence \(seq_len 4096\)`}},
	{"bad-several.json", nil, []string{
		`^bad-several\.json:10:3: rope_scaling: rope_type "linear" is not supported yet`,
		`^bad-several\.json:16:3: rope_interleaved: unknown field for model_type llama`}},
	{"bad-syntax.json", nil, []string{`^bad-syntax\.json:8:3: invalid JSON: invalid character '"' after object key:value pair$`}},
	{"bad-type.json", nil, []string{`^bad-type\.json:3:18: hidden_size: must be an integer, not a string$`}},
}

// TestImportPublished imports each published config and checks the file
// against its golden (testdata/hf/NAME.amsp, rewritten by -update), the
// parameter count `amspc check --json` gives against the published one,
// and that `amspc plan` plans it.
func TestImportPublished(t *testing.T) {
	t.Chdir("../../testdata/hf") // so files print as NAME.json
	for _, p := range published {
		t.Run(p.config, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if st := run([]string{"import", "hf", p.config}, &stdout, &stderr); st != exitOK {
				t.Fatalf("import: status %d: %s", st, stderr.String())
			}
			base := strings.TrimSuffix(p.config, ".json")
			golden.File(t, base+".amsp", stdout.String())

			dir := t.TempDir()
			file := filepath.Join(dir, base+".amsp")
			if err := os.WriteFile(file, stdout.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			stdout.Reset()
			if st := run([]string{"check", "--json", file}, &stdout, &stderr); st != exitOK {
				t.Fatalf("check: status %d: %s", st, stderr.String())
			}
			var sum struct {
				Model struct{ Params int64 }
			}
			if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
				t.Fatal(err)
			}
			if sum.Model.Params != p.params {
				t.Errorf("check --json: %d parameters, published %d (%s)", sum.Model.Params, p.params, p.source)
			}

			// One micro-batch per GPU keeps the plan's simulation short.
			small := filepath.Join(dir, "small.amsp")
			if st := run([]string{"import", "hf", "--global-batch", "8", "-o", small, p.config}, &stdout, &stderr); st != exitOK {
				t.Fatalf("import --global-batch 8: status %d: %s", st, stderr.String())
			}
			stdout.Reset()
			if st := run([]string{"plan", small}, &stdout, &stderr); st != exitOK {
				t.Fatalf("plan: status %d: %s%s", st, stdout.String(), stderr.String())
			}
			if !strings.Contains(stdout.String(), "=> ") {
				t.Errorf("plan chose nothing:\n%s", stdout.String())
			}
		})
	}
}

// TestImportRefused requires each refused config to fail with status 1,
// naming every field at fault with its position, and nothing else.
func TestImportRefused(t *testing.T) {
	t.Chdir("../../testdata/hf")
	for _, r := range refused {
		t.Run(strings.Join(append([]string{r.config}, r.args...), " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			st := run(append(append([]string{"import", "hf"}, r.args...), r.config), &stdout, &stderr)
			if st != exitUser || stdout.Len() > 0 {
				t.Fatalf("status %d, stdout %q; want 1 and nothing", st, stdout.String())
			}
			lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
			if len(lines) != len(r.want) {
				t.Fatalf("%d errors, want %d:\n%s", len(lines), len(r.want), stderr.String())
			}
			for i, w := range r.want {
				if !regexp.MustCompile(w).MatchString(lines[i]) {
					t.Errorf("error %d\n%s\ndoes not match %s", i+1, lines[i], w)
				}
			}
		})
	}
}

// TestImportTestdataListed keeps every config of testdata/hf in one of
// the tables above, and every golden beside a config that imports.
func TestImportTestdataListed(t *testing.T) {
	listed := map[string]bool{}
	for _, p := range published {
		listed[p.config] = true
	}
	for _, r := range refused {
		listed[r.config] = true
	}
	files, _ := filepath.Glob("../../testdata/hf/*")
	for _, f := range files {
		base := filepath.Base(f)
		switch filepath.Ext(base) {
		case ".json":
			if !listed[base] {
				t.Errorf("%s is in neither published nor refused", base)
			}
		case ".amsp":
			if !listed[strings.TrimSuffix(base, ".amsp")+".json"] {
				t.Errorf("%s is the golden of no config", base)
			}
		case "":
			if base != "tiny-llama" { // a model with its weights (import_weights_test.go)
				t.Errorf("%s: testdata/hf's one model directory is tiny-llama", base)
			}
		default:
			t.Errorf("%s: testdata/hf holds configs (.json), goldens (.amsp) and tiny-llama", base)
		}
	}
}

// TestImportOutput writes with -o: the same text as standard output, a
// line saying what was written, and no overwriting without --force.
func TestImportOutput(t *testing.T) {
	t.Chdir("../../testdata/hf")
	cfg := "TinyLlama-1.1B-Chat-v1.0.json"
	var want, stdout, stderr bytes.Buffer
	if st := run([]string{"import", "hf", cfg}, &want, &stderr); st != exitOK {
		t.Fatal(stderr.String())
	}
	out := filepath.Join(t.TempDir(), "tiny.amsp")
	if st := run([]string{"import", "hf", cfg, "-o", out}, &stdout, &stderr); st != exitOK {
		t.Fatal(stderr.String())
	}
	if got, _ := os.ReadFile(out); !bytes.Equal(got, want.Bytes()) {
		t.Errorf("-o wrote other text than standard output")
	}
	if want := "TinyLlama-1.1B-Chat-v1.0.json: wrote " + out + ": model tinyllama_1_1b_chat_v1_0, 1,100,048,384 parameters\n"; stdout.String() != want {
		t.Errorf("stdout %q, want %q", stdout.String(), want)
	}
	stdout.Reset()
	if st := run([]string{"import", "hf", "--name", "other", cfg, "-o", out}, &stdout, &stderr); st != exitUser ||
		!strings.Contains(stderr.String(), "amspc import: "+out+" exists (--force overwrites it)") {
		t.Errorf("second -o: status %d, stderr %q", st, stderr.String())
	}
	if st := run([]string{"import", "hf", "--force", "--name", "other", cfg, "-o", out}, &stdout, &stderr); st != exitOK {
		t.Fatal(stderr.String())
	}
	if got, _ := os.ReadFile(out); !bytes.Contains(got, []byte("model other {")) {
		t.Errorf("--force did not overwrite:\n%s", got)
	}
}

// TestImportFlags: the cluster and train flags land in the file, and bad
// flags or arguments are errors of the command.
func TestImportFlags(t *testing.T) {
	t.Chdir("../../testdata/hf")
	var stdout, stderr bytes.Buffer
	args := []string{"import", "hf", "Qwen2-7B.json", "--nodes", "4", "--gpus-per-node", "4", "--gpu", "A100-80GB",
		"--seq", "2048", "--micro-batch", "2", "--global-batch", "1Mi tokens", "--precision", "fp32", "--name", "q7"}
	if st := run(args, &stdout, &stderr); st != exitOK {
		t.Fatal(stderr.String())
	}
	for _, l := range []string{"model q7 {", "cluster a100_80gb_x16 {", "nodes         = 4", "gpus_per_node = 4", `gpu           = "A100-80GB"`,
		"seq_len      = 2048", "micro_batch  = 2", "global_batch = 512            # 1,048,576 tokens", "precision    = fp32"} {
		if !strings.Contains(stdout.String(), l+"\n") {
			t.Errorf("no line %q in\n%s", l, stdout.String())
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"hf", "Qwen2-7B.json", "--gpu", "V100"}, `amspc import: --gpu "V100" is not a preset`},
		{[]string{"hf", "Qwen2-7B.json", "--global-batch", "7"}, `amspc import: --global-batch "7": 7 sequences do not split into micro-batches of 1 on 8 GPUs`},
		{[]string{"onnx", "model.onnx"}, `amspc import: unknown source "onnx" (known: hf, a Hugging Face config.json)`},
		{[]string{"hf"}, "usage: amspc import hf"},
		{[]string{"hf", "missing.json"}, "amspc import: open missing.json: no such file or directory"},
	} {
		stderr.Reset()
		if st := run(append([]string{"import"}, c.args...), &stdout, &stderr); st != exitUser || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("import %v: status %d, stderr %q; want 1 and %q", c.args, st, stderr.String(), c.want)
		}
	}
}

// TestImportIgnoredDocumented keeps the README's list of the fields the
// import reads past equal to the importer's.
func TestImportIgnoredDocumented(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(readme, []byte("fields that do not change the function trained ("))
	if i < 0 {
		t.Fatal("README has no list of the fields amspc import hf ignores")
	}
	list := string(readme[i:])
	list = list[strings.Index(list, "(")+1 : strings.Index(list, ")")]
	var documented []string
	for _, f := range strings.Split(list, ",") {
		documented = append(documented, strings.Trim(strings.TrimSpace(f), "`"))
	}
	var want []string
	for k := range hf.Ignored {
		want = append(want, k)
	}
	slices.Sort(want)
	if !slices.Equal(documented, want) {
		t.Errorf("README lists %v, the importer ignores %v", documented, want)
	}
}

// TestImportBadValues: every flag value with no meaning (zero, negative,
// empty, not a preset, dropped by another flag) and every config.json
// value out of its range is refused with status 1 and one line naming the
// flag or key and the value, never replaced by a default.
func TestImportBadValues(t *testing.T) {
	dir := t.TempDir()
	base, err := os.ReadFile("../../testdata/hf/TinyLlama-1.1B-Chat-v1.0.json")
	if err != nil {
		t.Fatal(err)
	}
	// edit writes the TinyLlama config with one line replaced.
	edit := func(old, new string) string {
		t.Helper()
		if !bytes.Contains(base, []byte(old)) {
			t.Fatalf("no %q in the config", old)
		}
		name := filepath.Join(dir, strings.NewReplacer(" ", "", `"`, "", ":", "_", ",", "").Replace(new)+".json")
		if err := os.WriteFile(name, bytes.Replace(base, []byte(old), []byte(new), 1), 0o644); err != nil {
			t.Fatal(err)
		}
		return name
	}
	good := "../../testdata/hf/TinyLlama-1.1B-Chat-v1.0.json"
	for _, c := range []struct {
		args []string
		want string // a regexp on the one line of stderr
	}{
		// Flags.
		{[]string{"--nodes", "0", good}, `^amspc import: --nodes 0 is out of range \(1 to 1048576\)$`},
		{[]string{"--nodes", "-8", good}, `^amspc import: --nodes -8 is out of range \(1 to 1048576\)$`},
		{[]string{"--gpus-per-node", "0", good}, `^amspc import: --gpus-per-node 0 is out of range \(1 to 1024\)$`},
		{[]string{"--gpus-per-node", "-1", good}, `^amspc import: --gpus-per-node -1 is out of range \(1 to 1024\)$`},
		{[]string{"--seq", "0", good}, `^amspc import: --seq 0 is out of range \(1 to 16777216\)$`},
		{[]string{"--seq", "-4", good}, `^amspc import: --seq -4 is out of range \(1 to 16777216\)$`},
		{[]string{"--micro-batch", "0", good}, `^amspc import: --micro-batch 0 is out of range \(1 to 1073741824\)$`},
		{[]string{"--micro-batch", "-2", good}, `^amspc import: --micro-batch -2 is out of range \(1 to 1073741824\)$`},
		{[]string{"--global-batch", "12", good}, `^amspc import: --global-batch "12": 12 sequences do not split into micro-batches of 1 on 8 GPUs$`},
		{[]string{"--global-batch", "0", good}, `^amspc import: --global-batch "0": want a number of sequences`},
		{[]string{"--global-batch", "", good}, `^amspc import: --global-batch "": the flag needs a value$`},
		{[]string{"--precision", "fp8", good}, `^amspc import: --precision "fp8": want bf16, fp16 or fp32$`},
		{[]string{"--precision", "", good}, `^amspc import: --precision "": the flag needs a value$`},
		{[]string{"--gpu", "V100", good}, `^amspc import: --gpu "V100" is not a preset \(presets: A100-80GB, `},
		{[]string{"--gpu", "", good}, `^amspc import: --gpu "": the flag needs a value$`},
		{[]string{"--name", "", good}, `^amspc import: --name "": the flag needs a value$`},
		{[]string{"--name", "9lives", good}, `^amspc import: --name "9lives" is not an identifier`},
		{[]string{"--force", good}, `^amspc import: --force overwrites the file of -o, and there is none$`},
		{[]string{"-o", "", good}, `^amspc import: -o "": the flag needs a value$`},
		{[]string{"--seq", "4096", good}, `max_position_embeddings: 2048 is shorter than the sequence asked for \(--seq 4096\)$`},
		// config.json values.
		{[]string{edit(`"hidden_size": 2048,`, `"hidden_size": 0,`)}, `:9:18: hidden_size: 0 is out of range \(1 to `},
		{[]string{edit(`"hidden_size": 2048,`, `"hidden_size": -2048,`)}, `:9:18: hidden_size: -2048 is out of range \(1 to `},
		{[]string{edit(`"num_hidden_layers": 22,`, `"num_hidden_layers": 0,`)}, `:15:24: num_hidden_layers: 0 is out of range \(1 to 10000\)$`},
		{[]string{edit(`"vocab_size": 32000`, `"vocab_size": 0`)}, `vocab_size: 0 is out of range \(1 to `},
		{[]string{edit(`"intermediate_size": 5632,`, `"intermediate_size": -1,`)}, `intermediate_size: -1 is out of range \(1 to `},
		{[]string{edit(`"num_key_value_heads": 4,`, `"num_key_value_heads": 0,`)}, `num_key_value_heads: 0 is out of range \(1 to `},
		{[]string{edit(`"max_position_embeddings": 2048,`, `"max_position_embeddings": 0,`)}, `max_position_embeddings: 0 is out of range \(1 to `},
		{[]string{edit(`"rope_theta": 10000.0,`, `"rope_theta": 0,`)}, `:20:17: rope_theta: 0 is not a positive number$`},
		{[]string{edit(`"rope_theta": 10000.0,`, `"rope_theta": -10000.0,`)}, `rope_theta: -10000.0 is not a positive number$`},
		{[]string{edit(`"rope_theta": 10000.0,`, `"rope_theta": 1e400,`)}, `rope_theta: 1e400 is not a positive number$`},
		{[]string{edit(`"rms_norm_eps": 1e-05,`, `"rms_norm_eps": 0.0,`)}, `:18:19: rms_norm_eps: 0.0 is not a positive number$`},
		{[]string{edit(`"rms_norm_eps": 1e-05,`, `"rms_norm_eps": -1e-05,`)}, `rms_norm_eps: -1e-05 is not a positive number$`},
		{[]string{edit(`"rms_norm_eps": 1e-05,`, `"rms_norm_eps": 1e-400,`)}, `rms_norm_eps: 1e-400 is not a positive number$`},
		{[]string{edit(`"initializer_range": 0.02,`, `"initializer_range": 0,`)}, `initializer_range: 0 is not a positive number$`},
		{[]string{edit(`"rms_norm_eps": 1e-05,`, `"rms_norm_eps": NaN,`)}, `:18:19: invalid JSON: invalid character 'N'`},
		{[]string{edit(`"rope_theta": 10000.0,`, `"rope_theta": "10000",`)}, `rope_theta: must be a number, not a string$`},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append([]string{"import", "hf"}, c.args...)
			st := run(args, &stdout, &stderr)
			lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
			if st != exitUser || stdout.Len() > 0 || len(lines) != 1 || !regexp.MustCompile(c.want).MatchString(lines[0]) {
				t.Errorf("status %d (want 1), %d bytes on stdout\nstderr %q\nwant   %s", st, stdout.Len(), stderr.String(), c.want)
			}
		})
	}
}
