package simulator_test

import (
	"math"
	"strings"
	"testing"

	"amspc/cost"
	"amspc/cost/profile"
	"amspc/internal/testjob"
	"amspc/ir"
	. "amspc/simulator"
)

// gateProgram is three ranks' template on one node: compute runs K1,
// records e0, runs K2, waits for e1 and runs K3; the comm stream waits
// for e0, all-reduces over the three ranks and records e1. Each kernel
// does 1.5e9 FLOPs: 1.5 s at 1 GFLOP/s (shared evenly by 3 ranks on 2
// cores), 1 s on a core of its own.
func gateProgram() (*ir.Program, *cost.Machine) {
	p := &ir.Program{Events: 2}
	b := p.AddBuffer(ir.Buffer{Name: "x", DType: ir.F32, Elems: 1 << 10, Parent: -1})
	k := func() ir.Instr {
		return ir.Instr{Op: ir.Kernel, Kern: ir.Add, Args: []int32{b, b}, Outs: []int32{b}, Flops: 1.5e9, Stage: -1, Micro: -1}
	}
	p.Streams[ir.Compute] = []ir.Instr{
		k(), {Op: ir.Record, Event: 0}, k(), {Op: ir.Wait, Event: 1}, k(),
	}
	all := ir.Group{Outer: ir.Factor{S0: 3, S1: 1}, Inner: ir.Factor{S0: 1, S1: 1}}
	p.Streams[ir.CommGather] = []ir.Instr{
		{Op: ir.Wait, Event: 0},
		{Op: ir.Collective, Coll: ir.AllReduce, Group: all, Bytes: 4 << 10, DType: ir.F32, In: b, Out: b, Stage: -1, Micro: -1},
		{Op: ir.Record, Event: 1},
	}
	topo := &cost.Topology{GPUsPerNode: 3, Nodes: 1, IntraBW: 1e9, InterBW: 1e9}
	m := &cost.Machine{Topo: topo, PeakFLOPS: 1e9, Efficiency: 1, SharedCores: true, NoComm: true}
	return p, m
}

// Three ranks on two cores, the gate's queue worked by hand (c = 1 s,
// a kernel on a core of its own): ranks 0 and 1 run K1 and K2 holding
// their cores (a record gives nothing up) while rank 2 waits; at 2c
// they give them up at their waits and rank 2 runs K1 and K2 (to 4c);
// the all-reduce needs rank 2's K1 and ends at 3c (no time); at 3c rank
// 0 takes the free core for K3, rank 1 queues until rank 2 waits at 4c,
// and rank 2's K3 queues behind it: the last K3 ends at 5c. Shared
// evenly, every rank runs each kernel in 1.5c: 4.5c.
func TestGatedQueuesForCores(t *testing.T) {
	p, m := gateProgram()
	got, err := Gated(p, m, 2)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(got-5) > 1e-9 {
		t.Errorf("gated step %g s, want 5 s", got)
	}
	tl, err := Simulate(p, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(tl.Step-4.5) > 1e-9 {
		t.Errorf("evenly shared step %g s, want 4.5 s", tl.Step)
	}
	// With the profile saying the ranks shared 2 cores, Simulate's step
	// stays the evenly shared one: no rank meets its partners on its
	// compute stream.
	m.Overhead.Cores = 2
	if MeetsInCompute(p) {
		t.Error("the program meets on its compute stream")
	}
	if tl, err = Simulate(p, m, nil); err != nil || math.Abs(tl.Step-4.5) > 1e-9 {
		t.Errorf("Simulate with 2 cores: %v, %v", tl, err)
	}
	// With the all-reduce on the compute stream, between K2 and K3, it is
	// the gated one.
	comp := p.Streams[ir.Compute]
	q := *p
	q.Streams[ir.Compute] = []ir.Instr{comp[0], comp[2], p.Streams[ir.CommGather][1], comp[4]}
	q.Streams[ir.CommGather] = nil
	if !MeetsInCompute(&q) {
		t.Error("the program with the all-reduce on its compute stream does not meet there")
	}
	want, err := Gated(&q, m, 2)
	if err != nil {
		t.Fatal(err)
	}
	if tl, err = Simulate(&q, m, nil); err != nil || tl.Step != want {
		t.Errorf("Simulate with 2 cores and the all-reduce on the compute stream: %v, %v; want the gated %g s", tl, err, want)
	}
	if _, err := Gated(p, m, 3); err == nil {
		t.Error("3 ranks on 3 cores: no error")
	}
}

// On a compiled program the gated step is at least the evenly shared
// kernels' sum (the cores' work: the planner's bound), the same every
// time, and with kernels alone (no waits, no collectives) equal to it.
func TestGatedBounds(t *testing.T) {
	job := testjob.Load(t, "tiny")
	mod, err := cost.NewModel(job, cost.DefaultConfig)
	if err != nil {
		t.Fatal(err)
	}
	m := cost.NewMachine(job.Cluster, mod.Topo)
	m.SharedCores = true
	m.Overhead.Instruction = 2e-6
	for _, f := range []cost.Factors{p2os8,
		{P: ir.Factor{S0: 4, S1: 2}, G: ir.Factor{S0: 4, S1: 2}, OS: ir.Factor{S0: 4, S1: 2}},
		{P: ir.Factor{S0: 1, S1: 1}, G: ir.Factor{S0: 1, S1: 1}, OS: ir.Factor{S0: 1, S1: 1}}} {
		prog := buildFor(t, f)
		tl, err := Simulate(prog, m, nil)
		if err != nil {
			t.Fatal(err)
		}
		g1, err := Gated(prog, m, 2)
		if err != nil {
			t.Fatal(err)
		}
		g2, _ := Gated(prog, m, 2)
		if g1 != g2 {
			t.Errorf("%v: %g s, then %g s", f, g1, g2)
		}
		if g1 < tl.Compute*(1-1e-9) {
			t.Errorf("%v: gated step %g s, below the kernels' %g s", f, g1, tl.Compute)
		}
		t.Logf("%v: gated %.4g s, evenly shared %.4g s (kernels %.4g s)", f, g1, tl.Step, tl.Compute)

		// The compute stream's kernels alone.
		var only ir.Program = *prog
		only.Streams = [ir.NumStreams][]ir.Instr{}
		for _, in := range prog.Streams[ir.Compute] {
			if in.Op == ir.Kernel {
				only.Streams[ir.Compute] = append(only.Streams[ir.Compute], in)
			}
		}
		mm := *m
		mm.Overhead.Instruction = 0
		a, err := Simulate(&only, &mm, nil)
		if err != nil {
			t.Fatal(err)
		}
		g, err := Gated(&only, &mm, 2)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(g-a.Step) > 1e-9*a.Step {
			t.Errorf("%v, kernels alone: gated %g s, evenly shared %g s", f, g, a.Step)
		}
	}
}

// fixedProgram is four ranks' template on one node, each pair (0 1, 2
// 3) a group: compute runs K1, all-reduces 1,000 bytes over its pair and
// runs K2. The profile times that all-reduce at 1 s, and moves 1e9 bytes
// in 2 s (0.5 GB/s, its peak): the small call is 1 s of the members
// meeting and 2 µs of copying. Each kernel is 1 s on a core of its own.
func fixedProgram(t *testing.T) (*ir.Program, *cost.Machine) {
	t.Helper()
	p := &ir.Program{}
	b := p.AddBuffer(ir.Buffer{Name: "x", DType: ir.F32, Elems: 250, Parent: -1})
	k := ir.Instr{Op: ir.Kernel, Kern: ir.Add, Args: []int32{b, b}, Outs: []int32{b}, Flops: 2e9, Stage: -1, Micro: -1}
	pair := ir.Group{Outer: ir.Factor{S0: 2, S1: 1}, Inner: ir.Factor{S0: 1, S1: 1}}
	p.Streams[ir.Compute] = []ir.Instr{
		k,
		{Op: ir.Collective, Coll: ir.AllReduce, Group: pair, Bytes: 1000, DType: ir.F32, In: b, Out: b, Stage: -1, Micro: -1},
		k,
	}
	prof, err := profile.Parse("p.csv", strings.NewReader("collective,s0,s1,bytes,effective_gbps\nall_reduce,2,1,1000,1e-6\nall_reduce,2,1,1e9,0.5\n"))
	if err != nil {
		t.Fatal(err)
	}
	topo := &cost.Topology{GPUsPerNode: 4, Nodes: 1, IntraBW: 1e9, InterBW: 1e9, Profile: prof}
	return p, &cost.Machine{Topo: topo, PeakFLOPS: 1e9, Efficiency: 1, SharedCores: true}
}

// A collective's time beyond its bytes at the profile's peak rate is the
// members meeting, in which they leave the cores to the others. By hand
// (c = 1 s): ranks 0 and 1 run K1 to 1c while 2 and 3 wait; then 0 and 1
// meet (1c, no core) while 2 and 3 run their K1, all at full speed, to
// 2c; then 0 and 1 run K2 while 2 and 3 meet, and 2 and 3 run K2 to 4c
// (and the copying's 2 µs): the cores never idle. Were the whole call
// copying (a core's load for the pair), a meeting and the two kernels
// beside it would share 2 cores three ways and take 1.5c: 5c.
func TestGatedFixedPartLeavesTheCores(t *testing.T) {
	p, m := fixedProgram(t)
	got, err := Gated(p, m, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got < 4 || got > 4+1e-4 {
		t.Errorf("gated step %g s, want 4 s and the copying's microseconds", got)
	}
	// The same call's time, all of it at its own rate (one size measured:
	// its rate is its peak), copies, and loads the cores.
	prof, err := profile.Parse("p.csv", strings.NewReader("collective,s0,s1,bytes,effective_gbps\nall_reduce,2,1,1000,1e-6\n"))
	if err != nil {
		t.Fatal(err)
	}
	m.Topo.Profile = prof
	if got, err = Gated(p, m, 2); err != nil || math.Abs(got-5) > 1e-4 {
		t.Errorf("gated step with the call all copying: %g s (%v), want 5 s", got, err)
	}
}
