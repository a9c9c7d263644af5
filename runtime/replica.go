package runtime

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"amspc/codegen"
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
// of the stage is the same hold the same parameter values at the same
// point of their programs (what makes data parallelism correct, and what
// every plan's test of training like one rank checks). A point is named by
// how many whole all-gathers have written the P buffer: right after such
// a gather the buffer holds the gathered values, the same on every such
// rank. Any other write (the optimizer's in-place update of the rank's
// shard, a load, a checkpoint's restore) ends that until the next whole
// gather, and meanwhile the rank packs its own copy.
//
// A rank holds a reference to each packing it used until it next writes
// the buffer (the program orders every read of the buffer, and so every
// use of a packing of it, before that write); the last reference frees
// the packing. A rank that comes later for a packing already freed packs
// it again: sharing is only an optimisation, never needed to be right.
type replicaMemo struct {
	mu sync.Mutex
	m  map[replicaKey]*replicaEntry
	// reused counts the uses of a packing another rank made.
	reused atomic.Int64
}

type replicaKey struct {
	template int
	stage    int // the layout index
	pIndex   int // the rank's P shard index of the stage
	gen      uint64
	off, n   int64 // the operand's elements in the P buffer
	kind     ir.OpKind
}

type replicaEntry struct {
	key  replicaKey
	once sync.Once
	pack *kernels.PackedB
	refs int
	// src is the packed values, kept when verifyReplicas is set.
	src []float32
}

// verifyReplicas makes every use of a shared packing first check that the
// rank's own copy of the weight is bit for bit the one that was packed
// (the tests set it, so every plan they train checks the equality the
// sharing relies on).
var verifyReplicas = false

// replicaState is one rank's side: per root buffer, whether it is a
// stage's P buffer, its generation and the packings the rank holds.
type replicaState struct {
	memo     *replicaMemo
	template int
	stage    []int    // per root buffer: the layout whose P it is, or -1
	gen      []uint64 // whole all-gathers into it so far
	stable   []bool   // the last write was a whole all-gather
	held     [][]*replicaEntry
}

// replicaSharer is a Comm whose local ranks can share packings of their
// replicated parameters.
type replicaSharer interface {
	replicas() *replicaMemo
}

func newReplicaState(memo *replicaMemo, b *codegen.Bundle, p *codegen.Program, r int) *replicaState {
	st := &replicaState{
		memo:   memo,
		stage:  make([]int, len(p.Buffers)),
		gen:    make([]uint64, len(p.Buffers)),
		stable: make([]bool, len(p.Buffers)),
		held:   make([][]*replicaEntry, len(p.Buffers)),
	}
	if len(b.RankTemplate) > 0 {
		st.template = int(b.RankTemplate[r])
	}
	for i := range st.stage {
		st.stage[i] = -1
	}
	for i, l := range p.Layouts {
		if l.P >= 0 && !p.Buffers[l.P].IsView() && p.Buffers[l.P].DType != ir.I32 {
			st.stage[l.P] = i
		}
	}
	return st
}

// wrote records that root buffer id is about to be written other than by
// a whole all-gather: the rank's packings of it are stale. Callers hold
// k.mu or run before the rank's streams start.
func (st *replicaState) wrote(id int32) {
	if st == nil || st.stage[id] < 0 {
		return
	}
	st.stable[id] = false
	st.release(id)
}

// gathered records a whole all-gather into root buffer id.
func (st *replicaState) gathered(id int32) {
	if st == nil || st.stage[id] < 0 {
		return
	}
	st.release(id)
	st.gen[id]++
	st.stable[id] = true
}

func (st *replicaState) release(id int32) {
	if len(st.held[id]) == 0 {
		return
	}
	st.memo.mu.Lock()
	defer st.memo.mu.Unlock()
	for _, e := range st.held[id] {
		if e.refs--; e.refs == 0 {
			if st.memo.m[e.key] == e {
				delete(st.memo.m, e.key)
			}
			e.pack.Free()
		}
	}
	st.held[id] = st.held[id][:0]
}

// replicaPack is the shared packing of a matmul's operand 1 when it lies
// in a stable replicated P buffer; else nil.
func (k *rank) replicaPack(in *codegen.Instr) (*kernels.PackedB, error) {
	st := k.reps
	root, off := k.offset(in.Args[1])
	k.mu.Lock()
	stage := st.stage[root]
	ok := stage >= 0 && st.stable[root]
	gen := st.gen[root]
	k.mu.Unlock()
	if !ok {
		return nil, nil
	}
	b := k.m(in.Args[1]).f32
	s := k.shape(in.Args[1])
	kk, n := int(s[0]), int(s[1])
	lay := k.p.Layouts[stage]
	key := replicaKey{template: st.template, stage: stage, pIndex: lay.PShard.Index(k.topo, k.r),
		gen: gen, off: off, n: int64(len(b)), kind: in.Kern}

	st.memo.mu.Lock()
	if st.memo.m == nil {
		st.memo.m = map[replicaKey]*replicaEntry{}
	}
	e := st.memo.m[key]
	if e == nil {
		e = &replicaEntry{key: key}
		st.memo.m[key] = e
	}
	e.refs++
	st.memo.mu.Unlock()
	k.mu.Lock()
	st.held[root] = append(st.held[root], e)
	k.mu.Unlock()

	mine := false
	e.once.Do(func() {
		mine = true
		if in.Kern == ir.MatMul {
			e.pack = kernels.PackB(b, kk, n)
		} else {
			e.pack = kernels.PackBT(b, kk, n)
		}
		if verifyReplicas {
			e.src = append([]float32(nil), b...)
		}
	})
	if !mine {
		st.memo.reused.Add(1)
	}
	if e.src != nil {
		for i := range b {
			if math.Float32bits(b[i]) != math.Float32bits(e.src[i]) {
				return nil, fmt.Errorf("replicas of %s differ at element %d: %v here, %v where it was packed",
					k.p.Buffers[in.Args[1]].Name, i, b[i], e.src[i])
			}
		}
	}
	return e.pack, nil
}
