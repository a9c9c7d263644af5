// Package gpu holds amspc's CUDA C kernels (ops.cu, embedded) and what a
// launcher needs to know of them: each kernel's parameters and launch
// geometry. NVRTC compiles Source for the device at start
// (runtime/cudalib); package hostc compiles the same file as C with
// shim.h and tests every kernel against package kernels on the CPU.
//
// Matmuls (and their gradients) are cuBLASLt's, not here.
package gpu

// Kernels and MMAKernels (kernels_gen.go) and package hostc's launch
// wrappers are generated from ops.cu's and mma.cu's kernel declarations
// and their launch annotations:
//
//go:generate go run ./internal/kernelgen/cmd/kernelgen

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
)

// Source is ops.cu.
//
//go:embed ops.cu
var Source string

// MMASource is mma.cu: attention on bf16 tensor cores and the probe that
// pins their fragment layout (not part of Source: compiled only for
// tensor-core attention, runtime.DeviceOptions.TensorCoreAttention).
//
//go:embed mma.cu
var MMASource string

// Hash is the hex SHA-256 of Source (the compile cache's key).
func Hash() string {
	s := sha256.Sum256([]byte(Source))
	return hex.EncodeToString(s[:])
}

// Param is a kernel parameter's kind.
type Param byte

const (
	Ptr Param = 'p' // device pointer (any element type)
	I64 Param = 'l' // long long
	F32 Param = 'f' // float
	F64 Param = 'd' // double
)

// Shape says how a kernel is launched.
type Shape int

const (
	// Elementwise kernels loop over their elements with the grid's
	// stride: any grid and block work (Grid1D picks them).
	Elementwise Shape = iota
	// Row kernels take one block per row and a power-of-two block of at
	// most MaxBlock threads (RowBlock picks it).
	Row
	// Attention kernels take AttentionThreads threads, a grid
	// (ceil(seq/rows), heads, batch) and the shared memory of the head
	// dim's AttentionGeometry, whose lanes and tile are their last two
	// arguments.
	Attention
)

// MaxHeadDim is AMSP_MAX_HD in ops.cu.
const MaxHeadDim = 256

// AttentionThreads is the attention kernels' block.
const AttentionThreads = 128

// AttentionGeom is the launch geometry of the attention kernels for one
// head dim (ops.cu's comment before attention_f32 says how they use it).
type AttentionGeom struct {
	Lanes int // threads that share a row, each holding up to 16 of its elements
	Rows  int // rows a block holds: AttentionThreads / Lanes
	Tile  int // rows of the other operand in shared memory at once, a multiple of 16
	Smem  int // bytes of dynamic shared memory: two tiles and two tile-long vectors
}

// AttentionGeometry is the geometry for head dim hd (1 to MaxHeadDim):
// the fewest lanes (a power of two) whose four float4 groups cover hd,
// and the largest tile of at most 64 rows that fits the 48 KiB of shared
// memory a launch gets without asking.
func AttentionGeometry(hd int) AttentionGeom {
	groups := (hd + 3) / 4
	lanes := 1
	for 4*lanes < groups {
		lanes *= 2
	}
	hdp := 4 * groups
	smem := func(tile int) int { return 4 * (2*tile*hdp + 2*tile) }
	tile := 64
	for tile > 16 && smem(tile) > 48<<10 {
		tile /= 2
	}
	return AttentionGeom{Lanes: lanes, Rows: AttentionThreads / lanes, Tile: tile, Smem: smem(tile)}
}

// Launch is an attention kernel's launch over seq rows, y heads and
// batch, with args, then the geometry's lanes and tile.
func (g AttentionGeom) Launch(kernel string, seq, y, batch int64, args ...Arg) Launch {
	return Launch{Kernel: kernel, Grid: [3]int{int((seq + int64(g.Rows) - 1) / int64(g.Rows)), int(y), int(batch)},
		Block: AttentionThreads, Smem: g.Smem, Args: append(append([]Arg(nil), args...), i64(int64(g.Lanes)), i64(int64(g.Tile)))}
}

// MaxBlock is AMSP_BLOCK in ops.cu: the shared reduction arrays' size.
const MaxBlock = 256

// Kernel is one extern "C" kernel of ops.cu.
type Kernel struct {
	Name   string
	Params []Param
	Shape  Shape
}

// Grid1D is an elementwise launch over n elements: blocks of block
// threads, enough of them to give every thread one element, at most
// maxGrid (the threads then stride).
func Grid1D(n int64, block, maxGrid int) (grid int) {
	g := (n + int64(block) - 1) / int64(block)
	return int(max(1, min(g, int64(maxGrid))))
}

// RowBlock is a row kernel's block for rows of d elements: the power of
// two of at most MaxBlock threads that gives each thread at least one
// element (at least 32, a warp).
func RowBlock(d int64) int {
	b := 32
	for b < MaxBlock && int64(b) < d {
		b *= 2
	}
	return b
}
