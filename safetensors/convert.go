package safetensors

import "math"

func float32frombits(b uint32) float32 { return math.Float32frombits(b) }

// BF16ToFloat32 widens bfloat16 bits to float32 (exact: the bits become the
// upper half of the float32).
func BF16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// Float32ToBF16 narrows a float32 to bfloat16 bits, rounding to nearest
// even; NaN stays NaN.
func Float32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// F16ToFloat32 widens IEEE half-precision bits to float32 (exact).
func F16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := int(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f: // Inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: value = mant · 2⁻²⁴
		v := float32(mant) * (1.0 / (1 << 24))
		if sign != 0 {
			v = -v
		}
		return v
	}
	return math.Float32frombits(sign | uint32(exp-15+127)<<23 | mant<<13)
}

// Float32ToF16 narrows a float32 to IEEE half-precision bits, rounding to
// nearest even, overflowing to infinity and keeping NaN a NaN.
func Float32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	a := b & 0x7fffffff
	switch {
	case a > 0x7f800000: // NaN
		return sign | 0x7e00
	case a >= 0x477ff000: // rounds to ≥ 65520: infinity
		return sign | 0x7c00
	case a < 0x38800000: // below the smallest normal half (2⁻¹⁴): subnormal or zero
		// value / 2⁻²⁴, rounded to nearest even, is the subnormal mantissa
		v := float64(math.Float32frombits(a)) * (1 << 24)
		return sign | uint16(math.RoundToEven(v))
	}
	// normal: rebias the exponent and round the 13 dropped mantissa bits
	r := a - (127-15)<<23
	r += 0xfff + (r>>13)&1
	return sign | uint16(r>>13)
}
