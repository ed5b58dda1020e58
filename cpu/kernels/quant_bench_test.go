package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkLinearQuant compares the quantized products with the BF16 ones
// (at the engine's default precision on this CPU) on Qwen3-0.6B's shapes:
// decode (m = 1) reports the GB/s of weights read, prefill (m = 512)
// GFLOP/s.
//
//	go test -run '^$' -bench LinearQuant ./cpu/kernels/
func BenchmarkLinearQuant(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	prec := PrecisionF32
	if HasBF16Dot() {
		prec = PrecisionBF16
	}
	for _, sh := range [][2]int{{3072, 1024}, {1024, 3072}, {151936, 1024}} {
		n, k := sh[0], sh[1]
		w16 := randBF16(r, n*k)
		q8, _ := PackQuant(QuantQ8_0, randBlocks(r, QuantQ8_0, n, k), n, k)
		q4, _ := PackQuant(QuantQ4_0, randBlocks(r, QuantQ4_0, n, k), n, k)
		for _, m := range []int{1, 8, 512} {
			if n > 100000 && m > 8 {
				continue
			}
			a := randF32(r, m*k)
			c := make([]float32, m*n)
			for _, w := range []struct {
				name  string
				bytes int
				run   func()
			}{
				{"bf16", 2 * n * k, func() { LinearBF16Prec(c, a, w16, m, n, k, false, prec) }},
				{"q8_0", q8.Bytes(), func() { LinearQuant(c, a, q8, m, false) }},
				{"q4_0", q4.Bytes(), func() { LinearQuant(c, a, q4, m, false) }},
			} {
				b.Run(fmt.Sprintf("n%d_k%d/m%d/%s", n, k, m, w.name), func(b *testing.B) {
					for b.Loop() {
						w.run()
					}
					s := b.Elapsed().Seconds() / float64(b.N)
					b.ReportMetric(float64(w.bytes)/s/1e9, "GB/s")
					b.ReportMetric(2*float64(m*n*k)/s/1e9, "GFLOP/s")
				})
			}
		}
	}
}
