package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/clawrl/clawrl/tokenizer"
)

// chatRequest is the body of POST /v1/chat/completions. Fields clawrl does
// not use (reasoning_effort, metadata, store, ...) are ignored.
type chatRequest struct {
	Model               string            `json:"model"`
	Messages            []chatMessage     `json:"messages"`
	Stream              bool              `json:"stream"`
	StreamOptions       *streamOptions    `json:"stream_options"`
	N                   *int              `json:"n"`
	MaxTokens           *int              `json:"max_tokens"`
	MaxCompletionTokens *int              `json:"max_completion_tokens"`
	Stop                json.RawMessage   `json:"stop"`
	Logprobs            *bool             `json:"logprobs"`
	TopLogprobs         *int              `json:"top_logprobs"`
	Tools               []json.RawMessage `json:"tools"`
	ToolChoice          json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls   *bool             `json:"parallel_tool_calls"`
	ResponseFormat      json.RawMessage   `json:"response_format"`
	// ChatTemplateKwargs are extra template variables (as vLLM takes
	// them), such as {"enable_thinking": false}.
	ChatTemplateKwargs map[string]json.RawMessage `json:"chat_template_kwargs"`
	samplingFields
	sessionFields
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type chatMessage struct {
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content"`
	Name             string          `json:"name"`
	ToolCalls        []chatToolCall  `json:"tool_calls"`
	ToolCallID       string          `json:"tool_call_id"`
	ReasoningContent *string         `json:"reasoning_content"`
	Reasoning        *string         `json:"reasoning"`
}

type chatToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

// conversation validates and normalises the messages and tools.
func (req *chatRequest) conversation() (*conversation, *apiError) {
	if len(req.Messages) == 0 {
		return nil, invalid("messages", "invalid_value", "'messages' must contain at least one message.")
	}
	conv := &conversation{oneCall: req.ParallelToolCalls != nil && !*req.ParallelToolCalls}
	for i, m := range req.Messages {
		param := fmt.Sprintf("messages[%d]", i)
		text, null, e := flattenContent(m.Content, param+".content")
		if e != nil {
			return nil, e
		}
		out := tokenizer.Message{Role: m.Role, Content: text, Name: m.Name}
		switch m.Role {
		case "system", "developer", "user":
			if m.Role == "developer" {
				out.Role = "system" // chat templates know no developer role
			}
			if null {
				return nil, invalid(param+".content", "missing_required_parameter", "Missing required parameter: '%s.content'.", param)
			}
		case "assistant":
			switch {
			case m.ReasoningContent != nil:
				out.ReasoningContent = *m.ReasoningContent
			case m.Reasoning != nil:
				out.ReasoningContent = *m.Reasoning
			}
			for j, tc := range m.ToolCalls {
				cp := fmt.Sprintf("%s.tool_calls[%d]", param, j)
				if tc.Type != "" && tc.Type != "function" {
					return nil, invalid(cp+".type", "invalid_value", "Unsupported tool call type %q.", tc.Type)
				}
				if tc.Function.Name == "" {
					return nil, invalid(cp+".function.name", "missing_required_parameter", "Missing required parameter: '%s.function.name'.", cp)
				}
				args, e := parseToolArguments(tc.Function.Arguments, cp+".function.arguments")
				if e != nil {
					return nil, e
				}
				out.ToolCalls = append(out.ToolCalls, tokenizer.ToolCall{
					ID: tc.ID, Type: "function", Function: tokenizer.FunctionCall{Name: tc.Function.Name, Arguments: args},
				})
			}
		case "tool":
			if m.ToolCallID == "" {
				return nil, invalid(param+".tool_call_id", "missing_required_parameter", "Missing required parameter: '%s.tool_call_id'.", param)
			}
			out.ToolCallID = m.ToolCallID
		case "":
			return nil, invalid(param+".role", "missing_required_parameter", "Missing required parameter: '%s.role'.", param)
		default:
			return nil, invalid(param+".role", "invalid_value",
				"Invalid value for '%s.role': %q. Supported values are: 'system', 'developer', 'user', 'assistant' and 'tool'.", param, m.Role)
		}
		conv.messages = append(conv.messages, out)
	}
	tools, names, e := parseChatTools(req.Tools)
	if e != nil {
		return nil, e
	}
	conv.tools, conv.names = tools, names
	if conv.choice, e = parseToolChoice(req.ToolChoice, names); e != nil {
		return nil, e
	}
	if e = conv.compileTools(); e != nil {
		return nil, e
	}
	if conv.format, e = parseResponseFormat(req.ResponseFormat, "response_format"); e != nil {
		return nil, e
	}
	if len(req.ChatTemplateKwargs) > 0 {
		conv.vars = map[string]any{}
		for k, v := range req.ChatTemplateKwargs {
			conv.vars[k] = v
		}
	}
	return conv, nil
}

// sampling validates the generation options.
func (s *Server) chatSampling(req *chatRequest) (sampling, *apiError) {
	var smp sampling
	var e *apiError
	if smp.n, e = s.checkN(req.N); e != nil {
		return smp, e
	}
	if smp.maxTokens, e = checkMaxTokens(req.MaxTokens, "max_tokens"); e != nil {
		return smp, e
	}
	if req.MaxCompletionTokens != nil {
		if smp.maxTokens, e = checkMaxTokens(req.MaxCompletionTokens, "max_completion_tokens"); e != nil {
			return smp, e
		}
	}
	if smp.params, e = req.params(); e != nil {
		return smp, e
	}
	if smp.stops, e = parseStop(req.Stop); e != nil {
		return smp, e
	}
	smp.logprobs = req.Logprobs != nil && *req.Logprobs
	if req.TopLogprobs != nil {
		k := *req.TopLogprobs
		switch {
		case k < 0 || k > 20:
			return smp, invalid("top_logprobs", "invalid_value", "Invalid 'top_logprobs': %d is out of range [0, 20].", k)
		case !smp.logprobs:
			return smp, invalid("top_logprobs", "invalid_value", "'top_logprobs' requires 'logprobs' to be true.")
		}
		smp.params.TopLogProbs = k
	}
	return smp, nil
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	received := time.Now()
	var req chatRequest
	if !s.decodeRequest(w, r, &req, func() string { return req.Model }) {
		return
	}
	conv, e := req.conversation()
	if e != nil {
		writeError(w, e)
		return
	}
	smp, e := s.chatSampling(&req)
	if e != nil {
		writeError(w, e)
		return
	}
	id := newID("chatcmpl-", 29)
	s.serveTurn(w, r, turnRequest{endpoint: "chat.completions", id: id, received: received, fields: req.sessionFields, conv: conv, smp: smp,
		write: func(ctx context.Context, cancel context.CancelFunc, l *launched, complete func([]*output)) []*output {
			c := chatCall{s: s, id: id, created: received.Unix(), logprobs: smp.logprobs, complete: complete}
			if req.Stream {
				return c.stream(ctx, cancel, w, l.gens, req.StreamOptions != nil && req.StreamOptions.IncludeUsage, len(l.p.prompt))
			}
			return c.collect(ctx, w, l.gens, len(l.p.prompt))
		}})
}

// chatCall writes one chat completion.
type chatCall struct {
	s        *Server
	id       string
	created  int64
	logprobs bool
	// complete, if set, gets the outputs once every choice has finished
	// without error, before the response's last bytes are written: the
	// turn is recorded then, so that feedback a client sends as soon as
	// it has read the answer finds it.
	complete func(outs []*output)
}

type chatCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	SystemFingerprint string       `json:"system_fingerprint"`
	Choices           []chatChoice `json:"choices"`
	Usage             usage        `json:"usage"`
}

type chatChoice struct {
	Index        int              `json:"index"`
	Message      assistantMessage `json:"message"`
	Logprobs     *choiceLogprobs  `json:"logprobs"`
	FinishReason string           `json:"finish_reason"`
}

type assistantMessage struct {
	Role             string        `json:"role"`
	Content          *string       `json:"content"`
	ReasoningContent string        `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCallOut `json:"tool_calls,omitempty"`
	Refusal          *string       `json:"refusal"`
}

type toolCallOut struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type choiceLogprobs struct {
	Content []tokenLogprob `json:"content"`
	Refusal []tokenLogprob `json:"refusal"`
}

// collect waits for all choices and writes the completion.
func (c *chatCall) collect(ctx context.Context, w http.ResponseWriter, gens []*generation, promptLen int) []*output {
	outs := make([]*output, len(gens))
	for ev := range c.s.runAll(gens, false) {
		outs[ev.index] = ev.done
	}
	if err := firstError(outs); err != nil {
		writeError(w, internalError(err))
		return outs
	}
	if cancelled(outs) {
		if c.s.base.Err() != nil {
			writeError(w, c.s.shutdownError())
		}
		return outs // the client is gone, or the server is going
	}
	version := outs[0].version(c.s.opts.Version())
	resp := chatCompletion{
		ID: c.id, Object: "chat.completion", Created: c.created, Model: c.s.opts.ModelID,
		SystemFingerprint: fingerprint(version), Usage: makeUsage(promptLen, outs),
	}
	for _, o := range outs {
		ch := chatChoice{Index: o.index, FinishReason: o.finish,
			Message: assistantMessage{Role: "assistant", ReasoningContent: o.reasoning}}
		if o.content != "" || len(o.calls) == 0 {
			content := o.content
			ch.Message.Content = &content
		}
		for _, tc := range o.calls {
			var t toolCallOut
			t.ID, t.Type, t.Function.Name, t.Function.Arguments = tc.id, "function", tc.name, tc.args
			ch.Message.ToolCalls = append(ch.Message.ToolCalls, t)
		}
		if c.logprobs {
			ch.Logprobs = &choiceLogprobs{Content: orEmpty(o.lp)}
		}
		resp.Choices = append(resp.Choices, ch)
	}
	if c.complete != nil {
		c.complete(outs)
	}
	w.Header().Set("X-Weight-Version", strconv.FormatUint(version, 10))
	writeJSON(w, resp)
	return outs
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

type chatChunk struct {
	ID                string        `json:"id"`
	Object            string        `json:"object"`
	Created           int64         `json:"created"`
	Model             string        `json:"model"`
	SystemFingerprint string        `json:"system_fingerprint"`
	Choices           []chunkChoice `json:"choices"`
	Usage             *usage        `json:"usage,omitempty"`
}

type chunkChoice struct {
	Index        int             `json:"index"`
	Delta        chunkDelta      `json:"delta"`
	Logprobs     *choiceLogprobs `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
}

type chunkDelta struct {
	Role             string          `json:"role,omitempty"`
	Content          *string         `json:"content,omitempty"`
	ReasoningContent *string         `json:"reasoning_content,omitempty"`
	ToolCalls        []deltaToolCall `json:"tool_calls,omitempty"`
}

type deltaToolCall struct {
	Index    int    `json:"index"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// stream writes the choices as server-sent events as they are generated.
func (c *chatCall) stream(ctx context.Context, cancel context.CancelFunc, w http.ResponseWriter,
	gens []*generation, includeUsage bool, promptLen int) []*output {
	version := c.s.opts.Version()
	sse := startSSE(w, version)
	chunk := func(choices ...chunkChoice) chatChunk {
		return chatChunk{ID: c.id, Object: "chat.completion.chunk", Created: c.created, Model: c.s.opts.ModelID,
			SystemFingerprint: fingerprint(version), Choices: choices}
	}
	for _, g := range gens {
		empty := ""
		_ = sse.data("", chunk(chunkChoice{Index: g.index, Delta: chunkDelta{Role: "assistant", Content: &empty}}))
	}
	tick, stopTick := c.s.keepAlive()
	defer stopTick()
	outs := make([]*output, len(gens))
	events := c.s.runAll(gens, true)
	for open := true; open; {
		var err error
		select {
		case ev, ok := <-events:
			if !ok {
				open = false
				continue
			}
			if ev.done != nil {
				outs[ev.index] = ev.done
				if ev.done.err == nil && ev.done.finish != "" {
					finish := ev.done.finish
					err = sse.data("", chunk(chunkChoice{Index: ev.index, FinishReason: &finish}))
				}
				continue
			}
			err = sse.data("", chunk(c.chunkChoice(ev.index, ev.d)))
		case <-tick:
			err = sse.comment()
		}
		if err != nil {
			cancel() // the client is gone: stop generating
		}
	}
	if err := firstError(outs); err != nil {
		e := internalError(err)
		_ = sse.data("", e.body())
		return outs
	}
	if cut := c.s.cut(outs); cut != nil {
		// The shutdown cut it: finish reasons, the error, [DONE].
		for _, i := range cut {
			finish := wireFinish(outs[i].finish)
			_ = sse.data("", chunk(chunkChoice{Index: i, FinishReason: &finish}))
		}
		_ = sse.data("", c.s.shutdownError().body())
		if c.complete != nil {
			c.complete(outs)
		}
		_ = sse.done()
		return outs
	}
	if cancelled(outs) {
		return outs
	}
	if c.complete != nil {
		c.complete(outs)
	}
	if includeUsage {
		u := makeUsage(promptLen, outs)
		ck := chunk()
		ck.Choices = []chunkChoice{}
		ck.Usage = &u
		_ = sse.data("", ck)
	}
	_ = sse.done()
	return outs
}

func (c *chatCall) chunkChoice(index int, d delta) chunkChoice {
	ch := chunkChoice{Index: index}
	if d.content != "" {
		ch.Delta.Content = &d.content
	}
	if d.reasoning != "" {
		ch.Delta.ReasoningContent = &d.reasoning
	}
	if d.call != nil {
		var t deltaToolCall
		t.Index = d.call.index
		if d.call.start {
			t.ID, t.Type, t.Function.Name = d.call.id, "function", d.call.name
		}
		t.Function.Arguments = d.call.args
		ch.Delta.ToolCalls = []deltaToolCall{t}
	}
	if c.logprobs && len(d.logprobs) > 0 {
		ch.Logprobs = &choiceLogprobs{Content: d.logprobs}
	}
	return ch
}
