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

#ifdef __CUDACC__
#define AMSP_EXTERN_C extern "C"
#endif

#define AMSP_BLOCK 256

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
AMSP_EXTERN_C __global__ void add_f32(float *out, const float *a, const float *b, long long n, long long bn) {
	GRID_STRIDE(i, n) { out[i] = a[i] + b[i % bn]; }
}

// out = a * b with add_f32's broadcast rule.
AMSP_EXTERN_C __global__ void mul_f32(float *out, const float *a, const float *b, long long n, long long bn) {
	GRID_STRIDE(i, n) { out[i] = a[i] * b[i % bn]; }
}

// da = dy * b (broadcast as in mul_f32), and db = dy * a when b is not
// broadcast (bn == n); a broadcast db is col_sum_f32's. A null da or db is
// skipped.
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
AMSP_EXTERN_C __global__ void col_sum_f32(float *out, const float *x, const float *y, long long rows, long long d) {
	GRID_STRIDE(j, d) {
		double acc = 0;
		for (long long r = 0; r < rows; r++) {
			float v = x[r * d + j];
			acc += y ? (double)(v * y[r * d + j]) : (double)v;
		}
		out[j] = (float)acc;
	}
}

// out = x^T for x [m, n] (out [n, m]).
AMSP_EXTERN_C __global__ void transpose_f32(float *out, const float *x, long long m, long long n) {
	GRID_STRIDE(k, m * n) {
		long long i = k / n, j = k % n;
		out[j * m + i] = x[k];
	}
}

// out = x * sigmoid(x), the exponential in double.
AMSP_EXTERN_C __global__ void silu_f32(float *out, const float *x, long long n) {
	GRID_STRIDE(i, n) {
		double v = x[i];
		out[i] = (float)(v / (1 + exp(-v)));
	}
}

// dx = dy * s * (1 + x*(1-s)), s = sigmoid(x).
AMSP_EXTERN_C __global__ void silu_grad_f32(float *dx, const float *x, const float *dy, long long n) {
	GRID_STRIDE(i, n) {
		double v = x[i];
		double s = 1 / (1 + exp(-v));
		dx[i] = (float)((double)dy[i] * s * (1 + v * (1 - s)));
	}
}

// out = x/2 * (1 + erf(x/sqrt 2)), the exact GELU.
AMSP_EXTERN_C __global__ void gelu_f32(float *out, const float *x, long long n) {
	GRID_STRIDE(i, n) {
		double v = x[i];
		out[i] = (float)(0.5 * v * (1 + erf(v / 1.4142135623730951)));
	}
}

// dx = dy * (Phi(x) + x*phi(x)).
AMSP_EXTERN_C __global__ void gelu_grad_f32(float *dx, const float *x, const float *dy, long long n) {
	GRID_STRIDE(i, n) {
		double v = x[i];
		double cdf = 0.5 * (1 + erf(v / 1.4142135623730951));
		dx[i] = (float)((double)dy[i] * (cdf + v * (0.3989422804014327 * exp(-0.5 * v * v))));
	}
}

// One block per row of d: out = x / sqrt(mean(x^2) + eps) * w.
AMSP_EXTERN_C __global__ void rmsnorm_f32(float *out, const float *x, const float *w, long long rows, long long d, float eps) {
	__shared__ double red[AMSP_BLOCK];
	long long r = blockIdx.x;
	const float *xr = x + r * d;
	double ss = 0;
	for (long long j = threadIdx.x; j < d; j += blockDim.x) {
		ss += (double)xr[j] * (double)xr[j];
	}
	ss = block_sum(ss, red);
	float rs = (float)(1 / sqrt(ss / (double)d + (double)eps));
	for (long long j = threadIdx.x; j < d; j += blockDim.x) {
		out[r * d + j] = xr[j] * rs * w[j];
	}
}

// One block per row: dx = rstd * (dy*w - xh*mean(dy*w*xh)), xh = x*rstd;
// rstd[r] is kept for rmsnorm_grad_w_f32.
AMSP_EXTERN_C __global__ void rmsnorm_grad_f32(float *dx, float *rstd, const float *x, const float *w, const float *dy,
	long long rows, long long d, float eps) {
	__shared__ double red[AMSP_BLOCK];
	long long r = blockIdx.x;
	const float *xr = x + r * d, *dyr = dy + r * d;
	double ss = 0;
	for (long long j = threadIdx.x; j < d; j += blockDim.x) {
		ss += (double)xr[j] * (double)xr[j];
	}
	ss = block_sum(ss, red);
	float rs = (float)(1 / sqrt(ss / (double)d + (double)eps));
	double dot = 0;
	for (long long j = threadIdx.x; j < d; j += blockDim.x) {
		dot += (double)(dyr[j] * w[j]) * (double)(xr[j] * rs);
	}
	dot = block_sum(dot, red);
	float c = (float)(dot / (double)d);
	for (long long j = threadIdx.x; j < d; j += blockDim.x) {
		dx[r * d + j] = rs * (dyr[j] * w[j] - xr[j] * rs * c);
	}
	if (threadIdx.x == 0) {
		rstd[r] = rs;
	}
}

// dw[j] = sum over rows, in order, of dy * (x * rstd).
AMSP_EXTERN_C __global__ void rmsnorm_grad_w_f32(float *dw, const float *x, const float *dy, const float *rstd, long long rows,
	long long d) {
	GRID_STRIDE(j, d) {
		double acc = 0;
		for (long long r = 0; r < rows; r++) {
			acc += (double)(dy[r * d + j] * (x[r * d + j] * rstd[r]));
		}
		dw[j] = (float)acc;
	}
}

// One block per row: out = (x - mean) / sqrt(var + eps) * w + b, the
// biased variance taken in a second pass.
AMSP_EXTERN_C __global__ void layernorm_f32(float *out, const float *x, const float *w, const float *b, long long rows,
	long long d, float eps) {
	__shared__ double red[AMSP_BLOCK];
	long long r = blockIdx.x;
	const float *xr = x + r * d;
	double s = 0;
	for (long long j = threadIdx.x; j < d; j += blockDim.x) {
		s += (double)xr[j];
	}
	double m = block_sum(s, red) / (double)d;
	double ss = 0;
	for (long long j = threadIdx.x; j < d; j += blockDim.x) {
		double c = (double)xr[j] - m;
		ss += c * c;
	}
	ss = block_sum(ss, red);
	float mean = (float)m, rs = (float)(1 / sqrt(ss / (double)d + (double)eps));
	for (long long j = threadIdx.x; j < d; j += blockDim.x) {
		out[r * d + j] = (xr[j] - mean) * rs * w[j] + b[j];
	}
}

// One block per row: dx = rstd * (g - mean(g) - xh*mean(g*xh)), g = dy*w;
// stats[2r], stats[2r+1] keep the row's mean and rstd for
// layernorm_grad_wb_f32.
AMSP_EXTERN_C __global__ void layernorm_grad_f32(float *dx, float *stats, const float *x, const float *w, const float *dy,
	long long rows, long long d, float eps) {
	__shared__ double red[AMSP_BLOCK];
	long long r = blockIdx.x;
	const float *xr = x + r * d, *dyr = dy + r * d;
	double s = 0;
	for (long long j = threadIdx.x; j < d; j += blockDim.x) {
		s += (double)xr[j];
	}
	double m = block_sum(s, red) / (double)d;
	double ss = 0;
	for (long long j = threadIdx.x; j < d; j += blockDim.x) {
		double c = (double)xr[j] - m;
		ss += c * c;
	}
	ss = block_sum(ss, red);
	float mean = (float)m, rs = (float)(1 / sqrt(ss / (double)d + (double)eps));
	double sg = 0, sgx = 0;
	for (long long j = threadIdx.x; j < d; j += blockDim.x) {
		float g = dyr[j] * w[j];
		sg += (double)g;
		sgx += (double)g * (double)((xr[j] - mean) * rs);
	}
	sg = block_sum(sg, red);
	sgx = block_sum(sgx, red);
	float mg = (float)(sg / (double)d), mgx = (float)(sgx / (double)d);
	for (long long j = threadIdx.x; j < d; j += blockDim.x) {
		dx[r * d + j] = rs * (dyr[j] * w[j] - mg - (xr[j] - mean) * rs * mgx);
	}
	if (threadIdx.x == 0) {
		stats[2 * r] = mean;
		stats[2 * r + 1] = rs;
	}
}

// dw[j] = sum over rows of dy * xh, db[j] = sum of dy, in row order.
AMSP_EXTERN_C __global__ void layernorm_grad_wb_f32(float *dw, float *db, const float *x, const float *dy, const float *stats,
	long long rows, long long d) {
	GRID_STRIDE(j, d) {
		double aw = 0, ab = 0;
		for (long long r = 0; r < rows; r++) {
			float v = x[r * d + j], g = dy[r * d + j];
			aw += (double)(g * ((v - stats[2 * r]) * stats[2 * r + 1]));
			ab += (double)g;
		}
		dw[j] = (float)aw;
		db[j] = (float)ab;
	}
}

// RoPE on x [batch, seq, heads*hd] in the rotate-half layout: the pair
// (x[i], x[i+hd/2]) of each head at position p turns by
// sign * p * theta^(-2i/hd) (sign -1: the gradient, the inverse turn).
// The angle, its sine and cosine are double, rounded once to float. One
// thread per pair.
AMSP_EXTERN_C __global__ void rope_f32(float *out, const float *x, long long batch, long long seq, long long heads, long long hd,
	double theta, float sign) {
	long long half = hd / 2, pairs = batch * seq * heads * half;
	GRID_STRIDE(k, pairs) {
		long long i = k % half, h = k / half % heads, p = k / (half * heads) % seq, b = k / (half * heads * seq);
		double ang = (double)p * pow(theta, -2 * (double)i / (double)hd);
		float c = (float)cos(ang), s = sign * (float)sin(ang);
		long long base = ((b * seq + p) * heads + h) * hd;
		float u = x[base + i], v = x[base + i + half];
		out[base + i] = u * c - v * s;
		out[base + i + half] = v * c + u * s;
	}
}

// out[t] = table[ids[t]] for rows of d. An id outside [0, vocab) writes
// nothing and lowers *bad to its position (the host sets *bad to n
// first), so the host can name the first bad id.
AMSP_EXTERN_C __global__ void embed_f32(float *out, const int *ids, const float *table, long long n, long long vocab, long long d,
	unsigned long long *bad) {
	GRID_STRIDE(k, n * d) {
		long long t = k / d, j = k % d;
		int id = ids[t];
		if (id < 0 || id >= vocab) {
			atomicMin(bad, (unsigned long long)t);
		} else {
			out[k] = table[(long long)id * d + j];
		}
	}
}

// dtable[v] = the sum of dy's rows at the positions where id v occurs, in
// position order: pos[start[v]:start[v+1]] lists them ascending (the host
// builds the lists from the ids, which it loaded). Rows of ids that do
// not occur are zero.
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

// One block per row of logits: loss[r] = logsumexp(row) - row[target],
// in double (the host takes the mean in its own order). A target outside
// [0, vocab) lowers *bad to its row.
AMSP_EXTERN_C __global__ void cross_entropy_f32(double *loss, const float *logits, const int *targets, long long rows,
	long long vocab, unsigned long long *bad) {
	__shared__ double red[AMSP_BLOCK];
	__shared__ float redf[AMSP_BLOCK];
	long long r = blockIdx.x;
	const float *row = logits + r * vocab;
	float mx = row[0];
	for (long long j = threadIdx.x; j < vocab; j += blockDim.x) {
		mx = row[j] > mx ? row[j] : mx;
	}
	mx = block_max(mx, redf);
	double s = 0;
	for (long long j = threadIdx.x; j < vocab; j += blockDim.x) {
		s += exp((double)(row[j] - mx));
	}
	s = block_sum(s, red);
	if (threadIdx.x == 0) {
		int t = targets[r];
		if (t < 0 || t >= vocab) {
			atomicMin(bad, (unsigned long long)r);
			loss[r] = 0;
		} else {
			loss[r] = (double)mx + log(s) - (double)row[t];
		}
	}
}

// One block per row: dlogits = (softmax(logits) - onehot(target)) * f,
// f the upstream gradient over the rows, in double.
AMSP_EXTERN_C __global__ void cross_entropy_grad_f32(float *dlogits, const float *logits, const int *targets, long long rows,
	long long vocab, double f) {
	__shared__ double red[AMSP_BLOCK];
	__shared__ float redf[AMSP_BLOCK];
	long long r = blockIdx.x;
	const float *row = logits + r * vocab;
	float mx = row[0];
	for (long long j = threadIdx.x; j < vocab; j += blockDim.x) {
		mx = row[j] > mx ? row[j] : mx;
	}
	mx = block_max(mx, redf);
	double s = 0;
	for (long long j = threadIdx.x; j < vocab; j += blockDim.x) {
		s += exp((double)(row[j] - mx));
	}
	s = block_sum(s, red);
	double lse = (double)mx + log(s);
	int t = targets[r];
	for (long long j = threadIdx.x; j < vocab; j += blockDim.x) {
		double v = exp((double)row[j] - lse);
		if (j == t) {
			v -= 1;
		}
		dlogits[r * vocab + j] = (float)(v * f);
	}
}

// One AdamW step per element, in double as kernels.AdamW, with explicit
// roundings so no multiply-add is fused (the Go kernel's bits). Elements
// inside one of the nd ranges decay[2k] <= i < decay[2k+1] (ascending,
// disjoint) are decayed: their parameter is first multiplied by keep.
AMSP_EXTERN_C __global__ void adamw_f32(float *p, float *m, float *v, const float *g, long long n, const long long *decay,
	long long nd, double beta1, double c1, double beta2, double c2, double step_size, double bc2, double eps, double keep) {
	GRID_STRIDE(i, n) {
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
		double pi = __dmul_rn((double)p[i], k);
		double gi = (double)g[i];
		double mi = __dadd_rn(__dmul_rn(beta1, (double)m[i]), __dmul_rn(c1, gi));
		double vi = __dadd_rn(__dmul_rn(beta2, (double)v[i]), __dmul_rn(__dmul_rn(c2, gi), gi));
		m[i] = (float)mi;
		v[i] = (float)vi;
		p[i] = (float)__dsub_rn(pi, __dmul_rn(step_size, mi) / __dadd_rn(sqrt(vi) / bc2, eps));
	}
}

// Attention. q and out are [batch, seq, heads*hd], k and v [batch, seq,
// kvHeads*hd]; query head h reads kv head h / (heads/kvHeads); lse is
// [batch, heads, seq]. Scores are scale * q.k with scale = 1/sqrt(hd).
// Grid (ceil(seq/B), heads or kvHeads, batch), B = blockDim.x threads,
// one query (or key) row each; the other operand streams through dynamic
// shared memory in tiles of B rows, 2*B*hd floats (attention_smem). An
// online softmax (FlashAttention's) keeps one running max and sum per
// row, so the seq x seq probabilities are never stored; every sum runs
// in a fixed order, so results do not vary from run to run.

#ifdef __CUDACC__
#define AMSP_DYN_SHARED(name) extern __shared__ float name[]
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#endif

// AMSP_MAX_HD is the largest head dim the kernels take.
#define AMSP_MAX_HD 256

AMSP_EXTERN_C __global__ void attention_f32(float *out, float *lse, const float *q, const float *k, const float *v,
	long long batch, long long seq, long long heads, long long kvheads, long long hd, long long causal) {
	AMSP_DYN_SHARED(tile);
	float *ks = tile, *vs = tile + blockDim.x * hd;
	long long b = blockIdx.z, h = blockIdx.y, g = h / (heads / kvheads);
	long long i0 = (long long)blockIdx.x * blockDim.x, i = i0 + threadIdx.x;
	long long qs = heads * hd, kvs = kvheads * hd;
	float scale = (float)(1 / sqrt((double)hd));
	float qr[AMSP_MAX_HD], acc[AMSP_MAX_HD];
	for (long long e = 0; e < hd; e++) {
		qr[e] = i < seq ? q[(b * seq + i) * qs + h * hd + e] : 0;
		acc[e] = 0;
	}
	float m = -INFINITY;
	double l = 0;
	long long n = seq;
	if (causal && i0 + blockDim.x < seq) {
		n = i0 + blockDim.x;
	}
	for (long long t0 = 0; t0 < n; t0 += blockDim.x) {
		long long tn = n - t0 < blockDim.x ? n - t0 : blockDim.x;
		for (long long r = threadIdx.x; r < tn; r += blockDim.x) {
			for (long long e = 0; e < hd; e++) {
				ks[r * hd + e] = k[(b * seq + t0 + r) * kvs + g * hd + e];
				vs[r * hd + e] = v[(b * seq + t0 + r) * kvs + g * hd + e];
			}
		}
		__syncthreads();
		for (long long r = 0; i < seq && r < tn && (!causal || t0 + r <= i); r++) {
			float s = 0;
			for (long long e = 0; e < hd; e++) {
				s += qr[e] * ks[r * hd + e];
			}
			s *= scale;
			if (s > m) {
				float c = m == -INFINITY ? 0 : (float)exp((double)(m - s));
				l *= c;
				for (long long e = 0; e < hd; e++) {
					acc[e] *= c;
				}
				m = s;
			}
			float p = (float)exp((double)(s - m));
			l += p;
			for (long long e = 0; e < hd; e++) {
				acc[e] += p * vs[r * hd + e];
			}
		}
		__syncthreads();
	}
	if (i < seq) {
		float inv = (float)(1 / l);
		for (long long e = 0; e < hd; e++) {
			out[(b * seq + i) * qs + h * hd + e] = acc[e] * inv;
		}
		lse[(b * heads + h) * seq + i] = (float)((double)m + log(l));
	}
}

// dsum[b, h, i] = dout . out over the row (AttentionGrad's D), in double.
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

// dq: one query row per thread, keys in tiles: with p = exp(s - lse) and
// ds = p * (dout . v - D), dq = scale * sum over keys of ds * k.
AMSP_EXTERN_C __global__ void attention_dq_f32(float *dq, const float *q, const float *k, const float *v, const float *lse,
	const float *dout, const float *dsum, long long batch, long long seq, long long heads, long long kvheads, long long hd,
	long long causal) {
	AMSP_DYN_SHARED(tile);
	float *ks = tile, *vs = tile + blockDim.x * hd;
	long long b = blockIdx.z, h = blockIdx.y, g = h / (heads / kvheads);
	long long i0 = (long long)blockIdx.x * blockDim.x, i = i0 + threadIdx.x;
	long long qs = heads * hd, kvs = kvheads * hd;
	float scale = (float)(1 / sqrt((double)hd));
	float qr[AMSP_MAX_HD], dor[AMSP_MAX_HD], acc[AMSP_MAX_HD];
	for (long long e = 0; e < hd; e++) {
		qr[e] = i < seq ? q[(b * seq + i) * qs + h * hd + e] : 0;
		dor[e] = i < seq ? dout[(b * seq + i) * qs + h * hd + e] : 0;
		acc[e] = 0;
	}
	float li = i < seq ? lse[(b * heads + h) * seq + i] : 0, di = i < seq ? dsum[(b * heads + h) * seq + i] : 0;
	long long n = seq;
	if (causal && i0 + blockDim.x < seq) {
		n = i0 + blockDim.x;
	}
	for (long long t0 = 0; t0 < n; t0 += blockDim.x) {
		long long tn = n - t0 < blockDim.x ? n - t0 : blockDim.x;
		for (long long r = threadIdx.x; r < tn; r += blockDim.x) {
			for (long long e = 0; e < hd; e++) {
				ks[r * hd + e] = k[(b * seq + t0 + r) * kvs + g * hd + e];
				vs[r * hd + e] = v[(b * seq + t0 + r) * kvs + g * hd + e];
			}
		}
		__syncthreads();
		for (long long r = 0; i < seq && r < tn && (!causal || t0 + r <= i); r++) {
			float s = 0, dp = 0;
			for (long long e = 0; e < hd; e++) {
				s += qr[e] * ks[r * hd + e];
				dp += dor[e] * vs[r * hd + e];
			}
			float p = (float)exp((double)(s * scale - li));
			float ds = p * (dp - di) * scale;
			for (long long e = 0; e < hd; e++) {
				acc[e] += ds * ks[r * hd + e];
			}
		}
		__syncthreads();
	}
	for (long long e = 0; i < seq && e < hd; e++) {
		dq[(b * seq + i) * qs + h * hd + e] = acc[e];
	}
}

// dk, dv: one key row of kv head g per thread, over the query heads of
// its group in order and their query rows in tiles:
// dv = sum of p * dout, dk = scale * sum of ds * q.
AMSP_EXTERN_C __global__ void attention_dkv_f32(float *dk, float *dv, const float *q, const float *k, const float *v,
	const float *lse, const float *dout, const float *dsum, long long batch, long long seq, long long heads, long long kvheads,
	long long hd, long long causal) {
	AMSP_DYN_SHARED(tile);
	float *qsh = tile, *dos = tile + blockDim.x * hd;
	long long b = blockIdx.z, g = blockIdx.y, group = heads / kvheads;
	long long j0 = (long long)blockIdx.x * blockDim.x, j = j0 + threadIdx.x;
	long long qs = heads * hd, kvs = kvheads * hd;
	float scale = (float)(1 / sqrt((double)hd));
	float kr[AMSP_MAX_HD], vr[AMSP_MAX_HD], ak[AMSP_MAX_HD], av[AMSP_MAX_HD];
	for (long long e = 0; e < hd; e++) {
		kr[e] = j < seq ? k[(b * seq + j) * kvs + g * hd + e] : 0;
		vr[e] = j < seq ? v[(b * seq + j) * kvs + g * hd + e] : 0;
		ak[e] = av[e] = 0;
	}
	long long start = causal ? j0 : 0; // query rows before the block see none of its keys
	for (long long h = g * group; h < (g + 1) * group; h++) {
		for (long long t0 = start; t0 < seq; t0 += blockDim.x) {
			long long tn = seq - t0 < blockDim.x ? seq - t0 : blockDim.x;
			for (long long r = threadIdx.x; r < tn; r += blockDim.x) {
				for (long long e = 0; e < hd; e++) {
					qsh[r * hd + e] = q[(b * seq + t0 + r) * qs + h * hd + e];
					dos[r * hd + e] = dout[(b * seq + t0 + r) * qs + h * hd + e];
				}
			}
			__syncthreads();
			for (long long r = 0; j < seq && r < tn; r++) {
				long long i = t0 + r;
				if (causal && i < j) {
					continue;
				}
				float s = 0, dp = 0;
				for (long long e = 0; e < hd; e++) {
					s += qsh[r * hd + e] * kr[e];
					dp += dos[r * hd + e] * vr[e];
				}
				float p = (float)exp((double)(s * scale - lse[(b * heads + h) * seq + i]));
				float ds = p * (dp - dsum[(b * heads + h) * seq + i]) * scale;
				for (long long e = 0; e < hd; e++) {
					av[e] += p * dos[r * hd + e];
					ak[e] += ds * qsh[r * hd + e];
				}
			}
			__syncthreads();
		}
	}
	for (long long e = 0; j < seq && e < hd; e++) {
		dk[(b * seq + j) * kvs + g * hd + e] = ak[e];
		dv[(b * seq + j) * kvs + g * hd + e] = av[e];
	}
}

// *first = the smallest index of a NaN or infinity in x (the host sets it
// to n first: none).
AMSP_EXTERN_C __global__ void first_nonfinite_f32(const float *x, long long n, unsigned long long *first) {
	GRID_STRIDE(i, n) {
		float v = x[i];
		if (!(v - v == 0)) {
			atomicMin(first, (unsigned long long)i);
		}
	}
}

// bf16 storage. Ops compute in fp32 on bf16 operands widened exactly and
// store bf16 results rounded to nearest even (kernels.RoundBF16): the
// device backend widens, runs the op's fp32 kernels, rounds in place
// (then checks for NaN and Inf, as the CPU backend does after rounding)
// and packs the top halves, which rounding has made exact.
AMSP_EXTERN_C __global__ void bf16_widen(float *out, const unsigned short *x, long long n) {
	GRID_STRIDE(i, n) { out[i] = __uint_as_float((unsigned)x[i] << 16); }
}

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

AMSP_EXTERN_C __global__ void bf16_pack(unsigned short *out, const float *x, long long n) {
	GRID_STRIDE(i, n) { out[i] = (unsigned short)(__float_as_uint(x[i]) >> 16); }
}
