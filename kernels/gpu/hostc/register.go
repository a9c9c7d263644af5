//go:build cgo

package hostc

import (
	"errors"
	"fmt"
	"sync"

	"amspc/engine"
)

// The simulated GPU is the engine's device kind "sim" (amspc run --device
// sim): the CUDA backend's code (launch plans, scratch memory, bf16
// storage, device-side checks, collectives staged through the host or
// run on the devices) on ops.cu compiled as C, one Device per rank, its
// streams running at once as a GPU's do. It checks the GPU path where
// there is no GPU, under mpirun too; it is slow.
func init() { engine.RegisterDevice("sim", open) }

// open opens the kind "sim" with o. With o.Collectives "" or "ordered",
// each rank gets a Device of its own (no world: the engine stages its
// collectives through the host). With "device", the ranks' devices make
// one world (coll.go): forRank(r) gives the world's rank r, and asking
// again for a rank already given starts a new world (the next run's).
// Every rank must then be in this process.
func open(o engine.DeviceOptions) (func(int) (engine.Device, error), error) {
	switch o.Collectives {
	case "", engine.CollectivesOrdered:
		return func(int) (engine.Device, error) { return NewDevice(), nil }, nil
	case engine.CollectivesDevice:
	default:
		return nil, fmt.Errorf("no collectives %q (ordered or device)", o.Collectives)
	}
	ow := o.World
	if ow.Bootstrap != nil || ow.Local != nil && len(ow.Local) < ow.Size {
		return nil, errors.New("the simulated GPU's collectives need every rank in one process (use --collectives ordered under mpirun)")
	}
	var mu sync.Mutex
	var w *world
	given := map[int]bool{}
	return func(rank int) (engine.Device, error) {
		if rank < 0 || ow.Size > 0 && rank >= ow.Size {
			return nil, fmt.Errorf("rank %d of a world of %d", rank, ow.Size)
		}
		mu.Lock()
		defer mu.Unlock()
		if w == nil || given[rank] {
			w = newWorld(ow.Size)
			clear(given)
		}
		given[rank] = true
		return w.device(rank), nil
	}, nil
}
