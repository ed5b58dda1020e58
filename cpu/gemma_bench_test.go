package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/clawrl/clawrl/compute"
)

// BenchmarkGatedActivation compares Gemma's GELUMul with SiLUMul on the
// MLP widths of a decode step and a prefill of 512 tokens of Gemma 3 1B
// (6,912 values a token).
//
//	go test -run '^$' -bench GatedActivation ./cpu/
func BenchmarkGatedActivation(b *testing.B) {
	be := New()
	for _, n := range []int{6912, 512 * 6912} {
		r := rand.New(rand.NewPCG(1, 2))
		mk := func() compute.Tensor {
			x, _ := be.NewTensor(compute.F32, n)
			v := Float32s(x)
			for i := range v {
				v[i] = float32(2 * r.NormFloat64())
			}
			return x
		}
		gate, up, dst := mk(), mk(), mk()
		for _, op := range []struct {
			name string
			run  func()
		}{
			{"silu", func() { be.SiLUMul(dst, gate, up) }},
			{"gelu", func() { be.GELUMul(dst, gate, up) }},
		} {
			b.Run(fmt.Sprintf("%s/n%d", op.name, n), func(b *testing.B) {
				b.SetBytes(int64(12 * n))
				for b.Loop() {
					op.run()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/value")
			})
		}
	}
}
