package gguf

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/model"
)

// TestSmolLM3GGUF: a SmolLM3 model is written in llama.cpp's smollm3
// layout (q and k permuted as llama's; every fourth layer without RoPE, as
// llama.cpp assumes) and read back to the same config and logits; one
// whose layers without RoPE are others is refused on export.
func TestSmolLM3GGUF(t *testing.T) {
	tok := trainedTokenizer(t)
	spec := smallSpec(model.ArchSmolLM3, tok.VocabSize())
	spec.Layers = 4
	src, dir := randomSource(t, spec)
	want := logits(t, loadDir(t, dir), testTokens)
	path := filepath.Join(t.TempDir(), "smollm3.gguf")
	if err := WriteModel(path, src, tok, F32); err != nil {
		t.Fatal(err)
	}
	gm := loadGGUF(t, path)
	if c := gm.Config; c.Architecture != model.ArchSmolLM3 || !slices.Equal(c.NoRopeLayers, []bool{false, false, false, true}) {
		t.Errorf("read back as %+v", c)
	}
	sameLogits(t, gm, dir, F32, want)
	c := *src.Config()
	c.NoRopeLayers = []bool{true, false, false, false}
	if err := WriteModel(filepath.Join(t.TempDir(), "odd.gguf"), model.WithConfig(src, &c), tok, F32); err == nil || !strings.Contains(err.Error(), "every fourth layer") {
		t.Errorf("layers without RoPE llama.cpp would rotate: %v", err)
	}
}
