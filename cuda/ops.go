package cuda

import (
	"fmt"
	"slices"

	"github.com/clawrl/clawrl/compute"
)

func shapePanic(op string, format string, args ...any) {
	panic("cuda: " + op + ": " + fmt.Sprintf(format, args...))
}

// Embedding gathers rows of an F32 or BF16 table: one block per id.
func (b *Backend) Embedding(dst, table, ids compute.Tensor) {
	d := b.must(dst, compute.F32, "Embedding dst")
	t := b.weightOf(table, "Embedding table")
	idx := b.must(ids, compute.I32, "Embedding ids")
	rows, cols := t.shape[0], compute.Cols(t)
	if d.n != idx.n*cols {
		shapePanic("Embedding", "dst %s for %d ids of width %d", compute.ShapeString(d.shape), idx.n, cols)
	}
	if idx.n == 0 || cols == 0 {
		return
	}
	kernel := "embedding_f32"
	if t.dt == compute.BF16 {
		kernel = "embedding_bf16"
	}
	b.launch("Embedding", kernel, rowGrid(idx.n), Dim3{min(256, roundUp(cols, 32)), 1, 1}, 0,
		d.ptr, t.ptr, idx.ptr, idx.n, rows, cols, b.errWord)
}

func roundUp(n, m int) int { return (n + m - 1) / m * m }

// Linear computes dst = x·wᵀ + bias.
func (b *Backend) Linear(dst, x, w, bias compute.Tensor) {
	a := b.must(x, compute.F32, "Linear x")
	b.linear(a, dst, w, bias, "Linear")
}

// LinearMulti runs every product of outs over x, one after another on the
// stream: on a GPU each is a kernel that reads its weight once, and the
// launches queue back to back.
func (b *Backend) LinearMulti(x compute.Tensor, outs []compute.LinearOut) {
	a := b.must(x, compute.F32, "LinearMulti x")
	for _, o := range outs {
		b.linear(a, o.Dst, o.W, o.Bias, "LinearMulti")
	}
}

// linear checks the shapes of dst = a·wᵀ + bias and queues the product:
// GEMV kernels for up to gemvMaxM rows, else a tiled GEMM (tensor cores
// for a BF16 weight).
func (b *Backend) linear(a *tensor, dst, w, bias compute.Tensor, op string) {
	d := b.must(dst, compute.F32, op+" dst")
	wt := b.weightOf(w, op+" w")
	m, k := a.shape[0], compute.Cols(a)
	n := wt.shape[0]
	if compute.Cols(wt) != k || d.shape[0] != m || compute.Cols(d) != n {
		shapePanic(op, "x %s · w %s ᵀ into %s", compute.ShapeString(a.shape), compute.ShapeString(wt.shape), compute.ShapeString(d.shape))
	}
	var bp Ptr
	if bias != nil {
		bt := b.must(bias, compute.F32, op+" bias")
		if bt.n != n {
			shapePanic(op, "bias of %d for %d outputs", bt.n, n)
		}
		bp = bt.ptr
	}
	if m == 0 || n == 0 {
		return
	}
	if k == 0 { // an empty sum: dst = bias (or 0)
		b.linearEmpty(d, bp, m, n, op)
		return
	}
	vec := 0
	if k%8 == 0 && a.ptr%16 == 0 && wt.ptr%16 == 0 {
		vec = 1
	}
	bf16 := wt.dt == compute.BF16
	switch {
	case m <= b.gemvMaxM:
		kernel := "gemv_f32"
		if bf16 {
			kernel = "gemv_bf16"
		}
		b.launch(op, kernel, Dim3{(n + 7) / 8, 1, 1}, Dim3{256, 1, 1}, 0, d.ptr, a.ptr, wt.ptr, bp, m, n, k, vec)
	case bf16:
		// Large tiles when there are enough of them to fill the device.
		kernel, tile, threads := "gemm_bf16_64x64", 64, 128
		if b.gemmTile == 128 || b.gemmTile == 0 && (m+127)/128*((n+127)/128) >= b.dev.Info().SMs {
			kernel, tile, threads = "gemm_bf16_128x128", 128, 256
		}
		b.launch(op, kernel, Dim3{(n + tile - 1) / tile, (m + tile - 1) / tile, 1}, Dim3{threads, 1, 1}, 0,
			d.ptr, a.ptr, wt.ptr, bp, m, n, k, vec)
	default:
		b.launch(op, "gemm_f32", Dim3{(n + 63) / 64, (m + 63) / 64, 1}, Dim3{256, 1, 1}, 0, d.ptr, a.ptr, wt.ptr, bp, m, n, k)
	}
}

// linearEmpty writes dst = bias (or zeros) for a product over k = 0.
func (b *Backend) linearEmpty(d *tensor, bias Ptr, m, n int, op string) {
	if bias == 0 {
		b.queue(op, func() error { return b.dev.memset32(d.ptr, 0, m*n) })
		return
	}
	for i := range m {
		dst := d.ptr + Ptr(4*i*n)
		b.queue(op, func() error { return b.dev.copyDevice(dst, bias, 4*n) })
	}
}

// RMSNorm normalises each group of len(w) elements: a warp per group for
// groups of up to 256 (attention heads), a block per group above.
func (b *Backend) RMSNorm(dst, x, w compute.Tensor, eps float32) {
	d := b.must(dst, compute.F32, "RMSNorm dst")
	xs := b.must(x, compute.F32, "RMSNorm x")
	wv := b.must(w, compute.F32, "RMSNorm w")
	g := wv.n
	if g == 0 || xs.n%g != 0 || d.n != xs.n {
		shapePanic("RMSNorm", "x %s, dst %s, w of %d", compute.ShapeString(xs.shape), compute.ShapeString(d.shape), g)
	}
	groups := xs.n / g
	if groups == 0 {
		return
	}
	if g <= 256 {
		b.launch("RMSNorm", "rmsnorm_warp_f32", rowGrid((groups+3)/4), Dim3{128, 1, 1}, 0, d.ptr, xs.ptr, wv.ptr, groups, g, eps)
		return
	}
	b.launch("RMSNorm", "rmsnorm_block_f32", rowGrid(groups), Dim3{256, 1, 1}, 0, d.ptr, xs.ptr, wv.ptr, groups, g, eps)
}

// RoPE rotates each head of each row by its position's angles.
func (b *Backend) RoPE(x, pos, cos, sin compute.Tensor, headDim int) {
	xs := b.must(x, compute.F32, "RoPE x")
	p := b.must(pos, compute.I32, "RoPE pos")
	c := b.must(cos, compute.F32, "RoPE cos")
	s := b.must(sin, compute.F32, "RoPE sin")
	half := headDim / 2
	rows, cols := xs.shape[0], compute.Cols(xs)
	if headDim <= 0 || headDim%2 != 0 || cols%headDim != 0 || p.n != rows ||
		compute.Cols(c) != half || compute.Cols(s) != half || c.shape[0] != s.shape[0] {
		shapePanic("RoPE", "x %s, headDim %d, %d positions, tables %s %s", compute.ShapeString(xs.shape), headDim, p.n, compute.ShapeString(c.shape), compute.ShapeString(s.shape))
	}
	if rows == 0 || cols == 0 {
		return
	}
	b.launch("RoPE", "rope_f32", rowGrid(rows), Dim3{min(256, roundUp(cols/2, 32)), 1, 1}, 0,
		xs.ptr, p.ptr, c.ptr, s.ptr, rows, cols, headDim, c.shape[0], b.errWord)
}

// StoreKV writes new key and value rows into their cache slots.
func (b *Backend) StoreKV(kCache, vCache, k, v, slots compute.Tensor, a *compute.Attention) {
	kc := b.cacheOf(kCache, "StoreKV kCache")
	vc := b.cacheOf(vCache, "StoreKV vCache")
	kr := b.must(k, compute.F32, "StoreKV k")
	vr := b.must(v, compute.F32, "StoreKV v")
	sl := b.must(slots, compute.I32, "StoreKV slots")
	w := compute.Cols(kr)
	nSlots := kc.shape[0]
	switch {
	case a.HeadDim <= 0 || a.KVHeads <= 0 || a.BlockSize <= 0 || a.KVHeads*a.HeadDim != w:
		shapePanic("StoreKV", "rows of %d for %d key/value heads of %d, block size %d", w, a.KVHeads, a.HeadDim, a.BlockSize)
	case compute.Cols(kc) != w || compute.Cols(vc) != w || compute.Cols(vr) != w || vc.dt != kc.dt ||
		vc.shape[0] != nSlots || nSlots%a.BlockSize != 0 || kr.shape[0] != sl.n || vr.shape[0] != sl.n:
		shapePanic("StoreKV", "cache %v %s and %v %s, k %s, v %s, %d slots, block size %d", kc.dt, compute.ShapeString(kc.shape), vc.dt, compute.ShapeString(vc.shape), compute.ShapeString(kr.shape), compute.ShapeString(vr.shape), sl.n, a.BlockSize)
	}
	if sl.n == 0 {
		return
	}
	kernel := "store_kv_f32"
	if kc.dt == compute.BF16 {
		kernel = "store_kv_bf16"
	}
	b.launch("StoreKV", kernel, rowGrid(sl.n), Dim3{min(256, roundUp(w, 32)), 1, 1}, 0,
		kc.ptr, vc.ptr, kr.ptr, vr.ptr, sl.ptr, sl.n, a.KVHeads, a.HeadDim, a.BlockSize, nSlots, b.errWord)
}

// cacheOf returns a KV cache tensor: F32 or BF16.
func (b *Backend) cacheOf(t compute.Tensor, op string) *tensor {
	x := b.must(t, 0, op)
	if x.dt != compute.F32 && x.dt != compute.BF16 {
		panic(fmt.Sprintf("cuda: %s: dtype %v, want F32 or BF16", op, x.dt))
	}
	return x
}

// Attention runs causal grouped-query attention over the paged cache (see
// attention.cu): the decode kernel, with the keys split over blocks when
// there are few query rows and long contexts, for batches of mostly single
// tokens; the prefill kernel for the rest.
func (b *Backend) Attention(dst, q, kCache, vCache compute.Tensor, a *compute.Attention) {
	out := b.must(dst, compute.F32, "Attention dst")
	qs := b.must(q, compute.F32, "Attention q")
	kc := b.cacheOf(kCache, "Attention kCache")
	vc := b.cacheOf(vCache, "Attention vCache")
	qstart := b.must(a.QueryStart, compute.I32, "Attention QueryStart")
	ctxLen := b.must(a.ContextLen, compute.I32, "Attention ContextLen")
	table := b.must(a.BlockTable, compute.I32, "Attention BlockTable")

	hd, bs := a.HeadDim, a.BlockSize
	qdim, kvdim := a.Heads*hd, a.KVHeads*hd
	switch {
	case a.Heads <= 0 || a.KVHeads <= 0 || hd <= 0 || bs <= 0 || a.Heads%a.KVHeads != 0:
		shapePanic("Attention", "heads %d, kv heads %d, head dim %d, block size %d", a.Heads, a.KVHeads, hd, bs)
	case hd > 256:
		shapePanic("Attention", "head dim %d (at most 256)", hd)
	case a.Window < 0 || a.Softcap < 0:
		shapePanic("Attention", "window %d, soft-cap %g", a.Window, a.Softcap)
	case compute.Cols(qs) != qdim || compute.Cols(out) != qdim || out.shape[0] != qs.shape[0]:
		shapePanic("Attention", "q %s, dst %s for %d heads of %d", compute.ShapeString(qs.shape), compute.ShapeString(out.shape), a.Heads, hd)
	case compute.Cols(kc) != kvdim || kc.shape[0]%bs != 0 || vc.dt != kc.dt || !slices.Equal(vc.shape, kc.shape):
		shapePanic("Attention", "cache %v %s and %v %s for rows of %d in blocks of %d", kc.dt, compute.ShapeString(kc.shape), vc.dt, compute.ShapeString(vc.shape), kvdim, bs)
	case qstart.n != a.Seqs+1 || ctxLen.n != a.Seqs || table.n != a.Seqs*a.MaxBlocks:
		shapePanic("Attention", "metadata lengths %d, %d, %d for %d sequences of %d blocks", qstart.n, ctxLen.n, table.n, a.Seqs, a.MaxBlocks)
	}
	rows := qs.shape[0]
	if rows == 0 || a.Seqs == 0 {
		return
	}
	nBlocks := kc.shape[0] / bs
	roundQ := 0
	if kc.dt == compute.BF16 {
		roundQ = 1
	}
	suffix := "_f32"
	if kc.dt == compute.BF16 {
		suffix = "_bf16"
	}
	path := b.attnPath
	if path == 0 {
		path = attnPrefill
		if rows <= 2*a.Seqs {
			path = attnDecode
		}
	}
	if path == attnPrefill {
		group := a.Heads / a.KVHeads
		tiles := (rows*group+31)/32 + a.Seqs // bounds Σ ceil(n_s·group/32)
		shared := 4 * ((32+32)*(hd+1) + 32*33)
		b.launch("Attention", "attn_prefill"+suffix, Dim3{tiles, a.KVHeads, 1}, Dim3{128, 1, 1}, shared,
			out.ptr, qs.ptr, kc.ptr, vc.ptr, qstart.ptr, ctxLen.ptr, table.ptr, a.Seqs, a.MaxBlocks,
			a.Heads, a.KVHeads, hd, bs, nBlocks, a.Scale, a.Window, a.Softcap, roundQ, b.errWord)
		return
	}

	// Decode: split the keys (the most a sequence can have: MaxBlocks
	// blocks, or the window) so that there are about two blocks of work
	// per SM.
	maxCtx := max(a.MaxBlocks*bs, 1)
	if a.Window > 0 {
		maxCtx = min(maxCtx, a.Window)
	}
	splits := 1
	if want := 2 * b.dev.Info().SMs; rows*a.Heads < want {
		splits = min((want+rows*a.Heads-1)/(rows*a.Heads), (maxCtx+b.minSplitLen-1)/b.minSplitLen, 64)
		splits = max(splits, 1)
	}
	splitLen := roundUp((maxCtx+splits-1)/splits, 32)
	splits = (maxCtx + splitLen - 1) / splitLen
	var partO, partML Ptr
	if splits > 1 {
		parts := rows * a.Heads * splits
		p, err := b.scratchFor(4 * parts * (hd + 2))
		if err != nil {
			b.queue("Attention", func() error { return err })
			return
		}
		partO, partML = p, p+Ptr(4*parts*hd)
	}
	vec := 0
	if hd%8 == 0 && kc.ptr%16 == 0 && vc.ptr%16 == 0 {
		vec = 1
	}
	b.launch("Attention", "attn_decode"+suffix, Dim3{rows, a.Heads, splits}, Dim3{128, 1, 1}, 0,
		out.ptr, partO, partML, qs.ptr, kc.ptr, vc.ptr, qstart.ptr, ctxLen.ptr, table.ptr, a.Seqs, a.MaxBlocks,
		a.Heads, a.KVHeads, hd, bs, nBlocks, a.Scale, a.Window, a.Softcap, splitLen, roundQ, vec, b.errWord)
	if splits > 1 {
		b.launch("Attention", "attn_combine", Dim3{rows, a.Heads, 1}, Dim3{min(256, roundUp(hd, 32)), 1, 1}, 0,
			out.ptr, partO, partML, a.Heads, hd, splits)
	}
}

// SiLUMul computes dst = silu(gate)·up.
func (b *Backend) SiLUMul(dst, gate, up compute.Tensor) {
	b.gated("SiLUMul", "silu_mul_f32", dst, gate, up)
}

// gated launches a gated activation's kernel, dst = act(gate)·up.
func (b *Backend) gated(op, kernel string, dst, gate, up compute.Tensor) {
	d := b.must(dst, compute.F32, op+" dst")
	g := b.must(gate, compute.F32, op+" gate")
	u := b.must(up, compute.F32, op+" up")
	if g.n != d.n || u.n != d.n {
		shapePanic(op, "lengths %d, %d, %d", d.n, g.n, u.n)
	}
	if d.n == 0 {
		return
	}
	b.launch(op, kernel, elemGrid(d.n, 256), Dim3{256, 1, 1}, 0, d.ptr, g.ptr, u.ptr, d.n)
}

// WidensToBF16 asks for the matrices a checkpoint stores block-quantized
// (GGUF files) as BF16 values, which the tensor cores multiply, instead of
// F32 at twice the memory (compute.WidensToBF16).
func (b *Backend) WidensToBF16() bool { return true }

// SlidingWindow reports that Attention honours Attention.Window
// (compute.SlidingWindow).
func (b *Backend) SlidingWindow() bool { return true }

// GELUMul computes dst = gelu(gate)·up with GELU's tanh form
// (compute.Gemma).
func (b *Backend) GELUMul(dst, gate, up compute.Tensor) {
	b.gated("GELUMul", "gelu_mul_f32", dst, gate, up)
}

// Scale multiplies x by alpha in place (compute.Scaler).
func (b *Backend) Scale(x compute.Tensor, alpha float32) {
	d := b.must(x, compute.F32, "Scale x")
	if d.n == 0 {
		return
	}
	b.launch("Scale", "scale_f32", elemGrid(d.n, 256), Dim3{256, 1, 1}, 0, d.ptr, alpha, d.n)
}

// Softcap replaces every element of x with cap·tanh(x/cap)
// (compute.Softcap).
func (b *Backend) Softcap(x compute.Tensor, cap float32) {
	d := b.must(x, compute.F32, "Softcap x")
	if !(cap > 0) {
		shapePanic("Softcap", "cap %g", cap)
	}
	if d.n == 0 {
		return
	}
	b.launch("Softcap", "softcap_f32", elemGrid(d.n, 256), Dim3{256, 1, 1}, 0, d.ptr, cap, d.n)
}

// SoftcapBackward multiplies dx by 1 − (y/cap)², the derivative of
// Softcap at the elements whose capped values are y.
func (b *Backend) SoftcapBackward(dx, y compute.Tensor, cap float32) {
	d := b.must(dx, compute.F32, "SoftcapBackward dx")
	ys := b.must(y, compute.F32, "SoftcapBackward y")
	if ys.n != d.n || !(cap > 0) {
		shapePanic("SoftcapBackward", "lengths %d, %d, cap %g", d.n, ys.n, cap)
	}
	if d.n == 0 {
		return
	}
	b.launch("SoftcapBackward", "softcap_backward_f32", elemGrid(d.n, 256), Dim3{256, 1, 1}, 0, d.ptr, ys.ptr, cap, d.n)
}

// Add computes dst = a + b.
func (b *Backend) Add(dst, x, y compute.Tensor) {
	d := b.must(dst, compute.F32, "Add dst")
	a := b.must(x, compute.F32, "Add a")
	c := b.must(y, compute.F32, "Add b")
	if a.n != d.n || c.n != d.n {
		shapePanic("Add", "lengths %d, %d, %d", d.n, a.n, c.n)
	}
	if d.n == 0 {
		return
	}
	b.launch("Add", "add_f32", elemGrid(d.n, 256), Dim3{256, 1, 1}, 0, d.ptr, a.ptr, c.ptr, d.n)
}

// LogSoftmax computes log softmax of every row, one block per row.
func (b *Backend) LogSoftmax(dst, x compute.Tensor) {
	d := b.must(dst, compute.F32, "LogSoftmax dst")
	xs := b.must(x, compute.F32, "LogSoftmax x")
	rows, cols := xs.shape[0], compute.Cols(xs)
	if d.n != xs.n || cols == 0 {
		shapePanic("LogSoftmax", "x %s into %s", compute.ShapeString(xs.shape), compute.ShapeString(d.shape))
	}
	if rows == 0 {
		return
	}
	threads := 1024
	if cols < 8192 {
		threads = 256
	}
	b.launch("LogSoftmax", "log_softmax_f32", rowGrid(rows), Dim3{threads, 1, 1}, 0, d.ptr, xs.ptr, rows, cols)
}

// Gather picks x[i, idx[i]] for every row.
func (b *Backend) Gather(dst, x, idx compute.Tensor) {
	d := b.must(dst, compute.F32, "Gather dst")
	xs := b.must(x, compute.F32, "Gather x")
	ix := b.must(idx, compute.I32, "Gather idx")
	rows, cols := xs.shape[0], compute.Cols(xs)
	if d.n != rows || ix.n != rows {
		shapePanic("Gather", "x %s, %d indices into %d", compute.ShapeString(xs.shape), ix.n, d.n)
	}
	if rows == 0 {
		return
	}
	b.launch("Gather", "gather_f32", Dim3{(rows + 255) / 256, 1, 1}, Dim3{256, 1, 1}, 0, d.ptr, xs.ptr, ix.ptr, rows, cols, b.errWord)
}
