package passes

import (
	"fmt"
	"io"
	"strings"

	"amspc/codegen"
	"amspc/ir"
)

// match makes the program the template every rank runs and proves, as
// codegen.Match does before a bundle is written, that every rank of a
// communication group issues the same collectives in the same order and
// that each rank's streams run to the end: a mismatch would be a hang on
// the cluster. The bundle's plan label, machine and train settings are
// the caller's to fill in.
func match(s *State) error {
	b := &codegen.Bundle{Model: s.Graph.Name, Topo: s.Dist.Topo, Micro: s.Dist.Micro, Templates: []ir.Program{*s.Prog}}
	if s.dist.tp > 1 {
		b.Tensor = s.dist.tp
	}
	if err := codegen.Match(b); err != nil {
		return err
	}
	s.Bundle = b
	return nil
}

// dumpMatch lists the matched collectives by group shape, in order of
// first appearance (stream by stream): on each stream, how many of each
// kind and their bytes.
func dumpMatch(w io.Writer, s *State) {
	b := s.Bundle
	t := b.Topo
	fmt.Fprintf(w, "# %d template for %d ranks (%d nodes x %d GPUs); matched collectives by group:\n", len(b.Templates), t.Ranks(), t.Nodes, t.GPUsPerNode)
	type kind struct {
		stream int
		coll   ir.Coll
	}
	type tally struct {
		n     int
		bytes int64
	}
	var shapes []ir.Group
	kinds := map[ir.Group][]kind{}
	sums := map[ir.Group]map[kind]*tally{}
	p := b.Template(0)
	for st := range p.Streams {
		for _, in := range p.Streams[st] {
			if in.Op != ir.Collective {
				continue
			}
			g, k := in.Group, kind{st, in.Coll}
			if sums[g] == nil {
				shapes = append(shapes, g)
				sums[g] = map[kind]*tally{}
			}
			if sums[g][k] == nil {
				kinds[g] = append(kinds[g], k)
				sums[g][k] = &tally{}
			}
			sums[g][k].n++
			sums[g][k].bytes += in.Bytes
		}
	}
	for _, g := range shapes {
		var parts []string
		for _, k := range kinds[g] {
			c := sums[g][k]
			parts = append(parts, fmt.Sprintf("%s %d %v (%s)", ir.StreamName(k.stream), c.n, k.coll, ir.FormatBytes(c.bytes)))
		}
		fmt.Fprintf(w, "#   %v, %d ranks: %s\n", g, g.Size(), strings.Join(parts, "; "))
	}
}
