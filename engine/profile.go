package engine

// Measurements for `amspc profile`: one kernel instruction or one
// collective, run the way a step runs it, so that a profile predicts what
// `amspc run` does on this machine. Every rank of the topology is a
// goroutine and all of them run the same kernel (or the same collective,
// each on its own group) at once, sharing the machine's cores as the
// ranks of a step do (the same workers per call, and at most as many
// ranks computing at once as there are cores). Kernels go through the
// CPU backend's dispatch (rank.kernel: the op's kernel, bf16 rounding of
// the results, the finiteness check) and collectives through the local
// Comm.
//
// One sample is the wall time from releasing every rank to the last one
// finishing, divided by the calls each made: a kernel that takes a few
// microseconds is called back to back often enough for the sample to
// span about a tenth of a millisecond, so goroutine wake-up does not
// dominate it. The result is the median of the samples, after one
// warm-up sample.

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"amspc/ir"
)

// minSample is the wall time one sample should span.
const minSample = 100 * time.Microsecond

// maxCalls bounds the back-to-back calls of one sample.
const maxCalls = 256

// MeasureKernel is the median seconds of one call of kernel instruction
// in of program p when every rank of topo calls it at once, over reps
// samples (at least 1) after a warm-up. A matrix product on the CPU is
// measured on its B operand packed once beforehand: its time without the
// packing, which MeasurePack measures (a step packs a weight once for
// all the products that read it unchanged: simulator.Packings). The
// instruction's operands and
// results are allocated for the measurement alone and filled with values
// every kernel accepts (floats in [0.1, 1), ids inside the vocabulary),
// so any kernel of a compiled program can be measured without running
// the program.
func MeasureKernel(topo ir.Topology, p *ir.Program, in *ir.Instr, reps int) (float64, error) {
	return MeasureKernelOn(topo, p, in, reps, nil)
}

// MeasureKernelOn is MeasureKernel with each rank on the backend
// newBackend gives it (nil: the CPU's); a sample ends when every rank's
// backend has finished its work (Sync).
func MeasureKernelOn(topo ir.Topology, p *ir.Program, in *ir.Instr, reps int, newBackend func(int) (Backend, error)) (float64, error) {
	if in.Op != ir.Kernel {
		return 0, fmt.Errorf("instruction %s is not a kernel", in.Op)
	}
	n := topo.Ranks()
	ks := make([]*rank, n)
	gate := shareCores(n) // as a step shares them
	for r := range ks {
		var be Backend
		if newBackend != nil {
			var err error
			if be, err = newBackend(r); err != nil {
				return 0, err
			}
		}
		k, err := probeRank(topo, p, in, r, be)
		if err != nil {
			return 0, err
		}
		k.gate = gate
		if k.host && (in.Kern == ir.MatMul || in.Kern == ir.MatMulGradA) {
			k.prepacked = k.packOperand(in, k.m(in.Args[1]).f32)
		}
		ks[r] = k
	}
	defer func() {
		for _, k := range ks {
			if k.prepacked != nil {
				k.prepacked.Free()
			}
		}
	}()
	return timeRanks(n, reps, func(r, calls int) (err error) {
		k := ks[r]
		defer func() {
			if e := recover(); e != nil {
				err = fmt.Errorf("%v", e)
			}
		}()
		if k.gate != nil {
			// A compute stream holds its place through a run of kernels.
			k.gate <- struct{}{}
			defer func() { <-k.gate }()
		}
		for range calls {
			if err := k.kernel(ir.Compute, in); err != nil {
				return err
			}
			k.losses = k.losses[:0]
		}
		return k.be.Sync()
	})
}

// MeasurePack is the median seconds of packing a [k, n] weight as the B
// operand of kind (ir.MatMul: B; ir.MatMulGradA: B^T) on the CPU, when
// every rank of topo packs one at once, sharing the cores as a step
// does, over reps samples after a warm-up.
func MeasurePack(topo ir.Topology, kind ir.OpKind, k, n int, reps int) (float64, error) {
	if kind != ir.MatMul && kind != ir.MatMulGradA {
		return 0, fmt.Errorf("%v does not pack an operand", kind)
	}
	if k < 1 || n < 1 {
		return 0, fmt.Errorf("weight %dx%d", k, n)
	}
	ranks := topo.Ranks()
	gate := shareCores(ranks)
	ws := make([][]float32, ranks)
	for r := range ws {
		ws[r] = make([]float32, k*n)
		for i := range ws[r] {
			ws[r][i] = 0.1 + float32(i%97)/100
		}
	}
	return timeRanks(ranks, reps, func(r, calls int) error {
		if gate != nil {
			gate <- struct{}{}
			defer func() { <-gate }()
		}
		for range calls {
			packAs(kind, ws[r], k, n).Free()
		}
		return nil
	})
}

// probeRank is rank r of program p on backend be (nil: the CPU's) with
// the operands and results of kernel instruction in allocated alone and
// filled with probe values (fillOn).
func probeRank(topo ir.Topology, p *ir.Program, in *ir.Instr, r int, be Backend) (*rank, error) {
	k := &rank{p: p, r: r, topo: topo, step: 1}
	k.setBackend(be)
	bound := idBound(k, in)
	for _, id := range slices.Concat(in.Args, in.Outs) {
		root, _ := k.offset(id)
		if k.have[root] {
			continue
		}
		if err := k.alloc(root, ir.Compute); err != nil {
			return nil, err
		}
		if err := fillOn(k, root, uint64(r)*7919+uint64(root), bound); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// fillOn fills root buffer id of k as fillProbe fills a host buffer, on
// k's backend (a bf16 buffer holds the values' bf16 roundings, as every
// bf16 buffer does).
func fillOn(k *rank, id int32, seed uint64, bound int32) error {
	if k.host {
		fillProbe(k, id, seed, bound)
		if k.p.Buffers[id].DType == ir.BF16 {
			roundAll(k.mem[id].f32)
		}
		return nil
	}
	h := &rank{p: k.p, r: k.r, topo: k.topo}
	h.setBackend(nil)
	if err := h.alloc(id, ir.Compute); err != nil {
		return err
	}
	fillProbe(h, id, seed, bound)
	if k.p.Buffers[id].DType == ir.I32 {
		return k.be.WriteInts(k.mem[id], h.mem[id].i32)
	}
	return k.be.Write(k.mem[id], h.mem[id].f32)
}

// idBound is the exclusive bound of the token ids a kernel reads (the op
// table's IDs: the vocabulary of an embedding or of the logits); 1 for a
// kernel that reads none.
func idBound(k *rank, in *ir.Instr) int32 {
	d := in.Kern.Info().IDs
	if d == nil {
		return 1
	}
	args := make([][]int64, len(in.Args))
	for i, a := range in.Args {
		args[i] = k.shape(a)
	}
	return int32(d.Bound(args, k.shape(in.Outs[0])))
}

// fillProbe fills buffer id with deterministic values: floats in
// [0.1, 1) (positive, so Adam's second moment is a valid one), ids in
// [0, bound).
func fillProbe(k *rank, id int32, seed uint64, bound int32) {
	x := seed*0x9E3779B97F4A7C15 + 1
	next := func() uint64 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		return x
	}
	if s := k.mem[id].i32; s != nil {
		for i := range s {
			s[i] = int32(next() % uint64(max(bound, 1)))
		}
		return
	}
	for i, s := 0, k.mem[id].f32; i < len(s); i++ {
		s[i] = 0.1 + 0.9*float32(next()>>40)/float32(1<<24)
	}
}

// MeasureCollective is the median seconds of one collective c of elems
// float32 elements (nccl-tests' size: all-gather's output, reduce-
// scatter's input, all-reduce's buffer, broadcast's payload) when every
// group of shape f (f.S0 GPUs in each of f.S1 nodes, the groups of
// ir.Group{Outer: f}) runs it at once on a LocalWorld of topo's
// ranks, over reps samples after a warm-up. elems must divide by the
// group's size. The CPU backend stores every float as float32, so this
// is also the time of a bf16 collective of the same element count.
func MeasureCollective(topo ir.Topology, c ir.Coll, f ir.Factor, elems int, reps int) (float64, error) {
	return MeasureCollectiveOn(topo, c, f, elems, reps, nil)
}

// MeasureCollectiveOn is MeasureCollective on the ranks' backends from
// newBackend (nil: the CPU's), through the runtime's collectives on
// backend memory (device memory staged through the host); a sample ends
// when every rank's backend has finished (Sync).
func MeasureCollectiveOn(topo ir.Topology, c ir.Coll, f ir.Factor, elems int, reps int, newBackend func(int) (Backend, error)) (float64, error) {
	w, grp, err := probeWorld(topo, f, elems)
	if err != nil {
		return 0, err
	}
	n, size := topo.Ranks(), f.Size()
	type member struct {
		comm    memComm
		g       []int
		in, out Mem
	}
	ms := make([]member, n)
	for r := range ms {
		be := NewCPUBackend()
		if newBackend != nil {
			var err error
			if be, err = newBackend(r); err != nil {
				return 0, err
			}
		}
		m := member{comm: memComm{be, w.Comm(r)}, g: grp.Ranks(topo, r)}
		inN, outN := 0, elems
		switch c {
		case ir.AllGather:
			inN = elems / size
		case ir.ReduceScatter:
			inN, outN = elems, elems/size
		}
		var err error
		if m.out, err = be.Alloc(ir.F32, int64(outN)); err != nil {
			return 0, err
		}
		if m.in, err = be.Alloc(ir.F32, int64(inN)); err != nil {
			return 0, err
		}
		ones := make([]float32, inN)
		for i := range ones {
			ones[i] = 1
		}
		if err := be.Write(m.in, ones); err != nil {
			return 0, err
		}
		ms[r] = m
	}
	return timeRanks(n, reps, func(r, calls int) error {
		m := &ms[r]
		for range calls {
			var err error
			switch c {
			case ir.AllGather:
				err = m.comm.AllGather(ir.CommGather, m.g, m.in, m.out)
			case ir.ReduceScatter:
				err = m.comm.ReduceScatter(ir.CommGather, m.g, m.in, m.out)
			case ir.AllReduce:
				// Zeros: repeated sums stay finite.
				err = m.comm.AllReduce(ir.CommGather, m.g, m.out)
			case ir.Broadcast:
				err = m.comm.Broadcast(ir.CommGather, m.g, m.g[0], m.out)
			default:
				err = fmt.Errorf("unknown collective %v", c)
			}
			if err != nil {
				return err
			}
		}
		return m.comm.be.Sync()
	})
}

// probeWorld is the local world of topo's ranks a collective probe runs
// on and the groups of shape f; it refuses a shape that does not divide
// topo, or elems that do not split over a group's members.
func probeWorld(topo ir.Topology, f ir.Factor, elems int) (*LocalWorld, ir.Group, error) {
	grp := ir.Group{Outer: f, Inner: ir.Factor{S0: 1, S1: 1}}
	if f.S0 < 1 || f.S1 < 1 || topo.GPUsPerNode%f.S0 != 0 || topo.Nodes%f.S1 != 0 {
		return nil, grp, fmt.Errorf("group shape %v does not divide %d nodes x %d GPUs", f, topo.Nodes, topo.GPUsPerNode)
	}
	if size := f.Size(); elems < size || elems%size != 0 {
		return nil, grp, fmt.Errorf("%d elements do not split over a group of %d", elems, size)
	}
	return NewLocalWorld(topo.Ranks()), grp, nil
}

// MeasureSharedGather is MeasureCollective of the all-gather the local
// ranks share (AllGatherShared: each member copies its own part into one
// buffer of the world's pool that every member reads, and gives it back),
// as a step runs a gather into a buffer only gathers write: elems is the
// gathered buffer's, every group of shape f running it at once.
func MeasureSharedGather(topo ir.Topology, f ir.Factor, elems int, reps int) (float64, error) {
	w, grp, err := probeWorld(topo, f, elems)
	if err != nil {
		return 0, err
	}
	n, size := topo.Ranks(), f.Size()
	comms := make([]*localComm, n)
	groups := make([][]int, n)
	ins, outs := make([][]float32, n), make([][]float32, n)
	for r := range n {
		comms[r] = &localComm{w: w, rank: r}
		groups[r] = grp.Ranks(topo, r)
		ins[r] = make([]float32, elems/size)
		for i := range ins[r] {
			ins[r][i] = 1
		}
		// The rank's own buffer, which a shared gather only checks.
		outs[r] = make([]float32, elems)
	}
	return timeRanks(n, reps, func(r, calls int) error {
		for range calls {
			_, release, _, err := comms[r].AllGatherShared(ir.CommGather, groups[r], ins[r], outs[r])
			if err != nil {
				return err
			}
			release()
		}
		return nil
	})
}

// timeRanks runs body(r, calls) on n goroutines released together and
// returns the median over reps samples of the wall time per call, after
// a warm-up sample that also sets how many calls a sample makes. The
// first error of a rank is returned; a body must not block forever when
// another rank failed (a Comm's rendezvous errors need the same calls on
// every member, which the bodies here make).
func timeRanks(n, reps int, body func(r, calls int) error) (float64, error) {
	sample := func(calls int) (time.Duration, error) {
		errs := make([]error, n)
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for r := range n {
			wg.Go(func() {
				<-gate
				errs[r] = body(r, calls)
			})
		}
		t0 := time.Now()
		close(gate)
		wg.Wait()
		d := time.Since(t0)
		for r, err := range errs {
			if err != nil {
				return 0, fmt.Errorf("rank %d: %w", r, err)
			}
		}
		return d, nil
	}
	d, err := sample(1)
	if err != nil {
		return 0, err
	}
	calls := 1
	if d < minSample {
		calls = min(maxCalls, int(minSample/max(d, time.Microsecond))+1)
	}
	times := make([]float64, max(reps, 1))
	for i := range times {
		d, err := sample(calls)
		if err != nil {
			return 0, err
		}
		times[i] = d.Seconds() / float64(calls)
	}
	slices.Sort(times)
	return times[len(times)/2], nil
}
