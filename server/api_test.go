package server

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/rs/zerolog"

	"github.com/clawrl/clawrl/rollout"
	"github.com/clawrl/clawrl/session"
)

func TestCompletions(t *testing.T) {
	e := newEnv(t)
	e.gen.reply = func(prompt string, _ rollout.Request) script {
		return script{text: " jumps over the lazy dog", cached: 1}
	}
	params := openai.CompletionNewParams{
		Model:     "clawrl-test",
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("The quick brown fox")},
		MaxTokens: openai.Int(64),
		Logprobs:  openai.Int(2),
		Stop:      openai.CompletionNewParamsStopUnion{OfString: openai.String(" lazy")},
	}
	resp, err := e.client.Completions.New(testCtx(t), params)
	if err != nil {
		t.Fatal(err)
	}
	c := resp.Choices[0]
	if c.Text != " jumps over the" || c.FinishReason != "stop" || !strings.HasPrefix(resp.ID, "cmpl-") {
		t.Fatalf("completion = %s", resp.RawJSON())
	}
	if len(c.Logprobs.Tokens) == 0 || len(c.Logprobs.TopLogprobs) != len(c.Logprobs.Tokens) || c.Logprobs.TextOffset[0] != 0 {
		t.Fatalf("logprobs = %s", c.Logprobs.RawJSON())
	}
	if prompt := e.gen.tok.Decode(e.gen.requests()[0].Prompt); prompt != "The quick brown fox" {
		t.Fatalf("a completion prompt must not get the chat template: %q", prompt)
	}
	// Streamed, with usage and two prompts.
	params.Prompt = openai.CompletionNewParamsPromptUnion{OfArrayOfStrings: []string{"a", "b"}}
	params.Logprobs = param.Opt[int64]{}
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	s := e.client.Completions.NewStreaming(testCtx(t), params)
	texts := map[int64]string{}
	var usage openai.CompletionUsage
	for s.Next() {
		ck := s.Current()
		for _, ch := range ck.Choices {
			texts[ch.Index] += ch.Text
		}
		if ck.Usage.TotalTokens > 0 {
			usage = ck.Usage
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if texts[0] != " jumps over the" || texts[1] != " jumps over the" || usage.PromptTokens == 0 {
		t.Fatalf("streamed %v, usage %+v", texts, usage)
	}
	if recs := e.records(); len(recs) != 0 {
		t.Fatalf("completions must not be recorded, got %d records", len(recs))
	}
}

func TestModelsHealthReady(t *testing.T) {
	e := newEnv(t)
	e.version.Store(12)
	page, err := e.client.Models.List(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 1 || page.Data[0].ID != "clawrl-test" || page.Data[0].OwnedBy != "clawrl" ||
		page.Data[0].JSON.ExtraFields["weight_version"].Raw() != "12" {
		t.Fatalf("models = %s", page.RawJSON())
	}
	m, err := e.client.Models.Get(testCtx(t), "clawrl-test")
	if err != nil || m.ID != "clawrl-test" {
		t.Fatalf("model = %v, %v", m, err)
	}
	if _, err := e.client.Models.Get(testCtx(t), "gpt-9"); err == nil {
		t.Fatal("an unknown model should be 404")
	}
	e.ready.Store(false)
	for _, c := range []struct {
		path string
		want int
	}{{"/healthz", 200}, {"/readyz", 503}} {
		if resp, _ := e.do(http.MethodGet, c.path, ""); resp.StatusCode != c.want {
			t.Errorf("%s = %d, want %d", c.path, resp.StatusCode, c.want)
		}
	}
	resp, body := e.post("/v1/chat/completions", `{"model":"clawrl-test","messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, `"type":"server_error"`) {
		t.Fatalf("not ready: %d %s", resp.StatusCode, body)
	}
	e.ready.Store(true)
	if resp, _ := e.do(http.MethodGet, "/readyz", ""); resp.StatusCode != 200 {
		t.Fatalf("/readyz = %d once ready", resp.StatusCode)
	}
}

func TestAuth(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.APIKeys = []string{"sk-one", "sk-two"} })
	for _, key := range []string{"sk-one", "sk-two"} {
		c := e.newClient(option.WithAPIKey(key))
		if _, err := c.Chat.Completions.New(testCtx(t), chatParams(openai.UserMessage("hi"))); err != nil {
			t.Fatalf("key %s: %v", key, err)
		}
	}
	c := e.newClient(option.WithAPIKey("sk-wrong"))
	_, err := c.Chat.Completions.New(testCtx(t), chatParams(openai.UserMessage("hi")))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 || apiErr.Code != "invalid_api_key" || apiErr.Type != "invalid_request_error" {
		t.Fatalf("wrong key: %v", err)
	}
	cases := []struct {
		method, path string
		header       []string
		want         int
	}{
		{"POST", "/v1/chat/completions", nil, 401},
		{"POST", "/v1/chat/completions", []string{"Authorization", "sk-one"}, 401},
		{"POST", "/v1/chat/completions", []string{"Authorization", "Bearer sk-on"}, 401},
		{"GET", "/v1/models", nil, 401},
		{"GET", "/metrics", nil, 401},
		{"POST", "/v1/feedback", nil, 401},
		{"GET", "/v1/models", []string{"Authorization", "Bearer sk-two"}, 200},
		{"GET", "/healthz", nil, 200},
		{"GET", "/readyz", nil, 200},
	}
	for _, c := range cases {
		resp, body := e.do(c.method, c.path, `{}`, c.header...)
		if resp.StatusCode != c.want {
			t.Errorf("%s %s %v = %d, want %d (%s)", c.method, c.path, c.header, resp.StatusCode, c.want, body)
		}
		if c.want == 401 && !strings.Contains(body, `"code":"invalid_api_key"`) {
			t.Errorf("401 body = %s", body)
		}
	}
}

func TestOverload(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.RetryAfter = 2e9 })
	e.gen.full.Store(true)
	for _, stream := range []string{"false", "true"} {
		resp, body := e.post("/v1/chat/completions", `{"model":"clawrl-test","stream":`+stream+`,"messages":[{"role":"user","content":"hi"}]}`)
		if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "2" ||
			!strings.Contains(body, `"code":"rate_limit_exceeded"`) || !strings.Contains(body, `"type":"requests"`) {
			t.Fatalf("stream %s: %d %v %s", stream, resp.StatusCode, resp.Header, body)
		}
	}
	// The SDK sees a rate-limit error (no retries in these tests).
	_, err := e.client.Chat.Completions.New(testCtx(t), chatParams(openai.UserMessage("hi")))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 {
		t.Fatalf("err = %v", err)
	}
}

func TestPanicRecovered(t *testing.T) {
	e := newEnv(t)
	e.gen.reply = func(string, rollout.Request) script { panic("boom") }
	resp, body := e.post("/v1/chat/completions", `{"model":"clawrl-test","messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 500 || !strings.Contains(body, `"type":"server_error"`) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	e.gen.reply = func(string, rollout.Request) script { return script{text: "fine"} }
	if resp, body := e.post("/v1/chat/completions", `{"model":"clawrl-test","messages":[{"role":"user","content":"hi"}]}`); resp.StatusCode != 200 {
		t.Fatalf("after a panic: %d %s", resp.StatusCode, body)
	}
}

// metricValue finds a sample in the Prometheus text output.
func metricValue(t *testing.T, e *env, pattern string) float64 {
	t.Helper()
	_, body := e.do(http.MethodGet, "/metrics", "")
	m := regexp.MustCompile(`(?m)^` + pattern + ` ([0-9.e+-]+)$`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("metric %s not found in:\n%s", pattern, body)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestMetrics(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Sink = session.NewChanSink(1) })
	// Three sessions, each closed at once: three turns completed, the
	// one-slot sink takes the first, the others are dropped.
	for i := range 3 {
		resp, body := e.post("/v1/chat/completions", `{"model":"clawrl-test","messages":[{"role":"user","content":"hi"}]}`,
			"X-Session-Id", "s"+strconv.Itoa(i), "X-Session-Done", "1")
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	}
	e.post("/v1/chat/completions", `{}`)
	checks := []struct {
		pattern string
		want    float64
	}{
		{`clawrl_http_requests_total\{code="200",endpoint="/v1/chat/completions"\}`, 3},
		{`clawrl_http_requests_total\{code="400",endpoint="/v1/chat/completions"\}`, 1},
		{`clawrl_turns_recorded_total`, 3},
		{`clawrl_turns_dropped_total`, 2},
		{`clawrl_time_to_first_token_seconds_count\{endpoint="chat.completions"\}`, 3},
		{`clawrl_http_requests_in_flight`, 1}, // the /metrics request itself
		{`clawrl_weight_version`, 7},
	}
	for _, c := range checks {
		if got := metricValue(t, e, c.pattern); got != c.want {
			t.Errorf("%s = %v, want %v", c.pattern, got, c.want)
		}
	}
	if got := metricValue(t, e, `clawrl_generated_tokens_total\{endpoint="chat.completions"\}`); got < 3 {
		t.Errorf("generated tokens = %v", got)
	}
}

func TestModelIDWithSlash(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.ModelID = "Qwen/Qwen3-0.6B" })
	m, err := e.client.Models.Get(testCtx(t), "Qwen/Qwen3-0.6B")
	if err != nil || m.ID != "Qwen/Qwen3-0.6B" {
		t.Fatalf("model = %v, %v", m, err)
	}
}

func TestReaderPanicBecomesError(t *testing.T) {
	s := &Server{log: zerolog.Nop(), stopSet: map[int32]bool{}} // no tokenizer: decoding panics
	events := make(chan rollout.Event, 2)
	events <- rollout.Event{Token: 1, HasToken: true}
	events <- rollout.Event{Token: 2, HasToken: true, Finish: rollout.FinishStop}
	close(events)
	o := s.runSafe(&generation{job: job{index: 3, chat: true}, events: events, cancel: func() {}}, nil)
	if o.index != 3 || o.err == nil || !strings.Contains(o.err.Error(), "internal error") {
		t.Fatalf("output = %+v", o)
	}
}

// TestCancelledWithoutFinal: a cancelled generation whose channel ends
// without its final event (the mailbox offers it without waiting, and a
// reader far behind may miss it) ends as cancelled, which a shutdown then
// reports as cut; without a cancellation the missing event is an error.
func TestCancelledWithoutFinal(t *testing.T) {
	e := newEnv(t)
	for _, cancelled := range []bool{true, false} {
		ctx, cancel := context.WithCancel(context.Background())
		if cancelled {
			cancel()
		}
		events := make(chan rollout.Event, 2)
		events <- rollout.Event{Token: 5, HasToken: true}
		close(events)
		o := e.srv.runSafe(&generation{job: job{chat: true}, events: events, ctx: ctx, cancel: cancel}, nil)
		cancel()
		switch {
		case cancelled && (o.err != nil || o.finish != ""):
			t.Errorf("cancelled: err %v, finish %q; want neither (cancelled)", o.err, o.finish)
		case !cancelled && (o.err == nil || !strings.Contains(o.err.Error(), "without a final event")):
			t.Errorf("not cancelled: err %v", o.err)
		}
	}
}

// TestModelAliases: a request may name the served model by an alias from
// Options.ModelAliases, or by any name with "*".
func TestModelAliases(t *testing.T) {
	for _, tt := range []struct {
		aliases []string
		model   string
		status  int
	}{
		{nil, "clawrl-test", 200},
		{nil, "gpt-4o", 404},
		{[]string{"gpt-4o"}, "gpt-4o", 200},
		{[]string{"gpt-4o"}, "o3", 404},
		{[]string{"*"}, "anything/at-all", 200},
		{[]string{"*"}, "", 400},
	} {
		e := newEnv(t, func(o *Options) { o.ModelAliases = tt.aliases })
		resp, body := e.do(http.MethodPost, "/v1/chat/completions", `{"model":"`+tt.model+`","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`)
		if resp.StatusCode != tt.status {
			t.Errorf("aliases %v, model %q: status %d, want %d: %s", tt.aliases, tt.model, resp.StatusCode, tt.status, body)
		}
	}
}
