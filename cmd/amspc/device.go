//go:build cgo

package main

import (
	"fmt"

	"amspc/runtime"
	"amspc/runtime/cudalib"
)

// openCUDA loads CUDA and returns the backend maker of --device cuda:
// rank r runs on GPU r mod the GPUs (under mpirun with as many ranks per
// node as GPUs, its local GPU; ranks beyond the GPUs share them, their
// collectives staged through the host). Its error is one sentence: the
// missing library, or no GPU.
func openCUDA() (func(int) (runtime.Backend, error), error) {
	l, err := cudalib.Load()
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
	return func(r int) (runtime.Backend, error) {
		g, err := l.NewGPU(r % len(devs))
		if err != nil {
			return nil, fmt.Errorf("GPU %d: %w", r%len(devs), err)
		}
		return runtime.NewDeviceBackend(g), nil
	}, nil
}
