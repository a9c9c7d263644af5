package engine

import (
	"unsafe"

	"amspc/internal/hugepage"
)

// makeF32 allocates n zeroed float32s, on huge pages where Linux grants
// them (package hugepage).
func makeF32(n int64) []float32 {
	s := make([]float32, n)
	if n > 0 {
		hugepage.Advise(unsafe.Pointer(&s[0]), uintptr(4*n))
	}
	return s
}
