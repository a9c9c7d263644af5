package cost

import (
	"fmt"
	"math"

	"amspc/ir"
)

// Factors are one layer group's sharding factors (ir's: the
// distribution passes lower them).
type Factors = ir.Factors

// Plan is a point of the search space: factors per layer group, recompute
// and micro-batch size.
type Plan struct {
	Name       string
	Groups     [NumGroups]Factors
	Recompute  ir.Recompute
	MicroBatch int64 // sequences per GPU per micro-batch
	// Tensor is the tensor-parallel degree (0 or 1: none) and Sequence
	// its sequence parallelism: the factors then shard the data-parallel
	// mesh of GPUs per node / Tensor x nodes. The analytic model does not
	// price tensor parallelism: Evaluate marks such a plan infeasible,
	// saying so, and only its compiled program's simulation ranks it.
	Tensor   int
	Sequence bool
}

// Uniform is a plan with the same factors for every group.
func Uniform(name string, f Factors, rc ir.Recompute, mb int64) Plan {
	p := Plan{Name: name, Recompute: rc, MicroBatch: mb}
	for i := range p.Groups {
		p.Groups[i] = f
	}
	return p
}

// IsUniform reports whether every group has the same factors.
func (p Plan) IsUniform() bool {
	for _, f := range p.Groups[1:] {
		if f != p.Groups[0] {
			return false
		}
	}
	return true
}

// Config holds the cost model's knobs that are not part of the job.
type Config struct {
	// BucketBytes is the gradient bucket U of the all-reduces.
	BucketBytes float64
	// Prefetch is how many stages ahead forward gathers parameters.
	Prefetch int
	// Fragmentation is the allowance for the caching allocator, as a
	// fraction of the transient memory (activations and buffers).
	Fragmentation float64
	// Unfused costs the forward graph as written, for a compile whose
	// fuse pass is off (-d=fuse/off); otherwise the stages are costed on
	// the graph ir.Fuse makes, the one the compiler runs.
	Unfused bool
}

// DefaultConfig: 512 MiB buckets (DeepSpeed's reduce_bucket_size order of
// magnitude), prefetch of one stage (the paper's next-layer prefetch), 10%
// fragmentation.
var DefaultConfig = Config{BucketBytes: 512 << 20, Prefetch: 1, Fragmentation: 0.10}

// Model is the cost model of one job.
type Model struct {
	Job    *ir.Job
	Stages []*Stage
	Topo   *Topology
	// Machine costs instructions as the simulator does.
	Machine *Machine
	Config  Config
	DP      ir.Factor // data-parallel mesh: every GPU
	// Per-group parameter counts and the largest stage of each group.
	GroupParams   [NumGroups]int64
	MaxStageParam [NumGroups]int64
	Stats         ModelStats

	pBytes, gBytes, osBytes float64 // per param
	baseMB                  int64   // micro-batch the graph was built with
	flopRate                float64 // achieved FLOP/s per GPU
}

// NewModel prepares the cost model of a job; it needs the cluster and
// train sections.
func NewModel(job *ir.Job, cfg Config) (*Model, error) {
	if job.Cluster == nil {
		return nil, fmt.Errorf("costing a plan needs a cluster section")
	}
	if job.Train == nil {
		return nil, fmt.Errorf("costing a plan needs a train section")
	}
	c := job.Cluster
	g := job.Graph
	if !cfg.Unfused {
		// What backward keeps is what the fused ops save (swiglu keeps
		// no silu output; cross-entropy no fp32 copy of the logits).
		g = g.Clone()
		if err := ir.Fuse(g); err != nil {
			return nil, err
		}
	}
	var prof *Profile
	if c.Profile != "" {
		p, err := ReadProfile(c.Profile)
		if err != nil {
			return nil, err
		}
		prof = p
	}
	m := &Model{Job: job, Stages: Stages(g), Machine: ProfiledMachine(c, prof), Config: cfg,
		DP: ir.Factor{S0: c.GPUsPerNode, S1: c.Nodes}, Stats: Stats(job.Graph)}
	m.Topo = m.Machine.Topo
	prec := job.Train.Precision
	m.pBytes = float64(prec.DType().Size())
	m.gBytes = m.pBytes
	m.osBytes = float64(prec.OptimBytesPerParam())
	m.baseMB = job.Train.MicroBatch
	eff := c.GPU.Efficiency
	if eff == 0 {
		eff = 0.5
	}
	m.flopRate = c.GPU.PeakFLOPS * eff
	for _, s := range m.Stages {
		n := s.ParamCount()
		m.GroupParams[s.Group] += n
		m.MaxStageParam[s.Group] = max(m.MaxStageParam[s.Group], n)
	}
	return m, nil
}

// Memory is the bytes a GPU holds at its peak. For a simulated plan,
// Params and Optim are the program's persistent shards, Grads the
// gradient buffers and buckets live at the peak, Activations the rest
// its instructions hold allocated there (activations, gathered params)
// and Buffers the caching allocator's fragmentation allowance on the
// allocated part.
type Memory struct {
	Params, Grads, Optim, Activations, Buffers float64
	// Reserve is the GPU's runtime reserve (ir.GPU.ReserveBytes).
	Reserve float64
	Total   float64
}

// Estimate is a plan's predicted cost.
type Estimate struct {
	Plan Plan
	M    int64 // micro-batches per step
	Mem  Memory
	// Bytes each GPU sends per step over NVLink and over the network.
	CommIntra, CommInter float64
	// CommTime is all communication time summed (no overlap); Exposed is
	// the part compute does not hide.
	CommTime, Exposed, Compute, Step float64
	// The AMSP paper's objective and its terms (sec. IV-C).
	PaperComm, Tp, Tg, Tos0, Tos1 float64
	TokensPerSPerGPU, MFU         float64
	// Simulated says the times come from the scheduler's simulated
	// timeline rather than the analytic model; AnalyticStep keeps the
	// analytic step time either way.
	Simulated    bool
	AnalyticStep float64
	Feasible     bool
	Why          string // when infeasible
}

// stageComm is the communication attached to one stage.
type stageComm struct {
	agFwd, agBwd, rs float64 // every micro-batch
	arG, arDP, bc    float64 // bucketed all-reduces (mb < M, mb == M), spread
}

// Evaluate costs a plan.
func (m *Model) Evaluate(p Plan) *Estimate {
	e := &Estimate{Plan: p, Feasible: true}
	if p.Tensor > 1 {
		defer func() {
			e.Feasible = false
			e.Why = "tensor parallelism: the analytic model does not price it (only a simulation of the compiled program does)"
		}()
	}
	t := m.Job.Train
	if p.MicroBatch < 1 {
		p.MicroBatch = t.MicroBatch
		e.Plan.MicroBatch = p.MicroBatch
	}
	M, err := t.MicroBatchesOf(p.MicroBatch, m.DP.DataMesh(p.Tensor).Size())
	if err != nil {
		e.Feasible, e.Why = false, err.Error()
		return e
	}
	e.M = M
	if p.Tensor > 1 {
		return e // priced only by simulation (the deferred mark says so)
	}
	scale := float64(p.MicroBatch) / float64(m.baseMB)
	m.memory(e, scale)
	comms := m.comm(e)
	m.timeline(e, comms, scale)
	m.SetTimes(e, e.Step, e.Compute, e.Exposed)
	if limit := float64(m.Job.Cluster.GPU.MemoryBytes); e.Mem.Total > limit {
		e.Feasible = false
		e.Why = fmt.Sprintf("needs %s > %s", GiB(e.Mem.Total), GiB(limit))
	}
	return e
}

// SetTimes gives an estimate its step time (compute plus exposed
// communication) and what follows from it: tokens/s per GPU and MFU.
func (m *Model) SetTimes(e *Estimate, step, compute, exposed float64) {
	e.Step, e.Compute, e.Exposed = step, compute, exposed
	if step <= 0 {
		return
	}
	t := m.Job.Train
	gpus := float64(m.DP.Size())
	e.TokensPerSPerGPU = float64(t.TokensPerStep()) / step / gpus
	e.MFU = m.Stats.TrainFlopsPerToken() * float64(t.TokensPerStep()) / (step * gpus * m.Job.Cluster.GPU.PeakFLOPS)
}

// GiB formats bytes with one decimal in GiB, or in MiB or KiB below
// that: "91.2 GiB", "3.4 MiB".
func GiB(b float64) string {
	switch {
	case b >= 0.9995*(1<<30):
		return fmt.Sprintf("%.1f GiB", b/(1<<30))
	case b >= 0.9995*(1<<20):
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	}
	return fmt.Sprintf("%.1f KiB", b/(1<<10))
}

func shard(n int64, f ir.Factor) float64 {
	s := int64(f.Size())
	return float64((n + s - 1) / s) // even shards, the last padded
}

// GroupState is the model-state bytes (P, G, OS) a GPU holds for group g
// under factors f.
func (m *Model) GroupState(g Group, f Factors) (params, grads, optim float64) {
	n := m.GroupParams[g]
	if n == 0 {
		return 0, 0, 0
	}
	params = shard(n, f.P) * m.pBytes
	if f.Secondary.Size() > 1 {
		params += shard(n, f.Secondary) * m.pBytes
	}
	return params, shard(n, f.G) * m.gBytes, shard(n, f.OS) * m.osBytes
}

// GroupBuffers is the transient communication memory of group g under f:
// gathered parameters of the stages in flight (the one computing and
// Prefetch more), the full gradients of a stage being reduce-scattered
// (two in flight), and two gradient buckets when the group all-reduces.
// Groups run one after another, so a plan's buffers are the largest
// group's.
func (m *Model) GroupBuffers(g Group, f Factors) float64 {
	n := m.GroupParams[g]
	if n == 0 {
		return 0
	}
	var b float64
	if f.P.Size() > 1 {
		big := float64(m.MaxStageParam[g])
		b += float64(1+m.Config.Prefetch)*big*m.pBytes + 2*big*m.gBytes
	}
	// Buckets hold the p-chunk's gradient before it is reduced (ZeRO-2
	// fills them from the full chunk, not from its own shard).
	if f.G.Size() > f.P.Size() || m.DP.Size() > f.P.Size() {
		b += math.Min(2*m.Config.BucketBytes, shard(n, f.P)*m.gBytes)
	}
	return b
}

// Activations is the bytes of activations of one micro-batch at its peak:
// what every stage saves for backward, or with full recompute only the
// blocks' inputs plus one block rebuilt at a time, or with selective
// recompute all but the attention cores' outputs plus one block's
// rebuilt; plus the backward's workspace (a gradient and a temporary of
// the largest activation).
func (m *Model) Activations(rc ir.Recompute, scale float64) float64 {
	var saved, maxBlock, maxValue float64
	for _, s := range m.Stages {
		maxValue = math.Max(maxValue, float64(s.MaxValue))
		switch {
		case rc == ir.RecomputeFull && s.Group == Blocks:
			saved += float64(s.Boundary)
			maxBlock = math.Max(maxBlock, float64(s.Saved))
			continue
		case rc == ir.RecomputeSelective && s.Group == Blocks:
			saved -= float64(s.Selective)
			maxBlock = math.Max(maxBlock, float64(s.Selective))
		}
		saved += float64(s.Saved)
	}
	return (saved + maxBlock + 2*maxValue) * scale
}

func (m *Model) memory(e *Estimate, scale float64) {
	p := e.Plan
	var buf float64
	for g := Group(0); g < NumGroups; g++ {
		pb, gb, ob := m.GroupState(g, p.Groups[g])
		e.Mem.Params += pb
		e.Mem.Grads += gb
		e.Mem.Optim += ob
		buf = math.Max(buf, m.GroupBuffers(g, p.Groups[g]))
	}
	act := m.Activations(p.Recompute, scale)
	e.Mem.Activations = act
	e.Mem.Buffers = buf + m.Config.Fragmentation*(act+buf)
	e.Mem.Reserve = m.Reserve()
	e.Mem.Total = e.Mem.Params + e.Mem.Grads + e.Mem.Optim + e.Mem.Activations + e.Mem.Buffers + e.Mem.Reserve
}

// Reserve is the memory a GPU of the cluster holds outside tensors.
func (m *Model) Reserve() float64 { return float64(m.Job.Cluster.GPU.ReserveBytes) }

// Needed is the memory a program needs whose simulated peak is peak
// bytes, persistent of them held for the whole run: the peak, the
// fragmentation allowance on its transient part, and the reserve.
func (m *Model) Needed(peak, persistent float64) float64 {
	return peak + m.Config.Fragmentation*(peak-persistent) + m.Reserve()
}

// Limit is a GPU's memory.
func (m *Model) Limit() float64 { return float64(m.Job.Cluster.GPU.MemoryBytes) }

// Prediction is a plan's compiled program simulated on the machine
// model (the compiler makes it; the cost package cannot import the
// compiler).
type Prediction struct {
	Step, Compute, Exposed float64
	// CommTime is the communication streams' busy time; CommIntra and
	// CommInter the bus bytes one rank sends inside and across nodes.
	CommTime, CommIntra, CommInter float64
	// PeakBytes is the most memory the program holds at once,
	// PersistentBytes the part no instruction allocates; Params and Optim
	// split the persistent shards, Grads the gradient buffers the peak
	// holds, persistent or not.
	PeakBytes, PersistentBytes float64
	Params, Grads, Optim       float64
	M                          int64
}

// Apply replaces an estimate's times, traffic and memory with a
// prediction's, and decides feasibility by the simulated peak: the peak,
// a fragmentation allowance on its transient part, and the GPU's
// reserve must fit the GPU's memory.
func (m *Model) Apply(e *Estimate, pr *Prediction) {
	m.SetTimes(e, pr.Step, pr.Compute, pr.Exposed)
	e.CommTime, e.CommIntra, e.CommInter = pr.CommTime, pr.CommIntra, pr.CommInter
	e.M = pr.M
	trans := pr.PeakBytes - pr.PersistentBytes
	e.Mem = Memory{Params: pr.Params, Grads: pr.Grads, Optim: pr.Optim, Activations: pr.PeakBytes - pr.Params - pr.Grads - pr.Optim,
		Buffers: m.Config.Fragmentation * trans, Reserve: m.Reserve()}
	e.Mem.Total = m.Needed(pr.PeakBytes, pr.PersistentBytes)
	e.Simulated = true
	e.Feasible, e.Why = true, ""
	if limit := m.Limit(); e.Mem.Total > limit {
		e.Feasible = false
		e.Why = fmt.Sprintf("needs %s > %s", GiB(e.Mem.Total), GiB(limit))
	}
}

// ratio is the mesh of the replicas of one shard of a inside b: the
// (b.S0/a.S0) x (b.S1/a.S1) GPUs that hold the same shard of a.
func ratio(b, a ir.Factor) ir.Factor { return ir.Factor{S0: b.S0 / a.S0, S1: b.S1 / a.S1} }

func (m *Model) coll(e *Estimate, c Coll, bytes float64, g ir.Factor, count float64) float64 {
	if g.Size() <= 1 || bytes <= 0 || count <= 0 {
		return 0
	}
	cc := m.Topo.Collective(c, bytes, g)
	e.CommIntra += count * cc.Intra
	e.CommInter += count * cc.Inter
	return cc.Time
}

// comm computes every stage's collectives and the paper's T_comm terms.
func (m *Model) comm(e *Estimate) []stageComm {
	out := make([]stageComm, len(m.Stages))
	for g := Group(0); g < NumGroups; g++ {
		m.groupComm(e, g, out)
	}
	e.PaperComm = e.Tp + e.Tg + e.Tos0 + e.Tos1
	return out
}

// groupComm fills the collectives of group g's stages.
func (m *Model) groupComm(e *Estimate, g Group, out []stageComm) {
	f, M := e.Plan.Groups[g], float64(e.M)
	n := m.GroupParams[g]
	if n == 0 {
		return
	}
	U := m.Config.BucketBytes
	// The scheduler keeps the params released at or after the last stage
	// with params gathered into backward, instead of gathering them again.
	lastParams := -1
	for i, s := range m.Stages {
		if len(s.Params) > 0 {
			lastParams = i
		}
	}
	colls := ir.StateCollectives(f, m.DP)
	// lowered is the time of c as the passes lower it, bytes at a time,
	// count times.
	lowered := func(c ir.StateColl, bytes, count float64) float64 {
		var t float64
		for _, l := range c.Lowered() {
			t += m.coll(e, l.Coll, bytes/float64(l.Div), l.Mesh, count)
		}
		return t
	}
	for i, s := range m.Stages {
		if s.Group != g || len(s.Params) == 0 {
			continue
		}
		// Per module (T_p): all-gathers before forward and backward,
		// reduce-scatter after backward, every micro-batch. The paper's
		// T_p counts the backward all-gather of every module.
		kept := s.LastUser >= lastParams
		for _, n := range s.Params {
			var ag, agb, rs float64
			for _, c := range colls {
				bytes := float64(n) * m.pBytes
				if c.Grads {
					bytes = float64(n) * m.gBytes
				}
				switch c.Role {
				case ir.GatherForward:
					ag = m.coll(e, c.Coll, bytes, c.Mesh(), M)
				case ir.GatherBackward:
					if kept {
						agb = m.Topo.Collective(c.Coll, bytes, c.Mesh()).Time
					} else {
						agb = m.coll(e, c.Coll, bytes, c.Mesh(), M)
						out[i].agBwd += agb
					}
				case ir.ReduceGrads:
					rs = m.coll(e, c.Coll, bytes, c.Mesh(), M)
				}
			}
			out[i].agFwd += ag
			out[i].rs += rs
			e.Tp += M * (ag + agb + rs)
		}
		// The schedule's view of the bucketed all-reduces and the spread:
		// each stage's p-chunk.
		share := float64(s.ParamCount()) * m.gBytes / float64(f.P.Size())
		for _, c := range colls {
			switch c.Role {
			case ir.SelectDrop:
				// Only the g-slice is kept: one reduce-scatter per stage and
				// micro-batch but the last.
				out[i].arG = lowered(c, share, M-1)
			case ir.ReplicaReduce:
				// Where the optimizer reads only an os-slice, a
				// reduce-scatter onto it and an all-reduce of the slice
				// across os-groups, per stage; otherwise bucketed
				// all-reduces of the p-chunk (the bucket pass).
				if c.Read.Size() > 1 {
					out[i].arDP = lowered(c, share, 1)
				} else {
					out[i].arDP = m.bucketed(e, share, c.Mesh(), 1)
				}
			case ir.Spread:
				// The paper issues s_os/s_p broadcasts in one NCCL group
				// call; run concurrently they move the same bytes as an
				// all-gather of the P shard over the os/p mesh, with one
				// ring's latency, which is how we cost them.
				pb := float64(s.ParamCount()) * m.pBytes / float64(f.P.Size())
				out[i].bc = lowered(c, pb, 1)
			}
		}
	}
	// The paper's terms, with its fractional bucket count 2Φ/(U s_p).
	gradBytes := float64(n) * m.gBytes / float64(f.P.Size())
	if f.G.Size() > f.P.Size() {
		e.Tg += (M - 1) * gradBytes / U * m.Topo.Collective(AllReduce, U, ratio(f.G, f.P)).Time
	}
	if m.DP.Size() > f.P.Size() {
		e.Tos0 += gradBytes / U * m.Topo.Collective(AllReduce, U, ratio(m.DP, f.P)).Time
	}
	if f.OS.Size() > f.P.Size() {
		k := float64(f.OS.Size() / f.P.Size())
		e.Tos1 += k * m.Topo.Collective(Broadcast, float64(n)*m.pBytes/float64(f.OS.Size()), ratio(f.OS, f.P)).Time
	}
}

// GroupExposed is the exposed communication of group g's stages over a
// step under factors f, recompute rc and micro-batch mb: the term the
// MILP sums per group.
func (m *Model) GroupExposed(g Group, f Factors, rc ir.Recompute, mb, M int64) float64 {
	e := &Estimate{Plan: Plan{Recompute: rc, MicroBatch: mb}, M: M}
	e.Plan.Groups[g] = f
	out := make([]stageComm, len(m.Stages))
	m.groupComm(e, g, out)
	_, _, win := m.computeTimes(rc, float64(mb)/float64(m.baseMB))
	var t float64
	for i, s := range m.Stages {
		if s.Group == g {
			t += exposed(out[i], win[i], float64(M))
		}
	}
	return t
}

// ComputeTime is a step's compute under recompute rc and micro-batch mb.
func (m *Model) ComputeTime(rc ir.Recompute, mb, M int64) float64 {
	fwd, bwd, _ := m.computeTimes(rc, float64(mb)/float64(m.baseMB))
	var t float64
	for i := range fwd {
		t += float64(M) * (fwd[i] + bwd[i])
	}
	return t
}

// FlopRate is the FLOP/s a GPU achieves: peak x efficiency.
func (m *Model) FlopRate() float64 { return m.flopRate }

// Scale is the factor from the graph's micro-batch to mb.
func (m *Model) Scale(mb int64) float64 { return float64(mb) / float64(m.baseMB) }

// bucketed is the time of all-reducing bytes in buckets of U.
func (m *Model) bucketed(e *Estimate, bytes float64, g ir.Factor, count float64) float64 {
	U := m.Config.BucketBytes
	full := math.Floor(bytes / U)
	rest := bytes - full*U
	t := full * m.coll(e, AllReduce, U, g, full*count)
	if rest > 0 {
		t += m.coll(e, AllReduce, rest, g, count)
	}
	return t
}
