//go:build !cgo

package cudalib

import "errors"

var errNoCgo = errors.New("CUDA is not available: this amspc was built without cgo (CGO_ENABLED=0), which loading CUDA's libraries needs")

// Load fails: loading CUDA needs cgo.
func Load() (*Libs, error) { return nil, errNoCgo }

// Devices fails: loading CUDA needs cgo.
func (l *Libs) Devices() ([]Device, error) { return nil, errNoCgo }
