//go:build amd64 && !purego

#include "textflag.h"
#include "zero_amd64.h"

// Matrix-vector kernels for decode: C[i, j] = alpha·Σp A[i,p]·W[j,p] +
// beta·C[i, j] for up to four rows of A (two with AVX2) against n weight
// rows, n a multiple of 4 and k a multiple of the vector width. Each weight
// is read exactly once, four rows at a time, widened in registers when it is
// BF16, and multiplied against every row of A, which stays in L1; the sums
// are reduced horizontally once per group of four rows. C is not read when
// beta == 0. (The BF16 kernels at m = 1, a batch-1 decode step, read one
// row at a time instead: see gemvbf_amd64.h.)

// GEMVFRAME loads the frame the matrix-vector kernels share (c+0 ldc+8
// a+16 lda+24 w+32 ldw+40 n+48 k+56): DX = C, R13 = ldc in bytes, R14 = A,
// R11 = lda·asize bytes, R12 = 3·R11, DI = W, R8 = ldw·wsize bytes, R9 =
// 3·R8, BX = n/4 groups of weight rows, R10 = k >> ksh steps; it jumps to
// done when there is no group or no step.
#define GEMVFRAME(asize, wsize, ksh, done) \
	MOVQ  c+0(FP), DX; \
	MOVQ  ldc+8(FP), R13; \
	SHLQ  $2, R13; \
	MOVQ  a+16(FP), R14; \
	MOVQ  lda+24(FP), R11; \
	IMULQ $asize, R11; \
	LEAQ  (R11)(R11*2), R12; \
	MOVQ  w+32(FP), DI; \
	MOVQ  ldw+40(FP), R8; \
	IMULQ $wsize, R8; \
	LEAQ  (R8)(R8*2), R9; \
	MOVQ  n+48(FP), BX; \
	SHRQ  $2, BX; \
	JZ    done; \
	MOVQ  k+56(FP), R10; \
	SHRQ  $ksh, R10; \
	JZ    done

// acc_j += W_j · x for the four weight rows in Z16..Z19.
#define FMA4(x, a0, a1, a2, a3) \
	VFMADD231PS Z16, x, a0; \
	VFMADD231PS Z17, x, a1; \
	VFMADD231PS Z18, x, a2; \
	VFMADD231PS Z19, x, a3

// x0 = [Σz0, Σz1, Σz2, Σz3]. Clobbers the four accumulators and Z20.
#define HSUM4(z0, z1, z2, z3, y0, y1, y2, y3, x0, x1, x2, x3) \
	VEXTRACTF64X4 $1, z0, Y20; \
	VADDPS        Y20, y0, y0; \
	VEXTRACTF64X4 $1, z1, Y20; \
	VADDPS        Y20, y1, y1; \
	VEXTRACTF64X4 $1, z2, Y20; \
	VADDPS        Y20, y2, y2; \
	VEXTRACTF64X4 $1, z3, Y20; \
	VADDPS        Y20, y3, y3; \
	VEXTRACTF32X4 $1, y0, X20; \
	VADDPS        X20, x0, x0; \
	VEXTRACTF32X4 $1, y1, X20; \
	VADDPS        X20, x1, x1; \
	VEXTRACTF32X4 $1, y2, X20; \
	VADDPS        X20, x2, x2; \
	VEXTRACTF32X4 $1, y3, X20; \
	VADDPS        X20, x3, x3; \
	VHADDPS       x1, x0, x0; \
	VHADDPS       x3, x2, x2; \
	VHADDPS       x2, x0, x0

// Four results: C = alpha·x (X30 = alpha), or alpha·x + beta·C (X31 = beta).
#define SAVEROW(x, addr) \
	VMULPS  X30, x, x; \
	VMOVUPS x, addr

#define SAVEROWBETA(x, addr) \
	VMULPS      X30, x, x; \
	VFMADD231PS addr, X31, x; \
	VMOVUPS     x, addr

// The loops prefetch pf bytes ahead of what they read; this fetches the
// first pf bytes of the weights (with contiguous rows, the groups the loops
// will not have prefetched) before they start, so that a short product
// does not run at the latency of memory. It fetches into L2 (PREFETCHT1):
// a burst of hundreds of fetches into L1 stalls on L1's few outstanding
// misses and evicts A, which made products of 0.3-2 MB (a small model's
// layers, read mostly from L3) 25% slower on the development machines.
// Clobbers CX, R15.
#define PREFETCHHEAD \
	MOVQ       DI, R15; \
	MOVQ       pf+80(FP), CX; \
	SHRQ       $6, CX; \
	JZ         5(PC); \
	PREFETCHT1 (R15); \
	ADDQ       $64, R15; \
	DECQ       CX; \
	JNZ        -3(PC)

// func gemvF32AVX512(c *float32, ldc int, a *float32, lda int, w *float32, ldw int, n, k, m int, alpha, beta float32, pf int)
TEXT ·gemvF32AVX512(SB), NOSPLIT, $0-88
#define WSTEP 64
#define PREFETCHW4 \
	PREFETCHT0 (R15); \
	PREFETCHT0 (R15)(R8*1); \
	PREFETCHT0 (R15)(R8*2); \
	PREFETCHT0 (R15)(R9*1)
#define LOADW(off) \
	VMOVUPS off(AX), Z16; \
	VMOVUPS off(AX)(R8*1), Z17; \
	VMOVUPS off(AX)(R8*2), Z18; \
	VMOVUPS off(AX)(R9*1), Z19
#include "gemv512_amd64.h"
#undef WSTEP
#undef LOADW
#undef PREFETCHW4

#define ZERO4Y(a, b, c, d) \
	VXORPS a, a, a; \
	VXORPS b, b, b; \
	VXORPS c, c, c; \
	VXORPS d, d, d

// acc_j += W_j · x for the four weight rows in Y8..Y11.
#define FMA4Y(x, a0, a1, a2, a3) \
	VFMADD231PS Y8, x, a0; \
	VFMADD231PS Y9, x, a1; \
	VFMADD231PS Y10, x, a2; \
	VFMADD231PS Y11, x, a3

// x0 = [Σy0, Σy1, Σy2, Σy3]. Clobbers the accumulators and Y14.
#define HSUM4Y(y0, y1, y2, y3, x0, x1, x2, x3) \
	VEXTRACTF128 $1, y0, X14; \
	VADDPS       X14, x0, x0; \
	VEXTRACTF128 $1, y1, X14; \
	VADDPS       X14, x1, x1; \
	VEXTRACTF128 $1, y2, X14; \
	VADDPS       X14, x2, x2; \
	VEXTRACTF128 $1, y3, X14; \
	VADDPS       X14, x3, x3; \
	VHADDPS      x1, x0, x0; \
	VHADDPS      x3, x2, x2; \
	VHADDPS      x2, x0, x0

// func gemvF32AVX2(c *float32, ldc int, a *float32, lda int, w *float32, ldw int, n, k, m int, alpha, beta float32, pf int)
TEXT ·gemvF32AVX2(SB), NOSPLIT, $0-88
#define WSTEP 32
#define PREFETCHW4 \
	PREFETCHT0 (R15); \
	PREFETCHT0 (R15)(R8*1); \
	PREFETCHT0 (R15)(R8*2); \
	PREFETCHT0 (R15)(R9*1)
#define LOADW(off) \
	VMOVUPS off(AX), Y8; \
	VMOVUPS off(AX)(R8*1), Y9; \
	VMOVUPS off(AX)(R8*2), Y10; \
	VMOVUPS off(AX)(R9*1), Y11
#include "gemv256_amd64.h"
#undef WSTEP
#undef LOADW
#undef PREFETCHW4

#include "gemvbf_amd64.h"

// Indices for VPERMT2PS: the even and the odd elements of two vectors.
DATA deintEven<>+0(SB)/8, $0x0000000200000000
DATA deintEven<>+8(SB)/8, $0x0000000600000004
DATA deintEven<>+16(SB)/8, $0x0000000a00000008
DATA deintEven<>+24(SB)/8, $0x0000000e0000000c
DATA deintEven<>+32(SB)/8, $0x0000001200000010
DATA deintEven<>+40(SB)/8, $0x0000001600000014
DATA deintEven<>+48(SB)/8, $0x0000001a00000018
DATA deintEven<>+56(SB)/8, $0x0000001e0000001c
GLOBL deintEven<>(SB), RODATA|NOPTR, $64

DATA deintOdd<>+0(SB)/8, $0x0000000300000001
DATA deintOdd<>+8(SB)/8, $0x0000000700000005
DATA deintOdd<>+16(SB)/8, $0x0000000b00000009
DATA deintOdd<>+24(SB)/8, $0x0000000f0000000d
DATA deintOdd<>+32(SB)/8, $0x0000001300000011
DATA deintOdd<>+40(SB)/8, $0x0000001700000015
DATA deintOdd<>+48(SB)/8, $0x0000001b00000019
DATA deintOdd<>+56(SB)/8, $0x0000001f0000001d
GLOBL deintOdd<>(SB), RODATA|NOPTR, $64

// func deinterleave512(dst, src *float32, blocks int)
// For each of blocks blocks of 32 floats: dst gets the 16 even elements of
// src, then the 16 odd ones (see deinterleave).
TEXT ·deinterleave512(SB), NOSPLIT, $0-24
	MOVQ      dst+0(FP), DI
	MOVQ      src+8(FP), SI
	MOVQ      blocks+16(FP), CX
	TESTQ     CX, CX
	JZ        deintdone
	VMOVDQU64 deintEven<>(SB), Z30
	VMOVDQU64 deintOdd<>(SB), Z31

deintloop:
	VMOVUPS   (SI), Z0
	VMOVUPS   64(SI), Z1
	VMOVAPS   Z0, Z2
	VPERMT2PS Z1, Z30, Z2
	VPERMT2PS Z1, Z31, Z0
	VMOVUPS   Z2, (DI)
	VMOVUPS   Z0, 64(DI)
	ADDQ      $128, SI
	ADDQ      $128, DI
	DECQ      CX
	JNZ       deintloop

deintdone:
	VZEROUPPER
	RET
#include "gemvdot_amd64.h"
