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
// projections included), and a Q4_K one's Reblock gives Q4_1 blocks only.
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
			switch {
			case typ != Q4_K && st.Reblock != nil:
				t.Errorf("%v %s: a Reblock", typ, name)
			case typ == Q4_K && st.Reblock == nil:
				t.Errorf("%s: Q4_K without a Reblock", name)
			case typ == Q4_K:
				if _, err := st.Reblock(compute.Q8_0); err == nil {
					t.Errorf("%s: Q4_K rewritten as Q8_0", name)
				}
				if q, err := st.Reblock(compute.Q4_1); err != nil || len(q) != rows*cols/32*20 {
					t.Errorf("%s: Q4_K as Q4_1: %d bytes, %v", name, len(q), err)
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
