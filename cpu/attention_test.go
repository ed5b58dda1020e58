package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu/kernels"
)

// pagedSeq is one sequence of a paged attention batch: ctx tokens in the
// cache after the step, the last nNew of them new (query rows).
type pagedSeq struct{ ctx, nNew int }

// pagedShape is a paged attention problem.
type pagedShape struct {
	heads, kvHeads, hd, bs int
	seqs                   []pagedSeq
	// layout of the block table: "scattered" (a random permutation of the
	// cache blocks, with spare blocks in between), "contiguous" (each
	// sequence's blocks consecutive), or "mixed" (runs of consecutive blocks
	// broken every few blocks).
	layout string
}

// pagedProblem holds the tensors of a paged attention call and the host
// data the reference reads.
type pagedProblem struct {
	shape          pagedShape
	dst, q, kc, vc compute.Tensor
	attn           compute.Attention
	qv             []float32
	keys, vals     [][]float32 // [seq] → ctx rows of kvHeads·hd, in position order
	qstart         []int32
	prec           kernels.Precision // of the backend that run uses
}

// roundedBF16 returns x rounded to BF16 precision (to nearest even).
func roundedBF16(x []float32) []float32 {
	r := make([]float32, len(x))
	for i, v := range x {
		r[i] = math.Float32frombits(uint32(kernels.F32ToBF16One(v)) << 16)
	}
	return r
}

// newPagedProblem fills a cache with random keys and values for sh's
// sequences, laid out in blocks as sh.layout says, and random queries.
func newPagedProblem(tb testing.TB, b *Backend, r *rand.Rand, sh pagedShape) *pagedProblem {
	tb.Helper()
	return newPagedProblemOf(tb, b, r, sh, compute.F32)
}

// newPagedProblemOf is newPagedProblem with a cache of dtype dt (F32 or
// BF16). A BF16 cache holds the random values rounded, and so does the
// reference's copy of the keys and values.
func newPagedProblemOf(tb testing.TB, b *Backend, r *rand.Rand, sh pagedShape, dt compute.DType) *pagedProblem {
	tb.Helper()
	qdim, kvdim := sh.heads*sh.hd, sh.kvHeads*sh.hd
	maxBlocks, total := 0, 0
	for _, s := range sh.seqs {
		nb := (s.ctx + sh.bs - 1) / sh.bs
		maxBlocks = max(maxBlocks, nb)
		total += nb
	}
	nBlocks := total + total/3 + 2 // spare blocks so that tables do not tile the cache
	order := make([]int, nBlocks)
	switch sh.layout {
	case "scattered":
		order = r.Perm(nBlocks)
	case "contiguous":
		for i := range order {
			order[i] = i
		}
	case "mixed":
		for i := range order {
			order[i] = i
		}
		for i := 0; i+5 < nBlocks; i += 5 {
			j := i + 5 + r.IntN(nBlocks-i-5)
			order[i+4], order[j] = order[j], order[i+4]
		}
	default:
		tb.Fatalf("layout %q", sh.layout)
	}
	p := &pagedProblem{shape: sh, qstart: []int32{0}}
	kc := make([]float32, nBlocks*sh.bs*kvdim)
	vc := make([]float32, nBlocks*sh.bs*kvdim)
	for i := range kc {
		kc[i] = float32(r.NormFloat64())
		vc[i] = float32(r.NormFloat64())
		if dt == compute.BF16 {
			kc[i] = roundBF16(kc[i])
			vc[i] = roundBF16(vc[i])
		}
	}
	// A Q8_0 cache holds the blocks of the values in cache order (a head's
	// hd values are whole blocks); the reference reads them dequantized.
	var kq, vq []byte
	if dt == compute.Q8_0 {
		quant := func(v []float32) []byte {
			q := make([]byte, compute.Q8_0.Bytes(len(v)))
			if err := compute.Quantize(compute.Q8_0, q, v); err != nil {
				tb.Fatal(err)
			}
			if err := compute.Dequantize(compute.Q8_0, v, q); err != nil {
				tb.Fatal(err)
			}
			return q
		}
		kq, vq = quant(kc), quant(vc)
	}
	geo := &compute.Attention{KVHeads: sh.kvHeads, HeadDim: sh.hd, BlockSize: sh.bs}
	var table, ctxLen []int32
	next := 0
	for _, s := range sh.seqs {
		row := make([]int32, maxBlocks)
		for i := range (s.ctx + sh.bs - 1) / sh.bs {
			row[i] = int32(order[next])
			next++
		}
		table = append(table, row...)
		keys := make([]float32, 0, s.ctx*kvdim)
		vals := make([]float32, 0, s.ctx*kvdim)
		for pos := range s.ctx {
			slot := int(row[pos/sh.bs])*sh.bs + pos%sh.bs
			for g := range sh.kvHeads {
				keys = append(keys, kc[geo.KVIndex(slot, g):][:sh.hd]...)
				vals = append(vals, vc[geo.KVIndex(slot, g):][:sh.hd]...)
			}
		}
		p.keys, p.vals = append(p.keys, keys), append(p.vals, vals)
		p.qstart = append(p.qstart, p.qstart[len(p.qstart)-1]+int32(s.nNew))
		ctxLen = append(ctxLen, int32(s.ctx))
	}
	rows := int(p.qstart[len(sh.seqs)])
	p.qv = randVec(r, rows*qdim)
	mk := func(v []float32, rows, cols int) compute.Tensor {
		x, err := b.NewTensor(compute.F32, rows, cols)
		if err != nil {
			tb.Fatal(err)
		}
		b.Write(x, v)
		return x
	}
	mkInts := func(v []int32) compute.Tensor {
		x, err := b.NewTensor(compute.I32, len(v))
		if err != nil {
			tb.Fatal(err)
		}
		b.WriteInt32(x, v)
		return x
	}
	p.q = mk(p.qv, rows, qdim)
	p.dst = mk(make([]float32, rows*qdim), rows, qdim)
	p.kc = mk(kc, nBlocks*sh.bs, kvdim)
	p.vc = mk(vc, nBlocks*sh.bs, kvdim)
	if dt == compute.BF16 {
		mk16 := func(v []float32) compute.Tensor {
			x, err := b.NewTensor(compute.BF16, nBlocks*sh.bs, kvdim)
			if err != nil {
				tb.Fatal(err)
			}
			kernels.F32ToBF16(x.(*tensor).u16, v) // exact: v is rounded
			return x
		}
		p.kc, p.vc = mk16(kc), mk16(vc)
	}
	if dt == compute.Q8_0 {
		mk8 := func(q []byte) compute.Tensor {
			x, err := b.NewKVCacheTensor(compute.Q8_0, nBlocks*sh.bs, kvdim)
			if err != nil {
				tb.Fatal(err)
			}
			copy(x.(*tensor).kv8, q)
			return x
		}
		p.kc, p.vc = mk8(kq), mk8(vq)
	}
	p.attn = compute.Attention{
		Heads: sh.heads, KVHeads: sh.kvHeads, HeadDim: sh.hd,
		Scale:     float32(1 / math.Sqrt(float64(sh.hd))),
		BlockSize: sh.bs, Seqs: len(sh.seqs), MaxBlocks: maxBlocks,
		QueryStart: mkInts(p.qstart), ContextLen: mkInts(ctxLen), BlockTable: mkInts(table),
	}
	return p
}

// reference computes the attention of p in float64: for each query row and
// head, softmax of the scaled dot products with the keys at positions up to
// its own, times the values.
func (p *pagedProblem) reference() []float64 { return p.referenceRounded(false) }

// referenceRounded is reference with, when roundQ, the queries rounded to
// BF16 first (as Attention does at kernels.PrecisionBF16 with a BF16
// cache).
func (p *pagedProblem) referenceRounded(roundQ bool) []float64 {
	sh := p.shape
	qdim, kvdim, group := sh.heads*sh.hd, sh.kvHeads*sh.hd, sh.heads/sh.kvHeads
	scale := float64(p.attn.Scale)
	out := make([]float64, len(p.qv))
	w := make([]float64, 0)
	for s, sq := range sh.seqs {
		for i := range sq.nNew {
			r := int(p.qstart[s]) + i
			pos := sq.ctx - sq.nNew + i
			for h := range sh.heads {
				g := h / group
				qv := p.qv[r*qdim+h*sh.hd : r*qdim+(h+1)*sh.hd]
				if roundQ {
					qv = roundedBF16(qv)
				}
				w = w[:0]
				m := math.Inf(-1)
				lo := 0 // a sliding window's first key
				if p.attn.Window > 0 {
					lo = max(0, pos-p.attn.Window+1)
				}
				for t := lo; t <= pos; t++ {
					k := p.keys[s][t*kvdim+g*sh.hd : t*kvdim+(g+1)*sh.hd]
					d := 0.0
					for j, x := range qv {
						d += float64(x) * float64(k[j])
					}
					w = append(w, d*scale)
					m = math.Max(m, d*scale)
				}
				z := 0.0
				for t := range w {
					w[t] = math.Exp(w[t] - m)
					z += w[t]
				}
				o := out[r*qdim+h*sh.hd : r*qdim+(h+1)*sh.hd]
				for i, wt := range w {
					t := lo + i
					v := p.vals[s][t*kvdim+g*sh.hd : t*kvdim+(g+1)*sh.hd]
					for j := range o {
						o[j] += wt / z * float64(v[j])
					}
				}
			}
		}
	}
	return out
}

// TestPagedAttention compares Attention with the float64 reference over
// head layouts (MHA, GQA, MQA), head dims, block sizes, block table layouts
// and batches that mix decode (one new token), chunked prefill (new tokens
// after cached ones) and full prefill, with lengths that are not multiples
// of the tiles. Some cases force small tiles or splitting the keys of a
// query tile over threads, so that every path is taken at small sizes.
func TestPagedAttention(t *testing.T) {
	mixed := []pagedSeq{{ctx: 1, nNew: 1}, {ctx: 37, nNew: 37}, {ctx: 300, nNew: 1}, {ctx: 150, nNew: 61}, {ctx: 2, nNew: 1}, {ctx: 75, nNew: 75}}
	for _, tt := range []struct {
		name   string
		sh     pagedShape
		tile   *flashTiles // nil: the defaults
		window int         // sliding window (0: none)
	}{
		{name: "gqa-d64-bs16-mixed-batch", sh: pagedShape{6, 2, 64, 16, mixed, "scattered"}},
		{name: "gqa-d64-bs16-contiguous", sh: pagedShape{6, 2, 64, 16, mixed, "contiguous"}},
		{name: "gqa-d64-bs16-runs", sh: pagedShape{6, 2, 64, 16, mixed, "mixed"}},
		{name: "mha-d64-bs7", sh: pagedShape{4, 4, 64, 7, mixed, "scattered"}},
		{name: "mqa-d128-bs32", sh: pagedShape{8, 1, 128, 32, mixed, "scattered"}},
		{name: "gqa-d128-bs16", sh: pagedShape{16, 8, 128, 16, []pagedSeq{{ctx: 200, nNew: 1}, {ctx: 333, nNew: 190}}, "mixed"}},
		{name: "gqa-d32-bs16", sh: pagedShape{4, 2, 32, 16, mixed, "scattered"}},
		{name: "gqa-d48-bs8", sh: pagedShape{6, 3, 48, 8, mixed, "mixed"}},
		{name: "gqa-d8-bs4", sh: pagedShape{4, 2, 8, 4, []pagedSeq{{ctx: 9, nNew: 9}, {ctx: 6, nNew: 1}, {ctx: 13, nNew: 3}}, "scattered"}},
		{name: "full-prefill-long", sh: pagedShape{6, 2, 64, 16, []pagedSeq{{ctx: 1100, nNew: 1100}}, "contiguous"}},
		{name: "chunk-after-cache", sh: pagedShape{6, 2, 64, 16, []pagedSeq{{ctx: 1500, nNew: 130}}, "scattered"}},
		{name: "decode-long", sh: pagedShape{6, 2, 64, 16, []pagedSeq{{ctx: 2500, nNew: 1}}, "mixed"}},
		{name: "decode-batch", sh: pagedShape{6, 2, 64, 16, []pagedSeq{{ctx: 700, nNew: 1}, {ctx: 33, nNew: 1}, {ctx: 1, nNew: 1}, {ctx: 290, nNew: 1}}, "scattered"}},
		{name: "small-tiles-split", sh: pagedShape{6, 2, 64, 16, mixed, "mixed"},
			tile: &flashTiles{rows: 8, keys: 24, minSplit: 24, pieces: 100}},
		{name: "small-tiles-split-mqa-d128", sh: pagedShape{4, 1, 128, 5, []pagedSeq{{ctx: 97, nNew: 1}, {ctx: 101, nNew: 40}, {ctx: 40, nNew: 40}}, "scattered"},
			tile: &flashTiles{rows: 5, keys: 10, minSplit: 10, pieces: 100}},
		{name: "split-prefill-tiles", sh: pagedShape{6, 2, 64, 16, []pagedSeq{{ctx: 300, nNew: 40}, {ctx: 90, nNew: 90}, {ctx: 77, nNew: 1}}, "scattered"},
			tile: &flashTiles{rows: 48, keys: 32, minSplit: 32, pieces: 100}},
		{name: "split-prefill-tiles-gathered", sh: pagedShape{16, 8, 128, 16, []pagedSeq{{ctx: 300, nNew: 40}, {ctx: 41, nNew: 1}}, "mixed"},
			tile: &flashTiles{rows: 48, keys: 32, minSplit: 32, pieces: 100}},
		{name: "split-many-parts", sh: pagedShape{6, 2, 64, 16, []pagedSeq{{ctx: 1500, nNew: 1}}, "scattered"},
			tile: &flashTiles{rows: 256, keys: 16, minSplit: 16, pieces: 400}},
		{name: "empty-sequence", sh: pagedShape{6, 2, 64, 16, []pagedSeq{{ctx: 20, nNew: 0}, {ctx: 40, nNew: 3}}, "scattered"}},
		// Sliding windows: a prefill task's band of keys on the Sgemm path
		// and the rest on the kernels, merged; decode on the kernels.
		{name: "window-mixed-batch", sh: pagedShape{6, 2, 64, 16, mixed, "scattered"}, window: 20},
		{name: "window-small-tiles-split", sh: pagedShape{6, 2, 64, 16, mixed, "mixed"}, window: 33,
			tile: &flashTiles{rows: 8, keys: 24, minSplit: 24, pieces: 100}},
		{name: "window-split-prefill-d128", sh: pagedShape{16, 8, 128, 16, []pagedSeq{{ctx: 300, nNew: 40}, {ctx: 41, nNew: 1}}, "mixed"}, window: 50,
			tile: &flashTiles{rows: 48, keys: 32, minSplit: 32, pieces: 100}},
		{name: "window-full-prefill", sh: pagedShape{6, 2, 64, 16, []pagedSeq{{ctx: 1100, nNew: 1100}}, "contiguous"}, window: 300},
		{name: "window-one", sh: pagedShape{4, 2, 32, 16, mixed, "scattered"}, window: 1},
	} {
		// Every case on an F32 and a BF16 cache; with the BF16 cache also
		// at PrecisionBF16, where the queries are rounded to BF16 (and the
		// AVX-512 tile path multiplies them with VDPBF16PS); on a Q8_0
		// cache where the head dim is a multiple of 32, at both precisions
		// (the queries stay float32: products with a Q8_0 cache are taken
		// on its exactly dequantized values, so the reference is that of
		// F32 over them).
		for _, pc := range []struct {
			dt   compute.DType
			prec kernels.Precision
		}{{compute.F32, kernels.PrecisionF32}, {compute.BF16, kernels.PrecisionF32}, {compute.BF16, kernels.PrecisionBF16},
			{compute.Q8_0, kernels.PrecisionF32}, {compute.Q8_0, kernels.PrecisionBF16}} {
			if pc.dt == compute.Q8_0 && tt.sh.hd%compute.QK != 0 {
				continue
			}
			p := newPagedProblemOf(t, New(), rand.New(rand.NewPCG(3, uint64(len(tt.name)))), tt.sh, pc.dt)
			p.prec = pc.prec
			p.attn.Window = tt.window
			want := p.referenceRounded(pc.prec == kernels.PrecisionBF16 && pc.dt == compute.BF16)
			for _, v := range attnVariants() {
				if v.set == kernels.KernelsGeneric && tt.sh.work() > 1e7 {
					continue // the pure-Go products are slow, and the same code
				}
				name := fmt.Sprintf("%s/%v/%s", tt.name, pc.dt, v.name)
				if pc.prec == kernels.PrecisionBF16 {
					name += "/bf16-products"
				}
				t.Run(name, func(t *testing.T) {
					v.use(t)
					if tt.tile != nil {
						defer func(old flashTiles) { tiles = old }(tiles)
						tiles = *tt.tile
					}
					p.run()
					closeTo(t, "Attention", Float32s(p.dst), want, 1e-5)
				})
			}
		}
	}
}

// run computes p's attention into p.dst, clearing it first.
func (p *pagedProblem) run() {
	clear(Float32s(p.dst))
	NewWithOptions(Options{Precision: p.prec}).Attention(p.dst, p.q, p.kc, p.vc, &p.attn)
}

// attnVariant is a way Attention can run: a kernel set, and whether the
// AVX-512 tile kernels may be used (otherwise the Sgemm path).
type attnVariant struct {
	name string
	set  string
	asm  bool
}

// attnVariants lists every path this machine can run.
func attnVariants() []attnVariant {
	var vs []attnVariant
	for _, set := range kernels.AvailableKernels() {
		vs = append(vs, attnVariant{name: set + "-sgemm", set: set})
		if set == kernels.KernelsAVX512 && haveFlashAsm {
			vs = append(vs, attnVariant{name: set + "-tiles", set: set, asm: true})
		}
	}
	return vs
}

// use switches to v for the rest of the test.
func (v attnVariant) use(t *testing.T) {
	t.Helper()
	withKernels(t, v.set)
	old := flashAsm
	flashAsm = v.asm
	t.Cleanup(func() { flashAsm = old })
}

// work is the number of multiply-adds of the problem, roughly.
func (sh pagedShape) work() float64 {
	w := 0.0
	for _, s := range sh.seqs {
		w += float64(s.nNew) * float64(s.ctx) * float64(sh.heads*sh.hd)
	}
	return w
}

// withKernels switches the kernel set to name for the rest of the test.
func withKernels(t *testing.T, name string) {
	t.Helper()
	old := kernels.Kernels()
	if err := kernels.SetKernels(name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kernels.SetKernels(old) })
}

// TestPagedAttentionLarge runs sizes where the tiles are full and the keys
// of a query tile are split over threads, against the reference.
func TestPagedAttentionLarge(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("long; TestPagedAttention covers the same paths at small sizes")
	}
	for _, sh := range []pagedShape{
		{6, 2, 64, 16, []pagedSeq{{ctx: 3000, nNew: 517}, {ctx: 4100, nNew: 1}}, "scattered"},
		{16, 8, 128, 16, []pagedSeq{{ctx: 2049, nNew: 300}}, "contiguous"},
	} {
		p := newPagedProblem(t, New(), rand.New(rand.NewPCG(5, 6)), sh)
		want := p.reference()
		for _, v := range attnVariants() {
			if v.set == kernels.KernelsGeneric {
				continue // too slow
			}
			t.Run(fmt.Sprintf("h%d-kv%d-d%d/%s", sh.heads, sh.kvHeads, sh.hd, v.name), func(t *testing.T) {
				v.use(t)
				p.run()
				closeTo(t, "Attention", Float32s(p.dst), want, 1e-5)
			})
		}
	}
}

// TestPagedAttentionRejects checks that inconsistent metadata panics
// (with the op's name) rather than reading outside the cache.
func TestPagedAttentionRejects(t *testing.T) {
	sh := pagedShape{4, 2, 16, 4, []pagedSeq{{ctx: 6, nNew: 2}}, "contiguous"}
	for _, tt := range []struct {
		name  string
		spoil func(b *Backend, p *pagedProblem)
	}{
		{"block outside the cache", func(b *Backend, p *pagedProblem) {
			b.WriteInt32(p.attn.BlockTable, []int32{0, 99})
		}},
		{"negative block", func(b *Backend, p *pagedProblem) {
			b.WriteInt32(p.attn.BlockTable, []int32{-1, 0})
		}},
		{"more new tokens than context", func(b *Backend, p *pagedProblem) {
			b.WriteInt32(p.attn.ContextLen, []int32{1})
		}},
		{"context past the block table", func(b *Backend, p *pagedProblem) {
			b.WriteInt32(p.attn.ContextLen, []int32{9})
		}},
		{"heads not a multiple of kv heads", func(b *Backend, p *pagedProblem) {
			p.attn.KVHeads = 3
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := New()
			p := newPagedProblem(t, b, rand.New(rand.NewPCG(1, 1)), sh)
			tt.spoil(b, p)
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "Attention") {
					t.Fatalf("recovered %v, want a panic of Attention", r)
				}
			}()
			b.Attention(p.dst, p.q, p.kc, p.vc, &p.attn)
		})
	}
}

// TestPagedAttentionAllocs checks that Attention recycles its plan and
// scratch memory: a call allocates no more than the (at most two)
// kernels.ParallelFor calls it makes, as a decode step calls it once per
// layer. On the portable path (no AVX-512: CLAWRL_KERNELS=avx2 or
// generic) the decode shapes are checked; see below for prefill.
func TestPagedAttentionAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items")
	}
	if kernels.Kernels() == kernels.KernelsGeneric {
		t.Skip("the generic kernels are plain reference loops, one ParallelFor closure per product")
	}
	asmPath := flashAsm && kernels.Kernels() == kernels.KernelsAVX512
	noop := func(lo, hi int) {}
	pf := testing.AllocsPerRun(100, func() { kernels.ParallelFor(kernels.Threads(), 1, noop) })
	for _, sh := range []pagedShape{
		{6, 2, 64, 16, []pagedSeq{{ctx: 1000, nNew: 1}, {ctx: 300, nNew: 1}}, "scattered"}, // decode batch
		{6, 2, 64, 16, []pagedSeq{{ctx: 5000, nNew: 1}}, "scattered"},                      // split keys
		{6, 2, 64, 16, []pagedSeq{{ctx: 600, nNew: 200}}, "scattered"},                     // prefill chunk
	} {
		if !asmPath && sh.seqs[0].nNew > 1 {
			// The portable path computes a prefill tile with kernels.Sgemm,
			// whose products are big enough to fork over idle threads; a
			// fork allocates, and costs nothing next to the tile's work.
			continue
		}
		b := New()
		p := newPagedProblem(t, b, rand.New(rand.NewPCG(1, 2)), sh)
		got := testing.AllocsPerRun(20, func() { b.Attention(p.dst, p.q, p.kc, p.vc, &p.attn) })
		if got > 2*pf {
			t.Errorf("%v: %.1f allocations per call, kernels.ParallelFor makes %.1f", sh.seqs, got, pf)
		}
	}
}

// roundBF16 rounds x to the nearest BF16 value (ties to even).
func roundBF16(x float32) float32 {
	return math.Float32frombits(uint32(kernels.F32ToBF16One(x)) << 16)
}
