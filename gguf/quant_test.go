package gguf

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// The reference decoders below are written from the format description
// (see quant.go's table), element by element and in float64, independently
// of the block loops of the package's decoders.

// refHalf decodes IEEE half-precision bits.
func refHalf(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h >> 10 & 0x1f)
	frac := float64(h & 0x3ff)
	switch exp {
	case 0:
		return sign * math.Ldexp(frac, -24)
	case 31:
		if frac == 0 {
			return math.Inf(int(sign))
		}
		return math.NaN()
	}
	return sign * math.Ldexp(1024+frac, exp-25)
}

func half(b []byte, at int) float64 { return refHalf(binary.LittleEndian.Uint16(b[at:])) }

// nibble returns the 4-bit value at nibble position k of b (low nibble of
// byte k/2 first... ) — positions are given explicitly by the callers.
func lowNibble(b byte) int  { return int(b & 15) }
func highNibble(b byte) int { return int(b >> 4) }

// bit returns bit i of the little-endian bit string b.
func bit(b []byte, i int) int { return int(b[i/8]>>(i%8)) & 1 }

// refElement decodes element e (0 ≤ e < block size) of one block.
func refElement(t TensorType, blk []byte, e int) float64 {
	switch t {
	case F32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(blk)))
	case F16:
		return half(blk, 0)
	case BF16:
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(blk)) << 16))
	case Q8_0:
		return half(blk, 0) * float64(int8(blk[2+e]))
	case Q4_0, Q4_1, Q5_0, Q5_1:
		qs := map[TensorType]int{Q4_0: 2, Q4_1: 4, Q5_0: 6, Q5_1: 8}[t]
		q := lowNibble(blk[qs+e%16])
		if e >= 16 {
			q = highNibble(blk[qs+e-16])
		}
		switch t {
		case Q4_0:
			return half(blk, 0) * float64(q-8)
		case Q4_1:
			return half(blk, 0)*float64(q) + half(blk, 2)
		case Q5_0:
			q += 16 * bit(blk[2:6], e)
			return half(blk, 0) * float64(q-16)
		default:
			q += 16 * bit(blk[4:8], e)
			return half(blk, 0)*float64(q) + half(blk, 2)
		}
	case Q4_K, Q5_K:
		// Sub-block s = e/32 has a 6-bit scale and a 6-bit min: for s < 4
		// the low 6 bits of scales[s] and scales[s+4]; for s ≥ 4 the low
		// and high nibbles of scales[s+4], topped by the two spare high
		// bits of scales[s−4] and scales[s].
		scales := blk[4:16]
		s := e / 32
		var sc, mn int
		if s < 4 {
			sc, mn = int(scales[s]&63), int(scales[s+4]&63)
		} else {
			sc = lowNibble(scales[s+4]) + 16*int(scales[s-4]>>6)
			mn = highNibble(scales[s+4]) + 16*int(scales[s]>>6)
		}
		qsAt := 16
		if t == Q5_K {
			qsAt = 48
		}
		byteAt := qsAt + 32*(e/64) + e%32
		q := lowNibble(blk[byteAt])
		if e%64 >= 32 {
			q = highNibble(blk[byteAt])
		}
		if t == Q5_K {
			// bit 2·(e/64) (low half) or 2·(e/64)+1 (high half) of qh[e%32]
			shift := 2*(e/64) + (e%64)/32
			q += 16 * int(blk[16+e%32]>>shift&1)
		}
		return half(blk, 0)*float64(sc)*float64(q) - half(blk, 2)*float64(mn)
	case Q6_K:
		// Element e lies in half h = e/128 at r = e%128: its low nibble is
		// in ql[64h + r%64] (high nibble when r ≥ 64), its top two bits in
		// qh[32h + r%32] at bit 2·(r/32), its scale is scales[e/16].
		h, r := e/128, e%128
		lowByte := blk[64*h+r%64]
		q := lowNibble(lowByte)
		if r >= 64 {
			q = highNibble(lowByte)
		}
		q += 16 * int(blk[128+32*h+r%32]>>(2*(r/32))&3)
		return half(blk, 208) * float64(int8(blk[192+e/16])) * float64(q-32)
	case Q2_K, Q3_K:
		// Element e = 128n + 32j + 16h + l: its two low bits are bits
		// 2j, 2j+1 of quant byte 32n + 16h + l; its sub-block is e/16.
		n, r := e/128, e%128
		j, h, l := r/32, r%32/16, r%16
		if t == Q2_K {
			q := int(blk[16+32*n+16*h+l]) >> (2 * j) & 3
			sc := blk[e/16]
			return half(blk, 80)*float64(sc&15)*float64(q) - half(blk, 82)*float64(sc>>4)
		}
		q := int(blk[32+32*n+16*h+l]) >> (2 * j) & 3
		if bit(blk[16*h+l:], 4*n+j) == 0 { // the high bit, from hmask
			q -= 4
		}
		// The 6-bit scale k: a nibble of scales[k mod 8] (high for k ≥ 8)
		// under bits 2(k/4), 2(k/4)+1 of scales[8 + k mod 4].
		scales, k := blk[96:108], e/16
		low := lowNibble(scales[k%8])
		if k >= 8 {
			low = highNibble(scales[k%8])
		}
		sc := low + 16*int(scales[8+k%4]>>(2*(k/4))&3) - 32
		return half(blk, 108) * float64(sc) * float64(q)
	case IQ4_NL, IQ4_XS:
		// The nibble picks one of sixteen int8 levels (ggml's
		// kvalues_iq4nl). IQ4_NL: d, then nibbles as Q4_0's. IQ4_XS:
		// sub-block s = e/32 has the scale d·(ls−32), ls the low nibble
		// (high for odd s) of byte 4 + s/2 under bits 2s, 2s+1 of the
		// uint16 at 2; its nibbles are bytes 8+16s… as Q4_0's.
		levels := [16]float64{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}
		d, qs, r := half(blk, 0), blk[2:18], e
		if t == IQ4_XS {
			s := e / 32
			ls := lowNibble(blk[4+s/2])
			if s%2 == 1 {
				ls = highNibble(blk[4+s/2])
			}
			ls += 16 * int(binary.LittleEndian.Uint16(blk[2:])>>(2*s)&3)
			d *= float64(ls - 32)
			qs, r = blk[8+16*s:8+16*s+16], e%32
		}
		q := lowNibble(qs[r%16])
		if r >= 16 {
			q = highNibble(qs[r-16])
		}
		return d * levels[q]
	}
	panic("no reference for " + t.String())
}

var testTypes = []TensorType{F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS}

// randomBlocks returns n blocks of random bytes of type t whose half-float
// scales are finite (random in ±2^±4).
func randomBlocks(rng *rand.Rand, t TensorType, n int) []byte {
	b := make([]byte, n*t.TypeSize())
	for i := range b {
		b[i] = byte(rng.IntN(256))
	}
	scale := func(at int) {
		v := float32(math.Ldexp(rng.Float64()*2-1, rng.IntN(9)-4))
		putF16(b[at:], v)
	}
	for k := range n {
		blk := k * t.TypeSize()
		switch t {
		case F16:
			scale(blk)
		case F32:
			binary.LittleEndian.PutUint32(b[blk:], math.Float32bits(float32(rng.NormFloat64())))
		case BF16:
			b[blk+1] = b[blk+1]&0x80 | byte(0x3c+rng.IntN(8)) // exponent near 1
		case Q8_0, Q4_0, Q5_0, IQ4_NL, IQ4_XS:
			scale(blk)
		case Q4_1, Q5_1, Q4_K, Q5_K:
			scale(blk)
			scale(blk + 2)
		case Q6_K:
			scale(blk + 208)
		case Q2_K:
			scale(blk + 80)
			scale(blk + 82)
		case Q3_K:
			scale(blk + 108)
		}
	}
	return b
}

func TestDequantizeMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, typ := range testTypes {
		t.Run(typ.String(), func(t *testing.T) {
			const blocks = 64
			src := randomBlocks(rng, typ, blocks)
			block := typ.BlockSize()
			got := make([]float32, blocks*block)
			if err := Dequantize(got, src, typ); err != nil {
				t.Fatal(err)
			}
			for k := range blocks {
				blk := src[k*typ.TypeSize() : (k+1)*typ.TypeSize()]
				for e := range block {
					want := refElement(typ, blk, e)
					g := float64(got[k*block+e])
					// The reference is exact; the decoder rounds each step
					// to float32 (about 2^-24 relative per operation).
					if d := math.Abs(g - want); d > 1e-6*math.Max(math.Abs(want), 1e-3) {
						t.Fatalf("block %d element %d: got %v, reference %v", k, e, g, want)
					}
				}
			}
			// The parallel decoder gives the same values.
			big := randomBlocks(rng, typ, (1<<17)/block+3)
			a := make([]float32, len(big)/typ.TypeSize()*block)
			b := make([]float32, len(a))
			if err := Dequantize(a, big, typ); err != nil {
				t.Fatal(err)
			}
			if err := DequantizeParallel(b, big, typ); err != nil {
				t.Fatal(err)
			}
			for i := range a {
				if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
					t.Fatalf("element %d: parallel %v, serial %v", i, b[i], a[i])
				}
			}
		})
	}
}

// maxError is the largest error the quantizer of t may make on an element
// of a block whose largest magnitude is amax (half a step plus the
// rounding of the scales to half floats, with room for the two-level
// scales of the K-quants).
func maxError(t TensorType, amax float64) float64 {
	switch t {
	case F32:
		return 0
	case F16:
		return amax * 0x1p-11
	case BF16:
		return amax * 0x1p-8
	case Q8_0:
		return amax * (0.5/127 + 0x1p-10)
	case Q4_0:
		return amax * (1.0/8 + 0x1p-9)
	case Q5_0:
		return amax * (1.0/16 + 0x1p-9)
	case Q4_1, Q4_K:
		return 2 * amax * (1.0/15 + 1.0/63)
	case Q5_1, Q5_K:
		return 2 * amax * (1.0/31 + 1.0/63)
	case Q6_K:
		return amax * (1.0/32 + 1.0/128)
	case Q3_K:
		return amax * (1.0/4 + 1.0/32)
	case Q2_K:
		return 2 * amax * (1.0/3 + 1.0/15)
	case IQ4_NL: // the widest gap between levels (24 of 127), or 113 for the top of the other sign
		return amax * (14.0/127 + 0x1p-9)
	case IQ4_XS: // and the sub-block scale rounded to a 64th of the largest
		return amax * (14.0/127 + 1.0/64 + 0x1p-9)
	}
	return math.Inf(1)
}

func TestQuantizeRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, typ := range testTypes {
		t.Run(typ.String(), func(t *testing.T) {
			n := 8 * 256
			src := make([]float32, n)
			for i := range src {
				// Blocks of very different magnitudes, and an all-zero one.
				src[i] = float32(rng.NormFloat64() * math.Ldexp(1, (i/256)%5-3))
			}
			for i := range 256 {
				src[i] = 0
			}
			size, err := EncodedSize(typ, n)
			if err != nil {
				t.Fatal(err)
			}
			enc := make([]byte, size)
			recon := make([]float32, n)
			quantizers[typ](enc, src, recon)
			got := make([]float32, n)
			if err := Dequantize(got, enc, typ); err != nil {
				t.Fatal(err)
			}
			block := max(typ.BlockSize(), 32)
			var sumSq, errSq float64
			for i := range src {
				if math.Float32bits(got[i]) != math.Float32bits(recon[i]) {
					t.Fatalf("element %d: decoded %v, the quantizer meant %v", i, got[i], recon[i])
				}
				lo := i / block * block
				_, amax := absMax(src[lo : lo+block])
				if d := math.Abs(float64(got[i] - src[i])); d > maxError(typ, float64(amax)) {
					t.Fatalf("element %d: %v became %v (error %.3g > %.3g for a block of largest magnitude %v)", i, src[i], got[i], d, maxError(typ, float64(amax)), amax)
				}
				sumSq += float64(src[i]) * float64(src[i])
				errSq += float64(got[i]-src[i]) * float64(got[i]-src[i])
			}
			t.Logf("%s: relative RMS error %.4f", typ, math.Sqrt(errSq/sumSq))
		})
	}
}

func TestQuantizeChecksSizes(t *testing.T) {
	if err := Quantize(make([]byte, 34), make([]float32, 31), Q8_0); err == nil {
		t.Error("31 elements quantized to Q8_0")
	}
	if err := Quantize(make([]byte, 33), make([]float32, 32), Q8_0); err == nil {
		t.Error("a 33-byte destination accepted for one Q8_0 block")
	}
	if err := Dequantize(make([]float32, 32), make([]byte, 18), Q8_0); err == nil {
		t.Error("18 bytes decoded as a Q8_0 block")
	}
	if err := Dequantize(make([]float32, 256), make([]byte, 66), IQ2_XXS); err == nil {
		t.Error("IQ2_XXS decoded")
	}
}
