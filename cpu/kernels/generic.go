package kernels

import (
	"math"
)

// This file is the portable reference for every exported kernel: the
// "generic" kernel set, used on CPUs without AVX2 and by the tests as the
// definition the fast paths must agree with.

var genericImpls = impls{
	name:  KernelsGeneric,
	dot:   dotGeneric,
	axpy:  axpyGeneric,
	scale: scaleGeneric,
	max:   maxGeneric,
	exp:   expSubGeneric,
	silu:  siluMulGeneric,
	mul:   mulScaleGeneric,
	bf16:  bf16ToF32Generic,
	tobf:  f32ToBF16Generic,
}

// SetThreads sets how many goroutines the package-level kernels (the
// default pool) may spread over (at least 1).
func SetThreads(n int) { defaultPool.SetThreads(n) }

// Threads reports the default pool's thread count.
func Threads() int { return defaultPool.Threads() }

func (pl *Pool) sgemmGeneric(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	at := func(i, p int) float32 {
		if transA {
			return a[p*lda+i]
		}
		return a[i*lda+p]
	}
	bt := func(p, j int) float32 {
		if transB {
			return b[j*ldb+p]
		}
		return b[p*ldb+j]
	}
	pl.For(m, 1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			for j := 0; j < n; j++ {
				var s float32
				for p := 0; p < k; p++ {
					s += at(i, p) * bt(p, j)
				}
				if beta == 0 {
					c[i*ldc+j] = alpha * s
				} else {
					c[i*ldc+j] = alpha*s + beta*c[i*ldc+j]
				}
			}
		}
	})
}

func (pl *Pool) linearBF16Generic(c, a []float32, w []uint16, m, n, k int, accumulate bool) {
	pl.For(n, 16, func(lo, hi int) {
		row := make([]float32, k)
		for j := lo; j < hi; j++ {
			bf16ToF32Generic(row, w[j*k:(j+1)*k])
			for i := 0; i < m; i++ {
				s := dotGeneric(a[i*k:(i+1)*k], row)
				if accumulate {
					c[i*n+j] += s
				} else {
					c[i*n+j] = s
				}
			}
		}
	})
}

func bf16ToF32Generic(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = math.Float32frombits(uint32(v) << 16)
	}
}

func f32ToBF16Generic(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	for i, f := range src {
		dst[i] = F32ToBF16One(f)
	}
}

// F32ToBF16One narrows one float32 to BF16 (round to nearest even).
func F32ToBF16One(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep it quiet and NaN
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// F16ToF32 widens IEEE half-precision values to float32 (exact).
func F16ToF32(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	for i, h := range src {
		dst[i] = F16ToF32One(h)
	}
}

// F16ToF32One widens one IEEE half to float32.
func F16ToF32One(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: normalise
		e := uint32(127 - 15 + 1)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		mant &= 0x3ff
		return math.Float32frombits(sign | e<<23 | mant<<13)
	case exp == 0x1f:
		return math.Float32frombits(sign | 0xff<<23 | mant<<13)
	default:
		return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
	}
}

func dotGeneric(x, y []float32) float32 {
	y = y[:len(x)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += x[i] * y[i]
		s1 += x[i+1] * y[i+1]
		s2 += x[i+2] * y[i+2]
		s3 += x[i+3] * y[i+3]
	}
	for ; i < len(x); i++ {
		s0 += x[i] * y[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func axpyGeneric(alpha float32, x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += alpha * v
	}
}

func scaleGeneric(alpha float32, x []float32) {
	for i := range x {
		x[i] *= alpha
	}
}

func maxGeneric(x []float32) float32 {
	m := x[0]
	for _, v := range x[1:] {
		if v > m {
			m = v
		}
	}
	return m
}

func expSubGeneric(dst, src []float32, shift float32) float32 {
	dst = dst[:len(src)]
	var s float32
	for i, v := range src {
		e := float32(math.Exp(float64(v - shift)))
		dst[i] = e
		s += e
	}
	return s
}

func siluMulGeneric(dst, gate, up []float32) {
	up = up[:len(gate)]
	dst = dst[:len(gate)]
	for i, g := range gate {
		dst[i] = g / (1 + float32(math.Exp(float64(-g)))) * up[i]
	}
}

func mulScaleGeneric(dst, x, w []float32, s float32) {
	w = w[:len(x)]
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = v * s * w[i]
	}
}
