package compute

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestF16RoundTrip(t *testing.T) {
	for h := range 1 << 16 {
		f := F16ToF32(uint16(h))
		if f != f { // NaN stays a NaN
			if g := F32ToF16(f); g&0x7c00 != 0x7c00 || g&0x3ff == 0 {
				t.Fatalf("NaN %#04x came back as %#04x", h, g)
			}
			continue
		}
		if g := F32ToF16(f); g != uint16(h) {
			t.Fatalf("F32ToF16(F16ToF32(%#04x) = %g) = %#04x", h, f, g)
		}
	}
}

// TestF32ToF16Rounding checks the rounding against the nearest of the two
// neighbouring halves computed in float64 (ties to the even one).
func TestF32ToF16Rounding(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 200000 {
		var f float32
		switch i % 3 {
		case 0:
			f = float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(40)-25)))
		case 1: // exact ties and their neighbours
			h := uint16(r.IntN(0x7bff))
			a, b := float64(F16ToF32(h)), float64(F16ToF32(h+1))
			f = float32((a + b) / 2)
			if r.IntN(2) == 0 {
				f = math.Nextafter32(f, float32(b))
			}
		default:
			f = math.Float32frombits(r.Uint32())
		}
		if f != f || math.IsInf(float64(f), 0) {
			continue
		}
		got := F32ToF16(f)
		want := nearestHalf(float64(f))
		if got != want {
			t.Fatalf("F32ToF16(%g) = %#04x (%g), want %#04x (%g)", f, got, F16ToF32(got), want, F16ToF32(want))
		}
	}
}

// nearestHalf finds the nearest half to v by bisection over the ordered
// bit patterns of the positive halves.
func nearestHalf(v float64) uint16 {
	sign := uint16(0)
	if math.Signbit(v) {
		sign, v = 0x8000, -v
	}
	if v >= 65520 { // the midpoint between the largest half and 2¹⁶
		return sign | 0x7c00
	}
	lo, hi := uint16(0), uint16(0x7bff)
	for lo < hi { // the largest half ≤ v
		mid := (lo + hi + 1) / 2
		if float64(F16ToF32(mid)) <= v {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if lo == 0x7bff {
		return sign | lo
	}
	a, b := float64(F16ToF32(lo)), float64(F16ToF32(lo+1))
	switch {
	case v-a < b-v:
		return sign | lo
	case v-a > b-v:
		return sign | (lo + 1)
	case lo&1 == 0:
		return sign | lo
	}
	return sign | (lo + 1)
}

func TestQuantizeKnownBlocks(t *testing.T) {
	x := make([]float32, QK)
	for i := range x {
		x[i] = float32(i) - 12.5 // -12.5 .. 18.5
	}
	q8 := make([]byte, Q8_0.Bytes(QK))
	if err := Quantize(Q8_0, q8, x); err != nil {
		t.Fatal(err)
	}
	d := float32(18.5) / 127
	if got := F16ToF32(uint16(q8[0]) | uint16(q8[1])<<8); got != F16ToF32(F32ToF16(d)) {
		t.Errorf("Q8_0 scale %g, want %g", got, d)
	}
	for i, v := range x {
		if want := int8(math.Round(float64(v * (1 / d)))); int8(q8[2+i]) != want {
			t.Errorf("Q8_0 q[%d] = %d, want %d", i, int8(q8[2+i]), want)
		}
	}
	if int8(q8[2+31]) != 127 {
		t.Errorf("Q8_0: the largest value is %d, want 127", int8(q8[2+31]))
	}
	q4 := make([]byte, Q4_0.Bytes(QK))
	if err := Quantize(Q4_0, q4, x); err != nil {
		t.Fatal(err)
	}
	// The value of largest magnitude (18.5) maps to -8 (nibble 0).
	if q4[2+15]>>4 != 0 {
		t.Errorf("Q4_0: the largest value has nibble %d, want 0", q4[2+15]>>4)
	}
	if d4 := F16ToF32(uint16(q4[0]) | uint16(q4[1])<<8); d4 != F16ToF32(F32ToF16(18.5/-8)) {
		t.Errorf("Q4_0 scale %g, want %g", d4, 18.5/-8)
	}
	// Q4_1: m the minimum (-12.5), d the range over 15 (31/15), and q =
	// (x - m)/d rounded: 0 for the smallest value, 15 for the largest,
	// 15·i/31 rounded between.
	q41 := make([]byte, Q4_1.Bytes(QK))
	if err := Quantize(Q4_1, q41, x); err != nil {
		t.Fatal(err)
	}
	if d := F16ToF32(uint16(q41[0]) | uint16(q41[1])<<8); d != F16ToF32(F32ToF16(31.0/15)) {
		t.Errorf("Q4_1 scale %g, want %g", d, 31.0/15)
	}
	if m := F16ToF32(uint16(q41[2]) | uint16(q41[3])<<8); m != -12.5 {
		t.Errorf("Q4_1 minimum %g, want -12.5", m)
	}
	for i := range QK {
		nib := q41[4+i%16] & 0x0F
		if i >= 16 {
			nib = q41[4+i%16] >> 4
		}
		if want := uint8(math.Floor(15*float64(i)/31 + 0.5)); nib != want {
			t.Errorf("Q4_1 q[%d] = %d, want %d", i, nib, want)
		}
	}
	// Q5_1: the range 31 over 31 levels is a scale of 1, so q = i exactly,
	// its fifth bit in qh.
	q51 := make([]byte, Q5_1.Bytes(QK))
	if err := Quantize(Q5_1, q51, x); err != nil {
		t.Fatal(err)
	}
	if d, m := F16ToF32(uint16(q51[0])|uint16(q51[1])<<8), F16ToF32(uint16(q51[2])|uint16(q51[3])<<8); d != 1 || m != -12.5 {
		t.Errorf("Q5_1 scale %g minimum %g, want 1 and -12.5", d, m)
	}
	qh := uint32(q51[4]) | uint32(q51[5])<<8 | uint32(q51[6])<<16 | uint32(q51[7])<<24
	for i := range QK {
		nib := q51[8+i%16] >> (4 * (i / 16)) & 0x0F
		if got := int(nib) | int(qh>>i&1)<<4; got != i {
			t.Errorf("Q5_1 q[%d] = %d, want %d", i, got, i)
		}
	}
	zero := make([]byte, Q8_0.Bytes(QK))
	if err := Quantize(Q8_0, zero, make([]float32, QK)); err != nil {
		t.Fatal(err)
	}
	for i, b := range zero {
		if b != 0 {
			t.Fatalf("Q8_0 of zeros: byte %d is %d", i, b)
		}
	}
	if Quantize(F32, q8, x) == nil || Quantize(Q8_0, q8[:10], x) == nil || Quantize(Q4_0, q4, x[:31]) == nil {
		t.Error("Quantize accepted a bad type or size")
	}
}

// TestQuantizeError checks that dequantized blocks are within half a step
// of their input (a full step at the clamped end of Q4_0, and for Q4_1,
// whose minimum is rounded to a half, so that every value moves with it).
func TestQuantizeError(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	x := make([]float32, 64*QK)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	for _, dt := range []DType{Q8_0, Q4_0, Q4_1, Q5_1, Q6_16} {
		q := make([]byte, dt.Bytes(len(x)))
		if err := Quantize(dt, q, x); err != nil {
			t.Fatal(err)
		}
		y := make([]float32, len(x))
		if err := Dequantize(dt, y, q); err != nil {
			t.Fatal(err)
		}
		levels := 127.0
		if dt == Q4_0 {
			levels = 8
		}
		for b := 0; b < len(x)/QK; b++ {
			var amax float64
			for _, v := range x[b*QK : (b+1)*QK] {
				amax = math.Max(amax, math.Abs(float64(v)))
			}
			step := amax / levels * 1.001 // the half scale's rounding
			if dt == Q4_1 || dt == Q5_1 {
				lo, hi := slices.Min(x[b*QK:(b+1)*QK]), slices.Max(x[b*QK:(b+1)*QK])
				step = float64(hi-lo) / map[DType]float64{Q4_1: 15, Q5_1: 31}[dt] * 1.001
			}
			for i := b * QK; i < (b+1)*QK; i++ {
				if dt == Q6_16 { // each half's own scale, −32..31 of it
					h := i - i%(QK/2)
					var hmax float64
					for _, v := range x[h : h+QK/2] {
						hmax = math.Max(hmax, math.Abs(float64(v)))
					}
					step = hmax / 32 * 1.001
				}
				if e := math.Abs(float64(y[i] - x[i])); e > step {
					t.Fatalf("%v: element %d = %g dequantized to %g (step %g)", dt, i, x[i], y[i], step)
				}
			}
		}
		if dt.Bytes(len(x)) != len(x)/QK*dt.BlockBytes() || dt.BlockSize() != QK {
			t.Errorf("%v: Bytes/BlockSize disagree", dt)
		}
	}
}

// TestIQ4NLNearest: the table gives the nearest level's index, as the
// binary search over the midpoints does, for values on, just beside and
// between the midpoints, beyond the levels' range, and NaN.
func TestIQ4NLNearest(t *testing.T) {
	vals := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0, -0.0, 1e30, -1e30, 150, -150, 299.9, -299.9}
	for _, b := range iq4Bounds {
		vals = append(vals, b, math.Nextafter32(b, -1e9), math.Nextafter32(b, 1e9))
	}
	r := rand.New(rand.NewPCG(12, 12))
	for range 100000 {
		vals = append(vals, float32(r.NormFloat64()*80))
	}
	for _, v := range vals {
		got, want := IQ4NLNearest(v), iq4NearestSearch(v)
		if got != want {
			t.Fatalf("IQ4NLNearest(%v) = %d, the search says %d", v, got, want)
		}
		if !math.IsNaN(float64(v)) {
			// Nearest indeed: no level is closer.
			d := math.Abs(float64(v) - float64(IQ4NLLevels[got]))
			for _, l := range IQ4NLLevels {
				if math.Abs(float64(v)-float64(l)) < d {
					t.Fatalf("IQ4NLNearest(%v) = level %d, but %d is closer", v, IQ4NLLevels[got], l)
				}
			}
		}
	}
}
