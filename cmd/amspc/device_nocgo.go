//go:build !cgo

package main

import (
	"amspc/runtime"
	"amspc/runtime/cudalib"
)

// openCUDA fails without cgo: loading CUDA needs it (cudalib says so).
func openCUDA() (func(int) (runtime.Backend, error), func() int64, error) {
	_, err := cudalib.Load()
	return nil, nil, err
}
