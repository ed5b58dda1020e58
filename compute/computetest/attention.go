package computetest

import (
	"fmt"
	"math"

	"github.com/clawrl/clawrl/compute"
)

// pagedSeq is one sequence of a paged attention batch: ctx tokens in the
// cache after the step, the last nNew of them new (query rows).
type pagedSeq struct{ ctx, nNew int }

// pagedCase is a batch of paged attention.
type pagedCase struct {
	name                          string
	heads, kvHeads, hd, blockSize int
	seqs                          []pagedSeq
	window                        int     // sliding window (0: none); for compute.SlidingWindow backends
	softcap                       float32 // soft-capped scores (0: none); for compute.Softcap backends
}

var pagedCases = []pagedCase{
	{"mha-bs1", 2, 2, 8, 1, []pagedSeq{{5, 5}, {3, 1}}, 0, 0},
	{"gqa-bs4", 4, 2, 8, 4, []pagedSeq{{9, 9}, {6, 1}, {13, 3}}, 0, 0},
	{"mqa-bs16", 4, 1, 16, 16, []pagedSeq{{20, 1}, {40, 7}, {1, 1}, {17, 17}}, 0, 0},
	{"decode-batch-d32", 6, 2, 32, 16, []pagedSeq{{33, 1}, {17, 1}, {2, 1}, {64, 1}}, 0, 0},
	{"prefill-chunk-d64", 4, 2, 64, 16, []pagedSeq{{70, 70}, {50, 13}}, 0, 0},
	{"d128-bs4", 4, 1, 128, 4, []pagedSeq{{30, 5}, {9, 1}}, 0, 0},
	{"empty-sequence", 4, 2, 16, 4, []pagedSeq{{20, 0}, {12, 3}}, 0, 0},
	{"long-decode-d64", 2, 1, 64, 16, []pagedSeq{{300, 1}}, 0, 0},
	{"short-chunks-d64", 4, 2, 64, 16, []pagedSeq{{25, 3}, {40, 4}, {17, 2}}, 0, 0}, // a few tokens after context (speculative decoding)
	// Sliding windows: shorter than the context, within and across blocks,
	// decode and prefill, a window of one.
	{"window-decode-d64", 4, 2, 64, 16, []pagedSeq{{300, 1}, {33, 1}, {5, 1}}, 20, 0},
	{"window-prefill-bs4", 4, 2, 16, 4, []pagedSeq{{40, 40}, {30, 7}, {9, 9}}, 6, 0},
	{"window-one-mqa", 4, 1, 8, 16, []pagedSeq{{17, 17}, {20, 1}}, 1, 0},
	{"window-long-d32", 2, 1, 32, 16, []pagedSeq{{600, 200}}, 100, 0},
	// Soft-capped scores (Gemma 2), with queries large enough that the cap
	// bends them: decode and prefill, alone and under a window.
	{"softcap-prefill-d64", 4, 2, 64, 16, []pagedSeq{{70, 70}, {50, 13}, {33, 1}}, 0, 3},
	{"softcap-window-bs4", 4, 2, 16, 4, []pagedSeq{{40, 40}, {30, 1}}, 6, 2},
}

// Values of the cache slots that no sequence owns (spare blocks, and the
// slots of a sequence's last block past its context). Attention must not
// read them: keys this large would dominate every softmax they entered,
// and values this large every output.
const (
	junkKey   = 30
	junkValue = 1e4
)

// checkAttention stores keys and values with StoreKV into a paged cache
// (F32 and BF16, and Q8_0 on a compute.QuantKVBackend for the head dims
// that are a multiple of compute.QK), in two steps as an engine does (the
// earlier context, then the new tokens), and runs Attention over it:
// several sequences of different context lengths whose blocks are
// scattered over the cache, decode rows and prefill chunks after earlier
// context, grouped-query heads and block sizes 1, 4 and 16.
//
// A Q8_0 cache must hold, bit for bit, the blocks compute.Quantize writes
// (ggml's reference quantizer) for each head's values, and those blocks
// must lie within quantQ8Tol·max|x|/127 of the values of their block
// (below). Attention over it is then held to the float32 tolerance of
// the other caches, against the float64 attention over the dequantized
// keys and values: dequantizing (d·q) is exact in float32, so the only
// error a backend may add is that of its float32 sums, as for BF16.
func checkAttention(h *harness) {
	_, q8 := h.b.(compute.QuantKVBackend)
	sw, _ := h.b.(compute.SlidingWindow)
	_, capped := h.b.(compute.Softcap)
	for _, c := range pagedCases {
		if c.window > 0 && (sw == nil || !sw.SlidingWindow()) || c.softcap > 0 && !capped {
			continue
		}
		for _, dt := range []compute.DType{compute.F32, compute.BF16, compute.Q8_0} {
			if dt == compute.Q8_0 && (!q8 || c.hd%compute.QK != 0) {
				continue
			}
			h.run(fmt.Sprintf("%s/%v", c.name, dt), func(h *harness) { h.pagedAttention(c, dt) })
		}
	}
}

// quantQ8Tol bounds the error of a value stored in a Q8_0 block, in units
// of d = max|x|/127 of its block: q = round(x/d) is within d/2 of x/d,
// and the half scale d' = fp16(d) the block keeps is within d·2⁻¹¹ of d,
// which moves |q| ≤ 127 by at most 127·2⁻¹¹ ≈ 0.062 d more (plus float32
// roundings of order 2⁻²⁴·127 d): 0.5 + 0.062 < 0.57.
const quantQ8Tol = 0.57

// roundQ8 returns v (a multiple of compute.QK values) quantized to Q8_0
// blocks by compute.Quantize and dequantized, after checking each value
// against its block's bound (quantQ8Tol).
func (h *harness) roundQ8(what string, v []float32) []float32 {
	h.t.Helper()
	blocks := make([]byte, compute.Q8_0.Bytes(len(v)))
	out := make([]float32, len(v))
	if err := compute.Quantize(compute.Q8_0, blocks, v); err != nil {
		h.t.Fatalf("%s: %v", what, err)
	}
	if err := compute.Dequantize(compute.Q8_0, out, blocks); err != nil {
		h.t.Fatalf("%s: %v", what, err)
	}
	for b := 0; b < len(v); b += compute.QK {
		amax := 0.0
		for _, x := range v[b : b+compute.QK] {
			amax = math.Max(amax, math.Abs(float64(x)))
		}
		for i := b; i < b+compute.QK; i++ {
			if e := math.Abs(float64(out[i]) - float64(v[i])); e > quantQ8Tol*amax/127 {
				h.t.Fatalf("%s: Q8_0 value %d is %v for %v: error %.3g beyond %.2f·max|x|/127 = %.3g", what, i, out[i], v[i], e, quantQ8Tol, quantQ8Tol*amax/127)
			}
		}
	}
	return out
}

// cacheTensor allocates a paged cache tensor of dtype dt: a Q8_0 one
// through compute.QuantKVBackend.
func (h *harness) cacheTensor(dt compute.DType, slots, width int) compute.Tensor {
	h.t.Helper()
	if dt != compute.Q8_0 {
		return h.tensor(dt, slots, width)
	}
	x, err := h.b.(compute.QuantKVBackend).NewKVCacheTensor(dt, slots, width)
	if err != nil {
		h.t.Fatalf("NewKVCacheTensor(%v, %d, %d): %v", dt, slots, width, err)
	}
	return x
}

func (h *harness) pagedAttention(c pagedCase, dt compute.DType) {
	bs, hd := c.blockSize, c.hd
	qdim, kvdim := c.heads*hd, c.kvHeads*hd
	desc := fmt.Sprintf("Attention %s: %d heads, %d kv heads of %d, block size %d, %v cache, (context, new) %v", c.name, c.heads, c.kvHeads, hd, bs, dt, c.seqs)

	// Blocks: each sequence's in a random order over a cache with spare
	// blocks; table entries past a sequence's blocks point anywhere.
	maxBlocks, total := 0, 0
	for _, s := range c.seqs {
		nb := (s.ctx + bs - 1) / bs
		maxBlocks, total = max(maxBlocks, nb), total+nb
	}
	maxBlocks = max(maxBlocks, 1)
	nBlocks := total + total/3 + 2
	order := h.r.Perm(nBlocks)
	table := make([]int32, len(c.seqs)*maxBlocks)
	next := 0
	for s, sq := range c.seqs {
		for i := range maxBlocks {
			if i < (sq.ctx+bs-1)/bs {
				table[s*maxBlocks+i] = int32(order[next])
				next++
			} else {
				table[s*maxBlocks+i] = int32(h.r.IntN(nBlocks))
			}
		}
	}
	geo := &compute.Attention{Heads: c.heads, KVHeads: c.kvHeads, HeadDim: hd, BlockSize: bs}
	slotOf := func(s, p int) int { return int(table[s*maxBlocks+p/bs])*bs + p%bs }

	// The cache starts as junk in every slot, written by StoreKV (in a
	// shuffled order of slots).
	nSlots := nBlocks * bs
	kc, vc := h.cacheTensor(dt, nSlots, kvdim), h.cacheTensor(dt, nSlots, kvdim)
	wantK, wantV := make([]float32, nSlots*kvdim), make([]float32, nSlots*kvdim) // cache contents, in KVIndex layout
	store := func(what string, slots []int, k, v []float32) {
		sl := make([]int32, len(slots))
		for i, s := range slots {
			sl[i] = int32(s)
		}
		kt, vt, st := h.input(k, len(slots), kvdim), h.input(v, len(slots), kvdim), h.ids(sl)
		h.b.StoreKV(kc, vc, kt, vt, st, geo)
		h.unchanged(desc+": StoreKV ("+what+") k", kt, k)
		h.unchanged(desc+": StoreKV ("+what+") v", vt, v)
		switch dt {
		case compute.BF16:
			k, v = roundBF16(k), roundBF16(v)
		case compute.Q8_0:
			k, v = h.roundQ8(desc+": keys ("+what+")", k), h.roundQ8(desc+": values ("+what+")", v)
		}
		for i, s := range slots {
			for g := range c.kvHeads {
				copy(wantK[geo.KVIndex(s, g):][:hd], k[i*kvdim+g*hd:][:hd])
				copy(wantV[geo.KVIndex(s, g):][:hd], v[i*kvdim+g*hd:][:hd])
			}
		}
	}
	junkK, junkV := h.randn(nSlots*kvdim, junkKey), h.randn(nSlots*kvdim, junkValue)
	store("junk in every slot", h.r.Perm(nSlots), junkK, junkV)

	// The earlier context of every sequence, rows in a random order.
	keys, vals := make([][]float32, len(c.seqs)), make([][]float32, len(c.seqs)) // by position
	var histSlots []int
	var histK, histV []float32
	for s, sq := range c.seqs {
		keys[s], vals[s] = h.randn(sq.ctx*kvdim, 1), h.randn(sq.ctx*kvdim, 1)
		for _, p := range h.r.Perm(sq.ctx - sq.nNew) {
			histSlots = append(histSlots, slotOf(s, p))
			histK = append(histK, keys[s][p*kvdim:(p+1)*kvdim]...)
			histV = append(histV, vals[s][p*kvdim:(p+1)*kvdim]...)
		}
	}
	if len(histSlots) > 0 {
		store("earlier context", histSlots, histK, histV)
	}

	// This step's new tokens, in query order.
	var newSlots []int
	var newK, newV []float32
	qstart, ctxLen := []int32{0}, make([]int32, len(c.seqs))
	for s, sq := range c.seqs {
		for p := sq.ctx - sq.nNew; p < sq.ctx; p++ {
			newSlots = append(newSlots, slotOf(s, p))
			newK = append(newK, keys[s][p*kvdim:(p+1)*kvdim]...)
			newV = append(newV, vals[s][p*kvdim:(p+1)*kvdim]...)
		}
		qstart = append(qstart, qstart[s]+int32(sq.nNew))
		ctxLen[s] = int32(sq.ctx)
	}
	rows := int(qstart[len(c.seqs)])
	if rows > 0 {
		store("new tokens", newSlots, newK, newV)
	}
	if got, ok := h.readAny(kc); ok {
		h.exact(desc+": StoreKV: key cache", kc.Shape(), got, wantK)
		h.exact(desc+": StoreKV: value cache", vc.Shape(), h.read(vc), wantV)
	}
	if rows == 0 {
		return
	}

	qv := h.randn(rows*qdim, 1.5)
	q := h.input(qv, rows, qdim)
	dst := h.output(rows, qdim)
	a := &compute.Attention{
		Heads: c.heads, KVHeads: c.kvHeads, HeadDim: hd,
		Scale: float32(1 / math.Sqrt(float64(hd))), BlockSize: bs,
		Seqs: len(c.seqs), MaxBlocks: maxBlocks, Window: c.window, Softcap: c.softcap,
		QueryStart: h.ids(qstart), ContextLen: h.ids(ctxLen), BlockTable: h.ids(table),
	}
	h.b.Attention(dst, q, kc, vc, a)

	seqs := make([]attnSeq, len(c.seqs))
	maxCtx := 0
	for s, sq := range c.seqs {
		k, v := keys[s], vals[s]
		switch dt {
		case compute.BF16:
			k, v = roundBF16(k), roundBF16(v)
		case compute.Q8_0:
			k, v = h.roundQ8(desc+": keys", k), h.roundQ8(desc+": values", v)
		}
		seqs[s] = attnSeq{q0: int(qstart[s]), n: sq.nNew, ctx: sq.ctx, k: widen(k), v: widen(v)}
		maxCtx = max(maxCtx, sq.ctx)
	}
	qr := qv
	if h.opt.BF16Products && dt == compute.BF16 {
		qr = roundBF16(qv)
	}
	want, _ := refAttention(widen(qr), rows, seqs, attnGeom{c.heads, c.kvHeads, hd, float64(a.Scale), c.window, float64(c.softcap)})
	h.near(desc+": dst", []int{rows, qdim}, h.read(dst), want, h.tol(hd+maxCtx))
	h.unchanged(desc+": q", q, qv)
	if got, ok := h.readAny(kc); ok {
		h.exact(desc+": Attention: key cache", kc.Shape(), got, wantK)
		h.exact(desc+": Attention: value cache", vc.Shape(), h.read(vc), wantV)
	}
}
