//go:build cgo

package hostc

import (
	"testing"
	"time"

	"amspc/kernels/gpu"
)

// TestSpin: spin_ns holds its stream for at least its time, and the
// stream's next work waits for it (a lower bound, not a speed).
func TestSpin(t *testing.T) {
	d := NewDevice()
	const ns = 20e6
	l := gpu.Spin(ns)
	t0 := time.Now()
	if err := d.Launch(0, &l, []uint64{0}); err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(t0); took < ns {
		t.Errorf("spin_ns(%d) returned after %v", int64(ns), took)
	}
}
