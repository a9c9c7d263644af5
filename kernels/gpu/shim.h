// A host shim that compiles ops.cu as plain C (C11), so the kernels run
// on the CPU and tests compare them with package kernels. Blocks run one
// after another. Most launches give a block one thread (blockDim.x = 1),
// so a barrier has nothing to wait for and a block-wide reduction is the
// thread's own sum; the launcher (package hostc) sets blockIdx and
// gridDim before each call. The attention kernels' launches run a block's
// threads as coroutines (each its own stack, __syncthreads a switch to
// the next until all are at the barrier, a warp shuffle through shared
// memory and a barrier), so their geometry is the GPU's.
//
// All of the shim's state (indices, shared memory, the barrier, the
// shuffle and tensor-core exchanges) is thread-local: a launch runs
// within one C call on one OS thread (a block's coroutine threads too),
// so launches on different threads (the simulated GPU's streams) run at
// once without sharing any of it.
#ifndef AMSP_GPU_SHIM_H
#define AMSP_GPU_SHIM_H

#include <math.h>
#include <string.h>
#include <time.h>

#define AMSP_EXTERN_C
#define __global__
#define __device__ static
#define __shared__ static __thread
#define __forceinline__ inline

struct amsp_dim3 {
	unsigned x, y, z;
};
static __thread struct amsp_dim3 threadIdx = {0, 0, 0}, blockIdx = {0, 0, 0}, blockDim = {1, 1, 1}, gridDim = {1, 1, 1};

// amsp_barrier is the running block's barrier while its threads are
// coroutines, else null (one thread: nothing to wait for).
static __thread void (*amsp_barrier)(void);

static void __syncthreads(void) {
	if (amsp_barrier) {
		amsp_barrier();
	}
}

// A warp shuffle: each thread leaves v, all wait, each reads its
// partner's (every thread of the block calls it). Shuffles alternate
// between two arrays, so a thread writes one only after the barrier of
// the shuffle in between, which every reader of its last use has passed.
static __thread float amsp_xchg[2][1024];
static __thread unsigned char amsp_xchg_turn[1024]; // each thread's next array

static float amsp_shfl_xor(float v, int off) {
	float *x = amsp_xchg[amsp_xchg_turn[threadIdx.x]];
	amsp_xchg_turn[threadIdx.x] ^= 1;
	x[threadIdx.x] = v;
	__syncthreads();
	return x[threadIdx.x ^ off];
}

typedef struct {
	float x, y, z, w;
} float4;

// Dynamic shared memory: the attention kernels take at most 48 KiB.
#define AMSP_DYN_SHARED(name) static __thread float name[12 << 10]

// One thread: an atomic is a plain update (a block's threads are
// coroutines on one OS thread, and launches that may run at once never
// share a flag).
static unsigned long long atomicMin(unsigned long long *p, unsigned long long v) {
	unsigned long long old = *p;
	if (v < old) {
		*p = v;
	}
	return old;
}

// CUDA's explicitly rounded double operations: on the host without FMA
// every operation is rounded.
static double __dmul_rn(double a, double b) { return a * b; }
static double __dadd_rn(double a, double b) { return a + b; }
static double __dsub_rn(double a, double b) { return a - b; }

// The GPU's global nanosecond timer: the host's clock (C11's
// timespec_get).
static unsigned long long amsp_globaltimer(void) {
	struct timespec ts;
	timespec_get(&ts, TIME_UTC);
	return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

// CUDA's bit casts.
static unsigned __float_as_uint(float f) {
	unsigned u;
	memcpy(&u, &f, sizeof u);
	return u;
}
static float __uint_as_float(unsigned u) {
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

// A warp's tensor-core product (mma.cu's amsp_mma_16816, the PTX ISA's
// m16n8k16 bf16 fragments): every lane leaves its fragments, all wait,
// each rebuilds the warp's A and B and computes its four elements of
// D = A B + C (products of bf16 values, exact in fp32, added in k
// order), all wait again. Every thread of the block calls it.
static __thread unsigned amsp_mma_a[1024][4], amsp_mma_b[1024][2];
static __thread float amsp_mma_c[1024][4];

static float amsp_bf16_lo(unsigned r) { return __uint_as_float(r << 16); }
static float amsp_bf16_hi(unsigned r) { return __uint_as_float(r & 0xffff0000u); }

static void amsp_mma_16816(float *d, const unsigned *a, const unsigned *b, const float *c) {
	unsigned me = threadIdx.x, w = me & ~31u, l = me & 31u;
	memcpy(amsp_mma_a[me], a, sizeof amsp_mma_a[me]);
	memcpy(amsp_mma_b[me], b, sizeof amsp_mma_b[me]);
	memcpy(amsp_mma_c[me], c, sizeof amsp_mma_c[me]);
	__syncthreads();
	float A[16][16], B[16][8];
	for (unsigned x = 0; x < 32; x++) {
		unsigned g = x / 4, t = x % 4;
		const unsigned *fa = amsp_mma_a[w + x], *fb = amsp_mma_b[w + x];
		A[g][2 * t] = amsp_bf16_lo(fa[0]);
		A[g][2 * t + 1] = amsp_bf16_hi(fa[0]);
		A[g + 8][2 * t] = amsp_bf16_lo(fa[1]);
		A[g + 8][2 * t + 1] = amsp_bf16_hi(fa[1]);
		A[g][2 * t + 8] = amsp_bf16_lo(fa[2]);
		A[g][2 * t + 9] = amsp_bf16_hi(fa[2]);
		A[g + 8][2 * t + 8] = amsp_bf16_lo(fa[3]);
		A[g + 8][2 * t + 9] = amsp_bf16_hi(fa[3]);
		B[2 * t][g] = amsp_bf16_lo(fb[0]);
		B[2 * t + 1][g] = amsp_bf16_hi(fb[0]);
		B[2 * t + 8][g] = amsp_bf16_lo(fb[1]);
		B[2 * t + 9][g] = amsp_bf16_hi(fb[1]);
	}
	unsigned g = l / 4, t = l % 4;
	for (unsigned i = 0; i < 4; i++) {
		unsigned row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
		float s = 0;
		for (unsigned k = 0; k < 16; k++) {
			s += A[row][k] * B[k][col];
		}
		d[i] = amsp_mma_c[me][i] + s;
	}
	__syncthreads();
}

#endif
