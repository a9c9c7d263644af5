package ir

// The step program: what every rank executes for one training step, as
// buffers and instructions. The distribution passes build it as one
// sequence (Program.Seq, every instruction with its stream and phase);
// the schedule pass splits the sequence into the three streams with the
// events between them, which codegen encodes as is.

import (
	"fmt"
	"unsafe"
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
	Outer, Inner Factor
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
// (The arithmetic is the mesh's, Block.Ranks on MeshOf(t).)
func (g Group) Ranks(t Topology, r int) []int { return g.Block().Ranks(MeshOf(t), r) }

// Index is rank r's position in its group.
func (g Group) Index(t Topology, r int) int { return g.Block().Index(MeshOf(t), r) }

// Intra and Inter split a group spanning nodes into its part inside the
// node (the GPUs of one node) and across nodes (one GPU position in each
// node). In group order a rank's Inter group holds a contiguous block of
// the group, the Intra group's Index-th. (Block.Split on the Topology's
// mesh, in Factor form.)
func (g Group) Intra() Group {
	return Group{Outer: Factor{S0: g.Outer.S0, S1: g.Inner.S1}, Inner: g.Inner}
}

func (g Group) Inter() Group {
	return Group{Outer: Factor{S0: g.Inner.S0, S1: g.Outer.S1}, Inner: g.Inner}
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
	DType  DType
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
	NumOpCodes
)

var opNames = [...]string{"alloc", "free", "kernel", "coll", "record", "wait", "load"}

func (o OpCode) String() string {
	if o < NumOpCodes {
		return opNames[o]
	}
	return fmt.Sprintf("opcode(%d)", int(o))
}

// Instr is one instruction.
//
// The one-byte fields come first, together: the passes copy a program's
// instructions many times, and padding after each cost 16 of 216 bytes.
type Instr struct {
	Op    OpCode
	Kern  OpKind
	Coll  Coll  // Collective
	DType DType // Collective
	Buf   int32 // Alloc, Free
	// Kernel operands and results as buffer ids, the results in the op's
	// result order (one for most ops); Attrs as in the IR.
	Args  []int32
	Outs  []int32
	Attrs []Attr
	// Collective: the group, the collective's size in bytes (nccl-tests
	// convention) and its In and Out buffers (Out may equal In), of
	// DType.
	Group Group
	Bytes int64
	In    int32
	Out   int32
	Event int32 // Record, Wait
	// Stage and Micro say which stage and micro-batch the instruction
	// serves (-1 when none), for traces and error messages.
	Stage, Micro int32
	// Flops is a kernel's FLOP count (for the predicted timeline and the
	// runtime's measurements).
	Flops   float64
	Pos     Pos
	Comment string
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
	Init          Init
	// Split is the dimension along which the rank holds a part of the
	// param under tensor parallelism (its tensor-parallel index-th of
	// Bundle.Tensor), -1 when it holds all of it; Shape is the whole
	// param's shape. A slot with no Shape holds all of its param.
	Split int
	Shape []int64
}

// Program is one rank template: buffers and one instruction list per
// stream.
type Program struct {
	Buffers []Buffer
	// Seq is the step as one sequence, before the schedule pass splits it
	// into Streams (empty after).
	Seq     []SeqOp
	Streams [NumStreams][]Instr
	Events  int
	Layouts []Layout
	// Inputs are the buffers a Load fills, and with what.
	Inputs []DataInput
}

// DataInput says what a Load puts in an input buffer: the micro-batch's
// token windows (NUMERICS.md), either the first seq_len tokens of each
// window (Shift 0: the model's inputs) or the last seq_len (Shift 1: the
// targets).
type DataInput struct {
	Buf   int32
	Shift int32
}

// Phase says what part of the step an instruction of the sequence
// serves; the schedule pass reorders by it and then drops it.
type Phase uint8

const (
	Forward  Phase = iota // a stage's forward, its loads and gathers
	Backward              // a stage's backward and the gathers for it
	Sync                  // issuing a stage's gradient reduction, after its backward
	Finish                // using the reduced gradient: accumulation, replica reductions
	Optimize              // AdamW on the shards
	numPhases
)

var phaseNames = [...]string{"fwd", "bwd", "sync", "finish", "opt"}

func (p Phase) String() string {
	if p < numPhases {
		return phaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", int(p))
}

// SeqOp is an instruction of the sequence: with the stream it will run on
// (for collectives; kernels and loads run on Compute, allocs and frees
// where the schedule pass puts them) and its phase.
type SeqOp struct {
	Instr
	Stream int
	Phase  Phase
}

// AddBuffer declares a buffer and returns its id.
func (p *Program) AddBuffer(b Buffer) int32 {
	p.Buffers = append(p.Buffers, b)
	return int32(len(p.Buffers) - 1)
}

// Root is the buffer a buffer is a view of (itself when not a view).
func (p *Program) Root(id int32) int32 {
	for p.Buffers[id].Parent >= 0 {
		id = p.Buffers[id].Parent
	}
	return id
}

// Persistent lists the buffers that hold state across steps (the
// layouts' P shards, master weights and moments), by id.
func (p *Program) Persistent() map[int32]bool {
	out := map[int32]bool{}
	for _, l := range p.Layouts {
		for _, id := range [...]int32{l.P, l.Master, l.M, l.V} {
			if id >= 0 {
				out[id] = true
			}
		}
	}
	return out
}

// Reads and Writes list the buffers an instruction reads and writes (an
// alloc and a free write their buffer). The lists are the instruction's
// own fields, not copies (the passes ask for them of every instruction,
// many times): read them, never write them.
func (in *Instr) Reads() []int32 {
	switch in.Op {
	case Kernel:
		return in.Args
	case Collective:
		return unsafe.Slice(&in.In, 1)
	}
	return nil
}

func (in *Instr) Writes() []int32 {
	switch in.Op {
	case Kernel:
		return in.Outs
	case Collective:
		return unsafe.Slice(&in.Out, 1)
	case Alloc, Free, Load:
		return unsafe.Slice(&in.Buf, 1)
	}
	return nil
}
