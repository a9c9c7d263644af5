package engine

import (
	"errors"
	"fmt"
	"sync"

	"amspc/ir"
)

// Device collectives (issue 29): a device that runs its rank's
// collectives on its own memory, enqueued on its streams like its
// kernels, instead of staging them through the host (memComm): NCCL on
// GPUs (engine/cudalib), the simulated GPU's own among the ranks of one
// process (kernels/gpu/hostc). DeviceOptions.Collectives chooses; the
// host-staged ordered fold stays the reference (bitwise
// plan-independent), and the simulated GPU's collectives keep its bits.

// Collective modes (DeviceOptions.Collectives).
const (
	// CollectivesOrdered stages every collective through the host
	// (memComm): sums are left folds in group order, the same bits for
	// every plan and rank count.
	CollectivesOrdered = "ordered"
	// CollectivesDevice runs them on the device (DeviceCollectives):
	// NCCL on GPUs, whose sums follow its ring or tree.
	CollectivesDevice = "device"
)

// DeviceWorld is what a device needs to know of the run's ranks to run
// collectives among them: the command that opens the devices fills it.
type DeviceWorld struct {
	// Size is the number of ranks; Local the ranks this process runs.
	Size  int
	Local []int
	// Bootstrap gives every rank of the world rank 0's bytes (NCCL's
	// unique id): rank 0's process passes its bytes, the others nil and
	// get rank 0's. Nil when every rank is in this process.
	Bootstrap func(rank int, root []byte) ([]byte, error)
}

// DeviceColl is one collective as a device runs it, on one member.
type DeviceColl struct {
	Kind ir.Coll // ir.AllGather, ir.ReduceScatter, ir.AllReduce, ir.Broadcast
	// Comm is the communicator, as Split returned it.
	Comm int
	// Root is Broadcast's root, an index into the communicator's members.
	Root  int
	DType ir.DType // ir.F32, ir.BF16 (sums formed in fp32), ir.I32 (no sums)
	// In and Out are device addresses: AllGather reads Count elements at
	// In and writes members x Count at Out; ReduceScatter reads members
	// x Count at In and writes this member's Count at Out; AllReduce and
	// Broadcast work in place at Out (In == Out). In may be exactly this
	// member's part of Out (all-gather) or Out this member's part of In
	// (reduce-scatter): in place.
	In, Out uint64
	Count   int64
}

// DeviceCollectives is a Device that runs collectives itself.
type DeviceCollectives interface {
	Device
	// Split makes a communicator over members (ranks of the world, in
	// group order; this device's rank is one of them) and returns its
	// index: 0, 1, ... in call order. Every rank calls Split for the
	// same sequence of (stream, group) pairs, each rank with the members
	// of its own group of that kind, as NCCL's ncclCommSplit needs (a
	// collective over the world); the engine takes them from the
	// program, whose template is the same on every rank. The ranks of
	// one process call Split concurrently, one goroutine each.
	Split(members []int) (int, error)
	// Collective enqueues c on stream s, after s's earlier work; s's
	// later work waits for it. The k-th collective on a communicator
	// meets every member's k-th; each communicator is used from one
	// stream.
	Collective(s int, c *DeviceColl) error
	// Abort makes every pending and future collective of every rank
	// fail, so no rank waits forever for one that stopped.
	Abort(err error)
}

// streamAllocator is a backend whose memory belongs to streams
// (deviceBackend): AllocOn prepares it on the allocating stream, FreeOn
// gives it back to the freeing stream.
type streamAllocator interface {
	AllocOn(s int, dt ir.DType, n int64) (Mem, error)
	FreeOn(s int, m Mem)
}

// allocOn allocates for stream s where the backend's memory belongs to
// streams.
func allocOn(be Backend, s int, dt ir.DType, n int64) (Mem, error) {
	if sa, ok := be.(streamAllocator); ok {
		return sa.AllocOn(s, dt, n)
	}
	return be.Alloc(dt, n)
}

// freeOn frees m from stream s where the backend's memory belongs to
// streams.
func freeOn(be Backend, s int, m Mem) {
	if sa, ok := be.(streamAllocator); ok {
		sa.FreeOn(s, m)
		return
	}
	be.Free(m)
}

// streamGroup is a communicator's use: the groups of one kind on one
// stream (NCCL orders a communicator's calls, and the streams' calls
// interleave differently on different ranks).
type streamGroup struct {
	s int
	g ir.Group
}

// abort stops every collective: the host Comm's and the device's.
func (k *rank) abort(err error) {
	k.comm.Abort(err)
	if k.dc != nil {
		k.dc.Abort(err)
	}
}

// deviceCollectives gives the ranks whose backends run collectives on
// their devices (DeviceOptions.Collectives) a communicator for each
// (stream, group) of the program: each rank in its own goroutine, as
// the devices need (NCCL's splits are collectives of the world), and in
// the program's order, the same on every rank.
func deviceCollectives(ranks []*rank) error {
	on := 0
	for _, k := range ranks {
		db, ok := k.be.(*deviceBackend)
		if !ok || db.opts.Collectives != CollectivesDevice {
			continue
		}
		dc, ok := db.dev.(DeviceCollectives)
		if !ok {
			return fmt.Errorf("the %s runs no collectives of its own (use --collectives %s)", db.dev.Name(), CollectivesOrdered)
		}
		k.dc = dc
		on++
	}
	if on == 0 {
		return nil
	}
	if on != len(ranks) {
		return fmt.Errorf("%d of %d ranks run collectives on their devices: all or none", on, len(ranks))
	}
	errs := make([]error, len(ranks))
	var wg sync.WaitGroup
	for i, k := range ranks {
		wg.Go(func() {
			k.comms = map[streamGroup]int{}
			for _, sg := range programGroups(k.p) {
				c, err := k.dc.Split(sg.g.Ranks(k.topo, k.r))
				if err != nil {
					errs[i] = fmt.Errorf("rank %d: communicator for %s on %s: %w", k.r, sg.g, ir.StreamName(sg.s), err)
					k.dc.Abort(errs[i]) // the other ranks' splits wait for this one
					return
				}
				k.comms[sg] = c
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// programGroups lists a program's (stream, group) pairs in the order
// they first occur, stream by stream.
func programGroups(p *ir.Program) []streamGroup {
	var out []streamGroup
	seen := map[streamGroup]bool{}
	for s := range p.Streams {
		for _, in := range p.Streams[s] {
			if sg := (streamGroup{s, in.Group}); in.Op == ir.Collective && !seen[sg] {
				seen[sg] = true
				out = append(out, sg)
			}
		}
	}
	return out
}

// deviceCollective enqueues collective in on the device's stream s.
func (k *rank) deviceCollective(s int, in *ir.Instr) error {
	out := k.m(in.Out)
	c := DeviceColl{Kind: in.Coll, Comm: k.comms[streamGroup{s, in.Group}], DType: out.DType, In: out.Addr, Out: out.Addr, Count: out.N}
	switch in.Coll {
	case ir.AllGather:
		src := k.m(in.In)
		c.In, c.Count = src.Addr, src.N
	case ir.ReduceScatter:
		c.In = k.m(in.In).Addr
	case ir.AllReduce:
		if in.In != in.Out {
			if err := k.be.Copy(s, out, k.m(in.In)); err != nil {
				return err
			}
		}
	case ir.Broadcast: // from the group's first member, as memComm
	default:
		return fmt.Errorf("unknown collective %v", in.Coll)
	}
	return k.dc.Collective(s, &c)
}
