//go:build cgo

package engine_test

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"amspc/cost"
	"amspc/engine"
	"amspc/ir"
	"amspc/kernels/gpu/hostc"
)

// TestStandIn: rank 0 of tiny's ZeRO-3 plan on 8 ranks runs alone on a
// simulated GPU with its collectives as stand-ins (engine.StandIn):
// its steps take at least the stand-ins' time on the busier comm stream
// (each holds its stream that long: a lower bound, not a speed), its
// losses are finite, it replays its steps as a graph (no collective
// goes through the host), and it saves no checkpoint. With scale 0 it
// holds nothing and runs as fast as it can.
func TestStandIn(t *testing.T) {
	f := cost.Factors{P: F(4, 2), G: F(4, 2), OS: F(4, 2)}
	b := compile(t, 2, 4, f, streamsTrain)
	p := b.Template(0)
	// The stand-ins hold the busier comm stream for busiest seconds a
	// step, several times the step's compute alone (about 0.07 s here),
	// so a stand-in that held nothing fails the bound below.
	const busiest = 0.3
	most := 0
	for s := range p.Streams {
		most = max(most, len(slices.DeleteFunc(slices.Clone(p.Streams[s]), func(in ir.Instr) bool { return in.Op != ir.Collective })))
	}
	if most == 0 {
		t.Fatal("the plan has no collectives")
	}
	var secs [ir.NumStreams][]float64
	for s := range p.Streams {
		secs[s] = make([]float64, len(p.Streams[s]))
		for i, in := range p.Streams[s] {
			if in.Op == ir.Collective {
				secs[s][i] = busiest / float64(most)
			}
		}
	}
	for _, scale := range []float64{1, 0} {
		var be engine.Backend
		r := &engine.Run{Bundle: b, Seed: 1, Data: &engine.Data{Tokens: corpus(t), SeqLen: int(b.Train.SeqLen), MicroBatch: int(b.Train.MicroBatch), Global: int(b.Train.GlobalBatch)},
			StandIn: &engine.StandIn{Rank: 0, Seconds: secs, Scale: scale},
			NewBackend: func(rank int) (engine.Backend, error) {
				if rank != 0 {
					t.Errorf("a stand-in run of rank 0 asked for rank %d's backend", rank)
				}
				be = engine.NewDeviceBackend(hostc.NewDevice())
				return be, nil
			}}
		if err := r.Start(); err != nil {
			t.Fatal(err)
		}
		var took []float64
		for range 4 {
			t0 := time.Now()
			loss, err := r.Step()
			if err != nil {
				t.Fatal(err)
			}
			took = append(took, time.Since(t0).Seconds())
			if math.IsNaN(loss) || math.IsInf(loss, 0) {
				t.Fatalf("scale %g: loss %v", scale, loss)
			}
		}
		if scale > 0 && slices.Min(took) < busiest {
			t.Errorf("a step took %.4f s, less than the %.4f s its stand-ins hold the busier comm stream", slices.Min(took), busiest)
		}
		if n := engine.GraphReplays(be); n != 2 {
			t.Errorf("scale %g: replayed %d of 4 steps, want 2", scale, n)
		}
		if err := r.Save(t.TempDir()); err == nil || !strings.Contains(err.Error(), "stand-in") {
			t.Errorf("a stand-in run saved a checkpoint: %v", err)
		}
	}
}
