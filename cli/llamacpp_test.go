package cli

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/clawrl/clawrl/gguf"
)

// TestLlamaCppReadsExport checks `clawrl export --format gguf` against
// llama.cpp itself, the program the file is for: the bundled model's
// first checkpoint is exported as F32, Q8_0, Q4_0 and IQ4_XS GGUF files (the
// last agrees to 1e-2: clawrl rounds its sub-block scales to halves), llama.cpp's
// llama-perplexity measures each file's perplexity on a fixed text, and
// clawrl serving the same file measures it the way llama-perplexity does
// (chunks of 128 tokens, each evaluated alone, the second half of each
// scored) from the prompt log-probs of /v1/completions (echo). The two
// must agree: to 1e-3 in F32 (both compute the same function), 5e-3 in
// Q8_0 and Q4_0 (both multiply the blocks with int8-quantized activations, in
// their own orders). Agreement also needs the file's tokenizer to split
// the text as clawrl's does, and llama.cpp's chunk count is compared.
// clawrl's Q4_K_M export gives every tensor the type llama-quantize's
// Q4_K_M file of the F32 export has.
// The other way round, files that llama.cpp's own llama-quantize makes
// from the F32 export (Q4_K_M, a mix of Q4_K and Q6_K; Q6_K; Q5_0;
// IQ4_NL and IQ4_XS; the mixes Q3_K_M, Q2_K, Q4_K_S and Q5_K_S), which
// clawrl loads as model.quantize: auto does (Q4_K as Q4_1, Q5_K and Q5_0
// as Q5_1, IQ4_XS as IQ4_NL blocks, IQ4_NL as it is, Q6_K, Q3_K and Q2_K
// requantized to Q8_0) while llama.cpp multiplies them as they are,
// agree to 1e-2.
//
// llama.cpp is not installed where CI runs, so the test runs only when
// LLAMA_CPP_BIN names a directory holding llama-perplexity (a build's
// bin directory; its shared libraries are found beside it).
func TestLlamaCppReadsExport(t *testing.T) {
	llama := os.Getenv("LLAMA_CPP_BIN")
	if llama == "" {
		t.Skip("set LLAMA_CPP_BIN to a llama.cpp bin directory (with llama-perplexity) to run")
	}
	perplexity := filepath.Join(llama, "llama-perplexity")
	if _, err := os.Stat(perplexity); err != nil {
		t.Fatalf("LLAMA_CPP_BIN=%s: %v", llama, err)
	}
	bin := realBinary(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("data:\n  dir: %s\n", filepath.Join(dir, "data"))), 0o600)

	// The daemon checkpoints the version it starts with.
	d := startDaemon(t, bin, cfg, freePort(t))
	for deadline := time.Now().Add(2 * time.Minute); !strings.Contains(d.log.String(), "checkpoint saved"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint after 2 minutes\n%s", d.log)
		}
	}
	if err := d.stop(); err != nil {
		t.Fatalf("daemon: %v\n%s", err, d.log)
	}

	var text strings.Builder
	for i := range 60 {
		fmt.Fprintf(&text, "What is %d + %d? %d + %d = %d. Thanks, that helps. ", i, 2*i+1, i, 2*i+1, 3*i+1)
	}
	textFile := filepath.Join(dir, "text.txt")
	os.WriteFile(textFile, []byte(text.String()), 0o600)
	const nCtx = 128

	for _, c := range []struct {
		typ      string
		quantize string // made by llama-quantize from the F32 export (of this type), not by clawrl
		tol      float64
	}{{"f32", "", 1e-3}, {"q8_0", "", 5e-3}, {"q4_0", "", 5e-3}, {"q4_k_m", "Q4_K_M", 1e-2}, {"q6_k", "Q6_K", 1e-2},
		{"q5_0", "Q5_0", 1e-2}, {"iq4_nl-llama", "IQ4_NL", 1e-2}, {"iq4_xs-llama", "IQ4_XS", 1e-2}, {"iq4_xs", "", 1e-2},
		{"q3_k_m", "Q3_K_M", 1e-2}, {"q2_k", "Q2_K", 1e-2}, {"q4_k_s", "Q4_K_S", 1e-2}, {"q5_k_s", "Q5_K_S", 1e-2}} {
		file := filepath.Join(dir, "bundled-"+c.typ+".gguf")
		if c.quantize != "" {
			cmd := exec.Command(filepath.Join(llama, "llama-quantize"), filepath.Join(dir, "bundled-f32.gguf"), file, c.quantize)
			cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+llama)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("llama-quantize %s: %v\n%s", c.quantize, err, out)
			}
		} else if out, err := exec.Command(bin, "export", "1", "--config", cfg, "--format", "gguf", "--type", c.typ, "--out", file).CombinedOutput(); err != nil {
			t.Fatalf("export --type %s: %v\n%s", c.typ, err, out)
		}

		// llama.cpp's perplexity.
		cmd := exec.Command(perplexity, "-m", file, "-f", textFile, "-c", strconv.Itoa(nCtx), "-b", strconv.Itoa(nCtx), "-t", "2")
		cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+llama)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s on %s: %v\n%s", perplexity, file, err, out)
		}
		// It prints the running estimate after each chunk, "[k]ppl,"; its
		// log thread sometimes loses the last lines at exit, so the last
		// estimate printed is compared, over as many chunks.
		chunks := regexp.MustCompile(`over (\d+) chunks`).FindSubmatch(out)
		running := regexp.MustCompile(`\[(\d+)\]([0-9.]+),`).FindAllSubmatch(out, -1)
		if chunks == nil || len(running) == 0 {
			t.Fatalf("llama-perplexity printed no estimate:\n%s", out)
		}
		theirChunks, _ := strconv.Atoi(string(chunks[1]))
		last := running[len(running)-1]
		scored, _ := strconv.Atoi(string(last[1]))
		theirs, _ := strconv.ParseFloat(string(last[2]), 64)

		// clawrl's, serving the same file.
		m, err := gguf.OpenModel(file)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := m.Tokenizer()
		if err != nil {
			t.Fatal(err)
		}
		ids := tok.Encode(text.String())
		m.Close()
		if n := len(ids) / nCtx; n != theirChunks {
			t.Fatalf("%s: clawrl's tokenizer makes %d chunks of the text, llama.cpp's %d", c.typ, n, theirChunks)
		}
		serveCfg := filepath.Join(dir, "serve-"+c.typ+".yaml")
		os.WriteFile(serveCfg, []byte(fmt.Sprintf("model:\n  path: %s\n  precision: f32\ntrainer:\n  enabled: false\ndata:\n  dir: %s\n",
			file, filepath.Join(dir, "data-"+c.typ))), 0o600)
		s := startDaemon(t, bin, serveCfg, freePort(t))
		name := servedModel(s.url)
		var nll float64
		var n int
		for k := 0; k < scored*nCtx; k += nCtx {
			status, reply, _ := s.post(t, "/v1/completions", "", map[string]string{"X-No-Train": "1"}, map[string]any{
				"model": name, "prompt": ids[k : k+nCtx], "max_tokens": 1, "echo": true, "logprobs": 0, "temperature": 0})
			lps := promptLogProbs(t, status, reply)
			for j := nCtx / 2; j < nCtx-1; j++ {
				nll -= lps[j+1]
				n++
			}
		}
		s.stop()
		ours := math.Exp(nll / float64(n))
		t.Logf("%s: perplexity over %d chunks: llama.cpp %.4f, clawrl %.4f (ratio %.6f)", c.typ, scored, theirs, ours, ours/theirs)
		if r := ours / theirs; math.Abs(r-1) > c.tol || math.IsNaN(r) {
			t.Errorf("%s: perplexity llama.cpp %.4f, clawrl %.4f: ratio %.6f beyond 1±%g", c.typ, theirs, ours, r, c.tol)
		}
	}

	// clawrl's own Q4_K_M export gives every tensor the type llama-quantize
	// gave it (gguf.Mix), and the same file type.
	ours := filepath.Join(dir, "clawrl-q4_k_m.gguf")
	if out, err := exec.Command(bin, "export", "1", "--config", cfg, "--format", "gguf", "--type", "q4_k_m", "--out", ours).CombinedOutput(); err != nil {
		t.Fatalf("export --type q4_k_m: %v\n%s", err, out)
	}
	a, err := gguf.Open(ours)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := gguf.Open(filepath.Join(dir, "bundled-q4_k_m.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if len(a.Tensors) != len(b.Tensors) {
		t.Errorf("clawrl's Q4_K_M export has %d tensors, llama-quantize's %d", len(a.Tensors), len(b.Tensors))
	}
	q6 := 0
	for _, ti := range a.Tensors {
		if tb, ok := b.Tensor(ti.Name); !ok || tb.Type != ti.Type {
			t.Errorf("%s: %v in clawrl's Q4_K_M export, %v (present %v) in llama-quantize's", ti.Name, ti.Type, tb.Type, ok)
		}
		if ti.Type == gguf.Q6_K {
			q6++
		}
	}
	fa, _ := a.Get("general.file_type")
	fb, _ := b.Get("general.file_type")
	if fa.String() != fb.String() {
		t.Errorf("general.file_type %v, llama-quantize's %v", fa, fb)
	}
	t.Logf("Q4_K_M: %d tensors, %d of them Q6_K, each of the type llama-quantize gives it", len(a.Tensors), q6)
}

// promptLogProbs reads token_logprobs of an echoed completion (the first
// is null: no token precedes it).
func promptLogProbs(t *testing.T, status int, reply map[string]any) []float64 {
	t.Helper()
	choices, _ := reply["choices"].([]any)
	if status != 200 || len(choices) != 1 {
		t.Fatalf("completion: %d %v", status, reply)
	}
	lp, _ := choices[0].(map[string]any)["logprobs"].(map[string]any)
	raw, _ := lp["token_logprobs"].([]any)
	out := make([]float64, len(raw))
	for i, v := range raw {
		f, ok := v.(float64)
		if !ok && i > 0 {
			t.Fatalf("token_logprobs[%d] = %v", i, v)
		}
		out[i] = f
	}
	return out
}
