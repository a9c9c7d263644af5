package codegen

// Match proves, before a bundle is written, what would otherwise show up
// as a hang on a cluster: every rank of a communication group issues the
// same collectives in the same order, and each rank's streams, linked by
// events, run to the end. A group instance is a shape and its members:
// collectives on two shapes that happen to name the same ranks are
// matched separately, which is sound when the runtime keeps one
// communicator per shape and group (NCCL orders per communicator).
// Validate, at the end of the file, is the consistency check that Decode,
// WriteFile, Match and Disasm share.
//
// Cost. Let I be the instructions summed over the templates, T the
// templates, R the ranks and S the distinct group shapes. The per-rank
// checks (events, deadlock) depend only on the template, so they run once
// per template that some rank runs: O(I). Collective matching reduces each
// template to one signature per group shape (the shapes, kinds, sizes,
// dtypes and streams of its collectives on that shape and on the shapes
// enclosing it, whose groups every member shares), interned so that equal
// signatures get equal class numbers: O(I·D), D the most shapes nested
// in one shape (at most S, a handful in practice; 1 where no shape nests
// in another). A group instance then matches exactly when all its
// members' templates have the same class for its shape. With one
// template (the SPMD case, whatever R) that holds by construction and
// nothing is built; otherwise each shape on which the templates disagree
// costs one pass over the ranks, O(R) time and memory. In all,
// O(I·D + S*R), never O(R*I). A mismatch is described by walking the two
// ranks' streams once more, O(I).
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
	"math"
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

// Match checks a validated bundle: it returns Validate's error for an
// inconsistent one, a *MatchError for a violation, nil otherwise.
func Match(b *Bundle) error {
	if err := Validate(b); err != nil {
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
		// A template no rank runs never executes; Validate has checked
		// that it is well formed.
		if r := firstRank[t]; r >= 0 {
			if err := matchEvents(b.Topo, &b.Templates[t], r); err != nil {
				return err
			}
		}
	}
	return matchCollectives(b, firstRank)
}

// pc is an instruction's place in its template.
type pc struct{ s, i int }

func (p pc) String() string { return fmt.Sprintf("%s %d", ir.StreamName(p.s), p.i) }

// matchEvents checks one template, run as rank: every waited event is
// recorded once, and the streams, each in order and a wait blocking until
// its record has run, all finish.
func matchEvents(t ir.Topology, p *ir.Program, rank int) error {
	fail := func(at pc, format string, args ...any) error {
		in := &p.Streams[at.s][at.i]
		return &MatchError{Ranks: []int{rank}, Rank: rank, Stream: ir.StreamName(at.s), Index: at.i,
			Msg: instrText(t, rank, in) + ": " + fmt.Sprintf(format, args...)}
	}
	recordAt := make([]pc, p.Events)
	for e := range recordAt {
		recordAt[e].s = -1
	}
	for s := range p.Streams {
		for i, in := range p.Streams[s] {
			if in.Op != ir.Record {
				continue
			}
			if prev := recordAt[in.Event]; prev.s >= 0 {
				return fail(pc{s, i}, "event e%d is recorded twice, first at %v", in.Event, prev)
			}
			recordAt[in.Event] = pc{s, i}
		}
	}
	for s := range p.Streams {
		for i, in := range p.Streams[s] {
			if in.Op == ir.Wait && recordAt[in.Event].s < 0 {
				return fail(pc{s, i}, "event e%d is never recorded on this rank", in.Event)
			}
		}
	}

	// Run the streams: each pass advances every stream as far as it can,
	// so a pass that moves nothing means the rest is blocked. Every pass
	// but the last moves an instruction: O(instructions) in all.
	var at [ir.NumStreams]int
	done := make([]bool, p.Events)
	for moved := true; moved; {
		moved = false
		for s := range p.Streams {
			for ; at[s] < len(p.Streams[s]); at[s]++ {
				in := &p.Streams[s][at[s]]
				if in.Op == ir.Wait && !done[in.Event] {
					break
				}
				if in.Op == ir.Record {
					done[in.Event] = true
				}
				moved = true
			}
		}
	}
	var blocked []string
	first := pc{-1, -1}
	for s := range p.Streams {
		if at[s] == len(p.Streams[s]) {
			continue
		}
		if first.s < 0 {
			first = pc{s, at[s]}
		}
		e := p.Streams[s][at[s]].Event
		blocked = append(blocked, fmt.Sprintf("%s %d (wait e%d) waits for %v (record e%d)", ir.StreamName(s), at[s], e, recordAt[e], e))
	}
	if first.s >= 0 {
		return fail(first, "deadlock: %s", strings.Join(blocked, ", "))
	}
	return nil
}

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

// Validate checks that a bundle is self-consistent, so that every index in
// it can be followed without a bounds check: the topology is non-empty
// and at most MaxRanks, every rank has a template, every buffer id, event
// id, opcode, kernel, collective, dtype and group is in range, groups
// tile the topology, a view is a part of an earlier buffer that fits in
// it, shapes hold their buffer's elements, layout slots fit their padded
// length, and a load fills a listed input. Decode refuses what Validate
// rejects; WriteFile, Match and Disasm run it first.
func Validate(b *Bundle) error {
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
	for ti := range b.Templates {
		if err := validateProgram(t, &b.Templates[ti]); err != nil {
			return fmt.Errorf("template %d: %v", ti, err)
		}
	}
	return nil
}

func validateProgram(t ir.Topology, p *ir.Program) error {
	if len(p.Seq) > 0 {
		return fmt.Errorf("program not scheduled: %d instructions still in sequence form", len(p.Seq))
	}
	nbuf := int32(len(p.Buffers))
	if len(p.Buffers) > math.MaxInt32 {
		return fmt.Errorf("%d buffers", len(p.Buffers))
	}
	for i, buf := range p.Buffers {
		switch {
		case buf.DType.Size() == 0:
			return fmt.Errorf("buffer b%d %q: unknown dtype %v", i, buf.Name, buf.DType)
		case buf.Elems < 0:
			return fmt.Errorf("buffer b%d %q: %d elements", i, buf.Name, buf.Elems)
		case buf.Elems > math.MaxInt64/8:
			return fmt.Errorf("buffer b%d %q: %d elements overflow a byte count", i, buf.Name, buf.Elems)
		case buf.Parent < -1 || buf.Parent >= int32(i):
			return fmt.Errorf("buffer b%d %q: parent b%d is not an earlier buffer", i, buf.Name, buf.Parent)
		}
		if len(buf.Shape) > 0 {
			if n, ok := ir.Shape(buf.Shape).CheckedNumElements(); !ok || n != buf.Elems {
				return fmt.Errorf("buffer b%d %q: shape %v does not hold %d elements", i, buf.Name, ir.Shape(buf.Shape), buf.Elems)
			}
		}
		if !buf.IsView() {
			continue
		}
		if err := validateGroup(t, buf.Part); err != nil {
			return fmt.Errorf("view b%d %q: part %v", i, buf.Name, err)
		}
		// The last part ends at Offset + Size x Elems.
		parent := p.Buffers[buf.Parent]
		if buf.Offset < 0 || buf.Offset > parent.Elems || buf.Elems > (parent.Elems-buf.Offset)/int64(buf.Part.Size()) {
			return fmt.Errorf("view b%d %q: %d parts of %d elements at offset %d do not fit in b%d %q of %d",
				i, buf.Name, buf.Part.Size(), buf.Elems, buf.Offset, buf.Parent, parent.Name, parent.Elems)
		}
	}
	for _, l := range p.Layouts {
		if l.Padded < 0 {
			return fmt.Errorf("layout %q: padded length %d", l.Stage, l.Padded)
		}
		for _, sl := range l.Params {
			if sl.Offset < 0 || sl.Elems < 0 || sl.Offset > l.Padded-sl.Elems {
				return fmt.Errorf("layout %q: param %q at %d of %d elements does not fit in %d", l.Stage, sl.Name, sl.Offset, sl.Elems, l.Padded)
			}
			if sl.Init.Kind > ir.InitCopy {
				return fmt.Errorf("layout %q: param %q: unknown init kind %d", l.Stage, sl.Name, sl.Init.Kind)
			}
		}
		// A zero group means no shard.
		for _, g := range [...]ir.Group{l.PShard, l.OSShard} {
			if g != (ir.Group{}) {
				if err := validateGroup(t, g); err != nil {
					return fmt.Errorf("layout %q: shard %v", l.Stage, err)
				}
			}
		}
		for _, id := range [...]int32{l.P, l.Master, l.M, l.V} {
			if id < -1 || id >= nbuf {
				return fmt.Errorf("layout %q: buffer b%d out of range", l.Stage, id)
			}
		}
	}
	isInput := make([]bool, len(p.Buffers))
	for _, in := range p.Inputs {
		switch {
		case in.Buf < 0 || in.Buf >= nbuf:
			return fmt.Errorf("input b%d out of range", in.Buf)
		case isInput[in.Buf]:
			return fmt.Errorf("input b%d listed twice", in.Buf)
		case in.Shift != 0 && in.Shift != 1:
			return fmt.Errorf("input b%d: shift %d is neither 0 nor 1", in.Buf, in.Shift)
		}
		isInput[in.Buf] = true
	}
	ninstr := 0
	for s := range p.Streams {
		ninstr += len(p.Streams[s])
	}
	// Every event is recorded once, so there are no more events than
	// instructions; the bound keeps per-event tables small.
	if p.Events < 0 || p.Events > ninstr {
		return fmt.Errorf("%d events for %d instructions", p.Events, ninstr)
	}
	bufOK := func(id int32) bool { return id >= 0 && id < nbuf }
	for s := range p.Streams {
		for i := range p.Streams[s] {
			in := &p.Streams[s][i]
			if err := validateInstr(t, in, bufOK, isInput, p.Events, len(p.Layouts)); err != nil {
				return fmt.Errorf("%s %d: %v", ir.StreamName(s), i, err)
			}
		}
	}
	return nil
}

func validateInstr(t ir.Topology, in *ir.Instr, bufOK func(int32) bool, isInput []bool, events, layouts int) error {
	// Fields an opcode does not use must still hold known values, so that
	// printing them can never surprise.
	switch {
	case in.Op >= ir.NumOpCodes:
		return fmt.Errorf("unknown opcode %d", in.Op)
	case in.Kern != ir.InvalidOp && !knownOp[in.Kern]:
		return fmt.Errorf("unknown kernel %d", in.Kern)
	case in.Coll >= ir.NumColls:
		return fmt.Errorf("unknown collective %d", in.Coll)
	case in.DType != ir.InvalidDType && in.DType.Size() == 0:
		return fmt.Errorf("unknown dtype %d", in.DType)
	}
	for _, a := range in.Attrs {
		if a.Val.Type > ir.AttrBool {
			return fmt.Errorf("attribute %q: unknown type %d", a.Name, a.Val.Type)
		}
	}
	switch in.Op {
	case ir.Alloc, ir.Free:
		if !bufOK(in.Buf) {
			return fmt.Errorf("%v: buffer b%d out of range", in.Op, in.Buf)
		}
	case ir.Load:
		if !bufOK(in.Buf) || !isInput[in.Buf] {
			return fmt.Errorf("load: b%d is not an input", in.Buf)
		}
	case ir.Kernel:
		if !knownOp[in.Kern] {
			return fmt.Errorf("kernel without an op")
		}
		info := in.Kern.Info()
		if len(in.Args) != info.Arity || len(in.Outs) != info.NumResults() {
			return fmt.Errorf("kernel %v: %d arguments and %d results, want %d and %d", in.Kern, len(in.Args), len(in.Outs), info.Arity, info.NumResults())
		}
		for _, a := range in.Args {
			if !bufOK(a) {
				return fmt.Errorf("kernel %v: argument b%d out of range", in.Kern, a)
			}
		}
		for _, o := range in.Outs {
			if !bufOK(o) {
				return fmt.Errorf("kernel %v: result b%d out of range", in.Kern, o)
			}
		}
		// Attributes as the op table declares them, so a kernel never
		// reads a missing one as zero.
		if err := ir.CheckAttrs(in.Kern, in.Attrs); err != nil {
			return fmt.Errorf("kernel %v: %v", in.Kern, err)
		}
		// The optimizer runs on a stage's flat shard, whose layout says
		// which elements are decayed.
		if in.Kern == ir.AdamWStep && (in.Stage < 0 || int(in.Stage) >= layouts) {
			return fmt.Errorf("kernel %v: stage %d has no layout (%d layouts)", in.Kern, in.Stage, layouts)
		}
	case ir.Collective:
		switch {
		case !bufOK(in.In) || !bufOK(in.Out):
			return fmt.Errorf("%v: buffer b%d -> b%d out of range", in.Coll, in.In, in.Out)
		case in.Bytes < 0:
			return fmt.Errorf("%v: %d bytes", in.Coll, in.Bytes)
		case in.DType.Size() == 0:
			return fmt.Errorf("%v: no dtype", in.Coll)
		}
		if err := validateGroup(t, in.Group); err != nil {
			return fmt.Errorf("%v: %v", in.Coll, err)
		}
	case ir.Record, ir.Wait:
		if in.Event < 0 || int(in.Event) >= events {
			return fmt.Errorf("%v: event e%d out of range (%d events)", in.Op, in.Event, events)
		}
	}
	return nil
}

// validateGroup checks that g's blocks tile the topology and its Inner
// blocks tile Outer, the conditions under which Group.Ranks and
// Group.Index agree and every rank is in exactly one group.
func validateGroup(t ir.Topology, g ir.Group) error {
	o, in := g.Outer, g.Inner
	switch {
	case o.S0 < 1 || o.S1 < 1 || in.S0 < 1 || in.S1 < 1:
		return fmt.Errorf("group %v/%v has an empty factor", o, in)
	case t.GPUsPerNode%o.S0 != 0 || t.Nodes%o.S1 != 0:
		return fmt.Errorf("group %v does not tile %d nodes x %d GPUs", o, t.Nodes, t.GPUsPerNode)
	case o.S0%in.S0 != 0 || o.S1%in.S1 != 0:
		return fmt.Errorf("group %v/%v: inner factor does not tile the outer", o, in)
	}
	return nil
}

// knownOp[k] says whether k is a kernel of the IR's op table.
var knownOp = func() (known [256]bool) {
	for k := range known {
		if kind := ir.OpKind(k); kind != ir.InvalidOp {
			if l, ok := ir.LookupOp(kind.String()); ok && l == kind {
				known[k] = true
			}
		}
	}
	return known
}()
