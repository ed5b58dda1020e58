package learnbench

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"

	"github.com/clawrl/clawrl/instruct"
)

// Oracle is an OpenAI-compatible judge that knows the simulated user's
// preference: a control for the experiment, as the OpenClaw-RL paper uses
// a strong judge. It votes 1 when the user's next message was praise and
// -1 otherwise, and writes the preference's canonical instruction as the
// hint. With it, `bench learn --judge oracle` measures what the training
// methods do with a judge that reads the user right, apart from how well
// the local model judges.
type Oracle struct {
	mu   sync.Mutex
	pref instruct.Constraint
}

// SetPref sets the preference the oracle states in its hints.
func (o *Oracle) SetPref(c instruct.Constraint) {
	o.mu.Lock()
	o.pref = c
	o.mu.Unlock()
}

// ServeHTTP answers POST .../chat/completions.
func (o *Oracle) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		http.NotFound(w, r)
		return
	}
	var req struct {
		N        int `json:"n"`
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 8<<20)).Decode(&req); err != nil || len(req.Messages) == 0 {
		http.Error(w, `{"error":{"message":"bad request","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	pref := o.pref
	o.mu.Unlock()
	var sys, prompt string
	for _, m := range req.Messages {
		if m.Role == "system" {
			sys = m.Content
		} else {
			prompt = m.Content
		}
	}
	next := prompt
	if i := strings.LastIndex(prompt, "=== WHAT HAPPENED NEXT ==="); i >= 0 {
		next = prompt[i:]
	}
	praised := false
	for _, p := range instruct.Praises() {
		if strings.Contains(next, p) {
			praised = true
		}
	}
	hintJudge := strings.HasPrefix(sys, "You help")
	var text string
	switch {
	case hintJudge && praised:
		text = "The reply was what the user wanted. \\boxed{0}"
	case hintJudge:
		text = "The user asked for a different form.\n[HINT_START]\n" + pref.Instruction(nil, instruct.Train) + "\n[HINT_END]\n\\boxed{1}"
	case praised:
		text = "The user praised the reply. \\boxed{1}"
	default:
		text = "The user corrected the reply. \\boxed{-1}"
	}
	n := max(req.N, 1)
	choices := make([]map[string]any, n)
	for i := range choices {
		choices[i] = map[string]any{"index": i, "finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": text}}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"id": "oracle", "object": "chat.completion", "model": "oracle", "choices": choices})
}
