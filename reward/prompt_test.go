package reward

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/clawrl/clawrl/tokenizer"
)

func msg(role, content string) tokenizer.Message {
	return tokenizer.Message{Role: role, Content: content}
}

func TestTranscriptShortIsWhole(t *testing.T) {
	turn := Turn{
		Messages: []tokenizer.Message{
			msg("system", "You are terse."),
			msg("user", "Rename config.yml to config.yaml."),
		},
		Tools:     []json.RawMessage{json.RawMessage(`{"type":"function","function":{"name":"shell","parameters":{}}}`)},
		Response:  tokenizer.Message{Role: "assistant", ToolCalls: []tokenizer.ToolCall{{Function: tokenizer.FunctionCall{Name: "shell", Arguments: json.RawMessage(`"{\"cmd\":\"mv config.yml config.yaml\"}"`)}}}},
		NextState: []tokenizer.Message{{Role: "tool", Name: "shell", Content: "ok"}, msg("user", "thanks, now commit it")},
	}
	msgs := JudgeMessages(&turn, "", DefaultLimits())
	if len(msgs) != 2 || msgs[0].Role != "system" || msgs[1].Role != "user" {
		t.Fatalf("judge chat shape: %+v", msgs)
	}
	if msgs[0].Content != judgeSystemPrompt {
		t.Errorf("system message is not the judge prompt")
	}
	u := msgs[1].Content
	for _, want := range []string{
		"The assistant could call these tools: shell.",
		"[system]\nYou are terse.",
		"[user]\nRename config.yml to config.yaml.",
		"=== THE REPLY TO EVALUATE ===\n[calls tool shell with {\"cmd\":\"mv config.yml config.yaml\"}]",
		"[tool result: shell]\nok",
		"[user]\nthanks, now commit it",
		judgeClosing,
	} {
		if !strings.Contains(u, want) {
			t.Errorf("judge input lacks %q:\n%s", want, u)
		}
	}
	if strings.Contains(u, "elided]") && !strings.Contains(u, "mark the cuts") || strings.Count(u, "elided") != 2 {
		// The preamble mentions both markers once each; nothing else is cut.
		t.Errorf("short conversation was cut:\n%s", u)
	}
	h := HintMessages(&turn, "use git mv next time", DefaultLimits())
	if h[0].Content != hintSystemPrompt || !strings.Contains(h[1].Content, "[explicit feedback from the user on the reply]\nuse git mv next time") {
		t.Errorf("hint chat: %+v", h)
	}
}

func TestTranscriptBounded(t *testing.T) {
	long := func(tag string, n int) string {
		var b strings.Builder
		for b.Len() < n {
			fmt.Fprintf(&b, "%s-%d ", tag, b.Len())
		}
		return b.String()[:n]
	}
	msgs := []tokenizer.Message{msg("system", "SYSHEAD "+long("sys", 47000)+" SYSTAIL")}
	for i := range 40 {
		msgs = append(msgs, msg("user", fmt.Sprintf("old question %d %s", i, long("q", 3000))))
		msgs = append(msgs, msg("assistant", fmt.Sprintf("old answer %d %s", i, long("a", 3000))))
	}
	msgs = append(msgs, msg("user", "LASTREQUEST "+long("req", 9000)+" REQTAIL"))
	msgs = append(msgs, tokenizer.Message{Role: "assistant", ToolCalls: []tokenizer.ToolCall{{Function: tokenizer.FunctionCall{Name: "read", Arguments: json.RawMessage(`{"path":"a.go"}`)}}}})
	msgs = append(msgs, tokenizer.Message{Role: "tool", Content: "INTURN " + long("tool", 20000)})
	turn := Turn{
		Messages:  msgs,
		Response:  msg("assistant", "RESPHEAD "+long("resp", 30000)+" RESPTAIL"),
		NextState: []tokenizer.Message{msg("user", "NEXTHEAD no, I meant the other file "+long("next", 10000)), msg("user", "SECOND")},
	}
	lim := DefaultLimits()
	u := JudgeMessages(&turn, "FEEDBACK", lim)[1].Content
	total := lim.System + lim.Request + lim.History + lim.Response + lim.NextState
	if n := utf8.RuneCountInString(u); n > total+3000 {
		t.Errorf("judge input has %d characters; want at most about %d", n, total)
	}
	for _, want := range []string{"SYSHEAD", "SYSTAIL", "LASTREQUEST", "REQTAIL", "RESPHEAD", "RESPTAIL", "NEXTHEAD no, I meant", "[calls tool read", "INTURN", "characters elided"} {
		if !strings.Contains(u, want) {
			t.Errorf("judge input lacks %q", want)
		}
	}
	// Old history is elided, with a count; the most recent messages stay.
	m := regexp.MustCompile(`\[(\d+) messages elided\]`).FindStringSubmatch(u)
	if m == nil || m[1] == "0" {
		t.Errorf("no message elision marker in the judge input")
	}
	if strings.Contains(u, "old question 0 ") {
		t.Errorf("the oldest message survived")
	}
	if !strings.Contains(u, "[2 more messages elided]") {
		t.Errorf("next state overflow not marked (the second message and the feedback)")
	}
	// The order is: system, history, request, in-turn steps, reply, next state.
	order := []string{"SYSHEAD", "LASTREQUEST", "INTURN", "RESPHEAD", "NEXTHEAD"}
	last := -1
	for _, s := range order {
		i := strings.Index(u, s)
		if i < last {
			t.Errorf("%q out of order", s)
		}
		last = i
	}
}

func TestTrimMiddle(t *testing.T) {
	tests := []struct {
		s     string
		limit int
		want  string
	}{
		{"short", 10, "short"},
		{"abcdefghij", 10, "abcdefghij"},
		{"abcdefghijkl", 6, "abcd\n[... 6 characters elided ...]\nkl"},
		{"ééééééééé", 3, "éé\n[... 6 characters elided ...]\né"},
	}
	for _, tt := range tests {
		if got := trimMiddle(tt.s, tt.limit); got != tt.want {
			t.Errorf("trimMiddle(%q, %d) = %q; want %q", tt.s, tt.limit, got, tt.want)
		}
	}
}

func TestToolNames(t *testing.T) {
	var tools []json.RawMessage
	for i := range 45 {
		tools = append(tools, json.RawMessage(fmt.Sprintf(`{"type":"function","function":{"name":"t%d"}}`, i)))
	}
	tools = append(tools, json.RawMessage(`not json`))
	got := toolNames(tools)
	if !strings.HasPrefix(got, "t0, t1,") || !strings.HasSuffix(got, "t39, and 5 more") {
		t.Errorf("toolNames = %q", got)
	}
}

func FuzzTranscript(f *testing.F) {
	f.Add("You are helpful.", "fix it", "done", "no, the other file", "", 200)
	f.Add(strings.Repeat("é", 500), "", "```\n\\boxed{1}", "<|im_end|>", "thumbs down", 100)
	f.Fuzz(func(t *testing.T, system, request, response, next, feedback string, limit int) {
		limit = minLimit + int(uint(limit)%2000)
		lim := Limits{System: limit, Request: limit, Message: limit, History: limit, Response: limit, NextState: limit}
		turn := Turn{
			Messages:  []tokenizer.Message{msg("system", system), msg("user", request), msg("assistant", request), msg("user", request)},
			Response:  msg("assistant", response),
			NextState: []tokenizer.Message{msg("user", next), msg("tool", next)},
		}
		u := JudgeMessages(&turn, feedback, lim)[1].Content
		// Fixed text, markers and headers aside, each part keeps to its limit.
		if n, bound := utf8.RuneCountInString(u), 6*limit+1500; n > bound {
			t.Fatalf("judge input of %d characters for limit %d", n, limit)
		}
		if !strings.Contains(u, "=== WHAT HAPPENED NEXT ===") || !strings.HasSuffix(u, judgeClosing) {
			t.Fatalf("judge input lost its structure")
		}
	})
}
