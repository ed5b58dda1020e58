package gguf

import (
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/model"
)

// TestGraniteGGUF: a Granite model is written in llama.cpp's granite
// layout (q and k permuted as llama's, the four multipliers as keys) and
// read back to the same config and logits; a file without its
// attention.scale reads as llama.cpp reads it (head_dim^−½), and one
// without logit_scale is refused, as llama.cpp refuses it.
func TestGraniteGGUF(t *testing.T) {
	tok := trainedTokenizer(t)
	spec := smallSpec(model.ArchGranite, tok.VocabSize())
	spec.EmbeddingMultiplier, spec.AttentionMultiplier, spec.ResidualMultiplier, spec.LogitsScaling = 6, 0.05, 0.3, 4
	src, dir := randomSource(t, spec)
	want := logits(t, loadDir(t, dir), testTokens)
	path := filepath.Join(t.TempDir(), "granite.gguf")
	if err := WriteModel(path, src, tok, F32); err != nil {
		t.Fatal(err)
	}
	gm := loadGGUF(t, path)
	if c := gm.Config; c.Architecture != model.ArchGranite || c.EmbedScale != 6 || math.Abs(c.AttnMultiplier-0.05) > 1e-8 ||
		math.Abs(c.ResidualScale-0.3) > 1e-7 || c.LogitScale != 4 {
		t.Errorf("read back as %+v", c)
	}
	sameLogits(t, gm, dir, F32, want)
	kvs, tensors := readBack(t, path)
	drop := func(key string) string {
		out := filepath.Join(t.TempDir(), "dropped.gguf")
		if err := WriteFile(out, slices.DeleteFunc(slices.Clone(kvs), func(kv KV) bool { return kv.Key == key }), tensors); err != nil {
			t.Fatal(err)
		}
		return out
	}
	m, err := OpenModel(drop("granite.attention.scale"))
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Config().AttentionScale(); math.Abs(float64(got)-1/math.Sqrt(64)) > 1e-7 {
		t.Errorf("without attention.scale: scale %g, want 1/√64", got)
	}
	m.Close()
	if _, err := OpenModel(drop("granite.logit_scale")); err == nil || !strings.Contains(err.Error(), "logit_scale is missing") {
		t.Errorf("without logit_scale: %v", err)
	}
}
