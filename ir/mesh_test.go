package ir

import (
	"slices"
	"testing"
)

// oldRanks and oldIndex are Group.Ranks and Group.Index as they were
// written for the two-level mesh before the Mesh: the oracle the mesh's
// general arithmetic is checked against.
func oldRanks(g Group, t Topology, r int) []int {
	node, local := r/t.GPUsPerNode, r%t.GPUsPerNode
	n0 := node / g.Outer.S1 * g.Outer.S1
	l0 := local / g.Outer.S0 * g.Outer.S0
	var out []int
	for l := l0 + local%g.Inner.S0; l < l0+g.Outer.S0; l += g.Inner.S0 {
		for n := n0 + node%g.Inner.S1; n < n0+g.Outer.S1; n += g.Inner.S1 {
			out = append(out, n*t.GPUsPerNode+l)
		}
	}
	return out
}

func oldIndex(g Group, t Topology, r int) int {
	node, local := r/t.GPUsPerNode, r%t.GPUsPerNode
	i0 := (local % g.Outer.S0) / g.Inner.S0
	i1 := (node % g.Outer.S1) / g.Inner.S1
	return i0*(g.Outer.S1/g.Inner.S1) + i1
}

func divisors(n int) []int {
	var d []int
	for i := 1; i <= n; i++ {
		if n%i == 0 {
			d = append(d, i)
		}
	}
	return d
}

// TestMeshGroups: on every topology of up to 8 GPUs a node and 6
// nodes, every group (Outer a divisor block, Inner nested in it) has on
// the Topology's mesh the members, in the same order, and the indices
// that the two-level arithmetic gives; its split into the parts inside
// and across nodes is Group.Intra's and Group.Inter's; its extent is its
// size in GPUs of a node and nodes; and every rank's coordinates map
// back to it.
func TestMeshGroups(t *testing.T) {
	for _, gpn := range []int{1, 2, 3, 4, 8} {
		for nodes := 1; nodes <= 6; nodes++ {
			topo := Topology{GPUsPerNode: gpn, Nodes: nodes}
			m := MeshOf(topo)
			if m.Ranks() != topo.Ranks() {
				t.Fatalf("%v: %d ranks, topology %d", m, m.Ranks(), topo.Ranks())
			}
			for r := range topo.Ranks() {
				if back := m.Rank(m.Coords(r)); back != r {
					t.Fatalf("%v: rank %d has coordinates %v, which are rank %d", m, r, m.Coords(r), back)
				}
			}
			for _, o0 := range divisors(gpn) {
				for _, o1 := range divisors(nodes) {
					for _, i0 := range divisors(o0) {
						for _, i1 := range divisors(o1) {
							g := Group{Outer: Factor{o0, o1}, Inner: Factor{i0, i1}}
							b := g.Block()
							for r := range topo.Ranks() {
								if got, want := b.Ranks(m, r), oldRanks(g, topo, r); !slices.Equal(got, want) {
									t.Fatalf("%v group %v of rank %d: %v, want %v", topo, g, r, got, want)
								}
								if got, want := b.Index(m, r), oldIndex(g, topo, r); got != want {
									t.Fatalf("%v group %v: rank %d has index %d, want %d", topo, g, r, got, want)
								}
							}
							intra, inter := b.Split(m)
							if !slices.Equal(intra.Outer, g.Intra().Block().Outer) || !slices.Equal(intra.Inner, g.Intra().Block().Inner) ||
								!slices.Equal(inter.Outer, g.Inter().Block().Outer) || !slices.Equal(inter.Inner, g.Inter().Block().Inner) {
								t.Fatalf("%v group %v: split %v, %v; Intra %v, Inter %v", topo, g, intra, inter, g.Intra(), g.Inter())
							}
							if e := b.Extent(m); e != g.Outer.Div(g.Inner) || b.Size() != g.Size() {
								t.Fatalf("%v group %v: extent %v size %d, want %v and %d", topo, g, e, b.Size(), g.Outer.Div(g.Inner), g.Size())
							}
						}
					}
				}
			}
		}
	}
}

// TestMeshThreeAxes: a mesh with an axis more inside the node (tensor
// parallelism's, fastest): a group over it alone is a node's
// consecutive ranks, a data-parallel group of the other axes skips
// them, and the block's split puts both intra axes inside.
func TestMeshThreeAxes(t *testing.T) {
	m := Mesh{Axes: []Axis{{"tp", 2, true}, {"gpu", 4, true}, {"node", 2, false}}}
	tp := Block{Outer: []int{2, 1, 1}, Inner: []int{1, 1, 1}}
	if got := tp.Ranks(m, 5); !slices.Equal(got, []int{4, 5}) {
		t.Errorf("tp group of rank 5: %v", got)
	}
	dp := Block{Outer: []int{1, 4, 2}, Inner: []int{1, 1, 1}}
	if got := dp.Ranks(m, 5); !slices.Equal(got, []int{1, 9, 3, 11, 5, 13, 7, 15}) {
		t.Errorf("dp group of rank 5: %v", got)
	}
	if i := dp.Index(m, 5); i != 4 {
		t.Errorf("rank 5's dp index %d", i)
	}
	intra, inter := dp.Split(m)
	if e := intra.Extent(m); e != (Factor{4, 1}) {
		t.Errorf("intra extent %v", e)
	}
	if e := inter.Extent(m); e != (Factor{1, 2}) {
		t.Errorf("inter extent %v", e)
	}
}
