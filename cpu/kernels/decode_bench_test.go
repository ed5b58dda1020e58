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
		b.Run(typ.String(), func(b *testing.B) { benchDecodeProducts(b, typ) })
	}
}

func benchDecodeProducts(b *testing.B, typ QuantType) {
	r := rand.New(rand.NewPCG(1, 2))
	quant := func(n, k int) *QMatrix {
		q, _ := PackQuant(typ, randBlocks(r, typ, n, k), n, k)
		return q
	}
	c := make([]float32, 151936)
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
	for range 28 {
		pass(1024, 2048, 1024, 1024)
		pass(2048, 1024)
		pass(1024, 3072, 3072)
		pass(3072, 1024)
	}
	pass(1024, 151936)
	a := randF32(r, 3072)
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
