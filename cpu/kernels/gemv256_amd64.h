// Body of the AVX2 matrix-vector kernels, included by gemv_amd64.s once per
// weight type. Before including, define
//
//	LOADW(off)  load 8 elements of each of the four weight rows at byte
//	            offset off from AX into Y8..Y11, as float32
//	WSTEP       bytes of 8 weight elements
//
// Frame and registers as in gemv512_amd64.h, with k-steps of 8 and m ≤ 2.

	GEMVFRAME(4, (WSTEP/8), 3, done)
	PREFETCHHEAD
	MOVQ m+64(FP), AX
	CMPQ AX, $2
	JEQ  group2

// m = 1: two sets of accumulators (Y0..Y3, Y4..Y7) cover the FMA latency.
group1:
	MOVQ   DI, AX
	MOVQ   pf+80(FP), R15
	ADDQ   AX, R15
	MOVQ   R14, SI
	MOVQ   R10, CX
	ZERO4Y(Y0, Y1, Y2, Y3)
	ZERO4Y(Y4, Y5, Y6, Y7)
	CMPQ   CX, $2
	JLT    tail1

loop1:
	PREFETCHW4
	LOADW(0)
	VMOVUPS (SI), Y12
	FMA4Y(Y12, Y0, Y1, Y2, Y3)
	LOADW(WSTEP)
	VMOVUPS 32(SI), Y13
	FMA4Y(Y13, Y4, Y5, Y6, Y7)
	ADDQ    $(2*WSTEP), AX
	ADDQ    $(2*WSTEP), R15
	ADDQ    $64, SI
	SUBQ    $2, CX
	CMPQ    CX, $2
	JGE     loop1

tail1:
	TESTQ CX, CX
	JZ    sum1
	LOADW(0)
	VMOVUPS (SI), Y12
	FMA4Y(Y12, Y0, Y1, Y2, Y3)

sum1:
	VADDPS Y4, Y0, Y0
	VADDPS Y5, Y1, Y1
	VADDPS Y6, Y2, Y2
	VADDPS Y7, Y3, Y3
	HSUM4Y(Y0, Y1, Y2, Y3, X0, X1, X2, X3)
	VBROADCASTSS alpha+72(FP), X14
	VMULPS X14, X0, X0
	MOVL   beta+76(FP), AX
	SHLL   $1, AX
	JZ     nobeta1
	VBROADCASTSS beta+76(FP), X15
	VFMADD231PS (DX), X15, X0

nobeta1:
	VMOVUPS X0, (DX)
	ADDQ $16, DX
	LEAQ (DI)(R8*4), DI
	DECQ BX
	JNZ  group1
	JMP  done

group2:
	MOVQ   DI, AX
	MOVQ   pf+80(FP), R15
	ADDQ   AX, R15
	MOVQ   R14, SI
	MOVQ   R10, CX
	ZERO4Y(Y0, Y1, Y2, Y3)
	ZERO4Y(Y4, Y5, Y6, Y7)

loop2:
	PREFETCHW4
	LOADW(0)
	VMOVUPS (SI), Y12
	VMOVUPS (SI)(R11*1), Y13
	FMA4Y(Y12, Y0, Y1, Y2, Y3)
	FMA4Y(Y13, Y4, Y5, Y6, Y7)
	ADDQ    $WSTEP, AX
	ADDQ    $WSTEP, R15
	ADDQ    $32, SI
	DECQ    CX
	JNZ     loop2
	HSUM4Y(Y0, Y1, Y2, Y3, X0, X1, X2, X3)
	HSUM4Y(Y4, Y5, Y6, Y7, X4, X5, X6, X7)
	VBROADCASTSS alpha+72(FP), X14
	VMULPS X14, X0, X0
	VMULPS X14, X4, X4
	MOVL   beta+76(FP), AX
	SHLL   $1, AX
	JZ     nobeta2
	VBROADCASTSS beta+76(FP), X15
	VFMADD231PS (DX), X15, X0
	VFMADD231PS (DX)(R13*1), X15, X4

nobeta2:
	VMOVUPS X0, (DX)
	VMOVUPS X4, (DX)(R13*1)
	ADDQ $16, DX
	LEAQ (DI)(R8*4), DI
	DECQ BX
	JNZ  group2

done:
	VZEROUPPER
	RET
