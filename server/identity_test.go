package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/session"
)

// TestSessionsBelongToTheirKey: with two API keys, the same session id
// names two sessions; a key cannot thumb the other's turns (it gets the
// 404 of an unknown turn), and what is recorded carries neither the id as
// given nor the `user` field.
func TestSessionsBelongToTheirKey(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.APIKeys, o.HashIDs, o.IDKey = []string{"sk-alice", "sk-bob"}, true, []byte("test id key")
	})
	chat := func(key, content string, extra ...string) (string, map[string]any) {
		t.Helper()
		body := `{"model":"clawrl-test","max_tokens":3,"user":"alice@example.com","messages":[{"role":"user","content":"` + content + `"}]}`
		resp, raw := e.post("/v1/chat/completions", body, append([]string{"Authorization", "Bearer " + key, "X-Session-Id", "shared-id"}, extra...)...)
		if resp.StatusCode != 200 {
			t.Fatalf("chat: %d %s", resp.StatusCode, raw)
		}
		if got := resp.Header.Get("X-Session-Id"); got != "shared-id" {
			t.Errorf("X-Session-Id %q: the client's own id is echoed", got)
		}
		var m map[string]any
		json.Unmarshal([]byte(raw), &m)
		return m["id"].(string), m
	}
	aliceID, _ := chat("sk-alice", "Hello from Alice.")
	bobID, _ := chat("sk-bob", "Hello from Bob.")

	feedback := func(key, body string) int {
		resp, _ := e.post("/v1/feedback", body, "Authorization", "Bearer "+key)
		return resp.StatusCode
	}
	for _, tc := range []struct {
		name, key, body string
		want            int
	}{
		{"bob on alice's response", "sk-bob", `{"response_id":"` + aliceID + `","thumb":-1}`, 404},
		{"alice on bob's response", "sk-alice", `{"response_id":"` + bobID + `","thumb":-1}`, 404},
		{"bob by session and turn names his own session", "sk-bob", `{"session_id":"shared-id","turn":0,"thumb":1}`, 200},
		{"alice on her own", "sk-alice", `{"response_id":"` + aliceID + `","thumb":1}`, 200},
		{"a response that does not exist", "sk-bob", `{"response_id":"chatcmpl-nope","thumb":1}`, 404},
	} {
		if got := feedback(tc.key, tc.body); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}

	// Each continues only its own session: Alice's next message completes
	// her turn, with her text as its next state.
	chat("sk-alice", "Thanks, Alice again.")
	var turns []*session.Turn
	for _, r := range e.records() {
		if r.Kind == session.KindTurn {
			turns = append(turns, r.Turn)
		}
		if r.Kind == session.KindFeedback && strings.Contains(r.Feedback.SessionID, "shared-id") {
			t.Errorf("feedback stored under the id as given: %q", r.Feedback.SessionID)
		}
	}
	if len(turns) != 1 || !strings.Contains(turns[0].Messages[0].Content, "Alice") || turns[0].NextState[0].Content != "Thanks, Alice again." {
		t.Fatalf("completed turns %+v", turns)
	}
	if sid := turns[0].SessionID; strings.Contains(sid, "shared-id") || strings.Contains(sid, "alice") || !strings.Contains(sid, ".h-") {
		t.Errorf("stored session id %q: want the key's tag and a hash", sid)
	}
	raw, _ := json.Marshal(turns[0])
	if strings.Contains(string(raw), "alice@example.com") {
		t.Errorf("the user field reached the turn record: %s", raw)
	}
}
