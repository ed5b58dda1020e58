package cpu

import (
	"math"
	"sort"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu/kernels"
)

// attnBlock is the most query rows of one head that DenseAttention and its
// backward process together. Their scores against all visible keys are the
// largest scratch the ops hold (two such buffers per thread in the
// backward), so long sequences get smaller blocks: at most attnScratch
// floats, and never fewer than 64 rows. Blocks of more than 64 rows take
// the kernels' blocked matrix product for q·kᵀ rather than the
// matrix-vector path; on a 4K-token sequence with head dim 64, 256 rows
// measured 1.25 times faster than 64 (BenchmarkDenseAttention). A variable
// so that tests can make blocks small.
var attnBlock = 256

// attnScratch bounds the floats of one score buffer (16 MiB).
const attnScratch = 1 << 22

// queryBlock returns the query rows per block for sequences of up to
// maxLen tokens.
func queryBlock(maxLen int) int {
	bq := attnBlock
	if maxLen > 0 && bq*maxLen > attnScratch {
		bq = max(min(bq, 64), attnScratch/maxLen/16*16)
	}
	return bq
}

// denseCheck validates a DenseAttention call and returns the sequence
// starts.
func denseCheck(op string, q, k, v, out compute.Tensor, a *compute.DenseAttention) (qs, ks, vs, ot *tensor, start []int32) {
	qs = must(q, compute.F32, op+" q")
	ks = must(k, compute.F32, op+" k")
	vs = must(v, compute.F32, op+" v")
	ot = must(out, compute.F32, op+" out")
	start = must(a.SeqStart, compute.I32, op+" SeqStart").i32
	hd := a.HeadDim
	rows := qs.shape[0]
	switch {
	case a.Heads <= 0 || a.KVHeads <= 0 || hd <= 0 || a.Heads%a.KVHeads != 0:
		shapePanic(op, "heads %d, kv heads %d, head dim %d", a.Heads, a.KVHeads, hd)
	case compute.Cols(qs) != a.Heads*hd || compute.Cols(ot) != a.Heads*hd || ot.shape[0] != rows:
		shapePanic(op, "q %s, out %s for %d heads of %d", compute.ShapeString(qs.shape), compute.ShapeString(ot.shape), a.Heads, hd)
	case compute.Cols(ks) != a.KVHeads*hd || compute.Cols(vs) != a.KVHeads*hd || ks.shape[0] != rows || vs.shape[0] != rows:
		shapePanic(op, "k %s, v %s for %d rows of %d kv heads of %d", compute.ShapeString(ks.shape), compute.ShapeString(vs.shape), rows, a.KVHeads, hd)
	case len(start) != a.Seqs+1 || (a.Seqs > 0 && (start[0] != 0 || int(start[a.Seqs]) != rows)):
		shapePanic(op, "%d sequence starts for %d sequences over %d rows", len(start), a.Seqs, rows)
	case a.Window < 0:
		shapePanic(op, "window %d", a.Window)
	case a.Softcap < 0 || math.IsNaN(float64(a.Softcap)) || math.IsInf(float64(a.Softcap), 0):
		shapePanic(op, "softcap %g", a.Softcap)
	}
	for s := range a.Seqs {
		if start[s+1] < start[s] {
			shapePanic(op, "sequence %d starts at %d and ends at %d", s, start[s], start[s+1])
		}
	}
	return qs, ks, vs, ot, start
}

// windowLo is the first key position the query at position p sees under
// a sliding window of w (0: none).
func windowLo(p, w int) int {
	if w <= 0 {
		return 0
	}
	return max(0, p-w+1)
}

// attnItem is a block of query rows [i0, i1) (positions in sequence s) of
// query head h.
type attnItem struct{ s, h, i0, i1 int }

// DenseAttention computes causal attention of each sequence over its own
// keys, attnBlock query rows of one head at a time: scores S = q·kᵀ·scale
// against the keys up to the block's last position (kernels.Sgemm), a
// masked softmax per row, then out = P·v (kernels.Sgemm). The blocks, the
// costliest first, are claimed by threads one at a time.
func (b *Backend) DenseAttention(dst, lse, q, k, v compute.Tensor, a *compute.DenseAttention) {
	qs, ks, vs, out, start := denseCheck("DenseAttention", q, k, v, dst, a)
	ls := must(lse, compute.F32, "DenseAttention lse").f32
	rows := qs.shape[0]
	if len(ls) != rows*a.Heads {
		shapePanic("DenseAttention", "lse of %d for %d rows of %d heads", len(ls), rows, a.Heads)
	}
	hd, H := a.HeadDim, a.Heads
	qdim, kvdim, group := H*hd, a.KVHeads*hd, a.Heads/a.KVHeads
	maxLen := 0
	for s := range a.Seqs {
		maxLen = max(maxLen, int(start[s+1]-start[s]))
	}
	bq := queryBlock(maxLen)
	var items []attnItem
	for s := range a.Seqs {
		n := int(start[s+1] - start[s])
		for i0 := 0; i0 < n; i0 += bq {
			for h := range H {
				items = append(items, attnItem{s, h, i0, min(i0+bq, n)})
			}
		}
	}
	sort.SliceStable(items, func(i, j int) bool { return items[i].i1 > items[j].i1 })
	b.forDynamic(len(items), func() any { return b.getScratch(bq * maxLen) }, func(it int, st any) {
		w := items[it]
		S := *st.(*[]float32)
		r0 := int(start[w.s])
		m, n := w.i1-w.i0, w.i1 // query rows, visible keys
		g := w.h / group
		qOff := (r0+w.i0)*qdim + w.h*hd
		kvOff := r0*kvdim + g*hd
		b.pool.Sgemm(false, true, m, n, hd, a.Scale, qs.f32[qOff:], qdim, ks.f32[kvOff:], kvdim, 0, S, n)
		for i := range m {
			row := S[i*n : (i+1)*n]
			lo, valid := windowLo(w.i0+i, a.Window), w.i0+i+1
			if a.Softcap > 0 {
				softcapRow(row[lo:valid], a.Softcap)
			}
			mx := kernels.Max(row[lo:valid])
			sum := kernels.ExpSub(row[lo:valid], row[lo:valid], mx)
			ls[(r0+w.i0+i)*H+w.h] = mx + float32(math.Log(float64(sum)))
			kernels.Scale(1/sum, row[lo:valid])
			clear(row[:lo])
			clear(row[valid:])
		}
		b.pool.Sgemm(false, false, m, hd, n, 1, S, n, vs.f32[kvOff:], kvdim, 0, out.f32[qOff:], qdim)
	}, func(st any) { b.putScratch(st.(*[]float32)) })
}

// DenseAttentionBackward recomputes the softmax weights of each block of
// query rows from q, k and the saved lse (so no weights are kept between
// the passes) and, with dO = ∂L/∂out, P the weights and D_i = dO_i·out_i:
//
//	dv += Pᵀ·dO,  dS = P∘(dO·vᵀ − D),  dq = scale·dS·k,  dk += scale·dSᵀ·q
//
// Threads take one (sequence, key/value head) at a time and walk its query
// heads and blocks in order, so dk and dv are summed in a fixed order
// without sharing.
func (b *Backend) DenseAttentionBackward(dq, dk, dv, dOut, out, lse, q, k, v compute.Tensor, a *compute.DenseAttention) {
	qs, ks, vs, ot, start := denseCheck("DenseAttentionBackward", q, k, v, out, a)
	ls := must(lse, compute.F32, "DenseAttentionBackward lse").f32
	dqs := must(dq, compute.F32, "DenseAttentionBackward dq").f32
	dks := must(dk, compute.F32, "DenseAttentionBackward dk").f32
	dvs := must(dv, compute.F32, "DenseAttentionBackward dv").f32
	dos := must(dOut, compute.F32, "DenseAttentionBackward dOut").f32
	rows := qs.shape[0]
	if len(ls) != rows*a.Heads || len(dqs) != len(qs.f32) || len(dks) != len(ks.f32) || len(dvs) != len(vs.f32) || len(dos) != len(ot.f32) {
		shapePanic("DenseAttentionBackward", "lse of %d, dq %d, dk %d, dv %d, dOut %d for q %s and k %s", len(ls), len(dqs), len(dks), len(dvs), len(dos), compute.ShapeString(qs.shape), compute.ShapeString(ks.shape))
	}
	hd, H, KV := a.HeadDim, a.Heads, a.KVHeads
	qdim, kvdim, group := H*hd, KV*hd, H/KV
	maxLen := 0
	for s := range a.Seqs {
		maxLen = max(maxLen, int(start[s+1]-start[s]))
	}
	bq := queryBlock(maxLen)
	type bufs struct{ p, dp *[]float32 }
	b.forDynamic(a.Seqs*KV, func() any {
		return bufs{b.getScratch(bq * maxLen), b.getScratch(bq * maxLen)}
	}, func(it int, st any) {
		s, g := it/KV, it%KV
		P, dP := *st.(bufs).p, *st.(bufs).dp
		r0, L := int(start[s]), int(start[s+1]-start[s])
		kvOff := r0*kvdim + g*hd
		for r := r0; r < r0+L; r++ {
			clear(dks[r*kvdim+g*hd : r*kvdim+(g+1)*hd])
			clear(dvs[r*kvdim+g*hd : r*kvdim+(g+1)*hd])
		}
		for h := g * group; h < (g+1)*group; h++ {
			for i0 := 0; i0 < L; i0 += bq {
				i1 := min(i0+bq, L)
				m, n := i1-i0, i1
				qOff := (r0+i0)*qdim + h*hd
				b.pool.Sgemm(false, true, m, n, hd, a.Scale, qs.f32[qOff:], qdim, ks.f32[kvOff:], kvdim, 0, P, n)
				b.pool.Sgemm(false, true, m, n, hd, 1, dos[qOff:], qdim, vs.f32[kvOff:], kvdim, 0, dP, n)
				for i := range m {
					lo, valid := windowLo(i0+i, a.Window), i0+i+1
					pr, dr := P[i*n:(i+1)*n], dP[i*n:(i+1)*n]
					o := qOff + i*qdim
					D := kernels.Dot(dos[o:o+hd], ot.f32[o:o+hd])
					if c := float64(a.Softcap); c > 0 {
						// With t = tanh(s/c) the capped score is c·t, and
						// d(c·t)/ds = 1 − t²: the weights from the capped
						// scores, dS from dS' times it.
						lse := float64(ls[(r0+i0+i)*H+h])
						for j := lo; j < valid; j++ {
							t := math.Tanh(float64(pr[j]) / c)
							p := math.Exp(c*t - lse)
							pr[j] = float32(p)
							dr[j] = float32(p * (float64(dr[j]) - float64(D)) * (1 - t*t))
						}
					} else {
						kernels.ExpSub(pr[lo:valid], pr[lo:valid], ls[(r0+i0+i)*H+h])
						for j := lo; j < valid; j++ {
							dr[j] = pr[j] * (dr[j] - D)
						}
					}
					clear(pr[:lo])
					clear(pr[valid:])
					clear(dr[:lo])
					clear(dr[valid:])
				}
				b.pool.Sgemm(true, false, n, hd, m, 1, P, n, dos[qOff:], qdim, 1, dvs[kvOff:], kvdim)
				b.pool.Sgemm(false, false, m, hd, n, a.Scale, dP, n, ks.f32[kvOff:], kvdim, 0, dqs[qOff:], qdim)
				b.pool.Sgemm(true, false, n, hd, m, a.Scale, dP, n, qs.f32[qOff:], qdim, 1, dks[kvOff:], kvdim)
			}
		}
	}, func(st any) {
		b.putScratch(st.(bufs).p)
		b.putScratch(st.(bufs).dp)
	})
}
