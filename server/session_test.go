package server

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/rollout"
	"github.com/clawrl/clawrl/session"
)

// msg builds a chat message for raw request bodies.
func msg(role string, content any, extra ...any) map[string]any {
	m := map[string]any{"role": role, "content": content}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i].(string)] = extra[i+1]
	}
	return m
}

func parts(texts ...string) []map[string]any {
	var out []map[string]any
	for _, t := range texts {
		out = append(out, map[string]any{"type": "text", "text": t})
	}
	return out
}

type chatResult struct {
	sessionID, id string
	content       string
	reasoning     string
	calls         []toolCallOut
	finish        string
	usage         map[string]any
	chunks        int
}

// chat sends a chat request with a raw body, streamed or not, and reads
// the reply.
func (e *env) chat(body map[string]any, header ...string) chatResult {
	e.t.Helper()
	if body["model"] == nil {
		body["model"] = "clawrl-test"
	}
	b, err := json.Marshal(body)
	if err != nil {
		e.t.Fatal(err)
	}
	resp, text := e.post("/v1/chat/completions", string(b), header...)
	if resp.StatusCode != 200 {
		e.t.Fatalf("status %d: %s", resp.StatusCode, text)
	}
	r := chatResult{sessionID: resp.Header.Get("X-Session-Id")}
	if body["stream"] != true {
		var c chatCompletion
		var raw struct {
			Usage map[string]any `json:"usage"`
		}
		if err := json.Unmarshal([]byte(text), &c); err != nil {
			e.t.Fatal(err)
		}
		_ = json.Unmarshal([]byte(text), &raw)
		ch := c.Choices[0]
		r.id, r.finish, r.calls, r.reasoning, r.usage = c.ID, ch.FinishReason, ch.Message.ToolCalls, ch.Message.ReasoningContent, raw.Usage
		if ch.Message.Content != nil {
			r.content = *ch.Message.Content
		}
		return r
	}
	for _, line := range strings.Split(text, "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ck struct {
			ID      string         `json:"id"`
			Usage   map[string]any `json:"usage"`
			Choices []struct {
				Delta struct {
					Content          string          `json:"content"`
					ReasoningContent string          `json:"reasoning_content"`
					ToolCalls        []deltaToolCall `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &ck); err != nil {
			e.t.Fatalf("chunk %q: %v", data, err)
		}
		r.chunks++
		r.id = ck.ID
		if ck.Usage != nil {
			r.usage = ck.Usage
		}
		for _, c := range ck.Choices {
			r.content += c.Delta.Content
			r.reasoning += c.Delta.ReasoningContent
			for _, tc := range c.Delta.ToolCalls {
				for len(r.calls) <= tc.Index {
					r.calls = append(r.calls, toolCallOut{Type: "function"})
				}
				call := &r.calls[tc.Index]
				if tc.ID != "" {
					call.ID = tc.ID
				}
				call.Function.Name += tc.Function.Name
				call.Function.Arguments += tc.Function.Arguments
			}
			if c.FinishReason != nil {
				r.finish = *c.FinishReason
			}
		}
	}
	return r
}

// turns returns the turn records emitted so far (feedback records are
// dropped).
func (e *env) turns() []*session.Turn {
	var out []*session.Turn
	for _, r := range e.records() {
		if r.Kind == session.KindTurn {
			out = append(out, r.Turn)
		}
	}
	return out
}

func TestSessionInferenceInterleaved(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.ContextLength = 1 << 16 })
	// The reply depends on the seed, so that two conversations with the
	// same start diverge at the first reply.
	e.gen.reply = func(prompt string, req rollout.Request) script {
		n := strings.Count(prompt, "<|im_start|>assistant")
		return script{text: fmt.Sprintf("Reply %d of conversation %d.", n, *req.Sampling.Seed)}
	}
	system := strings.Repeat("You are a careful agent. ", 400)
	history := map[int][]map[string]any{}
	sessions := map[int]string{}
	for turn := range 3 {
		for _, conv := range []int{2, 1} { // interleaved, in a changing order
			if turn == 0 {
				history[conv] = []map[string]any{msg("system", system), msg("user", "Hello")}
			} else {
				history[conv] = append(history[conv], msg("user", fmt.Sprintf("Question %d", turn)))
			}
			r := e.chat(map[string]any{"messages": history[conv], "seed": conv})
			if turn == 0 {
				sessions[conv] = r.sessionID
			} else if r.sessionID != sessions[conv] {
				t.Fatalf("turn %d of conversation %d went to session %q, not %q", turn, conv, r.sessionID, sessions[conv])
			}
			history[conv] = append(history[conv], msg("assistant", r.content))
			if turn > 0 {
				got := e.turns()
				if len(got) != 1 {
					t.Fatalf("turn %d of conversation %d completed %d turns", turn, conv, len(got))
				}
				tr := got[0]
				want := fmt.Sprintf("Question %d", turn)
				if tr.SessionID != sessions[conv] || tr.Index != turn-1 || tr.End != session.EndNextState ||
					len(tr.NextState) != 1 || tr.NextState[0].Content != want || !tr.Inferred {
					t.Fatalf("completed turn = %s #%d %s next %v", tr.SessionID, tr.Index, tr.End, tr.NextState)
				}
				if !strings.Contains(tr.Reply.Content, fmt.Sprintf("conversation %d", conv)) {
					t.Fatalf("turn paired with the other conversation's reply %q", tr.Reply.Content)
				}
			}
		}
	}
	if sessions[1] == sessions[2] {
		t.Fatal("two diverged conversations share a session")
	}
}

// openClawTools returns n tool definitions shaped like an agent's.
func openClawTools(n int) []map[string]any {
	names := []string{"read", "write", "edit", "exec", "process", "web_search", "web_fetch", "browser",
		"message", "cron", "memory_search", "sessions_send"}
	var tools []map[string]any
	for i := range n {
		tools = append(tools, map[string]any{"type": "function", "function": map[string]any{
			"name":        names[i%len(names)],
			"description": fmt.Sprintf("Tool %d: does one thing well.", i),
			"parameters": map[string]any{"type": "object", "properties": map[string]any{
				"path": map[string]any{"type": "string", "description": "A path."},
			}, "required": []string{"path"}},
		}})
	}
	return tools
}

func TestOpenClawShapedConversation(t *testing.T) {
	for _, eph := range []map[string]any{
		msg("system", "Current time: 10:00. Working directory: /home/user."),
		msg("user", parts("<context>Current time: 10:00.</context>")),
	} {
		t.Run(eph["role"].(string)+" ephemeral message", func(t *testing.T) {
			e := newEnv(t, func(o *Options) { o.ContextLength = 1 << 20 })
			e.gen.reply = func(prompt string, _ rollout.Request) script {
				if strings.Contains(prompt, "file contents: 42") {
					return script{text: "<think>\nThe file says 42.\n</think>\n\nThe answer is 42.", cached: 12000}
				}
				return script{text: "<think>\nI should read the file.\n</think>\n\nLet me read it.\n" +
					"<tool_call>{\"name\": \"read\", \"arguments\": {\"path\": \"notes.txt\"}}</tool_call>", cached: 11000}
			}
			system := strings.Repeat("You are OpenClaw, a personal agent. Follow the rules. ", 900)[:47_000]
			tools := openClawTools(12)
			earlier := []map[string]any{
				msg("system", system),
				msg("user", "hi"),
				msg("assistant", "Hello! How can I help?", "reasoning_content", "Greet back."),
			}
			withEph := func(ms ...map[string]any) []map[string]any {
				return append(append([]map[string]any{}, ms...), eph)
			}
			body := func(ms []map[string]any) map[string]any {
				return map[string]any{
					"messages": ms, "tools": tools, "tool_choice": "auto", "stream": true,
					"stream_options": map[string]any{"include_usage": true}, "max_completion_tokens": 8192,
					"reasoning_effort": "low", "store": false,
				}
			}
			// Turn 1: the new user message as parts, the others strings.
			ask := append(append([]map[string]any{}, earlier...), msg("user", parts("What does notes.txt say?")))
			r1 := e.chat(body(withEph(ask...)))
			if r1.finish != "tool_calls" || len(r1.calls) != 1 || r1.calls[0].Function.Name != "read" ||
				r1.calls[0].Function.Arguments != `{"path": "notes.txt"}` || r1.content != "Let me read it." ||
				r1.reasoning != "I should read the file." {
				t.Fatalf("turn 1 = %+v", r1)
			}
			details, _ := r1.usage["prompt_tokens_details"].(map[string]any)
			if details["cached_tokens"] != float64(11000) {
				t.Fatalf("usage = %v", r1.usage)
			}
			if r1.chunks < 10 {
				t.Fatalf("%d chunks: not streamed", r1.chunks)
			}
			// Turn 2: OpenClaw resends everything: the parts message as a
			// string, the reply with reasoning_content and the call id
			// rewritten to letters and digits, the tool result, and a new
			// ephemeral message.
			history := append(append([]map[string]any{}, earlier...),
				msg("user", "What does notes.txt say?"),
				msg("assistant", r1.content, "reasoning_content", r1.reasoning, "tool_calls", []map[string]any{{
					"id": "abc123XYZ", "type": "function",
					"function": map[string]any{"name": "read", "arguments": r1.calls[0].Function.Arguments},
				}}),
				msg("tool", "file contents: 42", "tool_call_id", "abc123XYZ"),
			)
			r2 := e.chat(body(withEph(history...)))
			if r2.sessionID != r1.sessionID || r2.content != "The answer is 42." || r2.finish != "stop" {
				t.Fatalf("turn 2 = %+v (session %q, first %q)", r2, r2.sessionID, r1.sessionID)
			}
			got := e.turns()
			if len(got) != 1 {
				t.Fatalf("%d turns completed", len(got))
			}
			tr := got[0]
			if tr.ResponseID != r1.id || tr.End != session.EndNextState || len(tr.NextState) != 2 ||
				tr.NextState[0].Role != "tool" || tr.NextState[0].Content != "file contents: 42" {
				t.Fatalf("turn = %s %s next %+v", tr.ResponseID, tr.End, tr.NextState)
			}
			if len(tr.Tools) != 12 || len(tr.Messages) != 5 || tr.Messages[3].Content != "What does notes.txt say?" {
				t.Fatalf("turn has %d tools, %d messages", len(tr.Tools), len(tr.Messages))
			}
			if len(tr.ResponseTokens) == 0 || len(tr.LogProbs) != len(tr.ResponseTokens) || len(tr.PromptTokens) < 10000 {
				t.Fatalf("turn tokens: %d response, %d log-probs, %d prompt", len(tr.ResponseTokens), len(tr.LogProbs), len(tr.PromptTokens))
			}
			if eos, _ := e.gen.tok.EOS(); tr.ResponseTokens[len(tr.ResponseTokens)-1] != eos {
				t.Fatalf("the end-of-turn token is not recorded")
			}
			if tr.Reply.ToolCalls[0].Function.Name != "read" || tr.FinishReason != "tool_calls" {
				t.Fatalf("reply = %+v", tr.Reply)
			}
		})
	}
}

func TestFeedbackAttach(t *testing.T) {
	e := newEnv(t)
	r := e.chat(map[string]any{"messages": []map[string]any{msg("user", "tell me a joke")}}, "X-Session-Id", "fb")
	resp, body := e.post("/v1/feedback", `{"response_id":"`+r.id+`","thumb":"down","text":"not funny"}`)
	if resp.StatusCode != 200 || !strings.Contains(body, `"thumb":-1`) || !strings.Contains(body, `"session_id":"fb"`) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	recs := e.records()
	if len(recs) != 1 || recs[0].Kind != session.KindFeedback || recs[0].Feedback.Text != "not funny" || recs[0].Feedback.ResponseID != r.id {
		t.Fatalf("records = %+v", recs)
	}
	if resp, body := e.post("/v1/feedback", `{"session_id":"fb","turn":0,"thumb":1}`); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	e.records()
	e.chat(map[string]any{"messages": []map[string]any{msg("user", "tell me a joke"), msg("assistant", r.content), msg("user", "meh")}},
		"X-Session-Id", "fb")
	got := e.turns()
	if len(got) != 1 || len(got[0].Feedback) != 2 || got[0].Feedback[0].Thumb != -1 || got[0].Feedback[1].Thumb != 1 {
		t.Fatalf("turn feedback = %+v", got)
	}
	// Feedback on the completed turn still arrives.
	if resp, body := e.post("/v1/feedback", `{"response_id":"`+r.id+`","text":"actually ok"}`); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if recs := e.records(); len(recs) != 1 || recs[0].Kind != session.KindFeedback {
		t.Fatalf("records = %+v", recs)
	}
}

func TestUnrecordedTurns(t *testing.T) {
	e := newEnv(t)
	hist := []map[string]any{msg("user", "start")}
	main := e.chat(map[string]any{"messages": hist}, "X-Session-Id", "u")
	hist = append(hist, msg("assistant", main.content))
	cases := []struct {
		name   string
		body   map[string]any
		header []string
	}{
		{"side turn", map[string]any{}, []string{"X-Turn-Type", "side"}},
		{"X-No-Train", map[string]any{}, []string{"X-No-Train", "1"}},
		{"train false", map[string]any{"train": false}, nil},
		{"side turn, streamed", map[string]any{"stream": true}, []string{"X-Turn-Type", "side"}},
	}
	for _, c := range cases {
		c.body["messages"] = append(append([]map[string]any{}, hist...), msg("user", "heartbeat: "+c.name))
		r := e.chat(c.body, append([]string{"X-Session-Id", "u"}, c.header...)...)
		if r.sessionID != "" {
			t.Errorf("%s: named a session %q", c.name, r.sessionID)
		}
		if recs := e.records(); len(recs) != 0 {
			t.Fatalf("%s: %d records", c.name, len(recs))
		}
		if resp, _ := e.post("/v1/feedback", `{"response_id":"`+r.id+`","thumb":1}`); resp.StatusCode != 404 {
			t.Errorf("%s: feedback on an unrecorded turn = %d", c.name, resp.StatusCode)
		}
	}
	// The next main turn still completes the first.
	e.chat(map[string]any{"messages": append(hist, msg("user", "real reply"))}, "X-Session-Id", "u")
	got := e.turns()
	if len(got) != 1 || got[0].NextState[0].Content != "real reply" {
		t.Fatalf("turns = %+v", got)
	}
	if v := metricValue(t, e, `clawrl_turns_recorded_total`); v != 2 {
		t.Fatalf("recorded = %v, want 2", v)
	}
}

func TestSessionDoneAndVersions(t *testing.T) {
	e := newEnv(t)
	e.gen.reply = func(string, rollout.Request) script {
		return script{text: "one two three four", version: 4, switchAt: 2}
	}
	e.chat(map[string]any{"messages": []map[string]any{msg("user", "a")}}, "X-Session-Id", "d")
	e.chat(map[string]any{"messages": []map[string]any{msg("user", "a"), msg("assistant", "one two three four"), msg("user", "bye")}},
		"X-Session-Id", "d", "X-Session-Done", "1")
	got := e.turns()
	if len(got) != 2 || got[0].End != session.EndNextState || got[1].End != session.EndSessionDone || got[1].NextState != nil {
		t.Fatalf("turns = %+v", got)
	}
	tr := got[0]
	if tr.Version != 4 || len(tr.Versions) != len(tr.ResponseTokens) || tr.Versions[0] != 4 || tr.Versions[len(tr.Versions)-1] != 5 {
		t.Fatalf("version %d, versions %v", tr.Version, tr.Versions)
	}
	// The session is gone: a new request with the same id starts afresh.
	e.chat(map[string]any{"messages": []map[string]any{msg("user", "again")}}, "X-Session-Id", "d")
	if len(e.turns()) != 0 {
		t.Fatal("a closed session kept a pending turn")
	}
}

func TestSessionIDSources(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		name   string
		body   map[string]any
		header []string
		want   string
	}{
		{"header wins", map[string]any{"session_id": "b", "user": "u"}, []string{"X-Session-Id", "h"}, "h"},
		{"body session_id", map[string]any{"session_id": "b", "user": "u"}, nil, "b"},
		{"user", map[string]any{"user": "u", "prompt_cache_key": "k"}, nil, "u"},
		{"prompt_cache_key", map[string]any{"prompt_cache_key": "k"}, nil, "k"},
	}
	for _, c := range cases {
		c.body["messages"] = []map[string]any{msg("user", c.name)}
		if r := e.chat(c.body, c.header...); r.sessionID != c.want {
			t.Errorf("%s: session %q, want %q", c.name, r.sessionID, c.want)
		}
	}
	if r := e.chat(map[string]any{"messages": []map[string]any{msg("user", "x")}}); !strings.HasPrefix(r.sessionID, "sess-") {
		t.Errorf("inferred session id %q", r.sessionID)
	}
}

func TestResponsesTurnsRecorded(t *testing.T) {
	e := newEnv(t)
	e.gen.reply = func(prompt string, _ rollout.Request) script {
		if strings.Contains(prompt, "sunny") {
			return script{text: "It is sunny."}
		}
		return script{text: "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>"}
	}
	tools := `"tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}}]`
	resp, body := e.post("/v1/responses", `{"model":"clawrl-test","input":"Weather in Paris?",`+tools+`}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var r1 responseObject
	var items struct {
		Output []functionCallItem `json:"output"`
	}
	_ = json.Unmarshal([]byte(body), &r1)
	_ = json.Unmarshal([]byte(body), &items)
	fc := items.Output[0]
	next := fmt.Sprintf(`{"model":"clawrl-test",%s,"input":[{"role":"user","content":"Weather in Paris?"},
		{"type":"function_call","call_id":"zz9","name":"get_weather","arguments":%q},
		{"type":"function_call_output","call_id":"zz9","output":"sunny"}]}`, tools, fc.Arguments)
	resp2, body2 := e.post("/v1/responses", next)
	if resp2.StatusCode != 200 || resp2.Header.Get("X-Session-Id") != resp.Header.Get("X-Session-Id") {
		t.Fatalf("%d %s (sessions %q, %q)", resp2.StatusCode, body2, resp.Header.Get("X-Session-Id"), resp2.Header.Get("X-Session-Id"))
	}
	got := e.turns()
	if len(got) != 1 || got[0].ResponseID != r1.ID || got[0].Endpoint != "responses" || got[0].NextState[0].Content != "sunny" {
		t.Fatalf("turns = %+v", got)
	}
	var tool chatTool
	if err := json.Unmarshal(got[0].Tools[0], &tool); err != nil || tool.Function.Name != "get_weather" {
		t.Fatalf("recorded tools %s", got[0].Tools[0])
	}
}

// TestFeedbackRightAfterAnswer: the turn is recorded before the answer's
// last bytes go out, so feedback sent the moment the client has read the
// answer finds it (it used to be recorded after, and lost that race).
func TestFeedbackRightAfterAnswer(t *testing.T) {
	e := newEnv(t)
	for i := range 20 {
		body := map[string]any{"messages": []map[string]any{msg("user", fmt.Sprintf("question %d", i))}}
		if i%2 == 1 {
			body["stream"] = true
		}
		r := e.chat(body, "X-Session-Id", fmt.Sprintf("fast-%d", i))
		if resp, b := e.post("/v1/feedback", `{"response_id":"`+r.id+`","thumb":"up"}`); resp.StatusCode != 200 {
			t.Fatalf("request %d (stream %v): feedback right after the answer = %d %s", i, body["stream"], resp.StatusCode, b)
		}
	}
}

// Feedback is clawrl's own endpoint: a field it does not know (a thumb
// sent as "rating") is refused, naming it and the fields there are,
// instead of being dropped while the rest is accepted.
func TestFeedbackRefusesUnknownField(t *testing.T) {
	e := newEnv(t)
	r := e.chat(map[string]any{"messages": []map[string]any{msg("user", "tell me a joke")}}, "X-Session-Id", "fb")
	for _, body := range []string{
		`{"response_id":"` + r.id + `","rating":-1,"text":"wrong"}`,
		`{"session_id":"fb","turn":0,"thumbs":1}`,
	} {
		resp, got := e.post("/v1/feedback", body)
		if resp.StatusCode != 400 || !strings.Contains(got, `"code":"unknown_parameter"`) || !strings.Contains(got, "thumb") {
			t.Errorf("%s: %d %s", body, resp.StatusCode, got)
		}
	}
	if resp, body := e.post("/v1/feedback", `{"response_id":"`+r.id+`","thumb":-1,"text":"wrong"}`); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if recs := e.records(); len(recs) != 1 || recs[0].Feedback.Thumb != -1 {
		t.Fatalf("records = %+v (the refused bodies must record nothing)", recs)
	}
}
