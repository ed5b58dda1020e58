package gguf

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/model"
)

// TestOlmo2GGUF: an OLMo 2 model is written in llama.cpp's olmo2 layout
// (no attn_norm or ffn_norm; post_attention_norm, post_ffw_norm; q and k
// norms as wide as the projections, q and k not permuted) and read back
// to the same config and logits, in F32 and Q8_0; an olmo2 file with a
// sliding window (OLMo 3's) is refused.
func TestOlmo2GGUF(t *testing.T) {
	tok := trainedTokenizer(t)
	spec := smallSpec(model.ArchOlmo2, tok.VocabSize())
	src, dir := randomSource(t, spec)
	want := logits(t, loadDir(t, dir), testTokens)
	for _, typ := range []TensorType{F32, Q8_0} {
		path := filepath.Join(t.TempDir(), "olmo2.gguf")
		if err := WriteModel(path, src, tok, typ); err != nil {
			t.Fatal(err)
		}
		f, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		names := tensorNames(f)
		qn, _ := f.Tensor("blk.0.attn_q_norm.weight")
		f.Close()
		if slices.Contains(names, "blk.0.attn_norm.weight") || slices.Contains(names, "blk.0.ffn_norm.weight") ||
			!slices.Contains(names, "blk.1.post_attention_norm.weight") || !slices.Contains(names, "blk.1.post_ffw_norm.weight") ||
			qn.Elems() != uint64(spec.Heads*spec.HeadDim) {
			t.Fatalf("%v: tensors %v (q_norm %v)", typ, names, qn.Dims)
		}
		gm := loadGGUF(t, path)
		if c := gm.Config; c.Architecture != model.ArchOlmo2 || !c.PostNormsOnly || !c.QKNormFull {
			t.Errorf("%v: read back as %+v", typ, c)
		}
		sameLogits(t, gm, dir, typ, want)
	}
	path := filepath.Join(t.TempDir(), "olmo2.gguf")
	if err := WriteModel(path, src, tok, F32); err != nil {
		t.Fatal(err)
	}
	kvs, tensors := readBack(t, path)
	kvs = append(kvs, KV{"olmo2.attention.sliding_window", Uint32(64)})
	bad := filepath.Join(t.TempDir(), "olmo3.gguf")
	if err := WriteFile(bad, kvs, tensors); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenModel(bad); err == nil || !strings.Contains(err.Error(), "sliding window") {
		t.Errorf("an olmo2 file with a sliding window: %v", err)
	}
}
