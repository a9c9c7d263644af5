// Tensor-core groundwork: one warp's 16x8x16 bf16 matrix product with
// fp32 accumulation (PTX mma.sync.aligned.m16n8k16.row.col.f32.bf16),
// and a probe kernel that loads its operands into the fragments the PTX
// ISA documents, so a GPU test checks that layout against a plain
// product. Not part of ops.cu: nothing runs on it yet; the attention
// kernels that will (FlashAttention-2 on tensor cores) are developed
// against shim.h's emulation of amsp_mma_16816, which this probe pins to
// the hardware's.
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
// a 16x8 bf16 b (row-major, k by n) and a 16x8 fp32 c, d as c.
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
