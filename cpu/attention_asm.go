package cpu

import (
	"math"
	"unsafe"

	"github.com/clawrl/clawrl/cpu/kernels"
)

// The AVX-512 paths of paged attention (kernels in attention_amd64.s and
// attention_dec_amd64.s).
//
// Both read keys and values where they lie in the cache, through a table of
// the byte offsets of a key tile's rows (offsets), whatever the order of
// the cache blocks: the decode kernels from an F32 or a BF16 cache, the
// tile kernels from an F32 one; a BF16 cache's tile is first widened to
// contiguous F32 rows in the thread's scratch (widen) for them, except the
// keys at BF16 products (dpQK), which flashQK512BF16 reads in place.
//
// The tile path (runTiles) holds the task's queries transposed, Qᵀ (hd ×
// mp: one lane per query row, mp = m rounded up to 16), and so the scores
// Sᵀ (keys × mp) and the output Oᵀ (hd × mp). Every product broadcasts one
// element of a cache row against vectors of query rows, so no operand is
// packed but the queries, once per task:
//
//	Sᵀ[j, :] = Σ_p K_j[p]·Qᵀ[p, :]                 (flashQK512)
//	Oᵀ[d, :] = α∘Oᵀ[d, :] + Σ_j V_j[d]·Pᵀ[j, :]    (flashPV512)
//
// The online softmax is a column operation in this layout, vectorised over
// query rows (flashSoftmax512), in base 2: the queries are pre-multiplied by
// scale·log2(e).
//
// The decode path (runDecode) is for tasks of a few query rows, whose
// vectors of query rows would be mostly empty: row layout, the products
// vectorised along the head dimension, four query rows per call
// (flashDecQK512, flashDecPV512), the softmax that of runSgemm.

// log2e is log2(e), so that e^x = 2^(x·log2e).
const log2e = 1.4426950408889634

// noKey is the running maximum of a row that has seen no key yet on the
// tile path (the kernels' −1e30): finite, so that 2^(noKey − noKey) is 1
// and not NaN.
const noKey = -1e30

// decRows is the most query rows of a task that take the decode kernels.
// Their cost per key grows with the rows (four per call), that of the tile
// kernels with the rows rounded up to 16.
const decRows = 8

// runTiles computes one piece of work with the AVX-512 tile kernels.
func (f *flashCall) runTiles(w flashWork, sc *flashScratch) {
	t := &f.tasks[w.task]
	hd, group := f.hd, f.group
	m := t.tokens * group
	mp := (m + 15) &^ 15
	Qt, Ot := sc.q[:hd*mp], sc.o[:hd*mp]
	mx, l, alpha := sc.mx[:mp], sc.l[:mp], sc.alpha[:mp]

	// Qᵀ[p, i] = scale·log2e·q[i, p] (loadQT), or with dpQK pairs of
	// BF16 queries, unscaled (loadQPairs: the QK kernel scales the scores).
	sl := f.scale * log2e
	var Qp []uint32
	if f.dpQK {
		Qp = unsafe.Slice((*uint32)(unsafe.Pointer(&Qt[0])), hd/2*mp)
		f.loadQPairs(Qp, t, m, mp)
	} else {
		f.loadQT(Qt, t, m, mp, sl)
	}
	clear(Ot)
	clear(l)
	for i := range mx {
		mx[i] = noKey
	}

	blocks := f.table[t.s*f.maxBlocks : (t.s+1)*f.maxBlocks]
	for k0 := w.k0; k0 < w.k1; k0 += f.tl.keys {
		nk := min(f.tl.keys, w.k1-k0)
		nk8 := (nk + 7) &^ 7
		// The column maxima of the tile come out of the QK kernel; they
		// serve unless the causal mask hides part of the tile, whose scores
		// flashSoftmax512 then masks with lim: key k0+j counts for the
		// rows of the tokens at or after its position, rows ≥
		// (k0+j − first)·group.
		cmax := sc.cmax[:mp]
		for i := range cmax {
			cmax[i] = negInf32
		}
		S := sc.s[:nk8*mp]
		var vb *float32
		var ob *int64
		if f.dpQK {
			// Keys in place, in BF16; values widened for flashPV512.
			kob := f.offsets(sc.offs, blocks, k0, nk, nk8+offsAhead, t.g)
			f.widen(sc.v[:nk8*hd], f.v16, nil, blocks, k0, nk, t.g)
			flashQK512BF16(&S[0], &Qp[0], mp, &f.k16[0], &f.v16[0], &kob[0], nk8, hd, &cmax[0], sl)
			vb, ob = &sc.v[0], &sc.seq[0]
		} else {
			var kb *float32
			kb, vb, ob = f.tile(sc, blocks, k0, nk, nk8, t.g)
			flashQK512(&S[0], &Qt[0], mp, kb, vb, ob, nk8, hd, &cmax[0])
		}
		if k0+nk-1 > t.first {
			lim := sc.lim[:nk]
			for j := range lim {
				lim[j] = int32(min(mp, max(0, (k0+j-t.first)*group)))
			}
			flashSoftmax512(&S[0], mp, nk, &lim[0], &mx[0], &l[0], &alpha[0], nil)
		} else {
			flashSoftmax512(&S[0], mp, nk, nil, &mx[0], &l[0], &alpha[0], &cmax[0])
		}
		flashPV512(&Ot[0], &S[0], mp, vb, ob, nk, hd, &alpha[0])
	}

	// Back to row layout (where Qᵀ was) and natural-log maxima.
	O := sc.q[:m*hd]
	for i := range m {
		for d := range hd {
			O[i*hd+d] = Ot[d*mp+i]
		}
		mx[i] *= math.Ln2
	}
	f.finish(t, w.part, O, mx[:m], l[:m])
}

// taskRows calls fn for each query row of task t: row i = tok·group + j is
// query head g·group + j of the task's token tok.
func (f *flashCall) taskRows(t *flashTask, fn func(i int, row []float32)) {
	hd, group := f.hd, f.group
	gw := group * hd
	for tok := range t.tokens {
		src := f.q[(t.r0+tok)*f.qdim+t.g*gw:][:gw]
		for j := range group {
			fn(tok*group+j, src[j*hd:(j+1)*hd])
		}
	}
}

// loadQT writes the queries of task t, m rows, transposed into Qt (hd ×
// mp) times sc, rounded to BF16 first with roundQ; the padding columns are
// zero.
func (f *flashCall) loadQT(Qt []float32, t *flashTask, m, mp int, sc float32) {
	f.taskRows(t, func(i int, row []float32) {
		for p, x := range row {
			if f.roundQ {
				x = math.Float32frombits(uint32(kernels.F32ToBF16One(x)) << 16)
			}
			Qt[p*mp+i] = x * sc
		}
	})
	if m < mp {
		for p := range f.hd {
			clear(Qt[p*mp+m : (p+1)*mp])
		}
	}
}

// loadQPairs writes the queries of task t, m rows, rounded to BF16, as
// pairs into Qp (hd/2 × mp): Qp[p·mp + i] holds elements 2p (low half) and
// 2p+1 of row i, the layout of flashQK512BF16; the padding columns are
// zero.
func (f *flashCall) loadQPairs(Qp []uint32, t *flashTask, m, mp int) {
	f.taskRows(t, func(i int, row []float32) {
		for p := range len(row) / 2 {
			lo, hi := kernels.F32ToBF16One(row[2*p]), kernels.F32ToBF16One(row[2*p+1])
			Qp[p*mp+i] = uint32(lo) | uint32(hi)<<16
		}
	})
	if m < mp {
		for p := range f.hd / 2 {
			clear(Qp[p*mp+m : (p+1)*mp])
		}
	}
}

// runDecode computes one piece of work of a task of at most decRows query
// rows with the AVX-512 decode kernels.
func (f *flashCall) runDecode(w flashWork, sc *flashScratch) {
	t := &f.tasks[w.task]
	hd, group := f.hd, f.group
	m := t.tokens * group
	// Rows per kernel call, and keys per step of its QK kernel: four rows
	// and four keys, or for tasks of one or two rows (one token of two
	// query heads per key/value head) two rows and eight keys, so that no
	// multiplications go to padding rows.
	rows, kstep := 4, 4
	if m <= 2 {
		rows, kstep = 2, 8
	}
	mr := (m + rows - 1) / rows * rows
	gw := group * hd
	Q, O := sc.q[:mr*hd], sc.o[:mr*hd]
	mx, l, alpha := sc.mx[:mr], sc.l[:mr], sc.alpha[:mr]
	for tok := range t.tokens {
		dst := Q[tok*gw : (tok+1)*gw]
		f.loadQ(dst, f.q[(t.r0+tok)*f.qdim+t.g*gw:][:gw], sc)
	}
	clear(Q[m*hd:])
	clear(O)
	clear(l)
	for i := range mx {
		mx[i] = negInf32
	}

	blocks := f.table[t.s*f.maxBlocks : (t.s+1)*f.maxBlocks]
	for k0 := w.k0; k0 < w.k1; k0 += f.tl.keys {
		nk := min(f.tl.keys, w.k1-k0)
		nkp := (nk + kstep - 1) / kstep * kstep
		// The keys and values in place (F32, BF16), or a Q8_0 cache's
		// dequantized into the scratch (its padding rows repeating the
		// last, and the rows the kernels prefetch past it in the scratch).
		var kb, vb *float32
		var ob *int64
		switch {
		case f.q8:
			f.prefetchTile(f.v8, blocks, k0, nk, t.g) // arrives while the keys dequantize
			f.widen(sc.k[:nkp*hd], nil, f.k8, blocks, k0, nk, t.g)
			f.widen(sc.v[:nkp*hd], nil, f.v8, blocks, k0, nk, t.g)
			kb, vb, ob = &sc.k[0], &sc.v[0], &sc.seq[0]
		case f.bf16:
			ob = &f.offsets(sc.offs, blocks, k0, nk, nkp+offsAhead, t.g)[0]
		default:
			kb, vb = &f.k[0], &f.v[0]
			ob = &f.offsets(sc.offs, blocks, k0, nk, nkp+offsAhead, t.g)[0]
		}
		S := sc.s[:mr*nkp]
		for r0 := 0; r0 < mr; r0 += rows {
			f.decQK(rows, &S[r0*nkp], nkp, &Q[r0*hd], kb, ob)
		}
		// The softmax step, row by row; rows past m, and rows that see no
		// key of the tile, get zero weights and keep their output.
		masked := k0+nk-1 > t.first
		for i := range mr {
			row := S[i*nkp : (i+1)*nkp]
			valid := nk
			if masked && i < m {
				valid = min(nk, t.first+i/group-k0+1)
			}
			if i >= m || valid <= 0 {
				clear(row)
				alpha[i] = 1
				continue
			}
			clear(row[valid:])
			row = row[:valid]
			old := mx[i]
			cur := max(old, kernels.Max(row))
			alpha[i] = 1
			if cur > old && old != negInf32 {
				alpha[i] = float32(math.Exp(float64(old - cur)))
			}
			mx[i] = cur
			l[i] = l[i]*alpha[i] + kernels.ExpSub(row, row, cur)
		}
		for r0 := 0; r0 < mr; r0 += rows {
			f.decPV(rows, &O[r0*hd], &S[r0*nkp], nkp, vb, ob, nk, &alpha[r0])
		}
	}
	f.finish(t, w.part, O, mx[:m], l[:m])
}

// decQK runs the decode QK kernel for rows (2 or 4) query rows at q into
// scores s (rows of nk), over nk keys (a multiple of 8 or 4) through the
// offsets table offs from k (F32 keys; a BF16 cache's are read from f.k16).
func (f *flashCall) decQK(rows int, s *float32, nk int, q, k *float32, offs *int64) {
	switch {
	case rows == 2 && f.bf16:
		flashDecQK512x2BF16(s, nk, q, f.hd, &f.k16[0], offs, nk)
	case rows == 2:
		flashDecQK512x2(s, nk, q, f.hd, k, offs, nk)
	case f.bf16:
		flashDecQK512BF16(s, nk, q, f.hd, &f.k16[0], offs, nk)
	default:
		flashDecQK512(s, nk, q, f.hd, k, offs, nk)
	}
}

// decPV runs the decode PV kernel for rows (2 or 4) output rows at o, with
// weights p (rows of ldp) over nk values through offs, rescaling the rows
// by alpha first; v is as k of decQK.
func (f *flashCall) decPV(rows int, o, p *float32, ldp int, v *float32, offs *int64, nk int, alpha *float32) {
	switch {
	case rows == 2 && f.bf16:
		flashDecPV512x2BF16(o, f.hd, p, ldp, &f.v16[0], offs, nk, alpha)
	case rows == 2:
		flashDecPV512x2(o, f.hd, p, ldp, v, offs, nk, alpha)
	case f.bf16:
		flashDecPV512BF16(o, f.hd, p, ldp, &f.v16[0], offs, nk, alpha)
	default:
		flashDecPV512(o, f.hd, p, ldp, v, offs, nk, alpha)
	}
}

// tile returns where the tile kernels read the keys and values of
// positions k0..k0+nk−1 of key/value head g: base pointers and a table of
// byte offsets of the rows from them. Rows nk..n−1 (register-tile padding)
// repeat the last one, and the table has offsAhead more entries for the
// kernels' prefetches past the tile. An F32 cache is read in place; a BF16
// one is widened into the scratch first (the tile kernels broadcast single
// cache elements, which BF16 would make two instructions each; prefill,
// which takes them, is bound by arithmetic, not by reading the cache).
func (f *flashCall) tile(sc *flashScratch, blocks []int32, k0, nk, n, g int) (kb, vb *float32, ob *int64) {
	if f.bf16 || f.q8 {
		f.widen(sc.k[:n*f.hd], f.k16, f.k8, blocks, k0, nk, g)
		f.widen(sc.v[:n*f.hd], f.v16, f.v8, blocks, k0, nk, g)
		return &sc.k[0], &sc.v[0], &sc.seq[0]
	}
	return &f.k[0], &f.v[0], &f.offsets(sc.offs, blocks, k0, nk, n+offsAhead, g)[0]
}

// widen writes positions k0..k0+nk−1 of head g of the BF16 cache c16 (or
// the Q8_0 cache c8) as F32 rows of hd to dst, then repeats the last row
// to fill dst.
func (f *flashCall) widen(dst []float32, c16 []uint16, c8 []byte, blocks []int32, k0, nk, g int) {
	hd := f.hd
	f.gatherRows(dst, nil, c16, c8, blocks, k0, nk, g)
	last := dst[(nk-1)*hd : nk*hd]
	for j := nk; j < len(dst)/hd; j++ {
		copy(dst[j*hd:(j+1)*hd], last)
	}
}

// offsets fills offs[:n] with the byte offsets in the cache (F32 or BF16)
// of the rows of head g of positions k0..k0+nk−1 (from the cache's start),
// then repeats the last one: the kernels read rows past nk (padding of
// their register tiles, and prefetches), and those must be rows of the
// cache.
func (f *flashCall) offsets(offs []int64, blocks []int32, k0, nk, n, g int) []int64 {
	offs = offs[:n]
	esz := int64(4)
	if f.bf16 {
		esz = 2
	}
	rowBytes := int64(f.hd) * esz
	for p := k0; p < k0+nk; {
		slot := int(blocks[p/f.bs])*f.bs + p%f.bs
		run := min(f.bs-p%f.bs, k0+nk-p)
		base := int64(f.geo.KVIndex(slot, g)) * esz
		for j := range run {
			offs[p-k0+j] = base + int64(j)*rowBytes
		}
		p += run
	}
	for j := nk; j < n; j++ {
		offs[j] = offs[nk-1]
	}
	return offs
}
