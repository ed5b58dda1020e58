package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// fuzzBodies are seeds for the request fuzzers: valid requests, near
// misses and junk.
var fuzzBodies = []string{
	`{"model":"clawrl-test","messages":[{"role":"user","content":"hi"}]}`,
	`{"model":"clawrl-test","stream":true,"stream_options":{"include_usage":true},"n":2,"seed":3,"stop":["x"],"logprobs":true,"top_logprobs":2,"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"}]}]}`,
	`{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},{"role":"tool","tool_call_id":"a","content":"r"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":{"type":"function","function":{"name":"f"}}}`,
	`{"messages":[{"role":"developer","content":"d"},{"role":"user","content":"u"}],"tool_choice":"required","tools":[{"type":"function","function":{"name":"g"}}],"parallel_tool_calls":false}`,
	`{"messages":[{"role":"user","content":"u"}],"max_tokens":0,"temperature":9}`,
	`{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}`,
	`{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"enable_thinking":false}}`,
	`{"input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"o"}],"instructions":"i","tools":[{"type":"function","name":"f"}]}`,
	`{"messages":[{"role":"user","content":"\u0000\ud800"}],"stop":"","n":null}`,
	`{"messages":[{}]}`, `{"messages":null}`, `[]`, `{`, ``, `null`, `{"messages":[1,2]}`,
	`{"input":[{"type":"item_reference","id":"msg_1"},{"role":"user","content":"u"}],"store":false}`,
	`{"input":"u","previous_response_id":"resp_1","tools":[{"type":"function","name":"f","strict":true,"parameters":{"type":"object","properties":{"a":{"anyOf":[{"type":"string"},{"type":"null"}]}}}}]}`,
	`{"input":[{"id":"fc_1"}],"tool_choice":"auto","tools":[{"type":"function","name":"f","parameters":{"$ref":"#/$defs/x","$defs":{"x":{"type":"object"}}}}]}`,
	`{"prompt":[1,2,3],"echo":true,"logprobs":2,"max_tokens":0}`,
	`{"prompt":[[1],[2,3]],"echo":true,"logprobs":0,"stream":true}`,
	`{"prompt":"x","echo":true,"max_tokens":0}`,
}

// fuzzHandler checks that a body never panics the server nor gets a 5xx.
func fuzzHandler(f *testing.F, path string) {
	e := newEnv(f, func(o *Options) { o.ContextLength = 2048; o.DefaultMaxTokens = 64; o.Responses = &memResponses{} })
	h := e.srv.Handler()
	for _, b := range fuzzBodies {
		f.Add(b, "")
	}
	f.Add(`{"messages":[{"role":"user","content":"hi"}]}`, "side")
	f.Fuzz(func(t *testing.T, body, turnType string) {
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		req.Header.Set("X-Turn-Type", turnType)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body.String())
		}
		if rec.Code != 200 && !strings.Contains(rec.Body.String(), `"error"`) {
			t.Fatalf("status %d without an error body: %s", rec.Code, rec.Body.String())
		}
	})
}

func FuzzChatRequest(f *testing.F)      { fuzzHandler(f, "/v1/chat/completions") }
func FuzzResponsesRequest(f *testing.F) { fuzzHandler(f, "/v1/responses") }

func FuzzCompletionsRequest(f *testing.F) { fuzzHandler(f, "/v1/completions") }
