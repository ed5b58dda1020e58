package server

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
)

// callSyntax is how a model family writes a tool call in its reply, read
// from its chat template as vLLM's tool parsers are chosen by hand
// (--tool-call-parser hermes, llama3_json, mistral).
type callSyntax int

const (
	// syntaxHermes: <tool_call>{"name": ..., "arguments": {...}}</tool_call>
	// (Qwen, Hermes and the bundled model), anywhere in the reply.
	syntaxHermes callSyntax = iota
	// syntaxJSON: the reply is the call, {"name": ..., "parameters":
	// {...}}, after an optional <|python_tag|>; several are separated by
	// ";" (Llama 3.1 and later).
	syntaxJSON
	// syntaxMistral: the reply is [TOOL_CALLS] and a JSON array of
	// {"name": ..., "arguments": {...}} (Mistral).
	syntaxMistral
)

// Markup of the bare syntaxes.
const (
	tagPythonTag = "<|python_tag|>"
	tagToolCalls = "[TOOL_CALLS]"
)

// detectCallSyntax reads which syntax a chat template teaches: Hermes
// tags where it writes them, else Mistral's [TOOL_CALLS], else Llama's
// JSON (its <|python_tag|> or its instruction to answer with
// {"name": function name, "parameters": ...}); Hermes when it says none.
func detectCallSyntax(template string) callSyntax {
	switch {
	case strings.Contains(template, tagToolCall):
		return syntaxHermes
	case strings.Contains(template, tagToolCalls):
		return syntaxMistral
	case strings.Contains(template, tagPythonTag),
		strings.Contains(template, `"parameters": dictionary of argument name`):
		return syntaxJSON
	}
	return syntaxHermes
}

// callForm is how a syntax writes a list of calls: open, then the
// function's name (a JSON string), then `, "KEY": ` and the arguments,
// then close; between two calls sep, which opens the next name; after
// the last, end.
type callForm struct {
	open, key, close, sep, end string
}

func (s callSyntax) form() callForm {
	switch s {
	case syntaxJSON:
		return callForm{open: `{"name": `, key: "parameters", close: "}", sep: `; {"name": `}
	case syntaxMistral:
		return callForm{open: tagToolCalls + ` [{"name": `, key: "arguments", close: "}", sep: `, {"name": `, end: "]"}
	}
	return callForm{open: tagToolCall + "\n{\"name\": ", key: "arguments", close: "}\n" + tagToolClose, sep: "\n" + tagToolCall + "\n{\"name\": "}
}

// prefill is the reply's forced start for tool_choice: the opening of a
// call, and with a named function its name and the arguments' key.
func (f callForm) prefill(name string) string {
	if name == "" {
		return f.open + `"`
	}
	quoted, _ := json.Marshal(name)
	return f.open + string(quoted) + f.argKey()
}

// argKey is what comes between the name and the arguments.
func (f callForm) argKey() string { return `, "` + f.key + `": ` }

// openers are the texts a reply of the bare syntaxes starts a call with.
func (s callSyntax) openers() []string {
	switch s {
	case syntaxJSON:
		return []string{tagPythonTag, "{"}
	case syntaxMistral:
		return []string{tagToolCalls}
	}
	return nil
}

// parseBareCalls reads a whole reply of a bare syntax as tool calls: one
// object, several separated by ";" or white space, or an array of them,
// after the syntax's opening tag; each names a function and gives its
// arguments ("parameters" or "arguments": an object, or a string of one).
// ok is false, and nothing is returned, unless every part is a call, or
// the calls are followed by the start of one the reply ended in (cut by
// max_tokens): those whole calls are returned.
func parseBareCalls(s string) (calls []toolCall, ok bool) {
	s = strings.TrimSpace(s)
	for _, tag := range []string{tagPythonTag, tagToolCalls} {
		s = strings.TrimSpace(strings.TrimPrefix(s, tag))
	}
	dec := json.NewDecoder(strings.NewReader(s))
	for {
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			cut := errors.Is(err, io.ErrUnexpectedEOF)
			if (errors.Is(err, io.EOF) || cut) && len(calls) > 0 {
				return calls, true
			}
			return nil, false
		}
		var items []json.RawMessage
		if len(v) > 0 && v[0] == '[' {
			if json.Unmarshal(v, &items) != nil || len(items) == 0 {
				return nil, false
			}
		} else {
			items = []json.RawMessage{v}
		}
		for _, it := range items {
			c, ok := bareCall(it)
			if !ok {
				return nil, false
			}
			calls = append(calls, c)
		}
		// Calls may be separated by ";".
		rest := s[dec.InputOffset():]
		trimmed := strings.TrimLeft(rest, " \t\r\n")
		if strings.HasPrefix(trimmed, ";") {
			s = trimmed[1:]
			dec = json.NewDecoder(strings.NewReader(s))
		}
	}
}

// bareCall reads one {"name": ..., "parameters"|"arguments": ...} object.
func bareCall(raw json.RawMessage) (toolCall, bool) {
	var c struct {
		Name       string          `json:"name"`
		Parameters json.RawMessage `json:"parameters"`
		Arguments  json.RawMessage `json:"arguments"`
	}
	if json.Unmarshal(raw, &c) != nil || c.Name == "" {
		return toolCall{}, false
	}
	args := c.Arguments
	if isNull(args) {
		args = c.Parameters
	}
	out := "{}"
	if !isNull(args) {
		var str string
		switch {
		case json.Unmarshal(args, &str) == nil:
			out = str // arguments given as a JSON string
		case args[0] == '{':
			out = string(args)
		default:
			return toolCall{}, false
		}
	}
	return toolCall{name: c.Name, args: out}, true
}
