package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/clawrl/clawrl/rollout"
)

var alnumID = regexp.MustCompile(`^[A-Za-z0-9]+$`)

func chatParams(msgs ...openai.ChatCompletionMessageParamUnion) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{Model: "clawrl-test", Messages: msgs}
}

func weatherTool() openai.ChatCompletionToolUnionParam {
	return openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name:        "get_weather",
		Description: openai.String("Current weather of a city"),
		Parameters: shared.FunctionParameters{
			"type":       "object",
			"properties": map[string]any{"city": map[string]any{"type": "string"}},
			"required":   []string{"city"},
		},
	})
}

// collectStream reads a chat stream into its chunks.
func collectStream(t *testing.T, s interface {
	Next() bool
	Current() openai.ChatCompletionChunk
	Err() error
}) []openai.ChatCompletionChunk {
	t.Helper()
	var chunks []openai.ChatCompletionChunk
	for s.Next() {
		chunks = append(chunks, s.Current())
	}
	if err := s.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	return chunks
}

func TestChatNonStreaming(t *testing.T) {
	e := newEnv(t)
	e.gen.reply = func(string, rollout.Request) script { return script{text: "Hello there!", cached: 5, version: 9} }
	var httpResp *http.Response
	resp, err := e.client.Chat.Completions.New(testCtx(t), chatParams(
		openai.SystemMessage("Be brief."), openai.UserMessage("Hi!")), option.WithResponseInto(&httpResp))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(resp.ID, "chatcmpl-") || !alnumID.MatchString(strings.TrimPrefix(resp.ID, "chatcmpl-")) {
		t.Errorf("id %q", resp.ID)
	}
	if resp.Model != "clawrl-test" || resp.Object != "chat.completion" || resp.SystemFingerprint != "clawrl-v9" {
		t.Errorf("model %q object %q fingerprint %q", resp.Model, resp.Object, resp.SystemFingerprint)
	}
	if got := httpResp.Header.Get("X-Weight-Version"); got != "9" {
		t.Errorf("X-Weight-Version = %q", got)
	}
	if len(resp.Choices) != 1 {
		t.Fatalf("%d choices", len(resp.Choices))
	}
	c := resp.Choices[0]
	if c.Message.Content != "Hello there!" || c.FinishReason != "stop" || c.Message.Role != "assistant" {
		t.Errorf("choice = %q, %q", c.Message.Content, c.FinishReason)
	}
	req := e.gen.requests()[0]
	wantCompletion := len(e.gen.tok.Encode("Hello there!")) + 1 // the end-of-turn token counts
	u := resp.Usage
	if int(u.PromptTokens) != len(req.Prompt) || int(u.CompletionTokens) != wantCompletion ||
		u.TotalTokens != u.PromptTokens+u.CompletionTokens || u.PromptTokensDetails.CachedTokens != 5 {
		t.Errorf("usage = %+v (prompt %d)", u, len(req.Prompt))
	}
	prompt := e.gen.tok.Decode(req.Prompt)
	if !strings.HasSuffix(prompt, "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n") {
		t.Errorf("prompt = %q", prompt)
	}
	if eos, _ := e.gen.tok.EOS(); len(req.StopTokens) == 0 || req.StopTokens[0] != eos {
		t.Errorf("stop tokens %v", req.StopTokens)
	}
	if req.MaxTokens != 4096-len(req.Prompt) {
		t.Errorf("MaxTokens = %d, want the context left", req.MaxTokens)
	}
}

func TestChatStreaming(t *testing.T) {
	e := newEnv(t)
	text := "Streaming works, token by token. ✓ 🌍"
	e.gen.reply = func(string, rollout.Request) script { return script{text: text, cached: 3} }
	params := chatParams(openai.UserMessage("go"))
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	params.MaxCompletionTokens = openai.Int(100)
	chunks := collectStream(t, e.client.Chat.Completions.NewStreaming(testCtx(t), params))
	if len(chunks) < 10 {
		t.Fatalf("only %d chunks: not streamed token by token", len(chunks))
	}
	if d := chunks[0].Choices[0].Delta; d.Role != "assistant" {
		t.Errorf("first chunk delta %+v has no role", d)
	}
	var content strings.Builder
	finish := ""
	for _, ck := range chunks[:len(chunks)-1] {
		for _, c := range ck.Choices {
			content.WriteString(c.Delta.Content)
			if c.FinishReason != "" {
				finish = c.FinishReason
			}
		}
	}
	if content.String() != text || finish != "stop" {
		t.Errorf("content %q finish %q", content.String(), finish)
	}
	last := chunks[len(chunks)-1]
	if len(last.Choices) != 0 || last.Usage.CompletionTokens == 0 || last.Usage.PromptTokensDetails.CachedTokens != 3 {
		t.Errorf("usage chunk = %s", last.RawJSON())
	}
	if req := e.gen.requests()[0]; req.MaxTokens != 100 {
		t.Errorf("MaxTokens = %d", req.MaxTokens)
	}
	// The SDK's accumulator agrees.
	var acc openai.ChatCompletionAccumulator
	for _, ck := range chunks {
		acc.AddChunk(ck)
	}
	if got := acc.Choices[0].Message.Content; got != text {
		t.Errorf("accumulated %q", got)
	}
}

func TestChatToolCalls(t *testing.T) {
	reply := "Let me look.\n<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>" +
		"<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}</tool_call>"
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "non-streamed", true: "streamed"}[stream], func(t *testing.T) {
			e := newEnv(t)
			e.gen.reply = func(string, rollout.Request) script { return script{text: reply} }
			params := chatParams(openai.UserMessage("Weather in Paris and Oslo?"))
			params.Tools = []openai.ChatCompletionToolUnionParam{weatherTool()}
			params.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("auto")}
			var msg openai.ChatCompletionMessage
			var finish string
			if stream {
				chunks := collectStream(t, e.client.Chat.Completions.NewStreaming(testCtx(t), params))
				var acc openai.ChatCompletionAccumulator
				started := map[int64]bool{}
				for _, ck := range chunks {
					acc.AddChunk(ck)
					for _, c := range ck.Choices {
						for _, tc := range c.Delta.ToolCalls {
							if !started[tc.Index] {
								if tc.ID == "" || tc.Type != "function" || tc.Function.Name != "get_weather" {
									t.Errorf("first fragment of call %d = %s", tc.Index, tc.RawJSON())
								}
								started[tc.Index] = true
							} else if tc.ID != "" || tc.Function.Name != "" {
								t.Errorf("later fragment repeats id or name: %s", tc.RawJSON())
							}
						}
					}
				}
				if len(started) != 2 {
					t.Fatalf("%d calls streamed", len(started))
				}
				msg, finish = acc.Choices[0].Message, acc.Choices[0].FinishReason
			} else {
				resp, err := e.client.Chat.Completions.New(testCtx(t), params)
				if err != nil {
					t.Fatal(err)
				}
				msg, finish = resp.Choices[0].Message, resp.Choices[0].FinishReason
			}
			if finish != "tool_calls" || msg.Content != "Let me look." || len(msg.ToolCalls) != 2 {
				t.Fatalf("finish %q content %q calls %d", finish, msg.Content, len(msg.ToolCalls))
			}
			for i, city := range []string{"Paris", "Oslo"} {
				tc := msg.ToolCalls[i]
				var args map[string]string
				if err := json.Unmarshal([]byte(tc.Function.Arguments), &args); err != nil || args["city"] != city {
					t.Errorf("call %d arguments %q", i, tc.Function.Arguments)
				}
				if !alnumID.MatchString(tc.ID) || !strings.HasPrefix(tc.ID, "call") || len(tc.ID) != 28 {
					t.Errorf("call id %q", tc.ID)
				}
			}
			if prompt := e.gen.tok.Decode(e.gen.requests()[0].Prompt); !strings.Contains(prompt, `"name": "get_weather"`) {
				t.Errorf("tools missing from the prompt: %q", prompt)
			}
		})
	}
}

func TestChatToolChoice(t *testing.T) {
	call := "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}</tool_call>"
	cases := []struct {
		name       string
		choice     openai.ChatCompletionToolChoiceOptionUnionParam
		generate   string // what the model adds after the prompt
		wantSuffix string // the prompt's end
		wantCall   bool
	}{
		{"none", openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("none")}, call,
			"<|im_start|>assistant\n", false},
		{"required", openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")},
			`get_weather", "arguments": {"city": "Rome"}}</tool_call>`, "<tool_call>\n{\"name\": \"", true},
		{"named", openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"}),
			`{"city": "Rome"}}</tool_call>`, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.gen.reply = func(string, rollout.Request) script { return script{text: c.generate} }
			params := chatParams(openai.UserMessage("Weather in Rome?"))
			params.Tools = []openai.ChatCompletionToolUnionParam{weatherTool()}
			params.ToolChoice = c.choice
			resp, err := e.client.Chat.Completions.New(testCtx(t), params)
			if err != nil {
				t.Fatal(err)
			}
			prompt := e.gen.tok.Decode(e.gen.requests()[0].Prompt)
			if !strings.HasSuffix(prompt, c.wantSuffix) {
				t.Errorf("prompt ends %q", prompt[max(0, len(prompt)-60):])
			}
			msg := resp.Choices[0].Message
			if c.wantCall {
				if len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != "get_weather" ||
					msg.ToolCalls[0].Function.Arguments != `{"city": "Rome"}` || resp.Choices[0].FinishReason != "tool_calls" {
					t.Errorf("message = %s", msg.RawJSON())
				}
			} else {
				if strings.Contains(prompt, "# Tools") {
					t.Errorf("tool_choice none still passed tools to the template")
				}
				if len(msg.ToolCalls) != 0 || msg.Content != call {
					t.Errorf("message = %s", msg.RawJSON())
				}
			}
		})
	}
}

func TestChatParallelToolCallsOff(t *testing.T) {
	e := newEnv(t)
	two := "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"A\"}}</tool_call>" +
		"<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"B\"}}</tool_call>"
	e.gen.reply = func(string, rollout.Request) script { return script{text: two} }
	params := chatParams(openai.UserMessage("two cities"))
	params.Tools = []openai.ChatCompletionToolUnionParam{weatherTool()}
	params.ParallelToolCalls = openai.Bool(false)
	resp, err := e.client.Chat.Completions.New(testCtx(t), params)
	if err != nil {
		t.Fatal(err)
	}
	if c := resp.Choices[0]; len(c.Message.ToolCalls) != 1 || c.FinishReason != "tool_calls" {
		t.Fatalf("choice = %s", c.RawJSON())
	}
}

func TestChatReasoning(t *testing.T) {
	e := newEnv(t)
	e.gen.reply = func(string, rollout.Request) script {
		return script{text: "<think>\nThe user greets me.\n</think>\n\nHello!"}
	}
	resp, err := e.client.Chat.Completions.New(testCtx(t), chatParams(openai.UserMessage("hi")))
	if err != nil {
		t.Fatal(err)
	}
	msg := resp.Choices[0].Message
	if msg.Content != "Hello!" || msg.JSON.ExtraFields["reasoning_content"].Raw() != `"The user greets me."` {
		t.Fatalf("message = %s", msg.RawJSON())
	}
	chunks := collectStream(t, e.client.Chat.Completions.NewStreaming(testCtx(t), chatParams(openai.UserMessage("hi"))))
	var reasoning, content strings.Builder
	for _, ck := range chunks {
		for _, c := range ck.Choices {
			content.WriteString(c.Delta.Content)
			if f, ok := c.Delta.JSON.ExtraFields["reasoning_content"]; ok {
				var s string
				_ = json.Unmarshal([]byte(f.Raw()), &s)
				reasoning.WriteString(s)
			}
		}
	}
	if reasoning.String() != "The user greets me." || content.String() != "Hello!" {
		t.Fatalf("streamed reasoning %q content %q", reasoning.String(), content.String())
	}
}

func TestChatLogprobs(t *testing.T) {
	e := newEnv(t)
	text := "Hi 🌍 there"
	e.gen.reply = func(string, rollout.Request) script { return script{text: text} }
	params := chatParams(openai.UserMessage("x"))
	params.Logprobs = openai.Bool(true)
	params.TopLogprobs = openai.Int(2)
	resp, err := e.client.Chat.Completions.New(testCtx(t), params)
	if err != nil {
		t.Fatal(err)
	}
	lps := resp.Choices[0].Logprobs.Content
	if len(lps) != len(e.gen.tok.Encode(text)) {
		t.Fatalf("%d log-probs for %d tokens", len(lps), len(e.gen.tok.Encode(text)))
	}
	var raw []byte
	for i, lp := range lps {
		if len(lp.TopLogprobs) != 2 || lp.Logprob >= 0 || lp.TopLogprobs[0].Logprob != lp.Logprob {
			t.Errorf("entry %d = %s", i, lp.RawJSON())
		}
		for _, b := range lp.Bytes {
			raw = append(raw, byte(b))
		}
	}
	if string(raw) != text {
		t.Errorf("bytes spell %q", raw)
	}
	if e.gen.requests()[0].Sampling.TopLogProbs != 2 {
		t.Errorf("TopLogProbs not passed on")
	}
	// Streamed, the entries arrive with the chunks.
	chunks := collectStream(t, e.client.Chat.Completions.NewStreaming(testCtx(t), params))
	n := 0
	for _, ck := range chunks {
		for _, c := range ck.Choices {
			n += len(c.Logprobs.Content)
		}
	}
	if n != len(lps) {
		t.Errorf("streamed %d log-probs, want %d", n, len(lps))
	}
}

func TestChatN(t *testing.T) {
	e := newEnv(t)
	e.gen.reply = func(_ string, req rollout.Request) script {
		return script{text: strings.Repeat("ab", int(*req.Sampling.Seed-40))}
	}
	params := chatParams(openai.UserMessage("x"))
	params.N = openai.Int(3)
	params.Seed = openai.Int(42)
	params.Temperature = openai.Float(0.7)
	params.TopP = openai.Float(0.9)
	resp, err := e.client.Chat.Completions.New(testCtx(t), params)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices) != 3 {
		t.Fatalf("%d choices", len(resp.Choices))
	}
	for i, c := range resp.Choices {
		if int(c.Index) != i || c.Message.Content != strings.Repeat("ab", i+2) {
			t.Errorf("choice %d = %q", c.Index, c.Message.Content)
		}
	}
	seeds := map[uint64]bool{}
	for _, r := range e.gen.requests() {
		seeds[*r.Sampling.Seed] = true
		if r.Sampling.Temperature != 0.7 || r.Sampling.TopP != 0.9 {
			t.Errorf("sampling = %+v", r.Sampling)
		}
	}
	if len(seeds) != 3 || !seeds[42] || !seeds[43] || !seeds[44] {
		t.Errorf("seeds %v, want 42, 43, 44", seeds)
	}
	// Streamed: each choice finishes on its own.
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	chunks := collectStream(t, e.client.Chat.Completions.NewStreaming(testCtx(t), params))
	content := map[int64]string{}
	finished := map[int64]string{}
	for _, ck := range chunks {
		for _, c := range ck.Choices {
			content[c.Index] += c.Delta.Content
			if c.FinishReason != "" {
				finished[c.Index] = c.FinishReason
			}
		}
	}
	for i := range int64(3) {
		if content[i] != strings.Repeat("ab", int(i)+2) || finished[i] != "stop" {
			t.Errorf("streamed choice %d = %q, %q", i, content[i], finished[i])
		}
	}
}

func TestChatStop(t *testing.T) {
	for _, stream := range []bool{false, true} {
		e := newEnv(t)
		e.gen.reply = func(string, rollout.Request) script {
			return script{text: "Hello there! General Kenobi, you are a bold one."}
		}
		params := chatParams(openai.UserMessage("x"))
		params.Stop = openai.ChatCompletionNewParamsStopUnion{OfStringArray: []string{"Kenobi", "General K"}}
		var content, finish string
		if stream {
			for _, ck := range collectStream(t, e.client.Chat.Completions.NewStreaming(testCtx(t), params)) {
				for _, c := range ck.Choices {
					content += c.Delta.Content
					if c.FinishReason != "" {
						finish = c.FinishReason
					}
				}
			}
		} else {
			resp, err := e.client.Chat.Completions.New(testCtx(t), params)
			if err != nil {
				t.Fatal(err)
			}
			content, finish = resp.Choices[0].Message.Content, resp.Choices[0].FinishReason
		}
		if content != "Hello there! " || finish != "stop" {
			t.Errorf("stream %v: content %q finish %q", stream, content, finish)
		}
		select {
		case <-e.gen.cancelled:
		default:
			t.Errorf("stream %v: the generation was not cancelled at the stop string", stream)
		}
	}
}

func TestChatLength(t *testing.T) {
	e := newEnv(t)
	e.gen.reply = func(string, rollout.Request) script { return script{endless: true} }
	params := chatParams(openai.UserMessage("x"))
	params.MaxTokens = openai.Int(5)
	resp, err := e.client.Chat.Completions.New(testCtx(t), params)
	if err != nil {
		t.Fatal(err)
	}
	if c := resp.Choices[0]; c.FinishReason != "length" || resp.Usage.CompletionTokens != 5 {
		t.Fatalf("finish %q, %d tokens", c.FinishReason, resp.Usage.CompletionTokens)
	}
}

func TestChatEngineError(t *testing.T) {
	e := newEnv(t)
	e.gen.reply = func(string, rollout.Request) script { return script{text: "partial", fail: true} }
	_, err := e.client.Chat.Completions.New(testCtx(t), chatParams(openai.UserMessage("x")))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 500 || apiErr.Type != "server_error" {
		t.Fatalf("err = %v", err)
	}
	s := e.client.Chat.Completions.NewStreaming(testCtx(t), chatParams(openai.UserMessage("x")))
	for s.Next() {
	}
	if s.Err() == nil || !strings.Contains(s.Err().Error(), "fake engine failure") {
		t.Fatalf("stream err = %v", s.Err())
	}
	if recs := e.records(); len(recs) != 0 {
		t.Fatalf("failed turns were recorded: %d", len(recs))
	}
}

func TestContextLength(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.ContextLength = 64; o.DefaultMaxTokens = 10 })
	long := strings.Repeat("word ", 100)
	cases := []struct {
		name string
		body string
	}{
		{"prompt too long", `{"model":"clawrl-test","messages":[{"role":"user","content":"` + long + `"}]}`},
		{"completion does not fit", `{"model":"clawrl-test","messages":[{"role":"user","content":"hi"}],"max_tokens":60}`},
		{"max_completion_tokens does not fit", `{"model":"clawrl-test","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":60}`},
	}
	for _, c := range cases {
		resp, body := e.post("/v1/chat/completions", c.body)
		if resp.StatusCode != 400 || !strings.Contains(body, `"code":"context_length_exceeded"`) {
			t.Errorf("%s: %d %s", c.name, resp.StatusCode, body)
		}
	}
	// Without max tokens the default cap applies.
	if resp, body := e.post("/v1/chat/completions", `{"model":"clawrl-test","messages":[{"role":"user","content":"hi"}]}`); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if got := e.gen.requests()[0].MaxTokens; got != 10 {
		t.Errorf("MaxTokens = %d, want the default cap 10", got)
	}
}
