package gguf

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu"
	"github.com/clawrl/clawrl/model"
)

// TestLlamaCppPerplexity checks clawrl's forward pass against llama.cpp's
// on model variants whose math llama.cpp implements on its own: random
// models of the variant are written as F32 GGUF files, llama.cpp's
// llama-perplexity measures each on a fixed text (chunks of 128 tokens,
// each evaluated alone, the second half scored), and clawrl computes the
// same from its logits of the same file. They must agree to 1e-3 (they
// agree to 3.3e-4 or better; weights twice as large give perplexities in
// the millions, where float rounding shows up to 2e-3), and
// where a control is given the variant must matter: the same weights
// without what sets the variant apart give a perplexity off by at least
// ten times the tolerance.
// llama.cpp is not where CI runs: the test runs when LLAMA_CPP_BIN names
// a directory with llama-perplexity.
func TestLlamaCppPerplexity(t *testing.T) {
	bin := os.Getenv("LLAMA_CPP_BIN")
	if bin == "" {
		t.Skip("LLAMA_CPP_BIN is not set (a directory with llama.cpp's llama-perplexity)")
	}
	tool := filepath.Join(bin, "llama-perplexity")
	if _, err := os.Stat(tool); err != nil {
		t.Skipf("no llama-perplexity in LLAMA_CPP_BIN: %v", err)
	}
	tok := trainedTokenizer(t)
	var text strings.Builder
	for i := range 40 {
		fmt.Fprintf(&text, "What is %d + %d? %d + %d = %d. Thanks, that helps. ", i, 2*i+1, i, 2*i+1, 3*i+1)
	}
	dir := t.TempDir()
	textFile := filepath.Join(dir, "text.txt")
	if err := os.WriteFile(textFile, []byte(text.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	ids := tok.Encode(text.String())
	const nCtx = 128

	for _, c := range []struct {
		name    string
		variant func(*model.RandomSpec)
		control func(*model.RandomSpec) // the variant undone, nil for none
		long    bool                    // load with Config.LongContext
	}{
		{"linear rope ×4", func(s *model.RandomSpec) { s.RopeLinear = 4 }, func(s *model.RandomSpec) { s.RopeLinear = 0 }, false},
		// Phi-3's architecture, with its fused matrices, which llama.cpp
		// splits in its own graph. (Not named after it: llama.cpp gives
		// Phi-3's special tokens attributes when the model's name says
		// phi3, and fails on a vocabulary without them.)
		{"fused matrices", func(s *model.RandomSpec) { s.Arch = model.ArchPhi3 }, nil, false},
		// (Not Phi-3's sliding window: llama.cpp reads the key and turns it
		// off, "Phi SWA is currently disabled", where Hugging Face and
		// clawrl apply it.)
		// Phi-3.5's LongRoPE within its original context (llama.cpp picks
		// the short factors for a context of 128 ≤ 256, as Hugging Face
		// does for a sequence that long): the short factors and the
		// attention factor √(1 + ln 256 / ln 256) = √2.
		{"longrope", func(s *model.RandomSpec) { s.Arch = model.ArchPhi3; withLongRope(s, 32, 256) }, func(s *model.RandomSpec) { s.MaxPositions, s.LongRopeShort, s.LongRopeLong = 256, nil, nil }, false},
		// LongRoPE's long factors (model.long_context): the original
		// context of 64 is below llama.cpp's 128, so it runs them.
		{"longrope long factors", func(s *model.RandomSpec) { s.Arch = model.ArchPhi3; withLongRope(s, 32, 64) }, func(s *model.RandomSpec) { s.MaxPositions, s.LongRopeShort, s.LongRopeLong = 256, nil, nil }, true},
		// Phi-4-mini's partial rotary (the first 48 of 64 head dimensions
		// rotate), with LongRoPE and tied embeddings as it has them.
		{"partial rotary", func(s *model.RandomSpec) {
			s.Arch, s.PartialRotary, s.Tied = model.ArchPhi3, 0.75, true
			withLongRope(s, 24, 256)
		}, func(s *model.RandomSpec) {
			s.PartialRotary, s.MaxPositions, s.LongRopeShort, s.LongRopeLong = 0, 256, nil, nil
		}, false},
		// Gemma 3: sandwich norms of 1 + w, GELU, the embedding's scale,
		// two windowed layers of 16 positions with their own rotary base,
		// then a global one. The control takes the window and the local
		// base away.
		{"gemma3", func(s *model.RandomSpec) {
			s.Arch, s.Layers, s.Tied, s.SlidingWindow, s.SlidingPattern, s.LocalRopeTheta = model.ArchGemma3, 3, true, 16, 3, 100
			s.InitStd = 0.03 // the embedding is scaled by √256: logits of a sane size
		}, func(s *model.RandomSpec) { s.SlidingWindow = 0 }, false},
		// OLMo 2: no norms before the attention and the MLP, their
		// outputs normalised, q and k normalised over whole rows. The
		// control makes the same tensors a Llama.
		{"olmo2", func(s *model.RandomSpec) { s.Arch, s.InitStd = model.ArchOlmo2, 0.05 }, nil, false},
		// SmolLM3: the fourth of four layers without RoPE. The control
		// rotates it too.
		{"smollm3", func(s *model.RandomSpec) { s.Arch, s.Layers = model.ArchSmolLM3, 4 }, func(s *model.RandomSpec) { s.Arch = model.ArchLlama }, false},
		// Gemma 2: Gemma 3's blocks without q/k norms, every other layer
		// windowed, scores capped at 1.5 and logits at 3 (small, so that
		// the caps bend them). The control lifts the caps out of reach
		// (llama.cpp's gemma2 always caps).
		{"gemma2", func(s *model.RandomSpec) {
			s.Arch, s.Layers, s.Tied, s.SlidingWindow, s.AttnSoftcap, s.FinalSoftcap = model.ArchGemma2, 3, true, 16, 1.5, 3
		}, func(s *model.RandomSpec) { s.AttnSoftcap, s.FinalSoftcap = 1e4, 1e4 }, false},
		// Granite: Llama's blocks with its four multipliers (llama.cpp's
		// granite: q and k permuted as llama's).
		{"granite", func(s *model.RandomSpec) {
			s.Arch, s.EmbeddingMultiplier, s.AttentionMultiplier, s.ResidualMultiplier, s.LogitsScaling = model.ArchGranite, 4, 0.1, 0.5, 2
		}, func(s *model.RandomSpec) {
			s.Arch, s.EmbeddingMultiplier, s.AttentionMultiplier, s.ResidualMultiplier, s.LogitsScaling = model.ArchLlama, 0, 0, 0, 0
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			spec := smallSpec(model.ArchLlama, tok.VocabSize())
			spec.InitStd = 0.15 // attention away from uniform, so positions matter
			spec.RopeTheta = 10000
			c.variant(&spec)
			path := writeRandomGGUF(t, spec, filepath.Join(dir, "variant.gguf"))

			cmd := exec.Command(tool, "-m", path, "-f", textFile, "-c", strconv.Itoa(nCtx), "-b", strconv.Itoa(nCtx), "-t", "2")
			cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+bin)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("llama-perplexity: %v\n%s", err, out)
			}
			chunks := regexp.MustCompile(`over (\d+) chunks`).FindSubmatch(out)
			running := regexp.MustCompile(`\[(\d+)\]([0-9.]+),`).FindAllSubmatch(out, -1)
			if chunks == nil || len(running) == 0 {
				t.Fatalf("llama-perplexity printed no estimate:\n%s", out)
			}
			if n, _ := strconv.Atoi(string(chunks[1])); n != len(ids)/nCtx {
				t.Fatalf("llama.cpp makes %d chunks of the text, clawrl's tokenizer %d", n, len(ids)/nCtx)
			}
			last := running[len(running)-1]
			scored, _ := strconv.Atoi(string(last[1]))
			theirs, _ := strconv.ParseFloat(string(last[2]), 64)
			var m *model.Model
			if c.long {
				src, err := OpenModel(path)
				if err != nil {
					t.Fatal(err)
				}
				if m, err = model.LoadFrom(cpu.New(), model.WithConfig(src, src.Config().LongContext())); err != nil {
					t.Fatal(err)
				}
				defer m.Close()
			} else {
				m = loadGGUF(t, path)
			}
			ours := chunkPerplexity(t, m, ids, nCtx, scored)
			t.Logf("perplexity over %d chunks: llama.cpp %.4f, clawrl %.4f (ratio %.6f)", scored, theirs, ours, ours/theirs)
			if r := ours / theirs; math.Abs(r-1) > 1e-3 || math.IsNaN(r) {
				t.Errorf("perplexity llama.cpp %.4f, clawrl %.4f: ratio %.6f beyond 1±1e-3", theirs, ours, r)
			}
			if c.control == nil {
				return
			}
			control := spec
			c.control(&control)
			off := chunkPerplexity(t, loadGGUF(t, writeRandomGGUF(t, control, filepath.Join(dir, "control.gguf"))), ids, nCtx, scored)
			t.Logf("without the variant: %.4f", off)
			if r := off / theirs; math.Abs(r-1) < 1e-2 {
				t.Errorf("without the variant the perplexity is %.4f, within 1e-2 of llama.cpp's %.4f: the check cannot tell them apart", off, theirs)
			}
		})
	}
}

// withLongRope gives s LongRoPE over n pairs of rotated dimensions, an
// original context of orig and a model context of 65,536: short factors
// 1, 1.25, 1.5, ... and long ones 3, 4, 5, ...
func withLongRope(s *model.RandomSpec, n, orig int) {
	s.LongRopeShort, s.LongRopeLong = make([]float64, n), make([]float64, n)
	for i := range n {
		s.LongRopeShort[i], s.LongRopeLong[i] = 1+float64(i)/4, 3+float64(i)
	}
	s.MaxPositions, s.LongRopeOriginal = 65536, orig
}

// writeRandomGGUF writes a random model of spec as an F32 GGUF file with
// the test tokenizer, through clawrl's own writer.
func writeRandomGGUF(t *testing.T, spec model.RandomSpec, path string) string {
	t.Helper()
	src, _ := randomSource(t, spec)
	if err := WriteModel(path, src, trainedTokenizer(t), F32); err != nil {
		t.Fatal(err)
	}
	return path
}

// chunkPerplexity is llama-perplexity's measure: each chunk of n tokens
// evaluated alone, the log-probs of the tokens of its second half (after
// the first n/2) averaged over the first chunks chunks.
func chunkPerplexity(t *testing.T, m *model.Model, ids []int32, n, chunks int) float64 {
	t.Helper()
	kv, err := m.NewKVCache(model.KVCacheOptions{BlockSize: 16, Budget: m.Config.KVBytesPerToken(compute.F32) * int64(n+16)})
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	vocab := m.Config.VocabSize
	var nll float64
	count := 0
	for k := range chunks {
		chunk := ids[k*n : (k+1)*n]
		seq := kv.NewSequence()
		out, err := m.Forward([]model.Step{{Seq: seq, Tokens: chunk}}, model.AllLogits, nil)
		if err != nil {
			t.Fatal(err)
		}
		for j := n / 2; j < n-1; j++ {
			row := out[j*vocab : (j+1)*vocab]
			top := math.Inf(-1)
			for _, x := range row {
				top = math.Max(top, float64(x))
			}
			sum := 0.0
			for _, x := range row {
				sum += math.Exp(float64(x) - top)
			}
			nll -= float64(row[chunk[j+1]]) - top - math.Log(sum)
			count++
		}
		seq.Free()
	}
	return math.Exp(nll / float64(count))
}
