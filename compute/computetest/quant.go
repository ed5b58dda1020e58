package computetest

import (
	"fmt"
	"math"
	"slices"

	"github.com/clawrl/clawrl/compute"
)

// quantChecks are the checks of quantized weights (compute.QuantBackend):
// run when the backend implements it.
var quantChecks = []check{
	{"QuantWeights", checkQuantWeights},
	{"QuantEmbedding", checkQuantEmbedding},
	{"QuantLinear", checkQuantLinear},
	{"QuantLinearMulti", checkQuantLinearMulti},
}

// quantTrainerChecks are the Trainer ops that take quantized weights.
var quantTrainerChecks = []check{
	{"QuantConvert", checkQuantConvert},
	{"QuantLinearBackwardInput", checkQuantLinearBackwardInput},
}

var quantTypes = []compute.DType{compute.Q8_0, compute.Q4_0, compute.Q4_1, compute.Q5_1, compute.IQ4_NL, compute.Q6_16}

// quantWeight makes a weight of the quantized dtype dt holding v
// quantized (compute.Quantize, ggml's reference quantizer) and returns
// it with the values it holds (dequantized: exact, but for Q4_1's float32
// d·q + m) and its blocks, which
// must stay unchanged.
func (h *harness) quantWeight(dt compute.DType, v []float32, shape ...int) (w compute.Tensor, vals []float32, blocks []byte) {
	h.t.Helper()
	qb, ok := h.b.(compute.QuantBackend)
	if !ok {
		h.t.Fatalf("backend %s is not a compute.QuantBackend", h.b.Name())
	}
	blocks = make([]byte, dt.Bytes(len(v)))
	if err := compute.Quantize(dt, blocks, v); err != nil {
		h.t.Fatal(err)
	}
	vals = make([]float32, len(v))
	if err := compute.Dequantize(dt, vals, blocks); err != nil {
		h.t.Fatal(err)
	}
	w, err := qb.WeightQuant(dt, slices.Clone(blocks), shape...)
	if err != nil {
		h.t.Fatalf("WeightQuant(%v, %s): %v", dt, compute.ShapeString(shape), err)
	}
	return w, vals, blocks
}

// quantizedX is x as a product with a quantized weight takes it (the
// package doc of compute): each row's blocks of 32 quantized to int8
// with a float32 scale, here the exact values d·q.
func quantizedX(x []float32, k int) []float64 {
	out := make([]float64, len(x))
	for b := 0; b < len(x); b += compute.QK {
		blk := x[b : b+compute.QK]
		var amax float32
		for _, v := range blk {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		for j, v := range blk {
			p := v * id // a float32 product
			out[b+j] = float64(d) * math.RoundToEven(float64(p))
		}
	}
	return out
}

func checkQuantWeights(h *harness) {
	qb := h.b.(compute.QuantBackend)
	for _, dt := range quantTypes {
		v := h.randn(5*64, 1)
		w, vals, blocks := h.quantWeight(dt, v, 5, 64)
		what := fmt.Sprintf("WeightQuant %v [5 64]", dt)
		if w.DType() != dt || !slices.Equal(w.Shape(), []int{5, 64}) {
			h.t.Errorf("%s: a %v %s tensor", what, w.DType(), compute.ShapeString(w.Shape()))
			continue
		}
		dst := h.output(5, 64)
		h.b.Embedding(dst, w, h.ids([]int32{0, 1, 2, 3, 4}))
		h.exact(what+": rows read by Embedding", []int{5, 64}, h.read(dst), vals)
		// The blocks may be reused once WeightQuant returns.
		clear(blocks)
		h.b.Embedding(dst, w, h.ids([]int32{0, 1, 2, 3, 4}))
		h.exact(what+": rows read after the blocks were overwritten", []int{5, 64}, h.read(dst), vals)
		if _, err := qb.WeightQuant(dt, make([]byte, dt.Bytes(64)-1), 2, 32); err == nil {
			h.t.Errorf("WeightQuant(%v) accepted too few bytes for [2 32]", dt)
		}
		if _, err := qb.WeightQuant(dt, make([]byte, dt.Bytes(96)), 2, 48); err == nil {
			h.t.Errorf("WeightQuant(%v) accepted rows of 48 values (not a multiple of %d)", dt, compute.QK)
		}
		h.b.Free(w)
	}
	if _, err := qb.WeightQuant(compute.F32, make([]byte, 256), 2, 32); err == nil {
		h.t.Error("WeightQuant accepted dtype F32")
	}
}

// checkQuantEmbedding gathers rows of quantized tables, whole and through
// a Slice.
func checkQuantEmbedding(h *harness) {
	for _, dt := range quantTypes {
		for _, c := range []struct{ rows, cols, n int }{{11, 32, 5}, {50, 320, 120}, {70, 64, 1}} {
			h.run(fmt.Sprintf("%v/%dx%d/ids%d", dt, c.rows, c.cols, c.n), func(h *harness) {
				desc := fmt.Sprintf("Embedding %d ids from %v [%d %d]", c.n, dt, c.rows, c.cols)
				table, vals, _ := h.quantWeight(dt, h.randn(c.rows*c.cols, 1), c.rows, c.cols)
				ids := h.randIDs(c.n, c.rows)
				dst := h.output(c.n, c.cols)
				h.b.Embedding(dst, table, h.ids(ids))
				h.exact64(desc+": dst", []int{c.n, c.cols}, h.read(dst), refEmbedding(widen(vals), c.cols, ids))
				// Rows [3, 7) of the table, as a Slice.
				sub := h.b.Slice(table, 3, 7)
				sd := h.output(3, c.cols)
				h.b.Embedding(sd, sub, h.ids([]int32{3, 0, 2}))
				want := slices.Concat(vals[6*c.cols:7*c.cols], vals[3*c.cols:4*c.cols], vals[5*c.cols:6*c.cols])
				h.exact(desc+": rows of Slice [3,7)", []int{3, c.cols}, h.read(sd), want)
			})
		}
	}
}

func checkQuantLinear(h *harness) {
	for _, dt := range quantTypes {
		for _, c := range []linearCase{
			{1, 7, 32, dt, false},
			{1, 64, 256, dt, true},
			{1, 100, 96, dt, false},
			{2, 33, 64, dt, true},
			{7, 64, 64, dt, false},
			{8, 40, 128, dt, true},
			{20, 96, 160, dt, false},
			{33, 50, 64, dt, true},
		} {
			name := fmt.Sprintf("m%d_n%d_k%d/%v", c.m, c.n, c.k, c.dt)
			if c.bias {
				name += "/bias"
			}
			h.run(name, func(h *harness) {
				desc := "Linear " + c.String()
				xv, wv, bv := h.randn(c.m*c.k, 1), h.randn(c.n*c.k, 1), h.randn(c.n, 1)
				w, wvals, blocks := h.quantWeight(c.dt, wv, c.n, c.k)
				x := h.input(xv, c.m, c.k)
				var bias compute.Tensor
				var b64, babs []float64
				if c.bias {
					bias, b64, babs = h.input(bv, c.n), widen(bv), abs(bv)
				}
				dst := h.output(c.m, c.n)
				h.b.Linear(dst, x, w, bias)
				xq := quantizedX(xv, c.k)
				want := refLinear(xq, widen(wvals), b64, c.m, c.n, c.k)
				mag := refLinear(absF64(xq), abs(wvals), babs, c.m, c.n, c.k)
				h.nearScaled(desc+": dst", []int{c.m, c.n}, h.read(dst), want, mag, h.tol(c.k))
				h.unchanged(desc+": x", x, xv)
				if c.bias {
					h.unchanged(desc+": bias", bias, bv)
				}
				// The weight is unchanged: read it back through Embedding.
				all := make([]int32, c.n)
				for i := range all {
					all[i] = int32(i)
				}
				back := h.output(c.n, c.k)
				h.b.Embedding(back, w, h.ids(all))
				h.exact(desc+": w", []int{c.n, c.k}, h.read(back), wvals)
				_ = blocks
			})
		}
	}
}

// checkQuantLinearMulti mixes quantized products with F32 and BF16 ones
// over one x, as a model whose norms or head stay in float does.
func checkQuantLinearMulti(h *harness) {
	type out struct {
		n    int
		dt   compute.DType
		bias bool
	}
	for _, c := range []struct {
		name string
		k    int
		outs []out
	}{
		{"qkv-q8", 64, []out{{64, compute.Q8_0, true}, {32, compute.Q8_0, true}, {32, compute.Q8_0, true}}},
		{"gate-up-q4", 96, []out{{70, compute.Q4_0, false}, {70, compute.Q4_0, false}}},
		{"mixed", 64, []out{{40, compute.Q4_0, true}, {7, compute.BF16, false}, {33, compute.Q8_0, false}, {5, compute.F32, true}}},
		{"q4_1-mixed", 96, []out{{70, compute.Q4_1, false}, {33, compute.Q4_0, true}, {40, compute.Q4_1, true}}},
		{"q5_1-mixed", 64, []out{{50, compute.Q5_1, true}, {33, compute.Q4_1, false}, {8, compute.F32, false}}},
		{"iq4_nl-mixed", 64, []out{{40, compute.IQ4_NL, true}, {33, compute.Q8_0, false}, {8, compute.F32, false}}},
		{"q6_16-mixed", 96, []out{{45, compute.Q6_16, true}, {33, compute.Q4_0, false}, {8, compute.BF16, false}}},
	} {
		for _, m := range []int{1, 9} {
			h.run(fmt.Sprintf("%s/m%d", c.name, m), func(h *harness) {
				xv := h.randn(m*c.k, 1)
				x := h.input(xv, m, c.k)
				outs := make([]compute.LinearOut, len(c.outs))
				wants, mags := make([][]float64, len(c.outs)), make([][]float64, len(c.outs))
				for i, o := range c.outs {
					var w compute.Tensor
					var wvals []float32
					if o.dt.Quantized() {
						w, wvals, _ = h.quantWeight(o.dt, h.randn(o.n*c.k, 1), o.n, c.k)
					} else {
						w, wvals, _ = h.weight(o.dt, h.randn(o.n*c.k, 1), o.n, c.k)
					}
					var bias compute.Tensor
					var b64, babs []float64
					if o.bias {
						bv := h.randn(o.n, 1)
						bias, b64, babs = h.input(bv, o.n), widen(bv), abs(bv)
					}
					outs[i] = compute.LinearOut{Dst: h.output(m, o.n), W: w, Bias: bias}
					var xop []float64
					if o.dt.Quantized() {
						xop = quantizedX(xv, c.k)
					} else {
						xop = widen(h.linearOperand(xv, o.dt))
					}
					wants[i] = refLinear(xop, widen(wvals), b64, m, o.n, c.k)
					mags[i] = refLinear(absF64(xop), abs(wvals), babs, m, o.n, c.k)
				}
				h.b.LinearMulti(x, outs)
				for i, o := range outs {
					lc := linearCase{m, c.outs[i].n, c.k, c.outs[i].dt, c.outs[i].bias}
					h.nearScaled(fmt.Sprintf("LinearMulti output %d of %d, %v: dst", i, len(outs), lc), []int{m, c.outs[i].n}, h.read(o.Dst), wants[i], mags[i], h.tol(c.k))
				}
				h.unchanged("LinearMulti: x", x, xv)
			})
		}
	}
}

// checkQuantConvert dequantizes whole weights and slices of them.
func checkQuantConvert(h *harness) {
	for _, dt := range quantTypes {
		w, vals, _ := h.quantWeight(dt, h.randn(40*96, 1), 40, 96)
		dst := h.output(40, 96)
		h.tr.Convert(dst, w)
		h.exact(fmt.Sprintf("Convert %v [40 96] to F32", dt), []int{40, 96}, h.read(dst), vals)
		part := h.output(5, 96)
		h.tr.Convert(part, h.b.Slice(w, 33, 38))
		h.exact(fmt.Sprintf("Convert Slice [33,38) of %v [40 96] to F32", dt), []int{5, 96}, h.read(part), vals[33*96:38*96])
	}
}

// checkQuantLinearBackwardInput is dx = dy·dequant(w), with and without
// accumulating.
func checkQuantLinearBackwardInput(h *harness) {
	for _, dt := range quantTypes {
		for _, c := range []struct{ m, n, k int }{{1, 64, 32}, {6, 70, 96}, {40, 600, 64}} {
			for _, acc := range []bool{false, true} {
				h.run(fmt.Sprintf("%v/m%d_n%d_k%d/acc%v", dt, c.m, c.n, c.k, acc), func(h *harness) {
					desc := fmt.Sprintf("LinearBackwardInput dy [%d %d] · %v w [%d %d] (accumulate %v)", c.m, c.n, dt, c.n, c.k, acc)
					w, wvals, _ := h.quantWeight(dt, h.randn(c.n*c.k, 1), c.n, c.k)
					dyv := h.randn(c.m*c.n, 1)
					dy := h.input(dyv, c.m, c.n)
					var dx compute.Tensor
					var base []float32
					if acc {
						base = h.randn(c.m*c.k, 1)
						dx = h.input(base, c.m, c.k)
					} else {
						dx = h.output(c.m, c.k)
					}
					h.tr.LinearBackwardInput(dx, dy, w, acc)
					want := refMatMul(widen(dyv), widen(wvals), nil, c.m, c.k, c.n, false, false, 1, 0)
					mag := refMatMul(abs(dyv), abs(wvals), nil, c.m, c.k, c.n, false, false, 1, 0)
					if acc {
						want, mag = plus(want, base), plusAbs(mag, base)
					}
					h.nearScaled(desc+": dx", []int{c.m, c.k}, h.read(dx), want, mag, h.tol(c.n))
					h.unchanged(desc+": dy", dy, dyv)
				})
			}
		}
	}
}

// absF64 returns |v| elementwise.
func absF64(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = math.Abs(x)
	}
	return out
}
