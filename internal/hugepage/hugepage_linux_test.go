package hugepage

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// TestAdvise: where the system grants huge pages on request, a buffer
// advised before it is touched ends up on them (read back from
// /proc/self/smaps), one smaller than a huge page included.
func TestAdvise(t *testing.T) {
	mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil || strings.Contains(string(mode), "[never]") {
		t.Skipf("transparent huge pages are off here: %q", mode)
	}
	for _, n := range []int{8 << 20, 1 << 20, 256 << 10} {
		s := make([]float32, n/4)
		p := uintptr(unsafe.Pointer(&s[0]))
		Advise(unsafe.Pointer(&s[0]), uintptr(n))
		for i := range s {
			s[i] = 1
		}
		if kb := hugeKB(t, p); kb == 0 {
			t.Errorf("%d-byte buffer: no huge pages in its mapping", n)
		} else {
			t.Logf("%d-byte buffer: its mapping holds %d kB of huge pages", n, kb)
		}
	}
}

// hugeKB is AnonHugePages of the mapping that holds address p.
func hugeKB(t *testing.T, p uintptr) int {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	in := false
	for sc.Scan() {
		line := sc.Text()
		if lo, hi, ok := strings.Cut(strings.Fields(line)[0], "-"); ok && !strings.HasSuffix(line, ":") && !strings.Contains(line, " kB") {
			a, err1 := strconv.ParseUint(lo, 16, 64)
			b, err2 := strconv.ParseUint(hi, 16, 64)
			in = err1 == nil && err2 == nil && uint64(p) >= a && uint64(p) < b
			continue
		}
		if in && strings.HasPrefix(line, "AnonHugePages:") {
			kb, _ := strconv.Atoi(strings.Fields(line)[1])
			return kb
		}
	}
	t.Fatalf("no mapping holds %#x", p)
	return 0
}
