package cpu

import (
	"fmt"
	"math"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu/kernels"
)

// grainFor is how many rows of width cols make a chunk worth a goroutine
// (about 32K elements).
func grainFor(cols int) int {
	if cols <= 0 {
		return 1
	}
	return max(1, (32<<10)/cols)
}

func shapePanic(op string, format string, args ...any) {
	panic("cpu: " + op + ": " + fmt.Sprintf(format, args...))
}

// Embedding gathers rows of an F32 or BF16 table.
func (b *Backend) Embedding(dst, table, ids compute.Tensor) {
	d := must(dst, compute.F32, "Embedding dst")
	t := weight(table, "Embedding table")
	idx := must(ids, compute.I32, "Embedding ids").i32
	cols := compute.Cols(t)
	if len(d.f32) != len(idx)*cols {
		shapePanic("Embedding", "dst %s for %d ids of width %d", compute.ShapeString(d.shape), len(idx), cols)
	}
	if g := grainFor(cols); len(idx) <= g {
		embedRows(d.f32, t, idx, 0, len(idx))
	} else {
		b.pool.For(len(idx), g, func(lo, hi int) { embedRows(d.f32, t, idx, lo, hi) })
	}
}

func embedRows(dst []float32, t *tensor, idx []int32, lo, hi int) {
	rows, cols := t.shape[0], compute.Cols(t)
	for i := lo; i < hi; i++ {
		r := int(idx[i])
		if r < 0 || r >= rows {
			shapePanic("Embedding", "id %d out of range [0,%d)", r, rows)
		}
		out := dst[i*cols : (i+1)*cols]
		switch {
		case t.dt == compute.F32:
			copy(out, t.f32[r*cols:(r+1)*cols])
		case t.q != nil:
			t.q.Row(out, r)
		default:
			kernels.BF16ToF32(out, t.u16[r*cols:(r+1)*cols])
		}
	}
}

// Linear computes dst = x·wᵀ + bias through kernels.LinearF32/LinearBF16
// (at the backend's Options.Precision).
func (b *Backend) Linear(dst, x, w, bias compute.Tensor) {
	a := must(x, compute.F32, "Linear x")
	o := linearOut(a, dst, w, bias, "Linear")
	if a.shape[0] == 0 {
		return
	}
	m, k := a.shape[0], compute.Cols(a)
	switch {
	case o.Q != nil:
		b.pool.LinearQuant(o.C, a.f32, o.Q, m, o.Accumulate)
	case o.W32 != nil:
		b.pool.LinearF32(o.C, a.f32, o.W32, m, o.N, k, o.Accumulate)
	default:
		b.pool.LinearBF16Prec(o.C, a.f32, o.W16, m, o.N, k, o.Accumulate, b.opts.Precision)
	}
}

// maxMulti is the most products a LinearMulti call passes to the kernels
// at once (a model has at most three over one input).
const maxMulti = 8

// LinearMulti computes every out's Linear through one kernels.LinearMulti
// call, so that a decode step reads all their weights in one pass.
func (b *Backend) LinearMulti(x compute.Tensor, outs []compute.LinearOut) {
	a := must(x, compute.F32, "LinearMulti x")
	m, k := a.shape[0], compute.Cols(a)
	for len(outs) > 0 {
		var buf [maxMulti]kernels.LinearOut
		n := min(len(outs), maxMulti)
		for i, o := range outs[:n] {
			buf[i] = linearOut(a, o.Dst, o.W, o.Bias, "LinearMulti")
		}
		if m > 0 {
			b.pool.LinearMultiPrec(a.f32, m, k, buf[:n], b.opts.Precision)
		}
		outs = outs[n:]
	}
}

// linearOut checks the shapes of dst = x·wᵀ + bias, writes the bias into
// every row of dst, and returns the product for the kernels (accumulating
// onto the bias when there is one).
func linearOut(a *tensor, dst, w, bias compute.Tensor, op string) kernels.LinearOut {
	d := mustArg(dst, compute.F32, op, "dst")
	wt, ok := w.(*tensor)
	if !ok || wt == nil || !wt.live() || wt.dt != compute.F32 && wt.dt != compute.BF16 && wt.q == nil {
		wt = weight(w, op+" w")
	}
	m, k := a.shape[0], compute.Cols(a)
	n := wt.shape[0]
	if compute.Cols(wt) != k || d.shape[0] != m || compute.Cols(d) != n {
		shapePanic(op, "x %s · w %s ᵀ into %s", compute.ShapeString(a.shape), compute.ShapeString(wt.shape), compute.ShapeString(d.shape))
	}
	o := kernels.LinearOut{C: d.f32, W32: wt.f32, W16: wt.u16, Q: wt.q, N: n} // one of W32, W16, Q is set
	if bias != nil {
		bv := mustArg(bias, compute.F32, op, "bias").f32
		if len(bv) != n {
			shapePanic(op, "bias of %d for %d outputs", len(bv), n)
		}
		for i := 0; i < m; i++ {
			copy(d.f32[i*n:(i+1)*n], bv)
		}
		o.Accumulate = true
	}
	return o
}

// RMSNorm normalises each group of len(w) elements.
func (b *Backend) RMSNorm(dst, x, w compute.Tensor, eps float32) {
	d := must(dst, compute.F32, "RMSNorm dst")
	xs := must(x, compute.F32, "RMSNorm x")
	wv := must(w, compute.F32, "RMSNorm w").f32
	g := len(wv)
	if g == 0 || len(xs.f32)%g != 0 || len(d.f32) != len(xs.f32) {
		shapePanic("RMSNorm", "x %s, dst %s, w of %d", compute.ShapeString(xs.shape), compute.ShapeString(d.shape), g)
	}
	if n, grain := len(xs.f32)/g, grainFor(g); n <= grain {
		rmsNormRows(d.f32, xs.f32, wv, eps, 0, n)
	} else {
		b.pool.For(n, grain, func(lo, hi int) { rmsNormRows(d.f32, xs.f32, wv, eps, lo, hi) })
	}
}

func rmsNormRows(dst, x, w []float32, eps float32, lo, hi int) {
	g := len(w)
	for i := lo; i < hi; i++ {
		kernels.RMSNormRow(dst[i*g:(i+1)*g], x[i*g:(i+1)*g], w, eps)
	}
}

// RoPE rotates each head of each row by its position's angles.
func (b *Backend) RoPE(x, pos, cos, sin compute.Tensor, headDim int) {
	b.rope(x, pos, cos, sin, headDim, 1, "RoPE")
}

// rope rotates by the angles (sign 1) or by their negation (sign −1, the
// inverse rotation and RoPE's backward).
func (b *Backend) rope(x, pos, cos, sin compute.Tensor, headDim int, sign float32, op string) {
	xs := mustArg(x, compute.F32, op, "x")
	p := mustArg(pos, compute.I32, op, "pos").i32
	c := mustArg(cos, compute.F32, op, "cos")
	s := mustArg(sin, compute.F32, op, "sin")
	half := headDim / 2
	rows, cols := xs.shape[0], compute.Cols(xs)
	if headDim <= 0 || headDim%2 != 0 || cols%headDim != 0 || len(p) != rows ||
		compute.Cols(c) != half || compute.Cols(s) != half || c.shape[0] != s.shape[0] {
		shapePanic(op, "x %s, headDim %d, %d positions, tables %s %s", compute.ShapeString(xs.shape), headDim, len(p), compute.ShapeString(c.shape), compute.ShapeString(s.shape))
	}
	if grain := grainFor(cols); rows <= grain {
		ropeRows(xs.f32, p, c.f32, s.f32, cols, headDim, sign, 0, rows)
	} else {
		b.pool.For(rows, grain, func(lo, hi int) { ropeRows(xs.f32, p, c.f32, s.f32, cols, headDim, sign, lo, hi) })
	}
}

func ropeRows(x []float32, pos []int32, cos, sin []float32, cols, headDim int, sign float32, lo, hi int) {
	half := headDim / 2
	maxPos := len(cos) / half
	for i := lo; i < hi; i++ {
		ps := int(pos[i])
		if ps < 0 || ps >= maxPos {
			shapePanic("RoPE", "position %d outside table of %d", ps, maxPos)
		}
		cr, sr := cos[ps*half:(ps+1)*half], sin[ps*half:(ps+1)*half]
		row := x[i*cols : (i+1)*cols]
		for h := 0; h < cols; h += headDim {
			x1, x2 := row[h:h+half], row[h+half:h+headDim]
			for j := range half {
				a, b := x1[j], x2[j]
				sn := sign * sr[j]
				x1[j] = a*cr[j] - b*sn
				x2[j] = b*cr[j] + a*sn
			}
		}
	}
}

// StoreKV copies new key and value rows into their cache slots, in the
// layout of compute.Attention.KVIndex, rounding to BF16 for a BF16 cache.
func (b *Backend) StoreKV(kCache, vCache, k, v, slots compute.Tensor, a *compute.Attention) {
	kc := cacheTensor(kCache, "StoreKV kCache")
	vc := cacheTensor(vCache, "StoreKV vCache")
	kr := must(k, compute.F32, "StoreKV k")
	vr := must(v, compute.F32, "StoreKV v")
	sl := must(slots, compute.I32, "StoreKV slots").i32
	w := compute.Cols(kr)
	nSlots := kc.shape[0]
	switch {
	case a.HeadDim <= 0 || a.KVHeads <= 0 || a.BlockSize <= 0 || a.KVHeads*a.HeadDim != w:
		shapePanic("StoreKV", "rows of %d for %d key/value heads of %d, block size %d", w, a.KVHeads, a.HeadDim, a.BlockSize)
	case kc.dt == compute.Q8_0 && a.HeadDim%compute.QK != 0:
		shapePanic("StoreKV", "a Q8_0 cache needs a head dim that is a multiple of %d, not %d", compute.QK, a.HeadDim)
	case compute.Cols(kc) != w || compute.Cols(vc) != w || compute.Cols(vr) != w || vc.dt != kc.dt ||
		vc.shape[0] != nSlots || nSlots%a.BlockSize != 0 || kr.shape[0] != len(sl) || vr.shape[0] != len(sl):
		shapePanic("StoreKV", "cache %v %s and %v %s, k %s, v %s, %d slots, block size %d", kc.dt, compute.ShapeString(kc.shape), vc.dt, compute.ShapeString(vc.shape), compute.ShapeString(kr.shape), compute.ShapeString(vr.shape), len(sl), a.BlockSize)
	}
	for _, s := range sl {
		if s < 0 || int(s) >= nSlots {
			shapePanic("StoreKV", "slot %d outside cache of %d", s, nSlots)
		}
	}
	// The slots are scattered over the cache and mostly not in any cache
	// level, so each row's copy waits on memory; threads wait in parallel.
	// (Serially, this was 3% of a 32-client serving step's samples.)
	if len(sl) < 2*storeKVGrain || b.pool.Threads() < 2 {
		st := kvStore{kc: kc, vc: vc, k: kr.f32, v: vr.f32, slots: sl, a: a}
		st.rows(0, len(sl)) // no fork, no allocation
		return
	}
	st := &kvStore{kc: kc, vc: vc, k: kr.f32, v: vr.f32, slots: sl, a: a}
	b.pool.For(len(sl), storeKVGrain, st.rows)
}

// cacheTensor returns a KV cache tensor: F32, BF16, or Q8_0 made by
// NewKVCacheTensor (not a quantized weight).
func cacheTensor(t compute.Tensor, op string) *tensor {
	x, ok := t.(*tensor)
	if ok && x != nil && (x.dt == compute.BF16 || x.dt == compute.Q8_0) {
		x = must(t, x.dt, op)
		if x.dt == compute.Q8_0 && x.kv8 == nil && compute.Len(x) > 0 {
			panic(fmt.Sprintf("cpu: %s: a Q8_0 weight is not a KV cache (NewKVCacheTensor)", op))
		}
		return x
	}
	return must(t, compute.F32, op)
}

// kvStore is one StoreKV call.
type kvStore struct {
	kc, vc *tensor
	k, v   []float32
	slots  []int32
	a      *compute.Attention
}

// rows stores rows [lo, hi) of k and v, head by head.
func (st *kvStore) rows(lo, hi int) {
	hd, w := st.a.HeadDim, st.a.KVHeads*st.a.HeadDim
	for i := lo; i < hi; i++ {
		s := int(st.slots[i])
		for g := range st.a.KVHeads {
			d, src := st.a.KVIndex(s, g), i*w+g*hd
			switch st.kc.dt {
			case compute.BF16:
				kernels.F32ToBF16(st.kc.u16[d:d+hd], st.k[src:src+hd])
				kernels.F32ToBF16(st.vc.u16[d:d+hd], st.v[src:src+hd])
			case compute.Q8_0:
				b0, b1 := compute.Q8_0.Bytes(d), compute.Q8_0.Bytes(d+hd)
				quantQ8(st.kc.kv8[b0:b1], st.k[src:src+hd])
				quantQ8(st.vc.kv8[b0:b1], st.v[src:src+hd])
			default:
				copy(st.kc.f32[d:d+hd], st.k[src:src+hd])
				copy(st.vc.f32[d:d+hd], st.v[src:src+hd])
			}
		}
	}
}

// quantQ8 writes x (a multiple of compute.QK values) as Q8_0 blocks
// into y, as compute.Quantize does (ggml's reference quantizer).
func quantQ8(y []byte, x []float32) {
	if err := compute.Quantize(compute.Q8_0, y, x); err != nil {
		panic("cpu: StoreKV: " + err.Error())
	}
}

// storeKVGrain is the fewest rows StoreKV gives one thread: below it, a
// fork-join costs more than the copies it spreads.
const storeKVGrain = 16

// SiLUMul computes dst = silu(gate)·up.
func (b *Backend) SiLUMul(dst, gate, up compute.Tensor) {
	d := must(dst, compute.F32, "SiLUMul dst").f32
	g := must(gate, compute.F32, "SiLUMul gate").f32
	u := must(up, compute.F32, "SiLUMul up").f32
	if len(g) != len(d) || len(u) != len(d) {
		shapePanic("SiLUMul", "lengths %d, %d, %d", len(d), len(g), len(u))
	}
	if grain := 1 << 14; len(d) <= grain {
		kernels.SiLUMul(d, g, u)
	} else {
		b.pool.For(len(d), grain, func(lo, hi int) { kernels.SiLUMul(d[lo:hi], g[lo:hi], u[lo:hi]) })
	}
}

// Add computes dst = a + b.
func (b *Backend) Add(dst, x, y compute.Tensor) {
	d := must(dst, compute.F32, "Add dst").f32
	a := must(x, compute.F32, "Add a").f32
	c := must(y, compute.F32, "Add b").f32
	if len(a) != len(d) || len(c) != len(d) {
		shapePanic("Add", "lengths %d, %d, %d", len(d), len(a), len(c))
	}
	if grain := 1 << 15; len(d) <= grain {
		add(d, a, c)
	} else {
		b.pool.For(len(d), grain, func(lo, hi int) { add(d[lo:hi], a[lo:hi], c[lo:hi]) })
	}
}

func add(dst, a, b []float32) {
	a, b = a[:len(dst)], b[:len(dst)]
	for i := range dst {
		dst[i] = a[i] + b[i]
	}
}

// softmaxChunk is how many exponentials are summed in float32 before the
// partial sum is added to a float64 total.
const softmaxChunk = 1024

// LogSoftmax computes a numerically stable log-softmax of every row: the
// row maximum is subtracted before exponentiating, and the sum of
// exponentials is accumulated in float64 over float32 chunks.
func (b *Backend) LogSoftmax(dst, x compute.Tensor) {
	d := must(dst, compute.F32, "LogSoftmax dst")
	xs := must(x, compute.F32, "LogSoftmax x")
	rows, cols := xs.shape[0], compute.Cols(xs)
	if len(d.f32) != len(xs.f32) || cols == 0 {
		shapePanic("LogSoftmax", "x %s into %s", compute.ShapeString(xs.shape), compute.ShapeString(d.shape))
	}
	b.pool.For(rows, 1, func(lo, hi int) {
		tmp := b.getScratch(softmaxChunk)
		defer b.putScratch(tmp)
		for i := lo; i < hi; i++ {
			in, out := xs.f32[i*cols:(i+1)*cols], d.f32[i*cols:(i+1)*cols]
			m := kernels.Max(in)
			var sum float64
			for c := 0; c < cols; c += softmaxChunk {
				part := in[c:min(c+softmaxChunk, cols)]
				sum += float64(kernels.ExpSub((*tmp)[:len(part)], part, m))
			}
			ls := float32(math.Log(sum))
			for j, v := range in {
				out[j] = (v - m) - ls
			}
		}
	})
}

// Gather picks x[i, idx[i]] for every row.
func (b *Backend) Gather(dst, x, idx compute.Tensor) {
	d := must(dst, compute.F32, "Gather dst").f32
	xs := must(x, compute.F32, "Gather x")
	ix := must(idx, compute.I32, "Gather idx").i32
	rows, cols := xs.shape[0], compute.Cols(xs)
	if len(d) != rows || len(ix) != rows {
		shapePanic("Gather", "x %s, %d indices into %d", compute.ShapeString(xs.shape), len(ix), len(d))
	}
	for i, j := range ix {
		if j < 0 || int(j) >= cols {
			shapePanic("Gather", "index %d outside row of %d", j, cols)
		}
		d[i] = xs.f32[i*cols+int(j)]
	}
}
