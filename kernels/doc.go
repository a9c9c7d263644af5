// Package kernels is the pure-Go fp32 CPU backend: the forward and backward
// kernel of every op in the ir op table, AdamW, and bf16 rounding.
//
// What comes in: flat row-major []float32 buffers (ids and targets as
// []int32) plus their dims; "rows" is the product of a tensor's leading dims
// and d its last. The op meanings are those of shared/design/NUMERICS.md.
// What goes out: every kernel writes its outputs in full and reads nothing
// from them first. Backward kernels OVERWRITE their gradient outputs; the
// caller accumulates across micro-batches with AddInPlace. Buffer lengths
// are the caller's contract: a short buffer panics (a compiler bug, not a
// user error). The only user errors, an embedding id or a cross-entropy
// target out of range, come back as errors naming the value and position.
//
// Precision. Arithmetic is float32 except where a wider accumulator costs
// nothing and removes order sensitivity:
//   - row statistics (the mean of squares of rmsnorm, mean and variance of
//     layernorm), softmax normalisers (attention, cross entropy), the
//     cross-entropy mean, and sums over rows (norm weight/bias gradients,
//     the broadcast operand's gradient of + and *) accumulate in float64;
//   - transcendental functions (exp, log, erf, sin, cos) are evaluated in
//     float64 and rounded once to float32, as are AdamW's per-element
//     update and the rope angles;
//   - matmul accumulates each output in float32 in plain k order, the same
//     order as a naive triple loop whatever the blocking; attention's
//     scores, outputs and gradients are matmuls on the same microkernel
//     (its dK and dV sum query heads, then query blocks, in order), and
//     its per-row D = dout . out uses four float32 partial sums.
//
// SIMD. On amd64 CPUs with AVX2 and FMA (detected at start), matmul's
// microkernel is assembly (kernel_amd64.s): each output element in its own
// lane, one fused multiply-add per k step, so each sum is the k-order
// sequence of correctly rounded a*b+c (TestMatMulExactOrder checks it
// against big.Float). Elsewhere, and with -tags purego, the portable
// kernel rounds each product and each sum separately. The two paths give
// different bits for matmul and everything downstream of it, never
// different orders: on random data with k = 512 the outputs differ by at
// most about 1e-5 relative (up to a few hundred ulp where the sum cancels;
// TestMicroKernelPaths logs it), and tiny's losses over 20 steps of
// `amspc run` agree to 8e-10 relative. A job whose processes run on
// machines with and without AVX2 is therefore not bitwise reproducible
// across them. The Go compiler may
// also fuse a*b+c in Go code (arm64 always, amd64 with GOAMD64=v3), so the
// portable path's bits can differ between such builds; never between runs.
//
// Determinism. Every parallel kernel splits its outputs so that each output
// element is computed by exactly one goroutine, in an order that does not
// depend on the goroutine count or on scheduling; reductions that cross
// rows are split by columns. So results are bit-identical run to run and
// for any GOMAXPROCS.
//
// Scratch. Hot kernels allocate no data-sized buffers per call: matmul
// packing buffers, attention score rows and per-row norm statistics come
// from package pools and are reused across calls (what remains is a few
// small closure objects when a kernel fans out to goroutines).
package kernels
