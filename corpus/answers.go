package corpus

import (
	"encoding/json"
	"reflect"
	"regexp"
	"strings"
)

// Reading generated answers: the numbers and tool calls that evaluations
// check against the corpus's computed answers.

var lastInt = regexp.MustCompile(`[-−]?\d+`)

// LastInteger is the last integer written in s ("" if none).
func LastInteger(s string) string {
	all := lastInt.FindAllString(s, -1)
	if len(all) == 0 {
		return ""
	}
	return strings.Replace(all[len(all)-1], "−", "-", 1)
}

// ParsedCall is a tool call read from generated text.
type ParsedCall struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// ParseToolCall reads the first <tool_call>...</tool_call> block of s; ok
// means it is a JSON object with a name and an object of arguments.
func ParseToolCall(s string) (ParsedCall, bool) {
	i := strings.Index(s, "<tool_call>")
	if i < 0 {
		return ParsedCall{}, false
	}
	rest := s[i+len("<tool_call>"):]
	j := strings.Index(rest, "</tool_call>")
	if j < 0 {
		return ParsedCall{}, false
	}
	var c ParsedCall
	if err := json.Unmarshal([]byte(rest[:j]), &c); err != nil || c.Name == "" {
		return ParsedCall{}, false
	}
	var args map[string]any
	if err := json.Unmarshal(c.Arguments, &args); err != nil || args == nil {
		return c, false
	}
	return c, true
}

// JSONEqual says whether a and b are the same JSON value.
func JSONEqual(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}
