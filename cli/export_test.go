package cli

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/clawrl/clawrl/weights"
)

// TestExportServes is `clawrl export` as a user runs it: the daemon
// learns from two thumbs up and stops; the newest version is exported as
// a model and as a PEFT adapter; a second daemon serving the exported
// directory as its base answers a greedy probe as the lineage's daemon
// does after a restart, both with training off: the same text, log-probs
// within 1e-4. Both keep the KV cache in F32, since its auto dtype follows
// torch_dtype, which the export sets to float32 for LoRA-merged matrices.
// Bad requests get clear errors and leave nothing behind.
func TestExportServes(t *testing.T) {
	bin := realBinary(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "config.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("model:\n  kv_cache_dtype: f32\ntrainer:\n  batch_size: 2\n  max_wait: 100ms\nreward:\n  votes: 1\n  hint_votes: 0\n  max_tokens: 8\ndata:\n  dir: %s\n", data)), 0o600)
	d := startDaemon(t, bin, cfg, freePort(t))
	chatWithThumbs(t, d, "e", "Name a fruit.", 2, 1, "", nil)
	root := filepath.Join(data, "checkpoints")
	var ns []uint64
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if ns, _ = weights.List(root); len(ns) > 0 && ns[0] >= 2 { // version 1 is the base's
			break
		}
	}
	if len(ns) == 0 || ns[0] < 2 {
		t.Fatalf("no trained checkpoint after two thumbs up\n%s", d.log)
	}
	if err := d.stop(); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, d.log)
	}
	ns, _ = weights.List(root)
	newest := ns[0]

	clawrl := func(args ...string) (string, error) {
		out, err := exec.Command(bin, append(args, "--config", cfg)...).CombinedOutput()
		return string(out), err
	}
	model := filepath.Join(dir, "exported")
	out, err := clawrl("export", "--out", model)
	if err != nil || !strings.Contains(out, fmt.Sprintf("exported weight version %d as a model (float32", newest)) {
		t.Fatalf("export: %v\n%s", err, out)
	}
	adapter := filepath.Join(dir, "adapter")
	out, err = clawrl("export", strconv.FormatUint(newest, 10), "--adapter", "--out", adapter)
	if err != nil || !strings.Contains(out, "as a PEFT adapter") {
		t.Fatalf("export --adapter: %v\n%s", err, out)
	}
	for _, f := range []string{"adapter_model.safetensors", "adapter_config.json", "README.md"} {
		if _, err := os.Stat(filepath.Join(adapter, f)); err != nil {
			t.Errorf("adapter export: %v", err)
		}
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"export", "--out", model}, "pass --force"},
		{[]string{"export", "999", "--out", filepath.Join(dir, "x1")}, "no checkpoint of version 999"},
		{[]string{"export", "abc", "--out", filepath.Join(dir, "x2")}, `"abc" is not a version number`},
		{[]string{"export", "--dtype", "fp8", "--out", filepath.Join(dir, "x3")}, `dtype "fp8"`},
		{[]string{"export"}, "--out DIR is required"},
		{[]string{"export", "--checkpoint", filepath.Join(dir, "nothing"), "--out", filepath.Join(dir, "x4")}, "no readable manifest"},
	} {
		out, err := clawrl(tt.args...)
		if err == nil || !strings.Contains(out, tt.want) {
			t.Errorf("clawrl %v: %v, want an error containing %q\n%s", tt.args, err, tt.want, out)
		}
	}
	for _, x := range []string{"x1", "x2", "x3", "x4"} {
		if _, err := os.Stat(filepath.Join(dir, x)); err == nil {
			t.Errorf("a refused export made %s", x)
		}
	}

	probe := func(d *daemon) (string, any) {
		t.Helper()
		code, m, h := d.post(t, "/v1/chat/completions", "", map[string]string{"X-No-Train": "1"}, map[string]any{
			"model": servedModel(d.url), "messages": []map[string]string{{"role": "user", "content": "Name an animal."}},
			"max_tokens": 12, "temperature": 0, "logprobs": true,
		})
		if code != 200 {
			t.Fatalf("probe: %d %v", code, m)
		}
		ch := m["choices"].([]any)[0].(map[string]any)
		return h.Get("X-Weight-Version") + " " + ch["message"].(map[string]any)["content"].(string), ch["logprobs"]
	}
	// The lineage's daemon restarts with training off, as the export's
	// serves: no skill check or scoring shares a batch with the probe
	// (batch composition moves log-probs by up to ~2e-4).
	quiet := filepath.Join(dir, "quiet.yaml")
	os.WriteFile(quiet, []byte(fmt.Sprintf("model:\n  kv_cache_dtype: f32\n  precision: f32\ntrainer:\n  enabled: false\ndata:\n  dir: %s\n", data)), 0o600)
	d = startDaemon(t, bin, quiet, freePort(t))
	wantText, wantLP := probe(d)
	d.kill()
	if !strings.HasPrefix(wantText, strconv.FormatUint(newest, 10)+" ") {
		t.Fatalf("the restarted daemon served %q, want version %d", wantText, newest)
	}
	other := filepath.Join(dir, "other.yaml")
	os.WriteFile(other, []byte(fmt.Sprintf("model:\n  path: %s\n  kv_cache_dtype: f32\n  precision: f32\ntrainer:\n  enabled: false\ndata:\n  dir: %s\n", model, filepath.Join(dir, "data2"))), 0o600)
	d2 := startDaemon(t, bin, other, freePort(t))
	gotText, gotLP := probe(d2)
	d2.kill()
	_, wantReply, _ := strings.Cut(wantText, " ")
	_, gotReply, _ := strings.Cut(gotText, " ")
	if gotReply != wantReply || !closeLogprobs(gotLP, wantLP, 1e-4) {
		t.Errorf("the exported model answers %q with log-probs %v;\nthe lineage's version %d answers %q with %v", gotReply, gotLP, newest, wantReply, wantLP)
	}

	// As one GGUF file: in F32 it answers as the version does (both
	// daemons multiply in F32: model.precision f32), its log-probs within
	// 1e-4; in Q8_0 it serves too.
	for _, tc := range []struct {
		typ string
		tol float64
	}{{"f32", 1e-4}, {"q8_0", 0.5}} {
		file := filepath.Join(dir, "exported-"+tc.typ+".gguf")
		out, err := clawrl("export", "--format", "gguf", "--type", tc.typ, "--out", file)
		if err != nil || !strings.Contains(out, fmt.Sprintf("exported weight version %d as GGUF", newest)) {
			t.Fatalf("export --format gguf --type %s: %v\n%s", tc.typ, err, out)
		}
		cfg := filepath.Join(dir, "gguf-"+tc.typ+".yaml")
		os.WriteFile(cfg, []byte(fmt.Sprintf("model:\n  path: %s\n  kv_cache_dtype: f32\n  precision: f32\ntrainer:\n  enabled: false\ndata:\n  dir: %s\n", file, filepath.Join(dir, "data-"+tc.typ))), 0o600)
		d3 := startDaemon(t, bin, cfg, freePort(t))
		text, lp := probe(d3)
		d3.kill()
		_, reply, _ := strings.Cut(text, " ")
		if tc.typ == "f32" && reply != wantReply || !closeLogprobs(lp, wantLP, tc.tol) && tc.typ == "f32" {
			t.Errorf("the %s GGUF export answers %q with log-probs %v; the version answers %q with %v", tc.typ, reply, lp, wantReply, wantLP)
		}
		if reply == "" {
			t.Errorf("the %s GGUF export answered nothing", tc.typ)
		}
	}
	if out, err := clawrl("export", "--format", "gguf", "--type", "q9_9", "--out", filepath.Join(dir, "x5.gguf")); err == nil || !strings.Contains(out, `unknown type "q9_9"`) {
		t.Errorf("an unknown GGUF type: %v\n%s", err, out)
	}
}

// closeLogprobs reports whether two OpenAI logprobs objects hold the same
// tokens with log-probs within tol.
func closeLogprobs(a, b any, tol float64) bool {
	content := func(x any) []any {
		m, _ := x.(map[string]any)
		c, _ := m["content"].([]any)
		return c
	}
	ca, cb := content(a), content(b)
	if len(ca) == 0 || len(ca) != len(cb) {
		return false
	}
	for i := range ca {
		ta, tb := ca[i].(map[string]any), cb[i].(map[string]any)
		la, _ := ta["logprob"].(float64)
		lb, _ := tb["logprob"].(float64)
		if ta["token"] != tb["token"] || math.Abs(la-lb) > tol {
			return false
		}
	}
	return true
}

// chatWithThumbs holds a conversation of n turns in session, starting with
// first and going on with "Another.", and gives each reply thumb with
// text, sending headers with every request.
func chatWithThumbs(t *testing.T, d *daemon, session, first string, n, thumb int, text string, headers map[string]string) {
	t.Helper()
	history := []map[string]string{{"role": "user", "content": first}}
	for i := range n {
		code, m, _ := d.post(t, "/v1/chat/completions", session, headers, map[string]any{"model": servedModel(d.url), "messages": history, "max_tokens": 8})
		if code != 200 {
			t.Fatalf("chat %d: %d %v", i, code, m)
		}
		reply := m["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string)
		history = append(history, map[string]string{"role": "assistant", "content": reply}, map[string]string{"role": "user", "content": "Another."})
		if code, m, _ := d.post(t, "/v1/feedback", "", headers, map[string]any{"response_id": m["id"], "thumb": thumb, "text": text}); code != 200 {
			t.Fatalf("feedback: %d %v", code, m)
		}
	}
}
