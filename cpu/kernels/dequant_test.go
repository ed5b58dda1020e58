package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestDequantQ8_0 checks DequantQ8_0 on every kernel set against d·q
// computed one value at a time, bit for bit: random blocks and the edge
// cases of the half scale (zero, subnormal, negative, the largest) and of
// q (−128, 127).
func TestDequantQ8_0(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 0))
	block := func(d uint16, q func(j int) int8) []byte {
		b := make([]byte, 34)
		b[0], b[1] = byte(d), byte(d>>8)
		for j := range 32 {
			b[2+j] = byte(q(j))
		}
		return b
	}
	random := func(int) int8 { return int8(r.IntN(256) - 128) }
	var many []byte
	for range 37 {
		many = append(many, block(uint16(r.IntN(0x7c00))|uint16(r.IntN(2))<<15, random)...)
	}
	cases := []struct {
		name   string
		blocks []byte
	}{
		{"none", nil},
		{"zero-scale", block(0, random)},
		{"subnormal-scale", block(0x0001, random)},
		{"negative-scale", block(0xbc00, func(j int) int8 { return int8(j*8 - 128) })},
		{"largest-scale", block(0x7bff, func(j int) int8 { return []int8{-128, 127, 0, 1}[j%4] })},
		{"one-block", block(0x2e66, random)},
		{"37-blocks", many},
	}
	eachKernels(t, func(t *testing.T) {
		for _, c := range cases {
			nb := len(c.blocks) / 34
			want := make([]float32, nb*32)
			for b := range nb {
				d := f16to32(uint16(c.blocks[b*34]) | uint16(c.blocks[b*34+1])<<8)
				for j := range 32 {
					want[b*32+j] = d * float32(int8(c.blocks[b*34+2+j]))
				}
			}
			got := make([]float32, nb*32+1)
			got[nb*32] = 7 // past the end: untouched
			DequantQ8_0(got[:nb*32], c.blocks)
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s: value %d = %v, want %v", c.name, i, got[i], want[i])
				}
			}
			if got[nb*32] != 7 {
				t.Fatalf("%s: wrote past the end", c.name)
			}
		}
	})
}

// TestPrefetch runs Prefetch over lengths around a cache line (it only
// hints, so the test is that it reads nothing past the slice and returns).
func TestPrefetch(t *testing.T) {
	buf := make([]byte, 300)
	for _, n := range []int{0, 1, 63, 64, 65, 300} {
		Prefetch(buf[:n])
	}
}
