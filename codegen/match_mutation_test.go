package codegen_test

// Match on real plans: tiny.amsp compiled on its 2 nodes x 4 GPUs, its one
// template copied so that ranks (or nodes) run templates of their own,
// then one copy broken. With one template Match succeeds by construction;
// these tests show that it fails, and says where, when one rank's
// collectives differ from its group's.

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"amspc/codegen"
	"amspc/cost"
	"amspc/internal/testjob"
	"amspc/ir"
	"amspc/passes"
	"amspc/planner"
)

var tinyTopo = ir.Topology{GPUsPerNode: 4, Nodes: 2}

// tinyPlans are the plans compiled: the baselines that shard differently
// on 2x4, and tiny.amsp's own shard section (P 2, G 2, OS 8).
var tinyPlans = []string{"DDP", "ZeRO-3/FSDP", "MiCS(4)", "2/2/8", "ZeRO++ hpZ(4)"}

var (
	tinyMu    sync.Mutex
	tinyProgs = map[string]*ir.Program{}
)

// tinyProgram is the template of tiny under plan, compiled once per test
// binary; callers copy it before changing it.
func tinyProgram(t *testing.T, plan string) *ir.Program {
	t.Helper()
	tinyMu.Lock()
	defer tinyMu.Unlock()
	if p, ok := tinyProgs[plan]; ok {
		return p
	}
	job := testjob.Load(t, "tiny")
	var f cost.Factors
	if plan == "2/2/8" {
		f = cost.Factors{P: job.Shard.P, G: job.Shard.G, OS: job.Shard.OS}
		if f.P.Size() != 2 || f.G.Size() != 2 || f.OS.Size() != 8 {
			t.Fatalf("tiny.amsp shards %v, not 2/2/8", f)
		}
	} else {
		dp := ir.Factor{S0: tinyTopo.GPUsPerNode, S1: tinyTopo.Nodes}
		i := slices.IndexFunc(planner.Baselines(dp, 4), func(b planner.Baseline) bool { return b.Name == plan })
		if i < 0 {
			t.Fatalf("no baseline %q", plan)
		}
		f = planner.Baselines(dp, 4)[i].Factors
	}
	M, err := job.Train.MicroBatches(tinyTopo.Ranks())
	if err != nil {
		t.Fatal(err)
	}
	up := cost.Uniform(plan, f, job.Train.Recompute, job.Train.MicroBatch)
	s, err := passes.Run(job, passes.Options{Check: true, Dist: &passes.Distribution{Groups: up.Groups, Topo: tinyTopo, Micro: int(M), Depth: 2}})
	if err != nil {
		t.Fatalf("%s: %v", plan, err)
	}
	p := s.Prog
	tinyProgs[plan] = p
	return p
}

// clone copies p deeply enough to change its streams.
func clone(p *ir.Program) ir.Program {
	q := *p
	for s := range q.Streams {
		q.Streams[s] = slices.Clone(q.Streams[s])
	}
	return q
}

// Expansions: every rank its own template (rank r runs template r), or
// every node its own (the ranks of node n run template n).
const (
	perRank = iota
	perNode
)

// expand is plan's bundle with one copy of its template per rank or per
// node.
func expand(t *testing.T, plan string, by int) *codegen.Bundle {
	p := tinyProgram(t, plan)
	b := &codegen.Bundle{Model: "tiny", Topo: tinyTopo, Plan: plan, Micro: 2}
	n := tinyTopo.Ranks()
	if by == perNode {
		n = tinyTopo.Nodes
	}
	for range n {
		b.Templates = append(b.Templates, clone(p))
	}
	for r := range tinyTopo.Ranks() {
		if by == perNode {
			b.RankTemplate = append(b.RankTemplate, int32(r/tinyTopo.GPUsPerNode))
		} else {
			b.RankTemplate = append(b.RankTemplate, int32(r))
		}
	}
	return b
}

func grp(o0, o1, i0, i1 int) ir.Group {
	return ir.Group{Outer: ir.Factor{S0: o0, S1: o1}, Inner: ir.Factor{S0: i0, S1: i1}}
}

var (
	all8   = grp(4, 2, 1, 1) // the whole job
	node4  = grp(4, 1, 1, 1) // a node
	pair   = grp(2, 1, 1, 1) // two GPUs of a node
	cross2 = grp(4, 2, 4, 1) // a GPU and its counterpart on the other node
	cross4 = grp(4, 2, 2, 1) // every other GPU of both nodes
)

// nth is the index of the n-th collective on group g on stream s of p
// (n -1: the last); the test fails if there is none.
func nth(t *testing.T, p *ir.Program, s int, g ir.Group, n int) int {
	t.Helper()
	var at []int
	for i, in := range p.Streams[s] {
		if in.Op == ir.Collective && in.Group == g {
			at = append(at, i)
		}
	}
	if n < 0 {
		n += len(at)
	}
	if n < 0 || n >= len(at) {
		t.Fatalf("%s has %d collectives on %v, not a %d-th", ir.StreamName(s), len(at), g, n)
	}
	return at[n]
}

// place is where an error should point: a stream and an index in it.
type place struct{ stream, index int }

// A mutation breaks one template and says where Match's error should
// point, in that template or (where the broken rank lacks what its group
// has) in its unbroken peer's, which has the same indices.
type mutation func(t *testing.T, p *ir.Program) place

// swap exchanges the n1-th collective on g1 and the n2-th on g2 of stream
// s; the first difference is the earlier of the two.
func swap(s int, g1 ir.Group, n1 int, g2 ir.Group, n2 int) mutation {
	return func(t *testing.T, p *ir.Program) place {
		i, j := nth(t, p, s, g1, n1), nth(t, p, s, g2, n2)
		p.Streams[s][i], p.Streams[s][j] = p.Streams[s][j], p.Streams[s][i]
		return place{s, min(i, j)}
	}
}

// swapNested exchanges the first collective on inner with the last one on
// outer before it, on stream s.
func swapNested(s int, outer, inner ir.Group) mutation {
	return func(t *testing.T, p *ir.Program) place {
		j := nth(t, p, s, inner, 0)
		i := -1
		for k, in := range p.Streams[s][:j] {
			if in.Op == ir.Collective && in.Group == outer {
				i = k
			}
		}
		if i < 0 {
			t.Fatalf("no collective on %v before %s %d", outer, ir.StreamName(s), j)
		}
		p.Streams[s][i], p.Streams[s][j] = p.Streams[s][j], p.Streams[s][i]
		return place{s, i}
	}
}

// edit changes the n-th collective on g of stream s, where the error
// points.
func edit(s int, g ir.Group, n int, change func(in *ir.Instr)) mutation {
	return func(t *testing.T, p *ir.Program) place {
		i := nth(t, p, s, g, n)
		change(&p.Streams[s][i])
		return place{s, i}
	}
}

func addBytes(n int64) func(*ir.Instr)          { return func(in *ir.Instr) { in.Bytes += n } }
func setDType(d ir.DType) func(*ir.Instr)       { return func(in *ir.Instr) { in.DType = d } }
func setGroup(g ir.Group) func(*ir.Instr)       { return func(in *ir.Instr) { in.Group = g } }
func setComment(c string) func(in *ir.Instr)    { return func(in *ir.Instr) { in.Comment = c } }
func nothing(t *testing.T, p *ir.Program) place { return place{} }

// regroupFirst moves the first collective on from, of stream s, to group
// to, which does not hold the reference rank: what that rank sees first
// is the broken rank's next collective on from.
func regroupFirst(s int, from, to ir.Group) mutation {
	return func(t *testing.T, p *ir.Program) place {
		p.Streams[s][nth(t, p, s, from, 0)].Group = to
		return place{s, nth(t, p, s, from, 0)}
	}
}

// deleteLast drops the last collective on g of stream s; the error shows
// it on the unbroken peer, at the same index.
func deleteLast(s int, g ir.Group) mutation {
	return func(t *testing.T, p *ir.Program) place {
		i := nth(t, p, s, g, -1)
		p.Streams[s] = slices.Delete(p.Streams[s], i, i+1)
		return place{s, i}
	}
}

// deleteWithRecord drops the first collective on g of stream s and the
// record that follows it: the first wait for that record's event is left
// without one, a problem of the broken rank alone.
func deleteWithRecord(s int, g ir.Group) mutation {
	return func(t *testing.T, p *ir.Program) place {
		i := nth(t, p, s, g, 0)
		j := i + 1
		for j < len(p.Streams[s]) && p.Streams[s][j].Op != ir.Record {
			j++
		}
		if j == len(p.Streams[s]) {
			t.Fatalf("no record after %s %d", ir.StreamName(s), i)
		}
		e := p.Streams[s][j].Event
		p.Streams[s] = slices.Delete(p.Streams[s], j, j+1)
		p.Streams[s] = slices.Delete(p.Streams[s], i, i+1)
		for ws := range p.Streams {
			for k, in := range p.Streams[ws] {
				if in.Op == ir.Wait && in.Event == e {
					return place{ws, k}
				}
			}
		}
		t.Fatalf("nothing waits for e%d", e)
		return place{}
	}
}

// appendCopy issues the last collective on g of stream s once more, at
// the end of the stream, where the error points.
func appendCopy(s int, g ir.Group) mutation {
	return func(t *testing.T, p *ir.Program) place {
		in := p.Streams[s][nth(t, p, s, g, -1)]
		p.Streams[s] = append(p.Streams[s], in)
		return place{s, len(p.Streams[s]) - 1}
	}
}

// insertOn issues a copy of the n-th collective on g of stream s, on
// group to instead, just before it, where the error points.
func insertOn(s int, g ir.Group, n int, to ir.Group) mutation {
	return func(t *testing.T, p *ir.Program) place {
		i := nth(t, p, s, g, n)
		in := p.Streams[s][i]
		in.Group = to
		p.Streams[s] = slices.Insert(p.Streams[s], i, in)
		return place{s, i}
	}
}

// A mismatch case: plan expanded by rank or node, template tmpl broken by
// mutate, and the error Match must return. Rank says which of the two
// ranks the error shows; mutate gives the stream and index; the message
// says says, when given.
type mismatch struct {
	name   string
	plan   string
	by     int
	tmpl   int
	mutate mutation
	group  string
	ranks  []int
	rank   int
	says   string
}

const everyone = "4x2 (ranks 0,4,1,5,2,6,3,7)"

var mismatches = []mismatch{
	// (a) Swapped collectives.
	{"swapped all-reduces", "DDP", perRank, 5, swap(ir.CommReduce, all8, 0, all8, 1),
		everyone, []int{0, 5}, 5, ""},
	{"swapped node all-gathers", "2/2/8", perRank, 5, swap(ir.CommGather, pair, 0, pair, 1),
		"2x1 (ranks 4,5)", []int{4, 5}, 5, ""},
	// A rank that all-gathers for its node before the job-wide
	// all-gather its node issues first waits for its node while the
	// node waits for it: the groups nest, so their order is compared.
	{"swapped nested all-gathers", "ZeRO++ hpZ(4)", perRank, 5, swapNested(ir.CommGather, all8, node4),
		"4x1 (ranks 4,5,6,7)", []int{4, 5}, 5, "but on rank 4 it is comm.gather"},

	// (b) A changed byte count.
	{"bytes of a job-wide all-gather", "ZeRO-3/FSDP", perRank, 5, edit(ir.CommGather, all8, 3, addBytes(4)),
		everyone, []int{0, 5}, 5, "bytes against"},
	// Rank 0 is the first member, but the seven others agree: the
	// error shows rank 0's collective against rank 1's.
	{"bytes on the first rank", "ZeRO-3/FSDP", perRank, 0, edit(ir.CommReduce, all8, 2, addBytes(4)),
		everyone, []int{0, 4}, 0, ""},
	{"bytes of a node all-gather", "MiCS(4)", perRank, 5, edit(ir.CommGather, node4, 2, addBytes(-4)),
		"4x1 (ranks 4,5,6,7)", []int{4, 5}, 5, ""},
	{"bytes of a nested all-gather", "ZeRO++ hpZ(4)", perRank, 6, edit(ir.CommGather, node4, 1, addBytes(4)),
		"4x1 (ranks 4,5,6,7)", []int{4, 6}, 6, ""},
	// Node 1 all-reduces a different size from node 0 across nodes.
	{"bytes per node", "2/2/8", perNode, 1, edit(ir.CommReduce, cross4, 0, addBytes(4)),
		"4x2/2x1 (ranks 0,4,2,6)", []int{0, 4}, 4, ""},

	// (c) A missing collective: the error shows the peer's.
	{"missing reduce-scatter", "ZeRO-3/FSDP", perRank, 5, deleteLast(ir.CommReduce, all8),
		everyone, []int{0, 5}, 0, "but rank 5 issues only"},
	{"missing cross-node all-reduce", "MiCS(4)", perRank, 5, deleteLast(ir.CommReduce, cross2),
		"4x2/4x1 (ranks 1,5)", []int{1, 5}, 1, ""},
	// With its record gone too, a wait of the rank's own never ends.
	{"missing all-gather and its record", "ZeRO-3/FSDP", perRank, 5, deleteWithRecord(ir.CommGather, all8),
		"", []int{5}, 5, "is never recorded on this rank"},

	// (d) An extra collective.
	{"extra all-reduce", "MiCS(4)", perRank, 5, appendCopy(ir.CommReduce, cross2),
		"4x2/4x1 (ranks 1,5)", []int{1, 5}, 5, "but rank 1 issues only"},
	{"extra all-reduce on a new group", "DDP", perRank, 5, insertOn(ir.CommReduce, all8, 1, pair),
		"2x1 (ranks 4,5)", []int{4, 5}, 5, ""},
	{"extra all-gather per node", "ZeRO-3/FSDP", perNode, 1, appendCopy(ir.CommGather, all8),
		everyone, []int{0, 4}, 4, ""},

	// (e) A changed dtype or group.
	{"dtype of a cross-node all-reduce", "MiCS(4)", perRank, 5, edit(ir.CommReduce, cross2, 0, setDType(ir.BF16)),
		"4x2/4x1 (ranks 1,5)", []int{1, 5}, 5, "bf16"},
	{"dtype of an all-gather", "2/2/8", perRank, 3, edit(ir.CommGather, cross4, 1, setDType(ir.F16)),
		"4x2/2x1 (ranks 1,5,3,7)", []int{1, 3}, 3, ""},
	// A reduce-scatter of the pair moved to the node, which holds the
	// pair: the pair sees it where it expects its own.
	{"group widened", "2/2/8", perRank, 5, edit(ir.CommReduce, pair, 0, setGroup(node4)),
		"4x1 (ranks 4,5,6,7)", []int{4, 5}, 5, ""},
	{"group narrowed", "DDP", perRank, 5, regroupFirst(ir.CommReduce, all8, node4),
		everyone, []int{0, 5}, 5, ""},
	{"group moved off the node", "ZeRO++ hpZ(4)", perRank, 5, edit(ir.CommGather, node4, 2, setGroup(all8)),
		everyone, []int{0, 5}, 5, ""},
}

func TestMatchRealPlans(t *testing.T) {
	for _, plan := range tinyPlans {
		p := tinyProgram(t, plan)
		one := &codegen.Bundle{Model: "tiny", Topo: tinyTopo, Plan: plan, Micro: 2, Templates: []ir.Program{*p}}
		if err := codegen.Match(one); err != nil {
			t.Errorf("%s: one template: %v", plan, err)
		}
		for _, by := range []int{perRank, perNode} {
			if err := codegen.Match(expand(t, plan, by)); err != nil {
				t.Errorf("%s: expanded %d: %v", plan, by, err)
			}
		}
	}
}

func TestMatchMutations(t *testing.T) {
	for _, c := range mismatches {
		t.Run(c.plan+"/"+c.name, func(t *testing.T) {
			b := expand(t, c.plan, c.by)
			at := c.mutate(t, &b.Templates[c.tmpl])
			err := codegen.Match(b)
			var me *codegen.MatchError
			if !errors.As(err, &me) {
				t.Fatalf("got %v, want a MatchError", err)
			}
			if me.Group != c.group || !slices.Equal(me.Ranks, c.ranks) || me.Rank != c.rank ||
				me.Stream != ir.StreamName(at.stream) || me.Index != at.index {
				t.Errorf("group %q ranks %v rank %d at %s %d\nwant group %q ranks %v rank %d at %s %d\n%v",
					me.Group, me.Ranks, me.Rank, me.Stream, me.Index,
					c.group, c.ranks, c.rank, ir.StreamName(at.stream), at.index, err)
			}
			// The text says the same.
			prefix := fmt.Sprintf("rank %d %s %d: ", c.rank, ir.StreamName(at.stream), at.index)
			if c.group != "" {
				prefix = fmt.Sprintf("group %s: ranks %d, %d: ", c.group, c.ranks[0], c.ranks[1]) + prefix
			}
			if !strings.HasPrefix(err.Error(), prefix) {
				t.Errorf("%v\ndoes not start %q", err, prefix)
			}
			if !strings.Contains(err.Error(), c.says) {
				t.Errorf("%v\ndoes not say %q", err, c.says)
			}
		})
	}
}

// TestMatchLegitimateDifferences: templates that differ only where no
// group can tell still match.
func TestMatchLegitimateDifferences(t *testing.T) {
	for _, c := range []struct {
		name   string
		plan   string
		by     int
		tmpl   int
		mutate mutation
	}{
		{"comment on a collective", "ZeRO-3/FSDP", perRank, 5, edit(ir.CommGather, all8, 0, setComment("rank 5's own"))},
		{"compute kernels reordered", "2/2/8", perRank, 5, swapKernels},
		{"compute kernels reordered per node", "ZeRO++ hpZ(4)", perNode, 1, swapKernels},
		// The groups of a node lie inside it: node 1 may gather other
		// sizes or in another order than node 0 without a hang.
		{"node all-gather bytes per node", "MiCS(4)", perNode, 1, edit(ir.CommGather, node4, 0, addBytes(4))},
		{"node all-gathers swapped per node", "ZeRO++ hpZ(4)", perNode, 1, swap(ir.CommGather, node4, 0, node4, 1)},
		{"pair reduce-scatters swapped per node", "2/2/8", perNode, 0, swap(ir.CommReduce, pair, 0, pair, 1)},
		{"unchanged", "DDP", perRank, 0, nothing},
	} {
		b := expand(t, c.plan, c.by)
		c.mutate(t, &b.Templates[c.tmpl])
		if err := codegen.Match(b); err != nil {
			t.Errorf("%s/%s: %v", c.plan, c.name, err)
		}
	}
}

// swapKernels exchanges the first two adjacent kernels of the compute
// stream: a different compute order, the same collectives.
func swapKernels(t *testing.T, p *ir.Program) place {
	s := p.Streams[ir.Compute]
	for i := 0; i+1 < len(s); i++ {
		if s[i].Op == ir.Kernel && s[i+1].Op == ir.Kernel && s[i].Kern != s[i+1].Kern {
			s[i], s[i+1] = s[i+1], s[i]
			return place{ir.Compute, i}
		}
	}
	t.Fatal("no two adjacent kernels")
	return place{}
}
