package compute

import (
	"encoding/binary"
	"fmt"
	"math"
)

// The reference quantizers of ggml (quantize_row_q8_0_ref,
// quantize_row_q4_0_ref, quantize_row_q4_1_ref and quantize_row_q5_1_ref
// in ggml-quants.c), which llama-quantize runs when
// it has no importance matrix: the same float32 input gives the same
// blocks, bit for bit. IQ4_NL, whose levels are not evenly spaced, has no
// such reference; its quantizer tries a few scales per block and keeps
// the best least-squares fit (IQ4NLScale), a plainer search than
// llama-quantize's, which also weighs each element by its importance.
// Q6_16 is clawrl's (see the package doc): each half block's scale maps
// its value of largest magnitude to −32, as Q4_0's maps it to −8
// (q6Scale).
// They run on the host, for any backend: a
// checkpoint quantized on load (model.quantize) goes to the backend
// through QuantBackend.WeightQuant as the blocks these write.

// Quantize writes src, whose length is a multiple of QK, as blocks of the
// quantized type dt (Q8_0, Q4_0, Q4_1, Q5_1, IQ4_NL or Q6_16) into dst, which holds dt.Bytes(len(src))
// bytes.
func Quantize(dt DType, dst []byte, src []float32) error {
	if !dt.Quantized() {
		return fmt.Errorf("compute: Quantize to %v, which is not a block type", dt)
	}
	if len(src)%QK != 0 || len(dst) != dt.Bytes(len(src)) {
		return fmt.Errorf("compute: Quantize of %d values into %d bytes of %v", len(src), len(dst), dt)
	}
	bs := dt.BlockBytes()
	for b := 0; b < len(src)/QK; b++ {
		x, y := src[b*QK:(b+1)*QK], dst[b*bs:(b+1)*bs]
		switch dt {
		case Q8_0:
			quantizeQ8_0(y, x)
		case Q4_0:
			quantizeQ4_0(y, x)
		case Q4_1:
			quantizeQ4_1(y, x)
		case IQ4_NL:
			d := F16ToF32(F32ToF16(IQ4NLScale(x)))
			putHalf(y, F32ToF16(d))
			IQ4NLNibbles(y[2:], x, d)
		case Q6_16:
			quantizeQ6_16(y, x)
		default:
			quantizeQ5_1(y, x)
		}
	}
	return nil
}

func quantizeQ8_0(y []byte, x []float32) {
	var amax float32
	for _, v := range x {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	d := amax / 127
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putHalf(y, F32ToF16(d))
	for j, v := range x {
		y[2+j] = byte(int8(math.Round(float64(v * id)))) // roundf: half away from zero
	}
}

func quantizeQ4_0(y []byte, x []float32) {
	var amax, mx float32
	for _, v := range x {
		if a := float32(math.Abs(float64(v))); amax < a {
			amax, mx = a, v
		}
	}
	d := mx / -8
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putHalf(y, F32ToF16(d))
	for j := range QK / 2 {
		x0, x1 := x[j]*id, x[QK/2+j]*id
		q0 := min(15, uint8(int8(float32(x0+8.5)))) // (int8_t)(x0 + 8.5f): truncation
		q1 := min(15, uint8(int8(float32(x1+8.5))))
		y[2+j] = q0 | q1<<4
	}
}

// affineHeader writes the scale d = (max − min)/levels and the minimum of
// the block x into y's first four bytes (halves), as ggml's Q4_1 and Q5_1
// quantizers do, and returns the minimum and 1/d (0 for d = 0).
func affineHeader(y []byte, x []float32, levels float32) (lo, id float32) {
	lo, hi := float32(math.MaxFloat32), float32(-math.MaxFloat32)
	for _, v := range x {
		lo, hi = min(lo, v), max(hi, v)
	}
	d := (hi - lo) / levels
	if d != 0 {
		id = 1 / d
	}
	putHalf(y, F32ToF16(d))
	putHalf(y[2:], F32ToF16(lo))
	return lo, id
}

func quantizeQ4_1(y []byte, x []float32) {
	lo, id := affineHeader(y, x, 15)
	for j := range QK / 2 {
		x0, x1 := (x[j]-lo)*id, (x[QK/2+j]-lo)*id
		q0 := min(15, uint8(int8(float32(x0+0.5)))) // (int8_t)(x0 + 0.5f): truncation
		q1 := min(15, uint8(int8(float32(x1+0.5))))
		y[4+j] = q0 | q1<<4
	}
}

func quantizeQ5_1(y []byte, x []float32) {
	lo, id := affineHeader(y, x, 31)
	var qh uint32
	for j := range QK / 2 {
		x0, x1 := (x[j]-lo)*id, (x[QK/2+j]-lo)*id
		q0, q1 := uint8(float32(x0+0.5)), uint8(float32(x1+0.5)) // (uint8_t)(x0 + 0.5f)
		y[8+j] = q0&0x0F | (q1&0x0F)<<4
		qh |= uint32(q0>>4&1)<<j | uint32(q1>>4&1)<<(j+16)
	}
	binary.LittleEndian.PutUint32(y[4:], qh)
}

func quantizeQ6_16(y []byte, x []float32) {
	clear(y[4:])
	for h := range 2 {
		half := x[h*QK/2 : (h+1)*QK/2]
		hd := F32ToF16(q6Scale(half))
		putHalf(y[2*h:], hd)
		d := F16ToF32(hd)
		var id float32
		if d != 0 {
			id = 1 / d
		}
		for j, v := range half {
			q := byte(min(31, max(-32, nearestInt(v*id))) + 32)
			SetQ6_16(y, h*QK/2+j, q)
		}
	}
}

// q6Scale is the scale of 16 values as 6-bit integers −32..31: the one
// that maps the value of largest magnitude to −32, as Q4_0's maps it to
// −8. ggml's Q6_K quantizer (make_qx_quants) searches nineteen scales
// around it for the least squared error weighted by x²; on normal values
// five such tries gave 3% less RMS error (10% weighted), at three times
// the time of quantizing the Qwen3-0.6B shape's output matrix on load
// (+2.6 s of a 4.3 s load at q4_0), so the plain scale it is.
func q6Scale(x []float32) float32 {
	var amax, mx float32
	for _, v := range x {
		if a := math.Float32frombits(math.Float32bits(v) &^ (1 << 31)); amax < a {
			amax, mx = a, v
		}
	}
	return mx / -32
}

// nearestInt rounds f (|f| < 2²²) to the nearest integer, ties to even,
// as ggml's nearest_int does, by adding 1.5·2²³.
func nearestInt(f float32) int {
	v := f + 12582912
	return int(math.Float32bits(v)&0x007fffff) - 0x00400000
}

// SetQ6_16 stores q (0..63) as element i of the Q6_16 block y (see the
// package doc), whose ql and qh bits of that element are zero.
func SetQ6_16(y []byte, i int, q byte) {
	y[4+i%16] |= (q & 0x0F) << (4 * (i / 16))
	y[20+i%8] |= (q >> 4) << (2 * (i / 8))
}

// Q6_16Value is q (0..63) of element i of the Q6_16 block y.
func Q6_16Value(y []byte, i int) int {
	return int(y[4+i%16]>>(4*(i/16))&0x0F) | int(y[20+i%8]>>(2*(i/8))&3)<<4
}

// Dequantize writes the values of the blocks of dt in src into dst
// (exactly for Q8_0, Q4_0, IQ4_NL and Q6_16, whose every value is a float32; for Q4_1
// and Q5_1 d·q + m rounded to float32, as ggml's dequantize_row_q4_1 and
// _q5_1).
func Dequantize(dt DType, dst []float32, src []byte) error {
	if !dt.Quantized() || len(dst)%QK != 0 || len(src) != dt.Bytes(len(dst)) {
		return fmt.Errorf("compute: Dequantize of %d bytes of %v into %d values", len(src), dt, len(dst))
	}
	bs := dt.BlockBytes()
	for b := 0; b < len(dst)/QK; b++ {
		y, x := src[b*bs:(b+1)*bs], dst[b*QK:(b+1)*QK]
		d := F16ToF32(uint16(y[0]) | uint16(y[1])<<8)
		if dt == Q5_1 {
			m := F16ToF32(uint16(y[2]) | uint16(y[3])<<8)
			qh := binary.LittleEndian.Uint32(y[4:])
			for j := range QK / 2 {
				q0 := y[8+j]&0x0F | byte(qh>>j&1)<<4
				q1 := y[8+j]>>4 | byte(qh>>(j+16)&1)<<4
				x[j] = float32(d*float32(q0)) + m // no fused multiply-add
				x[QK/2+j] = float32(d*float32(q1)) + m
			}
			continue
		}
		if dt == Q4_1 {
			m := F16ToF32(uint16(y[2]) | uint16(y[3])<<8)
			for j := range QK / 2 {
				x[j] = float32(d*float32(y[4+j]&0x0F)) + m // no fused multiply-add
				x[QK/2+j] = float32(d*float32(y[4+j]>>4)) + m
			}
			continue
		}
		if dt == Q8_0 {
			for j := range x {
				x[j] = d * float32(int8(y[2+j]))
			}
			continue
		}
		if dt == Q6_16 {
			d1 := F16ToF32(uint16(y[2]) | uint16(y[3])<<8)
			for j := range x {
				if j == QK/2 {
					d = d1
				}
				x[j] = d * float32(Q6_16Value(y, j)-32)
			}
			continue
		}
		if dt == IQ4_NL {
			for j := range QK / 2 {
				x[j] = d * float32(IQ4NLLevels[y[2+j]&0x0F])
				x[QK/2+j] = d * float32(IQ4NLLevels[y[2+j]>>4])
			}
			continue
		}
		for j := range QK / 2 {
			x[j] = d * float32(int(y[2+j]&0x0F)-8)
			x[QK/2+j] = d * float32(int(y[2+j]>>4)-8)
		}
	}
	return nil
}

// IQ4NLLevels are the values an IQ4_NL nibble selects, times the block's
// scale (ggml's kvalues_iq4nl; IQ4_XS's sub-blocks use them too).
var IQ4NLLevels = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// iq4Bounds are the midpoints between consecutive IQ4NLLevels.
var iq4Bounds = func() (b [15]float32) {
	for i := range b {
		b[i] = (float32(IQ4NLLevels[i]) + float32(IQ4NLLevels[i+1])) / 2
	}
	return b
}()

// IQ4NLNearest is the index of the level of IQ4NLLevels nearest v (in
// units of the scale; a value halfway between two takes the upper). The
// midpoints between the levels are all multiples of one half, so
// ⌊2v⌋ says on which side of each v lies, and a table indexed by it
// answers (the quantizer asks 14 times a weight; a binary search made
// quantizing the Qwen3-0.6B shape on load take a minute).
func IQ4NLNearest(v float32) int {
	f := math.Floor(2 * float64(v))
	switch {
	case !(f > -iq4Span): // and NaN
		return 0
	case f >= iq4Span:
		return len(IQ4NLLevels) - 1
	}
	return int(iq4Index[int(f)+iq4Span])
}

// iq4Span bounds the values iq4Index covers: ⌊2v⌋ in (−iq4Span, iq4Span),
// beyond every midpoint.
const iq4Span = 300

// iq4Index is IQ4NLNearest for ⌊2v⌋ + iq4Span.
var iq4Index = func() (t [2 * iq4Span]uint8) {
	for i := range t {
		t[i] = uint8(iq4NearestSearch(float32(i-iq4Span) / 2))
	}
	return t
}()

// iq4NearestSearch is IQ4NLNearest by binary search over the midpoints.
func iq4NearestSearch(v float32) int {
	lo, hi := 0, len(iq4Bounds)
	for lo < hi {
		mid := (lo + hi) / 2
		if v >= iq4Bounds[mid] {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// IQ4NLScale picks the scale of a block of IQ4NLLevels for the values x:
// for each of a few inverse scales around the one that maps the value of
// largest magnitude to −127, the nearest levels k and the least-squares
// scale for them, Σxk/Σk², keeping the one whose levels fit best (the
// largest (Σxk)²/Σk², which is Σx² less the squared error); 0 for a
// block of zeros.
func IQ4NLScale(x []float32) float32 {
	var signed, amax float32
	for _, v := range x {
		if a := float32(math.Abs(float64(v))); a > amax {
			amax, signed = a, v
		}
	}
	if amax == 0 {
		return 0
	}
	best, bestFit := float32(0), float32(-1)
	for t := -3; t <= 3; t++ {
		id := (-127 + 4*float32(t)) / signed
		var sxk, skk float32
		for _, v := range x {
			k := float32(IQ4NLLevels[IQ4NLNearest(v*id)])
			sxk += v * k
			skk += k * k
		}
		if fit := sxk * sxk / skk; fit > bestFit {
			best, bestFit = sxk/skk, fit
		}
	}
	return best
}

// IQ4NLNibbles writes the nibbles of the 32 values x at scale d (as
// stored) into qs (16 bytes: element j in the low nibble of byte j, j+16
// in its high one).
func IQ4NLNibbles(qs []byte, x []float32, d float32) {
	var id float32
	if d != 0 {
		id = 1 / d
	}
	for j := range QK / 2 {
		qs[j] = byte(IQ4NLNearest(x[j]*id)) | byte(IQ4NLNearest(x[j+QK/2]*id))<<4
	}
}

func putHalf(y []byte, h uint16) { y[0], y[1] = byte(h), byte(h>>8) }

// F32ToF16 rounds f to the nearest IEEE half (ties to even), as F16C's
// VCVTPS2PH and ggml's GGML_FP32_TO_FP16 do: overflow gives an infinity,
// values below half the smallest subnormal give zero, NaN stays NaN.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00 | uint16(mant>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 { // a subnormal half (or zero)
		if e < -10 {
			return sign
		}
		m := mant | 0x800000
		shift := uint(14 - e)
		r := m >> shift
		rem, half := m&(1<<shift-1), uint32(1)<<(shift-1)
		if rem > half || rem == half && r&1 == 1 {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | mant>>13
	if rem := mant & 0x1fff; rem > 0x1000 || rem == 0x1000 && r&1 == 1 {
		r++ // a carry into the exponent is right, up to the infinity
	}
	return sign | uint16(r)
}

// F16ToF32 widens an IEEE half exactly.
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	}
	// A subnormal half: mant·2⁻²⁴, exact in float32.
	v := float32(mant) * (1.0 / (1 << 24))
	if sign != 0 {
		v = -v
	}
	return v
}
