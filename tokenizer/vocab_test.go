package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

// vocabTexts are texts whose encodings must survive a trip through a
// GGUF vocabulary: prose, digits, scripts, text that is not in NFC,
// special and almost-special tokens, white space runs.
var vocabTexts = []string{
	"The quick brown fox jumps over the lazy dog.",
	"In 2024, 1234567 people paid $3.14159 each.",
	"Les élèves étudient à l'école. Ça va très bien !",
	"Cafe\u0301 and re\u0301sume\u0301 (not NFC)",
	"你好，世界！这是一个测试。",
	"<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
	"<|im_end <|endoftext|x <think> I'd've they'LL",
	"  leading\t\ttabs\n\n\nand   runs   \r\n",
	"def f(x):\n    return {\"a\": [1, 2, 3]}\n",
	"",
}

func sameEncodings(t *testing.T, a, b *Tokenizer) {
	t.Helper()
	for _, s := range vocabTexts {
		if x, y := a.Encode(s), b.Encode(s); !slices.Equal(x, y) {
			t.Errorf("%q: %v, through the vocab %v", s, x, y)
		}
		if x, y := a.EncodeOrdinary(s), b.EncodeOrdinary(s); !slices.Equal(x, y) {
			t.Errorf("%q (ordinary): %v, through the vocab %v", s, x, y)
		}
	}
	for id := range int32(a.VocabSize()) {
		if a.TokenString(id) != b.TokenString(id) || a.IsSpecial(id) != b.IsSpecial(id) {
			t.Fatalf("token %d: %q special %v, through the vocab %q special %v", id, a.TokenString(id), a.IsSpecial(id), b.TokenString(id), b.IsSpecial(id))
		}
		if x, y := a.Decode([]int32{id}), b.Decode([]int32{id}); x != y {
			t.Fatalf("token %d decodes to %q, through the vocab %q", id, x, y)
		}
	}
	for _, role := range []func(*Tokenizer) (int32, bool){(*Tokenizer).BOS, (*Tokenizer).EOS, (*Tokenizer).PAD} {
		x, okX := role(a)
		y, okY := role(b)
		if x != y || okX != okY {
			t.Errorf("special token %d %v, through the vocab %d %v", x, okX, y, okY)
		}
	}
}

func TestVocabRoundTrip(t *testing.T) {
	tok := smallTokenizer(t)
	v, err := tok.Vocab(tok.VocabSize() + 5)
	if err != nil {
		t.Fatal(err)
	}
	if v.Pre != PreQwen2 || len(v.Tokens) != tok.VocabSize()+5 || v.Types[len(v.Types)-1] != TokenUnused || v.Tokens[len(v.Tokens)-1] != "[PAD1004]" {
		t.Fatalf("pre %q, %d tokens, last %q of type %d", v.Pre, len(v.Tokens), v.Tokens[len(v.Tokens)-1], v.Types[len(v.Types)-1])
	}
	back, err := FromVocab(v)
	if err != nil {
		t.Fatal(err)
	}
	sameEncodings(t, tok, back)
	req := ChatRequest{Messages: []Message{{Role: "user", Content: "hi"}}, AddGenerationPrompt: true}
	x, err1 := tok.ApplyChatTemplate(req)
	y, err2 := back.ApplyChatTemplate(req)
	if err1 != nil || err2 != nil || x != y {
		t.Errorf("chat template: %q %v, through the vocab %q %v", x, err1, y, err2)
	}
	// The rebuilt tokenizer saves a tokenizer.json that loads the same.
	again, err := FromFiles(back.TokenizerJSON(), back.ConfigJSON())
	if err != nil {
		t.Fatal(err)
	}
	sameEncodings(t, tok, again)
}

func TestVocabLlama3(t *testing.T) {
	// A Llama 3 style tokenizer: the Llama 3 pattern, no normalizer,
	// merges ignored for whole-word tokens.
	v, err := smallTokenizer(t).Vocab(0)
	if err != nil {
		t.Fatal(err)
	}
	v.Pre = "llama3"
	tok, err := FromVocab(v)
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode("year 2024"); len(got) < 2 {
		t.Errorf("year 2024: %v", got)
	}
	v2, err := tok.Vocab(0)
	if err != nil {
		t.Fatal(err)
	}
	if v2.Pre != PreLlama3 {
		t.Errorf("pre %q, want %q", v2.Pre, PreLlama3)
	}
	back, err := FromVocab(v2)
	if err != nil {
		t.Fatal(err)
	}
	sameEncodings(t, tok, back)
}

func TestVocabQwen3(t *testing.T) {
	tok := qwen3Tokenizer(t)
	v, err := tok.Vocab(151936) // Qwen3's embedding rows
	if err != nil {
		t.Fatal(err)
	}
	think, _ := tok.TokenID("<think>")
	if v.Types[think] != TokenUserDefined || v.Types[151645] != TokenControl || v.Types[151935] != TokenUnused {
		t.Errorf("types: <think> %d, <|im_end|> %d, last %d", v.Types[think], v.Types[151645], v.Types[151935])
	}
	back, err := FromVocab(v)
	if err != nil {
		t.Fatal(err)
	}
	sameEncodings(t, tok, back)
}

func TestFromVocabRefuses(t *testing.T) {
	good, err := smallTokenizer(t).Vocab(0)
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(v *Vocab)) Vocab {
		v := good
		v.Tokens = slices.Clone(good.Tokens)
		v.Types = slices.Clone(good.Types)
		v.Merges = slices.Clone(good.Merges)
		f(&v)
		return v
	}
	cases := []struct {
		name string
		v    Vocab
		text string
	}{
		{"unknown pre-tokenizer", edit(func(v *Vocab) { v.Pre = "viking" }), "pre-tokenizer"},
		{"types of another length", edit(func(v *Vocab) { v.Types = v.Types[1:] }), "token types"},
		{"bad type", edit(func(v *Vocab) { v.Types[300] = 9 }), "type 9"},
		{"duplicate token", edit(func(v *Vocab) { v.Tokens[300] = v.Tokens[301] }), "two ids"},
		{"empty token", edit(func(v *Vocab) { v.Tokens[300] = "" }), "empty"},
		{"merge of unknown tokens", edit(func(v *Vocab) { v.Merges[0] = [2]string{"zz", "qq"} }), "not in vocab"},
		{"missing byte", edit(func(v *Vocab) { v.Types[65] = TokenUnused }), "byte-level token"},
	}
	for _, c := range cases {
		if _, err := FromVocab(c.v); err == nil || !strings.Contains(err.Error(), c.text) {
			t.Errorf("%s: %v, want an error mentioning %q", c.name, err, c.text)
		}
	}
	if _, err := FromVocab(edit(func(v *Vocab) { v.Pre = "x" })); !errors.Is(err, ErrUnsupported) {
		t.Errorf("unknown pre-tokenizer: %v is not ErrUnsupported", err)
	}
	// A tokenizer trained with the Llama 3 pattern keeps NFC: no GGUF name.
	tok, err := Train(slices.Values(smallCorpus()[:20]), TrainOptions{VocabSize: 300, Pattern: PatternLlama3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tok.Vocab(0); !errors.Is(err, ErrNoPreName) {
		t.Errorf("Llama 3 pattern with NFC: %v", err)
	}
	if m, err := ParseMerge("Ġ t"); err != nil || m != [2]string{"Ġ", "t"} {
		t.Errorf("ParseMerge: %v %v", m, err)
	}
	for _, bad := range []string{"ab", "a  b", " a", "a b c"} {
		if _, err := ParseMerge(bad); err == nil {
			t.Errorf("ParseMerge(%q) accepted", bad)
		}
	}
}

// TestVocabPreNames: the pre-tokenizer names llama.cpp gives several
// models' tokenizers run as the tokenizer.json they stand for, and a
// tokenizer built from one is written back under its canonical name.
func TestVocabPreNames(t *testing.T) {
	v, err := smallTokenizer(t).Vocab(0)
	if err != nil {
		t.Fatal(err)
	}
	build := func(pre string) *Tokenizer {
		t.Helper()
		w := v
		w.Pre = pre
		tok, err := FromVocab(w)
		if err != nil {
			t.Fatalf("pre %q: %v", pre, err)
		}
		return tok
	}
	for _, c := range []struct{ alias, canonical string }{
		{"deepseek-r1-qwen", PreQwen2}, {"falcon3", PreLlama3}, {"pixtral", PreLlama3},
		{"dbrx", PreSmaug}, {"mpt", PreGPT2}, {"olmo", PreGPT2},
		{"starcoder", PreSmolLM}, {"refact", PreSmolLM}, {"command-r", PreSmolLM},
	} {
		a, b := build(c.alias), build(c.canonical)
		sameEncodings(t, b, a)
		back, err := a.Vocab(0)
		if err != nil || back.Pre != c.canonical {
			t.Errorf("%s written back as %q (%v), want %q", c.alias, back.Pre, err, c.canonical)
		}
	}
	// SmolLM's split isolates every digit; GPT-2's keeps runs.
	words := func(tok *Tokenizer, s string) (out []string) {
		tok.pre.apply(s, func(w string) { out = append(out, w) })
		return out
	}
	if got, want := words(build(PreSmolLM), "x 123"), []string{"x", " ", "1", "2", "3"}; !slices.Equal(got, want) {
		t.Errorf("smollm words %q, want %q", got, want)
	}
	if got, want := words(build(PreGPT2), "x 123"), []string{"x", " 123"}; !slices.Equal(got, want) {
		t.Errorf("gpt-2 words %q, want %q", got, want)
	}
	// The pre-tokenizers made of Split regexes (checked against llama.cpp by
	// gguf.TestLlamaCppPreTokenizers) split as their patterns say and are
	// written back under their own names.
	for _, c := range []struct {
		pre, text string
		want      []string
	}{
		{"tekken", "HelloWorld iPhone", []string{"Hello", "World", " i", "Phone"}},
		{"tekken", "a/b//c 42", []string{"a", "/b", "//", "c", " ", "4", "2"}},
		{"gpt-4o", "HelloWorld DON'T 12345", []string{"Hello", "World", " DON'T", " ", "123", "45"}},
		{"deepseek-coder", "x 12\ny", []string{"x", " ", "1", "2", "\n", "y"}},
		{"deepseek-llm", "x 123,y 東京", []string{"x", " ", "123", ",", "y", " ", "東京"}},
		{"falcon", "a 1234567!", []string{"a", " ", "123", "456", "7", "!"}},
		{"default", "a 1234567!", []string{"a", " ", "123", "456", "7", "!"}},
	} {
		tok := build(c.pre)
		if got := words(tok, c.text); !slices.Equal(got, c.want) {
			t.Errorf("%s words of %q: %q, want %q", c.pre, c.text, got, c.want)
		}
		back, err := tok.Vocab(0)
		if err != nil || back.Pre != c.pre {
			t.Errorf("%s written back as %q (%v)", c.pre, back.Pre, err)
		}
		if tok.model.ignoreMerges != (c.pre == "tekken") {
			t.Errorf("%s: ignore_merges %v", c.pre, tok.model.ignoreMerges)
		}
	}
	// DeepSeek Coder's tokenizer.json ends its splits with a Digits
	// pre-tokenizer where llama.cpp has \p{N}: the same pre-tokenizer.
	var compact bytes.Buffer
	if err := json.Compact(&compact, build("deepseek-coder").TokenizerJSON()); err != nil {
		t.Fatal(err)
	}
	ds := strings.Replace(compact.String(),
		`{"type":"Split","pattern":{"Regex":"\\p{N}"},"behavior":"Isolated","invert":false}`, `{"type":"Digits","individual_digits":true}`, 1)
	if !strings.Contains(ds, "Digits") {
		t.Fatal("no \\p{N} split in deepseek-coder's tokenizer.json")
	}
	if tok, err := FromJSON([]byte(ds)); err != nil {
		t.Error(err)
	} else if back, err := tok.Vocab(0); err != nil || back.Pre != "deepseek-coder" {
		t.Errorf("deepseek-coder with Digits written back as %q (%v)", back.Pre, err)
	}
	// Smaug's is Llama 3's without ignore_merges.
	if build(PreSmaug).model.ignoreMerges || !build(PreLlama3).model.ignoreMerges {
		t.Error("ignore_merges of smaug-bpe / llama-bpe")
	}
}

// TestMissingRareBytes: a byte-level vocabulary may lack the tokens of
// bytes only invalid or the rarest UTF-8 holds (StarCoder's lacks 0xF1
// and up) or of control characters (Falcon's); it loads, and such a byte
// is dropped as Hugging Face drops a symbol with no token. A printable
// ASCII byte's absence is still refused.
func TestMissingRareBytes(t *testing.T) {
	base := smallTokenizer(t)
	data := editJSON(t, base.TokenizerJSON(), func(m map[string]any) {
		vocab := m["model"].(map[string]any)["vocab"].(map[string]any)
		for _, b := range []int{0x03, 0xC0, 0xC1, 0xF5, 0xFF} {
			delete(vocab, string(byteToRune[b]))
		}
	})
	tok, err := FromJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tok.Encode("ab\xc0c\xff\x03"), base.Encode("abc"); !slices.Equal(got, want) {
		t.Errorf("Encode with rare bytes = %v, want %v (them dropped)", got, want)
	}
	if got, want := tok.Encode("héllo wörld"), base.Encode("héllo wörld"); !slices.Equal(got, want) {
		t.Errorf("valid text: %v, want %v", got, want)
	}
	noA := editJSON(t, base.TokenizerJSON(), func(m map[string]any) {
		delete(m["model"].(map[string]any)["vocab"].(map[string]any), "a")
	})
	if _, err := FromJSON(noA); err == nil || !strings.Contains(err.Error(), "0x61") {
		t.Errorf("a vocabulary without \"a\" loaded: %v", err)
	}
}
