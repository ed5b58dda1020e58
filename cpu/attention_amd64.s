//go:build amd64 && !purego

#include "textflag.h"
#include "dpbf16_amd64.h"
#include "zero_amd64.h"

// AVX-512 kernels of paged flash attention (see attention_asm.go). Keys
// and values are read through a table of the byte offsets of their rows:
// where they lie in an F32 cache, or in a widened copy of a BF16 cache's
// tile.
//
// Tile kernels (flashQK512, flashSoftmax512, flashPV512): the queries of a
// task are held transposed, hd × mp (mp a multiple of 16: one lane per
// query row), and so are its scores, nk × mp, and its output, hd × mp.
// Each product is a register tile of 8 rows (keys, or output dimensions) by
// 48 query columns (three vectors), with tiles of 8 by 16 for the last
// columns; the cache rows are broadcast one element at a time, so nothing
// from the cache is packed.
//
// Decode kernels (flashDecQK512, flashDecPV512): four query rows in row
// layout, vectorised along the head dimension.

// exp2 for x ≤ 0: n = round(x), r = x − n in [−½, ½], 2^r by its Taylor
// polynomial in r·ln2 of degree 7 (truncation below 1e-8), scaled by 2^n
// (VSCALEFPS). x is first clamped to −126, so exp2 is never below the
// smallest normal float32 (1.2e-38, which counts as nothing next to the
// row maximum's 1).
DATA flashconst<>+0(SB)/4, $0x3f317218  // ln2
DATA flashconst<>+4(SB)/4, $0x3e75fdf0  // ln2²/2!
DATA flashconst<>+8(SB)/4, $0x3d635847  // ln2³/3!
DATA flashconst<>+12(SB)/4, $0x3c1d955b // ln2⁴/4!
DATA flashconst<>+16(SB)/4, $0x3aaec3ff // ln2⁵/5!
DATA flashconst<>+20(SB)/4, $0x39218489 // ln2⁶/6!
DATA flashconst<>+24(SB)/4, $0x377fe5fe // ln2⁷/7!
DATA flashconst<>+28(SB)/4, $0x3f800000 // 1
DATA flashconst<>+32(SB)/4, $0xc2fc0000 // −126
DATA flashconst<>+36(SB)/4, $0xf149f2ca // −1e30: the maximum of a row that has seen no key
DATA flashconst<>+40(SB)/4, $0
DATA flashconst<>+44(SB)/4, $0
DATA flashconst<>+48(SB)/4, $0
DATA flashconst<>+52(SB)/4, $0
DATA flashconst<>+56(SB)/4, $0
DATA flashconst<>+60(SB)/4, $0
// 0, 1, ..., 15: lane numbers.
DATA flashconst<>+64(SB)/8, $0x0000000100000000
DATA flashconst<>+72(SB)/8, $0x0000000300000002
DATA flashconst<>+80(SB)/8, $0x0000000500000004
DATA flashconst<>+88(SB)/8, $0x0000000700000006
DATA flashconst<>+96(SB)/8, $0x0000000900000008
DATA flashconst<>+104(SB)/8, $0x0000000b0000000a
DATA flashconst<>+112(SB)/8, $0x0000000d0000000c
DATA flashconst<>+120(SB)/8, $0x0000000f0000000e
GLOBL flashconst<>(SB), RODATA|NOPTR, $128

// EXP2CONSTS loads the constants of EXP2 into Z16..Z24.
#define EXP2CONSTS \
	VBROADCASTSS flashconst<>+0(SB), Z16; \
	VBROADCASTSS flashconst<>+4(SB), Z17; \
	VBROADCASTSS flashconst<>+8(SB), Z18; \
	VBROADCASTSS flashconst<>+12(SB), Z19; \
	VBROADCASTSS flashconst<>+16(SB), Z20; \
	VBROADCASTSS flashconst<>+20(SB), Z21; \
	VBROADCASTSS flashconst<>+24(SB), Z22; \
	VBROADCASTSS flashconst<>+28(SB), Z23; \
	VBROADCASTSS flashconst<>+32(SB), Z24

// EXP2(x, n, p) leaves 2^x in p for x ≤ 0 (x is clobbered, n is scratch).
#define EXP2(x, n, p) \
	VMAXPS       Z24, x, x; \
	VRNDSCALEPS  $0, x, n; \
	VSUBPS       n, x, x; \
	VMOVAPS      Z22, p; \
	VFMADD213PS  Z21, x, p; \
	VFMADD213PS  Z20, x, p; \
	VFMADD213PS  Z19, x, p; \
	VFMADD213PS  Z18, x, p; \
	VFMADD213PS  Z17, x, p; \
	VFMADD213PS  Z16, x, p; \
	VFMADD213PS  Z23, x, p; \
	VSCALEFPS    n, p, p

// QKROW(o, ptr, a, b, c) adds the element at byte o + SI of the key row at
// ptr, times the three query vectors Z24..Z26, into a, b, c.
#define QKROW(o, ptr, a, b, c) \
	VBROADCASTSS o(ptr)(SI*1), Z27; \
	VFMADD231PS  Z24, Z27, a; \
	VFMADD231PS  Z25, Z27, b; \
	VFMADD231PS  Z26, Z27, c

// QKSTEP3(o) is one step p of the 8-key × 48-column tile: the next row of
// the queries (DI, then DI += stride) against element p of each key row.
#define QKSTEP3(o) \
	VMOVUPS (DI), Z24; \
	VMOVUPS 64(DI), Z25; \
	VMOVUPS 128(DI), Z26; \
	QKROW(o, AX, Z0, Z1, Z2); \
	QKROW(o, BX, Z3, Z4, Z5); \
	QKROW(o, CX, Z6, Z7, Z8); \
	QKROW(o, DX, Z9, Z10, Z11); \
	QKROW(o, R8, Z12, Z13, Z14); \
	QKROW(o, R9, Z15, Z16, Z17); \
	QKROW(o, R10, Z18, Z19, Z20); \
	QKROW(o, R11, Z21, Z22, Z23); \
	ADDQ R13, DI

// QKSTEP1(o) is QKSTEP3 for an 8-key × 16-column tile.
#define QKSTEP1(o) \
	VMOVUPS (DI), Z24; \
	VFMADD231PS.BCST o(AX)(SI*1), Z24, Z0; \
	VFMADD231PS.BCST o(BX)(SI*1), Z24, Z1; \
	VFMADD231PS.BCST o(CX)(SI*1), Z24, Z2; \
	VFMADD231PS.BCST o(DX)(SI*1), Z24, Z3; \
	VFMADD231PS.BCST o(R8)(SI*1), Z24, Z4; \
	VFMADD231PS.BCST o(R9)(SI*1), Z24, Z5; \
	VFMADD231PS.BCST o(R10)(SI*1), Z24, Z6; \
	VFMADD231PS.BCST o(R11)(SI*1), Z24, Z7; \
	ADDQ R13, DI

// Prefetches, one per step of a 16-step block, which reads one cache line
// (at byte SI) of each of its 8 key rows: PFK(o) prefetches that line of
// key row j+8+o/8 (the next group), PFV(o) that of value row j+o/8 (for
// flashPV512, into L2). 16(SP) holds &offs[j]. Clobbers R12.
#define PFK(o) \
	MOVQ       16(SP), R12; \
	MOVQ       (64+o)(R12), R12; \
	ADDQ       k+24(FP), R12; \
	PREFETCHT0 (R12)(SI*1)

#define PFV(o) \
	MOVQ       16(SP), R12; \
	MOVQ       o(R12), R12; \
	ADDQ       v+32(FP), R12; \
	PREFETCHT1 (R12)(SI*1)

// QKBLOCK(step) runs 16 steps (one cache line of every key row), with the
// prefetches of that line of the next group's keys and this group's
// values.
#define QKBLOCK(step) \
	step(0); PFK(0); step(4); PFK(8); step(8); PFK(16); step(12); PFK(24); \
	step(16); PFK(32); step(20); PFK(40); step(24); PFK(48); step(28); PFK(56); \
	step(32); PFV(0); step(36); PFV(8); step(40); PFV(16); step(44); PFV(24); \
	step(48); PFV(32); step(52); PFV(40); step(56); PFV(48); step(60); PFV(56); \
	ADDQ $64, SI

// QKPTRS loads the eight key row pointers of keys j..j+7 (j in 8(SP)) into
// AX, BX, CX, DX, R8..R11 and stores &offs[j] in 16(SP). Clobbers SI, DI.
#define QKPTRS \
	MOVQ offs+40(FP), DI; \
	MOVQ 8(SP), SI; \
	LEAQ (DI)(SI*8), DI; \
	MOVQ DI, 16(SP); \
	MOVQ k+24(FP), SI; \
	MOVQ 0(DI), AX; \
	ADDQ SI, AX; \
	MOVQ 8(DI), BX; \
	ADDQ SI, BX; \
	MOVQ 16(DI), CX; \
	ADDQ SI, CX; \
	MOVQ 24(DI), DX; \
	ADDQ SI, DX; \
	MOVQ 32(DI), R8; \
	ADDQ SI, R8; \
	MOVQ 40(DI), R9; \
	ADDQ SI, R9; \
	MOVQ 48(DI), R10; \
	ADDQ SI, R10; \
	MOVQ 56(DI), R11; \
	ADDQ SI, R11

// QKOUT sets DI to the scores of key j (8(SP)), column c0 (0(SP), bytes).
#define QKOUT \
	MOVQ  8(SP), DI; \
	IMULQ R13, DI; \
	ADDQ  st+0(FP), DI; \
	ADDQ  0(SP), DI

// QKROWB is QKROW for BF16: the pair of elements at byte o + SI of the
// key row at ptr, broadcast, dot the three vectors of query pairs
// Z24..Z26 (VDPBF16PS; da, db, dc name its accumulators' macros).
#define QKROWB(o, ptr, da, db, dc) \
	VBROADCASTSS o(ptr)(SI*1), Z27; \
	da; \
	db; \
	dc

// QKSTEP3B(o) is QKSTEP3 for a BF16 cache and BF16 queries: one step takes
// a pair of elements of each key row (4 bytes, as QKSTEP3's one float32)
// against the next row of query pairs.
#define QKSTEP3B(o) \
	VMOVUPS (DI), Z24; \
	VMOVUPS 64(DI), Z25; \
	VMOVUPS 128(DI), Z26; \
	QKROWB(o, AX, DP_0_24_27, DP_1_25_27, DP_2_26_27); \
	QKROWB(o, BX, DP_3_24_27, DP_4_25_27, DP_5_26_27); \
	QKROWB(o, CX, DP_6_24_27, DP_7_25_27, DP_8_26_27); \
	QKROWB(o, DX, DP_9_24_27, DP_10_25_27, DP_11_26_27); \
	QKROWB(o, R8, DP_12_24_27, DP_13_25_27, DP_14_26_27); \
	QKROWB(o, R9, DP_15_24_27, DP_16_25_27, DP_17_26_27); \
	QKROWB(o, R10, DP_18_24_27, DP_19_25_27, DP_20_26_27); \
	QKROWB(o, R11, DP_21_24_27, DP_22_25_27, DP_23_26_27); \
	ADDQ R13, DI

// QKSTEP1B(o) is QKSTEP1 for BF16 (one vector of query pairs).
#define QKSTEP1B(o) \
	VMOVUPS      (DI), Z24; \
	VBROADCASTSS o(AX)(SI*1), Z27; \
	DP_0_24_27; \
	VBROADCASTSS o(BX)(SI*1), Z27; \
	DP_1_24_27; \
	VBROADCASTSS o(CX)(SI*1), Z27; \
	DP_2_24_27; \
	VBROADCASTSS o(DX)(SI*1), Z27; \
	DP_3_24_27; \
	VBROADCASTSS o(R8)(SI*1), Z27; \
	DP_4_24_27; \
	VBROADCASTSS o(R9)(SI*1), Z27; \
	DP_5_24_27; \
	VBROADCASTSS o(R10)(SI*1), Z27; \
	DP_6_24_27; \
	VBROADCASTSS o(R11)(SI*1), Z27; \
	DP_7_24_27; \
	ADDQ R13, DI

// QKSCALE3 and QKSCALE1 multiply the sums of a tile by the scale (the BF16
// kernel's queries are not scaled: see attention_asm.go); NOSCALE leaves
// them.
#define QKSCALE1 \
	VBROADCASTSS scale+72(FP), Z28; \
	VMULPS       Z28, Z0, Z0; \
	VMULPS       Z28, Z1, Z1; \
	VMULPS       Z28, Z2, Z2; \
	VMULPS       Z28, Z3, Z3; \
	VMULPS       Z28, Z4, Z4; \
	VMULPS       Z28, Z5, Z5; \
	VMULPS       Z28, Z6, Z6; \
	VMULPS       Z28, Z7, Z7

#define QKSCALE3 \
	QKSCALE1; \
	VMULPS Z28, Z8, Z8; \
	VMULPS Z28, Z9, Z9; \
	VMULPS Z28, Z10, Z10; \
	VMULPS Z28, Z11, Z11; \
	VMULPS Z28, Z12, Z12; \
	VMULPS Z28, Z13, Z13; \
	VMULPS Z28, Z14, Z14; \
	VMULPS Z28, Z15, Z15; \
	VMULPS Z28, Z16, Z16; \
	VMULPS Z28, Z17, Z17; \
	VMULPS Z28, Z18, Z18; \
	VMULPS Z28, Z19, Z19; \
	VMULPS Z28, Z20, Z20; \
	VMULPS Z28, Z21, Z21; \
	VMULPS Z28, Z22, Z22; \
	VMULPS Z28, Z23, Z23

#define NOSCALE

// QKKERNEL is the body of flashQK512 and flashQK512BF16: esh is the shift
// from elements of a key row to its bytes, step3 and step1 the steps of
// the 48- and 16-column tiles, epi3 and epi1 what is done to a tile's sums
// before they are stored; the rest are the labels.
#define QKKERNEL(esh, step3, step1, epi3, epi1, cols3, keys3, p3, cols1, keys1, p1, done) \
	MOVQ mp+16(FP), R13; \
	SHLQ $2, R13; \
	MOVQ hd+56(FP), R12; \
	SHLQ $esh, R12; \
	MOVQ R12, 24(SP); \
	MOVQ $0, 0(SP); \
cols3:; \
	MOVQ R13, DI; \
	SUBQ 0(SP), DI; \
	CMPQ DI, $192; \
	JLT cols1; \
	MOVQ $0, 8(SP); \
keys3:; \
	QKPTRS; \
	ZERO24; \
	MOVQ   qt+8(FP), DI; \
	ADDQ   0(SP), DI; \
	XORQ   SI, SI; \
p3:; \
	QKBLOCK(step3); \
	CMPQ SI, 24(SP); \
	JLT p3; \
	epi3; \
	VMAXPS  Z3, Z0, Z24; \
	VMAXPS  Z4, Z1, Z25; \
	VMAXPS  Z5, Z2, Z26; \
	VMAXPS  Z6, Z24, Z24; \
	VMAXPS  Z7, Z25, Z25; \
	VMAXPS  Z8, Z26, Z26; \
	VMAXPS  Z9, Z24, Z24; \
	VMAXPS  Z10, Z25, Z25; \
	VMAXPS  Z11, Z26, Z26; \
	VMAXPS  Z12, Z24, Z24; \
	VMAXPS  Z13, Z25, Z25; \
	VMAXPS  Z14, Z26, Z26; \
	VMAXPS  Z15, Z24, Z24; \
	VMAXPS  Z16, Z25, Z25; \
	VMAXPS  Z17, Z26, Z26; \
	VMAXPS  Z18, Z24, Z24; \
	VMAXPS  Z19, Z25, Z25; \
	VMAXPS  Z20, Z26, Z26; \
	VMAXPS  Z21, Z24, Z24; \
	VMAXPS  Z22, Z25, Z25; \
	VMAXPS  Z23, Z26, Z26; \
	MOVQ    cmax+64(FP), DI; \
	ADDQ    0(SP), DI; \
	VMAXPS  (DI), Z24, Z24; \
	VMAXPS  64(DI), Z25, Z25; \
	VMAXPS  128(DI), Z26, Z26; \
	VMOVUPS Z24, (DI); \
	VMOVUPS Z25, 64(DI); \
	VMOVUPS Z26, 128(DI); \
	QKOUT; \
	VMOVUPS Z0, (DI); \
	VMOVUPS Z1, 64(DI); \
	VMOVUPS Z2, 128(DI); \
	ADDQ    R13, DI; \
	VMOVUPS Z3, (DI); \
	VMOVUPS Z4, 64(DI); \
	VMOVUPS Z5, 128(DI); \
	ADDQ    R13, DI; \
	VMOVUPS Z6, (DI); \
	VMOVUPS Z7, 64(DI); \
	VMOVUPS Z8, 128(DI); \
	ADDQ    R13, DI; \
	VMOVUPS Z9, (DI); \
	VMOVUPS Z10, 64(DI); \
	VMOVUPS Z11, 128(DI); \
	ADDQ    R13, DI; \
	VMOVUPS Z12, (DI); \
	VMOVUPS Z13, 64(DI); \
	VMOVUPS Z14, 128(DI); \
	ADDQ    R13, DI; \
	VMOVUPS Z15, (DI); \
	VMOVUPS Z16, 64(DI); \
	VMOVUPS Z17, 128(DI); \
	ADDQ    R13, DI; \
	VMOVUPS Z18, (DI); \
	VMOVUPS Z19, 64(DI); \
	VMOVUPS Z20, 128(DI); \
	ADDQ    R13, DI; \
	VMOVUPS Z21, (DI); \
	VMOVUPS Z22, 64(DI); \
	VMOVUPS Z23, 128(DI); \
	MOVQ 8(SP), DI; \
	ADDQ $8, DI; \
	MOVQ DI, 8(SP); \
	CMPQ DI, nk+48(FP); \
	JLT keys3; \
	ADDQ $192, 0(SP); \
	JMP cols3; \
cols1:; \
	CMPQ DI, $0; \
	JEQ done; \
	MOVQ $0, 8(SP); \
keys1:; \
	QKPTRS; \
	ZERO8; \
	MOVQ   qt+8(FP), DI; \
	ADDQ   0(SP), DI; \
	XORQ   SI, SI; \
p1:; \
	QKBLOCK(step1); \
	CMPQ SI, 24(SP); \
	JLT p1; \
	epi1; \
	VMAXPS  Z1, Z0, Z24; \
	VMAXPS  Z2, Z24, Z24; \
	VMAXPS  Z3, Z24, Z24; \
	VMAXPS  Z4, Z24, Z24; \
	VMAXPS  Z5, Z24, Z24; \
	VMAXPS  Z6, Z24, Z24; \
	VMAXPS  Z7, Z24, Z24; \
	MOVQ    cmax+64(FP), DI; \
	ADDQ    0(SP), DI; \
	VMAXPS  (DI), Z24, Z24; \
	VMOVUPS Z24, (DI); \
	QKOUT; \
	VMOVUPS Z0, (DI); \
	ADDQ    R13, DI; \
	VMOVUPS Z1, (DI); \
	ADDQ    R13, DI; \
	VMOVUPS Z2, (DI); \
	ADDQ    R13, DI; \
	VMOVUPS Z3, (DI); \
	ADDQ    R13, DI; \
	VMOVUPS Z4, (DI); \
	ADDQ    R13, DI; \
	VMOVUPS Z5, (DI); \
	ADDQ    R13, DI; \
	VMOVUPS Z6, (DI); \
	ADDQ    R13, DI; \
	VMOVUPS Z7, (DI); \
	MOVQ 8(SP), DI; \
	ADDQ $8, DI; \
	MOVQ DI, 8(SP); \
	CMPQ DI, nk+48(FP); \
	JLT keys1; \
	ADDQ $64, 0(SP); \
	MOVQ R13, DI; \
	SUBQ 0(SP), DI; \
	JMP cols1; \
done:; \
	VZEROUPPER; \
	RET

// func flashQK512(st, qt *float32, mp int, k, v *float32, offs *int64, nk, hd int, cmax *float32)
//
// st[j·mp + c] = Σ_p K_j[p]·qt[p·mp + c] for j < nk (a multiple of 8) and
// c < mp (a multiple of 16), where K_j is the row at byte offset offs[j]
// from k; p < hd, a multiple of 16. It also sets cmax[c] to the maximum of
// cmax[c] and the st[j·mp + c]. offs must have 8 more entries than nk
// (valid offsets): the kernel prefetches the keys of the next group of 8,
// and the value rows (at the same offsets from v) for flashPV512.
//
// Locals: 0(SP) column c0 (bytes), 8(SP) key j, 16(SP) &offs[j],
// 24(SP) bytes of a key row.
TEXT ·flashQK512(SB), NOSPLIT, $32-72
	QKKERNEL(2, QKSTEP3, QKSTEP1, NOSCALE, NOSCALE, qkcols3, qkkeys3, qkp3, qkcols1, qkkeys1, qkp1, qkdone)

// func flashQK512BF16(st *float32, qt *uint32, mp int, k, v *uint16, offs *int64, nk, hd int, cmax *float32, scale float32)
//
// flashQK512 for a BF16 cache (k, v and the offsets in it) and queries in
// BF16 pairs: qt[p·mp + c] holds the elements 2p and 2p+1 of query row c
// (the even one in the low half), p < hd/2; st[j·mp + c] = scale ·
// Σ_p K_j[p]·Q_c[p], the products exact and the sums in float32
// (VDPBF16PS). hd is a multiple of 32.
TEXT ·flashQK512BF16(SB), NOSPLIT, $32-76
	QKKERNEL(1, QKSTEP3B, QKSTEP1B, QKSCALE3, QKSCALE1, qbcols3, qbkeys3, qbp3, qbcols1, qbkeys1, qbp1, qbdone)

// func flashSoftmax512(st *float32, mp, nk int, lim *int32, mx, l, alpha, cmax *float32)
//
// One step of the online softmax over the scores st (nk rows of mp, in
// log2 units), column by column (one column per query row). Row j counts
// only in the columns c ≥ lim[j] (the causal mask); its other entries
// become 0. For each column: m' = max(mx, max over counted scores),
// alpha = 2^(mx − m'), each counted score s becomes 2^(s − m'),
// l = l·alpha + Σ of them, mx = m'. When cmax is not nil, no score is
// masked (lim is not read) and cmax holds the maxima of the columns.
TEXT ·flashSoftmax512(SB), NOSPLIT, $0-64
	EXP2CONSTS
	MOVQ         mp+8(FP), R13
	SHLQ         $2, R13                    // row stride, bytes
	MOVQ         nk+16(FP), CX
	MOVQ         lim+24(FP), R9
	MOVQ         mx+32(FP), R10
	MOVQ         l+40(FP), R11
	MOVQ         alpha+48(FP), R12
	MOVQ         st+0(FP), R8
	MOVQ         cmax+56(FP), DI
	VMOVDQU32    flashconst<>+64(SB), Z30   // lane numbers
	VBROADCASTSS flashconst<>+36(SB), Z29   // −1e30
	XORQ         DX, DX                     // column c0

smcols:
	CMPQ         DX, R13
	JGE          smdone
	MOVQ         DX, AX
	SHRQ         $2, AX
	VPBROADCASTD AX, Z31
	VPADDD       Z30, Z31, Z31              // column numbers of the vector

	TESTQ   DI, DI
	JZ      smmasked
	VMOVUPS (DI)(DX*1), Z0
	JMP     smalpha

smmasked:
	// Pass 1: the maximum of the counted scores.
	VMOVAPS Z29, Z0
	MOVQ    R8, SI
	XORQ    BX, BX

smmax:
	VPCMPD.BCST $5, (R9)(BX*4), Z31, K1     // c ≥ lim[j]
	VMAXPS      (SI), Z0, K1, Z0
	ADDQ        R13, SI
	INCQ        BX
	CMPQ        BX, CX
	JLT         smmax

smalpha:
	VMOVUPS (R10)(DX*1), Z1                 // mx
	VMAXPS  Z1, Z0, Z0                      // m'
	VMOVUPS Z0, (R10)(DX*1)
	VSUBPS  Z0, Z1, Z1
	EXP2(Z1, Z2, Z3)
	VMOVUPS Z3, (R12)(DX*1)                 // alpha
	VMULPS  (R11)(DX*1), Z3, Z4             // l·alpha

	// Pass 2: exponentials and their sum.
	VPXORD Z5, Z5, Z5
	MOVQ   R8, SI
	XORQ   BX, BX
	TESTQ  DI, DI
	JZ     smexp

smexpall:
	VMOVUPS (SI), Z1
	VSUBPS  Z0, Z1, Z1
	EXP2(Z1, Z2, Z3)
	VMOVUPS Z3, (SI)
	VADDPS  Z3, Z5, Z5
	ADDQ    R13, SI
	INCQ    BX
	CMPQ    BX, CX
	JLT     smexpall
	JMP     smsum

smexp:
	VPCMPD.BCST $5, (R9)(BX*4), Z31, K1
	VMOVUPS     (SI), Z1
	VSUBPS      Z0, Z1, Z1
	EXP2(Z1, Z2, Z3)
	VMOVAPS.Z   Z3, K1, Z3
	VMOVUPS     Z3, (SI)
	VADDPS      Z3, Z5, Z5
	ADDQ        R13, SI
	INCQ        BX
	CMPQ        BX, CX
	JLT         smexp

smsum:
	VADDPS  Z5, Z4, Z4
	VMOVUPS Z4, (R11)(DX*1)
	ADDQ    $64, R8
	ADDQ    $64, DX
	JMP     smcols

smdone:
	VZEROUPPER
	RET

// PVROW(d, a, b, c) adds the element at byte d of the value row at R9 + BX,
// times the three probability vectors Z24..Z26, into a, b, c.
#define PVROW(d, a, b, c) \
	VBROADCASTSS d(R9)(BX*1), Z27; \
	VFMADD231PS  Z24, Z27, a; \
	VFMADD231PS  Z25, Z27, b; \
	VFMADD231PS  Z26, Z27, c

#define PVROW1(d, a) \
	VFMADD231PS.BCST d(R9)(BX*1), Z24, a

// PVLOAD3(a, b, c) loads 48 columns of the output row at DI times alpha
// (Z29..Z31) into a, b, c, then DI += stride; PVSTORE3 stores them back.
// PVLOAD1 and PVSTORE1 do the same for 16 columns.
#define PVLOAD3(a, b, c) \
	VMULPS  (DI), Z29, a; \
	VMULPS  64(DI), Z30, b; \
	VMULPS  128(DI), Z31, c; \
	ADDQ    R13, DI

#define PVSTORE3(a, b, c) \
	VMOVUPS a, (DI); \
	VMOVUPS b, 64(DI); \
	VMOVUPS c, 128(DI); \
	ADDQ    R13, DI

#define PVLOAD1(a) \
	VMULPS (DI), Z29, a; \
	ADDQ   R13, DI

#define PVSTORE1(a) \
	VMOVUPS a, (DI); \
	ADDQ    R13, DI

// func flashPV512(ot, pt *float32, mp int, v *float32, offs *int64, nk, hd int, alpha *float32)
//
// ot[d·mp + c] = alpha[c]·ot[d·mp + c] + Σ_j V_j[d]·pt[j·mp + c] for d < hd
// (a multiple of 8), c < mp (a multiple of 16) and j < nk, where V_j is the
// row at byte offset offs[j] from v.
TEXT ·flashPV512(SB), NOSPLIT, $0-64
	MOVQ mp+16(FP), R13
	SHLQ $2, R13          // row stride of ot and pt, bytes
	MOVQ hd+48(FP), R12
	SHLQ $2, R12          // bytes of a value row
	MOVQ nk+40(FP), R11
	XORQ DX, DX           // column c0, bytes

pvcols3:
	MOVQ R13, AX
	SUBQ DX, AX
	CMPQ AX, $192
	JLT  pvcols1
	MOVQ alpha+56(FP), AX
	VMOVUPS (AX)(DX*1), Z29
	VMOVUPS 64(AX)(DX*1), Z30
	VMOVUPS 128(AX)(DX*1), Z31
	XORQ CX, CX           // output row d0, bytes

pvrows3:
	// Accumulators: rows d0..d0+7 of ot, columns c0..c0+47, times alpha.
	MOVQ  CX, DI
	SHRQ  $2, DI
	IMULQ R13, DI
	ADDQ  ot+0(FP), DI
	ADDQ  DX, DI
	MOVQ  DI, R10         // the tile, to store it
	PVLOAD3(Z0, Z1, Z2)
	PVLOAD3(Z3, Z4, Z5)
	PVLOAD3(Z6, Z7, Z8)
	PVLOAD3(Z9, Z10, Z11)
	PVLOAD3(Z12, Z13, Z14)
	PVLOAD3(Z15, Z16, Z17)
	PVLOAD3(Z18, Z19, Z20)
	PVLOAD3(Z21, Z22, Z23)
	MOVQ  v+24(FP), R9
	ADDQ  CX, R9          // element d0 of a value row
	MOVQ  pt+8(FP), SI
	ADDQ  DX, SI
	MOVQ  offs+32(FP), R8
	MOVQ  R11, AX

pvj3:
	MOVQ    (R8), BX
	VMOVUPS (SI), Z24
	VMOVUPS 64(SI), Z25
	VMOVUPS 128(SI), Z26
	PVROW(0, Z0, Z1, Z2)
	PVROW(4, Z3, Z4, Z5)
	PVROW(8, Z6, Z7, Z8)
	PVROW(12, Z9, Z10, Z11)
	PVROW(16, Z12, Z13, Z14)
	PVROW(20, Z15, Z16, Z17)
	PVROW(24, Z18, Z19, Z20)
	PVROW(28, Z21, Z22, Z23)
	ADDQ    $8, R8
	ADDQ    R13, SI
	DECQ    AX
	JNZ     pvj3

	MOVQ R10, DI
	PVSTORE3(Z0, Z1, Z2)
	PVSTORE3(Z3, Z4, Z5)
	PVSTORE3(Z6, Z7, Z8)
	PVSTORE3(Z9, Z10, Z11)
	PVSTORE3(Z12, Z13, Z14)
	PVSTORE3(Z15, Z16, Z17)
	PVSTORE3(Z18, Z19, Z20)
	PVSTORE3(Z21, Z22, Z23)
	ADDQ $32, CX
	CMPQ CX, R12
	JLT  pvrows3
	ADDQ $192, DX
	JMP  pvcols3

pvcols1:
	CMPQ AX, $0
	JEQ  pvdone
	MOVQ alpha+56(FP), AX
	VMOVUPS (AX)(DX*1), Z29
	XORQ CX, CX

pvrows1:
	MOVQ  CX, DI
	SHRQ  $2, DI
	IMULQ R13, DI
	ADDQ  ot+0(FP), DI
	ADDQ  DX, DI
	MOVQ  DI, R10
	PVLOAD1(Z0)
	PVLOAD1(Z1)
	PVLOAD1(Z2)
	PVLOAD1(Z3)
	PVLOAD1(Z4)
	PVLOAD1(Z5)
	PVLOAD1(Z6)
	PVLOAD1(Z7)
	MOVQ  v+24(FP), R9
	ADDQ  CX, R9
	MOVQ  pt+8(FP), SI
	ADDQ  DX, SI
	MOVQ  offs+32(FP), R8
	MOVQ  R11, AX

pvj1:
	MOVQ    (R8), BX
	VMOVUPS (SI), Z24
	PVROW1(0, Z0)
	PVROW1(4, Z1)
	PVROW1(8, Z2)
	PVROW1(12, Z3)
	PVROW1(16, Z4)
	PVROW1(20, Z5)
	PVROW1(24, Z6)
	PVROW1(28, Z7)
	ADDQ    $8, R8
	ADDQ    R13, SI
	DECQ    AX
	JNZ     pvj1

	MOVQ R10, DI
	PVSTORE1(Z0)
	PVSTORE1(Z1)
	PVSTORE1(Z2)
	PVSTORE1(Z3)
	PVSTORE1(Z4)
	PVSTORE1(Z5)
	PVSTORE1(Z6)
	PVSTORE1(Z7)
	ADDQ $32, CX
	CMPQ CX, R12
	JLT  pvrows1
	ADDQ $64, DX
	MOVQ R13, AX
	SUBQ DX, AX
	JMP  pvcols1

pvdone:
	VZEROUPPER
	RET
