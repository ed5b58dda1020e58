package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/clawrl/clawrl/store"
)

// OpenClaw-style tools: Pydantic's Optional (anyOf with null) and
// patternProperties (environment variables), as real agents declare them.
var (
	strictWeatherParams = map[string]any{"type": "object", "properties": map[string]any{
		"city": map[string]any{"type": "string", "maxLength": 24},
		"unit": map[string]any{"anyOf": []any{map[string]any{"type": "string", "enum": []any{"celsius", "fahrenheit"}}, map[string]any{"type": "null"}}}},
		"required": []any{"city", "unit"}, "additionalProperties": false}
	execParams = map[string]any{"type": "object", "properties": map[string]any{
		"command": map[string]any{"type": "string", "maxLength": 40},
		"env": map[string]any{"type": "object", "patternProperties": map[string]any{"^[A-Z_][A-Z0-9_]*$": map[string]any{"type": "string", "maxLength": 20}},
			"additionalProperties": false},
		"timeout": map[string]any{"anyOf": []any{map[string]any{"type": "integer", "minimum": 1, "maximum": 600}, map[string]any{"type": "null"}}}},
		"required": []any{"command"}}
)

// Tool calls through the official Go SDK on the bundled model, 20 seeds
// each: strict tools in auto mode (the call is constrained once the model
// opens it: a declared name, arguments of its schema; they matched in 0
// of 20 before) and a forced call whose fellow tools use anyOf and
// patternProperties (refused before, with a 400 naming anyOf).
func TestToolCallsSDK(t *testing.T) {
	d, model := clientDaemon(t)
	client := openai.NewClient(option.WithBaseURL(d.url+"/v1/"), option.WithAPIKey("none"), option.WithMaxRetries(0))
	ctx := context.Background()
	tools := []openai.ChatCompletionToolUnionParam{
		openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "get_weather", Parameters: strictWeatherParams, Strict: openai.Bool(true)}),
		openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "exec", Parameters: execParams, Strict: openai.Bool(true)}),
		openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "send_email", Parameters: emailParams}),
	}
	vs := map[string]*jsonschema.Schema{
		"get_weather": validator(t, strictWeatherParams), "exec": validator(t, execParams), "send_email": validator(t, emailParams)}
	for _, c := range []struct {
		name   string
		choice openai.ChatCompletionToolChoiceOptionUnionParam
		prompt string
		forced string
	}{
		{"auto", openai.ChatCompletionToolChoiceOptionUnionParam{}, "What is the weather in Paris?", ""},
		{"auto, a shell", openai.ChatCompletionToolChoiceOptionUnionParam{}, "List the files in my home directory.", ""},
		{"forced, fellow tools with anyOf and patternProperties", openai.ChatCompletionToolChoiceOptionUnionParam{OfFunctionToolChoice: &openai.ChatCompletionNamedToolChoiceParam{
			Function: openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "send_email"}}}, "Email Bob about the weather in Paris.", "send_email"},
		{"forced exec", openai.ChatCompletionToolChoiceOptionUnionParam{OfFunctionToolChoice: &openai.ChatCompletionNamedToolChoiceParam{
			Function: openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "exec"}}}, "Run ls with HOME set.", "exec"},
	} {
		t.Run(c.name, func(t *testing.T) {
			calls, valid := 0, 0
			for seed := range int64(20) {
				resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model, Seed: openai.Int(seed),
					Temperature: openai.Float(1), MaxTokens: openai.Int(160), Tools: tools, ToolChoice: c.choice,
					Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(c.prompt)}})
				if err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				m := resp.Choices[0].Message
				if c.forced != "" && (len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != c.forced) {
					t.Errorf("seed %d: forced %s, got %+v", seed, c.forced, m.ToolCalls)
				}
				for _, tc := range m.ToolCalls {
					calls++
					v := vs[tc.Function.Name]
					if v == nil {
						t.Errorf("seed %d: a call of the undeclared %q", seed, tc.Function.Name)
						continue
					}
					if err := validJSON(v, tc.Function.Arguments); err != nil {
						t.Errorf("seed %d: %s(%s): %v", seed, tc.Function.Name, tc.Function.Arguments, err)
						continue
					}
					valid++
				}
			}
			t.Logf("%s: %d of %d tool calls valid over 20 seeds", c.name, valid, calls)
			if calls < 10 {
				t.Errorf("only %d tool calls over 20 seeds: the test does not exercise them", calls)
			}
		})
	}
}

// echo with logprobs on the bundled model: the log-probs of an echoed
// prompt are the model's, the same as those of the tokens it generated in
// that context: a greedy completion's log-probs come back when the prompt
// and the completion are echoed with max_tokens 0.
func TestEchoLogprobsModel(t *testing.T) {
	d, model := clientDaemon(t)
	url := d.url
	type lp struct {
		Choices []struct {
			Text     string `json:"text"`
			Logprobs struct {
				Tokens        []string   `json:"tokens"`
				TokenLogprobs []*float64 `json:"token_logprobs"`
			} `json:"logprobs"`
		} `json:"choices"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	post := func(body string) lp {
		t.Helper()
		resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var out lp
		if resp.StatusCode != 200 || json.Unmarshal(b, &out) != nil || len(out.Choices) != 1 {
			t.Fatalf("%s: %d %s", body, resp.StatusCode, b)
		}
		return out
	}
	prompt := "The capital of France is"
	gen := post(fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":8,"temperature":0,"logprobs":1}`, model, prompt))
	echo := post(fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":0,"echo":true,"logprobs":1}`, model, prompt+gen.Choices[0].Text))
	e := echo.Choices[0].Logprobs
	if echo.Choices[0].Text != prompt+gen.Choices[0].Text || e.TokenLogprobs[0] != nil || len(e.Tokens) != echo.Usage.PromptTokens {
		t.Fatalf("echo: %+v", echo)
	}
	g := gen.Choices[0].Logprobs
	k := len(e.Tokens) - len(g.Tokens) // where the completion's tokens start, if tokenised alike
	if k < 1 || strings.Join(e.Tokens[k:], "") != strings.Join(g.Tokens, "") {
		t.Skipf("the echoed text tokenises differently: %q vs %q", e.Tokens, g.Tokens)
	}
	for i, want := range g.TokenLogprobs {
		got := e.TokenLogprobs[k+i]
		if got == nil || want == nil || *got-*want > 0.02 || *want-*got > 0.02 {
			t.Errorf("token %d %q: echoed log-prob %v, generated %v", i, g.Tokens[i], deref(got), deref(want))
		}
	}
	t.Logf("%d prompt tokens echoed; the completion's %d log-probs agree", echo.Usage.PromptTokens, len(g.Tokens))
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

func firstModel(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var models struct {
		Data []struct{ ID string } `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&models); err != nil || len(models.Data) == 0 {
		t.Fatalf("models: %v", err)
	}
	return models.Data[0].ID
}

// Stored responses are durable: a response continues with
// previous_response_id after the daemon restarts.
func TestResponsesSurviveRestart(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	post := func(url, body string) map[string]any {
		t.Helper()
		resp, err := http.Post(url+"/v1/responses", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || json.Unmarshal(b, &out) != nil {
			t.Fatalf("%s: %d %s", body, resp.StatusCode, b)
		}
		return out
	}
	d, model := clientDaemonIn(t, data)
	first := post(d.url, fmt.Sprintf(`{"model":%q,"input":"My name is Ada.","max_output_tokens":8}`, model))
	if err := d.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	d, _ = clientDaemonIn(t, data)
	url := d.url
	second := post(url, fmt.Sprintf(`{"model":%q,"previous_response_id":%q,"input":"What is my name?","max_output_tokens":8}`, model, first["id"]))
	usage, _ := second["usage"].(map[string]any)
	if in, _ := usage["input_tokens"].(float64); in < 10 {
		t.Errorf("the continued response saw %v input tokens: the earlier turn is missing", usage["input_tokens"])
	}
	resp, err := http.Get(url + "/v1/responses/" + first["id"].(string))
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("GET the first response after the restart: %v %v", err, resp.Status)
	}
}

// A stream still running when the shutdown timeout runs out ends as the
// client can parse it (a finish reason, an error event, [DONE]) and its
// turn is in the store, marked interrupted, after the daemon exits.
func TestShutdownCutStreamStored(t *testing.T) {
	bin := realBinary(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("server:\n  shutdown_timeout: 1s\ntrainer:\n  enabled: false\nreward:\n  votes: 1\n  hint_votes: 0\ndata:\n  dir: %s\n", data)), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, bin, cfg, freePort(t))
	model := firstModel(t, d.url)
	req, _ := http.NewRequest(http.MethodPost, d.url+"/v1/chat/completions", strings.NewReader(fmt.Sprintf(
		`{"model":%q,"stream":true,"max_tokens":20000,"temperature":1,"messages":[{"role":"user","content":"Write a long story to a file."}],`+
			// A call whose argument must be long: the stream outlasts the timeout.
			`"tools":[{"type":"function","function":{"name":"write","parameters":{"type":"object","properties":{"text":{"type":"string","minLength":20000}},"required":["text"]}}}],`+
			`"tool_choice":"required"}`, model)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-Id", "long-story")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil { // the stream has begun
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- d.stop() }()
	rest, _ := io.ReadAll(br)
	body := strings.TrimSpace(string(rest))
	if err := <-stopped; err != nil {
		t.Fatalf("the daemon's exit: %v\n%s", err, d.log)
	}
	if !strings.Contains(body, `"finish_reason":"length"`) || !strings.Contains(body, `"code":"server_shutdown"`) || !strings.HasSuffix(body, "data: [DONE]") {
		t.Fatalf("the cut stream ends with:\n%s", body[max(0, len(body)-800):])
	}
	db, err := store.Open(data, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.SQL().QueryRow(`SELECT COUNT(*) FROM turns WHERE CAST(body AS TEXT) LIKE '%"finish_reason":"interrupted"%'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("interrupted turns stored: %d (%v)", n, err)
	}
}
