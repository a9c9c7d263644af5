// Package kernels is the pure-Go fp32 CPU backend: the forward and backward
// kernel of every op in the ir op table, AdamW, and bf16 rounding.
//
// What comes in: flat row-major []float32 buffers (ids and targets as
// []int32) plus their dims; "rows" is the product of a tensor's leading dims
// and d its last. The op meanings are those of shared/design/NUMERICS.md.
// What goes out: every kernel writes its outputs in full and reads nothing
// from them first. Backward kernels OVERWRITE their gradient outputs; the
// program accumulates across micro-batches with add ops. Buffer lengths
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
//     update and the rope angles; exp is the package's own exp64
//     (fdlibm's algorithm, as Go's portable math.Exp, within 2 ulp of
//     math.Exp; 0 below e^-708), the others are package math's;
//   - matmul accumulates each output in float32 in plain k order, the same
//     order as a naive triple loop whatever the blocking; attention's
//     scores, outputs and gradients are matmuls on the same microkernel
//     (its dK and dV sum query heads, then query blocks, in order), and
//     its per-row D = dout . out uses four float32 partial sums.
//
// SIMD. On amd64 the widest instruction set the CPU has is chosen at
// start (x/sys/cpu; AMSPC_SIMD=avx2 or none narrows it):
//   - matmul's microkernel is assembly (kernel_amd64.s), a 12x32 tile of
//     AVX-512 registers or four 6x16 quarters of AVX2 ones: each output
//     element in its own lane, one fused multiply-add per k step, so each
//     sum is the k-order sequence of correctly rounded a*b+c on both
//     (TestMatMulISAs; TestMatMulExactOrder checks it against big.Float);
//   - exp64 runs four lanes at a time (AVX2) and AdamW four elements at a
//     time, each with the scalar code's operations in its order (no fused
//     multiply-adds, correctly rounded sqrt and divide), so with the
//     portable code's bits (TestExpPaths, TestAdamWPaths);
//   - NaN and Inf checks test the exponent bits eight lanes at a time.
//
// Without AVX2, and with -tags purego, the portable matmul kernel rounds
// each product and each sum separately. That is the one difference
// between the paths: it changes the bits of matmul and everything
// downstream of it, never an order. On random data with k = 512 the
// outputs differ by at most about 3e-5 relative (up to a few hundred ulp
// where the sum cancels; TestMicroKernelPaths logs it), and tiny's losses
// over 20 steps of `amspc run` agree to 8e-10 relative. A job whose
// processes run on machines with and without AVX2 is therefore not
// bitwise reproducible across them; with AVX2 and with AVX-512 it is. The
// Go compiler may also fuse a*b+c in Go code (arm64 always, amd64 with
// GOAMD64=v3), so the portable path's bits can differ between such builds
// (exp64 and AdamW's conversions forbid it; other kernels do not); never
// between runs.
//
// Determinism. Every parallel kernel splits its outputs so that each output
// element is computed by exactly one goroutine, in an order that does not
// depend on the goroutine count or on scheduling; reductions that cross
// rows are split by columns. So results are bit-identical run to run and
// for any GOMAXPROCS.
//
// Scratch. Hot kernels allocate no data-sized buffers per call: matmul
// packing buffers, attention score rows and per-row norm statistics come
// from package pools and are reused across calls, exponentials go through
// a 256-value array on the stack (what remains is a few small closure
// objects when a kernel fans out to goroutines). A kernel call uses up to
// Workers() goroutines (SetWorkers; the runtime gives each of a process's
// ranks its share of the cores).
package kernels
