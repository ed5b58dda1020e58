package cpu

import (
	"math"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu/kernels"
)

// Gemma's GELU-gated MLP (compute.Gemma, compute.GemmaTrainer). GELU's
// tanh approximation is written through the logistic function,
//
//	gelu(g) = 0.5·g·(1 + tanh(u)) = g·σ(2u),  u = √(2/π)·(g + 0.044715·g³),
//
// so that one exp per value, from the kernels' vectorised ExpSub, gives
// it, as SiLU's is computed; the rest is a plain loop (the MLP's products
// dominate a step, not its activation).

const (
	geluC  = 0.7978845608028654 // √(2/π)
	geluC3 = 0.044715
	// geluChunk values share one scratch buffer of exponentials.
	geluChunk = 1024
)

// geluZ64 is z = −2u(g), whose exp gives σ(2u) = 1/(1 + exp(z)).
func geluZ64(x float32) float64 {
	g := float64(x)
	return -2 * geluC * (g + geluC3*g*g*g)
}

// geluZ writes z = −2u(g) for each g, rounded to float32, for ExpSub.
func geluZ(z, g []float32) {
	for i, x := range g {
		z[i] = float32(geluZ64(x))
	}
}

// geluExp is exp(z) from e = ExpSub's exp(float32(z)): corrected for z's
// rounding to float32 (exp(z) = e·exp(z − z₃₂) ≈ e·(1 + z − z₃₂)), which
// would otherwise cost up to 2e-6 of relative error where |z| is large.
func geluExp(e float32, x float32) float64 {
	z := geluZ64(x)
	return float64(e) * (1 + (z - float64(float32(z))))
}

// GELUMul computes dst = gelu_tanh(gate)·up.
func (b *Backend) GELUMul(dst, gate, up compute.Tensor) {
	d := must(dst, compute.F32, "GELUMul dst").f32
	g := must(gate, compute.F32, "GELUMul gate").f32
	u := must(up, compute.F32, "GELUMul up").f32
	if len(g) != len(d) || len(u) != len(d) {
		shapePanic("GELUMul", "lengths %d, %d, %d", len(d), len(g), len(u))
	}
	b.pool.For(len(d), 1<<14, func(lo, hi int) {
		tmp := b.getScratch(geluChunk)
		defer b.putScratch(tmp)
		for c0 := lo; c0 < hi; c0 += geluChunk {
			c1 := min(c0+geluChunk, hi)
			e := (*tmp)[:c1-c0]
			geluZ(e, g[c0:c1])
			kernels.ExpSub(e, e, 0)
			for j, ej := range e {
				i := c0 + j
				d[i] = float32(float64(g[i]) / (1 + geluExp(ej, g[i])) * float64(u[i]))
			}
		}
	})
}

// GELUMulBackward: with s = σ(2u), gelu(g) = g·s and
//
//	gelu'(g) = s + g·s·(1−s)·2u'(g),  u'(g) = √(2/π)·(1 + 3·0.044715·g²),
//
//	dGate = dy·up·gelu'(g),  dUp = dy·gelu(g).
func (b *Backend) GELUMulBackward(dGate, dUp, dy, gate, up compute.Tensor) {
	dg := must(dGate, compute.F32, "GELUMulBackward dGate").f32
	du := must(dUp, compute.F32, "GELUMulBackward dUp").f32
	y := must(dy, compute.F32, "GELUMulBackward dy").f32
	ga := must(gate, compute.F32, "GELUMulBackward gate").f32
	u := must(up, compute.F32, "GELUMulBackward up").f32
	n := len(y)
	if len(dg) != n || len(du) != n || len(ga) != n || len(u) != n {
		shapePanic("GELUMulBackward", "lengths %d, %d, %d, %d, %d", len(dg), len(du), n, len(ga), len(u))
	}
	b.pool.For(n, 1<<14, func(lo, hi int) {
		tmp := b.getScratch(geluChunk)
		defer b.putScratch(tmp)
		for c0 := lo; c0 < hi; c0 += geluChunk {
			c1 := min(c0+geluChunk, hi)
			e := (*tmp)[:c1-c0]
			geluZ(e, ga[c0:c1])
			kernels.ExpSub(e, e, 0)
			for j, ej := range e {
				i := c0 + j
				s := 1 / (1 + geluExp(ej, ga[i]))
				x, ui, yi := float64(ga[i]), float64(u[i]), float64(y[i])
				d := s + x*s*(1-s)*2*geluC*(1+3*geluC3*x*x)
				if math.IsNaN(d) { // s(1−s)·x³ at an infinite x: the limit is 0 or 1
					d = s
				}
				du[i] = float32(yi * x * s)
				dg[i] = float32(yi * ui * d)
			}
		}
	})
}
