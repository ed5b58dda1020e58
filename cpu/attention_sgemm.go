package cpu

import (
	"math"

	"github.com/clawrl/clawrl/compute"

	"github.com/clawrl/clawrl/cpu/kernels"
)

// runSgemm computes one piece of work with kernels.Sgemm, on any CPU: the
// online softmax of attention.go in row layout, with the queries of the
// task pre-multiplied by the scale. Per key tile, S = Q·Kᵀ (Sgemm, m × nk);
// then, row by row, the rows of O whose maximum grew are rescaled and S
// becomes P (kernels.Max, kernels.ExpSub); then O += P·V (Sgemm). Sgemm takes
// its blocked path for prefill tiles (m of a few hundred) and its
// matrix-vector path for decode (m = group), which streams each key row
// once against all the heads of the group. Keys and values are read in
// place when the tile's positions lie in one cache block, and gathered
// into contiguous rows otherwise (rows).
func (f *flashCall) runSgemm(w flashWork, sc *flashScratch) {
	t := &f.tasks[w.task]
	hd, group := f.hd, f.group
	m := t.tokens * group
	gw := group * hd // one token's queries of the group
	Q, O := sc.q[:m*hd], sc.o[:m*hd]
	mx, l := sc.mx[:m], sc.l[:m]
	for tok := range t.tokens {
		src := f.q[(t.r0+tok)*f.qdim+t.g*gw:][:gw]
		dst := Q[tok*gw : (tok+1)*gw]
		f.loadQ(dst, src, sc)
	}
	clear(O)
	clear(l)
	for i := range mx {
		mx[i] = negInf32
	}
	blocks := f.table[t.s*f.maxBlocks : (t.s+1)*f.maxBlocks]
	for k0 := w.k0; k0 < w.k1; k0 += f.tl.keys {
		nk := min(f.tl.keys, w.k1-k0)
		S := sc.s[:m*nk]
		K, ldk := f.rows(sc.k, f.k, f.k16, f.k8, blocks, k0, nk, t.g)
		f.pool.Sgemm(false, true, m, nk, hd, 1, Q, hd, K, ldk, 0, S, nk)
		masked := k0+nk-1 > t.first // the last key is past the first token
		for i := range m {
			row := S[i*nk : (i+1)*nk]
			valid := nk
			if masked {
				valid = min(nk, t.first+i/group-k0+1)
			}
			lo := 0 // a sliding window hides the keys before lo
			if f.window > 0 {
				lo = max(0, t.first+i/group-f.window+1-k0)
			}
			if valid <= lo {
				clear(row)
				continue
			}
			clear(row[:lo])
			clear(row[valid:])
			row = row[lo:valid]
			if f.softcap > 0 {
				softcapRow(row, f.softcap)
			}
			old := mx[i]
			cur := max(old, kernels.Max(row))
			if cur > old && old != negInf32 {
				alpha := float32(math.Exp(float64(old - cur)))
				l[i] *= alpha
				kernels.Scale(alpha, O[i*hd:(i+1)*hd])
			}
			mx[i] = cur
			l[i] += kernels.ExpSub(row, row, cur)
		}
		V, ldv := f.rows(sc.v, f.v, f.v16, f.v8, blocks, k0, nk, t.g)
		f.pool.Sgemm(false, false, m, hd, nk, 1, S, nk, V, ldv, 1, O, hd)
	}
	f.finish(t, w.part, O, mx, l)
}

// softcapRow replaces each score s of row with cap·tanh(s/cap) (Gemma 2's
// attn_logit_softcapping), in float64.
func softcapRow(row []float32, cap float32) {
	c := float64(cap)
	for j, s := range row {
		row[j] = float32(c * math.Tanh(float64(s)/c))
	}
}

// rows returns positions [k0, k0+nk) of key/value head g of cache c (keys
// or values; c16 when the cache is BF16, c8 when it is Q8_0) as a matrix
// of nk rows of hd with row stride ld: in place when the positions lie in
// one block of an F32 cache, else gathered (and widened or dequantized)
// into buf.
func (f *flashCall) rows(buf, c []float32, c16 []uint16, c8 []byte, blocks []int32, k0, nk, g int) (x []float32, ld int) {
	bs, hd := f.bs, f.hd
	if c16 == nil && c8 == nil && k0/bs == (k0+nk-1)/bs {
		i := f.geo.KVIndex(int(blocks[k0/bs])*bs+k0%bs, g)
		return c[i : i+nk*hd], hd
	}
	f.gatherRows(buf[:nk*hd], c, c16, c8, blocks, k0, nk, g)
	return buf[:nk*hd], hd
}

// gatherRows copies positions [k0, k0+nk) of head g of cache c (or of the
// BF16 cache c16, widened, or of the Q8_0 cache c8, dequantized) to
// contiguous rows of hd at dst: one copy per cache block, in which the
// head's rows are contiguous.
func (f *flashCall) gatherRows(dst, c []float32, c16 []uint16, c8 []byte, blocks []int32, k0, nk, g int) {
	bs, hd := f.bs, f.hd
	if c8 != nil {
		// The runs of a Q8_0 cache are dequantized in Go's loop below,
		// which the kernels' prefetches (offsets) do not cover: prefetch
		// the run q8Ahead cache blocks ahead (and, first, the first two).
		f.prefetchRun(c8, blocks, k0, k0+nk, g)
		f.prefetchRun(c8, blocks, (k0/bs+1)*bs, k0+nk, g)
	}
	for p := k0; p < k0+nk; {
		slot := int(blocks[p/bs])*bs + p%bs
		run := min(bs-p%bs, k0+nk-p)
		i, d := f.geo.KVIndex(slot, g), dst[(p-k0)*hd:(p-k0+run)*hd]
		switch {
		case c8 != nil:
			f.prefetchRun(c8, blocks, (p/bs+q8Ahead)*bs, k0+nk, g)
			kernels.DequantQ8_0(d, c8[compute.Q8_0.Bytes(i):compute.Q8_0.Bytes(i+run*hd)])
		case c16 != nil:
			kernels.BF16ToF32(d, c16[i:i+run*hd])
		default:
			copy(d, c[i:i+run*hd])
		}
		p += run
	}
}

// prefetchRun prefetches the bytes of head g of the Q8_0 cache c8 for
// positions p up to the end of p's cache block or end, if p < end.
func (f *flashCall) prefetchRun(c8 []byte, blocks []int32, p, end, g int) {
	if p >= end {
		return
	}
	bs := f.bs
	run := min(bs-p%bs, end-p)
	i := f.geo.KVIndex(int(blocks[p/bs])*bs+p%bs, g)
	kernels.Prefetch(c8[compute.Q8_0.Bytes(i):compute.Q8_0.Bytes(i+run*f.hd)])
}

// q8Ahead is how many cache blocks ahead gatherRows prefetches a Q8_0
// cache's rows. Without it, decode at 16K tokens (Qwen3-0.6B's heads,
// BenchmarkPagedAttention) ran 1.9× slower on a Q8_0 cache than on a BF16
// one, waiting on each scattered block; with 2, level with BF16.
const q8Ahead = 2

// prefetchTile prefetches positions [k0, k0+nk) of head g of the Q8_0
// cache c8, run by run: runDecode asks for a tile's values before it
// dequantizes its keys. With a batch of 32 short contexts (40-133
// tokens, Qwen3-0.6B's heads; the first runs of each task are not
// covered by gatherRows' prefetch) attention took 0.64-0.86 ms with it,
// 0.58-1.3 ms without (BF16 cache: 0.40-0.58 ms; a noisy host).
func (f *flashCall) prefetchTile(c8 []byte, blocks []int32, k0, nk, g int) {
	for p := k0; p < k0+nk; p = (p/f.bs + 1) * f.bs {
		f.prefetchRun(c8, blocks, p, k0+nk, g)
	}
}
