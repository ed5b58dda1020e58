package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu/kernels"
)

// Gradient checks of the backward ops.
//
// Each op has a float64 reference of its forward pass written here from the
// definition. A test draws small random float32 inputs and an upstream
// gradient g, takes L = Σ g·f(inputs) with the reference, differentiates it
// by central differences in float64 (exact to ~1e-9 at these sizes), and
// compares the backend's float32 analytic gradient with it. The metric is
// max|analytic − numeric| / max|numeric| per gradient, required below
// 1e-3 and logged. Each test also checks that the reference forward equals
// the backend's forward op, so the gradient is of the right function.

const gradTol = 1e-3

func f64s(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

func dot64(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// numGrad returns ∂(g·f())/∂x by central differences, where f reads x.
func numGrad(f func() []float64, g, x []float64) []float64 {
	const h = 1e-6
	out := make([]float64, len(x))
	for i := range x {
		old := x[i]
		x[i] = old + h
		lp := dot64(g, f())
		x[i] = old - h
		lm := dot64(g, f())
		x[i] = old
		out[i] = (lp - lm) / (2 * h)
	}
	return out
}

// numGradFirst is numGrad for the first n elements of x only.
func numGradFirst(f func() []float64, g, x []float64, n int) []float64 {
	return numGrad(f, g, x[:n])
}

// gradErr is max|got − want| / max|want|.
func gradErr(got []float32, want []float64) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	var d, s float64
	for i := range want {
		d = math.Max(d, math.Abs(float64(got[i])-want[i]))
		s = math.Max(s, math.Abs(want[i]))
		if math.IsNaN(float64(got[i])) {
			return math.NaN()
		}
	}
	if s == 0 {
		return d
	}
	return d / s
}

func checkGrad(t *testing.T, what string, got []float32, want []float64) {
	t.Helper()
	e := gradErr(got, want)
	if !(e < gradTol) {
		t.Errorf("%s: relative error %.3g (want < %g)", what, e, gradTol)
	} else {
		t.Logf("%s: relative error %.2g", what, e)
	}
}

func zeros(t *testing.T, b *Backend, shape ...int) compute.Tensor {
	t.Helper()
	x, err := b.NewTensor(compute.F32, shape...)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func TestLinearBackward(t *testing.T) {
	b := New()
	r := rand.New(rand.NewPCG(11, 12))
	for _, tt := range []struct {
		name    string
		m, n, k int
		bf16    bool
	}{
		{"f32", 5, 7, 9, false},
		{"f32 one row", 1, 6, 4, false},
		{"bf16", 6, 70, 5, true},
		{"bf16 several widening blocks", 3, 600, 8, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			xv, wv, bv, gv := randVec(r, tt.m*tt.k), randVec(r, tt.n*tt.k), randVec(r, tt.n), randVec(r, tt.m*tt.n)
			var w compute.Tensor
			var err error
			if tt.bf16 {
				bits := make([]uint16, len(wv))
				kernels.F32ToBF16(bits, wv)
				kernels.BF16ToF32(wv, bits)
				w, err = b.WeightBF16(bits, tt.n, tt.k)
			} else {
				w, err = b.WeightF32(wv, tt.n, tt.k)
			}
			if err != nil {
				t.Fatal(err)
			}
			x64, w64, b64, g64 := f64s(xv), f64s(wv), f64s(bv), f64s(gv)
			f := func() []float64 {
				y := make([]float64, tt.m*tt.n)
				for i := range tt.m {
					for j := range tt.n {
						s := b64[j]
						for p := range tt.k {
							s += x64[i*tt.k+p] * w64[j*tt.k+p]
						}
						y[i*tt.n+j] = s
					}
				}
				return y
			}
			x, dy := tensorOf(t, b, xv, tt.m, tt.k), tensorOf(t, b, gv, tt.m, tt.n)
			y := zeros(t, b, tt.m, tt.n)
			b.Linear(y, x, w, tensorOf(t, b, bv, tt.n))
			closeTo(t, "Linear", Float32s(y), f(), 1e-5)

			dx := tensorOf(t, b, randVec(r, tt.m*tt.k), tt.m, tt.k) // overwritten
			b.LinearBackwardInput(dx, dy, w, false)
			checkGrad(t, "dx", Float32s(dx), numGrad(f, g64, x64))
			want := numGrad(f, g64, x64)
			for i := range want {
				want[i] *= 2
			}
			b.LinearBackwardInput(dx, dy, w, true)
			checkGrad(t, "dx accumulated", Float32s(dx), want)

			if !tt.bf16 {
				dw := zeros(t, b, tt.n, tt.k)
				b.LinearBackwardWeight(dw, dy, x)
				checkGrad(t, "dw", Float32s(dw), numGrad(f, g64, w64))
			}
			db := zeros(t, b, tt.n)
			b.BiasBackward(db, dy)
			checkGrad(t, "db", Float32s(db), numGrad(f, g64, b64))
		})
	}
}

func TestEmbeddingBackward(t *testing.T) {
	b := New()
	r := rand.New(rand.NewPCG(13, 14))
	for _, cols := range []int{5, 200} { // one part, then columns split over threads
		ids := []int32{3, 0, 3, 6, 3, 1}
		const rows = 7
		tv, gv := randVec(r, rows*cols), randVec(r, len(ids)*cols)
		t64, g64 := f64s(tv), f64s(gv)
		f := func() []float64 {
			y := make([]float64, len(ids)*cols)
			for i, id := range ids {
				copy(y[i*cols:], t64[int(id)*cols:int(id+1)*cols])
			}
			return y
		}
		dt := zeros(t, b, rows, cols)
		idx := ints(t, b, ids)
		if cols > 100 { // large enough to take the parallel path
			big := make([]int32, 200)
			for i := range big {
				big[i] = int32(i*5) % rows
			}
			ids = big
			gv = randVec(r, len(ids)*cols)
			g64 = f64s(gv)
			idx = ints(t, b, ids)
		}
		b.EmbeddingBackward(dt, tensorOf(t, b, gv, len(ids), cols), idx)
		if cols > 100 { // the scatter-add itself, in float64: numerical differences take too long
			want := make([]float64, rows*cols)
			for i, id := range ids {
				for j := range cols {
					want[int(id)*cols+j] += g64[i*cols+j]
				}
			}
			checkGrad(t, "dTable (parallel)", Float32s(dt), want)
			continue
		}
		checkGrad(t, "dTable", Float32s(dt), numGrad(f, g64, t64))
	}
}

func TestRMSNormBackward(t *testing.T) {
	b := New()
	r := rand.New(rand.NewPCG(15, 16))
	const eps = 1e-5
	for _, tt := range []struct {
		name        string
		rows, cols  int
		group       int
		accumulate  bool
		inPlace     bool
		parallelize bool
	}{
		{"rows", 4, 12, 12, false, false, false},
		{"per head", 3, 16, 4, true, false, false},
		{"in place", 3, 8, 8, false, true, false},
		{"many rows", 700, 64, 64, false, false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := tt.rows * tt.cols
			xv, wv, gv := randVec(r, n), randVec(r, tt.group), randVec(r, n)
			x64, w64, g64 := f64s(xv), f64s(wv), f64s(gv)
			f := func() []float64 {
				y := make([]float64, n)
				for s := 0; s < n; s += tt.group {
					ss := 0.0
					for _, v := range x64[s : s+tt.group] {
						ss += v * v
					}
					inv := 1 / math.Sqrt(ss/float64(tt.group)+eps)
					for j := range tt.group {
						y[s+j] = x64[s+j] * inv * w64[j]
					}
				}
				return y
			}
			x, w := tensorOf(t, b, xv, tt.rows, tt.cols), tensorOf(t, b, wv, tt.group)
			y := zeros(t, b, tt.rows, tt.cols)
			b.RMSNorm(y, x, w, eps)
			closeTo(t, "RMSNorm", Float32s(y), f(), 1e-5)

			dy := tensorOf(t, b, gv, tt.rows, tt.cols)
			base := randVec(r, n)
			dx := tensorOf(t, b, base, tt.rows, tt.cols)
			if tt.inPlace {
				dx = dy
			}
			dw := tensorOf(t, b, make([]float32, tt.group), tt.group)
			b.RMSNormBackward(dx, dw, dy, x, w, eps, tt.accumulate)
			var want []float64
			if !tt.parallelize {
				want = numGrad(f, g64, x64)
			}
			if tt.accumulate {
				for i := range want {
					want[i] += float64(base[i])
				}
			}
			if tt.parallelize {
				// many rows: the float32 sums of 700 rows limit the accuracy
				// of dw a little; still far inside the tolerance.
				dw2 := zeros(t, b, tt.group)
				b.RMSNormBackward(zeros(t, b, tt.rows, tt.cols), dw2, dy, x, w, eps, false)
				if !equalBits(Float32s(dw), Float32s(dw2)) {
					t.Error("dw differs between two identical calls")
				}
			}
			if tt.parallelize { // numerical differences of the first rows only
				k := 2 * tt.cols
				checkGrad(t, "dx (first rows)", Float32s(dx)[:k], numGradFirst(f, g64, x64, k))
			} else {
				checkGrad(t, "dx", Float32s(dx), want)
			}
			checkGrad(t, "dw", Float32s(dw), numGrad(f, g64, w64))
			b.RMSNormBackward(zeros(t, b, tt.rows, tt.cols), nil, tensorOf(t, b, gv, tt.rows, tt.cols), x, w, eps, false) // nil dw
		})
	}
}

func equalBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

func ropeTables(maxPos, hd int) (cosv, sinv []float32) {
	half := hd / 2
	cosv, sinv = make([]float32, maxPos*half), make([]float32, maxPos*half)
	for p := range maxPos {
		for j := range half {
			a := float64(p) * math.Pow(100, -float64(2*j)/float64(hd))
			cosv[p*half+j], sinv[p*half+j] = float32(math.Cos(a)), float32(math.Sin(a))
		}
	}
	return cosv, sinv
}

func TestRoPEBackward(t *testing.T) {
	b := New()
	r := rand.New(rand.NewPCG(17, 18))
	const heads, hd, maxPos = 2, 8, 12
	half := hd / 2
	cosv, sinv := ropeTables(maxPos, hd)
	pos := []int32{0, 11, 4, 4}
	n := len(pos) * heads * hd
	xv, gv := randVec(r, n), randVec(r, n)
	x64, g64 := f64s(xv), f64s(gv)
	f := func() []float64 {
		y := make([]float64, n)
		for i, p := range pos {
			for h := range heads {
				o := i*heads*hd + h*hd
				for j := range half {
					c, s := float64(cosv[int(p)*half+j]), float64(sinv[int(p)*half+j])
					a, bb := x64[o+j], x64[o+j+half]
					y[o+j], y[o+j+half] = a*c-bb*s, bb*c+a*s
				}
			}
		}
		return y
	}
	ct, st := tensorOf(t, b, cosv, maxPos, half), tensorOf(t, b, sinv, maxPos, half)
	x := tensorOf(t, b, xv, len(pos), heads*hd)
	b.RoPE(x, ints(t, b, pos), ct, st, hd)
	closeTo(t, "RoPE", Float32s(x), f(), 1e-6)
	dx := tensorOf(t, b, gv, len(pos), heads*hd)
	b.RoPEBackward(dx, ints(t, b, pos), ct, st, hd)
	checkGrad(t, "dx", Float32s(dx), numGrad(f, g64, x64))
}

func TestSiLUMulBackward(t *testing.T) {
	b := New()
	r := rand.New(rand.NewPCG(19, 20))
	for _, n := range []int{37, 40000} { // one chunk; several threads
		gv, uv, dv := randVec(r, n), randVec(r, n), randVec(r, n)
		for i := range gv {
			gv[i] *= 4 // through the curved part of silu and into its tails
		}
		g64, u64, d64 := f64s(gv), f64s(uv), f64s(dv)
		f := func() []float64 {
			y := make([]float64, n)
			for i := range y {
				y[i] = g64[i] / (1 + math.Exp(-g64[i])) * u64[i]
			}
			return y
		}
		gate, up := tensorOf(t, b, gv, n), tensorOf(t, b, uv, n)
		dg, du := zeros(t, b, n), zeros(t, b, n)
		b.SiLUMulBackward(dg, du, tensorOf(t, b, dv, n), gate, up)
		if n > 1000 { // numerical differences of every element: too slow, and the op is elementwise
			g64, u64, d64 = g64[:500], u64[:500], d64[:500]
			n = 500
			checkGrad(t, "dGate", Float32s(dg)[:500], numGrad(f, d64, g64))
			checkGrad(t, "dUp", Float32s(du)[:500], numGrad(f, d64, u64))
			// In place gives the same values.
			b.SiLUMulBackward(gate, up, tensorOf(t, b, dv, len(gv)), gate, up)
			if !equalBits(Float32s(gate), Float32s(dg)) || !equalBits(Float32s(up), Float32s(du)) {
				t.Error("in-place SiLUMulBackward differs")
			}
			continue
		}
		checkGrad(t, "dGate", Float32s(dg), numGrad(f, d64, g64))
		checkGrad(t, "dUp", Float32s(du), numGrad(f, d64, u64))
	}
}

// refAttention is causal grouped-query attention of each sequence over its
// own keys, in float64, returning the output rows.
func refAttention(q, k, v []float64, starts []int32, heads, kvHeads, hd int, scale float64) []float64 {
	qdim, kvdim := heads*hd, kvHeads*hd
	out := make([]float64, len(q))
	for s := 0; s+1 < len(starts); s++ {
		r0, r1 := int(starts[s]), int(starts[s+1])
		for i := r0; i < r1; i++ {
			for h := range heads {
				g := h / (heads / kvHeads)
				sc := make([]float64, i-r0+1)
				m := math.Inf(-1)
				for j := r0; j <= i; j++ {
					d := 0.0
					for e := range hd {
						d += q[i*qdim+h*hd+e] * k[j*kvdim+g*hd+e]
					}
					sc[j-r0] = d * scale
					m = math.Max(m, sc[j-r0])
				}
				z := 0.0
				for j := range sc {
					sc[j] = math.Exp(sc[j] - m)
					z += sc[j]
				}
				for j := r0; j <= i; j++ {
					for e := range hd {
						out[i*qdim+h*hd+e] += sc[j-r0] / z * v[j*kvdim+g*hd+e]
					}
				}
			}
		}
	}
	return out
}

func TestDenseAttention(t *testing.T) {
	b := New()
	defer func(old int) { attnBlock = old }(attnBlock)
	attnBlock = 4 // several query blocks per sequence
	r := rand.New(rand.NewPCG(21, 22))
	for _, tt := range []struct {
		name              string
		lens              []int
		heads, kvHeads, d int
	}{
		{"mha one sequence", []int{7}, 2, 2, 4},
		{"gqa three sequences", []int{9, 1, 6}, 4, 2, 4},
		{"mqa", []int{5, 10}, 3, 1, 6},
	} {
		t.Run(tt.name, func(t *testing.T) {
			starts := []int32{0}
			for _, n := range tt.lens {
				starts = append(starts, starts[len(starts)-1]+int32(n))
			}
			rows := int(starts[len(starts)-1])
			qdim, kvdim := tt.heads*tt.d, tt.kvHeads*tt.d
			qv, kv, vv, gv := randVec(r, rows*qdim), randVec(r, rows*kvdim), randVec(r, rows*kvdim), randVec(r, rows*qdim)
			for i := range qv {
				qv[i] *= 2 // peaked softmax weights
			}
			scale := 1 / math.Sqrt(float64(tt.d))
			q64, k64, v64, g64 := f64s(qv), f64s(kv), f64s(vv), f64s(gv)
			f := func() []float64 { return refAttention(q64, k64, v64, starts, tt.heads, tt.kvHeads, tt.d, scale) }
			a := &compute.DenseAttention{Heads: tt.heads, KVHeads: tt.kvHeads, HeadDim: tt.d, Scale: float32(scale), Seqs: len(tt.lens), SeqStart: ints(t, b, starts)}
			q, k, v := tensorOf(t, b, qv, rows, qdim), tensorOf(t, b, kv, rows, kvdim), tensorOf(t, b, vv, rows, kvdim)
			out, lse := zeros(t, b, rows, qdim), zeros(t, b, rows, tt.heads)
			b.DenseAttention(out, lse, q, k, v, a)
			closeTo(t, "DenseAttention", Float32s(out), f(), 1e-5)

			dq := tensorOf(t, b, randVec(r, rows*qdim), rows, qdim) // overwritten
			dk, dv := tensorOf(t, b, randVec(r, rows*kvdim), rows, kvdim), tensorOf(t, b, randVec(r, rows*kvdim), rows, kvdim)
			b.DenseAttentionBackward(dq, dk, dv, tensorOf(t, b, gv, rows, qdim), out, lse, q, k, v, a)
			checkGrad(t, "dq", Float32s(dq), numGrad(f, g64, q64))
			checkGrad(t, "dk", Float32s(dk), numGrad(f, g64, k64))
			checkGrad(t, "dv", Float32s(dv), numGrad(f, g64, v64))
		})
	}
}

// TestDenseAttentionMatchesPaged runs the same causal attention through the
// paged-cache op (one block table per sequence) and the dense op.
func TestDenseAttentionMatchesPaged(t *testing.T) {
	b := New()
	r := rand.New(rand.NewPCG(23, 24))
	const heads, kvHeads, hd, bs = 4, 2, 8, 4
	lens := []int{70, 13}
	starts := []int32{0, 70, 83}
	rows := 83
	qdim, kvdim := heads*hd, kvHeads*hd
	qv, kv, vv := randVec(r, rows*qdim), randVec(r, rows*kvdim), randVec(r, rows*kvdim)
	q, k, v := tensorOf(t, b, qv, rows, qdim), tensorOf(t, b, kv, rows, kvdim), tensorOf(t, b, vv, rows, kvdim)
	scale := float32(1 / math.Sqrt(hd))
	dense, lse := zeros(t, b, rows, qdim), zeros(t, b, rows, heads)
	b.DenseAttention(dense, lse, q, k, v, &compute.DenseAttention{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: scale, Seqs: 2, SeqStart: ints(t, b, starts)})
	// Identity block tables: cache slot = row.
	maxBlocks := (70 + bs - 1) / bs
	table := make([]int32, 2*maxBlocks)
	for i := range maxBlocks {
		table[i] = int32(i)
	}
	off := 72 / bs // the second sequence starts at slot 72 (a block boundary)
	for i := range (13 + bs - 1) / bs {
		table[maxBlocks+i] = int32(off + i)
	}
	slots := make([]int32, rows)
	for i := range 70 {
		slots[i] = int32(i)
	}
	for i := range 13 {
		slots[70+i] = int32(72 + i)
	}
	kc, vc := zeros(t, b, 96, kvdim), zeros(t, b, 96, kvdim)
	attn := &compute.Attention{
		Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: scale, BlockSize: bs, Seqs: 2, MaxBlocks: maxBlocks,
		QueryStart: ints(t, b, starts), ContextLen: ints(t, b, []int32{int32(lens[0]), int32(lens[1])}), BlockTable: ints(t, b, table),
	}
	b.StoreKV(kc, vc, k, v, ints(t, b, slots), attn)
	paged := zeros(t, b, rows, qdim)
	b.Attention(paged, q, kc, vc, attn)
	closeTo(t, "dense vs paged", Float32s(dense), f64s(Float32s(paged)), 1e-5)
}

func TestLogProbsBackward(t *testing.T) {
	b := New()
	r := rand.New(rand.NewPCG(25, 26))
	for _, cols := range []int{11, 2500} { // one softmax chunk, several
		const rows = 3
		xv, gv := randVec(r, rows*cols), randVec(r, rows)
		for i := range xv {
			xv[i] *= 3
		}
		targets := []int32{0, int32(cols - 1), int32(cols / 2)}
		x64, g64 := f64s(xv), f64s(gv)
		lse64 := func(row []float64) float64 {
			m := math.Inf(-1)
			for _, v := range row {
				m = math.Max(m, v)
			}
			s := 0.0
			for _, v := range row {
				s += math.Exp(v - m)
			}
			return m + math.Log(s)
		}
		f := func() []float64 {
			y := make([]float64, rows)
			for i := range rows {
				row := x64[i*cols : (i+1)*cols]
				y[i] = row[targets[i]] - lse64(row)
			}
			return y
		}
		wantEnt := make([]float64, rows)
		for i := range rows {
			row := x64[i*cols : (i+1)*cols]
			l := lse64(row)
			for _, v := range row {
				wantEnt[i] -= math.Exp(v-l) * (v - l)
			}
		}
		x, tg := tensorOf(t, b, xv, rows, cols), ints(t, b, targets)
		lp, ent, lse := zeros(t, b, rows), zeros(t, b, rows), zeros(t, b, rows)
		b.LogProbs(lp, ent, lse, x, tg)
		closeTo(t, "logp", Float32s(lp), f(), 1e-5)
		closeTo(t, "entropy", Float32s(ent), wantEnt, 1e-5)
		b.LogProbs(lp, nil, lse, x, tg) // entropy is optional
		closeTo(t, "logp without entropy", Float32s(lp), f(), 1e-5)

		if cols > 100 {
			// numerical differences over the first 300 columns only
			d := zeros(t, b, rows, cols)
			b.LogProbsBackward(d, x, lse, tg, tensorOf(t, b, gv, rows))
			num := numGradFirst(f, g64, x64, 300)
			got := make([]float32, 0, 300)
			got = append(got, Float32s(d)[:300]...)
			checkGrad(t, "dLogits (first columns)", got, num)
			// in place
			b.LogProbsBackward(x, x, lse, tg, tensorOf(t, b, gv, rows))
			if !equalBits(Float32s(x), Float32s(d)) {
				t.Error("in-place LogProbsBackward differs")
			}
			continue
		}
		d := zeros(t, b, rows, cols)
		b.LogProbsBackward(d, x, lse, tg, tensorOf(t, b, gv, rows))
		checkGrad(t, "dLogits", Float32s(d), numGrad(f, g64, x64))
	}
}

func TestAdamWMatchesFloat64(t *testing.T) {
	b := New()
	r := rand.New(rand.NewPCG(27, 28))
	const n = 1000
	hp := compute.AdamW{LR: 1e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
	pv := randVec(r, n)
	p64, m64, v64 := f64s(pv), make([]float64, n), make([]float64, n)
	p, m, v := tensorOf(t, b, pv, n), zeros(t, b, n), zeros(t, b, n)
	for step := 1; step <= 6; step++ {
		gv := randVec(r, n)
		gv[0] = 0 // a zero gradient still decays the weight
		hp.Step = step
		hp.GradScale = 0
		if step == 4 {
			hp.GradScale = 0.5 // clipping folded into the update
		}
		b.AdamW(p, tensorOf(t, b, gv, n), m, v, hp)
		gs := 1.0
		if hp.GradScale != 0 {
			gs = float64(hp.GradScale)
		}
		b1, b2, lr := float64(hp.Beta1), float64(hp.Beta2), float64(hp.LR)
		for i := range p64 {
			g := float64(gv[i]) * gs
			m64[i] = b1*m64[i] + (1-b1)*g
			v64[i] = b2*v64[i] + (1-b2)*g*g
			mh := m64[i] / (1 - math.Pow(b1, float64(step)))
			vh := v64[i] / (1 - math.Pow(b2, float64(step)))
			p64[i] = p64[i]*(1-lr*float64(hp.WeightDecay)) - lr*mh/(math.Sqrt(vh)+float64(hp.Eps))
		}
		closeTo(t, "param", Float32s(p), p64, 2e-6)
		closeTo(t, "m", Float32s(m), m64, 2e-6)
		closeTo(t, "v", Float32s(v), v64, 2e-6)
	}
}

func TestTensorUtilities(t *testing.T) {
	b := New()
	r := rand.New(rand.NewPCG(29, 30))
	av, cv := randVec(r, 50000), randVec(r, 7)
	a, c := tensorOf(t, b, av, 500, 100), tensorOf(t, b, cv, 7)
	want := 0.0
	for _, v := range append(append([]float32(nil), av...), cv...) {
		want += float64(v) * float64(v)
	}
	got, err := b.SumSquares(a, c)
	if err != nil || math.Abs(got-want) > 1e-6*want {
		t.Fatalf("SumSquares = %v, %v; want %v", got, err, want)
	}
	b.Scale(c, -2)
	w := f64s(cv)
	for i := range w {
		w[i] *= -2
	}
	closeTo(t, "Scale", Float32s(c), w, 1e-7)
	x := tensorOf(t, b, []float32{1, 2, 3, 4, 5, 6, 7}, 7)
	b.AddScaled(c, x, 0.5)
	for i := range w {
		w[i] += 0.5 * float64(i+1)
	}
	closeTo(t, "AddScaled", Float32s(c), w, 1e-6)
	b.Zero(a)
	for _, v := range Float32s(a) {
		if v != 0 {
			t.Fatal("Zero left a non-zero")
		}
	}

	// Convert: F32 → BF16 rounds to nearest even, BF16 → F32 is exact.
	fv := []float32{1, 1 + 1.0/256, 1 + 3.0/256, -2.5e-3, float32(math.Inf(1))}
	bf, err := b.NewTensor(compute.BF16, 5)
	if err != nil {
		t.Fatal(err)
	}
	b.Convert(bf, tensorOf(t, b, fv, 5))
	back := zeros(t, b, 5)
	b.Convert(back, bf)
	for i, v := range fv {
		want := roundBF16(v)
		if Float32s(back)[i] != want {
			t.Errorf("Convert %v: %v, want %v", v, Float32s(back)[i], want)
		}
	}
}

func TestMatMul(t *testing.T) {
	b := New()
	r := rand.New(rand.NewPCG(31, 32))
	const m, n, k = 5, 7, 3
	for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
		av, bv, cv := randVec(r, m*k), randVec(r, k*n), randVec(r, m*n)
		var a, bb compute.Tensor
		at := func(i, p int) float64 { return float64(av[i*k+p]) }
		bt := func(p, j int) float64 { return float64(bv[p*n+j]) }
		if tr[0] {
			a = tensorOf(t, b, av, k, m)
			at = func(i, p int) float64 { return float64(av[p*m+i]) }
		} else {
			a = tensorOf(t, b, av, m, k)
		}
		if tr[1] {
			bb = tensorOf(t, b, bv, n, k)
			bt = func(p, j int) float64 { return float64(bv[j*k+p]) }
		} else {
			bb = tensorOf(t, b, bv, k, n)
		}
		c := tensorOf(t, b, cv, m, n)
		b.MatMul(c, a, bb, tr[0], tr[1], 2, 0.5)
		want := make([]float64, m*n)
		for i := range m {
			for j := range n {
				s := 0.0
				for p := range k {
					s += at(i, p) * bt(p, j)
				}
				want[i*n+j] = 2*s + 0.5*float64(cv[i*n+j])
			}
		}
		closeTo(t, "MatMul", Float32s(c), want, 1e-5)
	}
}
