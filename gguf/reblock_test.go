package gguf

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestQ4KToQ4_1: every element of Q4_K blocks rewritten as Q4_1 decodes
// (refElement, from the format description) to its Q4_K value up to the
// rounding of each sub-block's scale and minimum to a half: at most
// 2⁻¹¹ of |D|·q + |M| for normal halves, 2⁻²⁵·(q+1) below them. Blocks
// from the quantizer and random bytes (every scale, minimum and nibble
// pattern); a scale beyond a half is refused.
func TestQ4KToQ4_1(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	x := make([]float32, 4*256)
	for i := range x {
		x[i] = float32(r.NormFloat64() * 0.02 * float64(1+i/256))
	}
	quantized := make([]byte, 4*144)
	if err := Quantize(quantized, x, Q4_K); err != nil {
		t.Fatal(err)
	}
	random := make([]byte, 64*144)
	for i := range random {
		random[i] = byte(r.Uint32())
	}
	for b := range 64 { // d and dmin of either sign over a range of magnitudes, finite
		for _, at := range []int{0, 2} {
			h := uint16(r.IntN(0x6000)) // below 512: 63 times it is a half | uint16(r.IntN(2))<<15
			binary.LittleEndian.PutUint16(random[144*b+at:], h)
		}
	}
	for name, src := range map[string][]byte{"quantized": quantized, "random": random} {
		q, err := Q4KToQ4_1(src)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(q) != len(src)/144*8*20 {
			t.Fatalf("%s: %d bytes of Q4_1 for %d of Q4_K", name, len(q), len(src))
		}
		worst := 0.0
		for e := range len(src) / 144 * 256 {
			want := refElement(Q4_K, src[e/256*144:], e%256)
			blk := q[e/32*20:]
			got := refElement(Q4_1, blk, e%32)
			d, m := math.Abs(half(blk, 0)), math.Abs(half(blk, 2))
			nib := float64(int(blk[4+e%16]>>(4*(e%32/16))) & 15)
			tol := math.Ldexp(d*nib+m, -11) + math.Ldexp(nib+1, -25) + 1e-6*math.Abs(want)
			if diff := math.Abs(got - want); !(diff <= tol) {
				t.Fatalf("%s: element %d is %g as Q4_1, %g as Q4_K (tolerance %g)", name, e, got, want, tol)
			} else if d != 0 {
				worst = max(worst, diff/d)
			}
		}
		if name == "quantized" { // random minimums dwarf their scales
			t.Logf("%s: the largest change is %.2g of a quantization step", name, worst)
		}
	}
	if _, err := Q4KToQ4_1(random[:100]); err == nil {
		t.Error("a partial block was rewritten")
	}
	big := make([]byte, 144)
	binary.LittleEndian.PutUint16(big, 0x7bff) // d = 65504
	big[4] = 63                                 // sub-block 0's scale: 63·65504 is not a half
	if _, err := Q4KToQ4_1(big); err == nil || !strings.Contains(err.Error(), "finite half") {
		t.Errorf("a scale beyond the halves: %v", err)
	}
}
