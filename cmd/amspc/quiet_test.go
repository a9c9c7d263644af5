package main

import (
	"runtime"
	"testing"
	"time"
)

// TestLoadBetween: the shares are of every processor's time, other
// processes' being the busy time this process did not use; rounding
// below zero reads as none.
func TestLoadBetween(t *testing.T) {
	a := cpuClock{total: 1000, busy: 300, steal: 10, self: 250}
	b := cpuClock{total: 1400, busy: 650, steal: 30, self: 550}
	// 400 ticks: 20 stolen, 350 busy of which 300 this process's.
	if got, want := loadBetween(a, b), (machineLoad{Steal: 0.05, Others: 0.125}); got != want {
		t.Errorf("loadBetween = %+v, want %+v", got, want)
	}
	b.self = 610 // counted apart: more than the machine's busy time
	if got := loadBetween(a, b); got.Others != 0 {
		t.Errorf("others %v, want 0 where this process's ticks exceed the busy ones", got.Others)
	}
	if got := loadBetween(a, a); got != (machineLoad{}) {
		t.Errorf("over no time: %+v", got)
	}
}

// TestReadCPUClock: on Linux the clocks read, and this process's own
// time grows while it computes.
func TestReadCPUClock(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc is Linux's")
	}
	a, ok := readCPUClock()
	if !ok {
		t.Fatal("cannot read /proc/stat and /proc/self/stat")
	}
	x := 1.0
	for start := time.Now(); time.Since(start) < 100*time.Millisecond; {
		x = x*1.0000001 + 1e-9
	}
	b, ok := readCPUClock()
	if !ok {
		t.Fatal("second read failed")
	}
	if !(b.self > a.self) || !(b.total > a.total) || !(b.busy >= a.busy) || x == 0 {
		t.Errorf("clocks did not advance over 100 ms of computing: %+v then %+v", a, b)
	}
	if a.busy > a.total || a.steal > a.total || !(a.self > 0) {
		t.Errorf("inconsistent clock %+v", a)
	}
}
