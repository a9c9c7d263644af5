package cost

import (
	"math"
	"math/bits"
	"sync"

	"amspc/ir"
)

// Coll is a collective operation (defined in ir, where collectives are
// ops; the cost model and the bundles name them the same way).
type Coll = ir.Coll

const (
	AllGather     = ir.AllGather
	ReduceScatter = ir.ReduceScatter
	AllReduce     = ir.AllReduce
	Broadcast     = ir.Broadcast
	NumColls      = ir.NumColls
)

// Topology is the two-level network: GPUs in a node joined by NVLink
// (IntraBW per GPU, one direction), nodes joined by NICs (InterBW per
// node, one direction, shared by the node's GPUs that talk at once).
// Bandwidths are the achieved bus bandwidths of NCCL's Simple protocol
// (nominal x the preset's bus efficiency). IntraLatency and InterLat are
// the per-hop latencies of a Simple-protocol ring over NVLink and over the
// network (NCCL's hwLat for Ring/Simple); NCCL's other per-hop latencies
// are scaled by the same ratios (see nccl below).
type Topology struct {
	GPUsPerNode, Nodes     int
	IntraBW, InterBW       float64 // bytes/s
	IntraLatency, InterLat float64 // seconds per ring hop (Simple protocol)
	Profile                *Profile

	memo *collMemo // Collective's answers (NewTopology's; nil: none kept)
}

// collMemo keeps Collective's answers for the topology they were
// computed on: a search asks the same few thousand questions of every
// candidate (a third of a 70B search's time was this arithmetic).
type collMemo struct {
	sync.Mutex
	on topoFields
	m  map[collKey]CollCost
}

// topoFields are the fields Collective reads: the memo is dropped when
// they change (a copy of the topology changed, or a test set one).
type topoFields struct {
	gpus, nodes                      int
	intra, inter, intraLat, interLat float64
	profile                          *Profile
}

type collKey struct {
	c      Coll
	bytes  float64
	g      ir.Factor
	shared bool
}

// collMemoMax bounds the memo; past it, it starts again.
const collMemoMax = 1 << 20

// NewTopology reads a cluster's network.
func NewTopology(c *ir.Cluster) *Topology {
	// Collectives reach a fraction of the links' nominal bandwidth (the
	// preset's default profile, docs/clusters.md).
	eff := func(f float64) float64 {
		if f <= 0 {
			return 1
		}
		return f
	}
	t := &Topology{GPUsPerNode: c.GPUsPerNode, Nodes: c.Nodes,
		IntraBW: c.IntraBW * eff(c.GPU.IntraBusEff), InterBW: c.InterBW * eff(c.GPU.InterBusEff),
		IntraLatency: c.IntraLatency, InterLat: c.InterLatency}
	if t.IntraLatency == 0 {
		t.IntraLatency = ir.DefaultIntraLatency
	}
	if t.InterLat == 0 {
		t.InterLat = ir.DefaultInterLatency
	}
	t.memo = &collMemo{}
	return t
}

// CollCost is the predicted time of one NCCL call and the bytes each GPU
// sends over each level.
type CollCost struct {
	Time float64
	// Latency is the part of Time that does not depend on bandwidth (the
	// launch and per-hop latencies); the rest moves bytes and is what
	// concurrent collectives on the same links share.
	Latency      float64
	Intra, Inter float64 // bytes sent per GPU over NVLink and over the NICs
	// NVLinkLoad and NICLoad are the fractions of a GPU's NVLink and of
	// the group's share of the node's NICs that the call keeps busy
	// while it moves bytes (0..1).
	NVLinkLoad, NICLoad float64
	Algo                string // NCCL's algorithm and protocol: "ring/Simple", "tree/LL128", ...
	Hierarchical        bool   // Lowered: the compiler's intra- and inter-node phases
	Profiled            bool   // time taken from the measured profile
}

// NCCL's protocols: LL (8-byte lines with an inline flag), LL128
// (128-byte lines, 120 of data), Simple (bulk copies with fences).
const (
	protoLL = iota
	protoLL128
	protoSimple
	numProtos
)

var protoNames = [numProtos]string{"LL", "LL128", "Simple"}

// nccl holds NCCL's tuning model (src/graph/tuning.cc, NCCL 2.19-2.23):
// the latencies in microseconds and the bandwidth factors it predicts
// each algorithm and protocol by, and by which its tuner picks the fastest
// per call. Per-hop latencies are scaled to the topology's IntraLatency
// and InterLat, whose defaults are NCCL's Ring/Simple entries.
var nccl = struct {
	baseRing, baseTree [numProtos]float64 // per call (baseLat)
	nvlRing, nvlTree   [numProtos]float64 // per hop over NVLink (hwLat[NVLINK])
	netRing, netTree   [numProtos]float64 // per hop over the network (hwLat[NET])
	netOverhead        float64            // per inter-node ring step, x3 for Simple (getNetOverhead)
	llIntraMulti       float64            // LL's NVLink hops cost 1.8x when the call spans nodes
	ringBW             [numProtos]float64 // of the link's bus bandwidth
	treeBW             float64            // tree all-reduce: 0.92 of the bus bandwidth ...
	treeLL, treeLL128  float64            // ... times these for LL and (multi-node) LL128
	treeLL128Node      float64            // LL128 tree inside one node
}{
	baseRing: [numProtos]float64{6.6, 14.0, 8.4}, baseTree: [numProtos]float64{6.8, 14.0, 8.4},
	nvlRing: [numProtos]float64{0.6, 1.9, 3.4}, nvlTree: [numProtos]float64{0.6, 1.25, 4.0},
	netRing: [numProtos]float64{2.7, 4.0, 14.0}, netTree: [numProtos]float64{5.0, 8.5, 14.0},
	netOverhead: 1.0, llIntraMulti: 1.8,
	ringBW: [numProtos]float64{0.5, 0.92, 1},
	treeBW: 0.92, treeLL: 1 / 3.8, treeLL128: 120.0 / 128, treeLL128Node: 7.0 / 9,
}

// Collective costs ONE flat NCCL call of collective c of size bytes
// (nccl-tests' "size": the full buffer of all-gather's output,
// reduce-scatter's input, all-reduce's buffer, the broadcast payload) over
// a group of g.S0 GPUs in each of g.S1 nodes: what an instruction the
// compiler left flat costs. It is never hierarchical (that is the
// compiler's lowering, costed phase by phase; see Lowered).
//
// Every algorithm and protocol NCCL would consider is costed as latency
// plus bytes over bandwidth, and the fastest is taken, as NCCL's tuner
// does: rings for every collective, the (double binary) tree for
// all-reduce. A ring's bandwidth is its slowest link: NVLink inside a
// node and, for a group spanning nodes, the group's share of the node's
// NICs. Every rank of the job runs the same schedule, so the node's other
// GPUs are in groups of the same shape talking at the same time: a group
// with S0 GPUs in a node gets S0/GPUsPerNode of the node's NICs.
//
// The time is nondecreasing in bytes for a fixed (c, g), never negative,
// and a pure function of its arguments (the planner's lower bound relies
// on it). A measured profile covering (c, g) replaces the time.
func (t *Topology) Collective(c Coll, bytes float64, g ir.Factor) CollCost {
	return t.lookup(collKey{c, bytes, g, false})
}

// SharedGather is Collective of the all-gather the CPU runtime's local
// ranks share: one buffer every member reads, each member copying only
// its own part into it (engine's AllGatherShared), timed by the
// profile's all_gather_shared rows. Where the profile has none (ranks
// in separate processes, GPUs), it is the plain all-gather's.
func (t *Topology) SharedGather(bytes float64, g ir.Factor) CollCost {
	return t.lookup(collKey{AllGather, bytes, g, t.Profile != nil && t.Profile.HasShared()})
}

// lookup is Collective's or SharedGather's answer, from the memo where
// the topology keeps one.
func (t *Topology) lookup(k collKey) CollCost {
	n := k.g.Size()
	if n <= 1 || !(k.bytes > 0) {
		return CollCost{}
	}
	if t.memo == nil {
		return t.collective(k)
	}
	on := topoFields{t.GPUsPerNode, t.Nodes, t.IntraBW, t.InterBW, t.IntraLatency, t.InterLat, t.Profile}
	t.memo.Lock()
	if t.memo.on != on || len(t.memo.m) >= collMemoMax {
		t.memo.on, t.memo.m = on, map[collKey]CollCost{}
	}
	cc, ok := t.memo.m[k]
	t.memo.Unlock()
	if ok {
		return cc
	}
	cc = t.collective(k)
	t.memo.Lock()
	if t.memo.on == on {
		t.memo.m[k] = cc
	}
	t.memo.Unlock()
	return cc
}

// collective is lookup's answer, computed.
func (t *Topology) collective(k collKey) CollCost {
	c, bytes, g := k.c, k.bytes, k.g
	cc := t.analytic(c, bytes, g)
	if t.Profile != nil {
		bw, ok := 0.0, false
		if k.shared {
			bw, ok = t.Profile.SharedBandwidth(g, bytes)
		}
		if !ok {
			bw, ok = t.Profile.Bandwidth(c, g, bytes)
		}
		if ok {
			w := cc.Time - cc.Latency
			cc.Time = bytes / bw
			cc.Latency = min(cc.Latency, cc.Time)
			// The links are as busy as the analytic model says per
			// byte, spread over the measured transfer time.
			scale := 0.0
			if pw := cc.Time - cc.Latency; pw > 0 {
				scale = w / pw
			}
			cc.NVLinkLoad = min(1, cc.NVLinkLoad*scale)
			cc.NICLoad = min(1, cc.NICLoad*scale)
			cc.Profiled = true
		}
	}
	return cc
}

// nicShare is the bandwidth of a group's share of its node's NICs.
func (t *Topology) nicShare(g ir.Factor) float64 {
	return t.InterBW * float64(g.S0) / float64(max(t.GPUsPerNode, g.S0))
}

// linkBW is the bus bandwidth of the group's slowest link.
func (t *Topology) linkBW(g ir.Factor) float64 {
	switch {
	case g.S1 <= 1:
		return t.IntraBW
	case g.S0 <= 1:
		return t.nicShare(g)
	}
	return math.Min(t.IntraBW, t.nicShare(g))
}

func log2i(n int) int { return bits.Len(uint(n)) - 1 }

func (t *Topology) analytic(c Coll, bytes float64, g ir.Factor) CollCost {
	n, s0, s1 := g.Size(), g.S0, g.S1
	sIntra, sNet := t.IntraLatency/(nccl.nvlRing[protoSimple]*1e-6), t.InterLat/(nccl.netRing[protoSimple]*1e-6)
	bw := t.linkBW(g)
	best := CollCost{Time: math.Inf(1)}
	try := func(cc CollCost) {
		if cc.Time < best.Time {
			best = cc
		}
	}
	// Rings: nsteps of the data's chunks around n ranks; nInter of them
	// cross a node boundary.
	nsteps := n - 1
	nInter := s1 - 1
	switch c {
	case AllReduce:
		nsteps, nInter = 2*(n-1), 2*(s1-1)
	case Broadcast:
		nsteps = n
	}
	v := bytes * c.BusFactor(n) // bytes each GPU sends
	for p := 0; p < numProtos; p++ {
		var lat float64
		switch {
		case s1 <= 1:
			lat = float64(nsteps) * nccl.nvlRing[p] * sIntra
		case c == Broadcast:
			// NCCL's broadcast is a pipelined chain; it charges every
			// hop at the network's latency once the call spans nodes.
			lat = float64(nsteps) * nccl.netRing[p] * sNet
		default:
			intra := nccl.nvlRing[p] * sIntra
			if p == protoLL {
				intra *= nccl.llIntraMulti
			}
			over := nccl.netOverhead
			if p == protoSimple {
				over *= 3
			}
			intra = max(intra, over*sNet)
			inter := nccl.netRing[p]
			if s0 == 1 {
				// One GPU per node: every hop's latency is exposed,
				// NCCL charges the tree's network latency.
				inter = nccl.netTree[p]
			}
			lat = float64(nsteps-nInter)*intra + float64(nInter)*inter*sNet
		}
		lat = (lat + nccl.baseRing[p]) * 1e-6
		busBW := bw * nccl.ringBW[p]
		cc := CollCost{Time: lat + v/busBW, Latency: lat, Algo: "ring/" + protoNames[p]}
		cc.Intra, cc.Inter = split(v, g)
		t.loads(&cc, g)
		try(cc)
	}
	if c == AllReduce {
		// Double binary tree: a chain inside the node, a binary tree
		// across nodes; the data goes up and back down (2 x bytes per
		// GPU and per node), at 0.92 of the link's bus bandwidth.
		for p := 0; p < numProtos; p++ {
			f := nccl.treeBW
			switch p {
			case protoLL:
				f *= nccl.treeLL
			case protoLL128:
				f *= nccl.treeLL128
				if s1 <= 1 {
					f = nccl.treeBW * nccl.treeLL128Node
				}
			}
			lat := nccl.baseTree[p] + 2*(float64(s0-1)*nccl.nvlTree[p]*sIntra+float64(log2i(s1))*nccl.netTree[p]*sNet)
			lat *= 1e-6
			cc := CollCost{Time: lat + 2*bytes/(bw*f), Latency: lat, Algo: "tree/" + protoNames[p]}
			cc.Intra, cc.Inter = split(2*bytes, g)
			t.loads(&cc, g)
			try(cc)
		}
	}
	return best
}

// split divides the bytes each GPU sends between NVLink and the NICs. In
// a ring spanning nodes each node's S0 GPUs are consecutive, so one hop in
// S0 leaves the node; the tree's chains likewise.
func split(v float64, g ir.Factor) (intra, inter float64) {
	switch {
	case g.S1 <= 1:
		return v, 0
	case g.S0 <= 1:
		return 0, v
	}
	k := float64(g.S0)
	return v * (k - 1) / k, v / k
}

// loads fills the link loads of a call from its bytes and transfer time.
func (t *Topology) loads(cc *CollCost, g ir.Factor) {
	w := cc.Time - cc.Latency
	if !(w > 0) {
		return
	}
	if cc.Intra > 0 && t.IntraBW > 0 {
		cc.NVLinkLoad = min(1, cc.Intra/(w*t.IntraBW))
	}
	if cc.Inter > 0 && t.InterBW > 0 {
		// The group's GPUs in a node send S0 x Inter over its share.
		cc.NICLoad = min(1, cc.Inter*float64(g.S0)/(w*t.nicShare(g)))
	}
}

// HierarchicalFaster reports whether collective c of size bytes over g
// runs faster as the compiler's hierarchical lowering (passes/
// hierarchical.go: separate NCCL calls inside and across nodes) than as
// one flat call. Only all-gather, reduce-scatter and all-reduce over a
// group with more than one GPU in each of several nodes are lowered.
func (t *Topology) HierarchicalFaster(c Coll, bytes float64, g ir.Factor) bool {
	if c == Broadcast || g.S0 <= 1 || g.S1 <= 1 || !(bytes > 0) {
		return false
	}
	return t.hierarchical(c, bytes, g).Time < t.Collective(c, bytes, g).Time
}

// hierarchical costs the lowered phases as separate flat calls, in order
// on one stream: all-gather across nodes on the node's block (1/S0 of the
// output), then inside the node; reduce-scatter the other way round;
// all-reduce as reduce-scatter inside, all-reduce of the 1/S0 share
// across, all-gather inside.
func (t *Topology) hierarchical(c Coll, bytes float64, g ir.Factor) CollCost {
	intra, inter := ir.Factor{S0: g.S0, S1: 1}, ir.Factor{S0: 1, S1: g.S1}
	block := bytes / float64(g.S0)
	var phases []CollCost
	switch c {
	case AllGather:
		phases = []CollCost{t.Collective(AllGather, block, inter), t.Collective(AllGather, bytes, intra)}
	case ReduceScatter:
		phases = []CollCost{t.Collective(ReduceScatter, bytes, intra), t.Collective(ReduceScatter, block, inter)}
	case AllReduce:
		phases = []CollCost{t.Collective(ReduceScatter, bytes, intra), t.Collective(AllReduce, block, inter), t.Collective(AllGather, bytes, intra)}
	}
	out := CollCost{Hierarchical: true, Algo: "hierarchical"}
	for _, p := range phases {
		out.Time += p.Time
		out.Latency += p.Latency
		out.Intra += p.Intra
		out.Inter += p.Inter
		out.NVLinkLoad = max(out.NVLinkLoad, p.NVLinkLoad)
		out.NICLoad = max(out.NICLoad, p.NICLoad)
		out.Profiled = out.Profiled || p.Profiled
	}
	return out
}

// Lowered costs collective c as the compiler runs it: the hierarchical
// phases where HierarchicalFaster says the compiler lowers it, one flat
// call otherwise. It is the cheaper of the two, so it too is
// nondecreasing in bytes.
func (t *Topology) Lowered(c Coll, bytes float64, g ir.Factor) CollCost {
	if t.HierarchicalFaster(c, bytes, g) {
		return t.hierarchical(c, bytes, g)
	}
	return t.Collective(c, bytes, g)
}
