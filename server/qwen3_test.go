package server

import (
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/clawrl/clawrl/rollout"
	"github.com/clawrl/clawrl/tokenizer"
)

// The real Qwen3 tokenizer and chat template, when present (see the
// tokenizer package's tests for how to fetch it).
var qwen3 = sync.OnceValues(func() (*tokenizer.Tokenizer, error) {
	dir := os.Getenv("CLAWRL_QWEN3_TOKENIZER_DIR")
	if dir == "" {
		dir = "../.cache/qwen3/package/models"
	}
	if _, err := os.Stat(dir + "/tokenizer.json"); err != nil {
		return nil, nil
	}
	return tokenizer.Load(dir)
})

func qwen3Env(t *testing.T) *env {
	tok, err := qwen3()
	if err != nil {
		t.Fatal(err)
	}
	if tok == nil {
		t.Skip("the Qwen3 tokenizer is absent (.cache/qwen3/package/models)")
	}
	return newEnvWith(t, tok, func(o *Options) { o.ContextLength = 40960 })
}

func TestQwen3ToolCallsAndThinking(t *testing.T) {
	e := qwen3Env(t)
	generated := "<think>\nI should read the file.\n</think>\n\n<tool_call>\n{\"name\": \"read\", \"arguments\": {\"path\": \"notes.txt\"}}\n</tool_call>"
	e.gen.reply = func(prompt string, _ rollout.Request) script {
		if strings.Contains(prompt, "<tool_response>") {
			return script{text: "<think>\nIt says 42.\n</think>\n\nThe file says 42."}
		}
		return script{text: generated}
	}
	tools := openClawTools(3)
	first := []map[string]any{msg("system", "You are an agent."), msg("user", parts("What is in notes.txt?"))}
	r1 := e.chat(map[string]any{"messages": first, "tools": tools, "stream": true})
	if r1.finish != "tool_calls" || len(r1.calls) != 1 || r1.calls[0].Function.Arguments != `{"path": "notes.txt"}` ||
		r1.reasoning != "I should read the file." || r1.content != "" {
		t.Fatalf("turn 1 = %+v", r1)
	}
	req1 := e.gen.requests()[0]
	prompt1 := e.gen.tok.Decode(req1.Prompt)
	if !strings.Contains(prompt1, "<tools>\n{\"function\": {\"description\": \"Tool 0: does one thing well.\", \"name\": \"read\"") ||
		!strings.HasSuffix(prompt1, "<|im_start|>assistant\n") {
		t.Fatalf("prompt 1 = %q", prompt1)
	}
	for _, special := range []string{"<|im_end|>", "<|endoftext|>"} {
		id, _ := e.gen.tok.TokenID(special)
		if !slices.Contains(req1.StopTokens, id) {
			t.Errorf("stop tokens %v lack %s", req1.StopTokens, special)
		}
	}
	// The client sends the reply back with reasoning_content and the
	// arguments as a string: the template renders exactly what was
	// generated, so the new prompt extends the old prompt and reply, and
	// the prefix cache can serve all of it.
	second := append(first,
		msg("assistant", nil, "reasoning_content", r1.reasoning, "tool_calls", []map[string]any{{
			"id": "R4nd0mId", "type": "function", "function": map[string]any{"name": "read", "arguments": r1.calls[0].Function.Arguments},
		}}),
		msg("tool", "42", "tool_call_id", "R4nd0mId"))
	r2 := e.chat(map[string]any{"messages": second, "tools": tools})
	if r2.content != "The file says 42." || r2.reasoning != "It says 42." || r2.sessionID != r1.sessionID {
		t.Fatalf("turn 2 = %+v", r2)
	}
	prompt2 := e.gen.tok.Decode(e.gen.requests()[1].Prompt)
	if !strings.HasPrefix(prompt2, prompt1+generated+"<|im_end|>\n") {
		t.Fatalf("prompt 2 does not extend prompt 1 and the reply:\n%q", prompt2[len(prompt1)-20:])
	}
	got := e.turns()
	if len(got) != 1 || got[0].NextState[0].Content != "42" {
		t.Fatalf("turns = %+v", got)
	}
	resp := append(slices.Clone(req1.Prompt), got[0].ResponseTokens...)
	if p2 := e.gen.requests()[1].Prompt; !slices.Equal(p2[:len(resp)], resp) {
		t.Errorf("prompt 2's tokens do not start with prompt 1's and the response's")
	}
}

func TestQwen3ThinkingDisabled(t *testing.T) {
	e := qwen3Env(t)
	e.gen.reply = func(string, rollout.Request) script { return script{text: "Hi."} }
	r := e.chat(map[string]any{"messages": []map[string]any{msg("user", "hi")}, "chat_template_kwargs": map[string]any{"enable_thinking": false}})
	if r.content != "Hi." {
		t.Fatalf("reply = %+v", r)
	}
	if p := e.gen.tok.Decode(e.gen.requests()[0].Prompt); !strings.HasSuffix(p, "<think>\n\n</think>\n\n") {
		t.Fatalf("prompt = %q", p)
	}
}
