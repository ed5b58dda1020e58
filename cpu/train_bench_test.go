package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/clawrl/clawrl/compute"
)

// BenchmarkDenseAttention measures the training attention forward and
// backward on one long sequence (GFLOP/s counts the causal half of each
// product: 2 forward, 5 backward, L²·qdim FLOPs each).
//
//	go test -run '^$' -bench DenseAttention ./cpu/
func BenchmarkDenseAttention(b *testing.B) {
	for _, tt := range []struct {
		L, heads, kvHeads, hd, block int
	}{
		{4096, 6, 2, 64, 64},
		{4096, 6, 2, 64, 256},
		{4096, 16, 8, 128, 256},
	} {
		b.Run(fmt.Sprintf("L%d-h%d-kv%d-d%d-block%d", tt.L, tt.heads, tt.kvHeads, tt.hd, tt.block), func(b *testing.B) {
			defer func(old int) { attnBlock = old }(attnBlock)
			attnBlock = tt.block
			be := New()
			r := rand.New(rand.NewPCG(1, 2))
			qdim, kvdim := tt.heads*tt.hd, tt.kvHeads*tt.hd
			mk := func(rows, cols int) compute.Tensor {
				x, _ := be.NewTensor(compute.F32, rows, cols)
				v := Float32s(x)
				for i := range v {
					v[i] = float32(r.NormFloat64())
				}
				return x
			}
			q, k, v, dout := mk(tt.L, qdim), mk(tt.L, kvdim), mk(tt.L, kvdim), mk(tt.L, qdim)
			out, lse := mk(tt.L, qdim), mk(tt.L, tt.heads)
			dq, dk, dv := mk(tt.L, qdim), mk(tt.L, kvdim), mk(tt.L, kvdim)
			st, _ := be.NewTensor(compute.I32, 2)
			be.WriteInt32(st, []int32{0, int32(tt.L)})
			a := &compute.DenseAttention{Heads: tt.heads, KVHeads: tt.kvHeads, HeadDim: tt.hd, Scale: float32(1 / math.Sqrt(float64(tt.hd))), Seqs: 1, SeqStart: st}
			b.ResetTimer()
			for range b.N {
				be.DenseAttention(out, lse, q, k, v, a)
				be.DenseAttentionBackward(dq, dk, dv, dout, out, lse, q, k, v, a)
			}
			flops := 7 * float64(tt.L) * float64(tt.L) * float64(qdim)
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
