package gguf

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/safetensors"
)

// quantizer encodes whole blocks of src into dst. When recon is not nil
// it receives what each element decodes to, as the quantizer computes it
// from its own scales and quants (a check of the encoding in tests).
type quantizer func(dst []byte, src, recon []float32)

var quantizers = map[TensorType]quantizer{
	F32:  quantF32,
	F16:  quantF16,
	BF16: quantBF16,
	Q8_0: quantQ8_0,
	Q4_0: quantQ4_0,
	Q4_1: quantQ4_1,
	Q5_0: quantQ5_0,
	Q5_1: quantQ5_1,
	Q4_K: quantQ4_K,
	Q5_K: quantQ5_K,
	Q6_K: quantQ6_K,
	Q2_K: quantQ2_K,
	Q3_K: quantQ3_K,

	IQ4_NL: quantIQ4_NL,
	IQ4_XS: quantIQ4_XS,
}

// EncodedSize is the number of bytes n elements of type t take, or an
// error when n is not a whole number of t's blocks.
func EncodedSize(t TensorType, n int) (int, error) {
	block := t.BlockSize()
	if block == 0 {
		return 0, fmt.Errorf("unknown tensor type %s", t)
	}
	if n%block != 0 {
		return 0, fmt.Errorf("%d elements are not a whole number of %s blocks of %d", n, t, block)
	}
	return n / block * t.TypeSize(), nil
}

// Quantize encodes src as values of type t into dst, which must hold
// exactly EncodedSize(t, len(src)) bytes. F32, F16 and BF16 round to
// nearest even. The block formats take a scale per block from its largest
// magnitude (Q8_0, Q4_0, Q5_0, the sub-blocks of Q6_K and Q3_K) or its
// range (Q4_1, Q5_1, the sub-blocks of Q4_K, Q5_K and Q2_K) and round
// each value to the nearest
// step: the plain reference scheme, without the search for better scales
// that llama.cpp's quantizer does for K-quants, so its K-quant files are
// somewhat more accurate than these. IQ4_NL and IQ4_XS, whose levels are
// not evenly spaced, try a few scales per 32-element block and keep the
// best least-squares fit (a plainer search than llama.cpp's,
// which also weighs each element by its importance).
func Quantize(dst []byte, src []float32, t TensorType) error {
	fn, ok := quantizers[t]
	if !ok {
		return fmt.Errorf("cannot write %s values", t)
	}
	size, err := EncodedSize(t, len(src))
	if err != nil {
		return err
	}
	if len(dst) != size {
		return fmt.Errorf("%d elements of %s take %d bytes, got room for %d", len(src), t, size, len(dst))
	}
	fn(dst, src, nil)
	return nil
}

func putF16(b []byte, f float32) float32 {
	h := safetensors.Float32ToF16(f)
	binary.LittleEndian.PutUint16(b, h)
	return f16Table()[h]
}

func quantF32(dst []byte, src, recon []float32) {
	for i, v := range src {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
	}
	if recon != nil {
		copy(recon, src)
	}
}

func quantF16(dst []byte, src, recon []float32) {
	for i, v := range src {
		h := safetensors.Float32ToF16(v)
		binary.LittleEndian.PutUint16(dst[2*i:], h)
		if recon != nil {
			recon[i] = f16Table()[h]
		}
	}
}

func quantBF16(dst []byte, src, recon []float32) {
	for i, v := range src {
		h := safetensors.Float32ToBF16(v)
		binary.LittleEndian.PutUint16(dst[2*i:], h)
		if recon != nil {
			recon[i] = safetensors.BF16ToFloat32(h)
		}
	}
}

// absMax returns the value of largest magnitude (its sign kept) and that
// magnitude.
func absMax(xs []float32) (signed, amax float32) {
	for _, x := range xs {
		if a := float32(math.Abs(float64(x))); a > amax {
			amax, signed = a, x
		}
	}
	return signed, amax
}

func minMax(xs []float32) (lo, hi float32) {
	lo, hi = xs[0], xs[0]
	for _, x := range xs[1:] {
		lo, hi = min(lo, x), max(hi, x)
	}
	return lo, hi
}

// nearest rounds half away from zero, as C's roundf.
func nearest(x float32) int { return int(math.Round(float64(x))) }

func clampInt(x, lo, hi int) int { return max(lo, min(hi, x)) }

func inverse(d float32) float32 {
	if d == 0 {
		return 0
	}
	return 1 / d
}

func quantQ8_0(dst []byte, src, recon []float32) {
	for b := 0; len(src) > 0; b++ {
		blk, x := dst[34*b:34*b+34], src[:32]
		_, amax := absMax(x)
		d := amax / 127
		id := inverse(d)
		dh := putF16(blk, d)
		for j, v := range x {
			q := clampInt(nearest(v*id), -127, 127)
			blk[2+j] = byte(int8(q))
			if recon != nil {
				recon[32*b+j] = float32(q) * dh
			}
		}
		src = src[32:]
	}
}

// quantSymmetric encodes a 32-element block of Q4_0 (bits 4) or Q5_0
// (bits 5): the value of largest magnitude maps to the most negative
// quant, −2^(bits−1). It returns the scale as stored (rounded to F16).
func quantSymmetric(blk []byte, x []float32, bits int) (d float32, q [32]int) {
	signed, _ := absMax(x)
	half := 1 << (bits - 1)
	d = signed / float32(-half)
	id := inverse(d)
	for j, v := range x {
		q[j] = clampInt(int(v*id+float32(half)+0.5), 0, 2*half-1)
	}
	return putF16(blk, d), q
}

func quantQ4_0(dst []byte, src, recon []float32) {
	for b := 0; len(src) > 0; b++ {
		blk := dst[18*b : 18*b+18]
		d, q := quantSymmetric(blk, src[:32], 4)
		for j := range 16 {
			blk[2+j] = byte(q[j]) | byte(q[j+16])<<4
		}
		if recon != nil {
			for j := range 32 {
				recon[32*b+j] = float32(q[j]-8) * d
			}
		}
		src = src[32:]
	}
}

func quantQ5_0(dst []byte, src, recon []float32) {
	for b := 0; len(src) > 0; b++ {
		blk := dst[22*b : 22*b+22]
		d, q := quantSymmetric(blk, src[:32], 5)
		var qh uint32
		for j := range 16 {
			blk[6+j] = byte(q[j]&0xF) | byte(q[j+16]&0xF)<<4
			qh |= uint32(q[j]>>4&1)<<j | uint32(q[j+16]>>4&1)<<(j+16)
		}
		binary.LittleEndian.PutUint32(blk[2:], qh)
		if recon != nil {
			for j := range 32 {
				recon[32*b+j] = float32(q[j]-16) * d
			}
		}
		src = src[32:]
	}
}

// quantAffine encodes a 32-element block of Q4_1 or Q5_1: the minimum and
// the range over 2^bits−1 steps. It returns d and m as stored.
func quantAffine(blk []byte, x []float32, bits int) (d, m float32, q [32]int) {
	lo, hi := minMax(x)
	top := 1<<bits - 1
	d = (hi - lo) / float32(top)
	id := inverse(d)
	for j, v := range x {
		q[j] = clampInt(int((v-lo)*id+0.5), 0, top)
	}
	return putF16(blk, d), putF16(blk[2:], lo), q
}

func quantQ4_1(dst []byte, src, recon []float32) {
	for b := 0; len(src) > 0; b++ {
		blk := dst[20*b : 20*b+20]
		d, m, q := quantAffine(blk, src[:32], 4)
		for j := range 16 {
			blk[4+j] = byte(q[j]) | byte(q[j+16])<<4
		}
		if recon != nil {
			for j := range 32 {
				recon[32*b+j] = float32(float32(q[j])*d) + m
			}
		}
		src = src[32:]
	}
}

func quantQ5_1(dst []byte, src, recon []float32) {
	for b := 0; len(src) > 0; b++ {
		blk := dst[24*b : 24*b+24]
		d, m, q := quantAffine(blk, src[:32], 5)
		var qh uint32
		for j := range 16 {
			blk[8+j] = byte(q[j]&0xF) | byte(q[j+16]&0xF)<<4
			qh |= uint32(q[j]>>4&1)<<j | uint32(q[j+16]>>4&1)<<(j+16)
		}
		binary.LittleEndian.PutUint32(blk[4:], qh)
		if recon != nil {
			for j := range 32 {
				recon[32*b+j] = float32(float32(q[j])*d) + m
			}
		}
		src = src[32:]
	}
}

// quantKAffine computes the 6-bit scales and mins of the eight 32-element
// sub-blocks of a Q4_K or Q5_K super-block (top: 15 or 31), writes d, dmin
// and the packed scales into blk[0:16], and returns each element's quant;
// with recon, it writes what each element decodes to.
func quantKAffine(blk []byte, x []float32, top int, recon []float32) (q [qk]int) {
	var scale, minus [8]float32
	for i := range 8 {
		lo, hi := minMax(x[32*i : 32*i+32])
		lo = min(lo, 0) // x = d·sc·q − dmin·m with m ≥ 0
		scale[i] = (hi - lo) / float32(top)
		minus[i] = -lo
	}
	_, maxScale := absMax(scale[:])
	_, maxMin := absMax(minus[:])
	d := putF16(blk, maxScale/63)
	dmin := putF16(blk[2:], maxMin/63)
	var sc, m [8]int
	for i := range 8 {
		sc[i] = clampInt(nearest(scale[i]*inverse(d)), 0, 63)
		m[i] = clampInt(nearest(minus[i]*inverse(dmin)), 0, 63)
	}
	s := blk[4:16]
	for i := range 4 {
		s[i] = byte(sc[i]) | byte(sc[i+4]>>4)<<6
		s[i+4] = byte(m[i]) | byte(m[i+4]>>4)<<6
		s[i+8] = byte(sc[i+4]&0xF) | byte(m[i+4]&0xF)<<4
	}
	for i := range 8 {
		step := d * float32(sc[i])
		off := dmin * float32(m[i])
		id := inverse(step)
		for l := range 32 {
			k := 32*i + l
			q[k] = clampInt(nearest((x[k]+off)*id), 0, top)
			if recon != nil {
				recon[k] = float32(step*float32(q[k])) - off
			}
		}
	}
	return q
}

func quantQ4_K(dst []byte, src, recon []float32) {
	for b := 0; len(src) > 0; b++ {
		blk := dst[144*b : 144*b+144]
		var r []float32
		if recon != nil {
			r = recon[qk*b : qk*b+qk]
		}
		q := quantKAffine(blk, src[:qk], 15, r)
		qs := blk[16:144]
		for k := range 4 {
			for l := range 32 {
				qs[32*k+l] = byte(q[64*k+l]) | byte(q[64*k+32+l])<<4
			}
		}
		src = src[qk:]
	}
}

func quantQ5_K(dst []byte, src, recon []float32) {
	for b := 0; len(src) > 0; b++ {
		blk := dst[176*b : 176*b+176]
		var r []float32
		if recon != nil {
			r = recon[qk*b : qk*b+qk]
		}
		q := quantKAffine(blk, src[:qk], 31, r)
		qh, qs := blk[16:48], blk[48:176]
		clear(qh)
		for k := range 4 {
			for l := range 32 {
				lo, hi := q[64*k+l], q[64*k+32+l]
				qs[32*k+l] = byte(lo&0xF) | byte(hi&0xF)<<4
				qh[l] |= byte(lo>>4&1)<<(2*k) | byte(hi>>4&1)<<(2*k+1)
			}
		}
		src = src[qk:]
	}
}

func quantQ6_K(dst []byte, src, recon []float32) {
	for b := 0; len(src) > 0; b++ {
		blk, x := dst[210*b:210*b+210], src[:qk]
		// Each 16-element sub-block's largest magnitude maps to −32.
		var scale [16]float32
		for i := range 16 {
			signed, _ := absMax(x[16*i : 16*i+16])
			scale[i] = signed / -32
		}
		signed, _ := absMax(scale[:])
		d := putF16(blk[208:], signed/-128)
		var q [qk]int
		for i := range 16 {
			sc := clampInt(nearest(scale[i]*inverse(d)), -128, 127)
			blk[192+i] = byte(int8(sc))
			step := d * float32(sc)
			id := inverse(step)
			for l := range 16 {
				k := 16*i + l
				q[k] = clampInt(nearest(x[k]*id), -32, 31) + 32
				if recon != nil {
					recon[qk*b+k] = step * float32(q[k]-32)
				}
			}
		}
		for n := range 2 {
			ql, qh := blk[64*n:64*n+64], blk[128+32*n:128+32*n+32]
			y := q[128*n:]
			for l := range 32 {
				q1, q2, q3, q4 := y[l], y[l+32], y[l+64], y[l+96]
				ql[l] = byte(q1&0xF) | byte(q3&0xF)<<4
				ql[l+32] = byte(q2&0xF) | byte(q4&0xF)<<4
				qh[l] = byte(q1>>4) | byte(q2>>4)<<2 | byte(q3>>4)<<4 | byte(q4>>4)<<6
			}
		}
		src = src[qk:]
	}
}

// q2q3Index is where element e of a Q2_K or Q3_K block keeps its 2 low
// bits: byte 32n+16h+l of the quants, at bit 2j; the high bit of Q3_K is
// bit 4n+j of byte 16h+l of hmask.
func q2q3Index(e int) (n, j, h, l int) {
	n, r := e/128, e%128
	return n, r / 32, r % 32 / 16, r % 16
}

func quantQ2_K(dst []byte, src []float32, recon []float32) {
	for b := 0; len(src) > 0; b++ {
		blk, x := dst[84*b:84*b+84], src[:qk]
		var scale, minus [16]float32
		for i := range 16 {
			lo, hi := minMax(x[16*i : 16*i+16])
			lo = min(lo, 0)
			scale[i], minus[i] = (hi-lo)/3, -lo
		}
		_, maxScale := absMax(scale[:])
		_, maxMin := absMax(minus[:])
		d := putF16(blk[80:], maxScale/15)
		dmin := putF16(blk[82:], maxMin/15)
		qs := blk[16:80]
		clear(qs)
		for i := range 16 {
			sc := clampInt(nearest(scale[i]*inverse(d)), 0, 15)
			m := clampInt(nearest(minus[i]*inverse(dmin)), 0, 15)
			blk[i] = byte(sc) | byte(m)<<4
			step, off := d*float32(sc), dmin*float32(m)
			id := inverse(step)
			for l := range 16 {
				e := 16*i + l
				q := clampInt(nearest((x[e]+off)*id), 0, 3)
				n, j, h, ll := q2q3Index(e)
				qs[32*n+16*h+ll] |= byte(q) << (2 * j)
				if recon != nil {
					recon[qk*b+e] = float32(step*float32(q)) - off
				}
			}
		}
		src = src[qk:]
	}
}

func quantQ3_K(dst []byte, src []float32, recon []float32) {
	for b := 0; len(src) > 0; b++ {
		blk, x := dst[110*b:110*b+110], src[:qk]
		// Each 16-element sub-block's largest magnitude maps to −4.
		var scale [16]float32
		for i := range 16 {
			signed, _ := absMax(x[16*i : 16*i+16])
			scale[i] = signed / -4
		}
		signed, _ := absMax(scale[:])
		d := putF16(blk[108:], signed/-32)
		hm, qs, scales := blk[:32], blk[32:96], blk[96:108]
		clear(blk[:108])
		for i := range 16 {
			sc := clampInt(nearest(scale[i]*inverse(d)), -32, 31)
			six := byte(sc + 32)
			if i < 8 {
				scales[i] |= six & 0xF
			} else {
				scales[i-8] |= (six & 0xF) << 4
			}
			scales[8+i%4] |= six >> 4 << (2 * (i / 4))
			step := d * float32(sc)
			id := inverse(step)
			for l := range 16 {
				e := 16*i + l
				q := clampInt(nearest(x[e]*id), -4, 3)
				v := q + 4
				n, j, h, ll := q2q3Index(e)
				qs[32*n+16*h+ll] |= byte(v&3) << (2 * j)
				hm[16*h+ll] |= byte(v>>2) << (4*n + j)
				if recon != nil {
					recon[qk*b+e] = step * float32(q)
				}
			}
		}
		src = src[qk:]
	}
}

// iq4Recon writes what the 32 nibbles qs decode to at scale d.
func iq4Recon(recon []float32, qs []byte, d float32) {
	for j, q := range qs[:16] {
		recon[j] = d * float32(compute.IQ4NLLevels[q&0xF])
		recon[j+16] = d * float32(compute.IQ4NLLevels[q>>4])
	}
}

func quantIQ4_NL(dst []byte, src, recon []float32) {
	for b := 0; len(src) > 0; b++ {
		blk := dst[18*b : 18*b+18]
		compute.Quantize(compute.IQ4_NL, blk, src[:32])
		if recon != nil {
			iq4Recon(recon[32*b:], blk[2:], f16(blk))
		}
		src = src[32:]
	}
}

// quantIQ4_XS takes each sub-block's scale as IQ4_NL would, then one
// scale d for the block that the sub-block scales are 6-bit multiples of,
// ls−32 from −32 to 31 (the scale of largest magnitude maps to −32).
func quantIQ4_XS(dst []byte, src, recon []float32) {
	for b := 0; len(src) > 0; b++ {
		blk, x := dst[136*b:136*b+136], src[:qk]
		var scale [8]float32
		for i := range scale {
			scale[i] = compute.IQ4NLScale(x[32*i : 32*i+32])
		}
		signed, _ := absMax(scale[:])
		d := putF16(blk, signed/-32)
		var hi uint16
		clear(blk[4:8])
		for i := range 8 {
			ls := clampInt(nearest(scale[i]*inverse(d)), -32, 31) + 32
			blk[4+i/2] |= byte(ls&0xF) << (4 * uint(i%2))
			hi |= uint16(ls>>4) << (2 * uint(i))
			qs, dl := blk[8+16*i:8+16*i+16], d*float32(ls-32)
			compute.IQ4NLNibbles(qs, x[32*i:32*i+32], dl)
			if recon != nil {
				iq4Recon(recon[qk*b+32*i:], qs, dl)
			}
		}
		binary.LittleEndian.PutUint16(blk[2:], hi)
		src = src[qk:]
	}
}
