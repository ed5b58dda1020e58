package kernels

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// The machine's ceilings, measured once per process with the same thread
// count as the kernels, so that every benchmark can report the fraction of
// it that it reaches. The machine is shared and noisy: each ceiling is the
// best of a few short runs.
var ceilings struct {
	once            sync.Once
	gflops, readGBs float64
}

func measureCeilings() {
	ceilings.once.Do(func() {
		for i := 0; i < 10; i++ {
			ceilings.gflops = max(ceilings.gflops, PeakGFLOPS(Threads(), 40*time.Millisecond))
		}
		for i := 0; i < 3; i++ {
			ceilings.readGBs = max(ceilings.readGBs, ReadBandwidthGBs(DefaultBandwidthBytes/2, Threads(), 100*time.Millisecond))
		}
	})
}

// reportGFLOPS reports the rate of the timed loop and its share of the
// FMA peak; measuring the ceilings (once) is not timed.
func reportGFLOPS(b *testing.B, flopsPerOp float64) {
	g := flopsPerOp * float64(b.N) / b.Elapsed().Seconds() / 1e9
	b.StopTimer()
	measureCeilings()
	b.ReportMetric(g, "GFLOP/s")
	b.ReportMetric(100*g/ceilings.gflops, "%peak")
}

// reportGBs reports the rate of the timed loop in bytes and its share of
// the DRAM read bandwidth.
func reportGBs(b *testing.B, bytesPerOp float64) {
	g := bytesPerOp * float64(b.N) / b.Elapsed().Seconds() / 1e9
	b.StopTimer()
	measureCeilings()
	b.ReportMetric(g, "GB/s")
	b.ReportMetric(100*g/ceilings.readGBs, "%read-bw")
}

func BenchmarkPeak(b *testing.B) {
	var g float64
	for i := 0; i < b.N; i++ {
		g = max(g, PeakGFLOPS(Threads(), 100*time.Millisecond))
	}
	b.ReportMetric(g, "GFLOP/s")
	b.ReportMetric(float64(Threads()), "threads")
}

func BenchmarkReadBandwidth(b *testing.B) {
	var g float64
	for i := 0; i < b.N; i++ {
		g = max(g, ReadBandwidthGBs(0, Threads(), 200*time.Millisecond))
	}
	b.ReportMetric(g, "GB/s")
}

func BenchmarkCopyBandwidth(b *testing.B) {
	var g float64
	for i := 0; i < b.N; i++ {
		g = max(g, CopyBandwidthGBs(0, Threads(), 200*time.Millisecond))
	}
	b.ReportMetric(g, "GB/s")
}

func BenchmarkSgemm(b *testing.B) {
	for _, n := range []int{512, 1024, 2048} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 1))
			x, y, c := randF32(r, n*n), randF32(r, n*n), make([]float32, n*n)
			Sgemm(false, false, n, n, n, 1, x, n, y, n, 0, c, n)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				Sgemm(false, false, n, n, n, 1, x, n, y, n, 0, c, n)
			}
			reportGFLOPS(b, 2*float64(n)*float64(n)*float64(n))
		})
	}
}

// linearShapes are the linear layers of Qwen3-0.6B (hidden 1024) and of a
// ~20M-parameter Llama (hidden 384, intermediate 1024, vocabulary 8192).
var linearShapes = []struct {
	name string
	n, k int
}{
	{"qwen0.6b/q_proj", 2048, 1024},
	{"qwen0.6b/kv_proj", 1024, 1024},
	{"qwen0.6b/o_proj", 1024, 2048},
	{"qwen0.6b/gate_up", 3072, 1024},
	{"qwen0.6b/down", 1024, 3072},
	{"qwen0.6b/lm_head", 151936, 1024},
	{"20m/qkvo", 384, 384},
	{"20m/gate_up", 1024, 384},
	{"20m/down", 384, 1024},
	{"20m/lm_head", 8192, 384},
}

// BenchmarkLinear runs the linear layers at m = 1 (a decode step, BF16
// weights; the rate is weight bytes read per second) and m = 512 (prefill,
// float32 and BF16 weights).
func BenchmarkLinear(b *testing.B) {
	r := rand.New(rand.NewPCG(2, 2))
	for _, s := range linearShapes {
		wh := AllocBF16(s.n * s.k)
		fillBF16(wh)
		b.Run(s.name+"/decode-bf16", func(b *testing.B) {
			a, c := randF32(r, s.k), make([]float32, s.n)
			for i := 0; i < b.N; i++ {
				LinearBF16(c, a, wh, 1, s.n, s.k, false)
			}
			reportGBs(b, 2*float64(s.n*s.k))
		})
		if s.n > 10000 && testing.Short() {
			continue
		}
		const m = 512
		a, c := randF32(r, m*s.k), make([]float32, m*s.n)
		b.Run(s.name+"/prefill-bf16", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				LinearBF16(c, a, wh, m, s.n, s.k, false)
			}
			reportGFLOPS(b, 2*float64(m*s.n*s.k))
		})
		wf := widenBF16(wh)
		b.Run(s.name+"/prefill-f32", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				LinearF32(c, a, wf, m, s.n, s.k, false)
			}
			reportGFLOPS(b, 2*float64(m*s.n*s.k))
		})
	}
}

// BenchmarkParallelFor measures the fork-join overhead: an almost empty body
// spread over all threads.
func BenchmarkParallelFor(b *testing.B) {
	var sink [64]int64
	for i := 0; i < b.N; i++ {
		ParallelFor(Threads(), 1, func(lo, hi int) { sink[lo*8]++ })
	}
}

// BenchmarkAttentionDecode runs the two products of one head's attention at
// decode over a context of 1024 cached positions (head dimension 128, keys
// and values stored [position, head·dim] for 8 KV heads): scores = q·Kᵀ (the
// matrix-vector path) and out = p·V (B not transposed). The rate is bytes
// of K or V read.
func BenchmarkAttentionDecode(b *testing.B) {
	const ctx, hd, ld = 1024, 128, 8 * 128
	r := rand.New(rand.NewPCG(3, 3))
	kv := randF32(r, ctx*ld)
	q, s, out := randF32(r, hd), make([]float32, ctx), make([]float32, hd)
	b.Run("scores", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			Sgemm(false, true, 1, ctx, hd, 0.088, q, hd, kv, ld, 0, s, ctx)
		}
		reportGBs(b, 4*ctx*hd)
	})
	b.Run("values", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			Sgemm(false, false, 1, hd, ctx, 1, s, ctx, kv, ld, 0, out, hd)
		}
		reportGBs(b, 4*ctx*hd)
	})
}

// modelShape is enough of a Llama/Qwen configuration to lay out its linear
// layers.
type modelShape struct {
	name                                    string
	layers, hidden, qDim, kvDim, ffn, vocab int
}

var decodeModels = []modelShape{
	{"qwen0.6b", 28, 1024, 2048, 1024, 3072, 151936},
	{"20m", 9, 384, 384, 384, 1024, 8192},
}

// fillBF16 fills w with BF16 values in [-1, 1) cheaply: a random block,
// repeated.
func fillBF16(w []uint16) {
	blk := randBF16(rand.New(rand.NewPCG(4, 4)), 1<<16)
	for i := 0; i < len(w); i += len(blk) {
		copy(w[i:], blk)
	}
}

// BenchmarkDecodeStep runs the linear layers of one decode step (m = 1,
// BF16 weights) through every layer of a model and the LM head: the weights
// are too large to stay in cache (Qwen3-0.6B: 1.2 GB) or, for the small
// model, the size the server really streams. Weights come from AllocBF16, as
// a model's should. The rate is weight bytes read per second; steps/s bounds
// the decode speed from above.
func BenchmarkDecodeStep(b *testing.B) {
	for _, ms := range decodeModels {
		b.Run(ms.name, func(b *testing.B) {
			if testing.Short() && ms.vocab > 100000 {
				b.Skip("1.2 GB of weights")
			}
			type lin struct {
				w    []uint16
				n, k int
			}
			var lins []lin
			add := func(n, k int) {
				w := AllocBF16(n * k)
				fillBF16(w)
				lins = append(lins, lin{w, n, k})
			}
			h := ms.hidden
			for l := 0; l < ms.layers; l++ {
				add(ms.qDim, h)  // q
				add(ms.kvDim, h) // k
				add(ms.kvDim, h) // v
				add(h, ms.qDim)  // o
				add(ms.ffn, h)   // gate
				add(ms.ffn, h)   // up
				add(h, ms.ffn)   // down
			}
			add(ms.vocab, h) // LM head
			var bytes float64
			for _, l := range lins {
				bytes += 2 * float64(len(l.w))
			}
			x := randF32(rand.New(rand.NewPCG(5, 5)), 4*h)
			y := make([]float32, ms.vocab)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for _, l := range lins {
					LinearBF16(y[:l.n], x[:l.k], l.w, 1, l.n, l.k, false)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "steps/s")
			reportGBs(b, bytes)
		})
	}
}
