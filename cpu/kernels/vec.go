package kernels

import "math"

// Vector kernels. Each dispatches to the active kernel set; the pure-Go
// definitions are in generic.go.

// BF16ToF32 widens BF16 values to float32 (exact).
func BF16ToF32(dst []float32, src []uint16) {
	if len(src) == 0 {
		return
	}
	_ = dst[len(src)-1]
	active.Load().bf16(dst, src)
}

// F32ToBF16 narrows float32 to BF16 with round-to-nearest-even; NaNs stay NaN.
// Each element equals F32ToBF16One of it.
func F32ToBF16(dst []uint16, src []float32) {
	if len(src) == 0 {
		return
	}
	_ = dst[len(src)-1]
	active.Load().tobf(dst, src)
}

// Dot returns Σ x[i]·y[i] over len(x) elements.
func Dot(x, y []float32) float32 {
	_ = y[:len(x)]
	return active.Load().dot(x, y)
}

// Axpy computes y += alpha·x over len(x) elements.
func Axpy(alpha float32, x, y []float32) {
	_ = y[:len(x)]
	active.Load().axpy(alpha, x, y)
}

// Scale computes x *= alpha.
func Scale(alpha float32, x []float32) { active.Load().scale(alpha, x) }

// Max returns the largest element of a non-empty x. (Which element wins when
// x holds a NaN differs between kernel sets.)
func Max(x []float32) float32 {
	_ = x[0]
	return active.Load().max(x)
}

// ExpSub computes dst[i] = exp(src[i] − shift) and returns their sum. It is
// the inner loop of softmax; dst and src may be the same slice.
//
// The assembly paths evaluate exp with a polynomial: relative error below
// 2e-7 wherever the result is a normal float32; results below the smallest
// normal (src[i] − shift < −87.33) are 0, −Inf gives 0, overflow gives +Inf
// and NaN stays NaN.
func ExpSub(dst, src []float32, shift float32) float32 {
	_ = dst[:len(src)]
	return active.Load().exp(dst, src, shift)
}

// Softmax replaces x with softmax(x) = exp(x − max x) / Σ exp(x − max x).
// An empty x is left alone.
func Softmax(x []float32) {
	if len(x) == 0 {
		return
	}
	im := active.Load()
	s := im.exp(x, x, im.max(x))
	im.scale(1/s, x)
}

// SiLUMul computes dst[i] = silu(gate[i])·up[i], where silu(g) = g·σ(g) =
// g / (1 + exp(−g)): the gated activation of a SwiGLU feed-forward block.
// dst may alias gate or up.
func SiLUMul(dst, gate, up []float32) {
	_ = up[:len(gate)]
	_ = dst[:len(gate)]
	active.Load().silu(dst, gate, up)
}

// RMSNormRow computes dst[i] = x[i] · w[i] / sqrt(mean(x²) + eps), the RMS
// normalisation of one row (Llama, Qwen). dst may alias x.
func RMSNormRow(dst, x, w []float32, eps float32) {
	_ = w[:len(x)]
	_ = dst[:len(x)]
	if len(x) == 0 {
		return
	}
	im := active.Load()
	ss := im.dot(x, x)
	inv := float32(1 / math.Sqrt(float64(ss)/float64(len(x))+float64(eps)))
	im.mul(dst, x, w, inv)
}
