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
#include <pthread.h>
#include "../shim.h"
#include "../ops.cu"
#include "../mma.cu"

#define LAUNCH(grid, call) do { gridDim.x = (grid); for (unsigned amsp_blk = 0; amsp_blk < (grid); amsp_blk++) { blockIdx.x = amsp_blk; call; } } while (0)

// A launch whose blocks run their threads as coroutines (shim.h), one
// OS thread switching between them: each runs until the block's next
// barrier or its end, in thread order; a barrier is passed once every
// thread is at it. Threads that end while others wait at a barrier are
// a divergent barrier (undefined on a GPU), reported as an error.
typedef void (*amsp_body)(const void *args);
enum { amsp_ready, amsp_waiting, amsp_done };
#define AMSP_CO_STACK (128 << 10)
struct amsp_co_state {
	ucontext_t sched, ctx[1024];
	char *stack[1024];
	unsigned char state[1024];
	unsigned cur;
	amsp_body fn;
	const void *args;
};

// Each OS thread has its own scheduler (launches on several threads run
// at once): on the heap, about 1 MiB of contexts being too much for
// thread-local storage, made by the thread's first such launch and freed
// with its stacks when the thread exits.
static __thread struct amsp_co_state *amsp_co;
static pthread_key_t amsp_co_key;
static pthread_once_t amsp_co_once = PTHREAD_ONCE_INIT;

static void amsp_co_free(void *p) {
	struct amsp_co_state *s = p;
	for (unsigned t = 0; t < 1024; t++) {
		free(s->stack[t]);
	}
	free(s);
}

static void amsp_co_key_init(void) { pthread_key_create(&amsp_co_key, amsp_co_free); }

static void amsp_co_entry(void) {
	amsp_co->fn(amsp_co->args);
	amsp_co->state[amsp_co->cur] = amsp_done; // then uc_link: the scheduler
}

static void amsp_co_barrier(void) {
	unsigned t = amsp_co->cur;
	amsp_co->state[t] = amsp_waiting;
	swapcontext(&amsp_co->ctx[t], &amsp_co->sched);
}

// amsp_coop_launch runs fn over the grid with blocks of block threads:
// 0; -1, no memory for the threads' stacks; -2, a divergent barrier.
static int amsp_coop_launch(amsp_body fn, const void *args, unsigned gx, unsigned gy, unsigned gz, unsigned block) {
	if (block == 0 || block > 1024) {
		return -1;
	}
	if (!amsp_co) {
		pthread_once(&amsp_co_once, amsp_co_key_init);
		if (!(amsp_co = calloc(1, sizeof *amsp_co))) {
			return -1;
		}
		pthread_setspecific(amsp_co_key, amsp_co);
	}
	for (unsigned t = 0; t < block; t++) {
		if (!amsp_co->stack[t] && !(amsp_co->stack[t] = malloc(AMSP_CO_STACK))) {
			return -1;
		}
	}
	amsp_co->fn = fn;
	amsp_co->args = args;
	blockDim.x = block;
	gridDim.x = gx; gridDim.y = gy; gridDim.z = gz;
	memset(amsp_xchg_turn, 0, sizeof amsp_xchg_turn);
	int rc = 0;
	amsp_barrier = amsp_co_barrier;
	for (unsigned bz = 0; bz < gz && rc == 0; bz++) for (unsigned by = 0; by < gy && rc == 0; by++) for (unsigned bx = 0; bx < gx && rc == 0; bx++) {
		blockIdx.x = bx; blockIdx.y = by; blockIdx.z = bz;
		for (unsigned t = 0; t < block; t++) {
			getcontext(&amsp_co->ctx[t]);
			amsp_co->ctx[t].uc_stack.ss_sp = amsp_co->stack[t];
			amsp_co->ctx[t].uc_stack.ss_size = AMSP_CO_STACK;
			amsp_co->ctx[t].uc_link = &amsp_co->sched;
			makecontext(&amsp_co->ctx[t], amsp_co_entry, 0);
			amsp_co->state[t] = amsp_ready;
		}
		for (;;) {
			unsigned waiting = 0, done = 0;
			for (unsigned t = 0; t < block; t++) {
				amsp_co->cur = t;
				threadIdx.x = t;
				swapcontext(&amsp_co->sched, &amsp_co->ctx[t]);
				if (amsp_co->state[t] == amsp_waiting) {
					waiting++;
					amsp_co->state[t] = amsp_ready;
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

// One wrapper a kernel and h_launch, the dispatcher, generated from the
// kernels' declarations (kernels/gpu/internal/kernelgen).
#include "launch_gen.h"
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

// launchIndex is each kernel's number in h_launch: its index in
// launchKernels (launch_gen.go).
var launchIndex = func() map[string]int {
	m := make(map[string]int, len(launchKernels))
	for k, kern := range launchKernels {
		m[kern.Name] = k
	}
	return m
}()

// mmaKernels are mma.cu's kernels: their shared memory on the shim is
// a plain static array of mma.cu's (AMSP_MMA_SHARED), not thread-local
// as the rest of the shim's state is, so mmaMu runs them one at a time.
var (
	mmaKernels = func() map[string]bool {
		m := map[string]bool{}
		for _, k := range gpu.MMAKernels {
			m[k.Name] = true
		}
		return m
	}()
	mmaMu sync.Mutex
)

// A shimLaunch is a launch ready to run on the shim: its kernel's number
// in h_launch, its arguments as words, the grid and block it runs with.
// It holds no reference to the gpu.Launch or the addresses it came from.
type shimLaunch struct {
	name         string
	k            int
	w            []C.ulonglong
	gx, gy, gz   int
	block, asked int
}

// prepare makes l, whose arguments l.CheckArgs has checked, with its
// pointer arguments at addrs, a shimLaunch. Every launch comes here: the
// arguments become 64-bit words by the kernel's parameter kinds
// (launch_gen.h converts them back), and the grid is the kernel shape's
// on the shim: an elementwise kernel's at most maxGrid one-thread blocks
// (its loops stride), a row kernel's a block per row, an attention
// kernel's (ops.cu's, mma.cu's) the launch's own grid and block, their
// threads coroutines.
func prepare(l *gpu.Launch, addrs []uint64) (*shimLaunch, error) {
	k, ok := launchIndex[l.Kernel]
	if !ok {
		return nil, fmt.Errorf("hostc: no kernel %s", l.Kernel)
	}
	kern := &launchKernels[k]
	if len(l.Args) != len(kern.Params) {
		return nil, fmt.Errorf("hostc: %s takes %d arguments, the launch passes %d", l.Kernel, len(kern.Params), len(l.Args))
	}
	w := make([]C.ulonglong, max(len(kern.Params), 1))
	for i, p := range kern.Params {
		a := l.Args[i]
		switch p {
		case gpu.Ptr:
			if a.Kind == gpu.Null {
				break
			}
			if i >= len(addrs) {
				return nil, fmt.Errorf("hostc: %s: no address for argument %d", l.Kernel, i)
			}
			w[i] = C.ulonglong(addrs[i])
		case gpu.I64:
			w[i] = C.ulonglong(a.I)
		case gpu.F32:
			w[i] = C.ulonglong(math.Float32bits(float32(a.F)))
		case gpu.F64:
			w[i] = C.ulonglong(math.Float64bits(a.F))
		default:
			return nil, fmt.Errorf("hostc: %s: parameter %d of kind %c", l.Kernel, i, p)
		}
	}
	gx, gy, gz, block := l.Grid[0], l.Grid[1], l.Grid[2], l.Block
	switch kern.Shape {
	case gpu.Elementwise:
		gx, gy, gz, block = min(l.Grid[0]*l.Block, maxGrid), 1, 1, 1
	case gpu.Row:
		gx, gy, gz, block = l.Grid[0], 1, 1, 1
	}
	return &shimLaunch{name: l.Kernel, k: k, w: w, gx: gx, gy: gy, gz: gz, block: block, asked: l.Block}, nil
}

// run runs the launch to its end on the calling thread.
func (s *shimLaunch) run() error {
	if mmaKernels[s.name] {
		mmaMu.Lock()
		defer mmaMu.Unlock()
	}
	switch C.h_launch(C.int(s.k), &s.w[0], C.uint(s.gx), C.uint(s.gy), C.uint(s.gz), C.uint(s.block)) {
	case 0:
		return nil
	case -1:
		return fmt.Errorf("hostc: %s: no memory for the stacks of a block of %d threads", s.name, s.asked)
	case -2:
		return fmt.Errorf("hostc: %s: threads of a block ended while others waited at a barrier", s.name)
	default:
		return fmt.Errorf("hostc: %s: launch_gen.h has no kernel %d", s.name, s.k)
	}
}

// launch runs l, whose arguments l.CheckArgs has checked, with its
// pointer arguments at addrs, now.
func launch(l *gpu.Launch, addrs []uint64) error {
	s, err := prepare(l, addrs)
	if err != nil {
		return err
	}
	return s.run()
}

// hostCall is a launch's arguments in Go memory, for the helpers below:
// its gpu.Args and their addresses (pinned slices' first elements, 0 for
// the other arguments). A hostCall serves one launch.
type hostCall struct {
	args  []gpu.Arg
	addrs []uint64
	pin   runtime.Pinner
}

// ptr passes p, nil as a null pointer.
func (c *hostCall) ptr(p unsafe.Pointer) {
	if p == nil {
		c.args, c.addrs = append(c.args, gpu.Arg{Kind: gpu.Null}), append(c.addrs, 0)
		return
	}
	c.pin.Pin(p)
	c.args, c.addrs = append(c.args, gpu.Arg{Kind: gpu.Operand}), append(c.addrs, uint64(uintptr(p)))
}

// elem0 is x's first element, nil for an empty x (a null pointer).
func elem0[T any](x []T) unsafe.Pointer {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Pointer(&x[0])
}

func (c *hostCall) f32(xs ...[]float32) {
	for _, x := range xs {
		c.ptr(elem0(x))
	}
}
func (c *hostCall) u16(xs ...[]uint16) {
	for _, x := range xs {
		c.ptr(elem0(x))
	}
}
func (c *hostCall) i32(xs ...[]int32) {
	for _, x := range xs {
		c.ptr(elem0(x))
	}
}
func (c *hostCall) ints(vs ...int) {
	for _, v := range vs {
		c.args, c.addrs = append(c.args, gpu.Arg{Kind: gpu.Int, I: int64(v)}), append(c.addrs, 0)
	}
}
func (c *hostCall) float(v float32) {
	c.args, c.addrs = append(c.args, gpu.Arg{Kind: gpu.Float32, F: float64(v)}), append(c.addrs, 0)
}
func (c *hostCall) doubles(vs ...float64) {
	for _, v := range vs {
		c.args, c.addrs = append(c.args, gpu.Arg{Kind: gpu.Float64, F: v}), append(c.addrs, 0)
	}
}

// run runs l with c's arguments when l has none (else l's, the first of
// them c's: an attention geometry appends its own integers); a failure
// panics (these are the tests' helpers).
func (c *hostCall) run(l gpu.Launch) {
	defer c.pin.Unpin()
	if l.Args == nil {
		l.Args = c.args
	}
	addrs := c.addrs
	for len(addrs) < len(l.Args) {
		addrs = append(addrs, 0)
	}
	if err := l.CheckArgs(); err != nil {
		panic("hostc: " + err.Error())
	}
	if err := launch(&l, addrs); err != nil {
		panic(err)
	}
}

// each runs an elementwise kernel over n elements with the grid the
// helpers have always given it: one-thread blocks, one an element, at
// most maxGrid.
func (c *hostCall) each(kernel string, n int) {
	c.run(gpu.Launch{Kernel: kernel, Grid: [3]int{gpu.Grid1D(int64(n), 1, maxGrid), 1, 1}, Block: 1})
}

// rows runs a row kernel over rows rows: a block per row (at least one).
func (c *hostCall) rows(kernel string, rows int) {
	c.run(gpu.Launch{Kernel: kernel, Grid: [3]int{max(rows, 1), 1, 1}, Block: 1})
}

// Add is add_f32: out = a + b, b repeated over rows when shorter.
func Add(out, a, b []float32) {
	var c hostCall
	c.f32(out, a, b)
	c.ints(len(a), len(b))
	c.each("add_f32", len(a))
}

// Mul is mul_f32.
func Mul(out, a, b []float32) {
	var c hostCall
	c.f32(out, a, b)
	c.ints(len(a), len(b))
	c.each("mul_f32", len(a))
}

// MulGrad is kernels.MulGrad: mul_grad_f32, then col_sum_f32 for a
// broadcast b's gradient.
func MulGrad(da, db, a, b, dy []float32) {
	n, bn := len(a), len(b)
	var same []float32 // db when mul_grad_f32 writes it: b not broadcast
	if bn == n {
		same = db
	}
	var c hostCall
	c.f32(da, same, a, b, dy)
	c.ints(n, bn)
	c.each("mul_grad_f32", n)
	if bn < n && db != nil {
		var s hostCall
		s.f32(db, dy, a)
		s.ints(n/bn, bn)
		s.each("col_sum_f32", bn)
	}
}

// AddGradBroadcast is kernels.AddGradBroadcast: col_sum_f32 of dy.
func AddGradBroadcast(db, dy []float32) {
	d := len(db)
	var c hostCall
	c.f32(db, dy, nil)
	c.ints(len(dy)/d, d)
	c.each("col_sum_f32", d)
}

// Transpose is transpose_f32: out [n, m] = x^T.
func Transpose(out, x []float32, m, n int) {
	var c hostCall
	c.f32(out, x)
	c.ints(m, n)
	c.each("transpose_f32", m*n)
}

// unary runs kernel (out, x, n) over x.
func unary(kernel string, out, x []float32) {
	var c hostCall
	c.f32(out, x)
	c.ints(len(x))
	c.each(kernel, len(x))
}

// unaryGrad runs kernel (dx, x, dy, n) over x.
func unaryGrad(kernel string, dx, x, dy []float32) {
	var c hostCall
	c.f32(dx, x, dy)
	c.ints(len(x))
	c.each(kernel, len(x))
}

// SiLU, SiLUGrad, GELU and GELUGrad are their kernels.
func SiLU(out, x []float32)        { unary("silu_f32", out, x) }
func SiLUGrad(dx, x, dy []float32) { unaryGrad("silu_grad_f32", dx, x, dy) }
func GELU(out, x []float32)        { unary("gelu_f32", out, x) }
func GELUGrad(dx, x, dy []float32) { unaryGrad("gelu_grad_f32", dx, x, dy) }

// SwiGLU, SwiGLUGrad, GeGLUTanh and GeGLUTanhGrad are their kernels:
// out = act(a) * b, a and b of equal length, and its da and db given dy.
func SwiGLU(out, a, b []float32)               { gated("swiglu_f32", out, a, b) }
func SwiGLUGrad(da, db, a, b, dy []float32)    { gatedGrad("swiglu_grad_f32", da, db, a, b, dy) }
func GeGLUTanh(out, a, b []float32)            { gated("geglu_tanh_f32", out, a, b) }
func GeGLUTanhGrad(da, db, a, b, dy []float32) { gatedGrad("geglu_tanh_grad_f32", da, db, a, b, dy) }

// gated runs kernel(out, a, b, n), gatedGrad kernel(da, db, a, b, dy, n).
func gated(kernel string, out, a, b []float32) {
	var c hostCall
	c.f32(out, a, b)
	c.ints(len(a))
	c.each(kernel, len(a))
}

func gatedGrad(kernel string, da, db, a, b, dy []float32) {
	var c hostCall
	c.f32(da, db, a, b, dy)
	c.ints(len(a))
	c.each(kernel, len(a))
}

// RMSNorm is rmsnorm_f32.
func RMSNorm(out, x, w []float32, rows, d int, eps float32) {
	var c hostCall
	c.f32(out, x, w)
	c.ints(rows, d)
	c.float(eps)
	c.rows("rmsnorm_f32", rows)
}

// RMSNormGrad is rmsnorm_grad_f32 then rmsnorm_grad_w_f32.
func RMSNormGrad(dx, dw, x, w, dy []float32, rows, d int, eps float32) {
	rstd := make([]float32, rows)
	var c hostCall
	c.f32(dx, rstd, x, w, dy)
	c.ints(rows, d)
	c.float(eps)
	c.rows("rmsnorm_grad_f32", rows)
	var g hostCall
	g.f32(dw, x, dy, rstd)
	g.ints(rows, d)
	g.each("rmsnorm_grad_w_f32", d)
}

// LayerNorm is layernorm_f32.
func LayerNorm(out, x, w, b []float32, rows, d int, eps float32) {
	var c hostCall
	c.f32(out, x, w, b)
	c.ints(rows, d)
	c.float(eps)
	c.rows("layernorm_f32", rows)
}

// LayerNormGrad is layernorm_grad_f32 then layernorm_grad_wb_f32.
func LayerNormGrad(dx, dw, db, x, w, dy []float32, rows, d int, eps float32) {
	stats := make([]float32, 2*rows)
	var c hostCall
	c.f32(dx, stats, x, w, dy)
	c.ints(rows, d)
	c.float(eps)
	c.rows("layernorm_grad_f32", rows)
	var g hostCall
	g.f32(dw, db, x, dy, stats)
	g.ints(rows, d)
	g.each("layernorm_grad_wb_f32", d)
}

// rope runs rope_f32 turning by sign, with f's frequencies.
func rope(out, x []float32, batch, seq, heads, hd int, f kernels.RoPEFreq, sign float32) {
	freqs := f.Freqs(hd)
	var c hostCall
	c.f32(out, x)
	c.ints(batch, seq, heads, hd)
	c.ptr(elem0(freqs))
	c.float(sign)
	c.each("rope_f32", len(x)/2)
}

// RoPE and RoPEGrad are rope_f32 turning forward and back.
func RoPE(out, x []float32, batch, seq, heads, hd int, f kernels.RoPEFreq) {
	rope(out, x, batch, seq, heads, hd, f, 1)
}

func RoPEGrad(dx, dy []float32, batch, seq, heads, hd int, f kernels.RoPEFreq) {
	rope(dx, dy, batch, seq, heads, hd, f, -1)
}

// Embed is embed_f32; an id out of range is reported as kernels.Embed
// reports it (the first one).
func Embed(out []float32, ids []int32, table []float32, vocab, d int) error {
	bad := gpu.NoneNonFinite
	var c hostCall
	c.f32(out)
	c.i32(ids)
	c.f32(table)
	c.ints(len(ids), vocab, d)
	c.ptr(unsafe.Pointer(&bad))
	c.each("embed_f32", len(ids)*d)
	if pos, id := gpu.BadID(bad); pos >= 0 {
		return fmt.Errorf("embed: id %d at position %d is outside [0, %d)", id, pos, vocab)
	}
	return nil
}

// EmbedGrad is embed_grad_f32 over the positions gpu.Positions lists.
func EmbedGrad(dtable []float32, ids []int32, dy []float32, vocab, d int) {
	start, pos := gpu.Positions(ids, vocab)
	var c hostCall
	c.f32(dtable)
	c.i32(start, pos)
	c.f32(dy)
	c.ints(vocab, d)
	c.each("embed_grad_f32", vocab*d)
}

// CrossEntropy is cross_entropy_f32, then mean_loss (checked against
// gpu.MeanLoss).
func CrossEntropy(logits []float32, targets []int32, rows, vocab int) (float64, error) {
	loss := make([]float64, max(rows, 1))
	bad := gpu.NoneNonFinite
	if rows > 0 {
		var c hostCall
		c.ptr(elem0(loss))
		c.f32(logits)
		c.i32(targets)
		c.ints(rows, vocab)
		c.ptr(unsafe.Pointer(&bad))
		c.rows("cross_entropy_f32", rows)
	}
	if pos, id := gpu.BadID(bad); pos >= 0 {
		return 0, fmt.Errorf("cross_entropy: target %d at position %d is outside [0, %d)", id, pos, vocab)
	}
	var mean float64
	var out float32
	var c hostCall
	c.ptr(unsafe.Pointer(&out))
	c.ptr(unsafe.Pointer(&mean))
	c.ptr(elem0(loss))
	c.ints(rows)
	c.rows("mean_loss", 1)
	if want := gpu.MeanLoss(loss[:rows]); math.Float64bits(mean) != math.Float64bits(want) || out != float32(want) {
		return 0, fmt.Errorf("hostc: mean_loss %v (%v), gpu.MeanLoss %v", mean, out, want)
	}
	return mean, nil
}

// CrossEntropyGrad is cross_entropy_grad_f32 with f = scale/rows.
func CrossEntropyGrad(dlogits, logits []float32, targets []int32, rows, vocab int, scale float32) {
	var c hostCall
	c.f32(dlogits, logits)
	c.i32(targets)
	c.ints(rows, vocab)
	c.doubles(float64(scale) / float64(rows))
	c.rows("cross_entropy_grad_f32", rows)
}

// AdamW is adamw_f32 with gpu.AdamWArgs; decayed holds [lo, hi) pairs.
func AdamW(p, m, v, g []float32, step int, lr, beta1, beta2, eps, weightDecay float64, decayed [][2]int) {
	k := gpu.AdamWArgs(step, lr, beta1, beta2, eps, weightDecay)
	flat := make([]int64, 0, 2*len(decayed))
	for _, r := range decayed {
		flat = append(flat, int64(r[0]), int64(r[1]))
	}
	var c hostCall
	c.f32(p, m, v, g)
	c.ints(len(p))
	c.ptr(elem0(flat))
	c.ints(len(decayed))
	c.ptr(unsafe.Pointer(&k[0]))
	c.each("adamw_f32", len(p))
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Attention is attention_f32 with the GPU's geometry.
func Attention(out, lse, q, k, v []float32, batch, seq, heads, kvHeads, hd int, causal bool) {
	var c hostCall
	c.f32(out, lse, q, k, v)
	c.ints(batch, seq, heads, kvHeads, hd, boolInt(causal))
	c.run(gpu.AttentionGeometry(hd).Launch("attention_f32", int64(seq), int64(heads), int64(batch), c.args...))
}

// AttentionGrad is attention_dsum_f32, attention_dq_f32,
// attention_dkv_f32 and (grouped KV heads) attention_dkv_sum_f32, as the
// GPU's launch plan runs them.
func AttentionGrad(dq, dk, dv, q, k, v, out, lse, dout []float32, batch, seq, heads, kvHeads, hd int, causal bool) {
	dsum := make([]float32, batch*heads*seq)
	var s hostCall
	s.f32(dsum, out, dout)
	s.ints(batch, seq, heads, hd)
	s.each("attention_dsum_f32", len(dsum))
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
		var g hostCall
		g.f32(dk, dv, pk, pv)
		g.ints(batch, seq, heads, kvHeads, hd)
		g.each("attention_dkv_sum_f32", len(dk))
	}
}

// MMAProbe is mma.cu's mma_probe (one warp): d = a b + c for a 16x16
// bf16 a and a 16x8 bf16 b (row-major, bf16 as its top 16 bits) and a
// 16x8 fp32 c.
func MMAProbe(a, b []uint16, c []float32) []float32 {
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
	n := len(x)
	var round hostCall
	round.f32(r)
	round.ints(n)
	round.each("bf16_round", n)
	var pack hostCall
	pack.u16(bits)
	pack.f32(r)
	pack.ints(n)
	pack.each("bf16_pack", n)
	var widen hostCall
	widen.f32(back)
	widen.u16(bits)
	widen.ints(n)
	widen.each("bf16_widen", n)
	return bits, back
}

// BF16Finish is bf16_finish of x: its bf16 bits and the first NaN's or
// infinity's index after rounding (-1: none).
func BF16Finish(x []float32) (bits []uint16, first int) {
	bits = make([]uint16, len(x))
	if len(x) == 0 {
		return bits, -1
	}
	flag := gpu.NoneNonFinite
	var c hostCall
	c.u16(bits)
	c.f32(x)
	c.ints(len(x))
	c.ptr(unsafe.Pointer(&flag))
	c.each("bf16_finish", len(x))
	first, _ = gpu.NonFinite(flag)
	return bits, first
}

// FirstNonFinite is first_nonfinite_f32: the smallest index of a NaN or
// infinity, or -1.
func FirstNonFinite(x []float32) int {
	flag := gpu.NoneNonFinite
	var c hostCall
	c.f32(x)
	c.ints(len(x))
	c.ptr(unsafe.Pointer(&flag))
	c.each("first_nonfinite_f32", len(x))
	i, _ := gpu.NonFinite(flag)
	return i
}
