//go:build amd64 && !purego

#include "textflag.h"
#include "zero_amd64.h"

// Small-m products with B not transposed: C[i, j] = alpha·Σp A(i,p)·B[p, j]
// + beta·C[i, j] for i < m ≤ 4 and j < n, reading B in place (row stride
// ldb) with no packing. Column strips of C stay in registers for the whole
// k loop; each step loads one row of the strip of B and broadcasts one
// element of each row of A. The four A rows come as pointers (a row that
// does not exist repeats another; it is computed and not stored), each
// advanced by aps bytes per step, so A may be stored either way round.
// All strides are in bytes. C is not read when beta == 0.
//
// Frame: m+0 k+8 a0+16 a1+24 a2+32 a3+40 aps+48 b+56 ldb+64 c+72 ldc+80
// n+88 alpha+96 beta+100.
// Registers: SI, R8, R9, R10 the A rows; R11 = aps; BX the B strip; DX =
// ldb; DI the C strip; R12 = ldc; R13 columns left; CX steps left; AX
// scratch; R14 the strip's offset in bytes.

// Store acc = alpha·acc (+ beta·C) at addr. Z30 = alpha, Z31 = beta.
#define NSAVE(acc, addr) \
	VMULPS      Z30, acc, acc; \
	VMOVUPS     acc, addr

#define NSAVEB(acc, addr) \
	VMULPS      Z30, acc, acc; \
	VFMADD231PS addr, Z31, acc; \
	VMOVUPS     acc, addr

#define NLOADA \
	MOVQ a0+16(FP), SI; \
	MOVQ a1+24(FP), R8; \
	MOVQ a2+32(FP), R9; \
	MOVQ a3+40(FP), R10

// func kernN512(m, k int, a0, a1, a2, a3 *float32, aps int, b *float32, ldb int, c *float32, ldc, n int, alpha, beta float32)
TEXT ·kernN512(SB), NOSPLIT, $0-104
	MOVQ         aps+48(FP), R11
	MOVQ         ldb+64(FP), DX
	MOVQ         ldc+80(FP), R12
	MOVQ         n+88(FP), R13
	VBROADCASTSS alpha+96(FP), Z30
	VBROADCASTSS beta+100(FP), Z31
	XORQ         R14, R14

strip64:
	CMPQ   R13, $64
	JLT    strip16
	NLOADA
	MOVQ   b+56(FP), BX
	ADDQ   R14, BX
	MOVQ   k+8(FP), CX
	ZERO4(Z0, Z1, Z2, Z3)
	ZERO4(Z4, Z5, Z6, Z7)
	ZERO4(Z8, Z9, Z10, Z11)
	ZERO4(Z12, Z13, Z14, Z15)

loop64:
	VMOVUPS      (BX), Z16
	VMOVUPS      64(BX), Z17
	VMOVUPS      128(BX), Z18
	VMOVUPS      192(BX), Z19
	VBROADCASTSS (SI), Z20
	VBROADCASTSS (R8), Z21
	VBROADCASTSS (R9), Z22
	VBROADCASTSS (R10), Z23
	VFMADD231PS  Z16, Z20, Z0
	VFMADD231PS  Z17, Z20, Z1
	VFMADD231PS  Z18, Z20, Z2
	VFMADD231PS  Z19, Z20, Z3
	VFMADD231PS  Z16, Z21, Z4
	VFMADD231PS  Z17, Z21, Z5
	VFMADD231PS  Z18, Z21, Z6
	VFMADD231PS  Z19, Z21, Z7
	VFMADD231PS  Z16, Z22, Z8
	VFMADD231PS  Z17, Z22, Z9
	VFMADD231PS  Z18, Z22, Z10
	VFMADD231PS  Z19, Z22, Z11
	VFMADD231PS  Z16, Z23, Z12
	VFMADD231PS  Z17, Z23, Z13
	VFMADD231PS  Z18, Z23, Z14
	VFMADD231PS  Z19, Z23, Z15
	ADDQ         R11, SI
	ADDQ         R11, R8
	ADDQ         R11, R9
	ADDQ         R11, R10
	ADDQ         DX, BX
	DECQ         CX
	JNZ          loop64

	MOVQ c+72(FP), DI
	ADDQ R14, DI
	MOVQ m+0(FP), CX
	MOVL beta+100(FP), AX
	SHLL $1, AX
	JZ   nobeta64
	NSAVEB(Z0, (DI))
	NSAVEB(Z1, 64(DI))
	NSAVEB(Z2, 128(DI))
	NSAVEB(Z3, 192(DI))
	DECQ CX
	JZ   next64
	ADDQ R12, DI
	NSAVEB(Z4, (DI))
	NSAVEB(Z5, 64(DI))
	NSAVEB(Z6, 128(DI))
	NSAVEB(Z7, 192(DI))
	DECQ CX
	JZ   next64
	ADDQ R12, DI
	NSAVEB(Z8, (DI))
	NSAVEB(Z9, 64(DI))
	NSAVEB(Z10, 128(DI))
	NSAVEB(Z11, 192(DI))
	DECQ CX
	JZ   next64
	ADDQ R12, DI
	NSAVEB(Z12, (DI))
	NSAVEB(Z13, 64(DI))
	NSAVEB(Z14, 128(DI))
	NSAVEB(Z15, 192(DI))
	JMP  next64

nobeta64:
	NSAVE(Z0, (DI))
	NSAVE(Z1, 64(DI))
	NSAVE(Z2, 128(DI))
	NSAVE(Z3, 192(DI))
	DECQ CX
	JZ   next64
	ADDQ R12, DI
	NSAVE(Z4, (DI))
	NSAVE(Z5, 64(DI))
	NSAVE(Z6, 128(DI))
	NSAVE(Z7, 192(DI))
	DECQ CX
	JZ   next64
	ADDQ R12, DI
	NSAVE(Z8, (DI))
	NSAVE(Z9, 64(DI))
	NSAVE(Z10, 128(DI))
	NSAVE(Z11, 192(DI))
	DECQ CX
	JZ   next64
	ADDQ R12, DI
	NSAVE(Z12, (DI))
	NSAVE(Z13, 64(DI))
	NSAVE(Z14, 128(DI))
	NSAVE(Z15, 192(DI))

next64:
	ADDQ $256, R14
	SUBQ $64, R13
	JMP  strip64

// Strips of 16 columns, the last one masked. K1 selects the columns.
strip16:
	TESTQ R13, R13
	JZ    done512
	MOVQ  $0xffff, AX
	CMPQ  R13, $16
	JGE   full16
	MOVQ  R13, CX
	MOVQ  $1, AX
	SHLQ  CX, AX
	DECQ  AX

full16:
	KMOVW  AX, K1
	NLOADA
	MOVQ   b+56(FP), BX
	ADDQ   R14, BX
	MOVQ   k+8(FP), CX
	VPXORD Z0, Z0, Z0
	VPXORD Z4, Z4, Z4
	VPXORD Z8, Z8, Z8
	VPXORD Z12, Z12, Z12
	VPXORD Z1, Z1, Z1
	VPXORD Z5, Z5, Z5
	VPXORD Z9, Z9, Z9
	VPXORD Z13, Z13, Z13

// Two steps per iteration into two sets of accumulators, for latency.
loop16:
	CMPQ         CX, $2
	JLT          last16
	VMOVUPS.Z    (BX), K1, Z16
	VMOVUPS.Z    (BX)(DX*1), K1, Z17
	VBROADCASTSS (SI), Z20
	VBROADCASTSS (R8), Z21
	VBROADCASTSS (R9), Z22
	VBROADCASTSS (R10), Z23
	VFMADD231PS  Z16, Z20, Z0
	VFMADD231PS  Z16, Z21, Z4
	VFMADD231PS  Z16, Z22, Z8
	VFMADD231PS  Z16, Z23, Z12
	VBROADCASTSS (SI)(R11*1), Z20
	VBROADCASTSS (R8)(R11*1), Z21
	VBROADCASTSS (R9)(R11*1), Z22
	VBROADCASTSS (R10)(R11*1), Z23
	VFMADD231PS  Z17, Z20, Z1
	VFMADD231PS  Z17, Z21, Z5
	VFMADD231PS  Z17, Z22, Z9
	VFMADD231PS  Z17, Z23, Z13
	LEAQ         (SI)(R11*2), SI
	LEAQ         (R8)(R11*2), R8
	LEAQ         (R9)(R11*2), R9
	LEAQ         (R10)(R11*2), R10
	LEAQ         (BX)(DX*2), BX
	SUBQ         $2, CX
	JMP          loop16

last16:
	TESTQ        CX, CX
	JZ           save16
	VMOVUPS.Z    (BX), K1, Z16
	VBROADCASTSS (SI), Z20
	VBROADCASTSS (R8), Z21
	VBROADCASTSS (R9), Z22
	VBROADCASTSS (R10), Z23
	VFMADD231PS  Z16, Z20, Z0
	VFMADD231PS  Z16, Z21, Z4
	VFMADD231PS  Z16, Z22, Z8
	VFMADD231PS  Z16, Z23, Z12

save16:
	VADDPS Z1, Z0, Z0
	VADDPS Z5, Z4, Z4
	VADDPS Z9, Z8, Z8
	VADDPS Z13, Z12, Z12
	MOVQ   c+72(FP), DI
	ADDQ   R14, DI
	MOVQ   m+0(FP), CX
	MOVL   beta+100(FP), AX
	SHLL   $1, AX
	JZ     nobeta16
	VMULPS Z30, Z0, Z0
	VMOVUPS.Z (DI), K1, Z16
	VFMADD231PS Z16, Z31, Z0
	VMOVUPS Z0, K1, (DI)
	DECQ   CX
	JZ     next16
	ADDQ   R12, DI
	VMULPS Z30, Z4, Z4
	VMOVUPS.Z (DI), K1, Z16
	VFMADD231PS Z16, Z31, Z4
	VMOVUPS Z4, K1, (DI)
	DECQ   CX
	JZ     next16
	ADDQ   R12, DI
	VMULPS Z30, Z8, Z8
	VMOVUPS.Z (DI), K1, Z16
	VFMADD231PS Z16, Z31, Z8
	VMOVUPS Z8, K1, (DI)
	DECQ   CX
	JZ     next16
	ADDQ   R12, DI
	VMULPS Z30, Z12, Z12
	VMOVUPS.Z (DI), K1, Z16
	VFMADD231PS Z16, Z31, Z12
	VMOVUPS Z12, K1, (DI)
	JMP    next16

nobeta16:
	VMULPS  Z30, Z0, Z0
	VMOVUPS Z0, K1, (DI)
	DECQ    CX
	JZ      next16
	ADDQ    R12, DI
	VMULPS  Z30, Z4, Z4
	VMOVUPS Z4, K1, (DI)
	DECQ    CX
	JZ      next16
	ADDQ    R12, DI
	VMULPS  Z30, Z8, Z8
	VMOVUPS Z8, K1, (DI)
	DECQ    CX
	JZ      next16
	ADDQ    R12, DI
	VMULPS  Z30, Z12, Z12
	VMOVUPS Z12, K1, (DI)

next16:
	ADDQ $64, R14
	SUBQ $16, R13
	JG   strip16

done512:
	VZEROUPPER
	RET

// ---------------------------------------------------------------------------
// AVX2: strips of 16 columns (Y0..Y7, row r in Y(2r), Y(2r+1)), then strips
// of 8 (Y0, Y2, Y4, Y6), the last one masked with VMASKMOVPS (mask in Y9).
// Y14 = alpha, Y15 = beta.

// Eight int32 -1s, then eight 0s: the eight bytes at 4·(8−r) are the mask
// of the first r lanes.
DATA nmask<>+0(SB)/8, $-1
DATA nmask<>+8(SB)/8, $-1
DATA nmask<>+16(SB)/8, $-1
DATA nmask<>+24(SB)/8, $-1
DATA nmask<>+32(SB)/8, $0
DATA nmask<>+40(SB)/8, $0
DATA nmask<>+48(SB)/8, $0
DATA nmask<>+56(SB)/8, $0
GLOBL nmask<>(SB), RODATA|NOPTR, $64

#define NSAVE256(acc, addr) \
	VMULPS  Y14, acc, acc; \
	VMOVUPS acc, addr

#define NSAVEB256(acc, addr) \
	VMULPS      Y14, acc, acc; \
	VFMADD231PS addr, Y15, acc; \
	VMOVUPS     acc, addr

#define NSAVEM256(acc) \
	VMULPS     Y14, acc, acc; \
	VMASKMOVPS acc, Y9, (DI)

#define NSAVEMB256(acc) \
	VMULPS      Y14, acc, acc; \
	VMASKMOVPS  (DI), Y9, Y8; \
	VFMADD231PS Y8, Y15, acc; \
	VMASKMOVPS  acc, Y9, (DI)

// func kernN256(m, k int, a0, a1, a2, a3 *float32, aps int, b *float32, ldb int, c *float32, ldc, n int, alpha, beta float32)
TEXT ·kernN256(SB), NOSPLIT, $0-104
	MOVQ         aps+48(FP), R11
	MOVQ         ldb+64(FP), DX
	MOVQ         ldc+80(FP), R12
	MOVQ         n+88(FP), R13
	VBROADCASTSS alpha+96(FP), Y14
	VBROADCASTSS beta+100(FP), Y15
	XORQ         R14, R14

s2strip16:
	CMPQ   R13, $16
	JLT    s2strip8
	NLOADA
	MOVQ   b+56(FP), BX
	ADDQ   R14, BX
	MOVQ   k+8(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7

s2loop16:
	VMOVUPS      (BX), Y8
	VMOVUPS      32(BX), Y9
	VBROADCASTSS (SI), Y10
	VBROADCASTSS (R8), Y11
	VBROADCASTSS (R9), Y12
	VBROADCASTSS (R10), Y13
	VFMADD231PS  Y8, Y10, Y0
	VFMADD231PS  Y9, Y10, Y1
	VFMADD231PS  Y8, Y11, Y2
	VFMADD231PS  Y9, Y11, Y3
	VFMADD231PS  Y8, Y12, Y4
	VFMADD231PS  Y9, Y12, Y5
	VFMADD231PS  Y8, Y13, Y6
	VFMADD231PS  Y9, Y13, Y7
	ADDQ         R11, SI
	ADDQ         R11, R8
	ADDQ         R11, R9
	ADDQ         R11, R10
	ADDQ         DX, BX
	DECQ         CX
	JNZ          s2loop16

	MOVQ c+72(FP), DI
	ADDQ R14, DI
	MOVQ m+0(FP), CX
	MOVL beta+100(FP), AX
	SHLL $1, AX
	JZ   s2nobeta16
	NSAVEB256(Y0, (DI))
	NSAVEB256(Y1, 32(DI))
	DECQ CX
	JZ   s2next16
	ADDQ R12, DI
	NSAVEB256(Y2, (DI))
	NSAVEB256(Y3, 32(DI))
	DECQ CX
	JZ   s2next16
	ADDQ R12, DI
	NSAVEB256(Y4, (DI))
	NSAVEB256(Y5, 32(DI))
	DECQ CX
	JZ   s2next16
	ADDQ R12, DI
	NSAVEB256(Y6, (DI))
	NSAVEB256(Y7, 32(DI))
	JMP  s2next16

s2nobeta16:
	NSAVE256(Y0, (DI))
	NSAVE256(Y1, 32(DI))
	DECQ CX
	JZ   s2next16
	ADDQ R12, DI
	NSAVE256(Y2, (DI))
	NSAVE256(Y3, 32(DI))
	DECQ CX
	JZ   s2next16
	ADDQ R12, DI
	NSAVE256(Y4, (DI))
	NSAVE256(Y5, 32(DI))
	DECQ CX
	JZ   s2next16
	ADDQ R12, DI
	NSAVE256(Y6, (DI))
	NSAVE256(Y7, 32(DI))

s2next16:
	ADDQ $64, R14
	SUBQ $16, R13
	JMP  s2strip16

s2strip8:
	TESTQ   R13, R13
	JZ      s2done
	MOVQ    $8, AX
	CMPQ    R13, $8
	CMOVQLT R13, AX
	NEGQ    AX
	LEAQ    nmask<>+32(SB), BX
	VMOVDQU (BX)(AX*4), Y9
	NLOADA
	MOVQ    b+56(FP), BX
	ADDQ    R14, BX
	MOVQ    k+8(FP), CX
	VXORPS  Y0, Y0, Y0
	VXORPS  Y2, Y2, Y2
	VXORPS  Y4, Y4, Y4
	VXORPS  Y6, Y6, Y6

s2loop8:
	VMASKMOVPS   (BX), Y9, Y8
	VBROADCASTSS (SI), Y10
	VBROADCASTSS (R8), Y11
	VBROADCASTSS (R9), Y12
	VBROADCASTSS (R10), Y13
	VFMADD231PS  Y8, Y10, Y0
	VFMADD231PS  Y8, Y11, Y2
	VFMADD231PS  Y8, Y12, Y4
	VFMADD231PS  Y8, Y13, Y6
	ADDQ         R11, SI
	ADDQ         R11, R8
	ADDQ         R11, R9
	ADDQ         R11, R10
	ADDQ         DX, BX
	DECQ         CX
	JNZ          s2loop8

	MOVQ c+72(FP), DI
	ADDQ R14, DI
	MOVQ m+0(FP), CX
	MOVL beta+100(FP), AX
	SHLL $1, AX
	JZ   s2nobeta8
	NSAVEMB256(Y0)
	DECQ CX
	JZ   s2next8
	ADDQ R12, DI
	NSAVEMB256(Y2)
	DECQ CX
	JZ   s2next8
	ADDQ R12, DI
	NSAVEMB256(Y4)
	DECQ CX
	JZ   s2next8
	ADDQ R12, DI
	NSAVEMB256(Y6)
	JMP  s2next8

s2nobeta8:
	NSAVEM256(Y0)
	DECQ CX
	JZ   s2next8
	ADDQ R12, DI
	NSAVEM256(Y2)
	DECQ CX
	JZ   s2next8
	ADDQ R12, DI
	NSAVEM256(Y4)
	DECQ CX
	JZ   s2next8
	ADDQ R12, DI
	NSAVEM256(Y6)

s2next8:
	ADDQ $32, R14
	SUBQ $8, R13
	JG   s2strip8

s2done:
	VZEROUPPER
	RET
