package kernels

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
)

// This file is the portable reference for every exported kernel. The fast
// paths live beside it and must agree with it (tests compare them).

var threads atomic.Int32

func init() { threads.Store(int32(runtime.GOMAXPROCS(0))) }

// SetThreads sets how many goroutines a kernel may spread over (at least 1).
func SetThreads(n int) {
	if n < 1 {
		n = 1
	}
	threads.Store(int32(n))
}

// Threads reports the current thread count used by kernels.
func Threads() int { return int(threads.Load()) }

// ParallelFor splits [0,n) into contiguous chunks of at least grain items and
// runs fn on them over up to Threads() goroutines, returning when all are done.
func ParallelFor(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if grain < 1 {
		grain = 1
	}
	t := Threads()
	chunks := (n + grain - 1) / grain
	if chunks < t {
		t = chunks
	}
	if t <= 1 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	per := (n + t - 1) / t
	for lo := 0; lo < n; lo += per {
		hi := min(lo+per, n)
		if hi == n {
			fn(lo, hi)
			break
		}
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			fn(lo, hi)
		}(lo, hi)
	}
	wg.Wait()
}

// Sgemm computes C = alpha·op(A)·op(B) + beta·C for row-major float32
// matrices, where op(X) is X or Xᵀ. op(A) is m×k, op(B) is k×n, C is m×n;
// lda, ldb, ldc are the row strides of A, B and C as stored. With beta == 0,
// C is overwritten (NaNs in C do not propagate).
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	sgemmGeneric(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

func sgemmGeneric(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
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
	ParallelFor(m, 1, func(lo, hi int) {
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

// LinearF32 computes C[m,n] = A[m,k]·W[n,k]ᵀ, adding into C when accumulate
// is set. It is the forward product of a linear layer with float32 weights.
func LinearF32(c, a, w []float32, m, n, k int, accumulate bool) {
	beta := float32(0)
	if accumulate {
		beta = 1
	}
	Sgemm(false, true, m, n, k, 1, a, k, w, k, beta, c, n)
}

// LinearBF16 is LinearF32 with W stored as BF16 (the upper 16 bits of a
// float32). The products and sums are computed in float32.
func LinearBF16(c, a []float32, w []uint16, m, n, k int, accumulate bool) {
	ParallelFor(n, 16, func(lo, hi int) {
		row := make([]float32, k)
		for j := lo; j < hi; j++ {
			BF16ToF32(row, w[j*k:(j+1)*k])
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

// BF16ToF32 widens BF16 values to float32 (exact).
func BF16ToF32(dst []float32, src []uint16) {
	_ = dst[len(src)-1]
	for i, v := range src {
		dst[i] = math.Float32frombits(uint32(v) << 16)
	}
}

// F32ToBF16 narrows float32 to BF16 with round-to-nearest-even; NaNs stay NaN.
func F32ToBF16(dst []uint16, src []float32) {
	_ = dst[len(src)-1]
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
	_ = dst[len(src)-1]
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

// Dot returns Σ x[i]·y[i] over len(x) elements.
func Dot(x, y []float32) float32 { return dotGeneric(x, y) }

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

// Axpy computes y += alpha·x over len(x) elements.
func Axpy(alpha float32, x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += alpha * v
	}
}

// Scale computes x *= alpha.
func Scale(alpha float32, x []float32) {
	for i := range x {
		x[i] *= alpha
	}
}

// Max returns the largest element of a non-empty x.
func Max(x []float32) float32 {
	m := x[0]
	for _, v := range x[1:] {
		if v > m {
			m = v
		}
	}
	return m
}

// ExpSub computes dst[i] = exp(src[i] − shift) and returns their sum. It is
// the inner loop of softmax; dst and src may be the same slice.
func ExpSub(dst, src []float32, shift float32) float32 {
	dst = dst[:len(src)]
	var s float32
	for i, v := range src {
		e := float32(math.Exp(float64(v - shift)))
		dst[i] = e
		s += e
	}
	return s
}
