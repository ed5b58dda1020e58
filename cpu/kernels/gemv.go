package kernels

import "sync"

// The matrix-vector path: C = alpha·A·Wᵀ + beta·C for a few rows of A (a
// decode step). It is bound by reading W, so each weight row is streamed
// once, widened in registers when it is BF16, and multiplied against every
// row of A, which stays in L1. The weight rows are split over threads, one
// contiguous range each, with blocks taken from a late thread's range by
// the others (forStealing); several products over the same A (q, k and v;
// gate and up) run as one such pass (runParts, behind LinearMulti).
//
// A decode step of Qwen3-0.6B is about 200 of these products, 2 to 6 MB
// each (the LM head aside), one after another. What each one costs beyond
// streaming its weights decides how close the step comes to the memory's
// bandwidth; measured on the development machines (2 threads), reading the
// weights of all the layers with one synchronisation per matrix instead of
// none cost a fifth of the bandwidth, and the ways this file and
// pool.go keep that cost down are: fewer synchronisations (runParts),
// less waiting at each (forStealing, and forChunks spinning rather than
// parking while the last chunk finishes), and a BF16 kernel that reads one
// sequential stream at m = 1 (gemvbf_amd64.h).

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
	// prefetch (gemvPrefetch). The BF16 kernels do not use it at m = 1,
	// where they read the weights as one sequential stream, which the
	// hardware prefetchers follow better without software prefetches.
	vlF32, vlBF16 int
	f32           func(c *float32, ldc int, a *float32, lda int, w *float32, ldw int, n, k, m int, alpha, beta float32, pf int)
	bf16          func(c *float32, ldc int, a *float32, lda int, w *uint16, ldw int, n, k, m int, alpha, beta float32, pf int)

	// dot, if set, is the BF16 kernel with A in BF16 too (row stride lda
	// in elements), for products at PrecisionBF16: k is taken in steps of
	// 32, and the products are the widening kernel's with A rounded to
	// BF16 (gemvdot_amd64.h). Set where the CPU has AVX512_BF16.
	dot func(c *float32, ldc int, a *uint16, lda int, w *uint16, ldw int, n, k, m int, alpha, beta float32, pf int)

	// deint, if set, is deinterleave for one row of blocks·vlBF16 elements,
	// in assembly: at m = 32 the Go loop took a tenth of a batched decode
	// step's products, on one thread while the others waited.
	deint func(dst, src *float32, blocks int)
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

// gemvScratch holds de-interleaved copies of A for the BF16 kernels;
// gemvScratch16 copies of A rounded to BF16 for the dot kernel.
var (
	gemvScratch   = sync.Pool{New: func() any { return new([]float32) }}
	gemvScratch16 = sync.Pool{New: func() any { return new([]uint16) }}
)

// dotStep is the columns the dot kernel takes per step.
const dotStep = 32

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

// minGemvBytes is the weight memory each thread must have before the
// product is split: below ~64 KiB a second thread costs more in fork-join
// and in restarting a memory stream than it brings. (Measured on the
// development machines, decode of the ~20M model in alternating rounds:
// 256 KiB, which left its q/k/v and o projections of 300-500 KB to one
// thread, ran 15% slower than 64 KiB; 16 KiB was no faster.)
const minGemvBytes = 64 << 10

// gemvStealBytes is the most weight memory in one of the blocks that
// threads take from each other's ranges (see forStealing): about 10 µs of
// one thread's reading, which bounds how long one thread waits for another
// at the end of a product. A product is cut into at least four blocks per
// thread, so that a small one can be balanced too (measured: 9% faster
// decode of the ~20M model than with blocks of 256 KiB only, which left
// its 0.5 MB q/k/v pass in two blocks, one per thread).
const gemvStealBytes = 256 << 10

// gemvStealFlops bounds the work of a block that threads take from each
// other when A has many rows (a batched decode step), where a product is
// bound by arithmetic, not by reading the weights: a unit (two weight rows
// of BF16, one of float32) is 4·m·k flops, and 1.6 Mflop is about 15 µs of
// one thread. (At m = 32 on the ~20M model's shapes, blocks of 256 KiB of
// weights are up to 60 µs of work; measured in alternating rounds, this
// bound was level with none or up to 5% faster, and 0.4 Mflop no better.)
const gemvStealFlops = 1_600_000

// sweepBytes is the size of A (in BF16) from which a product's stealing
// blocks are gemvBlockBytes of weights at least, whatever the flops bound:
// every block of weights sweeps all of A, which at this size no longer
// stays in L2 between blocks; the rounding of A to BF16 is spread over the
// threads as well. Measured on the development machines with 2 threads, in
// alternating rounds against the previous blocks and serial rounding, on
// Qwen3-0.6B's shapes at BF16 products: the down projection (k = 3072)
// 1.16× faster at m = 512 and 1.23× at m = 48 and 64; the others 1.01-1.09×
// (median ratios over 10 rounds); 72-82% of the BF16 dot peak after.
const sweepBytes = 256 << 10

// gemvBlockBytes bounds the weight rows one pass covers when A has more rows
// than a kernel call takes: the block is then re-read from L2, not memory.
const gemvBlockBytes = 128 << 10

// gemvPart is one product of a matrix-vector pass: C = alpha·A·Wᵀ + beta·C
// with W (n×k, row stride ldw) in wf or, when wh is not nil, in wh as BF16,
// and C of row stride ldc.
type gemvPart struct {
	wf   []float32
	wh   []uint16
	ldw  int
	n    int
	c    []float32
	ldc  int
	beta float32
}

// esize is the bytes of one weight of p.
func (p *gemvPart) esize() int {
	if p.wh != nil {
		return 2
	}
	return 4
}

// run computes C = alpha·A·Wᵀ + beta·C with W (n×k, row stride ldw) in wf
// or, when wh is not nil, in wh as BF16. Shapes are checked by the caller.
func (g *gemvArch) run(pl *Pool, m, n, k int, alpha float32, a []float32, lda int, wf []float32, wh []uint16, ldw int, beta float32, c []float32, ldc int) {
	g.runParts(pl, m, k, alpha, a, lda, []gemvPart{{wf: wf, wh: wh, ldw: ldw, n: n, c: c, ldc: ldc, beta: beta}}, false)
}

// runParts computes every part's product with the same A (m×k, row stride
// lda) in one pass: the weight rows of all the parts, in order, are split
// into one contiguous range per thread, balanced by bytes, so that a
// thread's range may run from the end of one matrix into the next and the
// whole pass costs one fork-join. (The q, k and v projections of
// Qwen3-0.6B are 4, 2 and 2 MB of BF16; run one at a time, each paid a
// fork-join and a wait at its end for the slower thread.) With dot (only
// when g.dot is set), the BF16 parts take A rounded to BF16 through the dot
// kernel. Shapes are checked by the caller.
func (g *gemvArch) runParts(pl *Pool, m, k int, alpha float32, a []float32, lda int, parts []gemvPart, dot bool) {
	ps := gemvPass{g: g, m: m, k: k, alpha: alpha, a: a, lda: lda,
		kvh: k &^ (g.vlBF16 - 1), kvf: k &^ (g.vlF32 - 1)}
	if dot {
		ps.kvh = k &^ (dotStep - 1)
	}
	units := 0 // the kernels' work: groups of four rows × bytes per weight
	bf16 := false
	for i := range parts {
		p := &parts[i]
		bf16 = bf16 || p.wh != nil
		if ps.kvOf(p) == 0 || p.n < 4 {
			continue
		}
		units += p.n / 4 * p.esize()
	}
	ps.ak, ps.lak = a, lda
	switch {
	case bf16 && dot:
		buf := gemvScratch16.Get().(*[]uint16)
		defer gemvScratch16.Put(buf)
		if cap(*buf) < m*k {
			*buf = make([]uint16, m*k)
		}
		ps.a16 = (*buf)[:m*k]
		a16 := ps.a16
		if grain := max(1, (64<<10)/k); m <= grain {
			roundRows(a16, a, lda, k, 0, m) // decode: no fork, no closure
		} else {
			pl.For(m, grain, func(lo, hi int) { roundRows(a16, a, lda, k, lo, hi) })
		}
	case bf16:
		buf := gemvScratch.Get().(*[]float32)
		defer gemvScratch.Put(buf)
		kvh := ps.kvh
		if cap(*buf) < m*kvh {
			*buf = make([]float32, m*kvh)
		}
		ps.ak, ps.lak = (*buf)[:m*kvh], kvh
		switch {
		case kvh == 0:
		case g.deint != nil:
			ak := ps.ak
			if grain := max(1, (64<<10)/kvh); m <= grain {
				g.deintRows(ak, a, lda, kvh, 0, m)
			} else {
				pl.For(m, grain, func(lo, hi int) { g.deintRows(ak, a, lda, kvh, lo, hi) })
			}
		default:
			deinterleave(ps.ak, a, m, lda, kvh, g.vlBF16)
		}
	}
	if units > 0 {
		t := min(pl.Threads(), max(1, units*4*k/minGemvBytes), units)
		if t <= 1 {
			ps.run(parts, 0, units)
		} else {
			// One contiguous range per thread, which it streams through
			// from start to end (what the prefetchers follow best), in
			// blocks that a thread done with its own range takes from the
			// end of another's. Only here does the pass go to the heap,
			// with its own copy of parts, so that a product small enough
			// for one thread allocates nothing.
			shared, cp := ps, append([]gemvPart(nil), parts...)
			blk := min(gemvStealBytes/(4*k), units/(4*t), gemvStealFlops/(4*m*k))
			if m*k*2 >= sweepBytes {
				// Each block sweeps all of A, from L3 when A is this
				// large: blocks of gemvBlockBytes of weights amortise it.
				blk = max(blk, min(gemvBlockBytes/(4*k), units/(4*t)))
			}
			pl.forStealing(t, units, max(1, blk), func(lo, hi int) { shared.run(cp, lo, hi) })
		}
	}
	for i := range parts { // rows left over by the kernels
		p := &parts[i]
		j0 := p.n &^ 3
		if ps.kvOf(p) == 0 {
			j0 = 0
		}
		for j := j0; j < p.n; j++ {
			for r := 0; r < m; r++ {
				var s float32
				if p.wh != nil && ps.a16 != nil {
					s = alpha * gemvDotGo16(ps.a16[r*k:], p.wh, j*p.ldw, 0, k)
				} else {
					s = alpha * gemvDotGo(a[r*lda:], p.wf, p.wh, j*p.ldw, 0, k)
				}
				if p.beta != 0 {
					s += p.beta * p.c[r*p.ldc+j]
				}
				p.c[r*p.ldc+j] = s
			}
		}
	}
}

// gemvPass is one runParts call: products over the same A
// (m×k, row stride lda; de-interleaved for the BF16 kernel in ak, row
// stride lak).
type gemvPass struct {
	g        *gemvArch
	m, k     int
	alpha    float32
	a, ak    []float32
	lda, lak int
	kvh, kvf int // columns the BF16 and the F32 kernels cover

	// a16 is A rounded to BF16 (row stride k) when the BF16 parts take the
	// dot kernel, else nil.
	a16 []uint16
}

// kvOf is the columns the kernel of part p covers.
func (ps *gemvPass) kvOf(p *gemvPart) int {
	if p.wh != nil {
		return ps.kvh
	}
	return ps.kvf
}

// run runs the kernels over units [lo, hi): the groups of four rows of
// each of parts whose first unit falls in the range.
func (ps *gemvPass) run(parts []gemvPart, lo, hi int) {
	off := 0
	for i := range parts {
		p := &parts[i]
		kv := ps.kvOf(p)
		if kv == 0 || p.n < 4 {
			continue
		}
		es, groups := p.esize(), p.n/4
		g0 := min(groups, max(0, (lo-off+es-1)/es))
		g1 := min(groups, max(0, (hi-off+es-1)/es))
		off += groups * es
		if g0 >= g1 {
			continue
		}
		pa, la := ps.a, ps.lda
		if p.wh != nil {
			pa, la = ps.ak, ps.lak
		}
		if p.wh != nil && ps.a16 != nil {
			ps.g.partRowsDot(p, ps.m, ps.k, kv, ps.alpha, ps.a16, 4*g0, 4*g1)
			continue
		}
		ps.g.partRows(p, ps.m, ps.k, kv, ps.alpha, ps.a, ps.lda, pa, la, 4*g0, 4*g1)
	}
}

// roundRows writes rows [lo, hi) of A (m × k, row stride lda) rounded to
// BF16 into a16 (row stride k).
func roundRows(a16 []uint16, a []float32, lda, k, lo, hi int) {
	for i := lo; i < hi; i++ {
		F32ToBF16(a16[i*k:(i+1)*k], a[i*lda:i*lda+k])
	}
}

// deintRows de-interleaves rows [lo, hi) of A (row stride lda), kvh
// columns each, into ak (row stride kvh) for the widening BF16 kernels.
func (g *gemvArch) deintRows(ak, a []float32, lda, kvh, lo, hi int) {
	for i := lo; i < hi; i++ {
		g.deint(&ak[i*kvh], &a[i*lda], kvh/g.vlBF16)
	}
}

// partRows runs the kernel of part p over its weight rows [lo, hi) (a
// multiple of 4, within p.n), the first kv columns of A from ak (row stride
// lak: de-interleaved for BF16), and adds the last k − kv columns from a.
func (g *gemvArch) partRows(p *gemvPart, m, k, kv int, alpha float32, a []float32, lda int, ak []float32, lak, lo, hi int) {
	es := p.esize()
	pf0 := gemvPrefetch(k, p.ldw, es)
	block := hi - lo
	if m > g.mp {
		block = max(4, gemvBlockBytes/(k*es)&^3)
	}
	for r0 := lo; r0 < hi; r0 += block {
		r1 := min(hi, r0+block)
		pf := pf0
		for i0 := 0; i0 < m; i0 += g.mp {
			mp := min(g.mp, m-i0)
			if i0 > 0 {
				pf = 0 // the block is in cache now
			}
			cp, ap := &p.c[i0*p.ldc+r0], &ak[i0*lak]
			if p.wh != nil {
				g.bf16(cp, p.ldc, ap, lak, &p.wh[r0*p.ldw], p.ldw, r1-r0, kv, mp, alpha, p.beta, pf)
			} else {
				g.f32(cp, p.ldc, ap, lak, &p.wf[r0*p.ldw], p.ldw, r1-r0, kv, mp, alpha, p.beta, pf)
			}
		}
	}
	if kv < k { // the last k mod vl columns
		for i := 0; i < m; i++ {
			for j := lo; j < hi; j++ {
				p.c[i*p.ldc+j] += alpha * gemvDotGo(a[i*lda:], p.wf, p.wh, j*p.ldw, kv, k)
			}
		}
	}
}

// partRowsDot is partRows for a BF16 part with A in BF16 (a16, row
// stride k), through the dot kernel. The kernel sweeps a block of A's rows
// for each group of four weight rows, so A is cut into blocks that stay in
// L1 (dotBlockBytes) and the weight rows into blocks that stay in L2
// (gemvBlockBytes), re-read from there for each block of A; rows of A
// beyond a multiple of four take one more call.
func (g *gemvArch) partRowsDot(p *gemvPart, m, k, kv int, alpha float32, a16 []uint16, lo, hi int) {
	aRows := max(4, dotBlockBytes/(2*k)&^3)
	block := hi - lo
	if m > aRows {
		block = max(4, gemvBlockBytes/(k*2)&^3)
	}
	m4 := m &^ 3
	pf0 := dotPrefetchGroups * 4 * p.ldw * 2
	for r0 := lo; r0 < hi; r0 += block {
		r1 := min(hi, r0+block)
		pf := pf0
		for i0 := 0; i0 < m; {
			mb := min(aRows, m4-i0)
			if i0 >= m4 {
				mb = m - m4
			}
			g.dot(&p.c[i0*p.ldc+r0], p.ldc, &a16[i0*k], k, &p.wh[r0*p.ldw], p.ldw, r1-r0, kv, mb, alpha, p.beta, pf)
			pf = 0 // the block is in cache now
			i0 += mb
		}
	}
	if kv < k { // the last k mod 32 columns
		for i := 0; i < m; i++ {
			for j := lo; j < hi; j++ {
				p.c[i*p.ldc+j] += alpha * gemvDotGo16(a16[i*k:], p.wh, j*p.ldw, kv, k)
			}
		}
	}
}

// dotPrefetchGroups is how many groups of four weight rows ahead the dot
// kernel prefetches (into L2) on its first pass over a block of weights.
// Measured on the development machines at m = 40 with weights not in cache
// (the ~20M model's shapes, 48 MB of copies in turn), prefetching made the
// products 20-35% faster on 1 and 2 threads; 4 groups ahead was a little
// better than 2 and 8.
const dotPrefetchGroups = 4

// dotBlockBytes bounds the rows of A (in BF16) that one call of the dot
// kernel sweeps for each group of four weight rows: with the four weight
// rows, they stay in L1.
const dotBlockBytes = 24 << 10

// gemvDotGo16 returns Σ a[p]·w[off+p] over p in [p0, p1), both BF16, with
// float32 sums.
func gemvDotGo16(a, wh []uint16, off, p0, p1 int) float32 {
	var s float32
	for p := p0; p < p1; p++ {
		s += bf16to32(a[p]) * bf16to32(wh[off+p])
	}
	return s
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
