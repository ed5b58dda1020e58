package tokenizer

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/trained from the current trainer")

func TestTrainMerges(t *testing.T) {
	// Each document is one word: hug×10 pug×5 pun×12 bun×4 hugs×5. Pair
	// counts: ug 20, pu 17, un 16, hu 15, gs 5, bu 4. After ug: un 16,
	// h+ug 15, p+u 12 ... after un: h+ug 15, p+un 12 ...
	var docs []string
	for _, w := range []struct {
		word string
		n    int
	}{{"hug", 10}, {"pug", 5}, {"pun", 12}, {"bun", 4}, {"hugs", 5}} {
		for range w.n {
			docs = append(docs, w.word)
		}
	}
	tok, err := Train(slices.Values(docs), TrainOptions{VocabSize: 256 + 5})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for id := 256; id < tok.VocabSize(); id++ {
		got = append(got, tok.TokenString(int32(id)))
	}
	want := []string{"ug", "un", "hug", "pun", "pug"}
	if !slices.Equal(got, want) {
		t.Errorf("learned %q, want %q", got, want)
	}
	for _, w := range []string{"hug", "pun", "hugs"} {
		ids := tok.Encode(w)
		if w != "hugs" && len(ids) != 1 {
			t.Errorf("Encode(%q) = %v, want one token", w, ids)
		}
		if tok.Decode(ids) != w {
			t.Errorf("round trip of %q", w)
		}
	}
}

func TestTrainMinFrequency(t *testing.T) {
	tok, err := Train(slices.Values([]string{"abab", "cd"}), TrainOptions{VocabSize: 300, SpecialTokens: []string{"<s>"}})
	if err != nil {
		t.Fatal(err)
	}
	// Only "ab" occurs twice; then the vocabulary stops growing.
	if got := tok.VocabSize(); got != 256+1+1 {
		t.Errorf("VocabSize = %d, want 258", got)
	}
	if id, _ := tok.TokenID("<s>"); id != 257 || !tok.IsSpecial(id) {
		t.Errorf("<s> = %d", id)
	}
}

func TestTrainSpecialTokensCutOut(t *testing.T) {
	docs := slices.Repeat([]string{"x<|endoftext|>y"}, 50)
	for _, c := range []struct {
		specials []string
		wantPipe bool
	}{{nil, true}, {[]string{"<|endoftext|>"}, false}} {
		tok, err := Train(slices.Values(docs), TrainOptions{VocabSize: 300, SpecialTokens: c.specials})
		if err != nil {
			t.Fatal(err)
		}
		learnedPipe := false
		for id := int32(256); id < int32(tok.VocabSize()); id++ {
			if !tok.IsSpecial(id) && strings.Contains(tok.TokenString(id), "|") {
				learnedPipe = true
			}
		}
		if learnedPipe != c.wantPipe {
			t.Errorf("specials %q: learned tokens with '|' = %v, want %v", c.specials, learnedPipe, c.wantPipe)
		}
	}
}

func TestTrainErrors(t *testing.T) {
	docs := slices.Values([]string{"some text"})
	for _, c := range []struct {
		name string
		opts TrainOptions
		want string
	}{
		{"too small", TrainOptions{VocabSize: 257, SpecialTokens: []string{"<a>", "<b>"}}, "vocab size"},
		{"empty special", TrainOptions{VocabSize: 300, SpecialTokens: []string{""}}, "empty or repeated"},
		{"repeated special", TrainOptions{VocabSize: 300, SpecialTokens: []string{"<a>", "<a>"}}, "empty or repeated"},
		{"eos not special", TrainOptions{VocabSize: 300, EOS: "<eos>"}, "EOS"},
		{"bad pattern", TrainOptions{VocabSize: 300, Pattern: "(("}, "pattern"},
	} {
		if _, err := Train(docs, c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one mentioning %q", c.name, err, c.want)
		}
	}
}

func TestTrainDeterministic(t *testing.T) {
	opts := TrainOptions{VocabSize: 700, SpecialTokens: []string{"<|endoftext|>"}, Pattern: PatternLlama3}
	a, err := Train(slices.Values(smallCorpus()), opts)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Train(slices.Values(smallCorpus()), opts)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.TokenizerJSON(), b.TokenizerJSON()) {
		t.Error("two trainings on the same corpus differ")
	}
}

func TestSaveLoad(t *testing.T) {
	tok := smallTokenizer(t)
	dir := t.TempDir()
	if err := tok.Save(dir); err != nil {
		t.Fatal(err)
	}
	back, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back.TokenizerJSON(), tok.TokenizerJSON()) || !bytes.Equal(back.ConfigJSON(), tok.ConfigJSON()) {
		t.Error("Save then Load does not give back the same files")
	}
	text := strings.Join(smallCorpus(), "")
	if !slices.Equal(back.Encode(text), tok.Encode(text)) {
		t.Error("reloaded tokenizer encodes differently")
	}
	req := ChatRequest{Messages: []Message{{Role: "user", Content: "hi"}}, AddGenerationPrompt: true}
	a, errA := tok.ApplyChatTemplate(req)
	b, errB := back.ApplyChatTemplate(req)
	if a != b || errA != nil || errB != nil {
		t.Errorf("chat template differs after reload: %q %v / %q %v", a, errA, b, errB)
	}
	if id, ok := back.EOS(); !ok || back.TokenString(id) != "<|im_end|>" {
		t.Errorf("EOS after reload = %d, %v", id, ok)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("Save left %d files, want 2 (no temporary files)", len(entries))
	}
}

// trainedFixtureOptions builds testdata/trained, which gen_golden.mjs loads
// with an independent implementation to check that Hugging Face-style
// loaders read what Train writes.
func trainedFixture(t *testing.T) *Tokenizer {
	t.Helper()
	tok, err := Train(slices.Values(smallCorpus()), TrainOptions{
		VocabSize:     600,
		SpecialTokens: []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"},
		EOS:           "<|im_end|>",
		PAD:           "<|endoftext|>",
		ChatTemplate:  chatML,
	})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestTrainedFixture(t *testing.T) {
	tok := trainedFixture(t)
	dir := filepath.Join("testdata", "trained")
	if *update {
		if err := tok.Save(dir); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{"tokenizer.json", tok.TokenizerJSON()}, {"tokenizer_config.json", tok.ConfigJSON()}} {
		want, err := os.ReadFile(filepath.Join(dir, f.name))
		if err != nil {
			t.Fatalf("%v (go test ./tokenizer -run TestTrainedFixture -update writes it)", err)
		}
		if !bytes.Equal(f.data, want) {
			t.Errorf("%s differs from testdata: the trainer or the file format changed (rerun with -update, then node tokenizer/testdata/gen_golden.mjs)", f.name)
		}
	}
	// What the independent implementation made of the saved files.
	for _, c := range readGolden[encodeGolden](t, "trained_encode.json") {
		if got := tok.Encode(c.Text); !slices.Equal(got, c.IDs) {
			t.Errorf("Encode(%q): %s", c.Text, firstDiff(tok, got, c.IDs))
		}
	}
}
