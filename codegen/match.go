package codegen

// Match proves, before a bundle is written, what would otherwise show up
// as a hang on a cluster: every rank of a communication group issues the
// same collectives in the same order, and each rank's streams, linked by
// events, run to the end.
//
// Cost. Let I be the instructions summed over the templates, T the
// templates, R the ranks and S the distinct group shapes. The per-rank
// checks (events, deadlock) depend only on the template, so they run once
// per template that some rank runs: O(I). Collective matching reduces each
// template to one signature per group shape (the kinds, sizes, dtypes and
// streams of its collectives on that shape), interned so that equal
// signatures get equal class numbers: O(I). A group instance then matches
// exactly when all its members' templates have the same class for its
// shape. With one template (the SPMD case, whatever R) that holds by
// construction and no rank is visited; otherwise each shape on which the
// templates disagree costs one pass over the ranks, O(R) time and memory.
// In all, O(I + S*R), never O(R*I).
//
// What Match does not model: collectives are taken to complete at once in
// the per-rank deadlock check, so a cycle that runs through two ranks'
// streams via collectives on different groups is not detected (with one
// template every rank issues the same order, which rules it out).

import (
	"fmt"
	"strings"
)

// MatchError is a violation Match found. Group is the group's shape and
// members for a collective mismatch, empty for a single-rank problem;
// Ranks are the ranks involved; Rank, Stream and Index place the
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

func (p pc) String() string { return fmt.Sprintf("%s %d", StreamName(p.s), p.i) }

// matchEvents checks one template, run as rank: every waited event is
// recorded once, and the streams, each in order and a wait blocking until
// its record has run, all finish.
func matchEvents(t Topology, p *Program, rank int) error {
	fail := func(at pc, format string, args ...any) error {
		in := &p.Streams[at.s][at.i]
		return &MatchError{Ranks: []int{rank}, Rank: rank, Stream: StreamName(at.s), Index: at.i,
			Msg: instrText(t, rank, in) + ": " + fmt.Sprintf(format, args...)}
	}
	recordAt := make([]pc, p.Events)
	for e := range recordAt {
		recordAt[e].s = -1
	}
	for s := range p.Streams {
		for i, in := range p.Streams[s] {
			if in.Op != Record {
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
			if in.Op == Wait && recordAt[in.Event].s < 0 {
				return fail(pc{s, i}, "event e%d is never recorded on this rank", in.Event)
			}
		}
	}

	// Run the streams: each pass advances every stream as far as it can,
	// so a pass that moves nothing means the rest is blocked. Every pass
	// but the last moves an instruction: O(instructions) in all.
	var at [NumStreams]int
	done := make([]bool, p.Events)
	for moved := true; moved; {
		moved = false
		for s := range p.Streams {
			for ; at[s] < len(p.Streams[s]); at[s]++ {
				in := &p.Streams[s][at[s]]
				if in.Op == Wait && !done[in.Event] {
					break
				}
				if in.Op == Record {
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
		blocked = append(blocked, fmt.Sprintf("%s %d (wait e%d) waits for %v (record e%d)", StreamName(s), at[s], e, recordAt[e], e))
	}
	if first.s >= 0 {
		return fail(first, "deadlock: %s", strings.Join(blocked, ", "))
	}
	return nil
}

// collSig is what members of a group must agree on for each collective.
type collSig struct {
	coll   Coll
	dtype  uint8
	stream int
	bytes  int64
}

func sigOf(s int, in *Instr) collSig {
	return collSig{in.Coll, uint8(in.DType), s, in.Bytes}
}

func matchCollectives(b *Bundle, firstRank []int) error {
	if len(b.RankTemplate) == 0 {
		return nil // every rank runs template 0: every group agrees
	}
	// Shapes in order of first appearance, so the error reported for a
	// bundle with several mismatches is always the same one.
	var shapes []Group
	shapeIdx := map[Group]int{}
	for t := range b.Templates {
		for s := range b.Templates[t].Streams {
			for _, in := range b.Templates[t].Streams[s] {
				if in.Op != Collective {
					continue
				}
				if _, ok := shapeIdx[in.Group]; !ok {
					shapeIdx[in.Group] = len(shapes)
					shapes = append(shapes, in.Group)
				}
			}
		}
	}
	// seqs[t][k] lists template t's collectives on shape k, stream by
	// stream (the stream is part of the signature, so this compares each
	// stream's order).
	seqs := make([][][]pc, len(b.Templates))
	for t := range b.Templates {
		seqs[t] = make([][]pc, len(shapes))
		for s := range b.Templates[t].Streams {
			for i, in := range b.Templates[t].Streams[s] {
				if in.Op == Collective {
					k := shapeIdx[in.Group]
					seqs[t][k] = append(seqs[t][k], pc{s, i})
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
				sg := sigOf(at.s, &b.Templates[t].Streams[at.s][at.i])
				key = fmt.Appendf(key, "%d/%d/%d/%d;", sg.stream, sg.coll, sg.dtype, sg.bytes)
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
			}
			ref := members[0]
			for _, m := range members[1:] {
				if class[k][tmpl(m)] != class[k][tmpl(ref)] {
					return collMismatch(b, g, members, ref, m, seqs[tmpl(ref)][k], seqs[tmpl(m)][k])
				}
			}
		}
	}
	return nil
}

// collMismatch describes the first collective on which ranks a and c of
// one group instance disagree, given their sequences on its shape. It
// compares stream by stream, so the collective is numbered within its
// stream.
func collMismatch(b *Bundle, g Group, members []int, a, c int, seqA, seqC []pc) error {
	pa, pb := b.Template(a), b.Template(c)
	e := &MatchError{Group: fmt.Sprintf("%v (ranks %s)", g, formatRanks(members)), Ranks: []int{a, c}}
	text := func(r int, p *Program, at pc) string {
		return instrText(b.Topo, r, &p.Streams[at.s][at.i])
	}
	for s := range NumStreams {
		sa, sc := onStream(seqA, s), onStream(seqC, s)
		j := 0
		for j < len(sa) && j < len(sc) && sigOf(s, &pa.Streams[s][sa[j].i]) == sigOf(s, &pb.Streams[s][sc[j].i]) {
			j++
		}
		switch {
		case j < len(sa) && j < len(sc):
			e.Rank, e.Stream, e.Index = c, StreamName(s), sc[j].i
			e.Msg = fmt.Sprintf("collective %d of this group on %s is %s, but on rank %d it is %v: %s",
				j, StreamName(s), text(c, pb, sc[j]), a, sa[j], text(a, pa, sa[j]))
		case j < len(sa):
			e.Rank, e.Stream, e.Index = a, StreamName(s), sa[j].i
			e.Msg = fmt.Sprintf("collective %d of this group on %s is %s, but rank %d issues only %d there",
				j, StreamName(s), text(a, pa, sa[j]), c, len(sc))
		case j < len(sc):
			e.Rank, e.Stream, e.Index = c, StreamName(s), sc[j].i
			e.Msg = fmt.Sprintf("collective %d of this group on %s is %s, but rank %d issues only %d there",
				j, StreamName(s), text(c, pb, sc[j]), a, len(sa))
		default:
			continue
		}
		return e
	}
	// Unreachable: the two signatures differ, so some stream does.
	e.Rank, e.Index, e.Msg = a, -1, "collectives differ"
	return e
}

// onStream is the part of seq on stream s (seq is in stream order).
func onStream(seq []pc, s int) []pc {
	lo := 0
	for lo < len(seq) && seq[lo].s < s {
		lo++
	}
	hi := lo
	for hi < len(seq) && seq[hi].s == s {
		hi++
	}
	return seq[lo:hi]
}
