package engine

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"amspc/ir"
	"amspc/kernels/gpu"
)

// Stand-in collectives (issue 29, item 4). The GPU machines at hand have
// one GPU, and NCCL will not put two ranks of a communicator on one
// device; yet whether a plan's prefetched gathers hide under compute is
// a question about one rank's streams. A stand-in run answers it: it
// runs one rank of the plan alone on its device, its compute real, and
// replaces each collective by a kernel that holds the collective's
// stream for the time the plan's simulation gives that collective
// (gpu.Spin) and moves no data. Its outputs keep what their memory held
// (zeros: the backend zeroes what it allocates), so the losses mean
// nothing; the step time means what the plan would take if the
// collectives took the simulated time. The same run with Scale 0 is the
// compute alone: the difference is the exposed communication, measured,
// to set against the simulation's.

// StandIn makes a Run a stand-in run of one rank.
type StandIn struct {
	// Rank is the rank run, alone.
	Rank int
	// Seconds[s][i] is the time instruction i of the rank's stream s
	// holds its stream (the plan's simulated span of each collective; 0
	// elsewhere).
	Seconds [ir.NumStreams][]float64
	// Scale multiplies every stand-in's time (0: the compute alone).
	Scale float64
}

// errStandIn is what a stand-in run's Comm says: it has no peers.
var errStandIn = errors.New("a stand-in run has no peers: its collectives are stand-ins")

// standInWorld is the world of a stand-in run: the plan's ranks, this
// process running one of them, no collective ever reaching its Comm.
type standInWorld struct {
	n, rank int
	done    chan struct{}
	once    sync.Once
}

func newStandInWorld(n, rank int) *standInWorld {
	return &standInWorld{n: n, rank: rank, done: make(chan struct{})}
}

func (w *standInWorld) Size() int             { return w.n }
func (w *standInWorld) Local() []int          { return []int{w.rank} }
func (w *standInWorld) Comm(rank int) Comm    { return standInComm(rank) }
func (w *standInWorld) Done() <-chan struct{} { return w.done }
func (w *standInWorld) Abort(error)           { w.once.Do(func() { close(w.done) }) }

// standInComm is the Comm of a stand-in run's rank: every call fails.
type standInComm int

func (c standInComm) Rank() int                                            { return int(c) }
func (c standInComm) Abort(error)                                          {}
func (c standInComm) AllGather(int, []int, []float32, []float32) error     { return errStandIn }
func (c standInComm) ReduceScatter(int, []int, []float32, []float32) error { return errStandIn }
func (c standInComm) AllReduce(int, []int, []float32) error                { return errStandIn }
func (c standInComm) Broadcast(int, []int, int, []float32) error           { return errStandIn }

// spinner is a backend that holds a stream for a time (the device
// backend, with gpu.Spin).
type spinner interface {
	Spin(s int, ns int64) error
}

// Spin enqueues spin_ns on stream s: it holds s for ns nanoseconds.
func (b *deviceBackend) Spin(s int, ns int64) error {
	l := gpu.Spin(ns)
	return b.dev.Launch(s, &l, []uint64{0})
}

// standInColl runs instruction i of stream s, a collective, as its
// stand-in.
func (k *rank) standInColl(s, i int) error {
	sp, ok := k.be.(spinner)
	if !ok {
		return fmt.Errorf("stand-in collectives need a device backend, not %s", k.be.Name())
	}
	in := &k.p.Streams[s][i]
	k.wrote(in.Out)
	var sec float64
	if i < len(k.standIn.Seconds[s]) {
		sec = k.standIn.Seconds[s][i]
	}
	ns := int64(sec * k.standIn.Scale * 1e9)
	if ns <= 0 {
		return nil
	}
	return sp.Spin(s, ns)
}

// checkStandIn checks a stand-in run's set-up.
func (r *Run) checkStandIn() error {
	si := r.StandIn
	n := r.Bundle.Topo.Ranks()
	switch {
	case r.World != nil:
		return errors.New("a stand-in run makes its own world: one rank, in this process")
	case si.Rank < 0 || si.Rank >= n:
		return fmt.Errorf("stand-in rank %d of a plan of %d ranks", si.Rank, n)
	case !(si.Scale >= 0):
		return fmt.Errorf("stand-in scale %g", si.Scale)
	}
	p := r.Bundle.Template(si.Rank)
	for s := range si.Seconds {
		if len(si.Seconds[s]) > len(p.Streams[s]) || slices.ContainsFunc(si.Seconds[s], func(x float64) bool { return !(x >= 0) }) {
			return fmt.Errorf("stand-in times for %s do not fit the program", ir.StreamName(s))
		}
	}
	return nil
}
