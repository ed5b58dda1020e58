//go:build amd64 && !purego

#include "textflag.h"
#include "zero_amd64.h"

// DPF is how many keys ahead the decode kernels prefetch (offsAhead in
// attention.go must be at least this). In decode after a 16K-token prompt
// (~20M model, BenchmarkDecodeLongContext, BF16 cache, cache in memory),
// 16 measured 1.2× faster than 8; 32 was no better than 16.
#define DPF 16

// Decode kernels: a few query rows (four per call) in row layout,
// vectorised along the head dimension, so that no lane is idle when a task
// has only the heads of one group for one token.

// DQROW(q, qs, a, b, c, d): one query row (at q + SI·qs) against the four
// key chunks Z16..Z19.
#define DQROW(q, qs, a, b, c, d) \
	VMOVUPS     (q)(SI*qs), Z20; \
	VFMADD231PS Z16, Z20, a; \
	VFMADD231PS Z17, Z20, b; \
	VFMADD231PS Z18, Z20, c; \
	VFMADD231PS Z19, Z20, d

// DQOUT reduces the sums Z(4i+j) of query row i and key j to Z0, row i's
// four scores in its 128-bit lane i, and stores them at DI + i·R13 (rows
// of s). The reduction is a tree of shuffles and adds, each level halving
// the lanes of every sum and the number of vectors: 45 instructions for
// the 16 sums, where a horizontal sum per row takes about 100. It
// is the reduction of the BF16 matrix-vector kernel (REDUCE4X4 in
// cpu/kernels/gemvdot_amd64.h), repeated here because assembly headers
// cannot be shared between packages. Clobbers Z0..Z15, Z20..Z23, Z28, Z29
// and SI.
#define DQRED1(x, y, t) \
	VSHUFF64X2 $0x44, y, x, t; \
	VSHUFF64X2 $0xee, y, x, x; \
	VADDPS     t, x, x

#define DQRED2(x, y, t) \
	VSHUFF32X4 $0x88, y, x, t; \
	VSHUFF32X4 $0xdd, y, x, x; \
	VADDPS     t, x, x

#define DQRED3(x, y, t) \
	VSHUFPS $0x44, y, x, t; \
	VSHUFPS $0xee, y, x, x; \
	VADDPS  t, x, x

#define DQRED4(x, y, t) \
	VSHUFPS $0x88, y, x, t; \
	VSHUFPS $0xdd, y, x, x; \
	VADDPS  t, x, x

#define DQREDUCE \
	DQRED1(Z0, Z4, Z20); \
	DQRED1(Z8, Z12, Z21); \
	DQRED1(Z1, Z5, Z22); \
	DQRED1(Z9, Z13, Z23); \
	DQRED1(Z2, Z6, Z28); \
	DQRED1(Z10, Z14, Z29); \
	DQRED1(Z3, Z7, Z20); \
	DQRED1(Z11, Z15, Z21); \
	DQRED2(Z0, Z8, Z22); \
	DQRED2(Z1, Z9, Z23); \
	DQRED2(Z2, Z10, Z28); \
	DQRED2(Z3, Z11, Z29); \
	DQRED3(Z0, Z1, Z20); \
	DQRED3(Z2, Z3, Z21); \
	DQRED4(Z0, Z2, Z22)

#define DQOUT \
	DQREDUCE; \
	LEAQ          (DI)(R13*2), SI; \
	ADDQ          R13, SI; \
	VMOVUPS       X0, (DI); \
	VEXTRACTF32X4 $1, Z0, (DI)(R13*1); \
	VEXTRACTF32X4 $2, Z0, (DI)(R13*2); \
	VEXTRACTF32X4 $3, Z0, (SI)

// DQOUT2 is DQOUT for the two-row kernels, whose sums Z(4i+j) are of
// query row i%2 and key 4·(i/2)+j: lane i holds row i%2's scores of keys
// 4·(i/2)..4·(i/2)+3, stored at DI + (i%2)·R13 + 16·(i/2).
#define DQOUT2 \
	DQREDUCE; \
	VMOVUPS       X0, (DI); \
	VEXTRACTF32X4 $1, Z0, (DI)(R13*1); \
	VEXTRACTF32X4 $2, Z0, 16(DI); \
	VEXTRACTF32X4 $3, Z0, 16(DI)(R13*1)

// DQ2(q, k0, k1, k2, k3, a, b, c, d): the query chunk in q against the key
// chunks k0..k3, into a, b, c, d.
#define DQ2(q, k0, k1, k2, k3, a, b, c, d) \
	VFMADD231PS k0, q, a; \
	VFMADD231PS k1, q, b; \
	VFMADD231PS k2, q, c; \
	VFMADD231PS k3, q, d

// WIDEN(m, z) loads 16 BF16 values (32 bytes at m) into z as float32.
#define WIDEN(m, z) \
	VPMOVZXWD m, z; \
	VPSLLD    $16, z, z

// DQKEYSF32 and DQKEYSBF16 load 16 elements at byte SI of the key rows at
// AX, BX, DX and DI into Z16..Z19, as float32.
#define DQKEYSF32 \
	VMOVUPS (AX)(SI*1), Z16; \
	VMOVUPS (BX)(SI*1), Z17; \
	VMOVUPS (DX)(SI*1), Z18; \
	VMOVUPS (DI)(SI*1), Z19

#define DQKEYSBF16 \
	WIDEN((AX)(SI*1), Z16); \
	WIDEN((BX)(SI*1), Z17); \
	WIDEN((DX)(SI*1), Z18); \
	WIDEN((DI)(SI*1), Z19)

// DQKEYS8F32 and DQKEYS8BF16 load 16 elements at byte SI of the key rows
// at AX, BX, DX, DI, R10, R11, R14 and R15 into Z16..Z23, as float32.
#define DQKEYS8F32 \
	DQKEYSF32; \
	VMOVUPS (R10)(SI*1), Z20; \
	VMOVUPS (R11)(SI*1), Z21; \
	VMOVUPS (R14)(SI*1), Z22; \
	VMOVUPS (R15)(SI*1), Z23

#define DQKEYS8BF16 \
	DQKEYSBF16; \
	WIDEN((R10)(SI*1), Z20); \
	WIDEN((R11)(SI*1), Z21); \
	WIDEN((R14)(SI*1), Z22); \
	WIDEN((R15)(SI*1), Z23)

// PREFETCHKEYS(o1, o2, label) prefetches the two key rows at byte offsets
// o1 and o2 (entries of the offsets table) from k, whole (R12 bytes). The
// rows of a decode task are scattered over cache blocks of a few rows each,
// where the hardware prefetchers lose the stream at every block. Into L2
// (T1), DPF keys ahead: measured on the development machines in decode
// after a 16K-token prompt (~20M model, BenchmarkDecodeLongContext), 25-60%
// faster than no prefetch, ahead of T0. Clobbers R14, R15 and SI.
#define PREFETCHKEYS(o1, o2, label) \
	MOVQ       o1, R14; \
	ADDQ       k+32(FP), R14; \
	MOVQ       o2, R15; \
	ADDQ       k+32(FP), R15; \
	XORQ       SI, SI; \
label:; \
	PREFETCHT1 (R14)(SI*1); \
	PREFETCHT1 (R15)(SI*1); \
	ADDQ       $64, SI; \
	CMPQ       SI, R12; \
	JLT        label

// ROWS2(stride) points R9 at the row after R8's, stride bytes on; ROWS4
// points R9, R10 and R11 at the three rows after R8's.
#define ROWS2(stride) \
	LEAQ (R8)(stride*1), R9

#define ROWS4(stride) \
	ROWS2(stride); \
	LEAQ (R9)(stride*1), R10; \
	LEAQ (R10)(stride*1), R11

// KEYPTR(o, r) sets r to the key row whose offset is at byte o of the
// offsets table at DI.
#define KEYPTR(o, r) \
	MOVQ o(DI), r; \
	ADDQ k+32(FP), r

// DQSETUP(esz, qrows) is the prologue of the decode QK kernels: R13 the
// bytes of a row of s, R8 the first query row and qrows the others (rows
// hd·4 bytes apart, in R12 while qrows runs), R12 the bytes of a key row
// (hd·esz), 0(SP) &offs[0], 8(SP) &s[0], CX nk.
#define DQSETUP(esz, qrows) \
	MOVQ  lds+8(FP), R13; \
	SHLQ  $2, R13; \
	MOVQ  hd+24(FP), R12; \
	SHLQ  $2, R12; \
	MOVQ  q+16(FP), R8; \
	qrows; \
	MOVQ  hd+24(FP), R12; \
	IMULQ $esz, R12; \
	MOVQ  offs+40(FP), AX; \
	MOVQ  AX, 0(SP); \
	MOVQ  s+0(FP), AX; \
	MOVQ  AX, 8(SP); \
	MOVQ  nk+48(FP), CX

// DECQK(esz, qs, loadkeys, keys, d, pf1, pf2) is the body of the decode
// QK kernels for cache elements of esz bytes (4: F32, 2: BF16), whose key
// rows are hd·esz bytes (R12) and queries hd·4: a query chunk is at qs =
// 4/esz times the byte offset SI of its key chunk. loadkeys loads the key
// chunks; keys, d, pf1 and pf2 are labels.
#define DECQK(esz, qs, loadkeys, keys, d, pf1, pf2) \
	DQSETUP(esz, ROWS4(R12)); \
keys:; \
	MOVQ   0(SP), DI; \
	PREFETCHKEYS((DPF*8)(DI), (DPF*8+8)(DI), pf1); \
	PREFETCHKEYS((DPF*8+16)(DI), (DPF*8+24)(DI), pf2); \
	KEYPTR(0, AX); \
	KEYPTR(8, BX); \
	KEYPTR(16, DX); \
	KEYPTR(24, DI); \
	ZERO16; \
	XORQ   SI, SI; \
d:; \
	loadkeys; \
	DQROW(R8, qs, Z0, Z1, Z2, Z3); \
	DQROW(R9, qs, Z4, Z5, Z6, Z7); \
	DQROW(R10, qs, Z8, Z9, Z10, Z11); \
	DQROW(R11, qs, Z12, Z13, Z14, Z15); \
	ADDQ    $(16*esz), SI; \
	CMPQ    SI, R12; \
	JLT     d; \
	MOVQ 8(SP), DI; \
	DQOUT; \
	ADDQ $16, 8(SP); \
	ADDQ $32, 0(SP); \
	SUBQ $4, CX; \
	JNZ  keys; \
	VZEROUPPER; \
	RET

// DECQK2(esz, qs, loadkeys, keys, d, pf1, pf2, pf3, pf4) is DECQK for two
// query rows and eight keys per step (16 sums, as DECQK's 4×4), for tasks
// of one or two query rows (a decode token of a model with two query heads
// per key/value head), where the four-row kernel would spend half its
// multiplications on padding.
#define DECQK2(esz, qs, loadkeys, keys, d, pf1, pf2, pf3, pf4) \
	DQSETUP(esz, ROWS2(R12)); \
keys:; \
	MOVQ   0(SP), DI; \
	PREFETCHKEYS((DPF*8)(DI), (DPF*8+8)(DI), pf1); \
	PREFETCHKEYS((DPF*8+16)(DI), (DPF*8+24)(DI), pf2); \
	PREFETCHKEYS((DPF*8+32)(DI), (DPF*8+40)(DI), pf3); \
	PREFETCHKEYS((DPF*8+48)(DI), (DPF*8+56)(DI), pf4); \
	KEYPTR(0, AX); \
	KEYPTR(8, BX); \
	KEYPTR(16, DX); \
	KEYPTR(32, R10); \
	KEYPTR(40, R11); \
	KEYPTR(48, R14); \
	KEYPTR(56, R15); \
	KEYPTR(24, DI); \
	ZERO16; \
	XORQ   SI, SI; \
d:; \
	loadkeys; \
	VMOVUPS (R8)(SI*qs), Z24; \
	VMOVUPS (R9)(SI*qs), Z25; \
	DQ2(Z24, Z16, Z17, Z18, Z19, Z0, Z1, Z2, Z3); \
	DQ2(Z25, Z16, Z17, Z18, Z19, Z4, Z5, Z6, Z7); \
	DQ2(Z24, Z20, Z21, Z22, Z23, Z8, Z9, Z10, Z11); \
	DQ2(Z25, Z20, Z21, Z22, Z23, Z12, Z13, Z14, Z15); \
	ADDQ    $(16*esz), SI; \
	CMPQ    SI, R12; \
	JLT     d; \
	MOVQ 8(SP), DI; \
	DQOUT2; \
	ADDQ $32, 8(SP); \
	ADDQ $64, 0(SP); \
	SUBQ $8, CX; \
	JNZ  keys; \
	VZEROUPPER; \
	RET

// DVROW(p, a, b, c, d) adds the weight at p + BX·4 (row i's weight of
// value row j), times the value vectors Z16..Z19, into a, b, c, d.
#define DVROW(p, a, b, c, d) \
	VBROADCASTSS (p)(BX*4), Z20; \
	VFMADD231PS  Z16, Z20, a; \
	VFMADD231PS  Z17, Z20, b; \
	VFMADD231PS  Z18, Z20, c; \
	VFMADD231PS  Z19, Z20, d

// DVLOAD(o, al, a, b, c, d) loads 64 elements of an output row, at byte o
// of DI, times al (that row's alpha, broadcast) into a, b, c, d; DVSTORE
// stores them back.
#define DVLOAD(o, al, a, b, c, d) \
	VMULPS o(DI), al, a; \
	VMULPS (o+64)(DI), al, b; \
	VMULPS (o+128)(DI), al, c; \
	VMULPS (o+192)(DI), al, d

#define DVSTORE(o, a, b, c, d) \
	VMOVUPS a, o(DI); \
	VMOVUPS b, (o+64)(DI); \
	VMOVUPS c, (o+128)(DI); \
	VMOVUPS d, (o+192)(DI)

// DVVALSF32 and DVVALSBF16 load 64 elements of the value row at SI + AX
// into Z16..Z19 as float32; DVPFF32 and DVPFBF16 prefetch the same chunk of
// the row at SI + AX (the row DPF keys ahead: see PREFETCHKEYS).
#define DVVALSF32 \
	VMOVUPS (SI)(AX*1), Z16; \
	VMOVUPS 64(SI)(AX*1), Z17; \
	VMOVUPS 128(SI)(AX*1), Z18; \
	VMOVUPS 192(SI)(AX*1), Z19

#define DVVALSBF16 \
	WIDEN((SI)(AX*1), Z16); \
	WIDEN(32(SI)(AX*1), Z17); \
	WIDEN(64(SI)(AX*1), Z18); \
	WIDEN(96(SI)(AX*1), Z19)

#define DVPFF32 \
	PREFETCHT1 (SI)(AX*1); \
	PREFETCHT1 64(SI)(AX*1); \
	PREFETCHT1 128(SI)(AX*1); \
	PREFETCHT1 192(SI)(AX*1)

#define DVPFBF16 \
	PREFETCHT1 (SI)(AX*1); \
	PREFETCHT1 64(SI)(AX*1)

// DECPV(esz, loadvals, pfvals, chunks, keys) is the body of the decode PV
// kernels for cache elements of esz bytes (4: F32, 2: BF16). A chunk of 64
// output elements (DX: its byte offset in o) is a chunk of DX·esz/4 bytes
// of a value row. chunks and keys are labels.
#define DECPV(esz, loadvals, pfvals, chunks, keys) \
	DECPVROWS(esz, loadvals, pfvals, PV4SETUP, PV4LOAD, PV4FMA, PV4STORE, chunks, keys)

// DECPV2 is DECPV for one or two query rows (see DECQK2).
#define DECPV2(esz, loadvals, pfvals, chunks, keys) \
	DECPVROWS(esz, loadvals, pfvals, PV2SETUP, PV2LOAD, PV2FMA, PV2STORE, chunks, keys)

// The row parts of DECPVROWS, for four rows and for two: setup points R8..
// at the rows of p and broadcasts the rows' alphas into Z24..; load and
// store bring the output chunk of each row (DI: row 0's) into Z0.. and
// back, fma adds one value row (Z16..Z19) times each row's weight.
#define PV4SETUP \
	MOVQ         p+16(FP), R8; \
	ROWS4(R13); \
	MOVQ         alpha+56(FP), AX; \
	VBROADCASTSS 0(AX), Z24; \
	VBROADCASTSS 4(AX), Z25; \
	VBROADCASTSS 8(AX), Z26; \
	VBROADCASTSS 12(AX), Z27

#define PV4LOAD \
	DVLOAD(0, Z24, Z0, Z1, Z2, Z3); \
	ADDQ R12, DI; \
	DVLOAD(0, Z25, Z4, Z5, Z6, Z7); \
	ADDQ R12, DI; \
	DVLOAD(0, Z26, Z8, Z9, Z10, Z11); \
	ADDQ R12, DI; \
	DVLOAD(0, Z27, Z12, Z13, Z14, Z15)

#define PV4FMA \
	DVROW(R8, Z0, Z1, Z2, Z3); \
	DVROW(R9, Z4, Z5, Z6, Z7); \
	DVROW(R10, Z8, Z9, Z10, Z11); \
	DVROW(R11, Z12, Z13, Z14, Z15)

#define PV4STORE \
	DVSTORE(0, Z0, Z1, Z2, Z3); \
	ADDQ R12, DI; \
	DVSTORE(0, Z4, Z5, Z6, Z7); \
	ADDQ R12, DI; \
	DVSTORE(0, Z8, Z9, Z10, Z11); \
	ADDQ R12, DI; \
	DVSTORE(0, Z12, Z13, Z14, Z15)

#define PV2SETUP \
	MOVQ         p+16(FP), R8; \
	LEAQ         (R8)(R13*1), R9; \
	MOVQ         alpha+56(FP), AX; \
	VBROADCASTSS 0(AX), Z24; \
	VBROADCASTSS 4(AX), Z25

#define PV2LOAD \
	DVLOAD(0, Z24, Z0, Z1, Z2, Z3); \
	ADDQ R12, DI; \
	DVLOAD(0, Z25, Z4, Z5, Z6, Z7)

#define PV2FMA \
	DVROW(R8, Z0, Z1, Z2, Z3); \
	DVROW(R9, Z4, Z5, Z6, Z7)

#define PV2STORE \
	DVSTORE(0, Z0, Z1, Z2, Z3); \
	ADDQ R12, DI; \
	DVSTORE(0, Z4, Z5, Z6, Z7)

// DECPVROWS is the body of the decode PV kernels, rows given by the setup,
// load, fma and store macros above.
#define DECPVROWS(esz, loadvals, pfvals, setup, load, fma, store, chunks, keys) \
	MOVQ         hd+8(FP), R12; \
	SHLQ         $2, R12; \
	MOVQ         ldp+24(FP), R13; \
	SHLQ         $2, R13; \
	setup; \
	XORQ         DX, DX; \
chunks:; \
	MOVQ o+0(FP), DI; \
	ADDQ DX, DI; \
	MOVQ DI, 0(SP); \
	load; \
	MOVQ DX, SI; \
	IMULQ $esz, SI; \
	SHRQ $2, SI; \
	ADDQ v+32(FP), SI; \
	MOVQ offs+40(FP), CX; \
	XORQ BX, BX; \
keys:; \
	MOVQ       (DPF*8)(CX)(BX*8), AX; \
	pfvals; \
	MOVQ       (CX)(BX*8), AX; \
	loadvals; \
	fma; \
	INCQ    BX; \
	CMPQ    BX, nk+48(FP); \
	JLT     keys; \
	MOVQ 0(SP), DI; \
	store; \
	ADDQ $256, DX; \
	CMPQ DX, R12; \
	JLT  chunks; \
	VZEROUPPER; \
	RET

// func flashDecQK512(s *float32, lds int, q *float32, hd int, k *float32, offs *int64, nk int)
//
// s[i·lds + j] = Σ_d q[i·hd + d]·K_j[d] for i < 4, j < nk (a multiple of
// 4) and d < hd (a multiple of 16), where K_j is the row at byte offset
// offs[j] from k.
TEXT ·flashDecQK512(SB), NOSPLIT, $16-56
	DECQK(4, 1, DQKEYSF32, dqkeys, dqd, dqpf1, dqpf2)

// func flashDecQK512BF16(s *float32, lds int, q *float32, hd int, k *uint16, offs *int64, nk int)
//
// flashDecQK512 with BF16 key rows (offsets in bytes of the BF16 cache).
TEXT ·flashDecQK512BF16(SB), NOSPLIT, $16-56
	DECQK(2, 2, DQKEYSBF16, dbkeys, dbd, dbpf1, dbpf2)

// func flashDecPV512(o *float32, hd int, p *float32, ldp int, v *float32, offs *int64, nk int, alpha *float32)
//
// o[i·hd + d] = alpha[i]·o[i·hd + d] + Σ_j p[i·ldp + j]·V_j[d] for i < 4,
// d < hd (a multiple of 64) and j < nk, where V_j is the row at byte offset
// offs[j] from v.
TEXT ·flashDecPV512(SB), NOSPLIT, $8-64
	DECPV(4, DVVALSF32, DVPFF32, dvchunks, dvkeys)

// func flashDecPV512BF16(o *float32, hd int, p *float32, ldp int, v *uint16, offs *int64, nk int, alpha *float32)
//
// flashDecPV512 with BF16 value rows (offsets in bytes of the BF16 cache).
TEXT ·flashDecPV512BF16(SB), NOSPLIT, $8-64
	DECPV(2, DVVALSBF16, DVPFBF16, dbchunks, dbvkeys)

// func flashDecQK512x2(s *float32, lds int, q *float32, hd int, k *float32, offs *int64, nk int)
//
// flashDecQK512 for two query rows (i < 2), nk a multiple of 8.
TEXT ·flashDecQK512x2(SB), NOSPLIT, $16-56
	DECQK2(4, 1, DQKEYS8F32, d2keys, d2d, d2pf1, d2pf2, d2pf3, d2pf4)

// func flashDecQK512x2BF16(s *float32, lds int, q *float32, hd int, k *uint16, offs *int64, nk int)
//
// flashDecQK512x2 with BF16 key rows.
TEXT ·flashDecQK512x2BF16(SB), NOSPLIT, $16-56
	DECQK2(2, 2, DQKEYS8BF16, d2bkeys, d2bd, d2bpf1, d2bpf2, d2bpf3, d2bpf4)

// func flashDecPV512x2(o *float32, hd int, p *float32, ldp int, v *float32, offs *int64, nk int, alpha *float32)
//
// flashDecPV512 for two query rows (i < 2).
TEXT ·flashDecPV512x2(SB), NOSPLIT, $8-64
	DECPV2(4, DVVALSF32, DVPFF32, d2vchunks, d2vkeys)

// func flashDecPV512x2BF16(o *float32, hd int, p *float32, ldp int, v *uint16, offs *int64, nk int, alpha *float32)
//
// flashDecPV512x2 with BF16 value rows.
TEXT ·flashDecPV512x2BF16(SB), NOSPLIT, $8-64
	DECPV2(2, DVVALSBF16, DVPFBF16, d2bvchunks, d2bvkeys)
