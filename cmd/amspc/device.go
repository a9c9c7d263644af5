//go:build cgo

package main

import (
	"fmt"
	"sync"

	"amspc/engine"
	"amspc/engine/cudalib"
	"amspc/kernels/gpu/hostc"
)

// openCUDA loads CUDA and returns the backend maker of --device cuda and
// the largest device memory a rank has had allocated (its GPU memory
// measured):
// rank r runs on GPU r mod the GPUs (under mpirun with as many ranks per
// node as GPUs, its local GPU; ranks beyond the GPUs share them, their
// collectives staged through the host). Its error is one sentence: the
// missing library, or no GPU.
func openCUDA(o engine.DeviceOptions) (func(int) (engine.Backend, error), func() int64, error) {
	l, err := cudalib.Load()
	if err != nil {
		return nil, nil, err
	}
	devs, err := l.Devices()
	if err != nil {
		return nil, nil, fmt.Errorf("CUDA loads (%v) but its devices cannot be listed: %v", l, err)
	}
	if len(devs) == 0 {
		return nil, nil, fmt.Errorf("CUDA loads (%v) but sees no GPU", l)
	}
	var mu sync.Mutex
	var gpus []*cudalib.GPU
	peak := func() int64 {
		mu.Lock()
		defer mu.Unlock()
		var p int64
		for _, g := range gpus {
			p = max(p, g.Peak())
		}
		return p
	}
	return func(r int) (engine.Backend, error) {
		g, err := l.NewGPU(r % len(devs))
		if err != nil {
			return nil, fmt.Errorf("GPU %d: %w", r%len(devs), err)
		}
		if o.TensorCoreAttention {
			if err := g.LoadTensorCoreKernels(l); err != nil {
				return nil, fmt.Errorf("GPU %d: --tensor-cores: %w", r%len(devs), err)
			}
		}
		mu.Lock()
		gpus = append(gpus, g)
		mu.Unlock()
		return engine.NewDeviceBackendWith(g, o), nil
	}, peak, nil
}

// openSim is --device sim: the CUDA backend's code (launch plans, scratch
// memory, bf16 storage, device-side checks, collectives staged through the
// host) on a GPU simulated on the CPU, ops.cu compiled as C
// (kernels/gpu/hostc), one per rank. It checks the GPU path, under
// mpirun too, where there is no GPU; it is slow.
func openSim(o engine.DeviceOptions) (func(int) (engine.Backend, error), error) {
	return func(int) (engine.Backend, error) { return engine.NewDeviceBackendWith(hostc.NewDevice(), o), nil }, nil
}
