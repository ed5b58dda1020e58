package model

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu"
	"github.com/clawrl/clawrl/cpu/kernels"
)

// Benchmarks of the CPU backend on random checkpoints:
//
//	go test -run '^$' -bench . -benchtime 20x ./model/
//
// Decode reports tok/s and "%bw": the fraction of the memory-bandwidth
// limit reached, where the limit is read bandwidth / (bytes of weights read
// per decode step) × batch. Prefill reports tok/s, the GFLOP/s of its
// matrix products and "%peak", their fraction of the FP32 FMA peak.

var (
	benchDirOnce sync.Once
	benchDir     string
	benchCkpts   sync.Map // spec name → *ckptOnce
)

type ckptOnce struct {
	once sync.Once
	dir  string
	err  error
}

// TestMain removes the checkpoints the benchmarks generated.
func TestMain(m *testing.M) {
	code := m.Run()
	if benchDir != "" {
		os.RemoveAll(benchDir)
	}
	os.Exit(code)
}

// benchCheckpoint writes the named spec's checkpoint once per process.
func benchCheckpoint(b *testing.B, name string, spec RandomSpec) string {
	b.Helper()
	benchDirOnce.Do(func() {
		d, err := os.MkdirTemp("", "clawrl-model-bench-")
		if err != nil {
			panic(err)
		}
		benchDir = d
	})
	v, _ := benchCkpts.LoadOrStore(name, &ckptOnce{})
	c := v.(*ckptOnce)
	c.once.Do(func() {
		c.dir = filepath.Join(benchDir, name)
		start := time.Now()
		c.err = WriteRandomCheckpoint(c.dir, spec)
		b.Logf("generated %s in %v", name, time.Since(start).Round(time.Millisecond))
	})
	if c.err != nil {
		b.Fatal(c.err)
	}
	return c.dir
}

var benchModels = []struct {
	name     string
	ckpt     string // checkpoint directory name
	spec     func() RandomSpec
	zeroCopy bool          // decode from the mapped file (cpu.Options.ZeroCopyWeights)
	quant    compute.DType // quantized on load (Quantize), or 0
}{
	{"llama-20M-bf16", "llama-20M-bf16", SpecLlama20M, false, 0},
	{"qwen3-0.6B-bf16", "qwen3-0.6B-bf16", SpecQwen3_0_6B, false, 0},
	{"qwen3-0.6B-bf16-zerocopy", "qwen3-0.6B-bf16", SpecQwen3_0_6B, true, 0},
	{"qwen3-0.6B-q8_0", "qwen3-0.6B-bf16", SpecQwen3_0_6B, false, compute.Q8_0},
	{"qwen3-0.6B-q4_0", "qwen3-0.6B-bf16", SpecQwen3_0_6B, false, compute.Q4_0},
}

// Machine ceilings, measured once per process with the kernels package's
// helpers: DRAM read bandwidth over a buffer larger than L3 (decode reads
// each weight once per step), and the FP32 FMA peak (prefill is matrix
// arithmetic).
var (
	ceilOnce   sync.Once
	readGBs    float64
	peakGFLOPS float64
)

func ceilings() (float64, float64) {
	ceilOnce.Do(func() {
		readGBs = kernels.ReadBandwidthGBs(0, kernels.Threads(), time.Second)
		peakGFLOPS = kernels.PeakGFLOPS(kernels.Threads(), 500*time.Millisecond)
	})
	return readGBs, peakGFLOPS
}

// weightBytesPerStep is the weight memory one decode step reads: every
// matrix and vector once, except the input embedding, of which only the
// looked-up rows are read (a tied embedding is read whole as the output
// projection).
func weightBytesPerStep(m *Model) int64 {
	var n int64
	size := func(t compute.Tensor) int64 {
		if t == nil {
			return 0
		}
		return int64(t.DType().Bytes(compute.Len(t)))
	}
	walkWeights(m.Config, m.w, func(name string, _ []int, f *compute.Tensor) error {
		if name != "model.embed_tokens.weight" {
			n += size(*f)
		}
		return nil
	})
	if m.Config.TieWordEmbeddings {
		n += size(m.w.Output)
	}
	return n
}

func loadBench(b *testing.B, name string, spec RandomSpec, zeroCopy bool, quant compute.DType) *Model {
	b.Helper()
	dir := benchCheckpoint(b, name, spec)
	start := time.Now()
	src, err := OpenDir(dir)
	if err == nil && quant != 0 {
		src, err = Quantize(src, quant)
	}
	if err != nil {
		b.Fatal(err)
	}
	m, err := LoadFrom(cpu.NewWithOptions(cpu.Options{ZeroCopyWeights: zeroCopy, Precision: benchPrecision()}), src)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("loaded in %v", time.Since(start).Round(time.Millisecond))
	b.Cleanup(func() { m.Close() })
	return m
}

// benchPrecision is the precision the daemon picks by default
// (model.precision auto): BF16 products where the CPU has the dot-product
// instruction. BENCH_PRECISION=f32 or bf16 chooses.
func benchPrecision() kernels.Precision {
	switch os.Getenv("BENCH_PRECISION") {
	case "f32":
		return kernels.PrecisionF32
	case "bf16":
		return kernels.PrecisionBF16
	}
	if kernels.HasBF16Dot() {
		return kernels.PrecisionBF16
	}
	return kernels.PrecisionF32
}

// benchKV is the KV cache storage of the model benchmarks: BF16, the
// daemon's default for their BF16 checkpoints (model.kv_cache_dtype auto);
// BENCH_KV=f32 overrides it.
func benchKV() compute.DType {
	if os.Getenv("BENCH_KV") == "f32" {
		return compute.F32
	}
	return compute.BF16
}

func BenchmarkDecode(b *testing.B) {
	for _, bm := range benchModels {
		for _, batch := range []int{1, 8, 32} {
			if bm.zeroCopy && batch > 1 {
				continue
			}
			b.Run(fmt.Sprintf("%s/batch%d", bm.name, batch), func(b *testing.B) {
				m := loadBench(b, bm.ckpt, bm.spec(), bm.zeroCopy, bm.quant)
				const prompt, maxCtx = 32, 256
				kv, err := m.NewKVCache(KVCacheOptions{BlockSize: 16, Budget: m.Config.KVBytesPerToken(benchKV()) * int64(batch*(maxCtx+16)), DType: benchKV()})
				if err != nil {
					b.Fatal(err)
				}
				defer kv.Close()
				steps := make([]Step, batch)
				toks := testTokens(prompt, m.Config.VocabSize)
				for i := range steps {
					steps[i].Seq = kv.NewSequence()
					if _, err := m.Forward([]Step{{steps[i].Seq, toks}}, LastLogits, nil); err != nil {
						b.Fatal(err)
					}
				}
				var logits []float32
				next := make([][]int32, batch)
				for i := range next {
					next[i] = []int32{int32(i)}
					steps[i].Tokens = next[i]
				}
				bw, _ := ceilings() // measured before the timer starts
				b.ReportAllocs()
				b.ResetTimer()
				for it := 0; it < b.N; it++ {
					if steps[0].Seq.Len() >= maxCtx { // keep the context between 32 and 256
						b.StopTimer()
						for _, s := range steps {
							s.Seq.Truncate(prompt)
						}
						b.StartTimer()
					}
					if logits, err = m.Forward(steps, LastLogits, logits); err != nil {
						b.Fatal(err)
					}
				}
				sec := b.Elapsed().Seconds()
				tokps := float64(b.N*batch) / sec
				limit := bw * 1e9 / float64(weightBytesPerStep(m)) * float64(batch)
				b.Logf("read bandwidth %.1f GB/s, %.1f MB of weights per step: limit %.0f tok/s", bw, float64(weightBytesPerStep(m))/1e6, limit)
				b.ReportMetric(tokps, "tok/s")
				b.ReportMetric(tokps/float64(batch)*float64(weightBytesPerStep(m))/1e9, "weightGB/s")
				b.ReportMetric(100*tokps/limit, "%bw")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

func BenchmarkPrefill512(b *testing.B) {
	for _, bm := range benchModels {
		if bm.zeroCopy {
			continue
		}
		b.Run(bm.name, func(b *testing.B) {
			m := loadBench(b, bm.ckpt, bm.spec(), false, bm.quant)
			kv, err := m.NewKVCache(KVCacheOptions{BlockSize: 16, Budget: m.Config.KVBytesPerToken(benchKV()) * 512, DType: benchKV()})
			if err != nil {
				b.Fatal(err)
			}
			defer kv.Close()
			toks := testTokens(512, m.Config.VocabSize)
			var logits []float32
			_, peak := ceilings() // measured before the timer starts
			b.ResetTimer()
			for range b.N {
				s := kv.NewSequence()
				if logits, err = m.Forward([]Step{{s, toks}}, LastLogits, logits); err != nil {
					b.Fatal(err)
				}
				s.Free()
			}
			sec := b.Elapsed().Seconds()
			// Matrix work: every layer's products for 512 tokens plus the output
			// projection for the last one (attention excluded).
			c := m.Config
			out := int64(c.VocabSize) * int64(c.HiddenSize)
			layers := c.NumParams() - out - int64(c.HiddenSize)
			if !c.TieWordEmbeddings {
				layers -= out
			}
			flops := 2 * (float64(layers)*512 + float64(out))
			b.ReportMetric(float64(512*b.N)/sec, "tok/s")
			gflops := flops * float64(b.N) / sec / 1e9
			b.ReportMetric(gflops, "GFLOP/s")
			b.ReportMetric(100*gflops/peak, "%peak")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkDecodeLongContext decodes one token at a time after a 16K-token
// prompt on the ~20M model, the shape of an agent's turn (a long system
// prompt and history): the attention's reads of the cache (134 MB per
// token in F32, 67 MB in BF16, 36 MB in Q8_0) outweigh the weights' (34
// MB). It runs with an F32, a BF16 and a Q8_0 cache; kv-GB/s counts the
// cache's bytes read per second.
func BenchmarkDecodeLongContext(b *testing.B) {
	for _, dt := range []compute.DType{compute.F32, compute.BF16, compute.Q8_0} {
		b.Run(strings.ToLower(dt.String()), func(b *testing.B) { benchLongContext(b, dt) })
	}
}

func benchLongContext(b *testing.B, dt compute.DType) {
	const prompt = 16384
	m := loadBench(b, "llama-20M-bf16", SpecLlama20M(), false, 0)
	kv, err := m.NewKVCache(KVCacheOptions{BlockSize: 16, Budget: m.Config.KVBytesPerToken(dt) * (prompt + 1024), DType: dt})
	if err != nil {
		b.Fatal(err)
	}
	defer kv.Close()
	seq := kv.NewSequence()
	toks := testTokens(prompt, m.Config.VocabSize)
	for i := 0; i < prompt; i += 512 {
		if _, err := m.Forward([]Step{{seq, toks[i:min(prompt, i+512)]}}, LastLogits, nil); err != nil {
			b.Fatal(err)
		}
	}
	step := []Step{{seq, []int32{1}}}
	var logits []float32
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		if seq.Len() >= prompt+512 {
			b.StopTimer()
			seq.Truncate(prompt)
			b.StartTimer()
		}
		if logits, err = m.Forward(step, LastLogits, logits); err != nil {
			b.Fatal(err)
		}
	}
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(b.N)/sec, "tok/s")
	b.ReportMetric(float64(b.N)*float64(m.Config.KVBytesPerToken(dt))*float64(prompt)/sec/1e9, "kv-GB/s")
	b.ReportMetric(0, "ns/op")
}
