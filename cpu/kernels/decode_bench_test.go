package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkDecodeProducts runs the matrix-vector products of one decode
// step of the Qwen3-0.6B shape in Q4_0, Q4_1, Q5_1 and IQ4_NL (Q4_1, Q5_1
// and IQ4_NL: a GGUF file's Q4_K, Q5_K and IQ4_XS as the CPU runs them) as
// the model issues them (28 layers of q·k·v in one
// pass, o, gate·up in one pass, down; then the output matrix), one after
// another, and reports the GB/s they stream. Against the output matrix
// alone (BenchmarkLinearQuant/n151936_k1024/m1/q4_0) it shows what
// splitting a step into small products costs; against a whole decode step
// (clawrl bench --what model) what the rest of the step costs.
func BenchmarkDecodeProducts(b *testing.B) {
	for _, typ := range []QuantType{QuantQ8_0, QuantQ4_0, QuantQ4_1, QuantQ5_1, QuantIQ4NL, QuantQ6_16} {
		b.Run(typ.String(), func(b *testing.B) { benchDecodeProducts(b, typ, qwen3Decode) })
	}
}

// BenchmarkDecodeProductsGemma is BenchmarkDecodeProducts on the shape of
// Gemma 3 1B (26 layers; q, k and v from 1,152 to 1,024, 256 and 256;
// gate and up to 6,912; a 262,144-row output matrix).
func BenchmarkDecodeProductsGemma(b *testing.B) {
	for _, typ := range []QuantType{QuantQ8_0, QuantQ4_0} {
		b.Run(typ.String(), func(b *testing.B) { benchDecodeProducts(b, typ, gemma3Decode) })
	}
}

// decodeShape lists the passes of one decode step: each the k of its
// input and the n of its products.
type decodeShape struct {
	layers int
	passes [][]int // k, then the n of each product of the pass
	vocab  int
	hidden int
}

var (
	qwen3Decode  = decodeShape{28, [][]int{{1024, 2048, 1024, 1024}, {2048, 1024}, {1024, 3072, 3072}, {3072, 1024}}, 151936, 1024}
	gemma3Decode = decodeShape{26, [][]int{{1152, 1024, 256, 256}, {1024, 1152}, {1152, 6912, 6912}, {6912, 1152}}, 262144, 1152}
)

func benchDecodeProducts(b *testing.B, typ QuantType, shape decodeShape) {
	r := rand.New(rand.NewPCG(1, 2))
	quant := func(n, k int) *QMatrix {
		q, _ := PackQuant(typ, randBlocks(r, typ, n, k), n, k)
		return q
	}
	c := make([]float32, max(shape.vocab, 2*6912))
	var passes [][]LinearOut
	bytes := 0
	pass := func(k int, ns ...int) {
		var outs []LinearOut
		off := 0
		for _, n := range ns {
			q := quant(n, k)
			bytes += q.Bytes()
			outs = append(outs, LinearOut{C: c[off : off+n], Q: q, N: n})
			off += n
		}
		passes = append(passes, outs)
	}
	for range shape.layers {
		for _, p := range shape.passes {
			pass(p[0], p[1:]...)
		}
	}
	pass(shape.hidden, shape.vocab)
	a := randF32(r, 6912)
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("threads%d", threads), func(b *testing.B) {
			defer SetThreads(Threads())
			SetThreads(threads)
			for b.Loop() {
				for _, outs := range passes {
					k := outs[0].Q.k
					LinearMultiPrec(a[:k], 1, k, outs, PrecisionF32)
				}
			}
			s := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(float64(bytes)/s/1e9, "GB/s")
			b.ReportMetric(1/s, "steps/s")
		})
	}
}
