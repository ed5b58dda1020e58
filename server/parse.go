package server

import (
	"encoding/json"
	"strings"
	"unicode"
)

// The markup of Qwen/Hermes-style chat templates.
const (
	tagThink     = "<think>"
	tagThinkEnd  = "</think>"
	tagToolCall  = "<tool_call>"
	tagToolClose = "</tool_call>"
)

// delta is one piece of a choice's output, in the order it was generated.
type delta struct {
	reasoning string
	content   string
	call      *callDelta
	logprobs  []tokenLogprob
}

// callDelta is a fragment of a tool call: the first carries the id and
// name, later ones pieces of the arguments.
type callDelta struct {
	index int
	id    string
	name  string
	args  string
	start bool
}

// toolCall is a parsed tool call.
type toolCall struct {
	id   string
	name string
	args string // JSON text
}

type parseState int

const (
	stStart     parseState = iota // a <think> block may open
	stReasoning                   // inside <think>
	stContent                     // plain content
	stHeader                      // after <tool_call>, before the arguments value
	stArgs                        // inside the arguments value
	stTail                        // after the arguments value, before </tool_call>
	stRaw                         // a tool call of another layout, read whole
	stBare                        // a reply that opened as a bare call (syntaxJSON, syntaxMistral), read whole
)

// outputParser splits generated text, as it streams, into reasoning (a
// leading <think> block), content, and Hermes-style tool calls
// (<tool_call>{"name": ..., "arguments": {...}}</tool_call>). Text that might
// begin a tag is held back until it is decided, so that no markup reaches
// the client. The arguments of a call stream as they are generated when
// the call is laid out as name first, then an object; a call in any other
// layout is emitted whole once it closes.
type outputParser struct {
	tools     bool // recognise tool calls
	syntax    callSyntax
	oneCall   bool // a bare reply's first call only (parallel_tool_calls: false)
	state     parseState
	buf       string // undecided text
	stripLead bool   // drop white space at the start of the next segment

	calls []toolCall
	cur   *toolCall
	scan  jsonScanner

	reasoning strings.Builder
	content   strings.Builder
	out       []delta
}

// newOutputParser returns a parser. reasoning says the prompt already opened
// a <think> block; tools enables tool-call parsing, in Hermes tags and,
// when the reply opens with one, in the bare call of syntax (the reply is
// then held back and read whole at its end: an answer that only looked
// like a call is given as content).
func newOutputParser(tools, reasoning bool, syntax callSyntax) *outputParser {
	p := &outputParser{tools: tools, syntax: syntax, state: stStart, stripLead: true}
	if reasoning {
		p.state = stReasoning
	}
	return p
}

// push adds generated text and returns the deltas it decides.
func (p *outputParser) push(text string) []delta {
	p.out = nil
	p.buf += text
	for p.step(false) {
	}
	return p.out
}

// finish ends the output: whatever is held back is decided as it stands.
func (p *outputParser) finish() []delta {
	p.out = nil
	for p.step(true) {
	}
	switch p.state {
	case stStart, stContent:
		if p.buf != "" && !(p.stripLead && isSpace(p.buf)) {
			p.emitContent(p.buf)
		}
	case stReasoning:
		p.emitReasoning(strings.TrimRightFunc(p.buf, unicode.IsSpace))
	case stHeader, stRaw:
		if !p.finishRaw(p.buf) {
			p.emitContent(tagToolCall + p.buf)
		}
	case stBare:
		if calls, ok := parseBareCalls(p.buf); ok {
			if p.oneCall {
				calls = calls[:1]
			}
			for _, c := range calls {
				p.startCall(c.name)
				p.emitArgs(c.args)
				p.closeCall()
			}
		} else {
			p.emitContent(strings.TrimRightFunc(p.buf, unicode.IsSpace))
		}
	case stArgs, stTail:
		p.closeCall()
	}
	p.buf = ""
	return p.out
}

// step makes one decision on buf; it reports whether to step again.
func (p *outputParser) step(final bool) bool {
	if p.stripLead && p.state != stArgs && p.state != stTail {
		trimmed := strings.TrimLeftFunc(p.buf, unicode.IsSpace)
		if trimmed == "" {
			return false
		}
		if p.state != stStart {
			p.buf = trimmed
			p.stripLead = false
		}
	}
	switch p.state {
	case stStart:
		t := strings.TrimLeftFunc(p.buf, unicode.IsSpace)
		switch {
		case strings.HasPrefix(t, tagThink):
			p.buf = t[len(tagThink):]
			p.state = stReasoning
			p.stripLead = true
		case strings.HasPrefix(tagThink, t) && !final:
			return false
		default:
			if p.tools {
				for _, o := range p.syntax.openers() {
					if strings.HasPrefix(t, o) {
						p.buf, p.state = t, stBare
						return true
					}
					if strings.HasPrefix(o, t) && !final {
						return false
					}
				}
			}
			p.state = stContent
		}
		return true

	case stBare:
		return false // read whole by finish

	case stReasoning:
		if i := strings.Index(p.buf, tagThinkEnd); i >= 0 {
			p.emitReasoning(strings.TrimRightFunc(p.buf[:i], unicode.IsSpace))
			p.buf = p.buf[i+len(tagThinkEnd):]
			p.state = stContent
			p.stripLead = true
			return true
		}
		emit, hold := holdBack(p.buf, tagThinkEnd)
		p.emitReasoning(emit)
		p.buf = hold
		return false

	case stContent:
		if !p.tools {
			p.emitContent(p.buf)
			p.buf = ""
			return false
		}
		if i := strings.Index(p.buf, tagToolCall); i >= 0 {
			p.emitContent(strings.TrimRightFunc(p.buf[:i], unicode.IsSpace))
			p.buf = p.buf[i+len(tagToolCall):]
			p.state = stHeader
			return true
		}
		emit, hold := holdBack(p.buf, tagToolCall)
		p.emitContent(emit)
		p.buf = hold
		return false

	case stHeader:
		name, rest, ok, more := parseHeader(p.buf)
		if more && !strings.Contains(p.buf, tagToolClose) {
			return false
		}
		if !ok {
			p.state = stRaw
			return true
		}
		p.startCall(name)
		p.buf = rest
		p.scan = jsonScanner{}
		p.state = stArgs
		return true

	case stArgs:
		n, done := p.scan.feed(p.buf)
		p.emitArgs(p.buf[:n])
		p.buf = p.buf[n:]
		if done {
			p.state = stTail
			return true
		}
		return false

	case stTail:
		if i := strings.Index(p.buf, tagToolClose); i >= 0 {
			p.buf = p.buf[i+len(tagToolClose):]
			p.closeCall()
			p.state = stContent
			p.stripLead = true
			return true
		}
		return false

	case stRaw:
		i := strings.Index(p.buf, tagToolClose)
		if i < 0 {
			return false
		}
		body := p.buf[:i]
		p.buf = p.buf[i+len(tagToolClose):]
		if !p.finishRaw(body) {
			p.emitContent(tagToolCall + body + tagToolClose)
		}
		p.state = stContent
		p.stripLead = true
		return true
	}
	return false
}

func (p *outputParser) emitReasoning(s string) {
	if s == "" {
		return
	}
	p.reasoning.WriteString(s)
	p.out = append(p.out, delta{reasoning: s})
}

func (p *outputParser) emitContent(s string) {
	if s == "" {
		return
	}
	p.content.WriteString(s)
	p.out = append(p.out, delta{content: s})
}

func (p *outputParser) startCall(name string) {
	p.cur = &toolCall{id: newID("call", 24), name: name}
	p.out = append(p.out, delta{call: &callDelta{index: len(p.calls), id: p.cur.id, name: name, start: true}})
}

func (p *outputParser) emitArgs(s string) {
	if s == "" {
		return
	}
	p.cur.args += s
	p.out = append(p.out, delta{call: &callDelta{index: len(p.calls), args: s}})
}

func (p *outputParser) closeCall() {
	if p.cur == nil {
		return
	}
	p.calls = append(p.calls, *p.cur)
	p.cur = nil
}

// finishRaw parses a whole tool call body ({"name": ..., "arguments": ...}
// in any layout) and emits it; false means body is not a tool call.
func (p *outputParser) finishRaw(body string) bool {
	var c struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal([]byte(body), &c); err != nil || c.Name == "" {
		return false
	}
	args := "{}"
	if !isNull(c.Arguments) {
		args = string(c.Arguments)
		var s string
		if json.Unmarshal(c.Arguments, &s) == nil {
			args = s // arguments given as a JSON string
		}
	}
	p.startCall(c.Name)
	p.emitArgs(args)
	p.closeCall()
	return true
}

// callsDone is how many tool calls are complete.
func (p *outputParser) callsDone() int { return len(p.calls) }

// holdBack splits s into the text that can be emitted now and a tail that
// might still begin tag: the longest suffix that is a proper prefix of
// tag, together with the white space before it.
func holdBack(s, tag string) (emit, hold string) {
	keep := 0
	for l := min(len(tag)-1, len(s)); l > 0; l-- {
		if strings.HasSuffix(s, tag[:l]) {
			keep = l
			break
		}
	}
	cut := len(s) - keep
	cut = len(strings.TrimRightFunc(s[:cut], unicode.IsSpace))
	return s[:cut], s[cut:]
}

func isSpace(s string) bool { return strings.TrimSpace(s) == "" }

// parseHeader reads the start of a tool call, `{"name": "<name>",
// "arguments": ` followed by an object or array. ok means it matched (rest
// then starts at the arguments value); more means s is a prefix of a match
// and more text may decide.
func parseHeader(s string) (name, rest string, ok, more bool) {
	i := skipSpace(s, 0)
	expect := func(lit string) (matched, needMore bool) {
		if strings.HasPrefix(s[i:], lit) {
			i += len(lit)
			i = skipSpace(s, i)
			return true, false
		}
		return false, strings.HasPrefix(lit, s[i:])
	}
	for _, lit := range []string{"{", `"name"`, ":"} {
		if m, nm := expect(lit); !m {
			return "", "", false, nm
		}
	}
	if i == len(s) {
		return "", "", false, true
	}
	if s[i] != '"' {
		return "", "", false, false
	}
	end := -1
	for j := i + 1; j < len(s); j++ {
		if s[j] == '\\' {
			j++
			continue
		}
		if s[j] == '"' {
			end = j
			break
		}
	}
	if end < 0 {
		return "", "", false, len(s)-i < 512
	}
	if err := json.Unmarshal([]byte(s[i:end+1]), &name); err != nil || name == "" {
		return "", "", false, false
	}
	i = skipSpace(s, end+1)
	for _, lit := range []string{",", `"arguments"`, ":"} {
		if m, nm := expect(lit); !m {
			return "", "", false, nm
		}
	}
	if i == len(s) {
		return "", "", false, true
	}
	if s[i] != '{' && s[i] != '[' {
		return "", "", false, false
	}
	return name, s[i:], true, false
}

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r') {
		i++
	}
	return i
}

// jsonScanner finds where a JSON object or array ends in streamed text.
type jsonScanner struct {
	depth    int
	inString bool
	escape   bool
}

// feed consumes s and returns how many bytes belong to the value and
// whether the value ended there.
func (j *jsonScanner) feed(s string) (int, bool) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case j.inString:
			switch {
			case j.escape:
				j.escape = false
			case c == '\\':
				j.escape = true
			case c == '"':
				j.inString = false
			}
		case c == '"':
			j.inString = true
		case c == '{' || c == '[':
			j.depth++
		case c == '}' || c == ']':
			j.depth--
			if j.depth <= 0 {
				return i + 1, true
			}
		}
	}
	return len(s), false
}
