//go:build !cgo

package cudalib

import "amspc/engine"

// Without cgo the kind "cuda" is still known, so that asking for it
// says why it cannot load (Load's error), not that it does not exist.
func init() {
	engine.RegisterDevice("cuda", func(engine.DeviceOptions) (func(int) (engine.Device, error), error) {
		_, err := Load()
		return nil, err
	})
}
