//go:build cgo

package cudalib

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "dl.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

var (
	loadOnce sync.Once
	loaded   *Libs
	loadErr  error
)

// Load opens the NVIDIA driver, NVRTC, cuBLASLt and NCCL (once per
// process) and initialises the driver. Its error is one sentence naming
// the first library that could not be loaded, or the driver's error.
func Load() (*Libs, error) {
	loadOnce.Do(func() { loaded, loadErr = load() })
	return loaded, loadErr
}

func load() (*Libs, error) {
	l := &Libs{}
	errBuf := (*C.char)(C.malloc(1024))
	defer C.free(unsafe.Pointer(errBuf))
	for lib := range numLibs {
		paths := Candidates(lib)
		cpaths := make([]*C.char, len(paths)+1)
		for i, p := range paths {
			cpaths[i] = C.CString(p)
		}
		// The array of pointers lives in C memory: cgo forbids passing Go
		// memory that holds pointers.
		arr := (**C.char)(C.malloc(C.size_t(len(cpaths)) * C.size_t(unsafe.Sizeof(cpaths[0]))))
		copy(unsafe.Slice(arr, len(cpaths)), cpaths)
		var opened *C.char
		rc := C.amsp_load(C.int(lib), arr, errBuf, 1024, &opened)
		if opened != nil {
			l.Paths[lib] = C.GoString(opened)
		}
		for _, p := range cpaths[:len(paths)] {
			C.free(unsafe.Pointer(p))
		}
		C.free(unsafe.Pointer(arr))
		switch rc {
		case 1:
			return nil, &LoadError{Lib: lib, Detail: C.GoString(errBuf)}
		case 2:
			return nil, &LoadError{Lib: lib, Path: l.Paths[lib], Symbol: C.GoString(errBuf)}
		}
	}
	if err := check("cuInit", C.amsp_cuInit(0)); err != nil {
		return nil, fmt.Errorf("CUDA is not usable: %v", err)
	}
	var v C.int
	C.amsp_cuDriverGetVersion(&v)
	l.Driver = int(v)
	var major, minor C.int
	C.amsp_nvrtcVersion(&major, &minor)
	l.NVRTC = [2]int{int(major), int(minor)}
	l.CublasLt = int(C.amsp_cublasLtGetVersion())
	C.amsp_ncclGetVersion(&v)
	l.NCCL = int(v)
	return l, nil
}

// check turns a driver result into an error naming the call.
func check(call string, r C.CUresult) error {
	if r == 0 {
		return nil
	}
	return &DriverError{Call: call, Code: int(r), Text: C.GoString(C.amsp_cuErrorString(r))}
}

// Devices lists the GPUs the driver sees.
func (l *Libs) Devices() ([]Device, error) {
	var n C.int
	if err := check("cuDeviceGetCount", C.amsp_cuDeviceGetCount(&n)); err != nil {
		return nil, err
	}
	out := make([]Device, 0, int(n))
	for i := range int(n) {
		var d C.CUdevice
		if err := check("cuDeviceGet", C.amsp_cuDeviceGet(&d, C.int(i))); err != nil {
			return nil, err
		}
		name := (*C.char)(C.malloc(256))
		err := check("cuDeviceGetName", C.amsp_cuDeviceGetName(name, 256, d))
		dev := Device{Ordinal: i, Name: C.GoString(name)}
		C.free(unsafe.Pointer(name))
		if err != nil {
			return nil, err
		}
		for _, a := range []struct {
			attr C.int
			dst  *int
		}{{C.AMSP_ATTR_CC_MAJOR, &dev.Major}, {C.AMSP_ATTR_CC_MINOR, &dev.Minor}, {C.AMSP_ATTR_SM_COUNT, &dev.SMs}} {
			var v C.int
			if err := check("cuDeviceGetAttribute", C.amsp_cuDeviceGetAttribute(&v, a.attr, d)); err != nil {
				return nil, err
			}
			*a.dst = int(v)
		}
		var mem C.size_t
		if err := check("cuDeviceTotalMem", C.amsp_cuDeviceTotalMem(&mem, d)); err != nil {
			return nil, err
		}
		dev.Memory = int64(mem)
		out = append(out, dev)
	}
	return out, nil
}

// Context is a GPU's primary context. Every method makes it current on
// the calling thread first: goroutines move between threads.
type Context struct {
	Device Device
	ctx    C.CUcontext
	lt     lt
}

// Open retains GPU ordinal's primary context.
func (l *Libs) Open(ordinal int) (*Context, error) {
	devs, err := l.Devices()
	if err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= len(devs) {
		return nil, fmt.Errorf("no GPU %d: the driver sees %d", ordinal, len(devs))
	}
	var d C.CUdevice
	if err := check("cuDeviceGet", C.amsp_cuDeviceGet(&d, C.int(ordinal))); err != nil {
		return nil, err
	}
	c := &Context{Device: devs[ordinal]}
	if err := check("cuDevicePrimaryCtxRetain", C.amsp_cuDevicePrimaryCtxRetain(&c.ctx, d)); err != nil {
		return nil, err
	}
	return c, nil
}

// do runs f with the context current on a locked thread.
func (c *Context) do(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := check("cuCtxSetCurrent", C.amsp_cuCtxSetCurrent(c.ctx)); err != nil {
		return err
	}
	return f()
}

// Alloc allocates bytes of device memory.
func (c *Context) Alloc(bytes int64) (Ptr, error) {
	var p C.CUdeviceptr
	err := c.do(func() error { return check("cuMemAlloc", C.amsp_cuMemAlloc(&p, C.size_t(bytes))) })
	return Ptr(p), err
}

// Free frees device memory.
func (c *Context) Free(p Ptr) error {
	return c.do(func() error { return check("cuMemFree", C.amsp_cuMemFree(C.CUdeviceptr(p))) })
}

// CopyIn copies host floats to device memory at p.
func (c *Context) CopyIn(p Ptr, src []float32) error {
	if len(src) == 0 {
		return nil
	}
	return c.do(func() error {
		return check("cuMemcpyHtoD", C.amsp_cuMemcpyHtoD(C.CUdeviceptr(p), unsafe.Pointer(&src[0]), C.size_t(4*len(src))))
	})
}

// CopyOut copies device memory at p to host floats.
func (c *Context) CopyOut(dst []float32, p Ptr) error {
	if len(dst) == 0 {
		return nil
	}
	return c.do(func() error {
		return check("cuMemcpyDtoH", C.amsp_cuMemcpyDtoH(unsafe.Pointer(&dst[0]), C.CUdeviceptr(p), C.size_t(4*len(dst))))
	})
}

// CopyInInts and CopyOutInts are CopyIn and CopyOut for int32s.
func (c *Context) CopyInInts(p Ptr, src []int32) error {
	if len(src) == 0 {
		return nil
	}
	return c.do(func() error {
		return check("cuMemcpyHtoD", C.amsp_cuMemcpyHtoD(C.CUdeviceptr(p), unsafe.Pointer(&src[0]), C.size_t(4*len(src))))
	})
}

func (c *Context) CopyOutInts(dst []int32, p Ptr) error {
	if len(dst) == 0 {
		return nil
	}
	return c.do(func() error {
		return check("cuMemcpyDtoH", C.amsp_cuMemcpyDtoH(unsafe.Pointer(&dst[0]), C.CUdeviceptr(p), C.size_t(4*len(dst))))
	})
}

// Sync waits for all the context's work.
func (c *Context) Sync() error {
	return c.do(func() error { return check("cuCtxSynchronize", C.amsp_cuCtxSynchronize()) })
}

// Module is loaded device code.
type Module struct {
	c *Context
	m C.CUmodule
}

// LoadModule loads a cubin.
func (c *Context) LoadModule(cubin []byte) (*Module, error) {
	if len(cubin) == 0 {
		return nil, fmt.Errorf("empty cubin")
	}
	img := C.CBytes(cubin)
	defer C.free(img)
	m := &Module{c: c}
	err := c.do(func() error { return check("cuModuleLoadData", C.amsp_cuModuleLoadData(&m.m, img)) })
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Function is a kernel of a module.
type Function struct {
	Name string
	c    *Context
	f    C.CUfunction
}

// Function looks kernel name up.
func (m *Module) Function(name string) (*Function, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	f := &Function{Name: name, c: m.c}
	err := m.c.do(func() error { return check("cuModuleGetFunction "+name, C.amsp_cuModuleGetFunction(&f.f, m.m, cname)) })
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Launch runs f on the default stream over grid x block threads with
// shmem bytes of dynamic shared memory. Arguments are Ptr, int32, int64,
// float32 or float64, in the kernel's parameter order.
func (f *Function) Launch(grid, block [3]int, shmem int, args ...any) error {
	return f.LaunchOn(Stream{}, grid, block, shmem, args...)
}

// LaunchOn is Launch enqueued on stream s.
func (f *Function) LaunchOn(s Stream, grid, block [3]int, shmem int, args ...any) error {
	vals, err := packArgs(args)
	if err != nil {
		return fmt.Errorf("%s: %v", f.Name, err)
	}
	// Values and the array of pointers to them live in C memory.
	buf := C.malloc(C.size_t(max(len(vals), 1)))
	defer C.free(buf)
	copy(unsafe.Slice((*byte)(buf), len(vals)), vals)
	ptrs := (*unsafe.Pointer)(C.malloc(C.size_t(max(len(args), 1)) * C.size_t(unsafe.Sizeof(uintptr(0)))))
	defer C.free(unsafe.Pointer(ptrs))
	ps := unsafe.Slice(ptrs, len(args))
	off := 0
	for i, a := range args {
		ps[i] = unsafe.Add(buf, off)
		off += argSize(a)
	}
	return f.c.do(func() error {
		return check("cuLaunchKernel "+f.Name, C.amsp_cuLaunchKernel(f.f,
			C.uint(grid[0]), C.uint(grid[1]), C.uint(grid[2]), C.uint(block[0]), C.uint(block[1]), C.uint(block[2]),
			C.uint(shmem), s.h, ptrs))
	})
}

// Compile compiles CUDA C source with NVRTC for compute capability
// major.minor and returns the cubin and NVRTC's log.
func (l *Libs) compile(src, name string, major, minor int) ([]byte, string, error) {
	csrc, cname := C.CString(src), C.CString(name)
	defer C.free(unsafe.Pointer(csrc))
	defer C.free(unsafe.Pointer(cname))
	var prog C.nvrtcProgram
	if r := C.amsp_nvrtcCreateProgram(&prog, csrc, cname); r != 0 {
		return nil, "", fmt.Errorf("nvrtcCreateProgram: %s", C.GoString(C.amsp_nvrtcErrorString(r)))
	}
	defer C.amsp_nvrtcDestroyProgram(&prog)
	opts := nvrtcOptions(major, minor)
	copts := make([]*C.char, len(opts))
	for i, o := range opts {
		copts[i] = C.CString(o)
		defer C.free(unsafe.Pointer(copts[i]))
	}
	arr := (**C.char)(C.malloc(C.size_t(len(copts)) * C.size_t(unsafe.Sizeof(copts[0]))))
	defer C.free(unsafe.Pointer(arr))
	copy(unsafe.Slice(arr, len(copts)), copts)
	rc := C.amsp_nvrtcCompileProgram(prog, C.int(len(copts)), arr)
	var n C.size_t
	log := ""
	if C.amsp_nvrtcGetProgramLogSize(prog, &n) == 0 && n > 1 {
		b := (*C.char)(C.malloc(n))
		C.amsp_nvrtcGetProgramLog(prog, b)
		log = C.GoString(b)
		C.free(unsafe.Pointer(b))
	}
	if rc != 0 {
		return nil, log, fmt.Errorf("NVRTC could not compile %s for sm_%d%d: %s\n%s", name, major, minor, C.GoString(C.amsp_nvrtcErrorString(rc)), log)
	}
	if r := C.amsp_nvrtcGetCUBINSize(prog, &n); r != 0 {
		return nil, log, fmt.Errorf("nvrtcGetCUBINSize: %s", C.GoString(C.amsp_nvrtcErrorString(r)))
	}
	b := C.malloc(n)
	defer C.free(b)
	if r := C.amsp_nvrtcGetCUBIN(prog, (*C.char)(b)); r != 0 {
		return nil, log, fmt.Errorf("nvrtcGetCUBIN: %s", C.GoString(C.amsp_nvrtcErrorString(r)))
	}
	return C.GoBytes(b, C.int(n)), log, nil
}
