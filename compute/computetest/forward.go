package computetest

import (
	"fmt"
	"math"
	"slices"

	"github.com/clawrl/clawrl/compute"
)

// forwardChecks are the checks of the compute.Backend ops.
var forwardChecks = []check{
	{"Tensors", checkTensors},
	{"Embedding", checkEmbedding},
	{"Linear", checkLinear},
	{"LinearMulti", checkLinearMulti},
	{"RMSNorm", checkRMSNorm},
	{"RoPE", checkRoPE},
	{"Attention", checkAttention},
	{"SiLUMul", checkSiLUMul},
	{"GELUMul", checkGELUMul},
	{"Scale", checkScale},
	{"Softcap", checkSoftcap},
	{"Add", checkAdd},
	{"LogSoftmax", checkLogSoftmax},
	{"Gather", checkGather},
}

// checkTensors covers the memory ops: NewTensor, WeightF32, WeightBF16,
// Slice, Free, Write, WriteInt32, Read, Synchronize and Copy.
func checkTensors(h *harness) {
	if h.b.Name() == "" {
		h.t.Error("Name is empty")
	}
	h.run("NewTensor", func(h *harness) {
		for _, dt := range []compute.DType{compute.F32, compute.BF16, compute.I32} {
			for _, shape := range [][]int{{3, 5}, {7}, {2, 3, 4}, {1, 1}} {
				arg := slices.Clone(shape)
				x := h.tensor(dt, arg...)
				arg[0] = 99 // the tensor keeps its own shape
				what := fmt.Sprintf("NewTensor(%v, %s)", dt, compute.ShapeString(shape))
				if x.DType() != dt || !slices.Equal(x.Shape(), shape) {
					h.t.Errorf("%s: a %v %s tensor", what, x.DType(), compute.ShapeString(x.Shape()))
					continue
				}
				n := compute.Len(x)
				switch dt {
				case compute.F32, compute.BF16:
					if got, ok := h.readAny(x); ok {
						h.exact(what+": zero fill", shape, got, make([]float32, n))
					}
				case compute.I32:
					if len(shape) > 1 {
						break // ids are vectors
					}
					// Zero ids pick row 0 of a table.
					table, _, _ := h.weight(compute.F32, []float32{1, 2, 3, 4}, 2, 2)
					dst := h.output(n, 2)
					h.b.Embedding(dst, table, x)
					want := make([]float32, 0, 2*n)
					for range n {
						want = append(want, 1, 2)
					}
					h.exact(what+": zero fill (rows picked by Embedding)", []int{n, 2}, h.read(dst), want)
				}
			}
		}
	})
	h.run("WriteRead", func(h *harness) {
		v := h.randn(24, 1)
		special := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), math.MaxFloat32, math.SmallestNonzeroFloat32, 1e-40}
		copy(v, special)
		x := h.tensor(compute.F32, 4, 6)
		h.b.Write(x, v)
		h.sync("Write")
		got := h.read(x)
		for i := range v {
			if !sameBits(got[i], v[i]) {
				h.t.Errorf("Write then Read of F32 [4 6]: %s = %v (%#08x), wrote %v (%#08x)", index([]int{4, 6}, i), got[i], math.Float32bits(got[i]), v[i], math.Float32bits(v[i]))
			}
		}
		// WriteInt32 into ids that Embedding then reads.
		ids := h.tensor(compute.I32, 3)
		h.b.WriteInt32(ids, []int32{2, 0, 1})
		table, tv, _ := h.weight(compute.F32, h.randn(9, 1), 3, 3)
		dst := h.output(3, 3)
		h.b.Embedding(dst, table, ids)
		h.exact("WriteInt32 [2 0 1] then Embedding", []int{3, 3}, h.read(dst), slices.Concat(tv[6:9], tv[0:3], tv[3:6]))
	})
	h.run("Weights", func(h *harness) {
		for _, dt := range []compute.DType{compute.F32, compute.BF16} {
			v := h.randn(5*6, 1)
			w, vals, host := h.weight(dt, v, 5, 6)
			what := fmt.Sprintf("Weight%v [5 6]", dt)
			if w.DType() != dt || !slices.Equal(w.Shape(), []int{5, 6}) {
				h.t.Errorf("%s: a %v %s tensor", what, w.DType(), compute.ShapeString(w.Shape()))
				continue
			}
			dst := h.output(5, 6)
			h.b.Embedding(dst, w, h.ids([]int32{0, 1, 2, 3, 4}))
			h.exact(what+": rows read by Embedding", []int{5, 6}, h.read(dst), vals)
			if dt == compute.F32 {
				h.exact(what+": Read", []int{5, 6}, h.read(w), vals)
			}
			h.unchangedHost(what, host, vals)
		}
		if _, err := h.b.WeightF32(make([]float32, 5), 2, 3); err == nil {
			h.t.Error("WeightF32 accepted 5 values for shape [2 3]")
		}
		if _, err := h.b.WeightBF16(make([]uint16, 7), 2, 3); err == nil {
			h.t.Error("WeightBF16 accepted 7 values for shape [2 3]")
		}
	})
	h.run("Slice", func(h *harness) {
		v := h.randn(6*4, 1)
		x := h.input(v, 6, 4)
		s := h.b.Slice(x, 2, 5)
		if !slices.Equal(s.Shape(), []int{3, 4}) || s.DType() != compute.F32 {
			h.t.Fatalf("Slice [2,5) of F32 [6 4]: a %v %s tensor", s.DType(), compute.ShapeString(s.Shape()))
		}
		h.exact("Read of Slice [2,5) of [6 4]", []int{3, 4}, h.read(s), v[8:20])
		ss := h.b.Slice(s, 1, 3)
		h.exact("Read of Slice [1,3) of Slice [2,5) of [6 4]", []int{2, 4}, h.read(ss), v[12:20])
		nv := h.randn(3*4, 1)
		h.b.Write(s, nv)
		h.exact("Write into Slice [2,5) of [6 4], then Read of the whole", []int{6, 4}, h.read(x), slices.Concat(v[:8], nv, v[20:]))
		if e := h.b.Slice(x, 3, 3); !slices.Equal(e.Shape(), []int{0, 4}) {
			h.t.Errorf("Slice [3,3) of [6 4]: shape %s, want [0 4]", compute.ShapeString(e.Shape()))
		}
		if t3 := h.b.Slice(h.tensor(compute.F32, 5, 2, 3), 1, 4); !slices.Equal(t3.Shape(), []int{3, 2, 3}) {
			h.t.Errorf("Slice [1,4) of [5 2 3]: shape %s, want [3 2 3]", compute.ShapeString(t3.Shape()))
		}

		// Slices as op operands: rows of a BF16 table, ids, and an output.
		tv := h.randn(8*5, 1)
		table, vals, _ := h.weight(compute.BF16, tv, 8, 5)
		ids := h.ids([]int32{9, 9, 0, 2, 1, 9})
		dst := h.input(make([]float32, 4*5), 4, 5)
		h.b.Embedding(h.b.Slice(dst, 1, 4), h.b.Slice(table, 3, 7), h.b.Slice(ids, 2, 5))
		want := slices.Concat(make([]float32, 5), vals[15:20], vals[25:30], vals[20:25])
		h.exact("Embedding into Slice [1,4) of [4 5] from Slice [3,7) of BF16 [8 5] by Slice [2,5) of ids", []int{4, 5}, h.read(dst), want)
	})
	h.run("Copy", func(h *harness) {
		v := h.randn(24, 1)
		src := h.input(v, 4, 6)
		dst := h.output(4, 6)
		h.b.Copy(dst, src)
		h.exact("Copy F32 [4 6]", []int{4, 6}, h.read(dst), v)
		h.unchanged("Copy F32 [4 6] src", src, v)

		other := h.output(3, 8) // same number of elements, another shape
		h.b.Copy(other, src)
		h.exact("Copy F32 [4 6] into [3 8]", []int{3, 8}, h.read(other), v)

		h.b.Copy(h.b.Slice(dst, 0, 1), h.b.Slice(src, 3, 4))
		h.b.Copy(h.b.Slice(dst, 2, 4), h.b.Slice(dst, 0, 2))
		want := slices.Concat(v[18:24], v[6:12], v[18:24], v[6:12])
		h.exact("Copy of row slices of F32 [4 6]", []int{4, 6}, h.read(dst), want)

		// BF16 and I32 tensors, seen through Embedding.
		bv := h.randn(12, 1)
		wb, bvals, _ := h.weight(compute.BF16, bv, 4, 3)
		cb := h.tensor(compute.BF16, 4, 3)
		h.b.Copy(cb, wb)
		ids := h.tensor(compute.I32, 4)
		h.b.Copy(ids, h.ids([]int32{3, 1, 1, 0}))
		got := h.output(4, 3)
		h.b.Embedding(got, cb, ids)
		h.exact("Copy BF16 [4 3] and I32 [4], read by Embedding", []int{4, 3}, h.read(got), slices.Concat(bvals[9:12], bvals[3:6], bvals[3:6], bvals[0:3]))
	})
	h.run("Free", func(h *harness) {
		v := h.randn(6, 1)
		w, vals, host := h.weight(compute.F32, v, 2, 3)
		wb, bvals, bhost := h.weight(compute.BF16, v, 2, 3)
		x := h.input(v, 2, 3)
		h.b.Free(x)
		h.b.Free(w)
		h.b.Free(wb)
		h.sync("Free")
		h.unchangedHost("Free of WeightF32", host, vals)
		h.unchangedHost("Free of WeightBF16", bhost, bvals)
	})
}

// checkEmbedding gathers rows of F32 and BF16 tables and of activations.
func checkEmbedding(h *harness) {
	for _, c := range []struct {
		rows, cols, n int
		dt            compute.DType
		activations   bool // an F32 tensor made by NewTensor, not a weight
	}{
		{11, 7, 5, compute.F32, false},
		{13, 9, 1, compute.BF16, false},
		{50, 300, 120, compute.BF16, false},
		{40, 64, 70, compute.F32, false},
		{9, 16, 4, compute.F32, true},
	} {
		kind := c.dt.String()
		if c.activations {
			kind = "activations"
		}
		desc := fmt.Sprintf("Embedding %d ids from %s [%d %d]", c.n, kind, c.rows, c.cols)
		h.run(fmt.Sprintf("%s/%dx%d/ids%d", kind, c.rows, c.cols, c.n), func(h *harness) {
			tv := h.randn(c.rows*c.cols, 1)
			var table compute.Tensor
			var vals []float32
			var host any
			if c.activations {
				table, vals = h.input(tv, c.rows, c.cols), tv
			} else {
				table, vals, host = h.weight(c.dt, tv, c.rows, c.cols)
			}
			ids := h.randIDs(c.n, c.rows)
			dst := h.output(c.n, c.cols)
			h.b.Embedding(dst, table, h.ids(ids))
			h.exact64(desc+": dst", []int{c.n, c.cols}, h.read(dst), refEmbedding(widen(vals), c.cols, ids))
			h.unchanged(desc+": table", table, vals)
			h.unchangedHost(desc, host, vals)
		})
	}
}

// linearCase is one linear layer: x [m, k] · w [n, k]ᵀ (+ bias [n]).
type linearCase struct {
	m, n, k int
	dt      compute.DType
	bias    bool
}

func (c linearCase) String() string {
	s := fmt.Sprintf("x [%d %d] · %v w [%d %d]ᵀ", c.m, c.k, c.dt, c.n, c.k)
	if c.bias {
		s += " + bias"
	}
	return s
}

// linearOperand is the x of a product with data of dtype dt as the
// backend sees it: rounded to BF16 when it multiplies BF16 data with
// BF16 products.
func (h *harness) linearOperand(x []float32, dt compute.DType) []float32 {
	if h.opt.BF16Products && dt == compute.BF16 {
		return roundBF16(x)
	}
	return x
}

func checkLinear(h *harness) {
	for _, c := range []linearCase{
		{1, 7, 13, compute.F32, false},
		{1, 33, 8, compute.BF16, true},
		{1, 64, 96, compute.BF16, false},
		{1, 50, 200, compute.F32, true},
		{5, 9, 16, compute.F32, true},
		{4, 6, 31, compute.BF16, false},
		{3, 1, 1, compute.F32, true},
		{17, 40, 70, compute.F32, false},
		{33, 50, 64, compute.BF16, true},
		{20, 72, 300, compute.BF16, false},
		{40, 35, 37, compute.F32, true},
	} {
		name := fmt.Sprintf("m%d_n%d_k%d/%v", c.m, c.n, c.k, c.dt)
		if c.bias {
			name += "/bias"
		}
		h.run(name, func(h *harness) {
			desc := "Linear " + c.String()
			xv, wv, bv := h.randn(c.m*c.k, 1), h.randn(c.n*c.k, 1), h.randn(c.n, 1)
			w, wvals, host := h.weight(c.dt, wv, c.n, c.k)
			x := h.input(xv, c.m, c.k)
			var bias compute.Tensor
			var b64, babs []float64
			if c.bias {
				bias, b64, babs = h.input(bv, c.n), widen(bv), abs(bv)
			}
			dst := h.output(c.m, c.n)
			h.b.Linear(dst, x, w, bias)
			xop := h.linearOperand(xv, c.dt)
			want := refLinear(widen(xop), widen(wvals), b64, c.m, c.n, c.k)
			mag := refLinear(abs(xop), abs(wvals), babs, c.m, c.n, c.k)
			h.nearScaled(desc+": dst", []int{c.m, c.n}, h.read(dst), want, mag, h.tol(c.k))
			h.unchanged(desc+": x", x, xv)
			h.unchanged(desc+": w", w, wvals)
			h.unchangedHost(desc, host, wvals)
			if c.bias {
				h.unchanged(desc+": bias", bias, bv)
			}
		})
	}
}

func checkLinearMulti(h *harness) {
	type out struct {
		n    int
		dt   compute.DType
		bias bool
	}
	nine := make([]out, 9) // more than a backend might take in one pass
	for i := range nine {
		nine[i] = out{3 + i, []compute.DType{compute.F32, compute.BF16}[i%2], i%3 == 0}
	}
	for _, c := range []struct {
		name string
		k    int
		outs []out
	}{
		{"qkv-bf16", 32, []out{{24, compute.BF16, true}, {8, compute.BF16, true}, {8, compute.BF16, true}}},
		{"gate-up-f32", 24, []out{{40, compute.F32, false}, {40, compute.F32, false}}},
		{"mixed", 13, []out{{5, compute.F32, true}, {7, compute.BF16, false}, {3, compute.F32, false}}},
		{"nine", 16, nine},
	} {
		for _, m := range []int{1, 6} {
			h.run(fmt.Sprintf("%s/m%d", c.name, m), func(h *harness) {
				xv := h.randn(m*c.k, 1)
				x := h.input(xv, m, c.k)
				outs := make([]compute.LinearOut, len(c.outs))
				wants, mags := make([][]float64, len(c.outs)), make([][]float64, len(c.outs))
				cases := make([]linearCase, len(c.outs))
				for i, o := range c.outs {
					w, wvals, _ := h.weight(o.dt, h.randn(o.n*c.k, 1), o.n, c.k)
					var bias compute.Tensor
					var b64, babs []float64
					if o.bias {
						bv := h.randn(o.n, 1)
						bias, b64, babs = h.input(bv, o.n), widen(bv), abs(bv)
					}
					outs[i] = compute.LinearOut{Dst: h.output(m, o.n), W: w, Bias: bias}
					xop := h.linearOperand(xv, o.dt)
					wants[i] = refLinear(widen(xop), widen(wvals), b64, m, o.n, c.k)
					mags[i] = refLinear(abs(xop), abs(wvals), babs, m, o.n, c.k)
					cases[i] = linearCase{m, o.n, c.k, o.dt, o.bias}
				}
				h.b.LinearMulti(x, outs)
				for i, o := range outs {
					h.nearScaled(fmt.Sprintf("LinearMulti output %d of %d, %v: dst", i, len(outs), cases[i]), []int{m, c.outs[i].n}, h.read(o.Dst), wants[i], mags[i], h.tol(c.k))
				}
				h.unchanged("LinearMulti: x", x, xv)
			})
		}
	}
}

// rmsCase is an RMSNorm problem: rows × cols values of scale scale,
// normalised in groups of group with eps.
type rmsCase struct {
	rows, cols, group int
	eps               float32
	scale             float64
	inPlace           bool
}

func (c rmsCase) String() string {
	s := fmt.Sprintf("x [%d %d] (scale %g), w [%d], eps %g", c.rows, c.cols, c.scale, c.group, c.eps)
	if c.inPlace {
		s += ", dst = x"
	}
	return s
}

func (c rmsCase) name() string {
	s := fmt.Sprintf("%dx%d/group%d/eps%g/scale%g", c.rows, c.cols, c.group, c.eps, c.scale)
	if c.inPlace {
		s += "/in-place"
	}
	return s
}

var rmsCases = []rmsCase{
	{3, 12, 12, 1e-5, 1, false},
	{3, 12, 4, 1e-5, 1, true},
	{5, 64, 64, 1e-5, 1e-3, false}, // eps dominates mean(x²)
	{2, 100, 100, 0.5, 1, true},
	{4, 96, 8, 1e-6, 30, false},
	{1, 1000, 1000, 1e-5, 1, false},
	{70, 512, 512, 1e-6, 1, false}, // enough rows to split over threads
}

func checkRMSNorm(h *harness) {
	for _, c := range rmsCases {
		h.run(c.name(), func(h *harness) {
			desc := "RMSNorm " + c.String()
			xv, wv := h.randn(c.rows*c.cols, c.scale), h.randn(c.group, 1)
			x, w := h.input(xv, c.rows, c.cols), h.input(wv, c.group)
			dst := x
			if !c.inPlace {
				dst = h.output(c.rows, c.cols)
			}
			h.b.RMSNorm(dst, x, w, c.eps)
			want := refRMSNorm(widen(xv), widen(wv), float64(c.eps))
			h.near(desc+": dst", []int{c.rows, c.cols}, h.read(dst), want, h.tol(c.group))
			h.unchanged(desc+": w", w, wv)
			if !c.inPlace {
				h.unchanged(desc+": x", x, xv)
			}
		})
	}
}

// ropeCase is a RoPE problem: tokens rows of heads heads of headDim, at
// positions below maxPos.
type ropeCase struct {
	tokens, heads, headDim, maxPos int
}

func (c ropeCase) String() string {
	return fmt.Sprintf("x [%d %d×%d], tables [%d %d]", c.tokens, c.heads, c.headDim, c.maxPos, c.headDim/2)
}

var ropeCases = []ropeCase{
	{1, 1, 8, 4},
	{5, 3, 8, 10},
	{4, 2, 6, 12},
	{7, 4, 64, 40},
	{3, 2, 128, 2000},
	{70, 8, 64, 80}, // enough rows to split over threads
}

// ropeTables returns cos and sin tables [maxPos, headDim/2] of the angles
// p·θ^(−2j/headDim).
func ropeTables(maxPos, headDim int) (cos, sin []float32) {
	half := headDim / 2
	cos, sin = make([]float32, maxPos*half), make([]float32, maxPos*half)
	for p := range maxPos {
		for j := range half {
			a := float64(p) * math.Pow(10000, -float64(2*j)/float64(headDim))
			cos[p*half+j], sin[p*half+j] = float32(math.Cos(a)), float32(math.Sin(a))
		}
	}
	return cos, sin
}

// ropeProblem draws x and positions for c (first and last table rows
// included, some positions repeated) and uploads the tables.
func (h *harness) ropeProblem(c ropeCase) (xv []float32, pos []int32, cosv, sinv []float32, ct, st compute.Tensor) {
	xv = h.randn(c.tokens*c.heads*c.headDim, 1)
	pos = h.randIDs(c.tokens, c.maxPos)
	if c.tokens > 3 {
		pos[2] = pos[1]
	}
	cosv, sinv = ropeTables(c.maxPos, c.headDim)
	ct, st = h.input(cosv, c.maxPos, c.headDim/2), h.input(sinv, c.maxPos, c.headDim/2)
	return
}

func checkRoPE(h *harness) {
	for _, c := range ropeCases {
		h.run(fmt.Sprintf("t%d_h%d_d%d", c.tokens, c.heads, c.headDim), func(h *harness) {
			desc := "RoPE " + c.String()
			xv, pos, cosv, sinv, ct, st := h.ropeProblem(c)
			cols := c.heads * c.headDim
			x := h.input(xv, c.tokens, cols)
			h.b.RoPE(x, h.ids(pos), ct, st, c.headDim)
			want := refRoPE(widen(xv), cols, pos, widen(cosv), widen(sinv), c.headDim, 1)
			h.near(desc+": x", []int{c.tokens, cols}, h.read(x), want, h.tol(2))
			h.unchanged(desc+": cos", ct, cosv)
			h.unchanged(desc+": sin", st, sinv)
		})
	}
}

// checkGELUMul checks compute.Gemma's GELUMul against the tanh form in
// float64, on a backend that implements it.
func checkGELUMul(h *harness) {
	gb, ok := h.b.(compute.Gemma)
	if !ok {
		h.t.Skipf("%s does not implement compute.Gemma", h.b.Name())
	}
	checkGated(h, "GELUMul", gb.GELUMul, refGELUMul)
}

func checkSiLUMul(h *harness) { checkGated(h, "SiLUMul", h.b.SiLUMul, refSiLUMul) }

// checkGated checks a gated activation op, dst = act(gate)·up, against
// its float64 reference ref, with dst apart and aliasing each input, on
// the activation's tails too.
func checkGated(h *harness, op string, run func(dst, gate, up compute.Tensor), ref func(gate, up []float64) []float64) {
	for _, n := range []int{1, 37, 1000, 20000} {
		for _, alias := range []string{"", "gate", "up"} {
			name := fmt.Sprintf("n%d", n)
			if alias != "" {
				name += "/dst=" + alias
			}
			h.run(name, func(h *harness) {
				desc := fmt.Sprintf("%s [%d]", op, n)
				if alias != "" {
					desc += ", dst = " + alias
				}
				gv, uv := h.randn(n, 4), h.randn(n, 1)
				if n > 4 { // the tails
					gv[1], gv[2], gv[3] = 90, -90, -20
				}
				gate, up := h.input(gv, n), h.input(uv, n)
				var dst compute.Tensor
				switch alias {
				case "gate":
					dst = gate
				case "up":
					dst = up
				default:
					dst = h.output(n)
				}
				run(dst, gate, up)
				h.near(desc+": dst", []int{n}, h.read(dst), ref(widen(gv), widen(uv)), h.tol(4))
				if alias != "gate" {
					h.unchanged(desc+": gate", gate, gv)
				}
				if alias != "up" {
					h.unchanged(desc+": up", up, uv)
				}
			})
		}
	}
}

func checkAdd(h *harness) {
	for _, n := range []int{1, 33, 40000} {
		for _, alias := range []string{"", "dst=a", "dst=b", "a=b", "dst=a=b"} {
			name := fmt.Sprintf("n%d", n)
			if alias != "" {
				name += "/" + alias
			}
			h.run(name, func(h *harness) {
				desc := fmt.Sprintf("Add [%d]", n)
				if alias != "" {
					desc += ", " + alias
				}
				av, bv := h.randn(n, 1), h.randn(n, 3)
				a, b := h.input(av, n), h.input(bv, n)
				dst := h.output(n)
				switch alias {
				case "dst=a":
					dst = a
				case "dst=b":
					dst = b
				case "a=b":
					b, bv = a, av
				case "dst=a=b":
					b, bv, dst = a, av, a
				}
				h.b.Add(dst, a, b)
				want := make([]float64, n)
				for i := range want {
					want[i] = float64(av[i]) + float64(bv[i])
				}
				h.exact64(desc+": dst", []int{n}, h.read(dst), want)
				if dst != a {
					h.unchanged(desc+": a", a, av)
				}
				if dst != b {
					h.unchanged(desc+": b", b, bv)
				}
			})
		}
	}
}

func checkLogSoftmax(h *harness) {
	for _, c := range []struct {
		rows, cols int
		scale      float64
		special    string
		inPlace    bool
	}{
		{1, 1, 1, "", false},
		{4, 17, 3, "", true},
		{3, 3000, 10, "dominant", false}, // more than one chunk of a backend that sums in chunks
		{2, 40, 1, "-inf", true},
		{5, 1024, 1, "", false},
		{2, 8, 1, "large", false},
	} {
		name := fmt.Sprintf("%dx%d", c.rows, c.cols)
		if c.special != "" {
			name += "/" + c.special
		}
		if c.inPlace {
			name += "/in-place"
		}
		h.run(name, func(h *harness) {
			desc := fmt.Sprintf("LogSoftmax [%d %d] (scale %g)", c.rows, c.cols, c.scale)
			xv := h.randn(c.rows*c.cols, c.scale)
			switch c.special {
			case "dominant":
				xv[5] = 1e4 // must not overflow
				desc += " with a logit of 1e4"
			case "-inf":
				xv[c.cols+3], xv[c.cols+7] = float32(math.Inf(-1)), float32(math.Inf(-1)) // masked logits
				desc += " with −Inf logits"
			case "large":
				for i := range xv {
					xv[i] += 3e4
				}
				desc += " around 3e4"
			}
			x := h.input(xv, c.rows, c.cols)
			dst := x
			if c.inPlace {
				desc += ", dst = x"
			} else {
				dst = h.output(c.rows, c.cols)
			}
			h.b.LogSoftmax(dst, x)
			want := refLogSoftmax(widen(xv), c.cols)
			h.nearScaled(desc+": dst", []int{c.rows, c.cols}, h.read(dst), want, logScale(want), h.tol(c.cols))
			if !c.inPlace {
				h.unchanged(desc+": x", x, xv)
			}
		})
	}
}

func checkGather(h *harness) {
	for _, c := range []struct{ rows, cols int }{{1, 1}, {5, 9}, {300, 40}} {
		h.run(fmt.Sprintf("%dx%d", c.rows, c.cols), func(h *harness) {
			desc := fmt.Sprintf("Gather from [%d %d]", c.rows, c.cols)
			xv := h.randn(c.rows*c.cols, 1)
			idx := h.randIDs(c.rows, c.cols)
			x := h.input(xv, c.rows, c.cols)
			dst := h.output(c.rows)
			h.b.Gather(dst, x, h.ids(idx))
			want := make([]float32, c.rows)
			for i, j := range idx {
				want[i] = xv[i*c.cols+int(j)]
			}
			h.exact(desc+": dst", []int{c.rows}, h.read(dst), want)
			h.unchanged(desc+": x", x, xv)
		})
	}
}
