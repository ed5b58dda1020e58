package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/clawrl/clawrl/compute"
)

// Reblocking: matrices in block formats that the CPU backend's int8
// kernels have no products for, rewritten without requantizing as blocks
// of one they have (Q4_1, Q5_1, IQ4_NL, Q6_16).
//
// A Q4_K block of 256 elements is eight sub-blocks of 32, sub-block i
// holding x = (d·sc_i)·q − dmin·m_i with q a nibble: a Q4_1 block per
// sub-block, x = D·q + M, with D = d·sc_i and M = −dmin·m_i. The nibbles
// carry over as they are; D and M, exact float32 products of a half and
// a 6-bit integer, are rounded to halves, as Q4_1 stores them (a
// relative change of at most 2⁻¹¹ of each, where quantizing to 4 bits
// moves a value by up to half of D). Q4_K takes 4.5 bits a weight and
// Q4_1 5: the per-sub-block scales are stored whole instead of as 6-bit
// multiples of one half. Q5_K is Q4_K with a fifth bit per value, and
// maps onto Q5_1 the same way (5.5 bits a weight, 6 as Q5_1).
//
// Q5_0 is Q5_1 with the minimum fixed at −16·d, which a half holds
// exactly (unless it overflows): the same values bit for bit, in 6 bits
// a weight instead of 5.5.
//
// IQ4_XS is eight IQ4_NL blocks under the scales d·(ls−32), which are
// rounded to halves as Q4_K's are (4.5 bits a weight as IQ4_NL, 4.25 as
// IQ4_XS).
//
// A Q6_K block of 256 elements is sixteen sub-blocks of 16, sub-block i
// holding x = (d·sc_i)·(q−32) with q of 6 bits and sc_i an int8: two of
// them are a Q6_16 block (compute's, made for this), each with its scale
// d·sc_i rounded to a half, the same q (7 bits a weight in the CPU
// backend's panels, 6.56 as Q6_K, 8.5 as the Q8_0 they were requantized
// to before). Q3_K's sub-blocks of 16 hold x = (d·(sc_i−32))·q with q
// from −4 to 3: Q6_16 blocks too, with q + 32.

// reblockTo is the block format each format that maps onto one is
// rewritten as.
var reblockTo = map[TensorType]compute.DType{
	Q4_K: compute.Q4_1, Q5_K: compute.Q5_1, Q5_0: compute.Q5_1,
	IQ4_XS: compute.IQ4_NL, Q6_K: compute.Q6_16, Q3_K: compute.Q6_16,
}

// Reblock rewrites src, whole blocks of type t, as blocks of the format
// ReblockTarget(t) names, in the same element order, without
// requantizing (the package doc above says how each maps). A scale that
// is not a finite half is an error: the caller keeps another way to load
// the tensor.
func Reblock(src []byte, t TensorType) ([]byte, error) {
	switch t {
	case Q4_K, Q5_K:
		return kToAffine(src, t)
	case Q5_0:
		return q5_0ToQ5_1(src)
	case IQ4_XS:
		return iq4XSToNL(src)
	case Q6_K, Q3_K:
		return kToQ6_16(src, t)
	}
	return nil, fmt.Errorf("%s blocks have no format to be rewritten as", t)
}

// ReblockTarget is the format Reblock rewrites t as, or 0 for a type it
// does not rewrite.
func ReblockTarget(t TensorType) compute.DType { return reblockTo[t] }

// Q4KToQ4_1 rewrites src, Q4_K blocks, as Q4_1 blocks (20 bytes per 32
// elements, in the same element order). A scale or minimum that is not a
// finite half (beyond ±65504) is an error: the caller keeps another way
// to load the tensor.
func Q4KToQ4_1(src []byte) ([]byte, error) { return kToAffine(src, Q4_K) }

// Q5KToQ5_1 rewrites src, Q5_K blocks, as Q5_1 blocks (24 bytes per 32
// elements), as Q4KToQ4_1 does.
func Q5KToQ5_1(src []byte) ([]byte, error) { return kToAffine(src, Q5_K) }

// kToAffine rewrites Q4_K (t) blocks as Q4_1 or Q5_K blocks as Q5_1.
func kToAffine(src []byte, t TensorType) ([]byte, error) {
	size, out := 144, 20 // Q4_K → Q4_1
	if t == Q5_K {
		size, out = 176, 24
	}
	if len(src)%size != 0 {
		return nil, fmt.Errorf("%d bytes are not whole %s blocks of %d", len(src), t, size)
	}
	nb := len(src) / size
	dst := make([]byte, nb*8*out)
	for b := range nb {
		blk := src[size*b : size*b+size]
		d, dmin := f16(blk), f16(blk[2:])
		scales, qs := blk[4:16], blk[size-128:]
		var qh []byte // Q5_K's fifth bits: bit i of byte l for element 32i+l of the sub-blocks
		if t == Q5_K {
			qh = blk[16:48]
		}
		for i := range 8 {
			sc, m := scaleMinK4(i, scales)
			dh := compute.F32ToF16(d * float32(sc))
			mh := compute.F32ToF16(-(dmin * float32(m)))
			if dh&0x7c00 == 0x7c00 || mh&0x7c00 == 0x7c00 {
				return nil, fmt.Errorf("%s block %d sub-block %d: scale %g or minimum %g is not a finite half", t, b, i, d*float32(sc), -(dmin * float32(m)))
			}
			y := dst[out*(8*b+i):][:out]
			binary.LittleEndian.PutUint16(y, dh)
			binary.LittleEndian.PutUint16(y[2:], mh)
			// Sub-block i is the low (even i) or high (odd i) nibbles of
			// the 32 bytes qs[32(i/2):]; Q4_1 and Q5_1 put element j < 16
			// in the low nibble of byte j and element j+16 in its high
			// nibble, and Q5_1 element j's fifth bit in bit j of qh.
			q := qs[32*(i/2) : 32*(i/2)+32]
			sh := 4 * uint(i%2)
			ys := y[out-16:]
			for j := range 16 {
				ys[j] = q[j]>>sh&0xF | (q[j+16]>>sh&0xF)<<4
			}
			if qh != nil {
				var bits uint32
				for j := range 32 {
					bits |= uint32(qh[j]>>i&1) << j
				}
				binary.LittleEndian.PutUint32(y[4:], bits)
			}
		}
	}
	return dst, nil
}

// q5_0ToQ5_1 rewrites Q5_0 blocks (22 bytes) as Q5_1 blocks (24 bytes):
// the same d, a minimum of −16·d, the same high bits and nibbles.
func q5_0ToQ5_1(src []byte) ([]byte, error) {
	if len(src)%22 != 0 {
		return nil, fmt.Errorf("%d bytes are not whole Q5_0 blocks of 22", len(src))
	}
	nb := len(src) / 22
	dst := make([]byte, 24*nb)
	for b := range nb {
		x, y := src[22*b:22*b+22], dst[24*b:24*b+24]
		m := compute.F32ToF16(-16 * f16(x))
		if m&0x7c00 == 0x7c00 {
			return nil, fmt.Errorf("Q5_0 block %d: minimum %g is not a finite half", b, -16*f16(x))
		}
		copy(y, x[:2])
		binary.LittleEndian.PutUint16(y[2:], m)
		copy(y[4:], x[2:])
	}
	return dst, nil
}

// iq4XSToNL rewrites IQ4_XS blocks (136 bytes) as IQ4_NL blocks (18
// bytes, eight a block): each sub-block's scale d·(ls−32) rounded to a
// half, the same nibbles.
func iq4XSToNL(src []byte) ([]byte, error) {
	if len(src)%136 != 0 {
		return nil, fmt.Errorf("%d bytes are not whole IQ4_XS blocks of 136", len(src))
	}
	nb := len(src) / 136
	dst := make([]byte, 8*18*nb)
	for b := range nb {
		x := src[136*b : 136*b+136]
		for i := range 8 {
			y := dst[18*(8*b+i):][:18]
			dl := f16(x) * float32(scaleIQ4XS(x, i)-32)
			dh := compute.F32ToF16(dl)
			if dh&0x7c00 == 0x7c00 {
				return nil, fmt.Errorf("IQ4_XS block %d sub-block %d: scale %g is not a finite half", b, i, dl)
			}
			binary.LittleEndian.PutUint16(y, dh)
			copy(y[2:], x[8+16*i:8+16*i+16])
		}
	}
	return dst, nil
}

// kToQ6_16 rewrites Q6_K or Q3_K (t) blocks as Q6_16 blocks (28 bytes, 8
// a block): each pair of sub-blocks of 16 a block, their scales rounded
// to halves, the same values (Q3_K's + 32). Super-blocks are split over
// the cores: a Q6_K file of the Qwen3-0.6B shape has 2.3 million.
func kToQ6_16(src []byte, t TensorType) ([]byte, error) {
	size := 210
	if t == Q3_K {
		size = 110
	}
	if len(src)%size != 0 {
		return nil, fmt.Errorf("%d bytes are not whole %s blocks of %d", len(src), t, size)
	}
	nb := len(src) / size
	bb := compute.Q6_16.BlockBytes()
	dst := make([]byte, 8*bb*nb)
	workers := min(runtime.GOMAXPROCS(0), max(1, nb/1024))
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for b := nb * w / workers; b < nb*(w+1)/workers; b++ {
				if err := superToQ6_16(dst[8*bb*b:8*bb*(b+1)], src[size*b:size*(b+1)], t); err != nil {
					errs[w] = fmt.Errorf("%s block %d %w", t, b, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return dst, nil
}

// superToQ6_16 writes the eight Q6_16 blocks of one Q6_K or Q3_K block.
// Q6_16 block 4n+k holds elements 128n+32k+l (l 0..31), which in Q6_K
// have their low four bits in ql[64n+32(k%2)+l] (the high nibble for k ≥
// 2) and their high two at bits 2k of qh[32n+l] (dequantQ6_K); in Q3_K
// (k the 2-bit plane j, l = 16h+l') their two bits at bits 2k of
// qs[32n+l], less 4 unless bit 4n+k of hmask[l] is set (dequantQ3_K).
func superToQ6_16(dst, blk []byte, t TensorType) error {
	clear(dst)
	bb := compute.Q6_16.BlockBytes()
	for i := range 16 { // sub-blocks of 16: the scales
		var dl float32
		if t == Q6_K {
			dl = f16(blk[208:]) * float32(int8(blk[192+i]))
		} else {
			dl = f16(blk[108:]) * float32(scaleQ3K(blk[96:108], i))
		}
		dh := compute.F32ToF16(dl)
		if dh&0x7c00 == 0x7c00 {
			return fmt.Errorf("sub-block %d: scale %g is not a finite half", i, dl)
		}
		binary.LittleEndian.PutUint16(dst[bb*(i/2)+2*(i%2):], dh)
	}
	for n := range 2 {
		for k := range 4 {
			y := dst[bb*(4*n+k) : bb*(4*n+k+1)]
			ql, qh := y[4:20], y[20:28]
			for l := range 32 {
				var q byte
				if t == Q6_K {
					lo := blk[64*n+32*(k%2)+l] >> (4 * (k / 2)) & 0xF
					q = lo | (blk[128+32*n+l]>>(2*k)&3)<<4
				} else {
					q = blk[32+32*n+l]>>(2*k)&3 + 28 // q − 4 + 32
					if blk[l]&(1<<(4*n+k)) != 0 {
						q += 4
					}
				}
				ql[l%16] |= (q & 0xF) << (4 * (l / 16))
				qh[l%8] |= (q >> 4) << (2 * (l / 8))
			}
		}
	}
	return nil
}
