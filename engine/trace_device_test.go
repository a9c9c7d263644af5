//go:build cgo

package engine_test

import (
	"strings"
	"testing"

	"amspc/cost"
	"amspc/engine"
	"amspc/kernels/gpu/hostc"
)

// TestTraceRefusesDevices: a trace records host wall time, which on a
// device backend is when work was issued, not when it ran: a run on one
// refuses it.
func TestTraceRefusesDevices(t *testing.T) {
	b := compile(t, 1, 2, cost.Factors{P: F(1, 1), G: F(1, 1), OS: F(1, 1)})
	tr := b.Train
	r := &engine.Run{Bundle: b, Seed: 1, Trace: &engine.Trace{},
		Data:       &engine.Data{Tokens: corpus(t), SeqLen: int(tr.SeqLen), MicroBatch: int(tr.MicroBatch), Global: int(tr.GlobalBatch)},
		NewBackend: func(int) (engine.Backend, error) { return engine.NewDeviceBackend(hostc.NewDevice()), nil }}
	err := r.Start()
	if err == nil || !strings.Contains(err.Error(), "not supported yet") {
		t.Fatalf("Start on a device backend with a trace: %v, want a refusal", err)
	}
}
