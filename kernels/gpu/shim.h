// A host shim that compiles ops.cu as plain C (C11), so the kernels run
// on the CPU and tests compare them with package kernels: every block
// runs with one thread (blockDim.x = 1), one block after another, so a
// barrier has nothing to wait for and a block-wide reduction is the
// thread's own sum. The launcher (package hostc) sets blockIdx and
// gridDim before each call.
#ifndef AMSP_GPU_SHIM_H
#define AMSP_GPU_SHIM_H

#include <math.h>
#include <string.h>

#define AMSP_EXTERN_C
#define __global__
#define __device__ static
#define __shared__ static

struct amsp_dim3 {
	unsigned x, y, z;
};
static struct amsp_dim3 threadIdx = {0, 0, 0}, blockIdx = {0, 0, 0}, blockDim = {1, 1, 1}, gridDim = {1, 1, 1};

static void __syncthreads(void) {}

// Dynamic shared memory: one block of one thread needs 2*hd floats.
#define AMSP_DYN_SHARED(name) static float name[1 << 12]

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
