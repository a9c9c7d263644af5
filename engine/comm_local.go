package engine

// The local comm backend: ranks are goroutines of one process and a
// collective is a rendezvous in shared memory.
//
// A call registers its buffers in the rendezvous of its (stream, group,
// sequence number) and waits until every member has arrived. Then each
// member does its share straight from the other members' buffers: an
// all-gather or broadcast member fills its own output, a reduce-scatter
// member sums its own part, and an all-reduce member sums the i-th of n
// element ranges and writes it to every member's buffer. Shares are
// disjoint, so nothing is locked per element, the combine runs on all
// members at once, and each element is still summed by one goroutine in
// group order. A second barrier keeps every buffer alive until no member
// reads or writes it any more.
//
// A shared all-gather (AllGatherShared) fills one buffer from the
// world's pool instead: member i copies its part into it, and the buffer
// goes back to the pool when every member has released it.
//
// Abort fails every rendezvous that has not started; one that has started
// only copies and adds, so its members finish it within a few
// milliseconds and return. No goroutines are created, so none can leak.

import (
	"amspc/ir"
	"fmt"
	"slices"
	"strconv"
	"sync"
)

// LocalWorld is n ranks in one process.
type LocalWorld struct {
	n  int
	mu sync.Mutex
	// seq is each rank's next sequence number per group instance.
	seq map[commSeqKey]uint64
	// ops are the rendezvous some but not all members have reached.
	ops  map[commOpKey]*commOp
	err  error // set by the first Abort
	done chan struct{}
	// shared holds released buffers of shared all-gathers by length.
	shared map[int][][]float32
	// reps shares the packings of replicated weights among the ranks.
	reps replicaMemo
}

type commSeqKey struct {
	rank, stream int
	group        string
}

type commOpKey struct {
	stream int
	group  string
	seq    uint64
}

// commOp is one rendezvous.
type commOp struct {
	calls   []commCall // by group index
	first   int        // index of the first arrival, the call others must match
	arrived int
	// ready is closed when every member has arrived (started) or the
	// rendezvous failed (err).
	ready   chan struct{}
	started bool
	err     error
	// finished is closed when every member has done its share.
	left     int
	finished chan struct{}
	// result is a shared all-gather's buffer, refs the members that have
	// not released it.
	result []float32
	refs   int
	memo   memo // what the members derive from result
}

// NewLocalWorld returns a world of n ranks.
func NewLocalWorld(n int) *LocalWorld {
	if n < 1 {
		panic(fmt.Sprintf("runtime: NewLocalWorld(%d)", n))
	}
	return &LocalWorld{
		n:    n,
		seq:  make(map[commSeqKey]uint64),
		ops:  make(map[commOpKey]*commOp),
		done: make(chan struct{}),
	}
}

// Size is the number of ranks.
func (w *LocalWorld) Size() int { return w.n }

// Local lists every rank: a LocalWorld runs them all in this process.
func (w *LocalWorld) Local() []int { return allRanks(w.n) }

// Comm returns rank's endpoint.
func (w *LocalWorld) Comm(rank int) Comm {
	if rank < 0 || rank >= w.n {
		panic(fmt.Sprintf("runtime: LocalWorld.Comm(%d) with %d ranks", rank, w.n))
	}
	return &localComm{w: w, rank: rank}
}

// Done is closed by the first Abort, so that other parts of a rank (a
// compute stream waiting on an event) can stop too.
func (w *LocalWorld) Done() <-chan struct{} { return w.done }

// Err is the abort error (wrapping ErrCommAborted), or nil.
func (w *LocalWorld) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Abort fails every pending and future call on every rank.
func (w *LocalWorld) Abort(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return
	}
	if err == nil {
		w.err = ErrCommAborted
	} else {
		w.err = fmt.Errorf("%w: %w", ErrCommAborted, err)
	}
	close(w.done)
	for _, op := range w.ops {
		if !op.started && op.err == nil {
			op.err = w.err
			close(op.ready)
		}
	}
	// Waiters hold their ops; later calls fail before looking.
	clear(w.ops)
}

type localComm struct {
	w    *LocalWorld
	rank int
}

func (c *localComm) Rank() int       { return c.rank }
func (c *localComm) Abort(err error) { c.w.Abort(err) }

func (c *localComm) replicas() *replicaMemo { return &c.w.reps }

func (c *localComm) AllGather(stream int, g []int, in, out []float32) error {
	return c.w.run(stream, g, commCall{rank: c.rank, kind: ir.AllGather, in: in, out: out})
}

// AllGatherShared gathers into one buffer for all members (sharingComm).
func (c *localComm) AllGatherShared(stream int, g []int, in, out []float32) ([]float32, func(), *memo, error) {
	op, err := c.w.rendezvous(stream, g, commCall{rank: c.rank, kind: ir.AllGather, in: in, out: out, shared: true})
	if err != nil {
		return nil, nil, nil, err
	}
	w := c.w
	return op.result, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if op.refs--; op.refs == 0 {
			w.shared[len(op.result)] = append(w.shared[len(op.result)], op.result)
			op.memo.free()
		}
	}, &op.memo, nil
}

func (c *localComm) ReduceScatter(stream int, g []int, in, out []float32) error {
	return c.w.run(stream, g, commCall{rank: c.rank, kind: ir.ReduceScatter, in: in, out: out})
}

func (c *localComm) AllReduce(stream int, g []int, buf []float32) error {
	return c.w.run(stream, g, commCall{rank: c.rank, kind: ir.AllReduce, out: buf})
}

func (c *localComm) Broadcast(stream int, g []int, root int, buf []float32) error {
	return c.w.run(stream, g, commCall{rank: c.rank, kind: ir.Broadcast, root: root, out: buf})
}

// run is one member's call: rendezvous, share, second barrier.
func (w *LocalWorld) run(stream int, g []int, call commCall) error {
	_, err := w.rendezvous(stream, g, call)
	return err
}

// rendezvous is run, returning the finished rendezvous.
func (w *LocalWorld) rendezvous(stream int, g []int, call commCall) (*commOp, error) {
	fail := func(seq uint64, err error) (*commOp, error) {
		return nil, &CommError{Rank: call.rank, Stream: stream, Group: slices.Clone(g), Seq: seq, Call: call.String(), Err: err}
	}
	idx, err := commIndex(g, w.n, call.rank)
	if err != nil {
		return fail(0, err)
	}
	bad := call.check(g, idx)
	group := commGroupKey(g)

	sk := commSeqKey{call.rank, stream, group}
	w.mu.Lock()
	seq := w.seq[sk]
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return fail(seq, err)
	}
	w.seq[sk] = seq + 1
	key := commOpKey{stream, group, seq}
	op := w.ops[key]
	if op == nil {
		op = &commOp{
			calls:    make([]commCall, len(g)),
			first:    idx,
			ready:    make(chan struct{}),
			left:     len(g),
			finished: make(chan struct{}),
		}
		w.ops[key] = op
	}
	op.calls[idx] = call
	op.arrived++
	if !op.started && op.err == nil {
		ref := &op.calls[op.first]
		switch {
		case bad != nil:
			op.err = bad
		case !ref.matches(&call):
			op.err = fmt.Errorf("%w: rank %d called %s, rank %d called %s",
				ErrCommMismatch, ref.rank, ref, call.rank, &call)
		case op.arrived == len(g):
			op.started = true
			if call.shared {
				op.result, op.refs = w.sharedBuffer(len(call.out)), len(g)
			}
		}
		if op.started || op.err != nil {
			close(op.ready)
		}
	}
	if op.arrived == len(g) {
		delete(w.ops, key)
	}
	w.mu.Unlock()

	<-op.ready
	if op.err != nil {
		return fail(seq, op.err)
	}
	op.share(idx)
	w.mu.Lock()
	op.left--
	if op.left == 0 {
		close(op.finished)
	}
	w.mu.Unlock()
	<-op.finished
	return op, nil
}

// sharedBuffer is a buffer of n floats for a shared all-gather, reused
// from an earlier one when one is free. Callers hold w.mu.
func (w *LocalWorld) sharedBuffer(n int) []float32 {
	if free := w.shared[n]; len(free) > 0 {
		s := free[len(free)-1]
		w.shared[n] = free[:len(free)-1]
		return s
	}
	if w.shared == nil {
		w.shared = make(map[int][][]float32)
	}
	return makeF32(int64(n))
}

// share is member idx's part of a started rendezvous (see the file
// comment for who writes what).
func (op *commOp) share(idx int) {
	me := &op.calls[idx]
	n := len(op.calls)
	switch me.kind {
	case ir.AllGather:
		m := len(me.in)
		if me.shared {
			copy(op.result[idx*m:(idx+1)*m], me.in)
			return
		}
		for i := range op.calls {
			dst := me.out[i*m : (i+1)*m]
			if !commSame(dst, op.calls[i].in) {
				copy(dst, op.calls[i].in)
			}
		}
	case ir.ReduceScatter:
		m := len(me.out)
		parts := make([][]float32, n)
		for i := range op.calls {
			parts[i] = op.calls[i].in[idx*m : (idx+1)*m]
		}
		commFold([][]float32{me.out}, parts)
	case ir.AllReduce:
		l := len(me.out)
		lo, hi := idx*l/n, (idx+1)*l/n
		if lo == hi {
			return
		}
		parts := make([][]float32, n)
		for i := range op.calls {
			parts[i] = op.calls[i].out[lo:hi]
		}
		commFold(parts, parts)
	case ir.Broadcast:
		if me.rank == me.root {
			return
		}
		for i := range op.calls {
			if op.calls[i].rank == me.root {
				copy(me.out, op.calls[i].out)
			}
		}
	}
}

// commGroupKey names a member list.
func commGroupKey(g []int) string {
	b := make([]byte, 0, 4*len(g))
	for i, r := range g {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(r), 10)
	}
	return string(b)
}
