package kernels

import (
	"fmt"
	"sync"
	"unsafe"
)

// The blocked matrix multiply (GotoBLAS/BLIS structure).
//
// C (m×n) is computed in tiles of MR×NR by an assembly micro-kernel that keeps
// the tile in registers while it walks a shared dimension of length kc. Its
// operands are packed first: a kc×nc block of op(B) into NR-wide panels
// (p-major, so the kernel reads B with unit stride), then an mc×kc block of
// op(A) into MR-high panels. Packing absorbs every layout difference: the
// transposes, arbitrary leading dimensions, BF16→float32 widening, and zero
// padding of partial panels; the kernel sees one layout only.
//
// Loop nest, outermost first:
//
//	jc: columns of C in steps of nc   (B block kc×nc: L3, or L2 when small)
//	pc: shared dimension in steps of kc (pack B block)
//	ic: rows of C in steps of mc      (pack A block mc×kc: L2)
//	jr: NR-wide panel of the B block  (kc×NR: L1, reused by every ir)
//	ir: MR-high panel of the A block  (micro-kernel call)
//
// When the rows of C fit one mc block (every prefill chunk up to ~500
// tokens) the B block is never materialised: each kc×NR panel is packed just
// before the kernels that use it and stays in L1 (see serial).
//
// Threads split C by columns (each packs its own part of B and all of A) or,
// when C is tall and narrow, by rows; either way every thread writes its own
// part of C and packs into its own buffers, taken from a sync.Pool. A split
// has up to four chunks per thread, claimed dynamically, so that a thread
// that falls behind (descheduled on a busy machine) holds up less.
//
// Small m is served elsewhere: smallM (B not transposed, no packing) and the
// matrix-vector path of gemv.go.

// gemmArch is one architecture's micro-kernel, packers and block sizes.
type gemmArch struct {
	mr, nr     int // register tile
	mc, kc, nc int // cache blocks (mc a multiple of mr, nc of nr)

	// kernel computes the mr×nr tile C = alpha·A·B + beta·C from packed
	// panels a (k×mr, p-major) and b (k×nr); C is not read when beta == 0.
	kernel func(k int, a, b, c *float32, ldc int, alpha, beta float32)
	// packT transposes: dst[p*rows+r] = src[r*ld+p] for r < rows (even) and
	// p < cols (a multiple of 8). packTBF16 does the same from BF16.
	packT     func(dst, src *float32, ld, rows, cols int)
	packTBF16 func(dst *float32, src *uint16, ld, rows, cols int)

	// kernN, when set, computes up to four rows of C with B not transposed
	// and nothing packed (kernn_amd64.s); Sgemm uses it for small m.
	// kernNMaxM is the largest m that Sgemm gives to it (in passes of four
	// rows) rather than to the blocked product, whose packing of B costs
	// more than the arithmetic when m is this small.
	kernN     func(m, k int, a0, a1, a2, a3 *float32, aps int, b *float32, ldb int, c *float32, ldc, n int, alpha, beta float32)
	kernNMaxM int

	bufs sync.Pool // *gemmBufs
}

type gemmBufs struct {
	a, b, tmp []float32
}

func (g *gemmArch) getBufs() *gemmBufs {
	if v := g.bufs.Get(); v != nil {
		b := v.(*gemmBufs)
		if len(b.a) >= g.mc*g.kc && len(b.b) >= g.kc*g.nc && len(b.tmp) >= g.mr*g.nr {
			return b
		}
	}
	return &gemmBufs{
		a:   make([]float32, g.mc*g.kc),
		b:   make([]float32, g.kc*g.nc),
		tmp: make([]float32, g.mr*g.nr),
	}
}

// matA is op(A) as stored: element (i, p) is f[i*ld+p], or f[p*ld+i] when
// trans is set.
type matA struct {
	f     []float32
	ld    int
	trans bool
}

// matB is op(B) as stored, float32 (f) or BF16 (h): element (p, j) is
// x[p*ld+j], or x[j*ld+p] when trans is set. BF16 is only held transposed
// (a linear layer's weight).
type matB struct {
	f     []float32
	h     []uint16
	ld    int
	trans bool
}

// minGemmWork is the m·n·k below which a product runs on one thread: a
// parallel call costs a few microseconds, about this much arithmetic.
const minGemmWork = 1 << 18

// run computes C = alpha·op(A)·op(B) + beta·C; k > 0 and alpha != 0.
func (g *gemmArch) run(pl *Pool, m, n, k int, alpha float32, a matA, b matB, beta float32, c []float32, ldc int) {
	t := min(pl.Threads(), max(1, m*n*k/minGemmWork))
	mPanels := (m + g.mr - 1) / g.mr
	nPanels := (n + g.nr - 1) / g.nr
	switch {
	case t <= 1:
		g.serial(0, m, 0, n, k, alpha, a, b, beta, c, ldc)
	case nPanels >= t && (m <= n || mPanels < t):
		// Split columns: each chunk packs its own B and all of A.
		ch := chunksFor(t, nPanels, minChunkCols/g.nr)
		pl.forChunks(ch, func(i int) {
			lo, hi := i*nPanels/ch*g.nr, min((i+1)*nPanels/ch*g.nr, n)
			g.serial(0, m, lo, hi, k, alpha, a, b, beta, c, ldc)
		})
	default:
		// Split rows: each chunk packs its own A and all of B.
		ch := chunksFor(t, mPanels, minChunkRows/g.mr)
		pl.forChunks(ch, func(i int) {
			lo, hi := i*mPanels/ch*g.mr, min((i+1)*mPanels/ch*g.mr, m)
			g.serial(lo, hi, 0, n, k, alpha, a, b, beta, c, ldc)
		})
	}
}

// Chunks of a split product: more chunks than threads let a thread that
// gets ahead (the others descheduled on a busy machine, or slower) take more
// of them, but each chunk packs the whole of the other operand again, so a
// chunk keeps at least this many columns (rows) of C.
const (
	minChunkCols = 512
	minChunkRows = 256
)

// chunksFor returns how many chunks to cut units into for t threads: t, or
// up to 4t while each keeps minUnits units, never more than units.
func chunksFor(t, units, minUnits int) int {
	return min(units, max(t, min(4*t, units/max(1, minUnits))))
}

// serial computes rows [m0,m1) × columns [n0,n1) of C on this goroutine.
//
// When the rows fit one mc block, A is packed once per kc block and each
// NR-wide panel of B is packed just before the kernels that use it, so it
// goes from the packer to the kernels through L1 and no B block is ever
// written out to L2 or L3. Otherwise the B block is packed once and reused
// by every mc block, as in the loop nest above.
func (g *gemmArch) serial(m0, m1, n0, n1, k int, alpha float32, a matA, b matB, beta float32, c []float32, ldc int) {
	bufs := g.getBufs()
	defer g.bufs.Put(bufs)
	nr := g.nr
	for jc := n0; jc < n1; jc += g.nc {
		nb := min(g.nc, n1-jc)
		for pc := 0; pc < k; pc += g.kc {
			kb := min(g.kc, k-pc)
			be := beta
			if pc > 0 {
				be = 1
			}
			if m1-m0 <= g.mc {
				g.packA(bufs.a, a, m0, m1-m0, pc, kb)
				for jr := 0; jr < nb; jr += nr {
					cols := min(nr, nb-jr)
					g.packB(bufs.b, b, jc+jr, cols, pc, kb)
					g.panel(kb, bufs, bufs.b, m1-m0, cols, alpha, be, c, m0*ldc+jc+jr, ldc)
				}
				continue
			}
			g.packB(bufs.b, b, jc, nb, pc, kb)
			for ic := m0; ic < m1; ic += g.mc {
				mb := min(g.mc, m1-ic)
				g.packA(bufs.a, a, ic, mb, pc, kb)
				for jr := 0; jr < nb; jr += nr {
					g.panel(kb, bufs, bufs.b[jr*kb:], mb, min(nr, nb-jr), alpha, be, c, ic*ldc+jc+jr, ldc)
				}
			}
		}
	}
}

// panel multiplies the packed A block in bufs.a (mb rows) by one packed
// panel of B (cols ≤ nr columns), into C starting at c[ci].
func (g *gemmArch) panel(kb int, bufs *gemmBufs, bp []float32, mb, cols int, alpha, be float32, c []float32, ci, ldc int) {
	mr, nr := g.mr, g.nr
	for ir := 0; ir < mb; ir += mr {
		rows := min(mr, mb-ir)
		ap := &bufs.a[ir*kb]
		cij := ci + ir*ldc
		if rows == mr && cols == nr {
			g.kernel(kb, ap, &bp[0], &c[cij], ldc, alpha, be)
			continue
		}
		g.kernel(kb, ap, &bp[0], &bufs.tmp[0], nr, alpha, 0)
		for r := 0; r < rows; r++ {
			dst := c[cij+r*ldc : cij+r*ldc+cols]
			src := bufs.tmp[r*nr : r*nr+cols]
			if be == 0 {
				copy(dst, src)
			} else {
				for j, v := range src {
					dst[j] = v + be*dst[j]
				}
			}
		}
	}
}

// smallM computes C = alpha·op(A)·B + beta·C with B not transposed, for
// m ≤ kernNMaxM, with kernN. Columns are split over threads; within a thread
// they go in blocks small enough for the block of B to stay in L2 between
// the passes over four rows of A each.
func (g *gemmArch) smallM(pl *Pool, m, n, k int, alpha float32, a matA, b []float32, ldb int, beta float32, c []float32, ldc int) {
	const strip = 16
	strips := (n + strip - 1) / strip
	t := min(pl.Threads(), strips, max(1, m*n*k/minGemmWork))
	if t <= 1 { // no closure: a small product (attention's, per task) allocates nothing
		g.smallMCols(0, n, m, k, alpha, a, b, ldb, beta, c, ldc)
		return
	}
	pl.forChunks(t, func(i int) {
		lo, hi := i*strips/t*strip, min((i+1)*strips/t*strip, n)
		g.smallMCols(lo, hi, m, k, alpha, a, b, ldb, beta, c, ldc)
	})
}

// smallMCols is smallM over the columns [lo, hi) of C (a multiple of the
// strip apart from the last).
func (g *gemmArch) smallMCols(lo, hi, m, k int, alpha float32, a matA, b []float32, ldb int, beta float32, c []float32, ldc int) {
	const strip = 16
	block := max(strip, (256<<10)/(4*k)/strip*strip)
	for j0 := lo; j0 < hi; j0 += block {
		nb := min(block, hi-j0)
		for i0 := 0; i0 < m; i0 += 4 {
			var rows [4]*float32
			aps := 4
			for r := range rows {
				i := i0 + min(r, m-i0-1) // rows past m repeat the last one
				if a.trans {
					rows[r] = &a.f[i]
				} else {
					rows[r] = &a.f[i*a.ld]
				}
			}
			if a.trans {
				aps = 4 * a.ld
			}
			g.kernN(min(4, m-i0), k, rows[0], rows[1], rows[2], rows[3], aps, &b[j0], 4*ldb, &c[i0*ldc+j0], 4*ldc, nb, alpha, beta)
		}
	}
}

// packA packs rows [i0, i0+mb) × shared indices [p0, p0+kb) of op(A) into
// mr-high panels, zero-padding the last one.
func (g *gemmArch) packA(dst []float32, a matA, i0, mb, p0, kb int) {
	mr := g.mr
	for ir := 0; ir < mb; ir += mr {
		rows := min(mr, mb-ir)
		d := dst[ir*kb : ir*kb+mr*kb]
		if a.trans {
			packCopy(d, a.f, (p0)*a.ld+i0+ir, a.ld, rows, mr, kb)
			continue
		}
		off := (i0+ir)*a.ld + p0
		done := 0
		if rows == mr {
			done = kb &^ 7
			if done > 0 {
				g.packT(&d[0], &a.f[off], a.ld, mr, done)
			}
		}
		packTransGo(d, a.f, off, a.ld, rows, mr, done, kb)
	}
}

// packB packs shared indices [p0, p0+kb) × columns [j0, j0+nb) of op(B)
// into nr-wide panels, zero-padding the last one.
func (g *gemmArch) packB(dst []float32, b matB, j0, nb, p0, kb int) {
	nr := g.nr
	for jr := 0; jr < nb; jr += nr {
		cols := min(nr, nb-jr)
		d := dst[jr*kb : jr*kb+nr*kb]
		if !b.trans {
			packCopy(d, b.f, p0*b.ld+j0+jr, b.ld, cols, nr, kb)
			continue
		}
		off := (j0+jr)*b.ld + p0
		done := 0
		if cols == nr {
			done = kb &^ 7
		}
		if b.h != nil {
			if done > 0 {
				g.packTBF16(&d[0], &b.h[off], b.ld, nr, done)
			}
			packTransBF16Go(d, b.h, off, b.ld, cols, nr, done, kb)
			continue
		}
		if done > 0 {
			g.packT(&d[0], &b.f[off], b.ld, nr, done)
		}
		packTransGo(d, b.f, off, b.ld, cols, nr, done, kb)
	}
}

// packCopy packs a panel whose rows of the packed layout are contiguous in
// src: d[p*w+r] = src[off+p*ld+r] for r < rows, zero for rows ≤ r < w.
func packCopy(d, src []float32, off, ld, rows, w, kb int) {
	for p := 0; p < kb; p++ {
		row := d[p*w : p*w+w]
		copy(row, src[off+p*ld:off+p*ld+rows])
		clear(row[rows:])
	}
}

// packTransGo packs columns [from, kb) of a transposed panel:
// d[p*w+r] = src[off+r*ld+p], zero for rows ≤ r < w. With from > 0 only the
// columns the assembly packer left are done, and rows == w.
func packTransGo(d, src []float32, off, ld, rows, w, from, kb int) {
	for p := from; p < kb; p++ {
		row := d[p*w : p*w+w]
		for r := 0; r < rows; r++ {
			row[r] = src[off+r*ld+p]
		}
		clear(row[rows:])
	}
}

// packTransBF16Go is packTransGo from BF16.
func packTransBF16Go(d []float32, src []uint16, off, ld, rows, w, from, kb int) {
	for p := from; p < kb; p++ {
		row := d[p*w : p*w+w]
		for r := 0; r < rows; r++ {
			row[r] = bf16to32(src[off+r*ld+p])
		}
		clear(row[rows:])
	}
}

func bf16to32(h uint16) float32 {
	u := uint32(h) << 16
	return *(*float32)(unsafe.Pointer(&u))
}

// scaleMatrix sets C = beta·C over m×n (zero when beta == 0).
func scaleMatrix(m, n int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
		} else if beta != 1 {
			for j := range row {
				row[j] *= beta
			}
		}
	}
}

// checkMat panics unless x holds a rows×cols row-major matrix with row
// stride ld. The assembly trusts these bounds.
func checkMat(name string, length, rows, cols, ld int) {
	if rows < 0 || cols < 0 {
		panic(fmt.Sprintf("kernels: negative dimension of %s (%d×%d)", name, rows, cols))
	}
	if rows == 0 || cols == 0 {
		return
	}
	if ld < cols {
		panic(fmt.Sprintf("kernels: %s has row stride %d < %d columns", name, ld, cols))
	}
	if need := (rows-1)*ld + cols; length < need {
		panic(fmt.Sprintf("kernels: %s has %d elements, %d×%d with stride %d needs %d", name, length, rows, cols, ld, need))
	}
}

// Sgemm computes C = alpha·op(A)·op(B) + beta·C for row-major float32
// matrices, where op(X) is X or Xᵀ. op(A) is m×k, op(B) is k×n, C is m×n;
// lda, ldb, ldc are the row strides of A, B and C as stored. With beta == 0,
// C is overwritten (NaNs in C do not propagate).
//
// With alpha == 0 or k == 0, A and B are not read and C becomes beta·C.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	defaultPool.Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// Sgemm is the package's Sgemm on pl's threads.
func (pl *Pool) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	im := active.Load()
	if im.gemm == nil {
		pl.sgemmGeneric(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	if transA {
		checkMat("A", len(a), k, m, lda)
	} else {
		checkMat("A", len(a), m, k, lda)
	}
	if transB {
		checkMat("B", len(b), n, k, ldb)
	} else {
		checkMat("B", len(b), k, n, ldb)
	}
	checkMat("C", len(c), m, n, ldc)
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || alpha == 0 {
		scaleMatrix(m, n, beta, c, ldc)
		return
	}
	if !transA && transB && im.gemv != nil && m <= im.gemv.maxM {
		im.gemv.run(pl, m, n, k, alpha, a, lda, b, nil, ldb, beta, c, ldc)
		return
	}
	if !transB && im.gemm.kernN != nil && m <= im.gemm.kernNMaxM {
		im.gemm.smallM(pl, m, n, k, alpha, matA{a, lda, transA}, b, ldb, beta, c, ldc)
		return
	}
	im.gemm.run(pl, m, n, k, alpha, matA{a, lda, transA}, matB{f: b, ld: ldb, trans: transB}, beta, c, ldc)
}

// LinearF32 computes C[m,n] = A[m,k]·W[n,k]ᵀ, adding into C when accumulate
// is set. It is the forward product of a linear layer with float32 weights.
//
// Small m (a decode step) takes a streaming matrix-vector path bound by the
// bandwidth of reading W; larger m the blocked matrix multiply.
func LinearF32(c, a, w []float32, m, n, k int, accumulate bool) {
	defaultPool.LinearF32(c, a, w, m, n, k, accumulate)
}

// LinearF32 is the package's LinearF32 on pl's threads.
func (pl *Pool) LinearF32(c, a, w []float32, m, n, k int, accumulate bool) {
	beta := float32(0)
	if accumulate {
		beta = 1
	}
	pl.Sgemm(false, true, m, n, k, 1, a, k, w, k, beta, c, n)
}

// LinearBF16 is LinearF32 with W stored as BF16 (the upper 16 bits of a
// float32). The products and sums are computed in float32.
func LinearBF16(c, a []float32, w []uint16, m, n, k int, accumulate bool) {
	defaultPool.LinearBF16(c, a, w, m, n, k, accumulate)
}

// LinearBF16 is the package's LinearBF16 on pl's threads.
func (pl *Pool) LinearBF16(c, a []float32, w []uint16, m, n, k int, accumulate bool) {
	im := active.Load()
	if im.gemm == nil {
		pl.linearBF16Generic(c, a, w, m, n, k, accumulate)
		return
	}
	checkMat("A", len(a), m, k, k)
	checkMat("W", len(w), n, k, k)
	checkMat("C", len(c), m, n, n)
	beta := float32(0)
	if accumulate {
		beta = 1
	}
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		scaleMatrix(m, n, beta, c, n)
		return
	}
	if im.gemv != nil && m <= im.gemv.maxM {
		im.gemv.run(pl, m, n, k, 1, a, k, nil, w, k, beta, c, n)
		return
	}
	im.gemm.run(pl, m, n, k, 1, matA{a, k, false}, matB{h: w, ld: k, trans: true}, beta, c, n)
}

// LinearOut is one product of LinearMulti: C[m,N] = A·Wᵀ, or C += A·Wᵀ with
// Accumulate, for W [N, k] in float32 (W32), BF16 (W16) or quantized (Q,
// with N rows: see LinearQuant); exactly one of W32, W16 and Q is set.
type LinearOut struct {
	C          []float32
	W32        []float32
	W16        []uint16
	Q          *QMatrix
	N          int
	Accumulate bool
}

// Precision says how a product with BF16 weights treats its float32
// activations A.
type Precision uint8

const (
	// PrecisionF32 multiplies A as it is by the weights widened to float32.
	PrecisionF32 Precision = iota
	// PrecisionBF16 rounds A to BF16 (to nearest even) first, as an engine
	// that computes in BF16 does; each product of two BF16 values is exact
	// in float32 and the sums stay float32. Where the CPU has AVX512_BF16,
	// every such product then runs the matrix-vector kernels' structure
	// with VDPBF16PS, 32 pairs of BF16 per instruction, where the float32
	// kernels need a widening and two FMAs: a batched decode step, bound by
	// the FMA units, multiplies up to twice as fast, and batch-1 decode of
	// weights held in cache faster too. Elsewhere A is rounded and the
	// float32 kernels run, so that the result is the same on every CPU up
	// to the order of the sums (and VDPBF16PS flushes denormals to zero).
	// Products with float32 weights ignore it.
	PrecisionBF16
)

// String names p as the configuration does.
func (p Precision) String() string {
	if p == PrecisionBF16 {
		return "bf16"
	}
	return "f32"
}

// HasBF16Dot reports whether the active kernel set multiplies BF16 by BF16
// in hardware (VDPBF16PS) at PrecisionBF16.
func HasBF16Dot() bool {
	g := active.Load().gemv
	return g != nil && g.dot != nil
}

// roundScratch holds copies of A rounded to BF16 precision.
var roundScratch = sync.Pool{New: func() any { return new([]float32) }}

// roundBF16 returns the m×k matrix a (row stride lda) with every element
// rounded to BF16 precision, packed (row stride k), in a buffer from
// roundScratch that the caller returns with putRound.
func (pl *Pool) roundBF16(a []float32, m, k, lda int) (*[]float32, []float32) {
	buf := roundScratch.Get().(*[]float32)
	if cap(*buf) < m*k {
		*buf = make([]float32, m*k)
	}
	r := (*buf)[:m*k]
	pl.For(m, max(1, (64<<10)/max(1, k)), func(lo, hi int) {
		var tmp [512]uint16
		for i := lo; i < hi; i++ {
			src, dst := a[i*lda:i*lda+k], r[i*k:(i+1)*k]
			for p := 0; p < k; p += len(tmp) {
				q := min(k, p+len(tmp))
				F32ToBF16(tmp[:q-p], src[p:q])
				BF16ToF32(dst[p:q], tmp[:q-p])
			}
		}
	})
	return buf, r
}

// LinearBF16Prec is LinearBF16 at precision p.
func LinearBF16Prec(c, a []float32, w []uint16, m, n, k int, accumulate bool, p Precision) {
	defaultPool.LinearBF16Prec(c, a, w, m, n, k, accumulate, p)
}

// LinearBF16Prec is the package's LinearBF16Prec on pl's threads.
func (pl *Pool) LinearBF16Prec(c, a []float32, w []uint16, m, n, k int, accumulate bool, p Precision) {
	if p == PrecisionF32 {
		pl.LinearBF16(c, a, w, m, n, k, accumulate)
		return
	}
	pl.LinearMultiPrec(a, m, k, []LinearOut{{C: c, W16: w, N: n, Accumulate: accumulate}}, p)
}

// LinearMulti computes the products of several linear layers over the same
// input A [m, k]: the q, k and v projections of attention, or the gate and
// up projections of an MLP. It equals LinearF32 or LinearBF16 for each out
// in turn; at small m (a decode step) it is one matrix-vector pass over all
// the weights, with one fork-join for all of them and each thread reading
// one contiguous range of the weight rows, which may run from one matrix
// into the next (see gemvArch.runParts).
func LinearMulti(a []float32, m, k int, outs []LinearOut) {
	defaultPool.LinearMultiPrec(a, m, k, outs, PrecisionF32)
}

// LinearMultiPrec is LinearMulti with the BF16 products at precision p.
func LinearMultiPrec(a []float32, m, k int, outs []LinearOut, p Precision) {
	defaultPool.LinearMultiPrec(a, m, k, outs, p)
}

// LinearMultiPrec is the package's LinearMultiPrec on pl's threads.
func (pl *Pool) LinearMultiPrec(a []float32, m, k int, outs []LinearOut, p Precision) {
	im := active.Load()
	checkMat("A", len(a), m, k, k)
	nq := 0
	for i := range outs {
		if q := outs[i].Q; q != nil {
			if outs[i].W32 != nil || outs[i].W16 != nil || q.k != k || q.n != outs[i].N {
				panic(fmt.Sprintf("kernels: LinearMulti out %d: a quantized W of %d×%d for N = %d, k = %d (and no other W)", i, q.n, q.k, outs[i].N, k))
			}
			checkMat("C", len(outs[i].C), m, outs[i].N, outs[i].N)
			nq++
		}
	}
	if nq > 0 { // the quantized products quantize A: a pass of their own
		var q, rest []LinearOut
		for _, o := range outs {
			if o.Q != nil {
				q = append(q, o)
			} else {
				rest = append(rest, o)
			}
		}
		pl.linearQuantParts(a, m, k, q)
		if len(rest) > 0 {
			pl.LinearMultiPrec(a, m, k, rest, p)
		}
		return
	}
	anyF32, anyBF16 := false, false
	for i := range outs {
		o := &outs[i]
		if o.N > 0 && k > 0 && (o.W32 == nil) == (o.W16 == nil) {
			panic(fmt.Sprintf("kernels: LinearMulti out %d needs exactly one of W32 and W16", i))
		}
		checkMat("W", max(len(o.W32), len(o.W16)), o.N, k, k)
		checkMat("C", len(o.C), m, o.N, o.N)
		anyF32 = anyF32 || o.W32 != nil
		anyBF16 = anyBF16 || o.W16 != nil
	}
	dot := false
	if p == PrecisionBF16 && anyBF16 && m > 0 && k > 0 {
		if anyF32 { // the float32 products take A as it is: split the call
			var f32, bf []LinearOut
			for _, o := range outs {
				if o.W16 != nil {
					bf = append(bf, o)
				} else {
					f32 = append(f32, o)
				}
			}
			pl.LinearMultiPrec(a, m, k, f32, PrecisionF32)
			pl.LinearMultiPrec(a, m, k, bf, p)
			return
		}
		if im.gemv != nil && im.gemv.dot != nil {
			// The dot kernel at every m: measured on the development
			// machines (2 threads, the ~20M model's shapes), it ran 1.4-1.9×
			// the float32 kernels at m = 32, 2-2.8× at 128, and still
			// 1.2-1.5× the blocked float32 product at 512.
			dot = true
		} else {
			buf, r := pl.roundBF16(a, m, k, k)
			defer roundScratch.Put(buf)
			a = r
		}
	}
	if im.gemv == nil || m > im.gemv.maxM && !dot || k == 0 || m == 0 {
		for _, o := range outs {
			if o.W16 != nil {
				pl.LinearBF16(o.C, a, o.W16, m, o.N, k, o.Accumulate)
			} else {
				pl.LinearF32(o.C, a, o.W32, m, o.N, k, o.Accumulate)
			}
		}
		return
	}
	var buf [4]gemvPart
	parts := buf[:0]
	for _, o := range outs {
		if o.N == 0 {
			continue
		}
		beta := float32(0)
		if o.Accumulate {
			beta = 1
		}
		parts = append(parts, gemvPart{wf: o.W32, wh: o.W16, ldw: k, n: o.N, c: o.C, ldc: o.N, beta: beta})
	}
	im.gemv.runParts(pl, m, k, 1, a, k, parts, dot)
}
