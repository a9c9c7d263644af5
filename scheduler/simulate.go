package scheduler

import (
	"fmt"
	"sort"

	"amspc/codegen"
	"amspc/cost"
)

// Span is one instruction on the predicted timeline.
type Span struct {
	Stream      int
	Index       int // position in its stream
	Start, Dur  float64
	Name, Stage string
}

// Timeline is a program's predicted execution on one rank. Every rank
// runs the same template with the same sizes, and collectives are costed
// for their whole group, so one rank's timeline is every rank's.
type Timeline struct {
	Spans []Span
	Step  float64
	// Compute is the compute stream's busy time, Exposed the rest of the
	// step (communication compute did not hide, and waiting).
	Compute, Exposed float64
	// PeakBytes is the most memory live at once: persistent shards plus
	// transient buffers.
	PeakBytes, PersistentBytes float64
}

// Simulate replays a program on the cost model: each stream runs its
// instructions in order; a wait blocks until its event is recorded;
// kernels take FLOPs over the achieved FLOP rate, collectives the cost
// model's time for their group. It fails on a deadlock.
func Simulate(p *codegen.Program, topo *cost.Topology, rate float64, stages []string) (*Timeline, error) {
	if !(rate > 0) {
		return nil, fmt.Errorf("simulate: FLOP rate %g is not positive", rate)
	}
	var tl Timeline
	at := [codegen.NumStreams]int{}
	clock := [codegen.NumStreams]float64{}
	recorded := map[int32]float64{}
	type memEvent struct {
		t     float64
		delta float64
	}
	var mem []memEvent
	allocated := map[int32]bool{}
	trans := transient(p)
	for id, b := range p.Buffers {
		if !b.IsView() && !trans[int32(id)] {
			tl.PersistentBytes += float64(b.Bytes())
		}
	}
	for {
		progress, done := false, true
		for s := 0; s < codegen.NumStreams; s++ {
			for at[s] < len(p.Streams[s]) {
				in := p.Streams[s][at[s]]
				if in.Op == codegen.Wait {
					t, ok := recorded[in.Event]
					if !ok {
						break
					}
					clock[s] = max(clock[s], t)
				}
				var dur float64
				name := in.Op.String()
				switch in.Op {
				case codegen.Kernel:
					dur = in.Flops / rate
					name = in.Kern.String()
				case codegen.Collective:
					dur = topo.Collective(in.Coll, float64(in.Bytes), in.Group.Outer.Div(in.Group.Inner)).Time
					name = in.Coll.String() + " " + in.Group.String()
				case codegen.Record:
					recorded[in.Event] = clock[s]
				case codegen.Alloc:
					if allocated[in.Buf] {
						return nil, fmt.Errorf("%s %d: alloc of %s, already allocated", codegen.StreamName(s), at[s], p.Buffers[in.Buf].Name)
					}
					allocated[in.Buf] = true
					mem = append(mem, memEvent{clock[s], float64(p.Buffers[in.Buf].Bytes())})
				case codegen.Free:
					if !allocated[in.Buf] {
						return nil, fmt.Errorf("%s %d: free of %s, not allocated", codegen.StreamName(s), at[s], p.Buffers[in.Buf].Name)
					}
					delete(allocated, in.Buf)
					mem = append(mem, memEvent{clock[s], -float64(p.Buffers[in.Buf].Bytes())})
				}
				if dur > 0 {
					st := ""
					if in.Stage >= 0 && int(in.Stage) < len(stages) {
						st = stages[in.Stage]
					}
					tl.Spans = append(tl.Spans, Span{Stream: s, Index: at[s], Start: clock[s], Dur: dur, Name: name, Stage: st})
					if s == codegen.Compute {
						tl.Compute += dur
					}
				}
				clock[s] += dur
				at[s]++
				progress = true
			}
			if at[s] < len(p.Streams[s]) {
				done = false
			}
		}
		if done {
			break
		}
		if !progress {
			var stuck []string
			for s := 0; s < codegen.NumStreams; s++ {
				if at[s] < len(p.Streams[s]) {
					stuck = append(stuck, fmt.Sprintf("%s at %d waits e%d", codegen.StreamName(s), at[s], p.Streams[s][at[s]].Event))
				}
			}
			return nil, fmt.Errorf("deadlock: %v", stuck)
		}
	}
	if len(allocated) > 0 {
		var names []string
		for id := range allocated {
			names = append(names, p.Buffers[id].Name)
		}
		sort.Strings(names)
		return nil, fmt.Errorf("buffers still allocated at the end of the step: %v", names)
	}
	for s := range clock {
		tl.Step = max(tl.Step, clock[s])
	}
	tl.Exposed = tl.Step - tl.Compute
	// Peak memory: frees before allocations at equal times (a buffer
	// freed as another is allocated does not coexist with it).
	sort.SliceStable(mem, func(i, j int) bool {
		if mem[i].t != mem[j].t {
			return mem[i].t < mem[j].t
		}
		return mem[i].delta < mem[j].delta
	})
	cur := tl.PersistentBytes
	tl.PeakBytes = cur
	for _, e := range mem {
		cur += e.delta
		tl.PeakBytes = max(tl.PeakBytes, cur)
	}
	return &tl, nil
}

// transient lists the buffers some instruction allocates (the rest live
// for the whole run: shards of P, G, OS).
func transient(p *codegen.Program) map[int32]bool {
	out := map[int32]bool{}
	for s := range p.Streams {
		for _, in := range p.Streams[s] {
			if in.Op == codegen.Alloc {
				out[in.Buf] = true
			}
		}
	}
	return out
}
