package compiler

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"sync"

	"amspc/cost"
	"amspc/internal/par"
	"amspc/ir"
	"amspc/passes"
	"amspc/planner"
	"amspc/simulator"
)

// Evaluator is the planner's view of the compiler (planner.Evaluator):
// it compiles plans and simulates their programs, and gives every plan a
// lower bound of that simulation without compiling it.
type Evaluator struct {
	job *ir.Job
	m   *cost.Model

	mu     sync.Mutex
	graphs map[setting]*factsOnce
}

// factsOnce computes one setting's facts once, while other settings'
// are computed alongside.
type factsOnce struct {
	once sync.Once
	f    *graphFacts
}

// setting is what the graph passes depend on.
type setting struct {
	rc ir.Recompute
	mb int64
	tp int // tensor-parallel degree (1: none)
	sp bool
}

// graphFacts are the plan-independent facts of a training graph that the
// bound needs.
type graphFacts struct {
	err error
	// compute is one micro-batch's forward and backward kernels, costed
	// as the simulator costs the kernels lowering makes of them, and its
	// tensor-parallel collectives (on the compute stream), at their
	// uncontended time.
	compute float64
	dp      ir.Factor // the data-parallel mesh the factors shard
	stages  []stageFacts
	// bySlack lists the stages with params by the backward compute
	// that hides their gradients' reduction (slack), least first.
	bySlack []int
	// saved is the bytes of every value a backward kernel reads that
	// forward made (or an input): all live while the last forward kernel
	// of a micro-batch runs.
	saved float64
	m     *cost.Model // the cost model at this micro-batch
	M     int64
	// job and state are the setting's job (forPlan's) and its graph
	// passes' state, which every plan of the setting distributes.
	job   *ir.Job
	state *passes.State
}

type stageFacts struct {
	group ir.StageGroup
	elems int64 // the stage's param elements, unpadded
	// before is the forward compute the stage runs before its first
	// kernel that reads one of its own params (stage 0 only).
	// Tensor-parallel collectives among it (slowed by contention by an
	// amount the bound does not know) make it unbounded, as they do
	// after and bwd.
	before float64
	// bwdReads says the stage's backward reads its own params, so they
	// must be gathered for it.
	bwdReads bool
	// after is the backward compute the stage runs after the last kernel
	// that writes one of its params' gradients; bwd all of its backward
	// compute (of one micro-batch).
	after, bwd float64
	// hidden is every earlier stage's bwd: with after, the backward
	// compute that hides the reduction of the gradients of the stages
	// up to this one in the last micro-batch (its slack).
	hidden float64
}

// NewEvaluator makes the evaluator of job under cost model m (the
// planner's Options.NewEvaluator).
func NewEvaluator(job *ir.Job, m *cost.Model) planner.Evaluator {
	return &Evaluator{job: job, m: m, graphs: map[setting]*factsOnce{}}
}

// Predict compiles each plan and simulates its program, in parallel;
// plans that do not compile get a nil prediction and their error. The
// prefetch depth is the one Compile picks: the deepest that fits.
func (ev *Evaluator) Predict(plans []cost.Plan) ([]*cost.Prediction, []error) {
	out := make([]*cost.Prediction, len(plans))
	errs := make([]error, len(plans))
	par.For(len(plans), func(i int) { out[i], errs[i] = ev.predict(plans[i]) })
	return out, errs
}

// Bounds bounds each plan (Bound), in parallel: first the graph passes
// of every setting the plans have, then the plans.
func (ev *Evaluator) Bounds(plans []cost.Plan) []planner.Bound {
	var settings []setting
	seen := map[setting]bool{}
	for _, p := range plans {
		if k := settingOf(ev.job, p); !seen[k] {
			seen[k] = true
			settings = append(settings, k)
		}
	}
	par.For(len(settings), func(i int) { ev.facts(settings[i]) })
	out := make([]planner.Bound, len(plans))
	par.For(len(plans), func(i int) {
		b := &out[i]
		b.Step, b.Mem, b.Err = ev.Bound(plans[i])
	})
	return out
}

func (ev *Evaluator) predict(p cost.Plan) (*cost.Prediction, error) {
	f := ev.facts(settingOf(ev.job, p))
	if f.err != nil {
		return nil, f.err
	}
	// The setting's graph passes ran once (facts); only the plan's
	// distribution runs here, as compile would run it.
	r, err := distribute(f.job, f.m, f.state, p, Options{Config: ev.m.Config, Passes: passes.Options{Unverified: true}})
	if err != nil {
		return nil, err
	}
	return prediction(r), nil
}

// settingOf is what the graph passes of plan p depend on.
func settingOf(job *ir.Job, p cost.Plan) setting {
	mb := p.MicroBatch
	if mb < 1 {
		mb = job.Train.MicroBatch
	}
	return setting{rc: p.Recompute, mb: mb, tp: max(p.Tensor, 1), sp: p.Sequence && p.Tensor > 1}
}

// prediction summarises a compiled plan's simulated step.
func prediction(r *Result) *cost.Prediction {
	tl, prog, m := r.Timeline, r.Program, r.Model
	pr := &cost.Prediction{Step: tl.Step, Compute: tl.Compute, Exposed: tl.Exposed,
		PeakBytes: tl.PeakBytes, PersistentBytes: tl.PersistentBytes, M: int64(r.Micro)}
	for _, sp := range tl.Spans {
		if sp.Stream != ir.Compute {
			pr.CommTime += sp.Dur
		}
	}
	for s := range prog.Streams {
		for _, in := range prog.Streams[s] {
			if in.Op == ir.Collective {
				cc := m.Topo.Collective(in.Coll, float64(in.Bytes), in.Group.Outer.Div(in.Group.Inner))
				pr.CommIntra += cc.Intra
				pr.CommInter += cc.Inter
			}
		}
	}
	trans := simulator.Transient(prog)
	for id, b := range prog.Buffers {
		if b.IsView() || trans[int32(id)] {
			continue
		}
		switch n := float64(b.Bytes()); {
		case strings.HasPrefix(b.Name, "OS."):
			pr.Optim += n
		case strings.HasPrefix(b.Name, "G."):
			pr.Grads += n
		default:
			pr.Params += n
		}
	}
	// Gradient buffers the step allocates count as gradients where the
	// peak holds them, not as activations.
	for _, id := range tl.PeakBuffers {
		if b := prog.Buffers[id]; !b.IsView() && strings.HasPrefix(b.Name, "G.") {
			pr.Grads += float64(b.Bytes())
		}
	}
	return pr
}

// facts runs the graph passes for a setting once; callers may ask for
// different settings at once.
func (ev *Evaluator) facts(k setting) *graphFacts {
	ev.mu.Lock()
	o, ok := ev.graphs[k]
	if !ok {
		o = &factsOnce{}
		ev.graphs[k] = o
	}
	ev.mu.Unlock()
	o.once.Do(func() { o.f = ev.computeFacts(k) })
	return o.f
}

// computeFacts runs the graph passes for setting k.
func (ev *Evaluator) computeFacts(k setting) *graphFacts {
	f := &graphFacts{}
	job, err := forPlan(ev.job, cost.Plan{Name: "bound", MicroBatch: k.mb, Tensor: k.tp, Sequence: k.sp})
	if err != nil {
		f.err = err
		return f
	}
	if f.m, err = cost.NewModel(job, ev.m.Config); err != nil {
		f.err = err
		return f
	}
	if f.M, err = job.Train.MicroBatches(job.DataParallel()); err != nil {
		f.err = err
		return f
	}
	f.dp = f.m.DP.DataMesh(k.tp)
	rc := k.rc
	var off []string
	if ev.m.Config.Unfused {
		off = []string{"fuse"}
	}
	s, err := passes.Run(job, passes.Options{Recompute: rc, Off: off, Unverified: true})
	if err != nil {
		f.err = err
		return f
	}
	f.job, f.state = job, s
	// A kernel's time as the simulator takes it from the instruction
	// lowering makes of op: its arguments' shapes (a scalar as one
	// element) and the first argument's dtype.
	kt := func(op *ir.Op) float64 {
		shapes := make([][]int64, len(op.Args))
		for i, a := range op.Args {
			shapes[i] = a.Shape
			if len(a.Shape) == 0 {
				shapes[i] = []int64{a.Shape.NumElements()}
			}
		}
		return f.m.Machine.KernelTime(op.Kind, shapes, op.Args[0].DType, op.Kind.Info().Flops(op))
	}
	// A tensor-parallel op's least time on the compute stream: its
	// collective over the group, uncontended, of the whole tensor's
	// bytes (as lowering sizes it); a slice's copy and the layout
	// kernels only add.
	tpGroup := ir.Factor{S0: k.tp, S1: 1}
	tpTime := func(op *ir.Op) (float64, bool) {
		var c ir.Coll
		bytes := float64(op.Out().Bytes())
		switch op.Kind {
		case ir.TPAllReduce:
			c = ir.AllReduce
		case ir.TPAllGather:
			c = ir.AllGather
		case ir.TPReduceScatter:
			c, bytes = ir.ReduceScatter, float64(op.Args[0].Bytes())
		case ir.TPSlice:
			return 0, true
		default:
			return 0, false
		}
		return minColl(f.m.Topo, c, bytes, tpGroup), true
	}
	// opTime is an op's least time on the compute stream; window says
	// the time is exact (a kernel's), so it may bound a window that hides
	// communication.
	opTime := func(op *ir.Op) (t float64, window bool) {
		if t, ok := tpTime(op); ok {
			return t, false
		}
		return kt(op), true
	}
	inf := math.Inf(1)
	bwd := map[*ir.Value]bool{}
	for _, ps := range s.Partition.Stages {
		for _, v := range ps.Bwd {
			bwd[v] = true
		}
	}
	paramOf := map[*ir.Value]*ir.Value{}
	for _, gp := range s.Grads {
		paramOf[gp.Grad] = gp.Param
	}
	counted := map[*ir.Value]bool{}
	for _, ps := range s.Partition.Stages {
		for _, op := range opsOf(ps.Bwd) {
			for _, a := range op.Args {
				if !bwd[a] && a.Role != ir.Param && !counted[a] {
					counted[a] = true
					f.saved += float64(a.Bytes())
				}
			}
		}
	}
	for i, ps := range s.Partition.Stages {
		st := stageFacts{group: ps.Group}
		own := map[*ir.Value]bool{}
		for _, p := range ps.Params {
			st.elems += p.Shape.NumElements()
			own[p] = true
		}
		reads := func(op *ir.Op) bool {
			for _, a := range op.Args {
				if own[a] {
					return true
				}
			}
			return false
		}
		seen := false
		for _, op := range opsOf(ps.Fwd) {
			t, exact := opTime(op)
			f.compute += t
			if i == 0 && !seen {
				switch {
				case reads(op):
					seen = true
				case !exact:
					st.before = inf
				default:
					st.before += t
				}
			}
		}
		for _, op := range opsOf(ps.Bwd) {
			t, exact := opTime(op)
			f.compute += t
			if !exact {
				t = inf
			}
			st.bwd += t
			st.bwdReads = st.bwdReads || reads(op)
			st.after += t
			for _, r := range op.Results {
				if p := paramOf[r]; p != nil && own[p] {
					st.after = 0
				}
			}
		}
		f.stages = append(f.stages, st)
	}
	var hidden float64
	for i, st := range f.stages {
		if st.elems > 0 {
			f.bySlack = append(f.bySlack, i)
			f.stages[i].hidden = hidden
		}
		hidden += st.bwd
	}
	slack := func(i int) float64 { return f.stages[i].hidden + f.stages[i].after }
	slices.SortStableFunc(f.bySlack, func(a, b int) int { return cmp.Compare(slack(a), slack(b)) })
	return f
}

// opsOf lists the ops computing vs, each once (as lowering emits them).
func opsOf(vs []*ir.Value) []*ir.Op {
	var out []*ir.Op
	seen := map[*ir.Op]bool{}
	for _, v := range vs {
		if op := v.Def; op != nil && !seen[op] {
			seen[op] = true
			out = append(out, op)
		}
	}
	return out
}

// Bound is a lower bound of plan p's simulated step and of the memory it
// needs, from facts every program lowered for p has (tested against the
// simulation of every candidate of the example models):
//
//   - the compute stream runs every forward and backward kernel of the M
//     micro-batches (accumulation, casts and the optimizer only add);
//   - before stage 0's first kernel that reads its params, the stage's
//     params must be gathered over s_p (flat or hierarchical, whichever is
//     cheaper) and, when s_os > s_p, last step's update spread over the
//     os/p mesh; only the compute before that kernel can hide it;
//   - the gather stream gathers every stage's params once, the stages
//     between the first and the last with params once per micro-batch,
//     and again for backward where backward reads them (over the
//     secondary group under hpZ);
//   - memory: the persistent P and OS shards, the GPU's reserve, and
//     every value backward reads that forward made: all of them are live
//     while the last forward kernel of the first micro-batch runs, so the
//     peak holds them, and the allocator's allowance applies to them;
//   - under tensor parallelism every count is of the rank's part (the
//     graph the tensor pass localized), the factors shard the
//     data-parallel mesh (GPUs per node / T x nodes), and the compute
//     stream also runs the tensor-parallel collectives, each at least
//     its uncontended time; a window of compute that holds one hides
//     an unknown amount (contention may slow it), so the bound takes it
//     to hide everything.
//
// Collective times only grow with size, so unpadded sizes bound padded
// ones from below; contention only slows collectives.
func (ev *Evaluator) Bound(p cost.Plan) (step, mem float64, err error) {
	f := ev.facts(settingOf(ev.job, p))
	if f.err != nil {
		return 0, 0, f.err
	}
	m := f.m
	pdt := float64(ev.job.Train.Precision.DType().Size())
	osb := float64(ev.job.Train.Precision.OptimBytesPerParam())
	M := float64(f.M)
	// The stages of a group repeat their sizes: each collective is
	// costed once per bound.
	type collKey struct {
		c     ir.Coll
		bytes float64
		g     ir.Factor
	}
	memo := map[collKey]float64{}
	coll := func(c ir.Coll, bytes float64, g ir.Factor) float64 {
		k := collKey{c, bytes, g}
		t, ok := memo[k]
		if !ok {
			t = minColl(m.Topo, c, bytes, g)
			memo[k] = t
		}
		return t
	}
	gather := func(bytes float64, g ir.Factor) float64 { return coll(ir.AllGather, bytes, g) }
	var lastFa ir.Factors
	var lastColls []ir.StateColl
	stateColls := func(fa ir.Factors) []ir.StateColl {
		if lastColls == nil || fa != lastFa {
			lastFa, lastColls = fa, ir.StateCollectives(fa, f.dp)
		}
		return lastColls
	}
	first, last := -1, -1
	for i, st := range f.stages {
		if st.elems > 0 {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	var idle, tail, busy float64
	mem = m.Reserve()
	for i, st := range f.stages {
		if st.elems == 0 {
			continue
		}
		fa := p.Groups[st.group]
		n := float64(st.elems)
		mem += n*pdt/float64(fa.P.Size()) + n*osb/float64(fa.OS.Size())
		// The stage's gathers, as the collectives pass emits them.
		var ag, agb, spread float64
		for _, c := range stateColls(fa) {
			switch c.Role {
			case ir.GatherForward:
				ag = gather(n*pdt, c.Mesh())
			case ir.GatherBackward:
				agb = gather(n*pdt, c.Mesh())
			case ir.Spread:
				spread = gather(n*pdt/float64(fa.P.Size()), c.Mesh())
			}
		}
		busy += ag
		if i != first && i != last {
			busy += (M - 1) * ag
			if st.bwdReads {
				busy += M * agb
			}
		}
		if i == 0 {
			idle = math.Max(0, math.Max(ag, spread)-st.before)
		}
	}
	// The tail: the gradients of stages 0..j are reduced on the reduce
	// stream, one after another (or fused into buckets where their
	// factors agree), after stage j's last gradient is written in the
	// last micro-batch; only the backward compute after that (the
	// stage's slack) hides them. Collective times grow with size, so no
	// stage's reduction exceeds all stages' (whole): the stages are
	// taken by their slack, least first, until whole less the slack
	// falls short of the tail found, with a margin for rounding (were
	// times not to grow with size, the tail would only be less, and
	// still a bound).
	var order []ir.Factors // the stages' factors, as they first come
	of := make([]int, len(f.stages))
	for i, st := range f.stages {
		if st.elems == 0 {
			continue
		}
		fa := p.Groups[st.group]
		k := slices.Index(order, fa)
		if k < 0 {
			k = len(order)
			order = append(order, fa)
		}
		of[i] = k
	}
	// upTo[i*G+k] is the gradient bytes of the stages 0..i with factors
	// order[k].
	G := len(order)
	upTo := make([]float64, len(f.stages)*G)
	sum := make([]float64, G)
	for i, st := range f.stages {
		if st.elems > 0 {
			sum[of[i]] += float64(st.elems) * pdt
		}
		copy(upTo[i*G:], sum)
	}
	var whole float64
	for k, fa := range order {
		whole += reduction(coll, sum[k], stateColls(fa), fa)
	}
	for _, i := range f.bySlack {
		st := f.stages[i]
		if whole-st.hidden-st.after < tail*(1-1e-9) {
			break
		}
		var red float64
		for k, fa := range order {
			if b := upTo[i*G+k]; b > 0 {
				red += reduction(coll, b, stateColls(fa), fa)
			}
		}
		tail = math.Max(tail, red-st.hidden-st.after)
	}
	mem += (1 + m.Config.Fragmentation) * f.saved
	return math.Max(M*f.compute+idle+tail, busy), mem, nil
}

// minColl is the cheaper of a collective's two lowerings: one flat call,
// or (for a group spanning nodes with several GPUs in each) the
// hierarchical phases the hierarchical pass would make; an all-gather
// may also be one the local CPU ranks share (cost.Topology.SharedGather),
// whichever is the cheapest.
func minColl(t *cost.Topology, c ir.Coll, bytes float64, g ir.Factor) float64 {
	if g.Size() <= 1 || bytes <= 0 {
		return 0
	}
	one := func(c ir.Coll, bytes float64, g ir.Factor) float64 {
		if c == ir.AllGather {
			return math.Min(t.Collective(c, bytes, g).Time, t.SharedGather(bytes, g).Time)
		}
		return t.Collective(c, bytes, g).Time
	}
	flat := one(c, bytes, g)
	if g.S1 <= 1 || g.S0 <= 1 || c == ir.Broadcast {
		return flat
	}
	k := float64(g.S0)
	intra, inter := ir.Factor{S0: g.S0, S1: 1}, ir.Factor{S0: 1, S1: g.S1}
	var h float64
	switch c {
	case ir.AllGather:
		h = one(c, bytes/k, inter) + one(c, bytes, intra)
	case ir.ReduceScatter:
		h = one(c, bytes, intra) + one(c, bytes/k, inter)
	case ir.AllReduce:
		h = one(ir.ReduceScatter, bytes, intra) + one(c, bytes/k, inter) +
			one(ir.AllGather, bytes, intra)
	}
	return math.Min(flat, h)
}

// reduction bounds the time of reducing a stage's gradient of bytes
// across the data-parallel mesh under factors f in the last
// micro-batch, whose state collectives are colls (ir.StateCollectives): the reduce-scatter onto the
// p-chunk, then the replicas' reduction of the p-chunk, lowered as the
// reduce-scatter creator makes it (ir.StateColl.Lowered) or, where the
// creator does not apply, as one all-reduce, whichever is cheaper
// (buckets only add latency).
func reduction(coll func(ir.Coll, float64, ir.Factor) float64, bytes float64, colls []ir.StateColl, f ir.Factors) float64 {
	var t float64
	for _, c := range colls {
		switch c.Role {
		case ir.ReduceGrads:
			t += coll(c.Coll, bytes, c.Mesh())
		case ir.ReplicaReduce:
			chunk := bytes / float64(f.P.Size())
			var split float64
			for _, l := range c.Lowered() {
				split += coll(l.Coll, chunk/float64(l.Div), l.Mesh)
			}
			t += math.Min(coll(c.Coll, chunk, c.Mesh()), split)
		}
	}
	return t
}
