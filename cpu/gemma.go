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

// geluZ writes z = −2u(g) for each g, rounded to float32, for ExpSub, and
// into dz what the rounding lost (z − z₃₂): exp(z) = exp(z₃₂)·exp(dz) ≈
// exp(z₃₂)·(1 + dz), which keeps the relative error of σ(2u) near
// ExpSub's own where |z| is large (up to 2e-6 without it).
func geluZ(z, dz, g []float32) {
	dz = dz[:len(z)]
	g = g[:len(z)]
	for i, x := range g {
		x64 := float64(x)
		z64 := -2 * geluC * (x64 + geluC3*x64*x64*x64)
		z[i] = float32(z64)
		dz[i] = float32(z64 - float64(z[i]))
	}
}

// GELUMul computes dst = gelu_tanh(gate)·up.
func (b *Backend) GELUMul(dst, gate, up compute.Tensor) {
	d := must(dst, compute.F32, "GELUMul dst").f32
	g := must(gate, compute.F32, "GELUMul gate").f32
	u := must(up, compute.F32, "GELUMul up").f32
	if len(g) != len(d) || len(u) != len(d) {
		shapePanic("GELUMul", "lengths %d, %d, %d", len(d), len(g), len(u))
	}
	b.pool.For(len(d), 1<<11, func(lo, hi int) {
		tmp := b.getScratch(2 * geluChunk)
		defer b.putScratch(tmp)
		for c0 := lo; c0 < hi; c0 += geluChunk {
			c1 := min(c0+geluChunk, hi)
			e, dz := (*tmp)[:c1-c0], (*tmp)[geluChunk:geluChunk+c1-c0]
			gs, us, ds := g[c0:c1], u[c0:c1], d[c0:c1]
			geluZ(e, dz, gs)
			kernels.ExpSub(e, e, 0)
			dz, gs, us, ds = dz[:len(e)], gs[:len(e)], us[:len(e)], ds[:len(e)]
			for j, ej := range e {
				ds[j] = gs[j] / (1 + ej*(1+dz[j])) * us[j]
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
		tmp := b.getScratch(2 * geluChunk)
		defer b.putScratch(tmp)
		for c0 := lo; c0 < hi; c0 += geluChunk {
			c1 := min(c0+geluChunk, hi)
			e, dz := (*tmp)[:c1-c0], (*tmp)[geluChunk:geluChunk+c1-c0]
			geluZ(e, dz, ga[c0:c1])
			kernels.ExpSub(e, e, 0)
			for j, ej := range e {
				i := c0 + j
				s := 1 / (1 + float64(ej)*(1+float64(dz[j])))
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

// Softcap replaces every x of an F32 tensor with cap·tanh(x/cap) (Gemma 2's
// final_logit_softcapping), in float64.
func (b *Backend) Softcap(x compute.Tensor, cap float32) {
	v := must(x, compute.F32, "Softcap").f32
	if !(cap > 0) || math.IsInf(float64(cap), 0) {
		shapePanic("Softcap", "cap %g", cap)
	}
	b.pool.For(len(v), 1<<13, func(lo, hi int) { softcapRow(v[lo:hi], cap) })
}

// SoftcapBackward multiplies dx by 1 − (y/cap)², the derivative of
// cap·tanh(x/cap) where it is y.
func (b *Backend) SoftcapBackward(dx, y compute.Tensor, cap float32) {
	d := must(dx, compute.F32, "SoftcapBackward dx").f32
	v := must(y, compute.F32, "SoftcapBackward y").f32
	if len(d) != len(v) || !(cap > 0) || math.IsInf(float64(cap), 0) {
		shapePanic("SoftcapBackward", "lengths %d and %d, cap %g", len(d), len(v), cap)
	}
	b.pool.For(len(d), 1<<14, func(lo, hi int) {
		inv := 1 / float64(cap)
		for i := lo; i < hi; i++ {
			t := float64(v[i]) * inv
			d[i] = float32(float64(d[i]) * (1 - t*t))
		}
	})
}
