package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/grammar"
	"github.com/clawrl/clawrl/rollout"
	"github.com/clawrl/clawrl/tokenizer"
)

// Tool schemas as clients send them: OpenClaw-style tools with anyOf
// (Pydantic's Optional) and patternProperties, a tool with a keyword
// constrained decoding cannot follow, and a strict tool.
const (
	toolWeather = `{"type":"function","function":{"name":"get_weather","strict":true,"parameters":{"type":"object",` +
		`"properties":{"city":{"type":"string","maxLength":20},"unit":{"anyOf":[{"type":"string","enum":["c","f"]},{"type":"null"}]}},` +
		`"required":["city","unit"],"additionalProperties":false}}}`
	toolExec = `{"type":"function","function":{"name":"exec","parameters":{"type":"object","properties":{"cmd":{"type":"string"},` +
		`"env":{"type":"object","patternProperties":{"^[A-Z_]+$":{"type":"string"}},"additionalProperties":false},` +
		`"timeout":{"anyOf":[{"type":"integer"},{"type":"null"}]}},"required":["cmd"]}}}`
	toolUnique       = `{"type":"function","function":{"name":"tag","parameters":{"type":"object","properties":{"tags":{"type":"array","uniqueItems":true}}}}}`
	toolUniqueStrict = `{"type":"function","function":{"name":"tag","strict":true,"parameters":{"type":"object","properties":{"tags":{"type":"array","uniqueItems":true}}}}}`
)

// The tool choice decides which schemas must be followed: the forced
// function's only (another tool's schema does not matter), a strict
// tool's always; in auto mode a call is constrained once it starts.
func TestToolSchemasByChoice(t *testing.T) {
	e := newEnv(t)
	forced := func(name string) string { return fmt.Sprintf(`{"type":"function","function":{"name":%q}}`, name) }
	for _, c := range []struct {
		name, tools, choice string
		status              int
		want                string // in the error, or the constraint's type
	}{
		{"forced, another tool has anyOf and patternProperties", toolWeather + "," + toolExec, forced("get_weather"), 200, "*grammar.Constraint"},
		{"forced tool with anyOf and patternProperties", toolWeather + "," + toolExec, forced("exec"), 200, "*grammar.Constraint"},
		{"forced, another tool has an unsupported keyword", toolWeather + "," + toolUnique, forced("get_weather"), 200, "*grammar.Constraint"},
		{"forced tool has an unsupported keyword", toolWeather + "," + toolUnique, forced("tag"), 400, "uniqueItems"},
		{"required sets aside a tool it cannot follow", toolUnique + "," + toolExec, `"required"`, 200, "*grammar.Constraint"},
		{"required with no tool it can follow", toolUnique, `"required"`, 400, "uniqueItems"},
		{"auto, strict tool it cannot follow", toolWeather + "," + toolUniqueStrict, `"auto"`, 400, "strict"},
		{"auto, non-strict tool it cannot follow", toolWeather + "," + toolUnique, `"auto"`, 200, "*grammar.Lazy"},
		{"auto by default", toolWeather, `null`, 200, "*grammar.Lazy"},
		{"none", toolWeather + "," + toolUniqueStrict, `"none"`, 200, "<nil>"},
	} {
		before := len(e.gen.requests())
		resp, body := e.post("/v1/chat/completions", `{"model":"clawrl-test",`+okMsgs+`,"max_tokens":5,"tools":[`+c.tools+`],"tool_choice":`+c.choice+`}`)
		if resp.StatusCode != c.status {
			t.Errorf("%s: %d %s", c.name, resp.StatusCode, body)
			continue
		}
		if c.status != 200 {
			if !strings.Contains(body, c.want) {
				t.Errorf("%s: %s does not name %q", c.name, body, c.want)
			}
			continue
		}
		reqs := e.gen.requests()
		if len(reqs) != before+1 {
			t.Fatalf("%s: %d generations", c.name, len(reqs)-before)
		}
		if got := fmt.Sprintf("%T", reqs[len(reqs)-1].Constraint); got != c.want {
			t.Errorf("%s: constraint %s, want %s", c.name, got, c.want)
		}
	}
}

// allowedPrefix feeds the tokens of text to c as far as it allows them
// and returns the text it took.
func allowedPrefix(e *env, c rollout.Constraint, text string) string {
	var took []int32
	for _, id := range e.srv.tok.Encode(text) {
		if !c.Allow(id) {
			break
		}
		c.Accept(id)
		took = append(took, id)
	}
	return e.srv.tok.Decode(took)
}

// In auto mode the reply is free text until the model opens a tool call;
// from "<tool_call>" on it can only name a declared tool with arguments
// of its schema (strict or not), and it is free again after the call.
func TestAutoToolCallConstrained(t *testing.T) {
	e := newEnv(t)
	resp, body := e.post("/v1/chat/completions", `{"model":"clawrl-test",`+okMsgs+`,"max_tokens":5,"tools":[`+toolWeather+`,`+toolExec+`]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	req := e.gen.requests()[0]
	if _, ok := req.Constraint.(*grammar.Lazy); !ok {
		t.Fatalf("auto mode generates without a tool-call grammar: %T", req.Constraint)
	}
	for _, tc := range []struct{ text, took string }{
		{"Sure, let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>\nDone.",
			"Sure, let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>\nDone."},
		{"<tool_call>\n{\"name\": \"exec\", \"arguments\": {\"cmd\": \"ls\", \"env\": {\"HOME\": \"/\"}, \"timeout\": null}}\n</tool_call>",
			"<tool_call>\n{\"name\": \"exec\", \"arguments\": {\"cmd\": \"ls\", \"env\": {\"HOME\": \"/\"}, \"timeout\": null}}\n</tool_call>"},
		// An undeclared function, an undeclared key, a value outside
		// the enum, a lower-case environment name: cut where they start.
		{"<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {}}\n</tool_call>", "<tool_call>\n{\"name\": \""},
		{"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"town\": \"Paris\"}}", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\""},
		{"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"k\"}}", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \""},
		{"<tool_call>\n{\"name\": \"exec\", \"arguments\": {\"cmd\": \"ls\", \"env\": {\"home\": \"/\"}}}", "<tool_call>\n{\"name\": \"exec\", \"arguments\": {\"cmd\": \"ls\", \"env\": {\""},
		// A call may not be left open: the required unit is missing.
		{"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
			"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\""},
	} {
		conv := mustConv(t, e)
		got := allowedPrefix(e, e.srv.constraint(conv, grammarFor(conv, syntaxHermes), false), tc.text)
		// Tokens may cross the cut: the text taken is the longest
		// allowed token prefix, which ends at or before the cut.
		if !strings.HasPrefix(tc.took, got) || len(tc.took)-len(got) > 12 || (tc.took == tc.text && got != tc.text) {
			t.Errorf("%q:\n took %q\n want %q", tc.text, got, tc.took)
		}
	}
}

// mustConv is the conversation of an auto-mode request with the weather
// and exec tools.
func mustConv(t *testing.T, e *env) *conversation {
	t.Helper()
	var req chatRequest
	r, _ := http.NewRequest(http.MethodPost, "/", strings.NewReader(`{"model":"clawrl-test",`+okMsgs+`,"tools":[`+toolWeather+`,`+toolExec+`]}`))
	if ae := decodeBody(r, 1<<20, &req); ae != nil {
		t.Fatal(ae)
	}
	conv, ae := req.conversation()
	if ae != nil {
		t.Fatal(ae)
	}
	return conv
}

// llama3ToolTemplate is the part of Llama 3.1's chat template that
// matters here: it tells the model to answer a tool call as bare JSON.
const llama3ToolTemplate = `{{- bos_token }}{%- if tools is not none %}{{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}. Do not use variables.\n\n' }}{%- for t in tools %}{{- t | tojson }}{{- '\n\n' }}{%- endfor %}{%- endif %}{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + (message['content'] or '') + '<|eot_id|>' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif %}`

// TestLlamaToolCalls: with a chat template that teaches Llama 3.1's
// syntax, a reply that is {"name": ..., "parameters": ...} comes back as
// a tool call (finish_reason tool_calls), streamed or not; a plain reply
// is content.
func TestLlamaToolCalls(t *testing.T) {
	base, err := trained()
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := json.Marshal(map[string]any{"chat_template": llama3ToolTemplate, "eos_token": "<|im_end|>"})
	tok, err := tokenizer.FromFiles(base.TokenizerJSON(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, tok)
	if e.srv.callSyntax != syntaxJSON {
		t.Fatalf("the Llama 3.1 template reads as syntax %d", e.srv.callSyntax)
	}
	reply := `{"name": "get_weather", "parameters": {"city": "Paris", "unit": "c"}}`
	e.gen.reply = func(string, rollout.Request) script { return script{text: reply} }
	body := `{"model":"clawrl-test",` + okMsgs + `,"max_tokens":64,"tools":[` + toolWeather + `]}`
	resp, out := e.post("/v1/chat/completions", body)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	var r struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
			Message      struct {
				Content   *string `json:"content"`
				ToolCalls []struct {
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	m := r.Choices[0].Message
	if r.Choices[0].FinishReason != "tool_calls" || len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != "get_weather" ||
		m.ToolCalls[0].Function.Arguments != `{"city": "Paris", "unit": "c"}` || m.Content != nil && *m.Content != "" {
		t.Errorf("reply %s", out)
	}
	// Streamed: the call arrives as tool_calls deltas.
	resp, out = e.post("/v1/chat/completions", strings.Replace(body, `"max_tokens":64`, `"max_tokens":64,"stream":true`, 1))
	if resp.StatusCode != 200 || !strings.Contains(out, `"tool_calls"`) || !strings.Contains(out, `"finish_reason":"tool_calls"`) || strings.Contains(out, `"content":"{`) {
		t.Errorf("stream %d: %s", resp.StatusCode, out)
	}
	// Two calls; parallel_tool_calls: false keeps the first.
	e.gen.reply = func(string, rollout.Request) script {
		return script{text: reply + `; {"name": "get_weather", "parameters": {"city": "Rome", "unit": "c"}}`}
	}
	long := strings.Replace(body, `"max_tokens":64`, `"max_tokens":400`, 1)
	if _, out = e.post("/v1/chat/completions", long); strings.Count(out, `"get_weather"`) != 2 {
		t.Errorf("two calls: %s", out)
	}
	one := strings.Replace(body, `"max_tokens":64`, `"max_tokens":400,"parallel_tool_calls":false`, 1)
	if _, out = e.post("/v1/chat/completions", one); strings.Count(out, `"get_weather"`) != 1 || strings.Contains(out, "Rome") {
		t.Errorf("parallel_tool_calls false: %s", out)
	}
	// A forced call is prefilled and held to the grammar in the model's
	// syntax: {"name": ..., "parameters": ...}, then the end of the turn.
	for _, c := range []struct {
		choice, prefill, reply string
	}{
		{`{"type":"function","function":{"name":"get_weather"}}`, `{"name": "get_weather", "parameters": `, `{"city": "Oslo", "unit": "c"}}`},
		{`"required"`, `{"name": "`, `get_weather", "parameters": {"city": "Oslo", "unit": "c"}}`},
	} {
		e.gen.reply = func(string, rollout.Request) script { return script{text: c.reply} }
		before := len(e.gen.requests())
		_, out = e.post("/v1/chat/completions", strings.Replace(long, `"tools"`, `"tool_choice":`+c.choice+`,"tools"`, 1))
		req := e.gen.requests()[before]
		if prompt := tok.Decode(req.Prompt); !strings.HasSuffix(prompt, c.prefill) {
			t.Errorf("%s: the prompt ends %q, want the prefill %q", c.choice, prompt[max(0, len(prompt)-60):], c.prefill)
		}
		if _, ok := req.Constraint.(*grammar.Constraint); !ok {
			t.Errorf("%s: constraint %T", c.choice, req.Constraint)
		}
		if !strings.Contains(out, `"arguments":"{\"city\": \"Oslo\", \"unit\": \"c\"}"`) || !strings.Contains(out, `"finish_reason":"tool_calls"`) {
			t.Errorf("%s: %s", c.choice, out)
		}
		// The grammar takes the call in this syntax, and not in Hermes tags.
		conv := mustConv(t, e)
		conv.choice.mode = "required"
		if err := conv.compileToolSchemas(); err != nil {
			t.Fatal(err)
		}
		g := e.srv.constraint(conv, grammarFor(conv, syntaxJSON), false)
		call := `get_weather", "parameters": {"city": "Oslo", "unit": "c"}}; {"name": "exec", "parameters": {"cmd": "ls"}}`
		if got := allowedPrefix(e, g, call); got != call {
			t.Errorf("the JSON-syntax grammar took %q of %q", got, call)
		}
		hermes := `get_weather", "arguments": {"city": "Oslo", "unit": "c"}}` + "\n</tool_call>"
		if got := allowedPrefix(e, e.srv.constraint(conv, grammarFor(conv, syntaxJSON), false), hermes); got == hermes {
			t.Errorf("the JSON-syntax grammar took Hermes's %q", got)
		}
	}
	// Mistral's form: a list of calls, closed by "]".
	conv := mustConv(t, e)
	conv.choice.mode = "required"
	if err := conv.compileToolSchemas(); err != nil {
		t.Fatal(err)
	}
	if f := syntaxMistral.form(); f.prefill("") != `[TOOL_CALLS] [{"name": "` {
		t.Errorf("Mistral's prefill %q", f.prefill(""))
	}
	mistral := `get_weather", "arguments": {"city": "Oslo", "unit": "c"}}, {"name": "exec", "arguments": {"cmd": "ls"}}]`
	if got := allowedPrefix(e, e.srv.constraint(conv, grammarFor(conv, syntaxMistral), false), mistral); got != mistral {
		t.Errorf("the Mistral grammar took %q of %q", got, mistral)
	}
	// The Responses API reads the same reply as a function_call item.
	e.gen.reply = func(string, rollout.Request) script { return script{text: reply} }
	resp, out = e.post("/v1/responses", `{"model":"clawrl-test","input":"Weather in Paris?","max_output_tokens":400,"tools":[{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string"}}}}]}`)
	if resp.StatusCode != 200 || !strings.Contains(out, `"type":"function_call"`) || !strings.Contains(out, `"name":"get_weather"`) {
		t.Errorf("responses: %d %s", resp.StatusCode, out)
	}
	// A plain reply is content.
	e.gen.reply = func(string, rollout.Request) script { return script{text: "It is sunny."} }
	if _, out = e.post("/v1/chat/completions", body); !strings.Contains(out, `"content":"It is sunny."`) || strings.Contains(out, "tool_calls") {
		t.Errorf("plain reply: %s", out)
	}
}
