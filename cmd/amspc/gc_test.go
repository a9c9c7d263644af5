package main

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

// gcSettings reads GOGC and the memory limit as the runtime has them.
func gcSettings() (gogc, limit int64) {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64()), int64(s[1].Value.Uint64())
}

// TestCollectLess: the search commands run without collection up to
// 1 GiB, then at GOGC=400 without a limit; other commands, and any
// command under GOGC or GOMEMLIMIT, keep the runtime's settings.
func TestCollectLess(t *testing.T) {
	oldGOGC := debug.SetGCPercent(100)
	oldLimit := debug.SetMemoryLimit(math.MaxInt64)
	defer func() {
		debug.SetGCPercent(oldGOGC)
		debug.SetMemoryLimit(oldLimit)
	}()
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	collectLess([]string{"run", "tiny.amsp"})
	if g, l := gcSettings(); g != 100 || l != math.MaxInt64 {
		t.Fatalf("run: GOGC %d, limit %d; want the runtime's 100, no limit", g, l)
	}
	t.Setenv("GOGC", "100")
	collectLess([]string{"compile", "tiny.amsp"})
	if g, l := gcSettings(); g != 100 || l != math.MaxInt64 {
		t.Fatalf("compile under GOGC=100: GOGC %d, limit %d; want them untouched", g, l)
	}
	t.Setenv("GOGC", "")
	collectLess([]string{"compile", "tiny.amsp"})
	if _, l := gcSettings(); l != 1<<30 {
		t.Fatalf("compile: memory limit %d, want 1 GiB", l)
	}
	runtime.GC() // as the heap reaching the limit would
	deadline := time.Now().Add(10 * time.Second)
	for {
		g, l := gcSettings()
		if g == 400 && l == math.MaxInt64 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the first collection: GOGC %d, limit %d; want 400, no limit", g, l)
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}
