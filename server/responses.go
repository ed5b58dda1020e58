package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/clawrl/clawrl/tokenizer"
)

// responsesRequest is the body of POST /v1/responses. Responses are kept
// unless store is false (stored.go), so previous_response_id and item
// references resolve; conversations and background responses are not
// supported; other fields clawrl does not use are ignored.
type responsesRequest struct {
	Model             string            `json:"model"`
	Input             json.RawMessage   `json:"input"`
	Instructions      *string           `json:"instructions"`
	Tools             []json.RawMessage `json:"tools"`
	ToolChoice        json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls *bool             `json:"parallel_tool_calls"`
	Text              *struct {
		Format json.RawMessage `json:"format"`
	} `json:"text"`
	MaxOutputTokens    *int                       `json:"max_output_tokens"`
	Stream             bool                       `json:"stream"`
	PreviousResponseID string                     `json:"previous_response_id"`
	Store              *bool                      `json:"store"`
	Background         bool                       `json:"background"`
	ChatTemplateKwargs map[string]json.RawMessage `json:"chat_template_kwargs"`
	samplingFields
	sessionFields
}

// inputItem is one item of a Responses input list, any type.
type inputItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Output    json.RawMessage `json:"output"`
	Summary   []contentPart   `json:"summary"`
}

// conversation turns the input items, instructions and tools into a chat.
func (req *responsesRequest) conversation() (*conversation, *apiError) {
	if req.Background {
		return nil, invalid("background", "unsupported_parameter", "background responses are not supported.")
	}
	conv := &conversation{oneCall: req.ParallelToolCalls != nil && !*req.ParallelToolCalls}
	if req.Instructions != nil && *req.Instructions != "" {
		conv.messages = append(conv.messages, tokenizer.Message{Role: "system", Content: *req.Instructions})
	}
	if isNull(req.Input) {
		return nil, invalid("input", "missing_required_parameter", "Missing required parameter: 'input'.")
	}
	in := bytes.TrimSpace(req.Input)
	switch in[0] {
	case '"':
		var s string
		if err := json.Unmarshal(in, &s); err != nil {
			return nil, invalid("input", "invalid_type", "Invalid value for 'input'.")
		}
		conv.messages = append(conv.messages, tokenizer.Message{Role: "user", Content: s})
	case '[':
		var items []json.RawMessage
		if err := json.Unmarshal(in, &items); err != nil {
			return nil, invalid("input", "invalid_type", "Invalid value for 'input': expected a string or an array of items.")
		}
		if e := addInputItems(conv, items); e != nil {
			return nil, e
		}
	default:
		return nil, invalid("input", "invalid_type", "Invalid type for 'input': expected a string or an array of items.")
	}
	if len(conv.messages) == 0 || (len(conv.messages) == 1 && conv.messages[0].Role == "system" && req.Instructions != nil) {
		return nil, invalid("input", "invalid_value", "'input' must contain at least one item.")
	}
	tools, e := responsesTools(req.Tools)
	if e != nil {
		return nil, e
	}
	if conv.tools, conv.names, e = parseChatTools(tools); e != nil {
		return nil, e
	}
	if conv.choice, e = parseToolChoice(req.ToolChoice, conv.names); e != nil {
		return nil, e
	}
	if e = conv.compileTools(); e != nil {
		return nil, e
	}
	if req.Text != nil {
		if conv.format, e = parseResponseFormat(req.Text.Format, "text.format"); e != nil {
			return nil, e
		}
	}
	if len(req.ChatTemplateKwargs) > 0 {
		conv.vars = map[string]any{}
		for k, v := range req.ChatTemplateKwargs {
			conv.vars[k] = v
		}
	}
	return conv, nil
}

// addInputItems converts Responses input items to chat messages: function
// calls join the assistant message before them, function outputs become
// tool messages, reasoning items become the next assistant message's
// reasoning.
func addInputItems(conv *conversation, items []json.RawMessage) *apiError {
	reasoning := ""
	lastAssistant := func() *tokenizer.Message {
		if n := len(conv.messages); n > 0 && conv.messages[n-1].Role == "assistant" {
			return &conv.messages[n-1]
		}
		return nil
	}
	for i, raw := range items {
		param := fmt.Sprintf("input[%d]", i)
		var it inputItem
		if isNull(raw) || bytes.TrimSpace(raw)[0] != '{' {
			return invalid(param, "invalid_type", "Invalid value for '%s': expected an item object.", param)
		}
		if err := json.Unmarshal(raw, &it); err != nil {
			return invalid(param, "invalid_type", "Invalid value for '%s': %v", param, err)
		}
		switch it.Type {
		case "", "message":
			text, null, e := flattenContent(it.Content, param+".content")
			if e != nil {
				return e
			}
			m := tokenizer.Message{Role: it.Role, Content: text}
			switch it.Role {
			case "user", "system":
			case "developer":
				m.Role = "system"
			case "assistant":
				m.ReasoningContent, reasoning = reasoning, ""
			case "":
				return invalid(param+".role", "missing_required_parameter", "Missing required parameter: '%s.role'.", param)
			default:
				return invalid(param+".role", "invalid_value", "Invalid value for '%s.role': %q.", param, it.Role)
			}
			if null && m.Role != "assistant" {
				return invalid(param+".content", "missing_required_parameter", "Missing required parameter: '%s.content'.", param)
			}
			conv.messages = append(conv.messages, m)
		case "function_call":
			if it.CallID == "" || it.Name == "" {
				return invalid(param, "missing_required_parameter", "'%s' needs call_id and name.", param)
			}
			args, e := parseToolArguments(it.Arguments, param+".arguments")
			if e != nil {
				return e
			}
			m := lastAssistant()
			if m == nil {
				conv.messages = append(conv.messages, tokenizer.Message{Role: "assistant", ReasoningContent: reasoning})
				reasoning = ""
				m = lastAssistant()
			}
			m.ToolCalls = append(m.ToolCalls, tokenizer.ToolCall{
				ID: it.CallID, Type: "function", Function: tokenizer.FunctionCall{Name: it.Name, Arguments: args},
			})
		case "function_call_output":
			text, _, e := flattenContent(it.Output, param+".output")
			if e != nil {
				return e
			}
			id := it.CallID // optional in the current API; the tool's name may stand in
			if id == "" {
				id = it.Name
			}
			conv.messages = append(conv.messages, tokenizer.Message{Role: "tool", Content: text, ToolCallID: id, Name: it.Name})
		case "reasoning":
			var parts []contentPart
			_ = json.Unmarshal(it.Content, &parts)
			if len(parts) == 0 {
				parts = it.Summary
			}
			var texts []string
			for _, p := range parts {
				texts = append(texts, p.Text)
			}
			reasoning = strings.Join(texts, "\n")
		default:
			return invalid(param+".type", "invalid_value", "Unsupported input item type %q.", it.Type)
		}
	}
	return nil
}

// responsesTools turns Responses tools ({"type": "function", "name": ...})
// into the chat form templates expect; chat-form tools pass unchanged.
func responsesTools(tools []json.RawMessage) ([]json.RawMessage, *apiError) {
	out := make([]json.RawMessage, 0, len(tools))
	for i, raw := range tools {
		param := fmt.Sprintf("tools[%d]", i)
		var t struct {
			Type     string          `json:"type"`
			Function json.RawMessage `json:"function"`
			functionDef
		}
		if isNull(raw) || bytes.TrimSpace(raw)[0] != '{' || json.Unmarshal(raw, &t) != nil {
			return nil, invalid(param, "invalid_type", "Invalid value for '%s': expected a tool object.", param)
		}
		if t.Type != "function" {
			return nil, invalid(param+".type", "invalid_value", "Unsupported tool type %q: only function tools are supported.", t.Type)
		}
		if !isNull(t.Function) {
			out = append(out, raw)
			continue
		}
		if t.Name == "" {
			return nil, invalid(param+".name", "missing_required_parameter", "Missing required parameter: '%s.name'.", param)
		}
		b, err := json.Marshal(chatTool{Type: "function", Function: t.functionDef})
		if err != nil {
			return nil, invalid(param, "invalid_value", "Invalid tool: %v", err)
		}
		out = append(out, b)
	}
	return out, nil
}

// The Responses objects, as the OpenAI API shapes them.
type responseObject struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	CreatedAt         int64              `json:"created_at"`
	Status            string             `json:"status"`
	Error             *errorObject       `json:"error"`
	IncompleteDetails *incompleteDetails `json:"incomplete_details"`
	Instructions      *string            `json:"instructions"`
	MaxOutputTokens   *int               `json:"max_output_tokens"`
	Model             string             `json:"model"`
	Output            []any              `json:"output"`
	ParallelToolCalls bool               `json:"parallel_tool_calls"`
	Temperature       float64            `json:"temperature"`
	TopP              float64            `json:"top_p"`
	ToolChoice        any                `json:"tool_choice"`
	Tools             []json.RawMessage  `json:"tools"`
	Text              any                `json:"text"`
	Metadata          map[string]string  `json:"metadata"`
	Store             bool               `json:"store"`
	User              string             `json:"user,omitempty"`
	Usage             *responseUsage     `json:"usage"`
}

type errorObject struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type incompleteDetails struct {
	Reason string `json:"reason"`
}

type responseUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

type messageItem struct {
	Type    string       `json:"type"`
	ID      string       `json:"id"`
	Status  string       `json:"status"`
	Role    string       `json:"role"`
	Content []outputText `json:"content"`
}

type outputText struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
	Logprobs    []any  `json:"logprobs"`
}

type functionCallItem struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Status    string `json:"status"`
}

type reasoningItem struct {
	Type    string          `json:"type"`
	ID      string          `json:"id"`
	Summary []any           `json:"summary"`
	Content []reasoningText `json:"content"`
	Status  string          `json:"status"`
}

type reasoningText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

func newOutputText(text string) outputText {
	return outputText{Type: "output_text", Text: text, Annotations: []any{}, Logprobs: []any{}}
}

func (s *Server) handleResponses(w http.ResponseWriter, r *http.Request) {
	received := time.Now()
	var req responsesRequest
	if !s.decodeRequest(w, r, &req, func() string { return req.Model }) {
		return
	}
	given, e := s.expandInput(r, &req)
	if e != nil {
		writeError(w, e)
		return
	}
	conv, e := req.conversation()
	if e != nil {
		writeError(w, e)
		return
	}
	keep := s.opts.Responses != nil && (req.Store == nil || *req.Store)
	smp := sampling{n: 1}
	if smp.maxTokens, e = checkMaxTokens(req.MaxOutputTokens, "max_output_tokens"); e != nil {
		writeError(w, e)
		return
	}
	if smp.params, e = req.params(); e != nil {
		writeError(w, e)
		return
	}
	format := any(map[string]string{"type": "text"})
	if req.Text != nil && !isNull(req.Text.Format) {
		format = req.Text.Format
	}
	id := newID("resp_", 32)
	s.serveTurn(w, r, turnRequest{endpoint: "responses", id: id, received: received, fields: req.sessionFields, conv: conv, smp: smp,
		write: func(ctx context.Context, cancel context.CancelFunc, l *launched, complete func([]*output)) []*output {
			rc := &responseCall{s: s, req: &req, p: l.p, complete: complete, keep: keep, owner: responseOwner(r), given: given,
				received: received, base: responseObject{
					ID: id, Object: "response", CreatedAt: received.Unix(), Status: "in_progress",
					Instructions: req.Instructions, MaxOutputTokens: req.MaxOutputTokens, Model: s.opts.ModelID,
					Output: []any{}, ParallelToolCalls: !conv.oneCall, Temperature: f64(smp.params.Temperature),
					TopP: f64(smp.params.TopP), ToolChoice: toolChoiceValue(conv.choice), Tools: orEmpty(req.Tools),
					Text: map[string]any{"format": format}, Metadata: map[string]string{},
					User: req.User, Store: keep,
				}}
			if l.binding != nil {
				rc.session = l.binding.SessionID
			}
			if req.Stream {
				return rc.stream(ctx, cancel, w, l.gens)
			}
			return rc.collect(ctx, w, l.gens)
		}})
}

func toolChoiceValue(c toolChoice) any {
	if c.mode == "function" {
		return map[string]string{"type": "function", "name": c.name}
	}
	return c.mode
}

// responseCall writes one response.
type responseCall struct {
	s    *Server
	req  *responsesRequest
	p    *prepared
	base responseObject
	// complete is chatCall.complete for the Responses API.
	complete func(outs []*output)
	// keep says the response is stored (stored.go), under owner, with
	// the session its turn went to and the input as given.
	keep     bool
	owner    string
	session  string
	given    json.RawMessage
	received time.Time
}

// finished fills in the final status, output and usage.
func (rc *responseCall) finished(o *output, items []any) responseObject {
	resp := rc.base
	resp.Status = "completed"
	switch o.finish {
	case "length":
		resp.Status = "incomplete"
		resp.IncompleteDetails = &incompleteDetails{Reason: "max_output_tokens"}
	case finishInterrupted:
		resp.Status = "incomplete"
		resp.IncompleteDetails = &incompleteDetails{Reason: "interrupted"}
	}
	resp.Output = items
	u := &responseUsage{InputTokens: len(rc.p.prompt), OutputTokens: len(o.tokens)}
	u.InputTokensDetails.CachedTokens = o.cached
	u.TotalTokens = u.InputTokens + u.OutputTokens
	resp.Usage = u
	return resp
}

func (rc *responseCall) collect(ctx context.Context, w http.ResponseWriter, gens []*generation) []*output {
	outs := make([]*output, len(gens))
	for ev := range rc.s.runAll(gens, false) {
		outs[ev.index] = ev.done
	}
	if err := firstError(outs); err != nil {
		writeError(w, internalError(err))
		return outs
	}
	if cancelled(outs) {
		if rc.s.base.Err() != nil {
			writeError(w, rc.s.shutdownError())
		}
		return outs
	}
	o := outs[0]
	var items []any
	if o.reasoning != "" {
		items = append(items, reasoningItem{Type: "reasoning", ID: newID("rs_", 32), Summary: []any{},
			Content: []reasoningText{{Type: "reasoning_text", Text: o.reasoning}}, Status: "completed"})
	}
	if o.content != "" || len(o.calls) == 0 {
		items = append(items, messageItem{Type: "message", ID: newID("msg_", 32), Status: "completed", Role: "assistant",
			Content: []outputText{newOutputText(o.content)}})
	}
	for _, c := range o.calls {
		items = append(items, functionCallItem{Type: "function_call", ID: newID("fc_", 32), CallID: c.id,
			Name: c.name, Arguments: c.args, Status: "completed"})
	}
	if rc.complete != nil {
		rc.complete(outs)
	}
	resp := rc.finished(o, items)
	rc.keepResponse(resp)
	w.Header().Set("X-Weight-Version", strconv.FormatUint(o.version(rc.s.opts.Version()), 10))
	writeJSON(w, resp)
	return outs
}

// respStream emits the typed events of a streamed response.
type respStream struct {
	sse   *sseWriter
	seq   int
	items []any
	// the output item being streamed
	kind string // "", "reasoning", "message", "function_call"
	id   string
	text strings.Builder
	call functionCallItem
	err  error
}

func (st *respStream) send(typ string, fields map[string]any) {
	if st.err != nil {
		return
	}
	fields["type"] = typ
	fields["sequence_number"] = st.seq
	st.seq++
	st.err = st.sse.data(typ, fields)
}

func (st *respStream) index() int { return len(st.items) }

// open starts an output item of kind, closing the current one.
func (st *respStream) open(kind string, call *callDelta) {
	st.close()
	st.kind = kind
	st.text.Reset()
	switch kind {
	case "reasoning":
		st.id = newID("rs_", 32)
		st.send("response.output_item.added", map[string]any{"output_index": st.index(),
			"item": reasoningItem{Type: "reasoning", ID: st.id, Summary: []any{}, Content: []reasoningText{}, Status: "in_progress"}})
	case "message":
		st.id = newID("msg_", 32)
		st.send("response.output_item.added", map[string]any{"output_index": st.index(),
			"item": messageItem{Type: "message", ID: st.id, Status: "in_progress", Role: "assistant", Content: []outputText{}}})
		st.send("response.content_part.added", map[string]any{"item_id": st.id, "output_index": st.index(),
			"content_index": 0, "part": newOutputText("")})
	case "function_call":
		st.id = newID("fc_", 32)
		st.call = functionCallItem{Type: "function_call", ID: st.id, CallID: call.id, Name: call.name, Status: "in_progress"}
		st.send("response.output_item.added", map[string]any{"output_index": st.index(), "item": st.call})
	}
}

// close finishes the current output item.
func (st *respStream) close() {
	text := st.text.String()
	switch st.kind {
	case "reasoning":
		st.send("response.reasoning_text.done", map[string]any{"item_id": st.id, "output_index": st.index(),
			"content_index": 0, "text": text})
		item := reasoningItem{Type: "reasoning", ID: st.id, Summary: []any{},
			Content: []reasoningText{{Type: "reasoning_text", Text: text}}, Status: "completed"}
		st.send("response.output_item.done", map[string]any{"output_index": st.index(), "item": item})
		st.items = append(st.items, item)
	case "message":
		st.send("response.output_text.done", map[string]any{"item_id": st.id, "output_index": st.index(),
			"content_index": 0, "text": text, "logprobs": []any{}})
		st.send("response.content_part.done", map[string]any{"item_id": st.id, "output_index": st.index(),
			"content_index": 0, "part": newOutputText(text)})
		item := messageItem{Type: "message", ID: st.id, Status: "completed", Role: "assistant",
			Content: []outputText{newOutputText(text)}}
		st.send("response.output_item.done", map[string]any{"output_index": st.index(), "item": item})
		st.items = append(st.items, item)
	case "function_call":
		st.call.Arguments = text
		st.call.Status = "completed"
		st.send("response.function_call_arguments.done", map[string]any{"item_id": st.id, "output_index": st.index(),
			"name": st.call.Name, "arguments": text})
		st.send("response.output_item.done", map[string]any{"output_index": st.index(), "item": st.call})
		st.items = append(st.items, st.call)
	}
	st.kind = ""
}

func (st *respStream) delta(d delta) {
	if d.reasoning != "" {
		if st.kind != "reasoning" {
			st.open("reasoning", nil)
		}
		st.text.WriteString(d.reasoning)
		st.send("response.reasoning_text.delta", map[string]any{"item_id": st.id, "output_index": st.index(),
			"content_index": 0, "delta": d.reasoning})
	}
	if d.content != "" {
		if st.kind != "message" {
			st.open("message", nil)
		}
		st.text.WriteString(d.content)
		st.send("response.output_text.delta", map[string]any{"item_id": st.id, "output_index": st.index(),
			"content_index": 0, "delta": d.content, "logprobs": []any{}})
	}
	if c := d.call; c != nil {
		if c.start {
			st.open("function_call", c)
		}
		if c.args != "" {
			st.text.WriteString(c.args)
			st.send("response.function_call_arguments.delta", map[string]any{"item_id": st.id,
				"output_index": st.index(), "delta": c.args})
		}
	}
}

func (rc *responseCall) stream(ctx context.Context, cancel context.CancelFunc, w http.ResponseWriter, gens []*generation) []*output {
	st := &respStream{sse: startSSE(w, rc.s.opts.Version())}
	st.send("response.created", map[string]any{"response": rc.base})
	st.send("response.in_progress", map[string]any{"response": rc.base})
	tick, stopTick := rc.s.keepAlive()
	defer stopTick()
	outs := make([]*output, len(gens))
	events := rc.s.runAll(gens, true)
	for open := true; open; {
		select {
		case ev, ok := <-events:
			if !ok {
				open = false
				continue
			}
			if ev.done != nil {
				outs[ev.index] = ev.done
				continue
			}
			st.delta(ev.d)
		case <-tick:
			if st.err == nil {
				st.err = st.sse.comment()
			}
		}
		if st.err != nil {
			cancel()
		}
	}
	if err := firstError(outs); err != nil {
		st.send("error", map[string]any{"code": "server_error", "message": err.Error(), "param": nil})
		failed := rc.base
		failed.Status = "failed"
		failed.Error = &errorObject{Code: "server_error", Message: err.Error()}
		st.send("response.failed", map[string]any{"response": failed})
		return outs
	}
	cut := rc.s.cut(outs) != nil
	if !cut && cancelled(outs) {
		return outs
	}
	o := outs[0]
	if len(st.items) == 0 && st.kind == "" {
		st.open("message", nil) // an empty reply is still a message
	}
	st.close()
	if rc.complete != nil {
		rc.complete(outs)
	}
	resp := rc.finished(o, st.items)
	rc.keepResponse(resp)
	if cut {
		e := rc.s.shutdownError()
		st.send("error", map[string]any{"code": e.Code, "message": e.Message, "param": nil})
	}
	if resp.Status == "incomplete" {
		st.send("response.incomplete", map[string]any{"response": resp})
	} else {
		st.send("response.completed", map[string]any{"response": resp})
	}
	return outs
}
