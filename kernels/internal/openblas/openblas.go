//go:build openblas && cgo

// Package openblas calls the system's OpenBLAS sgemm, for one purpose:
// kernels' benchmarks compare MatMul with it in the same run
// (`go test -tags openblas ./kernels -bench MatMul`). It is built only
// with the openblas tag and is never a dependency of amspc itself.
// Debian: apt-get install libopenblas-dev.
package openblas

/*
#cgo LDFLAGS: -lopenblas
#include <cblas.h>

extern void openblas_set_num_threads(int);
extern char *openblas_get_corename(void);
*/
import "C"

// SetThreads sets OpenBLAS's thread count.
func SetThreads(n int) { C.openblas_set_num_threads(C.int(n)) }

// Core names the kernel family OpenBLAS chose for this CPU (for
// instance "Haswell" for its AVX2 kernels, "SkylakeX" for AVX-512).
func Core() string { return C.GoString(C.openblas_get_corename()) }

// MatMul computes c[m,n] = a[m,k] @ b[k,n], row-major, with cblas_sgemm.
func MatMul(c, a, b []float32, m, k, n int) {
	if len(c) < m*n || len(a) < m*k || len(b) < k*n {
		panic("openblas: buffer too short")
	}
	C.cblas_sgemm(C.CblasRowMajor, C.CblasNoTrans, C.CblasNoTrans, C.blasint(m), C.blasint(n), C.blasint(k),
		1, (*C.float)(&a[0]), C.blasint(k), (*C.float)(&b[0]), C.blasint(n), 0, (*C.float)(&c[0]), C.blasint(n))
}
