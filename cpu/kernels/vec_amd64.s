//go:build amd64 && !purego

#include "textflag.h"

// Vector kernels. The AVX-512 versions handle any length, finishing with a
// masked partial vector; the AVX2 versions take a multiple of 8 elements and
// leave the rest to their Go wrappers (vec_amd64.go).

// Constants of exp: Cody–Waite range reduction x = n·ln2 + r, |r| ≤ ln2/2,
// then the Taylor polynomial of degree 7 for e^r (truncation error below
// 1e-8 on that interval; the Horner evaluation adds about one rounding).
DATA expconst<>+0(SB)/4, $0x3fb8aa3b  // log2(e)
DATA expconst<>+4(SB)/4, $0x3f318000  // ln2, high part (exact times n)
DATA expconst<>+8(SB)/4, $0xb95e8083  // ln2, low part
DATA expconst<>+12(SB)/4, $0xc2aeac50 // -87.33655: below, exp is not a normal float32: 0
DATA expconst<>+16(SB)/4, $0x42b17218 // 88.72284: above, exp overflows: +Inf
DATA expconst<>+20(SB)/4, $0x39500d01 // 1/7!
DATA expconst<>+24(SB)/4, $0x3ab60b61 // 1/6!
DATA expconst<>+28(SB)/4, $0x3c088889 // 1/5!
DATA expconst<>+32(SB)/4, $0x3d2aaaab // 1/4!
DATA expconst<>+36(SB)/4, $0x3e2aaaab // 1/3!
DATA expconst<>+40(SB)/4, $0x3f000000 // 1/2!
DATA expconst<>+44(SB)/4, $0x3f800000 // 1
DATA expconst<>+48(SB)/4, $0x42fe0000 // 127.0, the largest n used
DATA expconst<>+52(SB)/4, $0x0000007f // exponent bias
DATA expconst<>+56(SB)/4, $0x7f800000 // +Inf
DATA expconst<>+60(SB)/4, $0x00000000
GLOBL expconst<>(SB), RODATA|NOPTR, $64

#define LOG2E expconst<>+0(SB)
#define LN2HI expconst<>+4(SB)
#define LN2LO expconst<>+8(SB)
#define EXPLO expconst<>+12(SB)
#define EXPHI expconst<>+16(SB)
#define C7 expconst<>+20(SB)
#define C6 expconst<>+24(SB)
#define C5 expconst<>+28(SB)
#define C4 expconst<>+32(SB)
#define C3 expconst<>+36(SB)
#define C2 expconst<>+40(SB)
#define ONE expconst<>+44(SB)
#define NMAX expconst<>+48(SB)
#define BIAS expconst<>+52(SB)
#define PINF expconst<>+56(SB)

// ---------------------------------------------------------------------------
// AVX-512 exp. Constants live in Z16..Z30 (EXP512CONSTS); EXP512(x, t, n, p)
// leaves exp(x) in p, using t and n as scratch and K2, K3 as masks.

#define EXP512CONSTS \
	VBROADCASTSS LOG2E, Z16; \
	VBROADCASTSS LN2HI, Z17; \
	VBROADCASTSS LN2LO, Z18; \
	VBROADCASTSS EXPLO, Z19; \
	VBROADCASTSS EXPHI, Z20; \
	VBROADCASTSS C7, Z21; \
	VBROADCASTSS C6, Z22; \
	VBROADCASTSS C5, Z23; \
	VBROADCASTSS C4, Z24; \
	VBROADCASTSS C3, Z25; \
	VBROADCASTSS C2, Z26; \
	VBROADCASTSS ONE, Z27; \
	VBROADCASTSS NMAX, Z28; \
	VPBROADCASTD BIAS, Z29; \
	VBROADCASTSS PINF, Z30

#define EXP512(x, t, n, p) \
	VMAXPS       x, Z19, t; \
	VMINPS       t, Z20, t; \
	VMULPS       Z16, t, n; \
	VRNDSCALEPS  $0, n, n; \
	VMINPS       Z28, n, n; \
	VFNMADD231PS Z17, n, t; \
	VFNMADD231PS Z18, n, t; \
	VMOVAPS      Z21, p; \
	VFMADD213PS  Z22, t, p; \
	VFMADD213PS  Z23, t, p; \
	VFMADD213PS  Z24, t, p; \
	VFMADD213PS  Z25, t, p; \
	VFMADD213PS  Z26, t, p; \
	VFMADD213PS  Z27, t, p; \
	VFMADD213PS  Z27, t, p; \
	VCVTPS2DQ    n, n; \
	VPADDD       Z29, n, n; \
	VPSLLD       $23, n, n; \
	VMULPS       n, p, p; \
	VCMPPS       $1, Z19, x, K2; \
	VCMPPS       $14, Z20, x, K3; \
	VPXORD       p, p, K2, p; \
	VMOVAPS      Z30, K3, p

// Set K1 to the low CX bits (CX < 16). Clobbers AX.
#define TAILMASK \
	MOVQ  $1, AX; \
	SHLQ  CX, AX; \
	DECQ  AX; \
	KMOVW AX, K1

// Sum the 16 lanes of Z0 into X0. Clobbers Z1.
#define HSUM512 \
	VEXTRACTF64X4 $1, Z0, Y1; \
	VADDPS        Y1, Y0, Y0; \
	VEXTRACTF128  $1, Y0, X1; \
	VADDPS        X1, X0, X0; \
	VHADDPS       X0, X0, X0; \
	VHADDPS       X0, X0, X0

// func expSub512(dst, src *float32, n int, shift float32) float32
TEXT ·expSub512(SB), NOSPLIT, $0-36
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS shift+24(FP), Z15
	EXP512CONSTS
	VPXORD       Z0, Z0, Z0
	VPXORD       Z8, Z8, Z8
	CMPQ         CX, $32
	JLT          exp512one

exp512two:
	VMOVUPS (SI), Z1
	VMOVUPS 64(SI), Z9
	VSUBPS  Z15, Z1, Z1
	VSUBPS  Z15, Z9, Z9
	EXP512(Z1, Z2, Z3, Z4)
	EXP512(Z9, Z10, Z11, Z12)
	VMOVUPS Z4, (DI)
	VMOVUPS Z12, 64(DI)
	VADDPS  Z4, Z0, Z0
	VADDPS  Z12, Z8, Z8
	ADDQ    $128, SI
	ADDQ    $128, DI
	SUBQ    $32, CX
	CMPQ    CX, $32
	JGE     exp512two

exp512one:
	CMPQ CX, $16
	JLT  exp512tail
	VMOVUPS (SI), Z1
	VSUBPS  Z15, Z1, Z1
	EXP512(Z1, Z2, Z3, Z4)
	VMOVUPS Z4, (DI)
	VADDPS  Z4, Z0, Z0
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX

exp512tail:
	TESTQ CX, CX
	JZ    exp512sum
	TAILMASK
	VMOVUPS.Z (SI), K1, Z1
	VSUBPS    Z15, Z1, Z1
	EXP512(Z1, Z2, Z3, Z4)
	VMOVUPS   Z4, K1, (DI)
	VMOVAPS.Z Z4, K1, Z4
	VADDPS    Z4, Z0, Z0

exp512sum:
	VADDPS Z8, Z0, Z0
	HSUM512
	VMOVSS X0, ret+32(FP)
	VZEROUPPER
	RET

// func siluMul512(dst, gate, up *float32, n int)
// dst = gate · up / (1 + exp(−gate)).
TEXT ·siluMul512(SB), NOSPLIT, $0-32
	MOVQ   dst+0(FP), DI
	MOVQ   gate+8(FP), SI
	MOVQ   up+16(FP), DX
	MOVQ   n+24(FP), CX
	EXP512CONSTS
	VPXORD Z15, Z15, Z15

silu512loop:
	CMPQ    CX, $16
	JLT     silu512tail
	VMOVUPS (SI), Z0
	VSUBPS  Z0, Z15, Z1
	EXP512(Z1, Z2, Z3, Z4)
	VADDPS  Z27, Z4, Z4
	VDIVPS  Z4, Z0, Z0
	VMULPS  (DX), Z0, Z0
	VMOVUPS Z0, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DX
	ADDQ    $64, DI
	SUBQ    $16, CX
	JMP     silu512loop

silu512tail:
	TESTQ CX, CX
	JZ    silu512done
	TAILMASK
	VMOVUPS.Z (SI), K1, Z0
	VMOVUPS.Z (DX), K1, Z5
	VSUBPS    Z0, Z15, Z1
	EXP512(Z1, Z2, Z3, Z4)
	VADDPS    Z27, Z4, Z4
	VDIVPS    Z4, Z0, Z0
	VMULPS    Z5, Z0, Z0
	VMOVUPS   Z0, K1, (DI)

silu512done:
	VZEROUPPER
	RET

// func dot512(x, y *float32, n int) float32
TEXT ·dot512(SB), NOSPLIT, $0-28
	MOVQ   x+0(FP), SI
	MOVQ   y+8(FP), DI
	MOVQ   n+16(FP), CX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	CMPQ   CX, $64
	JLT    dot512one

dot512four:
	VMOVUPS     (SI), Z4
	VMOVUPS     64(SI), Z5
	VMOVUPS     128(SI), Z6
	VMOVUPS     192(SI), Z7
	VFMADD231PS (DI), Z4, Z0
	VFMADD231PS 64(DI), Z5, Z1
	VFMADD231PS 128(DI), Z6, Z2
	VFMADD231PS 192(DI), Z7, Z3
	ADDQ        $256, SI
	ADDQ        $256, DI
	SUBQ        $64, CX
	CMPQ        CX, $64
	JGE         dot512four

dot512one:
	CMPQ        CX, $16
	JLT         dot512tail
	VMOVUPS     (SI), Z4
	VFMADD231PS (DI), Z4, Z0
	ADDQ        $64, SI
	ADDQ        $64, DI
	SUBQ        $16, CX
	JMP         dot512one

dot512tail:
	TESTQ CX, CX
	JZ    dot512sum
	TAILMASK
	VMOVUPS.Z   (SI), K1, Z4
	VMOVUPS.Z   (DI), K1, Z5
	VFMADD231PS Z5, Z4, Z1

dot512sum:
	VADDPS Z1, Z0, Z0
	VADDPS Z3, Z2, Z2
	VADDPS Z2, Z0, Z0
	HSUM512
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func axpy512(alpha float32, x, y *float32, n int)
TEXT ·axpy512(SB), NOSPLIT, $0-32
	VBROADCASTSS alpha+0(FP), Z0
	MOVQ         x+8(FP), SI
	MOVQ         y+16(FP), DI
	MOVQ         n+24(FP), CX
	CMPQ         CX, $32
	JLT          axpy512one

axpy512two:
	VMOVUPS     (DI), Z1
	VMOVUPS     64(DI), Z2
	VFMADD231PS (SI), Z0, Z1
	VFMADD231PS 64(SI), Z0, Z2
	VMOVUPS     Z1, (DI)
	VMOVUPS     Z2, 64(DI)
	ADDQ        $128, SI
	ADDQ        $128, DI
	SUBQ        $32, CX
	CMPQ        CX, $32
	JGE         axpy512two

axpy512one:
	CMPQ        CX, $16
	JLT         axpy512tail
	VMOVUPS     (DI), Z1
	VFMADD231PS (SI), Z0, Z1
	VMOVUPS     Z1, (DI)
	ADDQ        $64, SI
	ADDQ        $64, DI
	SUBQ        $16, CX

axpy512tail:
	TESTQ CX, CX
	JZ    axpy512done
	TAILMASK
	VMOVUPS.Z   (DI), K1, Z1
	VMOVUPS.Z   (SI), K1, Z2
	VFMADD231PS Z2, Z0, Z1
	VMOVUPS     Z1, K1, (DI)

axpy512done:
	VZEROUPPER
	RET

// func scale512(alpha float32, x *float32, n int)
TEXT ·scale512(SB), NOSPLIT, $0-24
	VBROADCASTSS alpha+0(FP), Z0
	MOVQ         x+8(FP), DI
	MOVQ         n+16(FP), CX

scale512loop:
	CMPQ    CX, $16
	JLT     scale512tail
	VMULPS  (DI), Z0, Z1
	VMOVUPS Z1, (DI)
	ADDQ    $64, DI
	SUBQ    $16, CX
	JMP     scale512loop

scale512tail:
	TESTQ CX, CX
	JZ    scale512done
	TAILMASK
	VMOVUPS.Z (DI), K1, Z1
	VMULPS    Z1, Z0, Z1
	VMOVUPS   Z1, K1, (DI)

scale512done:
	VZEROUPPER
	RET

// func mulScale512(dst, x, w *float32, n int, s float32)
// dst = x · s · w.
TEXT ·mulScale512(SB), NOSPLIT, $0-36
	MOVQ         dst+0(FP), DI
	MOVQ         x+8(FP), SI
	MOVQ         w+16(FP), DX
	MOVQ         n+24(FP), CX
	VBROADCASTSS s+32(FP), Z0

mul512loop:
	CMPQ    CX, $16
	JLT     mul512tail
	VMULPS  (SI), Z0, Z1
	VMULPS  (DX), Z1, Z1
	VMOVUPS Z1, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DX
	ADDQ    $64, DI
	SUBQ    $16, CX
	JMP     mul512loop

mul512tail:
	TESTQ CX, CX
	JZ    mul512done
	TAILMASK
	VMOVUPS.Z (SI), K1, Z1
	VMOVUPS.Z (DX), K1, Z2
	VMULPS    Z1, Z0, Z1
	VMULPS    Z2, Z1, Z1
	VMOVUPS   Z1, K1, (DI)

mul512done:
	VZEROUPPER
	RET

// func max512(x *float32, n int) float32
// n ≥ 1. Lanes start at x[0], so a short x needs no identity element.
TEXT ·max512(SB), NOSPLIT, $0-20
	MOVQ         x+0(FP), SI
	MOVQ         n+8(FP), CX
	VBROADCASTSS (SI), Z0
	VMOVAPS      Z0, Z1

max512loop:
	CMPQ    CX, $32
	JLT     max512one
	VMAXPS  (SI), Z0, Z0
	VMAXPS  64(SI), Z1, Z1
	ADDQ    $128, SI
	SUBQ    $32, CX
	JMP     max512loop

max512one:
	CMPQ   CX, $16
	JLT    max512tail
	VMAXPS (SI), Z0, Z0
	ADDQ   $64, SI
	SUBQ   $16, CX

max512tail:
	TESTQ CX, CX
	JZ    max512sum
	TAILMASK
	VMAXPS (SI), Z1, K1, Z1

max512sum:
	VMAXPS        Z1, Z0, Z0
	VEXTRACTF64X4 $1, Z0, Y1
	VMAXPS        Y1, Y0, Y0
	VEXTRACTF128  $1, Y0, X1
	VMAXPS        X1, X0, X0
	VPERMILPS     $0x4e, X0, X1
	VMAXPS        X1, X0, X0
	VPERMILPS     $0xb1, X0, X1
	VMAXPS        X1, X0, X0
	VMOVSS        X0, ret+16(FP)
	VZEROUPPER
	RET

// func bf16ToF32x512(dst *float32, src *uint16, n int)
TEXT ·bf16ToF32x512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

widen512loop:
	CMPQ      CX, $32
	JLT       widen512one
	VPMOVZXWD (SI), Z0
	VPMOVZXWD 32(SI), Z1
	VPSLLD    $16, Z0, Z0
	VPSLLD    $16, Z1, Z1
	VMOVUPS   Z0, (DI)
	VMOVUPS   Z1, 64(DI)
	ADDQ      $64, SI
	ADDQ      $128, DI
	SUBQ      $32, CX
	JMP       widen512loop

widen512one:
	CMPQ      CX, $16
	JLT       widen512tail
	VPMOVZXWD (SI), Z0
	VPSLLD    $16, Z0, Z0
	VMOVUPS   Z0, (DI)
	ADDQ      $32, SI
	ADDQ      $64, DI
	SUBQ      $16, CX

widen512tail:
	TESTQ CX, CX
	JZ    widen512done
	TAILMASK
	VPMOVZXWD.Z (SI), K1, Z0
	VPSLLD      $16, Z0, Z0
	VMOVUPS     Z0, K1, (DI)

widen512done:
	VZEROUPPER
	RET

// Round the float32 bits in z to BF16 (nearest even; NaN stays NaN, made
// quiet) in the low halves of its lanes. Z28 = 0x7fff, Z29 = 1,
// Z30 = 0x7fffffff, Z31 = 0x7f800000, Z27 = 0x40. Clobbers t, u, K2.
#define ROUNDBF16_512(z, t, u) \
	VPANDD   z, Z30, t; \
	VPCMPGTD Z31, t, K2; \
	VPSRLD   $16, z, t; \
	VPANDD   Z29, t, u; \
	VPADDD   Z28, u, u; \
	VPADDD   u, z, z; \
	VPSRLD   $16, z, z; \
	VPORD    Z27, t, K2, z

#define BF16CONSTS512 \
	MOVL         $0x7fff, AX; \
	VPBROADCASTD AX, Z28; \
	MOVL         $1, AX; \
	VPBROADCASTD AX, Z29; \
	MOVL         $0x7fffffff, AX; \
	VPBROADCASTD AX, Z30; \
	MOVL         $0x7f800000, AX; \
	VPBROADCASTD AX, Z31; \
	MOVL         $0x40, AX; \
	VPBROADCASTD AX, Z27

// func f32ToBF16x512(dst *uint16, src *float32, n int)
TEXT ·f32ToBF16x512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	BF16CONSTS512

narrow512loop:
	CMPQ      CX, $16
	JLT       narrow512tail
	VMOVDQU32 (SI), Z0
	ROUNDBF16_512(Z0, Z1, Z2)
	VPMOVDW   Z0, (DI)
	ADDQ      $64, SI
	ADDQ      $32, DI
	SUBQ      $16, CX
	JMP       narrow512loop

narrow512tail:
	TESTQ CX, CX
	JZ    narrow512done
	TAILMASK
	VMOVDQU32.Z (SI), K1, Z0
	ROUNDBF16_512(Z0, Z1, Z2)
	VPMOVDW     Z0, K1, (DI)

narrow512done:
	VZEROUPPER
	RET

// ---------------------------------------------------------------------------
// AVX2. n is a multiple of 8 (of 16 where noted) in every function below.

// Constants of EXP256 in Y8..Y14; the rest are broadcast from memory.
#define EXP256CONSTS \
	VBROADCASTSS LOG2E, Y8; \
	VBROADCASTSS LN2HI, Y9; \
	VBROADCASTSS LN2LO, Y10; \
	VBROADCASTSS EXPLO, Y11; \
	VBROADCASTSS EXPHI, Y12; \
	VBROADCASTSS ONE, Y13; \
	VBROADCASTSS NMAX, Y14

// p = exp(x); t, n, q are scratch.
#define EXP256(x, t, n, p, q) \
	VMAXPS       x, Y11, t; \
	VMINPS       t, Y12, t; \
	VMULPS       Y8, t, n; \
	VROUNDPS     $0, n, n; \
	VMINPS       Y14, n, n; \
	VFNMADD231PS Y9, n, t; \
	VFNMADD231PS Y10, n, t; \
	VBROADCASTSS C7, p; \
	VBROADCASTSS C6, q; \
	VFMADD213PS  q, t, p; \
	VBROADCASTSS C5, q; \
	VFMADD213PS  q, t, p; \
	VBROADCASTSS C4, q; \
	VFMADD213PS  q, t, p; \
	VBROADCASTSS C3, q; \
	VFMADD213PS  q, t, p; \
	VBROADCASTSS C2, q; \
	VFMADD213PS  q, t, p; \
	VFMADD213PS  Y13, t, p; \
	VFMADD213PS  Y13, t, p; \
	VCVTPS2DQ    n, n; \
	VPBROADCASTD BIAS, q; \
	VPADDD       q, n, n; \
	VPSLLD       $23, n, n; \
	VMULPS       n, p, p; \
	VCMPPS       $1, Y11, x, q; \
	VANDNPS      p, q, p; \
	VCMPPS       $14, Y12, x, q; \
	VBROADCASTSS PINF, n; \
	VBLENDVPS    q, n, p, p

// Sum the 8 lanes of Y0 into X0. Clobbers Y1.
#define HSUM256 \
	VEXTRACTF128 $1, Y0, X1; \
	VADDPS       X1, X0, X0; \
	VHADDPS      X0, X0, X0; \
	VHADDPS      X0, X0, X0

// func expSub256(dst, src *float32, n int, shift float32) float32
TEXT ·expSub256(SB), NOSPLIT, $0-36
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS shift+24(FP), Y15
	EXP256CONSTS
	VXORPS       Y0, Y0, Y0
	SHRQ         $3, CX
	JZ           exp256sum

exp256loop:
	VMOVUPS (SI), Y1
	VSUBPS  Y15, Y1, Y1
	EXP256(Y1, Y2, Y3, Y4, Y5)
	VMOVUPS Y4, (DI)
	VADDPS  Y4, Y0, Y0
	ADDQ    $32, SI
	ADDQ    $32, DI
	DECQ    CX
	JNZ     exp256loop

exp256sum:
	HSUM256
	VMOVSS X0, ret+32(FP)
	VZEROUPPER
	RET

// func siluMul256(dst, gate, up *float32, n int)
TEXT ·siluMul256(SB), NOSPLIT, $0-32
	MOVQ   dst+0(FP), DI
	MOVQ   gate+8(FP), SI
	MOVQ   up+16(FP), DX
	MOVQ   n+24(FP), CX
	EXP256CONSTS
	VXORPS Y15, Y15, Y15
	SHRQ   $3, CX
	JZ     silu256done

silu256loop:
	VMOVUPS (SI), Y0
	VSUBPS  Y0, Y15, Y1
	EXP256(Y1, Y2, Y3, Y4, Y5)
	VADDPS  Y13, Y4, Y4
	VDIVPS  Y4, Y0, Y0
	VMULPS  (DX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DX
	ADDQ    $32, DI
	DECQ    CX
	JNZ     silu256loop

silu256done:
	VZEROUPPER
	RET

// func dot256(x, y *float32, n int) float32
TEXT ·dot256(SB), NOSPLIT, $0-28
	MOVQ   x+0(FP), SI
	MOVQ   y+8(FP), DI
	MOVQ   n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	CMPQ   CX, $32
	JLT    dot256one

dot256four:
	VMOVUPS     (SI), Y4
	VMOVUPS     32(SI), Y5
	VMOVUPS     64(SI), Y6
	VMOVUPS     96(SI), Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ        $128, SI
	ADDQ        $128, DI
	SUBQ        $32, CX
	CMPQ        CX, $32
	JGE         dot256four

dot256one:
	TESTQ       CX, CX
	JZ          dot256sum
	VMOVUPS     (SI), Y4
	VFMADD231PS (DI), Y4, Y0
	ADDQ        $32, SI
	ADDQ        $32, DI
	SUBQ        $8, CX
	JMP         dot256one

dot256sum:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	HSUM256
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func axpy256(alpha float32, x, y *float32, n int)
TEXT ·axpy256(SB), NOSPLIT, $0-32
	VBROADCASTSS alpha+0(FP), Y0
	MOVQ         x+8(FP), SI
	MOVQ         y+16(FP), DI
	MOVQ         n+24(FP), CX
	SHRQ         $3, CX
	JZ           axpy256done

axpy256loop:
	VMOVUPS     (DI), Y1
	VFMADD231PS (SI), Y0, Y1
	VMOVUPS     Y1, (DI)
	ADDQ        $32, SI
	ADDQ        $32, DI
	DECQ        CX
	JNZ         axpy256loop

axpy256done:
	VZEROUPPER
	RET

// func scale256(alpha float32, x *float32, n int)
TEXT ·scale256(SB), NOSPLIT, $0-24
	VBROADCASTSS alpha+0(FP), Y0
	MOVQ         x+8(FP), DI
	MOVQ         n+16(FP), CX
	SHRQ         $3, CX
	JZ           scale256done

scale256loop:
	VMULPS  (DI), Y0, Y1
	VMOVUPS Y1, (DI)
	ADDQ    $32, DI
	DECQ    CX
	JNZ     scale256loop

scale256done:
	VZEROUPPER
	RET

// func mulScale256(dst, x, w *float32, n int, s float32)
TEXT ·mulScale256(SB), NOSPLIT, $0-36
	MOVQ         dst+0(FP), DI
	MOVQ         x+8(FP), SI
	MOVQ         w+16(FP), DX
	MOVQ         n+24(FP), CX
	VBROADCASTSS s+32(FP), Y0
	SHRQ         $3, CX
	JZ           mul256done

mul256loop:
	VMULPS  (SI), Y0, Y1
	VMULPS  (DX), Y1, Y1
	VMOVUPS Y1, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DX
	ADDQ    $32, DI
	DECQ    CX
	JNZ     mul256loop

mul256done:
	VZEROUPPER
	RET

// func max256(x *float32, n int) float32
TEXT ·max256(SB), NOSPLIT, $0-20
	MOVQ    x+0(FP), SI
	MOVQ    n+8(FP), CX
	VMOVUPS (SI), Y0
	ADDQ    $32, SI
	SUBQ    $8, CX
	JZ      max256sum

max256loop:
	VMAXPS (SI), Y0, Y0
	ADDQ   $32, SI
	SUBQ   $8, CX
	JNZ    max256loop

max256sum:
	VEXTRACTF128 $1, Y0, X1
	VMAXPS       X1, X0, X0
	VPERMILPS    $0x4e, X0, X1
	VMAXPS       X1, X0, X0
	VPERMILPS    $0xb1, X0, X1
	VMAXPS       X1, X0, X0
	VMOVSS       X0, ret+16(FP)
	VZEROUPPER
	RET

// func bf16ToF32x256(dst *float32, src *uint16, n int)
TEXT ·bf16ToF32x256(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ   widen256done

widen256loop:
	VPMOVZXWD (SI), Y0
	VPSLLD    $16, Y0, Y0
	VMOVUPS   Y0, (DI)
	ADDQ      $16, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       widen256loop

widen256done:
	VZEROUPPER
	RET

// func f32ToBF16x256(dst *uint16, src *float32, n int)
// Rounding as in ROUNDBF16_512, with Y12 = 0x7fff, Y13 = 1,
// Y14 = 0x7fffffff, Y15 = 0x7f800000, Y11 = 0x40.
TEXT ·f32ToBF16x256(SB), NOSPLIT, $0-24
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	MOVL         $0x7fff, AX
	MOVQ         AX, X12
	VPBROADCASTD X12, Y12
	MOVL         $1, AX
	MOVQ         AX, X13
	VPBROADCASTD X13, Y13
	MOVL         $0x7fffffff, AX
	MOVQ         AX, X14
	VPBROADCASTD X14, Y14
	MOVL         $0x7f800000, AX
	MOVQ         AX, X15
	VPBROADCASTD X15, Y15
	MOVL         $0x40, AX
	MOVQ         AX, X11
	VPBROADCASTD X11, Y11
	SHRQ         $3, CX
	JZ           narrow256done

narrow256loop:
	VMOVDQU      (SI), Y0
	VPAND        Y0, Y14, Y1
	VPCMPGTD     Y15, Y1, Y1
	VPSRLD       $16, Y0, Y2
	VPAND        Y13, Y2, Y3
	VPADDD       Y12, Y3, Y3
	VPADDD       Y3, Y0, Y0
	VPSRLD       $16, Y0, Y0
	VPOR         Y11, Y2, Y2
	VPBLENDVB    Y1, Y2, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPACKUSDW    X1, X0, X0
	VMOVDQU      X0, (DI)
	ADDQ         $32, SI
	ADDQ         $16, DI
	DECQ         CX
	JNZ          narrow256loop

narrow256done:
	VZEROUPPER
	RET
