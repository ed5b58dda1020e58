package export

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu"
	"github.com/clawrl/clawrl/gguf"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/tokenizer"
)

// realTokenizer trains a small byte-level BPE tokenizer (trained's
// stand-in tokenizer.json is not one) and returns it with its files.
func realTokenizer(t *testing.T) (*tokenizer.Tokenizer, map[string][]byte) {
	t.Helper()
	docs := slices.Repeat([]string{"the quick brown fox jumps over the lazy dog 0123456789 "}, 20)
	tok, err := tokenizer.Train(slices.Values(docs), tokenizer.TrainOptions{VocabSize: 300,
		SpecialTokens: []string{"<|im_start|>", "<|im_end|>"}, EOS: "<|im_end|>"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := tok.Save(dir); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		files[name] = b
	}
	return tok, files
}

// scoresOf scores the requests of scores with m.
func scoresOf(t *testing.T, m *model.Model) [][]float32 {
	t.Helper()
	kv, err := m.NewKVCache(model.KVCacheOptions{Budget: m.Config.KVBytesPerToken(compute.F32) * 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	reqs := []model.ScoreRequest{{Prompt: []int32{1, 5, 9, 12}, Response: []int32{3, 40, 7}}, {Prompt: []int32{60, 2}, Response: []int32{8, 8, 30, 31}}}
	out, err := m.LogProbsBatch(kv, reqs, 0)
	if err != nil {
		t.Fatal(err)
	}
	var lps [][]float32
	for _, s := range out {
		lps = append(lps, s.LogProbs)
	}
	return lps
}

// TestGGUFExport writes a LoRA-trained version as GGUF in several types:
// the file loads (package gguf, as `clawrl serve --model x.gguf` does) and
// scores as the checkpoint does, exactly in F32, within each type's
// rounding otherwise; its tokenizer encodes as the base's. Refusals leave
// nothing behind.
func TestGGUFExport(t *testing.T) {
	tok, files := realTokenizer(t)
	base, c := trainedWith(t, true, 2, files, tok.VocabSize())
	want := scores(t, c.Dir())
	for _, tc := range []struct {
		typ string
		tol float64
	}{{"f32", 1e-5}, {"bf16", 0.05}, {"q8_0", 0.15}, {"q4_0", 1.0}, {"q4_k_m", 1.0}} {
		t.Run(tc.typ, func(t *testing.T) {
			typ, err := gguf.ParseMix(tc.typ)
			if err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), "sub", "m.gguf")
			res, err := GGUF(c, out, typ, Options{BaseDir: base})
			if err != nil {
				t.Fatal(err)
			}
			if res.Version != c.Manifest.Version || res.Bytes == 0 {
				t.Errorf("result %+v", res)
			}
			src, err := gguf.OpenModel(out)
			if err != nil {
				t.Fatal(err)
			}
			ftok, err := gguf.ReadTokenizer(src.File())
			if err != nil {
				t.Fatal(err)
			}
			text := "the lazy fox 42"
			if !slices.Equal(ftok.Encode(text), tok.Encode(text)) {
				t.Errorf("the file's tokenizer encodes %q as %v, the base's as %v", text, ftok.Encode(text), tok.Encode(text))
			}
			m, err := model.LoadFrom(cpu.New(), src)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			got := scoresOf(t, m)
			if d := maxDiff(got, want); d > tc.tol {
				t.Errorf("log-probs differ from the checkpoint's by %g (tolerance %g)", d, tc.tol)
			} else {
				t.Logf("%s: max |Δ log p| %.3g", tc.typ, d)
			}
		})
	}

	t.Run("refused", func(t *testing.T) {
		dir := t.TempDir()
		out := filepath.Join(dir, "m.gguf")
		if _, err := GGUF(c, out, gguf.Uniform(gguf.BF16), Options{BaseDir: base}); err != nil {
			t.Fatal(err)
		}
		if _, err := GGUF(c, out, gguf.Uniform(gguf.BF16), Options{BaseDir: base}); err == nil || !strings.Contains(err.Error(), "--force") {
			t.Errorf("an existing file without --force: %v", err)
		}
		if _, err := GGUF(c, out, gguf.Uniform(gguf.Q8_0), Options{BaseDir: base, Force: true}); err != nil {
			t.Errorf("--force over an earlier export: %v", err)
		}
		other := filepath.Join(dir, "notes.txt")
		os.WriteFile(other, []byte("mine"), 0o600)
		if _, err := GGUF(c, other, gguf.Uniform(gguf.BF16), Options{BaseDir: base, Force: true}); err == nil || !strings.Contains(err.Error(), "not a GGUF file") {
			t.Errorf("--force over a file of other content: %v", err)
		}
		if b, _ := os.ReadFile(other); string(b) != "mine" {
			t.Error("the refused export touched the other file")
		}
		if _, err := GGUF(c, filepath.Join(c.Dir(), "x.gguf"), gguf.Uniform(gguf.BF16), Options{BaseDir: base}); err == nil {
			t.Error("an export into the checkpoint was accepted")
		}
		// A weight file changed after the checkpoint was opened.
		path := filepath.Join(c.Dir(), "model.safetensors")
		raw, _ := os.ReadFile(path)
		defer os.WriteFile(path, raw, 0o644)
		bad := slices.Clone(raw)
		bad[len(bad)-1] ^= 0xff
		os.WriteFile(path, bad, 0o644)
		_, err := GGUF(c, filepath.Join(dir, "tampered.gguf"), gguf.Uniform(gguf.BF16), Options{BaseDir: base})
		if err == nil || !strings.Contains(err.Error(), "model.safetensors") {
			t.Errorf("a changed weight file: %v", err)
		}
		if _, err := os.Stat(filepath.Join(dir, "tampered.gguf")); err == nil {
			t.Error("a refused export left its file")
		}
	})
}
