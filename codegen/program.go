// Package codegen holds what every rank executes for one training step:
// per-rank instruction streams (alloc, free, kernel, collective, event
// record and wait) over named buffers, their text disassembly, and the
// versioned, checksummed binary plan bundle.
//
// In: programs the passes scheduled (ir.Program). Out: a Bundle that the runtime
// loads. Ranks run the same template (SPMD): a collective names its group
// relative to the executing rank (Group), and which shard of a buffer a
// rank owns follows from its rank, so one template serves every rank and
// the bundle does not grow with the rank count.
package codegen

import (
	"amspc/ir"
)

// Coll is a collective operation (ir's: plans, the IR and the cost model
// name collectives one way).
type Coll = ir.Coll

const (
	AllGather     = ir.AllGather
	ReduceScatter = ir.ReduceScatter
	AllReduce     = ir.AllReduce
	Broadcast     = ir.Broadcast
	numColls      = ir.NumColls
)

// The program types live in ir (the step IR the distribution passes
// transform); codegen encodes them.
type (
	Topology = ir.Topology
	Group    = ir.Group
	Buffer   = ir.Buffer
	OpCode   = ir.OpCode
	Instr    = ir.Instr
	Layout   = ir.Layout
	Slot     = ir.Slot
	Program  = ir.Program
	Input    = ir.DataInput
)

const (
	Compute    = ir.Compute
	CommGather = ir.CommGather
	CommReduce = ir.CommReduce
	NumStreams = ir.NumStreams

	Alloc      = ir.Alloc
	Free       = ir.Free
	Kernel     = ir.Kernel
	Collective = ir.Collective
	Record     = ir.Record
	Wait       = ir.Wait
	Load       = ir.Load
	numOpCodes = ir.NumOpCodes
)

// StreamName names stream s.
func StreamName(s int) string { return ir.StreamName(s) }

// Machine is what the plan was costed for, so a bundle can be traced and
// its measurements compared without the source files. Bandwidths are the
// achieved ones (nominal x bus efficiency), bytes/s.
type Machine struct {
	PeakFLOPS, Efficiency      float64
	IntraBW, InterBW           float64
	IntraLatency, InterLatency float64
	MemoryBytes                int64
	// MemBW and MatMulHalf are the kernels' roofline (cost.Machine);
	// SharedCores says a rank's streams share one processor (CPU ranks).
	MemBW, MatMulHalf float64
	SharedCores       bool
}

// Train is what running a bundle needs of the train section: the data
// windows, the default step count and the seed.
type Train struct {
	SeqLen, MicroBatch, GlobalBatch int64
	Steps, Seed                     int64
}

// Bundle is a compiled plan: the job's shape, its templates, and the
// template of every rank.
type Bundle struct {
	Model     string
	Topo      Topology
	Plan      string // the plan's label: factors per component
	Micro     int    // micro-batches per step
	Machine   Machine
	Train     Train
	Templates []Program
	// RankTemplate[r] is the template rank r runs; empty means every rank
	// runs template 0.
	RankTemplate []int32
}

// Template returns the program rank r runs.
func (b *Bundle) Template(r int) *Program {
	if len(b.RankTemplate) == 0 {
		return &b.Templates[0]
	}
	return &b.Templates[b.RankTemplate[r]]
}
