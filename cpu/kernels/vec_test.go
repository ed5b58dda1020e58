package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

var vecLens = []int{0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 129, 1000}

func TestDotAxpyScale(t *testing.T) {
	eachKernels(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(9, 9))
		for _, n := range vecLens {
			x, y := randF32(r, n), randF32(r, n+3) // y longer than x: only len(x) counts
			var want, abs float64
			for i := range x {
				want += float64(x[i]) * float64(y[i])
				abs += math.Abs(float64(x[i]) * float64(y[i]))
			}
			if got := Dot(x, y); math.Abs(float64(got)-want) > dotBound(n, abs) {
				t.Errorf("Dot n=%d = %v, want %v", n, got, want)
			}

			y0 := append([]float32(nil), y...)
			Axpy(-0.75, x, y)
			for i := range y {
				w, tol := y0[i], 0.0
				if i < n {
					w = float32(float64(y0[i]) + -0.75*float64(x[i]))
					tol = 2 * u32 * (math.Abs(float64(y0[i])) + math.Abs(float64(x[i])))
				}
				if math.Abs(float64(y[i]-w)) > tol {
					t.Errorf("Axpy n=%d: y[%d] = %v, want %v", n, i, y[i], w)
					break
				}
			}

			x0 := append([]float32(nil), x...)
			Scale(3, x)
			for i := range x {
				if x[i] != 3*x0[i] {
					t.Errorf("Scale n=%d: x[%d] = %v, want %v", n, i, x[i], 3*x0[i])
					break
				}
			}
		}
	})
}

func TestMax(t *testing.T) {
	eachKernels(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(10, 10))
		for _, n := range vecLens[1:] {
			for pos := 0; pos < n; pos += max(1, n/7) {
				x := randF32(r, n)
				for i := range x {
					x[i] -= 5 // all negative: a zero identity would be wrong
				}
				x[pos] = -0.5
				if got := Max(x); got != -0.5 {
					t.Errorf("Max n=%d pos=%d = %v, want -0.5", n, pos, got)
				}
			}
		}
	})
}

// TestExpSubAccuracy sweeps x = src − shift over [−87.3, 0] (the softmax
// range where exp is a normal float32), and a little beyond on both sides,
// against math.Exp: relative error ≤ 2e-7.
func TestExpSubAccuracy(t *testing.T) {
	const n = 200001
	src := make([]float32, n, 3*n)
	for i := range src {
		src[i] = float32(-87.33 * float64(i) / (n - 1))
	}
	r := rand.New(rand.NewPCG(15, 15))
	for i := 0; i < n; i++ { // random float32 bit patterns in the range
		src = append(src, -87.33*r.Float32())
	}
	for i := 0; i < n; i++ { // and many near 0, where softmax puts its mass
		src = append(src, -r.Float32())
	}
	extra := []float32{-1e-30, 1e-7, 0.5, 1, 10, 88, -0.3465, 0.3466, -0.6931472, 0.6931472}
	src = append(src, extra...)
	dst := make([]float32, len(src))
	eachKernels(t, func(t *testing.T) {
		for _, shift := range []float32{0, 3.5} {
			s := make([]float32, len(src))
			for i, v := range src {
				s[i] = v + shift // so that s[i] − shift is close to src[i]
			}
			sum := ExpSub(dst, s, shift)
			var worst float64
			var wantSum float64
			for i, v := range s {
				x := float64(v - shift) // the argument as the kernel forms it
				want := math.Exp(x)
				wantSum += want
				rel := math.Abs(float64(dst[i])-want) / want
				if rel > worst {
					worst = rel
				}
				if rel > 2e-7 {
					t.Fatalf("shift=%v: exp(%v) = %v, want %v (rel %.3g)", shift, x, dst[i], want, rel)
				}
			}
			if math.Abs(float64(sum)-wantSum) > 1e-5*wantSum {
				t.Errorf("shift=%v: sum %v, want %v", shift, sum, wantSum)
			}
			t.Logf("shift=%v: worst relative error %.3g", shift, worst)
		}
	})
}

// TestExpSubSpecial checks the edges: very negative inputs and −Inf give 0
// (never NaN), overflow gives +Inf, NaN stays NaN, and the sum ignores
// nothing and adds nothing.
func TestExpSubSpecial(t *testing.T) {
	inf := float32(math.Inf(1))
	cases := []struct {
		x    float32
		want func(float32) bool
	}{
		{-88, func(v float32) bool { return v == 0 || v < 1.2e-38 }},
		{-100, func(v float32) bool { return v >= 0 && v < 1.2e-38 }},
		{-1e30, func(v float32) bool { return v == 0 }},
		{-inf, func(v float32) bool { return v == 0 }},
		{89, func(v float32) bool { return v == inf }},
		{inf, func(v float32) bool { return v == inf }},
		{float32(math.NaN()), func(v float32) bool { return v != v }},
		{0, func(v float32) bool { return v == 1 }},
	}
	eachKernels(t, func(t *testing.T) {
		for _, c := range cases {
			for _, n := range []int{1, 8, 16, 17, 40} {
				src := make([]float32, n)
				for i := range src {
					src[i] = c.x
				}
				dst := make([]float32, n)
				ExpSub(dst, src, 0)
				for i, v := range dst {
					if !c.want(v) {
						t.Errorf("exp(%v) = %v (n=%d, i=%d)", c.x, v, n, i)
						break
					}
				}
			}
		}
		// Softmax over a masked row: −Inf entries become exactly 0.
		x := []float32{1, float32(math.Inf(-1)), 2, float32(math.Inf(-1)), 3, 0, 0, 0, 0, -1e9}
		Softmax(x)
		var s float32
		for i, v := range x {
			if v != v || v < 0 {
				t.Fatalf("softmax[%d] = %v", i, v)
			}
			s += v
		}
		if x[1] != 0 || x[3] != 0 || x[9] != 0 || math.Abs(float64(s)-1) > 1e-6 {
			t.Errorf("softmax = %v (sum %v)", x, s)
		}
	})
}

func TestSiLUMulRMSNorm(t *testing.T) {
	eachKernels(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(11, 11))
		for _, n := range vecLens {
			gate, up := randF32(r, n), randF32(r, n)
			for i := range gate {
				gate[i] *= 12
			}
			if n > 3 {
				gate[0], gate[1], gate[2] = -100, 100, 0
			}
			dst := make([]float32, n)
			SiLUMul(dst, gate, up)
			for i := range gate {
				g := float64(gate[i])
				want := g / (1 + math.Exp(-g)) * float64(up[i])
				if math.Abs(float64(dst[i])-want) > 1e-6*math.Abs(want)+1e-30 {
					t.Errorf("SiLUMul n=%d: [%d] silu(%v)·%v = %v, want %v", n, i, g, up[i], dst[i], want)
					break
				}
			}

			x, w := randF32(r, n), randF32(r, n)
			RMSNormRow(dst, x, w, 1e-6)
			var ss float64
			for _, v := range x {
				ss += float64(v) * float64(v)
			}
			inv := 1 / math.Sqrt(ss/float64(max(n, 1))+1e-6)
			for i := range x {
				want := float64(x[i]) * inv * float64(w[i])
				if math.Abs(float64(dst[i])-want) > float64(n+8)*u32*math.Abs(want)+1e-30 {
					t.Errorf("RMSNormRow n=%d: [%d] = %v, want %v", n, i, dst[i], want)
					break
				}
			}
			RMSNormRow(x, x, w, 1e-6) // in place
			for i := range x {
				if x[i] != dst[i] {
					t.Errorf("RMSNormRow in place differs at %d", i)
					break
				}
			}
		}
	})
}

// bf16Edges are float32 values where rounding to BF16 is delicate.
var bf16Edges = []struct {
	bits uint32
	want uint16
	what string
}{
	{0x3f800000, 0x3f80, "1"},
	{0x3f808000, 0x3f80, "tie, even below"},
	{0x3f818000, 0x3f82, "tie, odd below: up"},
	{0x3f808001, 0x3f81, "just above a tie"},
	{0x3f807fff, 0x3f80, "just below a tie"},
	{0x80000000, 0x8000, "-0"},
	{0x00000001, 0x0000, "smallest subnormal"},
	{0x00008000, 0x0000, "subnormal tie, even"},
	{0x00018000, 0x0002, "subnormal tie, odd"},
	{0x007fffff, 0x0080, "largest subnormal rounds to the smallest normal"},
	{0x7f7fffff, 0x7f80, "max float32 rounds to +Inf"},
	{0x7f7f7fff, 0x7f7f, "largest that stays finite"},
	{0xff7fffff, 0xff80, "-max rounds to -Inf"},
	{0x7f800000, 0x7f80, "+Inf"},
	{0xff800000, 0xff80, "-Inf"},
	{0x7fc00000, 0x7fc0, "quiet NaN"},
	{0x7f800001, 0x7fc0, "signalling NaN, low payload: stays NaN"},
	{0x7fbfffff, 0x7ff0 | 0xf, "signalling NaN, high payload"},
	{0xffffffff, 0xffff, "negative NaN, all ones"},
}

func TestBF16Conversions(t *testing.T) {
	for _, e := range bf16Edges {
		if got := F32ToBF16One(math.Float32frombits(e.bits)); got != e.want {
			t.Errorf("F32ToBF16One(%#08x) (%s) = %#04x, want %#04x", e.bits, e.what, got, e.want)
		}
	}
	r := rand.New(rand.NewPCG(12, 12))
	eachKernels(t, func(t *testing.T) {
		for _, n := range append(vecLens, 4099) {
			src := make([]float32, n)
			for i := range src {
				if i < len(bf16Edges) && i%2 == 0 {
					src[i] = math.Float32frombits(bf16Edges[i].bits)
				} else {
					src[i] = math.Float32frombits(r.Uint32())
				}
			}
			dst := make([]uint16, n+1)
			dst[n] = 0xbeef
			F32ToBF16(dst[:n], src)
			for i, f := range src {
				if want := F32ToBF16One(f); dst[i] != want {
					t.Fatalf("F32ToBF16 n=%d: [%d] %#08x → %#04x, want %#04x", n, i, math.Float32bits(f), dst[i], want)
				}
			}
			if dst[n] != 0xbeef {
				t.Fatalf("F32ToBF16 n=%d wrote past the end", n)
			}
			back := make([]float32, n+1)
			back[n] = sentinel
			BF16ToF32(back[:n], dst[:n])
			for i, h := range dst[:n] {
				if math.Float32bits(back[i]) != uint32(h)<<16 {
					t.Fatalf("BF16ToF32 n=%d: [%d] %#04x → %#08x", n, i, h, math.Float32bits(back[i]))
				}
			}
			if back[n] != sentinel {
				t.Fatalf("BF16ToF32 n=%d wrote past the end", n)
			}
		}
	})
}

func TestF16ToF32(t *testing.T) {
	table := []struct {
		h    uint16
		want uint32
	}{
		{0x0000, 0x00000000}, // +0
		{0x8000, 0x80000000}, // -0
		{0x3c00, 0x3f800000}, // 1
		{0xc000, 0xc0000000}, // -2
		{0x3555, 0x3eaaa000}, // 0.333251953125
		{0x7bff, 0x477fe000}, // 65504, the largest half
		{0x0400, 0x38800000}, // 2^-14, the smallest normal half
		{0x0001, 0x33800000}, // 2^-24, the smallest subnormal
		{0x03ff, 0x387fc000}, // the largest subnormal
		{0x8001, 0xb3800000}, // -2^-24
		{0x7c00, 0x7f800000}, // +Inf
		{0xfc00, 0xff800000}, // -Inf
		{0x7e00, 0x7fc00000}, // quiet NaN
		{0x7c01, 0x7f802000}, // signalling NaN keeps its payload
	}
	src := make([]uint16, len(table))
	for i, e := range table {
		src[i] = e.h
		if got := math.Float32bits(F16ToF32One(e.h)); got != e.want {
			t.Errorf("F16ToF32One(%#04x) = %#08x, want %#08x", e.h, got, e.want)
		}
	}
	dst := make([]float32, len(src))
	F16ToF32(dst, src)
	for i, e := range table {
		if math.Float32bits(dst[i]) != e.want {
			t.Errorf("F16ToF32 [%d] = %#08x, want %#08x", i, math.Float32bits(dst[i]), e.want)
		}
	}
	// Every finite half is exactly representable: the round trip through
	// float64 arithmetic must agree.
	for h := 0; h < 1<<16; h++ {
		f := F16ToF32One(uint16(h))
		e, m := h>>10&0x1f, h&0x3ff
		if e == 0x1f {
			continue
		}
		v := float64(m) * math.Pow(2, -24)
		if e > 0 {
			v = (1 + float64(m)/1024) * math.Pow(2, float64(e-15))
		}
		if h&0x8000 != 0 {
			v = -v
		}
		if float64(f) != v {
			t.Fatalf("F16ToF32One(%#04x) = %v, want %v", h, f, v)
		}
	}
}

func ExampleSoftmax() {
	x := []float32{1, 2, 3}
	Softmax(x)
	fmt.Printf("%.4f %.4f %.4f\n", x[0], x[1], x[2])
	// Output: 0.0900 0.2447 0.6652
}
