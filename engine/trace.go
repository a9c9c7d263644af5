package engine

// A measured trace: what a run's ranks executed, instruction by
// instruction, on the wall clock, for `amspc run --trace` to write in the
// format of the plan's predicted trace (simulator.TraceWriter).
//
// Each stream's goroutine reads the clock before and after each
// instruction that it traces and appends the pair to a slice of its own,
// so recording takes no lock; a step that is not traced reads no clock
// beyond what the per-kind timings (rank.time) always read. Kernels,
// collectives, waits (from before the wait to after the event came),
// records and loads are traced; allocs and frees are not (a pool's
// bookkeeping, and at most the clearing of a reused buffer that its
// first use does not overwrite): they, and a stream's wait for a core
// when ranks outnumber cores (the gate), fall in the gaps between
// events.
//
// On a device, the host's clock says when work was issued, not when it
// ran: a device rank's trace (on a TimingDevice) marks its streams
// instead, a timestamp enqueued before and after each instruction's work
// (CUDA events with timing), read once the step's Sync has waited for
// them. A step's times are the device's, since the step's first mark (on
// the compute stream, enqueued as the step begins), placed at the host
// time the step began. A traced step is never a graph's replay: the
// marks are the instructions'.

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"amspc/ir"
)

// A Trace records the instructions that a run's ranks in this process
// execute during the steps it records: from the first step after Start
// on, Steps of them (at least one). Set it as Run.Trace before the run
// starts. It records host wall time on CPU ranks and the device's
// timestamps on a device backend that marks its streams (TimingDevice);
// another device backend refuses it at Start.
type Trace struct {
	Steps int // how many steps to record (less than 1: one)

	mu     sync.Mutex
	armed  bool
	first  int       // the first step recorded; 0 before it
	last   int       // the last step recorded so far
	origin time.Time // when the first rank began the first step recorded
	ranks  []*rankTrace
}

// rankTrace is one rank's record; its streams append to their own
// slices, so only begin, between steps, touches the rest.
type rankTrace struct {
	t      *Trace
	k      *rank
	step   int32
	origin time.Time
	spans  [ir.NumStreams][]traceRec

	// A device rank's: its device marks, the host time the step began
	// (since the origin), where the step's records start in spans, and
	// the first error a mark had.
	dev   TimingDevice
	began time.Duration
	from  [ir.NumStreams]int
	merr  error
}

// A TimingDevice timestamps points of its streams' work (CUDA events
// with timing).
type TimingDevice interface {
	Device
	// Mark enqueues a timestamp on stream s, taken when s's work reaches
	// it, and returns its number: 0, 1, ... since the last ResetMarks.
	Mark(s int) (int, error)
	// MarkTimes is each mark's time since mark 0, in seconds, once a
	// Sync has waited for them all.
	MarkTimes() ([]float64, error)
	// ResetMarks numbers the marks from 0 again.
	ResetMarks()
}

// A traceStamp is when an instruction began or ended: the host's clock,
// or a device mark's number.
type traceStamp struct {
	t    time.Time
	mark int
}

// stamp is now on stream s: the host's clock, or a device mark.
func (rt *rankTrace) stamp(s int) traceStamp {
	if rt.dev == nil {
		return traceStamp{t: time.Now()}
	}
	return rt.stampAt(s, time.Time{})
}

// stampAt is stamp where the host has read its clock already (now).
func (rt *rankTrace) stampAt(s int, now time.Time) traceStamp {
	if rt.dev == nil {
		return traceStamp{t: now}
	}
	m, err := rt.dev.Mark(s)
	if err != nil && rt.merr == nil {
		rt.merr = err
	}
	return traceStamp{mark: m}
}

// traceRec is one instruction executed: its index in its stream, the
// step, and its start and end since the trace's origin.
type traceRec struct {
	index, step int32
	start, end  time.Duration
	pack        PackUse
}

// Start arms the trace: the next step any rank begins is the first one
// recorded. A second Start does nothing.
func (t *Trace) Start() {
	t.mu.Lock()
	t.armed = true
	t.mu.Unlock()
}

// Recorded is the steps recorded: the first and how many (0, 0 for none).
func (t *Trace) Recorded() (first, n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.first == 0 {
		return 0, 0
	}
	return t.first, t.last - t.first + 1
}

// attach makes k record into t.
func (t *Trace) attach(k *rank) error {
	var dev TimingDevice
	if !k.host {
		db, ok := k.be.(*deviceBackend)
		if ok {
			dev, ok = db.dev.(TimingDevice)
		}
		if !ok {
			return fmt.Errorf("a measured trace is not supported on the %s backend: it needs the device's own timestamps per instruction, and host times are not the device's", k.be.Name())
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	k.trace = &rankTrace{t: t, k: k, dev: dev}
	t.ranks = append(t.ranks, k.trace)
	return nil
}

// begin readies the rank's record of the step it is about to take and
// returns it, or nil when that step is not recorded (or rt is nil: the
// run has no trace). The first rank to begin the first recorded step
// sets the trace's origin.
func (rt *rankTrace) begin() *rankTrace {
	if rt == nil {
		return nil
	}
	t, k := rt.t, rt.k
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.armed {
		return nil
	}
	if t.first == 0 {
		t.first, t.origin = k.step, time.Now()
	}
	if k.step >= t.first+max(t.Steps, 1) {
		return nil
	}
	t.last = max(t.last, k.step)
	rt.step, rt.origin = int32(k.step), t.origin
	for s := range rt.spans {
		rt.spans[s] = growSpans(rt.spans[s], len(k.p.Streams[s]))
		rt.from[s] = len(rt.spans[s])
	}
	if rt.dev != nil {
		rt.dev.ResetMarks()
		rt.began = time.Since(t.origin)
		rt.stamp(ir.Compute) // mark 0: the step's start on the device
	}
	return rt
}

// resolve turns the marks of a device rank's step into times, once the
// step's Sync has waited for them.
func (rt *rankTrace) resolve() error {
	if rt.dev == nil {
		return nil
	}
	if rt.merr != nil {
		return fmt.Errorf("trace: %w", rt.merr)
	}
	times, err := rt.dev.MarkTimes()
	if err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	at := func(m time.Duration) (time.Duration, error) {
		if m < 0 || int(m) >= len(times) {
			return 0, fmt.Errorf("trace: mark %d of %d", m, len(times))
		}
		return rt.began + time.Duration(times[m]*1e9), nil
	}
	for s := range rt.spans {
		for i := rt.from[s]; i < len(rt.spans[s]); i++ {
			x := &rt.spans[s][i]
			if x.start, err = at(x.start); err != nil {
				return err
			}
			if x.end, err = at(x.end); err != nil {
				return err
			}
		}
	}
	return nil
}

// growSpans gives s room for n more without a copy while a step runs.
func growSpans(s []traceRec, n int) []traceRec {
	if cap(s)-len(s) >= n {
		return s
	}
	out := make([]traceRec, len(s), len(s)+n)
	copy(out, s)
	return out
}

// add records instruction i of stream s, which ran from a to b (a
// device rank's marks, their numbers until resolve).
func (rt *rankTrace) add(s, i int, a, b traceStamp) {
	if rt.dev != nil {
		rt.spans[s] = append(rt.spans[s], traceRec{index: int32(i), step: rt.step, start: time.Duration(a.mark), end: time.Duration(b.mark)})
		return
	}
	rt.spans[s] = append(rt.spans[s], traceRec{index: int32(i), step: rt.step, start: a.t.Sub(rt.origin), end: b.t.Sub(rt.origin)})
}

// markPack says how the kernel just recorded on stream s took a packing
// the local ranks share.
func (rt *rankTrace) markPack(s int, u PackUse) {
	if n := len(rt.spans[s]); n > 0 {
		rt.spans[s][n-1].pack = u
	}
}

// PackUse is how a product took the packing of its weight that the local
// ranks share (a shared gather's or a replica's, packed once for all of
// them): 0 where it took none (it packed its own, or read one made
// before the run).
type PackUse uint8

const (
	// PackMade: the product made the packing, for itself and the others.
	PackMade PackUse = 1 + iota
	// PackReused: an earlier product made it (another rank's, or this
	// rank's own earlier use); this one found it made or waited for it.
	PackReused
)

// A TraceSpan is one instruction a rank executed.
type TraceSpan struct {
	Rank, Stream int
	Index        int // its position in its stream
	Step         int
	Instr        *ir.Instr // the instruction, of the rank's template
	// Pack: how a product took a shared packing of its weight.
	Pack PackUse
	// Start and Dur: when it began, since the trace's origin (the start
	// of the first step recorded, as this process's first rank began it),
	// and how long it took, on this process's wall clock.
	Start, Dur time.Duration
}

// Spans is every instruction recorded, by rank, stream, step and index.
// Call it when no step is running.
func (t *Trace) Spans() []TraceSpan {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []TraceSpan
	rts := append([]*rankTrace(nil), t.ranks...)
	sort.Slice(rts, func(i, j int) bool { return rts[i].k.r < rts[j].k.r })
	for _, rt := range rts {
		for s := range rt.spans {
			recs := rt.spans[s]
			// In a stream, recorded in order: by step, then index.
			for _, x := range recs {
				out = append(out, TraceSpan{Rank: rt.k.r, Stream: s, Index: int(x.index), Step: int(x.step),
					Instr: &rt.k.p.Streams[s][x.index], Start: x.start, Dur: x.end - x.start, Pack: x.pack})
			}
		}
	}
	return out
}
