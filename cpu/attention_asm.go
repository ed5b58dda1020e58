package cpu

import (
	"math"

	"github.com/clawrl/clawrl/cpu/kernels"
)

// The AVX-512 paths of paged attention (kernels in attention_amd64.s).
//
// Both read keys and values where they lie in the cache, through a table of
// the byte offsets of a key tile's rows (offsets), whatever the order of
// the cache blocks. When rows are a multiple of 1 KiB apart (f.gather), the
// tile is first copied to contiguous rows (flashGather512), because such
// strides put too many rows in one cache set.
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
	gw := group * hd
	Qt, Ot := sc.q[:hd*mp], sc.o[:hd*mp]
	mx, l, alpha := sc.mx[:mp], sc.l[:mp], sc.alpha[:mp]

	// Qᵀ[p, i] = scale·log2e·q[i, p]; the padding columns are zero.
	sl := f.scale * log2e
	for tok := range t.tokens {
		src := f.q[(t.r0+tok)*f.qdim+t.g*gw:][:gw]
		for j := range group {
			i := tok*group + j
			for p, x := range src[j*hd : (j+1)*hd] {
				Qt[p*mp+i] = x * sl
			}
		}
	}
	if m < mp {
		for p := range hd {
			clear(Qt[p*mp+m : (p+1)*mp])
		}
	}
	clear(Ot)
	clear(l)
	for i := range mx {
		mx[i] = noKey
	}

	blocks := f.table[t.s*f.maxBlocks : (t.s+1)*f.maxBlocks]
	kBase, vBase := &f.k[t.g*hd], &f.v[t.g*hd]
	for k0 := w.k0; k0 < w.k1; k0 += f.tl.keys {
		nk := min(f.tl.keys, w.k1-k0)
		nk8 := (nk + 7) &^ 7
		offs := f.offsets(sc.offs, blocks, k0, nk, nk8+8)
		kb, vb, ob := kBase, vBase, &offs[0]
		if f.gather {
			flashGather512(&sc.k[0], kBase, &offs[0], nk8, hd)
			flashGather512(&sc.v[0], vBase, &offs[0], nk8, hd)
			kb, vb, ob = &sc.k[0], &sc.v[0], &sc.seq[0]
		}
		// The column maxima of the tile come out of flashQK512; they serve
		// unless the causal mask hides part of the tile, whose scores
		// flashSoftmax512 then masks with lim: key k0+j counts for the
		// rows of the tokens at or after its position, rows ≥
		// (k0+j − first)·group.
		cmax := sc.cmax[:mp]
		for i := range cmax {
			cmax[i] = negInf32
		}
		S := sc.s[:nk8*mp]
		flashQK512(&S[0], &Qt[0], mp, kb, vb, ob, nk8, hd, &cmax[0])
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

// runDecode computes one piece of work of a task of at most decRows query
// rows with the AVX-512 decode kernels.
func (f *flashCall) runDecode(w flashWork, sc *flashScratch) {
	t := &f.tasks[w.task]
	hd, group := f.hd, f.group
	m := t.tokens * group
	m4 := (m + 3) &^ 3
	gw := group * hd
	Q, O := sc.q[:m4*hd], sc.o[:m4*hd]
	mx, l, alpha := sc.mx[:m4], sc.l[:m4], sc.alpha[:m4]
	for tok := range t.tokens {
		dst := Q[tok*gw : (tok+1)*gw]
		copy(dst, f.q[(t.r0+tok)*f.qdim+t.g*gw:][:gw])
		kernels.Scale(f.scale, dst)
	}
	clear(Q[m*hd:])
	clear(O)
	clear(l)
	for i := range mx {
		mx[i] = negInf32
	}

	blocks := f.table[t.s*f.maxBlocks : (t.s+1)*f.maxBlocks]
	kBase, vBase := &f.k[t.g*hd], &f.v[t.g*hd]
	for k0 := w.k0; k0 < w.k1; k0 += f.tl.keys {
		nk := min(f.tl.keys, w.k1-k0)
		nk4 := (nk + 3) &^ 3
		offs := f.offsets(sc.offs, blocks, k0, nk, nk4+8)
		kb, vb, ob := kBase, vBase, &offs[0]
		if f.gather {
			flashGather512(&sc.k[0], kBase, &offs[0], nk4, hd)
			flashGather512(&sc.v[0], vBase, &offs[0], nk, hd)
			kb, vb, ob = &sc.k[0], &sc.v[0], &sc.seq[0]
		}
		S := sc.s[:m4*nk4]
		for r0 := 0; r0 < m4; r0 += 4 {
			flashDecQK512(&S[r0*nk4], nk4, &Q[r0*hd], hd, kb, ob, nk4)
		}
		// The softmax step, row by row; rows past m, and rows that see no
		// key of the tile, get zero weights and keep their output.
		masked := k0+nk-1 > t.first
		for i := range m4 {
			row := S[i*nk4 : (i+1)*nk4]
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
		for r0 := 0; r0 < m4; r0 += 4 {
			flashDecPV512(&O[r0*hd], hd, &S[r0*nk4], nk4, vb, ob, nk, &alpha[r0])
		}
	}
	f.finish(t, w.part, O, mx[:m], l[:m])
}

// offsets fills offs[:n] with the byte offsets in the cache of the rows of
// positions k0..k0+nk−1 (from the start of a row), then repeats the last
// one: the kernels read rows past nk (padding of their register tiles, and
// prefetches), and those must be rows of the cache.
func (f *flashCall) offsets(offs []int64, blocks []int32, k0, nk, n int) []int64 {
	offs = offs[:n]
	rowBytes := int64(f.kvdim) * 4
	for p := k0; p < k0+nk; {
		slot := int(blocks[p/f.bs])*f.bs + p%f.bs
		run := min(f.bs-p%f.bs, k0+nk-p)
		for j := range run {
			offs[p-k0+j] = int64(slot+j) * rowBytes
		}
		p += run
	}
	for j := nk; j < n; j++ {
		offs[j] = offs[nk-1]
	}
	return offs
}
