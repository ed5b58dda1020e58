package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/clawrl/clawrl/rollout"
)

func TestConcurrentStreams(t *testing.T) {
	e := newEnv(t)
	who := regexp.MustCompile(`client (\d+)`)
	e.gen.reply = func(prompt string, _ rollout.Request) script {
		m := who.FindAllStringSubmatch(prompt, -1)
		return script{text: "Reply for client " + m[len(m)-1][1] + ".", delay: time.Millisecond}
	}
	const clients = 32
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		wg.Go(func() {
			params := chatParams(openai.UserMessage(fmt.Sprintf("I am client %d", i)))
			params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			s := e.client.Chat.Completions.NewStreaming(testCtx(t), params, option.WithHeader("X-Session-Id", fmt.Sprint("c", i)))
			var content strings.Builder
			usage := false
			for s.Next() {
				ck := s.Current()
				for _, c := range ck.Choices {
					content.WriteString(c.Delta.Content)
				}
				usage = usage || ck.Usage.TotalTokens > 0
			}
			if err := s.Err(); err != nil {
				errs <- err
				return
			}
			if want := fmt.Sprintf("Reply for client %d.", i); content.String() != want || !usage {
				errs <- fmt.Errorf("client %d got %q (usage %v)", i, content.String(), usage)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := metricValue(t, e, `clawrl_turns_recorded_total`); got != clients {
		t.Errorf("recorded %v turns, want %d", got, clients)
	}
}

func TestDisconnectCancelsGeneration(t *testing.T) {
	for _, path := range []string{"/v1/chat/completions", "/v1/responses", "/v1/completions"} {
		t.Run(path, func(t *testing.T) {
			e := newEnv(t)
			e.gen.reply = func(string, rollout.Request) script { return script{endless: true, delay: 2 * time.Millisecond} }
			body := `{"model":"clawrl-test","stream":true,` + okMsgs + `,"input":"x","prompt":"x","max_tokens":3000}`
			if path == "/v1/completions" {
				body = `{"model":"clawrl-test","stream":true,"prompt":"x","max_tokens":3000}`
			}
			ctx, cancel := context.WithCancel(testCtx(t))
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.ts.URL+path, strings.NewReader(body))
			resp, err := e.ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			r := bufio.NewReader(resp.Body)
			for range 10 { // a few events arrive
				if _, err := r.ReadString('\n'); err != nil {
					t.Fatal(err)
				}
			}
			left := time.Now()
			cancel()
			select {
			case at := <-e.gen.cancelled:
				if d := at.Sub(left); d > time.Second {
					t.Errorf("the generation noticed the disconnect after %v", d)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the generation was not cancelled after the client left")
			}
			deadline := time.Now().Add(5 * time.Second)
			for e.gen.active.Load() != 0 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if n := e.gen.active.Load(); n != 0 {
				t.Fatalf("%d generations still running", n)
			}
			if recs := e.records(); len(recs) != 0 {
				t.Fatalf("an abandoned turn was recorded")
			}
		})
	}
}

// serve runs srv.Serve on a loopback listener until the returned stop is
// called; stop returns Serve's error.
func serve(t *testing.T, srv *Server) (url string, stop func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	var once sync.Once
	var serr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case serr = <-done:
			case <-time.After(10 * time.Second):
				serr = fmt.Errorf("Serve did not return")
			}
		})
		return serr
	}
	t.Cleanup(func() { _ = stop() })
	return "http://" + ln.Addr().String(), stop
}

func TestServeGracefulShutdown(t *testing.T) {
	t.Run("in-flight streams finish", func(t *testing.T) {
		e := newEnv(t)
		text := strings.Repeat("tick ", 20)
		e.gen.reply = func(string, rollout.Request) script { return script{text: text, delay: 5 * time.Millisecond} }
		url, stop := serve(t, e.srv)
		c := openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("k"), option.WithMaxRetries(0))
		s := c.Chat.Completions.NewStreaming(testCtx(t), chatParams(openai.UserMessage("x")), option.WithHeader("X-Session-Id", "g"))
		if !s.Next() {
			t.Fatalf("no first chunk: %v", s.Err())
		}
		stopped := make(chan error, 1)
		go func() { stopped <- stop() }()
		var content strings.Builder
		for s.Next() {
			for _, ch := range s.Current().Choices {
				content.WriteString(ch.Delta.Content)
			}
		}
		if err := s.Err(); err != nil || content.String() != text {
			t.Fatalf("stream ended with %v after %q", err, content.String())
		}
		if err := <-stopped; err != nil {
			t.Fatalf("Serve: %v", err)
		}
		// The pending turn was emitted at shutdown.
		recs := e.records()
		if len(recs) != 1 || recs[0].Turn.End != "shutdown" {
			t.Fatalf("records after shutdown: %d", len(recs))
		}
	})
	t.Run("deadline cancels the rest", func(t *testing.T) {
		e := newEnv(t, func(o *Options) { o.ShutdownTimeout = 100 * time.Millisecond })
		e.gen.reply = func(string, rollout.Request) script { return script{endless: true, delay: 2 * time.Millisecond} }
		url, stop := serve(t, e.srv)
		resp, err := http.Post(url+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"clawrl-test","stream":true,"max_tokens":3000,`+okMsgs+`}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := stop(); err != nil {
			t.Fatalf("Serve: %v", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("shutdown took %v", d)
		}
		select {
		case <-e.gen.cancelled:
		case <-time.After(5 * time.Second):
			t.Fatal("the endless generation was not cancelled")
		}
	})
}

func TestKeepAlive(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.KeepAlive = 5 * time.Millisecond })
	e.gen.reply = func(string, rollout.Request) script { return script{text: "slow", delay: 40 * time.Millisecond} }
	resp, body := e.post("/v1/chat/completions", `{"model":"clawrl-test","stream":true,`+okMsgs+`}`)
	if resp.StatusCode != 200 || !strings.Contains(body, ": keep-alive\n\n") || !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	// The SDK skips the comments.
	s := e.client.Chat.Completions.NewStreaming(testCtx(t), chatParams(openai.UserMessage("x")))
	var content strings.Builder
	for s.Next() {
		for _, c := range s.Current().Choices {
			content.WriteString(c.Delta.Content)
		}
	}
	if s.Err() != nil || content.String() != "slow" {
		t.Fatalf("content %q, err %v", content.String(), s.Err())
	}
}
