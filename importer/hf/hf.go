// Package hf imports Hugging Face transformers models: it reads a
// config.json (LLaMA 1/2/3, Mistral, Qwen2) and writes the .amsp job that
// trains the same function: the model, plus cluster, train and shard
// sections from options.
//
// In: the config's bytes and Options. Out: .amsp source text, which has
// been lowered by the frontend (its parameter count is in the header), or
// a frontend.ErrorList with config.json:line:col positions. Every field is
// mapped, refused by name (rope_scaling, a short sliding_window, an
// activation the language lacks, Gemma's scaled embeddings, ...) or on
// the Ignored list of fields that do not change the function trained;
// nothing is dropped silently.
package hf

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"amspc/cluster"
	"amspc/cost"
	"amspc/frontend"
	"amspc/ir"
)

// DefaultMaxSeq caps the default sequence length: min(max_position_embeddings,
// DefaultMaxSeq), so a 128K-context model is not planned at 128K by default.
const DefaultMaxSeq = 4096

// defaultBatchTokens is the global batch aimed at when none is given: about
// 4Mi tokens, LLaMA's.
const defaultBatchTokens = 4 << 20

// Options say where the job runs and how it trains. Zero values take the
// defaults of Defaults.
type Options struct {
	Source      string // the config's name in messages and the header
	Output      string // the .amsp's name, for errors in the generated text
	Name        string // the model's identifier; "" derives it (ModelName)
	Nodes       int64
	GPUsPerNode int64
	GPU         string // a cluster preset
	Seq         int64  // 0: min(max_position_embeddings, DefaultMaxSeq)
	MicroBatch  int64
	GlobalBatch string // sequences, or "N tokens" (K, M, Ki, Mi... multipliers); "" is about 4Mi tokens
	Precision   string // bf16, fp16 or fp32
}

// Defaults are the options a flag left unset takes.
var Defaults = Options{Nodes: 1, GPUsPerNode: 8, GPU: "H100-80GB", MicroBatch: 1, Precision: "bf16"}

func (o *Options) fill() {
	if o.Nodes == 0 {
		o.Nodes = Defaults.Nodes
	}
	if o.GPUsPerNode == 0 {
		o.GPUsPerNode = Defaults.GPUsPerNode
	}
	if o.GPU == "" {
		o.GPU = Defaults.GPU
	}
	if o.MicroBatch == 0 {
		o.MicroBatch = Defaults.MicroBatch
	}
	if o.Precision == "" {
		o.Precision = Defaults.Precision
	}
	if o.Source == "" {
		o.Source = "config.json"
	}
}

// OptionError is a bad option (a flag), as opposed to a bad config.
type OptionError struct{ Msg string }

func (e *OptionError) Error() string { return e.Msg }

func optErr(format string, args ...any) error {
	return &OptionError{Msg: fmt.Sprintf(format, args...)}
}

// check validates the options that do not depend on the config.
func (o *Options) check() error {
	switch {
	case o.Nodes < 1 || o.Nodes > 1<<20:
		return optErr("--nodes %d is out of range (1 to %d)", o.Nodes, 1<<20)
	case o.GPUsPerNode < 1 || o.GPUsPerNode > 1<<10:
		return optErr("--gpus-per-node %d is out of range (1 to %d)", o.GPUsPerNode, 1<<10)
	case o.Seq < 0 || o.Seq > 1<<24:
		return optErr("--seq %d is out of range (1 to %d)", o.Seq, 1<<24)
	case o.MicroBatch < 1 || o.MicroBatch > 1<<30:
		return optErr("--micro-batch %d is out of range (1 to %d)", o.MicroBatch, 1<<30)
	}
	if _, ok := cluster.LookupGPU(o.GPU); !ok {
		var names []string
		for _, g := range cluster.GPUPresets {
			names = append(names, g.Name)
		}
		return optErr("--gpu %q is not a preset (presets: %s)", o.GPU, strings.Join(names, ", "))
	}
	if _, ok := ir.ParsePrecision(o.Precision); !ok {
		return optErr("--precision %q: want bf16, fp16 or fp32", o.Precision)
	}
	if o.Name != "" && !ident.MatchString(o.Name) {
		return optErr("--name %q is not an identifier (letters, digits and _, not starting with a digit)", o.Name)
	}
	return nil
}

var ident = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Result is an imported job.
type Result struct {
	Text   []byte // the .amsp file
	Model  string // the model's identifier
	Params int64  // its parameter count, as amspc check counts it
	// Weights maps every param of the job to its tensor in a Hugging
	// Face checkpoint of the model; Tied says the head is the
	// embedding's transpose.
	Weights []Weight
	Tied    bool
}

// Convert imports a config.json. Config errors are a frontend.ErrorList
// (positions in opts.Source); bad options are an *OptionError.
func Convert(config []byte, opts Options) (*Result, error) {
	opts.fill()
	if err := opts.check(); err != nil {
		return nil, err
	}
	src := &source{name: opts.Source, text: config}
	root, err := parseJSON(src)
	if err != nil {
		var at *errAt
		if errors.As(err, &at) {
			return nil, frontend.ErrorList{{Pos: src.pos(at.off), Msg: at.msg}}
		}
		return nil, err
	}
	s, seq, errs := readSpec(src, root, opts.Seq)
	if len(errs) > 0 {
		sortErrors(errs)
		return nil, errs
	}
	name := opts.Name
	if name == "" {
		name = ModelName(root, opts.Source)
	}
	batch, err := globalBatch(opts, seq)
	if err != nil {
		return nil, err
	}
	body := emit(s, name, opts, seq, batch)
	out := opts.Output
	if out == "" {
		out = name + ".amsp"
	}
	job, err := frontend.Load(frontend.Source{Name: out, Text: body})
	if err != nil {
		// Everything the frontend checks was checked above; a config
		// that still fails is reported with the generated text's
		// message, which names the numbers.
		return nil, fmt.Errorf("%s: the imported model does not load: %v", opts.Source, err)
	}
	params := cost.Stats(job.Graph).Params
	text := append(header(s, opts.Source, params), body...)
	return &Result{Text: text, Model: name, Params: params, Weights: weights(s), Tied: s.tied}, nil
}

func sortErrors(errs frontend.ErrorList) {
	sort.SliceStable(errs, func(i, j int) bool {
		a, b := errs[i].Pos, errs[j].Pos
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
}

// ModelName derives the model's identifier: the last part of the config's
// _name_or_path, else its file's name (for config.json, its directory's;
// for a Hugging Face cache snapshot, the repository's), lower case with _
// for anything not a letter or digit.
func ModelName(root *node, path string) string {
	for _, f := range root.fields {
		if f.key == "_name_or_path" && f.val.kind == kindString && f.val.str != "" {
			return sanitize(filepath.Base(filepath.Clean(f.val.str)))
		}
	}
	base := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	if base == "config" {
		dir := filepath.Dir(filepath.Clean(path))
		base = filepath.Base(dir)
		// .../models--org--name/snapshots/<commit>/config.json
		if snap := filepath.Dir(dir); filepath.Base(snap) == "snapshots" {
			repo := filepath.Base(filepath.Dir(snap))
			base = repo[strings.LastIndex(repo, "--")+1:]
			base = strings.TrimPrefix(base, "-")
		}
	}
	return sanitize(base)
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	out := strings.Trim(b.String(), "_")
	for strings.Contains(out, "__") {
		out = strings.ReplaceAll(out, "__", "_")
	}
	if out == "" || out == "." {
		return "imported"
	}
	if out[0] >= '0' && out[0] <= '9' {
		out = "m_" + out
	}
	return out
}

// globalBatch resolves the global batch in sequences, which must split
// into micro-batches on every GPU. The default is the multiple of that
// split nearest to 4Mi tokens.
func globalBatch(o Options, seq int64) (int64, error) {
	unit := o.MicroBatch * o.Nodes * o.GPUsPerNode
	if o.GlobalBatch == "" {
		n := max(1, (defaultBatchTokens/seq+unit/2)/unit) * unit
		return n, nil
	}
	text := strings.TrimSpace(o.GlobalBatch)
	tokens := false
	for _, suffix := range []string{"tokens", "sequences"} {
		if t, ok := strings.CutSuffix(text, suffix); ok {
			text, tokens = strings.TrimSpace(t), suffix == "tokens"
			break
		}
	}
	n, ok := count(text)
	if !ok {
		return 0, optErr("--global-batch %q: want a number of sequences, or N tokens (multipliers K M G Ki Mi Gi)", o.GlobalBatch)
	}
	if tokens {
		if n%seq != 0 {
			return 0, optErr("--global-batch %q: %d tokens are not a whole number of %d-token sequences", o.GlobalBatch, n, seq)
		}
		n /= seq
	}
	if n > 1<<30 || n%unit != 0 {
		return 0, optErr("--global-batch %q: %d sequences do not split into micro-batches of %d on %d GPUs", o.GlobalBatch, n, o.MicroBatch, o.Nodes*o.GPUsPerNode)
	}
	return n, nil
}

// count parses a positive count with an optional multiplier.
func count(s string) (int64, bool) {
	mult := int64(1)
	for _, m := range []struct {
		suffix string
		mult   int64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}} {
		if t, ok := strings.CutSuffix(s, m.suffix); ok {
			s, mult = t, m.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > (1<<54)/mult {
		return 0, false
	}
	return n * mult, true
}
