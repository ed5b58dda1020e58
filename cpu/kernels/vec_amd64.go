//go:build amd64 && !purego

package kernels

// Go wrappers of the vector kernels in vec_amd64.s. The AVX-512 kernels take
// any length; the AVX2 kernels a multiple of 8, the rest done here.

func dotAVX512(x, y []float32) float32 {
	if len(x) == 0 {
		return 0
	}
	return dot512(&x[0], &y[0], len(x))
}

func axpyAVX512(alpha float32, x, y []float32) {
	if len(x) > 0 {
		axpy512(alpha, &x[0], &y[0], len(x))
	}
}

func scaleAVX512(alpha float32, x []float32) {
	if len(x) > 0 {
		scale512(alpha, &x[0], len(x))
	}
}

func maxAVX512(x []float32) float32 { return max512(&x[0], len(x)) }

func expSubAVX512(dst, src []float32, shift float32) float32 {
	if len(src) == 0 {
		return 0
	}
	return expSub512(&dst[0], &src[0], len(src), shift)
}

func siluMulAVX512(dst, gate, up []float32) {
	if len(gate) > 0 {
		siluMul512(&dst[0], &gate[0], &up[0], len(gate))
	}
}

func mulScaleAVX512(dst, x, w []float32, s float32) {
	if len(x) > 0 {
		mulScale512(&dst[0], &x[0], &w[0], len(x), s)
	}
}

func bf16ToF32AVX512(dst []float32, src []uint16) { bf16ToF32x512(&dst[0], &src[0], len(src)) }

func f32ToBF16AVX512(dst []uint16, src []float32) { f32ToBF16x512(&dst[0], &src[0], len(src)) }

func dotAVX2(x, y []float32) float32 {
	n := len(x) &^ 7
	var s float32
	if n > 0 {
		s = dot256(&x[0], &y[0], n)
	}
	for i := n; i < len(x); i++ {
		s += x[i] * y[i]
	}
	return s
}

func axpyAVX2(alpha float32, x, y []float32) {
	n := len(x) &^ 7
	if n > 0 {
		axpy256(alpha, &x[0], &y[0], n)
	}
	axpyGeneric(alpha, x[n:], y[n:])
}

func scaleAVX2(alpha float32, x []float32) {
	n := len(x) &^ 7
	if n > 0 {
		scale256(alpha, &x[0], n)
	}
	scaleGeneric(alpha, x[n:])
}

func maxAVX2(x []float32) float32 {
	n := len(x) &^ 7
	if n == 0 {
		return maxGeneric(x)
	}
	m := max256(&x[0], n)
	for _, v := range x[n:] {
		if v > m {
			m = v
		}
	}
	return m
}

func expSubAVX2(dst, src []float32, shift float32) float32 {
	n := len(src) &^ 7
	var s float32
	if n > 0 {
		s = expSub256(&dst[0], &src[0], n, shift)
	}
	return s + expSubGeneric(dst[n:], src[n:], shift)
}

func siluMulAVX2(dst, gate, up []float32) {
	n := len(gate) &^ 7
	if n > 0 {
		siluMul256(&dst[0], &gate[0], &up[0], n)
	}
	siluMulGeneric(dst[n:], gate[n:], up[n:])
}

func mulScaleAVX2(dst, x, w []float32, s float32) {
	n := len(x) &^ 7
	if n > 0 {
		mulScale256(&dst[0], &x[0], &w[0], n, s)
	}
	mulScaleGeneric(dst[n:], x[n:], w[n:], s)
}

func bf16ToF32AVX2(dst []float32, src []uint16) {
	n := len(src) &^ 7
	if n > 0 {
		bf16ToF32x256(&dst[0], &src[0], n)
	}
	bf16ToF32Generic(dst[n:], src[n:])
}

func f32ToBF16AVX2(dst []uint16, src []float32) {
	n := len(src) &^ 7
	if n > 0 {
		f32ToBF16x256(&dst[0], &src[0], n)
	}
	f32ToBF16Generic(dst[n:], src[n:])
}

//go:noescape
func dot512(x, y *float32, n int) float32

//go:noescape
func axpy512(alpha float32, x, y *float32, n int)

//go:noescape
func scale512(alpha float32, x *float32, n int)

//go:noescape
func max512(x *float32, n int) float32

//go:noescape
func expSub512(dst, src *float32, n int, shift float32) float32

//go:noescape
func siluMul512(dst, gate, up *float32, n int)

//go:noescape
func mulScale512(dst, x, w *float32, n int, s float32)

//go:noescape
func bf16ToF32x512(dst *float32, src *uint16, n int)

//go:noescape
func f32ToBF16x512(dst *uint16, src *float32, n int)

//go:noescape
func dot256(x, y *float32, n int) float32

//go:noescape
func axpy256(alpha float32, x, y *float32, n int)

//go:noescape
func scale256(alpha float32, x *float32, n int)

//go:noescape
func max256(x *float32, n int) float32

//go:noescape
func expSub256(dst, src *float32, n int, shift float32) float32

//go:noescape
func siluMul256(dst, gate, up *float32, n int)

//go:noescape
func mulScale256(dst, x, w *float32, n int, s float32)

//go:noescape
func bf16ToF32x256(dst *float32, src *uint16, n int)

//go:noescape
func f32ToBF16x256(dst *uint16, src *float32, n int)
