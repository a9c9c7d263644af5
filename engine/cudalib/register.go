//go:build cgo

package cudalib

import (
	"fmt"
	"os"
	"slices"
	"sync"

	"amspc/engine"
)

// CUDA is the engine's device kind "cuda" (amspc run --device cuda),
// registered here so that the engine and the command line import this
// package for its side effect only.
func init() { engine.RegisterDevice("cuda", openGPUs) }

// openGPUs loads CUDA and gives each rank its GPU (gpuOrdinal). With
// collectives staged through the host (--collectives ordered), rank r
// takes GPU r mod the GPUs: under mpirun with as many ranks per node as
// GPUs, its local GPU; ranks beyond the GPUs share them. With NCCL's
// (--collectives device), each rank has a GPU of its own (rank r, or its
// process's local rank on the node), it joins the world of o.World, and
// the GPU runs its collectives (engine.DeviceCollectives): the opener
// checks every local rank's GPU, then makes NCCL's unique id, or gets
// rank 0's over o.World.Bootstrap. Its error is one sentence: the
// missing library, no GPU, too few GPUs.
func openGPUs(o engine.DeviceOptions) (func(int) (engine.Device, error), error) {
	l, err := Load()
	if err != nil {
		return nil, err
	}
	devs, err := l.Devices()
	if err != nil {
		return nil, fmt.Errorf("CUDA loads (%v) but its devices cannot be listed: %v", l, err)
	}
	if len(devs) == 0 {
		return nil, fmt.Errorf("CUDA loads (%v) but sees no GPU", l)
	}
	ordinal := func(r int) (int, error) { return gpuOrdinal(r, len(devs), o.Collectives, o.World, os.Getenv) }
	nccl := o.Collectives == engine.CollectivesDevice
	var id NCCLID
	if nccl {
		// The world and every local rank's GPU first: a refusal comes
		// before the bootstrap, which waits for every process.
		if err := checkWorld(o.World); err != nil {
			return nil, err
		}
		for _, r := range o.World.Local {
			if _, err := ordinal(r); err != nil {
				return nil, err
			}
		}
		if id, err = worldID(l, o.World); err != nil {
			return nil, err
		}
	} else if _, err := ordinal(0); err != nil {
		return nil, err // an unknown o.Collectives
	}
	var mu sync.Mutex
	opened := map[int]bool{}
	return func(r int) (engine.Device, error) {
		i, err := ordinal(r)
		if err != nil {
			return nil, err
		}
		if nccl {
			mu.Lock()
			twice := opened[r]
			opened[r] = true
			mu.Unlock()
			if twice {
				return nil, fmt.Errorf("rank %d's GPU opened twice in one run: a rank joins NCCL's world once", r)
			}
		}
		g, err := l.NewGPU(i)
		if err != nil {
			return nil, fmt.Errorf("GPU %d: %w", i, err)
		}
		if o.TensorCoreAttention {
			// Named as the command line's flag: the option exists for it.
			if err := g.LoadTensorCoreKernels(l); err != nil {
				return nil, fmt.Errorf("GPU %d: --tensor-cores: %w", i, err)
			}
		}
		if nccl {
			if err := g.nonBlockingComm(); err != nil {
				return nil, fmt.Errorf("GPU %d: %w", i, err)
			}
			if err := g.joinWorld(o.World.Size, r, id); err != nil {
				return nil, err
			}
		}
		return g, nil
	}, nil
}

// worldID is the unique id of NCCL's world communicator of w: made here
// when every rank is in this process; else made by rank 0's process and
// sent to every process by w.Bootstrap, which each process calls once,
// with its smallest rank (rank 0's process with 0 and the id's bytes).
func worldID(l *Libs, w engine.DeviceWorld) (NCCLID, error) {
	var id NCCLID
	if err := ncclReady(); err != nil {
		return id, err
	}
	if w.Bootstrap == nil {
		return l.NCCLUniqueID()
	}
	var root []byte
	if slices.Contains(w.Local, 0) {
		var err error
		if id, err = l.NCCLUniqueID(); err != nil {
			return id, err
		}
		root = id[:]
	}
	b, err := w.Bootstrap(slices.Min(w.Local), root)
	if err != nil {
		return id, fmt.Errorf("sharing NCCL's unique id: %w", err)
	}
	if len(b) != len(id) {
		return id, fmt.Errorf("sharing NCCL's unique id: %d bytes came, not %d", len(b), len(id))
	}
	copy(id[:], b)
	return id, nil
}
