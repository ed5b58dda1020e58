package gguf

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/model"
)

// TestQ4KToQ4_1: every element of Q4_K blocks rewritten as Q4_1, and of
// Q5_K blocks rewritten as Q5_1, decodes (refElement, from the format
// description) to its K-quant value up to the rounding of each
// sub-block's scale and minimum to a half: at most 2⁻¹¹ of |D|·q + |M|
// for normal halves, 2⁻²⁵·(q+1) below them. Blocks from the quantizer and
// random bytes (every scale, minimum, nibble and fifth-bit pattern); a
// scale beyond a half is refused.
func TestQ4KToQ4_1(t *testing.T) {
	for _, c := range []struct {
		from, to  TensorType
		size, out int
		top       float64 // the largest q
		conv      func([]byte) ([]byte, error)
	}{{Q4_K, Q4_1, 144, 20, 15, Q4KToQ4_1}, {Q5_K, Q5_1, 176, 24, 31, Q5KToQ5_1}} {
		r := rand.New(rand.NewPCG(7, 7))
		x := make([]float32, 4*256)
		for i := range x {
			x[i] = float32(r.NormFloat64() * 0.02 * float64(1+i/256))
		}
		quantized := make([]byte, 4*c.size)
		if err := Quantize(quantized, x, c.from); err != nil {
			t.Fatal(err)
		}
		random := make([]byte, 64*c.size)
		for i := range random {
			random[i] = byte(r.Uint32())
		}
		for b := range 64 { // d and dmin of either sign over a range of magnitudes, finite
			for _, at := range []int{0, 2} {
				h := uint16(r.IntN(0x6000)) | uint16(r.IntN(2))<<15 // below 512: 63 times it is a half
				binary.LittleEndian.PutUint16(random[c.size*b+at:], h)
			}
		}
		for name, src := range map[string][]byte{"quantized": quantized, "random": random} {
			q, err := c.conv(src)
			if err != nil {
				t.Fatalf("%v %s: %v", c.from, name, err)
			}
			if len(q) != len(src)/c.size*8*c.out {
				t.Fatalf("%v %s: %d bytes of %v for %d", c.from, name, len(q), c.to, len(src))
			}
			worst := 0.0
			for e := range len(src) / c.size * 256 {
				want := refElement(c.from, src[e/256*c.size:], e%256)
				blk := q[e/32*c.out:]
				got := refElement(c.to, blk, e%32)
				d, m := math.Abs(half(blk, 0)), math.Abs(half(blk, 2))
				tol := math.Ldexp(d*c.top+m, -11) + math.Ldexp(c.top+1, -25) + 1e-6*math.Abs(want)
				if diff := math.Abs(got - want); !(diff <= tol) {
					t.Fatalf("%v %s: element %d is %g as %v, %g as %v (tolerance %g)", c.from, name, e, got, c.to, want, c.from, tol)
				} else if d != 0 {
					worst = max(worst, diff/d)
				}
			}
			if name == "quantized" { // random minimums dwarf their scales
				t.Logf("%v → %v, %s: the largest change is %.2g of a quantization step", c.from, c.to, name, worst)
			}
		}
	}
	r := rand.New(rand.NewPCG(8, 8))
	random := make([]byte, 144)
	for i := range random {
		random[i] = byte(r.Uint32())
	}
	if _, err := Q4KToQ4_1(random[:100]); err == nil {
		t.Error("a partial block was rewritten")
	}
	big := make([]byte, 144)
	binary.LittleEndian.PutUint16(big, 0x7bff) // d = 65504
	big[4] = 63                                // sub-block 0's scale: 63·65504 is not a half
	if _, err := Q4KToQ4_1(big); err == nil || !strings.Contains(err.Error(), "finite half") {
		t.Errorf("a scale beyond the halves: %v", err)
	}
}

// TestTensorRows: a block-quantized matrix's Rows gives, for any range of
// rows, exactly what Float32 gives for them (llama's permuted q and k
// projections included), and a Q4_K one's Reblock gives Q4_1 blocks.
func TestTensorRows(t *testing.T) {
	tok := trainedTokenizer(t)
	for _, typ := range []TensorType{Q6_K, Q4_K, Q8_0} {
		dir := t.TempDir()
		if err := model.WriteRandomCheckpoint(dir, smallSpec(model.ArchLlama, tok.VocabSize())); err != nil {
			t.Fatal(err)
		}
		path := convert(t, dir, tok, typ, false).write(t, filepath.Join(t.TempDir(), "m.gguf"))
		m, err := OpenModel(path)
		if err != nil {
			t.Fatal(err)
		}
		checked := 0
		for _, name := range []string{"model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight", "model.layers.1.mlp.down_proj.weight", "model.embed_tokens.weight"} {
			st, err := m.Tensor(name)
			if err != nil {
				t.Fatal(err)
			}
			if st.Rows == nil {
				t.Fatalf("%v %s: no Rows", typ, name)
			}
			all, _, err := st.Float32()
			if err != nil {
				t.Fatal(err)
			}
			rows, cols := st.Shape[0], st.Shape[1]
			for _, r := range [][2]int{{0, rows}, {0, 1}, {rows - 1, rows}, {rows / 3, rows/3 + 5}} {
				got := make([]float32, (r[1]-r[0])*cols)
				if err := st.Rows(got, r[0], r[1]); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, all[r[0]*cols:r[1]*cols]) {
					t.Fatalf("%v %s: rows [%d,%d) differ from Float32's", typ, name, r[0], r[1])
				}
			}
			to := ReblockTarget(typ)
			switch {
			case to == 0 && st.Reblock != nil:
				t.Errorf("%v %s: a Reblock", typ, name)
			case to != 0 && st.Reblock == nil:
				t.Errorf("%s: %v without a Reblock", name, typ)
			case to != 0:
				if dt, q, err := st.Reblock(); err != nil || dt != to || len(q) != to.Bytes(rows*cols) {
					t.Errorf("%s: %v as %v: %d bytes, %v", name, typ, dt, len(q), err)
				}
			}
			checked++
		}
		m.Close()
		if checked != 4 {
			t.Fatalf("%v: %d tensors checked", typ, checked)
		}
	}
}

// FuzzQ4KToQ4_1: any bytes are refused or rewritten whole, never a panic:
// 20 bytes of Q4_1 per 32 elements, every nibble kept.
func FuzzQ4KToQ4_1(f *testing.F) {
	blk := make([]byte, 144)
	for i := range blk {
		blk[i] = byte(i * 7)
	}
	binary.LittleEndian.PutUint16(blk, 0x1400)
	binary.LittleEndian.PutUint16(blk[2:], 0x1000)
	f.Add(blk)
	f.Add(blk[:100])
	f.Add(append(blk, blk...))
	f.Fuzz(func(t *testing.T, src []byte) {
		q, err := Q4KToQ4_1(src)
		if err != nil {
			return
		}
		if len(src)%144 != 0 || len(q) != len(src)/144*160 {
			t.Fatalf("%d bytes rewritten as %d", len(src), len(q))
		}
		for e := range len(src) / 144 * 256 {
			k := src[e/256*144+16:]
			sub, l := e%256/32, e%32
			want := k[32*(sub/2)+l] >> (4 * uint(sub%2)) & 15
			y := q[e/32*20+4:]
			got := y[l%16] >> (4 * uint(l/16)) & 15
			if got != want {
				t.Fatalf("element %d: nibble %d, want %d", e, got, want)
			}
		}
	})
}

// TestReblock: Q5_0 rewritten as Q5_1 and IQ4_NL as Q8_0 decode to the
// same float32 values (Dequantize of either; bit for bit but for the
// sign of a zero), and match the
// format description (refElement); IQ4_XS as Q8_0 differs only by each
// sub-block's scale rounded to a half (2⁻¹¹ of |D|·127). Blocks from the
// quantizer and random ones; a scale beyond a half, a partial block and a
// type with no target are refused.
func TestReblock(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for _, c := range []struct {
		from  TensorType
		to    compute.DType
		exact bool
	}{{Q5_0, compute.Q5_1, true}, {IQ4_XS, compute.IQ4_NL, false}, {Q4_K, compute.Q4_1, false}, {Q5_K, compute.Q5_1, false}} {
		if got := ReblockTarget(c.from); got != c.to {
			t.Errorf("%v: target %v, want %v", c.from, got, c.to)
		}
		to, _ := ParseTensorType(c.to.String())
		for name, src := range reblockInputs(t, rng, c.from) {
			q, err := Reblock(src, c.from)
			if err != nil {
				t.Fatalf("%v %s: %v", c.from, name, err)
			}
			n := len(src) / c.from.TypeSize() * c.from.BlockSize()
			if len(q) != c.to.Bytes(n) {
				t.Fatalf("%v %s: %d bytes of %v for %d elements", c.from, name, len(q), c.to, n)
			}
			want, got := make([]float32, n), make([]float32, n)
			if err := Dequantize(want, src, c.from); err != nil {
				t.Fatal(err)
			}
			if err := Dequantize(got, q, to); err != nil {
				t.Fatal(err)
			}
			for e := range n {
				blk := q[e/32*to.TypeSize():]
				ref := refElement(to, blk, e%32)
				if math.Abs(ref-float64(got[e])) > 1e-6*math.Abs(ref) {
					t.Fatalf("%v %s: element %d decodes to %v, the format says %v", c.from, name, e, got[e], ref)
				}
				if c.exact {
					if got[e] != want[e] { // −0 as +0 (Q5_0's 0·d with d < 0)
						t.Fatalf("%v %s: element %d is %v as %v, %v as %v", c.from, name, e, got[e], c.to, want[e], c.from)
					}
					continue
				}
				if c.from == IQ4_XS {
					if diff := math.Abs(float64(got[e] - want[e])); diff > math.Ldexp(math.Abs(half(blk, 0))*127, -11)+1e-30 {
						t.Fatalf("%v %s: element %d is %v as %v, %v as %v", c.from, name, e, got[e], c.to, want[e], c.from)
					}
				}
			}
			if _, err := Reblock(src[:len(src)-1], c.from); err == nil {
				t.Errorf("%v: a partial block was rewritten", c.from)
			}
		}
	}
	big := make([]byte, 22)
	binary.LittleEndian.PutUint16(big, 0x7bff) // d = 65504: −16·d is not a half
	if _, err := Reblock(big, Q5_0); err == nil || !strings.Contains(err.Error(), "finite half") {
		t.Errorf("a Q5_0 minimum beyond the halves: %v", err)
	}
	big = make([]byte, 136)
	binary.LittleEndian.PutUint16(big, 0x7bff) // d = 65504, ls = 0: −32·d
	if _, err := Reblock(big, IQ4_XS); err == nil || !strings.Contains(err.Error(), "finite half") {
		t.Errorf("an IQ4_XS scale beyond the halves: %v", err)
	}
	for _, typ := range []TensorType{Q2_K, IQ4_NL} {
		if _, err := Reblock(make([]byte, typ.TypeSize()), typ); err == nil || ReblockTarget(typ) != 0 {
			t.Errorf("%v rewritten (target %v): %v", typ, ReblockTarget(typ), err)
		}
	}
}

// FuzzReblock: any bytes of any rewritable type are refused or rewritten
// whole, never a panic.
func FuzzReblock(f *testing.F) {
	for i, typ := range []TensorType{Q4_K, Q5_K, Q5_0, IQ4_XS, Q6_K, Q3_K} {
		f.Add(uint8(i), randomBlocks(rand.New(rand.NewPCG(1, uint64(i))), typ, 2))
	}
	f.Fuzz(func(t *testing.T, which uint8, src []byte) {
		typ := []TensorType{Q4_K, Q5_K, Q5_0, IQ4_XS, Q6_K, Q3_K}[int(which)%6]
		q, err := Reblock(src, typ)
		if err != nil {
			return
		}
		n := len(src) / typ.TypeSize() * typ.BlockSize()
		if len(src)%typ.TypeSize() != 0 || len(q) != ReblockTarget(typ).Bytes(n) {
			t.Fatalf("%v: %d bytes rewritten as %d", typ, len(src), len(q))
		}
	})
}

// TestReblockQ6_16: Q6_K and Q3_K blocks rewritten as Q6_16 decode
// (compute.Dequantize, and the layout read from compute's package doc) to
// their values up to each sub-block's scale rounded to a half (2⁻¹¹ of
// |D|·32 or |D|·4); a Q3_K value's q is kept exactly. Blocks from the
// quantizer and random ones; a scale beyond a half and a partial block
// are refused.
func TestReblockQ6_16(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 10))
	for _, c := range []struct {
		from TensorType
		qmax float64
	}{{Q6_K, 32}, {Q3_K, 4}} {
		if got := ReblockTarget(c.from); got != compute.Q6_16 {
			t.Errorf("%v: target %v, want Q6_16", c.from, got)
		}
		for name, src := range reblockInputs(t, rng, c.from) {
			q, err := Reblock(src, c.from)
			if err != nil {
				t.Fatalf("%v %s: %v", c.from, name, err)
			}
			n := len(src) / c.from.TypeSize() * 256
			if len(q) != compute.Q6_16.Bytes(n) {
				t.Fatalf("%v %s: %d bytes for %d elements", c.from, name, len(q), n)
			}
			want, got := make([]float32, n), make([]float32, n)
			if err := Dequantize(want, src, c.from); err != nil {
				t.Fatal(err)
			}
			if err := compute.Dequantize(compute.Q6_16, got, q); err != nil {
				t.Fatal(err)
			}
			for e := range n {
				blk := q[e/32*28:]
				i := e % 32
				d := half(blk, 2*(i/16))
				qv := int(blk[4+i%16]>>(4*(i/16))&15) | int(blk[20+i%8]>>(2*(i/8))&3)<<4
				if ref := d * float64(qv-32); ref != float64(got[e]) {
					t.Fatalf("%v %s: element %d decodes to %v, the layout says %v", c.from, name, e, got[e], ref)
				}
				if diff := math.Abs(float64(got[e] - want[e])); diff > math.Ldexp(math.Abs(d)*c.qmax, -11)+1e-30 {
					t.Fatalf("%v %s: element %d is %v as Q6_16, %v as %v", c.from, name, e, got[e], want[e], c.from)
				}
				if c.from == Q3_K && d != 0 {
					if w := float64(want[e]) / d; math.Abs(w-float64(qv-32)) > 0.01 {
						t.Fatalf("Q3_K %s: element %d has q %d, the value says %.3f", name, e, qv-32, w)
					}
				}
			}
			if _, err := Reblock(src[:len(src)-1], c.from); err == nil {
				t.Errorf("%v: a partial block was rewritten", c.from)
			}
		}
	}
	big := make([]byte, 210)
	binary.LittleEndian.PutUint16(big[208:], 0x7bff) // d = 65504
	big[192] = 100                                   // sub-block 0's scale: 100·65504 is not a half
	if _, err := Reblock(big, Q6_K); err == nil || !strings.Contains(err.Error(), "finite half") {
		t.Errorf("a Q6_K scale beyond the halves: %v", err)
	}
}

// reblockInputs are blocks of typ to rewrite: from the quantizer (2,048
// values over five magnitudes) and random (64 blocks), by name.
func reblockInputs(t *testing.T, rng *rand.Rand, typ TensorType) map[string][]byte {
	t.Helper()
	x := make([]float32, 8*256)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * math.Ldexp(1, i/256%5-3))
	}
	quantized := make([]byte, len(x)/typ.BlockSize()*typ.TypeSize())
	if err := Quantize(quantized, x, typ); err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{"quantized": quantized, "random": randomBlocks(rng, typ, 64)}
}
