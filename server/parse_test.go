package server

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

type parsed struct {
	reasoning, content string
	calls              []string // name + " " + args
}

// parseChunked feeds text in pieces of size n and checks that the deltas
// add up to what the parser reports at the end.
func parseChunked(t *testing.T, text string, n int, tools, reasoning bool) parsed {
	t.Helper()
	p := newOutputParser(tools, reasoning, syntaxHermes)
	var ds []delta
	for i := 0; i < len(text); i += n {
		ds = append(ds, p.push(text[i:min(i+n, len(text))])...)
	}
	ds = append(ds, p.finish()...)
	var r, c strings.Builder
	args := map[int]*strings.Builder{}
	names := map[int]string{}
	for _, d := range ds {
		r.WriteString(d.reasoning)
		c.WriteString(d.content)
		if d.call != nil {
			if d.call.start {
				if _, dup := names[d.call.index]; dup {
					t.Fatalf("call %d started twice", d.call.index)
				}
				if !strings.HasPrefix(d.call.id, "call") || len(d.call.id) != 28 {
					t.Fatalf("call id %q", d.call.id)
				}
				names[d.call.index] = d.call.name
				args[d.call.index] = &strings.Builder{}
			}
			if args[d.call.index] == nil {
				t.Fatalf("arguments before the start of call %d", d.call.index)
			}
			args[d.call.index].WriteString(d.call.args)
		}
	}
	out := parsed{reasoning: p.reasoning.String(), content: p.content.String()}
	if r.String() != out.reasoning || c.String() != out.content {
		t.Fatalf("deltas (%q, %q) differ from totals (%q, %q)", r.String(), c.String(), out.reasoning, out.content)
	}
	if len(p.calls) != len(names) {
		t.Fatalf("%d calls, %d started", len(p.calls), len(names))
	}
	for i, call := range p.calls {
		if names[i] != call.name || args[i].String() != call.args {
			t.Fatalf("call %d streamed as %s %s, parsed as %s %s", i, names[i], args[i], call.name, call.args)
		}
		out.calls = append(out.calls, call.name+" "+call.args)
	}
	return out
}

func TestOutputParser(t *testing.T) {
	cases := []struct {
		name             string
		text             string
		tools, reasoning bool
		want             parsed
	}{
		{name: "plain", text: "Hello, world.", want: parsed{content: "Hello, world."}},
		{name: "angle brackets", text: "a < b and <tool is not <tool_call", tools: true,
			want: parsed{content: "a < b and <tool is not <tool_call"}},
		{name: "think", text: "<think>\nLet me think.\n\nYes.\n</think>\n\nThe answer is 4.",
			want: parsed{reasoning: "Let me think.\n\nYes.", content: "The answer is 4."}},
		{name: "think opened by the prompt", text: "hmm\n</think>\n\nok", reasoning: true,
			want: parsed{reasoning: "hmm", content: "ok"}},
		{name: "truncated think", text: "<think>\nstill thinking", want: parsed{reasoning: "still thinking"}},
		{name: "think not at start", text: "Say <think> please", want: parsed{content: "Say <think> please"}},
		{name: "qwen tool call", tools: true,
			text: "I'll check.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
			want: parsed{content: "I'll check.", calls: []string{`get_weather {"city": "Paris"}`}}},
		{name: "two calls after thinking", tools: true,
			text: "<think>\nneed two\n</think>\n\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": [1, {\"y\": \"}\"}]}}\n</tool_call>",
			want: parsed{reasoning: "need two", calls: []string{"a {}", `b {"x": [1, {"y": "}"}]}`}}},
		{name: "closing tag inside a string argument", tools: true,
			text: "<tool_call>{\"name\": \"write\", \"arguments\": {\"text\": \"a </tool_call> \\\" b\"}}</tool_call>",
			want: parsed{calls: []string{`write {"text": "a </tool_call> \" b"}`}}},
		{name: "arguments first", tools: true,
			text: "<tool_call>\n{\"arguments\": {\"q\": 1}, \"name\": \"search\"}\n</tool_call>",
			want: parsed{calls: []string{`search {"q": 1}`}}},
		{name: "string arguments", tools: true,
			text: "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}\n</tool_call>",
			want: parsed{calls: []string{`f {"a": 1}`}}},
		{name: "not json", tools: true, text: "<tool_call>not json</tool_call> ok",
			want: parsed{content: "<tool_call>not json</tool_call>ok"}},
		{name: "tools off", text: "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
			want: parsed{content: "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>"}},
		{name: "truncated header", tools: true, text: "x <tool_call>\n{\"na",
			want: parsed{content: "x<tool_call>\n{\"na"}},
		{name: "truncated arguments", tools: true, text: "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"lo",
			want: parsed{calls: []string{`f {"a": "lo`}}},
		{name: "text after call", tools: true,
			text: "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\n\nDone.",
			want: parsed{content: "Done.", calls: []string{"f {}"}}},
		{name: "unicode", tools: true, text: "héllo 🌍 <tool_call>{\"name\": \"f\", \"arguments\": {\"é\": \"🌍\"}}</tool_call>",
			want: parsed{content: "héllo 🌍", calls: []string{`f {"é": "🌍"}`}}},
		{name: "inner whitespace kept", text: "a\n\nb  ", tools: true, want: parsed{content: "a\n\nb  "}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, n := range []int{1, 2, 3, 7, len(c.text)} {
				got := parseChunked(t, c.text, n, c.tools, c.reasoning)
				if fmt.Sprint(got) != fmt.Sprint(c.want) {
					t.Fatalf("chunks of %d:\n got %#v\nwant %#v", n, got, c.want)
				}
			}
		})
	}
}

func TestParseHeader(t *testing.T) {
	cases := []struct {
		in       string
		name     string
		ok, more bool
	}{
		{in: "", more: true},
		{in: "\n{", more: true},
		{in: `{"na`, more: true},
		{in: `{"name": "f`, more: true},
		{in: `{"name": "f", "argum`, more: true},
		{in: `{"name": "f", "arguments": `, more: true},
		{in: `{"name": "f", "arguments": {`, name: "f", ok: true},
		{in: `{"name":"f\"g","arguments":[`, name: `f"g`, ok: true},
		{in: `{"arguments": {}, "name": "f"}`},
		{in: `{"name": "f", "arguments": "x"}`},
		{in: `[1]`},
	}
	for _, c := range cases {
		name, _, ok, more := parseHeader(c.in)
		if name != c.name || ok != c.ok || more != c.more {
			t.Errorf("parseHeader(%q) = %q, ok %v, more %v; want %q, %v, %v", c.in, name, ok, more, c.name, c.ok, c.more)
		}
	}
}

func FuzzOutputParser(f *testing.F) {
	f.Add("<think>x</think>y<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}</tool_call>", 3)
	f.Add("<tool_call>{\"arguments\": {}, \"name\": \"g\"}</tool_call>", 1)
	f.Fuzz(func(t *testing.T, text string, n int) {
		if n <= 0 || n > 64 {
			n = 5
		}
		p := newOutputParser(true, false, syntaxHermes)
		var total strings.Builder
		for i := 0; i < len(text); i += n {
			for _, d := range p.push(text[i:min(i+n, len(text))]) {
				total.WriteString(d.content)
			}
		}
		for _, d := range p.finish() {
			total.WriteString(d.content)
		}
		if total.String() != p.content.String() {
			t.Fatalf("content deltas %q != content %q", total.String(), p.content.String())
		}
		for _, c := range p.calls {
			if c.name == "" {
				t.Fatalf("call without a name")
			}
			_ = json.Valid([]byte(c.args))
		}
	})
}

// TestBareCallSyntax: a Llama 3.1 or Mistral reply that is a tool call in
// the model's own syntax becomes tool calls, streamed in any pieces; a
// reply that only looks like one stays content; a plain reply streams at
// once; which syntax is read from the chat template.
func TestBareCallSyntax(t *testing.T) {
	type call struct{ name, args string }
	run := func(syntax callSyntax, pieces ...string) (content string, calls []call, early string) {
		p := newOutputParser(true, false, syntax)
		var ds []delta
		for i, s := range pieces {
			got := p.push(s)
			if i == 0 {
				for _, d := range got {
					early += d.content
				}
			}
			ds = append(ds, got...)
		}
		ds = append(ds, p.finish()...)
		for _, d := range ds {
			content += d.content
		}
		for _, c := range p.calls {
			calls = append(calls, call{c.name, c.args})
		}
		return content, calls, early
	}
	for _, c := range []struct {
		name    string
		syntax  callSyntax
		pieces  []string
		content string
		calls   []call
	}{
		{"llama json", syntaxJSON, []string{`{"name": "get_we`, `ather", "parameters": {"city": "Paris"}}`}, "", []call{{"get_weather", `{"city": "Paris"}`}}},
		{"llama python tag", syntaxJSON, []string{"<|python", `_tag|>{"name": "f", "parameters": {}}`}, "", []call{{"f", "{}"}}},
		{"llama two calls", syntaxJSON, []string{`{"name": "a", "parameters": {"x": 1}}; {"name": "b", "arguments": "{\"y\": 2}"}`}, "", []call{{"a", `{"x": 1}`}, {"b", `{"y": 2}`}}},
		{"llama json that is no call", syntaxJSON, []string{`{"answer": 4}`}, `{"answer": 4}`, nil},
		{"llama call then text", syntaxJSON, []string{`{"name": "f", "parameters": {}} and more`}, `{"name": "f", "parameters": {}} and more`, nil},
		{"llama reply cut in its second call", syntaxJSON, []string{`{"name": "a", "parameters": {"x": 1}}; {"name": "b", "param`}, "", []call{{"a", `{"x": 1}`}}},
		{"llama reply cut in its only call", syntaxJSON, []string{`{"name": "a", "param`}, `{"name": "a", "param`, nil},
		{"mistral", syntaxMistral, []string{"[TOOL_", `CALLS] [{"name": "f", "arguments": {"q": "x"}}, {"name": "g", "arguments": {}}]`}, "", []call{{"f", `{"q": "x"}`}, {"g", "{}"}}},
		{"mistral array that is no call", syntaxMistral, []string{`[TOOL_CALLS] [1, 2]`}, `[TOOL_CALLS] [1, 2]`, nil},
		{"hermes syntax leaves bare JSON alone", syntaxHermes, []string{`{"name": "f", "parameters": {}}`}, `{"name": "f", "parameters": {}}`, nil},
	} {
		content, calls, _ := run(c.syntax, c.pieces...)
		if content != c.content || fmt.Sprint(calls) != fmt.Sprint(c.calls) {
			t.Errorf("%s: content %q calls %v, want %q %v", c.name, content, calls, c.content, c.calls)
		}
	}
	// A plain answer is not held back.
	if _, _, early := run(syntaxJSON, "Paris is the capital.", " Yes."); early != "Paris is the capital." {
		t.Errorf("plain reply streamed %q at once", early)
	}
	for _, c := range []struct {
		template string
		want     callSyntax
	}{
		{"{{ '<tool_call>' }}{{ tool_call | tojson }}", syntaxHermes},
		{`Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.`, syntaxJSON},
		{"{{- '<|python_tag|>' + tool_call.name }}", syntaxJSON},
		{"{{- '[TOOL_CALLS] [' }}", syntaxMistral},
		{"{{ bos_token }}[INST] {{ message['content'] }} [/INST]", syntaxHermes},
	} {
		if got := detectCallSyntax(c.template); got != c.want {
			t.Errorf("detectCallSyntax(%q) = %d, want %d", c.template, got, c.want)
		}
	}
}
