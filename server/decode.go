package server

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"unicode/utf8"
)

// decodeBody reads a JSON object from r's body into v. Unknown fields are
// ignored, as OpenAI does.
func decodeBody(r *http.Request, limit int64, v any) *apiError {
	return decodeBodyFields(r, limit, v, false)
}

// decodeBodyStrict is decodeBody for clawrl's own endpoints: an unknown
// field is refused with its name and the fields there are, so that a
// mistyped one ("rating" for "thumb") is not silently dropped.
func decodeBodyStrict(r *http.Request, limit int64, v any) *apiError {
	return decodeBodyFields(r, limit, v, true)
}

func decodeBodyFields(r *http.Request, limit int64, v any, strict bool) *apiError {
	data, err := io.ReadAll(r.Body)
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return tooLarge(limit)
		}
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			return &apiError{Status: http.StatusRequestTimeout, Type: typeInvalidRequest, Code: "request_timeout",
				Message: "The request body did not arrive in time."}
		}
		return invalid("", "", "Could not read the request body: %v", err)
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return invalid("", "", "The request body is empty; send a JSON object.")
	}
	if data[0] != '{' {
		return invalid("", "", "The request body must be a JSON object.")
	}
	if !utf8.Valid(data) {
		// encoding/json would replace the bytes silently, and the text
		// would be served and trained on altered; OpenAI refuses it too.
		return invalid("", "invalid_encoding", "The request body is not valid UTF-8 (at byte %d); send JSON text in UTF-8.", invalidAt(data))
	}
	if strict {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(data, &fields); err == nil {
			known := jsonFields(reflect.TypeOf(v))
			for _, name := range slices.Sorted(maps.Keys(fields)) {
				if !known[name] {
					return invalid(name, "unknown_parameter", "Unknown parameter: '%s'. The parameters are %s.",
						name, strings.Join(slices.Sorted(maps.Keys(known)), ", "))
				}
			}
		}
	}
	if err := json.Unmarshal(data, v); err != nil {
		if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
			field := apiField(reflect.TypeOf(v), te.Field)
			return invalid(field, "invalid_type", "Invalid type for '%s': expected %s, got JSON %s.",
				field, jsonTypeName(te.Type.Kind().String()), te.Value)
		}
		return invalid("", "", "We could not parse the JSON body of your request: %v", err)
	}
	return nil
}

// jsonFields is the set of JSON names of the fields of the struct that t
// (a pointer to it) points to.
func jsonFields(t reflect.Type) map[string]bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	out := map[string]bool{}
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name == "" {
			name = t.Field(i).Name
		}
		if name != "-" {
			out[name] = true
		}
	}
	return out
}

func jsonTypeName(kind string) string {
	switch {
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"):
		return "an integer"
	case strings.HasPrefix(kind, "float"):
		return "a number"
	case kind == "string":
		return "a string"
	case kind == "bool":
		return "a boolean"
	case kind == "slice":
		return "an array"
	case kind == "struct", kind == "map":
		return "an object"
	}
	return kind
}

// isNull reports whether raw is absent or JSON null.
func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

// contentPart is one part of an array content.
type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// flattenContent turns a message content (a string, an array of parts, or
// null) into text; text parts are joined with newlines. Images, audio and
// files are refused.
func flattenContent(raw json.RawMessage, param string) (text string, null bool, e *apiError) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return "", true, nil
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", false, invalid(param, "invalid_type", "Invalid value for '%s': %v", param, err)
		}
		return s, false, nil
	case '[':
		var parts []json.RawMessage
		if err := json.Unmarshal(raw, &parts); err != nil {
			return "", false, invalid(param, "invalid_type", "Invalid value for '%s': %v", param, err)
		}
		texts := make([]string, 0, len(parts))
		for i, rp := range parts {
			pp := fmt.Sprintf("%s[%d]", param, i)
			var p contentPart
			if err := json.Unmarshal(rp, &p); err != nil || bytes.TrimSpace(rp)[0] != '{' {
				return "", false, invalid(pp, "invalid_type", "Invalid value for '%s': expected a content part object.", pp)
			}
			switch p.Type {
			case "text", "input_text", "output_text":
				texts = append(texts, p.Text)
			case "refusal":
			case "image_url", "input_image", "image":
				return "", false, invalid(pp, "unsupported_content", "images are not supported")
			case "input_audio", "audio":
				return "", false, invalid(pp, "unsupported_content", "audio is not supported")
			case "file", "input_file":
				return "", false, invalid(pp, "unsupported_content", "files are not supported")
			default:
				return "", false, invalid(pp+".type", "invalid_value", "Invalid content part type %q.", p.Type)
			}
		}
		return strings.Join(texts, "\n"), false, nil
	}
	return "", false, invalid(param, "invalid_type", "Invalid type for '%s': expected a string or an array of content parts.", param)
}

// parseStop reads stop: a string or an array of up to 4 strings.
func parseStop(raw json.RawMessage) ([]string, *apiError) {
	if isNull(raw) {
		return nil, nil
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		if one == "" {
			return nil, nil
		}
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, invalid("stop", "invalid_type", "Invalid type for 'stop': expected a string or an array of strings.")
	}
	if len(many) > 4 {
		return nil, invalid("stop", "invalid_value", "Invalid 'stop': at most 4 stop sequences are allowed, got %d.", len(many))
	}
	var out []string
	for _, s := range many {
		if s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

// functionDef is the function of a tool definition.
type functionDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      json.RawMessage `json:"strict,omitempty"`
}

// chatTool is a tool in the chat-completions form, as templates expect.
type chatTool struct {
	Type     string      `json:"type"`
	Function functionDef `json:"function"`
}

// parseChatTools validates chat-completions tools and returns them as
// given (templates get their original key order) with their names.
func parseChatTools(tools []json.RawMessage) ([]json.RawMessage, map[string]bool, *apiError) {
	names := map[string]bool{}
	for i, raw := range tools {
		param := fmt.Sprintf("tools[%d]", i)
		var t chatTool
		if err := json.Unmarshal(raw, &t); err != nil || isNull(raw) || bytes.TrimSpace(raw)[0] != '{' {
			return nil, nil, invalid(param, "invalid_type", "Invalid value for '%s': expected a tool object.", param)
		}
		if t.Type != "function" {
			return nil, nil, invalid(param+".type", "invalid_value", "Unsupported tool type %q: only function tools are supported.", t.Type)
		}
		if t.Function.Name == "" {
			return nil, nil, invalid(param+".function.name", "missing_required_parameter", "Missing required parameter: '%s.function.name'.", param)
		}
		if !isNull(t.Function.Parameters) && bytes.TrimSpace(t.Function.Parameters)[0] != '{' {
			return nil, nil, invalid(param+".function.parameters", "invalid_type", "Invalid type for '%s.function.parameters': expected an object.", param)
		}
		names[t.Function.Name] = true
	}
	return tools, names, nil
}

// toolChoice is a parsed tool_choice.
type toolChoice struct {
	mode string // auto, none, required, function
	name string // for function
}

// parseToolChoice reads tool_choice in the chat form ("auto", "none",
// "required", {"type": "function", "function": {"name": ...}}) or the
// Responses form ({"type": "function", "name": ...}).
func parseToolChoice(raw json.RawMessage, names map[string]bool) (toolChoice, *apiError) {
	if isNull(raw) {
		return toolChoice{mode: "auto"}, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		switch s {
		case "auto", "none":
			return toolChoice{mode: s}, nil
		case "required":
			if len(names) == 0 {
				return toolChoice{}, invalid("tool_choice", "invalid_value", "tool_choice 'required' needs tools.")
			}
			return toolChoice{mode: s}, nil
		}
		return toolChoice{}, invalid("tool_choice", "invalid_value", "Invalid value for 'tool_choice': %q.", s)
	}
	var obj struct {
		Type     string `json:"type"`
		Name     string `json:"name"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Type != "function" {
		return toolChoice{}, invalid("tool_choice", "invalid_value", "Invalid value for 'tool_choice'.")
	}
	name := obj.Function.Name
	if name == "" {
		name = obj.Name
	}
	if !names[name] {
		return toolChoice{}, invalid("tool_choice", "invalid_value", "tool_choice names function %q, which is not among the tools.", name)
	}
	return toolChoice{mode: "function", name: name}, nil
}

// parseToolArguments returns tool-call arguments as the template gets them:
// a JSON string holding the arguments text (the OpenAI wire form, which
// templates such as Qwen's print as they are), or an object.
func parseToolArguments(raw json.RawMessage, param string) (json.RawMessage, *apiError) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return json.RawMessage(`"{}"`), nil
	}
	switch raw[0] {
	case '"', '{':
		if !json.Valid(raw) {
			return nil, invalid(param, "invalid_type", "Invalid value for '%s'.", param)
		}
		return raw, nil
	}
	return nil, invalid(param, "invalid_type", "Invalid type for '%s': expected a string.", param)
}

const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// newID returns prefix and n random letters and digits.
func newID(prefix string, n int) string {
	b := make([]byte, n)
	buf := make([]byte, n+n/2)
	for i := 0; i < n; {
		rand.Read(buf) // crypto/rand.Read never fails
		for _, c := range buf {
			if c >= 248 { // 248 = 4*62: reject to keep the letters uniform
				continue
			}
			b[i] = alnum[int(c)%len(alnum)]
			i++
			if i == n {
				break
			}
		}
	}
	return prefix + string(b)
}

// apiField turns encoding/json's path of a field into the API's: the
// names of embedded Go structs (which json flattens into their parent, but
// names in the path) are dropped.
func apiField(t reflect.Type, path string) string {
	embedded := map[string]bool{}
	var walk func(t reflect.Type, depth int)
	walk = func(t reflect.Type, depth int) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || depth > 8 {
			return
		}
		for i := range t.NumField() {
			f := t.Field(i)
			if f.Anonymous {
				embedded[f.Name] = true
			}
			walk(f.Type, depth+1)
		}
	}
	walk(t, 0)
	parts := strings.Split(path, ".")
	out := parts[:0]
	for _, p := range parts {
		if !embedded[p] {
			out = append(out, p)
		}
	}
	return strings.Join(out, ".")
}

// invalidAt is the offset of the first byte of b that is not valid UTF-8.
func invalidAt(b []byte) int {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return len(b)
}
