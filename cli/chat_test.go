package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// fakeOpenAI is a minimal OpenAI-compatible server: /models, streaming
// /chat/completions that answers "echo: <last user message>", and
// optionally /feedback.
type fakeOpenAI struct {
	mu       sync.Mutex
	feedback bool
	requests []fakeRequest
	fbBodies []map[string]any
}

type fakeRequest struct {
	auth, session string
	messages      []chatMessage
}

func (f *fakeOpenAI) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"object":"list","data":[{"id":"fake-model","object":"model"},{"id":"other","object":"model"}]}`)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Model    string        `json:"model"`
			Messages []chatMessage `json:"messages"`
			Stream   bool          `json:"stream"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Model != "fake-model" || !body.Stream {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"error":{"message":"bad request: model %q stream %v err %v","type":"invalid_request_error"}}`, body.Model, body.Stream, err)
			return
		}
		f.mu.Lock()
		n := len(f.requests)
		f.requests = append(f.requests, fakeRequest{auth: r.Header.Get("Authorization"), session: r.Header.Get("X-Session-Id"), messages: body.Messages})
		f.mu.Unlock()
		last := body.Messages[len(body.Messages)-1].Content
		if last == "fail" {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"error":{"message":"overloaded, try later","type":"server_error"}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		id := fmt.Sprintf("chatcmpl-%d", n+1)
		for _, piece := range []string{"echo", ": ", last} {
			b, _ := json.Marshal(map[string]any{"id": id, "object": "chat.completion.chunk", "system_fingerprint": "fp_test",
				"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": piece}}}})
			fmt.Fprintf(w, "data: %s\n\n", b)
		}
		fmt.Fprintf(w, "data: {\"id\":%q,\"choices\":[],\"usage\":{\"completion_tokens\":3}}\n\ndata: [DONE]\n\n", id)
	})
	if f.feedback {
		mux.HandleFunc("POST /v1/feedback", func(w http.ResponseWriter, r *http.Request) {
			var body map[string]any
			_ = json.NewDecoder(r.Body).Decode(&body)
			if body["response_id"] == "chatcmpl-unknown" {
				w.WriteHeader(http.StatusNotFound)
				fmt.Fprint(w, `{"error":{"message":"No recorded turn matches.","code":"turn_not_found"}}`)
				return
			}
			f.mu.Lock()
			f.fbBodies = append(f.fbBodies, body)
			f.mu.Unlock()
			fmt.Fprint(w, `{"object":"feedback"}`)
		})
	}
	return mux
}

func TestChatAgainstPlainOpenAIServer(t *testing.T) {
	f := &fakeOpenAI{}
	ts := httptest.NewServer(f.handler())
	defer ts.Close()
	in := "hello there\n/good\nsecond\nfail\n/new\nthird\n/bad wrong\n/nonsense\n"
	out, _, err := run(t, in, "chat", "--base-url", ts.URL+"/v1/", "--api-key", "sk-test", "--system", "Be brief.")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"model fake-model at " + ts.URL + "/v1",
		"echo: hello there\n", "(fp_test · 3 tokens",
		"this server does not take feedback", "error: 503 Service Unavailable: overloaded, try later",
		"new session chat-", "unknown command /nonsense",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "does not take feedback") != 2 {
		t.Errorf("feedback refusal should be said for /good and /bad:\n%s", out)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.requests) != 4 {
		t.Fatalf("%d requests", len(f.requests))
	}
	r0, r1, r3 := f.requests[0], f.requests[1], f.requests[3]
	if r0.auth != "Bearer sk-test" || r0.session == "" || r1.session != r0.session || r3.session == r0.session {
		t.Errorf("auth %q, sessions %q %q %q", r0.auth, r0.session, r1.session, r3.session)
	}
	// The conversation carries on: system, user, assistant, user; the failed
	// message is dropped; /new starts over.
	if len(r1.messages) != 4 || r1.messages[0].Role != "system" || r1.messages[2].Content != "echo: hello there" {
		t.Errorf("second request messages %+v", r1.messages)
	}
	if len(r3.messages) != 2 || r3.messages[1].Content != "third" {
		t.Errorf("after /new: %+v", r3.messages)
	}
}

func TestChatFeedback(t *testing.T) {
	f := &fakeOpenAI{feedback: true}
	ts := httptest.NewServer(f.handler())
	defer ts.Close()
	c := &chatClient{base: ts.URL + "/v1", model: "fake-model", temperature: -1, http: ts.Client(), out: io.Discard}
	var out bytes.Buffer
	c.out = &out
	if err := c.run(context.Background(), strings.NewReader("/good\nhi\n/good\n/bad off by one\n/hint\n/hint use ISO dates\n/quit\nnever sent\n")); err != nil {
		t.Fatal(err)
	}
	c.lastID = "chatcmpl-unknown"
	c.feedback(context.Background(), 1, "")
	if !strings.Contains(out.String(), "nothing to give feedback on yet") || !strings.Contains(out.String(), "usage: /hint") ||
		!strings.Contains(out.String(), "did not record that answer") {
		t.Errorf("output:\n%s", out.String())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	want := []map[string]any{
		{"response_id": "chatcmpl-1", "thumb": 1.0},
		{"response_id": "chatcmpl-1", "thumb": -1.0, "text": "off by one"},
		{"response_id": "chatcmpl-1", "text": "use ISO dates"},
	}
	if got, _ := json.Marshal(f.fbBodies); !bytes.Equal(got, must(json.Marshal(want))) {
		t.Errorf("feedback bodies %s, want %s", got, must(json.Marshal(want)))
	}
	if len(f.requests) != 1 {
		t.Errorf("%d chat requests after /quit, want 1", len(f.requests))
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestChatNoServer(t *testing.T) {
	ts := httptest.NewServer(http.NotFoundHandler())
	ts.Close()
	_, _, err := run(t, "", "chat", "--base-url", ts.URL+"/v1")
	if err == nil || !strings.Contains(err.Error(), "--model") {
		t.Fatalf("err = %v, want a hint to pass --model", err)
	}
}

// TestChatWithClawrlServer talks to the real daemon (a tiny random model):
// streaming, the weight version, and feedback on a recorded turn.
func TestChatWithClawrlServer(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	if _, _, err := run(t, "", "testmodel", dir); err != nil {
		t.Fatal(err)
	}
	addr, stop := startServe(t, dir)
	defer stop()
	out, _, err := run(t, "Hello\n/good\n/hint answer in French\n", "chat", "--base-url", "http://"+addr+"/v1", "-n", "4", "-t", "0")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`model m at http://` + regexp.QuoteMeta(addr) + `/v1, weights v\d+\n`, `\(weights v\d+ · \d+ tokens · `,
		`feedback sent \(thumbs up on chatcmpl-`, `feedback sent \(hint`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
}

// startServe runs the daemon on a free port over the model in dir ("" for
// the bundled model).
func startServe(t *testing.T, dir string) (string, func()) {
	t.Helper()
	var out, errb lockedBuffer // the server's goroutines log to them
	a := &app{stdout: &out, stderr: &errb}
	root := newRootCmd(&out, &errb)
	root.SetArgs([]string{"version"})
	if err := a.load(root); err != nil {
		t.Fatal(err)
	}
	a.cfg.Server.Port = 0
	if a.cfg.Data.Dir == "" {
		a.cfg.Data.Dir = t.TempDir()
	}
	a.cfg.Trainer.Enabled = false
	a.cfg.Reward.Votes, a.cfg.Reward.HintVotes = 1, 0
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- a.runServe(ctx, dir, ready) }()
	select {
	case addr := <-ready:
		return addr, func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
		}
	case err := <-done:
		cancel()
		t.Fatal(err)
	}
	return "", nil
}

// TestChatInterrupt: Ctrl-C while an answer streams stops that answer, not
// the chat.
func TestChatInterrupt(t *testing.T) {
	started := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"partial\"}}]}\n\n")
		w.(http.Flusher).Flush()
		close(started)
		<-r.Context().Done() // never finishes on its own
	}))
	defer ts.Close()
	var out bytes.Buffer
	c := &chatClient{base: ts.URL + "/v1", model: "m", temperature: -1, http: ts.Client(), out: &out}
	c.reset()
	if c.interrupt() {
		t.Fatal("interrupt with nothing in flight")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.send(context.Background(), "hi")
	}()
	<-started
	for !c.interrupt() {
	}
	<-done
	if !strings.Contains(out.String(), "(interrupted") || len(c.messages) != 0 {
		t.Errorf("output %q, messages %+v", out.String(), c.messages)
	}
}

// lockedBuffer is a bytes.Buffer safe for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
