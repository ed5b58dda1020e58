package cpu

import (
	"fmt"
	"math"
	"sync/atomic"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu/kernels"
)

// The backward kernels of compute.Trainer.
//
// Every reduction over rows (weight, bias and norm-weight gradients,
// scatter-adds) is split the same way on every call with the same shapes
// and thread count, and its partial results are combined in a fixed order,
// so gradients are bit-for-bit reproducible (see compute.Trainer). Matrix
// products go through kernels.Sgemm, which splits only the output.

var _ compute.Trainer = (*Backend)(nil)

// forParts splits [0, n) into p contiguous parts, the same way for the same
// n and p, and runs fn on them in parallel.
func (b *Backend) forParts(n, p int, fn func(part, lo, hi int)) {
	if p <= 1 {
		fn(0, 0, n)
		return
	}
	b.pool.For(p, 1, func(a, b int) {
		for i := a; i < b; i++ {
			fn(i, i*n/p, (i+1)*n/p)
		}
	})
}

// numParts is how many parts to split n items into when each part should
// hold at least grain items.
func (b *Backend) numParts(n, grain int) int {
	return max(1, min(b.pool.Threads(), n/max(grain, 1)))
}

// forDynamic runs fn(i) for every i in [0, n) over up to Threads()
// goroutines that claim items one at a time, so items of unequal cost
// balance out. start and stop bracket each goroutine's items (for
// per-goroutine scratch memory); either may be nil.
func (b *Backend) forDynamic(n int, start func() any, fn func(i int, state any), stop func(state any)) {
	var next atomic.Int64
	b.pool.For(min(n, b.pool.Threads()), 1, func(lo, hi int) {
		for range hi - lo {
			var st any
			claimed := false
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					break
				}
				if !claimed && start != nil {
					st = start()
				}
				claimed = true
				fn(i, st)
			}
			if claimed && stop != nil {
				stop(st)
			}
		}
	})
}

// MatMul computes dst = alpha·op(a)·op(b) + beta·dst with kernels.Sgemm.
func (b *Backend) MatMul(dst, x, y compute.Tensor, transA, transB bool, alpha, beta float32) {
	d := must(dst, compute.F32, "MatMul dst")
	a := must(x, compute.F32, "MatMul a")
	c := must(y, compute.F32, "MatMul b")
	ar, ac := a.shape[0], compute.Cols(a)
	br, bc := c.shape[0], compute.Cols(c)
	m, k := ar, ac
	if transA {
		m, k = ac, ar
	}
	k2, n := br, bc
	if transB {
		k2, n = bc, br
	}
	if k != k2 || d.shape[0] != m || compute.Cols(d) != n {
		shapePanic("MatMul", "op(%s)·op(%s) into %s (trans %v %v)", compute.ShapeString(a.shape), compute.ShapeString(c.shape), compute.ShapeString(d.shape), transA, transB)
	}
	b.pool.Sgemm(transA, transB, m, n, k, alpha, a.f32, ac, c.f32, bc, beta, d.f32, n)
}

// Convert copies src into dst, converting between F32 and BF16.
func (b *Backend) Convert(dst, src compute.Tensor) {
	d, s := dst.(*tensor), src.(*tensor)
	if compute.Len(d) != compute.Len(s) {
		shapePanic("Convert", "%v %s into %v %s", s.dt, compute.ShapeString(s.shape), d.dt, compute.ShapeString(d.shape))
	}
	if d.dt == s.dt {
		b.Copy(dst, src)
		return
	}
	n := compute.Len(d)
	const grain = 1 << 16
	switch {
	case d.dt == compute.BF16 && s.dt == compute.F32:
		ds, ss := must(dst, compute.BF16, "Convert dst").u16, must(src, compute.F32, "Convert src").f32
		b.pool.For(n, grain, func(lo, hi int) { kernels.F32ToBF16(ds[lo:hi], ss[lo:hi]) })
	case d.dt == compute.F32 && s.dt == compute.BF16:
		ds, ss := must(dst, compute.F32, "Convert dst").f32, must(src, compute.BF16, "Convert src").u16
		b.pool.For(n, grain, func(lo, hi int) { kernels.BF16ToF32(ds[lo:hi], ss[lo:hi]) })
	case d.dt == compute.F32 && s.dt == compute.Q8_0 && s.kv8 != nil: // a Q8_0 KV cache
		ds := must(dst, compute.F32, "Convert dst").f32
		ss := must(src, s.dt, "Convert src").kv8
		b.pool.For(n/compute.QK, grain/compute.QK, func(lo, hi int) {
			kernels.DequantQ8_0(ds[lo*compute.QK:hi*compute.QK], ss[compute.Q8_0.Bytes(lo*compute.QK):compute.Q8_0.Bytes(hi*compute.QK)])
		})
	case d.dt == compute.F32 && s.dt.Quantized():
		ds, q := must(dst, compute.F32, "Convert dst").f32, must(src, s.dt, "Convert src").q
		rows, k := q.Dims()
		b.pool.For(rows, grainFor(k), func(lo, hi int) {
			for r := lo; r < hi; r++ {
				q.Row(ds[r*k:(r+1)*k], r)
			}
		})
	default:
		shapePanic("Convert", "from %v to %v is not supported", s.dt, d.dt)
	}
}

// EmbeddingBackward scatter-adds dy's rows into dTable. The columns are
// split over threads; each walks all ids in order, so repeated ids add up
// in a fixed order without locks.
func (b *Backend) EmbeddingBackward(dTable, dy, ids compute.Tensor) {
	dt := must(dTable, compute.F32, "EmbeddingBackward dTable")
	g := must(dy, compute.F32, "EmbeddingBackward dy")
	idx := must(ids, compute.I32, "EmbeddingBackward ids").i32
	rows, cols := dt.shape[0], compute.Cols(dt)
	if len(g.f32) != len(idx)*cols {
		shapePanic("EmbeddingBackward", "dy %s for %d ids of width %d", compute.ShapeString(g.shape), len(idx), cols)
	}
	for _, r := range idx {
		if r < 0 || int(r) >= rows {
			shapePanic("EmbeddingBackward", "id %d out of range [0,%d)", r, rows)
		}
	}
	const colGrain = 64
	p := b.numParts(cols, colGrain)
	if len(idx)*cols < 1<<15 {
		p = 1
	}
	b.forParts(cols, p, func(_, c0, c1 int) {
		for i, r := range idx {
			kernels.Axpy(1, g.f32[i*cols+c0:i*cols+c1], dt.f32[int(r)*cols+c0:int(r)*cols+c1])
		}
	})
}

// LinearBackwardInput computes dx (+)= dy·w. A BF16 w is widened to float32
// a block of its rows at a time into scratch memory, and each block's
// product is added with Sgemm (the kernels take BF16 only transposed).
func (b *Backend) LinearBackwardInput(dx, dy, w compute.Tensor, accumulate bool) {
	d := must(dx, compute.F32, "LinearBackwardInput dx")
	g := must(dy, compute.F32, "LinearBackwardInput dy")
	wt := weight(w, "LinearBackwardInput w")
	m, n := g.shape[0], compute.Cols(g)
	k := compute.Cols(wt)
	if wt.shape[0] != n || d.shape[0] != m || compute.Cols(d) != k {
		shapePanic("LinearBackwardInput", "dy %s · w %s into %s", compute.ShapeString(g.shape), compute.ShapeString(wt.shape), compute.ShapeString(d.shape))
	}
	beta := float32(0)
	if accumulate {
		beta = 1
	}
	if wt.dt == compute.F32 {
		b.pool.Sgemm(false, false, m, k, n, 1, g.f32, n, wt.f32, k, beta, d.f32, k)
		return
	}
	if m == 0 || k == 0 {
		return
	}
	if n == 0 {
		if !accumulate {
			clear(d.f32)
		}
		return
	}
	// Blocks of bfRows rows of w: the product's shared dimension is cut
	// into pieces about as long as the kernels' own cache blocks, so the
	// extra passes over dx cost little.
	bfRows := max(64, min(512, (1<<20)/k))
	buf := b.getScratch(min(bfRows, n) * k)
	defer b.putScratch(buf)
	for r0 := 0; r0 < n; r0 += bfRows {
		r1 := min(r0+bfRows, n)
		wf := (*buf)[:(r1-r0)*k]
		if wt.q != nil { // dequantized a block of rows at a time, like BF16
			b.pool.For(r1-r0, grainFor(k), func(lo, hi int) {
				for r := lo; r < hi; r++ {
					wt.q.Row(wf[r*k:(r+1)*k], r0+r)
				}
			})
		} else {
			src := wt.u16[r0*k : r1*k]
			b.pool.For(len(wf), 1<<15, func(lo, hi int) { kernels.BF16ToF32(wf[lo:hi], src[lo:hi]) })
		}
		b.pool.Sgemm(false, false, m, k, r1-r0, 1, g.f32[r0:], n, wf, k, beta, d.f32, k)
		beta = 1
	}
}

// LinearBackwardWeight computes dw += dyᵀ·x.
func (b *Backend) LinearBackwardWeight(dw, dy, x compute.Tensor) {
	d := must(dw, compute.F32, "LinearBackwardWeight dw")
	g := must(dy, compute.F32, "LinearBackwardWeight dy")
	a := must(x, compute.F32, "LinearBackwardWeight x")
	m, n, k := g.shape[0], compute.Cols(g), compute.Cols(a)
	if a.shape[0] != m || d.shape[0] != n || compute.Cols(d) != k {
		shapePanic("LinearBackwardWeight", "dy %s ᵀ· x %s into %s", compute.ShapeString(g.shape), compute.ShapeString(a.shape), compute.ShapeString(d.shape))
	}
	b.pool.Sgemm(true, false, n, k, m, 1, g.f32, n, a.f32, k, 1, d.f32, k)
}

// BiasBackward computes db += Σ_rows dy, each column summed in row order
// in float64.
func (b *Backend) BiasBackward(db, dy compute.Tensor) {
	d := must(db, compute.F32, "BiasBackward db").f32
	g := must(dy, compute.F32, "BiasBackward dy")
	rows, cols := g.shape[0], compute.Cols(g)
	if len(d) != cols {
		shapePanic("BiasBackward", "db of %d for dy %s", len(d), compute.ShapeString(g.shape))
	}
	p := b.numParts(cols, 64)
	if rows*cols < 1<<15 {
		p = 1
	}
	b.forParts(cols, p, func(_, c0, c1 int) {
		acc := make([]float64, c1-c0)
		for r := range rows {
			for j, v := range g.f32[r*cols+c0 : r*cols+c1] {
				acc[j] += float64(v)
			}
		}
		for j, v := range acc {
			d[c0+j] += float32(v)
		}
	})
}

// rmsScale is 1/sqrt(mean(x²)+eps), computed as kernels.RMSNormRow does.
func rmsScale(x []float32, eps float32) float32 {
	ss := kernels.Dot(x, x)
	return float32(1 / math.Sqrt(float64(ss)/float64(len(x))+float64(eps)))
}

// RMSNormBackward: with y = x·r·w and r = 1/sqrt(mean(x²)+eps) per group,
//
//	∂L/∂x = r·(dy∘w) − x·r³·Σ(dy∘w∘x)/n
//	∂L/∂w = Σ_groups dy∘x·r
//
// Groups are split into fixed parts; each part sums its dw contribution in
// float64 and the parts are added in order.
func (b *Backend) RMSNormBackward(dx, dw, dy, x, w compute.Tensor, eps float32, accumulate bool) {
	d := must(dx, compute.F32, "RMSNormBackward dx").f32
	g := must(dy, compute.F32, "RMSNormBackward dy").f32
	xs := must(x, compute.F32, "RMSNormBackward x").f32
	wv := must(w, compute.F32, "RMSNormBackward w").f32
	n := len(wv)
	if n == 0 || len(xs)%n != 0 || len(d) != len(xs) || len(g) != len(xs) {
		shapePanic("RMSNormBackward", "x of %d, dx of %d, dy of %d, w of %d", len(xs), len(d), len(g), n)
	}
	var dwv []float32
	if dw != nil {
		dwv = must(dw, compute.F32, "RMSNormBackward dw").f32
		if len(dwv) != n {
			shapePanic("RMSNormBackward", "dw of %d for w of %d", len(dwv), n)
		}
	}
	groups := len(xs) / n
	p := b.numParts(groups, max(1, (16<<10)/n))
	var partial [][]float64
	if dwv != nil {
		partial = make([][]float64, p)
	}
	b.forParts(groups, p, func(part, lo, hi int) {
		var acc []float64
		if dwv != nil {
			acc = make([]float64, n)
			partial[part] = acc
		}
		for i := lo; i < hi; i++ {
			xr, gr, dr := xs[i*n:(i+1)*n], g[i*n:(i+1)*n], d[i*n:(i+1)*n]
			r := rmsScale(xr, eps)
			var dot float64
			for j, v := range gr {
				dot += float64(v * wv[j] * xr[j])
				if acc != nil {
					acc[j] += float64(v * xr[j] * r)
				}
			}
			c := float32(dot) * r * r * r / float32(n)
			if accumulate {
				for j, v := range gr {
					dr[j] += r*v*wv[j] - c*xr[j]
				}
			} else {
				for j, v := range gr {
					dr[j] = r*v*wv[j] - c*xr[j]
				}
			}
		}
	})
	if dwv != nil {
		for j := range dwv {
			var s float64
			for _, acc := range partial {
				s += acc[j]
			}
			dwv[j] += float32(s)
		}
	}
}

// RoPEBackward rotates back by the negated angles.
func (b *Backend) RoPEBackward(dx, pos, cos, sin compute.Tensor, headDim int) {
	b.rope(dx, pos, cos, sin, headDim, -1, "RoPEBackward")
}

// SiLUMulBackward: with s = σ(g), silu(g) = g·s and silu'(g) = s·(1 + g·(1−s)),
//
//	dGate = dy·up·s·(1 + g·(1−s)),  dUp = dy·g·s
//
// exp(−g) is evaluated with kernels.ExpSub a chunk at a time.
func (b *Backend) SiLUMulBackward(dGate, dUp, dy, gate, up compute.Tensor) {
	dg := must(dGate, compute.F32, "SiLUMulBackward dGate").f32
	du := must(dUp, compute.F32, "SiLUMulBackward dUp").f32
	g := must(dy, compute.F32, "SiLUMulBackward dy").f32
	ga := must(gate, compute.F32, "SiLUMulBackward gate").f32
	u := must(up, compute.F32, "SiLUMulBackward up").f32
	n := len(g)
	if len(dg) != n || len(du) != n || len(ga) != n || len(u) != n {
		shapePanic("SiLUMulBackward", "lengths %d, %d, %d, %d, %d", len(dg), len(du), n, len(ga), len(u))
	}
	const chunk = 1024
	b.pool.For(n, 1<<14, func(lo, hi int) {
		tmp := b.getScratch(chunk)
		defer b.putScratch(tmp)
		for c0 := lo; c0 < hi; c0 += chunk {
			c1 := min(c0+chunk, hi)
			e := (*tmp)[:c1-c0]
			for j := range e {
				e[j] = -ga[c0+j]
			}
			kernels.ExpSub(e, e, 0)
			for j, ej := range e {
				i := c0 + j
				s := 1 / (1 + ej)
				gi, ui, yi := ga[i], u[i], g[i]
				du[i] = yi * gi * s
				dg[i] = yi * ui * s * (1 + gi*(1-s))
			}
		}
	})
}

// LogProbs writes each row's target log-probability, entropy and log
// normaliser. With m the row maximum and e = exp(x − m):
//
//	lse = m + log Σe,  logp = x[t] − lse,  H = log Σe − Σ e·(x−m) / Σe
//
// with the sums over chunks of float32 added in float64.
func (b *Backend) LogProbs(logp, entropy, lse, logits, targets compute.Tensor) {
	lp := must(logp, compute.F32, "LogProbs logp").f32
	ls := must(lse, compute.F32, "LogProbs lse").f32
	xs := must(logits, compute.F32, "LogProbs logits")
	tg := must(targets, compute.I32, "LogProbs targets").i32
	var ent []float32
	if entropy != nil {
		ent = must(entropy, compute.F32, "LogProbs entropy").f32
	}
	rows, cols := xs.shape[0], compute.Cols(xs)
	if len(lp) != rows || len(ls) != rows || len(tg) != rows || (ent != nil && len(ent) != rows) || cols == 0 {
		shapePanic("LogProbs", "logits %s, %d targets, outputs %d %d", compute.ShapeString(xs.shape), len(tg), len(lp), len(ls))
	}
	for _, t := range tg {
		if t < 0 || int(t) >= cols {
			shapePanic("LogProbs", "target %d outside row of %d", t, cols)
		}
	}
	b.pool.For(rows, 1, func(lo, hi int) {
		tmp := b.getScratch(softmaxChunk)
		defer b.putScratch(tmp)
		for i := lo; i < hi; i++ {
			in := xs.f32[i*cols : (i+1)*cols]
			m := kernels.Max(in)
			var sum, wsum float64
			for c := 0; c < cols; c += softmaxChunk {
				part := in[c:min(c+softmaxChunk, cols)]
				e := (*tmp)[:len(part)]
				sum += float64(kernels.ExpSub(e, part, m))
				if ent != nil {
					var w float32
					for j, v := range e {
						w += v * (part[j] - m)
					}
					wsum += float64(w)
				}
			}
			logZ := math.Log(sum)
			l := float64(m) + logZ
			ls[i] = float32(l)
			lp[i] = float32(float64(in[tg[i]]) - l)
			if ent != nil {
				ent[i] = float32(logZ - wsum/sum)
			}
		}
	})
}

// LogProbsBackward computes dLogits = dLogp·(onehot(target) − exp(x − lse)).
func (b *Backend) LogProbsBackward(dLogits, logits, lse, targets, dLogp compute.Tensor) {
	d := must(dLogits, compute.F32, "LogProbsBackward dLogits").f32
	xs := must(logits, compute.F32, "LogProbsBackward logits")
	ls := must(lse, compute.F32, "LogProbsBackward lse").f32
	tg := must(targets, compute.I32, "LogProbsBackward targets").i32
	g := must(dLogp, compute.F32, "LogProbsBackward dLogp").f32
	rows, cols := xs.shape[0], compute.Cols(xs)
	if len(d) != len(xs.f32) || len(ls) != rows || len(tg) != rows || len(g) != rows {
		shapePanic("LogProbsBackward", "logits %s, dLogits of %d, %d lse, %d targets, %d dLogp", compute.ShapeString(xs.shape), len(d), len(ls), len(tg), len(g))
	}
	b.pool.For(rows, 1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			t := int(tg[i])
			out := d[i*cols : (i+1)*cols]
			kernels.ExpSub(out, xs.f32[i*cols:(i+1)*cols], ls[i])
			kernels.Scale(-g[i], out)
			if t >= 0 && t < cols { // else the target is in another tile of the vocabulary
				out[t] += g[i]
			}
		}
	})
}

// AdamW updates param, m and v in place (see compute.AdamW).
func (b *Backend) AdamW(param, grad, m, v compute.Tensor, hp compute.AdamW) {
	p := must(param, compute.F32, "AdamW param").f32
	g := must(grad, compute.F32, "AdamW grad").f32
	ms := must(m, compute.F32, "AdamW m").f32
	vs := must(v, compute.F32, "AdamW v").f32
	if len(g) != len(p) || len(ms) != len(p) || len(vs) != len(p) {
		shapePanic("AdamW", "lengths %d, %d, %d, %d", len(p), len(g), len(ms), len(vs))
	}
	if hp.Step < 1 {
		panic(fmt.Sprintf("cpu: AdamW: step %d, want ≥ 1", hp.Step))
	}
	gs := hp.GradScale
	if gs == 0 {
		gs = 1
	}
	b1, b2 := hp.Beta1, hp.Beta2
	c1 := float32(1 / (1 - math.Pow(float64(b1), float64(hp.Step))))
	c2 := float32(1 / (1 - math.Pow(float64(b2), float64(hp.Step))))
	decay := 1 - hp.LR*hp.WeightDecay
	lr, eps := hp.LR, hp.Eps
	b.pool.For(len(p), 1<<14, func(lo, hi int) {
		p, g, ms, vs := p[lo:hi], g[lo:hi], ms[lo:hi], vs[lo:hi]
		for i := range p {
			gi := g[i] * gs
			mi := b1*ms[i] + (1-b1)*gi
			vi := b2*vs[i] + (1-b2)*gi*gi
			ms[i], vs[i] = mi, vi
			den := float32(math.Sqrt(float64(vi*c2))) + eps
			p[i] = p[i]*decay - lr*(mi*c1)/den
		}
	})
}

// SumSquares returns Σ x² over the tensors in float64, summing fixed parts
// of each in order.
func (b *Backend) SumSquares(ts ...compute.Tensor) (float64, error) {
	var total float64
	for _, t := range ts {
		x := must(t, compute.F32, "SumSquares").f32
		const chunk = 4096
		chunks := (len(x) + chunk - 1) / chunk
		p := b.numParts(chunks, 16)
		partial := make([]float64, p)
		b.forParts(chunks, p, func(part, lo, hi int) {
			var s float64
			for c := lo; c < hi; c++ {
				v := x[c*chunk : min((c+1)*chunk, len(x))]
				s += float64(kernels.Dot(v, v))
			}
			partial[part] = s
		})
		for _, s := range partial {
			total += s
		}
	}
	return total, nil
}

// Scale multiplies x by alpha in place.
func (b *Backend) Scale(x compute.Tensor, alpha float32) {
	v := must(x, compute.F32, "Scale").f32
	b.pool.For(len(v), 1<<15, func(lo, hi int) { kernels.Scale(alpha, v[lo:hi]) })
}

// Zero clears a tensor.
func (b *Backend) Zero(x compute.Tensor) {
	t, ok := x.(*tensor)
	if !ok || t == nil {
		panic(fmt.Sprintf("cpu: Zero: tensor %T was not made by the cpu backend", x))
	}
	switch {
	case t.f32 != nil:
		b.pool.For(len(t.f32), 1<<16, func(lo, hi int) { clear(t.f32[lo:hi]) })
	case t.u16 != nil:
		clear(t.u16)
	case t.i32 != nil:
		clear(t.i32)
	}
}

// AddScaled computes dst += alpha·x.
func (b *Backend) AddScaled(dst, x compute.Tensor, alpha float32) {
	d := must(dst, compute.F32, "AddScaled dst").f32
	s := must(x, compute.F32, "AddScaled x").f32
	if len(d) != len(s) {
		shapePanic("AddScaled", "lengths %d, %d", len(d), len(s))
	}
	b.pool.For(len(d), 1<<15, func(lo, hi int) { kernels.Axpy(alpha, s[lo:hi], d[lo:hi]) })
}
