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

struct attn_args {
	float *o, *lse, *dq, *dk, *dv;
	const float *q, *k, *v, *lse_in, *dout, *dsum;
	long long b, s, h, kvh, hd, causal, lanes, tile;
};
static void attn_fwd_body(const void *p) {
	const struct attn_args *a = p;
	attention_f32(a->o, a->lse, a->q, a->k, a->v, a->b, a->s, a->h, a->kvh, a->hd, a->causal, a->lanes, a->tile);
}
static void attn_dq_body(const void *p) {
	const struct attn_args *a = p;
	attention_dq_f32(a->dq, a->q, a->k, a->v, a->lse_in, a->dout, a->dsum, a->b, a->s, a->h, a->kvh, a->hd, a->causal, a->lanes, a->tile);
}
static void attn_dkv_body(const void *p) {
	const struct attn_args *a = p;
	attention_dkv_f32(a->dk, a->dv, a->q, a->k, a->v, a->lse_in, a->dout, a->dsum, a->b, a->s, a->h, a->kvh, a->hd, a->causal, a->lanes, a->tile);
}
static int h_attention(unsigned gx, unsigned gy, unsigned gz, unsigned block, struct attn_args *a) {
	return amsp_coop_launch(attn_fwd_body, a, gx, gy, gz, block);
}
static int h_attention_dq(unsigned gx, unsigned gy, unsigned gz, unsigned block, struct attn_args *a) {
	return amsp_coop_launch(attn_dq_body, a, gx, gy, gz, block);
}
static int h_attention_dkv(unsigned gx, unsigned gy, unsigned gz, unsigned block, struct attn_args *a) {
	return amsp_coop_launch(attn_dkv_body, a, gx, gy, gz, block);
}
struct mma_args {
	float *d;
	const unsigned short *a, *b;
	const float *c;
};
static void mma_probe_body(const void *p) {
	const struct mma_args *m = p;
	mma_probe(m->d, m->a, m->b, m->c);
}
static int h_mma_probe(struct mma_args *m) { return amsp_coop_launch(mma_probe_body, m, 1, 1, 1, 32); }
struct mma_attn_args {
	float *out, *lse;
	const unsigned short *q, *k, *v;
	long long b, s, h, kvh, hd, causal;
};
static void mma_attn_body(const void *p) {
	const struct mma_attn_args *a = p;
	attention_mma_fwd(a->out, a->lse, a->q, a->k, a->v, a->b, a->s, a->h, a->kvh, a->hd, a->causal);
}
static int h_attention_mma_fwd(struct mma_attn_args *a) {
	return amsp_coop_launch(mma_attn_body, a, (unsigned)((a->s + 63) / 64), (unsigned)a->h, (unsigned)a->b, 128);
}
struct mma_grad_args {
	float *dq, *dk, *dv;
	const unsigned short *q, *k, *v, *dout;
	const float *lse, *dsum;
	long long b, s, h, kvh, hd, causal;
};
static void mma_dkv_body(const void *p) {
	const struct mma_grad_args *a = p;
	attention_mma_dkv(a->dk, a->dv, a->q, a->k, a->v, a->lse, a->dout, a->dsum, a->b, a->s, a->h, a->kvh, a->hd, a->causal);
}
static void mma_dq_body(const void *p) {
	const struct mma_grad_args *a = p;
	attention_mma_dq(a->dq, a->q, a->k, a->v, a->lse, a->dout, a->dsum, a->b, a->s, a->h, a->kvh, a->hd, a->causal);
}
static int h_mma_fwd_launch(unsigned gx, unsigned gy, unsigned gz, unsigned block, struct mma_attn_args *a) {
	return amsp_coop_launch(mma_attn_body, a, gx, gy, gz, block);
}
static int h_mma_dq_launch(unsigned gx, unsigned gy, unsigned gz, unsigned block, struct mma_grad_args *a) {
	return amsp_coop_launch(mma_dq_body, a, gx, gy, gz, block);
}
static int h_mma_dkv_launch(unsigned gx, unsigned gy, unsigned gz, unsigned block, struct mma_grad_args *a) {
	return amsp_coop_launch(mma_dkv_body, a, gx, gy, gz, block);
}
static void h_attention_dsum_bf16(unsigned g, float *dsum, const unsigned short *o, const unsigned short *dout, long long b, long long s, long long h, long long hd) {
	LAUNCH(g, attention_dsum_bf16(dsum, o, dout, b, s, h, hd));
}
static int h_attention_mma_grad(struct mma_grad_args *a) {
	unsigned gx = (unsigned)((a->s + 63) / 64);
	int rc = amsp_coop_launch(mma_dq_body, a, gx, (unsigned)a->h, (unsigned)a->b, 128);
	return rc ? rc : amsp_coop_launch(mma_dkv_body, a, gx, (unsigned)a->h, (unsigned)a->b, 128);
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

func flag(b bool) C.longlong {
	if b {
		return 1
	}
	return 0
}

// pinned is f that also pins x, whose address a C struct will hold.
func pinned(pin *runtime.Pinner) func(x []float32) *C.float {
	return func(x []float32) *C.float {
		if len(x) > 0 {
			pin.Pin(&x[0])
		}
		return f(x)
	}
}

// attnArgs are the attention kernels' arguments.
func attnArgs(batch, seq, heads, kvHeads, hd int, causal bool) (C.struct_attn_args, gpu.AttentionGeom) {
	geo := gpu.AttentionGeometry(hd)
	return C.struct_attn_args{b: ll(batch), s: ll(seq), h: ll(heads), kvh: ll(kvHeads), hd: ll(hd), causal: flag(causal),
		lanes: ll(geo.Lanes), tile: ll(geo.Tile)}, geo
}

// coop runs an attention kernel's launch over seq rows, y heads, batch.
func coop(launch func(gx, gy, gz, block C.uint, a *C.struct_attn_args) C.int, a *C.struct_attn_args, geo gpu.AttentionGeom, seq, y, batch int) {
	l := geo.Launch("", int64(seq), int64(y), int64(batch))
	if rc := launch(C.uint(l.Grid[0]), C.uint(l.Grid[1]), C.uint(l.Grid[2]), C.uint(l.Block), a); rc != 0 {
		panic(fmt.Sprintf("hostc: an attention launch failed (%d: -1 no stacks, -2 a divergent barrier)", rc))
	}
}

func hAttention(gx, gy, gz, block C.uint, a *C.struct_attn_args) C.int {
	return C.h_attention(gx, gy, gz, block, a)
}
func hAttentionDQ(gx, gy, gz, block C.uint, a *C.struct_attn_args) C.int {
	return C.h_attention_dq(gx, gy, gz, block, a)
}
func hAttentionDKV(gx, gy, gz, block C.uint, a *C.struct_attn_args) C.int {
	return C.h_attention_dkv(gx, gy, gz, block, a)
}

// Attention is attention_f32 with the GPU's geometry.
func Attention(out, lse, q, k, v []float32, batch, seq, heads, kvHeads, hd int, causal bool) {
	launchMu.Lock()
	defer launchMu.Unlock()
	var pin runtime.Pinner // the pointers travel inside a struct
	defer pin.Unpin()
	f := pinned(&pin)
	a, geo := attnArgs(batch, seq, heads, kvHeads, hd, causal)
	a.o, a.lse, a.q, a.k, a.v = f(out), f(lse), f(q), f(k), f(v)
	coop(hAttention, &a, geo, seq, heads, batch)
}

// AttentionGrad is attention_dsum_f32, attention_dq_f32,
// attention_dkv_f32 and (grouped KV heads) attention_dkv_sum_f32, as the
// GPU's launch plan runs them.
func AttentionGrad(dq, dk, dv, q, k, v, out, lse, dout []float32, batch, seq, heads, kvHeads, hd int, causal bool) {
	launchMu.Lock()
	defer launchMu.Unlock()
	var pin runtime.Pinner
	defer pin.Unpin()
	f := pinned(&pin)
	dsum := make([]float32, batch*heads*seq)
	C.h_attention_dsum(grid(len(dsum)), f(dsum), f(out), f(dout), ll(batch), ll(seq), ll(heads), ll(hd))
	a, geo := attnArgs(batch, seq, heads, kvHeads, hd, causal)
	a.dq, a.q, a.k, a.v, a.lse_in, a.dout, a.dsum = f(dq), f(q), f(k), f(v), f(lse), f(dout), f(dsum)
	coop(hAttentionDQ, &a, geo, seq, heads, batch)
	pk, pv := dk, dv
	if kvHeads != heads {
		pk, pv = make([]float32, len(dq)), make([]float32, len(dq))
	}
	a.dk, a.dv = f(pk), f(pv)
	coop(hAttentionDKV, &a, geo, seq, heads, batch)
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
	var pin runtime.Pinner
	defer pin.Unpin()
	pin.Pin(&a[0])
	pin.Pin(&b[0])
	pin.Pin(&c[0])
	pin.Pin(&d[0])
	m := C.struct_mma_args{d: (*C.float)(&d[0]), a: (*C.ushort)(&a[0]), b: (*C.ushort)(&b[0]), c: (*C.float)(&c[0])}
	if C.h_mma_probe(&m) != 0 {
		panic("hostc: mma_probe failed")
	}
	return d
}

// AttentionMMA is mma.cu's attention_mma_fwd (its geometry: 64 query
// rows a block of 128 threads) on bf16 q, k, v (each value its top 16
// bits); hd a multiple of 16 up to 128.
func AttentionMMA(out, lse []float32, q, k, v []uint16, batch, seq, heads, kvHeads, hd int, causal bool) {
	launchMu.Lock()
	defer launchMu.Unlock()
	if hd%16 != 0 || hd > 128 {
		panic(fmt.Sprintf("hostc: AttentionMMA: head dim %d", hd))
	}
	var pin runtime.Pinner
	defer pin.Unpin()
	for _, p := range []*uint16{&q[0], &k[0], &v[0]} {
		pin.Pin(p)
	}
	pin.Pin(&out[0])
	pin.Pin(&lse[0])
	a := C.struct_mma_attn_args{out: (*C.float)(&out[0]), lse: (*C.float)(&lse[0]), q: (*C.ushort)(&q[0]), k: (*C.ushort)(&k[0]),
		v: (*C.ushort)(&v[0]), b: ll(batch), s: ll(seq), h: ll(heads), kvh: ll(kvHeads), hd: ll(hd), causal: flag(causal)}
	if rc := C.h_attention_mma_fwd(&a); rc != 0 {
		panic(fmt.Sprintf("hostc: attention_mma_fwd failed (%d)", rc))
	}
}

// AttentionMMAGrad is mma.cu's attention_mma_dq and attention_mma_dkv
// on bf16 q, k, v, dout (each value its top 16 bits) with fp32 lse and
// dsum ([batch, heads, seq]): dq, and dk and dv per query head ([batch,
// seq, heads*hd], a group's parts to be added).
func AttentionMMAGrad(dq, dkParts, dvParts []float32, q, k, v, dout []uint16, lse, dsum []float32, batch, seq, heads, kvHeads, hd int, causal bool) {
	launchMu.Lock()
	defer launchMu.Unlock()
	if hd%16 != 0 || hd > 128 {
		panic(fmt.Sprintf("hostc: AttentionMMAGrad: head dim %d", hd))
	}
	var pin runtime.Pinner
	defer pin.Unpin()
	for _, p := range []*uint16{&q[0], &k[0], &v[0], &dout[0]} {
		pin.Pin(p)
	}
	for _, p := range []*float32{&dq[0], &dkParts[0], &dvParts[0], &lse[0], &dsum[0]} {
		pin.Pin(p)
	}
	a := C.struct_mma_grad_args{dq: (*C.float)(&dq[0]), dk: (*C.float)(&dkParts[0]), dv: (*C.float)(&dvParts[0]),
		q: (*C.ushort)(&q[0]), k: (*C.ushort)(&k[0]), v: (*C.ushort)(&v[0]), dout: (*C.ushort)(&dout[0]),
		lse: (*C.float)(&lse[0]), dsum: (*C.float)(&dsum[0]),
		b: ll(batch), s: ll(seq), h: ll(heads), kvh: ll(kvHeads), hd: ll(hd), causal: flag(causal)}
	if rc := C.h_attention_mma_grad(&a); rc != 0 {
		panic(fmt.Sprintf("hostc: attention_mma_dq/dkv failed (%d)", rc))
	}
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
	case "attention_f32", "attention_dq_f32", "attention_dkv_f32":
		// The plan's own grid, block and geometry (its last two
		// arguments).
		var run func(gx, gy, gz, block C.uint, a *C.struct_attn_args) C.int
		x := &C.struct_attn_args{}
		var dims int
		switch l.Kernel {
		case "attention_f32":
			run, dims = hAttention, 5
			x.o, x.lse, x.q, x.k, x.v = fp(0), fp(1), fp(2), fp(3), fp(4)
		case "attention_dq_f32":
			run, dims = hAttentionDQ, 7
			x.dq, x.q, x.k, x.v, x.lse_in, x.dout, x.dsum = fp(0), fp(1), fp(2), fp(3), fp(4), fp(5), fp(6)
		default:
			run, dims = hAttentionDKV, 8
			x.dk, x.dv, x.q, x.k, x.v, x.lse_in, x.dout, x.dsum = fp(0), fp(1), fp(2), fp(3), fp(4), fp(5), fp(6), fp(7)
		}
		x.b, x.s, x.h, x.kvh, x.hd, x.causal, x.lanes, x.tile = n(dims), n(dims+1), n(dims+2), n(dims+3), n(dims+4), n(dims+5), n(dims+6), n(dims+7)
		switch run(C.uint(l.Grid[0]), C.uint(l.Grid[1]), C.uint(l.Grid[2]), C.uint(l.Block), x) {
		case -1:
			return fmt.Errorf("hostc: %s: no memory for the stacks of a block of %d threads", l.Kernel, l.Block)
		case -2:
			return fmt.Errorf("hostc: %s: threads of a block ended while others waited at a barrier", l.Kernel)
		}
	case "attention_mma_fwd":
		x := &C.struct_mma_attn_args{out: fp(0), lse: fp(1), q: up(2), k: up(3), v: up(4),
			b: n(5), s: n(6), h: n(7), kvh: n(8), hd: n(9), causal: n(10)}
		if rc := C.h_mma_fwd_launch(C.uint(l.Grid[0]), C.uint(l.Grid[1]), C.uint(l.Grid[2]), C.uint(l.Block), x); rc != 0 {
			return fmt.Errorf("hostc: %s failed (%d)", l.Kernel, rc)
		}
	case "attention_mma_dq", "attention_mma_dkv":
		x := &C.struct_mma_grad_args{}
		o := 1
		if l.Kernel == "attention_mma_dq" {
			o, x.dq = 0, fp(0)
		} else {
			x.dk, x.dv = fp(0), fp(1)
		}
		x.q, x.k, x.v, x.lse, x.dout, x.dsum = up(o+1), up(o+2), up(o+3), fp(o+4), up(o+5), fp(o+6)
		x.b, x.s, x.h, x.kvh, x.hd, x.causal = n(o+7), n(o+8), n(o+9), n(o+10), n(o+11), n(o+12)
		gx, gy, gz, bl := C.uint(l.Grid[0]), C.uint(l.Grid[1]), C.uint(l.Grid[2]), C.uint(l.Block)
		var rc C.int
		if o == 0 {
			rc = C.h_mma_dq_launch(gx, gy, gz, bl, x)
		} else {
			rc = C.h_mma_dkv_launch(gx, gy, gz, bl, x)
		}
		if rc != 0 {
			return fmt.Errorf("hostc: %s failed (%d)", l.Kernel, rc)
		}
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
