package ir

import (
	"fmt"
	"strings"
)

// The device mesh (issue 30). Ranks are points of a mesh of named axes;
// a group of ranks is a block of the mesh (a sub-mesh) and, inside it,
// the ranks at one position of a finer block; a sharding factor is a
// group's size on each axis. Today's plans use the mesh of a Topology,
// two axes:
//
//	gpu   the GPUs of a node (inside a node: NVLink)
//	node  the nodes (across nodes: the NICs)
//
// and every Factor and Group is a 2-axis view of it (S0 on gpu, S1 on
// node). The rank arithmetic (a group's members, a rank's index in its
// group, the hierarchical split of a group into its parts inside and
// across nodes) is written once, here, for any number of axes, so that
// an axis more (tensor parallelism's, inside a node) is a row of the
// mesh, not a rewrite of every place that numbers ranks.

// An Axis is one dimension of the mesh.
type Axis struct {
	Name string
	Size int
	// Intra says the axis lies inside a node: its ranks talk over the
	// node's links (NVLink), not the network.
	Intra bool
}

// Mesh is the device mesh. A rank's coordinates are mixed-radix digits
// of its number, the first axis fastest: rank = c[0] + Size[0] x (c[1]
// + Size[1] x (...)). The axes inside a node come first, so a node's
// ranks are consecutive.
type Mesh struct {
	Axes []Axis
}

// MeshOf is the mesh of t: axis gpu (inside a node) then axis node.
func MeshOf(t Topology) Mesh {
	return Mesh{Axes: []Axis{{Name: "gpu", Size: t.GPUsPerNode, Intra: true}, {Name: "node", Size: t.Nodes}}}
}

// Ranks is the number of ranks.
func (m Mesh) Ranks() int {
	n := 1
	for _, a := range m.Axes {
		n *= a.Size
	}
	return n
}

func (m Mesh) String() string {
	parts := make([]string, len(m.Axes))
	for i, a := range m.Axes {
		parts[i] = fmt.Sprintf("%s=%d", a.Name, a.Size)
		if a.Intra {
			parts[i] += " (intra)"
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// Coords are rank r's coordinates, one per axis.
func (m Mesh) Coords(r int) []int {
	c := make([]int, len(m.Axes))
	for i, a := range m.Axes {
		c[i] = r % a.Size
		r /= a.Size
	}
	return c
}

// Rank is the rank at coordinates c.
func (m Mesh) Rank(c []int) int {
	r := 0
	for i := len(m.Axes) - 1; i >= 0; i-- {
		r = r*m.Axes[i].Size + c[i]
	}
	return r
}

// A Block is a group of ranks relative to a rank, on each axis a: the
// Outer[a] consecutive coordinates of the rank's block (blocks tile the
// axis), of which the members are those at the rank's position modulo
// Inner[a] (Inner[a] divides Outer[a]). Inner all ones is the whole
// block (a shard group); Inner a nested block gives the replicas of one
// Inner shard inside Outer. Members are in group order: lexicographic
// in their block coordinates, the first axis most significant.
type Block struct {
	Outer, Inner []int
}

// Size is the number of ranks in the block.
func (b Block) Size() int {
	n := 1
	for a := range b.Outer {
		n *= b.Outer[a] / b.Inner[a]
	}
	return n
}

// Ranks lists rank r's group in group order.
func (b Block) Ranks(m Mesh, r int) []int {
	c := m.Coords(r)
	// first[a], the member coordinate with index 0 on axis a; counts[a],
	// the members on axis a.
	first := make([]int, len(c))
	counts := make([]int, len(c))
	for a := range c {
		first[a] = c[a]/b.Outer[a]*b.Outer[a] + c[a]%b.Inner[a]
		counts[a] = b.Outer[a] / b.Inner[a]
	}
	out := make([]int, 0, b.Size())
	k := make([]int, len(c)) // the member's index on each axis
	at := make([]int, len(c))
	for {
		for a := range at {
			at[a] = first[a] + k[a]*b.Inner[a]
		}
		out = append(out, m.Rank(at))
		// The next index, the last axis fastest.
		a := len(k) - 1
		for ; a >= 0; a-- {
			if k[a]++; k[a] < counts[a] {
				break
			}
			k[a] = 0
		}
		if a < 0 {
			return out
		}
	}
}

// Index is rank r's position in its group's order.
func (b Block) Index(m Mesh, r int) int {
	i := 0
	for a, ax := range m.Axes {
		c := r % ax.Size
		r /= ax.Size
		i = i*(b.Outer[a]/b.Inner[a]) + (c%b.Outer[a])/b.Inner[a]
	}
	return i
}

// Split is the block's part on the axes inside a node (the others'
// extents those of one member: Inner) and its part across nodes (the
// intra axes' extents Inner): a rank's intra group and inter group. In
// group order a rank's inter group holds a contiguous run of the block
// when the intra axes come first (the intra group's Index-th): the
// hierarchical lowering of a collective relies on that.
func (b Block) Split(m Mesh) (intra, inter Block) {
	n := len(b.Outer)
	intra = Block{Outer: make([]int, n), Inner: append([]int(nil), b.Inner...)}
	inter = Block{Outer: make([]int, n), Inner: append([]int(nil), b.Inner...)}
	for a, ax := range m.Axes {
		if ax.Intra {
			intra.Outer[a], inter.Outer[a] = b.Outer[a], b.Inner[a]
		} else {
			intra.Outer[a], inter.Outer[a] = b.Inner[a], b.Outer[a]
		}
	}
	return intra, inter
}

// Extent is the block's members as a Factor: how many lie along the axes
// inside a node (S0) and across nodes (S1). The cost of a collective
// over the block depends on these two numbers alone (cost.Topology).
func (b Block) Extent(m Mesh) Factor {
	f := Factor{S0: 1, S1: 1}
	for a, ax := range m.Axes {
		k := b.Outer[a] / b.Inner[a]
		if ax.Intra {
			f.S0 *= k
		} else {
			f.S1 *= k
		}
	}
	return f
}

// Block is g on the mesh of a Topology (MeshOf): S0 on axis gpu, S1 on
// axis node.
func (g Group) Block() Block {
	inner := g.Inner
	if inner.S0 < 1 || inner.S1 < 1 {
		inner = Factor{S0: 1, S1: 1}
	}
	return Block{Outer: []int{g.Outer.S0, g.Outer.S1}, Inner: []int{inner.S0, inner.S1}}
}
