package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

const okMsgs = `"messages":[{"role":"user","content":"hi"}]`

func TestBadRequests(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.MaxBodyBytes = 64 << 10 })
	type want struct {
		status      int
		typ         string
		code, param string // "" means null
		message     string // a substring, when set
	}
	bad := func(param, code string) want { return want{400, "invalid_request_error", code, param, ""} }
	tools := `"tools":[{"type":"function","function":{"name":"f"}}]`
	cases := []struct {
		name, method, path, body string
		header                   []string
		want                     want
	}{
		{name: "malformed JSON", body: `{"model":`, want: bad("", "")},
		{name: "invalid UTF-8 in content", body: "{\"messages\":[{\"role\":\"user\",\"content\":\"caf\xc3\"}]}", want: bad("", "invalid_encoding")},
		{name: "invalid UTF-8 in a content part", body: "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"\xff\xfe\"}]}]}",
			want: bad("", "invalid_encoding")},
		{name: "model: missing", body: `{` + okMsgs + `}`, want: bad("model", "missing_required_parameter")},
		{name: "model: unknown", body: `{"model":"gpt-4o",` + okMsgs + `}`, want: want{404, "invalid_request_error", "model_not_found", "model", "clawrl-test"}},
		{name: "model: unknown, completions", path: "/v1/completions", body: `{"model":"gpt-4o","prompt":"hi"}`,
			want: want{404, "invalid_request_error", "model_not_found", "model", ""}},
		{name: "model: missing, responses", path: "/v1/responses", body: `{"input":"hi"}`, want: bad("model", "missing_required_parameter")},
		{name: "not an object", body: `[1,2]`, want: bad("", "")},
		{name: "empty body", body: ``, want: bad("", "")},
		{name: "messages of the wrong type", body: `{"messages":"hi"}`, want: bad("messages", "invalid_type")},
		{name: "n of the wrong type", body: `{"n":"2",` + okMsgs + `}`, want: bad("n", "invalid_type")},
		{name: "stream of the wrong type", body: `{"stream":"yes",` + okMsgs + `}`, want: bad("stream", "invalid_type")},
		{name: "no messages", body: `{"messages":[]}`, want: bad("messages", "invalid_value")},
		{name: "missing messages", body: `{"model":"clawrl-test"}`, want: bad("messages", "invalid_value")},
		{name: "unknown role", body: `{"messages":[{"role":"wizard","content":"x"}]}`, want: bad("messages[0].role", "invalid_value")},
		{name: "missing role", body: `{"messages":[{"content":"x"}]}`, want: bad("messages[0].role", "missing_required_parameter")},
		{name: "null message", body: `{"messages":[null]}`, want: bad("messages[0].role", "missing_required_parameter")},
		{name: "tool message without id", body: `{"messages":[{"role":"user","content":"x"},{"role":"tool","content":"y"}]}`,
			want: bad("messages[1].tool_call_id", "missing_required_parameter")},
		{name: "content of the wrong type", body: `{"messages":[{"role":"user","content":5}]}`, want: bad("messages[0].content", "invalid_type")},
		{name: "user content null", body: `{"messages":[{"role":"user","content":null}]}`, want: bad("messages[0].content", "missing_required_parameter")},
		{name: "image part", body: `{"messages":[{"role":"user","content":[{"type":"text","text":"x"},{"type":"image_url","image_url":{"url":"http://x"}}]}]}`,
			want: want{400, "invalid_request_error", "unsupported_content", "messages[0].content[1]", "images are not supported"}},
		{name: "unknown part", body: `{"messages":[{"role":"user","content":[{"type":"hologram"}]}]}`, want: bad("messages[0].content[0].type", "invalid_value")},
		{name: "part not an object", body: `{"messages":[{"role":"user","content":["x"]}]}`, want: bad("messages[0].content[0]", "invalid_type")},
		{name: "tool call without name", body: `{"messages":[{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"arguments":"{}"}}]}]}`,
			want: bad("messages[0].tool_calls[0].function.name", "missing_required_parameter")},
		{name: "tool call arguments of the wrong type", body: `{"messages":[{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":7}}]}]}`,
			want: bad("messages[0].tool_calls[0].function.arguments", "invalid_type")},
		{name: "n zero", body: `{"n":0,` + okMsgs + `}`, want: bad("n", "invalid_value")},
		{name: "n too large", body: `{"n":9,` + okMsgs + `}`, want: bad("n", "invalid_value")},
		{name: "n overflows", body: `{"n":1e30,` + okMsgs + `}`, want: bad("n", "invalid_type")},
		{name: "max_tokens zero", body: `{"max_tokens":0,` + okMsgs + `}`, want: bad("max_tokens", "invalid_value")},
		{name: "max_completion_tokens negative", body: `{"max_completion_tokens":-5,` + okMsgs + `}`, want: bad("max_completion_tokens", "invalid_value")},
		{name: "temperature too high", body: `{"temperature":2.5,` + okMsgs + `}`, want: bad("temperature", "invalid_value")},
		{name: "temperature negative", body: `{"temperature":-0.1,` + okMsgs + `}`, want: bad("temperature", "invalid_value")},
		{name: "top_p too high", body: `{"top_p":1.5,` + okMsgs + `}`, want: bad("top_p", "invalid_value")},
		{name: "top_logprobs too high", body: `{"logprobs":true,"top_logprobs":21,` + okMsgs + `}`, want: bad("top_logprobs", "invalid_value")},
		{name: "top_logprobs without logprobs", body: `{"top_logprobs":2,` + okMsgs + `}`, want: bad("top_logprobs", "invalid_value")},
		{name: "five stop strings", body: `{"stop":["a","b","c","d","e"],` + okMsgs + `}`, want: bad("stop", "invalid_value")},
		{name: "stop of the wrong type", body: `{"stop":5,` + okMsgs + `}`, want: bad("stop", "invalid_type")},
		{name: "tool of another type", body: `{"tools":[{"type":"retrieval"}],` + okMsgs + `}`, want: bad("tools[0].type", "invalid_value")},
		{name: "tool without name", body: `{"tools":[{"type":"function","function":{}}],` + okMsgs + `}`, want: bad("tools[0].function.name", "missing_required_parameter")},
		{name: "required without tools", body: `{"tool_choice":"required",` + okMsgs + `}`, want: bad("tool_choice", "invalid_value")},
		{name: "unknown tool_choice", body: `{"tool_choice":"sometimes",` + tools + `,` + okMsgs + `}`, want: bad("tool_choice", "invalid_value")},
		{name: "named function not among the tools", body: `{"tool_choice":{"type":"function","function":{"name":"g"}},` + tools + `,` + okMsgs + `}`,
			want: bad("tool_choice", "invalid_value")},
		{name: "bad X-Turn-Type", body: `{` + okMsgs + `}`, header: []string{"X-Turn-Type", "sideways"}, want: bad("X-Turn-Type", "invalid_value")},
		{name: "body too large", body: `{"messages":[{"role":"user","content":"` + strings.Repeat("x", 70<<10) + `"}]}`,
			want: want{413, "invalid_request_error", "request_too_large", "", ""}},
		{name: "wrong method", method: "GET", body: ``, want: want{405, "invalid_request_error", "", "", ""}},
		{name: "unknown path", path: "/v1/chat/complete", body: `{}`, want: want{404, "invalid_request_error", "", "", "Invalid URL"}},

		{name: "responses: no input", path: "/v1/responses", body: `{"model":"clawrl-test"}`, want: bad("input", "missing_required_parameter")},
		{name: "responses: input of the wrong type", path: "/v1/responses", body: `{"input":5}`, want: bad("input", "invalid_type")},
		{name: "responses: empty input", path: "/v1/responses", body: `{"input":[]}`, want: bad("input", "invalid_value")},
		{name: "responses: unknown item", path: "/v1/responses", body: `{"input":[{"type":"computer_call"}]}`, want: bad("input[0].type", "invalid_value")},
		{name: "responses: image", path: "/v1/responses", body: `{"input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]}`,
			want: want{400, "invalid_request_error", "unsupported_content", "input[0].content[0]", "images are not supported"}},
		{name: "responses: previous_response_id", path: "/v1/responses", body: `{"input":"x","previous_response_id":"resp_1"}`,
			want: bad("previous_response_id", "unsupported_parameter")},
		{name: "responses: max_output_tokens zero", path: "/v1/responses", body: `{"input":"x","max_output_tokens":0}`, want: bad("max_output_tokens", "invalid_value")},
		{name: "responses: hosted tool", path: "/v1/responses", body: `{"input":"x","tools":[{"type":"web_search"}]}`, want: bad("tools[0].type", "invalid_value")},
		{name: "responses: temperature", path: "/v1/responses", body: `{"input":"x","temperature":3}`, want: bad("temperature", "invalid_value")},

		{name: "completions: no prompt", path: "/v1/completions", body: `{"model":"clawrl-test"}`, want: bad("prompt", "missing_required_parameter")},
		{name: "completions: token id outside the vocabulary", path: "/v1/completions", body: `{"prompt":[1,99999999]}`, want: bad("prompt", "invalid_value")},
		{name: "completions: token id in a list", path: "/v1/completions", body: `{"prompt":[[1],[-1]]}`, want: bad("prompt[1]", "invalid_value")},
		{name: "completions: prompt of the wrong type", path: "/v1/completions", body: `{"prompt":[{"a":1}]}`, want: bad("prompt", "invalid_type")},
		{name: "completions: max_tokens zero without echo", path: "/v1/completions", body: `{"prompt":"x","max_tokens":0}`, want: bad("max_tokens", "invalid_value")},
		{name: "completions: logprobs", path: "/v1/completions", body: `{"prompt":"x","logprobs":6}`, want: bad("logprobs", "invalid_value")},
		{name: "completions: too many choices", path: "/v1/completions", body: `{"prompt":["a","b","c"],"n":3}`, want: bad("prompt", "invalid_value")},

		{name: "feedback: nothing to say", path: "/v1/feedback", body: `{"response_id":"chatcmpl-x"}`, want: bad("thumb", "missing_required_parameter")},
		{name: "feedback: bad thumb", path: "/v1/feedback", body: `{"response_id":"chatcmpl-x","thumb":"sideways"}`, want: bad("thumb", "invalid_value")},
		{name: "feedback: no turn", path: "/v1/feedback", body: `{"thumb":1}`, want: bad("response_id", "missing_required_parameter")},
		{name: "feedback: unknown turn", path: "/v1/feedback", body: `{"response_id":"chatcmpl-nope","thumb":"up"}`,
			want: want{404, "invalid_request_error", "turn_not_found", "response_id", ""}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			method, path := c.method, c.path
			if method == "" {
				method = http.MethodPost
			}
			if path == "" {
				path = "/v1/chat/completions"
			}
			reqBody := c.body
			// Every generation request names the served model, except the
			// cases about the model itself.
			if strings.HasPrefix(reqBody, "{") && len(reqBody) > 2 && !strings.Contains(reqBody, `"model"`) && !strings.HasPrefix(c.name, "model:") {
				reqBody = `{"model":"clawrl-test",` + reqBody[1:]
			}
			resp, body := e.do(method, path, reqBody, c.header...)
			if resp.StatusCode != c.want.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.want.status, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			var got struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    *string `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				t.Fatalf("body %q: %v", body, err)
			}
			deref := func(p *string) string {
				if p == nil {
					return ""
				}
				return *p
			}
			g := got.Error
			if g.Type != c.want.typ || deref(g.Code) != c.want.code || deref(g.Param) != c.want.param || g.Message == "" {
				t.Errorf("error = type %q code %q param %q (%s); want type %q code %q param %q",
					g.Type, deref(g.Code), deref(g.Param), g.Message, c.want.typ, c.want.code, c.want.param)
			}
			if c.want.message != "" && !strings.Contains(g.Message, c.want.message) {
				t.Errorf("message %q lacks %q", g.Message, c.want.message)
			}
		})
	}
	if n := len(e.gen.requests()); n != 0 {
		t.Errorf("%d bad requests reached the generator", n)
	}
}
