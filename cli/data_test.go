package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestForgetOverHTTPAndCLI: a user's session is deleted through the API
// (DELETE /v1/sessions/{id}) and the CLI (clawrl data forget), and its text
// is gone from the store's files; stats and export see the rest.
func TestForgetOverHTTPAndCLI(t *testing.T) {
	data := t.TempDir()
	t.Setenv("CLAWRL_DATA_DIR", data)
	addr, stop := startServe(t, "")
	base := "http://" + addr
	do := func(method, path, session, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if session != "" {
			req.Header.Set("X-Session-Id", session)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var m map[string]any
		json.Unmarshal(raw, &m)
		return resp.StatusCode, m
	}
	const secret = "Zanzibar-lighthouse-4417"
	var ids []string
	for _, sess := range []string{"forget-me", "keep-me", "cli-forget"} {
		code, m := do("POST", "/v1/chat/completions", sess, `{"model":"clawrl-small","messages":[{"role":"user","content":"My code word is `+secret+`."}],"max_tokens":4}`)
		if code != 200 {
			t.Fatalf("chat: %d %v", code, m)
		}
		ids = append(ids, m["id"].(string))
	}
	if code, m := do("POST", "/v1/feedback", "", `{"response_id":"`+ids[0]+`","thumb":1,"text":"`+secret+`"}`); code != 200 {
		t.Fatalf("feedback: %d %v", code, m)
	}
	code, m := do("DELETE", "/v1/sessions/forget-me", "", "")
	if code != 200 || m["turns"].(float64) != 1 || m["feedback"].(float64) != 1 {
		t.Fatalf("DELETE: %d %v", code, m)
	}
	if code, _ := do("DELETE", "/v1/sessions/forget-me", "", ""); code != 404 {
		t.Errorf("second DELETE: %d, want 404", code)
	}
	if code, m := do("POST", "/v1/feedback", "", `{"response_id":"`+ids[0]+`","thumb":1}`); code != 404 {
		t.Errorf("feedback on a forgotten turn: %d %v, want 404", code, m)
	}
	if code, m := do("POST", "/v1/feedback", "", `{"response_id":"`+ids[1]+`","thumb":-1}`); code != 200 {
		t.Errorf("feedback on a kept turn: %d %v", code, m)
	}
	stop()

	if _, _, err := run(t, "", "data", "forget", "--session", "cli-forget"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(t, "", "data", "forget", "--session", "cli-forget"); err == nil {
		t.Error("forgetting an unknown session succeeded")
	}
	for _, suffix := range []string{"", "-wal"} {
		b, _ := os.ReadFile(filepath.Join(data, "clawrl.db") + suffix)
		if n := strings.Count(string(b), secret); n > 1 {
			t.Errorf("clawrl.db%s holds the secret %d times, want once (the kept session)", suffix, n)
		}
	}
	out, _, err := run(t, "", "data", "stats")
	if err != nil || !strings.Contains(out, `"sessions": 1`) {
		t.Errorf("stats: %v\n%s", err, out)
	}
}
