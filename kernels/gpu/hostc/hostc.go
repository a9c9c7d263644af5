//go:build cgo

// Package hostc runs kernels/gpu's CUDA C kernels on the CPU: ops.cu and
// mma.cu compiled as C with shim.h, one block after another, most blocks
// run by one thread with the launch geometry package gpu gives a GPU
// launch (an elementwise grid capped low, so the grid-stride loops run
// more than once); the attention kernels' blocks run all their threads,
// as coroutines (glibc's ucontext), with barriers, warp shuffles and
// tensor-core products emulated. Tests compare every kernel with
// package kernels.
package hostc

/*
#cgo CFLAGS: -O2 -std=gnu11
#cgo LDFLAGS: -lm
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <ucontext.h>
#include "../shim.h"
#include "../ops.cu"
#include "../mma.cu"

#define LAUNCH(grid, call) do { gridDim.x = (grid); for (unsigned amsp_blk = 0; amsp_blk < (grid); amsp_blk++) { blockIdx.x = amsp_blk; call; } } while (0)

static void h_add(unsigned g, float *o, const float *a, const float *b, long long n, long long bn) { LAUNCH(g, add_f32(o, a, b, n, bn)); }
static void h_mul(unsigned g, float *o, const float *a, const float *b, long long n, long long bn) { LAUNCH(g, mul_f32(o, a, b, n, bn)); }
static void h_mul_grad(unsigned g, float *da, float *db, const float *a, const float *b, const float *dy, long long n, long long bn) { LAUNCH(g, mul_grad_f32(da, db, a, b, dy, n, bn)); }
static void h_col_sum(unsigned g, float *o, const float *x, const float *y, long long rows, long long d) { LAUNCH(g, col_sum_f32(o, x, y, rows, d)); }
static void h_transpose(unsigned g, float *o, const float *x, long long m, long long n) { LAUNCH(g, transpose_f32(o, x, m, n)); }
static void h_silu(unsigned g, float *o, const float *x, long long n) { LAUNCH(g, silu_f32(o, x, n)); }
static void h_silu_grad(unsigned g, float *dx, const float *x, const float *dy, long long n) { LAUNCH(g, silu_grad_f32(dx, x, dy, n)); }
static void h_gelu(unsigned g, float *o, const float *x, long long n) { LAUNCH(g, gelu_f32(o, x, n)); }
static void h_gelu_grad(unsigned g, float *dx, const float *x, const float *dy, long long n) { LAUNCH(g, gelu_grad_f32(dx, x, dy, n)); }
static void h_rmsnorm(unsigned g, float *o, const float *x, const float *w, long long rows, long long d, float eps) { LAUNCH(g, rmsnorm_f32(o, x, w, rows, d, eps)); }
static void h_rmsnorm_grad(unsigned g, float *dx, float *rstd, const float *x, const float *w, const float *dy, long long rows, long long d, float eps) { LAUNCH(g, rmsnorm_grad_f32(dx, rstd, x, w, dy, rows, d, eps)); }
static void h_rmsnorm_grad_w(unsigned g, float *dw, const float *x, const float *dy, const float *rstd, long long rows, long long d) { LAUNCH(g, rmsnorm_grad_w_f32(dw, x, dy, rstd, rows, d)); }
static void h_layernorm(unsigned g, float *o, const float *x, const float *w, const float *b, long long rows, long long d, float eps) { LAUNCH(g, layernorm_f32(o, x, w, b, rows, d, eps)); }
static void h_layernorm_grad(unsigned g, float *dx, float *stats, const float *x, const float *w, const float *dy, long long rows, long long d, float eps) { LAUNCH(g, layernorm_grad_f32(dx, stats, x, w, dy, rows, d, eps)); }
static void h_layernorm_grad_wb(unsigned g, float *dw, float *db, const float *x, const float *dy, const float *stats, long long rows, long long d) { LAUNCH(g, layernorm_grad_wb_f32(dw, db, x, dy, stats, rows, d)); }
static void h_rope(unsigned g, float *o, const float *x, long long b, long long s, long long h, long long hd, double theta, float sign) { LAUNCH(g, rope_f32(o, x, b, s, h, hd, theta, sign)); }
static void h_embed(unsigned g, float *o, const int *ids, const float *table, long long n, long long vocab, long long d, unsigned long long *bad) { LAUNCH(g, embed_f32(o, ids, table, n, vocab, d, bad)); }
static void h_embed_grad(unsigned g, float *dt, const int *start, const int *pos, const float *dy, long long vocab, long long d) { LAUNCH(g, embed_grad_f32(dt, start, pos, dy, vocab, d)); }
static void h_cross_entropy(unsigned g, double *loss, const float *logits, const int *t, long long rows, long long vocab, unsigned long long *bad) { LAUNCH(g, cross_entropy_f32(loss, logits, t, rows, vocab, bad)); }
static void h_cross_entropy_grad(unsigned g, float *dl, const float *logits, const int *t, long long rows, long long vocab, double f) { LAUNCH(g, cross_entropy_grad_f32(dl, logits, t, rows, vocab, f)); }
static void h_adamw(unsigned g, float *p, float *m, float *v, const float *gr, long long n, const long long *decay, long long nd, const double *k) {
	LAUNCH(g, adamw_f32(p, m, v, gr, n, decay, nd, k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7]));
}
// A launch whose blocks run their threads as coroutines (shim.h), one
// OS thread switching between them: each runs until the block's next
// barrier or its end, in thread order; a barrier is passed once every
// thread is at it. Threads that end while others wait at a barrier are
// a divergent barrier (undefined on a GPU), reported as an error.
typedef void (*amsp_body)(const void *args);
enum { amsp_ready, amsp_waiting, amsp_done };
#define AMSP_CO_STACK (128 << 10)
static struct {
	ucontext_t sched, ctx[1024];
	char *stack[1024];
	unsigned char state[1024];
	unsigned cur;
	amsp_body fn;
	const void *args;
} amsp_co;

static void amsp_co_entry(void) {
	amsp_co.fn(amsp_co.args);
	amsp_co.state[amsp_co.cur] = amsp_done; // then uc_link: the scheduler
}

static void amsp_co_barrier(void) {
	unsigned t = amsp_co.cur;
	amsp_co.state[t] = amsp_waiting;
	swapcontext(&amsp_co.ctx[t], &amsp_co.sched);
}

// amsp_coop_launch runs fn over the grid with blocks of block threads:
// 0; -1, no memory for the threads' stacks; -2, a divergent barrier.
static int amsp_coop_launch(amsp_body fn, const void *args, unsigned gx, unsigned gy, unsigned gz, unsigned block) {
	if (block == 0 || block > 1024) {
		return -1;
	}
	for (unsigned t = 0; t < block; t++) {
		if (!amsp_co.stack[t] && !(amsp_co.stack[t] = malloc(AMSP_CO_STACK))) {
			return -1;
		}
	}
	amsp_co.fn = fn;
	amsp_co.args = args;
	blockDim.x = block;
	gridDim.x = gx; gridDim.y = gy; gridDim.z = gz;
	memset(amsp_xchg_turn, 0, sizeof amsp_xchg_turn);
	int rc = 0;
	amsp_barrier = amsp_co_barrier;
	for (unsigned bz = 0; bz < gz && rc == 0; bz++) for (unsigned by = 0; by < gy && rc == 0; by++) for (unsigned bx = 0; bx < gx && rc == 0; bx++) {
		blockIdx.x = bx; blockIdx.y = by; blockIdx.z = bz;
		for (unsigned t = 0; t < block; t++) {
			getcontext(&amsp_co.ctx[t]);
			amsp_co.ctx[t].uc_stack.ss_sp = amsp_co.stack[t];
			amsp_co.ctx[t].uc_stack.ss_size = AMSP_CO_STACK;
			amsp_co.ctx[t].uc_link = &amsp_co.sched;
			makecontext(&amsp_co.ctx[t], amsp_co_entry, 0);
			amsp_co.state[t] = amsp_ready;
		}
		for (;;) {
			unsigned waiting = 0, done = 0;
			for (unsigned t = 0; t < block; t++) {
				amsp_co.cur = t;
				threadIdx.x = t;
				swapcontext(&amsp_co.sched, &amsp_co.ctx[t]);
				if (amsp_co.state[t] == amsp_waiting) {
					waiting++;
					amsp_co.state[t] = amsp_ready;
				} else {
					done++;
				}
			}
			if (done == block) {
				break;
			}
			if (waiting != block) {
				rc = -2;
				break;
			}
		}
	}
	amsp_barrier = NULL;
	threadIdx.x = 0;
	blockDim.x = 1;
	return rc;
}

// The kernels whose blocks run as coroutines, in coopKernels' order,
// each called with its arguments as 64-bit words (a pointer's address or
// a long long) in its parameter order.
#define W(i, T) ((T)(uintptr_t)w[i])
#define L(i) ((long long)w[i])
static void coop_attention_f32(const void *p) {
	const unsigned long long *w = p;
	attention_f32(W(0, float *), W(1, float *), W(2, const float *), W(3, const float *), W(4, const float *), L(5), L(6), L(7), L(8), L(9), L(10), L(11), L(12));
}
static void coop_attention_dq_f32(const void *p) {
	const unsigned long long *w = p;
	attention_dq_f32(W(0, float *), W(1, const float *), W(2, const float *), W(3, const float *), W(4, const float *), W(5, const float *),
		W(6, const float *), L(7), L(8), L(9), L(10), L(11), L(12), L(13), L(14));
}
static void coop_attention_dkv_f32(const void *p) {
	const unsigned long long *w = p;
	attention_dkv_f32(W(0, float *), W(1, float *), W(2, const float *), W(3, const float *), W(4, const float *), W(5, const float *),
		W(6, const float *), W(7, const float *), L(8), L(9), L(10), L(11), L(12), L(13), L(14), L(15));
}
static void coop_mma_probe(const void *p) {
	const unsigned long long *w = p;
	mma_probe(W(0, float *), W(1, const unsigned short *), W(2, const unsigned short *), W(3, const float *));
}
static void coop_attention_mma_fwd(const void *p) {
	const unsigned long long *w = p;
	attention_mma_fwd(W(0, float *), W(1, float *), W(2, const unsigned short *), W(3, const unsigned short *), W(4, const unsigned short *),
		L(5), L(6), L(7), L(8), L(9), L(10));
}
static void coop_attention_mma_dkv(const void *p) {
	const unsigned long long *w = p;
	attention_mma_dkv(W(0, float *), W(1, float *), W(2, const unsigned short *), W(3, const unsigned short *), W(4, const unsigned short *),
		W(5, const float *), W(6, const unsigned short *), W(7, const float *), L(8), L(9), L(10), L(11), L(12), L(13));
}
static void coop_attention_mma_dq(const void *p) {
	const unsigned long long *w = p;
	attention_mma_dq(W(0, float *), W(1, const unsigned short *), W(2, const unsigned short *), W(3, const unsigned short *),
		W(4, const float *), W(5, const unsigned short *), W(6, const float *), L(7), L(8), L(9), L(10), L(11), L(12));
}
#undef W
#undef L
static const amsp_body coop_bodies[] = {coop_attention_f32, coop_attention_dq_f32, coop_attention_dkv_f32, coop_mma_probe,
	coop_attention_mma_fwd, coop_attention_mma_dkv, coop_attention_mma_dq};
static int h_coop(int k, const unsigned long long *w, unsigned gx, unsigned gy, unsigned gz, unsigned block) {
	return amsp_coop_launch(coop_bodies[k], w, gx, gy, gz, block);
}
static void h_attention_dsum_bf16(unsigned g, float *dsum, const unsigned short *o, const unsigned short *dout, long long b, long long s, long long h, long long hd) {
	LAUNCH(g, attention_dsum_bf16(dsum, o, dout, b, s, h, hd));
}
static void h_attention_dsum(unsigned g, float *dsum, const float *o, const float *dout, long long b, long long s, long long h, long long hd) {
	LAUNCH(g, attention_dsum_f32(dsum, o, dout, b, s, h, hd));
}
static void h_attention_dkv_sum(unsigned g, float *dk, float *dv, const float *pk, const float *pv, long long b, long long s, long long h, long long kvh, long long hd) {
	LAUNCH(g, attention_dkv_sum_f32(dk, dv, pk, pv, b, s, h, kvh, hd));
}
static void h_first_nonfinite(unsigned g, const float *x, long long n, unsigned long long *first) { LAUNCH(g, first_nonfinite_f32(x, n, first)); }
static void h_bf16_widen(unsigned g, float *o, const unsigned short *x, long long n) { LAUNCH(g, bf16_widen(o, x, n)); }
static void h_bf16_round(unsigned g, float *x, long long n) { LAUNCH(g, bf16_round(x, n)); }
static void h_bf16_pack(unsigned g, unsigned short *o, const float *x, long long n) { LAUNCH(g, bf16_pack(o, x, n)); }
static void h_bf16_finish(unsigned g, unsigned short *o, const float *x, long long n, unsigned long long *first) { LAUNCH(g, bf16_finish(o, x, n, first)); }
*/
import "C"

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"unsafe"

	"amspc/kernels"
	"amspc/kernels/gpu"
)

// maxGrid caps elementwise grids low and odd, so each thread of the shim
// strides through several elements, as threads of a large launch do.
const maxGrid = 61

func grid(n int) C.uint { return C.uint(gpu.Grid1D(int64(n), 1, maxGrid)) }

func f(s []float32) *C.float {
	if len(s) == 0 {
		return nil
	}
	return (*C.float)(&s[0])
}

func ints(s []int32) *C.int {
	if len(s) == 0 {
		return nil
	}
	return (*C.int)(&s[0])
}

func ll(n int) C.longlong { return C.longlong(n) }

// rowGrid is a row kernel's grid: one block per row (at least one).
func rowGrid(rows int) C.uint { return C.uint(max(rows, 1)) }

// Add is add_f32: out = a + b, b repeated over rows when shorter.
func Add(out, a, b []float32) { C.h_add(grid(len(a)), f(out), f(a), f(b), ll(len(a)), ll(len(b))) }

// Mul is mul_f32.
func Mul(out, a, b []float32) { C.h_mul(grid(len(a)), f(out), f(a), f(b), ll(len(a)), ll(len(b))) }

// MulGrad is kernels.MulGrad: mul_grad_f32, then col_sum_f32 for a
// broadcast b's gradient.
func MulGrad(da, db, a, b, dy []float32) {
	n, bn := len(a), len(b)
	var pdb *C.float
	if bn == n {
		pdb = f(db)
	}
	C.h_mul_grad(grid(n), f(da), pdb, f(a), f(b), f(dy), ll(n), ll(bn))
	if bn < n && db != nil {
		C.h_col_sum(grid(bn), f(db), f(dy), f(a), ll(n/bn), ll(bn))
	}
}

// AddGradBroadcast is kernels.AddGradBroadcast: col_sum_f32 of dy.
func AddGradBroadcast(db, dy []float32) {
	d := len(db)
	C.h_col_sum(grid(d), f(db), f(dy), nil, ll(len(dy)/d), ll(d))
}

// Transpose is transpose_f32: out [n, m] = x^T.
func Transpose(out, x []float32, m, n int) { C.h_transpose(grid(m*n), f(out), f(x), ll(m), ll(n)) }

// SiLU, SiLUGrad, GELU and GELUGrad are their kernels.
func SiLU(out, x []float32)        { C.h_silu(grid(len(x)), f(out), f(x), ll(len(x))) }
func SiLUGrad(dx, x, dy []float32) { C.h_silu_grad(grid(len(x)), f(dx), f(x), f(dy), ll(len(x))) }
func GELU(out, x []float32)        { C.h_gelu(grid(len(x)), f(out), f(x), ll(len(x))) }
func GELUGrad(dx, x, dy []float32) { C.h_gelu_grad(grid(len(x)), f(dx), f(x), f(dy), ll(len(x))) }

// RMSNorm is rmsnorm_f32.
func RMSNorm(out, x, w []float32, rows, d int, eps float32) {
	C.h_rmsnorm(rowGrid(rows), f(out), f(x), f(w), ll(rows), ll(d), C.float(eps))
}

// RMSNormGrad is rmsnorm_grad_f32 then rmsnorm_grad_w_f32.
func RMSNormGrad(dx, dw, x, w, dy []float32, rows, d int, eps float32) {
	rstd := make([]float32, rows)
	C.h_rmsnorm_grad(rowGrid(rows), f(dx), f(rstd), f(x), f(w), f(dy), ll(rows), ll(d), C.float(eps))
	C.h_rmsnorm_grad_w(grid(d), f(dw), f(x), f(dy), f(rstd), ll(rows), ll(d))
}

// LayerNorm is layernorm_f32.
func LayerNorm(out, x, w, b []float32, rows, d int, eps float32) {
	C.h_layernorm(rowGrid(rows), f(out), f(x), f(w), f(b), ll(rows), ll(d), C.float(eps))
}

// LayerNormGrad is layernorm_grad_f32 then layernorm_grad_wb_f32.
func LayerNormGrad(dx, dw, db, x, w, dy []float32, rows, d int, eps float32) {
	stats := make([]float32, 2*rows)
	C.h_layernorm_grad(rowGrid(rows), f(dx), f(stats), f(x), f(w), f(dy), ll(rows), ll(d), C.float(eps))
	C.h_layernorm_grad_wb(grid(d), f(dw), f(db), f(x), f(dy), f(stats), ll(rows), ll(d))
}

// RoPE and RoPEGrad are rope_f32 turning forward and back.
func RoPE(out, x []float32, batch, seq, heads, hd int, theta float64) {
	C.h_rope(grid(len(x)/2), f(out), f(x), ll(batch), ll(seq), ll(heads), ll(hd), C.double(theta), 1)
}

func RoPEGrad(dx, dy []float32, batch, seq, heads, hd int, theta float64) {
	C.h_rope(grid(len(dy)/2), f(dx), f(dy), ll(batch), ll(seq), ll(heads), ll(hd), C.double(theta), -1)
}

// Embed is embed_f32; an id out of range is reported as kernels.Embed
// reports it (the first one).
func Embed(out []float32, ids []int32, table []float32, vocab, d int) error {
	bad := C.ulonglong(len(ids))
	C.h_embed(grid(len(ids)*d), f(out), ints(ids), f(table), ll(len(ids)), ll(vocab), ll(d), &bad)
	if int(bad) < len(ids) {
		return fmt.Errorf("embed: id %d at position %d is outside [0, %d)", ids[bad], int(bad), vocab)
	}
	return nil
}

// EmbedGrad is embed_grad_f32 over the positions gpu.Positions lists.
func EmbedGrad(dtable []float32, ids []int32, dy []float32, vocab, d int) {
	start, pos := gpu.Positions(ids, vocab)
	C.h_embed_grad(grid(vocab*d), f(dtable), ints(start), ints(pos), f(dy), ll(vocab), ll(d))
}

// CrossEntropy is cross_entropy_f32 and gpu.MeanLoss.
func CrossEntropy(logits []float32, targets []int32, rows, vocab int) (float64, error) {
	loss := make([]float64, rows)
	bad := C.ulonglong(rows)
	if rows > 0 {
		C.h_cross_entropy(rowGrid(rows), (*C.double)(&loss[0]), f(logits), ints(targets), ll(rows), ll(vocab), &bad)
	}
	if int(bad) < rows {
		return 0, fmt.Errorf("cross_entropy: target %d at position %d is outside [0, %d)", targets[bad], int(bad), vocab)
	}
	return gpu.MeanLoss(loss), nil
}

// CrossEntropyGrad is cross_entropy_grad_f32 with f = scale/rows.
func CrossEntropyGrad(dlogits, logits []float32, targets []int32, rows, vocab int, scale float32) {
	C.h_cross_entropy_grad(rowGrid(rows), f(dlogits), f(logits), ints(targets), ll(rows), ll(vocab), C.double(float64(scale)/float64(rows)))
}

// AdamW is adamw_f32 with gpu.AdamWArgs; decayed holds [lo, hi) pairs.
func AdamW(p, m, v, g []float32, step int, lr, beta1, beta2, eps, weightDecay float64, decayed [][2]int) {
	k := gpu.AdamWArgs(step, lr, beta1, beta2, eps, weightDecay)
	flat := make([]C.longlong, 0, 2*len(decayed)+1)
	for _, r := range decayed {
		flat = append(flat, C.longlong(r[0]), C.longlong(r[1]))
	}
	var pd *C.longlong
	if len(flat) > 0 {
		pd = &flat[0]
	}
	C.h_adamw(grid(len(p)), f(p), f(m), f(v), f(g), ll(len(p)), pd, ll(len(decayed)), (*C.double)(&k[0]))
}

// coopKernels are the kernels whose blocks run all their threads (as
// coroutines), in the order of hostc's C table coop_bodies.
var coopKernels = []string{"attention_f32", "attention_dq_f32", "attention_dkv_f32", "mma_probe", "attention_mma_fwd",
	"attention_mma_dkv", "attention_mma_dq"}

// runCoop runs l, one of coopKernels, with its pointer arguments at
// addrs (addrs[i] for l.Args[i]) and its grid and block.
func runCoop(l *gpu.Launch, addrs []uint64) error {
	k := slices.Index(coopKernels, l.Kernel)
	if k < 0 || len(l.Args) == 0 {
		return fmt.Errorf("hostc: %s does not run as coroutines", l.Kernel)
	}
	w := make([]C.ulonglong, len(l.Args))
	for i, a := range l.Args {
		if a.Kind == gpu.Int {
			w[i] = C.ulonglong(a.I)
		} else {
			w[i] = C.ulonglong(addrs[i])
		}
	}
	switch C.h_coop(C.int(k), &w[0], C.uint(l.Grid[0]), C.uint(l.Grid[1]), C.uint(l.Grid[2]), C.uint(l.Block)) {
	case -1:
		return fmt.Errorf("hostc: %s: no memory for the stacks of a block of %d threads", l.Kernel, l.Block)
	case -2:
		return fmt.Errorf("hostc: %s: threads of a block ended while others waited at a barrier", l.Kernel)
	}
	return nil
}

// hostCall is a launch's arguments in Go memory: pointers to pinned
// slices, then integers.
type hostCall struct {
	args  []gpu.Arg
	addrs []uint64
	pin   runtime.Pinner
}

func (c *hostCall) ptr(p unsafe.Pointer) {
	c.pin.Pin(p)
	c.args, c.addrs = append(c.args, gpu.Arg{Kind: gpu.Operand}), append(c.addrs, uint64(uintptr(p)))
}
func (c *hostCall) f32(xs ...[]float32) {
	for _, x := range xs {
		c.ptr(unsafe.Pointer(&x[0]))
	}
}
func (c *hostCall) u16(xs ...[]uint16) {
	for _, x := range xs {
		c.ptr(unsafe.Pointer(&x[0]))
	}
}
func (c *hostCall) ints(vs ...int) {
	for _, v := range vs {
		c.args, c.addrs = append(c.args, gpu.Arg{Kind: gpu.Int, I: int64(v)}), append(c.addrs, 0)
	}
}

// run runs kernel k of coopKernels at l's geometry with c's arguments;
// a failure panics (these are the tests' helpers).
func (c *hostCall) run(l gpu.Launch) {
	defer c.pin.Unpin()
	for len(c.addrs) < len(l.Args) {
		c.addrs = append(c.addrs, 0) // the geometry's own integers
	}
	if err := runCoop(&l, c.addrs); err != nil {
		panic(err)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Attention is attention_f32 with the GPU's geometry.
func Attention(out, lse, q, k, v []float32, batch, seq, heads, kvHeads, hd int, causal bool) {
	launchMu.Lock()
	defer launchMu.Unlock()
	var c hostCall
	c.f32(out, lse, q, k, v)
	c.ints(batch, seq, heads, kvHeads, hd, boolInt(causal))
	c.run(gpu.AttentionGeometry(hd).Launch("attention_f32", int64(seq), int64(heads), int64(batch), c.args...))
}

// AttentionGrad is attention_dsum_f32, attention_dq_f32,
// attention_dkv_f32 and (grouped KV heads) attention_dkv_sum_f32, as the
// GPU's launch plan runs them.
func AttentionGrad(dq, dk, dv, q, k, v, out, lse, dout []float32, batch, seq, heads, kvHeads, hd int, causal bool) {
	launchMu.Lock()
	defer launchMu.Unlock()
	dsum := make([]float32, batch*heads*seq)
	C.h_attention_dsum(grid(len(dsum)), f(dsum), f(out), f(dout), ll(batch), ll(seq), ll(heads), ll(hd))
	geo := gpu.AttentionGeometry(hd)
	dims := []int{batch, seq, heads, kvHeads, hd, boolInt(causal)}
	pk, pv := dk, dv
	if kvHeads != heads {
		pk, pv = make([]float32, len(dq)), make([]float32, len(dq))
	}
	var c hostCall
	c.f32(dq, q, k, v, lse, dout, dsum)
	c.ints(dims...)
	c.run(geo.Launch("attention_dq_f32", int64(seq), int64(heads), int64(batch), c.args...))
	var d hostCall
	d.f32(pk, pv, q, k, v, lse, dout, dsum)
	d.ints(dims...)
	d.run(geo.Launch("attention_dkv_f32", int64(seq), int64(heads), int64(batch), d.args...))
	if kvHeads != heads {
		C.h_attention_dkv_sum(grid(len(dk)), f(dk), f(dv), f(pk), f(pv), ll(batch), ll(seq), ll(heads), ll(kvHeads), ll(hd))
	}
}

// MMAProbe is mma.cu's mma_probe (one warp): d = a b + c for a 16x16
// bf16 a and a 16x8 bf16 b (row-major, bf16 as its top 16 bits) and a
// 16x8 fp32 c.
func MMAProbe(a, b []uint16, c []float32) []float32 {
	launchMu.Lock()
	defer launchMu.Unlock()
	if len(a) != 256 || len(b) != 128 || len(c) != 128 {
		panic("hostc: MMAProbe wants 16x16, 16x8 and 16x8")
	}
	d := make([]float32, 128)
	var h hostCall
	h.f32(d)
	h.u16(a, b)
	h.f32(c)
	h.run(gpu.Launch{Kernel: "mma_probe", Grid: [3]int{1, 1, 1}, Block: 32, Args: h.args})
	return d
}

// AttentionMMA is mma.cu's attention_mma_fwd (its geometry: 64 query
// rows a block of 128 threads) on bf16 q, k, v (each value its top 16
// bits); hd a multiple of 16 up to 128.
func AttentionMMA(out, lse []float32, q, k, v []uint16, batch, seq, heads, kvHeads, hd int, causal bool) {
	launchMu.Lock()
	defer launchMu.Unlock()
	var c hostCall
	c.f32(out, lse)
	c.u16(q, k, v)
	c.ints(batch, seq, heads, kvHeads, hd, boolInt(causal))
	c.run(gpu.MMALaunch("attention_mma_fwd", int64(seq), int64(heads), int64(batch), 0, c.args...))
}

// AttentionMMAGrad is mma.cu's attention_mma_dq and attention_mma_dkv
// on bf16 q, k, v, dout (each value its top 16 bits) with fp32 lse and
// dsum ([batch, heads, seq]): dq, and dk and dv per query head ([batch,
// seq, heads*hd], a group's parts to be added).
func AttentionMMAGrad(dq, dkParts, dvParts []float32, q, k, v, dout []uint16, lse, dsum []float32, batch, seq, heads, kvHeads, hd int, causal bool) {
	launchMu.Lock()
	defer launchMu.Unlock()
	dims := []int{batch, seq, heads, kvHeads, hd, boolInt(causal)}
	// Both kernels take the same operands after their outputs.
	inputs := func(c *hostCall) {
		c.u16(q, k, v)
		c.f32(lse)
		c.u16(dout)
		c.f32(dsum)
		c.ints(dims...)
	}
	var c hostCall
	c.f32(dq)
	inputs(&c)
	c.run(gpu.MMALaunch("attention_mma_dq", int64(seq), int64(heads), int64(batch), 0, c.args...))
	var d hostCall
	d.f32(dkParts, dvParts)
	inputs(&d)
	d.run(gpu.MMALaunch("attention_mma_dkv", int64(seq), int64(heads), int64(batch), 0, d.args...))
}

// BF16 is bf16_round then bf16_pack then bf16_widen of x: the bf16
// storage of x's values (two bytes each) and their widening.
func BF16(x []float32) (bits []uint16, back []float32) {
	r := append([]float32(nil), x...)
	bits = make([]uint16, len(x))
	back = make([]float32, len(x))
	if len(x) == 0 {
		return bits, back
	}
	C.h_bf16_round(grid(len(x)), f(r), ll(len(x)))
	C.h_bf16_pack(grid(len(x)), (*C.ushort)(unsafe.Pointer(&bits[0])), f(r), ll(len(x)))
	C.h_bf16_widen(grid(len(x)), f(back), (*C.ushort)(unsafe.Pointer(&bits[0])), ll(len(x)))
	return bits, back
}

// BF16Finish is bf16_finish of x: its bf16 bits and the first NaN's or
// infinity's index after rounding (-1: none).
func BF16Finish(x []float32) (bits []uint16, first int) {
	bits = make([]uint16, len(x))
	if len(x) == 0 {
		return bits, -1
	}
	flag := ^C.ulonglong(0)
	C.h_bf16_finish(grid(len(x)), (*C.ushort)(unsafe.Pointer(&bits[0])), f(x), ll(len(x)), &flag)
	first, _ = gpu.NonFinite(uint64(flag))
	return bits, first
}

// FirstNonFinite is first_nonfinite_f32: the smallest index of a NaN or
// infinity, or -1.
func FirstNonFinite(x []float32) int {
	first := ^C.ulonglong(0)
	C.h_first_nonfinite(grid(len(x)), f(x), ll(len(x)), &first)
	i, _ := gpu.NonFinite(uint64(first))
	return i
}

// Device is a GPU simulated on the host for launch plans (gpu.PlanOp):
// memory from C's malloc, addressed by its address as a GPU's is, each
// launch run to its end by this package's shim (one thread per block, or
// the plan's block of coroutine threads for the attention kernels),
// matmuls by package kernels. A backend that drives it (the runtime's
// device backend) drives a CUDA device the same way, so its tests run the
// CUDA backend's logic (plans, scratch, copies, checks) without a GPU.
type Device struct {
	mu    sync.Mutex
	sizes map[uint64]int64
}

// NewDevice is an empty Device.
func NewDevice() *Device { return &Device{sizes: map[uint64]int64{}} }

func (d *Device) Name() string { return "host-simulated GPU" }

// launchMu serializes the shim's launches.
var launchMu sync.Mutex

// Live is the number of allocations not freed.
func (d *Device) Live() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.sizes)
}

func (d *Device) Alloc(bytes int64) (uint64, error) {
	p := C.calloc(C.size_t(max(bytes, 1)), 1)
	if p == nil {
		return 0, fmt.Errorf("out of host memory allocating %d bytes", bytes)
	}
	a := uint64(uintptr(p))
	d.mu.Lock()
	d.sizes[a] = bytes
	d.mu.Unlock()
	return a, nil
}

func (d *Device) Free(addr uint64) {
	d.mu.Lock()
	_, ok := d.sizes[addr]
	delete(d.sizes, addr)
	d.mu.Unlock()
	if !ok {
		panic(fmt.Sprintf("hostc: free of %#x, which Alloc did not return", addr))
	}
	C.free(ptr(addr))
}

// ptr is the C pointer at addr (C memory: the collector never sees it).
func ptr(addr uint64) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&addr)) }

func (d *Device) Upload(addr uint64, src []byte) error {
	if len(src) > 0 {
		C.memcpy(ptr(addr), unsafe.Pointer(&src[0]), C.size_t(len(src)))
	}
	return nil
}

func (d *Device) Download(dst []byte, addr uint64) error {
	if len(dst) > 0 {
		C.memcpy(unsafe.Pointer(&dst[0]), ptr(addr), C.size_t(len(dst)))
	}
	return nil
}

func (d *Device) Copy(_ int, dst, src uint64, bytes int64) error {
	C.memmove(ptr(dst), ptr(src), C.size_t(bytes))
	return nil
}

func (d *Device) Zero(_ int, addr uint64, bytes int64) error {
	C.memset(ptr(addr), 0, C.size_t(bytes))
	return nil
}

func (d *Device) Record(int, int) error { return nil }
func (d *Device) Wait(int, int) error   { return nil }
func (d *Device) Sync() error           { return nil }

func floats(addr uint64, n int) []float32 {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(ptr(addr)), n)
}

// Gemm runs a plan's matmul with package kernels (bf16 operands widened
// exactly first).
func (d *Device) Gemm(_ int, g *gpu.Gemm, a, b, out uint64) error {
	m, k, n := g.M, g.K, g.N
	in := func(addr uint64, n int) []float32 {
		if !g.BF16 {
			return floats(addr, n)
		}
		w := make([]float32, n)
		for i, v := range unsafe.Slice((*uint16)(ptr(addr)), n) {
			w[i] = math.Float32frombits(uint32(v) << 16)
		}
		return w
	}
	switch g.Kind {
	case gpu.GemmAB:
		kernels.MatMul(floats(out, m*n), in(a, m*k), in(b, k*n), m, k, n)
	case gpu.GemmABt:
		kernels.MatMulGradA(floats(out, m*k), in(a, m*n), in(b, k*n), m, k, n)
	case gpu.GemmAtB:
		kernels.MatMulGradB(floats(out, k*n), in(a, m*k), in(b, m*n), m, k, n)
	default:
		return fmt.Errorf("hostc: gemm kind %d", g.Kind)
	}
	return nil
}

// Launch runs l with its pointer arguments at addrs (addrs[i] for
// l.Args[i] of a pointer kind; 0 for Null). Elementwise kernels get a
// grid of at most 61 one-thread blocks (their loops stride), row kernels
// a block per row, attention kernels (ops.cu's and mma.cu's) the plan's
// grid and block, their threads coroutines.
func (d *Device) Launch(_ int, l *gpu.Launch, addrs []uint64) error {
	if err := l.CheckArgs(); err != nil {
		return err
	}
	// The shim's thread and block indices and its shared memory are C
	// globals: one launch at a time in the process.
	launchMu.Lock()
	defer launchMu.Unlock()
	a := l.Args
	fp := func(i int) *C.float { return (*C.float)(ptr(addrs[i])) }
	up := func(i int) *C.ushort { return (*C.ushort)(ptr(addrs[i])) }
	ip := func(i int) *C.int { return (*C.int)(ptr(addrs[i])) }
	n := func(i int) C.longlong { return C.longlong(a[i].I) }
	fl := func(i int) C.float { return C.float(a[i].F) }
	db := func(i int) C.double { return C.double(a[i].F) }
	g := C.uint(min(l.Grid[0]*l.Block, maxGrid))
	rg := C.uint(l.Grid[0])
	switch l.Kernel {
	case "add_f32":
		C.h_add(g, fp(0), fp(1), fp(2), n(3), n(4))
	case "mul_f32":
		C.h_mul(g, fp(0), fp(1), fp(2), n(3), n(4))
	case "mul_grad_f32":
		C.h_mul_grad(g, fp(0), fp(1), fp(2), fp(3), fp(4), n(5), n(6))
	case "col_sum_f32":
		C.h_col_sum(g, fp(0), fp(1), fp(2), n(3), n(4))
	case "transpose_f32":
		C.h_transpose(g, fp(0), fp(1), n(2), n(3))
	case "silu_f32":
		C.h_silu(g, fp(0), fp(1), n(2))
	case "silu_grad_f32":
		C.h_silu_grad(g, fp(0), fp(1), fp(2), n(3))
	case "gelu_f32":
		C.h_gelu(g, fp(0), fp(1), n(2))
	case "gelu_grad_f32":
		C.h_gelu_grad(g, fp(0), fp(1), fp(2), n(3))
	case "rmsnorm_f32":
		C.h_rmsnorm(rg, fp(0), fp(1), fp(2), n(3), n(4), fl(5))
	case "rmsnorm_grad_f32":
		C.h_rmsnorm_grad(rg, fp(0), fp(1), fp(2), fp(3), fp(4), n(5), n(6), fl(7))
	case "rmsnorm_grad_w_f32":
		C.h_rmsnorm_grad_w(g, fp(0), fp(1), fp(2), fp(3), n(4), n(5))
	case "layernorm_f32":
		C.h_layernorm(rg, fp(0), fp(1), fp(2), fp(3), n(4), n(5), fl(6))
	case "layernorm_grad_f32":
		C.h_layernorm_grad(rg, fp(0), fp(1), fp(2), fp(3), fp(4), n(5), n(6), fl(7))
	case "layernorm_grad_wb_f32":
		C.h_layernorm_grad_wb(g, fp(0), fp(1), fp(2), fp(3), fp(4), n(5), n(6))
	case "rope_f32":
		C.h_rope(g, fp(0), fp(1), n(2), n(3), n(4), n(5), db(6), fl(7))
	case "embed_f32":
		C.h_embed(g, fp(0), ip(1), fp(2), n(3), n(4), n(5), (*C.ulonglong)(ptr(addrs[6])))
	case "embed_grad_f32":
		C.h_embed_grad(g, fp(0), ip(1), ip(2), fp(3), n(4), n(5))
	case "cross_entropy_f32":
		C.h_cross_entropy(rg, (*C.double)(ptr(addrs[0])), fp(1), ip(2), n(3), n(4), (*C.ulonglong)(ptr(addrs[5])))
	case "cross_entropy_grad_f32":
		C.h_cross_entropy_grad(rg, fp(0), fp(1), ip(2), n(3), n(4), db(5))
	case "adamw_f32":
		k := make([]C.double, 8)
		for i := range k {
			k[i] = db(7 + i)
		}
		C.h_adamw(g, fp(0), fp(1), fp(2), fp(3), n(4), (*C.longlong)(ptr(addrs[5])), n(6), &k[0])
	case "attention_f32", "attention_dq_f32", "attention_dkv_f32", "attention_mma_fwd", "attention_mma_dq", "attention_mma_dkv":
		return runCoop(l, addrs) // the plan's own grid and block
	case "attention_dsum_bf16":
		C.h_attention_dsum_bf16(g, fp(0), up(1), up(2), n(3), n(4), n(5), n(6))
	case "attention_dsum_f32":
		C.h_attention_dsum(g, fp(0), fp(1), fp(2), n(3), n(4), n(5), n(6))
	case "attention_dkv_sum_f32":
		C.h_attention_dkv_sum(g, fp(0), fp(1), fp(2), fp(3), n(4), n(5), n(6), n(7), n(8))
	case "first_nonfinite_f32":
		C.h_first_nonfinite(g, fp(0), n(1), (*C.ulonglong)(ptr(addrs[2])))
	case "bf16_widen":
		C.h_bf16_widen(g, fp(0), (*C.ushort)(ptr(addrs[1])), n(2))
	case "bf16_round":
		C.h_bf16_round(g, fp(0), n(1))
	case "bf16_pack":
		C.h_bf16_pack(g, (*C.ushort)(ptr(addrs[0])), fp(1), n(2))
	case "bf16_finish":
		C.h_bf16_finish(g, (*C.ushort)(ptr(addrs[0])), fp(1), n(2), (*C.ulonglong)(ptr(addrs[3])))
	default:
		return fmt.Errorf("hostc: no kernel %s", l.Kernel)
	}
	return nil
}
