//go:build ignore

// gen_quant writes quant_amd64.s: the quantized product kernels (see
// quant.go for the layout and qArgs for the arguments), one function per
// weight type and number of activation rows, unrolled over the 8 steps of
// a block, and the activation quantizer. Run by go generate in this
// directory. A generator rather than macros, because each row count has
// its own registers and addressing.
package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
)

var out bytes.Buffer

// pfBlocks is how many block-panels ahead the kernels of several
// activation rows prefetch (PREFETCHT0, every line).
var pfBlocks = 1

// decodePrefetch is how the kernels of one activation row (decode, which
// streams the weights from memory once per token) prefetch: PREFETCHNTA,
// 8 block-panels ahead, every every-th line of a block-panel. NTA keeps
// the stream from evicting what the step reads again (the KV cache, the
// activations); and fewer prefetches for Q8_0 leave its 17 lines a block
// to the hardware prefetcher, which they otherwise got in the way of.
// Measured on a Qwen3-0.6B-shaped model (decode steps alternated between
// kernels in one process, step by step and in blocks of 25 steps, 2
// cores, Zen 5; speed against PREFETCHT0 of every line 8 ahead, the range
// over 2 to 7 runs): Q8_0 1.10-1.18× with one line in 8 (1.02-1.17× with
// no prefetch, 1.08-1.10× one line in 2 or 4, 1.01-1.05× every line 4 to
// 16 ahead, 1.09-1.11× every line 1 ahead), Q4_0 1.01-1.04× with every
// line (0.97-1.03× with none, 0.93-0.96× 16 ahead one line in 2,
// 0.95-0.99× one line in 8).
var decodePrefetch = map[string]struct{ every int }{"Q8": {8}, "Q4": {1}, "Q41": {1}, "Q51": {1}, "QN": {1}, "Q6": {1}}

const decodePrefetchAhead = 8

func p(format string, args ...any) { fmt.Fprintf(&out, "\t"+format+"\n", args...) }

// rowAddr is the address of row i (0..6) of a matrix at disp bytes into
// the row: rows 0-3 from base0 with the stride in s1 (3× in s3), rows 4-6
// from base4 (= base0 + 4 strides).
func rowAddr(disp, i int, base0, base4, s1, s3 string) string {
	base, j := base0, i
	if i >= 4 {
		base, j = base4, i-4
	}
	d := ""
	if disp != 0 {
		d = fmt.Sprint(disp)
	}
	switch j {
	case 0:
		return fmt.Sprintf("%s(%s)", d, base)
	case 1:
		return fmt.Sprintf("%s(%s)(%s*1)", d, base, s1)
	case 2:
		return fmt.Sprintf("%s(%s)(%s*2)", d, base, s1)
	}
	return fmt.Sprintf("%s(%s)(%s*1)", d, base, s3)
}

// Registers: integer sums of row i in Z(2i), Z(2i+1) (columns 0-15,
// 16-31), float sums in Z(14+2i), Z(15+2i); weights in Z28, Z29; the
// broadcast activation in Z30; the nibble mask in Z31.
//
// typ is "Q8" (Q8_0), "Q4" (Q4_0), "Q41" (Q4_1: the nibbles as Q4_0's,
// the integer sums from 0, and after the scales, the block's minimums
// times the row's float32 corr, da·Σq) or "Q51" (Q5_1: Q4_1 with each
// step's fifth bits, two 64-bit masks, expanded to bytes by VPMOVM2B into
// Z30 and ORed in as 16) or "QN" (IQ4_NL: the nibbles as Q4_0's, looked
// up by VPSHUFB in iq4u, each level + 128, which the step loads into Z30
// first; the integer sums start from corr, −128·Σq, as Q8_0's) or "Q6"
// (Q6_16: the nibbles as Q4_1's, and their high two bits, four steps'
// in a byte, shifted into place and ORed in by VPTERNLOGD; each half block is a product of its own, its
// sums started from its corr, −32·Σq over the half, and scaled by its
// scales after steps 3 and 7; the second halves' corr lie 88(R15) bytes
// after the first halves').
//
// General registers: R15 the arguments, AX the weights, DX C, SI/DI rows
// 0 and 4 of A (R8 lda, R9 3·lda), BX/R12 rows 0 and 4 of da (R10 lds,
// R11 3·lds), CX/R13 rows 0 and 4 of corr, R14 the blocks left.
func kernel(typ string, rows int) {
	q5, nl, q6 := typ == "Q51", typ == "QN", typ == "Q6"
	q4, q41 := typ == "Q4" || typ == "Q41" || q5 || nl || q6, typ == "Q41" || q5
	qoff, bsz := blockLayout(typ)
	hb := qoff + 8*64
	fmt.Fprintf(&out, "// func qkern%sx%d(p *qArgs)\n", typ, rows)
	fmt.Fprintf(&out, "TEXT ·qkern%sx%d(SB), NOSPLIT, $0-8\n", typ, rows)
	p("MOVQ p+0(FP), R15")
	p("MOVQ 0(R15), AX")
	p("MOVQ 64(R15), DX")
	if q4 {
		p("MOVL $0x0f0f0f0f, R8")
		p("VPBROADCASTD R8, Z31")
	}
	if q6 && rows < 7 {
		p("VPBROADCASTD q6m<>(SB), Z13")
	}
	l := fmt.Sprintf("q%sx%d", typ, rows)
	fmt.Fprintf(&out, "%spanel:\n", l)
	p("MOVQ 24(R15), SI")
	p("MOVQ 32(R15), R8")
	p("LEAQ (R8)(R8*2), R9")
	p("MOVQ 40(R15), BX")
	p("MOVQ 48(R15), CX")
	p("MOVQ 56(R15), R10")
	p("LEAQ (R10)(R10*2), R11")
	if rows > 4 {
		p("LEAQ (SI)(R8*4), DI")
		p("LEAQ (BX)(R10*4), R12")
		p("LEAQ (CX)(R10*4), R13")
	}
	p("MOVQ 16(R15), R14")
	for i := range rows {
		p("VPXORD Z%d, Z%d, Z%d", 14+2*i, 14+2*i, 14+2*i)
		p("VPXORD Z%d, Z%d, Z%d", 15+2*i, 15+2*i, 15+2*i)
	}
	fmt.Fprintf(&out, "%sblock:\n", l)
	for i := range rows {
		if q41 {
			p("VPXORD Z%d, Z%d, Z%d", 2*i, 2*i, 2*i)
			p("VPXORD Z%d, Z%d, Z%d", 2*i+1, 2*i+1, 2*i+1)
			continue
		}
		p("VPBROADCASTD %s, Z%d", rowAddr(0, i, "CX", "R13", "R10", "R11"), 2*i)
		p("VMOVDQA32 Z%d, Z%d", 2*i, 2*i+1)
	}
	// The lines of the block-panel ahead to prefetch, spread over the 8
	// steps.
	pfi, pfd, every := "PREFETCHT0", pfBlocks*bsz, 1
	if rows == 1 {
		pfi, pfd, every = "PREFETCHNTA", decodePrefetchAhead*bsz, decodePrefetch[typ].every
	}
	var pf []int
	for ln := 0; ln < bsz/64; ln += every {
		pf = append(pf, pfd+64*ln)
	}
	for s := range 8 {
		for _, off := range pf[s*len(pf)/8 : (s+1)*len(pf)/8] {
			p("%s %d(AX)", pfi, off)
		}
		if q4 {
			p("VMOVDQU8 %d(AX), Z29", qoff+nibOff(typ, s))
			p("VPANDD Z31, Z29, Z28")
			p("VPSRLW $4, Z29, Z29")
			p("VPANDD Z31, Z29, Z29")
			if nl {
				p("VMOVDQU64 iq4u<>(SB), Z30")
				p("VPSHUFB Z28, Z30, Z28")
				p("VPSHUFB Z29, Z30, Z29")
			}
			if q5 {
				for v := range 2 {
					p("KMOVQ %d(AX), K%d", hb+16*s+8*v, 1+v)
					p("VPMOVM2B K%d, Z30", 1+v)
					p("VPANDD.BCST q5bit<>(SB), Z30, Z30")
					p("VPORD Z30, Z%d, Z%d", 28+v, 28+v)
				}
			}
			if q6 {
				for v := range 2 {
					off := qoff + 384*(s/4) + 256 + 64*v
					switch s % 4 {
					case 0:
						p("VPSLLW $4, %d(AX), Z30", off)
					case 1:
						p("VPSLLW $2, %d(AX), Z30", off)
					case 2:
						p("VMOVDQU8 %d(AX), Z30", off)
					case 3:
						p("VPSRLW $2, %d(AX), Z30", off)
					}
					if rows < 7 { // the mask in a free integer sum register
						p("VPTERNLOGD $0xf8, Z13, Z30, Z%d", 28+v) // |= Z30 & 0x30
					} else {
						p("VPTERNLOGD.BCST $0xf8, q6m<>(SB), Z30, Z%d", 28+v)
					}
				}
			}
		} else {
			p("VMOVDQU8 %d(AX), Z28", 64+128*s)
			p("VMOVDQU8 %d(AX), Z29", 64+128*s+64)
		}
		for i := range rows {
			p("VPBROADCASTD %s, Z30", rowAddr(4*s, i, "SI", "DI", "R8", "R9"))
			p("VPDPBUSD Z30, Z28, Z%d", 2*i)
			p("VPDPBUSD Z30, Z29, Z%d", 2*i+1)
		}
		if q6 && s == 3 { // the first half's sums, then the second's start
			scaleSums(rows, 0)
			p("ADDQ 88(R15), CX")
			if rows > 4 {
				p("ADDQ 88(R15), R13")
			}
			for i := range rows {
				p("VPBROADCASTD %s, Z%d", rowAddr(0, i, "CX", "R13", "R10", "R11"), 2*i)
				p("VMOVDQA32 Z%d, Z%d", 2*i, 2*i+1)
			}
			p("SUBQ 88(R15), CX")
			if rows > 4 {
				p("SUBQ 88(R15), R13")
			}
		}
	}
	if q6 {
		scaleSums(rows, 64)
	} else {
		scaleSums(rows, 0)
	}
	if q41 {
		p("VCVTPH2PS 64(AX), Z28")
		p("VCVTPH2PS 96(AX), Z29")
		for i := range rows {
			corr := rowAddr(0, i, "CX", "R13", "R10", "R11")
			p("VFMADD231PS.BCST %s, Z28, Z%d", corr, 14+2*i)
			p("VFMADD231PS.BCST %s, Z29, Z%d", corr, 15+2*i)
		}
	}
	p("ADDQ $%d, AX", bsz)
	p("ADDQ $32, SI")
	p("ADDQ $4, BX")
	p("ADDQ $4, CX")
	if rows > 4 {
		p("ADDQ $32, DI")
		p("ADDQ $4, R12")
		p("ADDQ $4, R13")
	}
	p("DECQ R14")
	p("JNZ %sblock", l)
	// Store the tile's 32 columns of each row (adding C with beta).
	p("MOVQ 72(R15), R8")
	p("LEAQ (R8)(R8*2), R9")
	if rows > 4 {
		p("LEAQ (DX)(R8*4), DI")
	}
	p("MOVQ 80(R15), R10")
	p("TESTQ R10, R10")
	p("JZ %sstore", l)
	for i := range rows {
		for v := range 2 {
			p("VADDPS %s, Z%d, Z%d", rowAddr(64*v, i, "DX", "DI", "R8", "R9"), 14+2*i+v, 14+2*i+v)
		}
	}
	fmt.Fprintf(&out, "%sstore:\n", l)
	for i := range rows {
		for v := range 2 {
			p("VMOVUPS Z%d, %s", 14+2*i+v, rowAddr(64*v, i, "DX", "DI", "R8", "R9"))
		}
	}
	p("ADDQ $128, DX")
	p("DECQ 8(R15)")
	p("JNZ %spanel", l)
	p("VZEROUPPER")
	p("RET")
	out.WriteString("\n")
}

// scaleSums adds the integer sums of a tile's rows, converted and scaled
// by da of the row and the columns' scales at off bytes into the
// block-panel, into the float sums.
func scaleSums(rows, off int) {
	p("VCVTPH2PS %d(AX), Z28", off)
	p("VCVTPH2PS %d(AX), Z29", off+32)
	for i := range rows {
		da := rowAddr(0, i, "BX", "R12", "R10", "R11")
		for v := range 2 {
			z := 2*i + v
			p("VCVTDQ2PS Z%d, Z%d", z, z)
			p("VMULPS.BCST %s, Z%d, Z%d", da, z, z)
			p("VFMADD231PS Z%d, Z%d, Z%d", z, 28+v, 14+z)
		}
	}
}

// nibOff is where step s's nibbles lie from the quantized values' start
// (quant.go's nibOff): Q6_16 puts each group of four steps' high bits
// after the group.
func nibOff(typ string, s int) int {
	if typ == "Q6" {
		return 64*s + 128*(s/4)
	}
	return 64 * s
}

// blockLayout returns where the quantized values of a block-panel of typ
// start and its size in bytes (quant.go's layout).
func blockLayout(typ string) (qoff, bsz int) {
	switch typ {
	case "Q8":
		return 64, 64 + 8*128
	case "Q4", "QN":
		return 64, 64 + 8*64
	case "Q51":
		return 128, 128 + 8*64 + 8*16
	case "Q6":
		return 128, 128 + 8*64 + 8*32
	}
	return 128, 128 + 8*64
}

// quantRow: func quantRowAVX512(qa *int8, da *float32, sa *int32, x *float32, nb int)
// For each block of 32: amax = max|x|, d = amax/127, id = 1/d (0 when d
// is 0), q = x·id rounded to nearest even (VCVTPS2DQ under the default
// rounding mode), sa = Σq.
func quantRow() {
	out.WriteString(`// func quantRowAVX512(qa *int8, da *float32, sa *int32, x *float32, nb int)
TEXT ·quantRowAVX512(SB), NOSPLIT, $0-40
	MOVQ qa+0(FP), DI
	MOVQ da+8(FP), BX
	MOVQ sa+16(FP), CX
	MOVQ x+24(FP), SI
	MOVQ nb+32(FP), R8
	MOVL $0x7fffffff, AX
	VPBROADCASTD AX, Z31
	MOVL $0x42fe0000, AX // 127
	VMOVD AX, X13
	MOVL $0x3f800000, AX // 1
	VMOVD AX, X14
	VXORPS X15, X15, X15
qrow:
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	VANDPS Z31, Z0, Z2
	VANDPS Z31, Z1, Z3
	VMAXPS Z3, Z2, Z2
	VEXTRACTF64X4 $1, Z2, Y3
	VMAXPS Y3, Y2, Y2
	VEXTRACTF128 $1, Y2, X3
	VMAXPS X3, X2, X2
	VPERMILPS $0x4e, X2, X3
	VMAXPS X3, X2, X2
	VPERMILPS $0xb1, X2, X3
	VMAXPS X3, X2, X2
	VDIVSS X13, X2, X4 // d = amax/127
	VMOVSS X4, (BX)
	VDIVSS X4, X14, X5 // 1/d
	VCMPSS $4, X15, X4, X7 // d != 0: all ones
	VANDPS X7, X5, X6 // id, or 0
	VBROADCASTSS X6, Z6
	VMULPS Z6, Z0, Z0
	VMULPS Z6, Z1, Z1
	VCVTPS2DQ Z0, Z0
	VCVTPS2DQ Z1, Z1
	VPMOVDB Z0, X2
	VPMOVDB Z1, X3
	VMOVDQU X2, (DI)
	VMOVDQU X3, 16(DI)
	VPADDD Z1, Z0, Z0
	VEXTRACTI64X4 $1, Z0, Y1
	VPADDD Y1, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPADDD X1, X0, X0
	VPSHUFD $0x4e, X0, X1
	VPADDD X1, X0, X0
	VPSHUFD $0xb1, X0, X1
	VPADDD X1, X0, X0
	VMOVD X0, (CX)
	ADDQ $128, SI
	ADDQ $32, DI
	ADDQ $4, BX
	ADDQ $4, CX
	DECQ R8
	JNZ qrow
	VZEROUPPER
	RET

`)
}

// kernelAVX2 writes the AVX2 kernel for one activation row (16 ymm
// registers hold one row's sums of 32 columns, not more): Y0-Y3 the
// integer sums of columns 0-7, 8-15, 16-23, 24-31, Y4-Y7 the float sums,
// Y8-Y10 weights and the broadcast activation, Y11 sixteen 1s (int16),
// Y12 the mask (0x0F for Q4_0, 0x80 for Q8_0), Y13, Y14 scales.
//
// Q8_0 takes VPMADDUBSW with the sign trick: the weights back to signed
// (XOR 0x80), their magnitudes as the unsigned operand and the
// activations with their signs as the signed one, so a pair of products
// stays below the int16 limit (2·128·127), summed to int32 at each step
// by VPMADDWD; the sums are then Σw·a, and the kernel starts them from 0,
// not from the correction. Q4_0's nibbles (0..15) are unsigned as they
// are: a step's pairs are at most 2·15·127, so the 8 steps of a block add
// up in int16 (VPADDW) and widen once per block, onto the correction.
//
// Q5_1 (typ "Q51") adds each weight byte's fifth bit: 32 bits of the
// step's mask broadcast, each byte of them spread over eight lanes
// (VPSHUFB), tested against its bit (VPAND, VPCMPEQB) and ORed in as 16.
// Its pairs reach 2·31·127, so the steps are widened to int32 one by one
// (VPMADDWD), as Q8_0's are.
//
// IQ4_NL (typ "QN") looks its nibbles up in iq4s (VPSHUFB; the table in
// Y15), the signed levels, which then go through Q8_0's sign trick: the
// sums are Σw·a from 0, and corr is not read.
//
// Q6_16 (typ "Q6") adds its high two bits (shifted into place, masked and
// ORed in), its
// pairs reach 2·63·127 and widen step by step too; each half block's sums
// take its corr (the second halves' 88(R15) bytes on, in R9) and its
// scales after steps 3 and 7.
//
// With vnni (the kernels qkern*VNNI, for CPUs with AVX-VNNI: Intel's
// client cores since Alder Lake, which lack AVX-512), every product is
// VPDPBUSD on ymm registers, VEX-encoded (vpdpbusdY): 32 unsigned weight
// bytes times 4 activation bytes broadcast, summed straight into int32,
// as the AVX-512 kernels do it, so Q8_0 needs no sign trick (its weights
// are stored + 128) and IQ4_NL looks up its levels + 128 (iq4u); the
// sums of the types with an offset take their correction at the end of
// the block.
func kernelAVX2(typ string, vnni bool) {
	q5, nl, q6 := typ == "Q51", typ == "QN", typ == "Q6"
	q4, q41 := typ == "Q4" || typ == "Q41" || q5 || nl || q6, typ == "Q41" || q5
	qoff, bsz := blockLayout(typ)
	hb := qoff + 8*64
	suffix := "AVX2"
	if vnni {
		suffix = "VNNI"
	}
	l := fmt.Sprintf("q%s%s", typ, strings.ToLower(suffix))
	fmt.Fprintf(&out, "// func qkern%s%s(p *qArgs)\n", typ, suffix)
	fmt.Fprintf(&out, "TEXT ·qkern%s%s(SB), NOSPLIT, $0-8\n", typ, suffix)
	p("MOVQ p+0(FP), R15")
	p("MOVQ 0(R15), AX")
	p("MOVQ 64(R15), DX")
	p("MOVL $0x00010001, R8")
	p("VMOVD R8, X11")
	p("VPBROADCASTD X11, Y11")
	if q4 {
		p("MOVL $0x0f0f0f0f, R8")
	} else {
		p("MOVL $0x80808080, R8")
	}
	p("VMOVD R8, X12")
	p("VPBROADCASTD X12, Y12")
	switch {
	case nl && vnni:
		p("VMOVDQU iq4u<>(SB), Y15")
	case nl:
		p("VMOVDQU iq4s<>(SB), Y15")
	}
	if q6 {
		p("MOVQ 88(R15), R9")
	}
	fmt.Fprintf(&out, "%spanel:\n", l)
	p("MOVQ 24(R15), SI")
	p("MOVQ 40(R15), BX")
	p("MOVQ 48(R15), CX")
	p("MOVQ 16(R15), R14")
	for v := range 4 {
		p("VPXOR Y%d, Y%d, Y%d", 4+v, 4+v, 4+v)
	}
	fmt.Fprintf(&out, "%sblock:\n", l)
	for v := range 4 {
		p("VPXOR Y%d, Y%d, Y%d", v, v, v)
	}
	for s := range 8 {
		p("PREFETCHT0 %d(AX)", 2*bsz+64*s)
		p("VPBROADCASTD %d(SI), Y10", 4*s)
		if q4 {
			for h := range 2 {
				p("VMOVDQU %d(AX), Y8", qoff+nibOff(typ, s)+32*h)
				p("VPSRLW $4, Y8, Y9")
				p("VPAND Y12, Y8, Y8")
				p("VPAND Y12, Y9, Y9")
				if nl && vnni { // levels + 128
					p("VPSHUFB Y8, Y15, Y8")
					p("VPSHUFB Y9, Y15, Y9")
				}
				if nl && !vnni { // levels, then Q8_0's sign trick
					for v := range 2 {
						p("VPSHUFB Y%d, Y15, Y%d", 8+v, 8+v)
						p("VPSIGNB Y%d, Y10, Y13", 8+v)
						p("VPABSB Y%d, Y%d", 8+v, 8+v)
						p("VPMADDUBSW Y13, Y%d, Y%d", 8+v, 8+v)
						p("VPMADDWD Y11, Y%d, Y%d", 8+v, 8+v)
					}
					p("VPADDD Y8, Y%d, Y%d", h, h)
					p("VPADDD Y9, Y%d, Y%d", 2+h, 2+h)
					continue
				}
				type plane struct {
					off int
					bit string
				}
				var planes []plane
				if q5 {
					planes = []plane{{hb + 16*s, "q5bit"}}
				}
				if q6 {
					for v := range 2 {
						p("VMOVDQU %d(AX), Y13", qoff+384*(s/4)+256+64*v+32*h)
						switch s % 4 {
						case 0:
							p("VPSLLW $4, Y13, Y13")
						case 1:
							p("VPSLLW $2, Y13, Y13")
						case 3:
							p("VPSRLW $2, Y13, Y13")
						}
						p("VPAND q6m<>(SB), Y13, Y13")
						p("VPOR Y13, Y%d, Y%d", 8+v, 8+v)
					}
				}
				for _, pln := range planes {
					for v := range 2 {
						p("VPBROADCASTD %d(AX), Y13", pln.off+8*v+4*h)
						p("VPSHUFB q5shuf<>(SB), Y13, Y13")
						p("VPAND q5sel<>(SB), Y13, Y13")
						p("VPCMPEQB q5sel<>(SB), Y13, Y13")
						p("VPAND %s<>(SB), Y13, Y13", pln.bit)
						p("VPOR Y13, Y%d, Y%d", 8+v, 8+v)
					}
				}
				if vnni {
					vpdpbusdY(h, 8, 10)
					vpdpbusdY(2+h, 9, 10)
					continue
				}
				p("VPMADDUBSW Y10, Y8, Y8")
				p("VPMADDUBSW Y10, Y9, Y9")
				if q5 || q6 {
					p("VPMADDWD Y11, Y8, Y8")
					p("VPMADDWD Y11, Y9, Y9")
					p("VPADDD Y8, Y%d, Y%d", h, h)
					p("VPADDD Y9, Y%d, Y%d", 2+h, 2+h)
					continue
				}
				p("VPADDW Y8, Y%d, Y%d", h, h)     // rows 8h..8h+7
				p("VPADDW Y9, Y%d, Y%d", 2+h, 2+h) // rows 16+8h..
			}
			if q6 && s == 3 {
				scaleSumsAVX2("(CX)", 0)
				for v := range 4 {
					p("VPXOR Y%d, Y%d, Y%d", v, v, v)
				}
			}
			continue
		}
		for v := range 4 {
			p("VMOVDQU %d(AX), Y8", 64+128*s+32*v)
			if vnni { // stored + 128: unsigned
				vpdpbusdY(v, 8, 10)
				continue
			}
			p("VPXOR Y12, Y8, Y8")
			p("VPSIGNB Y8, Y10, Y9")
			p("VPABSB Y8, Y8")
			p("VPMADDUBSW Y9, Y8, Y9")
			p("VPMADDWD Y11, Y9, Y9")
			p("VPADDD Y9, Y%d, Y%d", v, v)
		}
	}
	if q6 {
		scaleSumsAVX2("(CX)(R9*1)", 64)
	}
	if vnni && !q41 && !q6 { // the sums from their correction
		p("VPBROADCASTD (CX), Y13")
		for v := range 4 {
			p("VPADDD Y13, Y%d, Y%d", v, v)
		}
	}
	if !vnni && q4 && !q5 && !nl && !q6 {
		p("VPBROADCASTD (CX), Y13")
		for v := range 4 {
			p("VPMADDWD Y11, Y%d, Y%d", v, v)
			if !q41 {
				p("VPADDD Y13, Y%d, Y%d", v, v)
			}
		}
	}
	if !q6 {
		p("VBROADCASTSS (BX), Y14")
		for v := range 4 {
			p("VCVTDQ2PS Y%d, Y%d", v, v)
			p("VMULPS Y14, Y%d, Y%d", v, v)
			p("VCVTPH2PS %d(AX), Y13", 16*v)
			p("VFMADD231PS Y13, Y%d, Y%d", v, 4+v)
		}
	}
	if q41 { // the minimums times da·Σq
		p("VBROADCASTSS (CX), Y14")
		for v := range 4 {
			p("VCVTPH2PS %d(AX), Y13", 64+16*v)
			p("VFMADD231PS Y13, Y14, Y%d", 4+v)
		}
	}
	p("ADDQ $%d, AX", bsz)
	p("ADDQ $32, SI")
	p("ADDQ $4, BX")
	p("ADDQ $4, CX")
	p("DECQ R14")
	p("JNZ %sblock", l)
	p("MOVQ 80(R15), R10")
	p("TESTQ R10, R10")
	p("JZ %sstore", l)
	for v := range 4 {
		p("VADDPS %d(DX), Y%d, Y%d", 32*v, 4+v, 4+v)
	}
	fmt.Fprintf(&out, "%sstore:\n", l)
	for v := range 4 {
		p("VMOVUPS Y%d, %d(DX)", 4+v, 32*v)
	}
	p("ADDQ $128, DX")
	p("DECQ 8(R15)")
	p("JNZ %spanel", l)
	p("VZEROUPPER")
	p("RET")
	out.WriteString("\n")
}

// vpdpbusdY writes VPDPBUSD ymm(acc), ymm(u), ymm(s) with its VEX
// encoding (AVX-VNNI: VEX.256.66.0F38.W0 50 /r), which the Go assembler
// does not emit (it encodes the mnemonic as AVX-512's EVEX form, which a
// CPU without AVX-512 faults on): acc += the 4-byte dot products of u's
// unsigned bytes and s's signed ones.
func vpdpbusdY(acc, u, s int) {
	b1 := 0x02 | 1<<6 // map 0F38, X̄
	if acc < 8 {
		b1 |= 1 << 7 // R̄
	}
	if s < 8 {
		b1 |= 1 << 5 // B̄
	}
	b2 := (^u&0xF)<<3 | 1<<2 | 0x01 // W0, v̄vvv, L 256, pp 66
	p("BYTE $0xc4; BYTE $0x%02x; BYTE $0x%02x; BYTE $0x50; BYTE $0x%02x // VPDPBUSD Y%d, Y%d, Y%d (VEX)", b1, b2, 0xC0|(acc&7)<<3|(s&7), s, u, acc)
}

// scaleSumsAVX2 adds the integer sums Y0-Y3, started from the correction
// at corr and converted and scaled by da and the columns' scales at off
// bytes into the block-panel, into the float sums Y4-Y7 (Q6_16's halves).
func scaleSumsAVX2(corr string, off int) {
	p("VPBROADCASTD %s, Y13", corr)
	p("VBROADCASTSS (BX), Y14")
	for v := range 4 {
		p("VPADDD Y13, Y%d, Y%d", v, v)
		p("VCVTDQ2PS Y%d, Y%d", v, v)
		p("VMULPS Y14, Y%d, Y%d", v, v)
	}
	for v := range 4 {
		p("VCVTPH2PS %d(AX), Y13", off+16*v)
		p("VFMADD231PS Y13, Y%d, Y%d", v, 4+v)
	}
}

// quantRowAVX2 is quantRow with ymm registers: the int8 packing goes
// through VPACKSSDW and VPACKSSWB, which work within 128-bit lanes, and a
// VPERMD that puts the dwords back in order.
func quantRowAVX2() {
	out.WriteString(`DATA qperm<>+0(SB)/4, $0
DATA qperm<>+4(SB)/4, $4
DATA qperm<>+8(SB)/4, $1
DATA qperm<>+12(SB)/4, $5
DATA qperm<>+16(SB)/4, $2
DATA qperm<>+20(SB)/4, $6
DATA qperm<>+24(SB)/4, $3
DATA qperm<>+28(SB)/4, $7
GLOBL qperm<>(SB), RODATA|NOPTR, $32

// func quantRowAVX2(qa *int8, da *float32, sa *int32, x *float32, nb int)
TEXT ·quantRowAVX2(SB), NOSPLIT, $0-40
	MOVQ qa+0(FP), DI
	MOVQ da+8(FP), BX
	MOVQ sa+16(FP), CX
	MOVQ x+24(FP), SI
	MOVQ nb+32(FP), R8
	MOVL $0x7fffffff, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	MOVL $0x42fe0000, AX // 127
	VMOVD AX, X13
	MOVL $0x3f800000, AX // 1
	VMOVD AX, X14
	VMOVDQU qperm<>(SB), Y12
yrow:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	VANDPS Y15, Y0, Y4
	VANDPS Y15, Y1, Y5
	VANDPS Y15, Y2, Y6
	VANDPS Y15, Y3, Y7
	VMAXPS Y5, Y4, Y4
	VMAXPS Y7, Y6, Y6
	VMAXPS Y6, Y4, Y4
	VEXTRACTF128 $1, Y4, X5
	VMAXPS X5, X4, X4
	VPERMILPS $0x4e, X4, X5
	VMAXPS X5, X4, X4
	VPERMILPS $0xb1, X4, X5
	VMAXPS X5, X4, X4
	VDIVSS X13, X4, X8 // d = amax/127
	VMOVSS X8, (BX)
	VDIVSS X8, X14, X9 // 1/d
	VXORPS X10, X10, X10
	VCMPSS $4, X10, X8, X11 // d != 0
	VANDPS X11, X9, X9
	VBROADCASTSS X9, Y9
	VMULPS Y9, Y0, Y0
	VMULPS Y9, Y1, Y1
	VMULPS Y9, Y2, Y2
	VMULPS Y9, Y3, Y3
	VCVTPS2DQ Y0, Y0
	VCVTPS2DQ Y1, Y1
	VCVTPS2DQ Y2, Y2
	VCVTPS2DQ Y3, Y3
	VPADDD Y1, Y0, Y4
	VPADDD Y3, Y2, Y5
	VPADDD Y5, Y4, Y4
	VEXTRACTI128 $1, Y4, X5
	VPADDD X5, X4, X4
	VPSHUFD $0x4e, X4, X5
	VPADDD X5, X4, X4
	VPSHUFD $0xb1, X4, X5
	VPADDD X5, X4, X4
	VMOVD X4, (CX)
	VPACKSSDW Y1, Y0, Y0
	VPACKSSDW Y3, Y2, Y2
	VPACKSSWB Y2, Y0, Y0
	VPERMD Y0, Y12, Y0
	VMOVDQU Y0, (DI)
	ADDQ $128, SI
	ADDQ $32, DI
	ADDQ $4, BX
	ADDQ $4, CX
	DECQ R8
	JNZ yrow
	VZEROUPPER
	RET

`)
}

// types are the weight types, in QuantType order: Q8_0, Q4_0, Q4_1, Q5_1,
// IQ4_NL, Q6_16.
var types = []string{"Q8", "Q4", "Q41", "Q51", "QN", "Q6"}

func main() {
	out.WriteString("// Code generated by gen_quant.go; DO NOT EDIT.\n\n//go:build amd64 && !purego\n\n#include \"textflag.h\"\n\n")
	// Q5_1's constants: 16 in every byte; byte k of a 32-byte vector
	// takes byte k/8 of the broadcast mask, and its bit k%8.
	for i := range 8 {
		fmt.Fprintf(&out, "DATA q5bit<>+%d(SB)/4, $0x10101010\n", 4*i)
	}
	out.WriteString("GLOBL q5bit<>(SB), RODATA|NOPTR, $32\n")
	// Q6_16's high bits' mask: 0x30 in every byte.
	for i := range 8 {
		fmt.Fprintf(&out, "DATA q6m<>+%d(SB)/4, $0x30303030\n", 4*i)
	}
	out.WriteString("GLOBL q6m<>(SB), RODATA|NOPTR, $32\n")
	for k := range 32 {
		fmt.Fprintf(&out, "DATA q5shuf<>+%d(SB)/1, $%d\n", k, k/8)
	}
	out.WriteString("GLOBL q5shuf<>(SB), RODATA|NOPTR, $32\n")
	for k := range 32 {
		fmt.Fprintf(&out, "DATA q5sel<>+%d(SB)/1, $%d\n", k, 1<<(k%8))
	}
	out.WriteString("GLOBL q5sel<>(SB), RODATA|NOPTR, $32\n")
	// IQ4_NL's levels (ggml's kvalues_iq4nl) in every 16-byte lane: + 128
	// for VPDPBUSD's unsigned operand (iq4u), signed for the AVX2 sign
	// trick (iq4s).
	levels := []int{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}
	for k := range 64 {
		fmt.Fprintf(&out, "DATA iq4u<>+%d(SB)/1, $%d\n", k, levels[k%16]+128)
	}
	out.WriteString("GLOBL iq4u<>(SB), RODATA|NOPTR, $64\n")
	for k := range 32 {
		fmt.Fprintf(&out, "DATA iq4s<>+%d(SB)/1, $%d\n", k, uint8(int8(levels[k%16])))
	}
	out.WriteString("GLOBL iq4s<>(SB), RODATA|NOPTR, $32\n\n")
	for _, typ := range types {
		for r := 1; r <= 7; r++ {
			kernel(typ, r)
		}
	}
	quantRow()
	for _, typ := range types {
		kernelAVX2(typ, false)
	}
	for _, typ := range types {
		kernelAVX2(typ, true)
	}
	quantRowAVX2()
	if err := os.WriteFile("quant_amd64.s", out.Bytes(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The Go declarations, the tables and the dispatch.
	var g bytes.Buffer
	g.WriteString("// Code generated by gen_quant.go; DO NOT EDIT.\n\n//go:build amd64 && !purego\n\npackage kernels\n\n")
	var names []string
	for _, typ := range types {
		for r := 1; r <= 7; r++ {
			names = append(names, fmt.Sprintf("%sx%d", typ, r))
		}
	}
	for _, typ := range types {
		names = append(names, typ+"AVX2")
	}
	for _, typ := range types {
		names = append(names, typ+"VNNI")
	}
	g.WriteString("// The kernels as qKernel values (see qKernel.call).\nconst (\n")
	for i, n := range names {
		if i == 0 {
			fmt.Fprintf(&g, "\tq%s qKernel = iota + 1\n", n)
		} else {
			fmt.Fprintf(&g, "\tq%s\n", n)
		}
	}
	g.WriteString(")\n\n")
	g.WriteString("// quantAVX512 is the AVX-512 VNNI kernel table (quant_amd64.s).\nvar quantAVX512 = quantArch{kern: [quantTypes][qRows + 1]qKernel{\n")
	for _, typ := range types {
		g.WriteString("\t{0")
		for r := 1; r <= 7; r++ {
			fmt.Fprintf(&g, ", q%sx%d", typ, r)
		}
		g.WriteString("},\n")
	}
	g.WriteString("}, rows: qRows}\n\n")
	// The tables of the one-row kernels.
	for _, t := range []struct{ doc, name, suffix string }{
		{"the AVX2 kernel table", "quantAVX2", "AVX2"},
		{"the AVX2 kernel table with AVX-VNNI's VPDPBUSD", "quantVNNI", "VNNI"},
	} {
		fmt.Fprintf(&g, "// %s is %s: one row of A per call.\nvar %s = quantArch{kern: [quantTypes][qRows + 1]qKernel{", t.name, t.doc, t.name)
		for i, typ := range types {
			if i > 0 {
				g.WriteString(", ")
			}
			fmt.Fprintf(&g, "{0, q%s%s}", typ, t.suffix)
		}
		g.WriteString("}, rows: 1}\n\n")
	}
	g.WriteString("// call runs kernel k on p. Each kernel is called directly, not through\n// a func value, so that p does not escape: the caller's arguments stay on\n// its stack instead of costing an allocation per tile.\nfunc (k qKernel) call(p *qArgs) {\n\tswitch k {\n")
	for _, n := range names {
		fmt.Fprintf(&g, "\tcase q%s:\n\t\tqkern%s(p)\n", n, n)
	}
	g.WriteString("\tdefault:\n\t\tpanic(\"kernels: no quantized kernel \" + k.String())\n\t}\n}\n")
	for _, n := range names {
		fmt.Fprintf(&g, "\n//go:noescape\nfunc qkern%s(p *qArgs)\n", n)
	}
	g.WriteString("\n//go:noescape\nfunc quantRowAVX512(qa *int8, da *float32, sa *int32, x *float32, nb int)\n")
	g.WriteString("\n//go:noescape\nfunc quantRowAVX2(qa *int8, da *float32, sa *int32, x *float32, nb int)\n")
	if err := os.WriteFile("quant_amd64.go", g.Bytes(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
