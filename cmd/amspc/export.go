package main

// amspc plan --export: the configuration that runs a plan's sharding in
// DeepSpeed, PyTorch FSDP2, Megatron-LM or torchtitan, or, where the
// framework cannot express it,
// the fastest plan of the plan table it can, with both costed.

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"amspc/cost"
	"amspc/ir"
	"amspc/planner"
)

// exportTarget is one framework's view of a plan: whether it runs the
// factors as they are, and the config or code that does.
type exportTarget struct {
	name string
	// express returns the framework's form of f on the data-parallel mesh
	// dp, or "" and why not.
	// name is the plan's, e its estimate (micro-batches, recompute).
	express func(name string, f cost.Factors, dp ir.Factor, e *cost.Estimate, job *ir.Job, cfg cost.Config) (string, string)
}

var exportTargets = []exportTarget{
	{"deepspeed", deepSpeedConfig},
	{"fsdp", fsdpSnippet},
	{"megatron", megatronArgs},
	{"torchtitan", torchtitanTOML},
}

// exportNames lists the targets, as the errors name them.
func exportNames() string {
	var names []string
	for _, t := range exportTargets {
		names = append(names, t.name)
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// runExport writes the export of the plan e (the chosen one, or the one
// --shard fixes) to stdout; what cannot be expressed goes to stderr with
// the fastest row of the plan table that can, costed as the table is.
func runExport(stdout, stderr io.Writer, file, target string, job *ir.Job, r *planner.Result, cfg cost.Config) int {
	var t *exportTarget
	for i := range exportTargets {
		if exportTargets[i].name == target {
			t = &exportTargets[i]
		}
	}
	if t == nil {
		fmt.Fprintf(stderr, "amspc plan: --export must be %s, not %q\n", exportNames(), target)
		return exitUser
	}
	e := r.Fixed
	if e == nil {
		e = r.Chosen
	}
	if e == nil {
		fmt.Fprintf(stderr, "%s: no plan fits, nothing to export\n", file)
		return exitUser
	}
	dp := r.Model.DP
	if !e.Plan.IsUniform() {
		fmt.Fprintf(stderr, "%s: plan %s gives its layer groups different factors (%s); %s applies one sharding to every layer: exporting the blocks' %v\n",
			file, e.Plan.Name, groupsString(e.Plan), t.name, e.Plan.Groups[cost.Blocks])
	}
	if !e.Feasible {
		fmt.Fprintf(stderr, "%s: plan %s does not fit: %s\n", file, e.Plan.Name, e.Why)
	}
	f := e.Plan.Groups[cost.Blocks]
	out, why := t.express(e.Plan.Name, f, dp, e, job, cfg)
	if why == "" {
		fmt.Fprint(stdout, out)
		return exitOK
	}
	// What the framework runs instead: the best row of the plan table,
	// ranked as the table ranks rows, that it expresses; when none fits,
	// the one needing the least memory.
	var best *cost.Estimate
	var bestOut string
	for _, row := range planRows(r) {
		c := row.e
		if c == e || c.M == 0 || !c.Plan.IsUniform() {
			continue
		}
		o, no := t.express(c.Plan.Name, c.Plan.Groups[cost.Blocks], dp, c, job, cfg)
		if no == "" && (best == nil || exportBetter(r, c, best)) {
			best, bestOut = c, o
		}
	}
	fmt.Fprintf(stderr, "%s: %s cannot run plan %s (%v): %s.\n", file, t.name, e.Plan.Name, f, why)
	if best == nil {
		fmt.Fprintf(stderr, "%s: no plan of the table is one %s runs\n", file, t.name)
		return exitUser
	}
	which := "the fastest plan of the table that " + t.name + " runs"
	if !best.Feasible {
		which = "no plan " + t.name + " runs fits; of the table's, the one needing the least memory"
	}
	what := "step"
	if r.Objective == planner.Paper {
		what = "T_comm"
	}
	how := "simulated"
	switch {
	case !best.Simulated && !e.Simulated:
		how = "the analytic model for both"
	case !best.Simulated || !e.Simulated:
		how = fmt.Sprintf("%s simulated, %s analytic", pick(best.Simulated, best.Plan.Name, e.Plan.Name), pick(best.Simulated, e.Plan.Name, best.Plan.Name))
	}
	fmt.Fprintf(stderr, "  exporting %s (%v), %s: %s %s, %s per GPU%s, against %s and %s for %s (%s)\n",
		best.Plan.Name, best.Plan.Groups[cost.Blocks], which, what, dur(r.Objective.Score(best)), bytesHuman(best.Mem.Total), fitsNote(best),
		dur(r.Objective.Score(e)), bytesHuman(e.Mem.Total), e.Plan.Name, how)
	fmt.Fprint(stdout, bestOut)
	return exitOK
}

// exportBetter ranks the rows an export may fall back to as the plan
// table does (planner.Result.Less), and rows that do not fit by the
// memory they need.
func exportBetter(r *planner.Result, a, b *cost.Estimate) bool {
	if !a.Feasible && !b.Feasible {
		return a.Mem.Total < b.Mem.Total
	}
	return r.Less(a, b)
}

func pick(c bool, a, b string) string {
	if c {
		return a
	}
	return b
}

func fitsNote(e *cost.Estimate) string {
	if e.Feasible {
		return ""
	}
	return " (does not fit: " + e.Why + ")"
}

func groupsString(p cost.Plan) string {
	var parts []string
	for g := cost.Group(0); g < cost.NumGroups; g++ {
		parts = append(parts, fmt.Sprintf("%s %v", g, p.Groups[g]))
	}
	return strings.Join(parts, ", ")
}

// deepSpeedConfig is DeepSpeed's JSON config for f: stage 0-3,
// mics_shard_size for k/k/k, zero_hpz_partition_size for a secondary
// shard. DeepSpeed shards gradients and optimizer states alike and
// parameters either not at all or as they are, so other factors are
// refused.
func deepSpeedConfig(_ string, f cost.Factors, dp ir.Factor, e *cost.Estimate, job *ir.Job, cfg cost.Config) (string, string) {
	if why := noTensor("DeepSpeed's ZeRO", e.Plan); why != "" {
		return "", why
	}
	one := ir.Factor{S0: 1, S1: 1}
	z := map[string]any{}
	sec := f.Secondary.Size() > 1
	switch {
	case sec && !(f.P == dp && f.G == dp && f.OS == dp):
		return "", "a secondary parameter shard (zero_hpz_partition_size) needs P, G and OS sharded over every GPU"
	case f.P == one && f.G == one && f.OS == one:
		z["stage"] = 0
	case f.P == one && f.G == one && f.OS == dp:
		z["stage"] = 1
	case f.P == one && f.G == dp && f.OS == dp:
		z["stage"] = 2
	case f.P == dp && f.G == dp && f.OS == dp:
		z["stage"] = 3
		if sec {
			z["zero_hpz_partition_size"] = f.Secondary.Size()
		}
	case f.P == f.G && f.G == f.OS && f.P.S1 == 1 && dp.S0%f.P.S0 == 0:
		z["stage"] = 3
		z["mics_shard_size"] = f.P.Size()
		z["mics_hierarchical_params_gather"] = false
	case f.G != f.OS:
		return "", fmt.Sprintf("s_g (%v) differs from s_os (%v): ZeRO partitions gradients and optimizer states over the same GPUs", f.G, f.OS)
	case f.P != one && f.P != f.G:
		return "", fmt.Sprintf("s_p (%v) is neither 1 nor s_g (%v): ZeRO-3 and MiCS shard parameters as they shard gradients", f.P, f.G)
	default:
		return "", fmt.Sprintf("shard groups %v/%v/%v span nodes or are not whole numbers of a node's GPUs (MiCS groups lie within nodes here)", f.P, f.G, f.OS)
	}
	t := job.Train
	elem := int64(t.Precision.DType().Size())
	z["contiguous_gradients"] = true
	z["overlap_comm"] = true
	z["reduce_bucket_size"] = int64(cfg.BucketBytes) / elem
	z["allgather_bucket_size"] = int64(cfg.BucketBytes) / elem
	if z["stage"] == 3 {
		// amspc gathers one layer ahead (cost.Config.Prefetch stages).
		perLayer := int64(0)
		if job.Graph != nil {
			perLayer = cost.Stats(job.Graph).ParamsPerLayer
		}
		z["stage3_prefetch_bucket_size"] = perLayer * int64(max(cfg.Prefetch, 1))
		z["stage3_param_persistence_threshold"] = 0
	}
	o := t.Optimizer
	conf := map[string]any{
		"train_batch_size":               t.GlobalBatch,
		"train_micro_batch_size_per_gpu": e.Plan.MicroBatch,
		"gradient_accumulation_steps":    e.M,
		"bf16":                           map[string]bool{"enabled": t.Precision == ir.BF16Mixed},
		"fp16":                           map[string]bool{"enabled": t.Precision == ir.FP16Mixed},
		"optimizer": map[string]any{"type": "AdamW", "params": map[string]any{
			"lr": o.LR, "betas": []float64{o.Beta1, o.Beta2}, "eps": o.Eps, "weight_decay": o.WeightDecay}},
		"zero_optimization": z,
	}
	if t.Recompute == ir.RecomputeFull || e.Plan.Recompute == ir.RecomputeFull {
		conf["activation_checkpointing"] = map[string]any{"partition_activations": false, "contiguous_memory_optimization": false}
	}
	b, _ := json.MarshalIndent(conf, "", "  ") // encoding/json sorts map keys
	return string(b) + "\n", ""
}

// fsdpSnippet is PyTorch's FSDP2 (fully_shard) form of f: ZeRO-3 on the
// whole mesh, HSDP's 2-D mesh for k/k/k, reshard_after_forward=False for
// ZeRO-2, an int for ZeRO++'s secondary shard, DDP for 1/1/1.
func fsdpSnippet(name string, f cost.Factors, dp ir.Factor, e *cost.Estimate, job *ir.Job, cfg cost.Config) (string, string) {
	if why := noTensor("this FSDP2 snippet", e.Plan); why != "" {
		return "", why
	}
	one := ir.Factor{S0: 1, S1: 1}
	n := dp.Size()
	var b strings.Builder
	fmt.Fprintf(&b, "# %s: plan %s (%v) on %d GPUs, exported by amspc plan --export fsdp\n", job.Graph.Name, name, f, n)
	fmt.Fprintf(&b, "import torch\nfrom torch.distributed.device_mesh import init_device_mesh\n")
	sec := f.Secondary.Size() > 1
	layers := "for block in model.layers:\n    fully_shard(block, mesh=mesh%s)\nfully_shard(model, mesh=mesh%s)\n"
	switch {
	case f.P == one && f.G == one && f.OS == one && !sec:
		fmt.Fprintf(&b, "from torch.nn.parallel import DistributedDataParallel as DDP\n\n")
		fmt.Fprintf(&b, "mesh = init_device_mesh(\"cuda\", (%d,))\nmodel = DDP(model, device_mesh=mesh)\n", n)
	case f.P == dp && f.G == dp && f.OS == dp:
		fmt.Fprintf(&b, "from torch.distributed.fsdp import fully_shard\n\n")
		fmt.Fprintf(&b, "mesh = init_device_mesh(\"cuda\", (%d,))\n", n)
		arg := ""
		if sec {
			// Parameters regathered for backward from a copy sharded
			// over the secondary group (ZeRO++ hpZ).
			arg = fmt.Sprintf(", reshard_after_forward=%d", f.Secondary.Size())
		}
		fmt.Fprintf(&b, layers, arg, arg)
	case sec:
		return "", "a secondary parameter shard needs P, G and OS sharded over every GPU"
	case f.P == one && f.G == dp && f.OS == dp:
		fmt.Fprintf(&b, "from torch.distributed.fsdp import fully_shard\n\n")
		fmt.Fprintf(&b, "# Parameters stay gathered from forward to backward (ZeRO-2 within a step;\n# FSDP2 still shards them between steps).\n")
		fmt.Fprintf(&b, "mesh = init_device_mesh(\"cuda\", (%d,))\n", n)
		fmt.Fprintf(&b, layers, ", reshard_after_forward=False", ", reshard_after_forward=False")
	case f.P == f.G && f.G == f.OS && n%f.P.Size() == 0 && f.P.S1 == 1:
		k := f.P.Size()
		fmt.Fprintf(&b, "from torch.distributed.fsdp import fully_shard\n\n")
		fmt.Fprintf(&b, "# HSDP: sharded within groups of %d GPUs, replicated across the %d groups.\n", k, n/k)
		fmt.Fprintf(&b, "mesh = init_device_mesh(\"cuda\", (%d, %d), mesh_dim_names=(\"replicate\", \"shard\"))\n", n/k, k)
		fmt.Fprintf(&b, layers, "", "")
	case f.P == one && f.G == one:
		return "", fmt.Sprintf("optimizer states sharded (s_os %v) with parameters and gradients replicated: FSDP shards all three together (ZeRO-1 has no FSDP form)", f.OS)
	default:
		return "", fmt.Sprintf("s_p %v, s_g %v, s_os %v: FSDP shards parameters, gradients and optimizer states over one mesh dimension together", f.P, f.G, f.OS)
	}
	return b.String(), ""
}
