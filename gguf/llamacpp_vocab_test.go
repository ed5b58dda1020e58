package gguf

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/tokenizer"
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
		os.WriteFile(in, []byte(c.Text), 0o644)
		out, err := exec.Command(tool, "-m", path, "-f", in, "--ids", "--no-bos", "--no-escape", "--log-disable").Output()
		if err != nil {
			t.Fatalf("llama-tokenize: %v", err)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		var want []int32
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &want); err != nil {
			t.Fatalf("llama-tokenize's output %q: %v", lines[len(lines)-1], err)
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
