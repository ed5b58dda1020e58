package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/ardanlabs/jinja"
)

// Message is one chat message, shaped as in OpenAI's chat API after its
// content has been flattened to text.
type Message struct {
	Role    string `json:"role"` // system, user, assistant or tool
	Content string `json:"content"`
	// ReasoningContent is an assistant's thinking, "" for none.
	ReasoningContent string     `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID       string     `json:"tool_call_id,omitempty"` // for role tool
	Name             string     `json:"name,omitempty"`
}

// ToolCall is a function call made by an assistant message.
type ToolCall struct {
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"` // "function" when empty
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function and its arguments. Arguments is a JSON
// object, or a JSON string that holds the arguments as text (the OpenAI wire
// form); the template receives it as it is, an object or a string, so
// templates that test "arguments is string" behave as in transformers.
type FunctionCall struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// ChatRequest is the input of a chat template.
type ChatRequest struct {
	Messages []Message
	// Tools are OpenAI tool definitions ({"type": "function", "function":
	// {...}}), passed to the template in their original key order.
	Tools []json.RawMessage
	// AddGenerationPrompt ends the prompt with the opening of an assistant
	// turn.
	AddGenerationPrompt bool
	// Vars are extra template variables, such as "enable_thinking": false
	// or "documents" (a json.RawMessage list) for retrieval templates.
	// Values are Go values (bool, string, numbers, []any, map[string]any) or
	// json.RawMessage.
	Vars map[string]any
	// Template picks a named template when tokenizer_config.json holds a
	// list of them. Empty picks "tool_use" when tools are given and it
	// exists, else "default", as transformers does.
	Template string
	// Prefill is text appended after the rendered template: the start of
	// the assistant's answer that the prompt forces (the opening of a
	// required tool call). It counts as text from the request.
	Prefill string
}

// chatTemplates holds the compiled chat templates of a tokenizer by name.
type chatTemplates struct {
	byName map[string]*chatTemplate
}

type chatTemplate struct {
	source string
	tmpl   *jinja.Template
	err    error // compile error, reported when the template is used
}

func newChatTemplates(sources map[string]string) *chatTemplates {
	c := &chatTemplates{byName: make(map[string]*chatTemplate, len(sources))}
	for name, src := range sources {
		// Compile with |tojson routed to pyJSON; should the rewrite ever
		// produce a template the engine rejects, use the original.
		tmpl, err := jinja.Compile(rewriteToJSON(src))
		if err != nil {
			tmpl, err = jinja.Compile(src)
		}
		c.byName[name] = &chatTemplate{source: src, tmpl: tmpl, err: err}
	}
	return c
}

// ErrNoChatTemplate is returned by ApplyChatTemplate when the tokenizer has
// no chat template.
var ErrNoChatTemplate = errors.New("tokenizer has no chat template")

// HasChatTemplate reports whether the tokenizer has a chat template.
func (t *Tokenizer) HasChatTemplate() bool { return t.chat != nil && len(t.chat.byName) > 0 }

// ChatTemplate returns the source of a named chat template ("" for the one
// ApplyChatTemplate picks by default without tools).
func (t *Tokenizer) ChatTemplate(name string) (string, bool) {
	ct, err := t.pickTemplate(name, false)
	if err != nil {
		return "", false
	}
	return ct.source, true
}

func (t *Tokenizer) pickTemplate(name string, tools bool) (*chatTemplate, error) {
	if !t.HasChatTemplate() {
		return nil, ErrNoChatTemplate
	}
	names := t.chat.byName
	switch {
	case name != "":
	case tools && names["tool_use"] != nil:
		name = "tool_use"
	case len(names) == 1:
		for n := range names {
			name = n
		}
	default:
		name = "default"
	}
	ct, ok := names[name]
	if !ok {
		all := make([]string, 0, len(names))
		for n := range names {
			all = append(all, n)
		}
		slices.Sort(all)
		return nil, fmt.Errorf("chat template %q not found (have %s)", name, strings.Join(all, ", "))
	}
	return ct, nil
}

// ApplyChatTemplate renders the tokenizer's chat template over a
// conversation, giving the prompt text; Encode turns it into ids (special
// tokens in it are recognised). The template also sees bos_token,
// eos_token, pad_token and unk_token from tokenizer_config.json.
//
// Encoding its result with Encode lets text from the request (a user
// typing "<|im_end|>") become control tokens; EncodeChat renders and
// encodes without that.
func (t *Tokenizer) ApplyChatTemplate(req ChatRequest) (string, error) {
	ct, vars, err := t.prepareChat(req)
	if err != nil {
		return "", err
	}
	out, err := ct.tmpl.RenderValues(vars)
	if err != nil {
		return "", fmt.Errorf("chat template: render: %w", err)
	}
	return out + req.Prefill, nil
}

// prepareChat picks req's template and builds its variables.
func (t *Tokenizer) prepareChat(req ChatRequest) (*chatTemplate, map[string]jinja.Value, error) {
	ct, err := t.pickTemplate(req.Template, len(req.Tools) > 0)
	if err != nil {
		return nil, nil, fmt.Errorf("chat template: %w", err)
	}
	if ct.err != nil {
		return nil, nil, fmt.Errorf("chat template: compile: %w", ct.err)
	}
	vars, err := t.templateVars(req)
	if err != nil {
		return nil, nil, fmt.Errorf("chat template: %w", err)
	}
	return ct, vars, nil
}

func (t *Tokenizer) templateVars(req ChatRequest) (map[string]jinja.Value, error) {
	vars := make(map[string]jinja.Value, 8+len(req.Vars))
	for _, st := range []struct {
		name string
		tok  specialToken
	}{{"bos_token", t.bos}, {"eos_token", t.eos}, {"pad_token", t.pad}, {"unk_token", t.unk}} {
		if st.tok.text != "" {
			vars[st.name] = jinja.NewString(st.tok.text)
		}
	}
	// As in transformers, documents is None unless given.
	vars["documents"] = jinja.None()
	for k, v := range req.Vars {
		val, err := goToValue(v)
		if err != nil {
			return nil, fmt.Errorf("variable %q: %w", k, err)
		}
		vars[k] = val
	}
	msgs := make([]jinja.Value, len(req.Messages))
	for i, m := range req.Messages {
		v, err := messageValue(m)
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		msgs[i] = v
	}
	vars["messages"] = jinja.NewList(msgs)
	if len(req.Tools) > 0 {
		tools := make([]jinja.Value, len(req.Tools))
		for i, raw := range req.Tools {
			v, err := jsonToValue(raw)
			if err != nil {
				return nil, fmt.Errorf("tool %d: %w", i, err)
			}
			tools[i] = v
		}
		vars["tools"] = jinja.NewList(tools)
	} else {
		vars["tools"] = jinja.None()
	}
	vars["add_generation_prompt"] = jinja.NewBool(req.AddGenerationPrompt)
	vars[tojsonFunc] = tojsonValue
	return vars, nil
}

// messageValue builds the dict a template sees for a message. Optional
// fields are present only when set, so that "is defined" tests behave as
// they do with the dicts transformers passes.
func messageValue(m Message) (jinja.Value, error) {
	d := jinja.NewDict()
	dict := d.AsDict()
	dict.Set("role", jinja.NewString(m.Role))
	dict.Set("content", jinja.NewString(m.Content))
	if m.ReasoningContent != "" {
		dict.Set("reasoning_content", jinja.NewString(m.ReasoningContent))
	}
	if m.Name != "" {
		dict.Set("name", jinja.NewString(m.Name))
	}
	if m.ToolCallID != "" {
		dict.Set("tool_call_id", jinja.NewString(m.ToolCallID))
	}
	if len(m.ToolCalls) > 0 {
		calls := make([]jinja.Value, len(m.ToolCalls))
		for i, tc := range m.ToolCalls {
			c := jinja.NewDict()
			cd := c.AsDict()
			if tc.ID != "" {
				cd.Set("id", jinja.NewString(tc.ID))
			}
			typ := tc.Type
			if typ == "" {
				typ = "function"
			}
			cd.Set("type", jinja.NewString(typ))
			f := jinja.NewDict()
			fd := f.AsDict()
			fd.Set("name", jinja.NewString(tc.Function.Name))
			args := jinja.NewDict()
			if len(bytes.TrimSpace(tc.Function.Arguments)) > 0 {
				var err error
				if args, err = jsonToValue(tc.Function.Arguments); err != nil {
					return jinja.Value{}, fmt.Errorf("tool call %d arguments: %w", i, err)
				}
			}
			fd.Set("arguments", args)
			cd.Set("function", f)
			calls[i] = c
		}
		dict.Set("tool_calls", jinja.NewList(calls))
	}
	return d, nil
}

// goToValue converts a template variable; json.RawMessage keeps its key
// order.
func goToValue(v any) (jinja.Value, error) {
	switch x := v.(type) {
	case json.RawMessage:
		return jsonToValue(x)
	case jinja.Value:
		return x, nil
	case int32:
		return jinja.NewInt(int64(x)), nil
	case float32:
		return jinja.NewFloat(float64(x)), nil
	}
	return jinja.FromGoValue(v), nil
}

// jsonToValue decodes JSON into a template value, keeping the order of
// object keys (so that tojson writes tool schemas as the client sent them)
// and the difference between integers and floats.
func jsonToValue(raw []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return jinja.Value{}, fmt.Errorf("decode JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return jinja.Value{}, errors.New("decode JSON: trailing data")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Value{}, err
	}
	switch x := tok.(type) {
	case json.Delim:
		switch x {
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return jinja.Value{}, err
				}
				v, err := decodeValue(dec)
				if err != nil {
					return jinja.Value{}, err
				}
				d.AsDict().Set(kt.(string), v)
			}
			_, err := dec.Token() // '}'
			return d, err
		case '[':
			var items []jinja.Value
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return jinja.Value{}, err
				}
				items = append(items, v)
			}
			_, err := dec.Token() // ']'
			return jinja.NewList(items), err
		}
		return jinja.Value{}, fmt.Errorf("unexpected %v", x)
	case nil:
		return jinja.None(), nil
	}
	return jinja.FromGoValue(tok), nil
}

// SetChatTemplate replaces the tokenizer's chat templates with src, the
// default one (as a checkpoint's chat_template.jinja does), for a model
// that carries none or one the user overrides (model.chat_template, as
// vLLM's --chat-template). It fails, changing nothing, when src does not
// compile. Call it before the tokenizer is shared: a Tokenizer is
// otherwise immutable.
func (t *Tokenizer) SetChatTemplate(src string) error {
	c := newChatTemplates(map[string]string{"default": src})
	if err := c.byName["default"].err; err != nil {
		return fmt.Errorf("chat template: %w", err)
	}
	t.chat = c
	return nil
}
