package gguf

import (
	"encoding/binary"
	"fmt"

	"github.com/clawrl/clawrl/compute"
)

// Reblocking: a Q4_K matrix as Q4_1 blocks, for the CPU backend's int8
// kernels, which have Q4_1 products but none for the K-quants.
//
// A Q4_K block of 256 elements is eight sub-blocks of 32, sub-block i
// holding x = (d·sc_i)·q − dmin·m_i with q a nibble: a Q4_1 block per
// sub-block, x = D·q + M, with D = d·sc_i and M = −dmin·m_i. The nibbles
// carry over as they are; D and M, exact float32 products of a half and
// a 6-bit integer, are rounded to halves, as Q4_1 stores them (a
// relative change of at most 2⁻¹¹ of each, where quantizing to 4 bits
// moves a value by up to half of D). Q4_K takes 4.5 bits a weight and
// Q4_1 5: the per-sub-block scales are stored whole instead of as 6-bit
// multiples of one half.

// Q4KToQ4_1 rewrites src, Q4_K blocks, as Q4_1 blocks (20 bytes per 32
// elements, in the same element order). A scale or minimum that is not a
// finite half (beyond ±65504) is an error: the caller keeps another way
// to load the tensor.
func Q4KToQ4_1(src []byte) ([]byte, error) {
	if len(src)%144 != 0 {
		return nil, fmt.Errorf("%d bytes are not whole Q4_K blocks of 144", len(src))
	}
	nb := len(src) / 144
	dst := make([]byte, nb*8*20)
	for b := range nb {
		blk := src[144*b : 144*b+144]
		d, dmin := f16(blk), f16(blk[2:])
		scales, qs := blk[4:16], blk[16:144]
		for i := range 8 {
			sc, m := scaleMinK4(i, scales)
			dh := compute.F32ToF16(d * float32(sc))
			mh := compute.F32ToF16(-(dmin * float32(m)))
			if dh&0x7c00 == 0x7c00 || mh&0x7c00 == 0x7c00 {
				return nil, fmt.Errorf("Q4_K block %d sub-block %d: scale %g or minimum %g is not a finite half", b, i, d*float32(sc), -(dmin * float32(m)))
			}
			y := dst[20*(8*b+i):][:20]
			binary.LittleEndian.PutUint16(y, dh)
			binary.LittleEndian.PutUint16(y[2:], mh)
			// Sub-block i is the low (even i) or high (odd i) nibbles of
			// the 32 bytes qs[32(i/2):]; Q4_1 puts element j < 16 in the
			// low nibble of byte j and element j+16 in its high nibble.
			q := qs[32*(i/2) : 32*(i/2)+32]
			sh := 4 * uint(i%2)
			for j := range 16 {
				y[4+j] = q[j]>>sh&0xF | (q[j+16]>>sh&0xF)<<4
			}
		}
	}
	return dst, nil
}
