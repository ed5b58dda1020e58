package gguf

import (
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/model"
)

// TestGemma3GGUF: a Gemma 3 model is written in llama.cpp's gemma3 layout
// (post_attention_norm, ffn_norm, post_ffw_norm; every norm weight stored
// as 1 + w, as llama.cpp's converter stores it; the window, its period
// and the windowed layers' rotary base as keys) and read back to the same
// config and logits, in F32 and Q8_0. Layers whose windows follow no
// period are refused on export.
func TestGemma3GGUF(t *testing.T) {
	tok := trainedTokenizer(t)
	spec := smallSpec(model.ArchGemma3, tok.VocabSize())
	spec.Layers, spec.SlidingWindow, spec.SlidingPattern, spec.LocalRopeTheta, spec.Tied = 3, 5, 3, 500, true
	src, dir := randomSource(t, spec)
	hm := loadDir(t, dir)
	want := logits(t, hm, testTokens)
	for _, typ := range []TensorType{F32, Q8_0} {
		path := filepath.Join(t.TempDir(), "gemma3.gguf")
		if err := WriteModel(path, src, tok, typ); err != nil {
			t.Fatal(err)
		}
		f, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		names := tensorNames(f)
		for _, n := range []string{"blk.0.post_attention_norm.weight", "blk.0.ffn_norm.weight", "blk.2.post_ffw_norm.weight", "blk.1.attn_q_norm.weight"} {
			if !slices.Contains(names, n) {
				t.Errorf("%v: no tensor %s in %v", typ, n, names)
			}
		}
		for key, v := range map[string]string{
			"general.architecture":                    `"gemma3"`,
			"gemma3.attention.sliding_window":         "5",
			"gemma3.attention.sliding_window_pattern": "3",
			"gemma3.rope.freq_base_swa":               "500",
		} {
			if got, ok := f.Get(key); !ok || got.String() != v {
				t.Errorf("%v: %s = %v, want %s", typ, key, got, v)
			}
		}
		// The file's norm is 1 + the checkpoint's.
		fileNorm, err := f.Float32("blk.0.post_ffw_norm.weight")
		if err != nil {
			t.Fatal(err)
		}
		st, err := src.Tensor("model.layers.0.post_feedforward_layernorm.weight")
		if err != nil {
			t.Fatal(err)
		}
		hfNorm, _, err := st.Float32()
		if err != nil {
			t.Fatal(err)
		}
		for i := range hfNorm {
			if math.Abs(float64(fileNorm[i]-1-hfNorm[i])) > 1e-6 {
				t.Fatalf("%v: file norm %g, checkpoint %g: not 1 + w", typ, fileNorm[i], hfNorm[i])
			}
		}
		f.Close()
		gm := loadGGUF(t, path)
		c := gm.Config
		if c.Architecture != model.ArchGemma3 || c.SlidingWindow != 5 || c.LocalRopeTheta != 500 ||
			!slices.Equal(c.WindowLayers, []bool{true, true, false}) || c.QueryPreAttnScalar != 64 || !c.TieWordEmbeddings {
			t.Errorf("%v: read back as %+v", typ, c)
		}
		sameLogits(t, gm, dir, typ, want)
	}

	// Windowed layers without a period llama.cpp's key can say.
	odd := smallSpec(model.ArchGemma3, tok.VocabSize())
	odd.Layers, odd.SlidingWindow, odd.SlidingPattern = 3, 5, 2 // windowed, global, windowed: period 2 fits
	osrc, _ := randomSource(t, odd)
	if err := WriteModel(filepath.Join(t.TempDir(), "ok.gguf"), osrc, tok, F32); err != nil {
		t.Errorf("period 2: %v", err)
	}
	if p, ok := SlidingPattern(&model.Config{NumLayers: 4, WindowLayers: []bool{false, true, true, true}}); ok {
		t.Errorf("a global first layer fits period %d", p)
	}
	// A final soft-cap (Gemma3TextConfig allows one) goes into the file
	// as llama.cpp's gemma3 reads it; an attention cap, which llama.cpp's
	// gemma3 does not apply, is refused.
	capped := smallSpec(model.ArchGemma3, tok.VocabSize())
	capped.FinalSoftcap = 5
	csrc, cdir := randomSource(t, capped)
	cpath := filepath.Join(t.TempDir(), "capped.gguf")
	if err := WriteModel(cpath, csrc, tok, F32); err != nil {
		t.Fatal(err)
	}
	cm := loadGGUF(t, cpath)
	if cm.Config.FinalSoftcap != 5 {
		t.Errorf("final soft-cap read back as %g", cm.Config.FinalSoftcap)
	}
	if d := maxDiff(logits(t, cm, testTokens), logits(t, loadDir(t, cdir), testTokens)); d > 1e-4 {
		t.Errorf("final soft-cap: logits differ by %g", d)
	}
	capped.FinalSoftcap, capped.AttnSoftcap = 0, 20
	asrc, _ := randomSource(t, capped)
	if err := WriteModel(filepath.Join(t.TempDir(), "attncap.gguf"), asrc, tok, F32); err == nil || !strings.Contains(err.Error(), "attn_logit_softcapping") {
		t.Errorf("a Gemma 3 with an attention cap: %v", err)
	}
	scaled := smallSpec(model.ArchGemma3, tok.VocabSize())
	scaled.QueryPreAttnScalar = 32
	ssrc, _ := randomSource(t, scaled)
	if err := WriteModel(filepath.Join(t.TempDir(), "qpas.gguf"), ssrc, tok, F32); err == nil || !strings.Contains(err.Error(), "query_pre_attn_scalar") {
		t.Errorf("query_pre_attn_scalar llama.cpp would not derive: %v", err)
	}
}

// TestGemma2GGUF: a Gemma 2 model is written in llama.cpp's gemma2 layout
// (the soft-caps, the window and its period as keys; norms as 1 + w) and
// read back to the same config and logits, in F32 and Q8_0; a Gemma 2
// without soft-caps, which llama.cpp's gemma2 would cap anyway, is
// refused on export.
func TestGemma2GGUF(t *testing.T) {
	tok := trainedTokenizer(t)
	spec := smallSpec(model.ArchGemma2, tok.VocabSize())
	spec.Layers, spec.SlidingWindow, spec.AttnSoftcap, spec.FinalSoftcap, spec.Tied = 3, 5, 2, 4, true
	src, dir := randomSource(t, spec)
	want := logits(t, loadDir(t, dir), testTokens)
	for _, typ := range []TensorType{F32, Q8_0} {
		path := filepath.Join(t.TempDir(), "gemma2.gguf")
		if err := WriteModel(path, src, tok, typ); err != nil {
			t.Fatal(err)
		}
		gm := loadGGUF(t, path)
		c := gm.Config
		if c.Architecture != model.ArchGemma2 || c.SlidingWindow != 5 || c.AttnSoftcap != 2 || c.FinalSoftcap != 4 ||
			!slices.Equal(c.WindowLayers, []bool{true, false, true}) || c.QKNorm || c.LocalRopeTheta != 0 {
			t.Errorf("%v: read back as %+v", typ, c)
		}
		sameLogits(t, gm, dir, typ, want)
	}
	nocap := smallSpec(model.ArchGemma2, tok.VocabSize())
	nsrc, _ := randomSource(t, nocap)
	if err := WriteModel(filepath.Join(t.TempDir(), "nocap.gguf"), nsrc, tok, F32); err == nil || !strings.Contains(err.Error(), "soft-caps") {
		t.Errorf("a Gemma 2 without soft-caps: %v", err)
	}
}
