//go:build amd64 && !purego

#include "textflag.h"

// Micro-kernels and packing routines of the blocked matrix multiply
// (gemm.go). A micro-kernel multiplies a packed MR×kc panel of A (stored
// p-major: a[p*MR+i]) by a packed kc×NR panel of B (b[p*NR+j]), keeping the
// MR×NR tile of C in registers for the whole kc loop, and then writes
// C = alpha·tile + beta·C (C is not read when beta == 0).

// ---------------------------------------------------------------------------
// AVX-512: 14×32 tile. Z0..Z27 accumulate (row r in Z(2r), Z(2r+1)); Z28, Z29
// hold the 32 values of B for one p; Z30 the broadcast A value.

#define ROW512(aoff, acc0, acc1) \
	VBROADCASTSS aoff(AX), Z30; \
	VFMADD231PS  Z28, Z30, acc0; \
	VFMADD231PS  Z29, Z30, acc1

#define STEP512(aoff, boff) \
	VMOVUPS boff(BX), Z28; \
	VMOVUPS (boff+64)(BX), Z29; \
	ROW512((aoff+0), Z0, Z1); \
	ROW512((aoff+4), Z2, Z3); \
	ROW512((aoff+8), Z4, Z5); \
	ROW512((aoff+12), Z6, Z7); \
	ROW512((aoff+16), Z8, Z9); \
	ROW512((aoff+20), Z10, Z11); \
	ROW512((aoff+24), Z12, Z13); \
	ROW512((aoff+28), Z14, Z15); \
	ROW512((aoff+32), Z16, Z17); \
	ROW512((aoff+36), Z18, Z19); \
	ROW512((aoff+40), Z20, Z21); \
	ROW512((aoff+44), Z22, Z23); \
	ROW512((aoff+48), Z24, Z25); \
	ROW512((aoff+52), Z26, Z27)

// Z30 = alpha, Z31 = beta, R8 walks the rows of C, SI = ldc in bytes.
#define SAVE512(acc0, acc1) \
	VMULPS  Z30, acc0, acc0; \
	VMULPS  Z30, acc1, acc1; \
	VMOVUPS acc0, (R8); \
	VMOVUPS acc1, 64(R8); \
	ADDQ    SI, R8

#define SAVEBETA512(acc0, acc1) \
	VMULPS      Z30, acc0, acc0; \
	VMULPS      Z30, acc1, acc1; \
	VFMADD231PS (R8), Z31, acc0; \
	VFMADD231PS 64(R8), Z31, acc1; \
	VMOVUPS     acc0, (R8); \
	VMOVUPS     acc1, 64(R8); \
	ADDQ        SI, R8

#define ZERO512(r) VPXORD r, r, r

// func kern14x32(k int, a, b, c *float32, ldc int, alpha, beta float32)
TEXT ·kern14x32(SB), NOSPLIT, $0-48
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), AX
	MOVQ b+16(FP), BX
	MOVQ c+24(FP), DX
	MOVQ ldc+32(FP), SI
	SHLQ $2, SI

	// Start fetching the C tile; it is needed only at the end.
	MOVQ DX, R8
	MOVQ $14, R9

prefetch512:
	PREFETCHT0 (R8)
	PREFETCHT0 64(R8)
	ADDQ       SI, R8
	DECQ       R9
	JNZ        prefetch512

	ZERO512(Z0)
	ZERO512(Z1)
	ZERO512(Z2)
	ZERO512(Z3)
	ZERO512(Z4)
	ZERO512(Z5)
	ZERO512(Z6)
	ZERO512(Z7)
	ZERO512(Z8)
	ZERO512(Z9)
	ZERO512(Z10)
	ZERO512(Z11)
	ZERO512(Z12)
	ZERO512(Z13)
	ZERO512(Z14)
	ZERO512(Z15)
	ZERO512(Z16)
	ZERO512(Z17)
	ZERO512(Z18)
	ZERO512(Z19)
	ZERO512(Z20)
	ZERO512(Z21)
	ZERO512(Z22)
	ZERO512(Z23)
	ZERO512(Z24)
	ZERO512(Z25)
	ZERO512(Z26)
	ZERO512(Z27)

	CMPQ CX, $4
	JLT  tail512

loop512:
	STEP512(0, 0)
	STEP512(56, 128)
	STEP512(112, 256)
	STEP512(168, 384)
	ADDQ $224, AX
	ADDQ $512, BX
	SUBQ $4, CX
	CMPQ CX, $4
	JGE  loop512

tail512:
	TESTQ CX, CX
	JZ    save512

tailloop512:
	STEP512(0, 0)
	ADDQ $56, AX
	ADDQ $128, BX
	DECQ CX
	JNZ  tailloop512

save512:
	VBROADCASTSS alpha+40(FP), Z30
	MOVQ         DX, R8
	MOVL         beta+44(FP), R9
	SHLL         $1, R9             // drop the sign: -0 counts as 0
	JZ           nobeta512
	VBROADCASTSS beta+44(FP), Z31
	SAVEBETA512(Z0, Z1)
	SAVEBETA512(Z2, Z3)
	SAVEBETA512(Z4, Z5)
	SAVEBETA512(Z6, Z7)
	SAVEBETA512(Z8, Z9)
	SAVEBETA512(Z10, Z11)
	SAVEBETA512(Z12, Z13)
	SAVEBETA512(Z14, Z15)
	SAVEBETA512(Z16, Z17)
	SAVEBETA512(Z18, Z19)
	SAVEBETA512(Z20, Z21)
	SAVEBETA512(Z22, Z23)
	SAVEBETA512(Z24, Z25)
	SAVEBETA512(Z26, Z27)
	VZEROUPPER
	RET

nobeta512:
	SAVE512(Z0, Z1)
	SAVE512(Z2, Z3)
	SAVE512(Z4, Z5)
	SAVE512(Z6, Z7)
	SAVE512(Z8, Z9)
	SAVE512(Z10, Z11)
	SAVE512(Z12, Z13)
	SAVE512(Z14, Z15)
	SAVE512(Z16, Z17)
	SAVE512(Z18, Z19)
	SAVE512(Z20, Z21)
	SAVE512(Z22, Z23)
	SAVE512(Z24, Z25)
	SAVE512(Z26, Z27)
	VZEROUPPER
	RET

// ---------------------------------------------------------------------------
// AVX2: 6×16 tile. Y0..Y11 accumulate (row r in Y(2r), Y(2r+1)); Y12, Y13
// hold B, Y14 the broadcast A value.

#define ROW256(aoff, acc0, acc1) \
	VBROADCASTSS aoff(AX), Y14; \
	VFMADD231PS  Y12, Y14, acc0; \
	VFMADD231PS  Y13, Y14, acc1

#define STEP256(aoff, boff) \
	VMOVUPS boff(BX), Y12; \
	VMOVUPS (boff+32)(BX), Y13; \
	ROW256((aoff+0), Y0, Y1); \
	ROW256((aoff+4), Y2, Y3); \
	ROW256((aoff+8), Y4, Y5); \
	ROW256((aoff+12), Y6, Y7); \
	ROW256((aoff+16), Y8, Y9); \
	ROW256((aoff+20), Y10, Y11)

#define SAVE256(acc0, acc1) \
	VMULPS  Y14, acc0, acc0; \
	VMULPS  Y14, acc1, acc1; \
	VMOVUPS acc0, (R8); \
	VMOVUPS acc1, 32(R8); \
	ADDQ    SI, R8

#define SAVEBETA256(acc0, acc1) \
	VMULPS      Y14, acc0, acc0; \
	VMULPS      Y14, acc1, acc1; \
	VFMADD231PS (R8), Y15, acc0; \
	VFMADD231PS 32(R8), Y15, acc1; \
	VMOVUPS     acc0, (R8); \
	VMOVUPS     acc1, 32(R8); \
	ADDQ        SI, R8

// func kern6x16(k int, a, b, c *float32, ldc int, alpha, beta float32)
TEXT ·kern6x16(SB), NOSPLIT, $0-48
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), AX
	MOVQ b+16(FP), BX
	MOVQ c+24(FP), DX
	MOVQ ldc+32(FP), SI
	SHLQ $2, SI

	MOVQ DX, R8
	MOVQ $6, R9

prefetch256:
	PREFETCHT0 (R8)
	PREFETCHT0 63(R8)
	ADDQ       SI, R8
	DECQ       R9
	JNZ        prefetch256

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

	CMPQ CX, $4
	JLT  tail256

loop256:
	STEP256(0, 0)
	STEP256(24, 64)
	STEP256(48, 128)
	STEP256(72, 192)
	ADDQ $96, AX
	ADDQ $256, BX
	SUBQ $4, CX
	CMPQ CX, $4
	JGE  loop256

tail256:
	TESTQ CX, CX
	JZ    save256

tailloop256:
	STEP256(0, 0)
	ADDQ $24, AX
	ADDQ $64, BX
	DECQ CX
	JNZ  tailloop256

save256:
	VBROADCASTSS alpha+40(FP), Y14
	MOVQ         DX, R8
	MOVL         beta+44(FP), R9
	SHLL         $1, R9
	JZ           nobeta256
	VBROADCASTSS beta+44(FP), Y15
	SAVEBETA256(Y0, Y1)
	SAVEBETA256(Y2, Y3)
	SAVEBETA256(Y4, Y5)
	SAVEBETA256(Y6, Y7)
	SAVEBETA256(Y8, Y9)
	SAVEBETA256(Y10, Y11)
	VZEROUPPER
	RET

nobeta256:
	SAVE256(Y0, Y1)
	SAVE256(Y2, Y3)
	SAVE256(Y4, Y5)
	SAVE256(Y6, Y7)
	SAVE256(Y8, Y9)
	SAVE256(Y10, Y11)
	VZEROUPPER
	RET

// ---------------------------------------------------------------------------
// Transposing packers (AVX2, used by both sets).
//
// packT writes dst[p*rows+r] = src[r*ld+p] for r < rows, p < cols, where
// rows is even and cols a multiple of 8. Rows go four at a time (a 4×8 block
// is transposed in registers as two 4×4 blocks, one per 128-bit lane), then
// two at a time.

// Transpose the 4×8 block in Y0..Y3 (row i in Yi) and store its eight
// columns of four: columns 0..3 at (R10), (R10)(R11*1), (R10)(R11*2),
// (R10)(R12*1) and columns 4..7 at the same offsets from R13.
#define TRANSPOSE4x8 \
	VUNPCKLPS    Y1, Y0, Y4; \
	VUNPCKHPS    Y1, Y0, Y5; \
	VUNPCKLPS    Y3, Y2, Y6; \
	VUNPCKHPS    Y3, Y2, Y7; \
	VUNPCKLPD    Y6, Y4, Y0; \
	VUNPCKHPD    Y6, Y4, Y1; \
	VUNPCKLPD    Y7, Y5, Y2; \
	VUNPCKHPD    Y7, Y5, Y3; \
	VMOVUPS      X0, (R10); \
	VMOVUPS      X1, (R10)(R11*1); \
	VMOVUPS      X2, (R10)(R11*2); \
	VMOVUPS      X3, (R10)(R12*1); \
	VEXTRACTF128 $1, Y0, (R13); \
	VEXTRACTF128 $1, Y1, (R13)(R11*1); \
	VEXTRACTF128 $1, Y2, (R13)(R11*2); \
	VEXTRACTF128 $1, Y3, (R13)(R12*1)

// Interleave the 2×8 block in Y0, Y1 and store its eight columns of two.
#define TRANSPOSE2x8 \
	VUNPCKLPS    Y1, Y0, Y4; \
	VUNPCKHPS    Y1, Y0, Y5; \
	VMOVLPS      X4, (R10); \
	VMOVHPS      X4, (R10)(R11*1); \
	VMOVLPS      X5, (R10)(R11*2); \
	VMOVHPS      X5, (R10)(R12*1); \
	VEXTRACTF128 $1, Y4, X6; \
	VEXTRACTF128 $1, Y5, X7; \
	VMOVLPS      X6, (R13); \
	VMOVHPS      X6, (R13)(R11*1); \
	VMOVLPS      X7, (R13)(R11*2); \
	VMOVHPS      X7, (R13)(R12*1)

// Registers of both packers: DI dst, SI src row r, DX ld in bytes, BX rows
// left, CX cols, R11 = rows*4 (the dst stride of one column), R12 = 3*R11,
// R14 = 8*R11, R8 = 3*ld, R9 the column counter, R15 unused.

// func packT(dst, src *float32, ld, rows, cols int)
TEXT ·packT(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ ld+16(FP), DX
	SHLQ $2, DX
	MOVQ rows+24(FP), BX
	MOVQ cols+32(FP), CX
	SHRQ $3, CX
	JZ   packTdone
	MOVQ BX, R11
	SHLQ $2, R11
	LEAQ (R11)(R11*2), R12
	MOVQ R11, R14
	SHLQ $3, R14
	LEAQ (DX)(DX*2), R8

packTrows4:
	CMPQ BX, $4
	JLT  packTrows2
	MOVQ DI, R10
	LEAQ (R10)(R11*4), R13
	MOVQ SI, AX
	MOVQ CX, R9

packTloop4:
	VMOVUPS (AX), Y0
	VMOVUPS (AX)(DX*1), Y1
	VMOVUPS (AX)(DX*2), Y2
	VMOVUPS (AX)(R8*1), Y3
	TRANSPOSE4x8
	ADDQ    $32, AX
	ADDQ    R14, R10
	ADDQ    R14, R13
	DECQ    R9
	JNZ     packTloop4
	ADDQ    $16, DI
	LEAQ    (SI)(DX*4), SI
	SUBQ    $4, BX
	JMP     packTrows4

packTrows2:
	CMPQ BX, $2
	JLT  packTdone
	MOVQ DI, R10
	LEAQ (R10)(R11*4), R13
	MOVQ SI, AX
	MOVQ CX, R9

packTloop2:
	VMOVUPS (AX), Y0
	VMOVUPS (AX)(DX*1), Y1
	TRANSPOSE2x8
	ADDQ    $32, AX
	ADDQ    R14, R10
	ADDQ    R14, R13
	DECQ    R9
	JNZ     packTloop2

packTdone:
	VZEROUPPER
	RET

// Widen eight BF16 values at addr into eight float32 in y.
#define WIDEN8(addr, y) \
	VPMOVZXWD addr, y; \
	VPSLLD    $16, y, y

// func packTBF16(dst *float32, src *uint16, ld, rows, cols int)
TEXT ·packTBF16(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ ld+16(FP), DX
	SHLQ $1, DX
	MOVQ rows+24(FP), BX
	MOVQ cols+32(FP), CX
	SHRQ $3, CX
	JZ   packTBdone
	MOVQ BX, R11
	SHLQ $2, R11
	LEAQ (R11)(R11*2), R12
	MOVQ R11, R14
	SHLQ $3, R14
	LEAQ (DX)(DX*2), R8

packTBrows4:
	CMPQ BX, $4
	JLT  packTBrows2
	MOVQ DI, R10
	LEAQ (R10)(R11*4), R13
	MOVQ SI, AX
	MOVQ CX, R9

packTBloop4:
	WIDEN8((AX), Y0)
	WIDEN8((AX)(DX*1), Y1)
	WIDEN8((AX)(DX*2), Y2)
	WIDEN8((AX)(R8*1), Y3)
	TRANSPOSE4x8
	ADDQ $16, AX
	ADDQ R14, R10
	ADDQ R14, R13
	DECQ R9
	JNZ  packTBloop4
	ADDQ $16, DI
	LEAQ (SI)(DX*4), SI
	SUBQ $4, BX
	JMP  packTBrows4

packTBrows2:
	CMPQ BX, $2
	JLT  packTBdone
	MOVQ DI, R10
	LEAQ (R10)(R11*4), R13
	MOVQ SI, AX
	MOVQ CX, R9

packTBloop2:
	WIDEN8((AX), Y0)
	WIDEN8((AX)(DX*1), Y1)
	TRANSPOSE2x8
	ADDQ $16, AX
	ADDQ R14, R10
	ADDQ R14, R13
	DECQ R9
	JNZ  packTBloop2

packTBdone:
	VZEROUPPER
	RET
