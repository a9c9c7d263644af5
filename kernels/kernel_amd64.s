//go:build amd64 && !purego

#include "textflag.h"

// func peakFMAAVX2(n int)
//
// n rounds of twelve independent 8-lane fused multiply-adds (zeros, so no
// denormals): the AVX2 FMA peak BenchmarkPeakFMA measures.
TEXT ·peakFMAAVX2(SB), NOSPLIT, $0-8
	MOVQ n+0(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	VXORPS Y12, Y12, Y12
	VXORPS Y13, Y13, Y13
	TESTQ CX, CX
	JEQ peakdone
peakloop:
	VFMADD231PS Y12, Y13, Y0
	VFMADD231PS Y12, Y13, Y1
	VFMADD231PS Y12, Y13, Y2
	VFMADD231PS Y12, Y13, Y3
	VFMADD231PS Y12, Y13, Y4
	VFMADD231PS Y12, Y13, Y5
	VFMADD231PS Y12, Y13, Y6
	VFMADD231PS Y12, Y13, Y7
	VFMADD231PS Y12, Y13, Y8
	VFMADD231PS Y12, Y13, Y9
	VFMADD231PS Y12, Y13, Y10
	VFMADD231PS Y12, Y13, Y11
	DECQ CX
	JNE peakloop
peakdone:
	VZEROUPPER
	RET

// func anyNonFiniteAVX2(x *float32, n int) bool
//
// Whether any of x[0:n] (n a multiple of 8) is NaN or ±Inf: its bits with
// the sign cleared exceed 0x7f7fffff, the largest finite float32.
TEXT ·anyNonFiniteAVX2(SB), NOSPLIT, $0-17
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	MOVL $0x7fffffff, AX
	MOVL AX, X0
	VPBROADCASTD X0, Y0
	MOVL $0x7f7fffff, AX
	MOVL AX, X1
	VPBROADCASTD X1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y5, Y5, Y5
	CMPQ CX, $16
	JLT nf8
nf16:
	VPAND 0(SI), Y0, Y3
	VPAND 32(SI), Y0, Y4
	VPCMPGTD Y1, Y3, Y3
	VPCMPGTD Y1, Y4, Y4
	VPOR Y3, Y2, Y2
	VPOR Y4, Y5, Y5
	ADDQ $64, SI
	SUBQ $16, CX
	CMPQ CX, $16
	JGE nf16
nf8:
	CMPQ CX, $8
	JLT nfdone
	VPAND 0(SI), Y0, Y3
	VPCMPGTD Y1, Y3, Y3
	VPOR Y3, Y2, Y2
nfdone:
	VPOR Y5, Y2, Y2
	VPTEST Y2, Y2
	SETNE ret+16(FP)
	VZEROUPPER
	RET

// func kernel6x16AVX2(a, b *float32, kb int, c *float32, ldc int, zero bool)
//
// c[i*ldc+j] += a[p*6+i] * b[p*16+j] for p = 0 .. kb-1 in order, i < 6,
// j < 16, starting from 0 instead of c when zero (a first k panel). One
// fused multiply-add per element per p: each output element lives in one
// lane of one register (Y4..Y15: row i, columns 0-7 and 8-15), so its sum
// is the plain k-order sequence of FMAs. C is a full tile in place (ldc
// its row stride in elements) or the caller's tile buffer (ldc 16).
TEXT ·kernel6x16AVX2(SB), NOSPLIT, $0-41
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ kb+16(FP), CX
	MOVQ c+24(FP), DX
	MOVQ ldc+32(FP), R8
	SHLQ $2, R8
	MOVBLZX zero+40(FP), R9
	TESTQ R9, R9
	JNE czero
	MOVQ DX, R10
	VMOVUPS 0(R10), Y4
	VMOVUPS 32(R10), Y5
	ADDQ R8, R10
	VMOVUPS 0(R10), Y6
	VMOVUPS 32(R10), Y7
	ADDQ R8, R10
	VMOVUPS 0(R10), Y8
	VMOVUPS 32(R10), Y9
	ADDQ R8, R10
	VMOVUPS 0(R10), Y10
	VMOVUPS 32(R10), Y11
	ADDQ R8, R10
	VMOVUPS 0(R10), Y12
	VMOVUPS 32(R10), Y13
	ADDQ R8, R10
	VMOVUPS 0(R10), Y14
	VMOVUPS 32(R10), Y15
	JMP cbody
czero:
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	VXORPS Y12, Y12, Y12
	VXORPS Y13, Y13, Y13
	VXORPS Y14, Y14, Y14
	VXORPS Y15, Y15, Y15
cbody:
	TESTQ CX, CX
	JEQ cdone
cloop:
	VMOVUPS 0(DI), Y0
	VMOVUPS 32(DI), Y1
	VBROADCASTSS 0(SI), Y2
	VFMADD231PS Y0, Y2, Y4
	VFMADD231PS Y1, Y2, Y5
	VBROADCASTSS 4(SI), Y3
	VFMADD231PS Y0, Y3, Y6
	VFMADD231PS Y1, Y3, Y7
	VBROADCASTSS 8(SI), Y2
	VFMADD231PS Y0, Y2, Y8
	VFMADD231PS Y1, Y2, Y9
	VBROADCASTSS 12(SI), Y3
	VFMADD231PS Y0, Y3, Y10
	VFMADD231PS Y1, Y3, Y11
	VBROADCASTSS 16(SI), Y2
	VFMADD231PS Y0, Y2, Y12
	VFMADD231PS Y1, Y2, Y13
	VBROADCASTSS 20(SI), Y3
	VFMADD231PS Y0, Y3, Y14
	VFMADD231PS Y1, Y3, Y15
	ADDQ $24, SI
	ADDQ $64, DI
	DECQ CX
	JNE cloop
cdone:
	MOVQ DX, R10
	VMOVUPS Y4, 0(R10)
	VMOVUPS Y5, 32(R10)
	ADDQ R8, R10
	VMOVUPS Y6, 0(R10)
	VMOVUPS Y7, 32(R10)
	ADDQ R8, R10
	VMOVUPS Y8, 0(R10)
	VMOVUPS Y9, 32(R10)
	ADDQ R8, R10
	VMOVUPS Y10, 0(R10)
	VMOVUPS Y11, 32(R10)
	ADDQ R8, R10
	VMOVUPS Y12, 0(R10)
	VMOVUPS Y13, 32(R10)
	ADDQ R8, R10
	VMOVUPS Y14, 0(R10)
	VMOVUPS Y15, 32(R10)
	VZEROUPPER
	RET
