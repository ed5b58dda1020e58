package kernels

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

var awkwardDims = []int{1, 2, 3, 5, 7, 8, 13, 16, 17, 31, 33, 64, 65, 100, 129}

var alphaBetas = []struct{ alpha, beta float32 }{
	{1, 0},
	{1, 1},
	{0.5, -2},
	{-1.5, 0},
	{0, 0.5},
}

type gemmCase struct {
	transA, transB bool
	m, n, k        int
	alpha, beta    float32
	pad            int // extra elements per row of A, B and C
}

func (tc gemmCase) String() string {
	return fmt.Sprintf("tA=%v tB=%v m=%d n=%d k=%d alpha=%v beta=%v pad=%d", tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, tc.beta, tc.pad)
}

// runGemmCase runs one case on the active kernel set.
func runGemmCase(t *testing.T, r *rand.Rand, tc gemmCase) {
	t.Helper()
	runGemmCaseOn(t, r, tc, []string{Kernels()})
}

// runGemmCaseOn builds the operands of one case and its reference once and
// checks every named kernel set against it.
func runGemmCaseOn(t *testing.T, r *rand.Rand, tc gemmCase, sets []string) {
	t.Helper()
	ar, ac := tc.m, tc.k
	if tc.transA {
		ar, ac = ac, ar
	}
	br, bc := tc.k, tc.n
	if tc.transB {
		br, bc = bc, br
	}
	lda, ldb, ldc := ac+tc.pad, bc+tc.pad, tc.n+tc.pad
	a := randF32(r, max(0, (ar-1)*lda+ac))
	b := randF32(r, max(0, (br-1)*ldb+bc))
	c0 := newC(r, tc.m, tc.n, ldc, tc.beta == 0)
	want, bound := refGemm(tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, c0, ldc)
	prev := Kernels()
	defer SetKernels(prev)
	for _, set := range sets {
		if err := SetKernels(set); err != nil {
			t.Fatal(err)
		}
		c := append([]float32(nil), c0...)
		Sgemm(tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, c, ldc)
		checkC(t, set+": "+tc.String(), c, tc.m, tc.n, ldc, want, bound)
	}
}

// TestSgemmAwkward runs every (m, n, k) from awkwardDims on every kernel
// set, cycling through the transposes, alpha/beta pairs and row paddings.
func TestSgemmAwkward(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	sets := AvailableKernels()
	idx := 0
	for _, m := range awkwardDims {
		for _, n := range awkwardDims {
			for _, k := range awkwardDims {
				ab := alphaBetas[idx/4%len(alphaBetas)]
				runGemmCaseOn(t, r, gemmCase{
					transA: idx&1 != 0, transB: idx&2 != 0,
					m: m, n: n, k: k,
					alpha: ab.alpha, beta: ab.beta,
					pad: idx % 3 * 3,
				}, sets)
				idx++
			}
		}
	}
}

// TestSgemmAllLayouts runs every transpose and alpha/beta pair on a few
// shapes around the tile sizes, through the matrix-vector path too where
// the layout allows it.
func TestSgemmAllLayouts(t *testing.T) {
	dims := []struct{ m, n, k int }{
		{1, 1, 1}, {14, 32, 8}, {6, 16, 9}, {15, 33, 17}, {29, 65, 40}, {5, 100, 3}, {100, 5, 64}, {3, 9, 70}, {0, 5, 5}, {5, 0, 5}, {5, 5, 0},
	}
	eachKernels(t, func(t *testing.T) {
		forEachLinearPath(t, func(t *testing.T) {
			r := rand.New(rand.NewPCG(3, 4))
			for _, d := range dims {
				for tr := 0; tr < 4; tr++ {
					for _, ab := range alphaBetas {
						for _, pad := range []int{0, 5} {
							runGemmCase(t, r, gemmCase{tr&1 != 0, tr&2 != 0, d.m, d.n, d.k, ab.alpha, ab.beta, pad})
						}
					}
				}
			}
		})
	})
}

// TestSgemmBlocking shrinks the cache blocks so that moderate shapes cross
// every block boundary (several kc, mc and nc blocks, thread splits by rows
// and by columns), then runs with the real block sizes across kc.
func TestSgemmBlocking(t *testing.T) {
	eachKernels(t, func(t *testing.T) {
		g := active.Load().gemm
		if g == nil {
			t.Skip("no blocked GEMM in this set")
		}
		r := rand.New(rand.NewPCG(5, 6))
		shapes := []struct{ m, n, k int }{{50, 100, 70}, {200, 20, 45}, {3, 300, 33}, {97, 97, 97}}
		mc, kc, nc := g.mc, g.kc, g.nc
		g.mc, g.kc, g.nc = 2*g.mr, 16, 2*g.nr
		for _, s := range shapes {
			for tr := 0; tr < 4; tr++ {
				runGemmCase(t, r, gemmCase{tr&1 != 0, tr&2 != 0, s.m, s.n, s.k, 1, 0.5, 1})
			}
		}
		g.mc, g.kc, g.nc = mc, kc, nc
		for tr := 0; tr < 4; tr++ {
			runGemmCase(t, r, gemmCase{tr&1 != 0, tr&2 != 0, 40, 70, 2*kc + 30, 1, 1, 2})
		}
	})
}

func refLinear(m, n, k int, a, w []float32, c []float32, accumulate bool) (want, bound []float64) {
	beta := float32(0)
	if accumulate {
		beta = 1
	}
	return refGemm(false, true, m, n, k, 1, a, k, w, k, beta, c, n)
}

// forEachLinearPath runs f twice when the active set has the small-m paths
// (matrix-vector, and kernN for B not transposed): once with them taking
// every m up to 1000, once with them off (and the BF16 dot kernel too), so
// that the same shapes go through both them and the blocked product.
func forEachLinearPath(t *testing.T, f func(t *testing.T)) {
	im := active.Load()
	if im.gemv == nil || im.gemm == nil {
		f(t)
		return
	}
	oldV, oldN, oldDot := im.gemv.maxM, im.gemm.kernNMaxM, im.gemv.dot
	defer func() { im.gemv.maxM, im.gemm.kernNMaxM, im.gemv.dot = oldV, oldN, oldDot }()
	for _, p := range []struct {
		name string
		maxM int
	}{{"direct", 1000}, {"blocked", 0}} {
		im.gemv.maxM, im.gemm.kernNMaxM = p.maxM, p.maxM
		if p.maxM == 0 {
			im.gemv.dot = nil // PrecisionBF16 then rounds A for the blocked product
		}
		t.Run(p.name, f)
	}
}

// TestLinear covers the matrix-vector and blocked paths of both weight
// types, with k and n around the kernels' steps.
func TestLinear(t *testing.T) {
	ms := []int{1, 2, 3, 4, 5, 7, 8, 9, 16, 33, 70}
	nks := []struct{ n, k int }{{1, 1}, {4, 16}, {7, 17}, {32, 64}, {33, 100}, {64, 129}, {130, 48}, {12, 1024}, {9, 31}, {5, 33}}
	eachKernels(t, func(t *testing.T) {
		forEachLinearPath(t, func(t *testing.T) {
			r := rand.New(rand.NewPCG(7, 8))
			for _, m := range ms {
				for _, s := range nks {
					for _, acc := range []bool{false, true} {
						a := randF32(r, m*s.k)
						wh := randBF16(r, s.n*s.k)
						wf := widenBF16(wh)
						c := newC(r, m, s.n, s.n, !acc)
						want, bound := refLinear(m, s.n, s.k, a, wf, c, acc)
						c2 := append([]float32(nil), c...)
						LinearBF16(c, a, wh, m, s.n, s.k, acc)
						checkC(t, fmt.Sprintf("LinearBF16 m=%d n=%d k=%d acc=%v", m, s.n, s.k, acc), c, m, s.n, s.n, want, bound)
						wf = randF32(r, s.n*s.k)
						want, bound = refLinear(m, s.n, s.k, a, wf, c2, acc)
						LinearF32(c2, a, wf, m, s.n, s.k, acc)
						checkC(t, fmt.Sprintf("LinearF32 m=%d n=%d k=%d acc=%v", m, s.n, s.k, acc), c2, m, s.n, s.n, want, bound)
					}
				}
			}
		})
	})
}

// TestLinearMulti checks LinearMulti against each product alone, with
// BF16 and float32 weights mixed, widths that leave rows and columns to
// the scalar tails, and weights large enough to be split over several
// threads, a thread's range crossing from one matrix into the next.
// linearMultiCase is a TestLinearMulti case: the products over one A.
type linearMultiCase struct {
	k    int
	outs []linearOutSpec
}

type linearOutSpec struct {
	n    int
	bf16 bool
	acc  bool
}

func TestLinearMulti(t *testing.T) {
	defer SetThreads(Threads())
	SetThreads(5)
	cases := []linearMultiCase{
		{16, []linearOutSpec{{4, true, false}, {8, true, true}, {4, false, false}}},
		{33, []linearOutSpec{{7, true, false}, {0, true, false}, {5, false, true}, {1, true, false}}},
		{64, []linearOutSpec{{130, false, false}, {66, true, true}}},
		{1024, []linearOutSpec{{260, true, false}, {68, true, false}, {130, true, true}}},
		{1000, []linearOutSpec{{300, true, false}, {150, false, false}, {3, true, false}}},
		{7, []linearOutSpec{{9, true, false}, {4, false, false}}},
	}
	for _, prec := range []Precision{PrecisionF32, PrecisionBF16} {
		t.Run(prec.String(), func(t *testing.T) { testLinearMulti(t, prec, cases) })
	}
}

// testLinearMulti checks LinearMultiPrec at precision prec against a
// float64 reference that rounds A to BF16 for the BF16 products at
// PrecisionBF16.
func testLinearMulti(t *testing.T, prec Precision, cases []linearMultiCase) {
	eachKernels(t, func(t *testing.T) {
		forEachLinearPath(t, func(t *testing.T) {
			r := rand.New(rand.NewPCG(9, 10))
			for _, m := range []int{1, 2, 3, 4, 5, 9, 33, 64, 65} {
				for _, tc := range cases {
					a := randF32(r, m*tc.k)
					a16 := make([]float32, len(a))
					for i, v := range a {
						a16[i] = bf16to32(F32ToBF16One(v))
					}
					outs := make([]LinearOut, len(tc.outs))
					wants := make([][]float64, len(tc.outs))
					bounds := make([][]float64, len(tc.outs))
					for i, o := range tc.outs {
						c := newC(r, m, o.n, o.n, !o.acc)
						var wf []float32
						ar := a
						if o.bf16 {
							outs[i].W16 = randBF16(r, o.n*tc.k)
							wf = widenBF16(outs[i].W16)
							if prec == PrecisionBF16 {
								ar = a16
							}
						} else {
							wf = randF32(r, o.n*tc.k)
							outs[i].W32 = wf
						}
						wants[i], bounds[i] = refLinear(m, o.n, tc.k, ar, wf, c, o.acc)
						outs[i].C, outs[i].N, outs[i].Accumulate = c, o.n, o.acc
					}
					LinearMultiPrec(a, m, tc.k, outs, prec)
					for i, o := range tc.outs {
						checkC(t, fmt.Sprintf("LinearMulti %v m=%d k=%d out %d (n=%d bf16=%v acc=%v)", prec, m, tc.k, i, o.n, o.bf16, o.acc), outs[i].C, m, o.n, o.n, wants[i], bounds[i])
					}
				}
			}
		})
	})
}

// TestDeinterleaveAsm checks the assembly deinterleave of the active
// matrix-vector kernels against the Go loop.
func TestDeinterleaveAsm(t *testing.T) {
	g := active.Load().gemv
	if g == nil || g.deint == nil {
		t.Skip("no assembly deinterleave in this kernel set")
	}
	r := rand.New(rand.NewPCG(9, 9))
	for _, n := range []int{g.vlBF16, 3 * g.vlBF16, 384, 1024} {
		src := randF32(r, n)
		want, got := make([]float32, n), make([]float32, n)
		deinterleave(want, src, 1, n, n, g.vlBF16)
		g.deint(&got[0], &src[0], n/g.vlBF16)
		if !slices.Equal(got, want) {
			t.Fatalf("n=%d: assembly deinterleave differs from the Go loop", n)
		}
	}
}
