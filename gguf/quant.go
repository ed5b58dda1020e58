package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/safetensors"
)

// The block formats, as ggml defines them (all fields little-endian; d, m
// and dmin are IEEE half floats):
//
//	Q8_0  32 elements, 34 bytes: d, then 32 int8 q;        x = d·q
//	Q4_0  32 elements, 18 bytes: d, then 16 bytes of nibbles: element j
//	      in the low nibble of byte j, element j+16 in its high nibble;
//	      x = d·(q−8)
//	Q4_1  32 elements, 20 bytes: d, m, 16 bytes of nibbles as Q4_0;
//	      x = d·q + m
//	Q5_0  32 elements, 22 bytes: d, 32 high bits (uint32, bit j for
//	      element j), 16 bytes of low nibbles as Q4_0; x = d·(q−16)
//	Q5_1  32 elements, 24 bytes: d, m, high bits, nibbles; x = d·q + m
//	Q4_K  256 elements, 144 bytes: d, dmin, 12 bytes of eight 6-bit
//	      scales and eight 6-bit mins, 128 bytes of nibbles. Sub-block
//	      i of 32 elements has x = d·sc_i·q − dmin·m_i; the nibbles of
//	      elements 64k…64k+31 are the low halves of bytes 32k…32k+31,
//	      elements 64k+32…64k+63 their high halves.
//	Q5_K  256 elements, 176 bytes: Q4_K with 32 more bytes of fifth bits
//	      (bit 2k of byte l for element 64k+l, bit 2k+1 for 64k+32+l)
//	Q6_K  256 elements, 210 bytes: 128 bytes of low nibbles, 64 bytes of
//	      high 2-bit pairs, 16 int8 scales, d; sub-block i of 16
//	      elements has x = d·sc_i·(q−32).
//	Q2_K  256 elements, 84 bytes: 16 bytes of 4-bit scale and min pairs,
//	      64 bytes of 2-bit quants, d, dmin; sub-block i of 16 elements
//	      has x = d·sc_i·q − dmin·m_i. Element 128n+32j+16h+l is bits
//	      2j..2j+1 of byte 32n+16h+l.
//	Q3_K  256 elements, 110 bytes: 32 bytes of high bits, 64 bytes of
//	      2-bit quants (placed as Q2_K's), 12 bytes of sixteen 6-bit
//	      scales, d; x = d·(sc_i−32)·(q − 4 unless the high bit is set),
//	      the high bit of element 128n+32j+16h+l being bit 4n+j of byte
//	      16h+l.
//	IQ4_NL 32 elements, 18 bytes: d, 16 bytes of nibbles placed as Q4_0's;
//	      x = d·K[q], K the sixteen int8 levels of compute.IQ4NLLevels (a
//	      non-uniform grid, denser near zero)
//	IQ4_XS 256 elements, 136 bytes: d, 16 high scale bits (uint16), 4
//	      bytes of low scale nibbles, 128 bytes of nibbles; sub-block i of
//	      32 elements holds an IQ4_NL block's nibbles (bytes 16i…16i+15)
//	      under the scale d·(ls_i−32), ls_i the 6-bit number whose low
//	      nibble is nibble i%2 of byte i/2 of the low scales and whose top
//	      two bits are bits 2i, 2i+1 of the high ones.
//
// Dequantization follows ggml's reference formulas in float32, each
// product and sum rounded in the order the reference writes it (no fused
// multiply-add), so that it gives ggml's values bit for bit.

// f16Table maps every half-float bit pattern to its float32 value.
var f16Table = sync.OnceValue(func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = safetensors.F16ToFloat32(uint16(i))
	}
	return &t
})

func f16(b []byte) float32 { return f16Table()[binary.LittleEndian.Uint16(b)] }

// dequantizer turns whole blocks of src into dst.
type dequantizer func(dst []float32, src []byte)

var dequantizers = map[TensorType]dequantizer{
	F32:  dequantF32,
	F16:  dequantF16,
	BF16: dequantBF16,
	Q8_0: dequantQ8_0,
	Q4_0: dequantQ4_0,
	Q4_1: dequantQ4_1,
	Q5_0: dequantQ5_0,
	Q5_1: dequantQ5_1,
	Q4_K: dequantQ4_K,
	Q5_K: dequantQ5_K,
	Q6_K: dequantQ6_K,
	Q2_K: dequantQ2_K,
	Q3_K: dequantQ3_K,

	IQ4_NL: dequantIQ4_NL,
	IQ4_XS: dequantIQ4_XS,
}

// Dequantize decodes src, the bytes of len(dst) elements of type t, into
// dst. len(dst) must be a whole number of t's blocks and src exactly their
// size.
func Dequantize(dst []float32, src []byte, t TensorType) error {
	fn, ok := dequantizers[t]
	if !ok {
		return fmt.Errorf("cannot read %s values (only %s)", t, readableNames())
	}
	block, size := t.BlockSize(), t.TypeSize()
	if len(dst)%block != 0 {
		return fmt.Errorf("%d elements are not a whole number of %s blocks of %d", len(dst), t, block)
	}
	if want := len(dst) / block * size; len(src) != want {
		return fmt.Errorf("%d elements of %s take %d bytes, got %d", len(dst), t, want, len(src))
	}
	fn(dst, src)
	return nil
}

// DequantizeParallel is Dequantize spread over the machine's cores in
// chunks of whole blocks.
func DequantizeParallel(dst []float32, src []byte, t TensorType) error {
	const chunk = 1 << 16 // elements per goroutine, at least
	workers := min(runtime.GOMAXPROCS(0), len(dst)/chunk)
	block := t.BlockSize()
	if workers <= 1 || block == 0 {
		return Dequantize(dst, src, t)
	}
	if err := Dequantize(dst[:0], src[:0], t); err != nil { // type check only
		return err
	}
	if len(dst)%block != 0 || len(src) != len(dst)/block*t.TypeSize() {
		return Dequantize(dst, src, t) // reports the mismatch
	}
	blocks := len(dst) / block
	per := (blocks + workers - 1) / workers
	var wg sync.WaitGroup
	for lo := 0; lo < blocks; lo += per {
		hi := min(lo+per, blocks)
		wg.Add(1)
		go func() {
			defer wg.Done()
			dequantizers[t](dst[lo*block:hi*block], src[lo*t.TypeSize():hi*t.TypeSize()])
		}()
	}
	wg.Wait()
	return nil
}

func dequantF32(dst []float32, src []byte) {
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}

func dequantF16(dst []float32, src []byte) {
	tab := f16Table()
	for i := range dst {
		dst[i] = tab[binary.LittleEndian.Uint16(src[2*i:])]
	}
}

func dequantBF16(dst []float32, src []byte) {
	for i := range dst {
		dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[2*i:])) << 16)
	}
}

func dequantQ8_0(dst []float32, src []byte) {
	for b := 0; len(dst) > 0; b++ {
		blk := src[34*b : 34*b+34]
		d := f16(blk)
		for j, q := range blk[2:34] {
			dst[j] = float32(int8(q)) * d
		}
		dst = dst[32:]
	}
}

func dequantQ4_0(dst []float32, src []byte) {
	for b := 0; len(dst) > 0; b++ {
		blk := src[18*b : 18*b+18]
		d := f16(blk)
		for j, q := range blk[2:18] {
			dst[j] = float32(int(q&0xF)-8) * d
			dst[j+16] = float32(int(q>>4)-8) * d
		}
		dst = dst[32:]
	}
}

func dequantQ4_1(dst []float32, src []byte) {
	for b := 0; len(dst) > 0; b++ {
		blk := src[20*b : 20*b+20]
		d, m := f16(blk), f16(blk[2:])
		for j, q := range blk[4:20] {
			dst[j] = float32(float32(q&0xF)*d) + m
			dst[j+16] = float32(float32(q>>4)*d) + m
		}
		dst = dst[32:]
	}
}

func dequantQ5_0(dst []float32, src []byte) {
	for b := 0; len(dst) > 0; b++ {
		blk := src[22*b : 22*b+22]
		d := f16(blk)
		qh := binary.LittleEndian.Uint32(blk[2:])
		for j, q := range blk[6:22] {
			hi0 := byte(qh>>j) & 1 << 4
			hi1 := byte(qh>>(j+16)) & 1 << 4
			dst[j] = float32(int(q&0xF|hi0)-16) * d
			dst[j+16] = float32(int(q>>4|hi1)-16) * d
		}
		dst = dst[32:]
	}
}

func dequantQ5_1(dst []float32, src []byte) {
	for b := 0; len(dst) > 0; b++ {
		blk := src[24*b : 24*b+24]
		d, m := f16(blk), f16(blk[2:])
		qh := binary.LittleEndian.Uint32(blk[4:])
		for j, q := range blk[8:24] {
			hi0 := byte(qh>>j) & 1 << 4
			hi1 := byte(qh>>(j+16)) & 1 << 4
			dst[j] = float32(float32(q&0xF|hi0)*d) + m
			dst[j+16] = float32(float32(q>>4|hi1)*d) + m
		}
		dst = dst[32:]
	}
}

// scaleMinK4 unpacks the 6-bit scale and min of sub-block i (0-7) from
// the 12 scale bytes of a Q4_K or Q5_K block: sub-blocks 0-3 keep theirs
// in the low 6 bits of bytes i and i+4; sub-blocks 4-7 in a nibble of
// byte i+4 with their top 2 bits in the spare bits of bytes i−4 and i.
func scaleMinK4(i int, s []byte) (sc, m byte) {
	if i < 4 {
		return s[i] & 63, s[i+4] & 63
	}
	return s[i+4]&0xF | (s[i-4]>>6)<<4, s[i+4]>>4 | (s[i]>>6)<<4
}

func dequantQ4_K(dst []float32, src []byte) {
	for b := 0; len(dst) > 0; b++ {
		blk := src[144*b : 144*b+144]
		d, dmin := f16(blk), f16(blk[2:])
		scales, qs := blk[4:16], blk[16:144]
		for k := range 4 { // 64 elements: two sub-blocks sharing 32 bytes
			sc, m := scaleMinK4(2*k, scales)
			d1, m1 := d*float32(sc), dmin*float32(m)
			sc, m = scaleMinK4(2*k+1, scales)
			d2, m2 := d*float32(sc), dmin*float32(m)
			y, q := dst[64*k:64*k+64], qs[32*k:32*k+32]
			for l, v := range q {
				y[l] = float32(d1*float32(v&0xF)) - m1
				y[l+32] = float32(d2*float32(v>>4)) - m2
			}
		}
		dst = dst[qk:]
	}
}

func dequantQ5_K(dst []float32, src []byte) {
	for b := 0; len(dst) > 0; b++ {
		blk := src[176*b : 176*b+176]
		d, dmin := f16(blk), f16(blk[2:])
		scales, qh, qs := blk[4:16], blk[16:48], blk[48:176]
		for k := range 4 {
			sc, m := scaleMinK4(2*k, scales)
			d1, m1 := d*float32(sc), dmin*float32(m)
			sc, m = scaleMinK4(2*k+1, scales)
			d2, m2 := d*float32(sc), dmin*float32(m)
			y, q := dst[64*k:64*k+64], qs[32*k:32*k+32]
			for l, v := range q {
				lo := v&0xF | (qh[l]>>(2*k)&1)<<4
				hi := v>>4 | (qh[l]>>(2*k+1)&1)<<4
				y[l] = float32(d1*float32(lo)) - m1
				y[l+32] = float32(d2*float32(hi)) - m2
			}
		}
		dst = dst[qk:]
	}
}

func dequantQ6_K(dst []float32, src []byte) {
	for b := 0; len(dst) > 0; b++ {
		blk := src[210*b : 210*b+210]
		d := f16(blk[208:])
		for n := range 2 { // halves of 128 elements
			ql, qh, sc := blk[64*n:64*n+64], blk[128+32*n:128+32*n+32], blk[192+8*n:192+8*n+8]
			y := dst[128*n : 128*n+128]
			for l := range 32 {
				is := l / 16
				q1 := int(ql[l]&0xF|(qh[l]>>0&3)<<4) - 32
				q2 := int(ql[l+32]&0xF|(qh[l]>>2&3)<<4) - 32
				q3 := int(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
				q4 := int(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
				y[l] = float32(d*float32(int8(sc[is]))) * float32(q1)
				y[l+32] = float32(d*float32(int8(sc[is+2]))) * float32(q2)
				y[l+64] = float32(d*float32(int8(sc[is+4]))) * float32(q3)
				y[l+96] = float32(d*float32(int8(sc[is+6]))) * float32(q4)
			}
		}
		dst = dst[qk:]
	}
}

func dequantQ2_K(dst []float32, src []byte) {
	for b := 0; len(dst) > 0; b++ {
		blk := src[84*b : 84*b+84]
		scales, qs := blk[:16], blk[16:80]
		d, dmin := f16(blk[80:]), f16(blk[82:])
		for n := range 2 { // halves of 128 elements
			q := qs[32*n : 32*n+32]
			for j := range 4 { // 2-bit planes
				for h := range 2 { // sub-blocks of 16
					sc := scales[8*n+2*j+h]
					dl, ml := d*float32(sc&0xF), dmin*float32(sc>>4)
					y := dst[128*n+32*j+16*h:]
					for l := range 16 {
						y[l] = float32(dl*float32(q[16*h+l]>>(2*j)&3)) - ml
					}
				}
			}
		}
		dst = dst[qk:]
	}
}

// scaleQ3K unpacks the 6-bit scale of sub-block k (0-15) of a Q3_K block:
// its low 4 bits are a nibble of byte k%8 (the low one for k < 8), its
// high 2 bits are bits 2(k/4) of byte 8+k%4.
func scaleQ3K(s []byte, k int) int {
	low := s[k%8] & 0xF
	if k >= 8 {
		low = s[k%8] >> 4
	}
	return int(low|(s[8+k%4]>>(2*(k/4))&3)<<4) - 32
}

func dequantQ3_K(dst []float32, src []byte) {
	for b := 0; len(dst) > 0; b++ {
		blk := src[110*b : 110*b+110]
		hm, qs, scales := blk[:32], blk[32:96], blk[96:108]
		d := f16(blk[108:])
		for n := range 2 {
			q := qs[32*n : 32*n+32]
			for j := range 4 {
				bit := byte(1) << (4*n + j)
				for h := range 2 {
					dl := d * float32(scaleQ3K(scales, 8*n+2*j+h))
					y := dst[128*n+32*j+16*h:]
					for l := range 16 {
						v := int(q[16*h+l] >> (2 * j) & 3)
						if hm[16*h+l]&bit == 0 {
							v -= 4
						}
						y[l] = dl * float32(v)
					}
				}
			}
		}
		dst = dst[qk:]
	}
}

func dequantIQ4_NL(dst []float32, src []byte) {
	for b := 0; len(dst) > 0; b++ {
		blk := src[18*b : 18*b+18]
		d := f16(blk)
		for j, q := range blk[2:18] {
			dst[j] = d * float32(compute.IQ4NLLevels[q&0xF])
			dst[j+16] = d * float32(compute.IQ4NLLevels[q>>4])
		}
		dst = dst[32:]
	}
}

// scaleIQ4XS is the 6-bit scale ls_i of sub-block i (0-7) of an IQ4_XS
// block (the sub-block's scale is d·(ls_i−32)).
func scaleIQ4XS(blk []byte, i int) int {
	h := binary.LittleEndian.Uint16(blk[2:])
	return int(blk[4+i/2]>>(4*uint(i%2))&0xF) | int(h>>(2*uint(i))&3)<<4
}

func dequantIQ4_XS(dst []float32, src []byte) {
	for b := 0; len(dst) > 0; b++ {
		blk := src[136*b : 136*b+136]
		d := f16(blk)
		for i := range 8 {
			dl := d * float32(scaleIQ4XS(blk, i)-32)
			y := dst[32*i : 32*i+32]
			for j, q := range blk[8+16*i : 8+16*i+16] {
				y[j] = dl * float32(compute.IQ4NLLevels[q&0xF])
				y[j+16] = dl * float32(compute.IQ4NLLevels[q>>4])
			}
		}
		dst = dst[qk:]
	}
}
