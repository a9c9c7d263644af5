package cost

import (
	"math"

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

// ParseColl maps a collective's name to it.
func ParseColl(s string) (Coll, bool) { return ir.ParseColl(s) }

// steps is the number of latency-bound steps of a ring on n ranks.
func steps(c Coll, n int) float64 {
	if n <= 1 {
		return 0
	}
	if c == AllReduce {
		return 2 * float64(n-1)
	}
	return float64(n - 1)
}

// Topology is the two-level network: GPUs in a node joined by NVLink
// (IntraBW per GPU, one direction), nodes joined by NICs (InterBW per
// node, one direction, shared by the node's GPUs that talk at once).
type Topology struct {
	GPUsPerNode, Nodes     int
	IntraBW, InterBW       float64 // bytes/s
	IntraLatency, InterLat float64 // seconds per ring step
	Profile                *Profile
}

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
	return t
}

// CollCost is the predicted time of one collective and the bytes each GPU
// sends over each level.
type CollCost struct {
	Time         float64
	Intra, Inter float64 // bytes sent per GPU
	Hierarchical bool    // decomposed into intra- and inter-node phases
	Profiled     bool    // time taken from the measured profile
}

// Collective costs collective c of size bytes (nccl-tests' "size": the
// full buffer of all-gather's output, reduce-scatter's input, all-reduce's
// buffer, the broadcast payload) over a group of g.S0 GPUs in each of g.S1
// nodes. Every rank of the job runs the same schedule, so the node's other
// GPUs are in groups of the same shape talking at the same time; a group
// therefore gets g.S0/GPUsPerNode of the node's NIC bandwidth.
//
// A group spanning nodes is costed both as one flat ring and as the
// hierarchical decomposition (reduce-scatter inside the node, the
// collective across nodes on 1/S0 of the data, all-gather inside the
// node), and the faster is taken, as NCCL's tuner would.
func (t *Topology) Collective(c Coll, bytes float64, g ir.Factor) CollCost {
	n := g.Size()
	if n <= 1 || bytes <= 0 {
		return CollCost{}
	}
	if t.Profile != nil {
		if bw, ok := t.Profile.Bandwidth(c, g, bytes); ok {
			cc := t.analytic(c, bytes, g)
			cc.Time = bytes / bw
			cc.Profiled = true
			return cc
		}
	}
	return t.analytic(c, bytes, g)
}

func (t *Topology) analytic(c Coll, bytes float64, g ir.Factor) CollCost {
	n := g.Size()
	if g.S1 == 1 {
		v := bytes * c.BusFactor(n)
		return CollCost{Time: steps(c, n)*t.IntraLatency + v/t.IntraBW, Intra: v}
	}
	// Flat ring across nodes: each GPU moves BusFactor x bytes; the
	// slowest link is NVLink or this group's share of the NIC.
	v := bytes * c.BusFactor(n)
	nic := t.InterBW * float64(g.S0) / float64(t.GPUsPerNode)
	flat := steps(c, n)*t.InterLat + v/math.Min(t.IntraBW, nic)
	// Hierarchical: the intra phases move the data among S0 GPUs, the
	// inter phase moves 1/S0 of it per GPU among S1 nodes, each GPU in
	// its own 1 x S1 ring, all GPUs of the node sharing the NIC.
	perGPUNIC := t.InterBW / float64(t.GPUsPerNode)
	var intraV, interV, hier float64
	inner, outer := ir.Factor{S0: g.S0, S1: 1}, ir.Factor{S0: 1, S1: g.S1}
	switch c {
	case AllReduce:
		intraV = 2 * bytes * ReduceScatter.BusFactor(g.S0)
		interV = bytes / float64(g.S0) * AllReduce.BusFactor(g.S1)
		hier = 2*steps(ReduceScatter, inner.Size())*t.IntraLatency + steps(AllReduce, outer.Size())*t.InterLat
	case AllGather, ReduceScatter:
		intraV = bytes * c.BusFactor(g.S0)
		interV = bytes / float64(g.S0) * c.BusFactor(g.S1)
		hier = steps(c, inner.Size())*t.IntraLatency + steps(c, outer.Size())*t.InterLat
	case Broadcast:
		// Across nodes to one GPU per node (sliced over the node's GPUs),
		// then inside each node.
		intraV = bytes
		interV = bytes / float64(g.S0)
		hier = steps(Broadcast, g.S1)*t.InterLat + steps(Broadcast, g.S0)*t.IntraLatency
	}
	hier += intraV/t.IntraBW + interV/perGPUNIC
	if g.S0 > 1 && hier < flat {
		return CollCost{Time: hier, Intra: intraV, Inter: interV, Hierarchical: true}
	}
	return CollCost{Time: flat, Intra: intraV, Inter: interV}
}
