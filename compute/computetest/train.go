package computetest

import (
	"fmt"
	"math"
	"slices"

	"github.com/clawrl/clawrl/compute"
)

// trainerChecks are the checks of the ops that compute.Trainer adds.
var trainerChecks = []check{
	{"MatMul", checkMatMul},
	{"Convert", checkConvert},
	{"EmbeddingBackward", checkEmbeddingBackward},
	{"LinearBackward", checkLinearBackward},
	{"RMSNormBackward", checkRMSNormBackward},
	{"RoPEBackward", checkRoPEBackward},
	{"DenseAttention", checkDenseAttention},
	{"SiLUMulBackward", checkSiLUMulBackward},
	{"GELUMulBackward", checkGELUMulBackward},
	{"LogProbs", checkLogProbs},
	{"AdamW", checkAdamW},
	{"SumSquares", checkSumSquares},
	{"Zero", checkZero},
	{"AddScaled", checkAddScaled},
	{"Deterministic", checkDeterministic},
	{"Concurrent", checkConcurrent},
}

// fdTol bounds the disagreement of the reference's analytic gradient with
// its central differences (both float64), relative as in near.
const fdTol = 1e-5

// gradCheck compares a backend's gradient got with the reference's
// analytic gradient want (to tol) and, unless fd is nil, at the elements
// at both with central differences fd of the reference's forward pass: the
// reference to fdTol (so the analytic formula is the derivative of the
// forward the suite checks), the backend to tol + fdTol.
func (h *harness) gradCheck(what string, shape []int, got []float32, want []float64, fd []float64, at []int, tol float64) {
	h.t.Helper()
	h.gradCheckScaled(what, shape, got, want, nil, fd, at, tol)
}

// gradCheckScaled is gradCheck with the comparison with want scaled as
// nearScaled's.
func (h *harness) gradCheckScaled(what string, shape []int, got []float32, want, scale []float64, fd []float64, at []int, tol float64) {
	h.t.Helper()
	h.nearScaled(what, shape, got, want, scale, tol)
	if fd == nil {
		return
	}
	g, w := make([]float32, len(at)), make([]float64, len(at))
	for n, i := range at {
		g[n], w[n] = got[i], want[i]
	}
	fshape := []int{len(at)}
	h.near(what+" (reference's analytic gradient against its central differences, sampled)", fshape, float32s(w), fd, fdTol)
	h.near(what+" against central differences of the reference (sampled)", fshape, g, fd, tol+fdTol)
}

// float32s rounds v to float32.
func float32s(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}

// sample returns up to k distinct indices below n in increasing order:
// all of them when n ≤ k, else k drawn at random.
func (h *harness) sample(n, k int) []int {
	at := h.r.Perm(n)
	if n > k {
		at = at[:k]
	}
	slices.Sort(at)
	return at
}

// plusAbs returns a + |b| elementwise (b float32).
func plusAbs(a []float64, b []float32) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i] + math.Abs(float64(b[i]))
	}
	return out
}

// plus returns a + b elementwise (b float32).
func plus(a []float64, b []float32) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i] + float64(b[i])
	}
	return out
}

func checkMatMul(h *harness) {
	for _, c := range []struct{ m, n, k int }{{5, 7, 3}, {1, 33, 17}, {40, 30, 50}, {1, 1, 1}, {17, 1, 64}} {
		for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
			h.run(fmt.Sprintf("m%d_n%d_k%d/transA=%v/transB=%v", c.m, c.n, c.k, tr[0], tr[1]), func(h *harness) {
				ashape, bshape := []int{c.m, c.k}, []int{c.k, c.n}
				if tr[0] {
					ashape = []int{c.k, c.m}
				}
				if tr[1] {
					bshape = []int{c.n, c.k}
				}
				av, bv := h.randn(c.m*c.k, 1), h.randn(c.k*c.n, 1)
				a, b := h.input(av, ashape...), h.input(bv, bshape...)
				for _, ab := range [][2]float32{{1, 0}, {2, 0.5}, {-1, 1}} {
					desc := fmt.Sprintf("MatMul op(a %s)·op(b %s) (trans %v %v), alpha %g, beta %g", compute.ShapeString(ashape), compute.ShapeString(bshape), tr[0], tr[1], ab[0], ab[1])
					var dst compute.Tensor
					var cv []float32
					if ab[1] == 0 {
						dst, cv = h.output(c.m, c.n), poison(c.m*c.n)
					} else {
						cv = h.randn(c.m*c.n, 1)
						dst = h.input(cv, c.m, c.n)
					}
					h.tr.MatMul(dst, a, b, tr[0], tr[1], ab[0], ab[1])
					want := refMatMul(widen(av), widen(bv), widen(cv), c.m, c.n, c.k, tr[0], tr[1], float64(ab[0]), float64(ab[1]))
					mag := refMatMul(abs(av), abs(bv), abs(cv), c.m, c.n, c.k, tr[0], tr[1], math.Abs(float64(ab[0])), math.Abs(float64(ab[1])))
					h.nearScaled(desc+": dst", []int{c.m, c.n}, h.read(dst), want, mag, h.tol(c.k+1))
					h.unchanged(desc+": a", a, av)
					h.unchanged(desc+": b", b, bv)
				}
			})
		}
	}
}

// bf16Tensor makes a BF16 tensor [n/8, 8] by Copy from a BF16 weight of
// bits, so that Convert's output can be poisoned and read without Convert.
func (h *harness) bf16Tensor(bits []uint16) compute.Tensor {
	h.t.Helper()
	w, err := h.b.WeightBF16(slices.Clone(bits), len(bits)/8, 8)
	if err != nil {
		h.t.Fatalf("WeightBF16: %v", err)
	}
	x := h.tensor(compute.BF16, len(bits)/8, 8)
	h.b.Copy(x, w)
	return x
}

// readBF16 reads a BF16 tensor [rows, cols] through Embedding of all its
// rows (which widens exactly), not through Convert.
func (h *harness) readBF16(x compute.Tensor) []float32 {
	h.t.Helper()
	rows, cols := compute.Rows(x), compute.Cols(x)
	ids := make([]int32, rows)
	for i := range ids {
		ids[i] = int32(i)
	}
	dst := h.output(rows, cols)
	h.b.Embedding(dst, x, h.ids(ids))
	return h.read(dst)
}

func checkConvert(h *harness) {
	// F32 values that exercise the rounding: random ones, exact ties (the
	// discarded half is 0x8000: to even), just below and above ties, and
	// special values. Denormals are left out (hardware may flush them).
	const n = 2048
	fv := h.randn(n, 1)
	for i := 0; i < 3*256; i++ {
		upper := uint32(0x3c00+h.r.IntN(0x0800)) | uint32(h.r.IntN(2))<<15
		lower := []uint32{0x8000, 0x7fff, 0x8001}[i%3]
		fv[i] = math.Float32frombits(upper<<16 | lower)
	}
	special := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 1 + 1.0/256, 1 + 3.0/256, -(1 + 3.0/256),
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), math.MaxFloat32, -math.MaxFloat32, 3.3961776e38, 1.1754944e-38}
	copy(fv[3*256:], special)
	fvRounded := roundBF16(fv)

	h.run("F32-to-BF16", func(h *harness) {
		src := h.input(fv, n/8, 8)
		pb := make([]uint16, n)
		for i, p := range poison(n) {
			pb[i] = bf16Bits(p)
		}
		dst := h.bf16Tensor(pb)
		h.tr.Convert(dst, src)
		h.exact("Convert F32 [256 8] to BF16 (rounding to nearest even; read by Embedding)", []int{n / 8, 8}, h.readBF16(dst), fvRounded)
		h.unchanged("Convert F32 to BF16: src", src, fv)
	})
	h.run("BF16-to-F32", func(h *harness) {
		bits := make([]uint16, n)
		for i := range bits {
			bits[i] = uint16(h.r.IntN(1 << 16))
		}
		for i, v := range fvRounded[3*256 : 3*256+len(special)] {
			bits[i] = bf16Bits(v)
		}
		src := h.bf16Tensor(bits)
		dst := h.output(n, 1) // another shape, the same number of elements
		h.tr.Convert(dst, src)
		want := make([]float32, n)
		for i, b := range bits {
			want[i] = bf16Value(b)
		}
		got := h.read(dst)
		for i := range got { // exact, NaN payloads included
			if !sameBits(got[i], want[i]) || math.Float32bits(got[i]) != math.Float32bits(want[i]) && want[i] == want[i] {
				h.t.Errorf("Convert BF16 [256 8] to F32 [2048 1]: [%d] = %v (%#08x), want %v (%#08x)", i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
				break
			}
		}
		h.exact("Convert BF16 to F32: src (read by Embedding)", []int{n / 8, 8}, h.readBF16(src), want)
	})
	h.run("same-dtype", func(h *harness) {
		src := h.input(fv, n/8, 8)
		dst := h.output(n/16, 16)
		h.tr.Convert(dst, src)
		h.exact("Convert F32 [256 8] to F32 [128 16]", []int{n / 16, 16}, h.read(dst), fv)
		bits := make([]uint16, n)
		for i, v := range fvRounded {
			bits[i] = bf16Bits(v)
		}
		bsrc, bdst := h.bf16Tensor(bits), h.bf16Tensor(make([]uint16, n))
		h.tr.Convert(bdst, bsrc)
		h.exact("Convert BF16 [256 8] to BF16 (read by Embedding)", []int{n / 8, 8}, h.readBF16(bdst), fvRounded)
		// Into a slice: the other rows stay.
		whole := h.input(make([]float32, 4*8), 4, 8)
		h.tr.Convert(h.b.Slice(whole, 1, 3), h.b.Slice(bsrc, 0, 2))
		h.exact("Convert BF16 rows [0,2) into rows [1,3) of F32 [4 8]", []int{4, 8}, h.read(whole), slices.Concat(make([]float32, 8), fvRounded[:16], make([]float32, 8)))
	})
}

func checkEmbeddingBackward(h *harness) {
	for _, c := range []struct {
		rows, cols int
		ids        []int32
	}{
		{7, 5, []int32{3, 0, 3, 6, 3, 1}},
		{9, 200, nil}, // 200 ids, each row many times
		{50, 64, []int32{17}},
	} {
		ids := c.ids
		if ids == nil {
			ids = make([]int32, 200)
			for i := range ids {
				ids[i] = int32(i*5) % int32(c.rows)
			}
		}
		h.run(fmt.Sprintf("%dx%d/ids%d", c.rows, c.cols, len(ids)), func(h *harness) {
			desc := fmt.Sprintf("EmbeddingBackward of %d ids into dTable [%d %d]", len(ids), c.rows, c.cols)
			prior, gv := h.randn(c.rows*c.cols, 1), h.randn(len(ids)*c.cols, 1)
			dt, dy := h.input(prior, c.rows, c.cols), h.input(gv, len(ids), c.cols)
			h.tr.EmbeddingBackward(dt, dy, h.ids(ids))
			want, mag := widen(prior), abs(prior)
			for i, id := range ids {
				for j := range c.cols {
					want[int(id)*c.cols+j] += float64(gv[i*c.cols+j])
					mag[int(id)*c.cols+j] += math.Abs(float64(gv[i*c.cols+j]))
				}
			}
			h.nearScaled(desc+": dTable += (onto random values)", []int{c.rows, c.cols}, h.read(dt), want, mag, h.tol(len(ids)+1))
			h.unchanged(desc+": dy", dy, gv)
		})
	}
}

func checkLinearBackward(h *harness) {
	for _, c := range []linearCase{
		{5, 7, 9, compute.F32, true},
		{1, 6, 4, compute.F32, true},
		{6, 70, 5, compute.BF16, true},
		{3, 600, 8, compute.BF16, false}, // a backend may widen BF16 rows in blocks
		{33, 40, 64, compute.F32, true},
		{20, 64, 300, compute.BF16, false},
		{300, 128, 16, compute.F32, true}, // enough rows to split reductions
	} {
		h.run(fmt.Sprintf("m%d_n%d_k%d/%v", c.m, c.n, c.k, c.dt), func(h *harness) {
			desc := c.String()
			xv, wv, gv := h.randn(c.m*c.k, 1), h.randn(c.n*c.k, 1), h.randn(c.m*c.n, 1)
			w, wvals, host := h.weight(c.dt, wv, c.n, c.k)
			x, dy := h.input(xv, c.m, c.k), h.input(gv, c.m, c.n)
			x64, w64, g64 := widen(xv), widen(wvals), widen(gv)
			// dx = dy·w: the product [m, n]·[n, k].
			wantDx := refMatMul(g64, w64, nil, c.m, c.k, c.n, false, false, 1, 0)
			magDx := refMatMul(abs(gv), abs(wvals), nil, c.m, c.k, c.n, false, false, 1, 0)

			dx := h.output(c.m, c.k)
			h.tr.LinearBackwardInput(dx, dy, w, false)
			h.nearScaled("LinearBackwardInput of "+desc+": dx = dy·w", []int{c.m, c.k}, h.read(dx), wantDx, magDx, h.tol(c.n))
			prior := h.randn(c.m*c.k, 1)
			h.b.Write(dx, prior)
			h.tr.LinearBackwardInput(dx, dy, w, true)
			h.nearScaled("LinearBackwardInput of "+desc+": dx += dy·w (accumulate, onto random values)", []int{c.m, c.k}, h.read(dx), plus(wantDx, prior), plusAbs(magDx, prior), h.tol(c.n+1))
			h.unchanged("LinearBackwardInput of "+desc+": w", w, wvals)
			h.unchangedHost("LinearBackwardInput of "+desc, host, wvals)

			// dw += dyᵀ·x: the product [n, m]·[m, k].
			prior = h.randn(c.n*c.k, 1)
			dw := h.input(prior, c.n, c.k)
			h.tr.LinearBackwardWeight(dw, dy, x)
			wantDw := refMatMul(g64, x64, nil, c.n, c.k, c.m, true, false, 1, 0)
			magDw := refMatMul(abs(gv), abs(xv), nil, c.n, c.k, c.m, true, false, 1, 0)
			h.nearScaled("LinearBackwardWeight of "+desc+": dw += dyᵀ·x (onto random values)", []int{c.n, c.k}, h.read(dw), plus(wantDw, prior), plusAbs(magDw, prior), h.tol(c.m+1))
			h.unchanged("LinearBackwardWeight of "+desc+": x", x, xv)

			if c.bias {
				prior = h.randn(c.n, 1)
				db := h.input(prior, c.n)
				h.tr.BiasBackward(db, dy)
				wantDb, magDb := widen(prior), abs(prior)
				for i := range c.m {
					for j := range c.n {
						wantDb[j] += g64[i*c.n+j]
						magDb[j] += math.Abs(g64[i*c.n+j])
					}
				}
				h.nearScaled("BiasBackward of "+desc+": db += Σ dy (onto random values)", []int{c.n}, h.read(db), wantDb, magDb, h.tol(c.m+1))
			}
			h.unchanged(desc+": dy", dy, gv)
		})
	}
}

// rmsBackCase is an RMSNormBackward problem.
type rmsBackCase struct {
	rmsCase
	accumulate, dwNil, dxIsDy bool
}

func checkRMSNormBackward(h *harness) {
	for _, c := range []rmsBackCase{
		{rmsCase{4, 12, 12, 1e-5, 1, false}, false, false, false},
		{rmsCase{3, 16, 4, 1e-5, 1, false}, true, false, false},
		{rmsCase{3, 8, 8, 1e-5, 1, false}, false, false, true},
		{rmsCase{2, 32, 32, 1e-5, 1e-3, false}, false, true, false},
		{rmsCase{3, 16, 8, 0.3, 1, false}, true, true, true},
		{rmsCase{4, 96, 8, 1e-6, 30, false}, false, false, false},
		{rmsCase{700, 64, 64, 1e-6, 1, false}, false, false, false}, // enough groups to split dw's sum
	} {
		name := c.name()
		if c.accumulate {
			name += "/accumulate"
		}
		if c.dwNil {
			name += "/dw-nil"
		}
		if c.dxIsDy {
			name += "/dx=dy"
		}
		h.run(name, func(h *harness) {
			desc := "RMSNormBackward of " + c.String()
			switch {
			case c.accumulate:
				desc += ", dx +="
			case c.dxIsDy:
				desc += ", dx = dy"
			}
			if c.dwNil {
				desc += ", dw nil"
			}
			n := c.rows * c.cols
			shape := []int{c.rows, c.cols}
			xv, wv, gv := h.randn(n, c.scale), h.randn(c.group, 1), h.randn(n, 1)
			x, w, dy := h.input(xv, shape...), h.input(wv, c.group), h.input(gv, shape...)
			var dx compute.Tensor
			var priorDx []float32
			switch {
			case c.dxIsDy:
				dx, priorDx = dy, gv
			case c.accumulate:
				priorDx = h.randn(n, 1)
				dx = h.input(priorDx, shape...)
			default:
				dx = h.output(shape...)
			}
			var dw compute.Tensor
			priorDw := h.randn(c.group, 1)
			if !c.dwNil {
				dw = h.input(priorDw, c.group)
			}
			h.tr.RMSNormBackward(dx, dw, dy, x, w, c.eps, c.accumulate)

			x64, w64, g64, eps := widen(xv), widen(wv), widen(gv), float64(c.eps)
			wantDx, wantDw := refRMSNormBackward(g64, x64, w64, eps)
			f := func() []float64 { return refRMSNorm(x64, w64, eps) }
			// Central differences where they are cheap (the formula is
			// the same at every size).
			fdOK := n <= 2048
			var at []int
			var fdDx []float64
			if fdOK {
				at = h.sample(n, 64)
				fdDx = numGrad(f, g64, x64, at)
			}
			if c.accumulate {
				wantDx = plus(wantDx, priorDx)
				for i, j := range at {
					fdDx[i] += float64(priorDx[j])
				}
			}
			h.gradCheck(desc+": dx", shape, h.read(dx), wantDx, fdDx, at, 2*h.tol(c.group))
			if !c.dwNil {
				var atW []int
				var fdDw []float64
				if fdOK {
					atW = h.sample(c.group, c.group)
					fdDw = numGrad(f, g64, w64, atW)
					for i, j := range atW {
						fdDw[i] += float64(priorDw[j])
					}
				}
				h.gradCheck(desc+": dw (onto random values)", []int{c.group}, h.read(dw), plus(wantDw, priorDw), fdDw, atW, h.tol(n/c.group+1))
			}
			h.unchanged(desc+": x", x, xv)
			h.unchanged(desc+": w", w, wv)
			if !c.dxIsDy {
				h.unchanged(desc+": dy", dy, gv)
			}
		})
	}
}

func checkRoPEBackward(h *harness) {
	for _, c := range ropeCases {
		h.run(fmt.Sprintf("t%d_h%d_d%d", c.tokens, c.heads, c.headDim), func(h *harness) {
			desc := "RoPEBackward " + c.String()
			xv, pos, cosv, sinv, ct, st := h.ropeProblem(c)
			cols := c.heads * c.headDim
			gv := h.randn(len(xv), 1)
			dx := h.input(gv, c.tokens, cols)
			h.tr.RoPEBackward(dx, h.ids(pos), ct, st, c.headDim)
			x64, g64, cos64, sin64 := widen(xv), widen(gv), widen(cosv), widen(sinv)
			want := refRoPE(g64, cols, pos, cos64, sin64, c.headDim, -1)
			var at []int
			var fd []float64
			if len(xv) <= 4096 { // central differences where they are cheap
				at = h.sample(len(xv), 64)
				fd = numGrad(func() []float64 { return refRoPE(x64, cols, pos, cos64, sin64, c.headDim, 1) }, g64, x64, at)
			}
			h.gradCheck(desc+": dx", []int{c.tokens, cols}, h.read(dx), want, fd, at, h.tol(2))
			h.unchanged(desc+": cos", ct, cosv)
			h.unchanged(desc+": sin", st, sinv)
		})
	}
}

// checkDenseAttention checks DenseAttention (out and lse) and
// DenseAttentionBackward (dq, dk, dv), the latter given the reference's
// out and lse, so that its errors are its own.
func checkDenseAttention(h *harness) {
	sw, _ := h.tr.(compute.SlidingWindow)
	_, capped := h.tr.(compute.Softcap)
	for _, c := range []struct {
		lens               []int
		heads, kvHeads, hd int
		window             int     // sliding window, for compute.SlidingWindow backends
		softcap            float32 // soft-capped scores, for compute.Softcap backends
	}{
		{[]int{7}, 2, 2, 4, 0, 0},
		{[]int{9, 1, 6}, 4, 2, 4, 0, 0},
		{[]int{5, 10}, 3, 1, 6, 0, 0},
		{[]int{4, 0, 3}, 2, 1, 8, 0, 0},
		{[]int{70, 13}, 4, 2, 16, 0, 0},
		{[]int{20, 33}, 4, 2, 64, 0, 0},
		{[]int{9, 1, 6}, 4, 2, 4, 3, 0},
		{[]int{70, 13}, 4, 2, 16, 20, 0},
		{[]int{12}, 2, 1, 8, 1, 0},
		{[]int{9, 1, 6}, 4, 2, 4, 0, 1.5},
		{[]int{20, 13}, 4, 2, 16, 5, 2},
	} {
		if c.window > 0 && (sw == nil || !sw.SlidingWindow()) || c.softcap > 0 && !capped {
			continue
		}
		h.run(fmt.Sprintf("lens%v/h%d_kv%d_d%d_w%d_cap%g", c.lens, c.heads, c.kvHeads, c.hd, c.window, c.softcap), func(h *harness) {
			desc := fmt.Sprintf("DenseAttention of sequences %v, %d heads, %d kv heads of %d, window %d, softcap %g", c.lens, c.heads, c.kvHeads, c.hd, c.window, c.softcap)
			starts := []int32{0}
			maxLen := 0
			for _, n := range c.lens {
				starts = append(starts, starts[len(starts)-1]+int32(n))
				maxLen = max(maxLen, n)
			}
			rows := int(starts[len(starts)-1])
			qdim, kvdim := c.heads*c.hd, c.kvHeads*c.hd
			qv, kv, vv := h.randn(rows*qdim, 2), h.randn(rows*kvdim, 1), h.randn(rows*kvdim, 1)
			scale := float32(1 / math.Sqrt(float64(c.hd)))
			g := attnGeom{c.heads, c.kvHeads, c.hd, float64(scale), c.window, float64(c.softcap)}
			a := &compute.DenseAttention{Heads: c.heads, KVHeads: c.kvHeads, HeadDim: c.hd, Scale: scale, Window: c.window, Softcap: c.softcap, Seqs: len(c.lens), SeqStart: h.ids(starts)}
			q, k, v := h.input(qv, rows, qdim), h.input(kv, rows, kvdim), h.input(vv, rows, kvdim)
			out, lse := h.output(rows, qdim), h.output(rows, c.heads)
			h.tr.DenseAttention(out, lse, q, k, v, a)
			q64, k64, v64 := widen(qv), widen(kv), widen(vv)
			fwd := func() []float64 {
				o, _ := refAttention(q64, rows, denseSeqs(k64, v64, starts, kvdim), g)
				return o
			}
			wantOut, wantLse := refAttention(q64, rows, denseSeqs(k64, v64, starts, kvdim), g)
			h.near(desc+": dst", []int{rows, qdim}, h.read(out), wantOut, h.tol(c.hd+maxLen))
			h.nearScaled(desc+": lse", []int{rows, c.heads}, h.read(lse), wantLse, logScale(wantLse), h.tol(c.hd+maxLen))

			bdesc := "DenseAttentionBackward" + desc[len("DenseAttention"):]
			gv := h.randn(rows*qdim, 1)
			refOut, refLse := float32s(wantOut), float32s(wantLse)
			outT, lseT, dOut := h.input(refOut, rows, qdim), h.input(refLse, rows, c.heads), h.input(gv, rows, qdim)
			dq, dk, dv := h.output(rows, qdim), h.output(rows, kvdim), h.output(rows, kvdim)
			h.tr.DenseAttentionBackward(dq, dk, dv, dOut, outT, lseT, q, k, v, a)
			g64 := widen(gv)
			wantDq, wantDk, wantDv := refDenseAttentionBackward(g64, q64, k64, v64, starts, g)
			tol := 4 * h.tol(c.hd+maxLen)
			var atQ, atK []int
			var fdQ, fdK, fdV []float64
			if rows*maxLen*qdim <= 50000 { // central differences where they are cheap
				atQ, atK = h.sample(len(qv), 48), h.sample(len(kv), 48)
				fdQ, fdK, fdV = numGrad(fwd, g64, q64, atQ), numGrad(fwd, g64, k64, atK), numGrad(fwd, g64, v64, atK)
			}
			h.gradCheck(bdesc+": dq", []int{rows, qdim}, h.read(dq), wantDq, fdQ, atQ, tol)
			h.gradCheck(bdesc+": dk", []int{rows, kvdim}, h.read(dk), wantDk, fdK, atK, tol)
			h.gradCheck(bdesc+": dv", []int{rows, kvdim}, h.read(dv), wantDv, fdV, atK, tol)
			for _, in := range []struct {
				name string
				t    compute.Tensor
				v    []float32
			}{{"q", q, qv}, {"k", k, kv}, {"v", v, vv}, {"out", outT, refOut}, {"lse", lseT, refLse}, {"dOut", dOut, gv}} {
				h.unchanged(bdesc+": "+in.name, in.t, in.v)
			}
		})
	}
}

func checkSiLUMulBackward(h *harness) {
	checkGatedBackward(h, "SiLUMulBackward", h.tr.SiLUMulBackward, refSiLUMul, refSiLUMulBackward)
}

// checkSoftcap checks compute.Softcap's Softcap (in place, against
// cap·tanh(x/cap) in float64) and SoftcapBackward (against the
// derivative and central differences), on a backend that implements it.
func checkSoftcap(h *harness) {
	sb, ok := h.b.(compute.Softcap)
	if !ok {
		h.t.Skipf("%s does not implement compute.Softcap", h.b.Name())
	}
	for _, n := range []int{1, 37, 20000} {
		for _, cap := range []float32{30, 2} {
			h.run(fmt.Sprintf("n%d/cap%g", n, cap), func(h *harness) {
				desc := fmt.Sprintf("Softcap [%d] at %g", n, cap)
				xv, dv := h.randn(n, 20), h.randn(n, 1)
				if n > 3 {
					xv[1], xv[2] = 1e4, -1e4
				}
				fwd := func(x []float64) []float64 {
					y := make([]float64, len(x))
					for i, v := range x {
						y[i] = float64(cap) * math.Tanh(v/float64(cap))
					}
					return y
				}
				x := h.input(xv, n)
				sb.Softcap(x, cap)
				x64 := widen(xv)
				want := fwd(x64)
				h.near(desc+": y", []int{n}, h.read(x), want, h.tol(2))
				// The backward reads the derivative from y, which float32
				// holds too coarsely where x saturates the cap (1 − (y/cap)²
				// of a y within an ulp of cap): it is checked where it is
				// not deep in the tails, x of the order of cap.
				xb := h.randn(n, float64(cap))
				x64 = widen(xb)
				y := h.input(float32s(fwd(x64)), n)
				dx := h.input(dv, n)
				sb.SoftcapBackward(dx, y, cap)
				wantD := make([]float64, n)
				for i, v := range x64 {
					t := math.Tanh(v / float64(cap))
					wantD[i] = float64(dv[i]) * (1 - t*t)
				}
				k := min(n, 48)
				at := h.sample(k, k)
				xk := x64[:k]
				h.gradCheck(desc+": dx", []int{n}, h.read(dx), wantD, numGrad(func() []float64 { return fwd(xk) }, widen(dv)[:k], xk, at), at, h.tol(8))
			})
		}
	}
}

// checkGELUMulBackward checks compute.GemmaTrainer's GELUMulBackward
// against the tanh form's derivative and central differences, on a
// backend that implements it.
func checkGELUMulBackward(h *harness) {
	gt, ok := h.tr.(compute.GemmaTrainer)
	if !ok {
		h.t.Skipf("%s does not implement compute.GemmaTrainer", h.b.Name())
	}
	checkGatedBackward(h, "GELUMulBackward", gt.GELUMulBackward, refGELUMul, refGELUMulBackward)
}

// checkGatedBackward checks the backward of a gated activation against
// the reference's analytic gradient (grad) and central differences of its
// forward (fwd), apart and in place, tails included.
func checkGatedBackward(h *harness, op string, run func(dGate, dUp, dy, gate, up compute.Tensor),
	fwd func(gate, up []float64) []float64, grad func(dy, gate, up []float64) (dGate, dUp []float64)) {
	for _, n := range []int{37, 1000, 40000} {
		for _, inPlace := range []bool{false, true} {
			name := fmt.Sprintf("n%d", n)
			if inPlace {
				name += "/in-place"
			}
			h.run(name, func(h *harness) {
				desc := fmt.Sprintf("%s [%d]", op, n)
				if inPlace {
					desc += ", dGate = gate, dUp = up"
				}
				gv, uv, dv := h.randn(n, 4), h.randn(n, 1), h.randn(n, 1)
				gv[1], gv[2], gv[3] = 90, -90, -20
				gate, up, dy := h.input(gv, n), h.input(uv, n), h.input(dv, n)
				dg, du := gate, up
				if !inPlace {
					dg, du = h.output(n), h.output(n)
				}
				run(dg, du, dy, gate, up)
				g64, u64, d64 := widen(gv), widen(uv), widen(dv)
				wantG, wantU := grad(d64, g64, u64)
				// Central differences of the first elements (tails
				// included): the op is elementwise.
				k := min(n, 48)
				gk, uk := g64[:k], u64[:k]
				f := func() []float64 { return fwd(gk, uk) }
				at := h.sample(k, k)
				h.gradCheck(desc+": dGate", []int{n}, h.read(dg), wantG, numGrad(f, d64[:k], gk, at), at, h.tol(8))
				h.gradCheck(desc+": dUp", []int{n}, h.read(du), wantU, numGrad(f, d64[:k], uk, at), at, h.tol(8))
				h.unchanged(desc+": dy", dy, dv)
				if !inPlace {
					h.unchanged(desc+": gate", gate, gv)
					h.unchanged(desc+": up", up, uv)
				}
			})
		}
	}
}

// checkLogProbs checks LogProbs (with and without entropy) and
// LogProbsBackward, the latter given the reference's lse.
func checkLogProbs(h *harness) {
	for _, c := range []struct {
		rows, cols int
		scale      float64
		inPlace    bool // LogProbsBackward with dLogits = logits
	}{
		{3, 11, 3, false},
		{1, 1, 1, false},
		{4, 64, 20, true},
		{3, 2500, 3, false},
		{2, 5000, 1, true},
	} {
		name := fmt.Sprintf("%dx%d/scale%g", c.rows, c.cols, c.scale)
		if c.inPlace {
			name += "/in-place"
		}
		h.run(name, func(h *harness) {
			desc := fmt.Sprintf("LogProbs of logits [%d %d] (scale %g)", c.rows, c.cols, c.scale)
			xv := h.randn(c.rows*c.cols, c.scale)
			targets := h.randIDs(c.rows, c.cols)
			x, tg := h.input(xv, c.rows, c.cols), h.ids(targets)
			x64 := widen(xv)
			wantLogp, wantEnt, wantLse := refLogProbs(x64, c.cols, targets)
			for _, withEntropy := range []bool{true, false} {
				logp, lse := h.output(c.rows), h.output(c.rows)
				var ent compute.Tensor
				d := desc + ", entropy nil"
				if withEntropy {
					ent, d = h.output(c.rows), desc
				}
				h.tr.LogProbs(logp, ent, lse, x, tg)
				h.nearScaled(d+": logp", []int{c.rows}, h.read(logp), wantLogp, logScale(wantLogp), h.tol(c.cols))
				h.nearScaled(d+": lse", []int{c.rows}, h.read(lse), wantLse, logScale(wantLse), h.tol(c.cols))
				if withEntropy {
					h.nearScaled(d+": entropy", []int{c.rows}, h.read(ent), wantEnt, logScale(wantEnt), h.tol(c.cols))
				}
			}
			h.unchanged(desc+": logits", x, xv)

			bdesc := fmt.Sprintf("LogProbsBackward of logits [%d %d] (scale %g)", c.rows, c.cols, c.scale)
			gv := h.randn(c.rows, 1)
			lseV := float32s(wantLse)
			lse, dLogp := h.input(lseV, c.rows), h.input(gv, c.rows)
			dx := h.output(c.rows, c.cols)
			if c.inPlace {
				bdesc += ", dLogits = logits"
				dx = x
			}
			h.tr.LogProbsBackward(dx, x, lse, tg, dLogp)
			g64 := widen(gv)
			want := refLogProbsBackward(x64, c.cols, targets, g64)
			at := h.sample(len(xv), 64)
			for i, t := range targets { // the targets' logits too, where the gradient is largest
				at = append(at, i*c.cols+int(t))
			}
			slices.Sort(at)
			at = slices.Compact(at)
			fd := numGrad(func() []float64 { lp, _, _ := refLogProbs(x64, c.cols, targets); return lp }, g64, x64, at)
			// The target's element is dLogp·(1 − p): judged by the size of
			// its terms, which cancel where p is near 1.
			mag := defaultScale(want)
			for i, t := range targets {
				mag[i*c.cols+int(t)] += math.Abs(g64[i])
			}
			h.gradCheckScaled(bdesc+": dLogits", []int{c.rows, c.cols}, h.read(dx), want, mag, fd, at, h.tol(8))
			h.unchanged(bdesc+": lse", lse, lseV)
			h.unchanged(bdesc+": dLogp", dLogp, gv)
			if !c.inPlace {
				h.unchanged(bdesc+": logits", x, xv)
			}

			// A tile of the vocabulary: columns [c0, c1) with the whole
			// rows' lse and the targets shifted to c0; a target outside
			// the tile adds no one-hot term.
			if c.cols < 3 {
				return
			}
			c0, c1 := c.cols/3, 2*c.cols/3
			n := c1 - c0
			tv := make([]float32, 0, c.rows*n)
			tt := make([]int32, c.rows)
			wantT, magT := make([]float64, 0, c.rows*n), make([]float64, 0, c.rows*n)
			for i, t := range targets {
				tv = append(tv, xv[i*c.cols+c0:i*c.cols+c1]...)
				wantT = append(wantT, want[i*c.cols+c0:i*c.cols+c1]...)
				magT = append(magT, mag[i*c.cols+c0:i*c.cols+c1]...)
				tt[i] = t - int32(c0)
				if int(t) < c0 || int(t) >= c1 {
					tt[i] = -1
					if i%2 == 1 {
						tt[i] = int32(n) // past the tile
					}
				}
			}
			tdesc := fmt.Sprintf("%s, columns [%d, %d)", bdesc, c0, c1)
			dt := h.output(c.rows, n)
			h.tr.LogProbsBackward(dt, h.input(tv, c.rows, n), lse, h.ids(tt), dLogp)
			h.nearScaled(tdesc+": dLogits", []int{c.rows, n}, h.read(dt), wantT, magT, h.tol(8))
		})
	}
}

// checkAdamW runs six steps and checks each against the float64 formula
// applied to the backend's state before it.
func checkAdamW(h *harness) {
	for _, c := range []struct {
		n   int
		eps float32
	}{{7, 1e-8}, {1000, 1e-8}, {1000, 1e-2}, {20000, 1e-8}} {
		h.run(fmt.Sprintf("n%d/eps%g", c.n, c.eps), func(h *harness) {
			hp := compute.AdamW{LR: 1e-2, Beta1: 0.9, Beta2: 0.95, Eps: c.eps, WeightDecay: 0.1}
			p, m, v := h.input(h.randn(c.n, 1), c.n), h.tensor(compute.F32, c.n), h.tensor(compute.F32, c.n)
			for step := 1; step <= 6; step++ {
				hp.Step = step
				hp.GradScale = 0
				if step == 4 {
					hp.GradScale = 0.5 // clipping folded into the update
				}
				gv := h.randn(c.n, 1)
				for i := range gv {
					if i%5 == 0 {
						gv[i] *= 1e-3 // where eps matters
					}
				}
				gv[0] = 0 // a zero gradient still decays the weight
				p64, m64, v64 := widen(h.read(p)), widen(h.read(m)), widen(h.read(v))
				grad := h.input(gv, c.n)
				h.tr.AdamW(p, grad, m, v, hp)
				refAdamW(p64, widen(gv), m64, v64, float64(hp.LR), float64(hp.Beta1), float64(hp.Beta2), float64(hp.Eps), float64(hp.WeightDecay), float64(hp.GradScale), step)
				desc := fmt.Sprintf("AdamW [%d] step %d (lr %g, betas %g %g, eps %g, weight decay %g, grad scale %g)", c.n, step, hp.LR, hp.Beta1, hp.Beta2, hp.Eps, hp.WeightDecay, hp.GradScale)
				h.near(desc+": param", []int{c.n}, h.read(p), p64, h.tol(16))
				h.near(desc+": m", []int{c.n}, h.read(m), m64, h.tol(16))
				h.near(desc+": v", []int{c.n}, h.read(v), v64, h.tol(16))
				h.unchanged(desc+": grad", grad, gv)
			}
		})
	}
}

func checkSumSquares(h *harness) {
	av, bv, cv := h.randn(500*100, 1), h.randn(7, 3), h.randn(6*4, 1)
	a, b, c := h.input(av, 500, 100), h.input(bv, 7), h.input(cv, 6, 4)
	want := 0.0
	for _, v := range slices.Concat(av, bv, cv[8:16]) {
		want += float64(v) * float64(v)
	}
	got, err := h.tr.SumSquares(a, b, h.b.Slice(c, 2, 4))
	if err != nil {
		h.t.Fatalf("SumSquares: %v", err)
	}
	h.scalar("SumSquares of [500 100], [7] and rows [2,4) of [6 4]", got, want, h.tol(1024))
	h.unchanged("SumSquares: first tensor", a, av)
	one, err := h.tr.SumSquares(b)
	if err != nil {
		h.t.Fatalf("SumSquares: %v", err)
	}
	w1 := 0.0
	for _, v := range bv {
		w1 += float64(v) * float64(v)
	}
	h.scalar("SumSquares of [7]", one, w1, h.tol(8))
}

// checkScale checks compute.Scaler's Scale (in place; every Trainer is
// one) against float64, on a backend that implements it.
func checkScale(h *harness) {
	sb, ok := h.b.(compute.Scaler)
	if !ok {
		h.t.Skipf("%s does not implement compute.Scaler", h.b.Name())
	}
	for _, n := range []int{7, 40000} {
		for _, alpha := range []float32{-2, 0.37, 0} {
			h.run(fmt.Sprintf("n%d/alpha%g", n, alpha), func(h *harness) {
				xv := h.randn(n, 1)
				x := h.input(xv, n)
				sb.Scale(x, alpha)
				want := make([]float64, n)
				for i, v := range xv {
					want[i] = float64(alpha) * float64(v) // exact; one rounding to float32
				}
				h.exact64(fmt.Sprintf("Scale [%d] by %g", n, alpha), []int{n}, h.read(x), want)
			})
		}
	}
}

func checkZero(h *harness) {
	xv := h.randn(5*6, 1)
	x := h.input(xv, 5, 6)
	h.tr.Zero(h.b.Slice(x, 1, 3))
	h.exact("Zero of rows [1,3) of F32 [5 6]", []int{5, 6}, h.read(x), slices.Concat(xv[:6], make([]float32, 12), xv[18:]))
	h.tr.Zero(x)
	h.exact("Zero of F32 [5 6]", []int{5, 6}, h.read(x), make([]float32, 30))

	bits := make([]uint16, 16)
	for i := range bits {
		bits[i] = bf16Bits(float32(i + 1))
	}
	b := h.bf16Tensor(bits)
	h.tr.Zero(b)
	h.exact("Zero of BF16 [2 8] (read by Embedding)", []int{2, 8}, h.readBF16(b), make([]float32, 16))

	ids := h.ids([]int32{1, 2, 2})
	h.tr.Zero(ids)
	table, tv, _ := h.weight(compute.F32, h.randn(3*2, 1), 3, 2)
	dst := h.output(3, 2)
	h.b.Embedding(dst, table, ids)
	h.exact("Zero of I32 [3] (rows picked by Embedding)", []int{3, 2}, h.read(dst), slices.Concat(tv[:2], tv[:2], tv[:2]))
}

func checkAddScaled(h *harness) {
	for _, n := range []int{7, 40000} {
		for _, alpha := range []float32{0.5, -3} {
			h.run(fmt.Sprintf("n%d/alpha%g", n, alpha), func(h *harness) {
				desc := fmt.Sprintf("AddScaled [%d], alpha %g", n, alpha)
				dv, xv := h.randn(n, 1), h.randn(n, 1)
				dst, x := h.input(dv, n), h.input(xv, n)
				h.tr.AddScaled(dst, x, alpha)
				want, mag := make([]float64, n), make([]float64, n)
				for i := range want {
					want[i] = float64(dv[i]) + float64(alpha)*float64(xv[i])
					mag[i] = math.Abs(float64(dv[i])) + math.Abs(float64(alpha)*float64(xv[i]))
				}
				h.nearScaled(desc+": dst += alpha·x", []int{n}, h.read(dst), want, mag, h.tol(2))
				h.unchanged(desc+": x", x, xv)
			})
		}
	}
}

// checkDeterministic runs every gradient reduction twice on the same
// inputs, at sizes where a backend splits the work, and requires
// bit-identical results (compute.Trainer's contract: recomputed
// activations must not change gradients).
func checkDeterministic(h *harness) {
	twice := func(what string, shape []int, prior []float32, op func(out compute.Tensor)) {
		h.t.Helper()
		var first []float32
		for i := range 2 {
			out := h.input(prior, shape...)
			op(out)
			got := h.read(out)
			if i == 0 {
				first = got
				continue
			}
			for j := range got {
				if math.Float32bits(got[j]) != math.Float32bits(first[j]) {
					h.t.Errorf("%s: %s = %v on the second call with the same inputs, %v on the first", what, index(shape, j), got[j], first[j])
					return
				}
			}
		}
	}
	const m, n, k = 600, 64, 48
	dyv, xv := h.randn(m*n, 1), h.randn(m*k, 1)
	dy, x := h.input(dyv, m, n), h.input(xv, m, k)
	twice(fmt.Sprintf("LinearBackwardWeight dy [%d %d], x [%d %d]: dw", m, n, m, k), []int{n, k}, h.randn(n*k, 1), func(dw compute.Tensor) { h.tr.LinearBackwardWeight(dw, dy, x) })
	twice(fmt.Sprintf("BiasBackward dy [%d %d]: db", m, n), []int{n}, h.randn(n, 1), func(db compute.Tensor) { h.tr.BiasBackward(db, dy) })

	w := h.input(h.randn(n, 1), n)
	xn := h.input(h.randn(m*n, 1), m, n)
	twice(fmt.Sprintf("RMSNormBackward x [%d %d], w [%d]: dw", m, n, n), []int{n}, h.randn(n, 1), func(dw compute.Tensor) {
		h.tr.RMSNormBackward(h.tensor(compute.F32, m, n), dw, dy, xn, w, 1e-5, false)
	})

	ids := make([]int32, m)
	for i := range ids {
		ids[i] = int32(i*7) % 50
	}
	idt := h.ids(ids)
	twice(fmt.Sprintf("EmbeddingBackward of %d ids of [50 %d]: dTable", m, n), []int{50, n}, h.randn(50*n, 1), func(dt compute.Tensor) { h.tr.EmbeddingBackward(dt, dy, idt) })

	const rows, heads, kvHeads, hd = 300, 4, 2, 16
	starts := []int32{0, 200, rows}
	a := &compute.DenseAttention{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: 0.25, Seqs: 2, SeqStart: h.ids(starts)}
	q, kt, vt := h.input(h.randn(rows*heads*hd, 1), rows, heads*hd), h.input(h.randn(rows*kvHeads*hd, 1), rows, kvHeads*hd), h.input(h.randn(rows*kvHeads*hd, 1), rows, kvHeads*hd)
	out, lse := h.output(rows, heads*hd), h.output(rows, heads)
	h.tr.DenseAttention(out, lse, q, kt, vt, a)
	dOut := h.input(h.randn(rows*heads*hd, 1), rows, heads*hd)
	for _, which := range []string{"dk", "dv"} {
		twice(fmt.Sprintf("DenseAttentionBackward of sequences [200 100], %d heads, %d kv heads of %d: %s", heads, kvHeads, hd, which), []int{rows, kvHeads * hd}, poison(rows*kvHeads*hd), func(d compute.Tensor) {
			dq, dk, dv := h.output(rows, heads*hd), h.output(rows, kvHeads*hd), h.output(rows, kvHeads*hd)
			if which == "dk" {
				dk = d
			} else {
				dv = d
			}
			h.tr.DenseAttentionBackward(dq, dk, dv, dOut, out, lse, q, kt, vt, a)
		})
	}
}

// checkConcurrent serves (forward ops) on one goroutine while another
// trains (backward and optimizer ops) on other tensors, as
// compute.Trainer allows, and compares both goroutines' results with the
// same ops run alone.
func checkConcurrent(h *harness) {
	const m, n, k = 8, 96, 64
	xv, wv := h.randn(m*k, 1), h.randn(n*k, 1)
	x := h.input(xv, m, k)
	w, _, _ := h.weight(compute.BF16, wv, n, k)
	dy, norm := h.input(h.randn(m*n, 1), m, n), h.input(h.randn(n, 1), n)
	serve := func(dst compute.Tensor) {
		h.b.Linear(dst, x, w, nil)
		h.b.RMSNorm(dst, dst, norm, 1e-5)
	}
	train := func(dw, p, mom, vel compute.Tensor) {
		h.tr.LinearBackwardWeight(dw, dy, x)
		h.tr.AdamW(p, dw, mom, vel, compute.AdamW{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, Step: 1})
	}
	newTrain := func() (dw, p, mom, vel compute.Tensor) {
		return h.tensor(compute.F32, n, k), h.input(wv, n, k), h.tensor(compute.F32, n, k), h.tensor(compute.F32, n, k)
	}
	// Alone.
	wantServe := h.output(m, n)
	serve(wantServe)
	dw, p, mom, vel := newTrain()
	train(dw, p, mom, vel)
	want1, want2 := h.read(wantServe), h.read(p)

	// Together, several rounds each.
	const rounds = 8
	servedOut := make([]compute.Tensor, rounds)
	trained := make([]compute.Tensor, rounds)
	for i := range rounds {
		servedOut[i] = h.output(m, n)
	}
	trainState := make([][4]compute.Tensor, rounds)
	for i := range rounds {
		a, b, c, d := newTrain()
		trainState[i] = [4]compute.Tensor{a, b, c, d}
		trained[i] = b
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range rounds {
			serve(servedOut[i])
		}
	}()
	for i := range rounds {
		st := trainState[i]
		train(st[0], st[1], st[2], st[3])
	}
	<-done
	h.sync("Concurrent")
	for i := range rounds {
		h.near(fmt.Sprintf("Linear and RMSNorm on one goroutine while LinearBackwardWeight and AdamW run on another, round %d: dst (against the same ops alone)", i), []int{m, n}, h.read(servedOut[i]), widen(want1), h.tol(k))
		h.exact(fmt.Sprintf("LinearBackwardWeight and AdamW on one goroutine while Linear and RMSNorm run on another, round %d: param (against the same ops alone)", i), []int{n, k}, h.read(trained[i]), want2)
	}
}
