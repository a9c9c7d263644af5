// Package gpu holds amspc's CUDA C kernels (ops.cu, embedded) and what a
// launcher needs to know of them: each kernel's parameters and launch
// geometry. NVRTC compiles Source for the device at start
// (runtime/cudalib); package hostc compiles the same file as C with
// shim.h and tests every kernel against package kernels on the CPU.
//
// Matmuls (and their gradients) are cuBLASLt's, not here.
package gpu

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
)

// Source is ops.cu.
//
//go:embed ops.cu
var Source string

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
	// Attention kernels take a grid (ceil(seq/B), heads, batch) (kv heads
	// for attention_dkv_f32), B threads, one row each, and AttentionSmem
	// bytes of dynamic shared memory (AttentionBlock picks B).
	Attention
)

// MaxHeadDim is AMSP_MAX_HD in ops.cu.
const MaxHeadDim = 256

// AttentionBlock is the attention kernels' block: the most rows, a power
// of two up to 64, whose two tiles of hd floats fit the 48 KiB of shared
// memory a launch gets without asking.
func AttentionBlock(hd int) int {
	b := 64
	for b > 1 && AttentionSmem(b, hd) > 48<<10 {
		b /= 2
	}
	return b
}

// AttentionSmem is the dynamic shared memory of an attention launch of
// block rows: two tiles of block x hd floats.
func AttentionSmem(block, hd int) int { return 2 * block * hd * 4 }

// MaxBlock is AMSP_BLOCK in ops.cu: the shared reduction arrays' size.
const MaxBlock = 256

// Kernel is one extern "C" kernel of ops.cu.
type Kernel struct {
	Name   string
	Params []Param
	Shape  Shape
}

// Kernels lists ops.cu's kernels in source order (TestKernelTable checks
// names and parameter lists against the source).
var Kernels = []Kernel{
	{"add_f32", []Param("pppll"), Elementwise},
	{"mul_f32", []Param("pppll"), Elementwise},
	{"mul_grad_f32", []Param("pppppll"), Elementwise},
	{"col_sum_f32", []Param("pppll"), Elementwise},
	{"transpose_f32", []Param("ppll"), Elementwise},
	{"silu_f32", []Param("ppl"), Elementwise},
	{"silu_grad_f32", []Param("pppl"), Elementwise},
	{"gelu_f32", []Param("ppl"), Elementwise},
	{"gelu_grad_f32", []Param("pppl"), Elementwise},
	{"rmsnorm_f32", []Param("pppllf"), Row},
	{"rmsnorm_grad_f32", []Param("pppppllf"), Row},
	{"rmsnorm_grad_w_f32", []Param("ppppll"), Elementwise},
	{"layernorm_f32", []Param("ppppllf"), Row},
	{"layernorm_grad_f32", []Param("pppppllf"), Row},
	{"layernorm_grad_wb_f32", []Param("pppppll"), Elementwise},
	{"rope_f32", []Param("pplllldf"), Elementwise},
	{"embed_f32", []Param("ppplllp"), Elementwise},
	{"embed_grad_f32", []Param("ppppll"), Elementwise},
	{"cross_entropy_f32", []Param("pppllp"), Row},
	{"cross_entropy_grad_f32", []Param("ppplld"), Row},
	{"adamw_f32", []Param("pppplpldddddddd"), Elementwise},
	{"attention_f32", []Param("pppppllllll"), Attention},
	{"attention_dsum_f32", []Param("pppllll"), Elementwise},
	{"attention_dq_f32", []Param("pppppppllllll"), Attention},
	{"attention_dkv_f32", []Param("ppppppppllllll"), Attention},
	{"first_nonfinite_f32", []Param("plp"), Elementwise},
	{"bf16_widen", []Param("ppl"), Elementwise},
	{"bf16_round", []Param("pl"), Elementwise},
	{"bf16_pack", []Param("ppl"), Elementwise},
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
