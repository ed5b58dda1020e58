package server

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/reward"
	"github.com/clawrl/clawrl/rollout"
	"github.com/clawrl/clawrl/session"
	"github.com/clawrl/clawrl/tokenizer"
)

// TestRenderSpecReproducesPrompt pins the invariant that the teacher and
// the judge see exactly the student's context: for every request shape the
// server records (chat; tools with tool_choice auto, none, required and a
// named function; response_format; chat_template_kwargs; a multi-turn
// replay with tool calls and results; the Responses API), rendering the
// recorded turn's render spec again, after a trip through JSON as the
// store makes it, with an empty hint gives its stored prompt tokens
// exactly; with a hint, the same prompt with the hint in the last user
// message. (Completions take a raw prompt and record no turn.)
func TestRenderSpecReproducesPrompt(t *testing.T) {
	toks := map[string]*tokenizer.Tokenizer{}
	tr, err := trained()
	if err != nil {
		t.Fatal(err)
	}
	toks["trained"] = tr
	if q, err := qwen3(); err == nil && q != nil {
		toks["qwen3"] = q
	} else {
		t.Log("the Qwen3 tokenizer is absent (.cache/qwen3/package/models): its template's enable_thinking is not covered")
	}
	weather := map[string]any{"type": "function", "function": map[string]any{"name": "get_weather", "description": "The weather in a city.",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}}}
	clock := map[string]any{"type": "function", "function": map[string]any{"name": "get_time", "parameters": map[string]any{"type": "object"}}}
	user := func(s string) map[string]any { return map[string]any{"role": "user", "content": s} }
	shapes := []struct {
		name, path string
		body       map[string]any
	}{
		{"chat", "/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "system", "content": "Be brief."}, user("Hi <|im_end|> there.")}}},
		{"tools auto", "/v1/chat/completions", map[string]any{"messages": []any{user("Weather in Paris?")}, "tools": []any{weather, clock}}},
		{"tools none", "/v1/chat/completions", map[string]any{"messages": []any{user("Weather in Paris?")}, "tools": []any{weather}, "tool_choice": "none"}},
		{"tools required", "/v1/chat/completions", map[string]any{"messages": []any{user("Weather in Paris?")}, "tools": []any{weather, clock}, "tool_choice": "required"}},
		{"tools named", "/v1/chat/completions", map[string]any{"messages": []any{user("Weather in Paris?")}, "tools": []any{weather, clock},
			"tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}}},
		{"response_format", "/v1/chat/completions", map[string]any{"messages": []any{user("A city, as JSON.")},
			"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "c", "schema": map[string]any{"type": "object",
				"properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}}}}},
		{"chat_template_kwargs", "/v1/chat/completions", map[string]any{"messages": []any{user("Think, then answer.")},
			"chat_template_kwargs": map[string]any{"enable_thinking": false, "custom_number": 3}}},
		{"multi-turn replay with tools", "/v1/chat/completions", map[string]any{"tools": []any{weather}, "messages": []any{
			map[string]any{"role": "system", "content": "You are an agent."}, user("Weather in Paris?"),
			map[string]any{"role": "assistant", "content": "", "tool_calls": []any{map[string]any{"id": "c1", "type": "function",
				"function": map[string]any{"name": "get_weather", "arguments": `{"city":"Paris"}`}}}},
			map[string]any{"role": "tool", "tool_call_id": "c1", "content": "Sunny, 21 C."}, user("And tomorrow?")}}},
		{"responses", "/v1/responses", map[string]any{"instructions": "Be brief.", "input": []any{user("Weather in Paris?")},
			"tools": []any{map[string]any{"type": "function", "name": "get_weather", "parameters": weather["function"].(map[string]any)["parameters"]}}}},
	}
	for name, tok := range toks {
		t.Run(name, func(t *testing.T) {
			e := newEnvWith(t, tok, func(o *Options) {
				o.ContextLength = 40960
				o.TemplateVars = map[string]any{"server_variable": "on"}
			})
			e.gen.reply = func(prompt string, req rollout.Request) script {
				switch {
				case strings.HasSuffix(prompt, `{"name": "`): // tool_choice required
					return script{text: `get_weather", "arguments": {"city": "Paris"}}` + "\n</tool_call>"}
				case strings.HasSuffix(prompt, `"arguments": `): // a named function
					return script{text: `{"city": "Paris"}}` + "\n</tool_call>"}
				case strings.Contains(prompt, "as JSON"):
					return script{text: `{"city": "Paris"}`}
				}
				return script{text: "Hello there!"}
			}
			for _, sh := range shapes {
				body := sh.body
				body["model"], body["max_tokens"] = "clawrl-test", 40
				raw, _ := json.Marshal(body)
				resp, text := e.post(sh.path, string(raw), "X-Session-Id", "render-"+sh.name, "X-Session-Done", "1")
				if resp.StatusCode != 200 {
					t.Fatalf("%s: %d %s", sh.name, resp.StatusCode, text)
				}
				var turns []*session.Turn
				for _, r := range e.records() {
					if r.Kind == session.KindTurn && r.Turn != nil {
						turns = append(turns, r.Turn)
					}
				}
				if len(turns) != 1 {
					t.Fatalf("%s: %d turns recorded", sh.name, len(turns))
				}
				turn := turns[0]
				// The store keeps the spec as JSON.
				var vars map[string]any
				b, _ := json.Marshal(turn.TemplateVars)
				json.Unmarshal(b, &vars)
				rt := reward.Turn{Messages: turn.Messages, Tools: turn.Tools, TemplateVars: vars, Prefill: turn.Prefill}
				got, err := reward.RenderPrompt(tok, &rt, "")
				if err != nil {
					t.Fatalf("%s: %v", sh.name, err)
				}
				if !slices.Equal(got, turn.PromptTokens) {
					t.Errorf("%s: the render spec gives another prompt:\n got %q\nwant %q", sh.name, tok.Decode(got), tok.Decode(turn.PromptTokens))
					continue
				}
				hinted, err := reward.RenderPrompt(tok, &rt, "Check the forecast first.")
				if err != nil || slices.Equal(hinted, got) || !strings.Contains(tok.Decode(hinted), "Check the forecast first.") {
					t.Errorf("%s: the hinted prompt %q, %v", sh.name, tok.Decode(hinted), err)
				}
				switch sh.name {
				case "tools none":
					if turn.Tools != nil {
						t.Errorf("tool_choice none recorded tools the model never saw")
					}
				case "tools required", "tools named":
					if turn.Prefill == "" {
						t.Errorf("%s: no prefill recorded", sh.name)
					}
				case "chat_template_kwargs":
					if vars["enable_thinking"] != false || vars["server_variable"] != "on" {
						t.Errorf("template variables %v", vars)
					}
				}
			}
		})
	}
}
