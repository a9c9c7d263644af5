package simulator_test

import (
	"math"
	"strings"
	"testing"

	"amspc/compiler"
	"amspc/cost"
	"amspc/cost/profile"
	"amspc/internal/testjob"
	"amspc/ir"
	. "amspc/simulator"
)

// checkSpans checks the simulator's invariants on a timeline of p: a
// kernel lasts exactly the machine's KernelTime of its instruction (its
// kernel scale included), a collective never less than one flat call
// alone plus its overhead per collective. It returns how many
// collectives contention slowed.
func checkSpans(t *testing.T, p *ir.Program, m *cost.Machine, tl *Timeline) (slowed int) {
	t.Helper()
	packs := Packings(p)
	shared := SharedGathers(p, m)
	sharers := PackSharers(p, m)
	for _, sp := range tl.Spans {
		in := p.Streams[sp.Stream][sp.Index]
		switch in.Op {
		case ir.Kernel:
			var shapes [][]int64
			for _, a := range in.Args {
				b := p.Buffers[a]
				if len(b.Shape) > 0 {
					shapes = append(shapes, b.Shape)
				} else {
					shapes = append(shapes, []int64{b.Elems})
				}
			}
			want := m.KernelTime(in.Kern, shapes, p.Buffers[in.Args[0]].DType, in.Flops)
			if packs[sp.Stream][sp.Index] {
				pt := m.PackTime(in.Kern, p.Buffers[in.Args[1]].Shape)
				if sharers != nil && sharers[p.Root(in.Args[1])] > 1 {
					n := sharers[p.Root(in.Args[1])]
					pt *= PackShare(n, m.Topo.GPUsPerNode*m.Topo.Nodes, m.Topo.Profile.Processors())
				}
				want += pt
			}
			switch {
			case m.SharedCores && sp.Dur < want:
				t.Fatalf("%s %d %s: %g s, sooner than alone (KernelTime %g s)", ir.StreamName(sp.Stream), sp.Index, sp.Name, sp.Dur, want)
			case m.SharedCores && sp.Dur > want*(1+1e-9):
				slowed++
			case !m.SharedCores && sp.Dur != want:
				t.Fatalf("%s %d %s: %g s, KernelTime %g s", ir.StreamName(sp.Stream), sp.Index, sp.Name, sp.Dur, want)
			}
		case ir.Collective:
			g := in.Group.Outer.Div(in.Group.Inner)
			cc := m.Topo.Collective(in.Coll, float64(in.Bytes), g)
			if in.Coll == ir.AllGather && shared != nil && shared[in.Out] {
				cc = m.Topo.SharedGather(float64(in.Bytes), g)
			}
			solo := cc.Time + m.Overhead.Collective
			if sp.Dur < solo {
				t.Fatalf("%s %d %s: %g s, sooner than alone (%g s)", ir.StreamName(sp.Stream), sp.Index, sp.Name, sp.Dur, solo)
			}
			if sp.Dur > solo*(1+1e-9) {
				slowed++
			}
		default:
			t.Fatalf("%s %d: a span for %v", ir.StreamName(sp.Stream), sp.Index, in.Op)
		}
	}
	return slowed
}

// TestSimulateInvariants on tiny under every plan of the paper's space.
func TestSimulateInvariants(t *testing.T) {
	job := testjob.Load(t, "tiny")
	m, err := cost.NewModel(job, cost.DefaultConfig)
	if err != nil {
		t.Fatal(err)
	}
	mach := cost.NewMachine(job.Cluster, m.Topo)
	for _, f := range []cost.Factors{p2os8,
		{P: ir.Factor{S0: 4, S1: 2}, G: ir.Factor{S0: 4, S1: 2}, OS: ir.Factor{S0: 4, S1: 2}},
		{P: ir.Factor{S0: 1, S1: 1}, G: ir.Factor{S0: 1, S1: 1}, OS: ir.Factor{S0: 4, S1: 2}}} {
		prog := buildFor(t, f)
		tl, err := Simulate(prog, mach, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkSpans(t, prog, mach, tl)
	}
}

// TestSimulateOverhead: a machine's kernel scale and overhead per
// collective (a profile's) scale every kernel and lengthen every
// collective (checkSpans), so the compute stream's kernels take exactly
// the scale times as long, and with a scale of 1 the step grows.
func TestSimulateOverhead(t *testing.T) {
	job := testjob.Load(t, "tiny")
	m, err := cost.NewModel(job, cost.DefaultConfig)
	if err != nil {
		t.Fatal(err)
	}
	prog := buildFor(t, cost.Factors{P: ir.Factor{S0: 4, S1: 2}, G: ir.Factor{S0: 4, S1: 2}, OS: ir.Factor{S0: 4, S1: 2}})
	mach := cost.NewMachine(job.Cluster, m.Topo)
	mach.SharedCores = false // kernels exactly their time, not slowed by copies beside them
	base, err := Simulate(prog, mach, nil)
	if err != nil {
		t.Fatal(err)
	}
	mach.Overhead = cost.Overhead{KernelScale: 0.8, Collective: 300e-6}
	tl, err := Simulate(prog, mach, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkSpans(t, prog, mach, tl)
	if d := tl.Compute / base.Compute; math.Abs(d-0.8) > 1e-9 {
		t.Errorf("compute scaled by %g, want 0.8", d)
	}
	mach.Overhead = cost.Overhead{KernelScale: 1, Collective: 300e-6}
	if tl, err = Simulate(prog, mach, nil); err != nil {
		t.Fatal(err)
	}
	checkSpans(t, prog, mach, tl)
	if !(tl.Step > base.Step) || math.Abs(tl.Compute/base.Compute-1) > 1e-12 {
		t.Errorf("step %g s, compute %g s with 300 µs per collective; %g s, %g s without", tl.Step, tl.Compute, base.Step, base.Compute)
	}
}

// An instruction's overhead delays its stream by that much per
// instruction: without communication time, DDP's step grows by at least
// the compute stream's instructions' overhead and at most every
// stream's; a wake-up only delays.
func TestSimulateInstructionOverhead(t *testing.T) {
	job := testjob.Load(t, "tiny")
	m, err := cost.NewModel(job, cost.DefaultConfig)
	if err != nil {
		t.Fatal(err)
	}
	one := ir.Factor{S0: 1, S1: 1}
	prog := buildFor(t, cost.Factors{P: one, G: one, OS: one})
	mach := cost.NewMachine(job.Cluster, m.Topo)
	mach.SharedCores, mach.NoComm = false, true
	base, err := Simulate(prog, mach, nil)
	if err != nil {
		t.Fatal(err)
	}
	const c = 1e-6
	mach.Overhead = cost.Overhead{Instruction: c}
	tl, err := Simulate(prog, mach, nil)
	if err != nil {
		t.Fatal(err)
	}
	all := 0
	for s := range prog.Streams {
		all += len(prog.Streams[s])
	}
	lo, hi := c*float64(len(prog.Streams[ir.Compute])), c*float64(all)
	if d := tl.Step - base.Step; d < lo*(1-1e-9) || d > hi*(1+1e-9) {
		t.Errorf("the step grows by %g s with %g s an instruction; want %g to %g s", d, c, lo, hi)
	}
	mach.Overhead.Wake = 1e-3
	woken, err := Simulate(prog, mach, nil)
	if err != nil {
		t.Fatal(err)
	}
	if woken.Step < tl.Step {
		t.Errorf("a wake-up made the step shorter: %g s against %g s", woken.Step, tl.Step)
	}
}

// packProfile costs every kernel analytically and every packing of a
// [k, n] weight k·n ns.
type packProfile struct{}

func (packProfile) KernelTime(ir.OpKind, [][]int64, float64) (float64, bool) { return 0, false }
func (packProfile) HasPacks() bool                                           { return true }
func (packProfile) PackTime(_ ir.OpKind, k, n int64) (float64, bool) {
	return float64(k*n) * 1e-9, true
}

// A machine that costs packing apart adds each packing product's packing
// to its kernel, and nothing else: DDP packs each weight once for its
// micro-batches (tiny has two), ZeRO-3 every gathered weight at each use.
func TestSimulatePacking(t *testing.T) {
	job := testjob.Load(t, "tiny")
	m, err := cost.NewModel(job, cost.DefaultConfig)
	if err != nil {
		t.Fatal(err)
	}
	F := func(a, b int) ir.Factor { return ir.Factor{S0: a, S1: b} }
	for _, c := range []struct {
		f     cost.Factors
		share float64 // of the products that pack
	}{
		{cost.Factors{P: F(1, 1), G: F(1, 1), OS: F(1, 1)}, 0.5},
		{cost.Factors{P: F(4, 2), G: F(4, 2), OS: F(4, 2)}, 1},
	} {
		prog := buildFor(t, c.f)
		mach := cost.NewMachine(job.Cluster, m.Topo)
		mach.SharedCores = false
		base, err := Simulate(prog, mach, nil)
		if err != nil {
			t.Fatal(err)
		}
		mach.Kernels = packProfile{}
		tl, err := Simulate(prog, mach, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkSpans(t, prog, mach, tl)
		packs := Packings(prog)
		want, n, products := 0.0, 0, 0
		for s := range prog.Streams {
			for i, in := range prog.Streams[s] {
				if in.Op == ir.Kernel && (in.Kern == ir.MatMul || in.Kern == ir.MatMulGradA) {
					products++
					if packs[s][i] {
						w := prog.Buffers[in.Args[1]].Shape
						want += float64(w[0]*w[1]) * 1e-9
						n++
					}
				}
			}
		}
		if got := tl.Compute - base.Compute; math.Abs(got-want) > 1e-12 {
			t.Errorf("%v: packing adds %g s, the packing products' packs %g s", c.f, got, want)
		}
		if float64(n) != c.share*float64(products) {
			t.Errorf("%v: %d of %d products pack, want %g of them", c.f, n, products, c.share)
		}
	}
}

// TestSimulateSharedCores: on CPU ranks a kernel and the collectives
// copying beside it share the rank's processor, so ZeRO-3 of tiny (which
// gathers the next stage while computing) is slower than with separate
// engines, some kernel is slowed, and the work is conserved: the step is
// at least the busiest stream's work, and at most the sum of every
// stream's solo work plus the unshared step.
func TestSimulateSharedCores(t *testing.T) {
	job := testjob.Load(t, "tiny")
	m, err := cost.NewModel(job, cost.DefaultConfig)
	if err != nil {
		t.Fatal(err)
	}
	shared := cost.NewMachine(job.Cluster, m.Topo)
	if !shared.SharedCores {
		t.Fatal("the cpu preset's ranks do not share cores")
	}
	apart := *shared
	apart.SharedCores = false
	f := ir.Factor{S0: 4, S1: 2}
	prog := buildFor(t, cost.Factors{P: f, G: f, OS: f})
	a, err := Simulate(prog, &apart, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Simulate(prog, shared, nil)
	if err != nil {
		t.Fatal(err)
	}
	if checkSpans(t, prog, shared, s) == 0 {
		t.Error("no kernel or collective was slowed by sharing the processor")
	}
	var work float64 // every span's solo time
	for _, sp := range a.Spans {
		work += sp.Dur
	}
	if s.Step <= a.Step || s.Step > a.Step+work {
		t.Errorf("shared step %g s, with separate engines %g s, solo work %g s", s.Step, a.Step, work)
	}
	if s.Compute < a.Compute {
		t.Errorf("shared compute %g s < %g s alone", s.Compute, a.Compute)
	}
}

// TestSimulateSharedGathers: where the profile measured the all-gather
// the local CPU ranks share (all_gather_shared), ZeRO-3's gathers into
// buffers only gathers write take its time, not the plain gather's; a
// profile without those rows costs every gather as a plain one.
func TestSimulateSharedGathers(t *testing.T) {
	job := testjob.Load(t, "tiny")
	m, err := cost.NewModel(job, cost.DefaultConfig)
	if err != nil {
		t.Fatal(err)
	}
	f := ir.Factor{S0: 4, S1: 2}
	prog := buildFor(t, cost.Factors{P: f, G: f, OS: f})
	const plainRows = "collective,s0,s1,bytes,effective_gbps\nall_gather,4,2,4096,0.01\nall_gather,4,2,1e9,0.01\n"
	steps := map[bool]float64{}
	for _, withShared := range []bool{false, true} {
		text := plainRows
		if withShared {
			text += "all_gather_shared,4,2,4096,10\nall_gather_shared,4,2,1e9,10\n"
		}
		prof, err := profile.Parse("p.csv", strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		topo := *m.Topo
		topo.Profile = prof
		mach := cost.NewMachine(job.Cluster, &topo)
		tl, err := Simulate(prog, mach, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkSpans(t, prog, mach, tl)
		shareable := Shareable(prog)
		fast := 0
		for _, sp := range tl.Spans {
			in := prog.Streams[sp.Stream][sp.Index]
			if in.Op != ir.Collective || in.Coll != ir.AllGather {
				continue
			}
			plain := float64(in.Bytes) / 0.01e9
			switch {
			case withShared && shareable[in.Out]:
				if sp.Dur >= plain/100 {
					t.Errorf("%s: shared gather of %d bytes took %g s, the plain gather's %g s", sp.Name, in.Bytes, sp.Dur, plain)
				}
				fast++
			case sp.Dur < plain*(1-1e-9):
				t.Errorf("%s (shared rows %v, shareable %v): %g s, under the plain gather's %g s", sp.Name, withShared, shareable[in.Out], sp.Dur, plain)
			}
		}
		if withShared && fast == 0 {
			t.Error("ZeRO-3 of tiny has no gather into a shareable buffer")
		}
		steps[withShared] = tl.Step
	}
	if steps[true] >= steps[false] {
		t.Errorf("step with shared gathers %g s, not under %g s with plain ones", steps[true], steps[false])
	}

	// A product packing a weight the group gathered into one buffer
	// takes its share of the packing, which the group makes once: with
	// the cores apart (kernels exactly their time), checkSpans holds each
	// kernel to KernelTime plus PackTime over the weight's sharers.
	if packsSharedBy8(t, job, m, prog, plainRows+"all_gather_shared,4,2,4096,10\npack,k,n,seconds\nmatmul,64,64,0.001\nmatmul_grad_a,64,64,0.001\n") == 0 {
		t.Error("no product of ZeRO-3 packs a weight its group of 8 gathered into one buffer")
	}
}

// packsSharedBy8 simulates prog on job's cluster with the profile in
// text and the cores apart (kernels exactly their time), holds each
// kernel to KernelTime plus its PackShare of PackTime (checkSpans), and
// counts the products that pack a weight 8 local ranks share.
func packsSharedBy8(t *testing.T, job *ir.Job, m *cost.Model, prog *ir.Program, text string) int {
	t.Helper()
	prof, err := profile.Parse("p.csv", strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	topo := *m.Topo
	topo.Profile = prof
	mach := cost.NewMachine(job.Cluster, &topo)
	mach.Kernels, mach.SharedCores = prof, false
	tl, err := Simulate(prog, mach, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkSpans(t, prog, mach, tl)
	sharers, packs, n := PackSharers(prog, mach), Packings(prog), 0
	for s := range prog.Streams {
		for i, in := range prog.Streams[s] {
			if packs[s][i] && sharers[prog.Root(in.Args[1])] == 8 {
				n++
			}
		}
	}
	return n
}

// TestPackShare: a shared packing costs each sharer its share of the
// group's one packing, and never less than one rank's packing alone.
func TestPackShare(t *testing.T) {
	for _, c := range []struct {
		n, ranks, procs int
		want            float64
	}{
		{2, 2, 2, 1},      // one packs, its partner waits
		{2, 2, 0, 0.5},    // processors unknown: the share
		{2, 8, 2, 0.5},    // 4 ranks a processor: 2 packings' work on each
		{4, 8, 2, 0.25},   // one packing's work on each processor
		{8, 8, 2, 0.25},   // one rank packing, alone on its processor
		{2, 2, 16, 1},     // more processors than ranks
		{8, 16, 4, 0.25},  // a packing alone is 4/16 of the profiled one
		{16, 16, 4, 0.25}, // ditto
	} {
		if got := PackShare(c.n, c.ranks, c.procs); got != c.want {
			t.Errorf("PackShare(%d sharers, %d ranks, %d processors) = %g, want %g", c.n, c.ranks, c.procs, got, c.want)
		}
	}
}

// TestSimulateLLaMAContention: ZeRO-3 of LLaMA-7B on 2 nodes gathers the
// next stage's params while the last stage's gradients are
// reduce-scattered, both over the NICs: some collectives are slowed, none
// beyond the invariants.
func TestSimulateLLaMAContention(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles LLaMA-7B")
	}
	job := testjob.Load(t, "llama-7b", `cluster a800_x16 { nodes = 2 gpus_per_node = 8 gpu = "A800-80GB" inter_node_bw = 100 GB/s }`,
		"train { seq_len = 4096 micro_batch = 1 global_batch = 32 precision = bf16\n optimizer = adamw(lr=1e-4, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1) }")
	dp := ir.Factor{S0: 8, S1: 2}
	r, err := compiler.Compile(job, cost.Uniform("zero3", cost.Factors{P: dp, G: dp, OS: dp}, ir.RecomputeNone, 1), compiler.Options{Depth: 2})
	if err != nil {
		t.Fatal(err)
	}
	mach := cost.NewMachine(r.Job.Cluster, r.Model.Topo)
	tl, err := Simulate(r.Program, mach, compiler.StageNames(r.Program))
	if err != nil {
		t.Fatal(err)
	}
	if n := checkSpans(t, r.Program, mach, tl); n == 0 {
		t.Error("no collective slowed by another")
	}
	if tl.Step < tl.Compute || tl.Compute <= 0 {
		t.Errorf("step %g, compute %g", tl.Step, tl.Compute)
	}
}

// twoCollectives runs collective a on the gather stream and b on the
// reduce stream, both from time 0.
func twoCollectives(t *testing.T, m *cost.Machine, a, b ir.Instr) (da, db float64) {
	t.Helper()
	buf := ir.Buffer{Name: "x", DType: ir.BF16, Elems: 1 << 29, Parent: -1}
	p := &ir.Program{Buffers: []ir.Buffer{buf, buf, buf, buf}}
	a.In, a.Out, b.In, b.Out = 0, 1, 2, 3
	p.Streams[ir.CommGather] = []ir.Instr{a}
	p.Streams[ir.CommReduce] = []ir.Instr{b}
	tl, err := Simulate(p, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkSpans(t, p, m, tl)
	if len(tl.Spans) != 2 {
		t.Fatalf("%d spans", len(tl.Spans))
	}
	return tl.Spans[0].Dur, tl.Spans[1].Dur
}

func coll(c ir.Coll, s0, s1 int, bytes int64) ir.Instr {
	return ir.Instr{Op: ir.Collective, Coll: c, Group: ir.Group{Outer: ir.Factor{S0: s0, S1: s1}, Inner: ir.Factor{S0: 1, S1: 1}},
		Bytes: bytes, DType: ir.BF16, Stage: -1, Micro: -1}
}

// TestContention: two collectives at once on the same links share their
// bandwidth (both slower than alone; equal ones each move at half speed
// while both move bytes); on different links (NVLink inside a node, the
// NIC for one GPU per node) neither slows.
func TestContention(t *testing.T) {
	topo := &cost.Topology{GPUsPerNode: 8, Nodes: 4, IntraBW: 200e9, InterBW: 100e9, IntraLatency: 3.4e-6, InterLat: 14e-6}
	m := &cost.Machine{Topo: topo, PeakFLOPS: 312e12, Efficiency: 0.5, MemBW: 2e12, MatMulHalf: 64}
	solo := func(in ir.Instr) cost.CollCost {
		return topo.Collective(in.Coll, float64(in.Bytes), in.Group.Outer.Div(in.Group.Inner))
	}
	near := func(what string, got, want float64) {
		t.Helper()
		if d := got - want; d > 1e-9*want || d < -1e-9*want {
			t.Errorf("%s: %g s, want %g s", what, got, want)
		}
	}
	for _, c := range []struct {
		name string
		a, b ir.Instr
	}{
		{"inside the node", coll(ir.AllGather, 8, 1, 1<<30), coll(ir.ReduceScatter, 8, 1, 1<<30)},
		{"across nodes", coll(ir.AllGather, 8, 4, 1<<30), coll(ir.ReduceScatter, 8, 4, 1<<30)},
		{"one GPU per node", coll(ir.AllGather, 1, 4, 1<<30), coll(ir.AllReduce, 1, 4, 1<<30)},
	} {
		da, db := twoCollectives(t, m, c.a, c.b)
		sa, sb := solo(c.a), solo(c.b)
		if !(da > sa.Time && db > sb.Time) {
			t.Errorf("%s: %g s and %g s, alone %g s and %g s: want both slower", c.name, da, db, sa.Time, sb.Time)
		}
		if c.a.Coll == ir.AllGather && c.b.Coll == ir.ReduceScatter {
			// Same bytes and latency: both move at half speed
			// throughout.
			near(c.name, da, sa.Latency+2*(sa.Time-sa.Latency))
			near(c.name, db, da)
		}
	}
	// Inside the node against one GPU per node: NVLink and the NIC.
	intra, inter := coll(ir.AllGather, 8, 1, 1<<30), coll(ir.ReduceScatter, 1, 4, 1<<28)
	da, db := twoCollectives(t, m, intra, inter)
	near("intra beside inter", da, solo(intra).Time)
	near("inter beside intra", db, solo(inter).Time)
	// A flat ring across nodes also uses NVLink: an intra-node
	// collective beside it slows.
	flat := coll(ir.AllGather, 8, 4, 1<<30)
	da, db = twoCollectives(t, m, intra, flat)
	if !(da > solo(intra).Time && db > solo(flat).Time) {
		t.Errorf("intra %g s (alone %g s) beside a flat ring across nodes %g s (alone %g s): want both slower", da, solo(intra).Time, db, solo(flat).Time)
	}
}

// BenchmarkSimulate replays LLaMA-2-70B's program on 2048 H100s (about
// 15k instructions).
func BenchmarkSimulate(b *testing.B) {
	job := testjob.Load(b, "llama2-70b-gqa")
	dp := ir.Factor{S0: 8, S1: 256}
	r, err := compiler.Compile(job, cost.Uniform("zero3", cost.Factors{P: dp, G: dp, OS: dp}, ir.RecomputeFull, 1), compiler.Options{Depth: 2})
	if err != nil {
		b.Fatal(err)
	}
	mach := cost.NewMachine(r.Job.Cluster, r.Model.Topo)
	n := 0
	for _, s := range r.Program.Streams {
		n += len(s)
	}
	b.ReportMetric(float64(n), "instrs")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Simulate(r.Program, mach, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// TestPackSharersReplicas: DDP's weights are replicated on every rank,
// and the 8 local ranks of tiny's 2 x 4 cluster hold equal copies, whose
// packing one of them makes for all (engine's replicaMemo): each product
// packing a replica pays its share of that packing (checkSpans), as a
// gathered weight's does. Without shared rows in the profile (ranks that
// are not goroutines of one process) there are no sharers.
func TestPackSharersReplicas(t *testing.T) {
	job := testjob.Load(t, "tiny")
	m, err := cost.NewModel(job, cost.DefaultConfig)
	if err != nil {
		t.Fatal(err)
	}
	one := ir.Factor{S0: 1, S1: 1}
	prog := buildFor(t, cost.Factors{P: one, G: one, OS: one})
	if packsSharedBy8(t, job, m, prog, "# gomaxprocs = 2\ncollective,s0,s1,bytes,effective_gbps\nall_reduce,4,2,4096,0.01\nall_gather_shared,4,2,4096,10\npack,k,n,seconds\nmatmul,64,64,0.001\nmatmul_grad_a,64,64,0.001\n") == 0 {
		t.Error("no product of DDP packs a weight all 8 local ranks hold a copy of")
	}
	plain, err := profile.Parse("p.csv", strings.NewReader("collective,s0,s1,bytes,effective_gbps\nall_reduce,4,2,4096,0.01\npack,k,n,seconds\nmatmul,64,64,0.001\n"))
	if err != nil {
		t.Fatal(err)
	}
	topo := *m.Topo
	topo.Profile = plain
	if s := PackSharers(prog, cost.NewMachine(job.Cluster, &topo)); s != nil {
		t.Errorf("a profile without shared gathers shares packings: %v", s)
	}
}
