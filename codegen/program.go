// Package codegen holds what every rank executes for one training step:
// per-rank instruction streams (alloc, free, kernel, collective, event
// record and wait) over named buffers, their text disassembly, and the
// versioned, checksummed binary plan bundle.
//
// In: programs the passes scheduled (ir.Program). Out: a Bundle that the runtime
// loads. Ranks run the same template (SPMD): a collective names its group
// relative to the executing rank (ir.Group), and which shard of a buffer a
// rank owns follows from its rank, so one template serves every rank and
// the bundle does not grow with the rank count.
package codegen

import (
	"amspc/ir"
)

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
// windows, the default step count, the seed and the learning rate's
// schedule (the optimizer's lr, its peak, is in the AdamW kernels).
type Train struct {
	SeqLen, MicroBatch, GlobalBatch int64
	Steps, Seed                     int64
	Schedule                        ir.LRSchedule
}

// Bundle is a compiled plan: the job's shape, its templates, and the
// template of every rank.
type Bundle struct {
	Model string
	Topo  ir.Topology
	Plan  string // the plan's label: factors per component
	Micro int    // micro-batches per step
	// Tensor is the tensor-parallel degree (0 or 1: none): groups of
	// Tensor consecutive ranks of a node hold the parts of one replica.
	Tensor    int
	Machine   Machine
	Train     Train
	Templates []ir.Program
	// RankTemplate[r] is the template rank r runs; empty means every rank
	// runs template 0.
	RankTemplate []int32
}

// Template returns the program rank r runs.
func (b *Bundle) Template(r int) *ir.Program {
	if len(b.RankTemplate) == 0 {
		return &b.Templates[0]
	}
	return &b.Templates[b.RankTemplate[r]]
}
