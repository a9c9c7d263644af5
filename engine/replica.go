package engine

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"amspc/ir"
	"amspc/kernels"
)

// Replicated parameters (a stage whose P shard is smaller than the world:
// ZeRO-1 and ZeRO-2 hold every parameter on every rank) are gathered into
// each rank's own copy, and every local rank used to pack each weight for
// its matmuls itself: eight ranks in one process packed every weight eight
// times a step. A replicaMemo lets the local ranks that hold equal copies
// share one packing.
//
// Which copies are equal: the ranks of one template whose P shard index
// of the stage is the same (the sharers) hold the same parameter values
// at the same point of their programs (what makes data parallelism
// correct, and what every plan's test of training like one rank checks).
// A point is named by how many whole writes of the step's program have
// written the P buffer, its generation: right after an all-gather into
// the whole buffer, or a kernel that writes all of it (DDP's optimizer
// updating every copy in place, the cast of a whole master copy), the
// buffer holds the same values on every sharer, since the sharers run
// one program on equal data. Any other write (the optimizer's in-place
// update of the rank's shard, a load, a checkpoint's restore) ends that
// until the next whole write, and meanwhile the rank packs its own copy.
//
// A packing lives until every sharer is done with it: a sharer is done
// after its last use of it in the generation (the program's uses of that
// operand in a step, where a step gathers the buffer whole once) or, at
// the latest, when it next writes the buffer (the program orders every
// read of the buffer, and so every use of a packing of it, before that
// write). A sharer never uses a packing it is done with; one that finds
// none packs it again: sharing is only an optimisation, never needed to
// be right.
type replicaMemo struct {
	mu     sync.Mutex
	m      map[replicaKey]*replicaEntry
	groups map[replicaGroupKey]*replicaGroup
	// reused counts the uses of a packing another rank made; early the
	// sharers done with a packing after their last use.
	reused, early atomic.Int64
}

// replicaGroupKey names the sharers of a stage's parameters.
type replicaGroupKey struct {
	// tp is the ranks' tensor-parallel position: ranks at different
	// positions hold different parts under the same shard index.
	template, stage, pIndex, tp int
}

type replicaGroup struct {
	ranks []int       // the sharers, in the order they registered
	index map[int]int // rank -> its place in ranks
	// passed[i]: sharer i is done with every generation below it.
	passed []uint64
}

type replicaKey struct {
	group  replicaGroupKey
	gen    uint64
	off, n int64 // the operand's elements in the P buffer
	kind   ir.OpKind
}

type replicaEntry struct {
	key  replicaKey
	once sync.Once
	pack *kernels.PackedB
	done []bool // by sharer
	left int    // sharers not done with it
	// src is the packed values, kept when verifyReplicas is set.
	src []float32
}

// verifyReplicas makes every use of a shared packing first check that the
// rank's own copy of the weight is bit for bit the one that was packed
// (the tests set it, so every plan they train checks the equality the
// sharing relies on).
var verifyReplicas = false

// replicaSharer is a Comm whose local ranks can share packings of their
// replicated parameters.
type replicaSharer interface {
	replicas() *replicaMemo
}

// replicaState is one rank's side: per root buffer, whether it is a
// stage's P buffer, its generation, and its packings' uses.
type replicaState struct {
	memo   *replicaMemo
	group  []replicaGroupKey // per root buffer; stage -1 when not a P buffer
	gen    []uint64          // whole writes of it so far
	stable []bool            // the last write was a whole write
	// uses counts, per root buffer, each operand's uses in this generation
	// against the uses the program makes in a step; nil where a step does
	// not write the buffer whole exactly once.
	uses []map[useKey]*useCount
}

type useKey struct {
	off, n int64
	kind   ir.OpKind
}

type useCount struct{ want, done int }

// newReplicaState registers rank k as a sharer of each stage's P buffer
// and counts its program's uses of them. Every rank registers before any
// runs.
func newReplicaState(memo *replicaMemo, k *rank) *replicaState {
	p := k.p
	st := &replicaState{
		memo:   memo,
		group:  make([]replicaGroupKey, len(p.Buffers)),
		gen:    make([]uint64, len(p.Buffers)),
		stable: make([]bool, len(p.Buffers)),
		uses:   make([]map[useKey]*useCount, len(p.Buffers)),
	}
	template := 0
	if len(k.b.RankTemplate) > 0 {
		template = int(k.b.RankTemplate[k.r])
	}
	for i := range st.group {
		st.group[i].stage = -1
	}
	memo.mu.Lock()
	for i, l := range p.Layouts {
		if l.P < 0 || p.Buffers[l.P].IsView() || p.Buffers[l.P].DType == ir.I32 {
			continue
		}
		gk := replicaGroupKey{template, i, l.PShard.Index(k.topo, k.r), tpPosition(k.b, k.r)}
		st.group[l.P] = gk
		if memo.groups == nil {
			memo.groups = map[replicaGroupKey]*replicaGroup{}
		}
		g := memo.groups[gk]
		if g == nil {
			g = &replicaGroup{index: map[int]int{}}
			memo.groups[gk] = g
		}
		g.index[k.r] = len(g.ranks)
		g.ranks = append(g.ranks, k.r)
		g.passed = append(g.passed, 0)
	}
	memo.mu.Unlock()

	whole := make([]int, len(p.Buffers))
	for _, ins := range p.Streams {
		for _, in := range ins {
			switch {
			case in.Op == ir.Collective && in.Coll == ir.AllGather:
				if r, _ := k.offset(in.Out); r == in.Out {
					whole[r]++
				}
			case in.Op == ir.Kernel:
				for _, id := range in.Outs {
					if r, ok := st.wholeRoot(k, id); ok {
						whole[r]++
					}
				}
				if in.Kern != ir.MatMul && in.Kern != ir.MatMulGradA {
					continue
				}
				r, off := k.offset(in.Args[1])
				if st.group[r].stage < 0 {
					continue
				}
				if st.uses[r] == nil {
					st.uses[r] = map[useKey]*useCount{}
				}
				u := useKey{off, p.Buffers[in.Args[1]].Elems, in.Kern}
				if st.uses[r][u] == nil {
					st.uses[r][u] = &useCount{}
				}
				st.uses[r][u].want++
			}
		}
	}
	for r, n := range whole {
		if n != 1 {
			st.uses[r] = nil
		}
	}
	return st
}

// wrote records that root buffer id is about to be written (by anything,
// a whole all-gather too): rank r is done with every packing of its
// present and earlier generations. Callers hold k.mu.
func (st *replicaState) wrote(r int, id int32) {
	if st == nil || st.group[id].stage < 0 {
		return
	}
	st.stable[id] = false
	gk := st.group[id]
	st.memo.mu.Lock()
	defer st.memo.mu.Unlock()
	g := st.memo.groups[gk]
	i := g.index[r]
	g.passed[i] = st.gen[id] + 1
	for _, e := range st.memo.m {
		if e.key.group == gk && e.key.gen <= st.gen[id] {
			st.memo.finish(e, i)
		}
	}
}

// settled records a whole write of root buffer id (an all-gather into
// all of it, or a kernel writing all of it), after wrote.
func (st *replicaState) settled(id int32) {
	if st == nil || st.group[id].stage < 0 {
		return
	}
	st.gen[id]++
	st.stable[id] = true
	for _, u := range st.uses[id] {
		u.done = 0
	}
}

// wholeRoot is the root of buffer id when id is a P buffer's root or a
// view of all of it (a kernel writing it is a whole write).
func (st *replicaState) wholeRoot(k *rank, id int32) (int32, bool) {
	r, off := k.offset(id)
	if st.group[r].stage < 0 || off != 0 || k.p.Buffers[id].Elems != k.p.Buffers[r].Elems {
		return r, false
	}
	return r, true
}

// finish marks sharer i done with e; the last frees it. Callers hold
// m.mu.
func (m *replicaMemo) finish(e *replicaEntry, i int) {
	if e.done[i] {
		return
	}
	e.done[i] = true
	if e.left--; e.left == 0 {
		delete(m.m, e.key)
		if e.pack != nil {
			e.pack.Free()
		}
	}
}

// replicaPack is the shared packing of a matmul's operand 1 when it lies
// in a stable replicated P buffer, else nil; done, when not nil, is to be
// called once the kernel has run: that was the rank's last use of the
// packing in this generation.
func (k *rank) replicaPack(in *ir.Instr) (pack *kernels.PackedB, done func(), use PackUse, err error) {
	st := k.reps
	root, off := k.offset(in.Args[1])
	b := k.m(in.Args[1]).f32
	k.mu.Lock()
	gk := st.group[root]
	ok := gk.stage >= 0 && st.stable[root]
	key := replicaKey{group: gk, gen: st.gen[root], off: off, n: int64(len(b)), kind: in.Kern}
	last := false
	if u := st.uses[root][useKey{off, key.n, in.Kern}]; ok && u != nil {
		u.done++
		last = u.done == u.want
	}
	k.mu.Unlock()
	if !ok {
		return nil, nil, 0, nil
	}

	m := st.memo
	m.mu.Lock()
	g := m.groups[gk]
	i := g.index[k.r]
	e := m.m[key]
	if e == nil {
		e = &replicaEntry{key: key, done: make([]bool, len(g.ranks))}
		for j, p := range g.passed {
			e.done[j] = p > key.gen
			if !e.done[j] {
				e.left++
			}
		}
		if m.m == nil {
			m.m = map[replicaKey]*replicaEntry{}
		}
		m.m[key] = e
	}
	if e.done[i] {
		// Used more often than the program's count says: this use
		// packs for itself.
		m.mu.Unlock()
		return nil, nil, 0, nil
	}
	m.mu.Unlock()
	if last {
		done = func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			if !e.done[i] {
				m.early.Add(1)
			}
			m.finish(e, i)
		}
	}

	mine := false
	e.once.Do(func() {
		mine = true
		e.pack = k.packOperand(in, b)
		if verifyReplicas {
			e.src = append([]float32(nil), b...)
		}
	})
	use = PackMade
	if !mine {
		m.reused.Add(1)
		use = PackReused
	}
	if e.src != nil {
		for j := range b {
			if math.Float32bits(b[j]) != math.Float32bits(e.src[j]) {
				return nil, done, use, fmt.Errorf("replicas of %s differ at element %d: %v here, %v where it was packed",
					k.p.Buffers[in.Args[1]].Name, j, b[j], e.src[j])
			}
		}
	}
	return e.pack, done, use, nil
}
