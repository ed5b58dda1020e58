package cuda

import (
	"fmt"
	"math"
	"testing"

	"github.com/clawrl/clawrl/compute"
)

// The benchmarks time device work with events (Device.TimeQueued) on a
// real GPU (CLAWRL_CUDA_TEST_DRIVER=real); over the fake driver they skip.
// Shapes are those of Qwen3-4B: hidden 2560, 32 query and 8 key/value
// heads of 128, MLP 9728.

func benchBackend(b *testing.B) *Backend {
	b.Helper()
	if !realDriver() {
		b.Skip("benchmarks run on a GPU (CLAWRL_CUDA_TEST_DRIVER=real)")
	}
	return testBackend(b)
}

// timeOps runs op b.N times on the device and reports the device time per
// op.
func timeOps(b *testing.B, be *Backend, op func()) float64 {
	b.Helper()
	op() // warm up: module JIT, first-touch
	if err := be.Synchronize(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	el, err := be.dev.TimeQueued(func() error {
		for range b.N {
			op()
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := be.Synchronize(); err != nil {
		b.Fatal(err)
	}
	sec := el.Seconds() / float64(b.N)
	b.ReportMetric(sec*1e6, "us/op")
	return sec
}

func newBench(b *testing.B, be *Backend, dt compute.DType, shape ...int) compute.Tensor {
	b.Helper()
	t, err := be.NewTensor(dt, shape...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Free(t) })
	return t
}

// BenchmarkLinearBF16 times products with BF16 weights on the shapes of a
// Qwen3-4B layer (q 2560→4096, k and v 2560→1024, o 4096→2560, gate and
// up 2560→9728, down 9728→2560) at decode (1 and 32 rows) and prefill
// (2048 rows), the LM head's GEMV, and 4096³; scripts/gpu-check times
// torch.matmul on the same shapes.
func BenchmarkLinearBF16(b *testing.B) {
	for _, c := range []struct{ m, n, k int }{
		{1, 9728, 2560}, {32, 9728, 2560}, {1, 2560, 9728}, {1, 151936, 2560},
		{2048, 4096, 2560}, {2048, 1024, 2560}, {2048, 2560, 4096}, {2048, 9728, 2560}, {2048, 2560, 9728},
		{4096, 4096, 4096},
	} {
		b.Run(fmt.Sprintf("m%d_n%d_k%d", c.m, c.n, c.k), func(b *testing.B) {
			be := benchBackend(b)
			x := newBench(b, be, compute.F32, c.m, c.k)
			w := newBench(b, be, compute.BF16, c.n, c.k)
			y := newBench(b, be, compute.F32, c.m, c.n)
			sec := timeOps(b, be, func() { be.Linear(y, x, w, nil) })
			b.ReportMetric(2*float64(c.m)*float64(c.n)*float64(c.k)/sec/1e12, "TFLOP/s")
			b.ReportMetric(float64(2*c.n*c.k+4*c.m*(c.k+c.n))/sec/1e9, "GB/s")
		})
	}
}

// attnBench sets up seqs sequences of ctx cached tokens with n new ones
// each, over a BF16 cache.
func attnBench(b *testing.B, be *Backend, seqs, ctx, n int) (func(), float64, float64) {
	const heads, kvHeads, hd, bs = 32, 8, 128, 16
	maxBlocks := (ctx + bs - 1) / bs
	kc := newBench(b, be, compute.BF16, seqs*maxBlocks*bs, kvHeads*hd)
	vc := newBench(b, be, compute.BF16, seqs*maxBlocks*bs, kvHeads*hd)
	table := make([]int32, seqs*maxBlocks)
	for i := range table {
		table[i] = int32(i)
	}
	qstart, ctxLen := make([]int32, seqs+1), make([]int32, seqs)
	for s := range seqs {
		qstart[s+1] = qstart[s] + int32(n)
		ctxLen[s] = int32(ctx)
	}
	ints := func(v []int32) compute.Tensor {
		t := newBench(b, be, compute.I32, len(v))
		be.WriteInt32(t, v)
		return t
	}
	a := &compute.Attention{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: float32(1 / math.Sqrt(hd)), BlockSize: bs,
		Seqs: seqs, MaxBlocks: maxBlocks, QueryStart: ints(qstart), ContextLen: ints(ctxLen), BlockTable: ints(table)}
	q := newBench(b, be, compute.F32, seqs*n, heads*hd)
	out := newBench(b, be, compute.F32, seqs*n, heads*hd)
	kvBytes := float64(seqs) * float64(ctx) * kvHeads * hd * 2 * 2
	flops := 0.0
	for i := range n {
		flops += 4 * float64(seqs) * float64(ctx-n+i+1) * heads * hd
	}
	return func() { be.Attention(out, q, kc, vc, a) }, kvBytes, flops
}

func BenchmarkAttentionDecode(b *testing.B) {
	for _, c := range []struct{ seqs, ctx int }{{1, 4096}, {1, 32768}, {32, 4096}} {
		b.Run(fmt.Sprintf("seqs%d_ctx%d", c.seqs, c.ctx), func(b *testing.B) {
			be := benchBackend(b)
			op, bytes, _ := attnBench(b, be, c.seqs, c.ctx, 1)
			sec := timeOps(b, be, op)
			b.ReportMetric(bytes/sec/1e9, "KV-GB/s")
		})
	}
}

func BenchmarkAttentionPrefill(b *testing.B) {
	for _, n := range []int{2048, 16384} {
		b.Run(fmt.Sprintf("tokens%d", n), func(b *testing.B) {
			be := benchBackend(b)
			op, _, flops := attnBench(b, be, 1, n, n)
			sec := timeOps(b, be, op)
			b.ReportMetric(flops/sec/1e12, "TFLOP/s")
		})
	}
}

// BenchmarkCopy measures device-to-device copy bandwidth (bytes read plus
// written), the ceiling of the memory-bound kernels.
func BenchmarkCopy(b *testing.B) {
	be := benchBackend(b)
	const n = 256 << 20 // floats: 1 GiB
	src := newBench(b, be, compute.F32, n)
	dst := newBench(b, be, compute.F32, n)
	sec := timeOps(b, be, func() { be.Copy(dst, src) })
	b.ReportMetric(2*4*n/sec/1e9, "GB/s")
}
