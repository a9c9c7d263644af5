// A host shim that compiles ops.cu as plain C (C11), so the kernels run
// on the CPU and tests compare them with package kernels. Blocks run one
// after another. Most launches give a block one thread (blockDim.x = 1),
// so a barrier has nothing to wait for and a block-wide reduction is the
// thread's own sum; the launcher (package hostc) sets blockIdx and
// gridDim before each call. The attention kernels' launches run a block's
// threads as coroutines (each its own stack, __syncthreads a switch to
// the next until all are at the barrier, a warp shuffle through shared
// memory and a barrier), so their geometry is the GPU's.
#ifndef AMSP_GPU_SHIM_H
#define AMSP_GPU_SHIM_H

#include <math.h>
#include <string.h>

#define AMSP_EXTERN_C
#define __global__
#define __device__ static
#define __shared__ static
#define __forceinline__ inline

struct amsp_dim3 {
	unsigned x, y, z;
};
static __thread struct amsp_dim3 threadIdx = {0, 0, 0}, blockIdx = {0, 0, 0}, blockDim = {1, 1, 1}, gridDim = {1, 1, 1};

// amsp_barrier is the running block's barrier while its threads are
// coroutines, else null (one thread: nothing to wait for).
static void (*amsp_barrier)(void);

static void __syncthreads(void) {
	if (amsp_barrier) {
		amsp_barrier();
	}
}

// A warp shuffle: each thread leaves v, all wait, each reads its
// partner's (every thread of the block calls it). Shuffles alternate
// between two arrays, so a thread writes one only after the barrier of
// the shuffle in between, which every reader of its last use has passed.
static float amsp_xchg[2][1024];
static unsigned char amsp_xchg_turn[1024]; // each thread's next array

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
#define AMSP_DYN_SHARED(name) static float name[12 << 10]

// One thread: an atomic is a plain update.
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

#endif
