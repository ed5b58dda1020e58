package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/clawrl/clawrl/engine"
	"github.com/clawrl/clawrl/gguf"
	"github.com/clawrl/clawrl/store"
	"github.com/clawrl/clawrl/weights"
)

// run executes the CLI with args and returns stdout, stderr and the error.
func run(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var out, errb lockedBuffer // the daemon's goroutines may log at once
	cmd := newRootCmd(&out, &errb)
	cmd.SetArgs(args)
	cmd.SetIn(strings.NewReader(stdin))
	err := cmd.Execute()
	return out.String(), errb.String(), err
}

func TestVersion(t *testing.T) {
	out, _, err := run(t, "", "version")
	if err != nil || !strings.HasPrefix(out, "clawrl ") || !strings.Contains(out, "kernels: ") {
		t.Fatalf("version: %q, %v", out, err)
	}
}

func TestBadConfig(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte("server:\n  port: -1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := run(t, "", "--config", p, "version")
	if err == nil || !strings.Contains(err.Error(), "server.port") {
		t.Fatalf("err = %v, want a server.port error", err)
	}
}

func TestTestmodelAndGenerate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	if _, _, err := run(t, "", "testmodel", dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("testmodel did not write %s: %v", f, err)
		}
	}
	gen := func(args ...string) string {
		t.Helper()
		out, _, err := run(t, "", append([]string{"generate", "--model", dir, "--seed", "3", "-n", "12"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	a := gen("--chat", "--prompt", "Hello!")
	if b := gen("--chat", "--prompt", "Hello!"); a != b {
		t.Errorf("seeded generation differs: %q vs %q", a, b)
	}
	if g1, g2 := gen("-t", "0", "--prompt", "The quick"), gen("-t", "0", "--prompt", "The quick"); g1 != g2 {
		t.Errorf("greedy generation differs: %q vs %q", g1, g2)
	}
	// A Mistral model with a sliding window shorter than the prompt.
	sw := filepath.Join(t.TempDir(), "sw")
	if _, _, err := run(t, "", "testmodel", sw, "--arch", "MistralForCausalLM", "--sliding-window", "8"); err != nil {
		t.Fatal(err)
	}
	if out, _, err := run(t, "", "generate", "--model", sw, "-t", "0", "-n", "12", "--prompt", strings.Repeat("the quick brown fox ", 6)); err != nil || out == "" {
		t.Errorf("generate with a sliding window: %q, %v", out, err)
	}
	// The prompt can come from standard input.
	if out, _, err := run(t, "The quick", "generate", "--model", dir, "-n", "3"); err != nil || out == "" {
		t.Errorf("stdin prompt: %q, %v", out, err)
	}
	for _, bad := range [][]string{
		{"generate", "--model", dir, "--prompt", "x", "--temperature", "5"},
		{"generate", "--model", dir, "--prompt", "x", "--max-tokens", "0"},
		{"generate", "--model", filepath.Join(dir, "missing"), "--prompt", "x"},
		{"testmodel", t.TempDir(), "--preset", "huge"},
		{"testmodel", t.TempDir(), "--sliding-window", "8"}, // a Qwen3 has no window
		{"testmodel", t.TempDir(), "--arch", "MistralForCausalLM", "--sliding-window", "-1"},
	} {
		if _, _, err := run(t, "", bad...); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

func TestServe(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	if _, _, err := run(t, "", "testmodel", dir); err != nil {
		t.Fatal(err)
	}
	var out, errb lockedBuffer // the daemon's goroutines log at once
	a := &app{stdout: &out, stderr: &errb}
	root := newRootCmd(&out, &errb)
	root.SetArgs([]string{"version"})
	if err := a.load(root); err != nil {
		t.Fatal(err)
	}
	a.cfg.Server.Port = 0 // any free port
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- a.runServe(ctx, dir, ready) }()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	body := `{"model":"m","messages":[{"role":"user","content":"Hello"}],"max_tokens":5}`
	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	err = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || len(got.Choices) != 1 || got.Usage.CompletionTokens < 1 {
		t.Fatalf("status %d, %+v, %v", resp.StatusCode, got, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve returned %v", err)
	}
}

// TestBench runs every bench section at toy sizes: the numbers mean
// nothing, the plumbing does.
func TestBench(t *testing.T) {
	out, _, err := run(t, "", "bench", "--what", "machine,gemm,model,serve", "--preset", "tiny", "--seconds", "0.02",
		"--bandwidth-mb", "16", "--decode-tokens", "4", "--prefill-tokens", "16", "--prefix-tokens", "300", "--serve-seconds", "0.1", "--train",
		"--context-tokens", "600")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"FP32 FMA peak", "sgemm 512", "decode, batch 1", "prefill, 16 tokens", "decode after 600 tokens", "32 streaming clients", "second/first", "store, 32 clients: TTFT", "training, 32 clients: TTFT"} {
		if !strings.Contains(out, want) {
			t.Errorf("bench output lacks %q:\n%s", want, out)
		}
	}
	if _, _, err := run(t, "", "bench", "--what", "nonsense"); err == nil {
		t.Error("unknown section accepted")
	}
}

// TestBenchQuantized: bench --what model on a Q8_0 GGUF file says the
// weights are quantized, the bytes a decode step reads, and prefill's rate
// in int8 products (whose peak it does not measure).
func TestBenchQuantized(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	if err := writeTestModel(dir, presets()["tiny"], "", false); err != nil {
		t.Fatal(err)
	}
	if err := writeTestGGUF(dir, gguf.Uniform(gguf.Q8_0)); err != nil {
		t.Fatal(err)
	}
	out, _, err := run(t, "", "bench", "--what", "model", "--model", filepath.Join(dir, "model-q8_0.gguf"), "--seconds", "0.02",
		"--bandwidth-mb", "16", "--decode-tokens", "4", "--prefill-tokens", "16", "--rounds", "1", "--batch", "1")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Q8_0 weights (from the file,", "MB read per token)", "decode, batch 1", "GFLOP/s, Q8_0 products in int8"} {
		if !strings.Contains(out, want) {
			t.Errorf("bench output lacks %q:\n%s", want, out)
		}
	}
}

// TestWeightSwapOverHTTP publishes a new weight version while a stream is
// running through the real server and scheduler: the stream completes on
// its version, and the next request reports the new one.
func TestWeightSwapOverHTTP(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	other := filepath.Join(t.TempDir(), "m2")
	spec := presets()["tiny"]
	if err := writeTestModel(dir, spec, "", false); err != nil {
		t.Fatal(err)
	}
	spec.Seed = 77
	if err := writeTestModel(other, spec, "", false); err != nil { // the same trained tokenizer, other weights
		t.Fatal(err)
	}
	var out, errb lockedBuffer // the daemon's goroutines log at once
	a := &app{stdout: &out, stderr: &errb}
	root := newRootCmd(&out, &errb)
	root.SetArgs([]string{"version"})
	if err := a.load(root); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	e, err := engine.Open(a.cfg, engine.Options{Model: dir, Log: a.log, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	db, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	srv, err := a.newServer(e, db, reg, a.templateVars(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	defer func() { cancel(); <-done }()
	url := "http://" + ln.Addr().String() + "/v1/chat/completions"
	post := func(body string) *http.Response {
		resp, err := http.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		return resp
	}

	resp := post(`{"model":"m","messages":[{"role":"user","content":"Tell me everything."}],"max_tokens":400,"temperature":0,"stream":true}`)
	defer resp.Body.Close()
	if v := resp.Header.Get("X-Weight-Version"); v != "1" {
		t.Fatalf("stream started on version %q, want 1", v)
	}
	rd := bufio.NewReader(resp.Body)
	if _, err := rd.ReadString('\n'); err != nil { // the first chunk arrived
		t.Fatal(err)
	}
	w2, err := e.Model().LoadWeights(other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Versions().Publish(w2, 1, weights.Meta{Note: "test"}); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(rd)
	if err != nil || !strings.Contains(string(rest), "data: [DONE]") {
		t.Fatalf("stream did not complete after the swap: %v\n%s", err, rest)
	}
	if strings.Contains(string(rest), `"system_fingerprint":"clawrl-v2"`) {
		t.Errorf("a chunk of the running stream reports the new version")
	}
	next := post(`{"model":"m","messages":[{"role":"user","content":"Again."}],"max_tokens":4}`)
	body, _ := io.ReadAll(next.Body)
	next.Body.Close()
	if v := next.Header.Get("X-Weight-Version"); v != "2" || !strings.Contains(string(body), "clawrl-v2") {
		t.Errorf("next request on version %q (%s), want 2", v, body)
	}
	// The daemon's /metrics carries the scheduler's and the cache's state.
	resp, err = http.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`clawrl_scheduler_finished_total{how="completed"} 2`, "clawrl_kv_cache_usage_ratio", `clawrl_kv_cache_info{block_size="16",dtype=`, `clawrl_weight_version 2`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestMain sets the built-in configuration and keeps the tests' data (the
// store, checkpoints) out of the user's data directory: a test that does
// not set data.dir gets a temporary XDG_DATA_HOME.
func TestMain(m *testing.M) {
	// The built-in configuration is the repository's config.yaml, which
	// package main embeds.
	def, err := os.ReadFile("../config.yaml")
	if err != nil {
		panic(err)
	}
	SetDefaults(def, "")
	dir, err := os.MkdirTemp("", "clawrl-test-data-")
	if err != nil {
		panic(err)
	}
	os.Setenv("XDG_DATA_HOME", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func TestKVCacheLargerThanMemory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	if err := writeTestModel(dir, presets()["tiny"], "", false); err != nil {
		t.Fatal(err)
	}
	_, errb, err := run(t, "", "generate", "--model", dir, "--prompt", "hi", "--max-tokens", "2")
	if err != nil {
		t.Fatalf("generate: %v\n%s", err, errb)
	}
	t.Setenv("CLAWRL_MODEL_KV_CACHE_MB", "100000000")
	_, _, err = run(t, "", "generate", "--model", dir, "--prompt", "hi", "--max-tokens", "2")
	if err == nil || !strings.Contains(err.Error(), "model.kv_cache_mb") || !strings.Contains(err.Error(), "memory available") {
		t.Errorf("a 100 TB KV cache: err = %v", err)
	}
}
