package kernels

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"unsafe"
)

// Block-quantized weights: ggml's Q8_0, Q4_0, Q4_1, Q5_1 and IQ4_NL, and
// compute's Q6_16 (Q6_K's values, a scale for each 16; see package
// compute for the block layout they arrive in), multiplied as llama.cpp
// multiplies them: the activations are quantized to int8 per block of 32
// (a scale d = max|x|/127 and q = round(x/d)), and a block's product is
// an integer dot product scaled by the weight's and the activation's
// scales (Q6_16: each half block's by its own); Q4_1's minimum m adds
// m·dx·Σq of the activation block, as llama.cpp's Q8_1 activations carry
// it.
//
// # Layout
//
// The blocks are repacked once, when the weight is made (PackQuant), into
// panels of 32 weight rows (output columns of the product): panel p holds
// rows 32p..32p+31, block after block along k, and a block of a panel
// (a "block-panel") is
//
//	64 bytes: the 32 rows' scales, IEEE half, row order
//	Q4_1 only: 64 bytes, the 32 rows' minimums, IEEE half, row order
//	Q8_0: 8 steps × 2 × 64 bytes: step s (k = 4s..4s+3 of the block),
//	      rows 0-15 then rows 16-31, 4 bytes a row: q + 128 (unsigned)
//	Q4_0: 8 steps × 64 bytes: step s, 4 bytes a row for rows 0-15, the
//	      low nibble row r's q and the high nibble row r+16's (0..15,
//	      offset 8 as in ggml)
//	Q4_1: as Q4_0 (0..15, no offset)
//	IQ4_NL: as Q4_0, each nibble an index into iq4Levels (the kernels
//	      look the nibbles up as level + 128, unsigned, Q8_0's offset)
//	Q5_1: as Q4_1, then 8 steps × 16 bytes of fifth bits (highBit)
//	Q6_16: 64 more bytes after the scales, the 32 rows' scales of the
//	      block's second 16 values (the first 64 scale values 0-15); then
//	      two groups of four steps, each four steps of nibbles as Q4_1's
//	      (q 0..63, offset 32; nibOff) followed by their high two bits, 2
//	      vectors × 64 bytes: byte i of vector v of group g holds, at bits
//	      2t and 2t+1, those of the value at byte i of step 4g+t's nibble
//	      vector v (v 0: the low nibbles, rows 0-15; 1: the high ones, rows
//	      16-31), so that a shift by 4−2t and a mask put them above the
//	      nibble; the block-panel is read in order (a decode step ran at
//	      0.88× the speed with the high bits after all the nibbles)
//
// 1088, 576, 640, 768 or 896 bytes, 64-byte aligned; the bytes per weight
// are ggml's (34, 18, 20 or 24 per 32) but for Q6_16's (28 per 32 in its
// blocks, 7 bits a weight in the panels, against Q6_K's 6.56). It is the layout of an outer-product kernel: one
// 64-byte load is 16 rows × 4 values of k, which VPDPBUSD (AVX-512 VNNI)
// multiplies by 4 bytes of an activation row broadcast to every lane, 64
// products into 16 sums. The kernel keeps a tile of up to 7 activation
// rows × 32 weight rows in registers (14 integer and 14 float
// accumulators): after the 8 steps of a block, the integer sums are
// converted and scaled (dx of the row, then dw of each column: a vector
// of the block-panel's scales) into the float ones. The same kernel at
// one activation row is the decode product: the weights are one
// sequential stream, panel after panel, and per 64 bytes of weights it
// runs three instructions, far below what memory delivers.
//
// VPDPBUSD multiplies unsigned bytes by signed ones; the weights are
// the unsigned side (Q8_0 stored with +128, Q4_0's nibbles as they are,
// IQ4_NL's nibbles looked up as their level + 128) and the quantized
// activations the signed one, so the sum is off by 128·Σq (or 8·Σq) of
// the activation block, which the integer accumulators start from
// (negated) instead of zero.

// QuantType is a block-quantized weight format.
type QuantType uint8

const (
	QuantQ8_0  QuantType = iota + 1 // ggml Q8_0: 34 bytes per 32 weights
	QuantQ4_0                       // ggml Q4_0: 18 bytes per 32 weights
	QuantQ4_1                       // ggml Q4_1: 20 bytes per 32 weights
	QuantQ5_1                       // ggml Q5_1: 24 bytes per 32 weights
	QuantIQ4NL                      // ggml IQ4_NL: 18 bytes per 32 weights
	QuantQ6_16                      // Q6_K's values, a half scale per 16: 28 bytes per 32 weights
)

// quantTypes is how many QuantTypes there are (the kernel tables' size).
const quantTypes = 6

func (t QuantType) String() string {
	switch t {
	case QuantQ8_0:
		return "Q8_0"
	case QuantQ4_0:
		return "Q4_0"
	case QuantQ4_1:
		return "Q4_1"
	case QuantQ5_1:
		return "Q5_1"
	case QuantIQ4NL:
		return "IQ4_NL"
	case QuantQ6_16:
		return "Q6_16"
	}
	return fmt.Sprintf("QuantType(%d)", uint8(t))
}

// iq4Levels are the int8 values IQ4_NL's nibbles select (ggml's
// kvalues_iq4nl; compute.IQ4NLLevels, which this package cannot import).
var iq4Levels = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// qk is the block size of the formats.
const qk = 32

// qPanel is the rows of a panel.
const qPanel = 32

// blockBytes is the bytes of one ggml block of t.
func (t QuantType) blockBytes() int {
	switch t {
	case QuantQ8_0:
		return 2 + qk
	case QuantQ4_1:
		return 4 + qk/2
	case QuantQ5_1:
		return 8 + qk/2
	case QuantQ6_16:
		return 4 + qk/2 + qk/4
	}
	return 2 + qk/2
}

// panelBlockBytes is the bytes of one block-panel of t.
func (t QuantType) panelBlockBytes() int {
	switch t {
	case QuantQ5_1:
		return t.hbOff() + 8*16
	case QuantQ6_16:
		return t.qOff() + 8*64 + 8*32
	}
	return t.qOff() + 8*t.stepBytes()
}

// qOff is where the quantized values of a block-panel of t start: after
// the scales (and Q4_1's and Q5_1's minimums, Q6_16's second scales).
func (t QuantType) qOff() int {
	if t.affine() || t == QuantQ6_16 {
		return 128
	}
	return 64
}

// nibOff is where step s's nibbles lie from qOff: 64 bytes a step, and
// for Q6_16 each group of four steps' high bits after the group.
func (t QuantType) nibOff(s int) int {
	if t == QuantQ6_16 {
		return 64*s + 128*(s/4)
	}
	return 64 * s
}

// hbOff is where the fifth bits of a Q5_1 block-panel start, after the
// nibbles, 16 bytes a step (see the layout above).
func (t QuantType) hbOff() int { return t.qOff() + 8*64 }

// affine reports whether t's blocks have a minimum (x = d·q + m).
func (t QuantType) affine() bool { return t == QuantQ4_1 || t == QuantQ5_1 }

// stepBytes is the bytes of one step (4 values of k) of a block-panel.
func (t QuantType) stepBytes() int {
	if t == QuantQ8_0 {
		return 128
	}
	return 64
}

// offset is what the stored weights of t exceed the signed values by
// (IQ4_NL's as the kernels see them: each nibble's level + 128).
func (t QuantType) offset() int32 {
	switch t {
	case QuantQ8_0, QuantIQ4NL:
		return 128
	case QuantQ4_0:
		return 8
	case QuantQ6_16:
		return 32
	}
	return 0
}

// QMatrix is a quantized weight [N, K] in the packed layout (see above).
// It is read-only once made; Rows makes views that share it.
type QMatrix struct {
	typ    QuantType
	n, k   int // rows of this view, columns
	row0   int // the view's first row in the panels
	nb     int // blocks per row
	panels []byte
}

// Type is the format of m.
func (m *QMatrix) Type() QuantType { return m.typ }

// Dims returns m's rows and columns.
func (m *QMatrix) Dims() (n, k int) { return m.n, m.k }

// Bytes is the memory of the panels m's rows lie in.
func (m *QMatrix) Bytes() int {
	return m.panelsOf() * m.nb * m.typ.panelBlockBytes()
}

// panelsOf is the number of panels m's rows span.
func (m *QMatrix) panelsOf() int {
	if m.n == 0 {
		return 0
	}
	return (m.row0+m.n-1)/qPanel - m.row0/qPanel + 1
}

// Rows returns a view of rows [lo, hi) of m sharing its memory. A view
// whose first row is not a multiple of 32 can be read (Row) but not
// multiplied.
func (m *QMatrix) Rows(lo, hi int) *QMatrix {
	if lo < 0 || hi < lo || hi > m.n {
		panic(fmt.Sprintf("kernels: Rows [%d,%d) of a quantized matrix of %d rows", lo, hi, m.n))
	}
	v := *m
	v.row0, v.n = m.row0+lo, hi-lo
	return &v
}

// panel returns the bytes of panel p (counted from the panels' start).
func (m *QMatrix) panel(p int) []byte {
	sz := m.nb * m.typ.panelBlockBytes()
	return m.panels[p*sz : (p+1)*sz]
}

// PackQuant makes a QMatrix of n rows of k values (k a multiple of 32)
// from ggml blocks of type t (n·k/32 blocks, row after row), on pl's
// threads.
func (pl *Pool) PackQuant(t QuantType, blocks []byte, n, k int) (*QMatrix, error) {
	if t < QuantQ8_0 || t > QuantQ6_16 {
		return nil, fmt.Errorf("kernels: PackQuant of %v", t)
	}
	if n < 0 || k <= 0 || k%qk != 0 {
		return nil, fmt.Errorf("kernels: a quantized matrix needs rows of a positive multiple of %d values, not %d", qk, k)
	}
	nb := k / qk
	if len(blocks) != n*nb*t.blockBytes() {
		return nil, fmt.Errorf("kernels: %d×%d %v needs %d bytes of blocks, got %d", n, k, t, n*nb*t.blockBytes(), len(blocks))
	}
	np := (n + qPanel - 1) / qPanel
	m := &QMatrix{typ: t, n: n, k: k, nb: nb, panels: panelSlab.alloc(np * nb * t.panelBlockBytes())}
	pl.For(np, max(1, (256<<10)/(nb*t.panelBlockBytes())), func(lo, hi int) {
		for p := lo; p < hi; p++ {
			m.packPanel(p, blocks)
		}
	})
	return m, nil
}

// PackQuant is Default().PackQuant.
func PackQuant(t QuantType, blocks []byte, n, k int) (*QMatrix, error) {
	return defaultPool.PackQuant(t, blocks, n, k)
}

// packPanel fills panel p from the ggml blocks (rows past n stay zero:
// scale 0).
func (m *QMatrix) packPanel(p int, blocks []byte) {
	bb, pb := m.typ.blockBytes(), m.typ.panelBlockBytes()
	dst := m.panel(p)
	for c := range qPanel {
		r := p*qPanel + c
		if r >= m.n {
			break
		}
		for b := range m.nb {
			src := blocks[(r*m.nb+b)*bb : (r*m.nb+b+1)*bb]
			d := dst[b*pb : (b+1)*pb]
			d[2*c], d[2*c+1] = src[0], src[1]
			qs := src[2:]
			if m.typ.affine() {
				d[64+2*c], d[64+2*c+1] = src[2], src[3]
				qs = src[4:]
			}
			switch m.typ {
			case QuantQ5_1:
				qh := uint32(src[4]) | uint32(src[5])<<8 | uint32(src[6])<<16 | uint32(src[7])<<24
				qs = src[8:]
				// As highBit places them: bit (c%16)·4 + j%4 of mask
				// c/16 of step j/4.
				hb := QuantQ5_1.hbOff() + 8*(c/16)
				for j := range qk {
					i := (c%16)*4 + j%4
					d[hb+16*(j/4)+i/8] |= byte(qh>>j&1) << (i % 8)
				}
			case QuantQ6_16:
				d[64+2*c], d[64+2*c+1] = src[2], src[3]
				qs = src[4:]
				// The high bits, as highBit places them: byte
				// (c%16)·4 + j%4 of vector c/16 of group j/16, at bits
				// 2·(j/4 % 4).
				qh := src[4+qk/2:]
				hb := QuantQ6_16.qOff() + 256 + 64*(c/16) + (c%16)*4
				for j := range qk {
					s := j / 4
					d[hb+384*(s/4)+j%4] |= q6High(qh, j) << (2 * (s % 4))
				}
			}
			if m.typ == QuantQ8_0 {
				for j := range qk {
					s, e := j/4, j%4
					d[64+128*s+(c/16)*64+(c%16)*4+e] = qs[j] ^ 0x80
				}
				continue
			}
			qo := m.typ.qOff()
			for j := range qk {
				s, e := j/4, j%4
				var nib byte
				if j < 16 {
					nib = qs[j] & 0x0F
				} else {
					nib = qs[j-16] >> 4
				}
				o := qo + m.typ.nibOff(s) + (c%16)*4 + e
				if c < 16 {
					d[o] |= nib
				} else {
					d[o] |= nib << 4
				}
			}
		}
	}
}

// allocAligned returns n zero bytes at a 64-byte aligned address, advised
// to use huge pages when large (see AllocF32).
func allocAligned(n int) []byte {
	buf := make([]byte, n+64)
	off := int((64 - uintptr(unsafe.Pointer(unsafe.SliceData(buf)))%64) % 64)
	out := buf[off : off+n : off+n]
	if n >= hugeMin {
		adviseHuge(out)
	}
	return out
}

// f16to32 widens an IEEE half exactly.
func f16to32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	}
	v := float32(mant) * (1.0 / (1 << 24))
	if sign != 0 {
		v = -v
	}
	return v
}

// scale returns the scale of row c (0..31) of block b of panel pan (for
// Q6_16, of its values 0-15).
func (m *QMatrix) scale(pan []byte, b, c int) float32 {
	o := b*m.typ.panelBlockBytes() + 2*c
	return f16to32(uint16(pan[o]) | uint16(pan[o+1])<<8)
}

// scaleOf returns the scale of element j of row c of block b of panel
// pan: scale's, or for Q6_16's values 16-31 their own.
func (m *QMatrix) scaleOf(pan []byte, b, c, j int) float32 {
	if m.typ != QuantQ6_16 || j < qk/2 {
		return m.scale(pan, b, c)
	}
	o := b*m.typ.panelBlockBytes() + 64 + 2*c
	return f16to32(uint16(pan[o]) | uint16(pan[o+1])<<8)
}

// highBit returns where bit 4+pl of row c, element j lies in a Q5_1
// block-panel (pl 0: the fifth bit) or a Q6_16 one (pl 0 or 1): the byte
// (from the block-panel's start) and the bit. A Q5_1 step's 16 bytes are
// two 64-bit masks, for the nibble vectors of rows 0-15 and of rows
// 16-31: bit i of a mask is byte i of its vector (row i/4, element 4s +
// i%4), as the kernel's VPMOVM2B expands it. Q6_16's are in the layout
// above.
func highBit(t QuantType, c, j, pl int) (byte, bit int) {
	s, e := j/4, j%4
	i := (c%16)*4 + e
	if t == QuantQ6_16 {
		return t.qOff() + 384*(s/4) + 256 + 64*(c/16) + i, 2*(s%4) + pl
	}
	return t.hbOff() + 16*s + 8*(c/16) + i/8, i % 8
}

// q6High is the two high bits of element j (0..31) of a Q6_16 block from
// its qh, 8 bytes: byte j%8 holds elements j%8, +8, +16, +24 at bits 0-1,
// 2-3, 4-5, 6-7 (compute's Q6_16 layout).
func q6High(qh []byte, j int) byte { return qh[j%8] >> (2 * (j / 8)) & 3 }

// minimum returns the minimum of row c of block b of a Q4_1 or Q5_1
// panel pan (0 for the other types).
func (m *QMatrix) minimum(pan []byte, b, c int) float32 {
	if !m.typ.affine() {
		return 0
	}
	o := b*m.typ.panelBlockBytes() + 64 + 2*c
	return f16to32(uint16(pan[o]) | uint16(pan[o+1])<<8)
}

// q returns the signed quantized value of row c, element j of block b of
// panel pan (Q4_1's, 0..15, as they are).
func (m *QMatrix) q(pan []byte, b, c, j int) int32 {
	o := b * m.typ.panelBlockBytes()
	s, e := j/4, j%4
	if m.typ == QuantQ8_0 {
		return int32(pan[o+64+128*s+(c/16)*64+(c%16)*4+e]) - 128
	}
	v := pan[o+m.typ.qOff()+m.typ.nibOff(s)+(c%16)*4+e]
	if c >= 16 {
		v >>= 4
	}
	q := int32(v & 0x0F)
	switch m.typ {
	case QuantQ5_1:
		hb, bit := highBit(m.typ, c, j, 0)
		q |= int32(pan[o+hb]>>bit&1) << 4
	case QuantQ6_16:
		for pl := range 2 {
			hb, bit := highBit(m.typ, c, j, pl)
			q |= int32(pan[o+hb]>>bit&1) << (4 + pl)
		}
	case QuantIQ4NL:
		return int32(iq4Levels[q])
	}
	return q - m.typ.offset()
}

// Row writes row r of m, dequantized, into dst (len K): exactly, d·q,
// for Q8_0 and Q4_0; d·q + m in float32 for Q4_1, as ggml computes it.
func (m *QMatrix) Row(dst []float32, r int) {
	if r < 0 || r >= m.n || len(dst) != m.k {
		panic(fmt.Sprintf("kernels: Row %d of a quantized matrix of %d rows into %d values", r, m.n, len(dst)))
	}
	r += m.row0
	pan, c := m.panel(r/qPanel), r%qPanel
	pb := m.typ.panelBlockBytes()
	var q [qk]int32
	for b := range m.nb {
		m.typ.blockValues(&q, pan[b*pb:(b+1)*pb], c)
		d, mn := m.scale(pan, b, c), m.minimum(pan, b, c)
		out := dst[b*qk : (b+1)*qk]
		for j := range out {
			if j == qk/2 && m.typ == QuantQ6_16 {
				d = m.scaleOf(pan, b, c, j)
			}
			out[j] = float32(d*float32(q[j])) + mn // no fused multiply-add: ggml's rounding
		}
	}
}

// blockValues writes the signed quantized values of row c of the
// block-panel blk (q's, block by block: what Row dequantizes a training
// step's matrices with, ten times faster than element by element).
func (t QuantType) blockValues(q *[qk]int32, blk []byte, c int) {
	if t == QuantQ8_0 {
		base := 64 + (c/16)*64 + (c%16)*4
		for s := range 8 {
			w := blk[base+128*s : base+128*s+4]
			for e, v := range w {
				q[4*s+e] = int32(v) - 128
			}
		}
		return
	}
	sh := 4 * uint(c/16)
	base := t.qOff() + (c%16)*4
	off := t.offset()
	for s := range 8 {
		w := blk[base+t.nibOff(s) : base+t.nibOff(s)+4]
		for e, v := range w {
			q[4*s+e] = int32(v>>sh&0x0F) - off
		}
	}
	switch t {
	case QuantIQ4NL:
		for j := range q {
			q[j] = int32(iq4Levels[q[j]+off])
		}
	case QuantQ5_1: // see highBit
		hb := t.hbOff() + 8*(c/16) + (c%16)/2
		bs := 4 * uint(c%2)
		for s := range 8 {
			h := blk[hb+16*s] >> bs
			for e := range 4 {
				q[4*s+e] |= int32(h>>e&1) << 4
			}
		}
	case QuantQ6_16:
		hb := t.qOff() + 256 + 64*(c/16) + (c%16)*4
		for s := range 8 {
			w := blk[hb+384*(s/4) : hb+384*(s/4)+4]
			for e, v := range w {
				q[4*s+e] += int32(v>>(2*(s%4))&3) << 4
			}
		}
	}
}

// QuantizeRows quantizes the m rows of a (row stride lda, k values each,
// k a multiple of 32) to int8 blocks as the quantized products do: for
// each block, da = max|x|/127, q = round-to-even(x·(1/da)) (0 for a block
// of zeros), and sa = Σq. qa has row stride k, da and sa k/32.
func QuantizeRows(qa []int8, da []float32, sa []int32, a []float32, m, k, lda int) {
	checkMat("A", len(a), m, k, lda)
	if k%qk != 0 || len(qa) < m*k || len(da) < m*k/qk || len(sa) < m*k/qk {
		panic(fmt.Sprintf("kernels: QuantizeRows of %d×%d into %d, %d, %d", m, k, len(qa), len(da), len(sa)))
	}
	f := active.Load().quantRow
	nb := k / qk
	for i := range m {
		if f != nil && nb > 0 {
			f(&qa[i*k], &da[i*nb], &sa[i*nb], &a[i*lda], nb)
			continue
		}
		quantizeRowGeneric(qa[i*k:(i+1)*k], da[i*nb:(i+1)*nb], sa[i*nb:(i+1)*nb], a[i*lda:i*lda+k])
	}
}

// quantizeRowGeneric quantizes one row (see QuantizeRows).
func quantizeRowGeneric(qa []int8, da []float32, sa []int32, x []float32) {
	for b := range len(x) / qk {
		blk := x[b*qk : (b+1)*qk]
		var amax float32
		for _, v := range blk {
			amax = max(amax, math.Float32frombits(math.Float32bits(v)&^(1<<31)))
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		var s int32
		for j, v := range blk {
			q := int32(math.RoundToEven(float64(v * id)))
			qa[b*qk+j] = int8(q)
			s += q
		}
		da[b], sa[b] = d, s
	}
}

// quantArch is one architecture's quantized kernels.
type quantArch struct {
	// kern[t][r] computes an r×32·np tile (r = 1..rows) for weights of
	// type t (index 0 Q8_0, 1 Q4_0, 2 Q4_1); see qArgs.
	kern [quantTypes][qRows + 1]qKernel
	rows int // the most rows of A a call takes (≤ qRows)
}

// qKernel names one assembly kernel (0: none); qKernel.call runs it.
type qKernel uint8

func (k qKernel) String() string { return fmt.Sprintf("qKernel(%d)", uint8(k)) }

// qRows is the most activation rows a kernel call takes.
const qRows = 7

// qArgs are the arguments of a quantized kernel call (the assembly
// reads them by offset: keep the order, every field 8 bytes). The call
// computes, for each of np panels from w on (contiguous) and each row i
// < r of the tile, C[i, 32 columns of the panel] (+)= Σ over nb blocks of
// dw·(da[i,b]·(corr[i,b] + Σ_k w_u·a)), with w_u the stored unsigned
// weights: corr = −offset·Σq of the activation block. For Q4_1 the
// integer sums start from 0 and corr is a float32, da·Σq, which the
// block's minimums multiply: C += dw·(da·Σ w_u·a) + m·corr. For Q6_16
// each half of a block is such a product, with its own scales and corr
// (−32·Σq over the half): corr holds the first halves', and the second
// halves' lie chi bytes after them, in the same layout. It decrements np
// to zero.
type qArgs struct {
	w    unsafe.Pointer // first panel
	np   int            // panels
	nb   int            // blocks per row
	a    unsafe.Pointer // int8 activations, row 0 of the tile
	lda  int            // bytes between rows of a
	da   unsafe.Pointer // float32 scales, row 0 (nb of them)
	corr unsafe.Pointer // int32 corrections (Q4_1: float32), row 0
	lds  int            // bytes between rows of da and of corr
	c    unsafe.Pointer // float32 C, row 0, the panel's first column
	ldc  int            // bytes between rows of C
	beta int            // nonzero: add into C
	chi  int            // Q6_16: bytes from corr to the second halves' corrections
}

// qScratch holds the quantized activations of a product.
type qScratch struct {
	qa   []int8
	da   []float32
	sa   []int32
	corr [quantTypes][]int32
}

var qScratchPool = sync.Pool{New: func() any { return new(qScratch) }}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n, n+n/4)
	}
	return s[:n]
}

// quantPart is one product of a quantized pass.
type quantPart struct {
	w    *QMatrix
	c    []float32
	ldc  int
	beta bool
}

// quantPass is the quantized products over one quantized A.
type quantPass struct {
	qa   []int8
	da   []float32
	corr [quantTypes][]int32 // Q4_1's: float32 bits (see qArgs)
	m, k int
	kern *quantArch // nil: generic Go
}

// LinearQuant computes C[m,n] = A[m,k]·Wᵀ (C += with accumulate) for a
// quantized W (n×k), on pl's threads.
func (pl *Pool) LinearQuant(c, a []float32, w *QMatrix, m int, accumulate bool) {
	pl.LinearMultiPrec(a, m, w.k, []LinearOut{{C: c, Q: w, N: w.n, Accumulate: accumulate}}, PrecisionF32)
}

// linearQuantParts runs the quantized outs (all with Q set) of a
// LinearMulti call: A is quantized once, then every part's panels are
// spread over the threads in one pass.
func (pl *Pool) linearQuantParts(a []float32, m, k int, outs []LinearOut) {
	if m == 0 {
		return
	}
	if k == 0 {
		for _, o := range outs {
			if !o.Accumulate {
				clear(o.C[:m*o.N])
			}
		}
		return
	}
	nb := k / qk
	sc := qScratchPool.Get().(*qScratch)
	defer qScratchPool.Put(sc)
	sc.qa, sc.da, sc.sa = grow(sc.qa, m*k), grow(sc.da, m*nb), grow(sc.sa, m*nb)
	if grain := max(1, (64<<10)/k); m <= grain {
		QuantizeRows(sc.qa, sc.da, sc.sa, a, m, k, k)
	} else {
		pl.For(m, grain, func(lo, hi int) {
			QuantizeRows(sc.qa[lo*k:], sc.da[lo*nb:], sc.sa[lo*nb:], a[lo*k:], hi-lo, k, k)
		})
	}
	ps := &quantPass{qa: sc.qa, da: sc.da, m: m, k: k, kern: active.Load().quant}
	parts := make([]quantPart, 0, len(outs))
	units := 0 // panels
	for _, o := range outs {
		w := o.Q
		if w.row0%qPanel != 0 {
			panic(fmt.Sprintf("kernels: a quantized weight view starting at row %d (not a multiple of %d) cannot be multiplied", w.row0, qPanel))
		}
		t := int(w.typ - 1)
		if ps.corr[t] == nil && w.typ == QuantQ6_16 {
			// A correction for each half block, the first halves' then
			// the second halves'.
			sc.corr[t] = grow(sc.corr[t], 2*m*nb)
			off := w.typ.offset()
			for i := range m * nb {
				var lo, hi int32
				for j, q := range sc.qa[i*qk : (i+1)*qk] {
					if j < qk/2 {
						lo += int32(q)
					} else {
						hi += int32(q)
					}
				}
				sc.corr[t][i], sc.corr[t][m*nb+i] = -off*lo, -off*hi
			}
			ps.corr[t] = sc.corr[t]
		}
		if ps.corr[t] == nil {
			sc.corr[t] = grow(sc.corr[t], m*nb)
			off := w.typ.offset()
			for i, s := range sc.sa[:m*nb] {
				if w.typ.affine() {
					sc.corr[t][i] = int32(math.Float32bits(sc.da[i] * float32(s)))
					continue
				}
				sc.corr[t][i] = -off * s
			}
			ps.corr[t] = sc.corr[t]
		}
		parts = append(parts, quantPart{w: w, c: o.C, ldc: o.N, beta: o.Accumulate})
		units += w.panelsOf()
	}
	if units == 0 {
		return
	}
	// Work per panel: bytes of weights at small m (decode, bound by
	// memory), flops at large m.
	pbytes := nb * QuantQ8_0.panelBlockBytes()
	t := min(pl.Threads(), units, max(1, units*pbytes/minGemvBytes, m*units*qPanel*k/minGemmWork))
	if t <= 1 {
		ps.run(parts, 0, units)
		return
	}
	blk := max(1, min(gemvStealBytes/pbytes, units/(4*t), gemvStealFlops/(2*m*k*qPanel)))
	pl.forStealing(t, units, blk, func(lo, hi int) { ps.run(parts, lo, hi) })
}

// run computes panels [lo, hi) of the parts' panels, in order.
func (ps *quantPass) run(parts []quantPart, lo, hi int) {
	off := 0
	for i := range parts {
		p := &parts[i]
		np := p.w.panelsOf()
		p0, p1 := max(lo-off, 0), min(hi-off, np)
		off += np
		if p0 < p1 {
			ps.panels(p, p0, p1)
		}
	}
}

// panels computes panels [p0, p1) of part p (counted from its view's
// first panel) for every row of A, in tiles of qRows rows.
func (ps *quantPass) panels(p *quantPart, p0, p1 int) {
	w := p.w
	first := w.row0 / qPanel
	full := p1 // panels wholly inside the view's rows
	if (p1)*qPanel > w.n {
		full = p1 - 1
	}
	t := int(w.typ - 1)
	rows := qRows
	if ps.kern != nil {
		rows = ps.kern.rows
	}
	for i0 := 0; i0 < ps.m; i0 += rows {
		r := min(rows, ps.m-i0)
		if full > p0 {
			ps.tile(w, t, first+p0, full-p0, i0, r, p.c[i0*p.ldc+p0*qPanel:], p.ldc, p.beta)
		}
		if full < p1 { // the last panel, partial: through a tile of 32 columns
			var tmp [qRows * qPanel]float32
			ps.tile(w, t, first+full, 1, i0, r, tmp[:], qPanel, false)
			cols := w.n - full*qPanel
			for i := range r {
				dst := p.c[(i0+i)*p.ldc+full*qPanel : (i0+i)*p.ldc+full*qPanel+cols]
				src := tmp[i*qPanel : i*qPanel+cols]
				if p.beta {
					for j, v := range src {
						dst[j] += v
					}
				} else {
					copy(dst, src)
				}
			}
		}
	}
}

// tile computes rows [i0, i0+r) of A against np panels from panel pan0
// of w (absolute), into c (row stride ldc floats).
func (ps *quantPass) tile(w *QMatrix, t, pan0, np, i0, r int, c []float32, ldc int, beta bool) {
	nb := w.k / qk
	if ps.kern != nil {
		args := qArgs{
			w: unsafe.Pointer(&w.panels[pan0*nb*w.typ.panelBlockBytes()]), np: np, nb: nb,
			a: unsafe.Pointer(&ps.qa[i0*ps.k]), lda: ps.k,
			da: unsafe.Pointer(&ps.da[i0*nb]), corr: unsafe.Pointer(&ps.corr[t][i0*nb]), lds: 4 * nb,
			c: unsafe.Pointer(&c[0]), ldc: 4 * ldc, chi: 4 * ps.m * nb,
		}
		if beta {
			args.beta = 1
		}
		// Bounds the assembly trusts.
		_ = w.panels[(pan0+np)*nb*w.typ.panelBlockBytes()-1]
		_ = c[(r-1)*ldc+np*qPanel-1]
		if w.typ == QuantQ6_16 {
			_ = ps.corr[t][(ps.m+i0+r)*nb-1]
		}
		ps.kern.kern[t][r].call(&args)
		return
	}
	var corrHi []int32
	if w.typ == QuantQ6_16 {
		corrHi = ps.corr[t][(ps.m+i0)*nb:]
	}
	qTileGeneric(w, pan0, np, ps.qa[i0*ps.k:], ps.k, ps.da[i0*nb:], ps.corr[t][i0*nb:], corrHi, r, c, ldc, beta)
}

// qTileGeneric is the kernel in Go: the definition the assembly must
// agree with (up to the order of float32 sums). corrHi are Q6_16's
// corrections of the second halves of the blocks.
func qTileGeneric(w *QMatrix, pan0, np int, qa []int8, lda int, da []float32, corr, corrHi []int32, r int, c []float32, ldc int, beta bool) {
	nb := w.k / qk
	off := w.typ.offset()
	q41 := w.typ.affine()
	for p := range np {
		pan := w.panel(pan0 + p)
		for i := range r {
			for col := range qPanel {
				var acc float32
				for b := range nb {
					if w.typ == QuantQ6_16 {
						for h, start := range [2]int32{corr[i*nb+b], corrHi[i*nb+b]} {
							s := start
							for j := h * qk / 2; j < (h+1)*qk/2; j++ {
								s += (w.q(pan, b, col, j) + off) * int32(qa[i*lda+b*qk+j])
							}
							acc += w.scaleOf(pan, b, col, h*qk/2) * (float32(s) * da[i*nb+b])
						}
						continue
					}
					s := corr[i*nb+b]
					if q41 {
						s = 0
					}
					for j := range qk {
						s += (w.q(pan, b, col, j) + off) * int32(qa[i*lda+b*qk+j])
					}
					acc += w.scale(pan, b, col) * (float32(s) * da[i*nb+b])
					if q41 {
						acc += w.minimum(pan, b, col) * math.Float32frombits(uint32(corr[i*nb+b]))
					}
				}
				o := i*ldc + p*qPanel + col
				if beta {
					c[o] += acc
				} else {
					c[o] = acc
				}
			}
		}
	}
}

// LinearQuant is Default().LinearQuant.
func LinearQuant(c, a []float32, w *QMatrix, m int, accumulate bool) {
	defaultPool.LinearQuant(c, a, w, m, accumulate)
}

// NewQMatrix returns a quantized matrix of n rows of k values (k a
// multiple of 32) whose every value is zero.
func NewQMatrix(t QuantType, n, k int) (*QMatrix, error) {
	blocks := make([]byte, 0)
	if n > 0 {
		blocks = make([]byte, n*k/qk*t.blockBytes()) // zero scales
	}
	return defaultPool.PackQuant(t, blocks, n, k)
}

// CopyFrom copies the values of src into m: the same type and shape.
func (m *QMatrix) CopyFrom(src *QMatrix) {
	if m.typ != src.typ || m.n != src.n || m.k != src.k {
		panic(fmt.Sprintf("kernels: copy of a %v %d×%d quantized matrix into a %v %d×%d one", src.typ, src.n, src.k, m.typ, m.n, m.k))
	}
	if m.n == 0 {
		return
	}
	pb := m.nb * m.typ.panelBlockBytes()
	r := 0
	if m.row0%qPanel == 0 && src.row0%qPanel == 0 { // whole panels at once
		full := m.n / qPanel
		d0, s0 := m.row0/qPanel*pb, src.row0/qPanel*pb
		copy(m.panels[d0:d0+full*pb], src.panels[s0:s0+full*pb])
		r = full * qPanel
	}
	for ; r < m.n; r++ {
		dr, sr := m.row0+r, src.row0+r
		dp, sp := m.panel(dr/qPanel), src.panel(sr/qPanel)
		dc, scol := dr%qPanel, sr%qPanel
		for b := range m.nb {
			o := b * m.typ.panelBlockBytes()
			dp[o+2*dc], dp[o+2*dc+1] = sp[o+2*scol], sp[o+2*scol+1]
			if m.typ.affine() || m.typ == QuantQ6_16 {
				dp[o+64+2*dc], dp[o+64+2*dc+1] = sp[o+64+2*scol], sp[o+64+2*scol+1]
			}
			for j := range qk {
				m.setQ(dp, b, dc, j, src.q(sp, b, scol, j))
			}
		}
	}
}

// setQ stores the signed value v as row c, element j of block b of
// panel pan (the inverse of q).
func (m *QMatrix) setQ(pan []byte, b, c, j int, v int32) {
	o := b * m.typ.panelBlockBytes()
	s, e := j/4, j%4
	if m.typ == QuantQ8_0 {
		pan[o+64+128*s+(c/16)*64+(c%16)*4+e] = byte(v + 128)
		return
	}
	i := o + m.typ.qOff() + m.typ.nibOff(s) + (c%16)*4 + e
	u := byte(v + m.typ.offset())
	if m.typ == QuantIQ4NL {
		u = byte(slices.Index(iq4Levels[:], int8(v)))
	}
	if m.typ == QuantQ5_1 || m.typ == QuantQ6_16 {
		for pl := range 2 {
			if pl == 1 && m.typ != QuantQ6_16 {
				break
			}
			hb, bit := highBit(m.typ, c, j, pl)
			pan[o+hb] = pan[o+hb]&^(1<<bit) | (u>>(4+pl)&1)<<bit
		}
		u &= 0x0F
	}
	if c < 16 {
		pan[i] = pan[i]&0xF0 | u
	} else {
		pan[i] = pan[i]&0x0F | u<<4
	}
}

// DequantQ8_0 writes the values of the Q8_0 blocks src (ggml's layout:
// len(dst)/32 blocks of 34 bytes, a half scale d and 32 int8 q) into dst,
// exactly (d·q is a float32): the keys and values of a Q8_0 KV cache.
func DequantQ8_0(dst []float32, src []byte) {
	nb := len(dst) / 32
	if len(dst)%32 != 0 || len(src) < nb*34 {
		panic(fmt.Sprintf("kernels: DequantQ8_0 of %d bytes into %d values", len(src), len(dst)))
	}
	if dequantQ8Asm(dst, src, nb) {
		return
	}
	for b := range nb {
		y := src[b*34 : b*34+34]
		d := f16to32(uint16(y[0]) | uint16(y[1])<<8)
		x := dst[b*32 : b*32+32]
		q := y[2:34]
		for j := range x {
			x[j] = d * float32(int8(q[j]))
		}
	}
}
