// Package hugepage asks Linux for transparent huge pages under large
// float buffers, where the system grants them on request (the "madvise"
// setting, Debian's default): one TLB entry and one fault per 2 MiB
// instead of per 4 KiB, and hardware prefetchers that do not stop at
// every 4 KiB page boundary while kernels stream through activations,
// gradients and optimizer states.
//
// The advice covers the 2 MiB-aligned region around a buffer: a buffer
// smaller than a huge page can have one only together with its
// neighbours on the Go heap, which keeps large objects in 64 MiB arenas,
// so the region stays inside one arena's mapping. MADV_COLLAPSE then
// makes the region huge now (memory the heap had already touched in
// 4 KiB pages included) instead of whenever khugepaged gets to it.
// Measured on the d512x8 model with 8 local ranks, whose buffers are
// mostly under 2 MiB: bench/README.md.
package hugepage

import (
	"syscall"
	"unsafe"
)

const (
	size = 2 << 20
	// Min is the smallest buffer worth advising: smaller ones sit among
	// Go's small objects.
	Min = 64 << 10
	// madvCollapse is MADV_COLLAPSE (Linux 6.1), which package syscall
	// does not name.
	madvCollapse = 25
)

// Advise asks for huge pages under the bytes at p. Advice only: a kernel
// that refuses or ignores it changes nothing but speed.
func Advise(p unsafe.Pointer, bytes uintptr) {
	if bytes < Min {
		return
	}
	start := uintptr(p)
	lo := start &^ (size - 1)
	hi := (start + bytes + size - 1) &^ (size - 1)
	syscall.Syscall(syscall.SYS_MADVISE, lo, hi-lo, syscall.MADV_HUGEPAGE)
	syscall.Syscall(syscall.SYS_MADVISE, lo, hi-lo, madvCollapse)
}
