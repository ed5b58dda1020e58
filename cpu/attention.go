package cpu

import (
	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu/kernels"
)

// Attention runs causal grouped-query attention over the paged cache. The
// work is split over (sequence, query head) pairs; each pair walks its
// sequence's new tokens, and for each one dots the query against the cached
// keys up to its position (kernels.Dot), turns the scores into softmax
// weights (kernels.Max, kernels.ExpSub) and sums the weighted values
// (kernels.Axpy).
func (b *Backend) Attention(dst, q, kCache, vCache compute.Tensor, a *compute.Attention) {
	out := must(dst, compute.F32, "Attention dst")
	qs := must(q, compute.F32, "Attention q")
	kc := must(kCache, compute.F32, "Attention kCache").f32
	vc := must(vCache, compute.F32, "Attention vCache").f32
	qstart := must(a.QueryStart, compute.I32, "Attention QueryStart").i32
	ctxLen := must(a.ContextLen, compute.I32, "Attention ContextLen").i32
	table := must(a.BlockTable, compute.I32, "Attention BlockTable").i32

	hd, bs := a.HeadDim, a.BlockSize
	qdim, kvdim := a.Heads*hd, a.KVHeads*hd
	switch {
	case a.Heads <= 0 || a.KVHeads <= 0 || hd <= 0 || bs <= 0 || a.Heads%a.KVHeads != 0:
		shapePanic("Attention", "heads %d, kv heads %d, head dim %d, block size %d", a.Heads, a.KVHeads, hd, bs)
	case compute.Cols(qs) != qdim || compute.Cols(out) != qdim || out.shape[0] != qs.shape[0]:
		shapePanic("Attention", "q %s, dst %s for %d heads of %d", compute.ShapeString(qs.shape), compute.ShapeString(out.shape), a.Heads, hd)
	case len(kc)%(kvdim*bs) != 0 || len(vc) != len(kc):
		shapePanic("Attention", "cache of %d and %d values for rows of %d in blocks of %d", len(kc), len(vc), kvdim, bs)
	case len(qstart) != a.Seqs+1 || len(ctxLen) != a.Seqs || len(table) != a.Seqs*a.MaxBlocks:
		shapePanic("Attention", "metadata lengths %d, %d, %d for %d sequences of %d blocks", len(qstart), len(ctxLen), len(table), a.Seqs, a.MaxBlocks)
	case a.Seqs > 0 && (qstart[0] != 0 || int(qstart[a.Seqs]) != qs.shape[0]):
		shapePanic("Attention", "query rows %d..%d for q of %d rows", qstart[0], qstart[a.Seqs], qs.shape[0])
	}
	nBlocks := len(kc) / (kvdim * bs)
	for s := 0; s < a.Seqs; s++ {
		n, c := int(qstart[s+1]-qstart[s]), int(ctxLen[s])
		if n < 0 || c < n || (c+bs-1)/bs > a.MaxBlocks {
			shapePanic("Attention", "sequence %d: %d new tokens, context %d, %d blocks of %d", s, n, c, a.MaxBlocks, bs)
		}
		for _, blk := range table[s*a.MaxBlocks : s*a.MaxBlocks+(c+bs-1)/bs] {
			if blk < 0 || int(blk) >= nBlocks {
				shapePanic("Attention", "sequence %d: block %d outside cache of %d", s, blk, nBlocks)
			}
		}
	}

	group := a.Heads / a.KVHeads
	scale := a.Scale
	kernels.ParallelFor(a.Seqs*a.Heads, 1, func(lo, hi int) {
		var scores *[]float32
		for it := lo; it < hi; it++ {
			s, h := it/a.Heads, it%a.Heads
			r0, r1, ctx := int(qstart[s]), int(qstart[s+1]), int(ctxLen[s])
			if r0 == r1 {
				continue
			}
			if scores == nil || cap(*scores) < ctx {
				if scores != nil {
					b.putScratch(scores)
				}
				scores = b.getScratch(ctx)
			}
			blocks := table[s*a.MaxBlocks : (s+1)*a.MaxBlocks]
			kvOff := (h / group) * hd
			for r := r0; r < r1; r++ {
				n := ctx - (r1 - r) + 1 // keys visible to this query
				qv := qs.f32[r*qdim+h*hd : r*qdim+(h+1)*hd]
				sc := (*scores)[:n]
				for t := 0; t < n; {
					base := int(blocks[t/bs]) * bs
					for j := 0; j < bs && t < n; j, t = j+1, t+1 {
						o := (base+j)*kvdim + kvOff
						sc[t] = kernels.Dot(qv, kc[o:o+hd]) * scale
					}
				}
				m := kernels.Max(sc)
				sum := kernels.ExpSub(sc, sc, m)
				ov := out.f32[r*qdim+h*hd : r*qdim+(h+1)*hd]
				clear(ov)
				for t := 0; t < n; {
					base := int(blocks[t/bs]) * bs
					for j := 0; j < bs && t < n; j, t = j+1, t+1 {
						o := (base+j)*kvdim + kvOff
						kernels.Axpy(sc[t], vc[o:o+hd], ov)
					}
				}
				kernels.Scale(1/sum, ov)
			}
		}
		if scores != nil {
			b.putScratch(scores)
		}
	})
}
