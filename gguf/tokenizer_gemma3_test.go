package gguf

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/tokenizer"
)

// gemma3Golden is the tokenizer package's Gemma 3 golden
// (tokenizer/testdata/gemma3_encode.json, from transformers.js).
type gemma3Golden struct {
	Cases []struct {
		Name, Text string
		IDs        []int32
	}
	Chat []struct {
		Name     string
		Messages []tokenizer.Message
		IDs      []int32
	}
}

// gemma3TokenizerAndGolden loads Gemma 3's tokenizer (.cache/gemma3, from
// scripts/fetch-testdata), or skips, and the golden.
func gemma3TokenizerAndGolden(t *testing.T) (*tokenizer.Tokenizer, gemma3Golden) {
	t.Helper()
	dir := filepath.Join("..", ".cache", "gemma3", "package", "models")
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Skip("Gemma 3 tokenizer files absent: run scripts/fetch-testdata")
	}
	var g gemma3Golden
	raw, err := os.ReadFile(filepath.Join("..", "tokenizer", "testdata", "gemma3_encode.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Cases) < 200 || len(g.Chat) != 3 {
		t.Fatalf("golden: %d cases, %d chats", len(g.Cases), len(g.Chat))
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return tok, g
}

// typedSpaces reports whether text holds a "▁▁" typed by the user, the
// added token "▁▁" for Hugging Face, which a GGUF file holds as "  " (as
// llama.cpp's converter writes it): such a text may tokenize otherwise
// from the file (see the tokenizer package's TestGemma3Golden).
func typedSpaces(text string) bool { return strings.Contains(text, "▁▁") }

// TestGemma3TokenizerFile: Gemma 3's tokenizer goes into a GGUF file's
// metadata as llama.cpp's converter writes it (tokenizer.ggml.model
// "llama", add_space_prefix false, add_bos_token true, "▁▁" a
// user-defined token written "  "), and the tokenizer read back from the
// file encodes the golden's texts and chats to the same ids.
func TestGemma3TokenizerFile(t *testing.T) {
	tok, golden := gemma3TokenizerAndGolden(t)
	v, err := tok.Vocab(0)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "gemma3-vocab.gguf")
	if err := WriteFile(path, TokenizerMetadata(v), nil); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for key, want := range map[string]string{
		KeyTokenizerModel: `"llama"`, KeyAddSpacePrefix: "false", KeyAddBOS: "true",
		KeyBOS: "2", KeyEOS: "106",
	} {
		if got, ok := f.Get(key); !ok || got.String() != want {
			t.Errorf("%s = %v (present %v), want %s", key, got, ok, want)
		}
	}
	spaces, _ := tok.TokenID("▁▁")
	tokens, _ := f.Get(KeyTokens)
	types, _ := f.Get(KeyTokenTypes)
	ts, _ := tokens.Strings()
	ty, _ := types.Ints()
	if int(spaces) >= len(ts) || int(spaces) >= len(ty) || ts[spaces] != "  " || ty[spaces] != int64(tokenizer.TokenUserDefined) {
		t.Errorf("token %d (▁▁) is not the user-defined \"  \"", spaces)
	}
	back, err := ReadTokenizer(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range golden.Cases {
		got := back.Encode(c.Text)
		if !slices.Equal(got, c.IDs) && (!typedSpaces(c.Text) || back.Decode(got) != back.Decode(c.IDs)) {
			t.Errorf("%s: Encode(%q) = %v, want %v", c.Name, c.Text, got, c.IDs)
		}
	}
	for _, c := range golden.Chat {
		ids, _, err := back.EncodeChat(tokenizer.ChatRequest{Messages: c.Messages, AddGenerationPrompt: true})
		if err != nil || !slices.Equal(ids, c.IDs) {
			t.Errorf("chat %s: %v (%v), want %v", c.Name, ids, err, c.IDs)
		}
	}
}

// TestLlamaCppTokenizesGemma3: llama.cpp's llama-tokenize (in
// LLAMA_CPP_BIN) reads Gemma 3's tokenizer as this package writes it
// (with the model keys of LLAMA_CPP_SRC's models/ggml-vocab-llama-spm.gguf,
// which a vocabulary-only load still reads), splits the golden's texts
// into the ids transformers.js gives them, and prints the token "▁▁" as
// two spaces. Without both variables the test skips.
func TestLlamaCppTokenizesGemma3(t *testing.T) {
	src, bin := os.Getenv("LLAMA_CPP_SRC"), os.Getenv("LLAMA_CPP_BIN")
	if src == "" || bin == "" {
		t.Skip("LLAMA_CPP_SRC and LLAMA_CPP_BIN are not both set")
	}
	tool := filepath.Join(bin, "llama-tokenize")
	tok, golden := gemma3TokenizerAndGolden(t)
	f, err := Open(filepath.Join(src, "models", "ggml-vocab-llama-spm.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	var kvs []KV
	for _, kv := range f.KV {
		if !strings.HasPrefix(kv.Key, "tokenizer.") {
			kvs = append(kvs, kv)
		}
	}
	f.Close()
	v, err := tok.Vocab(0)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "gemma3-vocab.gguf")
	if err := WriteFile(path, append(kvs, TokenizerMetadata(v)...), nil); err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(dir, "text")
	checked := 0
	for _, c := range golden.Cases {
		if c.Text == "" || typedSpaces(c.Text) {
			continue
		}
		got, err := llamaTokenize(tool, path, in, c.Text)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, c.IDs) {
			t.Errorf("%s: llama.cpp %v, transformers.js %v", c.Name, got, c.IDs)
		}
		checked++
	}
	if err := os.WriteFile(in, []byte("a  b"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tool, "-m", path, "-f", in, "--no-bos", "--no-escape", "--log-disable").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "138 -> '  '") {
		t.Errorf("llama-tokenize prints the pieces of %q as\n%s", "a  b", out)
	}
	if !t.Failed() {
		t.Logf("%d texts: llama.cpp splits them as transformers.js does", checked)
	}
}
