// Package codegen holds what every rank executes for one training step:
// per-rank instruction streams (alloc, free, kernel, collective, event
// record and wait) over named buffers, their text disassembly, and the
// versioned, checksummed binary plan bundle.
//
// In: programs built by the scheduler. Out: a Bundle that the runtime
// loads. Ranks run the same template (SPMD): a collective names its group
// relative to the executing rank (Group), and which shard of a buffer a
// rank owns follows from its rank, so one template serves every rank and
// the bundle does not grow with the rank count.
package codegen

import (
	"fmt"

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

// Topology is the job's rank layout: a node's GPUs are consecutive ranks,
// rank = node x GPUsPerNode + local.
type Topology struct {
	GPUsPerNode, Nodes int
}

// Ranks is the rank count.
func (t Topology) Ranks() int { return t.GPUsPerNode * t.Nodes }

// Group names a communication group relative to a rank: the ranks of the
// rank's Outer block (Outer.S0 GPUs in each of Outer.S1 nodes; blocks of
// GPUs and of nodes are contiguous) that hold the same position inside
// their Inner block. Inner 1x1 is a shard group of factor Outer; Inner a
// nested factor gives the replicas of one Inner shard inside Outer (the
// paper's (s0_b/s0_a) x (s1_b/s1_a) mesh).
type Group struct {
	Outer, Inner ir.Factor
}

func (g Group) String() string {
	if g.Inner.Size() <= 1 {
		return g.Outer.String()
	}
	return g.Outer.String() + "/" + g.Inner.String()
}

// Size is the number of ranks in the group.
func (g Group) Size() int { return g.Outer.Size() / g.Inner.Size() }

// Ranks lists the group of rank r in group order (the order collectives
// concatenate and reduce in): GPU-major, by GPU position and then by node.
// That order lets a collective spanning nodes be lowered hierarchically
// without moving data: an all-gather across the nodes (ranks of one GPU
// position) fills a contiguous block of the result, and an all-gather
// inside the node concatenates the blocks (reduce-scatter in reverse).
func (g Group) Ranks(t Topology, r int) []int {
	node, local := r/t.GPUsPerNode, r%t.GPUsPerNode
	n0 := node / g.Outer.S1 * g.Outer.S1
	l0 := local / g.Outer.S0 * g.Outer.S0
	var out []int
	for l := l0 + local%g.Inner.S0; l < l0+g.Outer.S0; l += g.Inner.S0 {
		for n := n0 + node%g.Inner.S1; n < n0+g.Outer.S1; n += g.Inner.S1 {
			out = append(out, n*t.GPUsPerNode+l)
		}
	}
	return out
}

// Index is rank r's position in its group.
func (g Group) Index(t Topology, r int) int {
	node, local := r/t.GPUsPerNode, r%t.GPUsPerNode
	i0 := (local % g.Outer.S0) / g.Inner.S0
	i1 := (node % g.Outer.S1) / g.Inner.S1
	return i0*(g.Outer.S1/g.Inner.S1) + i1
}

// Intra and Inter split a group spanning nodes into its part inside the
// node (the GPUs of one node) and across nodes (one GPU position in each
// node). In group order a rank's Inter group holds a contiguous block of
// the group, the Intra group's Index-th.
func (g Group) Intra() Group {
	return Group{Outer: ir.Factor{S0: g.Outer.S0, S1: g.Inner.S1}, Inner: g.Inner}
}

func (g Group) Inter() Group {
	return Group{Outer: ir.Factor{S0: g.Inner.S0, S1: g.Outer.S1}, Inner: g.Inner}
}

// GroupID is a number unique to the group of r among all groups of the
// same shape: the smallest rank in it.
func (g Group) GroupID(t Topology, r int) int { return g.Ranks(t, r)[0] }

// Buffer is a named allocation, the same size on every rank, or a view
// of part of another buffer: the Part.Index(rank)-th run of Elems
// elements of buffer Parent. Views are how a rank names "my shard" (the
// select of select-and-drop, the slice its optimizer updates) in a
// template every rank shares.
type Buffer struct {
	Name   string
	DType  ir.DType
	Elems  int64
	Parent int32 // -1 unless a view
	// A view starts at Offset + Part.Index(rank) x Elems in its parent
	// (Part 1x1: at Offset on every rank).
	Offset int64
	Part   Group
	// Shape is the tensor's shape when the buffer holds one (an
	// activation, an input, a param or gradient view); kernels read their
	// dimensions from it. Flat shards have none.
	Shape []int64
}

// IsView reports whether b is a view of another buffer.
func (b Buffer) IsView() bool { return b.Parent >= 0 }

// Bytes is the buffer's size.
func (b Buffer) Bytes() int64 { return b.Elems * b.DType.Size() }

// Stream numbers: one compute stream and two communication streams, so
// that prefetched all-gathers never queue behind reduce-scatters (the
// paper's backward rule) and vice versa.
const (
	Compute = iota
	CommGather
	CommReduce
	NumStreams
)

var streamNames = [...]string{"compute", "comm.gather", "comm.reduce"}

// StreamName names stream s.
func StreamName(s int) string {
	if s >= 0 && s < NumStreams {
		return streamNames[s]
	}
	return fmt.Sprintf("stream%d", s)
}

// OpCode is an instruction's kind.
type OpCode uint8

const (
	Alloc OpCode = iota
	Free
	Kernel
	Collective
	Record
	Wait
	Load // fill input buffer Buf with micro-batch Micro's data (named by the buffer)
	numOpCodes
)

var opNames = [...]string{"alloc", "free", "kernel", "coll", "record", "wait", "load"}

func (o OpCode) String() string {
	if o < numOpCodes {
		return opNames[o]
	}
	return fmt.Sprintf("opcode(%d)", int(o))
}

// Instr is one instruction.
type Instr struct {
	Op   OpCode
	Buf  int32 // Alloc, Free
	Kern ir.OpKind
	// Kernel operands and results as buffer ids, the results in the op's
	// result order (one for most ops); Attrs as in the IR.
	Args  []int32
	Outs  []int32
	Attrs []ir.Attr
	// Collective: In and Out buffers (Out may equal In), the group, and
	// the collective's size in bytes (nccl-tests convention).
	Coll  Coll
	Group Group
	Bytes int64
	DType ir.DType
	In    int32
	Out   int32
	Event int32 // Record, Wait
	// Flops is a kernel's FLOP count (for the predicted timeline and the
	// runtime's measurements).
	Flops float64
	// Stage and Micro say which stage and micro-batch the instruction
	// serves (-1 when none), for traces and error messages.
	Stage, Micro int32
	Pos          ir.Pos
	Comment      string
}

// Layout is a stage's flat parameter buffer: where each param sits. The
// optimizer's kernels run on flat shards and use it to decay only the
// params with two or more dims (NUMERICS.md).
type Layout struct {
	Stage  string
	Padded int64 // the flat length, padded to divide evenly into shards
	Params []Slot
	// Where a rank's shards sit in the flat buffer: its P shard is part
	// PShard.Index of PShard.Size() parts; its OS shard is part
	// OSShard.Index of its P shard, split in OSShard.Size() parts.
	PShard, OSShard Group
	// The persistent buffers holding the shards (-1 when absent).
	P, Master, M, V int32
}

// Slot is one param in a Layout.
type Slot struct {
	Name          string
	Offset, Elems int64
	Decay         bool
	Init          ir.Init
}

// Program is one rank template: buffers and one instruction list per
// stream.
type Program struct {
	Buffers []Buffer
	Streams [NumStreams][]Instr
	Events  int
	Layouts []Layout
	// Inputs are the buffers a Load fills, and with what.
	Inputs []Input
}

// Input says what a Load puts in an input buffer: the micro-batch's
// token windows (NUMERICS.md), either the first seq_len tokens of each
// window (Shift 0: the model's inputs) or the last seq_len (Shift 1: the
// targets).
type Input struct {
	Buf   int32
	Shift int32
}

// Machine is what the plan was costed for, so a bundle can be traced and
// its measurements compared without the source files. Bandwidths are the
// achieved ones (nominal x bus efficiency), bytes/s.
type Machine struct {
	PeakFLOPS, Efficiency      float64
	IntraBW, InterBW           float64
	IntraLatency, InterLatency float64
	MemoryBytes                int64
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
