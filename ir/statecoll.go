package ir

// The collectives of AMSP's model-state sharding (the paper's sec. IV,
// AMSP-NOTES.md): the one place that says which collective each
// component's factors need, over which group, of which bytes. The
// collectives pass emits them, the reduce-scatter pass rewrites them
// (SplitAllReduce), and the cost model and the planner's bound price
// them, all from StateCollectives.

// StateRole is what one of a stage's model-state collectives does.
type StateRole uint8

const (
	// GatherForward gathers the stage's params from the P shards before
	// its forward, every micro-batch.
	GatherForward StateRole = iota
	// GatherBackward gathers them again before its backward (from the
	// secondary shard under ZeRO++ hpZ).
	GatherBackward
	// ReduceGrads reduce-scatters the stage's gradient onto the p-chunk
	// after its backward, every micro-batch.
	ReduceGrads
	// SelectDrop reduces the p-chunk over the g-group in every
	// micro-batch but the last; only the g-slice is read after.
	SelectDrop
	// ReplicaReduce reduces the p-chunk over the data-parallel replicas
	// in the last micro-batch; the optimizer reads the os-slice.
	ReplicaReduce
	// Spread gathers the updated os-slices into the P shard at the next
	// step's start.
	Spread
)

var stateRoleNames = [...]string{"gather forward", "gather backward", "reduce gradients", "select and drop", "replica reduce", "spread"}

func (r StateRole) String() string { return stateRoleNames[r] }

// StateColl is one collective of a stage's model states, as the
// collectives pass first emits it: Coll over the group of Outer blocks
// strided by Inner (factors of the data-parallel mesh), moving the
// stage's params or gradients, whole or the p-chunk (1/s_p of them).
// An all-reduce whose result is read only through Read (a part of its
// buffer over a sub-mesh; zero when read whole) is lowered as
// SplitAllReduce says.
type StateColl struct {
	Role         StateRole
	Coll         Coll
	Outer, Inner Factor
	Grads        bool // gradients; else params
	Chunk        bool // the p-chunk; else the stage's whole
	Read         Factor
}

// Mesh is the ranks of one group: Outer / Inner.
func (c StateColl) Mesh() Factor { return c.Outer.Div(c.Inner) }

// StateCollectives lists the collectives of a stage whose params are
// sharded under f on the data-parallel mesh dp, in role order:
//
//   - s_p > 1: P gathered over s_p before forward and before backward
//     (over the secondary group under hpZ), the gradient
//     reduce-scattered over s_p after backward;
//   - s_g > s_p: micro-batches 1..M-1 all-reduce the p-chunk over the
//     s_g/s_p replicas, read through the g-slice;
//   - dp > s_p: the last micro-batch all-reduces the p-chunk over the
//     dp/s_p replicas, read through the os-slice where s_os > s_p;
//   - s_os > s_p: the spread, an all-gather of the updated os-slices
//     over the s_os/s_p replicas.
func StateCollectives(f Factors, dp Factor) []StateColl {
	one := Factor{S0: 1, S1: 1}
	var out []StateColl
	if f.P.Size() > 1 {
		bwd := f.P
		if f.Secondary.Size() > 1 {
			bwd = f.Secondary
		}
		out = append(out,
			StateColl{Role: GatherForward, Coll: AllGather, Outer: f.P, Inner: one},
			StateColl{Role: GatherBackward, Coll: AllGather, Outer: bwd, Inner: one},
			StateColl{Role: ReduceGrads, Coll: ReduceScatter, Outer: f.P, Inner: one, Grads: true})
	}
	if f.G.Size() > f.P.Size() {
		out = append(out, StateColl{Role: SelectDrop, Coll: AllReduce, Outer: f.G, Inner: f.P, Grads: true, Chunk: true, Read: f.G})
	}
	if dp.Size() > f.P.Size() {
		c := StateColl{Role: ReplicaReduce, Coll: AllReduce, Outer: dp, Inner: f.P, Grads: true, Chunk: true}
		if f.OS.Size() > f.P.Size() {
			c.Read = f.OS
		}
		out = append(out, c)
	}
	if f.OS.Size() > f.P.Size() {
		out = append(out, StateColl{Role: Spread, Coll: AllGather, Outer: f.OS, Inner: f.P, Chunk: true})
	}
	return out
}

// StateColl returns the stage's collective of role r under f on dp.
func (f Factors) StateColl(r StateRole, dp Factor) (StateColl, bool) {
	for _, c := range StateCollectives(f, dp) {
		if c.Role == r {
			return c, true
		}
	}
	return StateColl{}, false
}

// SplitAllReduce is the reduce-scatter creator's rewrite of an
// all-reduce over (outer, inner) whose result is read only through
// this rank's part over (read, inner): a reduce-scatter onto the part
// over (read, inner), then, when read is smaller than outer, an
// all-reduce of the part across the (outer, read) groups. It moves the
// bytes of the all-reduce's first half and no more.
func SplitAllReduce(outer, inner, read Factor) (rs, ar Group, across bool) {
	return Group{Outer: read, Inner: inner}, Group{Outer: outer, Inner: read}, read != outer
}

// LoweredColl is one collective of a StateColl as the passes lower it:
// Coll over Mesh, moving the StateColl's bytes divided by Div (sized by
// the nccl-tests convention: the input, the output of an all-gather).
type LoweredColl struct {
	Coll Coll
	Mesh Factor
	Div  int
}

// Lowered is c after the reduce-scatter creator: an all-reduce read
// through a part becomes SplitAllReduce's reduce-scatter and all-reduce
// of the part; any other collective stays as it is.
func (c StateColl) Lowered() []LoweredColl {
	if c.Coll != AllReduce || c.Read.Size() <= 1 {
		return []LoweredColl{{c.Coll, c.Mesh(), 1}}
	}
	rs, ar, across := SplitAllReduce(c.Outer, c.Inner, c.Read)
	out := []LoweredColl{{ReduceScatter, rs.Outer.Div(rs.Inner), 1}}
	if across {
		out = append(out, LoweredColl{AllReduce, ar.Outer.Div(ar.Inner), rs.Size()})
	}
	return out
}
