//go:build cgo

package engine_test

import (
	"math"
	"testing"

	"amspc/engine"
	"amspc/kernels/gpu/hostc"
)

// TestTensorParallelDevice: tiny under tensor = 2 with sequence
// parallelism and ZeRO-3 on 8 simulated GPUs (its collectives through
// the host, and on the devices) trains within 1e-5 of one CPU rank:
// the device backend runs the rank's parts, the tensor-parallel
// collectives and sequence parallelism's layouts (to_parts,
// from_parts).
func TestTensorParallelDevice(t *testing.T) {
	const n = 2
	want := train(t, compileShard(t, 1, 1, "shard ddp"), n)
	b := compileShard(t, 2, 4, "shard { tensor = 2, sequence = true, params = 2x2, grads = 2x2, optim = 2x2 }")
	for _, coll := range []string{engine.CollectivesOrdered, engine.CollectivesDevice} {
		devs := hostc.NewWorld(b.Topo.Ranks())
		if coll == engine.CollectivesOrdered {
			for i := range devs {
				devs[i] = hostc.NewDevice()
			}
		}
		r := start(t, b, func(rank int) (engine.Backend, error) {
			return engine.NewDeviceBackendWith(devs[rank], engine.DeviceOptions{Collectives: coll}), nil
		})
		got := steps(t, r, n)
		for i := range want {
			if d := math.Abs(got[i]-want[i]) / want[i]; d > 1e-5 {
				t.Errorf("collectives %s, step %d: loss %.9g on simulated GPUs, %.9g on one rank", coll, i+1, got[i], want[i])
			}
		}
	}
}
