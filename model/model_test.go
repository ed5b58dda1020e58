package model

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu"
	"github.com/clawrl/clawrl/cpu/kernels"
)

// tiny returns a small spec of arch with grouped-query attention and
// weights large enough that attention is far from uniform.
func tiny(arch string) RandomSpec {
	return RandomSpec{
		Arch: arch, Hidden: 32, Intermediate: 48, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 8,
		Vocab: 97, MaxPositions: 64, DType: "float32", Seed: 7, InitStd: 0.15,
	}
}

func writeAndLoad(t *testing.T, spec RandomSpec) (*Model, string) {
	t.Helper()
	return writeAndLoadOn(t, spec, cpu.New())
}

// writeAndLoadOn writes a random checkpoint of spec and loads it on b.
func writeAndLoadOn(t *testing.T, spec RandomSpec, b *cpu.Backend) (*Model, string) {
	t.Helper()
	dir := t.TempDir()
	if err := WriteRandomCheckpoint(dir, spec); err != nil {
		t.Fatal(err)
	}
	m, err := Load(b, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, dir
}

func newCache(t *testing.T, m *Model, blockSize, blocks int) *KVCache {
	t.Helper()
	return newCacheOf(t, m, blockSize, blocks, compute.F32)
}

// newCacheOf is newCache with keys and values stored as dt.
func newCacheOf(t *testing.T, m *Model, blockSize, blocks int, dt compute.DType) *KVCache {
	t.Helper()
	per := m.Config.KVBytesPerToken(dt) * int64(blockSize)
	kv, err := m.NewKVCache(KVCacheOptions{BlockSize: blockSize, Budget: per * int64(blocks), DType: dt})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kv.Close)
	return kv
}

func testTokens(n, vocab int) []int32 {
	toks := make([]int32, n)
	for i := range toks {
		toks[i] = int32((i*37 + 11) % vocab)
	}
	return toks
}

// relErr is max|got−want| / max|want| over all values.
func relErr(got []float32, want [][]float64) float64 {
	var diff, scale float64
	k := 0
	for _, row := range want {
		for _, w := range row {
			diff = math.Max(diff, math.Abs(float64(got[k])-w))
			scale = math.Max(scale, math.Abs(w))
			k++
		}
	}
	if k != len(got) {
		return math.Inf(1)
	}
	return diff / scale
}

func fullLogits(t *testing.T, m *Model, toks []int32) []float32 {
	t.Helper()
	return fullLogitsOf(t, m, toks, compute.F32)
}

// fullLogitsOf is fullLogits with a cache of dt.
func fullLogitsOf(t *testing.T, m *Model, toks []int32, dt compute.DType) []float32 {
	t.Helper()
	kv := newCacheOf(t, m, 4, 64, dt)
	seq := kv.NewSequence()
	defer seq.Free()
	out, err := m.Forward([]Step{{seq, toks}}, AllLogits, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestForwardMatchesReference(t *testing.T) {
	llama3 := &RopeScaling{Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 64}
	tests := []struct {
		name string
		edit func(*RandomSpec)
	}{
		{"llama f32 untied mha", func(s *RandomSpec) { s.KVHeads = 4 }},
		{"llama bf16 tied gqa rope-scaling", func(s *RandomSpec) { s.DType, s.Tied, s.RopeScaling = "bfloat16", true, llama3 }},
		{"llama f16 untied biases", func(s *RandomSpec) { s.DType, s.AttentionBias, s.MLPBias = "float16", true, true }},
		{"llama f32 head_dim≠hidden/heads sharded", func(s *RandomSpec) { s.HeadDim, s.Shards = 16, 3 }},
		{"qwen2 bf16 untied", func(s *RandomSpec) { s.Arch, s.DType = ArchQwen2, "bfloat16" }},
		{"qwen2 f16 tied", func(s *RandomSpec) { s.Arch, s.DType, s.Tied = ArchQwen2, "float16", true }},
		{"qwen2 f32 untied mqa", func(s *RandomSpec) { s.Arch, s.KVHeads = ArchQwen2, 1 }},
		{"qwen3 f32 tied", func(s *RandomSpec) { s.Arch, s.Tied = ArchQwen3, true }},
		{"qwen3 bf16 untied sharded", func(s *RandomSpec) { s.Arch, s.DType, s.Shards = ArchQwen3, "bfloat16", 2 }},
		{"qwen3 f16 tied head_dim 16", func(s *RandomSpec) { s.Arch, s.DType, s.Tied, s.HeadDim = ArchQwen3, "float16", true, 16 }},
		{"llama f32 linear rope", func(s *RandomSpec) { s.RopeLinear = 4 }},
		{"phi3 bf16 fused", func(s *RandomSpec) { s.Arch, s.DType = ArchPhi3, "bfloat16" }},
		{"phi4-mini f32 partial rotary tied", func(s *RandomSpec) { s.Arch, s.PartialRotary, s.Tied = ArchPhi3, 0.5, true }},
		{"phi4-mini bf16 partial rotary longrope", func(s *RandomSpec) {
			s.Arch, s.DType, s.PartialRotary, s.MaxPositions, s.LongRopeOriginal = ArchPhi3, "bfloat16", 0.5, 256, 32
			s.LongRopeShort, s.LongRopeLong = []float64{1, 3}, []float64{2, 5}
		}},
		{"mistral f32 sliding window 5", func(s *RandomSpec) { s.Arch, s.SlidingWindow = ArchMistral, 5 }},
		{"phi3 bf16 sliding window 4", func(s *RandomSpec) { s.Arch, s.DType, s.SlidingWindow = ArchPhi3, "bfloat16", 4 }},
		{"phi3 f32 longrope", func(s *RandomSpec) {
			s.Arch, s.MaxPositions, s.LongRopeOriginal = ArchPhi3, 256, 32
			s.LongRopeShort, s.LongRopeLong = []float64{1, 1.5, 2.5, 4}, []float64{2, 3, 5, 8}
		}},
		{"gemma3 f32 tied window 4 pattern 2", func(s *RandomSpec) {
			s.Arch, s.Tied, s.SlidingWindow, s.SlidingPattern, s.LocalRopeTheta = ArchGemma3, true, 4, 2, 100
		}},
		{"gemma3 bf16 untied mqa query scalar linear rope", func(s *RandomSpec) {
			s.Arch, s.DType, s.KVHeads, s.QueryPreAttnScalar, s.RopeLinear, s.SlidingWindow = ArchGemma3, "bfloat16", 1, 24, 8, 5
		}},
		{"gemma3 f32 no window", func(s *RandomSpec) { s.Arch, s.Tied = ArchGemma3, true }},
		{"gemma2 f32 tied window 4 softcaps", func(s *RandomSpec) {
			s.Arch, s.Tied, s.SlidingWindow, s.AttnSoftcap, s.FinalSoftcap = ArchGemma2, true, 4, 1.5, 3
		}},
		{"gemma2 bf16 untied query scalar no caps", func(s *RandomSpec) {
			s.Arch, s.DType, s.QueryPreAttnScalar, s.SlidingWindow = ArchGemma2, "bfloat16", 24, 5
		}},
		{"granite f32 tied multipliers", func(s *RandomSpec) {
			s.Arch, s.Tied, s.EmbeddingMultiplier, s.AttentionMultiplier, s.ResidualMultiplier, s.LogitsScaling = ArchGranite, true, 12, 0.2, 0.22, 8
		}},
		{"granite bf16 untied biases defaults", func(s *RandomSpec) {
			s.Arch, s.DType, s.AttentionBias, s.MLPBias = ArchGranite, "bfloat16", true, true
		}},
		{"olmo2 f32 untied", func(s *RandomSpec) { s.Arch = ArchOlmo2 }},
		{"smollm3 f32 tied 4 layers, the last without rope", func(s *RandomSpec) { s.Arch, s.Tied, s.Layers = ArchSmolLM3, true, 4 }},
		{"olmo2 bf16 tied mqa", func(s *RandomSpec) { s.Arch, s.DType, s.Tied, s.KVHeads = ArchOlmo2, "bfloat16", true, 1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := tiny(ArchLlama)
			tt.edit(&spec)
			m, dir := writeAndLoad(t, spec)
			toks := testTokens(13, spec.Vocab)
			got := fullLogits(t, m, toks)
			want := loadRef(t, dir).forward(toks)
			if e := relErr(got, want); e >= 1e-4 || math.IsNaN(e) {
				t.Fatalf("relative error %.3g against the float64 reference", e)
			} else {
				t.Logf("relative error %.2g", e)
			}
		})
	}
}

// TestBF16PrecisionMatchesReference checks a backend at
// kernels.PrecisionBF16 against the float64 reference that rounds the
// inputs of the BF16 products the same way, on every kernel set's path (the
// dot-product kernel where the CPU has it, rounding then the float32
// kernels elsewhere), and that incremental decode still equals the full
// forward. Against the unrounded reference the error is that of BF16
// activations, about 1e-2, which is logged.
func TestBF16PrecisionMatchesReference(t *testing.T) {
	tests := []struct {
		name string
		edit func(*RandomSpec)
	}{
		{"llama tied gqa", func(s *RandomSpec) { s.Tied = true }},
		{"qwen2 untied biases", func(s *RandomSpec) { s.Arch = ArchQwen2 }},
		{"qwen3 untied sharded, k not a multiple of 32", func(s *RandomSpec) { s.Arch, s.Shards, s.Hidden, s.Intermediate = ArchQwen3, 2, 40, 72 }},
		{"qwen3 wide", func(s *RandomSpec) { s.Arch, s.Hidden, s.Intermediate, s.HeadDim = ArchQwen3, 64, 160, 16 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := tiny(ArchLlama)
			spec.DType = "bfloat16"
			tt.edit(&spec)
			m, dir := writeAndLoadOn(t, spec, cpu.NewWithOptions(cpu.Options{Precision: kernels.PrecisionBF16}))
			toks := testTokens(23, spec.Vocab)
			full := fullLogits(t, m, toks)
			ref := loadRef(t, dir)
			exact := ref.forward(toks)
			ref.roundInputs = true
			if e := relErr(full, ref.forward(toks)); e >= 1e-3 || math.IsNaN(e) {
				t.Fatalf("relative error %.3g against the reference with BF16 inputs", e)
			} else {
				t.Logf("relative error %.2g against the reference with BF16 inputs, %.2g against float32 inputs", e, relErr(full, exact))
			}
			checkDecode(t, m, newCache(t, m, 4, 16), toks, full, 1e-3)
		})
	}
}

// checkDecode runs toks through m in kv incrementally (a prompt of 5, then
// one token at a time) and checks every step's logits against those of the
// full forward, full, to tol relative to 1 + |logit|.
func checkDecode(t *testing.T, m *Model, kv *KVCache, toks []int32, full []float32, tol float64) {
	t.Helper()
	vocab := m.Config.VocabSize
	seq := kv.NewSequence()
	defer seq.Free()
	var logits []float32
	for pos, n := 0, 5; pos < len(toks); pos, n = pos+n, 1 {
		var err error
		if logits, err = m.Forward([]Step{{seq, toks[pos : pos+n]}}, LastLogits, logits); err != nil {
			t.Fatal(err)
		}
		at := pos + n - 1
		want := full[at*vocab : (at+1)*vocab]
		for i := range want {
			if d := math.Abs(float64(logits[i] - want[i])); d > tol*(1+math.Abs(float64(want[i]))) {
				t.Fatalf("decode: position %d logit %d = %v, full forward %v", at, i, logits[i], want[i])
			}
		}
	}
}

// TestBF16CacheMatchesReference runs the engine with a BF16 KV cache
// against the float64 reference that rounds keys and values to BF16 where
// the cache stores them: the full forward to 1e-4 (the float32 engine's
// bound), and incremental decode, which reads the same rounded cache, to
// the full forward.
func TestBF16CacheMatchesReference(t *testing.T) {
	for _, arch := range []string{ArchLlama, ArchQwen2, ArchQwen3} {
		t.Run(arch, func(t *testing.T) {
			spec := tiny(arch)
			spec.DType = "bfloat16"
			m, dir := writeAndLoad(t, spec)
			toks := testTokens(23, spec.Vocab)
			full := fullLogitsOf(t, m, toks, compute.BF16)
			ref := loadRef(t, dir)
			exact := ref.forward(toks)
			ref.roundKV = true
			if e := relErr(full, ref.forward(toks)); e >= 1e-4 || math.IsNaN(e) {
				t.Fatalf("relative error %.3g against the reference with BF16 keys and values", e)
			} else {
				t.Logf("relative error %.2g against the reference with BF16 keys and values, %.2g against float32 ones", e, relErr(full, exact))
			}
			checkDecode(t, m, blockCache(t, m, compute.BF16, 8), toks, full, 1e-5)
		})
	}
}

// blockCache is newCacheOf with blocks of 4 tokens, checked to hold dt
// and blocks.
func blockCache(t *testing.T, m *Model, dt compute.DType, blocks int) *KVCache {
	t.Helper()
	kv := newCacheOf(t, m, 4, blocks, dt)
	if kv.DType() != dt || kv.NumBlocks() != blocks {
		t.Fatalf("cache of %v with %d blocks, want %v with %d", kv.DType(), kv.NumBlocks(), dt, blocks)
	}
	return kv
}

// TestQ8_0CacheMatchesReference runs the engine with a Q8_0 KV cache
// against the float64 reference that quantizes keys and values to Q8_0
// blocks where the cache stores them (compute.Quantize, ggml's
// quantizer), and incremental decode, which reads the same quantized
// cache, against the full forward.
//
// The tolerance of both is 2e-3 (relative to the largest logit, and to
// 1 + |logit| for decode), not the float32 engine's 1e-4 and 1e-5: a key
// or value whose x/d lies within float32 rounding of a half-integer is
// stored one step d = max|x|/127 apart when the engine's float32 sums
// (or decode's, at another shape) and the reference's differ in the last
// bit, and that moves the logits by up to about 1e-3. BF16 caches do the
// same at their own rounding: over seeds 1-4 and head dims 32-128 of
// these models, decode against the full forward was off by up to 8.5e-4
// with a BF16 cache and 7.1e-4 with Q8_0, 1.3e-5 with F32. What Q8_0
// costs, the distance to the reference with float32 keys and values
// (1-3e-2 here), must be more than ten times the error against the
// quantized reference, and under 5e-2; the cache's kernels are held to
// float32 tolerances by the conformance suite (computetest). Models whose
// head dim is not a multiple of 32 are refused.
func TestQ8_0CacheMatchesReference(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(*RandomSpec)
	}{
		{"llama d32", func(s *RandomSpec) { s.Hidden, s.Intermediate, s.HeadDim = 64, 96, 32 }},
		{"qwen2 d32", func(s *RandomSpec) { s.Arch, s.Hidden, s.Intermediate, s.Heads = ArchQwen2, 64, 96, 2 }},
		{"qwen3 d64 mqa", func(s *RandomSpec) { s.Arch, s.Hidden, s.Heads, s.KVHeads, s.HeadDim = ArchQwen3, 64, 4, 1, 64 }},
		{"llama d128", func(s *RandomSpec) { s.Hidden, s.Heads, s.KVHeads, s.HeadDim = 128, 2, 1, 128 }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			spec := tiny(ArchLlama)
			tt.edit(&spec)
			m, dir := writeAndLoad(t, spec)
			toks := testTokens(40, spec.Vocab)
			full := fullLogitsOf(t, m, toks, compute.Q8_0)
			ref := loadRef(t, dir)
			exact := ref.forward(toks)
			ref.quantKV = true
			e, cost := relErr(full, ref.forward(toks)), relErr(full, exact)
			if e >= 2e-3 || math.IsNaN(e) || e >= cost/10 {
				t.Fatalf("relative error %.3g against the reference with Q8_0 keys and values, %.3g with float32 ones", e, cost)
			}
			if cost >= 5e-2 {
				t.Fatalf("relative error %.3g against the reference with float32 keys and values", cost)
			}
			t.Logf("relative error %.2g against the reference with Q8_0 keys and values, %.2g against float32 ones", e, cost)
			checkDecode(t, m, blockCache(t, m, compute.Q8_0, 12), toks, full, 2e-3)
		})
	}
	t.Run("head dim 8 refused", func(t *testing.T) {
		m, _ := writeAndLoad(t, tiny(ArchLlama))
		_, err := m.NewKVCache(KVCacheOptions{Budget: 1 << 20, DType: compute.Q8_0})
		if err == nil || !strings.Contains(err.Error(), "multiple of 32") {
			t.Fatalf("Q8_0 cache of head dim 8: error %v, want one about the head dim", err)
		}
	})
}

// TestBF16ProductsWithBF16CacheMatchReference runs the daemon's default
// on a CPU with BF16 products: kernels.PrecisionBF16 with a BF16 KV cache,
// where attention also rounds the queries to BF16 (and the AVX-512 tile
// path multiplies them by the cached keys with VDPBF16PS; head dims of 32
// and 64 take it). The reference rounds the products' inputs, the keys and
// values, and the queries; incremental decode must match the full forward.
func TestBF16ProductsWithBF16CacheMatchReference(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(*RandomSpec)
	}{
		{"llama d8", func(*RandomSpec) {}},
		{"qwen3 d32", func(s *RandomSpec) { s.Arch, s.Hidden, s.Intermediate, s.HeadDim = ArchQwen3, 64, 96, 32 }},
		{"llama d64 mqa", func(s *RandomSpec) { s.Hidden, s.Heads, s.KVHeads, s.HeadDim = 64, 4, 1, 64 }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			spec := tiny(ArchLlama)
			spec.DType = "bfloat16"
			tt.edit(&spec)
			m, dir := writeAndLoadOn(t, spec, cpu.NewWithOptions(cpu.Options{Precision: kernels.PrecisionBF16}))
			kvOf := func() *KVCache {
				kv, err := m.NewKVCache(KVCacheOptions{BlockSize: 4, Budget: m.Config.KVBytesPerToken(compute.BF16) * 4 * 16, DType: compute.BF16})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(kv.Close)
				return kv
			}
			toks := testTokens(40, spec.Vocab)
			seq := kvOf().NewSequence()
			full, err := m.Forward([]Step{{seq, toks}}, AllLogits, nil)
			seq.Free()
			if err != nil {
				t.Fatal(err)
			}
			// BF16 rounding makes the tolerances loose: where the engine's
			// float32 sums and the reference's float64 ones differ in the
			// last bits, an activation near a rounding boundary rounds the
			// other way (by 2⁻⁸ of itself) and the difference carries on
			// through the layers. These models show up to 4e-3 against the
			// reference, and so does decode against the full forward, where
			// products run at other shapes. Rounding the queries or not
			// moves the logits by 0.6-1%: the engine must be the nearer to
			// the reference that rounds them. TestPagedAttention checks
			// every attention path against the rounded reference to 1e-5.
			ref := loadRef(t, dir)
			ref.roundInputs, ref.roundKV = true, true
			unrounded := relErr(full, ref.forward(toks))
			ref.roundQ = true
			e := relErr(full, ref.forward(toks))
			if e >= 1e-2 || math.IsNaN(e) || e >= unrounded/2 {
				t.Fatalf("relative error %.3g against the reference with BF16 inputs, keys, values and queries, %.3g with float32 queries", e, unrounded)
			}
			t.Logf("relative error %.2g against the reference with BF16 inputs, keys, values and queries; %.2g with float32 queries", e, unrounded)
			checkDecode(t, m, kvOf(), toks, full, 1e-2)
		})
	}
}

func TestIncrementalDecodeMatchesFullForward(t *testing.T) {
	for _, arch := range []string{ArchLlama, ArchQwen2, ArchQwen3, ArchMistral, ArchGemma3, ArchGranite, ArchOlmo2, ArchSmolLM3, ArchGemma2} {
		t.Run(arch, func(t *testing.T) {
			spec := tiny(arch)
			spec.DType = "bfloat16"
			if arch == ArchMistral || arch == ArchGemma3 || arch == ArchGemma2 {
				spec.SlidingWindow = 6 // shorter than the 23 tokens, across blocks of 4
			}
			if arch == ArchGemma2 {
				spec.AttnSoftcap, spec.FinalSoftcap = 2, 4
			}
			if arch == ArchGemma3 {
				spec.SlidingPattern = 2 // a windowed layer, then a global one
			}
			if arch == ArchSmolLM3 {
				spec.Layers = 4 // the fourth does not rotate
			}
			if arch == ArchGranite {
				spec.EmbeddingMultiplier, spec.AttentionMultiplier, spec.ResidualMultiplier, spec.LogitsScaling = 3, 0.3, 0.5, 4
			}
			m, _ := writeAndLoad(t, spec)
			vocab := spec.Vocab
			toks := testTokens(23, vocab)
			full := fullLogits(t, m, toks)
			check := func(what string, pos int, got []float32) {
				t.Helper()
				want := full[pos*vocab : (pos+1)*vocab]
				for i := range want {
					if d := math.Abs(float64(got[i] - want[i])); d > 1e-5*(1+math.Abs(float64(want[i]))) {
						t.Fatalf("%s: position %d logit %d = %v, full forward %v", what, pos, i, got[i], want[i])
					}
				}
			}
			for _, chunks := range [][]int{
				{5, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, // prefill then decode
				{3, 5, 2, 8, 4, 1}, // chunked prefill across blocks
				{1, 1, 1, 20},
			} {
				kv := newCache(t, m, 4, 16)
				seq := kv.NewSequence()
				var logits []float32
				pos := 0
				for _, n := range chunks {
					var err error
					logits, err = m.Forward([]Step{{seq, toks[pos : pos+n]}}, LastLogits, logits)
					if err != nil {
						t.Fatal(err)
					}
					pos += n
					check("chunked", pos-1, logits)
				}
				if seq.Len() != len(toks) {
					t.Fatalf("sequence length %d, want %d", seq.Len(), len(toks))
				}
				seq.Free()
				if kv.FreeBlocks() != kv.NumBlocks() {
					t.Fatalf("%d of %d blocks free after Free", kv.FreeBlocks(), kv.NumBlocks())
				}
			}
		})
	}
}

func TestBatchedForwardMatchesSolo(t *testing.T) {
	spec := tiny(ArchQwen3)
	m, _ := writeAndLoad(t, spec)
	vocab := spec.Vocab
	prompts := [][]int32{testTokens(9, vocab), testTokens(3, vocab)[1:], testTokens(17, vocab)[4:]}
	solo := make([][]float32, len(prompts))
	for i, p := range prompts {
		solo[i] = fullLogits(t, m, p)
	}
	kv := newCache(t, m, 4, 32)
	seqs := []*Sequence{kv.NewSequence(), kv.NewSequence(), kv.NewSequence()}
	// Step 1: prefill sequence 0 fully, 1 partly, 2 partly.
	// Step 2: decode 0, finish 1's prompt, continue 2, all in one batch.
	cuts := [][]int{{8, 1}, {1, 1}, {6, 7}}
	pos := make([]int, 3)
	for step := range 2 {
		var batch []Step
		for i, p := range prompts {
			batch = append(batch, Step{seqs[i], p[pos[i] : pos[i]+cuts[i][step]]})
		}
		all, err := m.Forward(batch, AllLogits, nil)
		if err != nil {
			t.Fatal(err)
		}
		row := 0
		for i := range prompts {
			for j := 0; j < cuts[i][step]; j++ {
				p := pos[i] + j
				got := all[row*vocab : (row+1)*vocab]
				want := solo[i][p*vocab : (p+1)*vocab]
				for k := range want {
					if d := math.Abs(float64(got[k] - want[k])); d > 1e-5*(1+math.Abs(float64(want[k]))) {
						t.Fatalf("step %d sequence %d position %d logit %d: batched %v, alone %v", step, i, p, k, got[k], want[k])
					}
				}
				row++
			}
			pos[i] += cuts[i][step]
		}
	}
	// LastLogits returns one row per step.
	for _, s := range seqs {
		s.Free()
	}
	seqs = []*Sequence{kv.NewSequence(), kv.NewSequence()}
	last, err := m.Forward([]Step{{seqs[0], prompts[0]}, {seqs[1], prompts[2]}}, LastLogits, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(last) != 2*vocab {
		t.Fatalf("LastLogits returned %d values, want %d", len(last), 2*vocab)
	}
	for i, p := range []int{len(prompts[0]) - 1, len(prompts[2]) - 1} {
		src := solo[[]int{0, 2}[i]]
		for k := range vocab {
			if d := math.Abs(float64(last[i*vocab+k] - src[p*vocab+k])); d > 1e-5*(1+math.Abs(float64(src[p*vocab+k]))) {
				t.Fatalf("LastLogits row %d logit %d: %v, alone %v", i, k, last[i*vocab+k], src[p*vocab+k])
			}
		}
	}
}

func TestLogProbsMatchLogSoftmax(t *testing.T) {
	spec := tiny(ArchQwen2)
	spec.Vocab = 211
	m, _ := writeAndLoad(t, spec)
	vocab := spec.Vocab
	toks := testTokens(15, vocab)
	prompt, response := toks[:6], toks[6:]
	full := fullLogits(t, m, toks)
	kv := newCache(t, m, 4, 16)
	got, err := m.LogProbs(kv, prompt, response, 3)
	if err != nil {
		t.Fatal(err)
	}
	if kv.FreeBlocks() != kv.NumBlocks() {
		t.Errorf("LogProbs kept %d blocks", kv.NumBlocks()-kv.FreeBlocks())
	}
	if len(got.LogProbs) != len(response) || len(got.TopK) != len(response) {
		t.Fatalf("%d log-probs and %d top-k lists for %d tokens", len(got.LogProbs), len(got.TopK), len(response))
	}
	for i, tok := range response {
		row := full[(len(prompt)-1+i)*vocab : (len(prompt)+i)*vocab]
		m, z := math.Inf(-1), 0.0
		for _, v := range row {
			m = math.Max(m, float64(v))
		}
		for _, v := range row {
			z += math.Exp(float64(v) - m)
		}
		want := float64(row[tok]) - m - math.Log(z)
		if d := math.Abs(float64(got.LogProbs[i]) - want); d > 1e-5 {
			t.Errorf("token %d: log-prob %v, log-softmax of logits %v", i, got.LogProbs[i], want)
		}
		best := 0
		for j, v := range row {
			if v > row[best] {
				best = j
			}
		}
		top := got.TopK[i]
		if len(top) != 3 || top[0].Token != int32(best) || top[0].LogProb < top[1].LogProb || top[1].LogProb < top[2].LogProb {
			t.Errorf("token %d: top-3 %v, argmax %d", i, top, best)
		}
		if d := math.Abs(float64(top[0].LogProb) - (float64(row[best]) - m - math.Log(z))); d > 1e-5 {
			t.Errorf("token %d: top log-prob %v", i, top[0].LogProb)
		}
	}
	// A batch of requests gives the same answers as one at a time.
	batch, err := m.LogProbsBatch(kv, []ScoreRequest{{toks[:2], toks[2:5]}, {prompt, response}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range response {
		if d := math.Abs(float64(batch[1].LogProbs[i] - got.LogProbs[i])); d > 1e-5 {
			t.Errorf("batched log-prob %d: %v, alone %v", i, batch[1].LogProbs[i], got.LogProbs[i])
		}
	}
	if batch[0].TopK != nil || len(batch[0].LogProbs) != 3 {
		t.Errorf("batch[0] = %+v", batch[0])
	}
	if _, err := m.LogProbs(kv, nil, response, 0); err == nil {
		t.Error("LogProbs with an empty prompt succeeded")
	}
}

func TestKVCacheBudget(t *testing.T) {
	m, _ := writeAndLoad(t, tiny(ArchLlama))
	kv := newCache(t, m, 4, 3) // room for 12 tokens
	a, b := kv.NewSequence(), kv.NewSequence()
	toks := testTokens(13, 97)
	_, err := m.Forward([]Step{{a, toks}}, LastLogits, nil)
	if !errors.Is(err, ErrCacheFull) {
		t.Fatalf("13 tokens in a 12-token cache: err = %v, want ErrCacheFull", err)
	}
	if a.Len() != 0 || kv.FreeBlocks() != 3 {
		t.Fatalf("after a refused step: len %d, %d free blocks", a.Len(), kv.FreeBlocks())
	}
	if _, err := m.Forward([]Step{{a, toks[:8]}}, LastLogits, nil); err != nil {
		t.Fatal(err)
	}
	// b needs 2 blocks, only 1 is free: the whole batch is refused.
	_, err = m.Forward([]Step{{a, toks[8:9]}, {b, toks[:5]}}, LastLogits, nil)
	if !errors.Is(err, ErrCacheFull) || a.Len() != 8 || b.Len() != 0 || kv.FreeBlocks() != 1 {
		t.Fatalf("refused batch: err %v, lens %d %d, %d free", err, a.Len(), b.Len(), kv.FreeBlocks())
	}
	a.Free()
	if kv.FreeBlocks() != 3 {
		t.Fatalf("%d free blocks after Free, want 3", kv.FreeBlocks())
	}
	if _, err := m.Forward([]Step{{b, toks[:12]}}, LastLogits, nil); err != nil {
		t.Fatalf("freed blocks not reusable: %v", err)
	}
	if _, err := m.NewKVCache(KVCacheOptions{BlockSize: 4, Budget: 10}); err == nil {
		t.Error("a budget smaller than one block was accepted")
	}
	if _, err := m.NewKVCache(KVCacheOptions{BlockSize: 4, Budget: 1 << 20, DType: compute.I32}); err == nil {
		t.Error("an I32 cache was accepted")
	}
	// A BF16 cache holds twice the tokens of an F32 one in the same budget.
	budget := 3 * 4 * m.Config.KVBytesPerToken(compute.F32)
	f32, bf16 := newCacheOf(t, m, 4, 3, compute.F32), newCacheOf(t, m, 4, 6, compute.BF16)
	if 2*bf16.BytesPerBlock() != f32.BytesPerBlock() || bf16.NumBlocks()*int(bf16.BytesPerBlock()) != int(budget) {
		t.Errorf("BF16 blocks of %d bytes (%d of them) against F32 blocks of %d in %d bytes", bf16.BytesPerBlock(), bf16.NumBlocks(), f32.BytesPerBlock(), budget)
	}
}

// TestKVBytesPerToken pins the cache's bytes per token: keys and values of
// every layer, 4, 2 or 34/32 bytes a value (ggml's Q8_0 blocks), for the
// Qwen3-0.6B shape (28 layers, 8 key/value heads of 128) among others.
func TestKVBytesPerToken(t *testing.T) {
	qwen06 := &Config{NumLayers: 28, NumKVHeads: 8, HeadDim: 128}
	for _, tt := range []struct {
		c    *Config
		dt   compute.DType
		want int64
	}{
		{qwen06, compute.F32, 2 * 28 * 1024 * 4},  // 229376
		{qwen06, compute.BF16, 2 * 28 * 1024 * 2}, // 114688
		{qwen06, compute.Q8_0, 2 * 28 * 32 * 34},  // 60928: 0.53 of BF16
		{&Config{NumLayers: 2, NumKVHeads: 1, HeadDim: 64}, compute.Q8_0, 2 * 2 * 2 * 34},
	} {
		if got := tt.c.KVBytesPerToken(tt.dt); got != tt.want {
			t.Errorf("%d layers, %d kv heads of %d, %v: %d bytes a token, want %d", tt.c.NumLayers, tt.c.NumKVHeads, tt.c.HeadDim, tt.dt, got, tt.want)
		}
	}
}

// TestSharedBlocks checks prefix sharing: a fork and an attached prefix
// continue independently of the sequence they share blocks with, and
// shared blocks are copied before being written; with F32, BF16 and Q8_0
// caches (Q8_0 on heads of 32, to the tolerance of
// TestQ8_0CacheMatchesReference).
func TestSharedBlocks(t *testing.T) {
	for _, dt := range []compute.DType{compute.F32, compute.BF16, compute.Q8_0} {
		t.Run(dt.String(), func(t *testing.T) { testSharedBlocks(t, dt) })
	}
}

func testSharedBlocks(t *testing.T, dt compute.DType) {
	spec := tiny(ArchLlama)
	tol := 1e-5
	if dt == compute.Q8_0 {
		spec.Hidden, spec.Intermediate, spec.HeadDim, tol = 64, 96, 32, 2e-3
	}
	m, _ := writeAndLoad(t, spec)
	vocab := spec.Vocab
	toks := testTokens(14, vocab)
	alt := append(append([]int32(nil), toks[:6]...), 5, 6, 7, 8)
	fullA, fullB := fullLogitsOf(t, m, toks, dt), fullLogitsOf(t, m, alt, dt)
	kv := newCacheOf(t, m, 4, 16, dt)

	a := kv.NewSequence()
	if _, err := m.Forward([]Step{{a, toks[:6]}}, LastLogits, nil); err != nil {
		t.Fatal(err)
	}
	f := a.Fork() // shares a full block and a half-filled one
	if kv.RefCount(a.Blocks()[1]) != 2 {
		t.Fatalf("refcount of a shared block = %d", kv.RefCount(a.Blocks()[1]))
	}
	p := kv.NewSequence() // a prefix cache would hold the first block
	if err := p.Attach(a.Blocks()[:1], 4); err != nil {
		t.Fatal(err)
	}
	out, err := m.Forward([]Step{{a, toks[6:]}, {f, alt[6:]}, {p, alt[4:]}}, AllLogits, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Blocks()[1] == f.Blocks()[1] {
		t.Fatal("a partially filled shared block was written without a copy")
	}
	if a.Blocks()[0] != f.Blocks()[0] || a.Blocks()[0] != p.Blocks()[0] {
		t.Fatal("the full prefix block is no longer shared")
	}
	rows := []struct {
		full []float32
		from int
		n    int
	}{{fullA, 6, 8}, {fullB, 6, 4}, {fullB, 4, 6}}
	r := 0
	for s, want := range rows {
		for i := range want.n {
			pos := want.from + i
			for k := range vocab {
				g, w := out[(r+i)*vocab+k], want.full[pos*vocab+k]
				if math.Abs(float64(g-w)) > tol*(1+math.Abs(float64(w))) {
					t.Fatalf("sequence %d position %d logit %d: %v, want %v", s, pos, k, g, w)
				}
			}
		}
		r += want.n
	}
	for _, s := range []*Sequence{a, f, p} {
		s.Free()
	}
	if kv.FreeBlocks() != kv.NumBlocks() {
		t.Fatalf("%d of %d blocks free after freeing all", kv.FreeBlocks(), kv.NumBlocks())
	}

	// Truncate rewinds a sequence to a shared prefix and continues.
	a = kv.NewSequence()
	if _, err := m.Forward([]Step{{a, toks}}, LastLogits, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.Truncate(6); err != nil {
		t.Fatal(err)
	}
	last, err := m.Forward([]Step{{a, alt[6:]}}, LastLogits, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k := range vocab {
		if w := fullB[9*vocab+k]; math.Abs(float64(last[k]-w)) > tol*(1+math.Abs(float64(w))) {
			t.Fatalf("after Truncate: logit %d = %v, want %v", k, last[k], w)
		}
	}
}

func TestForwardRejects(t *testing.T) {
	spec := tiny(ArchLlama)
	m, _ := writeAndLoad(t, spec)
	kv := newCache(t, m, 8, 16)
	s := kv.NewSequence()
	long := testTokens(spec.MaxPositions+1, spec.Vocab)
	other, _ := writeAndLoad(t, tiny(ArchQwen3))
	otherKV := newCache(t, other, 8, 2)
	for _, tt := range []struct {
		name  string
		steps []Step
		want  string
	}{
		{"beyond max positions", []Step{{s, long}}, "max_position_embeddings"},
		{"token outside vocab", []Step{{s, []int32{int32(spec.Vocab)}}}, "outside the vocabulary"},
		{"negative token", []Step{{s, []int32{-1}}}, "outside the vocabulary"},
		{"no tokens", []Step{{s, nil}}, "no tokens"},
		{"empty batch", nil, "empty batch"},
		{"no sequence", []Step{{nil, []int32{1}}}, "no sequence"},
		{"repeated sequence", []Step{{s, []int32{1}}, {s, []int32{2}}}, "repeats"},
		{"foreign cache", []Step{{otherKV.NewSequence(), []int32{1}}}, "not made for this model"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := m.Forward(tt.steps, LastLogits, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
			if s.Len() != 0 || kv.FreeBlocks() != kv.NumBlocks() {
				t.Fatalf("refused step changed the sequence (len %d, %d free)", s.Len(), kv.FreeBlocks())
			}
		})
	}
	// Exactly max_position_embeddings tokens fit.
	if _, err := m.Forward([]Step{{s, long[:spec.MaxPositions]}}, LastLogits, nil); err != nil {
		t.Fatalf("a full context was refused: %v", err)
	}
}

// Chunked scoring: LogProbsWith in rounds of a few tokens (pieces of
// several requests packed per round) gives the log-probs and top-k of one
// pass over each request.
func TestLogProbsChunked(t *testing.T) {
	spec := tiny(ArchQwen2)
	spec.Vocab, spec.MaxPositions = 211, 256
	m, _ := writeAndLoad(t, spec)
	toks := testTokens(120, spec.Vocab)
	reqs := []ScoreRequest{{toks[:7], toks[7:40]}, {toks[40:41], toks[41:44]}, {toks[50:90], toks[90:120]}}
	kv := newCache(t, m, 4, 128)
	whole, err := m.LogProbsBatch(kv, reqs, 2) // one round: 120 tokens < 512
	if err != nil {
		t.Fatal(err)
	}
	for _, chunk := range []int{1, 3, 16, 37} {
		m.SetScoreChunk(chunk)
		// Each round is a slice of a score slicer (training work that gives
		// way to serving between rounds).
		var sl countingSlicer
		m.SetScoreSlicer(&sl)
		got, err := m.LogProbsBatch(kv, reqs, 2)
		m.SetScoreSlicer(nil)
		if err != nil {
			t.Fatal(err)
		}
		if rounds := (114 + chunk - 1) / chunk; sl.yields != rounds-1 || sl.takes != rounds {
			t.Errorf("chunk %d: %d slice boundaries and %d takes over %d rounds", chunk, sl.yields, sl.takes, rounds)
		}
		for i := range reqs {
			for j := range reqs[i].Response {
				if d := math.Abs(float64(got[i].LogProbs[j] - whole[i].LogProbs[j])); d > 1e-4 {
					t.Errorf("chunk %d, request %d token %d: %v, in one pass %v", chunk, i, j, got[i].LogProbs[j], whole[i].LogProbs[j])
				}
				if got[i].TopK[j][0].Token != whole[i].TopK[j][0].Token {
					t.Errorf("chunk %d, request %d token %d: top token %d, in one pass %d", chunk, i, j, got[i].TopK[j][0].Token, whole[i].TopK[j][0].Token)
				}
			}
		}
		if kv.FreeBlocks() != kv.NumBlocks() {
			t.Errorf("chunk %d: %d blocks kept", chunk, kv.NumBlocks()-kv.FreeBlocks())
		}
	}
	m.SetScoreChunk(0)
	if m.ScoreChunk() != DefaultScoreChunk {
		t.Errorf("score chunk %d after reset", m.ScoreChunk())
	}
}

// A scoring pass never holds the model for more than one round: decode
// steps (Run) that wait are let in between rounds. Counted in Run calls,
// not time: a pass of R rounds beside a busy decoder lets at least R/2
// decode steps through (an unchunked pass, one round, lets none).
func TestLogProbsLetDecodeIn(t *testing.T) {
	spec := tiny(ArchQwen2)
	spec.MaxPositions = 512
	m, _ := writeAndLoad(t, spec)
	toks := testTokens(400, spec.Vocab)
	scoreKV := newCache(t, m, 8, 64)
	decodeKV := newCache(t, m, 8, 64)
	m.SetScoreChunk(10)
	rounds := 40

	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() { // a decoder: one token at a time, as fast as it can
		seq := decodeKV.NewSequence()
		defer seq.Free()
		var err error
		for i := 0; err == nil; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if seq.Len() >= 400 {
				seq.Free()
				seq = decodeKV.NewSequence()
			}
			_, err = m.Run(nil, []Step{{Seq: seq, Tokens: []int32{int32(i % spec.Vocab)}}}, LastLogits, nil)
		}
		done <- err
	}()
	before := m.runEntered.Load()
	if _, err := m.LogProbsBatch(scoreKV, []ScoreRequest{{toks[:200], toks[200:400]}}, 0); err != nil {
		t.Fatal(err)
	}
	during := m.runEntered.Load() - before
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if during < int64(rounds/2) {
		t.Errorf("%d decode steps ran during a scoring pass of %d rounds; want at least %d", during, rounds, rounds/2)
	}
}
