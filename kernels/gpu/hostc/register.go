//go:build cgo

package hostc

import "amspc/engine"

// The simulated GPU is the engine's device kind "sim" (amspc run --device
// sim): the CUDA backend's code (launch plans, scratch memory, bf16
// storage, device-side checks, collectives staged through the host) on
// ops.cu compiled as C, one Device per rank, its streams running at once
// as a GPU's do. It checks the GPU path where there is no GPU, under
// mpirun too; it is slow.
func init() {
	engine.RegisterDevice("sim", func(engine.DeviceOptions) (func(int) (engine.Device, error), error) {
		return func(int) (engine.Device, error) { return NewDevice(), nil }, nil
	})
}
