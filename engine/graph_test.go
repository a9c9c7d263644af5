//go:build cgo

package engine_test

import (
	"fmt"
	"testing"

	"amspc/codegen"
	"amspc/cost"
	"amspc/engine"
	"amspc/kernels/gpu/hostc"
)

// graphRun trains b for n steps on simulated GPUs (a world of them with
// device collectives when devColl), with options o, mutate applied to
// each rank's backend before its first step; it returns the run and the
// steps rank 0 replayed.
func graphRun(t *testing.T, b *codegen.Bundle, n int, devColl bool, o engine.DeviceOptions, mutate func(engine.Backend), opts ...hostc.Option) (simRun, int64) {
	t.Helper()
	var devs []*hostc.Device
	if devColl {
		devs = hostc.NewWorld(b.Topo.Ranks(), opts...)
		o.Collectives = engine.CollectivesDevice
	} else {
		for range b.Topo.Ranks() {
			devs = append(devs, hostc.NewDevice(opts...))
		}
	}
	bes := make([]engine.Backend, len(devs))
	r := start(t, b, func(rank int) (engine.Backend, error) {
		be := engine.NewDeviceBackendWith(devs[rank], o)
		if mutate != nil {
			mutate(be)
		}
		bes[rank] = be
		return be, nil
	})
	run := simRun{losses: steps(t, r, n), sums: savedSums(t, r)}
	return run, engine.GraphReplays(bes[0])
}

// TestGraphSteps: a run whose second step is captured as a graph and
// replayed for every step after trains to the bits of the run that
// enqueues every step (DeviceOptions.Eager): losses at every step, and
// weights and Adam moments after the last. On one simulated GPU, tiny
// and the tied model in fp32 and bf16 (the fused ops, AdamW's per-step
// factors); on 8 with the collectives on the devices, a third of tiny's
// plans, their streams concurrent and held back. And the mutations: a
// replay that does not refill the token windows, or AdamW's factors,
// trains differently from its first replay on.
func TestGraphSteps(t *testing.T) {
	const n = 4 // eager, captured, two replays
	one := cost.Factors{P: F(1, 1), G: F(1, 1), OS: F(1, 1)}
	bf16 := `train { seq_len = 64 micro_batch = 2 global_batch = 8 precision = bf16
  optimizer = adamw(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1) }`
	type job struct {
		name    string
		b       *codegen.Bundle
		devColl bool
		opts    []hostc.Option
	}
	jobs := []job{
		{name: "tiny fp32", b: compile(t, 1, 1, one)},
		{name: "tiny bf16", b: compile(t, 1, 1, one, bf16)},
		{name: "tied bf16", b: compileModel(t, "tied", 1, 1, one, bf16)},
		{name: "tiny bf16 sequential", b: compile(t, 1, 1, one, bf16), opts: []hostc.Option{hostc.Sequential}},
	}
	for i, f := range tinyPlans() {
		if i%3 != 0 || testing.Short() && i%9 != 0 {
			continue
		}
		b := compile(t, 2, 4, f, streamsTrain)
		jobs = append(jobs, job{name: fmt.Sprintf("%v concurrent", f), b: b, devColl: true},
			job{name: fmt.Sprintf("%v held back", f), b: b, devColl: true, opts: []hostc.Option{hostc.HoldBack}})
	}
	for _, j := range jobs {
		eager, replayed := graphRun(t, j.b, n, j.devColl, engine.DeviceOptions{Eager: true}, nil, j.opts...)
		if replayed != 0 {
			t.Fatalf("%s: Eager replayed %d steps", j.name, replayed)
		}
		got, replayed := graphRun(t, j.b, n, j.devColl, engine.DeviceOptions{}, nil, j.opts...)
		if replayed != n-2 {
			t.Fatalf("%s: replayed %d steps of %d, want %d", j.name, replayed, n, n-2)
		}
		if !got.same(eager) {
			t.Errorf("%s: as graphs, losses %.17g, checkpoint %.8s; eager %.17g, %.8s", j.name, got.losses, got.sums, eager.losses, eager.sums)
		}
		if j.devColl || len(j.opts) > 0 {
			continue
		}
		for _, tokens := range []bool{true, false} {
			stale, _ := graphRun(t, j.b, n, false, engine.DeviceOptions{}, func(be engine.Backend) { engine.StaleGraphInputs(be, tokens) })
			if stale.losses[1] != eager.losses[1] {
				t.Errorf("%s: the captured step's loss changed with stale replays", j.name)
			}
			for s := 3; s < n; s++ { // step 3's loss is before its update: its input tells
				if tokens && stale.losses[s-1] == eager.losses[s-1] {
					t.Errorf("%s: replays with stale token windows trained step %d to the same loss", j.name, s)
				}
			}
			if stale.same(eager) {
				t.Errorf("%s: replays with stale %s trained to the same bits", j.name, map[bool]string{true: "token windows", false: "AdamW factors"}[tokens])
			}
		}
	}
}

// TestGraphRefusesHostCollectives: with the collectives staged through
// the host (ordered), a multi-rank plan's steps are never replayed:
// a graph cannot hold the host's part.
func TestGraphRefusesHostCollectives(t *testing.T) {
	b := compile(t, 2, 4, tinyPlans()[0], streamsTrain)
	if _, replayed := graphRun(t, b, 3, false, engine.DeviceOptions{}, nil); replayed != 0 {
		t.Errorf("replayed %d steps with the collectives through the host", replayed)
	}
}
