// Package computetest is the conformance suite of compute backends: every
// op of compute.Backend and compute.Trainer, forward and backward, checked
// against a float64 reference implementation on seeded random inputs.
//
// A backend's tests call it with the backend as a parameter:
//
//	func TestConformance(t *testing.T) {
//		computetest.Trainer(t, cpu.New(), computetest.Options{})
//	}
//
// so the CPU backend and a device backend run the same checks. The suite
// talks to the backend through the compute interfaces only: it allocates
// tensors with NewTensor and Weight*, fills them with Write and
// WriteInt32, and reads results with Read (BF16 tensors through
// Embedding, which widens them exactly, or a Trainer's Convert).
//
// What every check does:
//
//   - Inputs are drawn from a math/rand/v2 source seeded by the subtest's
//     name (and Options.Seed), so a failure repeats under -run.
//   - Outputs that an op overwrites ("dst =") are poisoned first, with NaN
//     and huge values written through Write, so an op that reads its
//     output or leaves part of it unwritten fails; outputs that an op adds
//     onto ("+=") start from random non-zero values.
//   - Inputs the op only reads are read back afterwards and must be
//     unchanged, bit for bit; so must the host data of weights.
//   - The result is compared with the float64 reference of reference.go,
//     written from the definitions in package compute and independent of
//     any backend. Gathers, copies, conversions, Add and Scale must be
//     exact (one rounding of the exact result); sums must agree to a
//     tolerance derived from float32 arithmetic (see Options): a relative
//     error of 16·2⁻²⁴·√k for a sum of k terms, taken relative to the sum
//     of the terms' magnitudes for products (so that cancellation is
//     allowed for, and nothing more). Gradients are compared with the
//     reference's analytic gradient, and for attention, RMSNorm, RoPE,
//     SiLU and log-probabilities also with central differences of the
//     reference's forward pass.
//   - Gradient reductions must give bit-identical results when repeated,
//     and serving ops on one goroutine must not disturb training ops on
//     another (compute.Trainer's contract).
//   - A failure names the op, the case (shapes, dtypes, aliasing), the
//     output and its worst element, with the value, the reference, the
//     error and the tolerance.
//
// A backend that implements compute.QuantBackend also runs the checks of
// quantized weights (quant.go): Q8_0, Q4_0, Q4_1, Q5_1, IQ4_NL and Q6_16 weights made from blocks of
// ggml's reference quantizer (compute.Quantize), read back exactly through
// Embedding and a Trainer's Convert, and Linear, LinearMulti (mixed with
// F32 and BF16 products) and LinearBackwardInput against the reference on
// the exactly dequantized weights and, for the forward products, x
// quantized to Q8_0 blocks as the compute package doc says.
//
// Shapes are small (the suite runs under the race detector in CI) but
// include odd sizes, decode (one row) and batched rows, block sizes 1, 4
// and 16 of the paged KV cache, grouped-query heads, and enough elements
// for a backend to split work over threads.
package computetest

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/clawrl/clawrl/compute"
)

// Options describe the backend under test.
type Options struct {
	// BF16Products says that the backend rounds the activation operand of
	// a product with BF16 data to BF16 (to nearest even) before
	// multiplying, and sums the exact products in float32: x in Linear and
	// LinearMulti with a BF16 weight, and q in Attention over a BF16 KV
	// cache (with the scale applied to the scores after the product). It
	// is cpu.Options{Precision: kernels.PrecisionBF16}. The reference then
	// rounds the same operands, so the tolerances stay those of float32
	// sums. Without it, products with BF16 data are taken in float32 on the
	// exactly widened values.
	BF16Products bool
	// Slack multiplies every tolerance of an inexact comparison (0 is 1).
	// The defaults fit float32 arithmetic with sums in any order and
	// transcendental functions good to a few ulp; a backend with coarser
	// arithmetic (fast approximate exponentials, probabilities rounded to
	// BF16 in attention) says how much coarser here.
	Slack float64
	// Seed varies the random inputs (every seed is as good as another).
	Seed uint64
}

// Backend runs the conformance checks of every compute.Backend op on b,
// one subtest per op (and per case below it). It runs ops one at a time.
func Backend(t *testing.T, b compute.Backend, opt Options) {
	t.Helper()
	for _, c := range forwardChecks {
		t.Run(c.name, func(t *testing.T) { c.run(newHarness(t, b, opt)) })
	}
	if _, ok := b.(compute.QuantBackend); ok {
		for _, c := range quantChecks {
			t.Run(c.name, func(t *testing.T) { c.run(newHarness(t, b, opt)) })
		}
	}
}

// Trainer runs Backend's checks and those of every compute.Trainer op on
// b: the backward ops against the reference's gradients and the optimizer
// ops against their float64 formulas.
func Trainer(t *testing.T, b compute.Trainer, opt Options) {
	t.Helper()
	Backend(t, b, opt)
	for _, c := range trainerChecks {
		t.Run(c.name, func(t *testing.T) { c.run(newHarness(t, b, opt)) })
	}
	if _, ok := b.(compute.QuantBackend); ok {
		for _, c := range quantTrainerChecks {
			t.Run(c.name, func(t *testing.T) { c.run(newHarness(t, b, opt)) })
		}
	}
}

// check is the conformance check of one op (or a group of ops that can
// only be checked together, such as StoreKV and Attention).
type check struct {
	name string
	run  func(h *harness)
}

// u32 is the unit roundoff of float32.
const u32 = 1.0 / (1 << 24)

// harness holds what one subtest needs: the backend, its options and a
// random source seeded from the subtest's name.
type harness struct {
	t   *testing.T
	b   compute.Backend
	tr  compute.Trainer // b as a Trainer, or nil
	opt Options
	r   *rand.Rand
}

func newHarness(t *testing.T, b compute.Backend, opt Options) *harness {
	f := fnv.New64a()
	f.Write([]byte(t.Name()))
	tr, _ := b.(compute.Trainer)
	return &harness{t: t, b: b, tr: tr, opt: opt, r: rand.New(rand.NewPCG(f.Sum64(), opt.Seed))}
}

// run runs fn as a subtest with a harness of its own (its own random
// source, so that cases do not shift each other's inputs).
func (h *harness) run(name string, fn func(h *harness)) {
	h.t.Helper()
	h.t.Run(name, func(t *testing.T) { fn(newHarness(t, h.b, h.opt)) })
}

// tol is the tolerance of a value computed as a sum of k float32 terms:
// a relative error of about u32·√k grows from rounding in any order; the
// factor 16 leaves room for the terms' own rounding and uneven orders, and
// Options.Slack scales it.
func (h *harness) tol(k int) float64 {
	s := h.opt.Slack
	if s == 0 {
		s = 1
	}
	return s * 16 * u32 * math.Sqrt(float64(max(k, 1)))
}

// randn returns n values drawn from N(0, scale²).
func (h *harness) randn(n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(h.r.NormFloat64() * scale)
	}
	return v
}

// randIDs returns n ids in [0, hi), with first and last ids present when
// n allows.
func (h *harness) randIDs(n, hi int) []int32 {
	v := make([]int32, n)
	for i := range v {
		v[i] = int32(h.r.IntN(hi))
	}
	if n > 0 {
		v[0] = int32(hi - 1)
	}
	if n > 1 {
		v[n-1] = 0
	}
	return v
}

// tensor allocates a tensor, failing the test on error.
func (h *harness) tensor(dt compute.DType, shape ...int) compute.Tensor {
	h.t.Helper()
	x, err := h.b.NewTensor(dt, shape...)
	if err != nil {
		h.t.Fatalf("NewTensor(%v, %s): %v", dt, compute.ShapeString(shape), err)
	}
	return x
}

// input makes an F32 tensor holding v.
func (h *harness) input(v []float32, shape ...int) compute.Tensor {
	h.t.Helper()
	x := h.tensor(compute.F32, shape...)
	h.b.Write(x, v)
	return x
}

// ids makes an I32 vector holding v.
func (h *harness) ids(v []int32) compute.Tensor {
	h.t.Helper()
	x := h.tensor(compute.I32, len(v))
	h.b.WriteInt32(x, v)
	return x
}

// poison returns n values that no op may leave in an output it overwrites
// or read from it: NaNs and huge values of both signs.
func poison(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		switch i % 4 {
		case 0, 2:
			v[i] = float32(math.NaN())
		case 1:
			v[i] = 1e30
		case 3:
			v[i] = -3e38
		}
	}
	return v
}

// output makes an F32 tensor for an op to overwrite, poisoned.
func (h *harness) output(shape ...int) compute.Tensor {
	h.t.Helper()
	x := h.tensor(compute.F32, shape...)
	h.b.Write(x, poison(compute.Len(x)))
	return x
}

// weight makes a weight of dtype dt (F32 or BF16) from v and returns it
// with the values it holds (v rounded to BF16 for a BF16 weight) and the
// host data it was made from, which must stay unchanged (see unchangedHost).
func (h *harness) weight(dt compute.DType, v []float32, shape ...int) (w compute.Tensor, vals []float32, host any) {
	h.t.Helper()
	var err error
	switch dt {
	case compute.F32:
		data := append([]float32(nil), v...)
		w, err = h.b.WeightF32(data, shape...)
		vals, host = v, data
	case compute.BF16:
		data := make([]uint16, len(v))
		for i, x := range v {
			data[i] = bf16Bits(x)
		}
		w, err = h.b.WeightBF16(data, shape...)
		vals, host = roundBF16(v), data
	default:
		h.t.Fatalf("weight of dtype %v", dt)
	}
	if err != nil {
		h.t.Fatalf("Weight%v(%s): %v", dt, compute.ShapeString(shape), err)
	}
	return w, vals, host
}

// unchangedHost checks that the host data a weight was made from, holding
// vals (or their BF16 bits), was not written to.
func (h *harness) unchangedHost(what string, host any, vals []float32) {
	h.t.Helper()
	switch d := host.(type) {
	case []float32:
		for i := range d {
			if math.Float32bits(d[i]) != math.Float32bits(vals[i]) {
				h.t.Errorf("%s: host data of the weight changed at %d: %v, was %v", what, i, d[i], vals[i])
				return
			}
		}
	case []uint16:
		for i := range d {
			if d[i] != bf16Bits(vals[i]) {
				h.t.Errorf("%s: host data of the BF16 weight changed at %d: %#04x, was %#04x", what, i, d[i], bf16Bits(vals[i]))
				return
			}
		}
	}
}

// read returns the values of an F32 tensor, or of a BF16 tensor widened
// (which takes a Trainer's Convert; ok is false on a plain Backend).
func (h *harness) read(x compute.Tensor) []float32 {
	h.t.Helper()
	v, ok := h.readAny(x)
	if !ok {
		h.t.Fatalf("read: cannot read a %v tensor from a backend that is not a Trainer", x.DType())
	}
	return v
}

func (h *harness) readAny(x compute.Tensor) ([]float32, bool) {
	h.t.Helper()
	src := x
	switch x.DType() {
	case compute.F32:
	case compute.BF16, compute.Q8_0: // a Q8_0 KV cache dequantizes
		if h.tr == nil {
			return nil, false
		}
		src = h.tensor(compute.F32, x.Shape()...)
		h.tr.Convert(src, x)
	default:
		h.t.Fatalf("read: dtype %v", x.DType())
	}
	v := make([]float32, compute.Len(x))
	if err := h.b.Read(v, src); err != nil {
		h.t.Fatalf("Read %v %s: %v", x.DType(), compute.ShapeString(x.Shape()), err)
	}
	return v, true
}

// unchanged checks that the input x (F32, or BF16 on a Trainer) still
// holds want, bit for bit (any NaN for a NaN).
func (h *harness) unchanged(what string, x compute.Tensor, want []float32) {
	h.t.Helper()
	got, ok := h.readAny(x)
	if !ok {
		return
	}
	for i := range got {
		if !sameBits(got[i], want[i]) {
			h.t.Errorf("%s: input changed at %s: %v, was %v", what, index(x.Shape(), i), got[i], want[i])
			return
		}
	}
}

func sameBits(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || a != a && b != b
}

// index formats flat index i of a tensor of the given shape as [a b c].
func index(shape []int, i int) string {
	if len(shape) == 0 {
		return fmt.Sprintf("[%d]", i)
	}
	idx := make([]int, len(shape))
	for d := len(shape) - 1; d >= 0; d-- {
		if shape[d] > 0 {
			idx[d] = i % shape[d]
			i /= shape[d]
		}
	}
	return compute.ShapeString(idx)
}

// exact checks got against want, element for element (NaN matches NaN, and
// −0 matches +0).
func (h *harness) exact(what string, shape []int, got, want []float32) {
	h.t.Helper()
	if len(got) != len(want) {
		h.t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	bad, first := 0, -1
	for i := range got {
		if got[i] != want[i] && !(got[i] != got[i] && want[i] != want[i]) {
			bad++
			if first < 0 {
				first = i
			}
		}
	}
	if bad > 0 {
		h.t.Errorf("%s: %s = %v, want %v exactly (%d of %d elements differ)", what, index(shape, first), got[first], want[first], bad, len(got))
	}
}

// exact64 is exact with a float64 reference rounded to float32.
func (h *harness) exact64(what string, shape []int, got []float32, want []float64) {
	h.t.Helper()
	w := make([]float32, len(want))
	for i, v := range want {
		w[i] = float32(v)
	}
	h.exact(what, shape, got, w)
}

// near checks got against the float64 reference want: the error of every
// element, relative to its magnitude and at least to the root mean square
// of want (so that the elements near zero of a result are judged by the
// size of the others), must be at most tol. Infinities must match; a NaN
// never does.
func (h *harness) near(what string, shape []int, got []float32, want []float64, tol float64) {
	h.t.Helper()
	h.nearScaled(what, shape, got, want, nil, tol)
}

// nearScaled is near with the error of element i taken relative to
// scale[i]: for a sum, the sum of its terms' magnitudes (the reference
// computed on absolute values), which bounds its rounding error where the
// terms cancel.
func (h *harness) nearScaled(what string, shape []int, got []float32, want, scale []float64, tol float64) {
	h.t.Helper()
	if len(got) != len(want) {
		h.t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	if scale == nil {
		scale = defaultScale(want)
	}
	worst, at, bad := 0.0, -1, 0
	for i, g := range got {
		w := want[i]
		var e float64
		switch {
		case math.IsNaN(float64(g)):
			e = math.Inf(1)
		case math.IsInf(w, 0) || math.IsInf(float64(g), 0):
			if float64(g) != w {
				e = math.Inf(1)
			}
		default:
			e = math.Abs(float64(g)-w) / math.Max(scale[i], 1e-30)
		}
		if e > tol {
			bad++
		}
		if at < 0 || e > worst {
			worst, at = e, i
		}
	}
	if bad > 0 {
		h.t.Errorf("%s: %s = %v, want %.9g (error %.3g relative to %.3g, tolerance %.3g; %d of %d elements over)",
			what, index(shape, at), got[at], want[at], worst, scale[at], tol, bad, len(got))
	} else if len(got) > 0 {
		h.t.Logf("%s: worst error %.3g of tolerance %.3g (%.2f)", what, worst, tol, worst/tol)
	}
}

// defaultScale is near's scale of the elements of want: |want| plus the
// root mean square of want (1 if that is 0).
func defaultScale(want []float64) []float64 {
	ss, n := 0.0, 0
	for _, w := range want {
		if !math.IsInf(w, 0) {
			ss += w * w
			n++
		}
	}
	floor := 1.0
	if n > 0 && ss > 0 {
		floor = math.Sqrt(ss / float64(n))
	}
	scale := make([]float64, len(want))
	for i, w := range want {
		scale[i] = math.Abs(w) + floor
	}
	return scale
}

// abs returns |v| elementwise, widened.
func abs(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = math.Abs(float64(x))
	}
	return out
}

// logScale is the scale of log-domain results (log-probabilities,
// normalisers, entropies): |want| + 1, since the error of a logarithm of
// a float32 sum is absolute.
func logScale(want []float64) []float64 {
	out := make([]float64, len(want))
	for i, w := range want {
		out[i] = math.Abs(w) + 1
	}
	return out
}

// scalar checks one float64 result against the reference, relative to
// its magnitude.
func (h *harness) scalar(what string, got, want, tol float64) {
	h.t.Helper()
	if e := math.Abs(got-want) / math.Max(math.Abs(want), 1e-300); !(e <= tol) {
		h.t.Errorf("%s = %.9g, want %.9g (relative error %.3g, tolerance %.3g)", what, got, want, e, tol)
	}
}

// sync waits for the backend and fails the test on a device error.
func (h *harness) sync(what string) {
	h.t.Helper()
	if err := h.b.Synchronize(); err != nil {
		h.t.Fatalf("%s: Synchronize: %v", what, err)
	}
}
