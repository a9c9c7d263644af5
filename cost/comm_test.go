package cost

import (
	"math"
	"math/rand"
	"strings"
	"testing"

	"amspc/cluster"
	"amspc/ir"
)

// testTopo: 4 nodes of 8 GPUs, 200 GB/s NVLink, 100 GB/s of NICs per node,
// NCCL's default hop latencies (so its table applies unscaled).
var testTopo = &Topology{GPUsPerNode: 8, Nodes: 4, IntraBW: 200e9, InterBW: 100e9, IntraLatency: 3.4e-6, InterLat: 14e-6}

// TestCollectiveHandComputed pins each collective on hand-computed cases:
// NCCL's base latency + hops x per-hop latency + size x bus factor / bus
// bandwidth, for the algorithm and protocol NCCL's model picks.
func TestCollectiveHandComputed(t *testing.T) {
	const GB, us = 1e9, 1e-6
	cases := []struct {
		name  string
		c     Coll
		g     ir.Factor
		bytes float64
		want  float64
		algo  string
	}{
		// 8.4 µs + 7 hops x 3.4 µs + 1 GB x 7/8 / 200 GB/s
		{"all_gather 8x1", AllGather, ir.Factor{S0: 8, S1: 1}, GB, (8.4+7*3.4)*us + 0.875*GB/200e9, "ring/Simple"},
		{"reduce_scatter 4x1", ReduceScatter, ir.Factor{S0: 4, S1: 1}, GB, (8.4+3*3.4)*us + 0.75*GB/200e9, "ring/Simple"},
		// ring: 8.4 + 14 x 3.4 µs + 2 x 7/8 GB / 200 GB/s beats the
		// tree's 2 GB / (0.92 x 200 GB/s)
		{"all_reduce 8x1", AllReduce, ir.Factor{S0: 8, S1: 1}, GB, (8.4+14*3.4)*us + 1.75*GB/200e9, "ring/Simple"},
		{"broadcast 8x1", Broadcast, ir.Factor{S0: 8, S1: 1}, GB, (8.4+8*3.4)*us + GB/200e9, "ring/Simple"},
		// flat ring of 32 over the NIC (100 GB/s for a full-node group):
		// 56 NVLink hops x 3.4 µs, 6 network hops x 14 µs
		{"all_reduce 8x4", AllReduce, ir.Factor{S0: 8, S1: 4}, GB, (8.4+56*3.4+6*14)*us + 2*31.0/32*GB/100e9, "ring/Simple"},
		// small: the tree's 2 x (7 NVLink hops + log2(4) network hops)
		// with LL (0.6 and 5 µs per hop, 0.92/3.8 of the bandwidth)
		{"small all_reduce 8x4", AllReduce, ir.Factor{S0: 8, S1: 4}, 65536, (6.8+2*(7*0.6+2*5.0))*us + 2*65536/(100e9*0.92/3.8), "tree/LL"},
		// one GPU per node: 8 such rings share the NIC (12.5 GB/s each),
		// every hop at the network tree's latency
		{"all_gather 1x4", AllGather, ir.Factor{S0: 1, S1: 4}, GB, (8.4+3*14)*us + 0.75*GB/12.5e9, "ring/Simple"},
	}
	for _, c := range cases {
		got := testTopo.Collective(c.c, c.bytes, c.g)
		near(t, c.name, got.Time, c.want)
		if got.Algo != c.algo || got.Hierarchical {
			t.Errorf("%s: %s (hierarchical %v), want flat %s", c.name, got.Algo, got.Hierarchical, c.algo)
		}
	}
	if (testTopo.Collective(AllGather, GB, ir.Factor{S0: 1, S1: 1})) != (CollCost{}) {
		t.Error("a group of one GPU must cost nothing")
	}
	if (testTopo.Collective(AllGather, 0, ir.Factor{S0: 8, S1: 1})) != (CollCost{}) {
		t.Error("zero bytes must cost nothing")
	}
}

// A preset cluster of 128 nodes x 8.
func presetTopo(t *testing.T, gpu string) *Topology {
	t.Helper()
	g, ok := cluster.LookupGPU(gpu)
	if !ok {
		t.Fatalf("no preset %s", gpu)
	}
	return NewTopology(&ir.Cluster{Nodes: 128, GPUsPerNode: 8, GPU: g, IntraBW: g.IntraBW, InterBW: g.InterBW})
}

// TestRingTreeCrossover: on 1024 GPUs NCCL's tree all-reduce wins up to
// gigabytes (its latency grows with log2 of the nodes, the ring's with the
// ranks), and the ring's better bandwidth wins beyond.
func TestRingTreeCrossover(t *testing.T) {
	topo := presetTopo(t, "A800-80GB")
	g := ir.Factor{S0: 8, S1: 128}
	var algos []string
	for b := 1.0; b <= 64<<30; b *= 2 {
		a := strings.Split(topo.Collective(AllReduce, b, g).Algo, "/")[0]
		if len(algos) == 0 || algos[len(algos)-1] != a {
			algos = append(algos, a)
		}
	}
	if strings.Join(algos, " ") != "tree ring" {
		t.Errorf("all-reduce over 8x128 by size: %v, want tree then ring", algos)
	}
	// All-gather and reduce-scatter have no tree.
	for _, c := range []Coll{AllGather, ReduceScatter, Broadcast} {
		for _, b := range []float64{8, 1 << 20, 1 << 30} {
			if a := topo.Collective(c, b, g).Algo; !strings.HasPrefix(a, "ring/") {
				t.Errorf("%v of %g B: %s, want a ring", c, b, a)
			}
		}
	}
}

// TestLatencyGrowsWithRanks: a tiny collective's time grows with the
// group, inside a node and across nodes.
func TestLatencyGrowsWithRanks(t *testing.T) {
	topo := presetTopo(t, "H100-80GB")
	for c := Coll(0); c < NumColls; c++ {
		prev := 0.0
		for _, g := range []ir.Factor{{S0: 2, S1: 1}, {S0: 4, S1: 1}, {S0: 8, S1: 1}, {S0: 8, S1: 2}, {S0: 8, S1: 4}, {S0: 8, S1: 16}, {S0: 8, S1: 128}} {
			tm := topo.Collective(c, 8, g).Time
			if tm <= prev {
				t.Errorf("%v of 8 B over %v: %g s, not more than the smaller group's %g s", c, g, tm, prev)
			}
			prev = tm
		}
	}
}

// TestCrossNodeSlowerPerByte: the same bytes over a group spanning nodes
// reach a lower bus bandwidth than inside a node (the NIC share per GPU
// is below NVLink on every GPU preset).
func TestCrossNodeSlowerPerByte(t *testing.T) {
	for _, gpu := range []string{"A100-80GB", "A800-80GB", "H100-80GB", "H800-80GB", "H200-141GB"} {
		topo := presetTopo(t, gpu)
		for c := Coll(0); c < NumColls; c++ {
			busbw := func(g ir.Factor) float64 {
				const b = 1 << 30
				return b * c.BusFactor(g.Size()) / topo.Collective(c, b, g).Time
			}
			in, across := busbw(ir.Factor{S0: 8, S1: 1}), busbw(ir.Factor{S0: 8, S1: 2})
			if !(across < in) {
				t.Errorf("%s %v: bus bandwidth %g across 2 nodes, %g inside one", gpu, c, across, in)
			}
		}
	}
}

// TestCollectiveMonotone: the invariants the planner's lower bound needs.
// On every preset, collective and group shape, the time of a flat call
// (and of the compiler's lowering) is nondecreasing in bytes from 1 B to
// 16 GiB, never negative, and the same every call.
func TestCollectiveMonotone(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var sizes []float64
	for b := 1.0; b <= 16<<30; b *= 2 {
		sizes = append(sizes, b, b*(1+rng.Float64()))
	}
	sizes = append(sizes, 16<<30)
	for i := 1; i < len(sizes); i++ { // sorted
		for j := i; j > 0 && sizes[j] < sizes[j-1]; j-- {
			sizes[j], sizes[j-1] = sizes[j-1], sizes[j]
		}
	}
	var groups []ir.Factor
	for _, s0 := range []int{1, 2, 4, 8} {
		for _, s1 := range []int{1, 2, 4, 16, 128} {
			groups = append(groups, ir.Factor{S0: s0, S1: s1})
		}
	}
	for _, gpu := range cluster.GPUPresets {
		topo := presetTopo(t, gpu.Name)
		for c := Coll(0); c < NumColls; c++ {
			for _, g := range groups {
				prev, prevLow := 0.0, 0.0
				for _, b := range sizes {
					cc := topo.Collective(c, b, g)
					low := topo.Lowered(c, b, g)
					if cc != topo.Collective(c, b, g) {
						t.Fatalf("%s %v %v %g B: not deterministic", gpu.Name, c, g, b)
					}
					if cc.Time < 0 || cc.Latency < 0 || cc.Latency > cc.Time || math.IsNaN(cc.Time) {
						t.Fatalf("%s %v %v %g B: time %g latency %g", gpu.Name, c, g, b, cc.Time, cc.Latency)
					}
					if cc.Time < prev || low.Time < prevLow {
						t.Fatalf("%s %v %v: %g B takes %g s (lowered %g), less than a smaller size's %g s (%g)", gpu.Name, c, g, b, cc.Time, low.Time, prev, prevLow)
					}
					if low.Time > cc.Time {
						t.Fatalf("%s %v %v %g B: lowered %g s slower than flat %g s", gpu.Name, c, g, b, low.Time, cc.Time)
					}
					if cc.NVLinkLoad < 0 || cc.NVLinkLoad > 1 || cc.NICLoad < 0 || cc.NICLoad > 1 {
						t.Fatalf("%s %v %v %g B: loads %g %g", gpu.Name, c, g, b, cc.NVLinkLoad, cc.NICLoad)
					}
					prev, prevLow = cc.Time, low.Time
				}
			}
		}
	}
}

// TestGroupMonotone: a larger group never makes a collective cheaper at
// equal size.
func TestGroupMonotone(t *testing.T) {
	var groups []ir.Factor
	for _, s0 := range []int{1, 2, 4, 8} {
		groups = append(groups, ir.Factor{S0: s0, S1: 1})
	}
	for _, s1 := range []int{2, 4} {
		groups = append(groups, ir.Factor{S0: 8, S1: s1})
	}
	for c := Coll(0); c < NumColls; c++ {
		for _, size := range []float64{1 << 10, 1 << 20, 1 << 30} {
			for i := 1; i < len(groups); i++ {
				a := testTopo.Collective(c, size, groups[i-1]).Time
				b := testTopo.Collective(c, size, groups[i]).Time
				if b < a {
					t.Errorf("%v of %g B: %v takes %g s, less than %v at %g s", c, size, groups[i], b, groups[i-1], a)
				}
			}
		}
	}
}

// TestHierarchicalFaster: the compiler lowers a small all-gather over
// 1024 GPUs (128 network hops instead of 1023 ring hops), not a large one
// (the flat ring moves the same NIC bytes while overlapping its NVLink
// hops); never a group inside a node or with one GPU per node, never a
// broadcast. Lowered costs what the compiler emits.
func TestHierarchicalFaster(t *testing.T) {
	topo := presetTopo(t, "A800-80GB")
	g := ir.Factor{S0: 8, S1: 128}
	if !topo.HierarchicalFaster(AllGather, 1<<20, g) {
		t.Error("a 1 MiB all-gather over 8x128 should be lowered")
	}
	if topo.HierarchicalFaster(AllGather, 1<<30, g) {
		t.Error("a 1 GiB all-gather over 8x128 should stay flat")
	}
	for _, c := range []struct {
		c Coll
		g ir.Factor
	}{{AllGather, ir.Factor{S0: 8, S1: 1}}, {AllReduce, ir.Factor{S0: 1, S1: 128}}, {Broadcast, g}} {
		if topo.HierarchicalFaster(c.c, 1<<20, c.g) {
			t.Errorf("%v over %v cannot be lowered", c.c, c.g)
		}
	}
	low := topo.Lowered(AllGather, 1<<20, g)
	phases := topo.Collective(AllGather, (1<<20)/8, ir.Factor{S0: 1, S1: 128}).Time + topo.Collective(AllGather, 1<<20, ir.Factor{S0: 8, S1: 1}).Time
	if !low.Hierarchical {
		t.Error("Lowered should be hierarchical where the compiler lowers")
	}
	near(t, "lowered all-gather", low.Time, phases)
}

// TestIntraInterBytes: the bytes per GPU describe the flat call.
func TestIntraInterBytes(t *testing.T) {
	const b = 1 << 30
	cc := testTopo.Collective(AllGather, b, ir.Factor{S0: 8, S1: 4})
	v := b * 31.0 / 32
	near(t, "intra", cc.Intra, v*7/8)
	near(t, "inter", cc.Inter, v/8)
	cc = testTopo.Collective(ReduceScatter, b, ir.Factor{S0: 8, S1: 1})
	near(t, "intra only", cc.Intra, b*7.0/8)
	near(t, "no inter", cc.Inter, 0)
	// A full-node ring across nodes keeps the NICs busy.
	near(t, "NIC load", testTopo.Collective(AllGather, b, ir.Factor{S0: 8, S1: 4}).NICLoad, 1)
}
