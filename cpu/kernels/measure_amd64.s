//go:build amd64 && !purego

#include "textflag.h"
#include "dpbf16_amd64.h"
#include "zero_amd64.h"

// Measurement loops for PeakGFLOPS and ReadBandwidthGBs.

// func fmaLoop512(n int)
// 12 independent FMA chains on registers only: 12·16 lanes per iteration.
// Twelve chains cover the FMA latency (4 cycles) of two pipes with room.
TEXT ·fmaLoop512(SB), NOSPLIT, $0-8
	MOVQ   n+0(FP), CX
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
	TESTQ  CX, CX
	JLE    done512

loop512:
	VFMADD231PS Z12, Z13, Z0
	VFMADD231PS Z12, Z13, Z1
	VFMADD231PS Z12, Z13, Z2
	VFMADD231PS Z12, Z13, Z3
	VFMADD231PS Z12, Z13, Z4
	VFMADD231PS Z12, Z13, Z5
	VFMADD231PS Z12, Z13, Z6
	VFMADD231PS Z12, Z13, Z7
	VFMADD231PS Z12, Z13, Z8
	VFMADD231PS Z12, Z13, Z9
	VFMADD231PS Z12, Z13, Z10
	VFMADD231PS Z12, Z13, Z11
	DECQ        CX
	JNZ         loop512

done512:
	VZEROUPPER
	RET

// func fmaLoop256(n int)
// The same with AVX2: 12·8 lanes per iteration.
TEXT ·fmaLoop256(SB), NOSPLIT, $0-8
	MOVQ   n+0(FP), CX
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
	TESTQ  CX, CX
	JLE    done256

loop256:
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
	DECQ        CX
	JNZ         loop256

done256:
	VZEROUPPER
	RET

// func dpLoop512(n int)
// 16 independent VDPBF16PS chains on registers only (the matrix-vector dot
// kernel's 4×4 tile: sums Z0..Z15, sources Z16..Z19 and Z24..Z27, all
// zero). Only called where the CPU has AVX512_BF16.
TEXT ·dpLoop512(SB), NOSPLIT, $0-8
	MOVQ   n+0(FP), CX
	ZERO4(Z0, Z1, Z2, Z3)
	ZERO4(Z4, Z5, Z6, Z7)
	ZERO4(Z8, Z9, Z10, Z11)
	ZERO4(Z12, Z13, Z14, Z15)
	ZERO4(Z16, Z17, Z18, Z19)
	ZERO4(Z24, Z25, Z26, Z27)
	TESTQ  CX, CX
	JLE    dpdone

dploop:
	DP_0_24_16
	DP_1_25_16
	DP_2_26_16
	DP_3_27_16
	DP_4_24_17
	DP_5_25_17
	DP_6_26_17
	DP_7_27_17
	DP_8_24_18
	DP_9_25_18
	DP_10_26_18
	DP_11_27_18
	DP_12_24_19
	DP_13_25_19
	DP_14_26_19
	DP_15_27_19
	DECQ CX
	JNZ  dploop

dpdone:
	VZEROUPPER
	RET

// func readSum256(p *byte, n int) float32
// Sums n bytes (a multiple of 256) as float32 with eight accumulators, so
// that the loop is bound by loads, not by add latency.
TEXT ·readSum256(SB), NOSPLIT, $0-20
	MOVQ   p+0(FP), SI
	MOVQ   n+8(FP), CX
	SHRQ   $8, CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	TESTQ  CX, CX
	JZ     sum

loop:
	VADDPS (SI), Y0, Y0
	VADDPS 32(SI), Y1, Y1
	VADDPS 64(SI), Y2, Y2
	VADDPS 96(SI), Y3, Y3
	VADDPS 128(SI), Y4, Y4
	VADDPS 160(SI), Y5, Y5
	VADDPS 192(SI), Y6, Y6
	VADDPS 224(SI), Y7, Y7
	ADDQ   $256, SI
	DECQ   CX
	JNZ    loop

sum:
	VADDPS       Y1, Y0, Y0
	VADDPS       Y3, Y2, Y2
	VADDPS       Y5, Y4, Y4
	VADDPS       Y7, Y6, Y6
	VADDPS       Y2, Y0, Y0
	VADDPS       Y6, Y4, Y4
	VADDPS       Y4, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	VMOVSS       X0, ret+16(FP)
	VZEROUPPER
	RET
