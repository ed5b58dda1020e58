package computetest

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The reference is what every backend is judged by, so its pieces that
// are not checked against central differences inside the suite are
// checked here.

func TestBF16Bits(t *testing.T) {
	for _, tt := range []struct {
		in   uint32 // float32 bits
		want uint16
	}{
		{0x3f800000, 0x3f80},                       // 1
		{0x3f808000, 0x3f80},                       // tie, even below: down
		{0x3f818000, 0x3f82},                       // tie, odd below: up
		{0x3f807fff, 0x3f80},                       // below the tie
		{0x3f808001, 0x3f81},                       // above the tie
		{0xbf818000, 0xbf82},                       // negative tie, odd below: to even (larger magnitude)
		{0x7f7fffff, 0x7f80},                       // the largest float32 rounds to +Inf
		{0x7f800000, 0x7f80},                       // +Inf
		{0xff800000, 0xff80},                       // −Inf
		{0x80000000, 0x8000},                       // −0
		{0x3f7fffff, 0x3f80},                       // carries into the exponent
		{math.Float32bits(float32(math.NaN())), 0}, // NaN: checked below
	} {
		got := bf16Bits(math.Float32frombits(tt.in))
		if tt.in&0x7fffffff > 0x7f800000 {
			if v := bf16Value(got); v == v {
				t.Errorf("bf16Bits(NaN) = %#04x, not a NaN", got)
			}
			continue
		}
		if got != tt.want {
			t.Errorf("bf16Bits(%#08x) = %#04x, want %#04x", tt.in, got, tt.want)
		}
	}
	// Against float64 rounding of the exact value: the nearest BF16 value,
	// the even one on a tie.
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		x := math.Float32frombits(uint32(0x3c000000 + r.IntN(0x06000000)))
		got := float64(bf16Value(bf16Bits(x)))
		lo := float64(bf16Value(uint16(math.Float32bits(x) >> 16)))
		hi := float64(bf16Value(uint16(math.Float32bits(x)>>16) + 1))
		d1, d2 := float64(x)-lo, hi-float64(x)
		want := lo
		if d2 < d1 || d1 == d2 && (math.Float32bits(x)>>16)&1 == 1 {
			want = hi
		}
		if got != want {
			t.Fatalf("bf16Bits(%v) widens to %v, want %v", x, got, want)
		}
	}
}

func TestRefRoPEInverse(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const tokens, heads, hd, maxPos = 3, 2, 8, 9
	cos32, sin32 := ropeTables(maxPos, hd)
	cos, sin := widen(cos32), widen(sin32)
	x := make([]float64, tokens*heads*hd)
	for i := range x {
		x[i] = r.NormFloat64()
	}
	pos := []int32{0, 8, 3}
	y := refRoPE(refRoPE(x, heads*hd, pos, cos, sin, hd, 1), heads*hd, pos, cos, sin, hd, -1)
	for i := range x {
		// cos² + sin² of float32 tables is 1 to about 1e-7.
		if math.Abs(y[i]-x[i]) > 1e-6 {
			t.Fatalf("the inverse rotation of the rotation: [%d] = %v, want %v", i, y[i], x[i])
		}
	}
	if y := refRoPE(x, heads*hd, []int32{0, 0, 0}, cos, sin, hd, 1); math.Abs(y[5]-x[5]) > 0 {
		t.Errorf("position 0 rotates: %v, want %v", y[5], x[5])
	}
}

func TestRefLinearIsMatMul(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const m, n, k = 3, 4, 5
	x, w := make([]float64, m*k), make([]float64, n*k)
	for i := range x {
		x[i] = r.NormFloat64()
	}
	for i := range w {
		w[i] = r.NormFloat64()
	}
	a, b := refLinear(x, w, nil, m, n, k), refMatMul(x, w, nil, m, n, k, false, true, 1, 0)
	for i := range a {
		if math.Abs(a[i]-b[i]) > 1e-12 {
			t.Fatalf("refLinear [%d] = %v, refMatMul with b transposed %v", i, a[i], b[i])
		}
	}
}
