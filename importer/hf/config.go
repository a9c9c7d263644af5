package hf

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"amspc/frontend"
	"amspc/ir"
)

// A family is a Hugging Face model_type the importer reads: its class and
// the defaults transformers' config class gives an absent field.
type family struct {
	modelType string
	class     string // the architectures entry of a causal LM
	maxPos    int64  // max_position_embeddings
	tied      bool   // tie_word_embeddings
	act       string // hidden_act
	headDim   bool   // reads head_dim
	biasFlags bool   // reads attention_bias and mlp_bias (LLaMA)
	qkvBias   bool   // q, k and v projections always have biases (Qwen2)
	window    bool   // reads sliding_window
	qwenSWA   bool   // reads use_sliding_window, max_window_layers, layer_types
	gemma     bool   // Gemma's embedding scale and tanh GELU
}

// families are the model types the importer knows, in the order messages
// list them. Defaults are transformers' LlamaConfig, MistralConfig,
// Qwen2Config and GemmaConfig.
var families = []family{
	{modelType: "llama", class: "LlamaForCausalLM", maxPos: 2048, act: "silu", headDim: true, biasFlags: true},
	{modelType: "mistral", class: "MistralForCausalLM", maxPos: 4096 * 32, act: "silu", headDim: true, window: true},
	{modelType: "qwen2", class: "Qwen2ForCausalLM", maxPos: 32768, act: "silu", qkvBias: true, window: true, qwenSWA: true},
	{modelType: "gemma", class: "GemmaForCausalLM", maxPos: 8192, tied: true, act: "gelu_pytorch_tanh", headDim: true, gemma: true},
}

// Ignored are the fields that only matter to inference, tokenization or
// serialisation: they do not change the function trained, so the import
// reads past them (and lists them in the file's header). Any field neither
// here nor read for the model type is refused by name.
var Ignored = map[string]string{
	"_name_or_path":        "the checkpoint's name (used for the model's name)",
	"bos_token_id":         "tokenization",
	"eos_token_id":         "tokenization",
	"pad_token_id":         "tokenization",
	"tokenizer_class":      "tokenization",
	"torch_dtype":          "the checkpoint's storage type (the train section's precision decides)",
	"dtype":                "the checkpoint's storage type (the train section's precision decides)",
	"transformers_version": "serialisation",
	"use_cache":            "inference (the KV cache)",
	"output_attentions":    "inference outputs",
	"output_hidden_states": "inference outputs",
	"return_dict":          "inference outputs",
	"pretraining_tp":       "how the original run split its matmuls; the same function",
}

// spec is the model a config describes, in the language's terms.
type spec struct {
	fam                          *family
	vocab, d, layers, heads, ffn int64
	kvHeads, headDim             int64
	eps, theta, initStd          float64
	rope                         ropeScale // Llama 3's scaling; factor 0: none
	tied                         bool
	act                          string  // silu, gelu or gelu_tanh
	embedScale                   float64 // multiplies the embeddings (Gemma's sqrt(hidden_size)); 0: none
	qkvBias, oBias, mlpBias      bool
	maxPos, window               int64 // window 0: none
	maxPosOff                    int   // where max_position_embeddings is, -1 when absent
	ignored                      []string
}

// limits on what the importer writes: dims the frontend can lower.
const maxDim = 1 << 31

// reader reads a config's fields, remembering which it read so that the
// rest can be refused by name, and collects the errors.
type reader struct {
	src   *source
	byKey map[string]*field
	order []*field
	used  map[string]bool
	errs  frontend.ErrorList
}

func newReader(src *source, obj *node) *reader {
	r := &reader{src: src, byKey: map[string]*field{}, used: map[string]bool{}}
	for i := range obj.fields {
		f := &obj.fields[i]
		r.byKey[f.key] = f
		r.order = append(r.order, f)
	}
	return r
}

func (r *reader) errorf(off int, format string, args ...any) {
	r.errs = append(r.errs, &frontend.Error{Pos: r.src.pos(off), Msg: fmt.Sprintf(format, args...)})
}

// get returns a field that is present and not null, marking it read.
func (r *reader) get(key string) *field {
	f, ok := r.byKey[key]
	if !ok {
		return nil
	}
	r.used[key] = true
	if f.val.kind == kindNull {
		return nil
	}
	return f
}

func (r *reader) want(f *field, kind nodeKind) bool {
	if f.val.kind != kind {
		r.errorf(f.val.off, "%s: must be %s, not %s", f.key, kind, f.val.kind)
		return false
	}
	return true
}

// integer reads a positive integer field of at most max; absent or null
// gives def, or an error when def is 0 (the field is required).
func (r *reader) integer(key string, def, max int64) (int64, bool) {
	f := r.get(key)
	if f == nil {
		if def == 0 {
			r.errs = append(r.errs, &frontend.Error{Pos: ir.Pos{File: r.src.name}, Msg: key + ": missing (a required field)"})
			return 0, false
		}
		return def, true
	}
	n, err := f.val.num.Int64()
	if f.val.kind != kindNumber || err != nil {
		what := f.val.kind.String()
		if f.val.kind == kindNumber {
			what = f.val.num.String()
		}
		r.errorf(f.val.off, "%s: must be an integer, not %s", f.key, what)
		return 0, false
	}
	if n <= 0 || n > max {
		r.errorf(f.val.off, "%s: %d is out of range (1 to %d)", f.key, n, max)
		return 0, false
	}
	return n, true
}

// positive reads a positive finite number.
func (r *reader) positive(key string, def float64) (float64, *field) {
	f := r.get(key)
	if f == nil || !r.want(f, kindNumber) {
		return def, f
	}
	v, err := f.val.num.Float64()
	if err != nil || !(v > 0) || math.IsInf(v, 0) {
		r.errorf(f.val.off, "%s: %s is not a positive number", f.key, f.val.num)
		return def, f
	}
	return v, f
}

func (r *reader) boolean(key string, def bool) (bool, *field) {
	f := r.get(key)
	if f == nil || !r.want(f, kindBool) {
		return def, f
	}
	return f.val.b, f
}

func (r *reader) str(key string, def string) (string, *field) {
	f := r.get(key)
	if f == nil || !r.want(f, kindString) {
		return def, f
	}
	return f.val.str, f
}

// readSpec reads a config into a spec, refusing what the language cannot
// express. seq is the sequence length asked for (0: the default, from
// max_position_embeddings); it decides whether a sliding window matters.
func readSpec(src *source, obj *node, seq int64) (*spec, int64, frontend.ErrorList) {
	r := newReader(src, obj)
	mt, mtField := r.str("model_type", "")
	var fam *family
	for i := range families {
		if families[i].modelType == mt {
			fam = &families[i]
		}
	}
	switch {
	case mtField == nil && len(r.errs) == 0:
		r.errs = append(r.errs, &frontend.Error{Pos: ir.Pos{File: src.name}, Msg: "model_type: missing (supported: " + supported() + ")"})
	case fam == nil && mtField != nil && mtField.val.kind == kindString:
		r.errorf(mtField.val.off, "model_type: %q is not supported (supported: %s)", mt, supported())
	}
	if fam == nil {
		return nil, 0, r.errs
	}
	s := &spec{fam: fam, maxPosOff: -1}
	r.architectures(fam)

	s.vocab, _ = r.integer("vocab_size", 0, maxDim)
	s.ffn, _ = r.integer("intermediate_size", 0, maxDim)
	s.layers, _ = r.integer("num_hidden_layers", 0, frontend.MaxLayers)
	var dOK, headsOK, kvOK bool
	s.d, dOK = r.integer("hidden_size", 0, maxDim)
	s.heads, headsOK = r.integer("num_attention_heads", 0, maxDim)
	s.kvHeads, kvOK = r.integer("num_key_value_heads", max(s.heads, 1), maxDim)
	if headsOK && kvOK && s.heads%s.kvHeads != 0 {
		f := r.byKey["num_key_value_heads"]
		r.errorf(f.val.off, "num_key_value_heads: %d does not divide num_attention_heads %d", s.kvHeads, s.heads)
	}
	r.headDim(s, dOK && headsOK)

	s.eps, _ = r.positive("rms_norm_eps", 1e-6)
	s.theta, _ = r.positive("rope_theta", 10000)
	s.initStd, _ = r.positive("initializer_range", 0.02)
	s.tied, _ = r.boolean("tie_word_embeddings", fam.tied)
	s.maxPos, _ = r.integer("max_position_embeddings", fam.maxPos, maxDim)
	if f := r.byKey["max_position_embeddings"]; f != nil && f.val.kind == kindNumber {
		s.maxPosOff = f.keyOff
	}
	if seq == 0 {
		seq = min(s.maxPos, DefaultMaxSeq)
	} else if seq > s.maxPos && s.maxPosOff >= 0 {
		r.errorf(s.maxPosOff, "max_position_embeddings: %d is shorter than the sequence asked for (--seq %d)", s.maxPos, seq)
	}

	r.activation(s)
	s.rope = r.ropeScaling()
	r.dropout()
	s.qkvBias = fam.qkvBias
	if fam.biasFlags {
		// LLaMA's attention_bias is on all four projections.
		s.qkvBias, _ = r.boolean("attention_bias", false)
		s.oBias = s.qkvBias
		s.mlpBias, _ = r.boolean("mlp_bias", false)
	}
	if fam.window {
		r.slidingWindow(s, seq)
	}
	if fam.gemma {
		r.gemma(s)
	}

	// What is left is refused by name, unless it is on the allow-list of
	// fields that do not change the function trained.
	for _, f := range r.order {
		if r.used[f.key] {
			continue
		}
		if _, ok := Ignored[f.key]; ok {
			s.ignored = append(s.ignored, f.key)
			continue
		}
		r.errorf(f.keyOff, "%s: unknown field for model_type %s (refused rather than dropped)", f.key, fam.modelType)
	}
	sort.Strings(s.ignored)
	return s, seq, r.errs
}

func supported() string {
	var names []string
	for _, f := range families {
		names = append(names, f.modelType)
	}
	return strings.Join(names, ", ")
}

// architectures checks that the config is a causal LM: another head (a
// classifier, ...) trains another function.
func (r *reader) architectures(fam *family) {
	f := r.get("architectures")
	if f == nil || !r.want(f, kindArray) {
		return
	}
	for _, e := range f.val.elems {
		if e.kind != kindString || e.str != fam.class {
			what := e.kind.String()
			if e.kind == kindString {
				what = fmt.Sprintf("%q", e.str)
			}
			r.errorf(e.off, "architectures: %s is not supported (model_type %s imports as %s)", what, fam.modelType, fam.class)
		}
	}
}

// headDim reads head_dim where the family has it: the width of one head
// when it is not hidden_size / num_attention_heads.
func (r *reader) headDim(s *spec, sizesOK bool) {
	if s.fam.headDim {
		if hd, ok := r.integer("head_dim", -1, maxDim); ok && hd > 0 {
			s.headDim = hd
		}
	}
	switch {
	case s.headDim > 0:
	case !sizesOK:
		return
	case s.d%s.heads != 0:
		f := r.byKey["num_attention_heads"]
		r.errorf(f.val.off, "num_attention_heads: %d does not divide hidden_size %d (and there is no head_dim)", s.heads, s.d)
		return
	default:
		s.headDim = s.d / s.heads
	}
	if s.headDim%2 != 0 {
		// Point at head_dim, or at the heads it was derived from.
		f := r.byKey["head_dim"]
		if f == nil || f.val.kind == kindNull {
			f = r.byKey["num_attention_heads"]
		}
		r.errorf(f.val.off, "head_dim: %d is odd, and rope rotates pairs of a head's dimensions", s.headDim)
	}
}

// activation reads hidden_act: the language has SiLU, the exact (erf)
// GELU, which is what transformers' "gelu" is, and GELU's tanh
// approximation, which transformers spells three ways.
func (r *reader) activation(s *spec) {
	act, f := r.str("hidden_act", s.fam.act)
	if s.fam.gemma {
		return // Gemma reads hidden_activation instead (gemma)
	}
	switch act {
	case "silu", "swish":
		s.act = "silu"
	case "gelu":
		s.act = "gelu"
	case "gelu_pytorch_tanh", "gelu_new", "gelu_fast":
		s.act = "gelu_tanh"
	default:
		if f != nil && f.val.kind == kindString {
			r.errorf(f.val.off, "hidden_act: %q is not supported yet (the language has silu, gelu and gelu_tanh)", act)
		}
	}
}

// ropeScale is rope_scaling of rope_type "llama3": rope's
// scaling_factor, low_freq_factor, high_freq_factor and
// original_max_positions.
type ropeScale struct {
	factor, low, high float64
	original          int64
}

// ropeScaling reads rope_scaling: none (null, or rope_type "default"),
// or Llama 3's (rope_type "llama3", as Llama 3.1 and 3.2 have it: its
// four numbers, each positive, low_freq_factor below high_freq_factor).
// Other kinds are refused by name.
func (r *reader) ropeScaling() ropeScale {
	f := r.get("rope_scaling")
	if f == nil || !r.want(f, kindObject) {
		return ropeScale{}
	}
	kind := "(no rope_type)"
	var rs ropeScale
	var nums = map[string]*field{}
	for i, sf := range f.val.fields {
		switch {
		case (sf.key == "rope_type" || sf.key == "type") && sf.val.kind == kindString:
			kind = fmt.Sprintf("%q", sf.val.str)
		case sf.val.kind == kindNumber:
			nums[sf.key] = &f.val.fields[i]
		}
	}
	switch kind {
	case `"default"`:
		return ropeScale{}
	case `"llama3"`:
	default:
		r.errorf(f.keyOff, "rope_scaling: rope_type %s is not supported yet (the language's rope takes theta and Llama 3's scaling)", kind)
		return ropeScale{}
	}
	get := func(key string, integer bool) float64 {
		sf := nums[key]
		if sf == nil {
			r.errorf(f.keyOff, "rope_scaling: rope_type \"llama3\" needs %s", key)
			return 0
		}
		v, err := sf.val.num.Float64()
		if err != nil || !(v > 0) || math.IsInf(v, 0) || integer && v != math.Trunc(v) {
			what := "a positive number"
			if integer {
				what = "a positive integer"
			}
			r.errorf(sf.val.off, "rope_scaling: %s: %s is not %s", key, sf.val.num, what)
			return 0
		}
		return v
	}
	rs.factor = get("factor", false)
	rs.low = get("low_freq_factor", false)
	rs.high = get("high_freq_factor", false)
	rs.original = int64(get("original_max_position_embeddings", true))
	if rs.low > 0 && rs.high > 0 && rs.low >= rs.high {
		r.errorf(nums["low_freq_factor"].val.off, "rope_scaling: low_freq_factor %s must be below high_freq_factor %s", num(rs.low), num(rs.high))
	}
	return rs
}

// dropout accepts attention_dropout 0: the language has no dropout.
func (r *reader) dropout() {
	f := r.get("attention_dropout")
	if f == nil || !r.want(f, kindNumber) {
		return
	}
	if v, err := f.val.num.Float64(); err != nil || v != 0 {
		r.errorf(f.val.off, "attention_dropout: %s is not supported yet (the language has no dropout)", f.val.num)
	}
}

// slidingWindow refuses a window shorter than the sequence: with seq_len
// at most the window, every query sees all its keys, and sliding-window
// attention is full causal attention.
func (r *reader) slidingWindow(s *spec, seq int64) {
	use := true
	if s.fam.qwenSWA {
		// Qwen2 applies its window only with use_sliding_window (or
		// to the layers layer_types names), and then only from layer
		// max_window_layers on: refused conservatively for all.
		use, _ = r.boolean("use_sliding_window", false)
		if f := r.get("max_window_layers"); f != nil {
			r.want(f, kindNumber)
		}
		use = r.layerTypes() || use
	}
	w, ok := r.integer("sliding_window", -1, math.MaxInt64)
	if !use || !ok || w < 0 {
		return
	}
	s.window = w
	if w < seq {
		r.errorf(r.byKey["sliding_window"].keyOff, "sliding_window: %d is shorter than the sequence (seq_len %d); sliding-window attention is not supported yet", w, seq)
	}
}

// layerTypes reads Qwen2's list of attention kinds per layer and reports
// whether any layer has a sliding window.
func (r *reader) layerTypes() bool {
	f := r.get("layer_types")
	if f == nil || !r.want(f, kindArray) {
		return false
	}
	sliding := false
	for _, e := range f.val.elems {
		if e.kind != kindString || (e.str != "full_attention" && e.str != "sliding_attention") {
			r.errorf(e.off, "layer_types: each entry must be \"full_attention\" or \"sliding_attention\"")
			return false
		}
		sliding = sliding || e.str == "sliding_attention"
	}
	return sliding
}

// gemma reads Gemma's fields: the MLP's GELU (the tanh approximation,
// as Gemma was trained, unless hidden_activation says otherwise) and the
// embeddings' scale, sqrt(hidden_size). Gemma's RMSNorm scales by 1 + w
// with w initialised to zeros: a norm weight initialised to ones is the
// same function, and trains the same (AdamW's step does not depend on
// the weight's offset, and 1-D params take no weight decay).
func (r *reader) gemma(s *spec) {
	act, actField := r.str("hidden_act", s.fam.act)
	if f := r.get("hidden_activation"); f != nil {
		act, actField = r.str("hidden_activation", "")
	} else if actField != nil && act == "gelu" {
		// transformers' Gemma reads hidden_act "gelu" as the tanh
		// approximation unless hidden_activation says otherwise.
		act = "gelu_pytorch_tanh"
	}
	switch act {
	case "gelu":
		s.act = "gelu"
	case "gelu_pytorch_tanh", "gelu_new", "gelu_fast":
		// Three spellings of one function in transformers.
		s.act = "gelu_tanh"
	default:
		off := r.byKey["model_type"].keyOff
		if actField != nil {
			off = actField.keyOff
		}
		r.errorf(off, "%s: %q is not supported yet (the language has silu, gelu and gelu_tanh)", actField.key, act)
	}
	s.qkvBias, _ = r.boolean("attention_bias", false)
	s.oBias = s.qkvBias
	s.embedScale = math.Sqrt(float64(s.d))
}
