package main

// amspc plan --export megatron | torchtitan: the launch arguments of
// Megatron-LM's pretrain_gpt.py and the TOML of torchtitan for plans
// those frameworks run, tensor and sequence parallelism included.

import (
	"fmt"
	"strings"

	"amspc/cost"
	"amspc/ir"
)

// decoder is what the exports need of a LLaMA-style decoder's shape,
// read from the job's graph (the ops say it, whatever the dims are
// named).
type decoder struct {
	vocab, width, layers, heads, kvHeads, ffn int64
	theta, eps                                float64
	gated, rmsnorm, tied, bias                bool
	activation                                string // "silu" or "gelu"
}

// decoderOf reads the shape of g, or says why it is not a decoder the
// frameworks' LLaMA and GPT models build.
func decoderOf(g *ir.Graph) (decoder, string) {
	d := decoder{layers: int64(g.Layers), theta: 10000}
	var table *ir.Value
	readers := map[*ir.Value]int{}
	for _, v := range g.Values {
		op := v.Def
		if op == nil || op.Out() != v {
			continue
		}
		for _, a := range op.Args {
			readers[a]++
		}
		switch op.Kind {
		case ir.Embed:
			for _, a := range op.Args {
				if a.Role == ir.Param && len(a.Shape) == 2 {
					table = a
					d.vocab, d.width = a.Shape[0], a.Shape[1]
				}
			}
		case ir.Attention:
			if a, ok := op.Attr("heads"); ok {
				d.heads = a.Int
			}
			d.kvHeads = d.heads
			if a, ok := op.Attr("kv_heads"); ok && a.Int > 0 {
				d.kvHeads = a.Int
			}
		case ir.RoPE:
			if a, ok := op.Attr("theta"); ok {
				d.theta = a.Float
			}
		case ir.RMSNorm, ir.LayerNorm:
			d.rmsnorm = op.Kind == ir.RMSNorm
			if a, ok := op.Attr("eps"); ok {
				d.eps = a.Float
			}
		case ir.SiLU, ir.GELU:
			d.activation = map[ir.OpKind]string{ir.SiLU: "silu", ir.GELU: "gelu"}[op.Kind]
			if x := op.Args[0]; d.ffn == 0 && len(x.Shape) > 0 {
				d.ffn = x.Shape[len(x.Shape)-1]
			}
		case ir.Mul:
			d.gated = true
		case ir.Add:
			for _, a := range op.Args {
				if a.Role == ir.Param {
					d.bias = true
				}
			}
		}
	}
	switch {
	case table == nil:
		return d, "the model has no embedding table"
	case d.heads == 0:
		return d, "the model has no attention"
	case d.ffn == 0:
		return d, "the model's MLP has no SiLU or GELU (gelu_tanh has no Megatron or torchtitan form here)"
	case d.layers == 0:
		return d, "the model has no repeated blocks"
	}
	d.tied = readers[table] > 1
	return d, ""
}

// megatronArgs is Megatron-LM's pretrain_gpt.py arguments for plan e:
// tensor (and sequence) parallelism over a node's consecutive GPUs, as
// amspc's; parameters and gradients replicated over the data-parallel
// ranks, optimizer states sharded over all of them
// (--use-distributed-optimizer) or none. Megatron's vocabulary-parallel
// embedding and loss, which amspc does not have yet, make its step
// cheaper than the one amspc costs.
func megatronArgs(name string, f cost.Factors, dp ir.Factor, e *cost.Estimate, job *ir.Job, _ cost.Config) (string, string) {
	one := ir.Factor{S0: 1, S1: 1}
	p := e.Plan
	mesh := dp.DataMesh(p.Tensor)
	switch {
	case f.Secondary.Size() > 1:
		return "", "a secondary parameter shard (ZeRO++ hpZ) has no Megatron-LM form"
	case f.P != one || f.G != one:
		return "", fmt.Sprintf("s_p %v, s_g %v: Megatron-LM keeps parameters and gradients whole on every data-parallel rank (its distributed optimizer shards only optimizer states)", f.P, f.G)
	case f.OS != one && f.OS != mesh:
		return "", fmt.Sprintf("s_os %v: Megatron-LM's distributed optimizer shards optimizer states over all %v data-parallel ranks or none", f.OS, mesh)
	}
	m, why := decoderOf(job.Graph)
	if why != "" {
		return "", why
	}
	if !m.gated && m.activation == "silu" {
		return "", "a SiLU MLP without a gate has no Megatron-LM form (--swiglu is gated)"
	}
	t := job.Train
	c := job.Cluster
	var b strings.Builder
	fmt.Fprintf(&b, "# %s: plan %s (%s) on %d x %d GPUs, exported by amspc plan --export megatron\n", job.Graph.Name, name, planText(p, f), c.Nodes, c.GPUsPerNode)
	fmt.Fprintf(&b, "# torchrun --nnodes %d --nproc-per-node %d pretrain_gpt.py $ARGS, with ARGS:\n", c.Nodes, c.GPUsPerNode)
	fmt.Fprintf(&b, "# (data and tokenizer arguments are yours: --data-path, --tokenizer-type, ...)\n")
	arg := func(a string, v ...any) {
		b.WriteString(a)
		for _, x := range v {
			fmt.Fprintf(&b, " %v", x)
		}
		b.WriteString(" \\\n")
	}
	arg("--tensor-model-parallel-size", max(p.Tensor, 1))
	arg("--pipeline-model-parallel-size", 1)
	if p.Sequence && p.Tensor > 1 {
		arg("--sequence-parallel")
	}
	if f.OS != one {
		arg("--use-distributed-optimizer")
	}
	arg("--overlap-grad-reduce")
	if f.OS != one {
		arg("--overlap-param-gather")
	}
	switch p.Recompute {
	case ir.RecomputeSelective:
		arg("--recompute-granularity", "selective")
	case ir.RecomputeFull:
		arg("--recompute-granularity", "full")
		arg("--recompute-method", "uniform")
		arg("--recompute-num-layers", 1)
	}
	megatronModel(arg, m, t)
	arg("--micro-batch-size", p.MicroBatch)
	arg("--global-batch-size", t.GlobalBatch)
	switch t.Precision {
	case ir.BF16Mixed:
		arg("--bf16")
	case ir.FP16Mixed:
		arg("--fp16")
	}
	o := t.Optimizer
	arg("--optimizer", "adam")
	arg("--lr", fmt.Sprintf("%g", o.LR))
	arg("--adam-beta1", fmt.Sprintf("%g", o.Beta1))
	arg("--adam-beta2", fmt.Sprintf("%g", o.Beta2))
	arg("--adam-eps", fmt.Sprintf("%g", o.Eps))
	arg("--weight-decay", fmt.Sprintf("%g", o.WeightDecay))
	fmt.Fprintf(&b, "--train-iters %d\n", t.Steps)
	return b.String(), ""
}

// megatronModel gives Megatron-LM the model's shape: LLaMA's
// architecture (RoPE, RMSNorm, SwiGLU, no biases, no dropout) where the
// model has it.
func megatronModel(arg func(string, ...any), m decoder, t *ir.Train) {
	arg("--num-layers", m.layers)
	arg("--hidden-size", m.width)
	arg("--ffn-hidden-size", m.ffn)
	arg("--num-attention-heads", m.heads)
	if m.kvHeads != m.heads {
		arg("--group-query-attention")
		arg("--num-query-groups", m.kvHeads)
	}
	arg("--seq-length", t.SeqLen)
	arg("--max-position-embeddings", t.SeqLen)
	arg("--vocab-size", m.vocab)
	arg("--position-embedding-type", "rope")
	arg("--rotary-base", fmt.Sprintf("%g", m.theta))
	if m.rmsnorm {
		arg("--normalization", "RMSNorm")
	}
	if m.eps > 0 {
		arg("--norm-epsilon", fmt.Sprintf("%g", m.eps))
	}
	if m.gated {
		arg("--swiglu")
	}
	if !m.tied {
		arg("--untie-embeddings-and-output-weights")
	}
	if !m.bias {
		arg("--disable-bias-linear")
	}
	arg("--attention-dropout", 0)
	arg("--hidden-dropout", 0)
	arg("--use-flash-attn")
}

// torchtitanTOML is torchtitan's configuration for plan e: FSDP2 over
// the data-parallel mesh (sharded over groups of s GPUs, replicated
// across the groups: HSDP) times tensor parallelism over a node's
// consecutive GPUs (the innermost mesh dimension, as amspc's), with
// sequence parallelism, which torchtitan's tensor parallelism always
// has. Plain DDP does not combine with tensor parallelism there.
func torchtitanTOML(name string, f cost.Factors, dp ir.Factor, e *cost.Estimate, job *ir.Job, _ cost.Config) (string, string) {
	one := ir.Factor{S0: 1, S1: 1}
	p := e.Plan
	mesh := dp.DataMesh(p.Tensor)
	tp := max(p.Tensor, 1)
	switch {
	case f.Secondary.Size() > 1:
		return "", "a secondary parameter shard (ZeRO++ hpZ) has no torchtitan form"
	case f.P != f.G || f.G != f.OS:
		return "", fmt.Sprintf("s_p %v, s_g %v, s_os %v: FSDP2 shards parameters, gradients and optimizer states together", f.P, f.G, f.OS)
	case f.P == one && tp > 1:
		return "", "parameters replicated over the data-parallel ranks (DDP) with tensor parallelism: torchtitan's DDP takes no second mesh dimension"
	case tp > 1 && !p.Sequence:
		return "", "tensor parallelism without sequence parallelism: torchtitan's tensor parallelism always shards the sequence between blocks"
	case mesh.Size()%f.P.Size() != 0 || (f.P.S1 > 1 && f.P.S0 != mesh.S0):
		return "", fmt.Sprintf("s_p %v is not a block of consecutive data-parallel ranks", f.P)
	}
	m, why := decoderOf(job.Graph)
	if why != "" {
		return "", why
	}
	if !m.gated || m.activation != "silu" || !m.rmsnorm {
		return "", "torchtitan's llama3 model is RMSNorm and SwiGLU; this model is not"
	}
	t := job.Train
	mode := map[ir.Recompute]string{ir.RecomputeNone: "none", ir.RecomputeSelective: "selective", ir.RecomputeFull: "full"}[p.Recompute]
	var b strings.Builder
	fmt.Fprintf(&b, "# %s: plan %s (%s) on %d GPUs, exported by amspc plan --export torchtitan\n", job.Graph.Name, name, planText(p, f), dp.Size())
	fmt.Fprintf(&b, "# torchtitan's llama3 model with this shape (a flavor of yours where it is not one of torchtitan's):\n")
	fmt.Fprintf(&b, "#   dim=%d, n_layers=%d, n_heads=%d, n_kv_heads=%d, vocab_size=%d, ffn hidden %d, rope_theta=%g, norm_eps=%g\n",
		m.width, m.layers, m.heads, m.kvHeads, m.vocab, m.ffn, m.theta, m.eps)
	if m.tied {
		fmt.Fprintf(&b, "#   tied embeddings: the output projection is the embedding table\n")
	}
	fmt.Fprintf(&b, "\n[model]\nname = \"llama3\"\n")
	fmt.Fprintf(&b, "\n[optimizer]\nname = \"AdamW\"\nlr = %g\neps = %g\nweight_decay = %g\n", t.Optimizer.LR, t.Optimizer.Eps, t.Optimizer.WeightDecay)
	fmt.Fprintf(&b, "\n[training]\nlocal_batch_size = %d\nglobal_batch_size = %d\nseq_len = %d\nsteps = %d\n", p.MicroBatch, t.GlobalBatch, t.SeqLen, t.Steps)
	switch t.Precision {
	case ir.BF16Mixed:
		fmt.Fprintf(&b, "mixed_precision_param = \"bfloat16\"\n")
	case ir.FP16Mixed:
		fmt.Fprintf(&b, "mixed_precision_param = \"float16\"\n")
	}
	fmt.Fprintf(&b, "\n[parallelism]\ndata_parallel_replicate_degree = %d\ndata_parallel_shard_degree = %d\ntensor_parallel_degree = %d\npipeline_parallel_degree = 1\ncontext_parallel_degree = 1\n",
		mesh.Size()/f.P.Size(), f.P.Size(), tp)
	fmt.Fprintf(&b, "\n[activation_checkpoint]\nmode = %q\n", mode)
	if p.Recompute == ir.RecomputeSelective {
		fmt.Fprintf(&b, "# torchtitan's selective policy (per op) keeps the attention outputs and recomputes\n# elementwise ops; amspc's recomputes the attention cores: their memory differs.\nselective_ac_option = \"op\"\n")
	}
	return b.String(), ""
}

// planText is a plan's factors as the export's header names them.
func planText(p cost.Plan, f cost.Factors) string {
	s := fmt.Sprintf("%v, recompute %v", f, p.Recompute)
	switch {
	case p.Tensor > 1 && p.Sequence:
		s = fmt.Sprintf("tensor and sequence parallel over %d, %s", p.Tensor, s)
	case p.Tensor > 1:
		s = fmt.Sprintf("tensor parallel over %d, %s", p.Tensor, s)
	}
	return s
}

// noTensor refuses a tensor-parallel plan for a framework that has no
// tensor parallelism.
func noTensor(framework string, p cost.Plan) string {
	if p.Tensor > 1 {
		return fmt.Sprintf("tensor parallelism (tp%d): %s has none (--export megatron or torchtitan run it)", p.Tensor, framework)
	}
	return ""
}
