package server

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/rollout"
)

type legacyResp struct {
	Choices []struct {
		Text     string `json:"text"`
		Logprobs *struct {
			Tokens        []string             `json:"tokens"`
			TokenLogprobs []*float64           `json:"token_logprobs"`
			TopLogprobs   []map[string]float64 `json:"top_logprobs"`
			TextOffset    []int                `json:"text_offset"`
		} `json:"logprobs"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

// echo with logprobs scores the prompt (as lm-evaluation-harness's
// local-completions model asks): its tokens with their log-probs, the
// first with none (null), then the completion's; max_tokens 0 gives the
// prompt alone; token-id prompts work too, and a stop token inside the
// prompt does not end it.
func TestEchoLogprobs(t *testing.T) {
	e := newEnv(t)
	e.gen.reply = func(string, rollout.Request) script { return script{text: " fine"} }
	prompt := "The capital of France is Paris"
	ids := e.srv.tok.Encode(prompt)
	eos, _ := e.srv.tok.EOS()
	idsJSON, _ := json.Marshal(ids)
	withEOS := append(append([]int32{}, ids...), eos)
	withEOS = append(withEOS, ids...)
	eosJSON, _ := json.Marshal(withEOS)
	for _, c := range []struct {
		name, prompt string
		maxTokens    int
		promptLen    int
		text         string
	}{
		{"text prompt", fmt.Sprintf("%q", prompt), 3, len(ids), prompt + " fine"},
		{"max_tokens 0", fmt.Sprintf("%q", prompt), 0, len(ids), prompt},
		{"token ids", string(idsJSON), 0, len(ids), prompt},
		{"a stop token inside", string(eosJSON), 0, len(withEOS), e.srv.tok.Decode(withEOS)},
	} {
		resp, body := e.post("/v1/completions", fmt.Sprintf(`{"model":"clawrl-test","prompt":%s,"echo":true,"logprobs":2,"max_tokens":%d}`, c.prompt, c.maxTokens))
		var r legacyResp
		if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &r) != nil || len(r.Choices) != 1 {
			t.Fatalf("%s: %d %s", c.name, resp.StatusCode, body)
		}
		ch := r.Choices[0]
		lp := ch.Logprobs
		if ch.Text != c.text || lp == nil {
			t.Fatalf("%s: text %q, want %q (logprobs %v)", c.name, ch.Text, c.text, lp)
		}
		if len(lp.Tokens) < c.promptLen || len(lp.TokenLogprobs) != len(lp.Tokens) || len(lp.TopLogprobs) != len(lp.Tokens) || len(lp.TextOffset) != len(lp.Tokens) {
			t.Fatalf("%s: %d tokens for a %d-token prompt: %+v", c.name, len(lp.Tokens), c.promptLen, lp)
		}
		if lp.TokenLogprobs[0] != nil || lp.TopLogprobs[0] != nil {
			t.Errorf("%s: the first token has a log-prob: %v %v", c.name, lp.TokenLogprobs[0], lp.TopLogprobs[0])
		}
		for i := 1; i < len(lp.Tokens); i++ {
			if lp.TokenLogprobs[i] == nil || len(lp.TopLogprobs[i]) == 0 {
				t.Errorf("%s: token %d (%q) has no log-prob", c.name, i, lp.Tokens[i])
			}
		}
		if strings.Join(lp.Tokens, "") != c.text {
			t.Errorf("%s: tokens %q do not spell the text %q", c.name, lp.Tokens, c.text)
		}
		for i, off := range lp.TextOffset {
			if want := len(strings.Join(lp.Tokens[:i], "")); off != want {
				t.Errorf("%s: text_offset[%d] = %d, want %d", c.name, i, off, want)
			}
		}
		if c.maxTokens == 0 && (len(lp.Tokens) != c.promptLen || ch.FinishReason != "length" || r.Usage.CompletionTokens != 0) {
			t.Errorf("%s: %d tokens, finish %s, %d completion tokens", c.name, len(lp.Tokens), ch.FinishReason, r.Usage.CompletionTokens)
		}
		if r.Usage.PromptTokens != c.promptLen {
			t.Errorf("%s: usage %+v", c.name, r.Usage)
		}
	}

	// Echo without logprobs prepends the prompt; streamed, the echoed
	// prompt comes first with its log-probs.
	resp, body := e.post("/v1/completions", `{"model":"clawrl-test","prompt":"Hi there","echo":true,"max_tokens":4}`)
	if resp.StatusCode != 200 || !strings.Contains(body, `"text":"Hi there fine"`) {
		t.Errorf("echo without logprobs: %d %s", resp.StatusCode, body)
	}
	resp, body = e.post("/v1/completions", `{"model":"clawrl-test","prompt":"Hi there","echo":true,"logprobs":0,"max_tokens":4,"stream":true}`)
	first := strings.SplitN(body, "\n\n", 2)[0]
	if resp.StatusCode != 200 || !strings.Contains(first, `"text":"Hi there"`) || !strings.Contains(first, `"token_logprobs":[null,`) ||
		!strings.HasSuffix(strings.TrimSpace(body), "data: [DONE]") {
		t.Errorf("streamed echo: %d %s", resp.StatusCode, body)
	}
}

// Tokens that are part of a UTF-8 character are written "bytes:\xNN" in
// tokens and top_logprobs, as OpenAI does, not collapsed into "\ufffd".
func TestLegacyLogprobBytes(t *testing.T) {
	e := newEnv(t)
	e.gen.reply = func(string, rollout.Request) script { return script{text: "caf\xe2 ok \xf0\x9f"} }
	resp, body := e.post("/v1/completions", `{"model":"clawrl-test","prompt":"x","logprobs":3,"max_tokens":20}`)
	var r legacyResp
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &r) != nil || r.Choices[0].Logprobs == nil {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	lp := r.Choices[0].Logprobs
	joined := strings.Join(lp.Tokens, "|")
	if strings.Contains(joined, "\ufffd") || !strings.Contains(joined, `bytes:\xe2`) || !strings.Contains(joined, `\x9f`) {
		t.Errorf("tokens %q", lp.Tokens)
	}
	for i, top := range lp.TopLogprobs {
		for k := range top {
			if strings.Contains(k, "\ufffd") {
				t.Errorf("top_logprobs[%d] has the key %q", i, k)
			}
		}
	}
}
