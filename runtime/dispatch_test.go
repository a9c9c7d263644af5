package runtime

import (
	"testing"

	"amspc/ir"
)

// TestEveryOpHasACPUKernel: every op of the op table can appear in a
// bundle (forward, backward, optimizer and copies), so the CPU backend's
// table must have a kernel for each.
func TestEveryOpHasACPUKernel(t *testing.T) {
	for _, k := range ir.OpKinds() {
		if cpuKernels[k] == nil {
			t.Errorf("no CPU kernel for %v", k)
		}
	}
	if n := len(cpuKernels); n != len(ir.OpKinds()) {
		t.Errorf("%d CPU kernels for %d op kinds", n, len(ir.OpKinds()))
	}
}
