package hf

import (
	"fmt"
	"strconv"
	"strings"
)

// header is the file's opening comment: where it came from, what it
// counts and what the import read past.
func header(s *spec, source string, params int64) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "# Imported by amspc import hf from %s:\n", source)
	fmt.Fprintf(&b, "# model_type %s (%s), %s parameters.\n", s.fam.modelType, s.fam.class, commas(params))
	b.WriteString("# Matrices are stored [in, out], the transpose of the Hugging Face weight\n")
	b.WriteString("# named beside each param (inside repeat, under model.layers.N.).\n")
	if s.fam.gemma {
		b.WriteString("# Gemma's RMSNorm scales by 1 + w, w from zeros: these norm weights are\n")
		b.WriteString("# that 1 + w, from ones (the same function, trained the same).\n")
	}
	if s.window > 0 {
		fmt.Fprintf(&b, "# sliding_window %d covers the whole sequence: full causal attention.\n", s.window)
	}
	if len(s.ignored) > 0 {
		wrap(&b, "# Not imported (they do not change the function trained): ", s.ignored)
	}
	b.WriteString("\n")
	return []byte(b.String())
}

// wrap writes a comment that lists names, wrapped at 76 columns.
func wrap(b *strings.Builder, lead string, names []string) {
	line := lead
	for i, n := range names {
		word := n
		if i < len(names)-1 {
			word += ","
		} else {
			word += "."
		}
		if len(line)+len(word) > 76 && line != lead {
			b.WriteString(strings.TrimRight(line, " ") + "\n")
			line = "#   "
		}
		line += word + " "
	}
	b.WriteString(strings.TrimRight(line, " ") + "\n")
}

// emitter writes the model's statements, with the Hugging Face name of
// each param as a comment in one column.
type emitter struct {
	b strings.Builder
}

func (e *emitter) line(indent int, stmt string) {
	e.b.WriteString(strings.Repeat("  ", indent) + stmt + "\n")
}

func (e *emitter) param(indent int, decl, hfName string) {
	stmt := strings.Repeat("  ", indent) + decl
	e.b.WriteString(stmt + strings.Repeat(" ", max(1, 42-len(stmt))) + "# " + hfName + "\n")
}

// emit writes the job: the model, then cluster, train and shard sections.
func emit(s *spec, name string, o Options, seq, batch int64) []byte {
	e := &emitter{}
	e.line(0, "model "+name+" {")
	e.dims(s)
	e.line(0, "")
	e.line(1, "input tokens  : i32[batch, seq]")
	e.line(1, "input targets : i32[batch, seq]")
	e.line(0, "")
	init := ""
	if s.initStd != 0.02 {
		init = " init normal(" + num(s.initStd) + ")"
	}
	e.param(1, "param tok_emb : [vocab, d]"+init, "model.embed_tokens")
	if s.embedScale != 0 {
		e.line(1, "x = scale(embed(tokens, tok_emb), by="+num(s.embedScale)+")   # sqrt(hidden_size)")
	} else {
		e.line(1, "x = embed(tokens, tok_emb)")
	}
	e.line(0, "")
	e.line(1, "repeat layers {")
	e.block(s, init)
	e.line(1, "}")
	e.line(0, "")
	eps := "eps=" + num(s.eps)
	e.param(1, "param norm : [d] init ones", "model.norm")
	if s.tied {
		e.line(1, "logits = rmsnorm(x, norm, "+eps+") @ transpose(tok_emb)   # tie_word_embeddings")
	} else {
		e.param(1, "param lm_head : [d, vocab]"+init, "lm_head")
		e.line(1, "logits = rmsnorm(x, norm, "+eps+") @ lm_head")
	}
	e.line(1, "loss = cross_entropy(logits, targets)")
	e.line(0, "}")
	e.line(0, "")

	gpus := o.Nodes * o.GPUsPerNode
	e.line(0, fmt.Sprintf("cluster %s_x%d {", sanitize(o.GPU), gpus))
	e.line(1, fmt.Sprintf("nodes         = %d", o.Nodes))
	e.line(1, fmt.Sprintf("gpus_per_node = %d", o.GPUsPerNode))
	e.line(1, fmt.Sprintf("gpu           = %q", o.GPU))
	e.line(0, "}")
	e.line(0, "")
	e.line(0, "train {")
	e.line(1, fmt.Sprintf("seq_len      = %d", seq))
	e.line(1, fmt.Sprintf("micro_batch  = %d", o.MicroBatch))
	e.line(1, fmt.Sprintf("global_batch = %-14d # %s tokens", batch, commas(batch*seq)))
	e.line(1, "precision    = "+o.Precision)
	e.line(1, "optimizer    = adamw(lr=3e-4, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1)   # LLaMA's (config.json has none)")
	e.line(0, "}")
	e.line(0, "")
	e.line(0, "shard auto")
	return []byte(e.b.String())
}

// dims declares the sizes, naming a head's width only where a shape needs it.
func (e *emitter) dims(s *spec) {
	type dim struct {
		name, val string
	}
	ds := []dim{{"vocab", itoa(s.vocab)}, {"d", itoa(s.d)}, {"layers", itoa(s.layers)}, {"heads", itoa(s.heads)}}
	if s.kvHeads != s.heads {
		ds = append(ds, dim{"kv_heads", itoa(s.kvHeads)})
	}
	if s.kvHeads != s.heads || s.heads*s.headDim != s.d {
		hd := "d / heads"
		if s.heads*s.headDim != s.d {
			hd = itoa(s.headDim) // head_dim
		}
		ds = append(ds, dim{"hd", hd})
	}
	ds = append(ds, dim{"ffn", itoa(s.ffn)})
	width := 0
	for _, d := range ds {
		width = max(width, len(d.name))
	}
	for _, d := range ds {
		e.line(1, fmt.Sprintf("dim %-*s = %s", width, d.name, d.val))
	}
}

// block writes one decoder layer: pre-norm attention with rope and grouped
// KV heads, then the gated MLP, each added to the residual stream.
func (e *emitter) block(s *spec, init string) {
	qDim, kvDim := "d", "d"
	if s.heads*s.headDim != s.d {
		qDim = "heads * hd"
	}
	if s.kvHeads != s.heads {
		kvDim = "kv_heads * hd"
	} else {
		kvDim = qDim
	}
	bias := func(on bool, name, width, hf string) string {
		if !on {
			return ""
		}
		e.param(2, "param "+name+" : ["+width+"] init zeros", hf+".bias")
		return " + " + name
	}
	e.param(2, "param attn_norm : [d] init ones", "input_layernorm")
	e.param(2, "param wq : [d, "+qDim+"]"+init, "self_attn.q_proj")
	bq := bias(s.qkvBias, "bq", qDim, "self_attn.q_proj")
	e.param(2, "param wk : [d, "+kvDim+"]"+init, "self_attn.k_proj")
	bk := bias(s.qkvBias, "bk", kvDim, "self_attn.k_proj")
	e.param(2, "param wv : [d, "+kvDim+"]"+init, "self_attn.v_proj")
	bv := bias(s.qkvBias, "bv", kvDim, "self_attn.v_proj")
	e.param(2, "param wo : ["+qDim+", d]"+init, "self_attn.o_proj")
	bo := bias(s.oBias, "bo", "d", "self_attn.o_proj")
	e.param(2, "param ffn_norm : [d] init ones", "post_attention_layernorm")
	e.param(2, "param w1 : [d, ffn]"+init, "mlp.gate_proj")
	b1 := bias(s.mlpBias, "b1", "ffn", "mlp.gate_proj")
	e.param(2, "param w2 : [ffn, d]"+init, "mlp.down_proj")
	b2 := bias(s.mlpBias, "b2", "d", "mlp.down_proj")
	e.param(2, "param w3 : [d, ffn]"+init, "mlp.up_proj")
	b3 := bias(s.mlpBias, "b3", "ffn", "mlp.up_proj")
	e.line(0, "")

	eps := "eps=" + num(s.eps)
	theta := "theta=" + num(s.theta)
	if rs := s.rope; rs.factor != 0 {
		theta += fmt.Sprintf(", scaling_factor=%s, low_freq_factor=%s, high_freq_factor=%s, original_max_positions=%d",
			num(rs.factor), num(rs.low), num(rs.high), rs.original)
	}
	kvHeads, kvAttr := "heads", ""
	if s.kvHeads != s.heads {
		kvHeads, kvAttr = "kv_heads", ", kv_heads=kv_heads"
	}
	e.line(2, "h = rmsnorm(x, attn_norm, "+eps+")")
	e.line(2, "q = rope(h @ wq"+bq+", heads=heads, "+theta+")")
	e.line(2, "k = rope(h @ wk"+bk+", heads="+kvHeads+", "+theta+")")
	e.line(2, "v = h @ wv"+bv)
	attn := "attention(q, k, v, heads=heads" + kvAttr + ", causal=true) @ wo"
	if bo != "" {
		attn = "(" + attn + bo + ")"
	}
	e.line(2, "x = x + "+attn)
	e.line(2, "h = rmsnorm(x, ffn_norm, "+eps+")")
	mlp := "(" + s.act + "(h @ w1" + b1 + ") * (h @ w3" + b3 + ")) @ w2"
	if b2 != "" {
		mlp = "(" + mlp + b2 + ")"
	}
	e.line(2, "x = x + "+mlp)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// num writes a float as the language reads it: integers plainly, the rest
// in Go's shortest form without exponent padding (1e-5, not 1e-05).
func num(f float64) string {
	if f == float64(int64(f)) && f < 1e15 {
		return strconv.FormatInt(int64(f), 10)
	}
	s := strconv.FormatFloat(f, 'g', -1, 64)
	s = strings.Replace(s, "e-0", "e-", 1)
	return strings.Replace(s, "e+0", "e+", 1)
}

// commas writes an integer with thousands separators.
func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}
