package runtime

import (
	"syscall"
	"unsafe"
)

// hugeBytes is the size from which float buffers ask the kernel for
// transparent huge pages (where it grants them on request, the
// "madvise" setting): one fault per 2 MiB instead of per 4 KiB, and
// fewer TLB misses when kernels stream through weights.
const hugeBytes = 4 << 20

// makeF32 allocates n zeroed float32s.
func makeF32(n int64) []float32 {
	s := make([]float32, n)
	if 4*n >= hugeBytes {
		b := unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), 4*n)
		_ = syscall.Madvise(b, syscall.MADV_HUGEPAGE) // advice: refused or ignored, nothing changes
	}
	return s
}
