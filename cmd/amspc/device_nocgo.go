//go:build !cgo

package main

import (
	"errors"

	"amspc/engine"
	"amspc/engine/cudalib"
)

// openCUDA fails without cgo: loading CUDA needs it (cudalib says so).
func openCUDA(engine.DeviceOptions) (func(int) (engine.Backend, error), func() int64, error) {
	_, err := cudalib.Load()
	return nil, nil, err
}

// openSim fails without cgo: the simulated GPU runs ops.cu compiled as C.
func openSim(engine.DeviceOptions) (func(int) (engine.Backend, error), error) {
	return nil, errors.New("the simulated GPU runs ops.cu compiled as C, which needs cgo (this amspc was built with CGO_ENABLED=0)")
}
