package tokenizer

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	tok := smallTokenizer(t)
	for _, s := range []string{
		"",
		"Hello, world!",
		"  leading and trailing  ",
		"tabs\tand\nnewlines\r\n\r\n",
		"numbers 1234567890 3.14",
		"unicode: 你好 👨‍👩‍👧 ﷺ",
		"special <|im_start|> inside <|im_end|> text<|endoftext|>",
		"broken UTF-8 \xff\xfe and a cut \xe2\x82",
		strings.Repeat("long run of spaces ", 3) + strings.Repeat(" ", 500) + "end",
		strings.Repeat("z", 300),
	} {
		ids := tok.Encode(s)
		if got := tok.Decode(ids); got != s {
			t.Errorf("Decode(Encode(%q)) = %q", s, got)
		}
		ids = tok.EncodeOrdinary(s)
		if got := tok.Decode(ids); got != s {
			t.Errorf("Decode(EncodeOrdinary(%q)) = %q", s, got)
		}
	}
}

func TestNormalization(t *testing.T) {
	tok := smallTokenizer(t)
	// NFD input comes back composed.
	if got := tok.Decode(tok.Encode("Cafe\u0301")); got != "Café" {
		t.Errorf("got %q, want %q", got, "Café")
	}
	if got, want := tok.Encode("e\u0301"), tok.Encode("é"); !slices.Equal(got, want) {
		t.Errorf("Encode(NFD) = %v, Encode(NFC) = %v", got, want)
	}
}

func TestSpecialTokens(t *testing.T) {
	tok := smallTokenizer(t)
	start, ok := tok.TokenID("<|im_start|>")
	if !ok || !tok.IsSpecial(start) {
		t.Fatalf("<|im_start|> = %d, %v; special %v", start, ok, tok.IsSpecial(start))
	}
	text := "<|im_start|>user\nhi<|im_end|>"
	if ids := tok.Encode(text); ids[0] != start {
		t.Errorf("Encode(%q) = %v, want it to start with %d", text, ids, start)
	}
	ids := tok.EncodeOrdinary(text)
	for _, id := range ids {
		if tok.IsSpecial(id) {
			t.Fatalf("EncodeOrdinary(%q) = %v holds special %d", text, ids, id)
		}
	}
	if eos, ok := tok.EOS(); !ok || tok.TokenString(eos) != "<|im_end|>" {
		t.Errorf("EOS = %d, %v", eos, ok)
	}
	if pad, ok := tok.PAD(); !ok || tok.TokenString(pad) != "<|endoftext|>" {
		t.Errorf("PAD = %d, %v", pad, ok)
	}
	if _, ok := tok.BOS(); ok {
		t.Errorf("BOS is set, want none")
	}
}

func TestTokenAccessors(t *testing.T) {
	tok := smallTokenizer(t)
	if got := tok.VocabSize(); got != 1000 {
		t.Errorf("VocabSize = %d, want 1000", got)
	}
	for _, c := range []struct {
		id  int32
		str string
	}{{'a', "a"}, {' ', "Ġ"}, {'\n', "Ċ"}, {0xff, "ÿ"}, {997, "<|endoftext|>"}, {-1, ""}, {1000, ""}} {
		if got := tok.TokenString(c.id); got != c.str {
			t.Errorf("TokenString(%d) = %q, want %q", c.id, got, c.str)
		}
		if c.str == "" {
			continue
		}
		if id, ok := tok.TokenID(c.str); !ok || id != c.id {
			t.Errorf("TokenID(%q) = %d, %v; want %d", c.str, id, ok, c.id)
		}
	}
	if tok.IsSpecial('a') || tok.IsSpecial(-5) || tok.IsSpecial(5000) {
		t.Error("IsSpecial true for an ordinary or invalid id")
	}
}

func TestDecodeChecked(t *testing.T) {
	tok := smallTokenizer(t)
	hi := tok.Encode("hi")
	for _, c := range []struct {
		ids     []int32
		want    string
		wantErr bool
	}{
		{hi, "hi", false},
		{nil, "", false},
		{append(slices.Clone(hi), 1000), "hi", true},
		{[]int32{-1, 'x'}, "x", true},
		{[]int32{1 << 30}, "", true},
	} {
		if got := tok.Decode(c.ids); got != c.want {
			t.Errorf("Decode(%v) = %q, want %q (invalid ids skipped)", c.ids, got, c.want)
		}
		got, err := tok.DecodeChecked(c.ids)
		if (err != nil) != c.wantErr {
			t.Errorf("DecodeChecked(%v) error = %v, want error %v", c.ids, err, c.wantErr)
		}
		if err == nil && got != c.want {
			t.Errorf("DecodeChecked(%v) = %q, want %q", c.ids, got, c.want)
		}
	}
}

// TestMergeLargeMatchesSmall checks the heap merge against the linear one.
func TestMergeLargeMatchesSmall(t *testing.T) {
	toks := []*Tokenizer{smallTokenizer(t)}
	if d := qwen3Dir(); d != "" {
		toks = append(toks, qwen3Tokenizer(t))
	}
	r := rand.New(rand.NewPCG(5, 5))
	text := proseText(20000, 9) + "  \n\n\t你好世界 👨‍👩‍👧"
	for _, tok := range toks {
		for range 3000 {
			i := r.IntN(len(text) - 2)
			j := min(len(text), i+2+r.IntN(smallWord-1))
			w := text[i:j]
			small, large := tok.model.mergeSmall(nil, tok.model.symbols(nil, w)), tok.model.mergeLarge(nil, tok.model.symbols(nil, w))
			if !slices.Equal(small, large) {
				t.Fatalf("word %q: mergeSmall %v, mergeLarge %v", w, small, large)
			}
		}
	}
}

func TestConcurrentEncode(t *testing.T) {
	tok := smallTokenizer(t)
	texts := strings.SplitAfter(proseText(32<<10, 21), ". ")
	want := make([][]int32, len(texts))
	for i, s := range texts {
		want[i] = tok.Encode(s)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range texts {
				k := (i + g*7) % len(texts)
				if got := tok.Encode(texts[k]); !slices.Equal(got, want[k]) {
					errs <- fmt.Errorf("goroutine %d: Encode(%q) = %v, want %v", g, texts[k], got, want[k])
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// addedTokenizer returns the small tokenizer with extra added tokens.
func addedTokenizer(t *testing.T, extra ...addedToken) *Tokenizer {
	t.Helper()
	base := smallTokenizer(t)
	data := editJSON(t, base.TokenizerJSON(), func(m map[string]any) {
		list := m["added_tokens"].([]any)
		for i, a := range extra {
			a.ID = int32(base.VocabSize() + i)
			list = append(list, map[string]any{
				"id": a.ID, "content": a.Content, "single_word": a.SingleWord, "lstrip": a.LStrip,
				"rstrip": a.RStrip, "normalized": a.Normalized, "special": a.Special,
			})
		}
		m["added_tokens"] = list
	})
	tok, err := FromJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestAddedTokenOptions(t *testing.T) {
	tok := addedTokenizer(t,
		addedToken{Content: "<L>", LStrip: true},
		addedToken{Content: "<R>", RStrip: true},
		addedToken{Content: "<W>", SingleWord: true},
		addedToken{Content: "\u212B", Normalized: false}, // ANGSTROM SIGN, NFC → Å
		addedToken{Content: "e\u0301!", Normalized: true},
		addedToken{Content: "<a>"},
		addedToken{Content: "<a><b>"},
	)
	id := func(s string) int32 {
		v, ok := tok.TokenID(s)
		if !ok {
			t.Fatalf("no token %q", s)
		}
		return v
	}
	enc := func(parts ...any) []int32 { // strings are encoded, ids kept
		var out []int32
		for _, p := range parts {
			switch p := p.(type) {
			case string:
				out = append(out, tok.EncodeOrdinary(p)...)
			case int32:
				out = append(out, p)
			}
		}
		return out
	}
	for _, c := range []struct {
		in   string
		want []int32
	}{
		{"x   <L>y", enc("x", id("<L>"), "y")},
		{"x<R> \n y", enc("x", id("<R>"), "y")},
		{"x<W>y", enc("x<W>y")},
		{"x <W> y", enc("x ", id("<W>"), " y")},
		{"(<W>)", enc("(", id("<W>"), ")")},
		{"\u212B", enc(id("\u212B"))},
		{"\u00C5", enc("\u00C5")},
		{"caf\u00e9!", enc("caf", id("e\u0301!"))}, // matched after NFC, whatever the input form
		{"cafe\u0301!", enc("caf", id("e\u0301!"))},
		{"<a><b> <a><c>", enc(id("<a><b>"), " ", id("<a>"), "<c>")},
	} {
		if got := tok.Encode(c.in); !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestIgnoreMerges(t *testing.T) {
	// "abc" is in the vocabulary but no merge builds it from a, b, c.
	vocab := map[string]int{}
	for b := range 256 {
		vocab[string(byteToRune[b])] = b
	}
	vocab["bc"], vocab["abc"] = 256, 257
	for _, c := range []struct {
		ignore bool
		want   []int32
	}{{false, []int32{'a', 256}}, {true, []int32{257}}} {
		data := fmt.Appendf(nil, `{"model":{"type":"BPE","ignore_merges":%t,"vocab":%s,"merges":[["b","c"]]},
			"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":false},
			"decoder":{"type":"ByteLevel"}}`, c.ignore, mustJSON(t, vocab))
		tok, err := FromJSON(data)
		if err != nil {
			t.Fatal(err)
		}
		if got := tok.Encode("abc"); !slices.Equal(got, c.want) {
			t.Errorf("ignore_merges=%v: Encode(abc) = %v, want %v", c.ignore, got, c.want)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b := editJSON(t, []byte("{}"), func(m map[string]any) { m["v"] = v })
	s := string(b)
	return s[len(`{"v":`) : len(s)-1]
}

func TestMergeFormats(t *testing.T) {
	tok := smallTokenizer(t)
	data := tok.TokenizerJSON()
	pairs := editJSON(t, data, func(m map[string]any) {
		model := m["model"].(map[string]any)
		var out []any
		for _, s := range model["merges"].([]any) {
			a, b, _ := strings.Cut(s.(string), " ")
			out = append(out, []any{a, b})
		}
		model["merges"] = out
	})
	tp, err := FromJSON(pairs)
	if err != nil {
		t.Fatal(err)
	}
	text := proseText(4000, 99)
	if got, want := tp.Encode(text), tok.Encode(text); !slices.Equal(got, want) {
		t.Errorf("pair-format merges encode differently")
	}
}

func TestLoadErrors(t *testing.T) {
	base := smallTokenizer(t).TokenizerJSON()
	set := func(path string, v any) []byte {
		return editJSON(t, base, func(m map[string]any) {
			keys := strings.Split(path, ".")
			for _, k := range keys[:len(keys)-1] {
				m = m[k].(map[string]any)
			}
			m[keys[len(keys)-1]] = v
		})
	}
	obj := func(s string) any {
		var v any
		if err := jsonUnmarshal(s, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct {
		name        string
		data        []byte
		unsupported bool
		mention     string
	}{
		{"wordpiece", set("model.type", "WordPiece"), true, `"WordPiece"`},
		{"lowercase normalizer", set("normalizer", obj(`{"type":"Lowercase"}`)), true, `"Lowercase"`},
		{"metaspace with a byte-level decoder", set("pre_tokenizer", obj(`{"type":"Metaspace","replacement":"▁"}`)), true, `decoder type "ByteLevel"`},
		{"regex replace", set("normalizer", obj(`{"type":"Replace","pattern":{"Regex":" +"},"content":"▁"}`)), true, "Replace"},
		{"no bytelevel", set("pre_tokenizer", obj(`{"type":"Split","pattern":{"String":" "},"behavior":"Isolated"}`)), true, "ByteLevel"},
		{"wordpiece decoder", set("decoder", obj(`{"type":"WordPiece"}`)), true, `"WordPiece"`},
		{"no decoder", set("decoder", nil), true, "decoder"},
		{"dropout", set("model.dropout", 0.1), true, "dropout"},
		{"suffix", set("model.end_of_word_suffix", "</w>"), true, "end_of_word_suffix"},
		{"bad behavior", set("pre_tokenizer", obj(`{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"\\s+"},"behavior":"Sideways"},{"type":"ByteLevel","use_regex":false}]}`)), true, `"Sideways"`},
		{"bad regex", set("pre_tokenizer", obj(`{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"(["},"behavior":"Isolated"},{"type":"ByteLevel","use_regex":false}]}`)), false, "split pattern"},
		{"merge not in vocab", set("model.merges", []any{"q zz"}), false, `"zz"`},
		{"bad merge", set("model.merges", []any{"abc"}), false, "merge"},
		{"missing byte", editJSON(t, base, func(m map[string]any) {
			delete(m["model"].(map[string]any)["vocab"].(map[string]any), "Ġ")
		}), false, "0x20"},
		{"not json", []byte("{"), false, "parse"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := FromJSON(c.data)
			if err == nil {
				t.Fatal("loaded; want an error")
			}
			if errors.Is(err, ErrUnsupported) != c.unsupported {
				t.Errorf("error %q: errors.Is(ErrUnsupported) = %v, want %v", err, !c.unsupported, c.unsupported)
			}
			if !strings.Contains(err.Error(), c.mention) {
				t.Errorf("error %q does not mention %q", err, c.mention)
			}
		})
	}
}

func TestLoadVariants(t *testing.T) {
	base := smallTokenizer(t)
	text := "Héllo wörld, 123 <|im_start|>!"
	want := base.Encode(text)
	for _, c := range []struct {
		name string
		norm any
	}{
		{"sequence nfc", map[string]any{"type": "Sequence", "normalizers": []any{map[string]any{"type": "NFC"}}}},
		{"nested empty sequence", map[string]any{"type": "Sequence", "normalizers": []any{
			map[string]any{"type": "Sequence", "normalizers": []any{}}, map[string]any{"type": "NFC"}}}},
	} {
		tok, err := FromJSON(editJSON(t, base.TokenizerJSON(), func(m map[string]any) { m["normalizer"] = c.norm }))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := tok.Encode(text); !slices.Equal(got, want) {
			t.Errorf("%s: Encode = %v, want %v", c.name, got, want)
		}
	}
	// Without a normalizer, NFD input stays decomposed.
	tok, err := FromJSON(editJSON(t, base.TokenizerJSON(), func(m map[string]any) { m["normalizer"] = nil }))
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Decode(tok.Encode("e\u0301")); got != "e\u0301" {
		t.Errorf("no normalizer: round trip = %q", got)
	}
}

func TestLoadDir(t *testing.T) {
	base := smallTokenizer(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), base.TokenizerJSON(), 0o644); err != nil {
		t.Fatal(err)
	}
	// Without tokenizer_config.json: no special roles, no template.
	tok, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tok.EOS(); ok || tok.HasChatTemplate() {
		t.Errorf("EOS or template set without a config")
	}
	// A config with object-form tokens and a chat_template.jinja file.
	cfg := `{"bos_token": {"content": "<|endoftext|>", "__type": "AddedToken"}, "eos_token": "<|im_end|>", "pad_token": null, "chat_template": "ignored"}`
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte("{{ bos_token }}{{ messages[0].content }}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if tok, err = Load(dir); err != nil {
		t.Fatal(err)
	}
	if id, ok := tok.BOS(); !ok || tok.TokenString(id) != "<|endoftext|>" {
		t.Errorf("BOS = %d, %v", id, ok)
	}
	out, err := tok.ApplyChatTemplate(ChatRequest{Messages: []Message{{Role: "user", Content: "x"}}})
	if err != nil || out != "<|endoftext|>x" {
		t.Errorf("template from chat_template.jinja: %q, %v", out, err)
	}
	// A config naming a token the vocabulary lacks is an error.
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"eos_token": "</s>"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "</s>") {
		t.Errorf("Load with unknown eos_token: %v", err)
	}
	if _, err := Load(filepath.Join(dir, "missing")); err == nil {
		t.Error("Load of a missing directory succeeded")
	}
}

// TestLlama3Shape loads a tokenizer.json laid out as Llama 3's is: the
// three-digit Split pattern, ignore_merges, a TemplateProcessing
// post-processor that Encode does not apply.
func TestLlama3Shape(t *testing.T) {
	base := smallTokenizer(t)
	data := editJSON(t, base.TokenizerJSON(), func(m map[string]any) {
		m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": PatternLlama3}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
		}}
		m["post_processor"] = map[string]any{"type": "Sequence", "processors": []any{
			map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
			map[string]any{"type": "TemplateProcessing", "single": []any{map[string]any{"SpecialToken": map[string]any{"id": "<|endoftext|>", "type_id": 0}}}},
		}}
		m["model"].(map[string]any)["ignore_merges"] = true
	})
	tok, err := FromJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := tok.pre.(splitStep).m.(qwenMatcher); !ok || m.maxDigits != 3 {
		t.Fatalf("pre-tokenizer matcher = %#v, want the hand-written one with 3 digits", tok.pre)
	}
	var pieces []string
	tok.pre.apply("x 12345", func(p string) { pieces = append(pieces, p) })
	if want := []string{"x", " ", "123", "45"}; !slices.Equal(pieces, want) {
		t.Errorf("pre-tokenized %q, want %q", pieces, want)
	}
	ids := tok.Encode("x 12345")
	if tok.Decode(ids) != "x 12345" {
		t.Errorf("round trip failed: %v", ids)
	}
	if pad, _ := tok.TokenID("<|endoftext|>"); hasToken(ids, pad) {
		t.Errorf("Encode added the post-processor's token: %v", ids)
	}
}

// TestTokenBytes: every id's bytes are what Decode gives it alone, for the
// real Qwen3 vocabulary (special tokens as their text, unassigned ids
// nil).
func TestTokenBytes(t *testing.T) {
	tok := qwen3Tokenizer(t)
	b := tok.TokenBytes()
	if len(b) != tok.VocabSize() {
		t.Fatalf("%d entries for a vocabulary of %d", len(b), tok.VocabSize())
	}
	for id := range b {
		if want := tok.Decode([]int32{int32(id)}); string(b[id]) != want || (b[id] == nil) != (tok.TokenString(int32(id)) == "" && want == "") {
			t.Fatalf("id %d: %q, want %q", id, b[id], want)
		}
	}
	if im, _ := tok.TokenID("<|im_end|>"); string(b[im]) != "<|im_end|>" {
		t.Errorf("<|im_end|> is %q", b[im])
	}
}

// TestTurnEnds: the tokens that end a turn in common chat formats, which
// end generation besides the EOS, are known by their text, and a
// tokenizer lists those it has as special tokens (tinyGemma's
// <end_of_turn>, not its <start_of_turn>).
func TestTurnEnds(t *testing.T) {
	for _, c := range []struct {
		text string
		want bool
	}{
		{"<|im_end|>", true},          // ChatML (Qwen)
		{"<|eot_id|>", true},          // Llama 3
		{"<|eom_id|>", true},          // Llama 3, a message that calls a tool
		{"<|end|>", true},             // Phi-3
		{"<end_of_turn>", true},       // Gemma
		{"<｜end▁of▁sentence｜>", true}, // DeepSeek
		{"<|endoftext|>", true},
		{"<start_of_turn>", false},
		{"<|im_start|>", false},
		{"<eos>", false},
		{"end_of_turn", false},
	} {
		if got := IsTurnEnd(c.text); got != c.want {
			t.Errorf("IsTurnEnd(%q) = %v, want %v", c.text, got, c.want)
		}
	}
	tok, err := FromJSON(tinyGemma())
	if err != nil {
		t.Fatal(err)
	}
	eot, _ := tok.TokenID("<end_of_turn>")
	if got := tok.TurnEnds(); !slices.Equal(got, []int32{eot}) {
		t.Errorf("TurnEnds = %v, want [%d] (<end_of_turn>)", got, eot)
	}
	// Only as a special token: text that happens to read so is not one.
	plain, err := FromJSON(editJSON(t, tinyGemma(), func(m map[string]any) {
		for _, a := range m["added_tokens"].([]any) {
			if a := a.(map[string]any); a["content"] == "<end_of_turn>" {
				a["special"] = false
			}
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got := plain.TurnEnds(); len(got) != 0 {
		t.Errorf("TurnEnds with <end_of_turn> not special = %v", got)
	}
}
