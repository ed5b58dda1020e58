package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// eachKernels runs f once per kernel set this machine supports, with that
// set active. Tests that use it must not run in parallel with each other.
func eachKernels(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	for _, name := range AvailableKernels() {
		t.Run(name, func(t *testing.T) {
			prev := Kernels()
			if err := SetKernels(name); err != nil {
				t.Fatal(err)
			}
			defer SetKernels(prev)
			f(t)
		})
	}
}

// u32 is the unit roundoff of float32, 2⁻²⁴.
const u32 = 1.0 / (1 << 24)

// dotBound is the tolerance for a float32 dot product of k terms against the
// exact (float64) value: whatever the order of summation and whether or not
// products are fused, |error| ≤ γ_k·Σ|a_p·b_p| with γ_k ≈ k·u (Higham,
// Accuracy and Stability of Numerical Algorithms, §3.1). The blocked kernels
// add a few roundings on top (alpha, beta, one per kc block, the k tail), so
// allow 2·(k+8)·u. A wrong element — a product dropped or doubled, a stale
// value — is off by about Σ|a·b|/k or more, far outside this bound for the k
// the tests use.
func dotBound(k int, absSum float64) float64 {
	return 2*float64(k+8)*u32*absSum + 1e-30
}

func randF32(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.Float64()*2 - 1)
	}
	return x
}

func randBF16(r *rand.Rand, n int) []uint16 {
	x := make([]uint16, n)
	for i := range x {
		x[i] = F32ToBF16One(float32(r.Float64()*2 - 1))
	}
	return x
}

func widenBF16(h []uint16) []float32 {
	f := make([]float32, len(h))
	for i, v := range h {
		f[i] = math.Float32frombits(uint32(v) << 16)
	}
	return f
}

const sentinel = float32(12345.5)

// refGemm returns the exact result of C = alpha·op(A)·op(B) + beta·C for
// every element and its error bound.
func refGemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) (want, bound []float64) {
	// op(A) by rows and op(B) by columns, in float64, so that the inner
	// loop runs over contiguous memory.
	ar := make([]float64, m*k)
	bc := make([]float64, n*k)
	for i := 0; i < m; i++ {
		for p := 0; p < k; p++ {
			if transA {
				ar[i*k+p] = float64(a[p*lda+i])
			} else {
				ar[i*k+p] = float64(a[i*lda+p])
			}
		}
	}
	for j := 0; j < n; j++ {
		for p := 0; p < k; p++ {
			if transB {
				bc[j*k+p] = float64(b[j*ldb+p])
			} else {
				bc[j*k+p] = float64(b[p*ldb+j])
			}
		}
	}
	want = make([]float64, m*n)
	bound = make([]float64, m*n)
	for i := 0; i < m; i++ {
		x := ar[i*k : i*k+k]
		for j := 0; j < n; j++ {
			y := bc[j*k : j*k+k]
			var s, abs float64
			for p, v := range x {
				s += v * y[p]
				abs += math.Abs(v * y[p])
			}
			w := float64(alpha) * s
			abs *= math.Abs(float64(alpha))
			if beta != 0 {
				w += float64(beta) * float64(c[i*ldc+j])
				abs += math.Abs(float64(beta) * float64(c[i*ldc+j]))
			}
			want[i*n+j] = w
			bound[i*n+j] = dotBound(k, abs)
		}
	}
	return want, bound
}

// checkC compares C with the reference and checks that the padding between
// rows (columns n..ldc) still holds the sentinel.
func checkC(t *testing.T, what string, c []float32, m, n, ldc int, want, bound []float64) {
	t.Helper()
	bad := 0
	for i := 0; i < m; i++ {
		for j := 0; j < ldc && i*ldc+j < len(c); j++ {
			got := c[i*ldc+j]
			if j >= n {
				if got != sentinel {
					t.Errorf("%s: padding C[%d,%d] overwritten with %v", what, i, j, got)
					return
				}
				continue
			}
			w, b := want[i*n+j], bound[i*n+j]
			if math.IsNaN(float64(got)) || math.Abs(float64(got)-w) > b {
				if bad < 3 {
					t.Errorf("%s: C[%d,%d] = %v, want %v (±%.3g)", what, i, j, got, w, b)
				}
				bad++
			}
		}
	}
	if bad > 3 {
		t.Errorf("%s: %d wrong elements in all", what, bad)
	}
}

// newC returns an m×n matrix with row stride ldc whose elements are random,
// or NaN when nan is set, and whose padding holds the sentinel.
func newC(r *rand.Rand, m, n, ldc int, nan bool) []float32 {
	if m == 0 {
		return nil
	}
	c := make([]float32, (m-1)*ldc+n)
	for i := range c {
		switch {
		case i%ldc >= n:
			c[i] = sentinel
		case nan:
			c[i] = float32(math.NaN())
		default:
			c[i] = float32(r.Float64()*2 - 1)
		}
	}
	return c
}
