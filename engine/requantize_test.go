package engine

import (
	"math"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/bundled"
	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/config"
	"github.com/clawrl/clawrl/corpus"
	"github.com/clawrl/clawrl/gguf"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/tokenizer"
)

// TestAutoRequantize: model.quantize: auto loads a GGUF file's K-quant
// matrices (the bundled model written as Q4_K, as llama.cpp's Q4_K_M mix
// stores most of a model, as Q6_K, which it gives the rest, and as that
// Q4_K_M mix itself; and the same for Q5_K and Q5_K_M; Q5_0 and IQ4_XS)
// for the int8 kernels instead of widening them to float
// (model.quantize: none): Q4_K and Q5_K blocks rewritten as Q4_1 and Q5_1
// (the same values, each sub-block's scale and minimum rounded to
// halves), Q5_0 as Q5_1 (the same values), IQ4_XS as IQ4_NL (each
// sub-block's scale rounded to a half), Q6_K and Q3_K as Q6_16 (each
// sub-block of 16's scale rounded to a half), Q2_K requantized to Q8_0.
// The weights take under a quarter (Q4_K, Q5_K, Q5_0, Q6_K, Q3_K), 16%
// (IQ4_XS) and 30% (the mixes) of the memory widened takes. An IQ4_NL file
// runs as it is stored (auto and none alike), in under 16% of the
// memory, as close to the checkpoint as twice Q4_K's own error. On the replies of 32 held-out
// conversations, auto adds to the mean |Δ log p| that the file itself has
// against the BF16 checkpoint it was written from no more than quantizing
// that checkpoint to Q8_0 costs (the int8 products' rounding of the
// activations, which the widened file's float products do not do), and
// moves log-probs no more than 1.5× as much as that. Where auto
// does not apply (a safetensors checkpoint, GPUs, full fine-tuning) the
// model loads as none does.
func TestAutoRequantize(t *testing.T) {
	dir, err := bundled.Dir()
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	src, err := model.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	paths := map[string]string{}
	for _, mix := range []gguf.Mix{gguf.Uniform(gguf.Q4_K), gguf.Uniform(gguf.Q6_K), gguf.MixQ4KM, gguf.Uniform(gguf.Q5_K), gguf.MixQ5KM,
		gguf.Uniform(gguf.Q5_0), gguf.Uniform(gguf.IQ4_NL), gguf.Uniform(gguf.IQ4_XS), gguf.Uniform(gguf.Q3_K), gguf.Uniform(gguf.Q2_K)} {
		paths[mix.String()] = filepath.Join(t.TempDir(), "bundled-"+strings.ToLower(mix.String())+".gguf")
		if err := gguf.WriteModelMix(paths[mix.String()], src, tok, mix); err != nil {
			t.Fatal(err)
		}
	}
	src.Close()
	path := paths["Q4_K"]

	convs, err := corpus.HeldOutEncoded(tok, 32, 1)
	if err != nil {
		t.Fatal(err)
	}
	load := func(quantize string, mut func(*config.Config), path string) (lp []float32, bytes int64, note string) {
		t.Helper()
		cfg := Defaults()
		cfg.Model.Quantize = quantize
		cfg.Trainer.LoRARank = 16
		if mut != nil {
			mut(cfg)
		}
		m, note, err := loadHostNoting(cfg, path)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		kv, err := m.NewKVCache(model.KVCacheOptions{Budget: 8 << 20, DType: compute.F32})
		if err != nil {
			t.Fatal(err)
		}
		defer kv.Close()
		for _, c := range convs {
			s, err := m.LogProbs(kv, c.IDs[:1], c.IDs[1:], 0)
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range s.LogProbs {
				if c.Train[i+1] { // the replies' tokens, as TestQuantizedLogProbs scores them
					lp = append(lp, v)
				}
			}
		}
		return lp, m.Weights().Bytes(), note
	}
	meanDiff := func(a, b []float32) float64 {
		var sum float64
		for i := range a {
			sum += math.Abs(float64(a[i] - b[i]))
		}
		return sum / float64(len(a))
	}
	orig, _, _ := load("none", nil, dir)
	origQ8, _, _ := load("q8_0", nil, dir)
	q8 := meanDiff(origQ8, orig)
	for _, c := range []struct {
		typ      string
		note     string // what auto says it converted, as a pattern
		maxBytes float64
	}{
		{"Q4_K", `Q4_K×\d+ → Q4_1`, 0.25},
		{"Q6_K", `Q6_K×\d+ → Q6_16`, 0.25},
		{"Q4_K_M", `Q4_K×\d+ → Q4_1, Q6_K×\d+ → Q6_16`, 0.3}, // llama-quantize's mix
		{"Q5_K", `Q5_K×\d+ → Q5_1`, 0.25},
		{"Q5_K_M", `Q5_K×\d+ → Q5_1, Q6_K×\d+ → Q6_16`, 0.3},
		{"Q3_K", `Q3_K×\d+ → Q6_16`, 0.25},
		{"Q2_K", `Q2_K×\d+ → Q8_0`, 0.4},
		{"Q5_0", `Q5_0×\d+ → Q5_1`, 0.25}, // the same values
		{"IQ4_XS", `IQ4_XS×\d+ → IQ4_NL`, 0.16},
	} {
		wide, wideBytes, note := load("none", nil, paths[c.typ])
		if note != "" {
			t.Fatalf("%v: none converted %q", c.typ, note)
		}
		auto, autoBytes, note := load("auto", nil, paths[c.typ])
		if !regexp.MustCompile(`^` + c.note + `$`).MatchString(note) {
			t.Fatalf("%v: auto converted %q, want %s", c.typ, note, c.note)
		}
		fileErr, autoErr, requant := meanDiff(wide, orig), meanDiff(auto, orig), meanDiff(auto, wide)
		t.Logf("%s: weights %d KiB against %d KiB widened (%.0f%%); %d reply tokens, mean |Δ log p| against the BF16 checkpoint: "+
			"the file widened %.4f, converted %.4f; converted against widened %.4f (the BF16 checkpoint at Q8_0: %.4f)",
			note, autoBytes>>10, wideBytes>>10, 100*float64(autoBytes)/float64(wideBytes), len(wide), fileErr, autoErr, requant, q8)
		if !(autoErr <= fileErr+q8) {
			t.Errorf("%v: converted file %.4f from the checkpoint against %.4f widened: want at most %.4f more (the checkpoint at Q8_0)", c.typ, autoErr, fileErr, q8)
		}
		if !(requant <= 1.5*q8) {
			t.Errorf("%v: converting moved log-probs by %.4f, against %.4f for the checkpoint quantized to Q8_0: want at most 1.5×", c.typ, requant, q8)
		}
		if float64(autoBytes) > c.maxBytes*float64(wideBytes) {
			t.Errorf("%v: weights %d bytes converted against %d widened: want under %.0f%%", c.typ, autoBytes, wideBytes, 100*c.maxBytes)
		}
	}

	// IQ4_NL runs as it is stored, on its own kernels.
	q4kWide, f32Bytes, _ := load("none", nil, paths["Q4_K"])
	for _, quantize := range []string{"auto", "none"} {
		lp, bytes, note := load(quantize, nil, paths["IQ4_NL"])
		fileErr, q4kErr := meanDiff(lp, orig), meanDiff(q4kWide, orig)
		t.Logf("IQ4_NL, %s: weights %d KiB (%.0f%% of float32); mean |Δ log p| against the BF16 checkpoint %.4f (Q4_K widened: %.4f)",
			quantize, bytes>>10, 100*float64(bytes)/float64(f32Bytes), fileErr, q4kErr)
		if note != "" || float64(bytes) > 0.16*float64(f32Bytes) {
			t.Errorf("IQ4_NL, %s: converted %q, weights %d bytes against %d as float32", quantize, note, bytes, f32Bytes)
		}
		if !(fileErr <= 2*q4kErr) {
			t.Errorf("IQ4_NL, %s: mean |Δ log p| %.4f against the checkpoint, Q4_K's %.4f", quantize, fileErr, q4kErr)
		}
	}

	for _, c := range []struct {
		name string
		mut  func(*config.Config)
		path string
	}{
		{"safetensors checkpoint", nil, dir},
		{"GPUs", func(c *config.Config) { c.Devices.Actor.GPUs = []int{0} }, path},
		{"full fine-tuning", func(c *config.Config) { c.Trainer.LoRARank = 0 }, path},
	} {
		cfg := Defaults()
		cfg.Model.Quantize, cfg.Trainer.LoRARank = "auto", 16
		if c.mut != nil {
			c.mut(cfg)
		}
		if AutoRequantize(cfg, c.path) {
			t.Errorf("%s: auto requantizes", c.name)
		}
	}
}
