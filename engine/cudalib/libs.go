// Package cudalib loads CUDA at run time: the NVIDIA driver (libcuda),
// NVRTC, cuBLASLt and NCCL are opened with dlopen and the few entry points
// amspc uses are declared in dl.h, so building amspc needs neither CUDA's
// headers nor its libraries (gorgonia.org/cu needs both), and a machine
// without a GPU gets one clear error naming the missing library.
//
// What is here: loading, device queries, device memory, NVRTC compilation
// with an on-disk cache keyed by source and architecture, module loading
// and kernel launches. The backend that runs plans on it is not written
// yet (amspc run --device cuda says so).
package cudalib

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// The libraries, in the order Load opens them (dl.h's AMSP_LIB_*).
const (
	libCUDA = iota
	libNVRTC
	libCublasLt
	libNCCL
	numLibs
)

var libInfo = [numLibs]struct {
	what  string
	names []string // sonames, newest first
}{
	{"the NVIDIA driver's CUDA library", []string{"libcuda.so.1", "libcuda.so"}},
	{"NVRTC, CUDA's run-time compiler", []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}},
	{"cuBLASLt", []string{"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"}},
	{"NCCL", []string{"libnccl.so.2", "libnccl.so"}},
}

// EnvLibs names a colon-separated list of directories searched first.
const EnvLibs = "AMSPC_CUDA_LIBS"

// Candidates are the paths Load tries for library lib, in order: each
// name in the directories of $AMSPC_CUDA_LIBS, then the bare name (the
// dynamic loader's search: LD_LIBRARY_PATH, ld.so.cache), then the name
// in CUDA's usual install directories ($CUDA_HOME, /usr/local/cuda).
func Candidates(lib int) []string {
	var dirs []string
	if v := os.Getenv(EnvLibs); v != "" {
		dirs = append(dirs, filepath.SplitList(v)...)
	}
	var late []string
	for _, env := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if v := os.Getenv(env); v != "" {
			late = append(late, filepath.Join(v, "lib64"), filepath.Join(v, "lib"))
		}
	}
	late = append(late, "/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib")
	var out []string
	for _, n := range libInfo[lib].names {
		for _, d := range dirs {
			out = append(out, filepath.Join(d, n))
		}
	}
	out = append(out, libInfo[lib].names...)
	for _, n := range libInfo[lib].names {
		for _, d := range late {
			out = append(out, filepath.Join(d, n))
		}
	}
	return out
}

// Libs are the loaded libraries and their versions.
type Libs struct {
	Paths    [numLibs]string // what was opened
	Driver   int             // CUDA driver API version, e.g. 13000
	NVRTC    [2]int
	CublasLt int
	NCCL     int
}

func (l *Libs) String() string {
	return fmt.Sprintf("CUDA driver %d.%d, NVRTC %d.%d, cuBLASLt %d, NCCL %d.%d.%d",
		l.Driver/1000, l.Driver%1000/10, l.NVRTC[0], l.NVRTC[1], l.CublasLt, l.NCCL/10000, l.NCCL/100%100, l.NCCL%100)
}

// Device is one GPU.
type Device struct {
	Ordinal      int
	Name         string
	Major, Minor int // compute capability
	SMs          int
	Memory       int64 // bytes
}

func (d Device) String() string {
	return fmt.Sprintf("GPU %d: %s (sm_%d%d, %d SMs, %.1f GiB)", d.Ordinal, d.Name, d.Major, d.Minor, d.SMs, float64(d.Memory)/(1<<30))
}

// LoadError says which library could not be loaded, or which entry point
// it lacks.
type LoadError struct {
	Lib    int
	Path   string // opened, when a symbol is missing
	Symbol string
	Detail string // dlerror's text of the last try
}

func (e *LoadError) Error() string {
	info := libInfo[e.Lib]
	if e.Symbol != "" {
		return fmt.Sprintf("CUDA is not available: %s (%s) lacks %s; it is older than amspc needs", e.Path, info.what, e.Symbol)
	}
	hint := "install it or set " + EnvLibs + " to the directory that holds it"
	if e.Lib == libCUDA {
		hint = "this machine has no NVIDIA driver (no GPU), or " + EnvLibs + " does not point at it"
	}
	return fmt.Sprintf("CUDA is not available: %s (%s) could not be loaded: %s; %s", info.names[0], info.what, e.Detail, hint)
}

// DriverError is a failed driver call.
type DriverError struct {
	Call string
	Code int
	Text string
}

func (e *DriverError) Error() string {
	return fmt.Sprintf("%s: %s (CUDA error %d)", e.Call, e.Text, e.Code)
}

// Ptr is device memory.
type Ptr uint64

// packArgs lays kernel arguments out as cuLaunchKernel reads them: each
// value at its own offset, in native byte order.
func packArgs(args []any) ([]byte, error) {
	var out []byte
	for i, a := range args {
		switch v := a.(type) {
		case Ptr:
			out = binary.NativeEndian.AppendUint64(out, uint64(v))
		case int32:
			out = binary.NativeEndian.AppendUint32(out, uint32(v))
		case int64:
			out = binary.NativeEndian.AppendUint64(out, uint64(v))
		case float32:
			out = binary.NativeEndian.AppendUint32(out, math.Float32bits(v))
		case float64:
			out = binary.NativeEndian.AppendUint64(out, math.Float64bits(v))
		default:
			return nil, fmt.Errorf("argument %d is a %T; kernels take Ptr, int32, int64, float32 or float64", i, a)
		}
	}
	return out, nil
}

// argSize is the bytes packArgs gives a.
func argSize(a any) int {
	switch a.(type) {
	case int32, float32:
		return 4
	}
	return 8
}

// nvrtcOptions are NVRTC's options for compute capability major.minor.
// No contraction of a*b+c into fused multiply-adds (NVRTC's default
// contracts): ops.cu's kernels then round as they do compiled as C on the
// host, where they give package kernels' bits (kernels/gpu/hostc).
func nvrtcOptions(major, minor int) []string {
	return []string{fmt.Sprintf("--gpu-architecture=sm_%d%d", major, minor), "--std=c++17", "-default-device", "--fmad=false"}
}

// cacheKey names a compiled module in the cache: the source, the
// architecture, NVRTC's version and its options all change the cubin.
func cacheKey(hash string, major, minor int, nvrtc [2]int) string {
	opts := strings.Join(nvrtcOptions(major, minor), " ")
	return fmt.Sprintf("%s-sm_%d%d-nvrtc%d.%d-%x.cubin", hash, major, minor, nvrtc[0], nvrtc[1], fnv32(opts))
}

func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return h
}
