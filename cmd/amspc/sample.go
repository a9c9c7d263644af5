package main

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sort"

	"amspc/engine"
	"amspc/infer"
)

const sampleUsage = "usage: amspc sample CKPT --model MODEL.amsp --prompt TEXT [--tokenizer tokenizer.json] [--tokens N] [--temperature T] [--top-p P] [--seed S]"

// runSample generates text from a checkpoint on the CPU: the prompt's
// tokens through the model once, then a token at a time with a KV cache
// (package infer), each drawn from the softmax of the logits over the
// temperature, cut to the smallest set of tokens whose probability
// reaches top-p. A seed makes it deterministic; temperature 0 takes the
// most likely token every time.
func runSample(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("sample", sampleUsage, stderr)
	model := fs.String("model", "", "the `MODEL.amsp` file whose params CKPT holds")
	prompt := fs.String("prompt", "", "the `TEXT` to continue")
	tokens := fs.Int("tokens", 200, "generate `N` tokens")
	temperature := fs.Float64("temperature", 0.8, "divide the logits by `T` before the softmax; 0 takes the most likely token")
	topP := fs.Float64("top-p", 0.95, "draw from the most likely tokens whose probabilities add up to `P` (nucleus sampling); 1 draws from all")
	seed := fs.Uint64("seed", 1, "the random draws' seed `S`: the same seed, checkpoint and flags give the same text")
	tokFile := fs.String("tokenizer", "", "encode the prompt and decode the text with the Hugging Face `tokenizer.json` (default: bytes, for a model of 256 tokens)")
	dir, ok := oneFile(fs, args)
	if !ok {
		return exitUser
	}
	switch {
	case *model == "":
		fmt.Fprintln(stderr, "amspc sample: --model MODEL.amsp is required")
		return exitUser
	case *tokens < 0 || *tokens > 1<<20:
		fmt.Fprintf(stderr, "amspc sample: --tokens %d is out of range (0 to %d)\n", *tokens, 1<<20)
		return exitUser
	case *temperature < 0 || math.IsNaN(*temperature) || math.IsInf(*temperature, 0):
		fmt.Fprintf(stderr, "amspc sample: --temperature %v: want 0 or more\n", *temperature)
		return exitUser
	case !(*topP > 0 && *topP <= 1):
		fmt.Fprintf(stderr, "amspc sample: --top-p %v: want more than 0 and at most 1\n", *topP)
		return exitUser
	}
	var lf loadFlags
	job, err := lf.load(*model)
	if err != nil {
		return report(stderr, err)
	}
	w, err := engine.OpenWeights(dir)
	if err != nil {
		fmt.Fprintf(stderr, "amspc sample: %v\n", err)
		return exitUser
	}
	if id := engine.NewModelID(job.Graph.Name, paramShapes(job)); w.Manifest.ModelHash != id.Hash {
		fmt.Fprintf(stderr, "amspc sample: %s holds model %s, not %s's %s (other params or sizes)\n", dir, w.Manifest.Model, *model, job.Graph.Name)
		return exitUser
	}
	m, err := infer.New(job.Graph, w.Param)
	if err != nil {
		fmt.Fprintf(stderr, "amspc sample: %v\n", err)
		return exitUser
	}
	encode, decode, err := sampleText(*tokFile, m.Vocab())
	if err != nil {
		fmt.Fprintf(stderr, "amspc sample: model %s: %v\n", job.Graph.Name, err)
		return exitUser
	}
	ids := encode(*prompt)
	if len(ids) == 0 {
		fmt.Fprintln(stderr, "amspc sample: --prompt is empty; give the model a text to continue")
		return exitUser
	}
	out, err := generate(m, ids, *tokens, *temperature, *topP, *seed)
	if err != nil {
		fmt.Fprintf(stderr, "amspc sample: %v\n", err)
		return exitUser
	}
	fmt.Fprintf(stdout, "%s\n", decode(append(ids, out...)))
	if len(ids)+len(out) > m.MaxSeq() {
		fmt.Fprintf(stderr, "(model %s trained on %d positions; this text has %d, and past them the model is outside what it learned)\n", job.Graph.Name, m.MaxSeq(), len(ids)+len(out))
	}
	return exitOK
}

// sampleText is how sample turns text into a model's ids and back:
// with a tokenizer.json, or as bytes for a model of 256 tokens.
func sampleText(path string, vocab int) (func(string) []int32, func([]int32) string, error) {
	if path == "" {
		if vocab != 256 {
			return nil, nil, fmt.Errorf("%d tokens: give its --tokenizer (without one prompts are bytes, for models of 256)", vocab)
		}
		enc := func(s string) []int32 { return bytesToTokens([]byte(s)) }
		dec := func(ids []int32) string {
			b := make([]byte, len(ids))
			for i, id := range ids {
				b[i] = byte(id)
			}
			return string(b)
		}
		return enc, dec, nil
	}
	tk, err := loadTokenizer(path)
	if err != nil {
		return nil, nil, err
	}
	if tk.VocabSize() > vocab {
		return nil, nil, fmt.Errorf("%d tokens, fewer than %s's %d", vocab, path, tk.VocabSize())
	}
	return tk.Encode, tk.Decode, nil
}

// generate draws n tokens after prompt.
func generate(m *infer.Model, prompt []int32, n int, temperature, topP float64, seed uint64) ([]int32, error) {
	s := m.NewSession()
	rng := rand.New(rand.NewPCG(seed, 0x616d737063)) // "amspc"
	logits, err := s.Feed(prompt)
	if err != nil {
		return nil, err
	}
	last := logits[len(logits)-m.Vocab():]
	var out []int32
	for range n {
		t := draw(last, temperature, topP, rng)
		out = append(out, t)
		if last, err = s.Feed([]int32{t}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// draw picks a token from one position's logits: the most likely at
// temperature 0 (the lowest id among equals), else from the softmax over
// the temperature, cut to the most likely tokens whose probabilities
// reach topP (ties in id order, so the cut is deterministic).
func draw(logits []float32, temperature, topP float64, rng *rand.Rand) int32 {
	best := 0
	for i, x := range logits {
		if x > logits[best] {
			best = i
		}
	}
	if temperature == 0 {
		return int32(best)
	}
	p := make([]float64, len(logits))
	var sum float64
	for i, x := range logits {
		p[i] = math.Exp((float64(x) - float64(logits[best])) / temperature)
		sum += p[i]
	}
	order := make([]int, len(p))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return p[order[a]] > p[order[b]] })
	var kept float64
	cut := len(order)
	for i, id := range order {
		kept += p[id] / sum
		if kept >= topP {
			cut = i + 1
			break
		}
	}
	var mass float64
	for _, id := range order[:cut] {
		mass += p[id]
	}
	u := rng.Float64() * mass
	for _, id := range order[:cut] {
		if u -= p[id]; u < 0 {
			return int32(id)
		}
	}
	return int32(order[cut-1])
}
