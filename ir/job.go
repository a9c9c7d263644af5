package ir

import (
	"fmt"
)

// Job is everything one .amsp file (or a combination of files) says: the
// model's forward graph and, when given, the cluster, the training setup and
// the sharding choice.
type Job struct {
	Graph   *Graph
	Cluster *Cluster   // nil when the file has no cluster section
	Train   *Train     // nil when the file has no train section
	Shard   *ShardSpec // nil means auto
	// Rebatch lowers the same sources again with another micro-batch
	// size (the graph's batch dim), for a plan that chooses one; nil
	// when the job was not lowered from sources.
	Rebatch func(microBatch int64) (*Job, error)
}

// GPU describes one accelerator model. Bandwidths are bytes per second in
// one direction; FLOP/s are dense (no sparsity).
type GPU struct {
	Name        string
	MemoryBytes int64
	PeakFLOPS   float64 // dense bf16/fp16 tensor-core peak
	IntraBW     float64 // NVLink per GPU, one direction
	InterBW     float64 // network per node, one direction (reference design)
	// Efficiency is the fraction of PeakFLOPS a training step's kernels
	// achieve on average (the best MFU seen at scale on this part).
	Efficiency float64
	// IntraBusEff and InterBusEff are the fractions of the nominal link
	// bandwidths that NCCL's large-message bus bandwidth reaches: the
	// preset's default bandwidth profile.
	IntraBusEff, InterBusEff float64
	// MemBW is the HBM bandwidth (bytes/s): the roofline of memory-bound
	// kernels.
	MemBW float64
	// MatMulHalf is the matmul dimension at which a GEMM reaches half of
	// Efficiency: GEMM efficiency grows as x/(x+MatMulHalf) with the
	// smallest of its three dimensions x (docs/planner.md).
	MatMulHalf float64
	// ReserveBytes is the memory a training process holds outside the
	// framework's tensors: the CUDA context and module images, NCCL's
	// communicator buffers, cuBLAS/cuBLASLt workspaces (docs/planner.md).
	ReserveBytes int64
	// SharedCores says a rank's streams run on the same processor: CPU
	// ranks, whose kernels and collective copies take turns on the
	// cores, where a GPU computes while its copy engines and NCCL move
	// data.
	SharedCores bool
	Source      string // where the numbers come from
}

// Cluster is a resolved cluster section: a preset with overrides applied.
type Cluster struct {
	Name        string
	Nodes       int
	GPUsPerNode int
	GPU         GPU
	IntraBW     float64 // per GPU, one direction, bytes/s
	InterBW     float64 // per node, one direction, bytes/s
	// Per-step latency of a collective inside a node and across nodes
	// (the alpha of the alpha-beta model), seconds.
	IntraLatency, InterLatency float64
	// Profile is the measured profile file to cost with, "" if none: the
	// cluster section's profile setting (relative to the file naming
	// it) or --profile. The frontend records it without reading it;
	// errors reading it belong at ProfilePos, the setting's position
	// (ProfileSetting is its text as written) or Pos{File: "--profile"}.
	Profile        string
	ProfilePos     Pos
	ProfileSetting string
	Pos            Pos
}

// Default per-hop latencies of a collective ring (NCCL's Simple protocol)
// over NVLink and over the network: NCCL's own tuning model
// (src/graph/tuning.cc, hwLat Ring/Simple: 3.4 µs NVLink, 14 µs network).
const (
	DefaultIntraLatency = 3.4e-6
	DefaultInterLatency = 14e-6
)

// GPUs is the cluster's total GPU count.
func (c *Cluster) GPUs() int { return c.Nodes * c.GPUsPerNode }

// DataParallel is the number of ranks that train different sequences:
// the cluster's GPUs over the shard section's tensor-parallel degree (a
// tensor-parallel group trains one sequence together).
func (j *Job) DataParallel() int {
	n := j.Cluster.GPUs()
	if j.Shard != nil && j.Shard.Tensor > 1 {
		n /= j.Shard.Tensor
	}
	return n
}

// Precision is the training precision of P and G (OS is always fp32).
type Precision uint8

const (
	BF16Mixed Precision = iota
	FP16Mixed
	FP32
)

var precisionNames = [...]string{"bf16", "fp16", "fp32"}

func (p Precision) String() string {
	if int(p) < len(precisionNames) {
		return precisionNames[p]
	}
	return fmt.Sprintf("precision(%d)", int(p))
}

// ParsePrecision maps "bf16", "fp16", "fp32" to a Precision.
func ParsePrecision(s string) (Precision, bool) {
	for i, n := range precisionNames {
		if n == s {
			return Precision(i), true
		}
	}
	return 0, false
}

// DType is the dtype of params, grads and activations.
func (p Precision) DType() DType {
	switch p {
	case BF16Mixed:
		return BF16
	case FP16Mixed:
		return F16
	}
	return F32
}

// OptimBytesPerParam is the optimizer-state bytes of one param: fp32
// master weights plus Adam m and v under mixed precision, only m and v when
// the params are already fp32.
func (p Precision) OptimBytesPerParam() int64 {
	if p == FP32 {
		return 8
	}
	return 12
}

// AdamW holds the optimizer's hyper-parameters (NUMERICS.md).
type AdamW struct {
	LR          float64 `json:"lr"`
	Beta1       float64 `json:"beta1"`
	Beta2       float64 `json:"beta2"`
	Eps         float64 `json:"eps"`
	WeightDecay float64 `json:"weight_decay"`
}

// DefaultAdamW matches torch.optim.AdamW's defaults.
var DefaultAdamW = AdamW{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01}

// Recompute says which activations backward recomputes.
type Recompute uint8

const (
	RecomputeNone Recompute = iota
	RecomputeFull
	// RecomputeSelective computes only the attention core again for
	// backward (Korthikanti et al. 2022): its output is not kept from
	// forward to backward.
	RecomputeSelective
)

// Recomputes lists the recompute choices, in the order the planner
// searches them.
var Recomputes = []Recompute{RecomputeNone, RecomputeSelective, RecomputeFull}

// ParseRecompute maps "none", "selective" or "full" to a Recompute.
func ParseRecompute(s string) (Recompute, bool) {
	for _, r := range Recomputes {
		if r.String() == s {
			return r, true
		}
	}
	return 0, false
}

func (r Recompute) String() string {
	switch r {
	case RecomputeNone:
		return "none"
	case RecomputeFull:
		return "full"
	case RecomputeSelective:
		return "selective"
	}
	return fmt.Sprintf("recompute(%d)", int(r))
}

// Train is a resolved train section.
type Train struct {
	SeqLen      int64
	MicroBatch  int64 // sequences per GPU per micro-batch
	GlobalBatch int64 // sequences per step
	Precision   Precision
	Optimizer   AdamW
	Schedule    LRSchedule
	// ClipGradNorm scales every step's gradients so that their global
	// norm is at most it, as torch.nn.utils.clip_grad_norm_; 0: off.
	ClipGradNorm    float64
	ClipGradNormPos Pos // where clip_grad_norm is written
	Recompute       Recompute
	Steps           int64
	Seed            int64
	Data            string
	// EvalEvery and EvalTokens: amspc run evaluates the loss of the last
	// EvalTokens tokens of the data, held out from training, after every
	// EvalEvery-th step and the last (0: not set).
	EvalEvery, EvalTokens int64
	Pos                   Pos
	// GlobalBatchPos is where global_batch is written, for errors about
	// uneven splits found later (when the data-parallel size is known).
	GlobalBatchPos Pos
}

// TokensPerStep is the global batch in tokens.
func (t *Train) TokensPerStep() int64 { return t.GlobalBatch * t.SeqLen }

// MicroBatches is M = global / (micro_batch x dp), or an error when the
// split is uneven.
func (t *Train) MicroBatches(dp int) (int64, error) {
	return t.MicroBatchesOf(t.MicroBatch, dp)
}

// MicroBatchesOf is MicroBatches for another micro-batch size mb.
func (t *Train) MicroBatchesOf(mb int64, dp int) (int64, error) {
	per := mb * int64(dp)
	if per <= 0 {
		return 0, fmt.Errorf("data-parallel size %d is not positive", dp)
	}
	if t.GlobalBatch < per {
		return 0, fmt.Errorf("global batch of %d sequences is smaller than one micro-batch on every data-parallel rank (micro_batch %d x %d ranks = %d)",
			t.GlobalBatch, mb, dp, per)
	}
	if t.GlobalBatch%per != 0 {
		return 0, fmt.Errorf("global batch of %d sequences does not split evenly into micro-batches of micro_batch %d x %d data-parallel ranks = %d sequences",
			t.GlobalBatch, mb, dp, per)
	}
	return t.GlobalBatch / per, nil
}

// Factor is a 2-D sharding factor: S0 GPUs inside a node times S1 nodes.
type Factor struct{ S0, S1 int }

// Size is the number of GPUs the factor spans.
func (f Factor) Size() int { return f.S0 * f.S1 }

func (f Factor) String() string { return fmt.Sprintf("%dx%d", f.S0, f.S1) }

// DataMesh is the data-parallel mesh a tensor-parallel group of t
// consecutive GPUs of a node leaves on mesh f (GPUs per node x nodes):
// f.S0/t GPUs per node x f.S1 nodes, the mesh a plan's factors shard
// (t of 0 or 1: f).
func (f Factor) DataMesh(t int) Factor { return Factor{S0: f.S0 / max(t, 1), S1: f.S1} }

// Div is the mesh of f's blocks of shape g: (f.S0/g.S0) x (f.S1/g.S1),
// the replicas of one g-shard inside an f-group.
func (f Factor) Div(g Factor) Factor { return Factor{S0: f.S0 / max(g.S0, 1), S1: f.S1 / max(g.S1, 1)} }

// ShardMode is how the shard section chooses factors.
type ShardMode uint8

const (
	ShardAuto   ShardMode = iota // the planner searches
	ShardFixed                   // factors written out
	ShardPreset                  // a named strategy (ddp, zero3, mics(k), ...)
)

// ShardSpec is a resolved shard section.
type ShardSpec struct {
	Mode      ShardMode
	Preset    string // ShardPreset: "ddp", "zero1", ..., "mics"
	K         int    // the preset's argument, 0 if none
	P, G, OS  Factor // ShardFixed and ShardPreset
	Secondary Factor // ZeRO++ hpZ: secondary parameter shard for backward; zero if none
	// Tensor is the tensor-parallel degree (0 or 1: none), over the
	// GPUs of a node; Sequence adds sequence parallelism over the same
	// group. P, G and OS then shard over the other ranks.
	Tensor   int
	Sequence bool
	Pos      Pos
}

// Label is a short human name: "auto", "zero3", "mics(8)", "2x1/2x1/4x2".
func (s *ShardSpec) Label() string {
	if s.Tensor > 1 {
		tp := fmt.Sprintf("tp%d", s.Tensor)
		if s.Sequence {
			tp += "+sp"
		}
		inner := *s
		inner.Tensor, inner.Sequence = 0, false
		return tp + " " + inner.Label()
	}
	switch s.Mode {
	case ShardAuto:
		return "auto"
	case ShardPreset:
		if s.K > 0 {
			return fmt.Sprintf("%s(%d)", s.Preset, s.K)
		}
		return s.Preset
	}
	return fmt.Sprintf("%v/%v/%v", s.P, s.G, s.OS)
}

// GPUsToFactor spells a plain GPU count k as a factor: k GPUs inside a node
// when k <= gpusPerNode, else k/gpusPerNode whole nodes.
func GPUsToFactor(k, gpusPerNode, nodes int) (Factor, error) {
	switch {
	case k <= 0:
		return Factor{}, fmt.Errorf("sharding factor must be positive, not %d", k)
	case k <= gpusPerNode:
		return Factor{k, 1}, nil
	case k%gpusPerNode != 0:
		return Factor{}, fmt.Errorf("sharding factor %d spans more than a node of %d GPUs but is not a whole number of nodes", k, gpusPerNode)
	case k/gpusPerNode > nodes:
		return Factor{}, fmt.Errorf("sharding factor %d needs %d nodes, the cluster has %d", k, k/gpusPerNode, nodes)
	}
	return Factor{gpusPerNode, k / gpusPerNode}, nil
}

// ValidateFactors checks the AMSP rules (paper eq. 3-7 and s_g in
// {s_p, s_os}) for factors on a data-parallel mesh dp (GPUs per node x
// nodes). The error names the rule and the numbers.
func ValidateFactors(dp, p, g, os Factor) error {
	comps := []struct {
		name string
		f    Factor
	}{{"params", p}, {"grads", g}, {"optim", os}}
	for _, c := range comps {
		if c.f.S0 < 1 || c.f.S1 < 1 {
			return fmt.Errorf("%s factor %v must be at least 1x1", c.name, c.f)
		}
		if c.f.S0 > dp.S0 || dp.S0%c.f.S0 != 0 {
			return fmt.Errorf("%s factor %v: %d does not divide the %d GPUs of a node", c.name, c.f, c.f.S0, dp.S0)
		}
		if c.f.S1 > dp.S1 {
			return fmt.Errorf("%s factor %v needs %d nodes, the cluster has %d", c.name, c.f, c.f.S1, dp.S1)
		}
		if dp.S1%c.f.S1 != 0 {
			return fmt.Errorf("%s factor %v: %d does not divide the %d nodes", c.name, c.f, c.f.S1, dp.S1)
		}
		if c.f.S1 > 1 && c.f.S0 != dp.S0 {
			return fmt.Errorf("%s factor %v spans %d nodes without filling a node (%d of %d GPUs); use %dx%d or stay inside one node",
				c.name, c.f, c.f.S1, c.f.S0, dp.S0, dp.S0, c.f.S1)
		}
	}
	for i := 0; i+1 < len(comps); i++ {
		a, b := comps[i], comps[i+1]
		if a.f.S0 > b.f.S0 || a.f.S1 > b.f.S1 || b.f.S0%a.f.S0 != 0 || b.f.S1%a.f.S1 != 0 {
			return fmt.Errorf("%s factor %v must nest inside %s factor %v (params <= grads <= optim in each mesh dimension)",
				a.name, a.f, b.name, b.f)
		}
	}
	if g != p && g != os {
		return fmt.Errorf("grads factor %v must equal the params factor %v or the optim factor %v", g, p, os)
	}
	return nil
}
