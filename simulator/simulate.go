package simulator

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"

	"amspc/cost"
	"amspc/ir"
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
	// transient buffers plus the workspace of the kernels running
	// (ir.OpInfo.Workspace).
	PeakBytes, PersistentBytes float64
	// PeakBuffers are the transient buffers live at the peak, by id in
	// increasing order: what the peak's transient part holds (with any
	// kernel's workspace).
	PeakBuffers []int32
	// PeakHostBytes is PeakBytes with every element stored in 4 bytes,
	// as the CPU backend stores bf16 and f16 (in float32) and i32.
	PeakHostBytes float64
}

// flight is a collective under way. It first waits out its latency, which
// no other collective slows, then moves its bytes: work seconds at full
// speed, done at a rate of at most 1 that drops while other collectives
// load the same links.
//
// On a machine whose ranks' streams share a processor (SharedCores),
// kernels are flights too: no latency, their time as work, and a load of
// 1 on the rank's processor, which a transferring collective's copies
// load by 1 as well.
type flight struct {
	start, solo float64
	lat, work   float64 // remaining latency and transfer, seconds at full speed
	nvl, nic    float64 // link loads while transferring (cost.CollCost)
	cpu         float64 // processor load while transferring (SharedCores)
	span        int     // its span in the timeline
	transfering bool
	ws, wsHost  float64 // a kernel's workspace bytes, given back at its end
}

// Simulate replays a program on the machine model: each stream runs its
// instructions in order; a wait blocks until its event is recorded;
// every instruction first takes m.Overhead's instruction cost of its
// stream (InstructionOf: the runtime's dispatch and hand-off, measured
// apart for programs that MeetsInCompute; zero unless a profile measured
// it), and a compute-stream wait whose event comes after the stream
// reached it goes on m.Overhead.Wake after the event; a kernel takes
// m.KernelTime of its kind, argument shapes, dtype and FLOPs, plus
// m.PackTime of its weight for a product that packs it (Packings) on a
// machine that costs packing apart; a collective takes the time of one
// flat NCCL call over its group (cost.Topology.Collective) with
// m.Overhead.Collective more latency, or longer while collectives on the
// other
// stream share its links: collectives moving bytes at the same time over
// a GPU's NVLink, or over its node's NICs, each progress at 1/load of
// full speed, load being the sum of their loads of that link when above
// 1. Latency is not shared. Compute does not contend with communication
// on GPUs; where a rank's streams share its processor (m.SharedCores: CPU
// ranks), a kernel and the collectives copying at the same time each
// progress at 1/n of full speed, n of them running. Profiled kernel and
// collective times are each measured with every rank doing that one
// thing, so full speed is the speed of one stream per rank. It fails on
// a deadlock.
func Simulate(p *ir.Program, m *cost.Machine, stages []string) (*Timeline, error) {
	if m == nil || m.Topo == nil {
		return nil, fmt.Errorf("simulate: no machine")
	}
	if !(m.PeakFLOPS > 0) || !(m.Efficiency > 0) {
		return nil, fmt.Errorf("simulate: FLOP rate %g x %g is not positive", m.PeakFLOPS, m.Efficiency)
	}
	var tl Timeline
	at := [ir.NumStreams]int{}
	clock := [ir.NumStreams]float64{}
	var fl [ir.NumStreams]*flight
	// Event times (NaN: not recorded yet) and live buffers by id.
	recorded := make([]float64, p.Events)
	for i := range recorded {
		recorded[i] = math.NaN()
	}
	allocated := make([]bool, len(p.Buffers))
	live := 0
	n, nmem := 0, 0 // spans; allocs and frees
	for s := range p.Streams {
		for i := range p.Streams[s] {
			switch p.Streams[s][i].Op {
			case ir.Kernel, ir.Collective:
				n++
			case ir.Alloc, ir.Free:
				nmem++
			}
		}
	}
	tl.Spans = make([]Span, 0, n)
	type memEvent struct {
		t     float64
		delta float64
		host  float64 // delta at 4 bytes per element
		buf   int32
		alloc bool // an allocation, not a free (a 0-byte buffer has delta -0 or 0 either way)
	}
	var persistentHost float64
	trans := Transient(p)
	mem := make([]memEvent, 0, nmem)
	for id, b := range p.Buffers {
		if !b.IsView() && !trans[int32(id)] {
			tl.PersistentBytes += float64(b.Bytes())
			persistentHost += 4 * float64(b.Elems)
		}
	}
	stageName := func(i int32) string {
		if i >= 0 && int(i) < len(stages) {
			return stages[i]
		}
		return ""
	}
	var shapes [][]int64
	// packs: the products that pack their weight, where the machine
	// costs packing apart (m.Packs).
	var packs [ir.NumStreams][]bool
	if m.Packs() {
		packs = Packings(p)
	}
	shared := SharedGathers(p, m)
	meets := MeetsInCompute(p)
	instr := m.Overhead.InstructionOf(meets)
	var sharers []int
	procs := 0
	if packs[ir.Compute] != nil {
		sharers = packSharers(p, shared, m.Topo.GPUsPerNode*m.Topo.Nodes)
		if sharers != nil {
			procs = m.Topo.Profile.Processors()
		}
	}
	// now is the time up to which collectives have progressed; every
	// flight starts at or after it.
	now := 0.0
	for {
		// Run every stream as far as it goes without a collective's end.
		progress := false
		for s := 0; s < ir.NumStreams; s++ {
			for fl[s] == nil && at[s] < len(p.Streams[s]) {
				in := &p.Streams[s][at[s]]
				if in.Op == ir.Wait {
					if int(in.Event) >= len(recorded) || math.IsNaN(recorded[in.Event]) {
						break
					}
					if r := recorded[in.Event]; r > clock[s] {
						// Blocked: the compute stream goes on a wake-up
						// after the event.
						clock[s] = r
						if s == ir.Compute {
							clock[s] += m.Overhead.Wake
						}
					}
				}
				clock[s] += instr
				var dur float64
				name := ""
				switch in.Op {
				case ir.Kernel:
					shapes = argShapes(p, in, shapes[:0])
					dt := p.Buffers[in.Args[0]].DType
					dur = m.KernelTime(in.Kern, shapes, dt, in.Flops)
					if packs[s] != nil && packs[s][at[s]] {
						dur += packTime(p, m, in, sharers, procs)
					}
					name = SpanName(p, in)
					// Scratch the kernel holds while it runs (ir.OpInfo.Workspace).
					var ws, wsHost float64
					if f := in.Kern.Info().Workspace; f != nil && dur > 0 {
						n := float64(f(shapes))
						ws, wsHost = n*float64(dt.Size()), 4*n
						mem = append(mem, memEvent{clock[s], ws, wsHost, -1, true})
					}
					if m.SharedCores && dur > 0 {
						// The span is filled in when the kernel ends.
						fl[s] = &flight{start: clock[s], solo: dur, work: dur, cpu: 1, span: len(tl.Spans), transfering: true, ws: ws, wsHost: wsHost}
						tl.Spans = append(tl.Spans, Span{Stream: s, Index: at[s], Start: clock[s], Name: name, Stage: stageName(in.Stage)})
					} else if ws > 0 {
						mem = append(mem, memEvent{clock[s] + dur, -ws, -wsHost, -1, false})
					}
				case ir.Collective:
					cc := collCost(m, in, shared)
					if cc.Time > 0 {
						cc.Time += m.Overhead.Collective
						cc.Latency += m.Overhead.Collective
					}
					if cc.Time > 0 && !m.NoComm {
						// The span is filled in when the collective ends.
						fl[s] = &flight{start: clock[s], solo: cc.Time, lat: cc.Latency, work: cc.Time - cc.Latency, nvl: cc.NVLinkLoad, nic: cc.NICLoad, span: len(tl.Spans)}
						if m.SharedCores {
							fl[s].cpu = 1
						}
						tl.Spans = append(tl.Spans, Span{Stream: s, Index: at[s], Start: clock[s], Name: SpanName(p, in), Stage: stageName(in.Stage)})
					}
				case ir.Record:
					for int(in.Event) >= len(recorded) {
						recorded = append(recorded, math.NaN())
					}
					recorded[in.Event] = clock[s]
				case ir.Alloc:
					if allocated[in.Buf] {
						return nil, fmt.Errorf("%s %d: alloc of %s, already allocated", ir.StreamName(s), at[s], p.Buffers[in.Buf].Name)
					}
					allocated[in.Buf] = true
					live++
					mem = append(mem, memEvent{clock[s], float64(p.Buffers[in.Buf].Bytes()), 4 * float64(p.Buffers[in.Buf].Elems), in.Buf, true})
				case ir.Free:
					if !allocated[in.Buf] {
						return nil, fmt.Errorf("%s %d: free of %s, not allocated", ir.StreamName(s), at[s], p.Buffers[in.Buf].Name)
					}
					allocated[in.Buf] = false
					live--
					mem = append(mem, memEvent{clock[s], -float64(p.Buffers[in.Buf].Bytes()), -4 * float64(p.Buffers[in.Buf].Elems), in.Buf, false})
				}
				if fl[s] != nil {
					// Blocked until the collective ends (advance).
					progress = true
					break
				}
				if dur > 0 {
					tl.Spans = append(tl.Spans, Span{Stream: s, Index: at[s], Start: clock[s], Dur: dur, Name: name, Stage: stageName(in.Stage)})
					if s == ir.Compute {
						tl.Compute += dur
					}
				}
				clock[s] += dur
				at[s]++
				progress = true
			}
		}
		if progress {
			continue
		}
		// Advance the collectives to the next start, phase change or end.
		inFlight := false
		for s := range fl {
			inFlight = inFlight || fl[s] != nil
		}
		if !inFlight {
			break
		}
		s, t := advance(&fl, now)
		now = t
		if s >= 0 {
			// Never sooner than alone (floating point may round the
			// last of the work away).
			f := fl[s]
			sp := &tl.Spans[f.span]
			sp.Dur = max(now-sp.Start, f.solo)
			clock[s] = sp.Start + sp.Dur
			if f.ws > 0 {
				mem = append(mem, memEvent{clock[s], -f.ws, -f.wsHost, -1, false})
			}
			if s == ir.Compute && p.Streams[s][at[s]].Op == ir.Kernel {
				tl.Compute += sp.Dur
			}
			at[s]++
			fl[s] = nil
		}
	}
	for s := 0; s < ir.NumStreams; s++ {
		if at[s] < len(p.Streams[s]) {
			var stuck []string
			for s := 0; s < ir.NumStreams; s++ {
				if at[s] < len(p.Streams[s]) {
					stuck = append(stuck, fmt.Sprintf("%s at %d waits e%d", ir.StreamName(s), at[s], p.Streams[s][at[s]].Event))
				}
			}
			return nil, fmt.Errorf("deadlock: %v", stuck)
		}
	}
	if live > 0 {
		var names []string
		for id, a := range allocated {
			if a {
				names = append(names, p.Buffers[id].Name)
			}
		}
		sort.Strings(names)
		return nil, fmt.Errorf("buffers still allocated at the end of the step: %v", names)
	}
	for s := range clock {
		tl.Step = max(tl.Step, clock[s])
	}
	if c := m.Overhead.Cores; m.SharedCores && c > 0 && m.Topo.GPUsPerNode*m.Topo.Nodes > c && meets {
		// The ranks queue for the cores, and meet their partners in the
		// middle of their computation: the step is the queue's (Gated);
		// the spans stay the evenly shared ones.
		step, err := Gated(p, m, c)
		if err != nil {
			return nil, err
		}
		tl.Step = step
	}
	tl.Exposed = tl.Step - tl.Compute
	// Peak memory: frees before allocations at equal times (a buffer
	// freed as another is allocated does not coexist with it).
	slices.SortStableFunc(mem, func(a, b memEvent) int {
		if c := cmp.Compare(a.t, b.t); c != 0 {
			return c
		}
		return cmp.Compare(a.delta, b.delta)
	})
	cur, host := tl.PersistentBytes, persistentHost
	tl.PeakBytes, tl.PeakHostBytes = cur, host
	peak := -1 // the event that first reaches the peak
	for i, e := range mem {
		cur += e.delta
		host += e.host
		if cur > tl.PeakBytes {
			tl.PeakBytes, peak = cur, i
		}
		tl.PeakHostBytes = max(tl.PeakHostBytes, host)
	}
	atPeak := map[int32]int{}
	for _, e := range mem[:peak+1] {
		if e.buf < 0 { // a kernel's workspace
			continue
		}
		if e.alloc {
			atPeak[e.buf]++
		} else {
			atPeak[e.buf]--
		}
	}
	for id, n := range atPeak {
		if n > 0 {
			tl.PeakBuffers = append(tl.PeakBuffers, id)
		}
	}
	slices.Sort(tl.PeakBuffers)
	return &tl, nil
}

// SharedGathers marks, by buffer id, the buffers whose all-gathers the
// CPU runtime's local ranks share (Shareable: the member copies its
// own part into one buffer all of them read), where m's profile
// measured such gathers (all_gather_shared rows: the ranks ran in one
// process); nil where it did not, and every gather is a plain one.
func SharedGathers(p *ir.Program, m *cost.Machine) []bool {
	if m.Topo == nil || m.Topo.Profile == nil || !m.Topo.Profile.HasShared() {
		return nil
	}
	return Shareable(p)
}

// PackSharers is, by buffer id, how many local ranks share each packing
// of a weight in the buffer: the first product to need a packing of it
// makes it while the others wait for it or find it made (engine's memo
// and replicaMemo): the group packs it once, and a rank pays its
// PackShare of that packing. The sharers are
//
//   - for a weight gathered into one buffer the local ranks share
//     (SharedGathers), the members of its all-gather;
//   - for a stage's P buffer (a replicated parameter: DDP, ZeRO-1 and
//     ZeRO-2, Megatron's), the ranks holding the same P shard at the same
//     tensor-parallel position, which hold equal copies whole-written
//     alike (engine's replicaMemo).
//
// 0 or 1 where a rank packs its own; nil where m shares no gathers (its
// ranks are not local ranks of one process: under MPI each rank packs
// its own replicas).
func PackSharers(p *ir.Program, m *cost.Machine) []int {
	return packSharers(p, SharedGathers(p, m), m.Topo.GPUsPerNode*m.Topo.Nodes)
}

// packSharers is PackSharers from the program's SharedGathers, on ranks
// ranks.
func packSharers(p *ir.Program, shared []bool, ranks int) []int {
	if shared == nil {
		return nil
	}
	out := make([]int, len(p.Buffers))
	for _, ins := range p.Streams {
		for _, in := range ins {
			if in.Op == ir.Collective && in.Coll == ir.AllGather && shared[in.Out] {
				out[in.Out] = in.Group.Outer.Div(in.Group.Inner).Size()
			}
		}
	}
	t := tensorDegree(p)
	for _, l := range p.Layouts {
		if l.P < 0 || p.Buffers[l.P].IsView() || p.Buffers[l.P].DType == ir.I32 || out[l.P] != 0 {
			continue
		}
		out[l.P] = ranks / (l.PShard.Size() * t)
	}
	return out
}

// tensorDegree is the ranks a tensor-parallel program splits a param
// over (a split slot's whole param over the part a rank holds), 1 where
// it splits none.
func tensorDegree(p *ir.Program) int {
	for _, l := range p.Layouts {
		for _, sl := range l.Params {
			if sl.Split < 0 || len(sl.Shape) == 0 || sl.Elems <= 0 {
				continue
			}
			whole := int64(1)
			for _, d := range sl.Shape {
				whole *= d
			}
			if t := whole / sl.Elems; t > 1 {
				return int(t)
			}
		}
	}
	return 1
}

// packTime is the packing time product in adds on m: its weight's
// packing, a share of it where the local ranks pack it once
// (PackSharers, PackShare), procs the processors of m's profile.
func packTime(p *ir.Program, m *cost.Machine, in *ir.Instr, sharers []int, procs int) float64 {
	t := m.PackTime(in.Kern, p.Buffers[in.Args[1]].Shape)
	if sharers != nil {
		if n := sharers[p.Root(in.Args[1])]; n > 1 {
			t *= PackShare(n, m.Topo.GPUsPerNode*m.Topo.Nodes, procs)
		}
	}
	return t
}

// PackShare is the part of a packing's profiled time that each of the n
// local ranks sharing it pays, of ranks local ranks on procs processors.
// The profile times a packing with every rank packing at once: ranks /
// procs times a packing alone where the ranks outnumber the processors.
// Shared, the group's one packing is 1/n of that work; but it is one
// rank's work, which the others wait for, so it takes at least a packing
// alone, procs / ranks of the profiled time (on 8 ranks sharing 2
// processors, 1/n for groups of up to 4; on 2 ranks with 2 processors,
// the whole packing: 1/2 had LLaMA-like ZeRO-3 steps of wide and fewwide
// 17-22 % short, bench/validation.md of 2026-11-29). Without procs (a
// profile that does not say, or the gated model, which has the ranks
// queue for the processors themselves), 1/n.
func PackShare(n, ranks, procs int) float64 {
	share := 1 / float64(n)
	if procs > 0 && ranks > 0 {
		share = max(share, min(1, float64(procs)/float64(ranks)))
	}
	return share
}

// collCost is the cost of collective in on m: a gather into a shared
// buffer (shared[in.Out], SharedGathers) as the shared gather, the others
// as one call over the group.
func collCost(m *cost.Machine, in *ir.Instr, shared []bool) cost.CollCost {
	g := in.Group.Outer.Div(in.Group.Inner)
	if in.Coll == ir.AllGather && shared != nil && shared[in.Out] {
		return m.Topo.SharedGather(float64(in.Bytes), g)
	}
	return m.Topo.Collective(in.Coll, float64(in.Bytes), g)
}

// argShapes appends the shapes of in's arguments to dst (a flat buffer
// is one dimension), as KernelTime takes them.
func argShapes(p *ir.Program, in *ir.Instr, dst [][]int64) [][]int64 {
	for _, a := range in.Args {
		b := &p.Buffers[a]
		if len(b.Shape) > 0 {
			dst = append(dst, b.Shape)
		} else {
			dst = append(dst, []int64{b.Elems})
		}
	}
	return dst
}

// advance moves the collectives in flight from now to the next event: a
// flight starting, finishing its latency, or finishing. It returns the
// stream whose collective finished (-1 if none did) and the new time.
func advance(fl *[ir.NumStreams]*flight, now float64) (int, float64) {
	// Rates while transferring: 1/load on the most loaded link used.
	var nvl, nic, cpu float64
	for _, f := range fl {
		if f != nil && f.transfering && f.start <= now {
			nvl += f.nvl
			nic += f.nic
			cpu += f.cpu
		}
	}
	rate := func(f *flight) float64 {
		r := 1.0
		if f.nvl > 0 && nvl > 1 {
			r = min(r, 1/nvl)
		}
		if f.nic > 0 && nic > 1 {
			r = min(r, 1/nic)
		}
		if f.cpu > 0 && cpu > 1 {
			r = min(r, 1/cpu)
		}
		return r
	}
	next := math.Inf(1)
	for _, f := range fl {
		switch {
		case f == nil:
		case f.start > now:
			next = min(next, f.start)
		case !f.transfering:
			next = min(next, now+f.lat)
		default:
			next = min(next, now+f.work/rate(f))
		}
	}
	dt := next - now
	done := -1
	for s, f := range fl {
		switch {
		case f == nil || f.start > now:
		case !f.transfering:
			f.lat -= dt
			if f.lat <= 0 || now+f.lat <= now {
				f.lat, f.transfering = 0, true
			}
		default:
			f.work -= dt * rate(f)
			// Floating point: a flight whose remainder no longer moves
			// the clock has ended.
			if (f.work <= 0 || next+f.work/rate(f) <= next) && done < 0 {
				done = s
			}
		}
	}
	// A flight moving no bytes ends when its latency does.
	if done < 0 {
		for s, f := range fl {
			if f != nil && f.start <= now && f.transfering && f.work <= 0 {
				done = s
				break
			}
		}
	}
	return done, next
}

// Transient lists the buffers some instruction allocates; the rest
// (shards of P, G, OS) live for the whole run.
func Transient(p *ir.Program) map[int32]bool {
	out := map[int32]bool{}
	for s := range p.Streams {
		for _, in := range p.Streams[s] {
			if in.Op == ir.Alloc {
				out[in.Buf] = true
			}
		}
	}
	return out
}

// SpanName names an instruction in a trace, planned or measured: a
// kernel by its op, a collective by its kind and group, a load by its
// buffer, a record or a wait by its event.
func SpanName(p *ir.Program, in *ir.Instr) string {
	switch in.Op {
	case ir.Kernel:
		return in.Kern.String()
	case ir.Collective:
		return in.Coll.String() + " " + in.Group.String()
	case ir.Load:
		return "load " + p.Buffers[in.Buf].Name
	}
	return fmt.Sprintf("%v e%d", in.Op, in.Event)
}
