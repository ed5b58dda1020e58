package kernels

import "sync"

// The matrix-vector path: C = alpha·A·Wᵀ + beta·C for a few rows of A (a
// decode step). It is bound by reading W, so each weight row is streamed
// once, widened in registers when it is BF16, and multiplied against every
// row of A, which stays in L1. The weight rows are split over threads.

// gemvArch is one architecture's matrix-vector kernels.
type gemvArch struct {
	maxM int // largest m that takes this path (beyond it, the blocked GEMM)
	mp   int // rows of A per kernel call

	// f32 and bf16 compute C[i, j] = alpha·Σp A[i,p]·W[j,p] + beta·C[i, j]
	// for i < m ≤ mp, j < n (a multiple of 4), p < k (a multiple of vlF32,
	// vlBF16); C is not read when beta == 0. bf16 takes A de-interleaved:
	// within each block of vlBF16 elements, the even ones and then the odd
	// ones (see deinterleave).
	//
	// pf is the distance in bytes, from the weights being read, of those to
	// prefetch (gemvPrefetch).
	vlF32, vlBF16 int
	f32           func(c *float32, ldc int, a *float32, lda int, w *float32, ldw int, n, k, m int, alpha, beta float32, pf int)
	bf16          func(c *float32, ldc int, a *float32, lda int, w *uint16, ldw int, n, k, m int, alpha, beta float32, pf int)
}

// gemvPrefetch returns how far ahead of the weights being read the kernels
// prefetch, in bytes: the same place in the rows a whole number of groups
// of four ahead, at least two groups and about 32 KiB of weights. (Measured
// on the development machines, from DRAM: ahead along the row, past the end
// of short rows, fetches what the next group does not need; closer than
// ~32 KiB does not cover the latency.)
func gemvPrefetch(k, ldw, esize int) int {
	groups := max(2, (32<<10)/(4*k*esize))
	return groups * 4 * ldw * esize
}

// gemvScratch holds de-interleaved copies of A for the BF16 kernels.
var gemvScratch = sync.Pool{New: func() any { return new([]float32) }}

// deinterleave copies the first kv columns of the m rows of a (row stride
// lda) into dst (row stride kv), each block of vl elements reordered as its
// even elements followed by its odd ones.
func deinterleave(dst, a []float32, m, lda, kv, vl int) {
	h := vl / 2
	for i := 0; i < m; i++ {
		src, d := a[i*lda:i*lda+kv], dst[i*kv:i*kv+kv]
		for b := 0; b < kv; b += vl {
			blk, out := src[b:b+vl], d[b:b+vl]
			for t := 0; t < h; t++ {
				out[t] = blk[2*t]
				out[h+t] = blk[2*t+1]
			}
		}
	}
}

// minGemvWork is the number of weights each thread must have before the
// product is split: below ~256 KiB of BF16 a second thread costs more in
// fork-join and in restarting a memory stream than it brings (measured on
// the development machines).
const minGemvWork = 1 << 17

// gemvBlockBytes bounds the weight rows one pass covers when A has more rows
// than a kernel call takes: the block is then re-read from L2, not memory.
const gemvBlockBytes = 128 << 10

// run computes C = alpha·A·Wᵀ + beta·C with W (n×k, row stride ldw) in wf
// or, when wh is not nil, in wh as BF16. Shapes are checked by the caller.
func (g *gemvArch) run(m, n, k int, alpha float32, a []float32, lda int, wf []float32, wh []uint16, ldw int, beta float32, c []float32, ldc int) {
	vl := g.vlF32
	if wh != nil {
		vl = g.vlBF16
	}
	kv := k &^ (vl - 1)
	n4 := n &^ 3
	if kv == 0 {
		n4 = 0
	}
	ak, lak := a, lda // A as the kernel takes it
	if n4 > 0 && wh != nil {
		buf := gemvScratch.Get().(*[]float32)
		defer gemvScratch.Put(buf)
		if cap(*buf) < m*kv {
			*buf = make([]float32, m*kv)
		}
		ak, lak = (*buf)[:m*kv], kv
		deinterleave(ak, a, m, lda, kv, vl)
	}
	if n4 > 0 {
		esize := 4
		if wh != nil {
			esize = 2
		}
		pf0 := gemvPrefetch(k, ldw, esize)
		block := n4
		if m > g.mp {
			block = max(4, gemvBlockBytes/(k*esize)&^3)
		}
		body := func(lo, hi int) {
			for r0 := lo; r0 < hi; r0 += block {
				r1 := min(hi, r0+block)
				pf := pf0
				for i0 := 0; i0 < m; i0 += g.mp {
					mp := min(g.mp, m-i0)
					if i0 > 0 {
						pf = 0 // the block is in cache now
					}
					cp, ap := &c[i0*ldc+r0], &ak[i0*lak]
					if wh != nil {
						g.bf16(cp, ldc, ap, lak, &wh[r0*ldw], ldw, r1-r0, kv, mp, alpha, beta, pf)
					} else {
						g.f32(cp, ldc, ap, lda, &wf[r0*ldw], ldw, r1-r0, kv, mp, alpha, beta, pf)
					}
				}
			}
			if kv < k { // the last k mod vl columns
				for i := 0; i < m; i++ {
					for j := lo; j < hi; j++ {
						c[i*ldc+j] += alpha * gemvDotGo(a[i*lda:], wf, wh, j*ldw, kv, k)
					}
				}
			}
		}
		groups := n4 / 4
		t := min(Threads(), max(1, n4*k/minGemvWork), groups)
		if t <= 1 {
			body(0, n4)
		} else {
			// One contiguous chunk per thread: each then streams through its
			// part of W from start to end, which the prefetchers follow
			// best.
			forChunks(t, func(i int) { body(groups*i/t*4, groups*(i+1)/t*4) })
		}
	}
	for j := n4; j < n; j++ { // rows left over by the kernel
		for i := 0; i < m; i++ {
			s := alpha * gemvDotGo(a[i*lda:], wf, wh, j*ldw, 0, k)
			if beta != 0 {
				s += beta * c[i*ldc+j]
			}
			c[i*ldc+j] = s
		}
	}
}

// gemvDotGo returns Σ a[p]·w[off+p] over p in [p0, p1), W in wf or wh.
func gemvDotGo(a, wf []float32, wh []uint16, off, p0, p1 int) float32 {
	var s float32
	if wh != nil {
		for p := p0; p < p1; p++ {
			s += a[p] * bf16to32(wh[off+p])
		}
		return s
	}
	for p := p0; p < p1; p++ {
		s += a[p] * wf[off+p]
	}
	return s
}
