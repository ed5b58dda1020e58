package gguf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/model"
)

// ggufJS returns the directory scripts/fetch-testdata installs the npm
// package @huggingface/gguf into, or skips the test.
func ggufJS(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node not found")
	}
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		d := filepath.Join(dir, ".cache", "gguf-js")
		if _, err := os.Stat(filepath.Join(d, "node_modules", "@huggingface", "gguf")); err == nil {
			return d
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Skip("@huggingface/gguf is not installed (run scripts/fetch-testdata)")
		}
		dir = parent
	}
}

type jsFile struct {
	Version          int    `json:"version"`
	TensorDataOffset string `json:"tensorDataOffset"`
	LittleEndian     bool   `json:"littleEndian"`
	Metadata         map[string]struct {
		Value   json.RawMessage `json:"value"`
		Type    int             `json:"type"`
		SubType *int            `json:"subType"`
	} `json:"metadata"`
	Tensors []struct {
		Name   string   `json:"name"`
		NDims  int      `json:"n_dims"`
		Shape  []string `json:"shape"`
		DType  int      `json:"dtype"`
		Offset string   `json:"offset"`
	} `json:"tensors"`
}

// jsValue is how the JSON of @huggingface/gguf's value should read: 64-bit
// integers as decimal strings, other numbers as JSON numbers (float32 as
// its exact double), strings, bools, arrays of them.
func jsValue(v Value) any {
	switch x := v.Interface().(type) {
	case uint64, int64:
		return fmt.Sprint(x)
	case float32:
		return float64(x)
	case float64:
		return x
	case []Value:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsValue(e)
		}
		return out
	case string, bool:
		return x
	}
	if v.Type() == TypeArray {
		n := v.Len()
		out := make([]any, n)
		for i := range n {
			switch xs := v.Interface().(type) {
			case []string:
				// The parser's TextDecoder drops a byte order mark that
				// starts a string (SentencePiece vocabularies have
				// U+FEFF as a token).
				out[i] = strings.TrimPrefix(xs[i], "\ufeff")
			case []bool:
				out[i] = xs[i]
			case []float32:
				out[i] = float64(xs[i])
			case []float64:
				out[i] = xs[i]
			case []uint64:
				out[i] = strconv.FormatUint(xs[i], 10)
			case []int64:
				out[i] = strconv.FormatInt(xs[i], 10)
			default:
				x, _ := toInt(elemAt(xs, i))
				out[i] = float64(x)
			}
		}
		return out
	}
	x, _ := toInt(v.Interface())
	return float64(x)
}

// sameJSON reports whether a (jsValue's form) and the JSON raw read the
// same once both are decoded.
func sameJSON(a any, raw json.RawMessage) bool {
	want, _ := json.Marshal(a)
	var x, y any
	json.Unmarshal(want, &x)
	json.Unmarshal(raw, &y)
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}

// TestIndependentParser: files of this package's writer (a sample, a
// model in Q4_0 and one in the Q4_K_M mix) read the same in the npm
// package @huggingface/gguf (issue 30's independent parser):
// every metadata value with its type, every tensor's name, shape, type
// and offset, and where the tensor data starts.
func TestIndependentParser(t *testing.T) {
	js := ggufJS(t)
	dir := t.TempDir()
	sample, _, _ := writeSample(t, dir, KV{KeyAlignment, Uint32(64)})
	tok := trainedTokenizer(t)
	src, _ := randomSource(t, smallSpec(model.ArchQwen3, tok.VocabSize()))
	modelFile := filepath.Join(dir, "model.gguf")
	if err := WriteModel(modelFile, src, tok, Q4_0); err != nil {
		t.Fatal(err)
	}
	mixFile := filepath.Join(dir, "model-q4_k_m.gguf") // Q4_K and Q6_K tensors
	if err := WriteModelMix(mixFile, src, tok, MixQ4KM); err != nil {
		t.Fatal(err)
	}
	files := []string{sample, modelFile, mixFile}
	if spm := spmTokenizerIfPresent(t); spm != nil {
		// A SentencePiece vocabulary: scores, add_space_prefix, no merges.
		src, _ := randomSource(t, smallSpec(model.ArchLlama, spm.VocabSize()))
		spmFile := filepath.Join(dir, "model-spm.gguf")
		if err := WriteModel(spmFile, src, spm, Q8_0); err != nil {
			t.Fatal(err)
		}
		files = append(files, spmFile)
	}
	for _, path := range files {
		cmd := exec.Command("node", filepath.Join("testdata", "js", "parse.mjs"), path)
		cmd.Env = append(os.Environ(), "GGUF_JS="+js)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("node: %v\n%s", err, stderr.String())
		}
		var got jsFile
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatal(err)
		}
		f, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if got.Version != 3 || !got.LittleEndian || got.TensorDataOffset != strconv.FormatInt(f.DataOffset, 10) {
			t.Errorf("%s: version %d, little-endian %v, data at %s; want 3, true, %d", path, got.Version, got.LittleEndian, got.TensorDataOffset, f.DataOffset)
		}
		for _, kv := range f.KV {
			m, ok := got.Metadata[kv.Key]
			switch {
			case !ok:
				t.Errorf("%s: %s missing", path, kv.Key)
			case m.Type != int(kv.Value.Type()):
				t.Errorf("%s: %s has type %d, want %d", path, kv.Key, m.Type, kv.Value.Type())
			case kv.Value.Type() == TypeArray && (m.SubType == nil || *m.SubType != int(kv.Value.ElemType())):
				t.Errorf("%s: %s has element type %v, want %d", path, kv.Key, m.SubType, kv.Value.ElemType())
			case !sameJSON(jsValue(kv.Value), m.Value):
				t.Errorf("%s: %s reads %.200s, want %.200v", path, kv.Key, m.Value, jsValue(kv.Value))
			}
		}
		if len(got.Tensors) != len(f.Tensors) {
			t.Fatalf("%s: %d tensors, want %d", path, len(got.Tensors), len(f.Tensors))
		}
		for i, ti := range f.Tensors {
			g := got.Tensors[i]
			shape := fmt.Sprint(g.Shape)
			var want []string
			for _, d := range ti.Dims {
				want = append(want, strconv.FormatUint(d, 10))
			}
			if g.Name != ti.Name || g.NDims != len(ti.Dims) || shape != fmt.Sprint(want) || g.DType != int(ti.Type) || g.Offset != strconv.FormatUint(ti.Offset, 10) {
				t.Errorf("%s: tensor %d reads %+v, want %s %v %s at %d", path, i, g, ti.Name, ti.Dims, ti.Type, ti.Offset)
			}
		}
		f.Close()
	}
}
