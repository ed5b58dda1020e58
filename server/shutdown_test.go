package server

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/clawrl/clawrl/rollout"
	"github.com/clawrl/clawrl/session"
)

// Streams that outlast the shutdown timeout end as OpenAI clients can
// parse them (chat and completions: a finish reason, an error event,
// [DONE]; Responses: an error event and response.incomplete), and their
// turns are recorded as interrupted; a request not streamed gets a 503.
func TestShutdownEndsStreams(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.ShutdownTimeout = 300 * time.Millisecond })
	e.gen.reply = func(string, rollout.Request) script {
		return script{text: "Working on it", endless: true, delay: 5 * time.Millisecond}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- e.srv.Serve(ctx, ln) }()
	url := "http://" + ln.Addr().String()

	requests := []struct{ name, path, body string }{
		{"chat", "/v1/chat/completions", `{"model":"clawrl-test","stream":true,"max_tokens":4000,"messages":[{"role":"user","content":"go"}]}`},
		{"responses", "/v1/responses", `{"model":"clawrl-test","stream":true,"max_output_tokens":4000,"input":"go on"}`},
		{"completions", "/v1/completions", `{"model":"clawrl-test","stream":true,"max_tokens":4000,"prompt":"go"}`},
		{"chat, not streamed", "/v1/chat/completions", `{"model":"clawrl-test","max_tokens":4000,"messages":[{"role":"user","content":"and"}]}`},
	}
	bodies := make([]string, len(requests))
	statuses := make([]int, len(requests))
	var wg sync.WaitGroup
	started := make(chan struct{}, len(requests))
	for i, r := range requests {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, url+r.path, strings.NewReader(r.body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Session-Id", "s-"+r.name)
			streamed := strings.Contains(r.body, `"stream":true`)
			if !streamed {
				started <- struct{}{} // its headers come with its end
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("%s: %v", r.name, err)
				if streamed {
					started <- struct{}{}
				}
				return
			}
			defer resp.Body.Close()
			statuses[i] = resp.StatusCode
			br := bufio.NewReader(resp.Body)
			if streamed {
				line, _ := br.ReadString('\n') // the stream has begun
				bodies[i] = line
				started <- struct{}{}
			}
			rest, _ := io.ReadAll(br)
			bodies[i] += string(rest)
		})
	}
	for range requests {
		<-started
	}
	time.Sleep(50 * time.Millisecond)
	stop()
	wg.Wait()
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}

	chat, resp, cmpl, plain := bodies[0], bodies[1], bodies[2], bodies[3]
	for _, c := range []struct {
		name, body string
		want       []string
	}{
		{"chat", chat, []string{`"finish_reason":"length"`, `"code":"server_shutdown"`}},
		{"completions", cmpl, []string{`"finish_reason":"length"`, `"code":"server_shutdown"`}},
		{"responses", resp, []string{"event: error", `"code":"server_shutdown"`, "event: response.incomplete", `"reason":"interrupted"`}},
	} {
		for _, w := range c.want {
			if !strings.Contains(c.body, w) {
				t.Errorf("%s: the stream lacks %s:\n%s", c.name, w, tail(c.body))
			}
		}
		if c.name != "responses" && !strings.HasSuffix(strings.TrimSpace(c.body), "data: [DONE]") {
			t.Errorf("%s: the stream does not end with [DONE]:\n%s", c.name, tail(c.body))
		}
		if c.name != "responses" && strings.Index(c.body, `"finish_reason":"length"`) > strings.Index(c.body, "server_shutdown") {
			t.Errorf("%s: the error comes before the finish reason", c.name)
		}
	}
	if statuses[3] != http.StatusServiceUnavailable || !strings.Contains(plain, "server_shutdown") {
		t.Errorf("not streamed: %d %s", statuses[3], plain)
	}

	// The chat and Responses turns are recorded as interrupted.
	got := map[string]*session.Turn{}
	for _, tr := range e.turns() {
		got[tr.Endpoint] = tr
	}
	for _, ep := range []string{"chat.completions", "responses"} {
		tr := got[ep]
		if tr == nil {
			t.Errorf("%s: no turn recorded", ep)
			continue
		}
		if tr.FinishReason != finishInterrupted || len(tr.ResponseTokens) == 0 || !strings.HasPrefix(tr.Reply.Content, "Working on it") {
			t.Errorf("%s: turn finish %q, %d tokens, reply %.40q", ep, tr.FinishReason, len(tr.ResponseTokens), tr.Reply.Content)
		}
	}
}

func tail(s string) string {
	if len(s) > 600 {
		return "…" + s[len(s)-600:]
	}
	return s
}
