//go:build amd64 && !purego

#include "textflag.h"

// func dequantQ8_512(dst *float32, src *byte, nb int)
//
// nb Q8_0 blocks (34 bytes: half d, 32 int8 q) at src to 32·nb float32 at
// dst: d widened (VCVTPH2PS) and broadcast, q sign-extended to int32 and
// converted, then multiplied; every product d·q is exact.
TEXT ·dequantQ8_512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ nb+16(FP), CX
loop:
	MOVWLZX   (SI), AX
	VMOVD     AX, X0
	VCVTPH2PS X0, X0
	VBROADCASTSS X0, Z0
	VPMOVSXBD 2(SI), Z1
	VPMOVSXBD 18(SI), Z2
	VCVTDQ2PS Z1, Z1
	VCVTDQ2PS Z2, Z2
	VMULPS    Z0, Z1, Z1
	VMULPS    Z0, Z2, Z2
	VMOVUPS   Z1, (DI)
	VMOVUPS   Z2, 64(DI)
	ADDQ $34, SI
	ADDQ $128, DI
	DECQ CX
	JNZ  loop
	VZEROUPPER
	RET

// func prefetchLines(p *byte, n int)
//
// PREFETCHT0 of every 64-byte line of the n > 0 bytes at p.
TEXT ·prefetchLines(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	LEAQ (SI)(CX*1), CX
pf:
	PREFETCHT0 (SI)
	ADDQ $64, SI
	CMPQ SI, CX
	JLT  pf
	RET
