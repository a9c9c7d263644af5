package hf

import (
	"fmt"
	"strings"
)

// Weight is where one param of the imported job lives in a Hugging Face
// checkpoint of the model: the tensor's name and the layout change
// between the two. The job's rope is Hugging Face's rotate-half
// (NUMERICS.md), the layout transformers' checkpoints of every family
// here are stored in (the conversion from Meta's interleaved weights
// permutes q_proj and k_proj into it), so q and k need no permutation;
// the check is that amspc's logits from a transformers-style model's
// weights are its logits (testdata/hf/tiny-llama).
type Weight struct {
	Param string // the job's param: tok_emb, layers.3.wq
	HF    string // the tensor: model.embed_tokens.weight, model.layers.3.self_attn.q_proj.weight
	// Transpose: a linear layer's weight, [out, in] in Hugging Face's
	// nn.Linear and [in, out] in the job.
	Transpose bool
	// Offset is added to Hugging Face's value: Gemma's norms scale by
	// 1 + w, which the job stores as one weight.
	Offset float32
	// Copy: a second copy of a param another tensor holds (a tied
	// head's lm_head.weight, which some checkpoints store beside the
	// embedding): checked equal when present, not exported.
	Copy bool
}

// weights is the mapping of every param the emitted job declares.
func weights(s *spec) []Weight {
	var out []Weight
	add := func(param, hf string, transpose bool) {
		out = append(out, Weight{Param: param, HF: hf, Transpose: transpose})
	}
	norm := func(param, hf string) {
		w := Weight{Param: param, HF: hf}
		if s.fam.gemma {
			w.Offset = 1
		}
		out = append(out, w)
	}
	add("tok_emb", "model.embed_tokens.weight", false)
	for l := range s.layers {
		p := fmt.Sprintf("layers.%d.", l)
		h := fmt.Sprintf("model.layers.%d.", l)
		norm(p+"attn_norm", h+"input_layernorm.weight")
		for _, x := range []struct {
			param, hf string
			bias      bool
		}{
			{"q", "self_attn.q_proj", s.qkvBias},
			{"k", "self_attn.k_proj", s.qkvBias},
			{"v", "self_attn.v_proj", s.qkvBias},
			{"o", "self_attn.o_proj", s.oBias},
		} {
			add(p+"w"+x.param, h+x.hf+".weight", true)
			if x.bias {
				add(p+"b"+x.param, h+x.hf+".bias", false)
			}
		}
		norm(p+"ffn_norm", h+"post_attention_layernorm.weight")
		for _, x := range []struct{ param, hf string }{{"1", "mlp.gate_proj"}, {"2", "mlp.down_proj"}, {"3", "mlp.up_proj"}} {
			add(p+"w"+x.param, h+x.hf+".weight", true)
			if s.mlpBias {
				add(p+"b"+x.param, h+x.hf+".bias", false)
			}
		}
	}
	norm("norm", "model.norm.weight")
	if s.tied {
		out = append(out, Weight{Param: "tok_emb", HF: "lm_head.weight", Copy: true})
	} else {
		add("lm_head", "lm_head.weight", true)
	}
	return out
}

// Skipped says why a tensor of a Hugging Face checkpoint that no param
// maps is not imported, "" when it should have been mapped (the import
// then refuses it by name): buffers transformers computes rather than
// trains.
func Skipped(name string) string {
	if strings.HasSuffix(name, ".rotary_emb.inv_freq") {
		return "rope's frequencies, computed from the config"
	}
	return ""
}
