// Attention on bf16 tensor cores: one warp's 16x8x16 bf16 matrix product
// with fp32 accumulation (PTX mma.sync.aligned.m16n8k16.row.col.f32.bf16),
// a probe kernel that loads its operands into the fragments the PTX ISA
// documents (so a GPU test checks that layout against a plain product),
// and FlashAttention-2's forward and backward on it. Not part of ops.cu:
// NVRTC compiles this file only for `--tensor-cores`
// (engine.DeviceOptions.TensorCoreAttention) and its tests. The
// kernels are developed against shim.h's emulation of amsp_mma_16816,
// which the probe pins to the hardware's.
//
// Fragments of lane l (g = l / 4, t = l % 4; a register's low half holds
// the lower-indexed element):
//   A, 16x16 row-major: a[0] = A[g][2t..2t+1], a[1] = A[g+8][2t..2t+1],
//                       a[2] = A[g][2t+8..2t+9], a[3] = A[g+8][2t+8..2t+9]
//   B, 16x8 (k x n):    b[0] = B[2t..2t+1][g], b[1] = B[2t+8..2t+9][g]
//   C and D, 16x8 fp32: c[0..1] = C[g][2t..2t+1], c[2..3] = C[g+8][2t..2t+1]

#ifdef __CUDACC__
#define AMSP_EXTERN_C extern "C"
__device__ __forceinline__ void amsp_mma_16816(float *d, const unsigned *a, const unsigned *b, const float *c) {
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
		     "{%10, %11, %12, %13};\n"
		     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}
#endif

// mma_pair is two bf16 values in one register, lo in the low half.
__device__ __forceinline__ unsigned mma_pair(unsigned short lo, unsigned short hi) {
	return (unsigned)lo | (unsigned)hi << 16;
}

// mma_probe: one warp computes d = a b + c for a 16x16 bf16 a (row-major),
// a 16x8 bf16 b (row-major, k by n) and a 16x8 fp32 c, d as c. Launched
// as the attention kernels are, at its own geometry (one block of 32
// threads), with every thread taking part.
// amspc:launch attention
AMSP_EXTERN_C __global__ void mma_probe(float *d, const unsigned short *a, const unsigned short *b, const float *c) {
	int l = threadIdx.x, g = l / 4, t = l % 4;
	unsigned fa[4], fb[2];
	float fc[4], fd[4];
	fa[0] = mma_pair(a[g * 16 + 2 * t], a[g * 16 + 2 * t + 1]);
	fa[1] = mma_pair(a[(g + 8) * 16 + 2 * t], a[(g + 8) * 16 + 2 * t + 1]);
	fa[2] = mma_pair(a[g * 16 + 2 * t + 8], a[g * 16 + 2 * t + 9]);
	fa[3] = mma_pair(a[(g + 8) * 16 + 2 * t + 8], a[(g + 8) * 16 + 2 * t + 9]);
	fb[0] = mma_pair(b[(2 * t) * 8 + g], b[(2 * t + 1) * 8 + g]);
	fb[1] = mma_pair(b[(2 * t + 8) * 8 + g], b[(2 * t + 9) * 8 + g]);
	fc[0] = c[g * 8 + 2 * t];
	fc[1] = c[g * 8 + 2 * t + 1];
	fc[2] = c[(g + 8) * 8 + 2 * t];
	fc[3] = c[(g + 8) * 8 + 2 * t + 1];
	amsp_mma_16816(fd, fa, fb, fc);
	d[g * 8 + 2 * t] = fd[0];
	d[g * 8 + 2 * t + 1] = fd[1];
	d[(g + 8) * 8 + 2 * t] = fd[2];
	d[(g + 8) * 8 + 2 * t + 1] = fd[3];
}

// Causal or full attention forward on tensor cores (FlashAttention-2's
// loop), for bf16 q, k, v ([batch, seq, heads*hd] and [batch, seq,
// kvheads*hd], bf16 as their top 16 bits) with hd a multiple of 16 up to
// 128: out ([batch, seq, heads*hd] fp32) and lse ([batch, heads, seq]) as
// attention_f32's, but the probabilities enter the product with v
// rounded to bf16 (nearest even; the row sums add the rounded values),
// as PyTorch's bf16 attention does, so out is within bf16's precision of
// the fp32 kernel's, not its 1e-5.
//
// Geometry: 128 threads (4 warps) a block, 16 query rows a warp, grid
// (ceil(seq/64), heads, batch), the dynamic shared memory of
// gpu.MMASmem: a tile of 64 keys (k row-major, v transposed) at a time.
// A warp's scores for a tile are 8 products of 16x8 (k steps of 16 over
// hd); the
// probabilities, in the registers the scores left them, are the A
// fragments of the product with v, so they never leave the warp.

#ifdef __CUDACC__
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#define AMSP_MMA_SHARED(name) extern __shared__ unsigned amsp_mma_dyn_##name[]; unsigned short *name = (unsigned short *)amsp_mma_dyn_##name
__device__ __forceinline__ float mma_shfl_xor(float v, int off) { return __shfl_xor_sync(0xffffffffu, v, off); }
__device__ __forceinline__ float mma_bits_float(unsigned u) { return __uint_as_float(u); }
__device__ __forceinline__ unsigned mma_float_bits(float f) { return __float_as_uint(f); }
#else
#define AMSP_MMA_SHARED(name) \
	static unsigned name##_words[16 << 10]; \
	unsigned short *name = (unsigned short *)name##_words
#define mma_shfl_xor amsp_shfl_xor
#define mma_bits_float __uint_as_float
#define mma_float_bits __float_as_uint
#endif

// mma_bf16 is x rounded to bf16, nearest even (x finite), as its bits.
__device__ __forceinline__ unsigned short mma_bf16(float x) {
	unsigned b = mma_float_bits(x);
	return (unsigned short)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

// mma_frags loads rows r0+g and r0+g+8 (of seq; zeros past it) of x
// (rows stride elements apart, from column col) as A fragments, one set
// per k step of 16 columns, up to hd.
__device__ __forceinline__ void mma_frags(unsigned f[8][4], const unsigned short *x, long long b, long long r0, long long seq,
	long long stride, long long col, int hd, int g, int t) {
#pragma unroll
	for (int s = 0; s < 8; s++) {
#pragma unroll
		for (int y = 0; y < 4; y++) {
			long long row = r0 + g + ((y & 1) ? 8 : 0);
			int c = 16 * s + 2 * t + (y >= 2 ? 8 : 0);
			f[s][y] = 0;
			if (16 * s < hd && row < seq) {
				const unsigned short *p = x + (b * seq + row) * stride + col + c;
				f[s][y] = (unsigned)p[0] | (unsigned)p[1] << 16;
			}
		}
	}
}

// Shared-memory tiles' rows are AMSP_MMA_PAD halves longer than their
// data: a warp's fragment loads (8 rows, 4 words each) then fall in 32
// different banks, and a transposed tile's stores spread over them.
#define AMSP_MMA_PAD 8

// mma_load8 reads 8 bf16 values (16 bytes) at p as 4 words, the
// lower-indexed value in each word's low half: one vector load on the GPU
// where p is 16-byte aligned.
__device__ __forceinline__ void mma_load8(unsigned w[4], const unsigned short *p) {
#ifdef __CUDACC__
	if (((unsigned long long)p & 15) == 0) {
		uint4 v = *(const uint4 *)p;
		w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
		return;
	}
#endif
	for (int u = 0; u < 4; u++) {
		w[u] = (unsigned)p[2 * u] | (unsigned)p[2 * u + 1] << 16;
	}
}

// MMA_TILE_LOADS is how many 16-byte loads a thread of mma_tile has in
// flight before it stores them (a 64 x 128 tile over 128 threads: all).
#define MMA_TILE_LOADS 8

// mma_tile loads rows t0..t0+n-1 of x (zeros past seq) into a row-major
// tile rm of n rows of hd (rows hd+AMSP_MMA_PAD apart) and a transposed
// one tr of hd rows of n (n+AMSP_MMA_PAD apart); either may be null. Each
// thread reads 8 values a load, up to MMA_TILE_LOADS loads before it
// stores any, so their latencies overlap (one 2-byte load after another
// made the kernels wait on memory most of the time).
__device__ __forceinline__ void mma_tile(unsigned short *rm, unsigned short *tr, const unsigned short *x, long long b, long long t0,
	long long seq, long long stride, long long col, int hd, int n) {
	int hd8 = hd / 8, total = n * hd8;
	for (int z0 = 0; z0 < total; z0 += MMA_TILE_LOADS * blockDim.x) {
		unsigned w[MMA_TILE_LOADS][4];
#pragma unroll
		for (int c = 0; c < MMA_TILE_LOADS; c++) {
			int z = z0 + c * blockDim.x + threadIdx.x;
			long long i = t0 + z / hd8;
			w[c][0] = w[c][1] = w[c][2] = w[c][3] = 0;
			if (z < total && i < seq) {
				mma_load8(w[c], x + (b * seq + i) * stride + col + (z % hd8) * 8);
			}
		}
#pragma unroll
		for (int c = 0; c < MMA_TILE_LOADS; c++) {
			int z = z0 + c * blockDim.x + threadIdx.x;
			if (z < total) {
				int r = z / hd8, d = (z % hd8) * 8;
#pragma unroll
				for (int u = 0; u < 8; u++) {
					unsigned short e = (unsigned short)(w[c][u / 2] >> (16 * (u & 1)));
					if (rm) {
						rm[r * (hd + AMSP_MMA_PAD) + d + u] = e;
					}
					if (tr) {
						tr[(d + u) * (n + AMSP_MMA_PAD) + r] = e;
					}
				}
			}
		}
	}
}

// mma_b is the B fragment of rows 2t, 2t+1, 2t+8, 2t+9 of column g as a
// row p of a transposed tile holds them (p at column 2t of row g).
// (Every tile starts at an even half and its rows are an even number of
// halves long, so p is 4-byte aligned: one 32-bit shared load a word on
// the GPU.)
__device__ __forceinline__ void mma_b(unsigned *fb, const unsigned short *p) {
#ifdef __CUDACC__
	fb[0] = *(const unsigned *)p;
	fb[1] = *(const unsigned *)(p + 8);
#else
	fb[0] = (unsigned)p[0] | (unsigned)p[1] << 16;
	fb[1] = (unsigned)p[8] | (unsigned)p[9] << 16;
#endif
}

// mma_scores is one 16x8 tile of a product A B with A as fragments f
// (one set per k step of 16, hd wide) and B's 8 columns the rows 8j..8j+7
// of a row-major tile of hd-wide rows: a warp's 16 rows by 8 of the
// tile's (scores q.k, or dout.v).
__device__ __forceinline__ void mma_scores(float *s, const unsigned f[8][4], const unsigned short *tile, int j, int hd, int g, int t) {
	s[0] = s[1] = s[2] = s[3] = 0;
#pragma unroll
	for (int st = 0; st < 8; st++) {
		if (16 * st < hd) {
			unsigned fb[2];
			mma_b(fb, tile + (8 * j + g) * (hd + AMSP_MMA_PAD) + 16 * st + 2 * t);
			amsp_mma_16816(s, f[st], fb, s);
		}
	}
}

// mma_to_a puts tile j's four values (bf16, as an accumulator tile holds
// them: rows g and g+8, columns 2t and 2t+1) into the A fragments f of
// the 16 columns it is half of.
__device__ __forceinline__ void mma_to_a(unsigned f[4][4], int j, const unsigned short *v) {
	f[j / 2][(j & 1) * 2] = (unsigned)v[0] | (unsigned)v[1] << 16;
	f[j / 2][(j & 1) * 2 + 1] = (unsigned)v[2] | (unsigned)v[3] << 16;
}

// mma_accumulate adds A B to acc's dtiles tiles of 8 columns: A as
// fragments f over n columns (k steps of 16), B from a transposed tile of
// n-long rows (row c holds B's column c).
__device__ __forceinline__ void mma_accumulate(float acc[16][4], const unsigned f[4][4], const unsigned short *tr, int n, int dtiles,
	int g, int t) {
#pragma unroll
	for (int dj = 0; dj < 16; dj++) {
		if (dj < dtiles) {
#pragma unroll
			for (int kk = 0; kk < 4; kk++) {
				if (16 * kk < n) {
					unsigned fb[2];
					mma_b(fb, tr + (8 * dj + g) * (n + AMSP_MMA_PAD) + 16 * kk + 2 * t);
					amsp_mma_16816(acc[dj], f[kk], fb, acc[dj]);
				}
			}
		}
	}
}

// mma_store writes acc's dtiles tiles of 8 columns, rows[0] and rows[1]
// (those before seq) scaled by f[0] and f[1], to x's rows (stride apart)
// from column col.
__device__ __forceinline__ void mma_store(float *x, const float acc[16][4], const float *f, long long b, const long long *rows,
	long long seq, long long stride, long long col, int dtiles, int t) {
#pragma unroll
	for (int dj = 0; dj < 16; dj++) {
#pragma unroll
		for (int y = 0; y < 4; y++) {
			long long row = rows[y >> 1];
			if (dj < dtiles && row < seq) {
				x[(b * seq + row) * stride + col + 8 * dj + 2 * t + (y & 1)] = acc[dj][y] * f[y >> 1];
			}
		}
	}
}

// amspc:launch attention
AMSP_EXTERN_C __global__ void attention_mma_fwd(float *out, float *lse, const unsigned short *q, const unsigned short *k,
	const unsigned short *v, long long batch, long long seq, long long heads, long long kvheads, long long hd,
	long long causal) {
	AMSP_MMA_SHARED(sh);
	int HD = (int)hd, dtiles = HD / 8;
	unsigned short *ks = sh, *vt = sh + 64 * (HD + AMSP_MMA_PAD); // k [64][hd], v transposed [hd][64]
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
	long long b = blockIdx.z, h = blockIdx.y, kvh = h / (heads / kvheads);
	long long blk = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x; // the longest blocks first
	long long i0 = blk * 64, r0 = i0 + warp * 16;
	long long qs = heads * hd, kvs = kvheads * hd;
	long long rows[2] = {r0 + g, r0 + g + 8};
	float scale = (float)(1 / sqrt((double)hd));

	unsigned qf[8][4]; // this warp's q rows as A fragments
	mma_frags(qf, q, b, r0, seq, qs, h * hd, HD, g, t);
	float o[16][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0};
#pragma unroll
	for (int j = 0; j < 16; j++) {
		o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0;
	}
	long long n = seq;
	if (causal && i0 + 64 < seq) {
		n = i0 + 64;
	}
	for (long long t0 = 0; t0 < n; t0 += 64) {
		__syncthreads(); // the last tile's readers are done
		mma_tile(ks, 0, k, b, t0, seq, kvs, kvh * hd, HD, 64);
		mma_tile(0, vt, v, b, t0, seq, kvs, kvh * hd, HD, 64);
		__syncthreads();
		// Scores: 8 tiles of 8 keys.
		float s[8][4];
#pragma unroll
		for (int j = 0; j < 8; j++) {
			mma_scores(s[j], qf, ks, j, HD, g, t);
		}
		// Mask and scale; each lane's two rows' maxima over the tile.
		float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
		for (int j = 0; j < 8; j++) {
#pragma unroll
			for (int x = 0; x < 4; x++) {
				long long key = t0 + 8 * j + 2 * t + (x & 1), row = rows[x >> 1];
				s[j][x] = (key < seq && (!causal || key <= row)) ? s[j][x] * scale : -INFINITY;
				mx[x >> 1] = fmaxf(mx[x >> 1], s[j][x]);
			}
		}
		unsigned pf[4][4]; // probabilities as A fragments, one set per 16 keys
#pragma unroll
		for (int rr = 0; rr < 2; rr++) {
			mx[rr] = fmaxf(mx[rr], mma_shfl_xor(mx[rr], 1));
			mx[rr] = fmaxf(mx[rr], mma_shfl_xor(mx[rr], 2));
			float mnew = fmaxf(m[rr], mx[rr]);
			float c = (m[rr] == -INFINITY || mnew == -INFINITY) ? (m[rr] == -INFINITY ? 0.0f : 1.0f) : expf(m[rr] - mnew);
			l[rr] *= c;
#pragma unroll
			for (int j = 0; j < 16; j++) {
				o[j][2 * rr] *= c;
				o[j][2 * rr + 1] *= c;
			}
			m[rr] = mnew;
		}
#pragma unroll
		for (int j = 0; j < 8; j++) {
			unsigned short pb[4];
#pragma unroll
			for (int x = 0; x < 4; x++) {
				float p = s[j][x] == -INFINITY ? 0.0f : expf(s[j][x] - m[x >> 1]);
				pb[x] = mma_bf16(p);
				l[x >> 1] += mma_bits_float((unsigned)pb[x] << 16);
			}
			mma_to_a(pf, j, pb);
		}
		mma_accumulate(o, pf, vt, 64, dtiles, g, t); // out += p v
	}
#pragma unroll
	for (int rr = 0; rr < 2; rr++) {
		l[rr] += mma_shfl_xor(l[rr], 1);
		l[rr] += mma_shfl_xor(l[rr], 2);
	}
	float inv[2] = {1 / l[0], 1 / l[1]};
	mma_store(out, o, inv, b, rows, seq, qs, h * hd, dtiles, t);
	if (t == 0) {
#pragma unroll
		for (int rr = 0; rr < 2; rr++) {
			if (rows[rr] < seq) {
				lse[(b * heads + h) * seq + rows[rr]] = m[rr] + logf(l[rr]);
			}
		}
	}
}

// Attention's backward on tensor cores, for bf16 q, k, v and dout with hd
// a multiple of 16 up to 128, lse and dsum (D = rowsum(out * dout)) as
// attention_dq_f32 and attention_dkv_f32 take them, products of bf16
// values with fp32 accumulation: the probabilities and ds = p (dout.v -
// D) scale enter the products rounded to bf16, so the gradients are
// within bf16's precision of the fp32 kernels', not their 1e-5.
//
// attention_mma_dkv: 128 threads, 16 key rows a warp (64 a block) of the
// kv head of query head blockIdx.y, query rows in tiles of 64 (32 when hd
// > 64) with their lse and D, q and dout row-major and transposed in
// shared memory (gpu.MMASmem); grid (ceil(seq/64), heads, batch). Writes dk and dv at column h*hd of [batch, seq, heads*hd] rows,
// as attention_dkv_f32 does (one head's part; attention_dkv_sum_f32 adds
// a group's).
// amspc:launch attention
AMSP_EXTERN_C __global__ void attention_mma_dkv(float *dk, float *dv, const unsigned short *q, const unsigned short *k,
	const unsigned short *v, const float *lse, const unsigned short *dout, const float *dsum, long long batch, long long seq,
	long long heads, long long kvheads, long long hd, long long causal) {
	AMSP_MMA_SHARED(sh);
	int HD = (int)hd, TQ = HD <= 64 ? 64 : 32, dtiles = HD / 8;
	int rl = TQ * (HD + AMSP_MMA_PAD), tl = HD * (TQ + AMSP_MMA_PAD); // a row-major and a transposed tile
	unsigned short *qr = sh, *qt = qr + rl, *dr = qt + tl, *dt = dr + rl;
	float *ls = (float *)(dt + tl), *Ds = ls + TQ;
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
	long long b = blockIdx.z, h = blockIdx.y, kvh = h / (heads / kvheads);
	long long j0 = (long long)blockIdx.x * 64, jw = j0 + warp * 16;
	long long qs = heads * hd, kvs = kvheads * hd;
	long long keys[2] = {jw + g, jw + g + 8};
	float scale = (float)(1 / sqrt((double)hd));
	unsigned kf[8][4], vf[8][4];
	mma_frags(kf, k, b, jw, seq, kvs, kvh * hd, HD, g, t);
	mma_frags(vf, v, b, jw, seq, kvs, kvh * hd, HD, g, t);
	float ak[16][4], av[16][4];
#pragma unroll
	for (int j = 0; j < 16; j++) {
#pragma unroll
		for (int x = 0; x < 4; x++) {
			ak[j][x] = av[j][x] = 0;
		}
	}
	for (long long t0 = causal ? j0 - j0 % TQ : 0; t0 < seq; t0 += TQ) { // earlier queries see none of these keys
		__syncthreads();
		mma_tile(qr, qt, q, b, t0, seq, qs, h * hd, HD, TQ);
		mma_tile(dr, dt, dout, b, t0, seq, qs, h * hd, HD, TQ);
		for (int r = threadIdx.x; r < TQ; r += blockDim.x) {
			ls[r] = t0 + r < seq ? lse[(b * heads + h) * seq + t0 + r] : 0;
			Ds[r] = t0 + r < seq ? dsum[(b * heads + h) * seq + t0 + r] : 0;
		}
		__syncthreads();
		// Scores and dout . v, transposed: this warp's 16 keys by the
		// tile's queries, in tiles of 8 queries.
		unsigned pf[4][4], sf[4][4];
#pragma unroll
		for (int j = 0; j < 8; j++) {
			if (8 * j < TQ) {
				float s[4], dp[4];
				mma_scores(s, kf, qr, j, HD, g, t);
				mma_scores(dp, vf, dr, j, HD, g, t);
				unsigned short pb[4], sb[4];
#pragma unroll
				for (int x = 0; x < 4; x++) {
					int r = 8 * j + 2 * t + (x & 1);
					long long i = t0 + r, key = keys[x >> 1];
					float p = 0, ds = 0;
					if (i < seq && key < seq && (!causal || i >= key)) {
						p = expf(s[x] * scale - ls[r]);
						ds = p * (dp[x] - Ds[r]) * scale;
					}
					pb[x] = mma_bf16(p);
					sb[x] = mma_bf16(ds);
				}
				mma_to_a(pf, j, pb);
				mma_to_a(sf, j, sb);
			}
		}
		mma_accumulate(av, pf, dt, TQ, dtiles, g, t); // dv += p^T dout
		mma_accumulate(ak, sf, qt, TQ, dtiles, g, t); // dk += ds^T q
	}
	float one[2] = {1, 1};
	mma_store(dk, ak, one, b, keys, seq, qs, h * hd, dtiles, t);
	mma_store(dv, av, one, b, keys, seq, qs, h * hd, dtiles, t);
}

// attention_mma_dq: 128 threads, 16 query rows a warp (64 a block, the
// causal longest first), keys in tiles of 64 (32 when hd > 64), k and v
// row-major and k transposed in shared memory (gpu.MMASmem); grid
// (ceil(seq/64), heads, batch). dq = scale * sum over keys of ds k.
// amspc:launch attention
AMSP_EXTERN_C __global__ void attention_mma_dq(float *dq, const unsigned short *q, const unsigned short *k,
	const unsigned short *v, const float *lse, const unsigned short *dout, const float *dsum, long long batch, long long seq,
	long long heads, long long kvheads, long long hd, long long causal) {
	AMSP_MMA_SHARED(sh);
	int HD = (int)hd, TK = HD <= 64 ? 64 : 32, dtiles = HD / 8;
	unsigned short *kr = sh, *kt = kr + TK * (HD + AMSP_MMA_PAD), *vr = kt + HD * (TK + AMSP_MMA_PAD);
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
	long long b = blockIdx.z, h = blockIdx.y, kvh = h / (heads / kvheads);
	long long blk = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
	long long i0 = blk * 64, r0 = i0 + warp * 16;
	long long qs = heads * hd, kvs = kvheads * hd;
	long long rows[2] = {r0 + g, r0 + g + 8};
	float scale = (float)(1 / sqrt((double)hd));
	unsigned qf[8][4], df[8][4];
	mma_frags(qf, q, b, r0, seq, qs, h * hd, HD, g, t);
	mma_frags(df, dout, b, r0, seq, qs, h * hd, HD, g, t);
	float li[2], di[2];
#pragma unroll
	for (int rr = 0; rr < 2; rr++) {
		li[rr] = rows[rr] < seq ? lse[(b * heads + h) * seq + rows[rr]] : 0;
		di[rr] = rows[rr] < seq ? dsum[(b * heads + h) * seq + rows[rr]] : 0;
	}
	float acc[16][4];
#pragma unroll
	for (int j = 0; j < 16; j++) {
		acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0;
	}
	long long n = seq;
	if (causal && i0 + 64 < seq) {
		n = i0 + 64;
	}
	for (long long t0 = 0; t0 < n; t0 += TK) {
		__syncthreads();
		mma_tile(kr, kt, k, b, t0, seq, kvs, kvh * hd, HD, TK);
		mma_tile(vr, 0, v, b, t0, seq, kvs, kvh * hd, HD, TK);
		__syncthreads();
		unsigned sf[4][4];
#pragma unroll
		for (int j = 0; j < 8; j++) {
			if (8 * j < TK) {
				float s[4], dp[4];
				mma_scores(s, qf, kr, j, HD, g, t);
				mma_scores(dp, df, vr, j, HD, g, t);
				unsigned short sb[4];
#pragma unroll
				for (int x = 0; x < 4; x++) {
					long long key = t0 + 8 * j + 2 * t + (x & 1), row = rows[x >> 1];
					float ds = 0;
					if (key < seq && row < seq && (!causal || key <= row)) {
						float p = expf(s[x] * scale - li[x >> 1]);
						ds = p * (dp[x] - di[x >> 1]) * scale;
					}
					sb[x] = mma_bf16(ds);
				}
				mma_to_a(sf, j, sb);
			}
		}
		mma_accumulate(acc, sf, kt, TK, dtiles, g, t); // dq += ds k
	}
	float one[2] = {1, 1};
	mma_store(dq, acc, one, b, rows, seq, qs, h * hd, dtiles, t);
}

// dsum[b, h, i] = dout . out over the row, for bf16 out and dout (as
// attention_dsum_f32, in double).
// amspc:launch elementwise
AMSP_EXTERN_C __global__ void attention_dsum_bf16(float *dsum, const unsigned short *out, const unsigned short *dout,
	long long batch, long long seq, long long heads, long long hd) {
	for (long long z = (long long)blockIdx.x * blockDim.x + threadIdx.x; z < batch * heads * seq;
		z += (long long)gridDim.x * blockDim.x) {
		long long i = z % seq, h = z / seq % heads, b = z / (seq * heads);
		const unsigned short *o = out + (b * seq + i) * heads * hd + h * hd, *d = dout + (b * seq + i) * heads * hd + h * hd;
		double s = 0;
		for (long long e = 0; e < hd; e++) {
			s += (double)mma_bits_float((unsigned)o[e] << 16) * (double)mma_bits_float((unsigned)d[e] << 16);
		}
		dsum[z] = (float)s;
	}
}
