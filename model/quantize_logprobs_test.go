package model_test

import (
	"math"
	"testing"

	"github.com/clawrl/clawrl/bundled"
	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/corpus"
	"github.com/clawrl/clawrl/cpu"
	"github.com/clawrl/clawrl/cpu/kernels"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/tokenizer"
)

// TestQuantizedLogProbs scores a fixed text with the bundled model (a
// trained Llama, BF16 weights) loaded as stored and quantized on load,
// and bounds the quantized models' drift: the mean |Δ log p| of the
// text's tokens and the perplexity gap, against the BF16 weights with
// float32 products. The text is 32 held-out conversations of the
// model's own training distribution (package pretrain, seed 1), scored
// on their replies' tokens, as the held-out loss of TRAINING.md is. The BF16-products row is the engine's default on
// CPUs with AVX512_BF16 and shows the scale of a rounding that serving
// already accepts. The KV-cache rows keep the BF16 weights and store the
// keys and values in BF16 (the daemon's default for this checkpoint) or in
// Q8_0 blocks (model.kv_cache_dtype: q8_0); the scoring pass reads them
// back from the cache, as a teacher pass and every decode step do, and
// the Q8_0 cache is also compared with the BF16 one directly.
func TestQuantizedLogProbs(t *testing.T) {
	if testing.Short() {
		t.Skip("loads the bundled model four times")
	}
	dir, err := bundled.Dir()
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	convs, err := corpus.HeldOutEncoded(tok, 32, 1)
	if err != nil {
		t.Fatal(err)
	}
	// score returns the log-probs of the replies' tokens, then those of
	// every token after the first of each conversation.
	score := func(b compute.Backend, dt, kvdt compute.DType) (replies, all []float32) {
		src, err := model.OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if dt != 0 {
			if src, err = model.Quantize(src, dt); err != nil {
				t.Fatal(err)
			}
		}
		m, err := model.LoadFrom(b, src)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		kv, err := m.NewKVCache(model.KVCacheOptions{Budget: 8 << 20, DType: kvdt})
		if err != nil {
			t.Fatal(err)
		}
		defer kv.Close()
		for _, c := range convs {
			s, err := m.LogProbs(kv, c.IDs[:1], c.IDs[1:], 0)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, s.LogProbs...)
			for i, v := range s.LogProbs {
				if c.Train[i+1] {
					replies = append(replies, v)
				}
			}
		}
		return replies, all
	}
	refR, refA := score(cpu.New(), 0, 0)
	ppl := func(lp []float32) float64 {
		var s float64
		for _, v := range lp {
			s -= float64(v)
		}
		return math.Exp(s / float64(len(lp)))
	}
	for _, c := range []struct {
		name           string
		b              compute.Backend
		dt, kvdt       compute.DType
		meanMax, gapPc float64 // bounds on the replies: mean |Δ log p|, perplexity gap in %
	}{
		{"bf16-products", cpu.NewWithOptions(cpu.Options{Precision: kernels.PrecisionBF16}), 0, 0, 0.002, 0.1},
		{"q8_0", cpu.New(), compute.Q8_0, 0, 0.005, 0.2},
		{"q4_0", cpu.New(), compute.Q4_0, 0, 0.02, 1},
		{"iq4_nl", cpu.New(), compute.IQ4_NL, 0, 0.02, 1},
		{"q6_16", cpu.New(), compute.Q6_16, 0, 0.005, 0.2}, // every matrix, as a GGUF file's Q6_K runs
		{"bf16-kv", cpu.New(), 0, compute.BF16, 0.002, 0.1},
		{"q8_0-kv", cpu.New(), 0, compute.Q8_0, 0.002, 0.1},
	} {
		r, a := score(c.b, c.dt, c.kvdt)
		type scoreSet struct {
			what      string
			lp, ref   []float32
			checkedBy bool
		}
		sets := []scoreSet{{"replies", r, refR, true}, {"all tokens", a, refA, false}}
		if c.kvdt == compute.Q8_0 { // against the BF16 cache, all tokens
			_, ba := score(cpu.New(), 0, compute.BF16)
			sets = append(sets, scoreSet{"vs bf16-kv", a, ba, false})
		}
		for _, set := range sets {
			var sum, worst float64
			for i := range set.lp {
				d := math.Abs(float64(set.lp[i] - set.ref[i]))
				sum += d
				worst = math.Max(worst, d)
			}
			mean := sum / float64(len(set.lp))
			gap := 100 * (ppl(set.lp)/ppl(set.ref) - 1)
			t.Logf("%-13s %-10s %4d tokens: mean |Δ log p| %.4f (worst %.3f), perplexity %.3f against %.3f (%+.2f%%)", c.name, set.what, len(set.lp), mean, worst, ppl(set.lp), ppl(set.ref), gap)
			if set.checkedBy && (!(mean <= c.meanMax) || !(math.Abs(gap) <= c.gapPc)) {
				t.Errorf("%s: mean |Δ log p| %.4f (bound %g), perplexity gap %+.2f%% (bound ±%g%%)", c.name, mean, c.meanMax, gap, c.gapPc)
			}
		}
	}
}
