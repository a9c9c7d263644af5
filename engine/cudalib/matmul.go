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

func (d DType) String() string {
	switch d {
	case F32:
		return "fp32"
	case BF16:
		return "bf16"
	}
	return fmt.Sprintf("cudaDataType %d", int(d))
}

// workspaceBytes is cuBLASLt's workspace per context (32 MiB, what it
// asks for on Hopper).
const workspaceBytes = 32 << 20

// lt is a context's cuBLASLt handle and workspace, made on first use,
// and a plan (descriptors and the heuristic's algorithm) per product
// shape, made on its first use: the step's products repeat every step,
// so the heuristic runs once per shape, not per call.
type lt struct {
	once   sync.Once
	err    error
	handle unsafe.Pointer
	ws     Ptr
	mu     sync.Mutex
	plans  map[ltKey]*C.struct_amsp_lt_plan
	// A workspace per stream other than the legacy default one (which
	// has ws): products on two streams may run at once, and cuBLASLt's
	// workspace is scratch memory a running product owns.
	streamWS map[C.CUstream]Ptr
}

// workspace is stream s's cuBLASLt workspace, made on first use.
func (c *Context) workspace(s Stream) (Ptr, error) {
	if s.h == nil {
		return c.lt.ws, nil
	}
	l := &c.lt
	l.mu.Lock()
	defer l.mu.Unlock()
	if p, ok := l.streamWS[s.h]; ok {
		return p, nil
	}
	p, err := c.Alloc(workspaceBytes)
	if err != nil {
		return 0, err
	}
	if l.streamWS == nil {
		l.streamWS = map[C.CUstream]Ptr{}
	}
	l.streamWS[s.h] = p
	return p, nil
}

// releaseWorkspace frees stream s's workspace, if it has one; s's work
// must be done.
func (c *Context) releaseWorkspace(s Stream) {
	c.lt.mu.Lock()
	p, ok := c.lt.streamWS[s.h]
	delete(c.lt.streamWS, s.h)
	c.lt.mu.Unlock()
	if ok {
		c.Free(p)
	}
}

// ltKey is what a product's plan depends on.
type ltKey struct {
	ta, tb                 bool
	m, n, k, lda, ldb, ldc int
	dtype, ctype           DType
}

// plan is key's plan, made on first use.
func (l *lt) plan(key ltKey) (*C.struct_amsp_lt_plan, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.plans[key]; p != nil {
		return p, nil
	}
	flag := func(t bool) C.int {
		if t {
			return 1
		}
		return 0
	}
	p := new(C.struct_amsp_lt_plan)
	st := C.amsp_lt_plan(l.handle, flag(key.ta), flag(key.tb), C.uint64_t(key.m), C.uint64_t(key.n), C.uint64_t(key.k),
		C.int64_t(key.lda), C.int64_t(key.ldb), C.int64_t(key.ldc), C.int(key.dtype), C.int(key.ctype), workspaceBytes, p)
	if st != 0 {
		return nil, fmt.Errorf("cuBLASLt has no algorithm for %dx%dx%d (%v inputs, %v output): %s", key.m, key.n, key.k, key.dtype, key.ctype,
			C.GoString(C.amsp_cublasLtStatusString(st)))
	}
	if l.plans == nil {
		l.plans = map[ltKey]*C.struct_amsp_lt_plan{}
	}
	l.plans[key] = p
	return p, nil
}

// Out says how a product writes its output: of type DType (F32, or BF16
// from BF16 inputs), and, with Accumulate, added to what is there
// (beta 1); and on which stream it is enqueued (the zero Stream: the
// legacy default stream).
type Out struct {
	DType      DType
	Accumulate bool
	Stream     Stream
}

// Gemm computes c = op(a) op(b) in column-major order (op transposes
// where ta, tb say): c is m x n with leading dimension ldc, fp32; a and b
// are of dtype; accumulation is fp32 (CUBLAS_COMPUTE_32F, no TF32).
func (c *Context) Gemm(ta, tb bool, m, n, k int, a Ptr, lda int, b Ptr, ldb int, out Ptr, ldc int, dtype DType) error {
	return c.GemmOut(ta, tb, m, n, k, a, lda, b, ldb, out, ldc, dtype, Out{DType: F32})
}

// GemmOut is Gemm writing its output as o says.
func (c *Context) GemmOut(ta, tb bool, m, n, k int, a Ptr, lda int, b Ptr, ldb int, out Ptr, ldc int, dtype DType, o Out) error {
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
	beta := C.float(0)
	if o.Accumulate {
		beta = 1
	}
	ws, err := c.workspace(o.Stream)
	if err != nil {
		return err
	}
	return c.do(func() error {
		p, err := c.lt.plan(ltKey{ta, tb, m, n, k, lda, ldb, ldc, dtype, o.DType})
		if err != nil {
			return err
		}
		st := C.amsp_lt_run(c.lt.handle, p, C.CUdeviceptr(a), C.CUdeviceptr(b), C.CUdeviceptr(out), beta, C.CUdeviceptr(ws), workspaceBytes, o.Stream.h)
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

// The three products again, writing as o says.

func (c *Context) MatMulOut(out, a, b Ptr, m, k, n int, dtype DType, o Out) error {
	return c.GemmOut(false, false, n, m, k, b, n, a, k, out, n, dtype, o)
}

func (c *Context) MatMulGradAOut(da, dy, b Ptr, m, k, n int, dtype DType, o Out) error {
	return c.GemmOut(true, false, k, m, n, b, n, dy, n, da, k, dtype, o)
}

func (c *Context) MatMulGradBOut(db, a, dy Ptr, m, k, n int, dtype DType, o Out) error {
	return c.GemmOut(false, true, n, k, m, dy, n, a, k, db, n, dtype, o)
}
