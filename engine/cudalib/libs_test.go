package cudalib

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"amspc/kernels/gpu"
)

// TestCandidates: $AMSPC_CUDA_LIBS comes first, then the loader's own
// search, then CUDA's install directories.
func TestCandidates(t *testing.T) {
	t.Setenv(EnvLibs, "/opt/a:/opt/b")
	t.Setenv("CUDA_HOME", "/opt/cuda")
	got := Candidates(libNVRTC)
	want := []string{"/opt/a/libnvrtc.so.13", "/opt/b/libnvrtc.so.13", "/opt/a/libnvrtc.so.12"}
	if !slices.Equal(got[:3], want) {
		t.Errorf("first candidates %q, want %q", got[:3], want)
	}
	bare := slices.Index(got, "libnvrtc.so.13")
	home := slices.Index(got, "/opt/cuda/lib64/libnvrtc.so.13")
	if bare < 0 || home < bare || slices.Index(got, "/opt/b/libnvrtc.so") > bare {
		t.Errorf("order: %q", got)
	}
}

// TestLoadErrorSentence: a missing library is named in one sentence.
func TestLoadErrorSentence(t *testing.T) {
	e := &LoadError{Lib: libCUDA, Detail: "libcuda.so.1: cannot open shared object file: No such file or directory"}
	msg := e.Error()
	if !strings.HasPrefix(msg, "CUDA is not available: libcuda.so.1 (the NVIDIA driver's CUDA library) could not be loaded") || strings.Contains(msg, "\n") {
		t.Errorf("%q", msg)
	}
	e = &LoadError{Lib: libNCCL, Path: "/usr/lib/libnccl.so.2", Symbol: "ncclGetVersion"}
	if msg := e.Error(); !strings.Contains(msg, "/usr/lib/libnccl.so.2 (NCCL) lacks ncclGetVersion") {
		t.Errorf("%q", msg)
	}
}

// TestPackArgs: kernel arguments laid out as cuLaunchKernel reads them.
func TestPackArgs(t *testing.T) {
	b, err := packArgs([]any{Ptr(0x1122334455667788), int32(-2), float32(1.5), int64(7), float64(0.25)})
	if err != nil {
		t.Fatal(err)
	}
	want := binary.NativeEndian.AppendUint64(nil, 0x1122334455667788)
	want = binary.NativeEndian.AppendUint32(want, uint32(0xfffffffe))
	want = binary.NativeEndian.AppendUint32(want, math.Float32bits(1.5))
	want = binary.NativeEndian.AppendUint64(want, 7)
	want = binary.NativeEndian.AppendUint64(want, math.Float64bits(0.25))
	if !bytes.Equal(b, want) {
		t.Errorf("packed % x, want % x", b, want)
	}
	sizes := 0
	for _, a := range []any{Ptr(1), int32(-2), float32(1.5), int64(7), float64(0.25)} {
		sizes += argSize(a)
	}
	if sizes != len(b) {
		t.Errorf("argSize sums to %d, packArgs wrote %d", sizes, len(b))
	}
	if _, err := packArgs([]any{3}); err == nil || !strings.Contains(err.Error(), "argument 0 is a int") {
		t.Errorf("a Go int: %v", err)
	}
}

// TestLaunchArgs: every kind of launch argument becomes one packArgs
// takes, each pointer kind its address. (The id check's and the loss's
// slots once became nil here, and every embedding failed on the GPU.)
func TestLaunchArgs(t *testing.T) {
	var l gpu.Launch
	var addrs []uint64
	for k := gpu.Operand; k <= gpu.Float64; k++ {
		l.Args = append(l.Args, gpu.Arg{Kind: k, I: 3, F: 0.5})
		addrs = append(addrs, 0x1000+uint64(k))
	}
	args, err := launchArgs(&l, addrs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := packArgs(args); err != nil {
		t.Fatal(err)
	}
	for i, a := range l.Args {
		if a.Kind <= gpu.Null && args[i] != Ptr(addrs[i]) {
			t.Errorf("argument %d (kind %d) is %v, want its address", i, a.Kind, args[i])
		}
	}
	l.Args = append(l.Args, gpu.Arg{Kind: gpu.Float64 + 1})
	if _, err := launchArgs(&l, append(addrs, 0)); err == nil {
		t.Error("an unknown kind was taken")
	}
}

// TestCache: a cached module reads back; one cut short or with a flipped
// byte is refused; keys differ by architecture and NVRTC version.
func TestCache(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.cubin")
	cubin := []byte("\x7fELF cubin bytes")
	if _, ok := readCache(path); ok {
		t.Fatal("a missing file reads as cached")
	}
	if err := writeCache(path, cubin); err != nil {
		t.Fatal(err)
	}
	if got, ok := readCache(path); !ok || !bytes.Equal(got, cubin) {
		t.Fatalf("read back %q, %v", got, ok)
	}
	b, _ := os.ReadFile(path)
	for name, bad := range map[string][]byte{
		"flipped": append(append([]byte{}, b[:len(b)-1]...), b[len(b)-1]^1),
		"short":   b[:len(b)-3],
		"empty":   b[:32],
	} {
		os.WriteFile(path, bad, 0o644)
		if _, ok := readCache(path); ok {
			t.Errorf("%s file read as sound", name)
		}
	}
	keys := map[string]bool{}
	for _, k := range []string{cacheKey("ab", 9, 0, [2]int{13, 0}), cacheKey("ab", 8, 0, [2]int{13, 0}),
		cacheKey("ab", 9, 0, [2]int{12, 8}), cacheKey("cd", 9, 0, [2]int{13, 0})} {
		keys[k] = true
	}
	if len(keys) != 4 {
		t.Errorf("cache keys collide: %v", keys)
	}
}
