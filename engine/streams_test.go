//go:build cgo

package engine_test

import (
	"math"
	"slices"
	"testing"

	"amspc/codegen"
	"amspc/cost"
	"amspc/engine"
	"amspc/ir"
	"amspc/kernels/gpu/hostc"
	"amspc/planner"
)

// streamsTrain is tiny's training at a size where a step on 8 simulated
// GPUs is cheap: two micro-batches a rank, as the default has.
const streamsTrain = `train { seq_len = 32 micro_batch = 1 global_batch = 16 precision = fp32
  optimizer = adamw(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1) }`

// tinyPlans are the plans the equivalence tests train tiny under on
// 2 nodes x 4 ranks: every (s_p, s_g, s_os) and every baseline, each
// once.
func tinyPlans() []cost.Factors {
	dp := ir.Factor{S0: 4, S1: 2}
	plans := planner.Space(dp)
	for _, b := range planner.Baselines(dp, 4) {
		if !slices.Contains(plans, b.Factors) {
			plans = append(plans, b.Factors)
		}
	}
	return plans
}

// simRun is a run of b on simulated GPUs made with opts, one a rank:
// its losses over n steps, the checksums of the checkpoint it saves
// after them (every rank's weights and Adam moments), and how many work
// items its devices ran before a dropped Wait would have let them.
type simRun struct {
	losses    []float64
	sums      []string
	reordered int
}

func trainSim(t *testing.T, b *codegen.Bundle, n int, opts ...hostc.Option) simRun {
	t.Helper()
	devs := make([]*hostc.Device, b.Topo.Ranks())
	for i := range devs {
		devs[i] = hostc.NewDevice(opts...)
	}
	return trainDevices(t, b, n, devs, engine.DeviceOptions{})
}

// trainDevices trains b for n steps on devs, rank r's backend on
// devs[r] with options o.
func trainDevices(t *testing.T, b *codegen.Bundle, n int, devs []*hostc.Device, o engine.DeviceOptions) simRun {
	t.Helper()
	r := start(t, b, func(rank int) (engine.Backend, error) {
		return engine.NewDeviceBackendWith(devs[rank], o), nil
	})
	run := simRun{losses: steps(t, r, n), sums: savedSums(t, r)}
	for _, d := range devs {
		run.reordered += d.Reordered()
	}
	return run
}

// savedSums are the SHA-256 sums of the files of a checkpoint of r.
func savedSums(t *testing.T, r *engine.Run) []string {
	t.Helper()
	dir := t.TempDir()
	if err := r.Save(dir); err != nil {
		t.Fatal(err)
	}
	var sums []string
	for _, f := range manifest(t, dir).Files {
		sums = append(sums, f.SHA256)
	}
	return sums
}

// same says whether two runs trained to the same bits.
func (a simRun) same(b simRun) bool {
	if len(a.losses) != len(b.losses) {
		return false
	}
	for i := range a.losses {
		if math.Float64bits(a.losses[i]) != math.Float64bits(b.losses[i]) {
			return false
		}
	}
	return slices.Equal(a.sums, b.sums)
}

// TestStreamsTrainBitwise: tiny, under every plan the equivalence tests
// use, on 8 simulated GPUs whose streams run at once (each on its own
// worker, as CUDA streams do) and whose streams are held back and run
// latest-first wherever the plan's events allow (hostc.HoldBack), trains
// to the bits of the device that runs every operation in order
// (hostc.Sequential): the same loss at every step and the same weights
// and Adam moments after the last. (-short: every fourth plan.)
func TestStreamsTrainBitwise(t *testing.T) {
	const n = 2
	for i, f := range tinyPlans() {
		if testing.Short() && i%4 != 0 {
			continue
		}
		b := compile(t, 2, 4, f, streamsTrain)
		want := trainSim(t, b, n, hostc.Sequential)
		for _, m := range []struct {
			name string
			opts []hostc.Option
		}{{"concurrent", nil}, {"held back", []hostc.Option{hostc.HoldBack}}} {
			if got := trainSim(t, b, n, m.opts...); !got.same(want) {
				t.Errorf("%v with %s streams: losses %.17g, checkpoint %.8s; sequential %.17g, %.8s", f, m.name, got.losses, got.sums, want.losses, want.sums)
			}
		}
	}
}

// TestStreamsCatchDroppedWaits is the mutation of the test above: the
// simulated GPU drops every device-side Wait (hostc.DropWaits), and held
// back it then runs the work a Wait guarded before the work it waited
// for. Through the device backend, a copy on one stream of what a copy
// on another wrote reads it stale, every time. With the collectives
// staged through the host (ordered), every dependency between streams
// that matters also passes through a host transfer, which waits for
// every stream; with them on the devices' comm streams,
// TestStreamsDeviceCollectives requires that dropped Waits change what
// tiny's plans train to.
func TestStreamsCatchDroppedWaits(t *testing.T) {
	t.Run("backend", func(t *testing.T) {
		for _, drop := range []bool{false, true} {
			opts := []hostc.Option{hostc.HoldBack}
			if drop {
				opts = append(opts, hostc.DropWaits)
			}
			dev := hostc.NewDevice(opts...)
			be := engine.NewDeviceBackend(dev)
			const n = 100
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(i + 1)
			}
			var m [3]engine.Mem
			for i := range m {
				var err error
				if m[i], err = be.Alloc(ir.F32, n); err != nil {
					t.Fatal(err)
				}
			}
			got := make([]float32, n)
			err := be.Write(m[0], x)
			for _, step := range []func() error{
				func() error { return be.Copy(ir.Compute, m[1], m[0]) },
				func() error { return be.Record(ir.Compute, 0) },
				func() error { return be.Wait(ir.CommReduce, 0) },
				func() error { return be.Copy(ir.CommReduce, m[2], m[1]) },
				func() error { return be.Read(got, m[2]) },
			} {
				if err == nil {
					err = step()
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			if drop == slices.Equal(got, x) || drop != (dev.Reordered() > 0) {
				t.Errorf("waits dropped %v: read %v..., reordered %d", drop, got[:3], dev.Reordered())
			}
		}
	})
}

// trainWorld is trainSim with the collectives on the simulated devices
// (DeviceOptions.Collectives device): one world of 8 devices made with
// opts.
func trainWorld(t *testing.T, b *codegen.Bundle, n int, opts ...hostc.Option) simRun {
	t.Helper()
	return trainDevices(t, b, n, hostc.NewWorld(b.Topo.Ranks(), opts...), engine.DeviceOptions{Collectives: engine.CollectivesDevice})
}

// TestStreamsDeviceCollectives: with the collectives on the simulated
// devices' comm streams (--collectives device), every tiny plan on 8
// ranks trains to the bits of the host-staged ordered fold, losses and
// checkpoint shards, with the streams concurrent and held back; and
// with the devices' Waits dropped (held back, so work runs as late and
// as reversed as the events allow), the plans whose gathers and
// reductions now run on the device train differently: a missing event
// wait cannot land.
func TestStreamsDeviceCollectives(t *testing.T) {
	const n = 2
	caught, tried := 0, 0
	for i, f := range tinyPlans() {
		if testing.Short() && i%4 != 0 {
			continue
		}
		b := compile(t, 2, 4, f, streamsTrain)
		want := trainSim(t, b, n, hostc.Sequential)
		for _, mode := range [][]hostc.Option{nil, {hostc.HoldBack}} {
			if got := trainWorld(t, b, n, mode...); !got.same(want) {
				t.Errorf("%v, device collectives %v: losses %v, ordered %v", f, mode, got.losses, want.losses)
			}
		}
		if i%3 != 0 {
			continue
		}
		tried++
		if mut := trainWorld(t, b, n, hostc.HoldBack, hostc.DropWaits); mut.reordered > 0 && !mut.same(want) {
			caught++
		} else {
			t.Errorf("%v: dropping the device's Waits reordered %d work items and trained to the ordered bits", f, mut.reordered)
		}
	}
	t.Logf("dropped Waits caught in %d of %d plans", caught, tried)
}
