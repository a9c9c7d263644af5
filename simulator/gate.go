package simulator

import (
	"fmt"
	"math"
	"slices"

	"amspc/cost"
	"amspc/ir"
)

// Gated is the step of every rank of topo running p in one process on
// cores cores, as the CPU runtime runs more ranks than cores
// (engine.shareCores): a rank's compute stream takes one of cores places
// (the gate) before a kernel and keeps it through the kernels,
// allocations and frees after it, giving it up at its next wait or
// collective (and at the end of the step); ranks waiting for a place get
// one in the order they asked. Where Simulate has every rank's kernels
// take their time with the cores shared evenly (the time a profile
// measures with every rank running the kernel at once), here a kernel
// runs on a core of its own, its time over the ranks per core, and a
// woken rank waits for its place behind the ranks that asked first: a
// rank that blocks leaves its core to the others, and one that runs
// late holds up every collective it is a member of.
//
// A collective starts when the last member of its group reaches it,
// waits out its fixed part and moves its bytes; the profile measures it
// with every rank in a collective at once, so while moving bytes it
// loads the processors by its members' share of cores. Its bytes move
// at the highest rate the profile measured for its kind and group (at
// its largest sizes), and the rest of its profiled time is fixed: the
// members meeting and being woken, in which they leave the cores to
// the others (a tensor-parallel all-gather of 24 KB over 4 of 8 ranks on
// 2 cores takes 56 µs, of which its bytes at 4.5 GB/s are 5). Kernels load
// them by 1 each; when the load passes cores, everything moving
// progresses at cores/load of its speed. Each instruction takes
// m.Overhead's instruction (InstructionOf) over the ranks per core (a profile measures it
// scaled as kernels are). Wake-ups and hand-offs (m.Overhead.Wake and
// Collective, which a profile measures as a mean over steps that ran
// this queueing) are not added: the queueing is what this models.
func Gated(p *ir.Program, m *cost.Machine, cores int) (float64, error) {
	if m == nil || m.Topo == nil {
		return 0, fmt.Errorf("simulate: no machine")
	}
	topo := ir.Topology{GPUsPerNode: m.Topo.GPUsPerNode, Nodes: m.Topo.Nodes}
	n := topo.Ranks()
	if cores < 1 || n <= cores {
		return 0, fmt.Errorf("simulate: %d ranks on %d cores need no gate", n, cores)
	}
	share := float64(n) / float64(cores)
	g := &gate{p: p, m: m, topo: topo, n: n, cores: cores, share: share, free: cores,
		instr: m.Overhead.InstructionOf(MeetsInCompute(p))}
	if m.Packs() {
		g.packs = Packings(p)
	}
	g.shared = SharedGathers(p, m)
	if m.Packs() {
		g.sharers = packSharers(p, g.shared, n)
	}
	g.st = make([][ir.NumStreams]gStream, n)
	g.recorded = make([][]float64, n)
	g.waiting = make([][][]int, n)
	g.held = make([]bool, n)
	for r := range n {
		g.recorded[r] = make([]float64, p.Events)
		for e := range g.recorded[r] {
			g.recorded[r][e] = math.NaN()
		}
		g.waiting[r] = make([][]int, p.Events)
	}
	g.colls = map[collKey]*gColl{}
	return g.run()
}

// MeetsInCompute says whether p's compute stream runs collectives: its
// ranks wait for their partners in the middle of their computation
// (tensor parallelism's). On CPU ranks that queue for fewer cores
// (Overhead.Cores), Simulate takes such a program's step from the queue
// (Gated): the evenly shared model's one rank computes all the time at
// its share of the cores, so a rank that waits for its partners there
// leaves its share idle, where in the queue it leaves its core to the
// ranks of other groups. Measured on 8 ranks of 2 cores, the evenly
// shared model put tensor-parallel steps -2 to +42 % off, the queue -10
// to +7 % (docs/profile.md). Other programs keep the evenly shared model
// with the measured wake-up (Overhead.Wake), which holds what the queue
// leaves out: the communication streams' copies waiting for one of the
// process's processors while kernels hold them. There the queue came out
// 6-17 % below fewwide's steps where the evenly shared model came
// within 3 % of most.
func MeetsInCompute(p *ir.Program) bool {
	for i := range p.Streams[ir.Compute] {
		if p.Streams[ir.Compute][i].Op == ir.Collective {
			return true
		}
	}
	return false
}

// gStream is one rank's stream in Gated: where it is and since when it
// can go on.
type gStream struct {
	at    int
	t     float64
	state gState
}

type gState uint8

const (
	gReady   gState = iota
	gBlocked        // on an event, a place or a collective's members
	gBusy           // its kernel or collective is in flight
	gDone
)

// gFlight is a kernel (one rank's compute stream) or a collective (its
// members' stream) under way.
type gFlight struct {
	members   []int // ranks whose stream waits on it
	stream    int
	lat, work float64
	load      float64
}

// collKey names one collective: its stream, index and group (its first
// rank).
type collKey struct {
	stream, index, group int
}

// gColl is a collective its members are reaching.
type gColl struct {
	arrived []int
	need    int
}

type gate struct {
	p       *ir.Program
	m       *cost.Machine
	topo    ir.Topology
	n       int
	cores   int
	share   float64
	instr   float64 // Overhead.InstructionOf the program
	packs   [ir.NumStreams][]bool
	shared  []bool // SharedGathers
	sharers []int  // PackSharers

	st       [][ir.NumStreams]gStream
	recorded [][]float64 // by rank and event: when (NaN: not yet)
	waiting  [][][]int   // by rank and event: the streams blocked on it
	held     []bool      // by rank: its compute stream holds a place
	free     int         // places free
	queue    []int       // ranks waiting for a place, first first
	colls    map[collKey]*gColl
	flights  []*gFlight
	now      float64
	shapes   [][]int64
}

func (g *gate) run() (float64, error) {
	for {
		// The stream ready first (ties: lowest rank, then stream).
		br, bs := -1, -1
		for r := range g.st {
			for s := range g.st[r] {
				x := &g.st[r][s]
				if x.state == gReady && (br < 0 || x.t < g.st[br][bs].t) {
					br, bs = r, s
				}
			}
		}
		tf := g.nextFlightEvent()
		if br >= 0 && g.st[br][bs].t <= tf {
			g.advance(max(g.now, g.st[br][bs].t))
			if err := g.exec(br, bs); err != nil {
				return 0, err
			}
			continue
		}
		if math.IsInf(tf, 1) {
			break
		}
		g.advance(tf)
	}
	step := g.now
	for r := range g.st {
		for s := range g.st[r] {
			x := &g.st[r][s]
			if x.state != gDone {
				return 0, fmt.Errorf("deadlock: rank %d's %s stream at %d", r, ir.StreamName(s), x.at)
			}
			step = max(step, x.t)
		}
	}
	return step, nil
}

// rate is the speed of everything moving: cores/load when the load
// passes cores, else 1.
func (g *gate) rate() float64 {
	load := 0.0
	for _, f := range g.flights {
		if f.lat <= 0 {
			load += f.load
		}
	}
	if load > float64(g.cores) {
		return float64(g.cores) / load
	}
	return 1
}

// nextFlightEvent is when a flight next ends its latency or its work
// (+Inf with none in flight).
func (g *gate) nextFlightEvent() float64 {
	next := math.Inf(1)
	rate := g.rate()
	for _, f := range g.flights {
		if f.lat > 0 {
			next = min(next, g.now+f.lat)
		} else {
			next = min(next, g.now+f.work/rate)
		}
	}
	return next
}

// advance moves the flights to time t and ends those done.
func (g *gate) advance(t float64) {
	dt := t - g.now
	if dt > 0 {
		rate := g.rate()
		for _, f := range g.flights {
			if f.lat > 0 {
				f.lat -= dt
				if f.lat <= 0 || t+f.lat <= t {
					f.lat = 0
				}
			} else {
				f.work -= dt * rate
			}
		}
	}
	g.now = max(g.now, t)
	kept := g.flights[:0]
	for _, f := range g.flights {
		if f.lat <= 0 && (f.work <= 0 || g.now+f.work <= g.now) {
			for _, r := range f.members {
				x := &g.st[r][f.stream]
				x.t, x.state = g.now, gReady
				g.next(x)
			}
			continue
		}
		kept = append(kept, f)
	}
	g.flights = kept
}

// next moves x past its instruction: the next one's dispatch
// (Overhead.InstructionOf, scaled as kernels are) comes first.
func (g *gate) next(x *gStream) {
	x.at++
	x.t += g.instr / g.share
}

// release gives rank r's place to the first rank waiting, or back.
func (g *gate) release(r int, t float64) {
	g.held[r] = false
	if len(g.queue) == 0 {
		g.free++
		return
	}
	h := g.queue[0]
	g.queue = g.queue[1:]
	g.held[h] = true
	x := &g.st[h][ir.Compute]
	x.t, x.state = max(x.t, t), gReady
}

// exec runs rank r's stream s's next instruction at its ready time.
func (g *gate) exec(r, s int) error {
	x := &g.st[r][s]
	ins := g.p.Streams[s]
	if x.at >= len(ins) {
		if s == ir.Compute && g.held[r] {
			g.release(r, x.t)
		}
		x.state = gDone
		return nil
	}
	in := &ins[x.at]
	if s == ir.Compute {
		switch {
		case in.Op == ir.Kernel && !g.held[r]:
			if g.free == 0 {
				g.queue = append(g.queue, r)
				x.state = gBlocked
				return nil
			}
			g.free--
			g.held[r] = true
		case (in.Op == ir.Wait || in.Op == ir.Collective) && g.held[r]:
			g.release(r, x.t)
		}
	}
	switch in.Op {
	case ir.Wait:
		if int(in.Event) >= len(g.recorded[r]) {
			return fmt.Errorf("%s %d: wait for e%d, past the program's %d events", ir.StreamName(s), x.at, in.Event, g.p.Events)
		}
		at := g.recorded[r][in.Event]
		if math.IsNaN(at) {
			g.waiting[r][in.Event] = append(g.waiting[r][in.Event], s)
			x.state = gBlocked
			return nil
		}
		x.t = max(x.t, at)
	case ir.Record:
		if int(in.Event) >= len(g.recorded[r]) {
			return fmt.Errorf("%s %d: record of e%d, past the program's %d events", ir.StreamName(s), x.at, in.Event, g.p.Events)
		}
		g.recorded[r][in.Event] = x.t
		for _, w := range g.waiting[r][in.Event] {
			y := &g.st[r][w]
			y.t, y.state = max(y.t, x.t), gReady
		}
		g.waiting[r][in.Event] = nil
	case ir.Kernel:
		g.shapes = argShapes(g.p, in, g.shapes[:0])
		dur := g.m.KernelTime(in.Kern, g.shapes, g.p.Buffers[in.Args[0]].DType, in.Flops)
		if g.packs[s] != nil && g.packs[s][x.at] {
			dur += packTime(g.p, g.m, in, g.sharers, 0)
		}
		if dur /= g.share; dur > 0 {
			// Its flight starts now (run moved the clock to x.t).
			g.flights = append(g.flights, &gFlight{members: []int{r}, stream: s, work: dur, load: 1})
			x.state = gBusy
			return nil
		}
	case ir.Collective:
		cc := collCost(g.m, in, g.shared)
		if !(cc.Time > 0) || g.m.NoComm {
			break
		}
		members := in.Group.Ranks(g.topo, r)
		k := collKey{s, x.at, members[0]}
		c := g.colls[k]
		if c == nil {
			c = &gColl{need: len(members)}
			g.colls[k] = c
		}
		c.arrived = append(c.arrived, r)
		x.state = gBlocked
		if len(c.arrived) < c.need {
			return nil
		}
		delete(g.colls, k)
		slices.Sort(c.arrived)
		lat := g.fixed(in, cc)
		// It starts as its last member reaches it, now.
		g.flights = append(g.flights, &gFlight{members: c.arrived, stream: s, lat: lat,
			work: cc.Time - lat, load: float64(len(members)) * float64(g.cores) / float64(g.n)})
		for _, m := range c.arrived {
			g.st[m][s].state = gBusy
		}
		return nil
	}
	g.next(x)
	return nil
}

// fixed is the part of collective in's time cc that does not move its
// bytes: cc's time less its bytes at the profile's peak rate for its
// kind and group (cost.CollCost.Latency where that is longer, or where
// no profile timed it).
func (g *gate) fixed(in *ir.Instr, cc cost.CollCost) float64 {
	prof := g.m.Topo.Profile
	if prof == nil || !cc.Profiled {
		return cc.Latency
	}
	gr := in.Group.Outer.Div(in.Group.Inner)
	shared := in.Coll == ir.AllGather && g.shared != nil && g.shared[in.Out] // SharedGathers: nil without shared rows
	bw, ok := prof.PeakBandwidth(in.Coll, gr, shared)
	if !ok {
		return cc.Latency
	}
	return max(cc.Latency, cc.Time-float64(in.Bytes)/bw)
}
