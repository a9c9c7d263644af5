package engine_test

import (
	"fmt"
	"testing"
	"time"

	"amspc/codegen"
	"amspc/cost"
	"amspc/engine"
	"amspc/ir"
	"amspc/simulator"
)

// TestTraceRecordsWhatRan: a trace started after a warm-up step records
// the next Steps steps and no more: on every rank and stream, each
// kernel, collective, record, wait and load once per step (no alloc or
// free), in stream order without overlap, and no wait ends before its
// event's record began.
func TestTraceRecordsWhatRan(t *testing.T) {
	b := compile(t, 2, 4, cost.Factors{P: F(2, 1), G: F(2, 1), OS: F(4, 2)})
	tr := b.Train
	trace := &engine.Trace{Steps: 2}
	r := &engine.Run{Bundle: b, Seed: 1, Trace: trace,
		Data: &engine.Data{Tokens: corpus(t), SeqLen: int(tr.SeqLen), MicroBatch: int(tr.MicroBatch), Global: int(tr.GlobalBatch)}}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	steps(t, r, 1)
	if first, n := trace.Recorded(); n != 0 {
		t.Fatalf("before Start: recorded %d steps from %d", n, first)
	}
	trace.Start()
	steps(t, r, 3)
	if first, n := trace.Recorded(); first != 2 || n != 2 {
		t.Fatalf("recorded %d steps from step %d, want 2 from step 2", n, first)
	}
	checkTrace(t, b, trace, 2, 3)
	checkTracePacks(t, b, trace)
}

// checkTracePacks: the plan gathers its params into buffers each pair of
// ranks shares (2x1), and the pair packs a gathered weight once. At each
// product that packs (simulator.Packings), one member of every pair made
// the packing and the other took it made (TraceSpan.Pack).
func checkTracePacks(t *testing.T, b *codegen.Bundle, trace *engine.Trace) {
	t.Helper()
	type at struct{ step, stream, index int }
	made, reused := map[at]int{}, map[at]int{}
	packs := simulator.Packings(b.Template(0))
	for _, sp := range trace.Spans() {
		if !packs[sp.Stream][sp.Index] {
			continue
		}
		switch sp.Pack {
		case engine.PackMade:
			made[at{sp.Step, sp.Stream, sp.Index}]++
		case engine.PackReused:
			reused[at{sp.Step, sp.Stream, sp.Index}]++
		}
	}
	if len(made) == 0 {
		t.Fatal("no traced product made a packing the pair shares")
	}
	pairs := b.Topo.Ranks() / 2
	for k, n := range made {
		if n != pairs || reused[k] != pairs {
			t.Errorf("step %d %s %d: %d ranks made the packing and %d took it made, want %d and %d", k.step, ir.StreamName(k.stream), k.index, n, reused[k], pairs, pairs)
		}
	}
}

// checkTrace checks that trace holds steps first to last of b's ranks
// and nothing else: in each stream, every instruction but allocs and
// frees, in order, none overlapping the one before, and each wait
// ending after its event's record began.
func checkTrace(t *testing.T, b *codegen.Bundle, trace *engine.Trace, first, last int) {
	t.Helper()
	type key struct{ rank, stream, step int }
	got := map[key][]engine.TraceSpan{}
	for _, sp := range trace.Spans() {
		k := key{sp.Rank, sp.Stream, sp.Step}
		got[k] = append(got[k], sp)
	}
	for rk := 0; rk < b.Topo.Ranks(); rk++ {
		p := b.Template(rk)
		for step := first; step <= last; step++ {
			// When each event was recorded, for the waits.
			recorded := map[int32]engine.TraceSpan{}
			for s := range p.Streams {
				for _, sp := range got[key{rk, s, step}] {
					if sp.Instr.Op == ir.Record {
						recorded[sp.Instr.Event] = sp
					}
				}
			}
			for s, ins := range p.Streams {
				var want []int
				for i, in := range ins {
					if in.Op != ir.Alloc && in.Op != ir.Free {
						want = append(want, i)
					}
				}
				sps := got[key{rk, s, step}]
				if len(sps) != len(want) {
					t.Errorf("rank %d %s step %d: %d spans, want %d", rk, ir.StreamName(s), step, len(sps), len(want))
					continue
				}
				for j, sp := range sps {
					if sp.Index != want[j] || sp.Instr != &ins[sp.Index] {
						t.Errorf("rank %d %s step %d: span %d is instruction %d, want %d", rk, ir.StreamName(s), step, j, sp.Index, want[j])
						break
					}
					if sp.Dur < 0 || j > 0 && sp.Start < sps[j-1].Start+sps[j-1].Dur {
						t.Errorf("rank %d %s step %d: instruction %d at %v+%v overlaps the one before", rk, ir.StreamName(s), step, sp.Index, sp.Start, sp.Dur)
					}
					if sp.Instr.Op == ir.Wait {
						rec, ok := recorded[sp.Instr.Event]
						if !ok || sp.Start+sp.Dur < rec.Start {
							t.Errorf("rank %d %s step %d: wait e%d ends at %v, before its record began (%v, recorded %v)", rk, ir.StreamName(s), step, sp.Instr.Event, sp.Start+sp.Dur, rec.Start, ok)
						}
					}
				}
			}
		}
	}
	for k := range got {
		if k.step < first || k.step > last {
			t.Errorf("rank %d %s: step %d recorded", k.rank, ir.StreamName(k.stream), k.step)
		}
	}
}

// BenchmarkTrace: tiny's step on 8 local ranks without a trace, with one
// that records nothing (made, never started) and with one recording
// every step, taken in turn so that a slow minute of a shared machine
// weighs on all alike. Reports each one's median step.
//
//	go test ./engine -run '^$' -bench Trace -benchtime 30x
func BenchmarkTrace(b *testing.B) {
	bundle := compile(b, 2, 4, cost.Factors{P: F(4, 2), G: F(4, 2), OS: F(4, 2)})
	tr := bundle.Train
	kinds := []string{"none", "off", "on"}
	runs := make([]*engine.Run, len(kinds))
	for i, kind := range kinds {
		r := &engine.Run{Bundle: bundle, Seed: 1,
			Data: &engine.Data{Tokens: corpus(b), SeqLen: int(tr.SeqLen), MicroBatch: int(tr.MicroBatch), Global: int(tr.GlobalBatch)}}
		if kind != "none" {
			r.Trace = &engine.Trace{Steps: 1 << 30}
		}
		if kind == "on" {
			r.Trace.Start()
		}
		if err := r.Start(); err != nil {
			b.Fatal(err)
		}
		runs[i] = r
	}
	times := make([][]float64, len(kinds))
	for b.Loop() {
		for i, r := range runs {
			t0 := time.Now()
			if _, err := r.Step(); err != nil {
				b.Fatal(err)
			}
			times[i] = append(times[i], time.Since(t0).Seconds())
		}
	}
	for i, kind := range kinds {
		b.ReportMetric(medianOf(times[i])*1e3, fmt.Sprintf("ms/step-%s", kind))
	}
}
