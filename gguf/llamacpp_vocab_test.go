package gguf

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/tokenizer"
	"golang.org/x/text/unicode/norm"
)

// TestLlamaCppVocabFiles reads the vocabulary-only GGUF files of a
// llama.cpp source tree (LLAMA_CPP_SRC; models/ggml-vocab-NAME.gguf, made
// by llama.cpp's converter from real tokenizers) and encodes the texts of
// their NAME.gguf.inp as NAME.gguf.out says they tokenize (the ids
// llama.cpp's tokenizer tests expect). Files whose tokenizer clawrl does
// not run (BERT's WordPiece, pre-tokenizers it has no name for) are
// listed and skipped; every other file must match on every text. Without
// LLAMA_CPP_SRC (CI has no llama.cpp tree) the test skips.
func TestLlamaCppVocabFiles(t *testing.T) {
	src := os.Getenv("LLAMA_CPP_SRC")
	if src == "" {
		t.Skip("LLAMA_CPP_SRC is not set (a llama.cpp source tree with models/ggml-vocab-*.gguf)")
	}
	paths, err := filepath.Glob(filepath.Join(src, "models", "ggml-vocab-*.gguf"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no ggml-vocab-*.gguf under %s/models (%v)", src, err)
	}
	checked := 0
	for _, path := range paths {
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), "ggml-vocab-"), ".gguf")
		inp, err1 := os.ReadFile(path + ".inp")
		out, err2 := os.ReadFile(path + ".out")
		if err1 != nil || err2 != nil {
			continue
		}
		f, err := Open(path)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		tok, err := ReadTokenizer(f)
		f.Close()
		if errors.Is(err, tokenizer.ErrUnsupported) {
			t.Logf("%s: not a tokenizer clawrl runs: %v", name, err)
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		ins := strings.Split(string(inp), "\n__ggml_vocab_test__\n")
		outs := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
		if len(outs) < len(ins)-1 {
			t.Fatalf("%s: %d inputs, %d outputs", name, len(ins), len(outs))
		}
		for i, outLine := range outs {
			var want []int32
			for _, w := range strings.Fields(outLine) {
				n, err := strconv.Atoi(w)
				if err != nil {
					t.Fatalf("%s.out line %d: %v", name, i+1, err)
				}
				want = append(want, int32(n))
			}
			if got := tok.Encode(ins[i]); !slices.Equal(got, want) {
				t.Errorf("%s: Encode(%q) = %v, want %v", name, ins[i], got, want)
			}
		}
		t.Logf("%s: %d texts tokenize as llama.cpp's tests expect", name, len(outs))
		checked++
	}
	if checked == 0 {
		t.Fatal("no vocabulary file was checked")
	}
}

// TestLlamaCppTokenizesSPMExport: llama.cpp's llama-tokenize (in
// LLAMA_CPP_BIN) reads a GGUF file this package writes for a model with
// the SentencePiece tokenizer (scripts/fetch-testdata's) and splits the
// texts of tokenizer/testdata/spm_encode.json into the ids clawrl's
// tokenizer gives them. Without LLAMA_CPP_BIN (CI has no llama.cpp) the
// test skips.
func TestLlamaCppTokenizesSPMExport(t *testing.T) {
	bin := os.Getenv("LLAMA_CPP_BIN")
	if bin == "" {
		t.Skip("LLAMA_CPP_BIN is not set (a directory with llama.cpp's llama-tokenize)")
	}
	tool := filepath.Join(bin, "llama-tokenize")
	if _, err := os.Stat(tool); err != nil {
		t.Skip("no llama-tokenize in LLAMA_CPP_BIN")
	}
	tok := spmTokenizer(t)
	src, _ := randomSource(t, smallSpec(model.ArchLlama, tok.VocabSize()))
	path := filepath.Join(t.TempDir(), "spm.gguf")
	if err := WriteModel(path, src, tok, Q8_0); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join("..", "tokenizer", "testdata", "spm_encode.json"))
	if err != nil {
		t.Fatal(err)
	}
	var golden struct {
		Legacy []struct {
			Name, Text string
		} `json:"legacy"`
	}
	if err := json.Unmarshal(raw, &golden); err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(t.TempDir(), "text")
	checked := 0
	for _, c := range golden.Legacy {
		if c.Text == "" {
			continue
		}
		want, err := llamaTokenize(tool, path, in, c.Text)
		if err != nil {
			t.Fatal(err)
		}
		if got := tok.Encode(c.Text); !slices.Equal(got, want) {
			t.Errorf("%s: clawrl %v, llama.cpp %v", c.Name, got, want)
		}
		checked++
	}
	if !t.Failed() {
		t.Logf("%d texts: llama.cpp splits them as clawrl does", checked)
	}
}

// TestLlamaCppPreTokenizers: for every pre-tokenizer name clawrl accepts,
// llama.cpp's llama-tokenize (in LLAMA_CPP_BIN) and clawrl split texts
// alike. The vocabulary is GPT-2's (models/ggml-vocab-gpt-2.gguf of
// LLAMA_CPP_SRC) with tokenizer.ggml.pre set to the name, so the ids
// differ where the splits, or the ignoring of merges, differ. The texts
// are llama.cpp's own test texts and some that tell the splits apart
// (camel case for Tekken, digit runs, punctuation runs, CJK). Names whose
// tokenizer normalizes (Qwen2's NFC, which llama.cpp does not apply) are
// checked on texts NFC leaves alone. Without both variables the test skips.
func TestLlamaCppPreTokenizers(t *testing.T) {
	src, bin := os.Getenv("LLAMA_CPP_SRC"), os.Getenv("LLAMA_CPP_BIN")
	if src == "" || bin == "" {
		t.Skip("LLAMA_CPP_SRC and LLAMA_CPP_BIN are not both set")
	}
	tool := filepath.Join(bin, "llama-tokenize")
	vocab := filepath.Join(src, "models", "ggml-vocab-gpt-2.gguf")
	f, err := Open(vocab)
	if err != nil {
		t.Fatal(err)
	}
	kvs := slices.Clone(f.KV)
	f.Close()
	inp, err := os.ReadFile(vocab + ".inp")
	if err != nil {
		t.Fatal(err)
	}
	texts := strings.Split(string(inp), "\n__ggml_vocab_test__\n")
	texts = append(texts, "HelloWorld iPhone XMLHttpRequest getHTTPResponseCode", "a/b//c\n/x", "1234567 89 3.14159",
		"what?!... (yes) <tag>=x^2|y~z`", "東京タワーと서울 2024年", "Ünïcödé ÀÉÎ café", "  \n\n\t end  ", "'S 'll 'VE")
	dir := t.TempDir()
	in := filepath.Join(dir, "text")
	for _, name := range tokenizer.PreTokenizerNames() {
		t.Run(name, func(t *testing.T) {
			kv := slices.Clone(kvs)
			for i := range kv {
				if kv[i].Key == KeyTokenizerPre {
					kv[i].Value = String(name)
				}
			}
			path := filepath.Join(dir, name+".gguf")
			if err := WriteFile(path, kv, nil); err != nil {
				t.Fatal(err)
			}
			g, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			tok, err := ReadTokenizer(g)
			g.Close()
			if err != nil {
				t.Fatal(err)
			}
			checked := 0
			for _, text := range texts {
				if text == "" || tokenizer.PreNormalizes(name) && !norm.NFC.IsNormalString(text) {
					continue
				}
				want, err := llamaTokenize(tool, path, in, text)
				if errors.Is(err, errRefused) && checked == 0 {
					// Older converters' names ("gpt2") that llama.cpp no
					// longer reads.
					t.Skipf("llama-tokenize refuses the name: %v", err)
				}
				if err != nil {
					t.Fatal(err)
				}
				if got := tok.Encode(text); !slices.Equal(got, want) {
					t.Errorf("%q: clawrl %v, llama.cpp %v", text, got, want)
				}
				checked++
			}
			t.Logf("%d texts split alike", checked)
		})
	}
}

// errRefused is llamaTokenize's error when llama-tokenize fails.
var errRefused = errors.New("llama-tokenize failed")

// llamaTokenize runs llama.cpp's llama-tokenize (tool) on text, written to
// the file in first, with the vocabulary of the GGUF file model, and
// returns its ids (no BOS added).
func llamaTokenize(tool, model, in, text string) ([]int32, error) {
	if err := os.WriteFile(in, []byte(text), 0o644); err != nil {
		return nil, err
	}
	out, err := exec.Command(tool, "-m", model, "-f", in, "--ids", "--no-bos", "--no-escape", "--log-disable").Output()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errRefused, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var ids []int32
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &ids); err != nil {
		return nil, fmt.Errorf("llama-tokenize's output %q: %v", lines[len(lines)-1], err)
	}
	return ids, nil
}

// TestLlamaCppPhi3Specials: in a Phi-3 file (models/ggml-vocab-phi-3.gguf
// of LLAMA_CPP_SRC, general.name "Phi3") the special tokens swallow the
// whitespace after them as llama.cpp's llama-tokenize (LLAMA_CPP_BIN)
// has them do: chat prompts split into the same ids.
func TestLlamaCppPhi3Specials(t *testing.T) {
	src, bin := os.Getenv("LLAMA_CPP_SRC"), os.Getenv("LLAMA_CPP_BIN")
	if src == "" || bin == "" {
		t.Skip("LLAMA_CPP_SRC and LLAMA_CPP_BIN are not both set")
	}
	path := filepath.Join(src, "models", "ggml-vocab-phi-3.gguf")
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := ReadTokenizer(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(t.TempDir(), "text")
	for _, text := range []string{
		"<|user|>\nHello<|end|>\n<|assistant|>\n",
		"<|system|>\nBe brief.<|end|>\n<|user|>\n  2+2?<|end|>\n<|assistant|>\n4<|end|>\n<|endoftext|> x",
		"</s>  <s> a",
	} {
		want, err := llamaTokenize(filepath.Join(bin, "llama-tokenize"), path, in, text)
		if err != nil {
			t.Fatal(err)
		}
		if got := tok.Encode(text); !slices.Equal(got, want) {
			t.Errorf("%q: clawrl %v, llama.cpp %v", text, got, want)
		}
	}
}
