package computetest

import "math"

// The float64 reference of every op, written from the definitions in
// package compute, plainly and slowly: one loop per formula, no blocking,
// no threads, nothing shared with any backend. Inputs are float32 values
// widened exactly; every sum is taken in float64, so the reference is exact
// to about 1e-15 at the sizes the suite uses, and a backend's error is
// its own.

// widen returns v as float64s.
func widen(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// bf16Bits rounds x to BF16 (the upper 16 bits of a float32), to nearest,
// ties to even. A NaN stays a (quiet) NaN.
func bf16Bits(x float32) uint16 {
	b := math.Float32bits(x)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	lower := b & 0xffff
	upper := b >> 16
	if lower > 0x8000 || lower == 0x8000 && upper&1 == 1 {
		upper++ // carries into the exponent where it must (up to infinity)
	}
	return uint16(upper)
}

// bf16Value widens BF16 bits to float32 (exact).
func bf16Value(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// roundBF16 returns every value of v rounded to BF16 and widened back.
func roundBF16(v []float32) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = bf16Value(bf16Bits(x))
	}
	return out
}

// refEmbedding is dst[i] = table[ids[i]] for a table of cols columns.
func refEmbedding(table []float64, cols int, ids []int32) []float64 {
	out := make([]float64, 0, len(ids)*cols)
	for _, id := range ids {
		out = append(out, table[int(id)*cols:int(id+1)*cols]...)
	}
	return out
}

// refLinear is y[m,n] = x[m,k]·w[n,k]ᵀ + bias[n] (bias may be nil).
func refLinear(x, w, bias []float64, m, n, k int) []float64 {
	y := make([]float64, m*n)
	for i := range m {
		for j := range n {
			s := 0.0
			if bias != nil {
				s = bias[j]
			}
			for p := range k {
				s += x[i*k+p] * w[j*k+p]
			}
			y[i*n+j] = s
		}
	}
	return y
}

// refMatMul is alpha·op(a)·op(b) + beta·c, with a stored [ar, ac] and b
// [br, bc] row-major and op transposing when asked; c is [m, n].
func refMatMul(a, b, c []float64, m, n, k int, transA, transB bool, alpha, beta float64) []float64 {
	at := func(i, p int) float64 {
		if transA {
			return a[p*m+i] // a is [k, m]
		}
		return a[i*k+p]
	}
	bt := func(p, j int) float64 {
		if transB {
			return b[j*k+p] // b is [n, k]
		}
		return b[p*n+j]
	}
	out := make([]float64, m*n)
	for i := range m {
		for j := range n {
			s := 0.0
			for p := range k {
				s += at(i, p) * bt(p, j)
			}
			out[i*n+j] = alpha * s
			if beta != 0 {
				out[i*n+j] += beta * c[i*n+j]
			}
		}
	}
	return out
}

// refRMSNorm normalises every group of len(w) values:
// y = x / sqrt(mean(x²) + eps) · w.
func refRMSNorm(x, w []float64, eps float64) []float64 {
	g := len(w)
	y := make([]float64, len(x))
	for s := 0; s < len(x); s += g {
		ss := 0.0
		for _, v := range x[s : s+g] {
			ss += v * v
		}
		r := 1 / math.Sqrt(ss/float64(g)+eps)
		for j := range g {
			y[s+j] = x[s+j] * r * w[j]
		}
	}
	return y
}

// refRMSNormBackward is the gradient of refRMSNorm: with r = (mean(x²) +
// eps)^−½ per group of n,
//
//	dx_j = r·w_j·dy_j − x_j·r³·Σ_l(dy_l·w_l·x_l)/n,  dw_j = Σ_groups dy_j·x_j·r
func refRMSNormBackward(dy, x, w []float64, eps float64) (dx, dw []float64) {
	n := len(w)
	dx, dw = make([]float64, len(x)), make([]float64, n)
	for s := 0; s < len(x); s += n {
		ss := 0.0
		for _, v := range x[s : s+n] {
			ss += v * v
		}
		r := 1 / math.Sqrt(ss/float64(n)+eps)
		dot := 0.0
		for j := range n {
			dot += dy[s+j] * w[j] * x[s+j]
		}
		for j := range n {
			dx[s+j] = r*w[j]*dy[s+j] - x[s+j]*r*r*r*dot/float64(n)
			dw[j] += dy[s+j] * x[s+j] * r
		}
	}
	return dx, dw
}

// refRoPE rotates each head of each row of x (rows of cols values) by the
// angles of its position, pairing element j with j+headDim/2 ("rotate
// half"). sign −1 rotates by the negated angles: the inverse rotation,
// which is also its transpose and so RoPE's backward.
func refRoPE(x []float64, cols int, pos []int32, cos, sin []float64, headDim int, sign float64) []float64 {
	half := headDim / 2
	y := make([]float64, len(x))
	for i, p := range pos {
		for h := 0; h < cols; h += headDim {
			o := i*cols + h
			for j := range half {
				c, s := cos[int(p)*half+j], sign*sin[int(p)*half+j]
				a, b := x[o+j], x[o+j+half]
				y[o+j] = a*c - b*s
				y[o+j+half] = b*c + a*s
			}
		}
	}
	return y
}

// refSiLUMul is silu(gate)·up = gate·σ(gate)·up.
func refSiLUMul(gate, up []float64) []float64 {
	y := make([]float64, len(gate))
	for i, g := range gate {
		y[i] = g / (1 + math.Exp(-g)) * up[i]
	}
	return y
}

// refSiLUMulBackward: with s = σ(g), dGate = dy·up·s·(1 + g·(1−s)) and
// dUp = dy·g·s.
func refSiLUMulBackward(dy, gate, up []float64) (dGate, dUp []float64) {
	dGate, dUp = make([]float64, len(dy)), make([]float64, len(dy))
	for i, g := range gate {
		s := 1 / (1 + math.Exp(-g))
		dGate[i] = dy[i] * up[i] * s * (1 + g*(1-s))
		dUp[i] = dy[i] * g * s
	}
	return dGate, dUp
}

// refGELUMul is gelu(gate)·up with GELU's tanh approximation,
// 0.5·g·(1 + tanh(√(2/π)·(g + 0.044715·g³))).
func refGELUMul(gate, up []float64) []float64 {
	y := make([]float64, len(gate))
	for i, g := range gate {
		y[i] = 0.5 * g * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(g+0.044715*g*g*g))) * up[i]
	}
	return y
}

// refGELUMulBackward: with t = tanh(√(2/π)·(g + 0.044715·g³)),
// gelu'(g) = 0.5·(1 + t) + 0.5·g·(1 − t²)·√(2/π)·(1 + 3·0.044715·g²);
// dGate = dy·up·gelu'(g), dUp = dy·gelu(g).
func refGELUMulBackward(dy, gate, up []float64) (dGate, dUp []float64) {
	dGate, dUp = make([]float64, len(dy)), make([]float64, len(dy))
	c := math.Sqrt(2 / math.Pi)
	for i, g := range gate {
		t := math.Tanh(c * (g + 0.044715*g*g*g))
		d := 0.5*(1+t) + 0.5*g*(1-t*t)*c*(1+3*0.044715*g*g)
		dGate[i] = dy[i] * up[i] * d
		dUp[i] = dy[i] * 0.5 * g * (1 + t)
	}
	return dGate, dUp
}

// refLSE is log Σ exp(row), computed stably.
func refLSE(row []float64) float64 {
	m := math.Inf(-1)
	for _, v := range row {
		m = math.Max(m, v)
	}
	if math.IsInf(m, -1) {
		return m
	}
	s := 0.0
	for _, v := range row {
		s += math.Exp(v - m)
	}
	return m + math.Log(s)
}

// refLogSoftmax is x − log Σ exp(x) for every row of cols values.
func refLogSoftmax(x []float64, cols int) []float64 {
	y := make([]float64, len(x))
	for r := 0; r < len(x); r += cols {
		l := refLSE(x[r : r+cols])
		for j := range cols {
			y[r+j] = x[r+j] - l
		}
	}
	return y
}

// refLogProbs returns per row of logits the target's log-probability, the
// entropy −Σ p·log p of the softmax, and the log normaliser.
func refLogProbs(x []float64, cols int, targets []int32) (logp, entropy, lse []float64) {
	rows := len(targets)
	logp, entropy, lse = make([]float64, rows), make([]float64, rows), make([]float64, rows)
	for i := range rows {
		row := x[i*cols : (i+1)*cols]
		l := refLSE(row)
		lse[i] = l
		logp[i] = row[targets[i]] - l
		for _, v := range row {
			entropy[i] -= math.Exp(v-l) * (v - l)
		}
	}
	return logp, entropy, lse
}

// refLogProbsBackward is dLogits = dLogp·(onehot(target) − softmax) per row.
func refLogProbsBackward(x []float64, cols int, targets []int32, dLogp []float64) []float64 {
	d := make([]float64, len(x))
	for i, t := range targets {
		row := x[i*cols : (i+1)*cols]
		l := refLSE(row)
		for j, v := range row {
			d[i*cols+j] = -dLogp[i] * math.Exp(v-l)
		}
		d[i*cols+int(t)] += dLogp[i]
	}
	return d
}

// attnSeq is one sequence of an attention reference: query rows [q0,
// q0+n) of q, whose query i sits at position ctx−n+i, over keys and values
// at positions 0..ctx−1 (ctx rows of KVHeads·HeadDim each).
type attnSeq struct {
	q0, n, ctx int
	k, v       []float64
}

// attnGeom is the head geometry of an attention reference.
type attnGeom struct {
	heads, kvHeads, hd int
	scale              float64
	window             int     // sliding window (0: none): query at p sees keys from p−window+1
	softcap            float64 // scores capped as softcap·tanh(s/softcap) (0: none)
}

// capScore is the score s after g's soft-cap, and its derivative.
func (g attnGeom) capScore(s float64) (capped, deriv float64) {
	if g.softcap <= 0 {
		return s, 1
	}
	t := math.Tanh(s / g.softcap)
	return g.softcap * t, 1 - t*t
}

// lo is the first key the query at position pos sees.
func (g attnGeom) lo(pos int) int {
	if g.window <= 0 {
		return 0
	}
	return max(0, pos-g.window+1)
}

// refAttention is causal grouped-query attention: for every query row and
// head h, the softmax over positions 0..own (g.lo(own)..own with a
// sliding window) of scale·q·k (key/value head h/(heads/kvHeads))
// weighting the values. It returns the output rows
// (rows × heads·hd) and the log of each softmax denominator (rows × heads).
func refAttention(q []float64, rows int, seqs []attnSeq, g attnGeom) (out, lse []float64) {
	qdim, kvdim, group := g.heads*g.hd, g.kvHeads*g.hd, g.heads/g.kvHeads
	out, lse = make([]float64, rows*qdim), make([]float64, rows*g.heads)
	for _, s := range seqs {
		for i := range s.n {
			r, pos := s.q0+i, s.ctx-s.n+i
			for h := range g.heads {
				kh := h / group
				qv := q[r*qdim+h*g.hd : r*qdim+(h+1)*g.hd]
				lo := g.lo(pos)
				sc := make([]float64, pos+1-lo)
				for i := range sc {
					p := lo + i
					kv := s.k[p*kvdim+kh*g.hd : p*kvdim+(kh+1)*g.hd]
					d := 0.0
					for j := range qv {
						d += qv[j] * kv[j]
					}
					sc[i], _ = g.capScore(d * g.scale)
				}
				l := refLSE(sc)
				lse[r*g.heads+h] = l
				o := out[r*qdim+h*g.hd : r*qdim+(h+1)*g.hd]
				for i, v := range sc {
					p := lo + i
					w := math.Exp(v - l)
					vv := s.v[p*kvdim+kh*g.hd : p*kvdim+(kh+1)*g.hd]
					for j := range o {
						o[j] += w * vv[j]
					}
				}
			}
		}
	}
	return out, lse
}

// refDenseAttentionBackward is the gradient of refAttention for dense
// sequences (each sequence's keys and values are its own rows, ctx = n):
// with P the softmax weights of a query row, dP = dO·vᵀ and
// dS = P∘(dP − Σ P∘dP),
//
//	dq = scale·dS·k,  dk += scale·dSᵀ·q,  dv += Pᵀ·dO
//
// q, dOut are rows × heads·hd; k, v, dk, dv rows × kvHeads·hd.
func refDenseAttentionBackward(dOut, q, k, v []float64, starts []int32, g attnGeom) (dq, dk, dv []float64) {
	qdim, kvdim, group := g.heads*g.hd, g.kvHeads*g.hd, g.heads/g.kvHeads
	dq, dk, dv = make([]float64, len(q)), make([]float64, len(k)), make([]float64, len(v))
	for s := 0; s+1 < len(starts); s++ {
		r0, r1 := int(starts[s]), int(starts[s+1])
		for i := r0; i < r1; i++ {
			for h := range g.heads {
				kh := h / group
				qv := q[i*qdim+h*g.hd : i*qdim+(h+1)*g.hd]
				do := dOut[i*qdim+h*g.hd : i*qdim+(h+1)*g.hd]
				keyAt := func(j int) []float64 { return k[j*kvdim+kh*g.hd : j*kvdim+(kh+1)*g.hd] }
				valAt := func(j int) []float64 { return v[j*kvdim+kh*g.hd : j*kvdim+(kh+1)*g.hd] }
				first := r0 + g.lo(i-r0) // the first key row the query sees
				n := i - first + 1
				p, dp, dcap := make([]float64, n), make([]float64, n), make([]float64, n)
				for j := range n {
					for e, x := range qv {
						p[j] += x * keyAt(first + j)[e]
					}
					p[j], dcap[j] = g.capScore(p[j] * g.scale)
				}
				l := refLSE(p)
				sum := 0.0
				for j := range n {
					p[j] = math.Exp(p[j] - l)
					for e, x := range do {
						dp[j] += x * valAt(first + j)[e]
					}
					sum += p[j] * dp[j]
				}
				for j := range n {
					ds := p[j] * (dp[j] - sum) * dcap[j]
					r := first + j
					for e := range g.hd {
						dq[i*qdim+h*g.hd+e] += g.scale * ds * keyAt(r)[e]
						dk[r*kvdim+kh*g.hd+e] += g.scale * ds * qv[e]
						dv[r*kvdim+kh*g.hd+e] += p[j] * do[e]
					}
				}
			}
		}
	}
	return dq, dk, dv
}

// denseSeqs returns the attnSeqs of dense attention over q, k, v rows.
func denseSeqs(k, v []float64, starts []int32, kvdim int) []attnSeq {
	var seqs []attnSeq
	for s := 0; s+1 < len(starts); s++ {
		r0, r1 := int(starts[s]), int(starts[s+1])
		seqs = append(seqs, attnSeq{q0: r0, n: r1 - r0, ctx: r1 - r0, k: k[r0*kvdim : r1*kvdim], v: v[r0*kvdim : r1*kvdim]})
	}
	return seqs
}

// refAdamW is one AdamW step in float64 (compute.AdamW's formula),
// updating p, m and v in place.
func refAdamW(p, g, m, v []float64, lr, beta1, beta2, eps, wd, gradScale float64, step int) {
	if gradScale == 0 {
		gradScale = 1
	}
	for i := range p {
		gi := g[i] * gradScale
		m[i] = beta1*m[i] + (1-beta1)*gi
		v[i] = beta2*v[i] + (1-beta2)*gi*gi
		mh := m[i] / (1 - math.Pow(beta1, float64(step)))
		vh := v[i] / (1 - math.Pow(beta2, float64(step)))
		p[i] = p[i]*(1-lr*wd) - lr*mh/(math.Sqrt(vh)+eps)
	}
}

// numGrad returns ∂(Σ g·f())/∂x by central differences in float64, for
// the elements of x named by at; f reads x.
func numGrad(f func() []float64, g, x []float64, at []int) []float64 {
	dot := func(y []float64) float64 {
		s := 0.0
		for i := range y {
			s += g[i] * y[i]
		}
		return s
	}
	out := make([]float64, len(at))
	for n, i := range at {
		old := x[i]
		h := 1e-6 * math.Max(1, math.Abs(old))
		x[i] = old + h
		lp := dot(f())
		x[i] = old - h
		lm := dot(f())
		x[i] = old
		out[n] = (lp - lm) / (2 * h)
	}
	return out
}
