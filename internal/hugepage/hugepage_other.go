//go:build !linux

package hugepage

import "unsafe"

// Min is the smallest buffer Advise would advise.
const Min = 64 << 10

// Advise does nothing where there is no madvise advice for huge pages.
func Advise(p unsafe.Pointer, bytes uintptr) {}
