package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/clawrl/clawrl/compute"
)

// randBlocks returns n·k/32 random ggml blocks of t: scales of either
// sign over a range of magnitudes (some zero), every quantized value
// (and Q4_1's minimums of either sign, near the scale's magnitude).
func randBlocks(r *rand.Rand, t QuantType, n, k int) []byte {
	bb := t.blockBytes()
	out := make([]byte, n*k/qk*bb)
	for b := 0; b < len(out)/bb; b++ {
		blk := out[b*bb : (b+1)*bb]
		var d uint16
		if r.IntN(50) != 0 { // a zero scale now and then
			d = f32to16Test(float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(12)-9))))
		}
		blk[0], blk[1] = byte(d), byte(d>>8)
		j0 := 2
		if t == QuantQ4_1 || t == QuantQ5_1 {
			mn := f32to16Test(float32(r.NormFloat64() * 8 * float64(f16to32(d))))
			blk[2], blk[3] = byte(mn), byte(mn>>8)
			j0 = 4
		}
		if t == QuantQ6_16 { // the second half's scale
			var d2 uint16
			if r.IntN(50) != 0 {
				d2 = f32to16Test(float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(12)-9))))
			}
			blk[2], blk[3] = byte(d2), byte(d2>>8)
			j0 = 4
		}
		for j := j0; j < bb; j++ {
			blk[j] = byte(r.Uint32())
		}
	}
	return out
}

// f32to16Test rounds a float32 to a half by truncation (enough for test
// scales; the rounding itself is tested in package compute).
func f32to16Test(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	e := int(b>>23&0xff) - 127 + 15
	if e <= 0 || e >= 31 {
		return sign
	}
	return sign | uint16(e)<<10 | uint16(b>>13&0x3ff)
}

// ggmlValue is element j of row r of ggml blocks (the definition of the
// formats, independent of the packing): d·q + m (m 0 but for Q4_1).
func ggmlValue(t QuantType, blocks []byte, k, r, j int) (d float64, q int, m float64) {
	bb := t.blockBytes()
	blk := blocks[(r*(k/qk)+j/qk)*bb:]
	d = float64(f16to32(uint16(blk[0]) | uint16(blk[1])<<8))
	e := j % qk
	switch t {
	case QuantQ8_0:
		return d, int(int8(blk[2+e])), 0
	case QuantQ4_1:
		m = float64(f16to32(uint16(blk[2]) | uint16(blk[3])<<8))
		blk = blk[2:]
	case QuantQ5_1:
		m = float64(f16to32(uint16(blk[2]) | uint16(blk[3])<<8))
		qh := uint32(blk[4]) | uint32(blk[5])<<8 | uint32(blk[6])<<16 | uint32(blk[7])<<24
		nib := blk[8+e%16] >> (4 * (e / 16)) & 15
		return d, int(nib) | int(qh>>e&1)<<4, m
	case QuantQ6_16: // scales d0 (values 0-15), d1; ql[16]; qh[8]
		if e >= 16 {
			d = float64(f16to32(uint16(blk[2]) | uint16(blk[3])<<8))
		}
		nib := int(blk[4+e%16] >> (4 * (e / 16)) & 15)
		hi := int(blk[20+e%8] >> (2 * (e / 8)) & 3)
		return d, nib | hi<<4 - 32, 0
	}
	off := 8
	if t == QuantQ4_1 {
		off = 0
	}
	if t == QuantIQ4NL { // the nibble indexes ggml's kvalues_iq4nl
		levels := [16]int{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}
		return d, levels[blk[2+e%16]>>(4*(e/16))&15], 0
	}
	if e < 16 {
		return d, int(blk[2+e]&0x0F) - off, m
	}
	return d, int(blk[2+e-16]>>4) - off, m
}

// ggmlFloat is element j of row r as ggml computes it in float32.
func ggmlFloat(t QuantType, blocks []byte, k, r, j int) float32 {
	d, q, m := ggmlValue(t, blocks, k, r, j)
	return float32(float32(d)*float32(q)) + float32(m)
}

// allQuant are the weight types.
var allQuant = []QuantType{QuantQ8_0, QuantQ4_0, QuantQ4_1, QuantQ5_1, QuantIQ4NL, QuantQ6_16}

func TestPackQuantRows(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, typ := range allQuant {
		for _, sh := range [][2]int{{1, 32}, {33, 64}, {64, 96}, {70, 256}} {
			n, k := sh[0], sh[1]
			blocks := randBlocks(r, typ, n, k)
			m, err := PackQuant(typ, blocks, n, k)
			if err != nil {
				t.Fatal(err)
			}
			row := make([]float32, k)
			for i := range n {
				m.Row(row, i)
				for j := range k {
					if want := ggmlFloat(typ, blocks, k, i, j); row[j] != want {
						t.Fatalf("%v %d×%d: row %d element %d = %g, want %g", typ, n, k, i, j, row[j], want)
					}
				}
			}
			if n > 5 {
				v := m.Rows(3, 5)
				v.Row(row, 1)
				if row[7] != ggmlFloat(typ, blocks, k, 4, 7) {
					t.Errorf("%v: Rows(3,5).Row(1) disagrees with row 4", typ)
				}
			}
		}
		if _, err := PackQuant(typ, make([]byte, 10), 1, 32); err == nil {
			t.Errorf("%v: PackQuant accepted a short buffer", typ)
		}
		if _, err := PackQuant(typ, nil, 1, 30); err == nil {
			t.Errorf("%v: PackQuant accepted k = 30", typ)
		}
	}
}

// quantizeRowSpec is the activation quantization as the package doc of
// compute states it, written plainly.
func quantizeRowSpec(x []float32) (q []int8, d []float32, s []int32) {
	for b := 0; b < len(x); b += qk {
		var amax float32
		for _, v := range x[b : b+qk] {
			if a := float32(math.Abs(float64(v))); a > amax {
				amax = a
			}
		}
		db := amax / 127
		var id float32
		if db != 0 {
			id = 1 / db
		}
		var sum int32
		for _, v := range x[b : b+qk] {
			p := v * id
			qv := int8(math.RoundToEven(float64(p)))
			q = append(q, qv)
			sum += int32(qv)
		}
		d, s = append(d, db), append(s, sum)
	}
	return q, d, s
}

func TestQuantizeRows(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	eachKernels(t, func(t *testing.T) {
		for _, sh := range [][2]int{{1, 32}, {3, 96}, {5, 1024}} {
			m, k := sh[0], sh[1]
			lda := k + 8
			a := make([]float32, m*lda)
			for i := range a {
				a[i] = float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(20)-10)))
			}
			clear(a[0:qk]) // a block of zeros
			if k >= 2*qk {
				for i := qk; i < 2*qk; i++ {
					a[i] = 0.5 * float32(i%5) // amax 2: 1/d = 63.5, and 1·63.5 is a tie
				}
			}
			qa, da, sa := make([]int8, m*k), make([]float32, m*k/qk), make([]int32, m*k/qk)
			QuantizeRows(qa, da, sa, a, m, k, lda)
			for i := range m {
				q, d, s := quantizeRowSpec(a[i*lda : i*lda+k])
				for j := range q {
					if qa[i*k+j] != q[j] {
						t.Fatalf("%d×%d: q[%d,%d] = %d, want %d (x = %g)", m, k, i, j, qa[i*k+j], q[j], a[i*lda+j])
					}
				}
				for b := range d {
					if math.Float32bits(da[i*k/qk+b]) != math.Float32bits(d[b]) || sa[i*k/qk+b] != s[b] {
						t.Fatalf("%d×%d: block %d of row %d: d %g s %d, want %g %d", m, k, b, i, da[i*k/qk+b], sa[i*k/qk+b], d[b], s[b])
					}
				}
			}
		}
	})
}

// refLinearQuant is the float64 reference of a quantized product: A
// quantized per the spec, W from its ggml blocks (Q4_1's minimum
// multiplying da·Σq, as llama.cpp's Q8_1 activations give it); and the
// sum of the magnitudes of the terms, for the tolerance.
func refLinearQuant(t QuantType, blocks []byte, a []float32, m, n, k int) (want, mag []float64) {
	want, mag = make([]float64, m*n), make([]float64, m*n)
	for i := range m {
		q, d, sq := quantizeRowSpec(a[i*k : (i+1)*k])
		for j := range n {
			var s, sa float64
			for b := 0; b < k/qk; b++ {
				var mw float64
				for h := range 2 { // Q6_16's halves have scales of their own
					var dot int
					var dw float64
					for e := h * qk / 2; e < (h+1)*qk/2; e++ {
						var qw int
						dw, qw, mw = ggmlValue(t, blocks, k, j, b*qk+e)
						dot += qw * int(q[b*qk+e])
					}
					s += dw * float64(d[b]) * float64(dot)
					sa += math.Abs(dw * float64(d[b]) * float64(dot))
				}
				mt := mw * float64(float32(d[b]*float32(sq[b])))
				s += mt
				sa += math.Abs(mt)
			}
			want[i*n+j], mag[i*n+j] = s, sa
		}
	}
	return want, mag
}

func TestLinearQuant(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	eachKernels(t, func(t *testing.T) {
		for _, typ := range allQuant {
			for _, sh := range [][3]int{{1, 32, 32}, {1, 64, 256}, {2, 40, 64}, {7, 96, 128}, {8, 33, 64}, {15, 64, 96}, {1, 4000, 64}, {30, 200, 320}, {71, 130, 96}} {
				m, n, k := sh[0], sh[1], sh[2]
				t.Run(fmt.Sprintf("%v/m%d_n%d_k%d", typ, m, n, k), func(t *testing.T) {
					blocks := randBlocks(r, typ, n, k)
					w, err := PackQuant(typ, blocks, n, k)
					if err != nil {
						t.Fatal(err)
					}
					a := randF32(r, m*k)
					want, mag := refLinearQuant(typ, blocks, a, m, n, k)
					for _, acc := range []bool{false, true} {
						c := make([]float32, m*n)
						base := randF32(r, m*n)
						if acc {
							copy(c, base)
						} else {
							for i := range c {
								c[i] = float32(math.NaN())
							}
						}
						LinearQuant(c, a, w, m, acc)
						for i := range c {
							exp := want[i]
							if acc {
								exp += float64(base[i])
							}
							if e := math.Abs(float64(c[i]) - exp); !(e <= dotBound(k, mag[i]+math.Abs(float64(base[i])))) {
								t.Fatalf("accumulate %v: C[%d,%d] = %g, want %g (error %g)", acc, i/n, i%n, c[i], exp, e)
							}
						}
					}
				})
			}
		}
	})
}

// TestLinearMultiQuant mixes quantized and float products over one A, and
// a view of a quantized weight (rows 32..), as LinearMulti takes them.
func TestLinearMultiQuant(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	eachKernels(t, func(t *testing.T) {
		for _, m := range []int{1, 9} {
			k := 64
			b8 := randBlocks(r, QuantQ8_0, 96, k)
			b4 := randBlocks(r, QuantQ4_0, 40, k)
			b41 := randBlocks(r, QuantQ4_1, 70, k)
			b6 := randBlocks(r, QuantQ6_16, 75, k)
			w8, _ := PackQuant(QuantQ8_0, b8, 96, k)
			w4, _ := PackQuant(QuantQ4_0, b4, 40, k)
			w41, _ := PackQuant(QuantQ4_1, b41, 70, k)
			w6, _ := PackQuant(QuantQ6_16, b6, 75, k)
			wf := randF32(r, 24*k)
			a := randF32(r, m*k)
			c8, c4, c41, cf := make([]float32, m*64), make([]float32, m*40), make([]float32, m*38), make([]float32, m*24)
			c6 := make([]float32, m*43)
			LinearMulti(a, m, k, []LinearOut{{C: c8, Q: w8.Rows(32, 96), N: 64}, {C: cf, W32: wf, N: 24}, {C: c4, Q: w4, N: 40}, {C: c6, Q: w6.Rows(32, 75), N: 43}, {C: c41, Q: w41.Rows(32, 70), N: 38}})
			want8, mag8 := refLinearQuant(QuantQ8_0, b8[32*(k/qk)*34:], a, m, 64, k)
			want4, mag4 := refLinearQuant(QuantQ4_0, b4, a, m, 40, k)
			want41, mag41 := refLinearQuant(QuantQ4_1, b41[32*(k/qk)*20:], a, m, 38, k)
			want6, mag6 := refLinearQuant(QuantQ6_16, b6[32*(k/qk)*28:], a, m, 43, k)
			for _, c := range []struct {
				got       []float32
				want, mag []float64
			}{{c8, want8, mag8}, {c4, want4, mag4}, {c41, want41, mag41}, {c6, want6, mag6}} {
				for i := range c.got {
					if e := math.Abs(float64(c.got[i]) - c.want[i]); !(e <= dotBound(k, c.mag[i])) {
						t.Fatalf("m=%d: element %d = %g, want %g", m, i, c.got[i], c.want[i])
					}
				}
			}
			for i := range m {
				for j := range 24 {
					var s float64
					for p := range k {
						s += float64(a[i*k+p]) * float64(wf[j*k+p])
					}
					if math.Abs(float64(cf[i*24+j])-s) > 1e-4 {
						t.Fatalf("m=%d: float product [%d,%d] = %g, want %g", m, i, j, cf[i*24+j], s)
					}
				}
			}
		}
	})
}

func TestQMatrixCopy(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	for _, typ := range allQuant {
		n, k := 70, 64
		blocks := randBlocks(r, typ, n, k)
		src, _ := PackQuant(typ, blocks, n, k)
		for _, c := range [][3]int{{0, 0, 70}, {32, 0, 38}, {5, 33, 30}, {0, 40, 30}} {
			s0, d0, rows := c[0], c[1], c[2]
			dst, _ := NewQMatrix(typ, 80, k)
			dst.Rows(d0, d0+rows).CopyFrom(src.Rows(s0, s0+rows))
			a, b := make([]float32, k), make([]float32, k)
			for i := range 80 {
				dst.Row(a, i)
				if i >= d0 && i < d0+rows {
					src.Row(b, s0+i-d0)
				} else {
					clear(b)
				}
				for j := range a {
					if a[j] != b[j] {
						t.Fatalf("%v copy %v: row %d element %d = %g, want %g", typ, c, i, j, a[j], b[j])
					}
				}
			}
		}
	}
}

// TestIQ4Levels: the package's copy of IQ4_NL's levels is compute's (the
// one the quantizer, the dequantizer and the GGUF reader use).
func TestIQ4Levels(t *testing.T) {
	if iq4Levels != compute.IQ4NLLevels {
		t.Errorf("iq4Levels %v, compute.IQ4NLLevels %v", iq4Levels, compute.IQ4NLLevels)
	}
}
