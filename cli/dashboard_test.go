package cli

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"encoding/json"
)

// TestDashboard opens the dashboard of the real daemon as a person would,
// on a daemon with an API key: the page loads without the key, its data
// does not (401, OpenAI error body), and with the key the data shows the
// step that two thumbs up trained (the first turn, closed by the second),
// its reward and the trainer's numbers for it (KL, entropy, gradient
// norm, learning rate, ...) and the versions, and none of what was said.
// server.dashboard: false turns it off (404).
func TestDashboard(t *testing.T) {
	bin := realBinary(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("server:\n  api_keys: [k3y]\ntrainer:\n  batch_size: 2\n  max_wait: 100ms\nreward:\n  votes: 1\n  hint_votes: 0\n  max_tokens: 8\ndata:\n  dir: %s\n", filepath.Join(dir, "data"))), 0o600)
	d := startDaemon(t, bin, cfg, freePort(t))
	defer d.kill()
	get := func(path, key string) (int, string, http.Header) {
		t.Helper()
		req, _ := http.NewRequest("GET", d.url+path, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	if code, body, h := get("/dashboard", ""); code != 200 || !strings.Contains(body, "clawrl dashboard") || !strings.Contains(h.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Errorf("GET /dashboard without a key: %d %q %v", code, body, h)
	}
	if code, body, _ := get("/dashboard/app.js", ""); code != 200 || !strings.Contains(body, "/dashboard/state") {
		t.Errorf("GET /dashboard/app.js: %d", code)
	}
	if code, body, _ := get("/dashboard/state", ""); code != 401 || !strings.Contains(body, `"invalid_api_key"`) {
		t.Errorf("GET /dashboard/state without a key: %d %s", code, body)
	}
	if code, _, _ := get("/dashboard/state", "wrong"); code != 401 {
		t.Errorf("GET /dashboard/state with a wrong key: %d", code)
	}

	chatWithThumbs(t, d, "dash", "Name a fruit, secret-word-x.", 2, 1, "great, secret-word-y", map[string]string{"Authorization": "Bearer k3y"})
	type state struct {
		Model   string  `json:"model"`
		Version uint64  `json:"weight_version"`
		Uptime  float64 `json:"uptime_s"`
		Stats   struct {
			Sessions int            `json:"sessions"`
			Feedback int            `json:"feedback"`
			Steps    map[string]int `json:"steps"`
		} `json:"stats"`
		History struct {
			Steps []struct {
				Step   int64              `json:"step"`
				Loss   float64            `json:"loss"`
				Status string             `json:"status"`
				Stats  map[string]float64 `json:"stats"`
			} `json:"steps"`
			Versions []struct{ Number uint64 } `json:"versions"`
			Rewards  []struct{ Reward int }    `json:"rewards"`
		} `json:"history"`
		Metrics map[string]float64 `json:"metrics"`
		Errors  []string           `json:"errors"`
	}
	var st state
	var body string
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		var code int
		code, body, _ = get("/dashboard/state", "k3y")
		if code != 200 {
			t.Fatalf("GET /dashboard/state: %d %s", code, body)
		}
		st = state{}
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatalf("state %q: %v", body, err)
		}
		// The store records a step before its version is published.
		if len(st.History.Steps) > 0 && len(st.History.Rewards) >= 1 && st.Version >= 2 && st.Metrics["clawrl_weight_version"] >= 2 {
			break
		}
	}
	if st.Model != "clawrl-small" || st.Version < 2 || st.Stats.Sessions != 1 || st.Stats.Feedback != 2 || st.Stats.Steps["applied"] < 1 ||
		len(st.History.Steps) < 1 || len(st.History.Rewards) < 1 || len(st.History.Versions) < 2 || len(st.Errors) != 0 {
		t.Errorf("the dashboard after two thumbs up and a step: %s\n%s", body, d.log)
	}
	if st.Metrics["clawrl_weight_version"] < 2 || st.Metrics["clawrl_loop_train_steps_total"] < 1 {
		t.Errorf("metrics %v", st.Metrics)
	}
	// The trained step carries the trainer's numbers for it, as the page
	// charts them.
	if n := len(st.History.Steps); n > 0 {
		s := st.History.Steps[n-1]
		t.Logf("step %d (%s): %v", s.Step, s.Status, s.Stats)
		for _, k := range []string{"kl", "step_kl", "entropy", "grad_norm", "lr", "lr_scale", "samples", "tokens", "seconds"} {
			if _, ok := s.Stats[k]; !ok {
				t.Errorf("step %d (%s) has no %s: %v", s.Step, s.Status, k, s.Stats)
			}
		}
		if s.Stats["entropy"] <= 0 || s.Stats["grad_norm"] <= 0 || s.Stats["lr"] <= 0 || s.Stats["samples"] < 1 || s.Stats["tokens"] < 1 {
			t.Errorf("step %d's numbers: %v", s.Step, s.Stats)
		}
	}
	for _, secret := range []string{"secret-word", "Name a fruit", "clawrl.db"} {
		if strings.Contains(body, secret) {
			t.Errorf("the dashboard's state shows %q", secret)
		}
	}
	d.kill()

	off := filepath.Join(dir, "off.yaml")
	os.WriteFile(off, []byte(fmt.Sprintf("server:\n  dashboard: false\ntrainer:\n  enabled: false\ndata:\n  dir: %s\n", filepath.Join(dir, "data2"))), 0o600)
	d = startDaemon(t, bin, off, freePort(t))
	for _, p := range []string{"/dashboard", "/dashboard/state"} {
		if code, _, _ := get(p, ""); code != 404 {
			t.Errorf("GET %s with the dashboard off: %d, want 404", p, code)
		}
	}
}
