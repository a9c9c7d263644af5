//go:build cgo

package cudalib

import (
	"fmt"

	"amspc/engine"
)

// CUDA is the engine's device kind "cuda" (amspc run --device cuda),
// registered here so that the engine and the command line import this
// package for its side effect only.
func init() { engine.RegisterDevice("cuda", openGPUs) }

// openGPUs loads CUDA and gives rank r GPU r mod the GPUs: under mpirun
// with as many ranks per node as GPUs, its local GPU; ranks beyond the
// GPUs share them, their collectives staged through the host. Its error
// is one sentence: the missing library, or no GPU.
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
	return func(r int) (engine.Device, error) {
		g, err := l.NewGPU(r % len(devs))
		if err != nil {
			return nil, fmt.Errorf("GPU %d: %w", r%len(devs), err)
		}
		if o.TensorCoreAttention {
			// Named as the command line's flag: the option exists for it.
			if err := g.LoadTensorCoreKernels(l); err != nil {
				return nil, fmt.Errorf("GPU %d: --tensor-cores: %w", r%len(devs), err)
			}
		}
		return g, nil
	}, nil
}
