package codegen

// Match proves, before a bundle is written, what would otherwise show up
// as a hang on a cluster: every rank of a communication group issues the
// same collectives in the same order. That each rank's streams, linked
// by events, run to the end is a property of one program, which
// ir.VerifyProgram proves (ir.Runnable) for every template a rank runs;
// Match reports its failure on that rank. A group instance is a shape
// and its members: collectives on two shapes that happen to name the
// same ranks are matched separately, which is sound when the runtime
// keeps one communicator per shape and group (NCCL orders per
// communicator).
// Validate, at the end of the file, is the consistency check that Decode,
// WriteFile, Match and Disasm share: the bundle's own fields here, each
// program's form in ir.VerifyProgram.
//
// Cost. Let I be the instructions summed over the templates, T the
// templates, R the ranks and S the distinct group shapes. The per-rank
// checks (events, deadlock: ir.VerifyProgram) depend only on the
// template, so they run once per template that some rank runs: O(I).
// Collective matching reduces each template to one signature per group
// shape (the shapes, kinds, sizes, dtypes and streams of its collectives
// on that shape and on the shapes enclosing it, whose groups every
// member shares), interned so that equal signatures get equal class
// numbers: O(I·D), D the most shapes nested in one shape (at most S, a
// handful in practice; 1 where no shape nests in another). A group
// instance then matches exactly when all its members' templates have
// the same class for its shape. With one template (the SPMD case,
// whatever R) that holds by construction and nothing is built;
// otherwise each shape on which the templates disagree costs one pass
// over the ranks, O(R) time and memory. In all, O(I·D + S*R), never
// O(R*I). A mismatch is described by walking the two ranks' streams once
// more, O(I).
//
// What Match does not model: collectives are taken to complete at once in
// the per-rank deadlock check, so a cycle that runs through two ranks'
// streams via collectives on different groups is not detected (with one
// template every rank issues the same order, which rules it out). The
// order of collectives on two shapes is compared only where one shape
// nests in the other; where neither does, two ranks can still share a
// group of each (a 2x1 and a 1x2 group cross in a 2x2 block only at one
// rank, but a 4x1 and a 2x2 one share pairs), and a swap of such
// collectives, or swaps on several ranks that close a cycle through
// groups of different shapes, go unseen.

import (
	"errors"
	"fmt"
	"strings"

	"amspc/ir"
)

// MatchError is a violation Match found. For a collective mismatch,
// Ranks are two members of a group, in rank order: the first member of
// the largest set of members that agree, and the first member that
// differs from them; Group is the shape and members of the group of the
// first collective on which the two differ. For a single-rank problem
// Group is empty and Ranks is that rank. Rank, Stream and Index place the
// instruction shown (Index -1 when there is none).
type MatchError struct {
	Group  string
	Ranks  []int
	Rank   int
	Stream string
	Index  int
	Msg    string
}

func (e *MatchError) Error() string {
	var b strings.Builder
	if e.Group != "" {
		fmt.Fprintf(&b, "group %s: ", e.Group)
	}
	if len(e.Ranks) > 1 {
		b.WriteString("ranks ")
		for i, r := range e.Ranks {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprint(&b, r)
		}
		b.WriteString(": ")
	}
	fmt.Fprintf(&b, "rank %d", e.Rank)
	if e.Stream != "" {
		fmt.Fprintf(&b, " %s %d", e.Stream, e.Index)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// Match checks a bundle: it returns Validate's error for an inconsistent
// one, a *MatchError for a violation, nil otherwise.
func Match(b *Bundle) error {
	if err := validateBundle(b); err != nil {
		return err
	}
	// firstRank[t] is the first rank running template t, -1 if none.
	firstRank := make([]int, len(b.Templates))
	for t := range firstRank {
		firstRank[t] = -1
	}
	if len(b.RankTemplate) == 0 {
		firstRank[0] = 0
	} else {
		for r := len(b.RankTemplate) - 1; r >= 0; r-- {
			firstRank[b.RankTemplate[r]] = r
		}
	}
	for t := range b.Templates {
		// Validate's check of every template, and for a template some
		// rank runs, that its streams run to the end (one that no rank
		// runs never executes).
		checks := ir.Scheduled
		if firstRank[t] >= 0 {
			checks |= ir.Runnable
		}
		if err := ir.VerifyProgram(&b.Templates[t], b.Topo, checks); err != nil {
			var e *ir.EventError
			if !errors.As(err, &e) {
				return fmt.Errorf("template %d: %v", t, err)
			}
			r := firstRank[t]
			return &MatchError{Ranks: []int{r}, Rank: r, Stream: ir.StreamName(e.Stream), Index: e.Index, Msg: e.Instr + ": " + e.Msg}
		}
	}
	return matchCollectives(b, firstRank)
}

// pc is an instruction's place in its template.
type pc struct{ s, i int }

func (p pc) String() string { return fmt.Sprintf("%s %d", ir.StreamName(p.s), p.i) }

// collSig is what members of a group must agree on for each collective.
type collSig struct {
	coll   ir.Coll
	dtype  uint8
	stream int
	bytes  int64
}

func sigOf(s int, in *ir.Instr) collSig {
	return collSig{in.Coll, uint8(in.DType), s, in.Bytes}
}

// nested reports whether every group of shape g lies inside one group of
// shape h, so that any two members of a g group also share an h group.
// Ranks is a product of a GPU set and a node set, so this holds when it
// holds in both dimensions; in one, a set of more than one element lies
// inside the other shape's set for every rank exactly when its block
// divides the other's block and the other's stride divides its stride.
func nested(g, h ir.Group) bool {
	in := func(o, i, ho, hi int) bool { return o == i || (ho%o == 0 && i%hi == 0) }
	return in(g.Outer.S0, g.Inner.S0, h.Outer.S0, h.Inner.S0) &&
		in(g.Outer.S1, g.Inner.S1, h.Outer.S1, h.Inner.S1)
}

func matchCollectives(b *Bundle, firstRank []int) error {
	if len(b.RankTemplate) == 0 {
		return nil // every rank runs template 0: every group agrees
	}
	// Shapes in order of first appearance, so the error reported for a
	// bundle with several mismatches is always the same one.
	var shapes []ir.Group
	shapeIdx := map[ir.Group]int{}
	for t := range b.Templates {
		for s := range b.Templates[t].Streams {
			for _, in := range b.Templates[t].Streams[s] {
				if in.Op != ir.Collective {
					continue
				}
				if _, ok := shapeIdx[in.Group]; !ok {
					shapeIdx[in.Group] = len(shapes)
					shapes = append(shapes, in.Group)
				}
			}
		}
	}
	// inside[h] lists the shapes nested in shape h, h included. The
	// members of a group share every enclosing group, and a stream runs
	// its collectives one after the other, so they must also agree on
	// how the enclosing groups' collectives interleave with their own:
	// a rank that swaps an all-gather of its node with one of the whole
	// job waits in the first while its node waits in the second.
	inside := make([][]int, len(shapes))
	for h, gh := range shapes {
		for k, g := range shapes {
			if nested(g, gh) {
				inside[h] = append(inside[h], k)
			}
		}
	}
	// seqs[t][k] lists template t's collectives on shape k and on the
	// shapes enclosing it, stream by stream (the stream is part of the
	// signature, so this compares each stream's order).
	seqs := make([][][]pc, len(b.Templates))
	for t := range b.Templates {
		seqs[t] = make([][]pc, len(shapes))
		for s := range b.Templates[t].Streams {
			for i, in := range b.Templates[t].Streams[s] {
				if in.Op == ir.Collective {
					for _, k := range inside[shapeIdx[in.Group]] {
						seqs[t][k] = append(seqs[t][k], pc{s, i})
					}
				}
			}
		}
	}
	// class[k][t] numbers template t's signature on shape k.
	class := make([][]int32, len(shapes))
	var key []byte
	for k := range shapes {
		class[k] = make([]int32, len(b.Templates))
		ids := map[string]int32{}
		for t := range b.Templates {
			key = key[:0]
			for _, at := range seqs[t][k] {
				in := &b.Templates[t].Streams[at.s][at.i]
				sg := sigOf(at.s, in)
				key = fmt.Appendf(key, "%d/%d/%d/%d/%d;", shapeIdx[in.Group], sg.stream, sg.coll, sg.dtype, sg.bytes)
			}
			id, ok := ids[string(key)]
			if !ok {
				id = int32(len(ids))
				ids[string(key)] = id
			}
			class[k][t] = id
		}
	}
	tmpl := func(r int) int { return int(b.RankTemplate[r]) }
	var seen []bool
	count := make([]int, len(b.Templates)) // members per class, one group at a time
	for k, g := range shapes {
		agree := true
		for t, r := range firstRank {
			if r >= 0 && class[k][t] != class[k][tmpl(0)] {
				agree = false
			}
		}
		if agree {
			continue
		}
		if seen == nil {
			seen = make([]bool, b.Topo.Ranks())
		} else {
			clear(seen)
		}
		for r := range seen {
			if seen[r] {
				continue
			}
			members := g.Ranks(b.Topo, r)
			for _, m := range members {
				seen[m] = true
				count[class[k][tmpl(m)]]++
			}
			// The reference is the first member of the largest class, so
			// that the rank blamed is one that differs from most of its
			// group; with a tie, the first member's.
			ref, best := members[0], 0
			for _, m := range members {
				if n := count[class[k][tmpl(m)]]; n > best {
					ref, best = m, n
				}
			}
			for _, m := range members {
				count[class[k][tmpl(m)]] = 0
			}
			for _, m := range members {
				if class[k][tmpl(m)] != class[k][tmpl(ref)] {
					return collMismatch(b, shapeIdx, ref, m)
				}
			}
		}
	}
	return nil
}

// collMismatch describes the first collective on which ranks a (the
// reference) and c of one group disagree. It walks each stream of both
// ranks over the collectives on groups that hold both of them, which
// include every collective their signatures compare, so it finds the
// first difference; the error names that collective's group and numbers
// the collective within its group and stream.
func collMismatch(b *Bundle, shapeIdx map[ir.Group]int, a, c int) error {
	pa, pb := b.Template(a), b.Template(c)
	e := &MatchError{Ranks: []int{min(a, c), max(a, c)}}
	// both[k] says whether a and c share a group of shape k: 0 not known
	// yet, 1 yes, -1 no.
	both := make([]int8, len(shapeIdx))
	shared := func(in *ir.Instr) bool {
		k := shapeIdx[in.Group]
		if both[k] == 0 {
			both[k] = -1
			if in.Group.GroupID(b.Topo, a) == in.Group.GroupID(b.Topo, c) {
				both[k] = 1
			}
		}
		return both[k] > 0
	}
	// next is the index of the first collective at or after i on a
	// shared group, len(stream) if none.
	next := func(stream []ir.Instr, i int) int {
		for ; i < len(stream); i++ {
			if stream[i].Op == ir.Collective && shared(&stream[i]) {
				break
			}
		}
		return i
	}
	show := func(r int, in *ir.Instr, s, i int) {
		g := in.Group
		e.Group = fmt.Sprintf("%v (ranks %s)", g, formatRanks(g.Ranks(b.Topo, r)))
		e.Rank, e.Stream, e.Index = r, ir.StreamName(s), i
	}
	// issued[k] counts the collectives on shape k that both ranks have
	// issued alike on the current stream.
	issued := make([]int, len(shapeIdx))
	for s := range ir.NumStreams {
		clear(issued)
		sa, sc := pa.Streams[s], pb.Streams[s]
		ia, ic := next(sa, 0), next(sc, 0)
		for ia < len(sa) && ic < len(sc) && sa[ia].Group == sc[ic].Group && sigOf(s, &sa[ia]) == sigOf(s, &sc[ic]) {
			issued[shapeIdx[sa[ia].Group]]++
			ia, ic = next(sa, ia+1), next(sc, ic+1)
		}
		switch {
		case ia < len(sa) && ic < len(sc):
			in := &sc[ic]
			show(c, in, s, ic)
			e.Msg = fmt.Sprintf("collective %d of this group on %s is %s, but on rank %d it is %v: %s",
				issued[shapeIdx[in.Group]], ir.StreamName(s), instrText(b.Topo, c, in), a, pc{s, ia}, instrText(b.Topo, a, &sa[ia]))
			// Sizes print rounded; say what the rounding hides.
			if x, y := in.Bytes, sa[ia].Bytes; x != y && formatBytes(x) == formatBytes(y) {
				e.Msg += fmt.Sprintf(" (%d bytes against %d)", x, y)
			}
		case ia < len(sa):
			in := &sa[ia]
			n := issued[shapeIdx[in.Group]]
			show(a, in, s, ia)
			e.Msg = fmt.Sprintf("collective %d of this group on %s is %s, but rank %d issues only %d there",
				n, ir.StreamName(s), instrText(b.Topo, a, in), c, n)
		case ic < len(sc):
			in := &sc[ic]
			n := issued[shapeIdx[in.Group]]
			show(c, in, s, ic)
			e.Msg = fmt.Sprintf("collective %d of this group on %s is %s, but rank %d issues only %d there",
				n, ir.StreamName(s), instrText(b.Topo, c, in), a, n)
		default:
			continue
		}
		return e
	}
	// Unreachable: the two signatures differ, so some stream does.
	e.Rank, e.Index, e.Msg = a, -1, "collectives differ"
	return e
}

// Validate checks that a bundle is self-consistent, so that every index
// in it can be followed without a bounds check: the topology is
// non-empty and at most MaxRanks, every rank has a template, and every
// template is a scheduled program of well-formed buffers, layouts,
// inputs and instructions whose groups tile the topology (ir.VerifyProgram
// with ir.Scheduled). Decode refuses what Validate rejects; WriteFile,
// Match and Disasm run it first.
func Validate(b *Bundle) error {
	if err := validateBundle(b); err != nil {
		return err
	}
	for ti := range b.Templates {
		if err := ir.VerifyProgram(&b.Templates[ti], b.Topo, ir.Scheduled); err != nil {
			return fmt.Errorf("template %d: %v", ti, err)
		}
	}
	return nil
}

// validateBundle checks the bundle's own fields: its topology and which
// template each rank runs.
func validateBundle(b *Bundle) error {
	t := b.Topo
	if t.GPUsPerNode < 1 || t.Nodes < 1 || t.GPUsPerNode > MaxRanks || t.Nodes > MaxRanks/t.GPUsPerNode {
		return fmt.Errorf("topology %d nodes x %d GPUs: need 1 to %d ranks", t.Nodes, t.GPUsPerNode, MaxRanks)
	}
	if len(b.Templates) == 0 {
		return errors.New("no templates")
	}
	if n := len(b.RankTemplate); n != 0 && n != t.Ranks() {
		return fmt.Errorf("%d rank template entries for %d ranks", n, t.Ranks())
	}
	for r, ti := range b.RankTemplate {
		if ti < 0 || int(ti) >= len(b.Templates) {
			return fmt.Errorf("rank %d runs template %d, there are %d", r, ti, len(b.Templates))
		}
	}
	tp := max(b.Tensor, 1)
	if b.Tensor < 0 || t.GPUsPerNode%tp != 0 {
		return fmt.Errorf("tensor-parallel degree %d on nodes of %d GPUs", b.Tensor, t.GPUsPerNode)
	}
	for ti := range b.Templates {
		for _, l := range b.Templates[ti].Layouts {
			for _, sl := range l.Params {
				n := int64(1)
				for _, d := range sl.Shape {
					n *= d
				}
				if len(sl.Shape) == 0 {
					continue // a slot that records no shape holds all of its param
				}
				part := sl.Split >= 0 && sl.Split < len(sl.Shape) && sl.Shape[sl.Split]%int64(tp) == 0
				if sl.Split < -1 || sl.Split >= 0 && !part || sl.Split >= 0 && n != sl.Elems*int64(tp) || sl.Split < 0 && n != sl.Elems {
					return fmt.Errorf("template %d: param %s of %d elements: shape %v, split %d, tensor %d", ti, sl.Name, sl.Elems, sl.Shape, sl.Split, b.Tensor)
				}
			}
		}
	}
	return nil
}
