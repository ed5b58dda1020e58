// BF16 matrix-vector kernels (see gemv_amd64.s). Frame as in
// gemv512_amd64.h: c+0 ldc+8 a+16 lda+24 w+32 ldw+40 n+48 k+56 m+64
// alpha+72 beta+76 pf+80; registers likewise.

// ---------------------------------------------------------------------------
// AVX-512: steps of 32 weights per row (one cache line). Z31 = 0xffff0000,
// X30 = alpha; X29 = beta, loaded after the loop that uses Z29.

#define SAVEROWBF(x, addr) \
	VMULPS      X30, x, x; \
	VFMADD231PS addr, X29, x; \
	VMOVUPS     x, addr

// Load 32 BF16 at addr: even elements to ev, odd to od, as float32. The
// line is read by two loads, folded into the shift and the mask, and no
// register holds the raw weights: streaming weights from memory at m = 1,
// this ran 15-58% faster (median ~28%) than one VMOVDQU32 followed by the
// shift and the mask in registers, on the development machines (2
// threads, a 311 MB matrix, the two forms alternated within one process).
// Why is not known; the second load hits the line the first one brought,
// and may keep more misses in flight.
#define BFW512F(addr, od, ev) \
	VPSLLD $16, addr, ev; \
	VPANDD addr, Z31, od

// acc_i += ev·A_i,even + od·A_i,odd for the rows of A in Z16..Z23.
#define BFFMA1(ev, od, a0) \
	VFMADD231PS ev, Z16, a0; \
	VFMADD231PS od, Z17, a0

#define BFFMA2(ev, od, a0, a1) \
	BFFMA1(ev, od, a0); \
	VFMADD231PS ev, Z18, a1; \
	VFMADD231PS od, Z19, a1

#define BFFMA3(ev, od, a0, a1, a2) \
	BFFMA2(ev, od, a0, a1); \
	VFMADD231PS ev, Z20, a2; \
	VFMADD231PS od, Z21, a2

#define BFFMA4(ev, od, a0, a1, a2, a3) \
	BFFMA3(ev, od, a0, a1, a2); \
	VFMADD231PS ev, Z22, a3; \
	VFMADD231PS od, Z23, a3

#define PREFETCH4 \
	PREFETCHT0 (R15); \
	PREFETCHT0 (R15)(R8*1); \
	PREFETCHT0 (R15)(R8*2); \
	PREFETCHT0 (R15)(R9*1)

// func gemvBF16AVX512(c *float32, ldc int, a *float32, lda int, w *uint16, ldw int, n, k, m int, alpha, beta float32, pf int)
TEXT ·gemvBF16AVX512(SB), NOSPLIT, $0-88
	GEMVFRAME(4, 2, 5, bf512done)
	VBROADCASTSS alpha+72(FP), X30
	MOVL         $0xffff0000, AX
	VPBROADCASTD AX, Z31
	MOVQ         m+64(FP), AX
	CMPQ         AX, $2
	JLT          bf512g1
	PREFETCHHEAD
	MOVQ         m+64(FP), AX
	CMPQ         AX, $2
	JEQ          bf512g2
	CMPQ         AX, $3
	JEQ          bf512g3
	JMP          bf512g4

// m = 1: one weight row at a time, so that the weights are read as one
// sequential stream, which the hardware prefetchers follow without help:
// pf is not used (on the development machines, a decode step's products
// ran 10% faster without software prefetches here, and four rows side by
// side, four streams, 7-18% slower than one). Two blocks of 32 weights per
// step, their even and odd halves into four accumulators (Z0..Z3) to
// cover the FMA latency; A is read from memory (L1) by the FMAs. AX
// weights, SI = A, CX blocks left in the row, BX rows left, X29 = beta.
bf512g1:
	SHLQ         $2, BX
	VBROADCASTSS beta+76(FP), X29
	MOVL         beta+76(FP), R12
	SHLL         $1, R12           // zero for beta = ±0: C is not read

bf512r1:
	MOVQ   DI, AX
	MOVQ   R14, SI
	MOVQ   R10, CX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	CMPQ   CX, $2
	JLT    bf512r1tail

bf512r1loop:
	BFW512F((AX), Z16, Z20)
	VFMADD231PS (SI), Z20, Z0
	VFMADD231PS 64(SI), Z16, Z1
	BFW512F(64(AX), Z17, Z21)
	VFMADD231PS 128(SI), Z21, Z2
	VFMADD231PS 192(SI), Z17, Z3
	ADDQ        $128, AX
	ADDQ        $256, SI
	SUBQ        $2, CX
	CMPQ        CX, $2
	JGE         bf512r1loop

bf512r1tail:
	TESTQ       CX, CX
	JZ          bf512r1sum
	BFW512F((AX), Z16, Z20)
	VFMADD231PS (SI), Z20, Z0
	VFMADD231PS 64(SI), Z16, Z1

bf512r1sum:
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
	JZ            bf512r1store
	VFMADD231SS   (DX), X29, X0

bf512r1store:
	VMOVSS X0, (DX)
	ADDQ   $4, DX
	ADDQ   R8, DI
	DECQ   BX
	JNZ    bf512r1
	JMP    bf512done

bf512g2:
	MOVQ DI, AX
	MOVQ pf+80(FP), R15
	ADDQ AX, R15
	MOVQ R14, SI
	MOVQ R10, CX
	ZERO4(Z0, Z1, Z2, Z3)
	ZERO4(Z4, Z5, Z6, Z7)

bf512l2:
	PREFETCH4
	VMOVUPS (SI), Z16
	VMOVUPS 64(SI), Z17
	VMOVUPS (SI)(R11*1), Z18
	VMOVUPS 64(SI)(R11*1), Z19
	BFW512F((AX), Z24, Z28)
	BFFMA2(Z28, Z24, Z0, Z4)
	BFW512F((AX)(R8*1), Z25, Z29)
	BFFMA2(Z29, Z25, Z1, Z5)
	BFW512F((AX)(R8*2), Z26, Z28)
	BFFMA2(Z28, Z26, Z2, Z6)
	BFW512F((AX)(R9*1), Z27, Z29)
	BFFMA2(Z29, Z27, Z3, Z7)
	ADDQ    $64, AX
	ADDQ    $64, R15
	ADDQ    $128, SI
	DECQ    CX
	JNZ     bf512l2
	HSUM4(Z0, Z1, Z2, Z3, Y0, Y1, Y2, Y3, X0, X1, X2, X3)
	HSUM4(Z4, Z5, Z6, Z7, Y4, Y5, Y6, Y7, X4, X5, X6, X7)
	MOVL    beta+76(FP), AX
	SHLL    $1, AX
	JZ      bf512nb2
	VBROADCASTSS beta+76(FP), X29
	SAVEROWBF(X0, (DX))
	SAVEROWBF(X4, (DX)(R13*1))
	JMP     bf512n2

bf512nb2:
	SAVEROW(X0, (DX))
	SAVEROW(X4, (DX)(R13*1))

bf512n2:
	ADDQ $16, DX
	LEAQ (DI)(R8*4), DI
	DECQ BX
	JNZ  bf512g2
	JMP  bf512done

bf512g3:
	MOVQ DI, AX
	MOVQ pf+80(FP), R15
	ADDQ AX, R15
	MOVQ R14, SI
	MOVQ R10, CX
	ZERO4(Z0, Z1, Z2, Z3)
	ZERO4(Z4, Z5, Z6, Z7)
	ZERO4(Z8, Z9, Z10, Z11)

bf512l3:
	PREFETCH4
	VMOVUPS (SI), Z16
	VMOVUPS 64(SI), Z17
	VMOVUPS (SI)(R11*1), Z18
	VMOVUPS 64(SI)(R11*1), Z19
	VMOVUPS (SI)(R11*2), Z20
	VMOVUPS 64(SI)(R11*2), Z21
	BFW512F((AX), Z24, Z28)
	BFFMA3(Z28, Z24, Z0, Z4, Z8)
	BFW512F((AX)(R8*1), Z25, Z29)
	BFFMA3(Z29, Z25, Z1, Z5, Z9)
	BFW512F((AX)(R8*2), Z26, Z28)
	BFFMA3(Z28, Z26, Z2, Z6, Z10)
	BFW512F((AX)(R9*1), Z27, Z29)
	BFFMA3(Z29, Z27, Z3, Z7, Z11)
	ADDQ    $64, AX
	ADDQ    $64, R15
	ADDQ    $128, SI
	DECQ    CX
	JNZ     bf512l3
	HSUM4(Z0, Z1, Z2, Z3, Y0, Y1, Y2, Y3, X0, X1, X2, X3)
	HSUM4(Z4, Z5, Z6, Z7, Y4, Y5, Y6, Y7, X4, X5, X6, X7)
	HSUM4(Z8, Z9, Z10, Z11, Y8, Y9, Y10, Y11, X8, X9, X10, X11)
	MOVL    beta+76(FP), AX
	SHLL    $1, AX
	JZ      bf512nb3
	VBROADCASTSS beta+76(FP), X29
	SAVEROWBF(X0, (DX))
	SAVEROWBF(X4, (DX)(R13*1))
	SAVEROWBF(X8, (DX)(R13*2))
	JMP     bf512n3

bf512nb3:
	SAVEROW(X0, (DX))
	SAVEROW(X4, (DX)(R13*1))
	SAVEROW(X8, (DX)(R13*2))

bf512n3:
	ADDQ $16, DX
	LEAQ (DI)(R8*4), DI
	DECQ BX
	JNZ  bf512g3
	JMP  bf512done

bf512g4:
	MOVQ DI, AX
	MOVQ pf+80(FP), R15
	ADDQ AX, R15
	MOVQ R14, SI
	MOVQ R10, CX
	ZERO4(Z0, Z1, Z2, Z3)
	ZERO4(Z4, Z5, Z6, Z7)
	ZERO4(Z8, Z9, Z10, Z11)
	ZERO4(Z12, Z13, Z14, Z15)

bf512l4:
	PREFETCH4
	VMOVUPS (SI), Z16
	VMOVUPS 64(SI), Z17
	VMOVUPS (SI)(R11*1), Z18
	VMOVUPS 64(SI)(R11*1), Z19
	VMOVUPS (SI)(R11*2), Z20
	VMOVUPS 64(SI)(R11*2), Z21
	VMOVUPS (SI)(R12*1), Z22
	VMOVUPS 64(SI)(R12*1), Z23
	BFW512F((AX), Z24, Z28)
	BFFMA4(Z28, Z24, Z0, Z4, Z8, Z12)
	BFW512F((AX)(R8*1), Z25, Z29)
	BFFMA4(Z29, Z25, Z1, Z5, Z9, Z13)
	BFW512F((AX)(R8*2), Z26, Z28)
	BFFMA4(Z28, Z26, Z2, Z6, Z10, Z14)
	BFW512F((AX)(R9*1), Z27, Z29)
	BFFMA4(Z29, Z27, Z3, Z7, Z11, Z15)
	ADDQ    $64, AX
	ADDQ    $64, R15
	ADDQ    $128, SI
	DECQ    CX
	JNZ     bf512l4
	HSUM4(Z0, Z1, Z2, Z3, Y0, Y1, Y2, Y3, X0, X1, X2, X3)
	HSUM4(Z4, Z5, Z6, Z7, Y4, Y5, Y6, Y7, X4, X5, X6, X7)
	HSUM4(Z8, Z9, Z10, Z11, Y8, Y9, Y10, Y11, X8, X9, X10, X11)
	HSUM4(Z12, Z13, Z14, Z15, Y12, Y13, Y14, Y15, X12, X13, X14, X15)
	LEAQ    (DX)(R13*2), SI
	ADDQ    R13, SI
	MOVL    beta+76(FP), AX
	SHLL    $1, AX
	JZ      bf512nb4
	VBROADCASTSS beta+76(FP), X29
	SAVEROWBF(X0, (DX))
	SAVEROWBF(X4, (DX)(R13*1))
	SAVEROWBF(X8, (DX)(R13*2))
	SAVEROWBF(X12, (SI))
	JMP     bf512n4

bf512nb4:
	SAVEROW(X0, (DX))
	SAVEROW(X4, (DX)(R13*1))
	SAVEROW(X8, (DX)(R13*2))
	SAVEROW(X12, (SI))

bf512n4:
	ADDQ $16, DX
	LEAQ (DI)(R8*4), DI
	DECQ BX
	JNZ  bf512g4

bf512done:
	VZEROUPPER
	RET

// ---------------------------------------------------------------------------
// AVX2: steps of 16 weights per row, m ≤ 2. The odd-element mask is a memory
// operand (bfmask<>), for want of registers.

DATA bfmask<>+0(SB)/8, $0xffff0000ffff0000
DATA bfmask<>+8(SB)/8, $0xffff0000ffff0000
DATA bfmask<>+16(SB)/8, $0xffff0000ffff0000
DATA bfmask<>+24(SB)/8, $0xffff0000ffff0000
GLOBL bfmask<>(SB), RODATA|NOPTR, $32

#define BFW256(addr, raw, ev) \
	VMOVDQU addr, raw; \
	VPSLLD  $16, raw, ev; \
	VPAND   bfmask<>(SB), raw, raw

// BFW256 with two loads of addr folded into the shift and the mask (see
// BFW512F; on the development machines the AVX2 m = 1 loop went from
// 86-97% to 99-100% of the read loop); Y13 holds the mask.
#define BFW256F(addr, od, ev) \
	VPSLLD $16, addr, ev; \
	VPAND  addr, Y13, od

// func gemvBF16AVX2(c *float32, ldc int, a *float32, lda int, w *uint16, ldw int, n, k, m int, alpha, beta float32, pf int)
TEXT ·gemvBF16AVX2(SB), NOSPLIT, $0-88
	GEMVFRAME(4, 2, 4, bf256done)
	MOVQ  m+64(FP), AX
	CMPQ  AX, $2
	JLT   bf256g1
	PREFETCHHEAD
	JMP   bf256g2

// m = 1: one weight row at a time, as one sequential stream, without
// software prefetches (pf is not used; see the AVX-512 kernel). Two blocks
// of 16 weights (a cache line) per step, their even and odd halves into
// four accumulators Y0..Y3; A is read by the FMAs. X14 = alpha, X15 =
// beta, R12 zero when beta is.
bf256g1:
	SHLQ         $2, BX
	VBROADCASTSS alpha+72(FP), X14
	VBROADCASTSS beta+76(FP), X15
	MOVL         beta+76(FP), R12
	SHLL         $1, R12
	VMOVDQU      bfmask<>(SB), Y13

bf256r1:
	MOVQ DI, AX
	MOVQ R14, SI
	MOVQ R10, CX
	ZERO4Y(Y0, Y1, Y2, Y3)
	CMPQ CX, $2
	JLT  bf256r1tail

bf256r1loop:
	BFW256F((AX), Y8, Y9)
	VFMADD231PS (SI), Y9, Y0
	VFMADD231PS 32(SI), Y8, Y1
	BFW256F(32(AX), Y10, Y11)
	VFMADD231PS 64(SI), Y11, Y2
	VFMADD231PS 96(SI), Y10, Y3
	ADDQ        $64, AX
	ADDQ        $128, SI
	SUBQ        $2, CX
	CMPQ        CX, $2
	JGE         bf256r1loop

bf256r1tail:
	TESTQ       CX, CX
	JZ          bf256r1sum
	BFW256F((AX), Y8, Y9)
	VFMADD231PS (SI), Y9, Y0
	VFMADD231PS 32(SI), Y8, Y1

bf256r1sum:
	VADDPS       Y1, Y0, Y0
	VADDPS       Y3, Y2, Y2
	VADDPS       Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	VMULSS       X14, X0, X0
	TESTL        R12, R12
	JZ           bf256r1store
	VFMADD231SS  (DX), X15, X0

bf256r1store:
	VMOVSS X0, (DX)
	ADDQ   $4, DX
	ADDQ   R8, DI
	DECQ   BX
	JNZ    bf256r1
	JMP    bf256done

// m = 2: accumulators Y0..Y7 (row i of A in Y(4i)..Y(4i+3)), A in Y8..Y11.
bf256g2:
	MOVQ   DI, AX
	MOVQ   pf+80(FP), R15
	ADDQ   AX, R15
	MOVQ   R14, SI
	MOVQ   R10, CX
	ZERO4Y(Y0, Y1, Y2, Y3)
	ZERO4Y(Y4, Y5, Y6, Y7)

bf256l2:
	PREFETCH4
	VMOVUPS     (SI), Y8
	VMOVUPS     32(SI), Y9
	VMOVUPS     (SI)(R11*1), Y10
	VMOVUPS     32(SI)(R11*1), Y11
	BFW256((AX), Y12, Y13)
	BFW256((AX)(R8*1), Y14, Y15)
	VFMADD231PS Y13, Y8, Y0
	VFMADD231PS Y12, Y9, Y0
	VFMADD231PS Y13, Y10, Y4
	VFMADD231PS Y12, Y11, Y4
	VFMADD231PS Y15, Y8, Y1
	VFMADD231PS Y14, Y9, Y1
	VFMADD231PS Y15, Y10, Y5
	VFMADD231PS Y14, Y11, Y5
	BFW256((AX)(R8*2), Y12, Y13)
	BFW256((AX)(R9*1), Y14, Y15)
	VFMADD231PS Y13, Y8, Y2
	VFMADD231PS Y12, Y9, Y2
	VFMADD231PS Y13, Y10, Y6
	VFMADD231PS Y12, Y11, Y6
	VFMADD231PS Y15, Y8, Y3
	VFMADD231PS Y14, Y9, Y3
	VFMADD231PS Y15, Y10, Y7
	VFMADD231PS Y14, Y11, Y7
	ADDQ        $32, AX
	ADDQ        $32, R15
	ADDQ        $64, SI
	DECQ        CX
	JNZ         bf256l2
	HSUM4Y(Y0, Y1, Y2, Y3, X0, X1, X2, X3)
	HSUM4Y(Y4, Y5, Y6, Y7, X4, X5, X6, X7)
	VBROADCASTSS alpha+72(FP), X14
	VMULPS      X14, X0, X0
	VMULPS      X14, X4, X4
	MOVL        beta+76(FP), AX
	SHLL        $1, AX
	JZ          bf256nb2
	VBROADCASTSS beta+76(FP), X15
	VFMADD231PS (DX), X15, X0
	VFMADD231PS (DX)(R13*1), X15, X4

bf256nb2:
	VMOVUPS X0, (DX)
	VMOVUPS X4, (DX)(R13*1)
	ADDQ    $16, DX
	LEAQ    (DI)(R8*4), DI
	DECQ    BX
	JNZ     bf256g2

bf256done:
	VZEROUPPER
	RET
