package engine

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/rs/zerolog"

	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/tokenizer"
)

// TestStopTokens: generation ends at the tokenizer's EOS, at the config's
// and generation_config.json's eos_token_id, and at the end-of-turn
// tokens of common chat formats the tokenizer has as special tokens
// (Phi-3's config names <|endoftext|> while its turns end with <|end|>);
// an end-of-turn text that is not a special token does not count.
func TestStopTokens(t *testing.T) {
	dir := t.TempDir()
	docs := slices.Repeat([]string{"the quick brown fox jumps over the lazy dog. hello <|eot_id|> world! "}, 40)
	tok, err := tokenizer.Train(slices.Values(docs), tokenizer.TrainOptions{VocabSize: 300,
		SpecialTokens: []string{"<|endoftext|>", "<|end|>", "<|user|>"}, EOS: "<|endoftext|>"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tok.Save(dir); err != nil {
		t.Fatal(err)
	}
	spec := model.RandomSpec{Arch: model.ArchPhi3, Hidden: 32, Intermediate: 64, Layers: 1, Heads: 4, KVHeads: 2, HeadDim: 8,
		Vocab: tok.VocabSize(), MaxPositions: 256, DType: "float32", Seed: 3, EOSTokenIDs: []int{7}}
	if err := model.WriteRandomCheckpoint(dir, spec); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(`{"eos_token_id": [7, 9, -1, 100000]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	e, err := Open(Defaults(), Options{Model: dir, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	eos, _ := tok.TokenID("<|endoftext|>")
	end, _ := tok.TokenID("<|end|>")
	want := []int32{eos, 7, 9, end}
	if got := e.StopTokens(); !slices.Equal(got, want) {
		t.Errorf("StopTokens %v, want %v (EOS, config, generation_config, <|end|>)", got, want)
	}
}

// TestLongContext: a LongRoPE model serves its original context with the
// short factors by default, and its whole context with the long ones
// under model.long_context; its checkpoints keep the model's config.
func TestLongContext(t *testing.T) {
	dir := testCheckpoint(t)
	spec := model.RandomSpec{Arch: model.ArchPhi3, Hidden: 32, Intermediate: 64, Layers: 1, Heads: 4, KVHeads: 2, HeadDim: 8,
		MaxPositions: 4096, LongRopeOriginal: 512, LongRopeShort: []float64{1, 1, 2, 2}, LongRopeLong: []float64{4, 4, 8, 8},
		DType: "float32", Seed: 3}
	tok, err := LoadTokenizer(dir)
	if err != nil {
		t.Fatal(err)
	}
	spec.Vocab = tok.VocabSize()
	if err := model.WriteRandomCheckpoint(dir, spec); err != nil {
		t.Fatal(err)
	}
	for _, long := range []bool{false, true} {
		cfg := Defaults()
		cfg.Model.LongContext = long
		e, err := Open(cfg, Options{Model: dir, Log: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		c := e.Model().Config
		want := 512
		if long {
			want = 4096
		}
		if c.MaxPositions != want || c.LongRope == nil || c.LongRope.UseLong != long {
			t.Errorf("long_context %v: context %d, %+v", long, c.MaxPositions, c.LongRope)
		}
		prompt := tok.Encode("the quick brown fox jumps over the lazy dog")
		if got, _ := greedy(t, e.Scheduler(), prompt, 4); len(got) == 0 {
			t.Errorf("long_context %v: generated nothing", long)
		}
		e.Close()
	}
}
