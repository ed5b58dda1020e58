// Body of the AVX-512 matrix-vector kernels, included by gemv_amd64.s once
// per weight type. Before including, define
//
//	LOADW(off)  load 16 elements of each of the four weight rows at byte
//	            offset off from AX into Z16..Z19, as float32
//	WSTEP       bytes of 16 weight elements
//
// Frame: c+0 ldc+8 a+16 lda+24 w+32 ldw+40 n+48 k+56 m+64 alpha+72 beta+76
// pf+80.
//
// Registers: AX weight pointer, BX groups of four weight rows left, CX
// k-steps left, DX C (row 0, current columns), SI A pointer, DI weight rows of
// the current group, R8 = ldw, R9 = 3·ldw, R10 = k/16, R11 = lda, R12 =
// 3·lda, R13 = ldc (all strides in bytes), R14 = A, R15 = AX + pf, the
// weights to prefetch.

	GEMVFRAME(4, (WSTEP/16), 4, done)
	VBROADCASTSS alpha+72(FP), X30
	VBROADCASTSS beta+76(FP), X31
	PREFETCHHEAD
	MOVQ m+64(FP), AX
	CMPQ AX, $2
	JEQ  group2
	JLT  group1
	CMPQ AX, $3
	JEQ  group3
	JMP  group4

// m = 1: two sets of accumulators (Z0..Z3, Z4..Z7) cover the FMA latency.
group1:
	MOVQ  DI, AX
	MOVQ  pf+80(FP), R15
	ADDQ  AX, R15
	MOVQ  R14, SI
	MOVQ  R10, CX
	ZERO4(Z0, Z1, Z2, Z3)
	ZERO4(Z4, Z5, Z6, Z7)
	CMPQ  CX, $2
	JLT   tail1

loop1:
	PREFETCHW4
	LOADW(0)
	VMOVUPS (SI), Z20
	FMA4(Z20, Z0, Z1, Z2, Z3)
	LOADW(WSTEP)
	VMOVUPS 64(SI), Z21
	FMA4(Z21, Z4, Z5, Z6, Z7)
	ADDQ    $(2*WSTEP), AX
	ADDQ    $(2*WSTEP), R15
	ADDQ    $128, SI
	SUBQ    $2, CX
	CMPQ    CX, $2
	JGE     loop1

tail1:
	TESTQ CX, CX
	JZ    sum1
	LOADW(0)
	VMOVUPS (SI), Z20
	FMA4(Z20, Z0, Z1, Z2, Z3)

sum1:
	VADDPS Z4, Z0, Z0
	VADDPS Z5, Z1, Z1
	VADDPS Z6, Z2, Z2
	VADDPS Z7, Z3, Z3
	HSUM4(Z0, Z1, Z2, Z3, Y0, Y1, Y2, Y3, X0, X1, X2, X3)
	MOVL   beta+76(FP), AX
	SHLL   $1, AX
	JZ     nobeta1
	SAVEROWBETA(X0, (DX))
	JMP    next1

nobeta1:
	SAVEROW(X0, (DX))

next1:
	ADDQ $16, DX
	LEAQ (DI)(R8*4), DI
	DECQ BX
	JNZ  group1
	JMP  done

group2:
	MOVQ  DI, AX
	MOVQ  pf+80(FP), R15
	ADDQ  AX, R15
	MOVQ  R14, SI
	MOVQ  R10, CX
	ZERO4(Z0, Z1, Z2, Z3)
	ZERO4(Z4, Z5, Z6, Z7)

loop2:
	PREFETCHW4
	LOADW(0)
	VMOVUPS (SI), Z20
	VMOVUPS (SI)(R11*1), Z21
	FMA4(Z20, Z0, Z1, Z2, Z3)
	FMA4(Z21, Z4, Z5, Z6, Z7)
	ADDQ    $WSTEP, AX
	ADDQ    $WSTEP, R15
	ADDQ    $64, SI
	DECQ    CX
	JNZ     loop2
	HSUM4(Z0, Z1, Z2, Z3, Y0, Y1, Y2, Y3, X0, X1, X2, X3)
	HSUM4(Z4, Z5, Z6, Z7, Y4, Y5, Y6, Y7, X4, X5, X6, X7)
	MOVL    beta+76(FP), AX
	SHLL    $1, AX
	JZ      nobeta2
	SAVEROWBETA(X0, (DX))
	SAVEROWBETA(X4, (DX)(R13*1))
	JMP     next2

nobeta2:
	SAVEROW(X0, (DX))
	SAVEROW(X4, (DX)(R13*1))

next2:
	ADDQ $16, DX
	LEAQ (DI)(R8*4), DI
	DECQ BX
	JNZ  group2
	JMP  done

group3:
	MOVQ  DI, AX
	MOVQ  pf+80(FP), R15
	ADDQ  AX, R15
	MOVQ  R14, SI
	MOVQ  R10, CX
	ZERO4(Z0, Z1, Z2, Z3)
	ZERO4(Z4, Z5, Z6, Z7)
	ZERO4(Z8, Z9, Z10, Z11)

loop3:
	PREFETCHW4
	LOADW(0)
	VMOVUPS (SI), Z20
	VMOVUPS (SI)(R11*1), Z21
	VMOVUPS (SI)(R11*2), Z22
	FMA4(Z20, Z0, Z1, Z2, Z3)
	FMA4(Z21, Z4, Z5, Z6, Z7)
	FMA4(Z22, Z8, Z9, Z10, Z11)
	ADDQ    $WSTEP, AX
	ADDQ    $WSTEP, R15
	ADDQ    $64, SI
	DECQ    CX
	JNZ     loop3
	HSUM4(Z0, Z1, Z2, Z3, Y0, Y1, Y2, Y3, X0, X1, X2, X3)
	HSUM4(Z4, Z5, Z6, Z7, Y4, Y5, Y6, Y7, X4, X5, X6, X7)
	HSUM4(Z8, Z9, Z10, Z11, Y8, Y9, Y10, Y11, X8, X9, X10, X11)
	MOVL    beta+76(FP), AX
	SHLL    $1, AX
	JZ      nobeta3
	SAVEROWBETA(X0, (DX))
	SAVEROWBETA(X4, (DX)(R13*1))
	SAVEROWBETA(X8, (DX)(R13*2))
	JMP     next3

nobeta3:
	SAVEROW(X0, (DX))
	SAVEROW(X4, (DX)(R13*1))
	SAVEROW(X8, (DX)(R13*2))

next3:
	ADDQ $16, DX
	LEAQ (DI)(R8*4), DI
	DECQ BX
	JNZ  group3
	JMP  done

group4:
	MOVQ  DI, AX
	MOVQ  pf+80(FP), R15
	ADDQ  AX, R15
	MOVQ  R14, SI
	MOVQ  R10, CX
	ZERO4(Z0, Z1, Z2, Z3)
	ZERO4(Z4, Z5, Z6, Z7)
	ZERO4(Z8, Z9, Z10, Z11)
	ZERO4(Z12, Z13, Z14, Z15)

loop4:
	PREFETCHW4
	LOADW(0)
	VMOVUPS (SI), Z20
	VMOVUPS (SI)(R11*1), Z21
	VMOVUPS (SI)(R11*2), Z22
	VMOVUPS (SI)(R12*1), Z23
	FMA4(Z20, Z0, Z1, Z2, Z3)
	FMA4(Z21, Z4, Z5, Z6, Z7)
	FMA4(Z22, Z8, Z9, Z10, Z11)
	FMA4(Z23, Z12, Z13, Z14, Z15)
	ADDQ    $WSTEP, AX
	ADDQ    $WSTEP, R15
	ADDQ    $64, SI
	DECQ    CX
	JNZ     loop4
	HSUM4(Z0, Z1, Z2, Z3, Y0, Y1, Y2, Y3, X0, X1, X2, X3)
	HSUM4(Z4, Z5, Z6, Z7, Y4, Y5, Y6, Y7, X4, X5, X6, X7)
	HSUM4(Z8, Z9, Z10, Z11, Y8, Y9, Y10, Y11, X8, X9, X10, X11)
	HSUM4(Z12, Z13, Z14, Z15, Y12, Y13, Y14, Y15, X12, X13, X14, X15)
	LEAQ    (DX)(R13*2), SI
	ADDQ    R13, SI
	MOVL    beta+76(FP), AX
	SHLL    $1, AX
	JZ      nobeta4
	SAVEROWBETA(X0, (DX))
	SAVEROWBETA(X4, (DX)(R13*1))
	SAVEROWBETA(X8, (DX)(R13*2))
	SAVEROWBETA(X12, (SI))
	JMP     next4

nobeta4:
	SAVEROW(X0, (DX))
	SAVEROW(X4, (DX)(R13*1))
	SAVEROW(X8, (DX)(R13*2))
	SAVEROW(X12, (SI))

next4:
	ADDQ $16, DX
	LEAQ (DI)(R8*4), DI
	DECQ BX
	JNZ  group4

done:
	VZEROUPPER
	RET
