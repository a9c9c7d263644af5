package compiler_test

import (
	"math"
	"slices"
	"testing"

	"amspc/codegen"
	"amspc/compiler"
	"amspc/cost"
	"amspc/engine"
	"amspc/internal/testjob"
	"amspc/ir"
	"amspc/passes"
	"amspc/planner"
)

// TestOptionalPassesOff: an optional pass only makes the program faster.
// With each one switched off (-d=NAME/off), under a baseline whose
// program the pass changes, tiny on 2 nodes x 4 ranks compiles (verified
// after every pass) and trains like the program with every pass on: the
// same loss, within 1e-5 relative, for 3 steps. So does the program with
// all of them off.
func TestOptionalPassesOff(t *testing.T) {
	// A cluster whose NVLink hops are slow enough that some collectives
	// across nodes are lowered hierarchically.
	job := testjob.Load(t, "tiny", `cluster { nodes = 2 gpus_per_node = 4 gpu = "cpu" intra_latency = 10 us }
shard auto`)
	compile := func(f cost.Factors, off []string) *codegen.Bundle {
		t.Helper()
		p := cost.Uniform("", f, job.Train.Recompute, job.Train.MicroBatch)
		r, err := compiler.Compile(job, p, compiler.Options{Passes: passes.Options{Check: true, Off: off}, Depth: 2})
		if err != nil {
			t.Fatalf("%v with %v off: %v", f, off, err)
		}
		return r.Bundle
	}
	var optional []string
	for _, p := range passes.Pipeline {
		if p.Optional {
			optional = append(optional, p.Name)
		}
	}
	if !slices.Equal(optional, passes.Optional()) || len(optional) == 0 {
		t.Fatalf("optional passes %v, passes.Optional() %v", optional, passes.Optional())
	}
	baselines := planner.Baselines(ir.Factor{S0: 4, S1: 2}, 4)
	for _, name := range optional {
		changed := false
		for _, b := range baselines {
			on, off := compile(b.Factors, nil), compile(b.Factors, []string{name})
			if programText(on) == programText(off) {
				continue
			}
			changed = true
			sameLosses(t, name+" off under "+b.Name, train(t, on, 3), train(t, off, 3))
			break
		}
		if !changed {
			t.Errorf("no baseline's program changes with %s off", name)
		}
	}
	for _, b := range baselines[:3] {
		sameLosses(t, "all optional passes off under "+b.Name, train(t, compile(b.Factors, nil), 3), train(t, compile(b.Factors, optional), 3))
	}
}

func programText(b *codegen.Bundle) string {
	var s []byte
	p := b.Template(0)
	for st := range p.Streams {
		for i := range p.Streams[st] {
			s = append(s, ir.FormatInstr(&p.Streams[st][i], ir.Group.String)...)
			s = append(s, '\n')
		}
	}
	return string(s)
}

// train trains a bundle for steps steps on a fixed pseudo-random byte
// stream and returns the losses.
func train(t *testing.T, b *codegen.Bundle, steps int) []float64 {
	t.Helper()
	tokens := make([]int32, 1<<14)
	x := uint32(1)
	for i := range tokens {
		x = x*1664525 + 1013904223
		tokens[i] = int32(x >> 24)
	}
	tr := b.Train
	r := &engine.Run{Bundle: b, Seed: 1, Data: &engine.Data{Tokens: tokens, SeqLen: int(tr.SeqLen), MicroBatch: int(tr.MicroBatch), Global: int(tr.GlobalBatch)}}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	var losses []float64
	for i := range steps {
		l, err := r.Step()
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		losses = append(losses, l)
	}
	return losses
}

func sameLosses(t *testing.T, what string, want, got []float64) {
	t.Helper()
	for i := range want {
		if d := math.Abs(got[i]-want[i]) / math.Abs(want[i]); !(d <= 1e-5) {
			t.Errorf("%s: step %d loss %.9g, with every pass %.9g (relative difference %.2g)", what, i, got[i], want[i], d)
			return
		}
	}
}
