//go:build cgo

package cudalib

/*
#include "dl.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// DType is a matmul input's element type (CUDA's cudaDataType values).
type DType int

const (
	F32  DType = 0  // CUDA_R_32F
	BF16 DType = 14 // CUDA_R_16BF
)

// workspaceBytes is cuBLASLt's workspace per context (32 MiB, what it
// asks for on Hopper).
const workspaceBytes = 32 << 20

// lt is a context's cuBLASLt handle and workspace, made on first use.
type lt struct {
	once   sync.Once
	err    error
	handle unsafe.Pointer
	ws     Ptr
}

// Gemm computes c = op(a) op(b) in column-major order (op transposes
// where ta, tb say): c is m x n with leading dimension ldc, fp32; a and b
// are of dtype; accumulation is fp32 (CUBLAS_COMPUTE_32F, no TF32).
func (c *Context) Gemm(ta, tb bool, m, n, k int, a Ptr, lda int, b Ptr, ldb int, out Ptr, ldc int, dtype DType) error {
	c.lt.once.Do(func() {
		c.lt.err = c.do(func() error {
			var h unsafe.Pointer
			if st := C.amsp_cublasLtCreate(&h); st != 0 {
				return fmt.Errorf("cublasLtCreate: %s", C.GoString(C.amsp_cublasLtStatusString(st)))
			}
			c.lt.handle = h
			return nil
		})
		if c.lt.err == nil {
			c.lt.ws, c.lt.err = c.Alloc(workspaceBytes)
		}
	})
	if c.lt.err != nil {
		return c.lt.err
	}
	flag := func(t bool) C.int {
		if t {
			return 1
		}
		return 0
	}
	return c.do(func() error {
		st := C.amsp_lt_matmul(c.lt.handle, flag(ta), flag(tb), C.uint64_t(m), C.uint64_t(n), C.uint64_t(k),
			C.CUdeviceptr(a), C.int64_t(lda), C.CUdeviceptr(b), C.int64_t(ldb), C.CUdeviceptr(out), C.int64_t(ldc),
			C.int(dtype), C.CUdeviceptr(c.lt.ws), workspaceBytes)
		if st != 0 {
			return fmt.Errorf("cublasLtMatmul %dx%dx%d: %s", m, n, k, C.GoString(C.amsp_cublasLtStatusString(st)))
		}
		return nil
	})
}

// The language's three products on row-major matrices, as package
// kernels defines them (a row-major r x c matrix is a column-major c x r
// one with leading dimension c).

// MatMul is out[m,n] = a[m,k] b[k,n].
func (c *Context) MatMul(out, a, b Ptr, m, k, n int, dtype DType) error {
	return c.Gemm(false, false, n, m, k, b, n, a, k, out, n, dtype)
}

// MatMulGradA is da[m,k] = dy[m,n] b[k,n]^T.
func (c *Context) MatMulGradA(da, dy, b Ptr, m, k, n int, dtype DType) error {
	return c.Gemm(true, false, k, m, n, b, n, dy, n, da, k, dtype)
}

// MatMulGradB is db[k,n] = a[m,k]^T dy[m,n].
func (c *Context) MatMulGradB(db, a, dy Ptr, m, k, n int, dtype DType) error {
	return c.Gemm(false, true, n, k, m, dy, n, a, k, db, n, dtype)
}
