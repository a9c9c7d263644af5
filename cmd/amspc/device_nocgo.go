//go:build !cgo

package main

import (
	"errors"

	"amspc/runtime"
	"amspc/runtime/cudalib"
)

// openCUDA fails without cgo: loading CUDA needs it (cudalib says so).
func openCUDA(runtime.DeviceOptions) (func(int) (runtime.Backend, error), func() int64, error) {
	_, err := cudalib.Load()
	return nil, nil, err
}

// openSim fails without cgo: the simulated GPU runs ops.cu compiled as C.
func openSim(runtime.DeviceOptions) (func(int) (runtime.Backend, error), error) {
	return nil, errors.New("the simulated GPU runs ops.cu compiled as C, which needs cgo (this amspc was built with CGO_ENABLED=0)")
}
