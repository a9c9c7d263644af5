//go:build cgo

package cudalib

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"amspc/engine"
	"amspc/ir"
)

// A GPU runs its rank's collectives with NCCL (engine.DeviceCollectives,
// --collectives device): on device memory, enqueued on the stream's CUDA
// stream like its kernels, with no host staging and no host wait.
//
// The communicators: a world communicator of every rank, made by the
// first Split on each rank's GPU (ncclCommInitRank returns only once
// every rank has joined, and the engine opens the ranks' GPUs one after
// another but calls Split from a goroutine per rank), from the unique id
// the opener shares (openGPUs: made here when every rank is in this
// process, else by rank 0's process and sent over DeviceWorld.Bootstrap);
// then one communicator per Split, cut from the world by ncclCommSplit.

var (
	_ engine.DeviceCollectives = (*GPU)(nil)

	// gpuColls are the GPUs' NCCL state, by GPU: set by joinWorld (the
	// opener, for --collectives device), dropped by closeCollectives.
	gpuColls struct {
		sync.Mutex
		m map[*GPU]*gpuColl
	}
)

// gpuColl is one rank's NCCL state on its GPU.
type gpuColl struct {
	size, rank int    // the world's size, and this GPU's rank in it
	id         NCCLID // the world communicator's unique id

	split sync.Mutex // one Split at a time: the first makes the world

	mu      sync.Mutex // world, comms, aborted
	world   *NCCLComm
	comms   []*NCCLComm // by Split's index
	aborted error       // once Abort has run: why
}

// joinWorld makes g rank of a world of size ranks whose world
// communicator has unique id id (NCCLUniqueID on one rank, shared with
// all): g's collectives run with NCCL from then on. The world
// communicator itself is made by the first Split.
func (g *GPU) joinWorld(size, rank int, id NCCLID) error {
	if size < 1 || rank < 0 || rank >= size {
		return fmt.Errorf("NCCL rank %d of %d", rank, size)
	}
	gpuColls.Lock()
	defer gpuColls.Unlock()
	if gpuColls.m == nil {
		gpuColls.m = map[*GPU]*gpuColl{}
	}
	if gpuColls.m[g] != nil {
		return fmt.Errorf("GPU %v already joined a world of ranks (as rank %d)", g.ctx.Device, gpuColls.m[g].rank)
	}
	gpuColls.m[g] = &gpuColl{size: size, rank: rank, id: id}
	return nil
}

// coll is g's NCCL state.
func (g *GPU) coll() (*gpuColl, error) {
	gpuColls.Lock()
	c := gpuColls.m[g]
	gpuColls.Unlock()
	if c == nil {
		return nil, fmt.Errorf("GPU %v runs no collectives: it was opened for collectives staged through the host (--collectives %s), not NCCL's (%s)",
			g.ctx.Device, engine.CollectivesOrdered, engine.CollectivesDevice)
	}
	return c, nil
}

// closeCollectives frees g's communicators (ncclCommDestroy, once their
// collectives are done) and forgets its world: what GPU.Close should do
// before destroying the streams.
func (g *GPU) closeCollectives() error {
	gpuColls.Lock()
	c := gpuColls.m[g]
	delete(gpuColls.m, g)
	gpuColls.Unlock()
	if c == nil {
		return nil
	}
	c.mu.Lock()
	comms := c.all()
	c.world, c.comms = nil, nil
	if c.aborted == nil {
		c.aborted = errors.New("the GPU was closed")
	}
	c.mu.Unlock()
	var err error
	for _, n := range comms {
		err = errors.Join(err, n.Destroy())
	}
	return err
}

// all is every communicator, the world last (with c.mu held).
func (c *gpuColl) all() []*NCCLComm {
	all := slices.Clone(c.comms)
	if c.world != nil {
		all = append(all, c.world)
	}
	return all
}

// failed is the error of a call after Abort, or nil (with c.mu held).
func (c *gpuColl) failed() error {
	if c.aborted == nil {
		return nil
	}
	return fmt.Errorf("rank %d's NCCL collectives were aborted: %w", c.rank, c.aborted)
}

// Split makes the communicator of members (ranks of the world in group
// order, this GPU's rank among them) with ncclCommSplit of the world
// communicator, which every rank calls: color is the smallest member,
// key this rank's index in members, so that the communicator's ranks are
// members in their order (a broadcast's root, an index into members, is
// its rank in the communicator). The color names the group: one Split
// call of every rank is one group kind of the program (one stream's
// collectives over one kind of group), whose groups partition the world
// (each rank is in exactly one, and passes it); disjoint groups have
// different smallest members and the members of one group pass the same,
// so the colors of one call tell its groups apart, and different kinds
// are different calls, which need not. A group that broke this (two
// groups of one call sharing a member) would make a communicator larger
// than its members, which Split checks (ncclCommCount).
func (g *GPU) Split(members []int) (int, error) {
	c, err := g.coll()
	if err != nil {
		return 0, err
	}
	key := slices.Index(members, c.rank)
	if key < 0 {
		return 0, fmt.Errorf("rank %d splits a communicator over %v, which it is not one of", c.rank, members)
	}
	seen := map[int]bool{}
	for _, m := range members {
		if m < 0 || m >= c.size || seen[m] {
			return 0, fmt.Errorf("rank %d splits a communicator over %v: not distinct ranks of a world of %d", c.rank, members, c.size)
		}
		seen[m] = true
	}
	color := slices.Min(members)

	c.split.Lock()
	defer c.split.Unlock()
	c.mu.Lock()
	err, world := c.failed(), c.world
	c.mu.Unlock()
	if err != nil {
		return 0, err
	}
	if world == nil {
		// Blocks until every rank of the world has joined.
		w, err := g.ctx.NCCLInit(c.size, c.rank, c.id)
		if err != nil {
			return 0, fmt.Errorf("rank %d joining NCCL's world of %d ranks: %w", c.rank, c.size, err)
		}
		c.mu.Lock()
		if err := c.failed(); err != nil {
			c.mu.Unlock()
			w.Abort()
			return 0, err
		}
		c.world, world = w, w
		c.mu.Unlock()
	}
	n, err := world.Split(color, key)
	if err != nil {
		return 0, fmt.Errorf("rank %d splitting the communicator of %v: %w", c.rank, members, err)
	}
	if n == nil {
		return 0, fmt.Errorf("rank %d splitting the communicator of %v: NCCL gave it none", c.rank, members)
	}
	if n.Ranks() != len(members) || n.Rank() != key {
		n.Abort()
		return 0, fmt.Errorf("rank %d's communicator of %v (NCCL color %d) has %d ranks, it rank %d; want %d, rank %d: the groups of one Split do not partition the world",
			c.rank, members, color, n.Ranks(), n.Rank(), len(members), key)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.failed(); err != nil {
		n.Abort()
		return 0, err
	}
	c.comms = append(c.comms, n)
	return len(c.comms) - 1, nil
}

// Collective enqueues d on stream s's CUDA stream with NCCL:
// ncclAllGather (its count is what each member sends, d.Count),
// ncclReduceScatter (what each receives, d.Count; a sum), ncclAllReduce
// (a sum) or ncclBroadcast (from the member at index d.Root, which is
// its rank in the communicator), in fp32, bf16 (NCCL sums bf16 in fp32
// and rounds) or int32 (all-gather and broadcast). In place as NCCL
// takes it: an all-gather whose input is this member's part of its
// output, a reduce-scatter whose output is this member's part of its
// input, an all-reduce or broadcast whose input is its output.
func (g *GPU) Collective(s int, d *engine.DeviceColl) error {
	c, err := g.coll()
	if err != nil {
		return err
	}
	c.mu.Lock()
	err = c.failed()
	var n *NCCLComm
	if err == nil && d.Comm >= 0 && d.Comm < len(c.comms) {
		n = c.comms[d.Comm]
	}
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if n == nil {
		return fmt.Errorf("rank %d's %v on communicator %d: it has %d", c.rank, d.Kind, d.Comm, len(c.comms))
	}
	dt, err := checkColl(d, n.Ranks(), n.Rank())
	if err != nil {
		return fmt.Errorf("rank %d: %w", c.rank, err)
	}
	if d.Count == 0 {
		return nil // every member's Count is the same: none calls NCCL
	}
	st, err := g.Stream(s)
	if err != nil {
		return err
	}
	in, out := Ptr(d.In), Ptr(d.Out)
	switch d.Kind {
	case ir.AllGather:
		err = n.AllGather(st, in, out, d.Count, dt)
	case ir.ReduceScatter:
		err = n.ReduceScatter(st, in, out, d.Count, dt)
	case ir.AllReduce:
		err = n.AllReduce(st, in, out, d.Count, dt)
	case ir.Broadcast:
		err = n.Broadcast(st, in, out, d.Count, dt, d.Root)
	}
	if err != nil {
		return fmt.Errorf("rank %d, communicator %d, stream %d: %w", c.rank, d.Comm, s, err)
	}
	return nil
}

// checkColl checks d for a communicator of members ranks in which this
// one is rank (its index in the members), and returns its NCCL dtype:
// the kind, the dtype (int32 only where nothing is summed), the count,
// the root, and the buffers, which must either not overlap or overlap
// exactly as NCCL's in-place forms do.
func checkColl(d *engine.DeviceColl, members, rank int) (DType, error) {
	var dt DType
	switch d.DType {
	case ir.F32:
		dt = F32
	case ir.BF16:
		dt = BF16
	case ir.I32:
		if d.Kind == ir.ReduceScatter || d.Kind == ir.AllReduce {
			return 0, fmt.Errorf("%v of %v: NCCL collectives on the device sum fp32 or bf16 only", d.Kind, d.DType)
		}
		dt = I32
	default:
		return 0, fmt.Errorf("%v of %v: NCCL collectives on the device take f32, bf16 or i32", d.Kind, d.DType)
	}
	if d.Count < 0 {
		return 0, fmt.Errorf("%v of %d elements", d.Kind, d.Count)
	}
	es := d.DType.Size()
	part := uint64(d.Count * es)                   // one member's bytes
	whole := uint64(d.Count * es * int64(members)) // every member's
	overlap := func(a, an, b, bn uint64) bool { return an > 0 && bn > 0 && a < b+bn && b < a+an }
	var ok bool
	switch d.Kind {
	case ir.AllGather:
		// In place: send == recv + rank*sendcount.
		ok = !overlap(d.In, part, d.Out, whole) || d.In == d.Out+uint64(rank)*part
	case ir.ReduceScatter:
		// In place: recv == send + rank*recvcount.
		ok = !overlap(d.In, whole, d.Out, part) || d.Out == d.In+uint64(rank)*part
	case ir.AllReduce:
		ok = d.In == d.Out || !overlap(d.In, part, d.Out, part)
	case ir.Broadcast:
		if d.Root < 0 || d.Root >= members {
			return 0, fmt.Errorf("broadcast from member %d of %d", d.Root, members)
		}
		ok = d.In == d.Out || !overlap(d.In, part, d.Out, part)
	default:
		return 0, fmt.Errorf("no NCCL collective %v", d.Kind)
	}
	if !ok {
		return 0, fmt.Errorf("%v of %d %v elements at member %d of %d: its input %#x and output %#x overlap, but not as NCCL works in place",
			d.Kind, d.Count, d.DType, rank, members, d.In, d.Out)
	}
	return dt, nil
}

// Abort aborts every communicator of this GPU (ncclCommAbort: their
// collectives in flight stop and fail), and makes every later Split and
// Collective fail with err.
func (g *GPU) Abort(err error) {
	gpuColls.Lock()
	c := gpuColls.m[g]
	gpuColls.Unlock()
	if c == nil {
		return
	}
	if err == nil {
		err = errors.New("aborted")
	}
	c.mu.Lock()
	if c.aborted == nil {
		c.aborted = err
	}
	comms := c.all()
	c.world, c.comms = nil, nil
	c.mu.Unlock()
	// A communicator's enqueue still running holds it (NCCLComm.call):
	// its abort follows that call.
	for _, n := range comms {
		n.Abort()
	}
}
