// amspc's CUDA kernels for every op but matmul (cuBLASLt): elementwise
// ops and their gradients, norms, RoPE, embedding, cross entropy, causal
// attention with grouped KV heads (FlashAttention's online softmax),
// AdamW and the non-finite check. NVRTC compiles this file at
// start for the device's architecture; with shim.h it also compiles as
// plain C, so the host tests check every kernel against package kernels.
//
// Storage is fp32. Each kernel computes what its Go twin in package
// kernels computes, with the same float64 intermediates; sums over rows
// that the Go kernels take in row order are taken in row order here too
// (one thread per column), so they give the Go kernels' bits. Sums along
// a row use a block-wide tree (a different order: within 1e-5).
//
// Launch geometry (kernels/gpu/gpu.go): "elementwise" kernels take any
// grid and loop over their elements with the grid's stride; "row"
// kernels take one block per row and a power-of-two block of at most
// AMSP_BLOCK threads; "column" kernels loop over columns with the grid's
// stride.
//
// The line right above each kernel (here and in mma.cu) is its launch
// annotation, "// amspc:launch SHAPE", SHAPE one of
//   elementwise  any grid and block (column kernels too)
//   row          one block per row, as above
//   attention    the launch's own grid and block, every thread of a
//                block taking part (barriers, shuffles, tensor-core
//                products): on the host its threads run as coroutines
// A C declaration cannot say how its kernel is launched; go generate
// ./kernels/gpu (kernels/gpu/internal/kernelgen) reads the declarations
// and their annotations into package gpu's Kernels and MMAKernels and
// package hostc's launch wrappers, and refuses a kernel without one. A
// kernel's parameters are pointers, long long, float or double.

#ifdef __CUDACC__
#define AMSP_EXTERN_C extern "C"
// amsp_globaltimer is the GPU's global nanosecond timer.
__device__ __forceinline__ unsigned long long amsp_globaltimer(void) {
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}
#endif

#define AMSP_BLOCK 256

// AMSP_AHEAD is how many rows a column kernel loads before it adds them
// (in row order): their memory latencies overlap.
#define AMSP_AHEAD 16

#define GRID_STRIDE(i, n) \
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)

// block_sum returns the sum of v over the block's threads, added in a
// fixed tree order; every thread gets it. red holds AMSP_BLOCK doubles.
__device__ double block_sum(double v, double *red) {
	unsigned t = threadIdx.x;
	red[t] = v;
	__syncthreads();
	for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
		if (t < s) {
			red[t] += red[t + s];
		}
		__syncthreads();
	}
	double r = red[0];
	__syncthreads();
	return r;
}

// block_max returns the largest v over the block's threads.
__device__ float block_max(float v, float *red) {
	unsigned t = threadIdx.x;
	red[t] = v;
	__syncthreads();
	for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
		if (t < s && red[t + s] > red[t]) {
			red[t] = red[t + s];
		}
		__syncthreads();
	}
	float r = red[0];
	__syncthreads();
	return r;
}

// out = a + b; b has bn elements, repeated over rows when bn < n.
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void add_f32(float *out, const float *a, const float *b, long long n, long long bn) {
	GRID_STRIDE(i, n) { out[i] = a[i] + b[i % bn]; }
}

// out = a * b with add_f32's broadcast rule.
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void mul_f32(float *out, const float *a, const float *b, long long n, long long bn) {
	GRID_STRIDE(i, n) { out[i] = a[i] * b[i % bn]; }
}

// da = dy * b (broadcast as in mul_f32), and db = dy * a when b is not
// broadcast (bn == n); a broadcast db is col_sum_f32's. A null da or db is
// skipped.
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void mul_grad_f32(float *da, float *db, const float *a, const float *b, const float *dy, long long n,
	long long bn) {
	GRID_STRIDE(i, n) {
		if (da) {
			da[i] = dy[i] * b[i % bn];
		}
		if (db && bn == n) {
			db[i] = dy[i] * a[i];
		}
	}
}

// out[j] = sum over rows r, in order, of x[r,j] (times y[r,j] as a float
// product when y is not null), in double: the gradient of a broadcast
// operand of + (y null) or of * (x = dy, y = a).
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void col_sum_f32(float *out, const float *x, const float *y, long long rows, long long d) {
	GRID_STRIDE(j, d) {
		double acc = 0;
		long long r = 0;
		for (; r + AMSP_AHEAD <= rows; r += AMSP_AHEAD) { // the loads of AMSP_AHEAD rows, then their sum in order
			float t[AMSP_AHEAD];
#pragma unroll
			for (int u = 0; u < AMSP_AHEAD; u++) {
				float v = x[(r + u) * d + j];
				t[u] = y ? v * y[(r + u) * d + j] : v;
			}
#pragma unroll
			for (int u = 0; u < AMSP_AHEAD; u++) {
				acc += (double)t[u];
			}
		}
		for (; r < rows; r++) {
			float v = x[r * d + j];
			acc += y ? (double)(v * y[r * d + j]) : (double)v;
		}
		out[j] = (float)acc;
	}
}

// out = x^T for x [m, n] (out [n, m]).
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void transpose_f32(float *out, const float *x, long long m, long long n) {
	GRID_STRIDE(k, m * n) {
		long long i = k / n, j = k % n;
		out[j * m + i] = x[k];
	}
}

// to_parts_f32 lays x, of outer x mid x inner elements, out as its parts
// parts along the middle dimension one after another (sequence
// parallelism's layout around a collective of parts); from_parts_f32
// undoes it. Each thread writes one element of out.
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void to_parts_f32(float *out, const float *x, long long outer, long long mid, long long inner, long long parts) {
	long long run = mid / parts * inner, size = outer * run;
	GRID_STRIDE(i, outer * mid * inner) {
		long long p = i / size, rem = i % size;
		out[i] = x[rem / run * mid * inner + p * run + rem % run];
	}
}

// amspc:launch elementwise
AMSP_EXTERN_C __global__ void from_parts_f32(float *out, const float *x, long long outer, long long mid, long long inner, long long parts) {
	long long run = mid / parts * inner, size = outer * run;
	GRID_STRIDE(j, outer * mid * inner) {
		long long o = j / (mid * inner), rem = j % (mid * inner);
		out[j] = x[rem / run * size + o * run + rem % run];
	}
}

// The elementwise ops' arithmetic, shared by the fp32 kernels and the
// storage-typed (_st) ones below, so the two give the same bits.
__device__ __forceinline__ float silu_op(float x) {
	double v = x;
	return (float)(v / (1 + exp(-v)));
}

__device__ __forceinline__ float silu_grad_op(float x, float dy) {
	double v = x;
	double s = 1 / (1 + exp(-v));
	return (float)((double)dy * s * (1 + v * (1 - s)));
}

__device__ __forceinline__ float gelu_op(float x) {
	double v = x;
	return (float)(0.5 * v * (1 + erf(v / 1.4142135623730951)));
}

__device__ __forceinline__ float gelu_grad_op(float x, float dy) {
	double v = x;
	double cdf = 0.5 * (1 + erf(v / 1.4142135623730951));
	return (float)((double)dy * (cdf + v * (0.3989422804014327 * exp(-0.5 * v * v))));
}

__device__ __forceinline__ float gelu_tanh_op(float x) {
	double v = x;
	return (float)(0.5 * v * (1 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))));
}

__device__ __forceinline__ float gelu_tanh_grad_op(float x, float dy) {
	double v = x;
	double t = tanh(0.7978845608028654 * (v + 0.044715 * v * v * v));
	double d = 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * v * v);
	return (float)((double)dy * d);
}

// out = x * sigmoid(x), the exponential in double.
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void silu_f32(float *out, const float *x, long long n) {
	GRID_STRIDE(i, n) { out[i] = silu_op(x[i]); }
}

// dx = dy * s * (1 + x*(1-s)), s = sigmoid(x).
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void silu_grad_f32(float *dx, const float *x, const float *dy, long long n) {
	GRID_STRIDE(i, n) { dx[i] = silu_grad_op(x[i], dy[i]); }
}

// out = silu(a) * b (equal lengths), the fusion of silu_f32 then mul_f32
// with their bits: t is silu_f32's fp32 value, then one float product.
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void swiglu_f32(float *out, const float *a, const float *b, long long n) {
	GRID_STRIDE(i, n) { out[i] = silu_op(a[i]) * b[i]; }
}

// The gradients of swiglu_f32 with the bits of the unfused kernels:
// db = dy * t (mul_f32), dt = dy * b rounded to float (mul_f32), and
// da = silu_grad_f32's value from dt.
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void swiglu_grad_f32(float *da, float *db, const float *a, const float *b, const float *dy,
	long long n) {
	GRID_STRIDE(i, n) {
		float x = a[i], g = dy[i];
		db[i] = g * silu_op(x);
		da[i] = silu_grad_op(x, g * b[i]);
	}
}

// out = x/2 * (1 + erf(x/sqrt 2)), the exact GELU.
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void gelu_f32(float *out, const float *x, long long n) {
	GRID_STRIDE(i, n) { out[i] = gelu_op(x[i]); }
}

// dx = dy * (Phi(x) + x*phi(x)).
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void gelu_grad_f32(float *dx, const float *x, const float *dy, long long n) {
	GRID_STRIDE(i, n) { dx[i] = gelu_grad_op(x[i], dy[i]); }
}

// GELU's tanh approximation: out = 0.5 x (1 + tanh(sqrt(2/pi) (x +
// 0.044715 x^3))), in double.
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void gelu_tanh_f32(float *out, const float *x, long long n) {
	GRID_STRIDE(i, n) { out[i] = gelu_tanh_op(x[i]); }
}

// dx = dy * (0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 0.044715 x^2)),
// t the tanh above.
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void gelu_tanh_grad_f32(float *dx, const float *x, const float *dy, long long n) {
	GRID_STRIDE(i, n) { dx[i] = gelu_tanh_grad_op(x[i], dy[i]); }
}

// out = x * c in fp32 (c already rounded to fp32, as PyTorch multiplies an
// fp32 tensor by a Python float): the Go kernel's bits.
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void scale_f32(float *out, const float *x, long long n, float c) {
	GRID_STRIDE(i, n) {
		out[i] = x[i] * c;
	}
}

// Storage-typed elementwise kernels: each of the fp32 kernels above in
// one pass over bf16 or fp32 tensors. Bit k of bf set says the kernel's
// parameter k (counting every parameter from 0) is bf16, clear fp32.
// Operands load as bf16_widen widens them; results store as bf16_finish
// rounds them (bf16) or as they are (fp32), and *first (all ones before
// the launch) is flagged as first_nonfinite_f32 flags the stored values.
// So a kernel gives the bits, and the flag, of bf16_widen, its fp32
// twin, then bf16_finish or first_nonfinite_f32.

// st_load is element i of p, parameter k of a kernel with mask bf.
__device__ __forceinline__ float st_load(const void *p, long long i, long long bf, int k) {
	if ((bf >> k) & 1) {
		return __uint_as_float((unsigned)((const unsigned short *)p)[i] << 16);
	}
	return ((const float *)p)[i];
}

// st_round is x as parameter k of a kernel with mask bf stores it and
// st_load reads it back: rounded to bf16 (nearest even; a NaN stays one)
// when bit k is set, else x.
__device__ __forceinline__ float st_round(float x, long long bf, int k) {
	if (!((bf >> k) & 1)) {
		return x;
	}
	unsigned b = __float_as_uint(x);
	if ((b & 0x7f800000u) != 0x7f800000u) {
		b += 0x7fffu + ((b >> 16) & 1u);
	} else if (b & 0x007fffffu) {
		b |= 0x00400000u;
	}
	return __uint_as_float(b & 0xffff0000u);
}

// st_store stores x to element i of p, parameter k of a kernel with mask
// bf, and flags it in *first (when first is not null) when it is a NaN
// or an infinity as stored.
__device__ __forceinline__ void st_store(void *p, long long i, float x, long long bf, int k, unsigned long long *first) {
	float v = st_round(x, bf, k);
	if ((bf >> k) & 1) {
		((unsigned short *)p)[i] = (unsigned short)(__float_as_uint(v) >> 16);
	} else {
		((float *)p)[i] = x;
	}
	if (first && !(v - v == 0)) {
		atomicMin(first, (unsigned long long)i << 2 | (v != v ? 0u : v > 0 ? 1u : 2u));
	}
}

// st_bits is mask bf's bits k0, k1 and k2 as bits 0, 1 and 2: a kernel's
// mask as a body written for other parameter positions takes it.
__device__ __forceinline__ long long st_bits(long long bf, int k0, int k1, int k2) {
	return ((bf >> k0) & 1) | ((bf >> k1) & 1) << 1 | ((bf >> k2) & 1) << 2;
}

// add_f32 on storage bf: out (bit 0), a (1), b (2).
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void add_st(void *out, const void *a, const void *b, long long n, long long bn, long long bf,
	unsigned long long *first) {
	GRID_STRIDE(i, n) { st_store(out, i, st_load(a, i, bf, 1) + st_load(b, i % bn, bf, 2), bf, 0, first); }
}

// mul_f32 on storage bf: out (bit 0), a (1), b (2).
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void mul_st(void *out, const void *a, const void *b, long long n, long long bn, long long bf,
	unsigned long long *first) {
	GRID_STRIDE(i, n) { st_store(out, i, st_load(a, i, bf, 1) * st_load(b, i % bn, bf, 2), bf, 0, first); }
}

// silu_f32 on storage bf: out (bit 0), x (1).
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void silu_st(void *out, const void *x, long long n, long long bf, unsigned long long *first) {
	GRID_STRIDE(i, n) { st_store(out, i, silu_op(st_load(x, i, bf, 1)), bf, 0, first); }
}

// silu_grad_f32 on storage bf: dx (bit 0), x (1), dy (2).
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void silu_grad_st(void *dx, const void *x, const void *dy, long long n, long long bf,
	unsigned long long *first) {
	GRID_STRIDE(i, n) { st_store(dx, i, silu_grad_op(st_load(x, i, bf, 1), st_load(dy, i, bf, 2)), bf, 0, first); }
}

// swiglu_f32 on storage bf: out (bit 0), a (1), b (2).
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void swiglu_st(void *out, const void *a, const void *b, long long n, long long bf,
	unsigned long long *first) {
	GRID_STRIDE(i, n) { st_store(out, i, silu_op(st_load(a, i, bf, 1)) * st_load(b, i, bf, 2), bf, 0, first); }
}

// swiglu_grad_f32 on storage bf: da (bit 0), db (1), a (2), b (3), dy (4);
// first_da and first_db flag da and db.
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void swiglu_grad_st(void *da, void *db, const void *a, const void *b, const void *dy, long long n,
	long long bf, unsigned long long *first_da, unsigned long long *first_db) {
	GRID_STRIDE(i, n) {
		float x = st_load(a, i, bf, 2), g = st_load(dy, i, bf, 4);
		st_store(db, i, g * silu_op(x), bf, 1, first_db);
		st_store(da, i, silu_grad_op(x, g * st_load(b, i, bf, 3)), bf, 0, first_da);
	}
}

// out = gelu_tanh(a) * b (equal lengths), the fusion of gelu_tanh_f32 then
// mul_f32 with their bits: t is gelu_tanh_f32's fp32 value, then one float
// product.
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void geglu_tanh_f32(float *out, const float *a, const float *b, long long n) {
	GRID_STRIDE(i, n) { out[i] = gelu_tanh_op(a[i]) * b[i]; }
}

// The gradients of geglu_tanh_f32 with the bits of the unfused kernels:
// db = dy * t (mul_f32), dt = dy * b rounded to float (mul_f32), and
// da = gelu_tanh_grad_f32's value from dt.
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void geglu_tanh_grad_f32(float *da, float *db, const float *a, const float *b, const float *dy,
	long long n) {
	GRID_STRIDE(i, n) {
		float x = a[i], g = dy[i];
		db[i] = g * gelu_tanh_op(x);
		da[i] = gelu_tanh_grad_op(x, g * b[i]);
	}
}

// geglu_tanh_f32 on storage bf: out (bit 0), a (1), b (2).
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void geglu_tanh_st(void *out, const void *a, const void *b, long long n, long long bf,
	unsigned long long *first) {
	GRID_STRIDE(i, n) { st_store(out, i, gelu_tanh_op(st_load(a, i, bf, 1)) * st_load(b, i, bf, 2), bf, 0, first); }
}

// geglu_tanh_grad_f32 on storage bf: da (bit 0), db (1), a (2), b (3),
// dy (4); first_da and first_db flag da and db.
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void geglu_tanh_grad_st(void *da, void *db, const void *a, const void *b, const void *dy,
	long long n, long long bf, unsigned long long *first_da, unsigned long long *first_db) {
	GRID_STRIDE(i, n) {
		float x = st_load(a, i, bf, 2), g = st_load(dy, i, bf, 4);
		st_store(db, i, g * gelu_tanh_op(x), bf, 1, first_db);
		st_store(da, i, gelu_tanh_grad_op(x, g * st_load(b, i, bf, 3)), bf, 0, first_da);
	}
}

// gelu_f32 on storage bf: out (bit 0), x (1).
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void gelu_st(void *out, const void *x, long long n, long long bf, unsigned long long *first) {
	GRID_STRIDE(i, n) { st_store(out, i, gelu_op(st_load(x, i, bf, 1)), bf, 0, first); }
}

// gelu_grad_f32 on storage bf: dx (bit 0), x (1), dy (2).
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void gelu_grad_st(void *dx, const void *x, const void *dy, long long n, long long bf,
	unsigned long long *first) {
	GRID_STRIDE(i, n) { st_store(dx, i, gelu_grad_op(st_load(x, i, bf, 1), st_load(dy, i, bf, 2)), bf, 0, first); }
}

// gelu_tanh_f32 on storage bf: out (bit 0), x (1).
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void gelu_tanh_st(void *out, const void *x, long long n, long long bf, unsigned long long *first) {
	GRID_STRIDE(i, n) { st_store(out, i, gelu_tanh_op(st_load(x, i, bf, 1)), bf, 0, first); }
}

// gelu_tanh_grad_f32 on storage bf: dx (bit 0), x (1), dy (2).
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void gelu_tanh_grad_st(void *dx, const void *x, const void *dy, long long n, long long bf,
	unsigned long long *first) {
	GRID_STRIDE(i, n) { st_store(dx, i, gelu_tanh_grad_op(st_load(x, i, bf, 1), st_load(dy, i, bf, 2)), bf, 0, first); }
}

// scale_f32 on storage bf: out (bit 0), x (1).
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void scale_st(void *out, const void *x, long long n, float c, long long bf, unsigned long long *first) {
	GRID_STRIDE(i, n) { st_store(out, i, st_load(x, i, bf, 1) * c, bf, 0, first); }
}

// The row kernels below and their gradients are each one body, a device
// function on storage bf as the storage-typed kernels above take it: the
// _st kernel calls it with its mask and flags, its fp32 twin with bf = 0
// and no flags (plain float loads and stores, no flag), so the two
// cannot drift. A row body takes its kernel's shared arrays.

// rmsnorm_body is rmsnorm_st's (rmsnorm_f32's with bf = 0, no flag).
__device__ __forceinline__ void rmsnorm_body(void *out, const void *x, const void *w, long long d, float eps, long long bf,
	unsigned long long *first, double *red) {
	long long r = blockIdx.x;
	double ss = 0;
	for (long long j = threadIdx.x; j < d; j += blockDim.x) {
		float xj = st_load(x, r * d + j, bf, 1);
		ss += (double)xj * (double)xj;
	}
	ss = block_sum(ss, red);
	float rs = (float)(1 / sqrt(ss / (double)d + (double)eps));
	for (long long j = threadIdx.x; j < d; j += blockDim.x) {
		st_store(out, r * d + j, st_load(x, r * d + j, bf, 1) * rs * st_load(w, j, bf, 2), bf, 0, first);
	}
}

// One block per row of d: out = x / sqrt(mean(x^2) + eps) * w.
// amspc:launch row
AMSP_EXTERN_C __global__ void rmsnorm_f32(float *out, const float *x, const float *w, long long rows, long long d, float eps) {
	__shared__ double red[AMSP_BLOCK];
	rmsnorm_body(out, x, w, d, eps, 0, 0, red);
}

// rmsnorm_f32 on storage bf: out (bit 0), x (1), w (2).
// amspc:launch row
AMSP_EXTERN_C __global__ void rmsnorm_st(void *out, const void *x, const void *w, long long rows, long long d, float eps,
	long long bf, unsigned long long *first) {
	__shared__ double red[AMSP_BLOCK];
	rmsnorm_body(out, x, w, d, eps, bf, first, red);
}

// add_rmsnorm_st is add_st then rmsnorm_st in one pass over the rows (a
// block per row): y = x + r stored (and flagged) as add_st stores it,
// then h = rmsnorm_body of y read back as stored, so h has rmsnorm_st's
// bits for that y. Each thread reads back the elements it stored; the
// barrier makes that so whatever the body's split of the row.
// y (bit 0), h (1), x (2), r (3), w (4).
// amspc:launch row
AMSP_EXTERN_C __global__ void add_rmsnorm_st(void *y, void *h, const void *x, const void *r, const void *w, long long rows,
	long long d, float eps, long long bf, unsigned long long *first_y, unsigned long long *first_h) {
	__shared__ double red[AMSP_BLOCK];
	long long row = blockIdx.x;
	for (long long j = threadIdx.x; j < d; j += blockDim.x) {
		st_store(y, row * d + j, st_load(x, row * d + j, bf, 2) + st_load(r, row * d + j, bf, 3), bf, 0, first_y);
	}
	__syncthreads();
	rmsnorm_body(h, y, w, d, eps, st_bits(bf, 1, 0, 4), first_h, red);
}

// rmsnorm_grad_body is rmsnorm_grad_st's (rmsnorm_grad_f32's with bf = 0,
// no flag). With add (bit 5) not null it is add_rmsnorm_grad_st's: dx
// rounded as dx is stored, then add + dx stored, as add_st would store
// the sum of add and rmsnorm_grad_st's dx.
__device__ __forceinline__ void rmsnorm_grad_body(void *dx, float *rstd, const void *x, const void *w, const void *dy,
	const void *add, long long d, float eps, long long bf, unsigned long long *first, double *red) {
	long long r = blockIdx.x;
	double ss = 0;
	for (long long j = threadIdx.x; j < d; j += blockDim.x) {
		float xj = st_load(x, r * d + j, bf, 2);
		ss += (double)xj * (double)xj;
	}
	ss = block_sum(ss, red);
	float rs = (float)(1 / sqrt(ss / (double)d + (double)eps));
	double dot = 0;
	for (long long j = threadIdx.x; j < d; j += blockDim.x) {
		float xj = st_load(x, r * d + j, bf, 2), wj = st_load(w, j, bf, 3), gj = st_load(dy, r * d + j, bf, 4);
		dot += (double)(gj * wj) * (double)(xj * rs);
	}
	dot = block_sum(dot, red);
	float c = (float)(dot / (double)d);
	for (long long j = threadIdx.x; j < d; j += blockDim.x) {
		float xj = st_load(x, r * d + j, bf, 2), wj = st_load(w, j, bf, 3), gj = st_load(dy, r * d + j, bf, 4);
		float v = rs * (gj * wj - xj * rs * c);
		if (add) {
			v = st_load(add, r * d + j, bf, 5) + st_round(v, bf, 0);
		}
		st_store(dx, r * d + j, v, bf, 0, first);
	}
	if (threadIdx.x == 0) {
		rstd[r] = rs;
	}
}

// One block per row: dx = rstd * (dy*w - xh*mean(dy*w*xh)), xh = x*rstd;
// rstd[r] is kept for rmsnorm_grad_w_f32.
// amspc:launch row
AMSP_EXTERN_C __global__ void rmsnorm_grad_f32(float *dx, float *rstd, const float *x, const float *w, const float *dy,
	long long rows, long long d, float eps) {
	__shared__ double red[AMSP_BLOCK];
	rmsnorm_grad_body(dx, rstd, x, w, dy, 0, d, eps, 0, 0, red);
}

// rmsnorm_grad_f32 on storage bf: dx (bit 0), x (2), w (3), dy (4); rstd
// (1) is fp32 scratch, written as rmsnorm_grad_f32 writes it.
// amspc:launch row
AMSP_EXTERN_C __global__ void rmsnorm_grad_st(void *dx, float *rstd, const void *x, const void *w, const void *dy,
	long long rows, long long d, float eps, long long bf, unsigned long long *first) {
	__shared__ double red[AMSP_BLOCK];
	rmsnorm_grad_body(dx, rstd, x, w, dy, 0, d, eps, bf, first, red);
}

// add_rmsnorm_grad_st is rmsnorm_grad_st then add_st(dx, dy, its dx) in
// one pass: dx (bit 0), rstd (1, fp32 scratch, for rmsnorm_grad_w_st),
// y (2), w (3), dh (4, h's gradient), dy (5, y's own gradient).
// amspc:launch row
AMSP_EXTERN_C __global__ void add_rmsnorm_grad_st(void *dx, float *rstd, const void *y, const void *w, const void *dh,
	const void *dy, long long rows, long long d, float eps, long long bf, unsigned long long *first) {
	__shared__ double red[AMSP_BLOCK];
	rmsnorm_grad_body(dx, rstd, y, w, dh, dy, d, eps, bf, first, red);
}

// rmsnorm_grad_w_body is rmsnorm_grad_w_st's (rmsnorm_grad_w_f32's with
// bf = 0, no flag).
__device__ __forceinline__ void rmsnorm_grad_w_body(void *dw, const void *x, const void *dy, const float *rstd, long long rows,
	long long d, long long bf, unsigned long long *first) {
	GRID_STRIDE(j, d) {
		double acc = 0;
		long long r = 0;
		for (; r + AMSP_AHEAD <= rows; r += AMSP_AHEAD) {
			float t[AMSP_AHEAD];
#pragma unroll
			for (int u = 0; u < AMSP_AHEAD; u++) {
				t[u] = st_load(dy, (r + u) * d + j, bf, 2) * (st_load(x, (r + u) * d + j, bf, 1) * rstd[r + u]);
			}
#pragma unroll
			for (int u = 0; u < AMSP_AHEAD; u++) {
				acc += (double)t[u];
			}
		}
		for (; r < rows; r++) {
			acc += (double)(st_load(dy, r * d + j, bf, 2) * (st_load(x, r * d + j, bf, 1) * rstd[r]));
		}
		st_store(dw, j, (float)acc, bf, 0, first);
	}
}

// dw[j] = sum over rows, in order, of dy * (x * rstd).
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void rmsnorm_grad_w_f32(float *dw, const float *x, const float *dy, const float *rstd, long long rows,
	long long d) {
	rmsnorm_grad_w_body(dw, x, dy, rstd, rows, d, 0, 0);
}

// rmsnorm_grad_w_f32 on storage bf: dw (bit 0), x (1), dy (2); rstd (3)
// is fp32, rmsnorm_grad_st's.
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void rmsnorm_grad_w_st(void *dw, const void *x, const void *dy, const float *rstd, long long rows,
	long long d, long long bf, unsigned long long *first) {
	rmsnorm_grad_w_body(dw, x, dy, rstd, rows, d, bf, first);
}

// layernorm_body is layernorm_st's (layernorm_f32's with bf = 0, no flag).
__device__ __forceinline__ void layernorm_body(void *out, const void *x, const void *w, const void *b, long long d, float eps,
	long long bf, unsigned long long *first, double *red) {
	long long r = blockIdx.x;
	double s = 0;
	for (long long j = threadIdx.x; j < d; j += blockDim.x) {
		s += (double)st_load(x, r * d + j, bf, 1);
	}
	double m = block_sum(s, red) / (double)d;
	double ss = 0;
	for (long long j = threadIdx.x; j < d; j += blockDim.x) {
		double c = (double)st_load(x, r * d + j, bf, 1) - m;
		ss += c * c;
	}
	ss = block_sum(ss, red);
	float mean = (float)m, rs = (float)(1 / sqrt(ss / (double)d + (double)eps));
	for (long long j = threadIdx.x; j < d; j += blockDim.x) {
		st_store(out, r * d + j, (st_load(x, r * d + j, bf, 1) - mean) * rs * st_load(w, j, bf, 2) + st_load(b, j, bf, 3), bf, 0,
			first);
	}
}

// One block per row: out = (x - mean) / sqrt(var + eps) * w + b, the
// biased variance taken in a second pass.
// amspc:launch row
AMSP_EXTERN_C __global__ void layernorm_f32(float *out, const float *x, const float *w, const float *b, long long rows,
	long long d, float eps) {
	__shared__ double red[AMSP_BLOCK];
	layernorm_body(out, x, w, b, d, eps, 0, 0, red);
}

// layernorm_f32 on storage bf: out (bit 0), x (1), w (2), b (3).
// amspc:launch row
AMSP_EXTERN_C __global__ void layernorm_st(void *out, const void *x, const void *w, const void *b, long long rows, long long d,
	float eps, long long bf, unsigned long long *first) {
	__shared__ double red[AMSP_BLOCK];
	layernorm_body(out, x, w, b, d, eps, bf, first, red);
}

// layernorm_grad_body is layernorm_grad_st's (layernorm_grad_f32's with
// bf = 0, no flag).
__device__ __forceinline__ void layernorm_grad_body(void *dx, float *stats, const void *x, const void *w, const void *dy,
	long long d, float eps, long long bf, unsigned long long *first, double *red) {
	long long r = blockIdx.x;
	double s = 0;
	for (long long j = threadIdx.x; j < d; j += blockDim.x) {
		s += (double)st_load(x, r * d + j, bf, 2);
	}
	double m = block_sum(s, red) / (double)d;
	double ss = 0;
	for (long long j = threadIdx.x; j < d; j += blockDim.x) {
		double c = (double)st_load(x, r * d + j, bf, 2) - m;
		ss += c * c;
	}
	ss = block_sum(ss, red);
	float mean = (float)m, rs = (float)(1 / sqrt(ss / (double)d + (double)eps));
	double sg = 0, sgx = 0;
	for (long long j = threadIdx.x; j < d; j += blockDim.x) {
		float g = st_load(dy, r * d + j, bf, 4) * st_load(w, j, bf, 3);
		sg += (double)g;
		sgx += (double)g * (double)((st_load(x, r * d + j, bf, 2) - mean) * rs);
	}
	sg = block_sum(sg, red);
	sgx = block_sum(sgx, red);
	float mg = (float)(sg / (double)d), mgx = (float)(sgx / (double)d);
	for (long long j = threadIdx.x; j < d; j += blockDim.x) {
		float xj = st_load(x, r * d + j, bf, 2), wj = st_load(w, j, bf, 3), gj = st_load(dy, r * d + j, bf, 4);
		st_store(dx, r * d + j, rs * (gj * wj - mg - (xj - mean) * rs * mgx), bf, 0, first);
	}
	if (threadIdx.x == 0) {
		stats[2 * r] = mean;
		stats[2 * r + 1] = rs;
	}
}

// One block per row: dx = rstd * (g - mean(g) - xh*mean(g*xh)), g = dy*w;
// stats[2r], stats[2r+1] keep the row's mean and rstd for
// layernorm_grad_wb_f32.
// amspc:launch row
AMSP_EXTERN_C __global__ void layernorm_grad_f32(float *dx, float *stats, const float *x, const float *w, const float *dy,
	long long rows, long long d, float eps) {
	__shared__ double red[AMSP_BLOCK];
	layernorm_grad_body(dx, stats, x, w, dy, d, eps, 0, 0, red);
}

// layernorm_grad_f32 on storage bf: dx (bit 0), x (2), w (3), dy (4);
// stats (1) is fp32 scratch, written as layernorm_grad_f32 writes it.
// amspc:launch row
AMSP_EXTERN_C __global__ void layernorm_grad_st(void *dx, float *stats, const void *x, const void *w, const void *dy,
	long long rows, long long d, float eps, long long bf, unsigned long long *first) {
	__shared__ double red[AMSP_BLOCK];
	layernorm_grad_body(dx, stats, x, w, dy, d, eps, bf, first, red);
}

// layernorm_grad_wb_body is layernorm_grad_wb_st's (layernorm_grad_wb_f32's
// with bf = 0, no flags).
__device__ __forceinline__ void layernorm_grad_wb_body(void *dw, void *db, const void *x, const void *dy, const float *stats,
	long long rows, long long d, long long bf, unsigned long long *first_dw, unsigned long long *first_db) {
	GRID_STRIDE(j, d) {
		double aw = 0, ab = 0;
		long long r = 0;
		for (; r + AMSP_AHEAD <= rows; r += AMSP_AHEAD) {
			float tw[AMSP_AHEAD], tb[AMSP_AHEAD];
#pragma unroll
			for (int u = 0; u < AMSP_AHEAD; u++) {
				float v = st_load(x, (r + u) * d + j, bf, 2), g = st_load(dy, (r + u) * d + j, bf, 3);
				tw[u] = g * ((v - stats[2 * (r + u)]) * stats[2 * (r + u) + 1]);
				tb[u] = g;
			}
#pragma unroll
			for (int u = 0; u < AMSP_AHEAD; u++) {
				aw += (double)tw[u];
				ab += (double)tb[u];
			}
		}
		for (; r < rows; r++) {
			float v = st_load(x, r * d + j, bf, 2), g = st_load(dy, r * d + j, bf, 3);
			aw += (double)(g * ((v - stats[2 * r]) * stats[2 * r + 1]));
			ab += (double)g;
		}
		st_store(dw, j, (float)aw, bf, 0, first_dw);
		st_store(db, j, (float)ab, bf, 1, first_db);
	}
}

// dw[j] = sum over rows of dy * xh, db[j] = sum of dy, in row order.
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void layernorm_grad_wb_f32(float *dw, float *db, const float *x, const float *dy, const float *stats,
	long long rows, long long d) {
	layernorm_grad_wb_body(dw, db, x, dy, stats, rows, d, 0, 0, 0);
}

// layernorm_grad_wb_f32 on storage bf: dw (bit 0), db (1), x (2), dy (3);
// stats (4) is fp32, layernorm_grad_st's; first_dw and first_db flag dw
// and db.
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void layernorm_grad_wb_st(void *dw, void *db, const void *x, const void *dy, const float *stats,
	long long rows, long long d, long long bf, unsigned long long *first_dw, unsigned long long *first_db) {
	layernorm_grad_wb_body(dw, db, x, dy, stats, rows, d, bf, first_dw, first_db);
}

// rope_pair turns pair k of x into out, out bit 0 of bf and x bit 1:
// every rope kernel's one computation of a pair.
__device__ __forceinline__ void rope_pair(void *out, const void *x, long long k, long long seq, long long heads, long long hd,
	const double *freq, float sign, long long bf, unsigned long long *first) {
	long long half = hd / 2;
	long long i = k % half, h = k / half % heads, p = k / (half * heads) % seq, b = k / (half * heads * seq);
	double ang = (double)p * freq[i];
	float c = (float)cos(ang), s = sign * (float)sin(ang);
	long long base = ((b * seq + p) * heads + h) * hd;
	float u = st_load(x, base + i, bf, 1), v = st_load(x, base + i + half, bf, 1);
	st_store(out, base + i, u * c - v * s, bf, 0, first);
	st_store(out, base + i + half, v * c + u * s, bf, 0, first);
}

// rope_body is rope_st's (rope_f32's with bf = 0, no flag).
__device__ __forceinline__ void rope_body(void *out, const void *x, long long batch, long long seq, long long heads, long long hd,
	const double *freq, float sign, long long bf, unsigned long long *first) {
	GRID_STRIDE(k, batch * seq * heads * (hd / 2)) { rope_pair(out, x, k, seq, heads, hd, freq, sign, bf, first); }
}

// RoPE on x [batch, seq, heads*hd] in the rotate-half layout: the pair
// (x[i], x[i+hd/2]) of each head at position p turns by
// sign * p * freq[i] (kernels.RoPEFreq's frequencies: theta^(-2i/hd),
// scaled as Llama 3 scales them; sign -1: the gradient, the inverse turn).
// The angle, its sine and cosine are double, rounded once to float. One
// thread per pair.
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void rope_f32(float *out, const float *x, long long batch, long long seq, long long heads, long long hd,
	const double *freq, float sign) {
	rope_body(out, x, batch, seq, heads, hd, freq, sign, 0, 0);
}

// rope_f32 on storage bf: out (bit 0), x (1).
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void rope_st(void *out, const void *x, long long batch, long long seq, long long heads, long long hd,
	const double *freq, float sign, long long bf, unsigned long long *first) {
	rope_body(out, x, batch, seq, heads, hd, freq, sign, bf, first);
}

// rope_qk_st is rope_st on q's xq (heads of hd) and on k's xk (kv_heads
// of kv_hd), of one batch and seq, with the frequencies freq and kv_freq
// of one rotation for each head dim, in one launch: a thread per
// pair of either, q's pairs first, each turned by rope_pair as rope_st
// turns it. q (bit 0), k (1), xq (2), xk (3); first_q and first_k flag q
// and k.
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void rope_qk_st(void *q, void *k, const void *xq, const void *xk, long long batch, long long seq,
	long long heads, long long hd, long long kv_heads, long long kv_hd, const double *freq, const double *kv_freq, float sign, long long bf,
	unsigned long long *first_q, unsigned long long *first_k) {
	long long nq = batch * seq * heads * (hd / 2), nk = batch * seq * kv_heads * (kv_hd / 2);
	long long bq = st_bits(bf, 0, 2, 2), bk = st_bits(bf, 1, 3, 3); // rope_pair's out and x as bits 0 and 1
	GRID_STRIDE(j, nq + nk) {
		if (j < nq) {
			rope_pair(q, xq, j, seq, heads, hd, freq, sign, bq, first_q);
		} else {
			rope_pair(k, xk, j - nq, seq, kv_heads, kv_hd, kv_freq, sign, bk, first_k);
		}
	}
}

// bad_id flags id, at position t, as out of range in *bad (all ones
// before): the lowest position wins, and the flag holds it in its high
// half and the id in its low half (gpu.BadID decodes it), so the host
// names the first bad id without reading the ids.
__device__ __forceinline__ void bad_id(unsigned long long *bad, long long t, int id) {
	atomicMin(bad, (unsigned long long)t << 32 | (unsigned)id);
}

// out[t] = table[ids[t]] for rows of d. An id outside [0, vocab) writes
// nothing and is flagged in *bad (bad_id).
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void embed_f32(float *out, const int *ids, const float *table, long long n, long long vocab, long long d,
	unsigned long long *bad) {
	GRID_STRIDE(k, n * d) {
		long long t = k / d, j = k % d;
		int id = ids[t];
		if (id < 0 || id >= vocab) {
			bad_id(bad, t, id);
		} else {
			out[k] = table[(long long)id * d + j];
		}
	}
}

// An id outside [0, limit) is flagged in *bad (bad_id): one check of
// every target before a loss computed in chunks of rows.
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void check_ids(const int *ids, long long n, long long limit, unsigned long long *bad) {
	GRID_STRIDE(t, n) {
		int id = ids[t];
		if (id < 0 || id >= limit) {
			bad_id(bad, t, id);
		}
	}
}

// mean_loss is gpu.MeanLoss of rows per-row losses, in its order (each
// chunk of 64 rows summed in order, the chunks' sums added in order), in
// one block of any size: *slot gets the mean, *out the mean as a float
// (the loss value). Rows 0: 0.
// amspc:launch row
AMSP_EXTERN_C __global__ void mean_loss(float *out, double *slot, const double *loss, long long rows) {
	__shared__ double sums[AMSP_BLOCK];
	if (blockIdx.x != 0) {
		return;
	}
	long long chunks = (rows + 63) / 64;
	double total = 0;
	for (long long w = 0; w < chunks; w += blockDim.x) {
		long long c = w + threadIdx.x;
		if (c < chunks) {
			double s = 0;
			for (long long r = 64 * c; r < 64 * c + 64 && r < rows; r++) {
				s += loss[r];
			}
			sums[threadIdx.x] = s;
		}
		__syncthreads();
		if (threadIdx.x == 0) {
			for (long long i = 0; i < blockDim.x && w + i < chunks; i++) {
				total += sums[i];
			}
		}
		__syncthreads();
	}
	if (threadIdx.x == 0) {
		double mean = rows > 0 ? total / (double)rows : 0;
		*slot = mean;
		*out = (float)mean;
	}
}

// embed_count, embed_offsets, embed_scan and embed_place list, for each
// id v in [0, vocab), the positions where it occurs, ascending, as
// gpu.Positions does on the host: pos[start[v]:start[v+1]], for
// embed_grad_f32. A stable counting sort over chunks of positions, in
// integers, so the lists are the same whatever the grid; no host reads
// the ids. An id outside [0, vocab) (embed_f32 has reported it) is
// skipped: its position is in no list.
//
// embed_count: thread per chunk of chunk positions, in order: cnt[c,v]
// (zero before) counts v in chunk c, rank[i] is how many of chunk c's
// positions before i hold i's id.
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void embed_count(int *cnt, int *rank, const int *ids, long long n, long long vocab, long long chunk) {
	GRID_STRIDE(c, (n + chunk - 1) / chunk) {
		int *row = cnt + c * vocab;
		long long end = (c + 1) * chunk < n ? (c + 1) * chunk : n;
		for (long long i = c * chunk; i < end; i++) {
			int id = ids[i];
			if (id >= 0 && id < vocab) {
				rank[i] = row[id]++;
			}
		}
	}
}

// embed_offsets: thread per id v, over the chunks in order: cnt[c,v]
// becomes the count of v in the chunks before c, start[v+1] the count of
// v in all (embed_scan's input).
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void embed_offsets(int *cnt, int *start, long long chunks, long long vocab) {
	GRID_STRIDE(v, vocab) {
		int s = 0;
		for (long long c = 0; c < chunks; c++) {
			int k = cnt[c * vocab + v];
			cnt[c * vocab + v] = s;
			s += k;
		}
		start[v + 1] = s;
	}
}

// embed_scan: one block turns the counts start[1..vocab] into their
// running sums, start[0] = 0. Thread t sums a segment of
// ceil(vocab/blockDim) counts, thread 0 the segments' sums before each,
// then each thread writes its segment's running sums: any block size.
// amspc:launch row
AMSP_EXTERN_C __global__ void embed_scan(int *start, long long vocab) {
	__shared__ int before[AMSP_BLOCK];
	if (blockIdx.x != 0) { // one block does it all
		return;
	}
	long long t = threadIdx.x, seg = (vocab + blockDim.x - 1) / blockDim.x;
	long long lo = 1 + t * seg, hi = lo + seg < vocab + 1 ? lo + seg : vocab + 1;
	int s = 0;
	for (long long v = lo; v < hi; v++) {
		s += start[v];
	}
	before[t] = s;
	__syncthreads();
	if (t == 0) {
		int run = 0;
		for (unsigned u = 0; u < blockDim.x; u++) {
			int k = before[u];
			before[u] = run;
			run += k;
		}
		start[0] = 0;
	}
	__syncthreads();
	s = before[t];
	for (long long v = lo; v < hi; v++) {
		s += start[v];
		start[v] = s;
	}
}

// embed_place: thread per position i, whose place in its id's list is
// the id's count in the chunks before i's (off, embed_offsets' cnt) plus
// its rank in its own chunk.
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void embed_place(int *pos, const int *start, const int *off, const int *rank, const int *ids, long long n,
	long long vocab, long long chunk) {
	GRID_STRIDE(i, n) {
		int id = ids[i];
		if (id >= 0 && id < vocab) {
			pos[start[id] + off[i / chunk * vocab + id] + rank[i]] = (int)i;
		}
	}
}

// dtable[v] = the sum of dy's rows at the positions where id v occurs, in
// position order: pos[start[v]:start[v+1]] lists them ascending
// (embed_place). Rows of ids that do not occur are zero.
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void embed_grad_f32(float *dtable, const int *start, const int *pos, const float *dy, long long vocab,
	long long d) {
	GRID_STRIDE(k, vocab * d) {
		long long v = k / d, j = k % d;
		float acc = 0;
		for (int q = start[v]; q < start[v + 1]; q++) {
			acc = acc + dy[(long long)pos[q] * d + j];
		}
		dtable[k] = acc;
	}
}

// cross_entropy_body is cross_entropy_st's (cross_entropy_f32's with
// bf = 0). red holds AMSP_BLOCK doubles, redf AMSP_BLOCK floats.
__device__ __forceinline__ void cross_entropy_body(double *loss, const void *logits, const int *targets, long long vocab,
	unsigned long long *bad, long long bf, double *red, float *redf) {
	long long r = blockIdx.x;
	float mx = st_load(logits, r * vocab, bf, 1);
	for (long long j = threadIdx.x; j < vocab; j += blockDim.x) {
		float xj = st_load(logits, r * vocab + j, bf, 1);
		mx = xj > mx ? xj : mx;
	}
	mx = block_max(mx, redf);
	double s = 0;
	for (long long j = threadIdx.x; j < vocab; j += blockDim.x) {
		s += exp((double)(st_load(logits, r * vocab + j, bf, 1) - mx));
	}
	s = block_sum(s, red);
	if (threadIdx.x == 0) {
		int t = targets[r];
		if (t < 0 || t >= vocab) {
			bad_id(bad, r, t);
			loss[r] = 0;
		} else {
			loss[r] = (double)mx + log(s) - (double)st_load(logits, r * vocab + t, bf, 1);
		}
	}
}

// One block per row of logits: loss[r] = logsumexp(row) - row[target],
// in double (mean_loss takes the mean in its own order). A target
// outside [0, vocab) is flagged in *bad (bad_id).
// amspc:launch row
AMSP_EXTERN_C __global__ void cross_entropy_f32(double *loss, const float *logits, const int *targets, long long rows,
	long long vocab, unsigned long long *bad) {
	__shared__ double red[AMSP_BLOCK];
	__shared__ float redf[AMSP_BLOCK];
	cross_entropy_body(loss, logits, targets, vocab, bad, 0, red, redf);
}

// cross_entropy_f32 on storage bf: logits (bit 1).
// amspc:launch row
AMSP_EXTERN_C __global__ void cross_entropy_st(double *loss, const void *logits, const int *targets, long long rows,
	long long vocab, unsigned long long *bad, long long bf) {
	__shared__ double red[AMSP_BLOCK];
	__shared__ float redf[AMSP_BLOCK];
	cross_entropy_body(loss, logits, targets, vocab, bad, bf, red, redf);
}

// cross_entropy_grad_body is cross_entropy_grad_st's
// (cross_entropy_grad_f32's with bf = 0, no flag).
__device__ __forceinline__ void cross_entropy_grad_body(void *dlogits, const void *logits, const int *targets, long long vocab,
	double f, long long bf, unsigned long long *first, double *red, float *redf) {
	long long r = blockIdx.x;
	float mx = st_load(logits, r * vocab, bf, 1);
	for (long long j = threadIdx.x; j < vocab; j += blockDim.x) {
		float xj = st_load(logits, r * vocab + j, bf, 1);
		mx = xj > mx ? xj : mx;
	}
	mx = block_max(mx, redf);
	double s = 0;
	for (long long j = threadIdx.x; j < vocab; j += blockDim.x) {
		s += exp((double)(st_load(logits, r * vocab + j, bf, 1) - mx));
	}
	s = block_sum(s, red);
	double lse = (double)mx + log(s);
	int t = targets[r];
	for (long long j = threadIdx.x; j < vocab; j += blockDim.x) {
		double v = exp((double)st_load(logits, r * vocab + j, bf, 1) - lse);
		if (j == t) {
			v -= 1;
		}
		st_store(dlogits, r * vocab + j, (float)(v * f), bf, 0, first);
	}
}

// One block per row: dlogits = (softmax(logits) - onehot(target)) * f,
// f the upstream gradient over the rows, in double.
// amspc:launch row
AMSP_EXTERN_C __global__ void cross_entropy_grad_f32(float *dlogits, const float *logits, const int *targets, long long rows,
	long long vocab, double f) {
	__shared__ double red[AMSP_BLOCK];
	__shared__ float redf[AMSP_BLOCK];
	cross_entropy_grad_body(dlogits, logits, targets, vocab, f, 0, 0, red, redf);
}

// cross_entropy_grad_f32 on storage bf: dlogits (bit 0), logits (1).
// amspc:launch row
AMSP_EXTERN_C __global__ void cross_entropy_grad_st(void *dlogits, const void *logits, const int *targets, long long rows,
	long long vocab, double f, long long bf, unsigned long long *first) {
	__shared__ double red[AMSP_BLOCK];
	__shared__ float redf[AMSP_BLOCK];
	cross_entropy_grad_body(dlogits, logits, targets, vocab, f, bf, first, red, redf);
}

// One AdamW step per element, in double as kernels.AdamW, with explicit
// roundings so no multiply-add is fused (the Go kernel's bits). Elements
// inside one of the nd ranges decay[2k] <= i < decay[2k+1] (ascending,
// disjoint) are decayed: their parameter is first multiplied by keep.
// adamw_step is element i's step from p, m, v and g: the new m and v in
// *mo and *vo, the new p returned.
__device__ __forceinline__ float adamw_step(float p, float m, float v, float g, long long i, const long long *decay,
	long long nd, double beta1, double c1, double beta2, double c2, double step_size, double bc2, double eps, double keep,
	float *mo, float *vo) {
	long long lo = 0, hi = nd; // the first range whose end is past i
	while (lo < hi) {
		long long mid = (lo + hi) / 2;
		if (decay[2 * mid + 1] > i) {
			hi = mid;
		} else {
			lo = mid + 1;
		}
	}
	double k = (lo < nd && decay[2 * lo] <= i) ? keep : 1.0;
	double pi = __dmul_rn((double)p, k);
	double gi = (double)g;
	double mi = __dadd_rn(__dmul_rn(beta1, (double)m), __dmul_rn(c1, gi));
	double vi = __dadd_rn(__dmul_rn(beta2, (double)v), __dmul_rn(__dmul_rn(c2, gi), gi));
	*mo = (float)mi;
	*vo = (float)vi;
	return (float)__dsub_rn(pi, __dmul_rn(step_size, mi) / __dadd_rn(sqrt(vi) / bc2, eps));
}

// adamw_f32 steps p, m and v in place from g, the eight factors k[0..7]
// in device memory (gpu.AdamWArgs' order: a plan's launches are the same
// every step).
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void adamw_f32(float *p, float *m, float *v, const float *g, long long n, const long long *decay,
	long long nd, const double *k) {
	GRID_STRIDE(i, n) {
		float mo, vo;
		p[i] = adamw_step(p[i], m[i], v[i], g[i], i, decay, nd, k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7], &mo, &vo);
		m[i] = mo;
		v[i] = vo;
	}
}

// adamw_f32 on storage bf, in one pass: p, m and v (fp32) from p0, m0
// and v0 (the same memory when in place) and g (bit 7: bf16 or fp32),
// and, when pc (bit 3) is not null, the new p as pc stores it (the bf16
// P of a mixed-precision step: adamw then cast). The eight factors are
// k[0..7] in device memory (gpu.AdamWArgs' order). first_p, first_m,
// first_v and first_pc (null with pc) flag the four results.
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void adamw_st(float *p, float *m, float *v, void *pc, const float *p0, const float *m0,
	const float *v0, const void *g, long long n, const long long *decay, long long nd, const double *k, long long bf,
	unsigned long long *first_p, unsigned long long *first_m, unsigned long long *first_v, unsigned long long *first_pc) {
	GRID_STRIDE(i, n) {
		float mo, vo;
		float x = adamw_step(p0[i], m0[i], v0[i], st_load(g, i, bf, 7), i, decay, nd, k[0], k[1], k[2], k[3], k[4], k[5],
			k[6], k[7], &mo, &vo);
		st_store(p, i, x, bf, 0, first_p);
		st_store(m, i, mo, bf, 1, first_m);
		st_store(v, i, vo, bf, 2, first_v);
		if (pc) {
			st_store(pc, i, x, bf, 3, first_pc);
		}
	}
}

// Attention. q and out are [batch, seq, heads*hd], k and v [batch, seq,
// kvHeads*hd]; query head h reads kv head h / (heads/kvHeads); lse is
// [batch, heads, seq]. Scores are scale * q.k with scale = 1/sqrt(hd).
//
// Geometry (kernels/gpu AttentionGeometry): lanes consecutive threads
// share a row (a query row, or for attention_dkv_f32 a key row), each
// holding up to 16 of its elements in registers: four float4 groups,
// group c of lane l covering elements 4*(c*lanes + l) to +3, so the lanes
// of a row read consecutive 16 bytes of a shared row and the rows of a
// warp read the same ones (a broadcast). A block of blockDim.x threads
// holds blockDim.x/lanes rows; grid (ceil(seq/rows), heads, batch). The
// other operand streams through dynamic shared memory in tiles of tile
// rows (a multiple of 16), each row padded to hdp = hd rounded up to 4
// floats with zeros. A dot product is each lane's partial sum, then a
// butterfly over the row's lanes (amsp_shfl_xor), which leaves the same
// bits in every lane; the dot products of 4 or 16 rows run side by side,
// so their latencies overlap. FlashAttention's online softmax keeps a
// running max and sum per row, rescaled once per 16 keys, so the seq x
// seq probabilities are never stored; every sum runs in a fixed order,
// so results do not vary from run to run. Every thread of a block runs every
// loop (rows past seq compute on zeros and store nothing): the shuffles
// and barriers need the whole block.

#ifdef __CUDACC__
#define AMSP_DYN_SHARED(name) extern __shared__ float4 amsp_dyn_##name[]; float *name = (float *)amsp_dyn_##name
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
__device__ __forceinline__ float amsp_shfl_xor(float v, int off) { return __shfl_xor_sync(0xffffffffu, v, off); }
#endif

// AMSP_MAX_HD is the largest head dim the kernels take (16 lanes of 16).
#define AMSP_MAX_HD 256

// lane_sums replaces each of v[0..n) by its sum over the lanes of a row,
// the same bits in each lane; the n butterflies run side by side.
__device__ __forceinline__ void lane_sums(float *v, int n, int lanes) {
	for (int off = lanes >> 1; off > 0; off >>= 1) {
#pragma unroll
		for (int u = 0; u < 16; u++) {
			if (u < n) {
				v[u] += amsp_shfl_xor(v[u], off);
			}
		}
	}
}

// row_load puts this lane's elements of row i (of seq) of x, whose rows
// are stride floats apart, starting at column col, into r (zero past hd
// or seq).
__device__ __forceinline__ void row_load(float *r, const float *x, long long b, long long i, long long seq, long long stride,
	long long col, int hd, int lanes, int l) {
#pragma unroll
	for (int c = 0; c < 4; c++) {
#pragma unroll
		for (int u = 0; u < 4; u++) {
			int e = 4 * (c * lanes + l) + u;
			r[4 * c + u] = (i < seq && e < hd) ? x[(b * seq + i) * stride + col + e] : 0.0f;
		}
	}
}

// row_store writes this lane's elements of r to row i of x (i < seq).
__device__ __forceinline__ void row_store(float *x, const float *r, float f, long long b, long long i, long long seq,
	long long stride, long long col, int hd, int lanes, int l) {
#pragma unroll
	for (int c = 0; c < 4; c++) {
#pragma unroll
		for (int u = 0; u < 4; u++) {
			int e = 4 * (c * lanes + l) + u;
			if (e < hd) {
				x[(b * seq + i) * stride + col + e] = r[4 * c + u] * f;
			}
		}
	}
}

// tile_load puts rows t0 to t0+tile-1 of x (rows stride floats apart,
// from column col, hd wide) into sh, hdp floats a row, zeros past seq
// and hd: 16-byte groups, eight a thread loaded before any is stored, so
// their memory latencies overlap; one float4 load each where hd, stride,
// col and x allow (else four guarded floats).
__device__ __forceinline__ void tile_load(float *sh, const float *x, long long b, long long t0, long long seq, long long stride,
	long long col, int hd, int hdp, int tile) {
	int G = hdp / 4, n4 = tile * G;
	int vec = (hd & 3) == 0 && ((stride | col) & 3) == 0 && ((unsigned long long)x & 15) == 0;
	int r = threadIdx.x / G, c = threadIdx.x % G, dr = (8 * blockDim.x) / G, dc = (8 * blockDim.x) % G;
	int sr = blockDim.x / G, sc = blockDim.x % G;
	float4 *dst = (float4 *)sh;
	for (int z0 = 0; z0 < n4; z0 += 8 * blockDim.x) {
		float4 w[8];
		int rr = r, cc = c;
#pragma unroll
		for (int u = 0; u < 8; u++) {
			long long i = t0 + rr;
			float4 v = {0.0f, 0.0f, 0.0f, 0.0f};
			if (z0 + u * (int)blockDim.x + (int)threadIdx.x < n4 && i < seq) {
				const float *src = x + (b * seq + i) * stride + col + 4 * cc;
				if (vec) {
					v = *(const float4 *)src;
				} else {
					int e = 4 * cc;
					v.x = e < hd ? src[0] : 0.0f;
					v.y = e + 1 < hd ? src[1] : 0.0f;
					v.z = e + 2 < hd ? src[2] : 0.0f;
					v.w = e + 3 < hd ? src[3] : 0.0f;
				}
			}
			w[u] = v;
			rr += sr;
			cc += sc;
			if (cc >= G) {
				cc -= G;
				rr++;
			}
		}
#pragma unroll
		for (int u = 0; u < 8; u++) {
			int z = z0 + u * (int)blockDim.x + (int)threadIdx.x;
			if (z < n4) {
				dst[z] = w[u];
			}
		}
		r += dr;
		c += dc;
		while (c >= G) {
			c -= G;
			r++;
		}
	}
}

// lane_dot is this lane's part of r . row (row in shared memory, 16-byte
// aligned), groups past hdp skipped: each group's four products, then
// the groups' sums added pairwise (short dependency chains).
__device__ __forceinline__ float lane_dot(const float *r, const float *row, int groups, int lanes, int l) {
	float part[4];
#pragma unroll
	for (int c = 0; c < 4; c++) {
		int g = c * lanes + l;
		part[c] = 0;
		if (g < groups) {
			float4 w = *(const float4 *)(row + 4 * g);
			part[c] = r[4 * c] * w.x + r[4 * c + 1] * w.y + r[4 * c + 2] * w.z + r[4 * c + 3] * w.w;
		}
	}
	return (part[0] + part[1]) + (part[2] + part[3]);
}

// lane_axpy adds a * row to this lane's elements r.
__device__ __forceinline__ void lane_axpy(float *r, float a, const float *row, int groups, int lanes, int l) {
#pragma unroll
	for (int c = 0; c < 4; c++) {
		int g = c * lanes + l;
		if (g < groups) {
			float4 w = *(const float4 *)(row + 4 * g);
			r[4 * c] += a * w.x;
			r[4 * c + 1] += a * w.y;
			r[4 * c + 2] += a * w.z;
			r[4 * c + 3] += a * w.w;
		}
	}
}

// amspc:launch attention
AMSP_EXTERN_C __global__ void attention_f32(float *out, float *lse, const float *q, const float *k, const float *v,
	long long batch, long long seq, long long heads, long long kvheads, long long hd, long long causal, long long lanes,
	long long tile) {
	AMSP_DYN_SHARED(sh);
	int L = (int)lanes, T = (int)tile, HD = (int)hd, hdp = (HD + 3) & ~3, groups = hdp / 4;
	float *ks = sh, *vs = sh + T * hdp;
	int l = threadIdx.x % L, rows = blockDim.x / L;
	long long b = blockIdx.z, h = blockIdx.y, g = h / (heads / kvheads);
	// Causal: the last rows (the most keys) first, so the grid's tail is
	// the short blocks.
	long long blk = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
	long long i0 = blk * rows, i = i0 + threadIdx.x / L;
	long long qs = heads * hd, kvs = kvheads * hd;
	float scale = (float)(1 / sqrt((double)hd));
	float qr[16], acc[16];
	row_load(qr, q, b, i, seq, qs, h * hd, HD, L, l);
#pragma unroll
	for (int e = 0; e < 16; e++) {
		acc[e] = 0;
	}
	float m = -INFINITY, sum = 0;
	long long n = seq;
	if (causal && i0 + rows < seq) {
		n = i0 + rows;
	}
	for (long long t0 = 0; t0 < n; t0 += T) {
		tile_load(ks, k, b, t0, seq, kvs, g * hd, HD, hdp, T);
		tile_load(vs, v, b, t0, seq, kvs, g * hd, HD, hdp, T);
		__syncthreads();
		int tn = n - t0 < T ? (int)(n - t0) : T;
		for (int j0 = 0; j0 < tn; j0 += 16) {
			float s[16], mt = m;
#pragma unroll
			for (int jj = 0; jj < 16; jj++) {
				s[jj] = lane_dot(qr, ks + (j0 + jj) * hdp, groups, L, l);
			}
			lane_sums(s, 16, L);
#pragma unroll
			for (int jj = 0; jj < 16; jj++) {
				int j = j0 + jj;
				s[jj] = (j < tn && (!causal || t0 + j <= i)) ? s[jj] * scale : -INFINITY;
				mt = fmaxf(mt, s[jj]);
			}
			if (mt > m) {
				float c = m == -INFINITY ? 0.0f : expf(m - mt);
				sum *= c;
			#pragma unroll
	for (int e = 0; e < 16; e++) {
					acc[e] *= c;
				}
				m = mt;
			}
#pragma unroll
			for (int jj = 0; jj < 16; jj++) {
				if (s[jj] != -INFINITY) {
					float p = expf(s[jj] - m);
					sum += p;
					lane_axpy(acc, p, vs + (j0 + jj) * hdp, groups, L, l);
				}
			}
		}
		__syncthreads();
	}
	if (i < seq) {
		row_store(out, acc, 1 / sum, b, i, seq, qs, h * hd, HD, L, l);
		if (l == 0) {
			lse[(b * heads + h) * seq + i] = m + logf(sum);
		}
	}
}

// dsum[b, h, i] = dout . out over the row (AttentionGrad's D), in double.
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void attention_dsum_f32(float *dsum, const float *out, const float *dout, long long batch, long long seq,
	long long heads, long long hd) {
	GRID_STRIDE(k, batch * heads * seq) {
		long long i = k % seq, h = k / seq % heads, b = k / (seq * heads);
		const float *o = out + (b * seq + i) * heads * hd + h * hd, *d = dout + (b * seq + i) * heads * hd + h * hd;
		double s = 0;
		for (long long e = 0; e < hd; e++) {
			s += (double)o[e] * (double)d[e];
		}
		dsum[k] = (float)s;
	}
}

// dq: query rows as in attention_f32, keys and values in tiles: with
// p = exp(scale * q.k - lse) and ds = p * (dout . v - D),
// dq = scale * sum over keys of ds * k.
// amspc:launch attention
AMSP_EXTERN_C __global__ void attention_dq_f32(float *dq, const float *q, const float *k, const float *v, const float *lse,
	const float *dout, const float *dsum, long long batch, long long seq, long long heads, long long kvheads, long long hd,
	long long causal, long long lanes, long long tile) {
	AMSP_DYN_SHARED(sh);
	int L = (int)lanes, T = (int)tile, HD = (int)hd, hdp = (HD + 3) & ~3, groups = hdp / 4;
	float *ks = sh, *vs = sh + T * hdp;
	int l = threadIdx.x % L, rows = blockDim.x / L;
	long long b = blockIdx.z, h = blockIdx.y, g = h / (heads / kvheads);
	// Causal: the last rows (the most keys) first, so the grid's tail is
	// the short blocks.
	long long blk = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
	long long i0 = blk * rows, i = i0 + threadIdx.x / L;
	long long qs = heads * hd, kvs = kvheads * hd;
	float scale = (float)(1 / sqrt((double)hd));
	float qr[16], dor[16], acc[16];
	row_load(qr, q, b, i, seq, qs, h * hd, HD, L, l);
	row_load(dor, dout, b, i, seq, qs, h * hd, HD, L, l);
#pragma unroll
	for (int e = 0; e < 16; e++) {
		acc[e] = 0;
	}
	float li = i < seq ? lse[(b * heads + h) * seq + i] : 0, di = i < seq ? dsum[(b * heads + h) * seq + i] : 0;
	long long n = seq;
	if (causal && i0 + rows < seq) {
		n = i0 + rows;
	}
	for (long long t0 = 0; t0 < n; t0 += T) {
		tile_load(ks, k, b, t0, seq, kvs, g * hd, HD, hdp, T);
		tile_load(vs, v, b, t0, seq, kvs, g * hd, HD, hdp, T);
		__syncthreads();
		int tn = n - t0 < T ? (int)(n - t0) : T;
		for (int j0 = 0; j0 < tn; j0 += 4) { // four keys at a time (rows past tn are in the tile)
			float sd[8]; // scores, then dout . v
#pragma unroll
			for (int u = 0; u < 4; u++) {
				sd[u] = lane_dot(qr, ks + (j0 + u) * hdp, groups, L, l);
				sd[4 + u] = lane_dot(dor, vs + (j0 + u) * hdp, groups, L, l);
			}
			lane_sums(sd, 8, L);
#pragma unroll
			for (int u = 0; u < 4; u++) {
				int j = j0 + u;
				if (j < tn && i < seq && (!causal || t0 + j <= i)) {
					float p = expf(sd[u] * scale - li);
					lane_axpy(acc, p * (sd[4 + u] - di) * scale, ks + j * hdp, groups, L, l);
				}
			}
		}
		__syncthreads();
	}
	if (i < seq) {
		row_store(dq, acc, 1, b, i, seq, qs, h * hd, HD, L, l);
	}
}

// dk, dv of query head h (blockIdx.y): key rows of kv head h /
// (heads/kvHeads) as query rows are in attention_f32, query rows of head
// h (with their lse and D) in tiles: dv = sum of p * dout, dk = scale *
// sum of ds * q. Written at column h*hd of [batch, seq, heads*hd] rows:
// dk and dv themselves when heads == kvHeads, else one head's part that
// attention_dkv_sum_f32 adds up.
// amspc:launch attention
AMSP_EXTERN_C __global__ void attention_dkv_f32(float *dk, float *dv, const float *q, const float *k, const float *v,
	const float *lse, const float *dout, const float *dsum, long long batch, long long seq, long long heads, long long kvheads,
	long long hd, long long causal, long long lanes, long long tile) {
	AMSP_DYN_SHARED(sh);
	int L = (int)lanes, T = (int)tile, HD = (int)hd, hdp = (HD + 3) & ~3, groups = hdp / 4;
	float *qsh = sh, *dos = sh + T * hdp, *lt = sh + 2 * T * hdp, *dt = lt + T;
	int l = threadIdx.x % L, rows = blockDim.x / L;
	long long b = blockIdx.z, h = blockIdx.y, g = h / (heads / kvheads);
	long long j0 = (long long)blockIdx.x * rows, j = j0 + threadIdx.x / L;
	long long qs = heads * hd, kvs = kvheads * hd;
	float scale = (float)(1 / sqrt((double)hd));
	float kr[16], vr[16], ak[16], av[16];
	row_load(kr, k, b, j, seq, kvs, g * hd, HD, L, l);
	row_load(vr, v, b, j, seq, kvs, g * hd, HD, L, l);
#pragma unroll
	for (int e = 0; e < 16; e++) {
		ak[e] = av[e] = 0;
	}
	for (long long t0 = causal ? j0 : 0; t0 < seq; t0 += T) { // query rows before the block see none of its keys
		tile_load(qsh, q, b, t0, seq, qs, h * hd, HD, hdp, T);
		tile_load(dos, dout, b, t0, seq, qs, h * hd, HD, hdp, T);
		for (int r = threadIdx.x; r < T; r += blockDim.x) {
			lt[r] = t0 + r < seq ? lse[(b * heads + h) * seq + t0 + r] : 0;
			dt[r] = t0 + r < seq ? dsum[(b * heads + h) * seq + t0 + r] : 0;
		}
		__syncthreads();
		int tn = seq - t0 < T ? (int)(seq - t0) : T;
		for (int r0 = 0; r0 < tn; r0 += 4) { // four query rows at a time (rows past tn are in the tile)
			float sd[8]; // scores, then dout . v
#pragma unroll
			for (int u = 0; u < 4; u++) {
				sd[u] = lane_dot(kr, qsh + (r0 + u) * hdp, groups, L, l);
				sd[4 + u] = lane_dot(vr, dos + (r0 + u) * hdp, groups, L, l);
			}
			lane_sums(sd, 8, L);
#pragma unroll
			for (int u = 0; u < 4; u++) {
				int r = r0 + u;
				if (r < tn && j < seq && (!causal || t0 + r >= j)) {
					float p = expf(sd[u] * scale - lt[r]);
					lane_axpy(av, p, dos + r * hdp, groups, L, l);
					lane_axpy(ak, p * (sd[4 + u] - dt[r]) * scale, qsh + r * hdp, groups, L, l);
				}
			}
		}
		__syncthreads();
	}
	if (j < seq) {
		row_store(dk, ak, 1, b, j, seq, qs, h * hd, HD, L, l);
		row_store(dv, av, 1, b, j, seq, qs, h * hd, HD, L, l);
	}
}

// dk, dv of grouped KV heads: the parts of the group's query heads
// ([batch, seq, heads*hd] each) added in head order.
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void attention_dkv_sum_f32(float *dk, float *dv, const float *pk, const float *pv, long long batch,
	long long seq, long long heads, long long kvheads, long long hd) {
	long long group = heads / kvheads;
	GRID_STRIDE(z, batch * seq * kvheads * hd) {
		long long e = z % hd, g = z / hd % kvheads, row = z / (hd * kvheads);
		const float *a = pk + row * heads * hd + g * group * hd + e, *c = pv + row * heads * hd + g * group * hd + e;
		float sk = 0, sv = 0;
		for (long long x = 0; x < group; x++) {
			sk += a[x * hd];
			sv += c[x * hd];
		}
		dk[z] = sk;
		dv[z] = sv;
	}
}

// *first = 4 * the smallest index of a NaN or infinity in x + what it is
// (0 NaN, 1 +Inf, 2 -Inf); the host sets it to all ones first (none).
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void first_nonfinite_f32(const float *x, long long n, unsigned long long *first) {
	GRID_STRIDE(i, n) {
		float v = x[i];
		if (!(v - v == 0)) {
			atomicMin(first, (unsigned long long)i << 2 | (v != v ? 0u : v > 0 ? 1u : 2u));
		}
	}
}

// bf16 storage. Ops compute in fp32 on bf16 operands widened exactly and
// store bf16 results rounded to nearest even (kernels.RoundBF16): the
// device backend widens, runs the op's fp32 kernels, rounds in place
// (then checks for NaN and Inf, as the CPU backend does after rounding)
// and packs the top halves, which rounding has made exact.
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void bf16_widen(float *out, const unsigned short *x, long long n) {
	GRID_STRIDE(i, n) { out[i] = __uint_as_float((unsigned)x[i] << 16); }
}

// amspc:launch elementwise
AMSP_EXTERN_C __global__ void bf16_round(float *x, long long n) {
	GRID_STRIDE(i, n) {
		unsigned b = __float_as_uint(x[i]);
		if ((b & 0x7f800000u) != 0x7f800000u) {
			b += 0x7fffu + ((b >> 16) & 1u);
			x[i] = __uint_as_float(b & 0xffff0000u);
		} else if (b & 0x007fffffu) {
			x[i] = __uint_as_float(b | 0x00400000u); // a NaN stays one in two bytes
		}
	}
}

// amspc:launch elementwise
AMSP_EXTERN_C __global__ void bf16_pack(unsigned short *out, const float *x, long long n) {
	GRID_STRIDE(i, n) { out[i] = (unsigned short)(__float_as_uint(x[i]) >> 16); }
}

// bf16_finish is bf16_round, first_nonfinite_f32 and bf16_pack in one
// pass: out = x rounded to bf16 (x is left as it was), *first flagged as
// first_nonfinite_f32 flags it for the rounded values.
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void bf16_finish(unsigned short *out, const float *x, long long n, unsigned long long *first) {
	GRID_STRIDE(i, n) {
		unsigned b = __float_as_uint(x[i]);
		if ((b & 0x7f800000u) != 0x7f800000u) {
			b = (b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u;
		} else if (b & 0x007fffffu) {
			b |= 0x00400000u;
		}
		float v = __uint_as_float(b);
		if (!(v - v == 0)) {
			atomicMin(first, (unsigned long long)i << 2 | (v != v ? 0u : v > 0 ? 1u : 2u));
		}
		out[i] = (unsigned short)(b >> 16);
	}
}

// spin_ns holds its stream for ns nanoseconds of the GPU's global timer
// and does nothing else: issue 29's stand-in collective, which occupies
// a comm stream for as long as the cost model says the collective it
// stands for takes, moving no data (one thread on one SM: it does not
// take the SMs a real NCCL call's channels would).
// amspc:launch row
AMSP_EXTERN_C __global__ void spin_ns(long long ns) {
	unsigned long long t0 = amsp_globaltimer();
	while ((long long)(amsp_globaltimer() - t0) < ns) {
	}
}
