package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/clawrl/clawrl/grammar"
	"github.com/clawrl/clawrl/rollout"
)

// Constrained decoding. A forced tool call (tool_choice naming a
// function, or "required") and a structured output (response_format
// json_object or json_schema) are generated under a grammar (package
// grammar): after the prefilled "<tool_call>" opening, only a declared
// function's name, arguments valid for its parameters' JSON Schema and
// the closing tag can come, then the end of the turn; a structured output
// is one JSON document of the schema. With tool_choice "auto" the reply
// is free until the model opens a tool call; from "<tool_call>" on, the
// call is held to the same grammar (a lazy grammar, as llama.cpp's), so a
// call names a declared function with arguments of its schema, and the
// reply goes on free after it. The schemas are compiled when the request
// is parsed: a schema that cannot be followed is a 400 naming the keyword
// where the request needs it followed (the forced function, or a tool
// declared strict), and is otherwise set aside: left out of "required"'s
// choices, or, in auto mode, its calls' arguments are any JSON object.

// compileToolSchemas compiles the parameters of the tools a call may
// name under the tool choice: the forced function only, or every
// declared tool ("required", "auto").
func (conv *conversation) compileToolSchemas() *apiError {
	mode := conv.choice.mode
	if mode == "none" || len(conv.tools) == 0 {
		return nil
	}
	conv.schemas, conv.toolOrder = map[string]*grammar.Schema{}, nil
	var setAside *apiError
	for i, raw := range conv.tools {
		var t chatTool
		if err := json.Unmarshal(raw, &t); err != nil {
			continue // parseChatTools reported it
		}
		name := t.Function.Name
		if _, dup := conv.schemas[name]; dup || (mode == "function" && name != conv.choice.name) {
			continue
		}
		param := fmt.Sprintf("tools[%d].function.parameters", i)
		params := t.Function.Parameters
		if isNull(params) {
			params = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		s, err := grammar.Compile(params)
		if err != nil {
			strict := isTrue(t.Function.Strict)
			e := invalid(param, "invalid_value", "Invalid schema for '%s': %v", param, err)
			switch {
			case strict:
				e.Message += " (the tool is strict: its calls must follow the schema)"
				return e
			case mode == "function":
				return e
			case mode == "required":
				if setAside == nil {
					setAside = e
				}
				continue // not among the choices
			default:
				s = anyObject // auto: its calls' arguments are any object
			}
		}
		conv.schemas[name] = s
		conv.toolOrder = append(conv.toolOrder, name)
	}
	if len(conv.toolOrder) == 0 && setAside != nil {
		return setAside
	}
	return nil
}

// anyObject is the schema of any JSON object.
var anyObject, _ = grammar.Compile(json.RawMessage(`{"type":"object"}`))

// isTrue reports whether raw is JSON true.
func isTrue(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "true" }

// parseResponseFormat reads a chat request's response_format (or a
// Responses request's text.format, flat): nil for text.
func parseResponseFormat(raw json.RawMessage, param string) (*grammar.Schema, *apiError) {
	if isNull(raw) {
		return nil, nil
	}
	var f struct {
		Type       string          `json:"type"`
		JSONSchema json.RawMessage `json:"json_schema"`
		// The Responses API's text.format holds these at the top.
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
	}
	if err := json.Unmarshal(raw, &f); err != nil || bytes.TrimSpace(raw)[0] != '{' {
		return nil, invalid(param, "invalid_type", "Invalid type for '%s': expected an object.", param)
	}
	switch f.Type {
	case "text":
		return nil, nil
	case "json_object":
		s, _ := grammar.Compile(json.RawMessage(`{"type":"object"}`))
		return s, nil
	case "json_schema":
		name, schema, sp := f.Name, f.Schema, param
		if !isNull(f.JSONSchema) {
			var js struct {
				Name   string          `json:"name"`
				Schema json.RawMessage `json:"schema"`
			}
			if err := json.Unmarshal(f.JSONSchema, &js); err != nil {
				return nil, invalid(param+".json_schema", "invalid_type", "Invalid type for '%s.json_schema': expected an object.", param)
			}
			name, schema, sp = js.Name, js.Schema, param+".json_schema"
		}
		if name == "" {
			return nil, invalid(sp+".name", "missing_required_parameter", "Missing required parameter: '%s.name'.", sp)
		}
		s, err := grammar.Compile(schema)
		if err != nil {
			return nil, invalid(sp+".schema", "invalid_value", "Invalid schema for response_format %q: %v", name, err)
		}
		return s, nil
	case "":
		return nil, invalid(param+".type", "missing_required_parameter", "Missing required parameter: '%s.type'.", param)
	}
	return nil, invalid(param+".type", "invalid_value", "Invalid value for '%s.type': %q. Supported values are: 'text', 'json_object' and 'json_schema'.", param, f.Type)
}

// grammarFor is the grammar a request's choices follow after the prefill
// (in auto mode: after each "<tool_call>" the model opens), or nil when
// they are free. Calls are written in syntax's form (callForm); auto
// mode's lazy grammar is Hermes's, the only syntax whose calls open with
// a tag of their own (a bare call is read, not held to a grammar).
func grammarFor(conv *conversation, syntax callSyntax) *grammar.Grammar {
	f := syntax.form()
	closing := grammar.Part{Text: f.close}
	end := func(parts []grammar.Part) []grammar.Part {
		if f.end == "" {
			return parts
		}
		return append(slices.Clone(parts), grammar.Part{Text: f.end})
	}
	switch conv.choice.mode {
	case "function":
		return &grammar.Grammar{Alts: [][]grammar.Part{end([]grammar.Part{{Schema: conv.schemas[conv.choice.name]}, closing})}}
	case "required":
		// One call, or with parallel_tool_calls (the default) up to
		// maxParallelCalls, each naming a declared tool; the alternatives
		// are the sequences of names, so their number is bounded.
		calls := 1
		if !conv.oneCall {
			for calls < maxParallelCalls && pow(len(conv.toolOrder), calls+1) <= maxAlternatives {
				calls++
			}
		}
		g := &grammar.Grammar{}
		var seqs func(prefix []grammar.Part, k int)
		seqs = func(prefix []grammar.Part, k int) {
			for _, name := range conv.toolOrder {
				quoted, _ := json.Marshal(name)
				parts := append(slices.Clone(prefix), grammar.Part{Text: string(quoted[1:]) + f.argKey()},
					grammar.Part{Schema: conv.schemas[name]}, closing)
				g.Alts = append(g.Alts, end(parts))
				if k > 1 {
					seqs(append(parts, grammar.Part{Text: f.sep + `"`}), k-1)
				}
			}
		}
		seqs(nil, calls)
		return g
	case "auto":
		if len(conv.toolOrder) > 0 {
			// What follows "<tool_call>": one call, as the template
			// renders calls.
			h := syntaxHermes.form()
			g := &grammar.Grammar{}
			for _, name := range conv.toolOrder {
				quoted, _ := json.Marshal(name)
				g.Alts = append(g.Alts, []grammar.Part{{Text: "\n{\"name\": " + string(quoted) + h.argKey()},
					{Schema: conv.schemas[name]}, {Text: h.close}})
			}
			return g
		}
	}
	if conv.format != nil && (conv.choice.mode == "none" || len(conv.tools) == 0) {
		return &grammar.Grammar{Alts: [][]grammar.Part{{{Schema: conv.format}}}}
	}
	return nil
}

// Bounds of a "required" grammar with parallel calls.
const (
	maxParallelCalls = 3
	maxAlternatives  = 64
)

func pow(b, e int) int {
	n := 1
	for range e {
		n *= b
	}
	return n
}

// vocab is the tokenizer's tokens as bytes, built once.
func (s *Server) vocab() grammar.Vocab {
	s.vocabOnce.Do(func() { s.vocabBytes = s.tok.TokenBytes() })
	return s.vocabBytes
}

// constraint is a fresh constraint of g for one choice of conv (nil:
// none): lazy in auto mode, where g is a tool call's grammar and starts
// at each "<tool_call>" outside reasoning (reasoning: the prompt opened
// a reasoning block).
func (s *Server) constraint(conv *conversation, g *grammar.Grammar, reasoning bool) rollout.Constraint {
	switch {
	case g == nil:
		return nil
	case conv.choice.mode == "auto" && len(conv.toolOrder) > 0:
		return grammar.NewLazy(tagToolCall, g, s.vocab(), s.opts.StopTokens, reasoning)
	}
	return grammar.NewConstraint(g, s.vocab(), s.opts.StopTokens)
}
