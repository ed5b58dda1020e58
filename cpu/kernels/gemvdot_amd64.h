// BF16 dot-product matrix-vector kernel (see gemv_amd64.s): A is BF16
// too, and VDPBF16PS (AVX512_BF16) multiplies 32 pairs of BF16 per
// instruction into 16 float32 sums, where the widening kernel
// (gemvbf_amd64.h) needs a shift, a mask and two FMAs. The products are
// exact in float32 and the sums are float32; only A's rounding to BF16
// differs from the widening kernel. Frame as in gemv512_amd64.h, with a
// and lda in BF16 elements: c+0 ldc+8 a+16 lda+24 w+32 ldw+40 n+48 k+56
// m+64 alpha+72 beta+76 pf+80. k is taken in steps of 32; m is 1, 2, 3 or
// a multiple of 4 (any other m computes nothing).
//
// Registers: rows i of A in Z16+i, weight rows j in Z24+j, sums of row i
// and weight row j in Z(4i+j) (so that HSUM4 of Z4i..Z4i+3 gives C's row i
// for the group); X30 = alpha, X31 = beta.

#include "dpbf16_amd64.h"

#define LOADW4D \
	VMOVDQU32 (AX), Z24; \
	VMOVDQU32 (AX)(R8*1), Z25; \
	VMOVDQU32 (AX)(R8*2), Z26; \
	VMOVDQU32 (AX)(R9*1), Z27

#define DPROW0 DP_0_24_16; DP_1_25_16; DP_2_26_16; DP_3_27_16
#define DPROW1 DP_4_24_17; DP_5_25_17; DP_6_26_17; DP_7_27_17
#define DPROW2 DP_8_24_18; DP_9_25_18; DP_10_26_18; DP_11_27_18
#define DPROW3 DP_12_24_19; DP_13_25_19; DP_14_26_19; DP_15_27_19

// The sums of a 4×4 tile, Z(4i+j) for row i of A and weight row j,
// reduced to Z0 with row i's four results in its 128-bit lane i: a tree of
// shuffles and adds, each level halving the lanes of every sum and the
// number of vectors (45 instructions for 16 sums, where HSUM4 takes about
// 100). Level 1 pairs the 256-bit halves of two vectors, level 2 the
// 128-bit quarters, levels 3 and 4 the elements within 128-bit lanes.
// Clobbers the sums and Z20..Z23, Z28, Z29.
#define RED1(x, y, t) \
	VSHUFF64X2 $0x44, y, x, t; \
	VSHUFF64X2 $0xee, y, x, x; \
	VADDPS     t, x, x

#define RED2(x, y, t) \
	VSHUFF32X4 $0x88, y, x, t; \
	VSHUFF32X4 $0xdd, y, x, x; \
	VADDPS     t, x, x

#define RED3(x, y, t) \
	VSHUFPS $0x44, y, x, t; \
	VSHUFPS $0xee, y, x, x; \
	VADDPS  t, x, x

#define RED4(x, y, t) \
	VSHUFPS $0x88, y, x, t; \
	VSHUFPS $0xdd, y, x, x; \
	VADDPS  t, x, x

#define REDUCE4X4 \
	RED1(Z0, Z4, Z20); \
	RED1(Z8, Z12, Z21); \
	RED1(Z1, Z5, Z22); \
	RED1(Z9, Z13, Z23); \
	RED1(Z2, Z6, Z28); \
	RED1(Z10, Z14, Z29); \
	RED1(Z3, Z7, Z20); \
	RED1(Z11, Z15, Z21); \
	RED2(Z0, Z8, Z22); \
	RED2(Z1, Z9, Z23); \
	RED2(Z2, Z10, Z28); \
	RED2(Z3, Z11, Z29); \
	RED3(Z0, Z1, Z20); \
	RED3(Z2, Z3, Z21); \
	RED4(Z0, Z2, Z22)

// Store the group's results for row x of C at addr, with or without beta
// (AX nonzero when beta is).
#define SAVED(x, addr) \
	TESTL AX, AX; \
	JZ    5(PC); \
	SAVEROWBETA(x, addr); \
	JMP   3(PC); \
	SAVEROW(x, addr)

// m = 2 or 3: two or three rows of A against each group of four weight
// rows, the sums reduced row by row (HSUM4). DOTSMALL is the loop; its
// row parts, for two rows and for three, zero the sums, load the rows of A,
// multiply, reduce and save.
#define DOTZERO2 ZERO4(Z0, Z1, Z2, Z3); ZERO4(Z4, Z5, Z6, Z7)
#define DOTZERO3 DOTZERO2; ZERO4(Z8, Z9, Z10, Z11)
#define DOTA2 VMOVDQU32 (SI), Z16; VMOVDQU32 (SI)(R11*1), Z17
#define DOTA3 DOTA2; VMOVDQU32 (SI)(R11*2), Z18
#define DOTDP2 DPROW0; DPROW1
#define DOTDP3 DOTDP2; DPROW2
#define DOTSUM2 HSUM4(Z0, Z1, Z2, Z3, Y0, Y1, Y2, Y3, X0, X1, X2, X3); HSUM4(Z4, Z5, Z6, Z7, Y4, Y5, Y6, Y7, X4, X5, X6, X7)
#define DOTSUM3 DOTSUM2; HSUM4(Z8, Z9, Z10, Z11, Y8, Y9, Y10, Y11, X8, X9, X10, X11)
#define DOTSAVE2 SAVED(X0, (DX)); SAVED(X4, (DX)(R13*1))
#define DOTSAVE3 DOTSAVE2; SAVED(X8, (DX)(R13*2))

#define DOTSMALL(zero, loada, dp, sums, saves, group, loop) \
group:; \
	MOVQ DI, AX; \
	MOVQ pf+80(FP), R15; \
	ADDQ AX, R15; \
	MOVQ R14, SI; \
	MOVQ R10, CX; \
	zero; \
loop:; \
	PREFETCH4; \
	loada; \
	LOADW4D; \
	dp; \
	ADDQ $64, AX; \
	ADDQ $64, R15; \
	ADDQ $64, SI; \
	DECQ CX; \
	JNZ  loop; \
	sums; \
	MOVL beta+76(FP), AX; \
	SHLL $1, AX; \
	saves; \
	ADDQ $16, DX; \
	LEAQ (DI)(R8*4), DI; \
	DECQ BX; \
	JNZ  group; \
	JMP  dotdone

// func gemvDotBF16AVX512(c *float32, ldc int, a *uint16, lda int, w *uint16, ldw int, n, k, m int, alpha, beta float32, pf int)
TEXT ·gemvDotBF16AVX512(SB), NOSPLIT, $0-88
	GEMVFRAME(2, 2, 5, dotdone)
	VBROADCASTSS alpha+72(FP), Z30
	VBROADCASTSS beta+76(FP), Z31
	MOVQ         m+64(FP), AX
	CMPQ         AX, $2
	JLT          dotg1
	PREFETCHHEAD
	MOVQ         m+64(FP), AX
	CMPQ         AX, $2
	JEQ          dotg2
	CMPQ         AX, $3
	JEQ          dotg3
	TESTQ        $3, AX
	JNZ          dotdone           // m > 4 not a multiple of 4: not taken
	JMP          dotg4

// m = 1: one weight row at a time, read as one sequential stream (see the
// widening kernel's m = 1 loop), four blocks of 32 per step into four sums.
// Each block of weights is loaded twice, the second load folded into an AND
// of the line with itself, as the widening kernel's two folded loads do:
// measured on the development machines, Qwen3-0.6B's decode products in
// alternating rounds against the widening kernel (BenchmarkDecodeStepPrecision)
// went from a median of 0.94 of its speed to 1.05-1.06.
dotg1:
	SHLQ $2, BX
	MOVL beta+76(FP), R12
	SHLL $1, R12           // zero for beta = ±0: C is not read

dotr1:
	MOVQ   DI, AX
	MOVQ   R14, SI
	MOVQ   R10, CX
	ZERO4(Z0, Z1, Z2, Z3)
	CMPQ   CX, $4
	JLT    dotr1tail

dotr1loop:
	VMOVDQU32 (AX), Z24
	VPANDD    (AX), Z24, Z24
	VMOVDQU32 (SI), Z16
	VMOVDQU32 64(AX), Z25
	VPANDD    64(AX), Z25, Z25
	VMOVDQU32 64(SI), Z17
	VMOVDQU32 128(AX), Z26
	VPANDD    128(AX), Z26, Z26
	VMOVDQU32 128(SI), Z18
	VMOVDQU32 192(AX), Z27
	VPANDD    192(AX), Z27, Z27
	VMOVDQU32 192(SI), Z19
	DP_0_24_16
	DP_1_25_17
	DP_2_26_18
	DP_3_27_19
	ADDQ      $256, AX
	ADDQ      $256, SI
	SUBQ      $4, CX
	CMPQ      CX, $4
	JGE       dotr1loop

dotr1tail:
	TESTQ     CX, CX
	JZ        dotr1sum
	VMOVDQU32 (AX), Z24
	VMOVDQU32 (SI), Z16
	DP_0_24_16
	ADDQ      $64, AX
	ADDQ      $64, SI
	DECQ      CX
	JMP       dotr1tail

dotr1sum:
	VADDPS        Z1, Z0, Z0
	VADDPS        Z3, Z2, Z2
	VADDPS        Z2, Z0, Z0
	VEXTRACTF64X4 $1, Z0, Y1
	VADDPS        Y1, Y0, Y0
	VEXTRACTF128  $1, Y0, X1
	VADDPS        X1, X0, X0
	VHADDPS       X0, X0, X0
	VHADDPS       X0, X0, X0
	VMULSS        X30, X0, X0
	TESTL         R12, R12
	JZ            dotr1store
	VFMADD231SS   (DX), X31, X0

dotr1store:
	VMOVSS X0, (DX)
	ADDQ   $4, DX
	ADDQ   R8, DI
	DECQ   BX
	JNZ    dotr1
	JMP    dotdone

	DOTSMALL(DOTZERO2, DOTA2, DOTDP2, DOTSUM2, DOTSAVE2, dotg2, dotl2)
	DOTSMALL(DOTZERO3, DOTA3, DOTDP3, DOTSUM3, DOTSAVE3, dotg3, dotl3)

// m a multiple of 4: for each group of four weight rows, every group of
// four rows of A in turn, so that the weight rows are read from memory once
// and then from L1 while A (which the caller keeps to a block that fits
// L1) is swept. The pass of the first group of A prefetches the weight
// rows pf bytes ahead into L2 (R15, zero when pf is). R14 is the current
// group of A, n+48(FP) counts the groups of A left, and c+0(FP) holds C
// at the current weight rows' columns.
#define DOTSTEP4 \
	VMOVDQU32 (SI), Z16; \
	VMOVDQU32 (SI)(R11*1), Z17; \
	VMOVDQU32 (SI)(R11*2), Z18; \
	VMOVDQU32 (SI)(R12*1), Z19; \
	LOADW4D; \
	DPROW0; \
	DPROW1; \
	DPROW2; \
	DPROW3; \
	ADDQ      $64, AX; \
	ADDQ      $64, SI

dotg4:
	MOVQ a+16(FP), R14
	MOVQ m+64(FP), AX
	SHRQ $2, AX
	MOVQ AX, n+48(FP)
	MOVQ c+0(FP), DX
	MOVQ pf+80(FP), R15
	TESTQ R15, R15
	JZ   2(PC)
	ADDQ DI, R15

dotg4a:
	MOVQ DI, AX
	MOVQ R14, SI
	MOVQ R10, CX
	ZERO4(Z0, Z1, Z2, Z3)
	ZERO4(Z4, Z5, Z6, Z7)
	ZERO4(Z8, Z9, Z10, Z11)
	ZERO4(Z12, Z13, Z14, Z15)
	TESTQ R15, R15
	JZ    dotl4

dotl4p:
	PREFETCHT1 (R15)
	PREFETCHT1 (R15)(R8*1)
	PREFETCHT1 (R15)(R8*2)
	PREFETCHT1 (R15)(R9*1)
	ADDQ       $64, R15
	DOTSTEP4
	DECQ       CX
	JNZ        dotl4p
	XORQ       R15, R15
	JMP        dotl4end

dotl4:
	DOTSTEP4
	DECQ      CX
	JNZ       dotl4

dotl4end:
	REDUCE4X4
	LEAQ      (DX)(R13*2), SI
	ADDQ      R13, SI
	MOVL      beta+76(FP), AX
	SHLL      $1, AX
	VMULPS    Z30, Z0, Z0
	JZ        dotnb4
	VMOVUPS   (DX), X21
	VINSERTF32X4 $1, (DX)(R13*1), Z21, Z21
	VINSERTF32X4 $2, (DX)(R13*2), Z21, Z21
	VINSERTF32X4 $3, (SI), Z21, Z21
	VFMADD231PS Z21, Z31, Z0

dotnb4:
	VMOVUPS       X0, (DX)
	VEXTRACTF32X4 $1, Z0, (DX)(R13*1)
	VEXTRACTF32X4 $2, Z0, (DX)(R13*2)
	VEXTRACTF32X4 $3, Z0, (SI)
	LEAQ      (R14)(R11*4), R14
	LEAQ      (DX)(R13*4), DX
	DECQ      n+48(FP)
	JNZ       dotg4a
	ADDQ      $16, c+0(FP)
	LEAQ      (DI)(R8*4), DI
	DECQ      BX
	JNZ       dotg4

dotdone:
	VZEROUPPER
	RET
