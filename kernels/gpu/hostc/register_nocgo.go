//go:build !cgo

package hostc

import (
	"errors"

	"amspc/engine"
)

// Without cgo the kind "sim" is still known, so that asking for it says
// why it cannot run, not that it does not exist.
func init() {
	engine.RegisterDevice("sim", func(engine.DeviceOptions) (func(int) (engine.Device, error), error) {
		return nil, errors.New("the simulated GPU runs ops.cu compiled as C, which needs cgo (this amspc was built with CGO_ENABLED=0)")
	})
}
