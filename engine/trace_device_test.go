//go:build cgo

package engine_test

import (
	"strings"
	"testing"

	"amspc/cost"
	"amspc/engine"
	"amspc/kernels/gpu/hostc"
)

// TestTraceDevice: on 8 simulated GPUs whose collectives run on their
// comm streams, a trace records the device's own times (marks where each
// stream's work reaches each instruction, engine.TimingDevice) with the
// same guarantees as the CPU's: every instruction of the steps traced,
// in stream order without overlap, every wait ending after its event's
// record began, which on a device holds only if the device kept the
// plan's event order.
func TestTraceDevice(t *testing.T) {
	b := compile(t, 2, 4, cost.Factors{P: F(4, 2), G: F(4, 2), OS: F(4, 2)}, streamsTrain)
	tr := b.Train
	devs := hostc.NewWorld(b.Topo.Ranks())
	trace := &engine.Trace{Steps: 2}
	r := &engine.Run{Bundle: b, Seed: 1, Trace: trace,
		Data: &engine.Data{Tokens: corpus(t), SeqLen: int(tr.SeqLen), MicroBatch: int(tr.MicroBatch), Global: int(tr.GlobalBatch)},
		NewBackend: func(rank int) (engine.Backend, error) {
			return engine.NewDeviceBackendWith(devs[rank], engine.DeviceOptions{Collectives: engine.CollectivesDevice}), nil
		}}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	steps(t, r, 1)
	trace.Start()
	steps(t, r, 2)
	checkTrace(t, b, trace, 2, 3)
}

// untimed is a device without marks.
type untimed struct{ engine.Device }

// TestTraceRefusesUntimedDevices: a device that cannot timestamp its
// streams' work cannot be traced (host times are when work was issued,
// not when it ran): a run on one refuses the trace.
func TestTraceRefusesUntimedDevices(t *testing.T) {
	b := compile(t, 1, 2, cost.Factors{P: F(1, 1), G: F(1, 1), OS: F(1, 1)})
	tr := b.Train
	r := &engine.Run{Bundle: b, Seed: 1, Trace: &engine.Trace{},
		Data:       &engine.Data{Tokens: corpus(t), SeqLen: int(tr.SeqLen), MicroBatch: int(tr.MicroBatch), Global: int(tr.GlobalBatch)},
		NewBackend: func(int) (engine.Backend, error) { return engine.NewDeviceBackend(untimed{hostc.NewDevice()}), nil }}
	err := r.Start()
	if err == nil || !strings.Contains(err.Error(), "is not supported") {
		t.Fatalf("Start on an untimed device with a trace: %v, want a refusal", err)
	}
}
