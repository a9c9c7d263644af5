package engine

// Collectives.
//
// Comm is how the executor runs a ir.Collective instruction: every
// member of a group calls the same collective with the same member list
// (ir.Group.Ranks, identical on every member) and the same sizes.
// A group instance is (stream, member list); on one instance the k-th
// call of each member meets the k-th call of every other member, so the
// two comm streams of a rank, and different groups on one stream, never
// wait on each other.
//
// Reduction order. A sum is a left fold in group order, element by
// element, in float32:
//
//	s[k] = ((x_0[k] + x_1[k]) + x_2[k]) + ... + x_{n-1}[k]
//
// where x_i is the buffer of the i-th member of g. Each element is summed
// by exactly one goroutine and the result copied to every member that
// receives it, so a sum is bitwise the same on every member and in every
// run, whatever the scheduling. Training must match a single-rank run
// within a tolerance (NUMERICS.md), but bitwise reproducibility of one
// plan is what makes a failing run debuggable; any backend must keep this
// order (a ring or tree order would change the bits).

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"amspc/ir"
	"amspc/kernels"
)

// ControlStream is the stream of the runtime's own collectives (the
// step's loss across processes), apart from the plan's two comm streams.
const ControlStream = ir.NumStreams

// World is the ranks a run spans, seen from one process: which of them
// this process runs (every rank for a LocalWorld, one for an MPI
// process), an endpoint for each, and an abort shared by all.
type World interface {
	// Size is the number of ranks.
	Size() int
	// Local lists the ranks this process runs, ascending.
	Local() []int
	// Comm is a local rank's endpoint.
	Comm(rank int) Comm
	// Done is closed by the first Abort.
	Done() <-chan struct{}
	// Abort fails every pending and future collective (Comm.Abort).
	Abort(err error)
}

// allRanks is the member list of a group of every rank: 0 .. n-1.
func allRanks(n int) []int {
	g := make([]int, n)
	for i := range g {
		g[i] = i
	}
	return g
}

// Comm performs collectives among the ranks of a group. Buffers are
// float32 (the CPU backend computes in fp32; bf16 values are stored as
// float32). g is the ordered member list and must contain Rank(); stream
// keeps independent call sequences apart (ir.CommGather,
// ir.CommReduce). A Comm may be used from several goroutines at
// once, one per stream.
type Comm interface {
	Rank() int
	// AllGather sets out to the concatenation of every member's in, in
	// group order: len(out) = len(g)*len(in). in is either disjoint from
	// out or exactly out's own part (in-place).
	AllGather(stream int, g []int, in, out []float32) error
	// ReduceScatter sets out to member i's part of the elementwise sum
	// of every member's in: len(in) = len(g)*len(out). out is either
	// disjoint from in or exactly in's own part (in-place).
	ReduceScatter(stream int, g []int, in, out []float32) error
	// AllReduce sums buf over the group in place.
	AllReduce(stream int, g []int, buf []float32) error
	// Broadcast copies root's buf to every member; root is a rank in g.
	Broadcast(stream int, g []int, root int, buf []float32) error
	// Abort makes every pending and future call on every rank return an
	// error wrapping ErrCommAborted and err. The first Abort wins.
	Abort(err error)
}

var (
	// ErrCommAborted is wrapped by every error after Abort.
	ErrCommAborted = errors.New("comm aborted")
	// ErrCommMismatch is wrapped when the members of a group issue
	// different calls (kind, sizes or root) at the same sequence number.
	ErrCommMismatch = errors.New("collective mismatch")
	// ErrCommInvalid is wrapped when a call is malformed (sizes that do
	// not fit the group, a root or rank outside it, bad aliasing).
	ErrCommInvalid = errors.New("invalid collective")
)

// CommError is the error of one collective call on one rank.
type CommError struct {
	Rank   int // the rank whose call failed
	Stream int
	Group  []int
	Seq    uint64 // the call's number on (Stream, Group), from 0
	Call   string // e.g. all_reduce(1024)
	Err    error
}

func (e *CommError) Error() string {
	return fmt.Sprintf("rank %d: %s on stream %d group %v call %d: %v",
		e.Rank, e.Call, e.Stream, e.Group, e.Seq, e.Err)
}

func (e *CommError) Unwrap() error { return e.Err }

// commCall is one member's side of a collective. AllReduce and Broadcast
// use out as the buffer and leave in nil. A shared all-gather fills one
// buffer for every member instead of each member's out (out still gives
// the sizes and the aliasing rules).
type commCall struct {
	rank   int
	kind   ir.Coll
	root   int
	in     []float32
	out    []float32
	shared bool
}

// A sharingComm can gather into one buffer that every member of the group
// reads, when the members run in one process and none of them writes its
// result: the members' parts are copied once in all instead of once per
// member, and every member's kernels then read the same memory.
type sharingComm interface {
	// AllGatherShared is AllGather whose result is returned instead of
	// written into out (which only sizes it; in is disjoint from it or
	// its own part, as for AllGather).
	// Every member must call release once it no longer reads the result;
	// the buffer is reused after the last release. The memo holds what
	// the members derive from the result, once for all of them (a
	// weight's packing).
	AllGatherShared(stream int, g []int, in, out []float32) (result []float32, release func(), m *memo, err error)
}

// memo computes a value per key once, for every caller.
type memo struct {
	mu sync.Mutex
	m  map[memoKey]*memoEntry
}

type memoKey struct {
	off, n int64 // the elements read, in the shared result
	kind   ir.OpKind
}

type memoEntry struct {
	once sync.Once
	v    any
}

// free gives back the memory of what the memo holds (a packing); every
// caller is done with it.
func (m *memo) free() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.m {
		if p, ok := e.v.(interface{ Free() }); ok {
			p.Free()
		}
	}
	m.m = nil
}

// get is f's value for key, computed by the first caller.
func (m *memo) get(key memoKey, f func() any) any {
	m.mu.Lock()
	if m.m == nil {
		m.m = map[memoKey]*memoEntry{}
	}
	e := m.m[key]
	if e == nil {
		e = &memoEntry{}
		m.m[key] = e
	}
	m.mu.Unlock()
	e.once.Do(func() { e.v = f() })
	return e.v
}

func (c *commCall) String() string {
	switch c.kind {
	case ir.AllGather, ir.ReduceScatter:
		return fmt.Sprintf("%s(in %d, out %d)", c.kind, len(c.in), len(c.out))
	case ir.Broadcast:
		return fmt.Sprintf("%s(%d, root %d)", c.kind, len(c.out), c.root)
	}
	return fmt.Sprintf("%s(%d)", c.kind, len(c.out))
}

// matches reports whether two members' calls can meet.
func (c *commCall) matches(d *commCall) bool {
	return c.kind == d.kind && len(c.in) == len(d.in) && len(c.out) == len(d.out) && c.root == d.root && c.shared == d.shared
}

// commIndex validates g (ranks in [0,n), no repeats, rank a member) and
// returns rank's position in it. A bad g cannot rendezvous, so its error
// is the caller's alone.
func commIndex(g []int, n, rank int) (int, error) {
	if len(g) == 0 {
		return -1, fmt.Errorf("%w: empty group", ErrCommInvalid)
	}
	seen := make([]bool, n)
	idx := -1
	for i, r := range g {
		if r < 0 || r >= n {
			return -1, fmt.Errorf("%w: rank %d out of range [0,%d)", ErrCommInvalid, r, n)
		}
		if seen[r] {
			return -1, fmt.Errorf("%w: rank %d repeated", ErrCommInvalid, r)
		}
		seen[r] = true
		if r == rank {
			idx = i
		}
	}
	if idx < 0 {
		return -1, fmt.Errorf("%w: rank %d not a member", ErrCommInvalid, rank)
	}
	return idx, nil
}

// check validates c's sizes, root and aliasing for a group of n with c
// at index idx. Unlike commIndex's errors, these poison the rendezvous
// so that every member fails rather than hangs.
func (c *commCall) check(g []int, idx int) error {
	n := len(g)
	switch c.kind {
	case ir.AllGather:
		m := len(c.in)
		if len(c.out) != n*m {
			return fmt.Errorf("%w: rank %d called %s: len(out) must be %d x %d = %d", ErrCommInvalid, c.rank, c, n, m, n*m)
		}
		if commOverlap(c.in, c.out) && !commSame(c.in, c.out[idx*m:(idx+1)*m]) {
			return fmt.Errorf("%w: rank %d called %s: in overlaps out but is not its part %d", ErrCommInvalid, c.rank, c, idx)
		}
	case ir.ReduceScatter:
		m := len(c.out)
		if len(c.in) != n*m {
			return fmt.Errorf("%w: rank %d called %s: len(in) must be %d x %d = %d", ErrCommInvalid, c.rank, c, n, m, n*m)
		}
		if commOverlap(c.in, c.out) && !commSame(c.out, c.in[idx*m:(idx+1)*m]) {
			return fmt.Errorf("%w: rank %d called %s: out overlaps in but is not its part %d", ErrCommInvalid, c.rank, c, idx)
		}
	case ir.Broadcast:
		for _, r := range g {
			if r == c.root {
				return nil
			}
		}
		return fmt.Errorf("%w: rank %d called %s: root not in group", ErrCommInvalid, c.rank, c)
	}
	return nil
}

// commOverlap reports whether a and b share memory.
func commOverlap(a, b []float32) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa < pb+uintptr(len(b))*4 && pb < pa+uintptr(len(a))*4
}

// commSame reports whether a and b are the same memory.
func commSame(a, b []float32) bool {
	return len(a) == len(b) && (len(a) == 0 || unsafe.SliceData(a) == unsafe.SliceData(b))
}

// commChunk bounds a fold's chunk when it goes to more than one
// destination: small enough to stay in cache while it is copied on.
const commChunk = 4096

// commFold sets every dst[k] to the left fold in order of parts[i][k]
// (the documented reduction order: kernels.Fold). All slices have the
// same length; a dst may be one of the parts, since every part of a chunk
// is read before any dst of it is written.
func commFold(dsts, parts [][]float32) {
	if len(dsts) == 1 {
		kernels.Fold(dsts[0], parts)
		return
	}
	n := len(parts[0])
	chunk := make([][]float32, len(parts))
	for lo := 0; lo < n; lo += commChunk {
		hi := min(n, lo+commChunk)
		for i, p := range parts {
			chunk[i] = p[lo:hi]
		}
		kernels.Fold(dsts[0][lo:hi], chunk)
		for _, d := range dsts[1:] {
			copy(d[lo:hi], dsts[0][lo:hi])
		}
	}
}
